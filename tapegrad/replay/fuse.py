"""Fusion of elementwise rows in a replayed program.

A run of elementwise ops whose intermediate results nobody else sees (each is read by one
later op of the run only, is not returned and not read by Python) becomes one op of the
op table, made here from the members' own formulas: its forward loop evaluates the
members one after the other per element (each intermediate rounded to the dtype, so
forward values are bitwise the eager ones) and one pass over memory replaces one per
member. Its backward follows from the members' gradient formulas by reverse mode inside
the element:

- when the members' gradients read values (sin(x) reads x, exp(x) its output), the
  recorded forward also writes each input's tangent (d out / d input, one array per input
  that requires grad, owned by the row like a saved tensor, `layout.O_TANGENT`), and the
  backward is `grad_input += g * tangent`. Recomputing the members in the backward
  instead would evaluate every transcendental twice;
- when they read the fused result and nothing computed before it (`relu(x + b)`: g if
  out > 0), the backward evaluates them from the saved output: no tangents (a bias+ReLU
  of 32x128 writes one array instead of three);
- when they read nothing (`x + y - z`), the backward applies the formulas to g directly
  and nothing is stored.

What the fused row saves for version checks is what the members would have saved of
the fused op's inputs and output (intermediates cannot be changed by anyone), so the
errors PyTorch raises (an input modified in place, a second backward without
retain_graph) come at the same moments. A fused op's grad_fn is named after its last
member; its next_functions are the fused op's inputs, not the intermediate nodes.

Members are moved to the position of the last one, so no instruction that writes tensors
in place (an in-place op, an optimizer step, a sweep, zero_grad,
a host call) may lie in between.
"""
import hashlib
import re

from .._engine import layout as L
from ..ops.registry import OPS, BY_NAME, OpDef, register, fill_opinfo
from ..ops._codegen import _trig
from .._engine.cache import kernel_cache

with kernel_cache():        # (the first import of the executor: its cache's place is fixed
    from . import _run as X     # here, in the keyed directory, not next to the source)

MAX_MEMBERS = 16
_FUSED = {}          # structure key -> OpDef (kernels are shared by equal structures)
_IDENT = re.compile(r"[A-Za-z_]\w*")
_TRIG = re.compile(r"\b(sin|cos)\(")
_NIA_S2 = L.R_S2 - L.R_IATTR
_ELEMENTWISE = ("unary", "binary")
_WRITES = (X.I_OPT, X.I_IADD, X.I_GRADNONE, X.I_SWEEP, X.I_HOST)


def _fusible(ins):
    if ins[0] != X.I_OP:
        return False
    od = OPS[ins[2]]
    return (od.kind in _ELEMENTWISE and not od.name.endswith("_")
            and not ins[7] & (L.OPF_INPLACE | L.OPF_IN2) and ins[8] == 1 and ins[5] < 0)


def _writes(ins):
    return ins[0] in _WRITES or (ins[0] == X.I_OP and ins[7] & L.OPF_INPLACE)


def _sub(formula, names):
    """formula with its operand names replaced (simultaneously, whole identifiers)."""
    return _IDENT.sub(lambda m: names.get(m.group(0), m.group(0)), formula)


class _Group:
    """Members (instruction indices, in order; the last one's output is the result)."""

    def __init__(self, code, members):
        self.members = members
        self.ext = []                   # input slots, in order of first use
        self.ok = True
        temps = {code[m][10] for m in members}
        for m in members:
            ins = code[m]
            for k, s in enumerate(ins[3:5]):
                if s < 0 or s in temps:
                    if k == 0 and s in temps and _trig(OPS[ins[2]])[0]:
                        self.ok = False     # sin/cos of an intermediate: no scan for huge
                                            # arguments can see it before the loop
                    continue
                if s not in self.ext:
                    self.ext.append(s)
        self.ok = self.ok and len(self.ext) <= 2 and len(members) <= MAX_MEMBERS


def _groups(code, uses, ret_slots):
    """Instruction groups (lists of indices, two members or more) to fuse."""
    producer, consumers = {}, {}
    for k, ins in enumerate(code):
        if _fusible(ins):
            producer[ins[10]] = k
        for s in set(uses[k]):
            consumers.setdefault(s, []).append(k)
    writes = [k for k, ins in enumerate(code) if _writes(ins)]
    returned = set(ret_slots)
    group = {}                      # final instruction -> _Group
    for j, ins in enumerate(code):
        if not _fusible(ins):
            continue
        feeders = []                # groups whose result only j reads
        for t in dict.fromkeys(s for s in ins[3:5] if s >= 0):
            p = producer.get(t)
            if p is None or p not in group or consumers.get(t) != [j] or t in returned:
                continue
            if code[p][7] & L.OPF_GRAD != ins[7] & L.OPF_GRAD:
                continue
            first = group[p].members[0]
            if not any(first < w < j for w in writes):
                feeders.append(p)
        # both feeders if the result is valid (each alone may see one input too many)
        g = _Group(code, [j])
        for choice in ([feeders] if len(feeders) < 2 else [feeders, feeders[:1], feeders[1:]]):
            merged = _Group(code, sorted(sum((group[p].members for p in choice), [j])))
            if merged.ok:
                for p in choice:
                    del group[p]
                g = merged
                break
        group[j] = g
    return [g for g in group.values() if len(g.members) > 1]


def _spec(code, g):
    """(structure, saves, grad_fn) of the fused op for group g. The structure is formulas
    over the inputs xa, xb, the constants c0.. (their values are part of it: conditions
    on them fold away when the loop compiles) and the members' results t0..; equal
    structures share kernels."""
    ext = {s: v for s, v in zip(g.ext, ("xa", "xb"))}
    consts = []

    def const(bits):
        if bits not in consts:
            consts.append(bits)
        return f"c{consts.index(bits)}"

    temp, forward, nodes = {}, [], []
    for i, m in enumerate(g.members):
        ins = code[m]
        od = OPS[ins[2]]
        used = set(_IDENT.findall(" ".join(f for f in (od.forward,) + tuple(od.grads) if f)))
        names = {"out": f"t{i}"}
        for k, nm in ((0, "a"), (1, "b")):
            s = ins[3 + k]
            if s >= 0:
                names[nm] = temp.get(s) or ext[s]
            elif nm in used:
                names[nm] = const(int(ins[6]))            # the Python scalar operand
        if "s" in used:
            names["s"] = const(int(ins[6]))
        if "s2" in used:
            names["s2"] = const(int(ins[11 + _NIA_S2]) if ins[9] > _NIA_S2 else 0)
        forward.append((f"t{i}", _sub(od.forward, names)))
        nodes.append((od, names, ins[3:5]))
        temp[ins[10]] = f"t{i}"
    depends = {v: {v} for v in ext.values()}        # var -> the inputs it depends on
    for od, names, _ in nodes:
        depends[names["out"]] = set().union(*(depends.get(names.get(nm), set())
                                              for nm in ("a", "b")))
    # reverse mode within the element: u<i> = d out / d t<i>, ua and ub for the inputs;
    # the final result's is g (one for tangents)
    final = forward[-1][0]
    reverse, has_u = [], {final: "g"}
    saves = {v: set() for v in ext.values()}
    reads = False           # whether eager would save anything (tensor or scalar)
    saved_by = {}           # saved input (-1: the output) -> the grad_fn of the member
                            # nearest the output that saves it (the one eager's version
                            # check would name)
    for od, names, slots in reversed(nodes):
        u = has_u.get(names["out"])
        if u is None:
            continue
        for k, nm in ((0, "a"), (1, "b")):
            gf = od.grads[k] if k < len(od.grads) else None
            if gf is None or slots[k] < 0:
                continue
            src = names[nm]
            for r in set(_IDENT.findall(gf)) & {"a", "b", "out"}:
                reads = True
                for f in depends[src]:      # what eager saves when input f requires grad
                    if names.get(r) in saves:
                        saves[f].add("ab"[("xa", "xb").index(names[r])])
                        saved_by.setdefault(("xa", "xb").index(names[r]), od.grad_fn)
                    elif r == "out" and names["out"] == final:
                        saves[f].add("out")
                        saved_by.setdefault(-1, od.grad_fn)
            expr = _sub(gf, {**names, "g": u})
            tgt = "u" + src[1:]
            reverse.append((tgt, f"{tgt} + ({expr})" if src in has_u else expr))
            has_u[src] = tgt
    diff = tuple(k for k, v in enumerate(ext.values()) if v in has_u)
    trig = any(_TRIG.search(e) for _, e in forward + reverse)
    # gradients that read the result and nothing else before it (bias + relu: g if
    # out > 0) are evaluated from the saved output: no tangents to write and read back
    read = set(_IDENT.findall(" ".join(e for _, e in reverse)))
    inner = set(ext.values()) | {v for v, _ in forward[:-1]}
    from_out = (reads and final in read and not read & inner
                and all("out" in saves[v] for v in ext.values() if v in has_u))
    structure = (len(ext), tuple(consts), tuple(forward), tuple(reverse), diff,
                 reads and not from_out, trig, from_out)
    saves = {("xa", "xb").index(v): sorted(x) for v, x in saves.items()}
    return structure, saves, saved_by, OPS[code[g.members[-1]][2]].grad_fn


def _fused_op(structure, saves, saved_by, grad_fn, capacity):
    key = (structure, tuple(sorted((k, tuple(v)) for k, v in saves.items())),
           tuple(sorted(saved_by.items())), grad_fn)
    op = _FUSED.get(key)
    if op is not None:
        return op
    if len(OPS) >= capacity:
        return None
    nin, _, _, _, diff, tangents, _, _ = structure
    digest = hashlib.sha1(repr(key).encode()).hexdigest()[:16]
    op = OpDef(f"fused_{digest}", grad_fn, "fused", nin=nin, diff=diff,
               saves_if={k: saves[k] for k in diff})
    op.spec = structure
    op.saved_by = saved_by
    op.ntan = nin if tangents else 0
    op.method = False
    register(op)
    BY_NAME.pop(op.name, None)      # not an op users can name
    _FUSED[key] = op
    from .._engine.state import engine
    fill_opinfo(engine().opinfo, [op])
    return op


def _plain(ins, names):
    """Whether instruction ins is an out-of-place op named in names with one output."""
    return (ins[0] == X.I_OP and OPS[ins[2]].name in names and not ins[7] & L.OPF_INPLACE
            and ins[5] < 0 and ins[8] == 1)


def fuse_bias(code, uses, defs, ret_slots):
    """code, uses and defs with each matrix product whose only reader adds a bias (`x @ W
    + b`, `b + x @ W`), and that sum's relu if relu is its only reader, replaced by one
    row of ops/linear.py's mm_bias / mm_bias_relu; and the member op names of each. The
    replaced instructions follow it behind an I_ALT: the executor runs them when the
    operands are not two matrices and a bias vector (which only the run can tell)."""
    readers = {}
    for k, u in enumerate(uses):
        for s in u:
            readers.setdefault(s, []).append(k)
    writes = [k for k, ins in enumerate(code) if _writes(ins)]
    returned = set(ret_slots)

    def only_reader(slot, k0, names):
        ks = readers.get(slot)
        if slot in returned or ks is None or len(ks) != 1 or not _plain(code[ks[0]], names):
            return None
        k = ks[0]
        same_mode = code[k][7] & L.OPF_GRAD == code[k0][7] & L.OPF_GRAD
        return k if same_mode and not any(k0 < w < k for w in writes) else None

    products = {code[j][10] for j, ins in enumerate(code) if _plain(ins, ("mm", "matmul"))}
    blocks, fused, taken = {}, [], set()
    for j, ins in enumerate(code):
        if not _plain(ins, ("mm", "matmul")) or ins[3] < 0 or ins[4] < 0:
            continue
        t = ins[10]
        k = only_reader(t, j, ("add",))
        if k is None or k in taken:
            continue
        a, b = code[k][3:5]
        bias = b if a == t else a
        if bias < 0 or bias in products:    # (x @ W1 + x @ W2: no bias; the other
            continue                        # product may be fused away itself)
        members = [j, k]
        r = only_reader(code[k][10], k, ("relu",))
        if r is not None:
            members.append(r)
        last = code[members[-1]]
        op = BY_NAME["mm_bias_relu" if r is not None else "mm_bias"]
        alt = sum((code[m] for m in members), [])
        blocks[members[-1]] = ([X.I_OP, 12, op.opcode, ins[3], ins[4], bias, 0,
                                last[7] | L.OPF_IN2, 1, 1, last[10], int(r is not None),
                                X.I_ALT, 3, len(alt)] + alt,
                               sum((uses[m] for m in members), []),
                               sum((defs[m] for m in members), []), members)
        fused.append(tuple(OPS[code[m][2]].name for m in members))
        taken.update(members)
    drop = taken
    out_code, out_uses, out_defs = [], [], []
    for k, ins in enumerate(code):
        if k in blocks:
            ins, u, d, _ = blocks[k]
        elif k in drop:
            continue
        else:
            u, d = uses[k], defs[k]
        out_code.append(ins)
        out_uses.append(u)
        out_defs.append(d)
    return out_code, out_uses, out_defs, fused


def fuse(code, uses, defs, ret_slots):
    """code, uses and defs with each fusible group replaced by one instruction of a fused
    op at the position of its last member, and the member op names of each group."""
    from .._engine.state import engine
    capacity = engine().opinfo.shape[0]
    replace, drop, fused = {}, set(), []
    for g in _groups(code, uses, ret_slots):
        structure, saves, saved_by, grad_fn = _spec(code, g)
        op = _fused_op(structure, saves, saved_by, grad_fn, capacity)
        if op is None:
            continue
        last = code[g.members[-1]]
        a = g.ext[0]
        b = g.ext[1] if len(g.ext) > 1 else -1
        replace[g.members[-1]] = ([X.I_OP, 11, op.opcode, a, b, -1, 0,
                                   last[7], 1, 0, last[10]], [s for s in (a, b) if s >= 0])
        drop.update(g.members[:-1])
        fused.append(tuple(OPS[code[m][2]].name for m in g.members))
    out_code, out_uses, out_defs = [], [], []
    for k, ins in enumerate(code):
        if k in drop:
            continue
        if k in replace:
            ins, u = replace[k]
            out_code.append(ins)
            out_uses.append(u)
        else:
            out_code.append(ins)
            out_uses.append(uses[k])
        out_defs.append(defs[k])
    return out_code, out_uses, out_defs, fused
