"""The op table: every op is one OpDef, and everything else follows from it.

An entry names the op, its grad_fn (``MulBackward0``), its kernels and what its
backward needs. For elementwise ops the kernels are *formulas* (like PyTorch's
derivatives.yaml): which inputs are saved (and so version-checked) is read off the
gradient formulas, and the forward/backward kernels are generated from them. Other
families point at hand-written kernels in their module. Kernels are compiled on first
use, per op, and cached on disk. Each entry also carries its OpInfo, the samples that
tests/ops/test_every_op.py checks it with (samples(), declared after the definition).
"""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import importlib
import types

from .._engine import layout as L
from .._engine.cache import kernel_cache
from .._engine.lowlevel import KERNEL_SIG, cfunc
from .opinfo import T
from ._codegen import formula_names as _names

OPS = []          # index = opcode
BY_NAME = {}
_SHARED = {}      # (module, fwd, bwd, slot key) -> compiled pair: entries that differ
                  # only in name


class OpDef:
    __slots__ = ("name", "grad_fn", "kind", "forward", "grads", "saves_if", "saved_out",
                 "diff", "module", "fwd_fn", "bwd_fn", "opcode", "_kernels", "nin",
                 "scalar_slot", "method", "spec", "ntan", "saved_by", "per_dtype", "edges",
                 "multi_view", "overlap_ok", "info", "front", "attrs", "errors", "_layout",
                 "pack")

    def __init__(self, name, grad_fn, kind, *, forward=None, grads=None, saves_if=None,
                 saved_out=0, diff=None, module=None, fwd_fn=None, bwd_fn=None, nin=None,
                 per_dtype=False, front=None, attrs=(), errors=None):
        """saves_if[k]: the values ("a", "b", "out") the gradient of input k reads, so
        they are saved (and version-checked) only when input k requires grad, as in
        PyTorch; read off the formulas for elementwise ops. saved_out: which output "out"
        means. per_dtype: hand-written kernels compiled once per slot, with the module
        global KERNEL_DTYPE fixed to the slot's dtype (see _per_dtype). front: how users
        call it, when the front is built from the declaration (signature.py). attrs: the
        names of its integer attributes, in the order its kernels read them (R_IATTR + k),
        so the front passes them by name (pack). errors(OpError): the exception PyTorch
        raises where this op's kernels refused (a status and its details), or None for the
        front's general words."""
        self.name = name
        self.grad_fn = grad_fn
        self.kind = kind            # "unary", "binary" (formula ops), "custom" or "python"
        self.forward = forward
        self.grads = grads
        self.module = module
        self.fwd_fn = fwd_fn
        self.bwd_fn = bwd_fn
        self._kernels = None
        self.scalar_slot = False
        self.method = True          # a plain Tensor method x.name() (no arguments)
        self.saved_out = saved_out
        self.spec = None            # a fused op's members (replay/fuse.py)
        self.ntan = 0               # a fused op's tangent count (layout.O_TANGENT)
        self.saved_by = {}          # saved input k (-1: out) -> the grad_fn an error names
        self.per_dtype = per_dtype
        self.edges = None           # inputs next_functions lists (None: all of them)
        self.multi_view = False     # outputs are views of input 0 (layout.OF_MULTIVIEW)
        # in place, a formula that never reads a writes elements independently of each
        # other, so memory shared between elements is no hazard (layout.OF_OVERLAP_OK)
        self.overlap_ok = kind in ("unary", "binary") and "a" not in _names(forward)
        self.info = None            # its OpInfo: how to reach and test it (samples())
        self.front = front
        self.attrs = tuple(attrs)
        self._layout = self._attr_layout()
        # pack(**attributes): the op's integer attributes given by name, in its kernels'
        # slots; a function of its own per op, as it runs on every call of its front
        self.pack = _packer(name, self._layout)
        self.errors = errors
        if kind in ("unary", "binary"):
            self.nin = 1 if kind == "unary" else 2
            self.saves_if = {k: _names(gf) & {"a", "b", "out"}
                             for k, gf in enumerate(grads) if gf is not None}
            self.diff = tuple(self.saves_if)
        else:
            self.nin = nin
            self.saves_if = {k: set(v) for k, v in (saves_if or {}).items()}
            self.diff = tuple(diff or ())

    def _attr_layout(self):
        """(name, first slot, width) per attribute: "x[N]" is N slots (a sequence padded
        with zeros), a last "x*" as many as its sequence has, any other one slot."""
        layout, at = [], 0
        for a in self.attrs:
            if a.endswith("]"):
                name, width = a[:-1].split("[")
                layout.append((name, at, int(width)))
                at += int(width)
            elif a.endswith("*"):
                layout.append((a[:-1], at, None))
            else:
                layout.append((a, at, 1))
                at += 1
        return layout

    def slot(self, name):
        """The slot of integer attribute name (its kernels read it at R_IATTR + slot): for
        a fast path that writes the engine's iargs itself."""
        for attr, at, _ in self._layout:
            if attr == name:
                return at
        raise TypeError(f"{self.name}: no attribute {name!r} (it has {self.attrs})")

    def saves_mask(self, k):
        names = self.saves_if.get(k, ())
        return sum(L.SAVE_OUT if x == "out" else 1 << "abc".index(x) for x in names)

    def diff_mask(self):
        return sum(1 << i for i in self.diff)

    @property
    def has_row_loops(self):
        """Whether the op has row-broadcast loops (kernel slots 2/3, _engine.core.call_ew):
        binary elementwise ops do."""
        return self.kind == "binary"

    def kernels(self, slot):
        """(forward, backward) C functions for kernel slot 0 (float32) or 1 (float64),
        compiled on first use. Elementwise loops are per dtype, so a float32 program never
        compiles float64 loops; hand-written kernels serve both slots. Slots 2/3: a binary
        op's row-broadcast loops for those dtypes (_engine.core.call_ew), None for other
        ops."""
        if self._kernels is None:
            self._kernels = {}
        if slot >= 2 and not self.has_row_loops:
            return None
        generated = self.kind in ("unary", "binary", "fused")
        key = slot if generated or self.per_dtype else 0
        if key not in self._kernels:
            if generated:
                from . import _codegen
                mod = _codegen.load(self)
                ty = ("f32", "f64", "r_f32", "r_f64")[slot]
                fwd_py, bwd_py = getattr(mod, "fwd_" + ty), getattr(mod, "bwd_" + ty)
            else:
                shared = _SHARED.get((self.module, self.fwd_fn, self.bwd_fn, key))
                if shared is not None:      # another entry with the same kernels
                    self._kernels[key] = shared
                    return shared
                mod = importlib.import_module(self.module)
                fwd_py, bwd_py = getattr(mod, self.fwd_fn), getattr(mod, self.bwd_fn)
                if self.per_dtype:
                    fwd_py, bwd_py = _per_dtype(fwd_py, slot), _per_dtype(bwd_py, slot)
            with kernel_cache():
                opts = dict(cache=True, error_model="numpy")
                self._kernels[key] = (cfunc(KERNEL_SIG, **opts)(fwd_py),
                                      cfunc(KERNEL_SIG, **opts)(bwd_py))
            if self.kind == "custom":
                _SHARED[(self.module, self.fwd_fn, self.bwd_fn, key)] = self._kernels[key]
        return self._kernels[key]


def _packer(op_name, layout):
    """pack(name=value, ...) for an op's attribute layout (OpDef._attr_layout): a function
    with the attributes as its keyword-only parameters, so Python itself refuses a missing
    or unknown one, returning the slots' values as a list. A "name[N]" sequence is padded
    with zeros and refused when longer than N."""
    params, parts, checks = [], [], []
    for name, _, width in layout:
        params.append(name)
        if width == 1:
            parts.append(name)
        elif width is None:
            parts.append(f"*{name}")
        else:
            checks.append(f"    if len({name}) > {width}:\n"
                          f"        raise TypeError('{op_name}: {name} takes at most {width} "
                          f"values')\n")
            parts.append(f"*{name}, *_ZEROS[:{width} - len({name})]")
    src = (f"def pack({'*, ' if params else ''}{', '.join(params)}):\n" + "".join(checks)
           + f"    return [{', '.join(parts)}]\n")
    ns = {"_ZEROS": (0,) * L.MAXD * 2}
    exec(compile(src, f"<attributes of {op_name}>", "exec"), ns)  # noqa: S102
    ns["pack"].__qualname__ = f"{op_name}.pack"
    return ns["pack"]


def _per_dtype(fn, slot):
    """A copy of kernel fn whose global KERNEL_DTYPE is slot's dtype. Numba reads globals
    as constants and prunes a branch on a constant condition, so `if KERNEL_DTYPE == F32:`
    compiles one dtype's path (and its callees) only: a float32 program never compiles
    float64 GEMM calls. Its own name keeps the two copies apart in the on-disk cache."""
    ns = dict(fn.__globals__, KERNEL_DTYPE=(L.F32, L.F64)[slot])
    name = f"{fn.__name__}_{('f32', 'f64')[slot]}"
    copy = types.FunctionType(fn.__code__, ns, name, fn.__defaults__, fn.__closure__)
    copy.__qualname__ = name
    return copy


class OpError:
    """What an op's error hook (OpDef.errors) reads: the engine's status (code, the
    layout.E_* name), its details (err: the engine's err array), the op's name, and its
    operands' shapes and PyTorch type names ("Float", "Double"; None without a second
    operand)."""
    __slots__ = ("code", "err", "name", "shape_a", "shape_b", "type_a", "type_b")

    def __init__(self, code, err, name, shape_a, shape_b, type_a, type_b):
        self.code, self.err, self.name = code, err, name
        self.shape_a, self.shape_b, self.type_a, self.type_b = shape_a, shape_b, type_a, type_b


def register(op):
    op.opcode = len(OPS)
    OPS.append(op)
    BY_NAME[op.name] = op
    return op


# ---------------------------------------------------------------- OpInfo: an op's samples
CHECKS = ("records", "forward", "gradcheck", "torch_grad", "replay", "fused", "error")


class Sample:
    """One public call that records an op: a Python expression over L (tapegrad, or torch
    for the comparison), F (L.nn.functional), the sample's inputs by name and the helper
    programs of ops/opinfo.py (HELPERS). Keyword arguments named in OPTIONS override the
    OpInfo's for this call; any other keyword is an input (an opinfo.Arg) added to or
    replacing the OpInfo's. xfail: a known mismatch with PyTorch, an expected failure:
    {check: reason} (a check of CHECKS, optionally suffixed "-float32" or "-float64"), or
    one reason for every check (a call tapegrad refuses)."""
    OPTIONS = ("torch", "dtypes", "grad", "records", "next_fns", "replay", "fuses", "rtol",
               "xfail")
    __slots__ = ("call", "given", "inputs") + OPTIONS

    def __init__(self, call, **kw):
        self.call = call
        self.given = {k: kw.pop(k) for k in list(kw) if k in self.OPTIONS}
        self.inputs = kw

    def resolve(self, defaults, inputs):
        """Fill what the sample does not give from its OpInfo's defaults and inputs."""
        for k, v in defaults.items():
            setattr(self, k, self.given.get(k, v))
        self.inputs = {**inputs, **self.inputs}
        if isinstance(self.xfail, str):
            self.xfail = dict.fromkeys(CHECKS, self.xfail)
        bad = [k for k in self.xfail if k.split("-")[0] not in CHECKS]
        if bad:
            raise ValueError(f"{self.call}: xfail of unknown checks {bad} (known: {CHECKS})")
        return self

    def xfail_reason(self, check, dtype):
        """Why check fails for this sample in dtype ("float32", "float64"), or None."""
        return self.xfail.get(f"{check}-{dtype}") or self.xfail.get(check)

    def __repr__(self):
        return f"Sample({self.call!r})"


class OpInfo:
    """How a user reaches an op and how the registry-driven test checks it
    (tests/ops/test_every_op.py), declared with samples() next to the op's OpDef.

    calls: one sample each, a string (see Sample) or a Sample. PyTorch runs the same
    spelling unless torch= gives its own. Inputs are keyword arguments, name=opinfo.Arg
    (shape, value domain, dtype kind, requires_grad: the differentiable inputs); without
    any, x is a float (3, 4) tensor in [-2, 2]. A sample uses the inputs its call names.

    dtypes: the float dtypes of the float inputs (gradients are checked in float64 only).
    grad: True, or why gradients cannot be checked (a bool result). records: True (the
    output's graph holds a node named grad_fn, default the op's), or why not; next_fns:
    the names that node's next_functions must list, pinning the op where several share a
    name. replay: True (tapegrad.compile replays the call with no graph break), or why it
    breaks (the test then expects the CompileWarning and eager results). fuses: in a fused
    replay the op joins an elementwise chain. fused_only: only a fused replay records the
    op (its records check runs there). errors: calls (strings or Samples) that must raise
    PyTorch's error, type and message. rtol: {"float32": r, "float64": r, "grad": r} where
    the defaults (1e-6, 1e-12 and 1e-12 for float64 gradients) are out of reach, with the
    reason next to it. xfail: as Sample's, for every sample.
    """
    __slots__ = ("samples", "errors", "grad_fn", "fused_only")

    def __init__(self, *calls, torch=None, dtypes=("float32", "float64"), grad=True,
                 records=True, grad_fn=None, next_fns=None, replay=True, fuses=False,
                 fused_only=False, errors=(), rtol=None, xfail=None, **inputs):
        if not calls:
            raise ValueError("an OpInfo needs at least one call")
        defaults = dict(torch=torch, dtypes=tuple(dtypes), grad=grad, records=records,
                        next_fns=next_fns, replay=replay, fuses=fuses, rtol=rtol or {},
                        xfail=xfail or {})
        inputs = inputs or {"x": T(3, 4)}
        self.samples = [(c if isinstance(c, Sample) else Sample(c)).resolve(defaults, inputs)
                        for c in calls]
        self.errors = [(c if isinstance(c, Sample) else Sample(c)).resolve(defaults, inputs)
                       for c in errors]
        self.grad_fn = grad_fn
        self.fused_only = fused_only


def samples(name, *calls, **kw):
    """Attach OpInfo(*calls, **kw) to the op registered as name (declared right after
    the op's definition in its family module); an op has one."""
    op = BY_NAME[name]
    if op.info is not None:
        raise ValueError(f"op {name} has an OpInfo already")
    op.info = OpInfo(*calls, **kw)


def fill_opinfo(opinfo, ops=None):
    for op in OPS if ops is None else ops:
        for k in range(L.MAXIN):
            opinfo[op.opcode, L.O_SAVES_IF + k] = op.saves_mask(k)
        opinfo[op.opcode, L.O_DIFF] = op.diff_mask()
        opinfo[op.opcode, L.O_SAVED_OUT] = op.saved_out
        opinfo[op.opcode, L.O_KIND] = (
            L.KIND_EW if op.kind in ("unary", "binary", "fused") else
            L.KIND_PY if op.kind == "python" else L.KIND_CUSTOM)
        opinfo[op.opcode, L.O_TANGENT] = op.ntan
        opinfo[op.opcode, L.O_FLAGS] = ((L.OF_MULTIVIEW if op.multi_view else 0)
                                        | (L.OF_OVERLAP_OK if op.overlap_ok else 0))
