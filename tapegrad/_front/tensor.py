"""The Tensor wrapper: a Python object around one id in the engine's meta table.

Everything a tensor is (storage, shape, strides, dtype, history) lives in the flat
tables; the wrapper holds one reference to its id and caches its shape. Op methods are
generated from the op table (tapegrad.ops) at import.
"""
import numbers
import re
import warnings
import weakref

import numpy as np

from . import dtype as D
from .._engine import layout as L
from .._engine import core
from .._engine.state import engine, EngineError, GRAD_MODE, RECORDING, note_break as _note_break

from ..ops.registry import OPS, OpError
from . import format as _format
from .dtype import type_name

E = engine()
_CADDR = E.caddr


def _entry_on_first_call(name, fn):
    """A stand-in for module global `name`: its first call compiles (or loads) fn's C entry
    point, puts it in the global, and calls it; later calls go to the entry directly."""
    def first(caddr, i):
        entry = globals()[name] = E.entry(fn)
        return entry(caddr, i)
    return first


_CONTIGUOUS = _entry_on_first_call("_CONTIGUOUS", core.contiguous_id)
_INCREF = _entry_on_first_call("_INCREF", core.incref_meta)
_DETACH = _entry_on_first_call("_DETACH", core.detach)
_RELQ_MV, _RELQ_SLOT = E.relq_mv, E.relq_slot
_M_GRAD = L.M_GRAD
# meta's columns for the reads Python makes through E.meta_mv (a flat view of the table)
_MW, _MS, _MN = L.MW, L.M_SHAPE, L.M_NDIM
_M_ROW, _M_FLAGS, _FL_RETAIN = L.M_ROW, L.M_FLAGS, L.FL_RETAIN
_M_NUMEL, _FL_REQ = L.M_NUMEL, L.FL_REQ
# the one-call op paths take no lock: their outputs go to a buffer of their own
_SOLO, _INPLACE_SOLO = L.OPF_SOLO, L.OPF_INPLACE | L.OPF_SOLO
_getattr = getattr
assert len(E.relq) == 4096          # the ring index mask in __del__
_new = object.__new__
_SCALARS = (float, int, bool)


def _is_scalar(x):
    """Python and NumPy real scalars (np.float64(2) * x stays a tensor op)."""
    return isinstance(x, (numbers.Real, np.bool_))
_LEAVES = weakref.WeakValueDictionary()     # leaf id -> its wrapper (for .variable)
STRUCTURE = [0]     # bumped when what a compiled replay guards on may have changed
                    # (requires_grad, .data swaps, modules' parameters and modes)


class _AllDims:
    """The default dim of max(), min() and prod(): no dim given, distinct from an explicit
    dim=None, which PyTorch refuses."""

    def __repr__(self):
        return "<all dims>"


_ALL_DIMS = _AllDims()


class Size(tuple):
    """A tensor's shape: a tuple that prints like PyTorch's."""

    def __repr__(self):
        return f"tapegrad.Size({list(self)})"

    def numel(self):
        """Number of elements a tensor of this shape holds."""
        n = 1
        for s in self:
            n *= s
        return n


class Tensor:
    """A multi-dimensional array of float32, float64, int64 or bool values, with PyTorch's
    autograd: create one with tapegrad.tensor, zeros, randn, ..."""
    __slots__ = ("_i", "_shape", "_gw", "__weakref__")
    __array_ufunc__ = None      # NumPy defers to our operators (np.float64(2) * x is a Tensor)

    # ------------------------------------------------------------ lifetime
    def __del__(self):
        try:            # E.release(self._i), inlined: this runs once per dead tensor
            k = _RELQ_SLOT() & 4095
            if _RELQ_MV[k]:
                E.flush()
            _RELQ_MV[k] = self._i + 1
        except Exception:      # interpreter shutdown: the engine may be gone
            pass

    # ------------------------------------------------------------ properties
    @property
    def shape(self):
        """The sizes of the dims, as a tapegrad.Size (a tuple)."""
        s = _getattr(self, "_shape", None)     # (a default: no AttributeError to catch)
        if s is None:
            mv = E.meta_mv
            b = self._i * _MW + _MS
            s = self._shape = Size(mv[b:b + mv[b - _MS + _MN]].tolist())
        return s

    def size(self, dim=None):
        """The shape as a tapegrad.Size, or the size of one dim."""
        if dim is None:
            return self.shape
        return self.shape[_dim(dim, self.ndim, "size")]

    @property
    def ndim(self):
        """Number of dims."""
        return len(self.shape)

    def dim(self):
        """Number of dims."""
        return self.ndim

    def numel(self):
        """Number of elements."""
        return int(E.meta[self._i, L.M_NUMEL])

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    @property
    def dtype(self):
        """The element type: tapegrad.float32, float64, int64 or bool."""
        return D.BY_CODE[E.meta[self._i, L.M_DTYPE]]

    def stride(self, dim=None):
        """The strides in elements, as a tuple, or the stride of one dim."""
        m = E.meta[self._i]
        st = tuple(m[L.M_STRIDE:L.M_STRIDE + m[L.M_NDIM]].tolist())
        return st if dim is None else st[_dim(dim, len(st), "stride")]

    def is_contiguous(self):
        """Whether the elements are laid out in row-major order without gaps."""
        return _CONTIGUOUS(_CADDR, self._i) != 0

    @property
    def is_leaf(self):
        """Whether the tensor was made by the user rather than computed by a recorded op
        (grad_fn is None)."""
        _check_not_stale(self._i)
        return bool(E.meta[self._i, L.M_ROW] < 0)

    @property
    def requires_grad(self):
        """Whether autograd records ops on this tensor; settable on leaves only."""
        M, i = E.meta, self._i
        if M[i, L.M_FLAGS] & L.FL_REQ:
            return True
        # a view without a history whose base requires grad (core.requires_grad_through_base)
        b = M[i, L.M_BASE]
        return bool(b >= 0 and M[i, L.M_ROW] < 0 and M[b, L.M_FLAGS] & L.FL_REQ)

    @requires_grad.setter
    def requires_grad(self, flag):
        if not isinstance(flag, bool):          # (PyTorch refuses 1, None, a tensor, ...)
            raise RuntimeError("requires_grad must be a bool")
        m = E.meta[self._i]
        if m[L.M_ROW] >= 0:
            raise RuntimeError(
                "you can only change requires_grad flags of leaf variables." +
                ("" if flag else " If you want to use a computed variable in a subgraph that "
                 "doesn't require differentiation use var_no_grad = var.detach()."))
        if flag and not self.dtype.is_floating_point:
            raise RuntimeError("only Tensors of floating point and complex dtype can require "
                               "gradients")
        if flag:
            m[L.M_FLAGS] |= L.FL_REQ
            _LEAVES[self._i] = self
        else:
            m[L.M_FLAGS] &= ~L.FL_REQ
        STRUCTURE[0] += 1
        _note_break("changing requires_grad")

    def requires_grad_(self, requires_grad=True):
        """Set requires_grad in place (a leaf only) and return the tensor."""
        if not isinstance(requires_grad, bool):
            raise TypeError(f"requires_grad_(): argument 'requires_grad' (position 1) must be "
                            f"bool, not {type_label(requires_grad)}")
        if requires_grad and E.meta[self._i, L.M_ROW] >= 0:
            return self         # a non-leaf with history already requires grad
        if requires_grad and not self.dtype.is_floating_point:
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        self.requires_grad = requires_grad
        return self

    @property
    def _version(self):
        return int(E.stor[E.meta[self._i, L.M_VSID], L.S_VERSION])

    @property
    def retains_grad(self):
        """Whether retain_grad() was called on this non-leaf."""
        return bool(E.meta[self._i, L.M_FLAGS] & L.FL_RETAIN)

    def retain_grad(self):
        """Keep .grad for this non-leaf after backward (leaves keep it anyway)."""
        _note_break("retain_grad() (a replay makes new tensors each step)")
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        m = E.meta[self._i]
        if m[L.M_FLAGS] & L.FL_RETAIN:
            return                      # (PyTorch: a no-op, stale or not)
        _check_not_stale(self._i)
        if m[L.M_ROW] >= 0 and not m[L.M_FLAGS] & L.FL_RETAIN:
            m[L.M_FLAGS] |= L.FL_RETAIN
            E.ctx[L.C_NRETAIN] += 1

    @property
    def grad(self):
        """The accumulated gradient (None until a backward reaches this tensor); assignable."""
        mv = E.meta_mv
        b = self._i * _MW
        if mv[b + _M_ROW] >= 0 and not mv[b + _M_FLAGS] & _FL_RETAIN:
            warnings.warn(
                "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. "
                "Its .grad attribute won't be populated during autograd.backward(). If you "
                "indeed want the .grad field to be populated for a non-leaf Tensor, use "
                ".retain_grad() on the non-leaf Tensor. If you access the non-leaf Tensor by "
                "mistake, make sure you access the leaf Tensor instead.", UserWarning,
                stacklevel=2)
        g = mv[b + _M_GRAD]
        if RECORDING[0] is not None:
            RECORDING[0].grad_read(self._i, g)
        if g < 0:
            return None
        gw = _getattr(self, "_gw", None)
        if gw is not None and gw._i == g:
            return gw
        gw = self._gw = _adopt_ref(g)
        return gw

    @grad.setter
    def grad(self, value):
        if value is None:                       # (zero_grad's and SGD loops' call)
            mv = E.meta_mv
            b = self._i * _MW + _M_GRAD
            old = mv[b]
            mv[b] = -1
            self._gw = None
            if RECORDING[0] is not None:
                RECORDING[0].grad_cleared(self._i, True)
            if old >= 0:
                E.release(old)
            return
        if not isinstance(value, Tensor):
            raise TypeError(f"assigned grad expected to be a Tensor or None but got grad "
                            f"of type {type(value).__name__}")
        if value.shape != self.shape:
            raise RuntimeError(f"attempting to assign a gradient of size "
                               f"'{list(value.shape)}' to a tensor of size "
                               f"'{list(self.shape)}'. Please ensure that the gradient and "
                               "the tensor are the same size")
        if value.dtype is not self.dtype:
            raise RuntimeError("assigned grad has data of a different type")
        if value.is_contiguous():
            gid = value._i
            _INCREF(_CADDR, gid)
        else:       # the sweep accumulates into .grad as a flat buffer
            gid = E.call(core.contiguous_copy, value._i)
        m = E.meta[self._i]
        old = int(m[L.M_GRAD])
        m[L.M_GRAD] = gid
        self._gw = value if gid == value._i else None
        _note_break("assigning a tensor to .grad")
        if old >= 0:
            E.release(old)

    @property
    def data(self):
        """Shares storage, not the version counter: changes through .data are invisible
        to autograd (as in PyTorch; prefer detach(), which keeps the check)."""
        return _wrap(E.call(core.data_alias, self._i))

    @data.setter
    def data(self, value):
        """Make this (leaf) tensor a view of value's storage, keeping the Python object
        (and its requires_grad): what Module.to(dtype) and optimizers rely on."""
        if not isinstance(value, Tensor):
            raise TypeError(f"data must be a Tensor, got {type(value).__name__}")
        if E.meta[self._i, L.M_ROW] >= 0:
            raise RuntimeError("data can only be assigned to a leaf tensor")
        mine, theirs = E.meta[self._i], E.meta[value._i]
        if (mine[L.M_SID] == theirs[L.M_SID] and mine[L.M_OFF] == theirs[L.M_OFF]
                and (mine[L.M_NDIM:L.M_DTYPE + 1] == theirs[L.M_NDIM:L.M_DTYPE + 1]).all()
                and (mine[L.M_SHAPE:] == theirs[L.M_SHAPE:]).all()):
            return      # the same memory and layout (`p.data -= u` assigns p's own data back)
        STRUCTURE[0] += 1
        _note_break("assigning .data")
        req = self.requires_grad
        grad = self.grad
        new = E.call(core.detach, value._i)
        old = self._i
        self._i = new
        self._gw = None
        try:
            del self._shape
        except AttributeError:
            pass
        if req:
            E.meta[new, L.M_FLAGS] |= L.FL_REQ
            _LEAVES[new] = self
        move_leaf_hooks(old, new)
        E.release(old)
        if grad is not None and grad.shape == self.shape:
            self.grad = grad.to(self.dtype)

    def detach(self):
        """A tensor sharing this one's memory and version counter, outside the graph
        (requires_grad=False)."""
        r = _DETACH(_CADDR, self._i)
        if r < 0:                               # a table to grow first
            r = E.call(core.detach, self._i)
        t = _new(Tensor)
        t._i = r
        return t

    def _has_grad(self):
        return E.meta[self._i, L.M_GRAD] >= 0

    def detach_(self):
        """Detach this tensor from the graph in place (it becomes a leaf without
        requires_grad)."""
        m = E.meta[self._i]
        if m[L.M_ROW] >= 0:
            E.entry(core.decref_row)(_CADDR, int(m[L.M_ROW]))
            m = E.meta[self._i]
            m[L.M_ROW] = -1
        m[L.M_FLAGS] &= ~L.FL_REQ
        return self

    # ------------------------------------------------------------ data access
    def numpy(self, *, force=False):
        """A NumPy array sharing this tensor's memory (refused while it requires grad,
        unless force=True)."""
        if self.requires_grad and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. "
                               "Use tensor.detach().numpy() instead.")
        return _numpy_view(self)

    def item(self):
        """The value of a one-element tensor as a Python number."""
        if self.numel() != 1:
            raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted "
                               "to Scalar")
        return _numpy_view(self).reshape(()).item()

    def tolist(self):
        """The values as (nested) Python lists of numbers."""
        return _numpy_view(self).tolist()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self.dtype not in (D.int64, D.bool_) or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to "
                            "an index")
        return int(self.item())

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is "
                               "ambiguous")
        return bool(self.item())

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def __repr__(self):
        return _format.tensor_repr(self, _numpy_view(self))

    __str__ = __repr__

    def __hash__(self):
        return id(self)

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return iter(self.unbind(0))

    # ------------------------------------------------------------ copy and pickle
    def __copy__(self):
        """copy.copy: a new leaf over the same memory, with its own version counter."""
        return _leaf_like(self, self.data)

    # ------------------------------------------------------------ conversions
    def contiguous(self):
        """This tensor if it is contiguous, else a contiguous copy."""
        return self if self.is_contiguous() else self.clone()

    def cpu(self, memory_format=None):
        """This tensor: every tapegrad tensor lives in CPU memory."""
        return self         # every tapegrad tensor is a CPU tensor, as PyTorch's cpu() keeps

    def type(self, dtype=None, non_blocking=False):
        """The type name, or (given a dtype or a name such as "torch.DoubleTensor") this
        tensor cast to it: itself when it already has that dtype, as in PyTorch."""
        if not isinstance(non_blocking, bool):
            raise TypeError(f"type(): argument 'non_blocking' (position 2) must be bool, not "
                            f"{type(non_blocking).__name__}")
        if dtype is None:
            return f"tapegrad.{self.dtype.tensor_type}"
        if isinstance(dtype, str):
            named = [d for d in D.ALL if d.tensor_type == dtype.rpartition(".")[2]]
            if not named or dtype.rpartition(".")[0] not in ("torch", "tapegrad"):
                raise ValueError(f"invalid type: '{dtype}'")
            dtype = named[0]
        elif isinstance(dtype, type):   # (unlike to(), PyTorch's type() refuses float, ...)
            mod = "" if dtype.__module__ == "builtins" else dtype.__module__ + "."
            raise ValueError(f"invalid type: '{mod}{dtype.__qualname__}'")
        elif not isinstance(dtype, D.dtype):
            raise TypeError("dtype must be a type, str, or dtype object")
        return self.to(D.as_dtype(dtype, "type"))


def _leaf_like(like, data, requires_grad=None):
    """data as a leaf of like's class (a Parameter stays one), requiring grad as like."""
    cls = like if isinstance(like, type) else type(like)
    if requires_grad is None:
        requires_grad = like.requires_grad
    if cls is not Tensor:
        return cls(data, requires_grad)
    return data.requires_grad_(True) if requires_grad else data


def zero_grads(params, set_to_none):
    """zero_grad() of modules and optimizers. A recording logs it for every parameter,
    whether or not it has a gradient now: a replayed step must clear the gradients the
    step before it made."""
    rec = RECORDING[0]
    if rec is None and set_to_none:     # the common case, inlined (p.grad = None)
        meta = E.meta
        for p in params:
            i = p._i
            g = int(meta[i, _M_GRAD])
            if g >= 0:
                meta[i, _M_GRAD] = -1
                p._gw = None
                E.release(g)
        return
    for p in params:
        if rec is not None:
            rec.grad_cleared(p._i, set_to_none)
            with rec.paused():
                _clear_grad(p, set_to_none)
        else:
            _clear_grad(p, set_to_none)


def _clear_grad(p, set_to_none):
    if p._has_grad():
        if set_to_none:
            p.grad = None
        else:
            p.grad.detach().zero_()


# ---------------------------------------------------------------- wrapping
def _wrap(i):
    """A wrapper for a fresh id whose reference count already counts the wrapper."""
    t = _new(Tensor)
    t._i = i
    return t


def _adopt_ref(i):
    _INCREF(_CADDR, i)
    t = _new(Tensor)
    t._i = i
    return t


def _wrap_leaf(i):
    t = _LEAVES.get(i)
    if t is None:
        t = _adopt_ref(i)
        _LEAVES[i] = t
    return t


LEAF_HOOKS = {}      # leaf id -> [hook, ...] (autograd.function keeps and prunes it)


def move_leaf_hooks(old, new):
    """Tensor.data = ...: the tensor's id changes; its hooks follow it."""
    hooks = LEAF_HOOKS.pop(old, None)
    if hooks:
        LEAF_HOOKS[new] = hooks
        E.meta[new, L.M_FLAGS] |= L.FL_HOOK


class _Export:
    """Owner of a NumPy view: keeps the tensor (and so its storage) alive."""
    __slots__ = ("__array_interface__", "tensor")


_TYPESTR = tuple(d.np.str for d in D.BY_CODE)
_ITEMSIZE = tuple(d.itemsize for d in D.BY_CODE)


def _numpy_view(t):
    """The tensor's memory as a NumPy array. While a step is recorded for
    tapegrad.compile this is a graph break: Python would see (or write) values a replay
    never shows it."""
    if RECORDING[0] is not None:
        RECORDING[0].graph_break("Python reads or writes a tensor's values (.item(), "
                                 ".tolist(), .numpy(), printing, or an op tapegrad computes "
                                 "with NumPy, such as integer math or index checks)")
    return _array_of(t)


def _array_of(t):
    """_numpy_view without the recording check: for filling a tensor just made."""
    m = E.meta[t._i].tolist()           # one conversion, then plain ints
    code = m[L.M_DTYPE]
    isz = _ITEMSIZE[code]
    nd = m[L.M_NDIM]
    ex = _Export()
    ex.tensor = t
    ex.__array_interface__ = {
        "data": (int(E.stor[m[L.M_SID], L.S_ADDR]) + m[L.M_OFF] * isz, False),
        "typestr": _TYPESTR[code], "version": 3,
        "shape": tuple(m[L.M_SHAPE:L.M_SHAPE + nd]),
        "strides": tuple(x * isz for x in m[L.M_STRIDE:L.M_STRIDE + nd])}
    return np.asarray(ex)


# ---------------------------------------------------------------- errors
def _dim(d, ndim, what=None):
    n = max(ndim, 1)
    if not isinstance(d, (int, np.integer)) or isinstance(d, bool):
        raise TypeError(f"{what}(): dim must be an int, got {type(d).__name__}")
    if d < -n or d >= n:
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-n}, {n - 1}], but got {d})")
    return d % n if ndim > 0 else 0


# ops returning several views, which PyTorch refuses to write through (op name -> its
# node's name in the message)


STALE_VIEW_MSG = (
    "A view was created in no_grad mode and its base or another view of its base has been "
    "modified inplace with grad mode enabled. Given that this use case is ambiguous and "
    "error-prone, it is forbidden. You can clarify your code by moving both the view and "
    "the inplace either both inside the no_grad block (if you don't want the inplace to be "
    "tracked) or both outside (if you want the inplace to be tracked).")


NOGRAD_VIEW_INPLACE_MSG = STALE_VIEW_MSG.replace(
    "its base or another view of its base has been modified", "is being modified")


def multi_view_output(a):
    """(k, "Split") when tensor a is output k of a function returning several views (split,
    chunk, unbind: OpDef.multi_view), else None."""
    row = int(E.meta[a, L.M_ROW])
    if row < 0:
        return None
    op = OPS[int(E.tape[row, L.R_OP])]
    if op.multi_view:
        k = (int(E.meta[a, L.M_OIDX]) if op.name == "unbind"
             else int(E.tape[row, L.R_IATTR + op.slot("piece")]))
    elif E.meta[a, L.M_FLAGS] & L.FL_MULTIVIEW:     # a view of one: PyTorch names its op
        k = int(E.meta[a, L.M_OIDX])
    else:
        return None
    return k, re.sub(r"Backward\d*$", "", op.grad_fn)


def _nograd_view_msg(i, msg):
    """PyTorch names the op that made a view, in grad mode, of a view made under no_grad;
    an output of a multi-view function has its own message."""
    multi = multi_view_output(i) if msg is STALE_VIEW_MSG else None
    if multi is not None:
        return (f"Output {multi[0]} of {multi[1]} is a view and its base or another view of "
                "its base has been modified inplace. This view is the output of a function "
                "that returns multiple views. Such functions do not allow the output views to "
                "be modified inplace. You should replace the inplace operation by an "
                "out-of-place one.")
    op = int(E.meta[i, L.M_SRCOP])
    if op < 0:
        return msg
    name = re.sub(r"Backward\d*$", "", OPS[op].grad_fn)
    return f"Output 0 of {name} is a view of a view which was created in" + msg[len(
        "A view was created in"):]


def view_of_leaf(a):
    """A view of a leaf that requires grad (made of it, or before it was set to): PyTorch
    refuses in-place ops on it in grad mode."""
    M = E.meta
    b = M[a, L.M_BASE]
    return bool(M[a, L.M_FLAGS] & L.FL_VIEWLEAF or (
        b >= 0 and M[b, L.M_FLAGS] & L.FL_REQ and M[b, L.M_ROW] < 0))


def _check_not_stale(i):
    """PyTorch's refusal, when asked for the history of a view made under no_grad whose
    base (requiring grad) was modified in place since."""
    M = E.meta
    if M[i, L.M_FLAGS] & L.FL_STALE and M[M[i, L.M_BASE], L.M_FLAGS] & L.FL_REQ:
        raise RuntimeError(_nograd_view_msg(i, STALE_VIEW_MSG))


def op_error(exc, op, a, b):
    """Turn a kernel status into the exception PyTorch raises for the same mistake."""
    code = exc.code
    name = op.name
    if code == L.E_LEAF_INPLACE:
        return RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                            "operation.")
    if code in (L.E_VIEW_INPLACE, L.E_LEAF_INPLACE):
        multi = multi_view_output(a)
        if multi is not None:
            return RuntimeError(f"Output {multi[0]} of {multi[1]} is a view and is being "
                                "modified inplace. This view is the output of a function that "
                                "returns multiple views. Such functions do not allow the output "
                                "views to be modified inplace. You should replace the inplace "
                                "operation by an out-of-place one.")
    if code == L.E_VIEW_INPLACE:
        if view_of_leaf(a):
            return RuntimeError("a view of a leaf Variable that requires grad is being used "
                                "in an in-place operation.")
        base = int(E.meta[a, L.M_BASE])
        return RuntimeError(
            f"{name}: an in-place write that records autograd history into a view of a "
            f"non-contiguous tensor (shape {_shape_of(base)}, strides "
            f"{E.meta[base, L.M_STRIDE:L.M_STRIDE + E.meta[base, L.M_NDIM]].tolist()}) is "
            "not supported yet; make the base contiguous first (.contiguous()) or use the "
            "out-of-place form")
    sa = list(_shape_of(a))
    sb = list(_shape_of(b)) if b is not None and b >= 0 else None
    if op.errors is not None:        # the op's own words for what its kernels refused
        tb = type_name(D.BY_CODE[E.meta[b, L.M_DTYPE]]) if sb is not None else None
        own = op.errors(OpError(code, exc.err, name, sa, sb,
                                type_name(D.BY_CODE[E.meta[a, L.M_DTYPE]]), tb))
        if own is not None:
            return own
    if code == L.E_SHAPE:
        if sb is not None and op.kind == "binary":
            na, nb = len(sa), len(sb)
            nd = max(na, nb)
            for d in range(nd - 1, -1, -1):
                x = sa[d - (nd - na)] if d - (nd - na) >= 0 else 1
                y = sb[d - (nd - nb)] if d - (nd - nb) >= 0 else 1
                if x != y and x != 1 and y != 1:
                    return RuntimeError(f"The size of tensor a ({x}) must match the size of "
                                        f"tensor b ({y}) at non-singleton dimension {d}")
        return RuntimeError(f"{name}: incompatible shapes {sa} and {sb}")
    if code == L.E_DTYPE:
        da = D.BY_CODE[E.meta[a, L.M_DTYPE]]
        if sb is not None:
            db = D.BY_CODE[E.meta[b, L.M_DTYPE]]
            if da is not db:
                return RuntimeError(f"{name}: operands have dtypes {da.name} and {db.name}; "
                                    "convert one with .to(dtype)")
        return TypeError(f"{name}: not implemented for {da.name} tensors; use a floating "
                         "point tensor")
    if code == L.E_STALE_VIEW:
        return RuntimeError(_nograd_view_msg(int(exc.err[0]), STALE_VIEW_MSG))
    if code == L.E_NOGRAD_VIEW_INPLACE:
        return RuntimeError(_nograd_view_msg(a, NOGRAD_VIEW_INPLACE_MSG))
    if code == L.E_VIEWS_LAYOUT:
        return RuntimeError(
            f"{name}: in-place operation on a non-contiguous tensor of shape {_shape_of(a)} "
            f"while {int(exc.err[0])} of its views have autograd history is not supported "
            "yet: their histories cannot be re-derived from its new one. Make the tensor "
            "contiguous (.contiguous()) before taking the views, or use the out-of-place "
            "form")
    if code == L.E_OVERLAP:
        return RuntimeError("unsupported operation: some elements of the input tensor and the "
                            "written-to tensor refer to a single memory location. Please "
                            "clone() the tensor before performing the operation.")
    if code == L.E_SELF_OVERLAP:
        return RuntimeError("unsupported operation: more than one element of the written-to "
                            "tensor refers to a single memory location. Please clone() the "
                            "tensor before performing the operation.")
    if code == L.E_VALUE:
        return RuntimeError(f"{name}: an input value is outside the op's domain")
    if code == L.E_KERNEL:
        return RuntimeError(f"{name}: internal error in a compiled kernel (please report it "
                            f"with the shapes {sa} and {sb})")
    if code == L.E_INPLACE_SHAPE:
        return RuntimeError(f"output with shape {sa} doesn't match the broadcast shape "
                            f"{_broadcast_list(sa, sb)}")
    return RuntimeError(f"{name}: failed with engine status {code}")


def _shape_of(i):
    m = E.meta[i]
    return m[L.M_SHAPE:L.M_SHAPE + m[L.M_NDIM]].tolist()


def _broadcast_list(sa, sb):
    if sb is None:
        return sa
    try:
        return list(np.broadcast_shapes(tuple(sa), tuple(sb)))
    except ValueError:
        return sb


# how an in-place op refused on a view of a tensor with history is done instead, by writing
# through the view (the indexing front registers it: it needs the whole front)
VIEW_WRITERS = []


def run(op, a, b=-1, s=0.0, flags=None, iargs=None, all_outputs=False, c=-1, s2=None,
        fargs=None):
    """Run op through the engine (the general path, with int arguments); returns the
    output id, or with all_outputs the list of output ids. c: a third input; s2: a second
    scalar; fargs: forward-only int arguments (iargs[FV:])."""
    if flags is None:
        flags = GRAD_MODE.on
    asked = flags
    with E.lock:
        if iargs is not None:
            E.iargs[:len(iargs)] = iargs
        if s2 is not None:
            E.iargs[_S2] = _f64_bits(s2)
        if c >= 0:
            E.iargs[L.IA_IN2] = c
            flags |= L.OPF_IN2
        if fargs is not None:
            E.iargs[_FV:_FV + len(fargs)] = fargs
        r = E.op(_CADDR, op.opcode, a, b, s, flags)
        if r < 0:
            try:
                r = E.run_op(op.opcode, a, b, s, flags)
            except EngineError as exc:
                if exc.code == L.E_VIEW_INPLACE:
                    st = VIEW_WRITERS[0](op, a, b, s, asked, c, iargs, s2, fargs)
                    if st == 0:
                        return a
                    if st < 0:
                        exc = EngineError(st, exc.err)
                raise op_error(exc, op, a, b) from None
        if all_outputs:
            return E.outs[:int(E.ctx[L.C_NOUTS])].tolist()
    return r


_S2 = L.R_S2 - L.R_IATTR
_FV = 16        # forward-only int arguments start here (after the third input's slot)


def _f64_bits(x):
    return int(np.float64(x).view(np.int64))


# ---------------------------------------------------------------- op methods
def type_label(value):
    """The type of value as PyTorch's messages name it (numpy.bool, NoneType, float)."""
    t = type(value)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def not_tensor(fn, value, name="input", position=1):
    """PyTorch's TypeError for a value given where a tensor is expected (position None:
    the message without it, as PyTorch words some)."""
    where = "" if position is None else f" (position {position})"
    return TypeError(f"{fn}(): argument '{name}'{where} must be Tensor, not "
                     f"{type_label(value)}")
