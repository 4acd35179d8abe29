"""grad_fn nodes, made on demand from tape rows: the tape itself stays flat.

A node holds a reference on its row (so the row outlives the Python object, as a
PyTorch node outlives the tensors that point at it), and one node object exists per
live row, so ``y.grad_fn is y.grad_fn``.
"""
import weakref

from .._engine import layout as L
from .._engine import core
from .._engine.state import engine
from ..ops.registry import OPS
from . import methods
from .dtype import BY_CODE
from .tensor import _check_not_stale, _wrap_leaf as wrap_leaf

# Python-side state of tape rows and leaves, kept by autograd.function (which prunes it):
FUNCTION_ROWS = {}      # a Function's row -> what its backward needs (function._Record)
ROW_HOOKS = {}          # row -> {output index: [hook, ...]}

_NODES = weakref.WeakValueDictionary()
_ACC = weakref.WeakValueDictionary()
_DECREF = [None]        # decref_row's C entry, loaded before the first node exists: a
                        # node dies in __del__, maybe in a garbage collection run inside
                        # Numba's own code generation, where loading code would re-enter
                        # LLVM (a fuzz run aborted there)


def _row_name(row):
    op = OPS[int(engine().tape[row, L.R_OP])]
    if op.kind == "python":
        return function_name(row)
    return op.grad_fn


class Node:
    """A backward function: one tape row. Each backward name has its own subclass
    (``type(y.grad_fn).__name__ == "MulBackward0"``), as PyTorch's nodes do."""
    __slots__ = ("_row", "__weakref__")

    def name(self):
        """The backward function's name, such as 'MulBackward0'."""
        return _row_name(self._row)

    @property
    def next_functions(self):
        """The (node, input index) pairs this node passes gradients to, as in PyTorch
        ((None, 0) for an input that needs none)."""
        E = engine()
        row = E.tape[self._row]
        op = OPS[int(row[L.R_OP])]

        def edge(k):
            base = L.R_IN + k * L.IW
            pr, t = int(row[base + L.IN_ROW]), int(row[base + L.IN_T])
            if pr >= 0:
                return (node_for_row(pr), int(row[base + L.IN_OIDX]))
            if t >= 0:
                return (accumulate_grad(t), 0)
            return (None, 0)
        if op.kind == "python":
            listed = function_next(self._row, edge)
            if listed is not None:
                return listed
        out = [edge(k) for k in (op.edges or range(int(row[L.R_NIN])))]
        if op.scalar_slot and len(out) == 1:
            out.append((None, 0))
        return tuple(out)

    def __repr__(self):
        return f"<{type(self).__name__} object at {hex(id(self))}>"

    def __del__(self):
        try:
            _DECREF[0](engine().caddr, self._row)
        except Exception:       # interpreter shutdown
            pass


class AccumulateGrad:
    """The node that accumulates into a leaf's .grad."""
    __slots__ = ("variable", "__weakref__")

    def name(self):
        """'torch::autograd::AccumulateGrad', PyTorch's name."""
        return "torch::autograd::AccumulateGrad"

    @property
    def next_functions(self):
        """Always empty: a leaf is where gradients stop."""
        return ()

    def __repr__(self):
        return f"<AccumulateGrad object at {hex(id(self))}>"


_NODE_TYPES = {}


def _node_type(name):
    short = name.replace("torch::autograd::", "")
    t = _NODE_TYPES.get(short)
    if t is None:
        t = _NODE_TYPES[short] = type(short, (Node,), {"__slots__": ()})
    return t


def node_for_row(row):
    n = _NODES.get(row)
    if n is None:
        E = engine()
        if _DECREF[0] is None:
            _DECREF[0] = E.entry(core.decref_row)
        n = _node_type(_row_name(row))()
        n._row = row
        E.entry(core.incref_row)(E.caddr, row)
        _NODES[row] = n
    return n


def accumulate_grad(t):
    a = _ACC.get(t)
    if a is None:
        a = AccumulateGrad()
        a.variable = wrap_leaf(t)
        _ACC[t] = a
    return a


def function_name(row):
    rec = FUNCTION_ROWS.get(row)
    return (rec.cls.__name__ + "Backward") if rec else "FunctionBackward"


def function_next(row, edge):
    """next_functions of a Function row: one entry per tensor argument of forward, (None, 0)
    for those that do not require grad, as PyTorch lists them. edge(k): row input k's."""
    rec = FUNCTION_ROWS.get(row)
    if rec is None:
        return None
    return tuple(edge(k) if k >= 0 else (None, 0) for _, k in rec.args)


def _grad_fn(self):
    """The backward node that computed this tensor (None for a leaf)."""
    _check_not_stale(self._i)
    r = engine().meta[self._i, L.M_ROW]
    return None if r < 0 else node_for_row(int(r))


methods.method("grad_fn", property(_grad_fn))


# Read-only views of a row for tapegrad.viz: what the engine keeps that the public node API
# (name, next_functions) does not show. None of them changes a table.

def node_row(node):
    """The tape row behind a grad_fn node (None for AccumulateGrad or a foreign object)."""
    return getattr(node, "_row", None) if isinstance(node, Node) else None


def _meta_shape(M, t):
    return tuple(int(x) for x in M[t, L.M_SHAPE:L.M_SHAPE + M[t, L.M_NDIM]])


def _version(E, t):
    return int(E.stor[E.meta[t, L.M_VSID], L.S_VERSION])


def saved_values(row):
    """What row saved for its backward, one dict per saved value: slot (input k, or -1 for
    the row's output), id (the saved alias), shape, dtype, saved_version (at record time),
    version (now) and released (a backward without retain_graph freed it). The sweep
    refuses the row when the two versions differ (autograd._sweep_error)."""
    E = engine()
    T, M = E.tape, E.meta
    released = bool(T[row, L.R_STATE] & L.RS_RELEASED)
    out = []
    for k in range(-1, int(T[row, L.R_NIN])):
        if k < 0:
            sv, ver = int(T[row, L.R_OSAVED]), int(T[row, L.R_OVER])
        else:
            base = L.R_IN + k * L.IW
            sv, ver = int(T[row, base + L.IN_SAVED]), int(T[row, base + L.IN_VER])
        if sv < 0:
            continue
        out.append({"slot": k, "id": sv, "shape": _meta_shape(M, sv),
                    "dtype": str(BY_CODE[int(M[sv, L.M_DTYPE])]).rpartition(".")[2],
                    "saved_version": ver, "version": _version(E, sv),
                    "released": released})
    return out


def row_summary(row):
    """One tape row as plain values: op (the grad_fn name), inputs (one dict per input k:
    the producing row and output index, or the leaf id for an AccumulateGrad edge), nout,
    out_shape, out_dtype, saved (saved_values) and outputs (the live tensor ids it made,
    with their output index and whether they retain their gradient)."""
    E = engine()
    T, M = E.tape, E.meta
    r = T[row]
    inputs = []
    for k in range(int(r[L.R_NIN])):
        base = L.R_IN + k * L.IW
        inputs.append({"k": k, "row": int(r[base + L.IN_ROW]),
                       "oidx": int(r[base + L.IN_OIDX]), "leaf": int(r[base + L.IN_T])})
    nd = int(r[L.R_ONDIM])
    return {"row": int(row), "op": _row_name(row), "inputs": inputs,
            "nout": int(r[L.R_NOUT]),
            "out_shape": tuple(int(x) for x in r[L.R_OSHAPE:L.R_OSHAPE + max(nd, 0)]),
            "out_dtype": str(BY_CODE[int(r[L.R_ODTYPE])]) if r[L.R_ODTYPE] >= 0 else "?",
            "saved": saved_values(row), "outputs": row_outputs(row)}


def row_outputs(row):
    """The live tensors row produced: (id, output index, retains_grad) per tensor, found
    by scanning the meta table (a tensor names its row; the row does not list them)."""
    E = engine()
    M = E.meta
    live = (M[:, L.M_REFS] > 0) & (M[:, L.M_ROW] == row)
    return [(int(t), int(M[t, L.M_OIDX]), bool(M[t, L.M_FLAGS] & L.FL_RETAIN))
            for t in live.nonzero()[0]]


def live_rows():
    """The rows in use, in table order (rows are recycled: the order is not time order)."""
    T = engine().tape
    return [int(r) for r in (T[:, L.R_STATE] & L.RS_LIVE).nonzero()[0]]


def reachable_rows(row):
    """The rows a backward from row's output would visit: row and every row its inputs lead
    to, in the order a depth-first walk meets them."""
    T = engine().tape
    seen, stack, order = set(), [row], []
    while stack:
        r = stack.pop()
        if r < 0 or r in seen:
            continue
        seen.add(r)
        order.append(r)
        for k in range(int(T[r, L.R_NIN])):
            stack.append(int(T[r, L.R_IN + k * L.IW + L.IN_ROW]))
    return order
