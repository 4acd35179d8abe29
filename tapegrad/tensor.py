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

from . import _dtype as D
from ._engine import layout as L
from ._engine import core
from ._engine.state import engine, EngineError, GRAD_MODE, RECORDING
from .autograd import graph
from .ops import registry
from .ops.registry import BY_NAME, OPS
from . import _format

E = engine()
_CADDR = E.caddr
_OP = E.op
_SWEEP = E.sweep


def _rebind():
    """The engine compiled its entry points: call them directly from now on."""
    global _OP, _SWEEP
    _OP, _SWEEP = E.op, E.sweep


E.on_ready.append(_rebind)


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


def _note_break(reason):
    if RECORDING[0] is not None:
        RECORDING[0].graph_break(reason)


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
    def grad_fn(self):
        """The backward node that computed this tensor (None for a leaf)."""
        _check_not_stale(self._i)
        r = E.meta[self._i, L.M_ROW]
        return None if r < 0 else graph.node_for_row(int(r))

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
        from .autograd.function import move_leaf_hooks
        move_leaf_hooks(old, new)
        E.release(old)
        if grad is not None and grad.shape == self.shape:
            self.grad = grad.to(self.dtype)

    # ------------------------------------------------------------ autograd
    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Compute the gradients of this tensor with respect to the graph leaves and add
        them to their .grad, as tapegrad.autograd.backward."""
        if gradient is None and inputs is None and not create_graph:
            # the common case, a scalar loss: straight into the compiled sweep; anything
            # that needs attention (a kernel to load, a table to grow, an error) takes the
            # general path, which starts over (a failed sweep changes nothing)
            i = self._i
            mv = E.meta_mv
            if mv[i * _MW + _M_NUMEL] == 1 and mv[i * _MW + _M_FLAGS] & _FL_REQ:
                with E.lock:
                    ia = E.iargs_mv
                    ia[0] = i
                    ia[1] = -1
                    r = _SWEEP(_CADDR, 1, 0, L.MODE_BACKWARD, bool(retain_graph))
                    if r >= 0 and not _LEAF_HOOKS:
                        return
                    if r >= 0 or r == L.E_CALLBACK or r in (L.E_NOMEM, L.E_OVERFLOW):
                        # (an allocation refused mid-sweep: starting over would find the
                        # rows already run, and report a second backward)
                        if r >= 0 or r == L.E_CALLBACK:
                            r = _drive(r, bool(retain_graph))
                        if r >= 0:
                            return
                        from .autograd import _sweep_error
                        raise _sweep_error(r, E.err.copy())
        _backward([self], gradient, retain_graph, create_graph, inputs=inputs)

    def detach(self):
        """A tensor sharing this one's memory and version counter, outside the graph
        (requires_grad=False)."""
        r = _DETACH(_CADDR, self._i)
        if r < 0:                               # a table to grow first
            r = E.call(core.detach, self._i)
        t = _new(Tensor)
        t._i = r
        return t

    def register_hook(self, hook):
        """Call hook(grad) when this tensor's gradient is computed; a returned tensor
        replaces the gradient. Returns a handle with remove()."""
        return _register_hook(self, hook)

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
    def __reduce_ex__(self, proto):
        """pickle (multiprocessing, ...), as in PyTorch: the values, dtype and
        requires_grad come back as a new leaf; a gradient does not. (tapegrad.save writes
        checkpoints without pickle.)"""
        return _unpickle, (type(self), np.array(_numpy_view(self), copy=True),
                           self.requires_grad)

    def __copy__(self):
        """copy.copy: a new leaf over the same memory, with its own version counter."""
        return _leaf_like(self, self.data)

    def __deepcopy__(self, memo):
        """copy.deepcopy, as in PyTorch: graph leaves only, new memory with the same
        layout (tensors copied together that share memory share the copy), requires_grad,
        and a deep copy of .grad."""
        if not self.is_leaf:
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) support the "
                "deepcopy protocol at the moment. Copy a non-leaf with .detach().clone() "
                "(or deep-copy the leaves it was computed from).")
        new = _leaf_like(self, _copy_memory(self, memo))
        memo[id(self)] = new
        if self.grad is not None:
            new.grad = self.grad.__deepcopy__(memo)
        return new

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
            named = [d for d in D.BY_CODE if d.tensor_type == dtype.rpartition(".")[2]]
            if not named or dtype.rpartition(".")[0] not in ("torch", "tapegrad"):
                raise ValueError(f"invalid type: '{dtype}'")
            dtype = named[0]
        elif isinstance(dtype, type):   # (unlike to(), PyTorch's type() refuses float, ...)
            mod = "" if dtype.__module__ == "builtins" else dtype.__module__ + "."
            raise ValueError(f"invalid type: '{mod}{dtype.__qualname__}'")
        elif not isinstance(dtype, D.dtype):
            raise TypeError("dtype must be a type, str, or dtype object")
        return self.to(dtype)


def _unpickle(cls, values, requires_grad):
    from ._creation import from_numpy
    return _leaf_like(cls, from_numpy(values), requires_grad)


def _leaf_like(like, data, requires_grad=None):
    """data as a leaf of like's class (a Parameter stays one), requiring grad as like."""
    cls = like if isinstance(like, type) else type(like)
    if requires_grad is None:
        requires_grad = like.requires_grad
    if cls is not Tensor:
        return cls(data, requires_grad)
    return data.requires_grad_(True) if requires_grad else data


def _copy_memory(t, memo):
    """A tensor like t (shape, strides, offset, dtype) over a copy of t's whole memory
    block: tensors deep-copied together that share a block share its copy (the memo
    keeps it)."""
    import ctypes
    from ._creation import _adopt
    _note_break("copy.deepcopy of a tensor (Python copies its values)")
    m = E.meta[t._i].tolist()
    sid = m[L.M_SID]
    addr, nbytes = int(E.stor[sid, L.S_ADDR]), int(E.stor[sid, L.S_NBYTES])
    key = ("tapegrad memory", addr, nbytes)
    block = memo.get(key)
    if block is None:
        block = memo[key] = np.empty(max(nbytes, 1), np.uint8)
        ctypes.memmove(block.ctypes.data, addr, nbytes)
    nd = m[L.M_NDIM]
    return _adopt(block, D.BY_CODE[m[L.M_DTYPE]], m[L.M_SHAPE:L.M_SHAPE + nd],
                  m[L.M_STRIDE:L.M_STRIDE + nd], m[L.M_OFF])


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


graph.wrap_leaf = _wrap_leaf


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
             else int(E.tape[row, L.R_IATTR + 10]))
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
            if da is not db:        # PyTorch's messages for mm, bmm, mv and dot
                from ._promotion import _type_name
                ca, cb = _type_name(da), _type_name(db)
                if name == "dot":
                    return RuntimeError(f"dot : expected both vectors to have same dtype, but "
                                        f"found {ca} and {cb}")
                if name == "mv" or (name == "matmul" and len(sb) == 1 and len(sa) > 2):
                    return RuntimeError(f"addmv input tensors must have the same dtype, but "
                                        f"got {cb}, {ca}, and {cb}")
                if name in ("mm", "matmul") and len(sb) > 2:
                    return RuntimeError(f"expected scalar type {ca} but found {cb}")
                if name in ("mm", "matmul"):
                    return RuntimeError(f"expected m1 and m2 to have the same dtype, but got: "
                                        f"{ca.lower()} != {cb.lower()}")
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
        if name.startswith(("nll_loss", "cross_entropy")):
            return IndexError(f"Target {int(exc.err[1])} is out of bounds.")
        if name == "index_rows":
            return IndexError(f"index {int(exc.err[1])} is out of bounds for dimension 0 "
                              f"with size {int(exc.err[2])}")
        if name == "binary_cross_entropy":
            return RuntimeError("all elements of input should be between 0 and 1")
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


def run(op, a, b=-1, s=0.0, flags=None, iargs=None, all_outputs=False, c=-1, s2=None,
        fargs=None):
    """Run op through the engine (the general path, with int arguments); returns the
    output id, or with all_outputs the list of output ids. c: a third input; s2: a second
    scalar; fargs: forward-only int arguments (iargs[FV:])."""
    if flags is None:
        flags = GRAD_MODE[0]
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
        r = _OP(_CADDR, op.opcode, a, b, s, flags)
        if r < 0:
            try:
                r = E.run_op(op.opcode, a, b, s, flags)
            except EngineError as exc:
                if exc.code == L.E_VIEW_INPLACE:
                    from ._indexing import write_through_view
                    st = write_through_view(op, a, b, s, asked, c, iargs, s2, fargs)
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


def _binary_method(op, named=False):
    """Method for a binary op. The operator spelling (named=False) returns NotImplemented
    for an operand it does not take, so Python tries the reflected operator; the named
    method (x.mul(None)) raises PyTorch's TypeError instead."""
    code = op.opcode
    scalars = _SCALARS if op.name not in ("sub", "rsub") else (float, int)

    def method(self, other):
        try:        # (a module-level spelling, tapegrad.mul(None, x): PyTorch's TypeError)
            a = self._i
        except AttributeError:
            raise not_tensor(op.name, self) from None
        if other.__class__ is Tensor or isinstance(other, Tensor):     # (or a Parameter)
            b = other._i
            r = _OP(_CADDR, code, a, b, 0.0, GRAD_MODE[0] | _SOLO)
        elif other.__class__ in scalars or (_is_scalar(other) and not (
                scalars is not _SCALARS and isinstance(other, (bool, np.bool_)))):
            r = _OP(_CADDR, code, a, -1, float(other), GRAD_MODE[0] | _SOLO)
            b = -1
        else:
            if isinstance(other, (bool, np.bool_)):     # x - True: PyTorch refuses
                from . import _promotion
                return _promotion.binary(method, op.name, self, other)
            if named:
                raise not_tensor(op.name, other, "other")
            return NotImplemented
        if r < 0:
            if _mixed(a, b):
                from . import _promotion
                return _promotion.binary(method, op.name, self, other)
            r = run(op, a, b, 0.0 if b >= 0 else float(other))
        t = _new(Tensor)
        t._i = r
        return t
    method.__name__ = op.name
    return method


def _mixed(a, b):
    """Whether an op on ids a and b (b < 0: a scalar) needs PyTorch's type promotion:
    kernels take one float dtype."""
    m = E.meta
    dt = m[a, L.M_DTYPE]
    return (dt != L.F32 and dt != L.F64) or (b >= 0 and m[b, L.M_DTYPE] != dt)


def _inplace_method(op, name, out_of_place=None, named=False, nullary=False):
    """x.op_(other), and for a unary op (given its out-of-place method, which an integer
    tensor's promotion goes through) or a nullary one (zero_) x.op_(); the engine keeps
    what the backward reads of the overwritten input, as for every in-place op. As for
    _binary_method, the operator spelling (x *= y) returns NotImplemented for an operand
    it does not take, the named method (named=True) raises PyTorch's TypeError."""
    code = op.opcode
    unary = out_of_place is not None or nullary

    def method(self, other=None):
        if unary:
            if other is not None:
                raise TypeError(f"{name}() takes no arguments (1 given)")
            b, s = -1, 0.0
        elif other.__class__ is Tensor or isinstance(other, Tensor):
            b, s = other._i, 0.0
        elif other.__class__ in _SCALARS or _is_scalar(other):
            b, s = -1, float(other)
        elif named:
            raise not_tensor(name, other, "other")
        else:
            return NotImplemented
        r = _OP(_CADDR, code, self._i, b, s, GRAD_MODE[0] | _INPLACE_SOLO)
        if r < 0:
            if _mixed(self._i, b) and (not unary or out_of_place is not None):
                from . import _promotion
                if other is None:
                    return _promotion.unary_inplace(out_of_place, op.name, self)
                return _promotion.inplace(method, op.name, self, other)
            run(op, self._i, b, s, GRAD_MODE[0] | 2)
        return self
    method.__name__ = name
    return method


def _unary_method(op):
    code = op.opcode

    def method(self):
        try:        # (a module-level spelling, tapegrad.exp(3): PyTorch's TypeError)
            a = self._i
        except AttributeError:
            raise not_tensor(op.name, self) from None
        r = _OP(_CADDR, code, a, -1, 0.0, GRAD_MODE[0] | _SOLO)
        if r < 0:
            if _mixed(a, -1):
                from . import _promotion
                return _promotion.unary(method, op.name, self)
            r = run(op, a)
        t = _new(Tensor)
        t._i = r
        return t
    method.__name__ = op.name
    return method


def _by_operand(tensor_method, scalar_method, name):
    """pow, fmod, remainder: the op for a tensor operand or the one for a Python scalar
    (PyTorch names their nodes apart: PowBackward1 / PowBackward0). Named or operator
    spelling as the two methods given are."""
    def method(self, other):
        if isinstance(other, Tensor):
            return tensor_method(self, other)
        return scalar_method(self, other)
    method.__name__ = name
    return method


def _rtruediv(self, other):
    if not _is_scalar(other):
        return NotImplemented
    if not self.dtype.is_floating_point:
        self = self.to(D.float32)
    return self.reciprocal() * other         # PyTorch's own decomposition


def _with_alpha(method, name):
    """add/sub (and add_/sub_) with PyTorch's alpha= keyword: self op alpha * other. The
    operators (+, -, +=, -=) keep the plain method."""
    def with_alpha(self, other, *, alpha=1):
        if alpha.__class__ is int and alpha == 1 and isinstance(other, Tensor) and \
                isinstance(self, Tensor):       # the common call: every check below passes
            return method(self, other)
        if not isinstance(self, Tensor) and not (_is_scalar(self) and isinstance(other, Tensor)):
            raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not "
                            f"{type(self).__name__}")
        if not (isinstance(other, Tensor) or _is_scalar(other)):
            raise TypeError(f"{name}(): argument 'other' (position 2) must be Tensor, not "
                            f"{type(other).__name__}")
        if not _is_scalar(alpha):
            raise TypeError(f"{name}(): argument 'alpha' must be Number, not "
                            f"{type(alpha).__name__}")
        if alpha != 1 or isinstance(alpha, (bool, np.bool_)):
            other = _scaled(self, other, alpha)
        if not isinstance(self, Tensor):        # tapegrad.add(2, x), as torch.add allows
            return other + self if name == "add" else other.__rsub__(self)
        return method(self, other)
    with_alpha.__name__ = with_alpha.__qualname__ = name
    return with_alpha


def _scaled(self, other, alpha):
    """alpha * other, after PyTorch's checks of alpha against the result's dtype."""
    from ._promotion import result_type
    rt = result_type(self, other)
    if isinstance(alpha, (bool, np.bool_)):
        if rt is not D.bool_:
            raise RuntimeError("Boolean alpha only supported for Boolean results.")
    elif not rt.is_floating_point and not isinstance(alpha, numbers.Integral):
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating "
                           "point number.")
    if rt is D.bool_:           # bool arithmetic is logical: alpha only switches other off
        return other & bool(alpha)
    return other * alpha


def _fill_(self, value):
    if isinstance(value, Tensor):
        value = value.item()
    return _FILL(self, float(value))


def _install():
    T = Tensor
    add, sub, mul, div = (BY_NAME[n] for n in ("add", "sub", "mul", "div"))
    for name, op in (("add", add), ("sub", sub), ("mul", mul), ("div", div)):
        dunder = "truediv" if name == "div" else name
        m, ip = _binary_method(op), _inplace_method(op, name + "_")
        setattr(T, f"__{dunder}__", m)
        setattr(T, f"__i{dunder}__", ip)
        if name in ("add", "sub"):      # (alpha= checks the operand itself)
            setattr(T, name, _with_alpha(m, name))
            setattr(T, name + "_", _with_alpha(ip, name + "_"))
        else:
            setattr(T, name, _binary_method(op, named=True))
            setattr(T, name + "_", _inplace_method(op, name + "_", named=True))
    T.__radd__ = T.__add__
    T.__rmul__ = T.__mul__
    T.__rsub__ = _binary_method(BY_NAME["rsub"])
    T.__rtruediv__ = _rtruediv
    T.true_divide = T.div
    T.__rpow__ = _binary_method(BY_NAME["rpow"])
    global _FILL
    for named in (False, True):        # (the operators, then the named methods)
        pow_ = _by_operand(_binary_method(BY_NAME["pow_tensor"], named),
                           _binary_method(BY_NAME["pow"], named), "pow")
        ipow = _by_operand(_inplace_method(BY_NAME["pow_tensor"], "pow_", named=named),
                           _inplace_method(BY_NAME["pow"], "pow_", named=named), "pow_")
        if named:
            T.pow, T.pow_ = pow_, ipow
        else:
            T.__pow__, T.__ipow__ = pow_, ipow
    for name in ("atan2", "hypot", "logaddexp"):
        setattr(T, name, _binary_method(BY_NAME[name], named=True))
    T.atan2_ = _inplace_method(BY_NAME["atan2"], "atan2_", named=True)
    T.hypot_ = _inplace_method(BY_NAME["hypot"], "hypot_", named=True)  # (no logaddexp_)
    for name in ("fmod", "remainder"):
        setattr(T, name, _by_operand(_binary_method(BY_NAME[name + "_tensor"], True),
                                     _binary_method(BY_NAME[name], True), name))
        setattr(T, name + "_", _by_operand(
            _inplace_method(BY_NAME[name + "_tensor"], name + "_", named=True),
            _inplace_method(BY_NAME[name], name + "_", named=True), name + "_"))
    T.__mod__ = _by_operand(_binary_method(BY_NAME["remainder_tensor"]),
                            _binary_method(BY_NAME["remainder"]), "remainder")
    T.arctan2 = T.atan2
    T.arctan2_, T.true_divide_ = T.atan2_, T.div_
    _FILL = _inplace_method(BY_NAME["fill_"], "fill_")
    T.fill_ = _fill_
    T.zero_ = _inplace_method(BY_NAME["zero_"], "zero_", nullary=True)
    for op in OPS:
        if op.kind == "unary" and op.method and not op.name.endswith("_"):
            setattr(T, op.name, _unary_method(op))
            if op.name != "clone":
                setattr(T, op.name + "_", _inplace_method(op, op.name + "_",
                                                          getattr(T, op.name)))
    T.__neg__ = T.neg
    T.__abs__ = T.abs


_FILL = None


def _load_kernels(opcode, slot):
    return OPS[opcode].kernels(slot)


E.kernel_loader = _load_kernels
E.has_row_kernels = lambda opcode: OPS[opcode].has_row_loops
from .autograd import backward as _backward  # noqa: E402  (autograd needs the front loaded)
from .autograd.function import (drive as _drive, register_hook as _register_hook,  # noqa: E402
                                _LEAF_HOOKS)
registry.fill_opinfo(E.opinfo)
E.ctx[L.C_AS_STRIDED] = registry.BY_NAME["as_strided"].opcode
