"""Making tensors: from data, filled, random (tapegrad's own seeded generator)."""
import math
import numbers
import warnings

import numpy as np

from . import dtype as D
from .dtype import as_dtype, type_name
from . import methods
from .._engine import layout as L
from .._engine import core
from .._engine import sizes
from .._engine.state import RECORDING
from .tensor import Tensor, E, _wrap, _array_of, _numpy_view, _leaf_like, _note_break

_GEN = [np.random.Generator(np.random.PCG64(0))]


def manual_seed(seed):
    """Seed tapegrad's generator (used by rand, randn and, later, nn init and dropout)."""
    if not isinstance(seed, numbers.Integral):
        raise TypeError(f"manual_seed expected an int, got {type(seed).__name__}")
    _GEN[0] = np.random.Generator(np.random.PCG64(int(seed)))
    return _GEN[0]


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


def _dtype_arg(dtype, default=D.float32, fn="tensor"):
    return default if dtype is None else as_dtype(dtype, fn)


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


def empty(*size, dtype=None, requires_grad=False):
    """A tensor of the given size whose values are whatever its memory held."""
    return _new(size, dtype, requires_grad, "empty")


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


def tensor(data, *, dtype=None, requires_grad=False):
    """A new leaf holding a copy of data (nested lists, scalars, NumPy arrays, tensors)."""
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
        if dtype is D.float32 and _holds_float64(data):
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
                 D.int64 if isinstance(fill_value, numbers.Integral) else D.float32)
    t = _new(size, dtype, False, fn, like=like)
    if t.numel():           # (NumPy refuses some empty shapes: (0, 2**62) float32)
        _array_of(t)[...] = fill_value
    if requires_grad:
        _creation_grad_check(t.dtype, True)
        t.requires_grad_(True)
    return t


def full(size, fill_value, *, dtype=None, requires_grad=False):
    """A tensor of the given size filled with fill_value (its dtype by default: bool,
    int64 or float32)."""
    return _full((size,), fill_value, dtype, requires_grad, "full")


def zeros(*size, dtype=None, requires_grad=False):
    """A tensor of the given size filled with 0."""
    return _new(size, dtype, requires_grad, "zeros", zero=True)


def ones(*size, dtype=None, requires_grad=False):
    """A tensor of the given size filled with 1."""
    return _full(size, 1, _dtype_arg(dtype, fn="ones"), requires_grad, "ones")


def arange(start, end=None, step=1, *, dtype=None, requires_grad=False):
    if end is None:
        start, end = 0, start
    vals = [start, end, step]
    if dtype is None:
        dtype = D.int64 if all(isinstance(v, numbers.Integral) for v in vals) else D.float32
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


def _random(size, dtype, requires_grad, fn, draw, like=False):
    dt = _dtype_arg(dtype, fn=fn)
    shape = _size(size, fn)
    sizes.check_new(shape, dt.itemsize, like)      # (before NumPy draws the values)
    if 0 in shape:
        return _new(shape, dt, requires_grad, fn)
    return _from_array(draw(shape, dt.np), dt, requires_grad)


def rand(*size, dtype=None, requires_grad=False):
    """Uniform draws in [0, 1) from tapegrad's generator."""
    return _random(size, dtype, requires_grad, "rand",
                   lambda shape, dt: _GEN[0].random(shape, dtype=dt))


def randn(*size, dtype=None, requires_grad=False):
    """Standard normal draws from tapegrad's generator."""
    return _random(size, dtype, requires_grad, "randn",
                   lambda shape, dt: _GEN[0].standard_normal(shape, dtype=dt))


def _like_input(t, fn):
    if not isinstance(t, Tensor):
        raise TypeError(f"{fn}(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(t).__name__}")
    return tuple(t.shape)


def zeros_like(input, *, dtype=None, requires_grad=False):
    """zeros of input's shape and (by default) dtype."""
    return _new(_like_input(input, "zeros_like"), dtype or input.dtype, requires_grad,
                "zeros_like", zero=True, like=True)


def empty_like(input, *, dtype=None, requires_grad=False):
    """empty of input's shape and (by default) dtype."""
    return _new(_like_input(input, "empty_like"), dtype or input.dtype, requires_grad,
                "empty_like", like=True)


def ones_like(input, *, dtype=None, requires_grad=False):
    """ones of input's shape and (by default) dtype."""
    return _full(_like_input(input, "ones_like"), 1, dtype or input.dtype, requires_grad,
                 "ones_like", like=True)


def full_like(input, fill_value, *, dtype=None, requires_grad=False):
    """full of input's shape and (by default) dtype."""
    return _full(_like_input(input, "full_like"), fill_value, dtype or input.dtype,
                 requires_grad, "full_like", like=True)


def rand_like(input, *, dtype=None, requires_grad=False):
    """rand of input's shape and (by default) dtype."""
    return _random(_like_input(input, "rand_like"), dtype or input.dtype, requires_grad,
                   "rand_like", lambda shape, dt: _GEN[0].random(shape, dtype=dt), like=True)


def randn_like(input, *, dtype=None, requires_grad=False):
    """randn of input's shape and (by default) dtype."""
    return _random(_like_input(input, "randn_like"), dtype or input.dtype, requires_grad,
                   "randn_like", lambda shape, dt: _GEN[0].standard_normal(shape, dtype=dt),
                   like=True)


def check_device(device, fn):
    if device is not None and str(device) != "cpu":
        raise RuntimeError(f"{fn}(): tapegrad runs on the CPU only, got device {device!r}")


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


# ---------------------------------------------------------------- in-place random fills
def uniform_values(shape, low, high):
    """Draws for uniform_ (the method and nn.init's): float64 from tapegrad's generator."""
    return _GEN[0].uniform(low, high, shape)


def normal_values(shape, mean, std):
    """Draws for normal_ (the method and nn.init's): float64 from tapegrad's generator."""
    return mean + std * _GEN[0].standard_normal(shape)


def uniform_(self, low=0.0, high=1.0, *, generator=None, **bounds):
    """uniform_(from=0, to=1), PyTorch's keyword names being `from` and `to`. Written as
    self.copy_(draws): a leaf that requires grad refuses it outside no_grad, a tensor with
    history gets a gradient of zero to its old values, as in PyTorch."""
    low = bounds.pop("from", low)
    high = bounds.pop("to", high)
    _random_fill_check(self, "uniform_", "check_uniform_bounds", generator, bounds)
    low, high = float(low), float(high)
    if low > high:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found "
                           f"from={low:g} > to={high:g}")
    info = np.finfo(self.dtype.np)
    if not (info.min <= low <= info.max and info.min <= high <= info.max):
        raise RuntimeError(f"uniform_: {'from' if not info.min <= low <= info.max else 'to'} "
                           f"is out of bounds for {self.dtype.name}")
    return self.copy_(_from_array(uniform_values(tuple(self.shape), low, high), D.float64,
                                  False))


def normal_(self, mean=0.0, std=1.0, *, generator=None):
    _random_fill_check(self, "normal_", "normal_kernel_cpu", generator, {})
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    return self.copy_(_from_array(normal_values(tuple(self.shape), float(mean), float(std)),
                                  D.float64, False))


def _random_fill_check(self, fn, kernel, generator, unexpected):
    if unexpected:
        raise TypeError(f"{fn}() got an unexpected keyword argument '{next(iter(unexpected))}'")
    if generator is not None:
        raise NotImplementedError(f"{fn}(): generator objects are not supported; tapegrad "
                                  "draws from its one generator (tapegrad.manual_seed)")
    if not self.dtype.is_floating_point:
        raise NotImplementedError(f"\"{kernel}\" not implemented for "
                                  f"'{type_name(self.dtype)}' ({fn} fills floating point "
                                  "tensors only)")


# ---------------------------------------------------------------- copy and pickle
def _reduce_ex(self, proto):
    """pickle (multiprocessing, ...), as in PyTorch: the values, dtype and
    requires_grad come back as a new leaf; a gradient does not. (tapegrad.save writes
    checkpoints without pickle.)"""
    return _unpickle, (type(self), np.array(_numpy_view(self), copy=True),
                       self.requires_grad)


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


def _unpickle(cls, values, requires_grad):
    return _leaf_like(cls, from_numpy(values), requires_grad)


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
                new_tensor=new_tensor, uniform_=uniform_, normal_=normal_)
