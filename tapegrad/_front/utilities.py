"""PyTorch's non-differentiable utilities: value tests (equal, allclose, isclose, isnan,
isinf, isfinite, all, any, count_nonzero), type tests (is_tensor, is_floating_point,
numel) and constructors (as_tensor, eye, linspace).

None of them carries a gradient, so NumPy computes them on the tensors' memory; reading
values goes through _numpy_view, which is a graph break while tapegrad.compile records.
The Tensor methods are attached when this module is imported.
"""
import contextlib
import numbers
import re

import numpy as np

from . import creation as _creation
from . import dtype as D
from .creation import from_numpy, tensor, _creation_grad_check, _dtype_arg, _from_array
from .creation import _factory_out
from .device import check_device
from .._engine import sizes
from .functions import _dims_mask
from .math_ops import _check
from .promotion import from_array, promote_types, _broadcast_check, _type_name
from .tensor import Tensor, _numpy_view

__all__ = ["equal", "allclose", "isclose", "isnan", "isinf", "isfinite", "all", "any",
           "count_nonzero", "is_floating_point", "is_tensor", "numel", "as_tensor", "eye",
           "linspace"]

_HELPER_PREFIX = re.compile(r"^\w+(\(\))?: ")


@contextlib.contextmanager
def _naming(fn):
    """Errors raised by shared helpers, renamed after the function the user called (the
    helpers' own prefixes, such as 'from_numpy: ', would point at the wrong one)."""
    try:
        yield
    except (TypeError, ValueError, RuntimeError) as exc:
        if type(exc) not in (TypeError, ValueError, RuntimeError):
            raise           # (a subclass may take other constructor arguments)
        raise type(exc)(f"{fn}(): {_HELPER_PREFIX.sub('', str(exc))}") from None


def _check_other(other, fn):
    if not isinstance(other, Tensor):
        raise TypeError(f"{fn}(): argument 'other' (position 2) must be Tensor, not "
                        f"{type(other).__name__}")


# ---------------------------------------------------------------- value tests
def equal(input, other):
    """True if both have the same shape and elements (compared after type promotion, as
    PyTorch does: an int64 and a float32 tensor compare in float32)."""
    _check(input, "equal")
    _check_other(other, "equal")
    if input.shape != other.shape:
        return False
    common = promote_types(input.dtype, other.dtype).np
    a = _numpy_view(input).astype(common, copy=False)
    b = _numpy_view(other).astype(common, copy=False)
    return bool(np.array_equal(a, b))


def _tolerance(value, name, fn):
    if not isinstance(value, numbers.Real):
        raise TypeError(f"{fn}(): argument '{name}' must be float, not {type(value).__name__}")
    if value < 0:
        raise RuntimeError(f"{fn}(): {name} must be greater than or equal to zero, but got "
                           f"{value}")
    return value


def _close(input, other, rtol, atol, equal_nan, fn):
    """isclose as a NumPy bool array, computed as PyTorch computes it: exact equality, or
    |a - b| <= atol + |rtol * b| in the operands' float dtype (PyTorch's default dtype,
    float32, for int and bool operands: large int64 values round there, as in PyTorch)."""
    _check(input, fn)
    _check_other(other, fn)
    if input.dtype is not other.dtype:
        raise RuntimeError(f"{fn}(): {_type_name(input.dtype)} did not match "
                           f"{_type_name(other.dtype)} (input and other must have the same "
                           "dtype)")
    rtol = _tolerance(rtol, "rtol", fn)
    atol = _tolerance(atol, "atol", fn)
    if not isinstance(equal_nan, (bool, np.bool_)):
        raise TypeError(f"{fn}(): argument 'equal_nan' must be bool, not "
                        f"{type(equal_nan).__name__}")
    with _naming(fn):
        _broadcast_check(input, other)
    a, b = _numpy_view(input), _numpy_view(other)
    close = np.asarray(a == b)
    floating = input.dtype.is_floating_point
    if equal_nan and floating:
        close |= np.isnan(a) & np.isnan(b)
    if rtol == 0 and atol == 0:
        return close
    work = a.dtype.type if floating else np.float32
    a, b = a.astype(work, copy=False), b.astype(work, copy=False)
    with np.errstate(all="ignore"):     # inf - inf is NaN, not close, as in PyTorch
        allowed = work(atol) + np.abs(work(rtol) * b)
        actual = np.abs(a - b)
        close |= np.isfinite(actual) & (actual <= allowed)
    return close


def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    return from_array(_close(input, other, rtol, atol, equal_nan, "isclose"))


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    return bool(_close(input, other, rtol, atol, equal_nan, "allclose").all())


def _float_test(name, ufunc, int_answer):
    """isnan/isinf/isfinite: int and bool tensors hold no NaN or infinity, so their
    answer needs no values (and no graph break)."""
    def predicate(input):
        _check(input, name)
        if not input.dtype.is_floating_point:
            return from_array(np.full(input.shape, int_answer, np.bool_))
        return from_array(ufunc(_numpy_view(input)))
    predicate.__name__ = name
    return predicate


isnan = _float_test("isnan", np.isnan, False)
isinf = _float_test("isinf", np.isinf, False)
isfinite = _float_test("isfinite", np.isfinite, True)


def _axes(dim, ndim, fn):
    """NumPy axes for a dim argument (None: all of them), checked as PyTorch checks it."""
    if dim is None:
        return None
    mask = _dims_mask(dim, ndim, fn)
    return tuple(d for d in range(ndim) if mask >> d & 1)


def _truth_reduction(name, reduce):
    def fn(input, dim=None, keepdim=False):
        _check(input, name)
        if isinstance(dim, (tuple, list)) and len(dim) == 0:
            # PyTorch 2.x reduces nothing here (unlike sum and count_nonzero, which read
            # an empty dim list as "every dim")
            axes = ()
        else:
            axes = _axes(dim, input.ndim, name)
        r = reduce(_numpy_view(input), axis=axes, keepdims=bool(keepdim))
        return from_array(np.asarray(r, dtype=np.bool_))
    fn.__name__ = name
    return fn


all = _truth_reduction("all", np.all)  # noqa: A001  (PyTorch's spelling)
any = _truth_reduction("any", np.any)  # noqa: A001


def count_nonzero(input, dim=None):
    _check(input, "count_nonzero")
    axes = _axes(dim, input.ndim, "count_nonzero")
    a = _numpy_view(input)
    return from_array(np.asarray(np.count_nonzero(a, axis=axes), dtype=np.int64))


# ---------------------------------------------------------------- type tests
def is_floating_point(input):
    _check(input, "is_floating_point")
    return input.dtype.is_floating_point


def is_tensor(obj):
    return isinstance(obj, Tensor)


def numel(input):
    _check(input, "numel")
    return input.numel()


# ---------------------------------------------------------------- constructors
def _shares_as_is(arr, dt):
    """Whether from_numpy can take arr without converting it to dt (a byte-swapped array
    counts: PyTorch refuses it rather than converting it)."""
    native = arr.dtype.newbyteorder("=")
    return native in D._NUMPY and (dt is None or dt.np == native)


def as_tensor(data, dtype=None, device=None):
    """data as a tensor without a copy where possible: a NumPy array of a supported dtype
    shares its memory (writes show through both ways); a tensor of the requested dtype is
    returned itself; anything else is converted as tapegrad.tensor converts it. device:
    the CPU (tapegrad's only device)."""
    check_device(device, "as_tensor")
    with _naming("as_tensor"):
        dt = None if dtype is None else _dtype_arg(dtype)
    if isinstance(data, Tensor):
        return data if dt is None or dt is data.dtype else data.to(dt)
    if isinstance(data, np.generic):
        data = np.asarray(data)         # a NumPy scalar keeps its dtype, as in PyTorch
    elif not isinstance(data, (np.ndarray, list, tuple, numbers.Number, str, bytes)):
        if not hasattr(data, "__array__"):
            raise RuntimeError(f"as_tensor(): could not infer dtype of {type(data).__name__}")
        data = np.asarray(data)
    if isinstance(data, (str, bytes)):
        raise TypeError(f"as_tensor(): invalid data type '{type(data).__name__}'")
    with _naming("as_tensor"):
        if isinstance(data, np.ndarray) and _shares_as_is(data, dt):
            if not data.dtype.isnative:
                raise ValueError("given numpy array has byte order different from the "
                                 "native byte order. Conversion between byte orders is "
                                 "currently not supported.")
            return from_numpy(data)
        return tensor(data, dtype=dt)


def _int_arg(value, name, fn):
    """An int argument; a 0-d integer tensor counts, as in PyTorch (reading it is a graph
    break while recording)."""
    if isinstance(value, Tensor):
        with _naming(fn):
            return value.__index__()
    if not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{fn}(): argument '{name}' must be int, not {type(value).__name__}")
    return int(value)


def _named_grad_check(dt, requires_grad, fn):
    with _naming(fn):
        _creation_grad_check(dt, requires_grad)


def eye(n, m=None, dtype=None, requires_grad=False, *, device=None, out=None):
    check_device(device, "eye")
    if out is not None:
        return _factory_out(out, "eye", dtype, requires_grad, lambda dt: eye(n, m, dt))
    n = _int_arg(n, "n", "eye")
    m = n if m is None else _int_arg(m, "m", "eye")
    for name, value in (("n", n), ("m", m)):
        if value > sizes.INT64_MAX:
            raise ValueError("eye(): Overflow when unpacking long long")
        if value < 0:
            raise RuntimeError(f"eye(): {name} must be greater or equal to 0, got {value}")
    with _naming("eye"):
        dt = _dtype_arg(dtype)
    _named_grad_check(dt, requires_grad, "eye")
    sizes.check_new((n, m), dt.itemsize)     # (before NumPy allocates it)
    if n == 0 or m == 0:    # (NumPy refuses some empty shapes: (0, 2**62) float32)
        return _creation.zeros(n, m, dtype=dt, requires_grad=requires_grad)
    return _from_array(np.eye(n, m, dtype=dt.np), dt, requires_grad)


def _bound(value, name):
    if isinstance(value, Tensor):
        if value.ndim:
            raise RuntimeError(f"linspace(): linspace only supports 0-dimensional start and "
                               f"end tensors, but got {name} with {value.ndim} dimension(s).")
        return value.item()
    if not isinstance(value, numbers.Real):
        raise TypeError(f"linspace(): argument '{name}' must be a real number or a 0-dim "
                        f"tensor, not {type(value).__name__}")
    return value


def _two_sum(x, y):
    """s, e with s = fl(x + y) and s + e == x + y exactly (Knuth)."""
    s = x + y
    v = s - x
    return s, (x - (s - v)) + (y - v)


def _two_product(x, y):
    """p, e with p = fl(x * y) and p + e == x * y exactly (Dekker's splitting)."""
    p = x * y
    xh, yh = _split(x), _split(y)
    xl, yl = x - xh, y - yh
    return p, ((xh * yh - p) + xh * yl + xl * yh) + xl * yl


def _split(x):
    """x's high 26 bits (Veltkamp), so that products of halves are exact."""
    t = 134217729.0 * x                 # 2**27 + 1
    return t - (t - x)


def _fused_multiply_add(a, b, c, work):
    """a * b + c rounded once to work (float32 or float64), elementwise on float64
    arrays holding work values, with b integers. PyTorch's CPU linspace kernel is compiled
    with FMA contraction, so each of its values is rounded once, not twice."""
    if work is np.float32:
        # a * b is exact in float64 (24 bits times an integer below 2**29); the sum is
        # rounded to odd in float64, so that its rounding to float32 is the correct one
        s, e = _two_sum(a * b, c)
        even = (s.view(np.int64) & 1) == 0
        bump = np.isfinite(s) & (e != 0) & even
        s = np.where(bump, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)
        return s.astype(np.float32)
    p, pe = _two_product(a, b)
    s, se = _two_sum(c, p)
    r = s + (se + pe)
    # Dekker's split overflows near the top of the range: the plain result is right there
    return np.where(np.isfinite(r), r, c + p)


def _linspace_values(start, end, steps, npdt):
    """PyTorch's linspace: the first half counts up from start, the second half down from
    end (so both ends are exact), with start and end first converted to the dtype and the
    step in float64 for integer dtypes."""
    integral = npdt.kind == "i"
    work = np.float64 if integral else npdt.type
    first = int(start) if integral else work(start)
    last = int(end) if integral else work(end)
    if steps <= 1:
        return np.full(steps, first, npdt)
    i = np.arange(steps)
    up = i < steps // 2
    k = np.where(up, i, steps - 1 - i).astype(np.float64)
    with np.errstate(all="ignore"):     # infinite bounds give NaN, as in PyTorch
        step = (work(last) - work(first)) / work(steps - 1)
        values = _fused_multiply_add(np.where(up, step, -step).astype(np.float64), k,
                                     np.where(up, np.float64(first), np.float64(last)), work)
        return values.astype(npdt)


def linspace(start, end, steps, dtype=None, requires_grad=False, *, device=None, out=None):
    check_device(device, "linspace")
    if out is not None:
        return _factory_out(out, "linspace", dtype, requires_grad,
                            lambda dt: linspace(start, end, steps, dt))
    start, end = _bound(start, "start"), _bound(end, "end")
    steps = _int_arg(steps, "steps", "linspace")
    if steps > sizes.INT64_MAX:
        raise ValueError("linspace(): Overflow when unpacking long long")
    if steps < 0:
        raise RuntimeError("linspace(): number of steps must be non-negative")
    with _naming("linspace"):
        dt = _dtype_arg(dtype)
    if dt is D.bool_:
        raise NotImplementedError("linspace(): \"linspace_cpu\" not implemented for 'Bool'")
    _named_grad_check(dt, requires_grad, "linspace")
    sizes.check_new((steps,), dt.itemsize)   # (before NumPy computes the values)
    return _from_array(_linspace_values(start, end, steps, dt.np), dt, requires_grad)


def _attach():
    for name in ("equal", "allclose", "isclose", "isnan", "isinf", "isfinite", "all", "any",
                 "count_nonzero", "is_floating_point"):
        setattr(Tensor, name, globals()[name])


_attach()
