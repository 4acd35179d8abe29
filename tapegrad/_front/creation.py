"""Making tensors: from data, filled, empty (the random factories are in sampling.py)."""
import math
import numbers
import warnings

import numpy as np

from . import dtype as D
from .dtype import as_dtype
from . import methods
from . import out as _out
from .device import check_device
from .._engine import layout as L
from .._engine import core
from .._engine import sizes
from .._engine.state import RECORDING, GRAD_MODE
from .tensor import Tensor, E, _wrap, _array_of, _numpy_view, _leaf_like, _note_break


def _size(size, fn):
    """The shape a factory was given: ints (a 0-d tensor counts) that fit in int64 and
    are >= 0, with PyTorch's errors. The storage it needs is checked by the caller, who
    knows the dtype (sizes.check_new)."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    out = []
    for i, s in enumerate(size):
        if isinstance(s, Tensor):
            s = int(s)
        if not isinstance(s, numbers.Integral) or isinstance(s, bool):
            raise TypeError(f"{fn}(): size must be a sequence of ints, got {size!r}")
        out.append(sizes.check_int64(int(s), fn, i + 1))
    if any(s < 0 for s in out):
        if fn == "zeros":       # (PyTorch's zeros words it its own way)
            raise RuntimeError("zeros: Dimension size must be non-negative.")
        raise sizes.negative_dimension_error(out)
    if len(out) > L.MAXD:
        raise RuntimeError(f"{fn}(): tapegrad tensors have at most {L.MAXD} dims, got {len(out)}")
    return tuple(out)


def _dtype_arg(dtype, default=None, fn="tensor"):
    """dtype checked (as_dtype); None gives default, or the default dtype (float32 unless
    set_default_dtype changed it) when no default is given."""
    if dtype is None:
        return D.default_float() if default is None else default
    return as_dtype(dtype, fn)


def _creation_grad_check(dt, requires_grad):
    if requires_grad and not dt.is_floating_point:
        raise RuntimeError("Only Tensors of floating point and complex dtype can require "
                           "gradients")


def _new(size, dtype, requires_grad, fn, zero=False, like=False):
    """A new tensor of the given size (the user's arguments to factory fn), its memory
    zeroed if asked; like: worded as PyTorch's *_like functions word a size error."""
    shape = _size(size, fn)
    dt = _dtype_arg(dtype, fn=fn)
    _creation_grad_check(dt, requires_grad)
    sizes.check_new(shape, dt.itemsize, like)
    with E.lock:
        E.iargs[:len(shape)] = shape
        t = _wrap(E.call(core.new_tensor, dt.code, len(shape), zero))
    if RECORDING[0] is not None:
        RECORDING[0].created(t._i)
    if requires_grad:
        t.requires_grad_(True)
    return t


def empty(*size, dtype=None, device=None, requires_grad=False, out=None):
    """A tensor of the given size whose values are whatever its memory held."""
    check_device(device, "empty")
    if out is not None:
        if isinstance(out, Tensor) and GRAD_MODE.on and out.requires_grad:
            raise RuntimeError("cannot resize variables that require grad")
        return _factory_out(out, "empty", dtype, requires_grad,
                            lambda dt: _new(size, dt, False, "empty"), fill=False)
    return _new(size, dtype, requires_grad, "empty")


def _factory_out(out, fn, dtype, requires_grad, make, fill=True):
    """A factory's out=, as PyTorch's: out checked, the values made in out's dtype by
    make(dtype) and written into out (resized without a warning when its shape differs;
    fill=False: only resized), requires_grad set if asked; returns out."""
    _out.check(fn, out, name=f"aten::{fn}")
    result = make(_out.factory_dtype(fn, out, dtype))
    if fill:
        _out.write(out, result, warn=False)
    elif tuple(out.shape) != tuple(result.shape):
        _out.resize(out, result)
    if requires_grad:
        out.requires_grad_(True)
    return out


def _from_array(arr, dt, requires_grad):
    if requires_grad and not dt.is_floating_point:
        raise RuntimeError("Only Tensors of floating point and complex dtype can require "
                           "gradients")
    if isinstance(arr, np.ndarray):     # (before a dtype conversion allocates a copy)
        sizes.check_new(arr.shape, dt.itemsize)
    arr = np.asarray(arr, dtype=dt.np)
    if arr.ndim > L.MAXD:
        raise RuntimeError(f"tapegrad tensors have at most {L.MAXD} dims, got {arr.ndim}")
    sizes.check_new(arr.shape, dt.itemsize)
    with E.lock:
        E.iargs[:arr.ndim] = arr.shape
        t = _wrap(E.call(core.new_tensor, dt.code, arr.ndim, False))
    _array_of(t)[...] = arr
    if RECORDING[0] is not None:
        RECORDING[0].created(t._i)
    if requires_grad:
        _creation_grad_check(t.dtype, True)
        t.requires_grad_(True)
    return t


def tensor(data, *, dtype=None, device=None, requires_grad=False):
    """A new leaf holding a copy of data (nested lists, scalars, NumPy arrays, tensors)."""
    check_device(device, "tensor")
    if isinstance(data, Tensor):
        data = data.detach().numpy()
    if isinstance(data, np.ndarray):
        native = data.dtype.newbyteorder("=")       # (a byte-swapped array is copied)
        dt = dtype or D.from_numpy_dtype(native if native != np.float16 else np.float32)
        return _from_array(data, _dtype_arg(dt), requires_grad)
    arr = np.asarray(data)
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise TypeError(f"tensor(): could not infer a dtype from {type(data).__name__}")
    if dtype is None:
        dtype = {"b": D.bool_, "i": D.int64, "u": D.int64, "f": D.float32}[arr.dtype.kind]
        if dtype is D.float32 and (_holds_float64(data) if D.default_float() is D.float32
                                   else not _only_float32(data)):
            dtype = D.float64
    return _from_array(arr, _dtype_arg(dtype), requires_grad)


def _holds_float64(data):
    """Whether Python data holds a NumPy float64 (a scalar, or an array inside a list):
    PyTorch infers float64 then, as it keeps a NumPy value's dtype, and float32 (its
    default) only for Python floats."""
    if isinstance(data, (np.floating, np.ndarray)):
        return data.dtype == np.float64
    if isinstance(data, (list, tuple)):
        return any(_holds_float64(v) for v in data)
    return False


def _only_float32(data, top=True):
    """Whether the floats of Python data are NumPy float32 (or narrower) values, one at
    least: with float64 as the default dtype, PyTorch infers float32 only then (a Python
    float counts as the default dtype, and so does empty data). top=False: None when data
    holds no float (nested data that decides nothing)."""
    if isinstance(data, (np.floating, np.ndarray)):
        if data.dtype.kind != "f":
            return None
        return data.dtype.itemsize <= 4
    if isinstance(data, float):
        return False
    answer = None
    if isinstance(data, (list, tuple)):
        for v in data:
            a = _only_float32(v, False)
            if a is False:
                return False
            answer = answer or a
    return bool(answer) if top else answer


def from_numpy(arr):
    """A tensor sharing arr's memory (writes show through both ways), as in PyTorch, which
    refuses the same arrays: byte-swapped, negative strides, strides that are not a
    multiple of the item size. (NumPy itself refuses an array, a view made by as_strided
    included, whose size times its item size overflows int64.)"""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(arr).__name__})")
    dt = D.from_numpy_dtype(arr.dtype.newbyteorder("="))
    if arr.ndim > L.MAXD:
        raise RuntimeError(f"tapegrad tensors have at most {L.MAXD} dims, got {arr.ndim}")
    if not arr.dtype.isnative:
        raise ValueError("given numpy array has byte order different from the native byte "
                         "order. Conversion between byte orders is currently not supported.")
    st = arr.strides
    if any(s < 0 for s in st):
        raise ValueError("At least one stride in the given numpy array is negative, and "
                         "tensors with negative strides are not currently supported. (You can "
                         "probably work around this by making a copy of your array  with "
                         "array.copy().) ")
    if any(s % dt.itemsize for s in st):
        raise ValueError("given numpy array strides not a multiple of the element byte size. "
                         "Copy the numpy array to reallocate the memory.")
    sizes.check_view(arr.shape)
    # the bytes the tensor reaches from its first element (a view's strides may reach past
    # its size times the item size, a broadcast one stays below): what a copy of the
    # storage copies (copy.deepcopy) and the bound of gathers from it
    extent = 0 if arr.size == 0 else dt.itemsize + sum((n - 1) * s for n, s in zip(arr.shape, st))
    _check_within_buffer(arr, extent)
    return _adopt(arr, dt, arr.shape, [s // dt.itemsize for s in st], 0, extent)


def _check_within_buffer(arr, extent):
    """Refuse a view whose strides reach outside the memory it is a view of (one made by
    np.lib.stride_tricks.as_strided can): every read through such a tensor could crash.
    The memory is that of the array (or buffer object) at the end of arr's chain of
    bases; where it cannot be found, the view is taken as it is, as PyTorch takes it."""
    if extent == 0 or arr.flags.owndata:  # (NumPy keeps an array's strides in its memory)
        return
    owner = arr
    while not (isinstance(owner, np.ndarray) and owner.flags.owndata):
        base = getattr(owner, "base", None)
        if base is None:
            break
        owner = base
    try:
        if not isinstance(owner, np.ndarray):
            owner = np.frombuffer(owner, np.uint8)      # (bytes, mmap, ctypes memory)
        if not owner.flags.owndata and owner.base is not None:
            return
        lo = owner.ctypes.data
        hi = lo + owner.nbytes
    except (TypeError, ValueError, AttributeError, BufferError):
        return
    start = arr.ctypes.data
    if start < lo or start + extent > hi:
        raise ValueError(f"given numpy array reaches outside its memory: with strides "
                         f"{arr.strides} its elements span bytes {start - lo} to "
                         f"{start - lo + extent} of the {hi - lo}-byte buffer it is a view of "
                         f"(an as_strided view past its base?)")


def _adopt(owner, dt, shape, strides, offset, nbytes=None):
    """A tensor over the memory of NumPy array owner (kept alive with it): dtype dt,
    shape, strides and offset in elements; the caller checked that it fits. nbytes: the
    storage's extent from owner's address (owner.nbytes by default)."""
    if nbytes is None:
        nbytes = owner.nbytes
    with E.lock:
        nd = len(shape)
        E.iargs[:nd] = shape
        E.iargs[nd:2 * nd] = strides
        i = E.call(core.adopt, owner.ctypes.data, max(nbytes, 1), dt.code, nd, offset)
        # forget arrays whose tensors are gone *before* recording this one: the storage
        # id may be a recycled one whose release is still queued
        E.flush()
        E.ext[int(E.meta[i, L.M_SID])] = owner
    if RECORDING[0] is not None:
        RECORDING[0].created(i)
    return _wrap(i)


def _full(size, fill_value, dtype, requires_grad, fn, like=False):
    if dtype is None:
        dtype = (D.bool_ if isinstance(fill_value, bool) else
                 D.int64 if isinstance(fill_value, numbers.Integral) else D.default_float())
    t = _new(size, dtype, False, fn, like=like)
    if t.numel():           # (NumPy refuses some empty shapes: (0, 2**62) float32)
        _array_of(t)[...] = fill_value
    if requires_grad:
        _creation_grad_check(t.dtype, True)
        t.requires_grad_(True)
    return t


def full(size, fill_value, *, dtype=None, device=None, requires_grad=False, out=None):
    """A tensor of the given size filled with fill_value (its dtype by default: bool,
    int64 or the default dtype)."""
    check_device(device, "full")
    if out is not None:
        return _factory_out(out, "full", dtype, requires_grad,
                            lambda dt: _full((size,), fill_value, dt, False, "full"))
    return _full((size,), fill_value, dtype, requires_grad, "full")


def zeros(*size, dtype=None, device=None, requires_grad=False, out=None):
    """A tensor of the given size filled with 0."""
    check_device(device, "zeros")
    if out is not None:
        return _factory_out(out, "zeros", dtype, requires_grad,
                            lambda dt: _new(size, dt, False, "zeros", zero=True))
    return _new(size, dtype, requires_grad, "zeros", zero=True)


def ones(*size, dtype=None, device=None, requires_grad=False, out=None):
    """A tensor of the given size filled with 1."""
    check_device(device, "ones")
    if out is not None:
        return _factory_out(out, "ones", dtype, requires_grad,
                            lambda dt: _full(size, 1, dt, False, "ones"))
    return _full(size, 1, _dtype_arg(dtype, fn="ones"), requires_grad, "ones")


_ARANGE_RESIZED = ("The number of elements in the out tensor of shape {old} is {n_old} which "
                   "does not match the computed number of elements {n}. Note that this may "
                   "occur as a result of rounding error. The out tensor will be resized to a "
                   "tensor of shape ({n},).")


def arange(start, end=None, step=1, *, dtype=None, device=None, requires_grad=False,
           out=None):
    check_device(device, "arange")
    if out is not None:
        _out.check("arange", out, name="aten::arange")
        result = arange(start, end, step, dtype=_out.factory_dtype("arange", out, dtype))
        if out.numel() == result.numel():       # (written in out's shape, as PyTorch does)
            out.copy_(result.view(tuple(out.shape)))
        else:
            if out.numel():
                warnings.warn(_ARANGE_RESIZED.format(old=list(out.shape), n_old=out.numel(),
                                                     n=result.numel()),
                              UserWarning, stacklevel=2)
            _out.resize(out, result)
        if requires_grad:
            out.requires_grad_(True)
        return out
    if end is None:
        start, end = 0, start
    vals = [start, end, step]
    if dtype is None:
        dtype = (D.int64 if all(isinstance(v, numbers.Integral) for v in vals)
                 else D.default_float())
    dtype = as_dtype(dtype, "arange")
    if step == 0:
        raise RuntimeError("arange: step must be nonzero")
    sizes.check_new((_arange_size(start, end, step),), dtype.itemsize)   # (before NumPy's)
    arr = np.arange(start, end, step, dtype=np.float64 if dtype.is_floating_point else np.int64)
    return _from_array(arr, dtype, requires_grad)


def _arange_size(start, end, step):
    """arange's length, with PyTorch's checks of its arguments."""
    for v in (start, end):
        if isinstance(v, numbers.Real) and not math.isfinite(v):
            raise RuntimeError(f"unsupported range: {start} -> {end}")
    if (step > 0 and end < start) or (step < 0 and end > start):
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    if all(isinstance(v, numbers.Integral) for v in (start, end, step)):
        n = -((int(start) - int(end)) // int(step))      # (exact: the ceiling of the ratio)
    else:
        n = math.ceil((float(end) - float(start)) / float(step))
    if n > sizes.INT64_MAX:
        raise RuntimeError("invalid size, possible overflow?")
    return n


def _like_input(t, fn):
    if not isinstance(t, Tensor):
        raise TypeError(f"{fn}(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(t).__name__}")
    return tuple(t.shape)


def zeros_like(input, *, dtype=None, device=None, requires_grad=False):
    """zeros of input's shape and (by default) dtype."""
    check_device(device, "zeros_like")
    return _new(_like_input(input, "zeros_like"), dtype or input.dtype, requires_grad,
                "zeros_like", zero=True, like=True)


def empty_like(input, *, dtype=None, device=None, requires_grad=False):
    """empty of input's shape and (by default) dtype."""
    check_device(device, "empty_like")
    return _new(_like_input(input, "empty_like"), dtype or input.dtype, requires_grad,
                "empty_like", like=True)


def ones_like(input, *, dtype=None, device=None, requires_grad=False):
    """ones of input's shape and (by default) dtype."""
    check_device(device, "ones_like")
    return _full(_like_input(input, "ones_like"), 1, dtype or input.dtype, requires_grad,
                 "ones_like", like=True)


def full_like(input, fill_value, *, dtype=None, device=None, requires_grad=False):
    """full of input's shape and (by default) dtype."""
    check_device(device, "full_like")
    return _full(_like_input(input, "full_like"), fill_value, dtype or input.dtype,
                 requires_grad, "full_like", like=True)


# ---------------------------------------------------------------- Tensor.new_*
# PyTorch's factories on a tensor: its dtype unless told otherwise, never its history or
# its requires_grad.
def _new_options(fn, device, layout, pin_memory):
    check_device(device, fn)
    if layout is not None:
        raise TypeError(f"{fn}(): tapegrad tensors are strided only; layout must be None")
    if pin_memory:
        raise RuntimeError(f"{fn}(): pinned memory needs an accelerator, and tapegrad runs "
                           "on the CPU only")


def _new_filled(fn):
    def new(self, *size, dtype=None, device=None, requires_grad=False, layout=None,
            pin_memory=False):
        _new_options("new_" + fn.__name__, device, layout, pin_memory)
        return fn(*_size(size, "new_" + fn.__name__), dtype=dtype or self.dtype,
                  requires_grad=requires_grad)
    new.__name__ = "new_" + fn.__name__
    return new


new_zeros = _new_filled(zeros)
new_ones = _new_filled(ones)
new_empty = _new_filled(empty)


def new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False,
             layout=None, pin_memory=False):
    if not isinstance(size, (tuple, list)):
        raise TypeError(f"new_full(): argument 'size' (position 1) must be tuple of ints, not "
                        f"{type(size).__name__}")
    _new_options("new_full", device, layout, pin_memory)
    return full(_size((size,), "new_full"), fill_value, dtype=dtype or self.dtype,
                requires_grad=requires_grad)


def new_tensor(self, data, *, dtype=None, device=None, requires_grad=False, layout=None,
               pin_memory=False):
    if isinstance(data, Tensor):
        warnings.warn("To copy construct from a tensor, it is recommended to use "
                      "sourceTensor.detach().clone() or "
                      "sourceTensor.detach().clone().requires_grad_(True), rather than "
                      "tensor.new_tensor(sourceTensor).", UserWarning, stacklevel=2)
    _new_options("new_tensor", device, layout, pin_memory)
    return tensor(data, dtype=dtype or self.dtype, requires_grad=requires_grad)


# ---------------------------------------------------------------- copy and pickle
def _reduce_ex(self, proto):
    """pickle (multiprocessing, Dask, Ray, ...), as PyTorch's: a new leaf with the
    values, dtype, shape, strides and storage offset over a copy of the whole storage
    block, requiring grad as this tensor (a non-leaf arrives as a leaf); the gradient,
    the history and tensor hooks stay behind (a warning names each hook, as PyTorch's).
    Tensors pickled together get separate copies, as in PyTorch: views do not stay views
    of one another. No address or engine id travels. (tapegrad.save writes checkpoints
    without pickle.)"""
    _warn_hooks(self)
    # (protocol 5 sends an array's buffer as it is, out of band where the receiver takes
    # it so; older protocols copy bytes into the stream: one copy of the memory)
    block, dt, shape, strides, offset = _memory_block(self, as_bytes=proto < 5)
    cls = type(self)        # a Parameter subclass comes back a Parameter, as PyTorch's
    cls = next((c for c in cls.__mro__ if c.__name__ == "Parameter"
                and c.__module__ == "tapegrad.nn.parameter"), cls)
    return _unpickle, (cls, block, self.requires_grad,
                       (dt.name, tuple(shape), tuple(strides), offset))


def _warn_hooks(t):
    """PyTorch's warning for each tensor hook pickling leaves behind."""
    from .tensor import LEAF_HOOKS
    from .nodes import ROW_HOOKS
    i = t._i
    row = int(E.meta[i, L.M_ROW])
    if row < 0:
        hooks = LEAF_HOOKS.get(i, ()) if E.meta[i, L.M_FLAGS] & L.FL_HOOK else ()
    else:
        hooks = (ROW_HOOKS.get(row, {}).get(int(E.meta[i, L.M_OIDX]), ())
                 if E.tape[row, L.R_STATE] & L.RS_HOOK else ())
    for h in hooks:
        # (PyTorch's words, without its advice: tapegrad has no unserializable_hook)
        warnings.warn(f"backward hook {h!r} on tensor will not be serialized.",
                      UserWarning, stacklevel=3)


def _deepcopy(self, memo):
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


def _unpickle(cls, values, requires_grad, layout=None):
    """A pickled tensor back: values alone (a contiguous array), or with layout
    (dtype name, shape, strides, offset) the bytes of its whole storage block, checked
    to hold every element the layout reaches before a tensor points into them."""
    if layout is None:
        return _leaf_like(cls, from_numpy(values), requires_grad)
    name, shape, strides, offset = layout
    dt = {d.name: d for d in D.BY_CODE}.get(name)
    block = (np.ascontiguousarray(values, np.uint8).reshape(-1)
             if isinstance(values, np.ndarray) else np.frombuffer(values, np.uint8))
    # protocol 5 may hand over a buffer it read: never write into a read-only one (the
    # bytes of a message) nor compute on an unaligned one
    if not block.flags.writeable or block.ctypes.data % 16:
        block = block.copy()
    if dt is None or len(shape) != len(strides) or len(shape) > L.MAXD:
        raise RuntimeError(f"unpickling a tensor: bad layout {layout!r}")
    shape, strides, offset = ([int(n) for n in shape], [int(n) for n in strides],
                              int(offset))
    if (min(shape, default=1) < 0 or min(strides, default=0) < 0 or offset < 0
            or (0 not in shape and dt.itemsize * (offset + 1 + sum(
                (n - 1) * s for n, s in zip(shape, strides))) > block.nbytes)):
        raise RuntimeError(f"unpickling a tensor: layout {layout!r} reaches beyond its "
                           f"{block.nbytes} bytes of storage")
    sizes.check_view(shape)
    return _leaf_like(cls, _adopt(block, dt, shape, strides, offset), requires_grad)


def _memory_block(t, as_bytes=False):
    """A copy of the bytes of t's whole storage block (a uint8 array, or bytes), and t's
    dtype, shape, strides and offset (in elements) within it."""
    import ctypes
    _note_break("Python reads or writes a tensor's values (pickling a tensor copies them)")
    m = E.meta[t._i].tolist()
    sid = m[L.M_SID]
    addr, nbytes = int(E.stor[sid, L.S_ADDR]), int(E.stor[sid, L.S_NBYTES])
    if as_bytes:
        block = ctypes.string_at(addr, nbytes) if nbytes else b""
    else:
        block = np.empty(nbytes, np.uint8)
        if nbytes:
            ctypes.memmove(block.ctypes.data, addr, nbytes)
    nd = m[L.M_NDIM]
    return (block, D.BY_CODE[m[L.M_DTYPE]], m[L.M_SHAPE:L.M_SHAPE + nd],
            m[L.M_STRIDE:L.M_STRIDE + nd], m[L.M_OFF])


def _copy_memory(t, memo):
    """A tensor like t (shape, strides, offset, dtype) over a copy of t's whole memory
    block: tensors deep-copied together that share a block share its copy (the memo
    keeps it)."""
    import ctypes
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


methods.methods(__reduce_ex__=_reduce_ex, __deepcopy__=_deepcopy, new_zeros=new_zeros,
                new_ones=new_ones, new_empty=new_empty, new_full=new_full,
                new_tensor=new_tensor)
