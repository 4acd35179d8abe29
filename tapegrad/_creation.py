"""Making tensors: from data, filled, random (tapegrad's own seeded generator)."""
import numbers
import warnings

import numpy as np

from . import _dtype as D
from ._engine import layout as L
from ._engine import core
from ._engine.state import RECORDING
from .tensor import Tensor, E, _wrap, _array_of

_GEN = [np.random.Generator(np.random.PCG64(0))]


def manual_seed(seed):
    """Seed tapegrad's generator (used by rand, randn and, later, nn init and dropout)."""
    if not isinstance(seed, numbers.Integral):
        raise TypeError(f"manual_seed expected an int, got {type(seed).__name__}")
    _GEN[0] = np.random.Generator(np.random.PCG64(int(seed)))
    return _GEN[0]


def _size(size, fn):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    out = []
    for s in size:
        if isinstance(s, Tensor):
            s = int(s)
        if not isinstance(s, numbers.Integral) or isinstance(s, bool):
            raise TypeError(f"{fn}(): size must be a sequence of ints, got {size!r}")
        if s < 0:
            raise RuntimeError(f"{fn}: Dimension size must be non-negative.")
        out.append(int(s))
    if len(out) > L.MAXD:
        raise RuntimeError(f"{fn}(): tapegrad tensors have at most {L.MAXD} dims, got {len(out)}")
    return tuple(out)


def _dtype_arg(dtype, default=D.float32):
    if dtype is None:
        return default
    if isinstance(dtype, D.dtype):
        return dtype
    raise TypeError(f"dtype must be a tapegrad dtype (tapegrad.float32, ...), got {dtype!r}")


def _creation_grad_check(dt, requires_grad):
    if requires_grad and not dt.is_floating_point:
        raise RuntimeError("Only Tensors of floating point and complex dtype can require "
                           "gradients")


def empty(*size, dtype=None, requires_grad=False, _zero=False, _fn="empty"):
    shape = _size(size, _fn)
    dt = _dtype_arg(dtype)
    _creation_grad_check(dt, requires_grad)
    with E.lock:
        E.iargs[:len(shape)] = shape
        t = _wrap(E.call(core.new_tensor, dt.code, len(shape), _zero))
    if RECORDING[0] is not None:
        RECORDING[0].created(t._i)
    if requires_grad:
        _creation_grad_check(t.dtype, True)
        t.requires_grad_(True)
    return t


def _from_array(arr, dt, requires_grad):
    if requires_grad and not dt.is_floating_point:
        raise RuntimeError("Only Tensors of floating point and complex dtype can require "
                           "gradients")
    arr = np.asarray(arr, dtype=dt.np)
    if arr.ndim > L.MAXD:
        raise RuntimeError(f"tapegrad tensors have at most {L.MAXD} dims, got {arr.ndim}")
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


def tensor(data, dtype=None, requires_grad=False):
    """A new leaf holding a copy of data (nested lists, scalars, NumPy arrays, tensors)."""
    if isinstance(data, Tensor):
        data = data.detach().numpy()
    if isinstance(data, np.ndarray):
        dt = dtype or D.from_numpy_dtype(data.dtype if data.dtype != np.float16 else np.float32)
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
    """A tensor sharing arr's memory (writes show through both ways), as in PyTorch."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(arr).__name__})")
    dt = D.from_numpy_dtype(arr.dtype)
    if arr.ndim > L.MAXD:
        raise RuntimeError(f"tapegrad tensors have at most {L.MAXD} dims, got {arr.ndim}")
    if not arr.dtype.isnative:
        raise ValueError("from_numpy: the array is not in native byte order")
    st = arr.strides
    if any(s < 0 or s % dt.itemsize for s in st):
        raise ValueError("from_numpy: arrays with negative or unaligned strides are not "
                         "supported; pass np.ascontiguousarray(arr)")
    return _adopt(arr, dt, arr.shape, [s // dt.itemsize for s in st], 0)


def _adopt(owner, dt, shape, strides, offset):
    """A tensor over the memory of NumPy array owner (kept alive with it): dtype dt,
    shape, strides and offset in elements; the caller checked that it fits."""
    with E.lock:
        nd = len(shape)
        E.iargs[:nd] = shape
        E.iargs[nd:2 * nd] = strides
        i = E.call(core.adopt, owner.ctypes.data, max(owner.nbytes, 1), dt.code, nd, offset)
        # forget arrays whose tensors are gone *before* recording this one: the storage
        # id may be a recycled one whose release is still queued
        E.flush()
        E.ext[int(E.meta[i, L.M_SID])] = owner
    if RECORDING[0] is not None:
        RECORDING[0].created(i)
    return _wrap(i)


def full(size, fill_value, dtype=None, requires_grad=False):
    if dtype is None:
        dtype = (D.bool_ if isinstance(fill_value, bool) else
                 D.int64 if isinstance(fill_value, numbers.Integral) else D.float32)
    t = empty(*_size((size,), "full"), dtype=dtype, _fn="full")
    _array_of(t)[...] = fill_value
    if requires_grad:
        _creation_grad_check(t.dtype, True)
        t.requires_grad_(True)
    return t


def zeros(*size, dtype=None, requires_grad=False):
    return empty(*size, dtype=dtype, requires_grad=requires_grad, _zero=True, _fn="zeros")


def ones(*size, dtype=None, requires_grad=False):
    _creation_grad_check(_dtype_arg(dtype), requires_grad)
    t = empty(*size, dtype=dtype, _fn="ones")
    _array_of(t)[...] = 1
    return t.requires_grad_(True) if requires_grad else t


def arange(start, end=None, step=1, dtype=None, requires_grad=False):
    if end is None:
        start, end = 0, start
    vals = [start, end, step]
    if dtype is None:
        dtype = D.int64 if all(isinstance(v, numbers.Integral) for v in vals) else D.float32
    if step == 0:
        raise RuntimeError("arange: step must be nonzero")
    arr = np.arange(start, end, step, dtype=np.float64 if dtype.is_floating_point else np.int64)
    return _from_array(arr, dtype, requires_grad)


def rand(*size, dtype=None, requires_grad=False):
    dt = _dtype_arg(dtype)
    shape = _size(size, "rand")
    return _from_array(_GEN[0].random(shape, dtype=dt.np), dt, requires_grad)


def randn(*size, dtype=None, requires_grad=False):
    dt = _dtype_arg(dtype)
    shape = _size(size, "randn")
    return _from_array(_GEN[0].standard_normal(shape, dtype=dt.np), dt, requires_grad)


def _like(fn):
    def like(t, dtype=None, requires_grad=False):
        return fn(*t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)
    like.__name__ = fn.__name__ + "_like"
    return like


zeros_like = _like(zeros)
ones_like = _like(ones)
empty_like = _like(empty)
rand_like = _like(rand)
randn_like = _like(randn)


def full_like(t, fill_value, dtype=None, requires_grad=False):
    return full(t.shape, fill_value, dtype=dtype or t.dtype, requires_grad=requires_grad)


def check_device(device, fn):
    if device is not None and str(device) != "cpu":
        raise RuntimeError(f"{fn}(): tapegrad runs on the CPU only, got device {device!r}")


# ---------------------------------------------------------------- Tensor.new_*
# PyTorch's factories on a tensor: its dtype unless told otherwise, never its history or
# its requires_grad.
def _new_filled(fn):
    def new(self, *size, dtype=None, device=None, requires_grad=False, layout=None,
            pin_memory=False):
        check_device(device, "new_" + fn.__name__)
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
    check_device(device, "new_full")
    return full(_size((size,), "new_full"), fill_value, dtype=dtype or self.dtype,
                requires_grad=requires_grad)


def new_tensor(self, data, *, dtype=None, device=None, requires_grad=False, layout=None,
               pin_memory=False):
    if isinstance(data, Tensor):
        warnings.warn("To copy construct from a tensor, it is recommended to use "
                      "sourceTensor.detach().clone() or "
                      "sourceTensor.detach().clone().requires_grad_(True), rather than "
                      "tensor.new_tensor(sourceTensor).", UserWarning, stacklevel=2)
    check_device(device, "new_tensor")
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
        from ._promotion import _type_name
        raise NotImplementedError(f"\"{kernel}\" not implemented for "
                                  f"'{_type_name(self.dtype)}' ({fn} fills floating point "
                                  "tensors only)")


def install():
    for name in ("new_zeros", "new_ones", "new_empty", "new_full", "new_tensor", "uniform_",
                 "normal_"):
        setattr(Tensor, name, globals()[name])
