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
