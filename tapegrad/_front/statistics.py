"""PyTorch's distances and statistics built from table ops: dist, cdist, cov, corrcoef;
and logspace, the factory.

dist is the p-norm of the difference, so its gradient is norm's. cdist computes as
PyTorch's CPU cdist does: for p = 2 through a matrix product of augmented rows when
compute_mode asks for it (PyTorch's "use_mm_for_euclid_dist_if_necessary": more than 25
rows in x1 or x2), else the p-norm over the broadcast differences; the gradient is that
of the composition, which is PyTorch's (with p = inf each coordinate tied for the
maximum gets the whole gradient, as in PyTorch's cdist, where dist's norm splits it).
cov and corrcoef follow PyTorch's formulas (Correlation.cpp) step by step, so their
dtypes, NaNs and warnings are PyTorch's. logspace computes base ** exponent in float64
with PyTorch's halfway rule (the first half from start, the second from end) and rounds
once to the dtype, as PyTorch's CPU kernel does: its values are PyTorch's bit for bit.
"""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import itertools
import math
import numbers
import warnings

import numpy as np

from . import dtype as D
from . import methods
from .tensor import Tensor, _is_scalar, _numpy_view, _wrap, run
from ..ops.registry import BY_NAME
from .indexing import cat, _constant
from .promotion import result_type, _type_name
from .creation import tensor, _dtype_arg, _from_array, _factory_out
from .device import check_device
from .._engine import sizes


def _tensor_arg(x, fn, name, pos):
    if not isinstance(x, Tensor):
        raise TypeError(f"{fn}(): argument '{name}' (position {pos}) must be Tensor, not "
                        f"{type(x).__name__}")


def _real_arg(x, fn, name, pos, kind="Number"):
    if isinstance(x, Tensor):
        if x.numel() != 1:
            raise RuntimeError(f"a Tensor with {x.numel()} elements cannot be converted to "
                               "Scalar")
        return x.item()
    if not _is_scalar(x):
        raise TypeError(f"{fn}(): argument '{name}' (position {pos}) must be {kind}, not "
                        f"{type(x).__name__}")
    return x


# ---------------------------------------------------------------- dist
def dist(input, other, p=2):
    """The p-norm of input - other (broadcast): p 0 counts the nonzero differences, inf
    and -inf take the largest and smallest absolute difference."""
    _tensor_arg(input, "dist", "input", 1)
    _tensor_arg(other, "dist", "other", 2)
    p = _real_arg(p, "dist", "p", 3)
    rt = result_type(input, other)
    if not rt.is_floating_point:
        raise RuntimeError(f"norm(): input dtype should be either floating point or complex. "
                           f"Got {_type_name(rt)} instead.")
    return (input - other).norm(p)


def _dist_method(self, other, p=2):
    """The p-norm of self - other (tapegrad.dist)."""
    return dist(self, other, p)


# ---------------------------------------------------------------- cdist
_MODES = {"use_mm_for_euclid_dist_if_necessary": 0, "use_mm_for_euclid_dist": 1,
          "donot_use_mm_for_euclid_dist": 2}


def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """The p-norm distances between each row of x1 (..., P, M) and each row of x2
    (..., R, M): a (..., P, R) tensor, the leading dims broadcast."""
    _tensor_arg(x1, "cdist", "x1", 1)
    _tensor_arg(x2, "cdist", "x2", 2)
    if isinstance(p, Tensor):
        p = _real_arg(p, "cdist", "p", 3, "float")
    elif not isinstance(p, numbers.Real) or isinstance(p, (bool, np.bool_)):
        raise TypeError(f"cdist(): argument 'p' (position 3) must be float, not "
                        f"{type(p).__name__}")
    p = float(p)
    if not isinstance(compute_mode, str) or compute_mode not in _MODES:
        raise ValueError(f"{compute_mode} is not a valid value for compute_mode")
    mode = _MODES[compute_mode]
    for t, name in ((x1, "X1"), (x2, "X2")):
        if t.ndim < 2:
            raise RuntimeError(f"cdist only supports at least 2D tensors, {name} got: "
                               f"{t.ndim}D")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: "
                           f"{x1.shape[-1]} X2: {x2.shape[-1]}")
    for t, name in ((x1, "X1"), (x2, "X2")):
        if not t.dtype.is_floating_point:
            raise RuntimeError(f"cdist only supports floating-point dtypes, {name} got: "
                               f"{_type_name(t.dtype)}")
    if x1.dtype is not x2.dtype:
        raise RuntimeError(f"expected scalar type {_type_name(x1.dtype)} but found "
                           f"{_type_name(x2.dtype)}")
    if not p >= 0:      # (NaN too)
        raise RuntimeError("cdist only supports non-negative p values")
    from .assembly import _broadcast_pair
    batch = _broadcast_pair(list(x1.shape[:-2]), list(x2.shape[:-2]))
    r1, r2, m = x1.shape[-2], x2.shape[-2], x1.shape[-1]
    a = x1.expand(batch + [r1, m])
    b = x2.expand(batch + [r2, m])
    if p == 2 and (mode == 1 or (mode == 0 and (r1 > 25 or r2 > 25))):
        return _euclidean_mm(a, b)
    # one CdistBackward0 row (ops/linalg.py), kinds in PyTorch's order of cases
    kind = (0 if p == 0 else 1 if p == 1 else 2 if p < 2 else 3 if p == 2 else
            4 if p == math.inf else 5)
    op = BY_NAME["cdist"]
    return _wrap(run(op, a._i, b._i, s=p, iargs=op.pack(kind=kind)))


def _euclidean_mm(a, b):
    """PyTorch's _euclidean_dist: |a|^2 - 2 a.b + |b|^2 as one matrix product of rows
    augmented with the squared norms and ones, clamped at 1e-30 before the square root."""
    an = a.pow(2).sum(-1, keepdim=True)
    bn = b.pow(2).sum(-1, keepdim=True)
    a_ = cat([a * -2, an, _ones_const(an)], -1)
    b_ = cat([b, _ones_const(bn), bn], -1)
    return a_.matmul(b_.transpose(-2, -1)).clamp_min(1e-30).sqrt()


def _ones_const(like):
    from .creation import ones
    return _constant(lambda: ones(list(like.shape), dtype=like.dtype))


# ---------------------------------------------------------------- cov / corrcoef
_DOF_WARNING = ("cov(): degrees of freedom is <= 0. Correction should be strictly less than "
                "the number of observations.")


def _weights_check(w, name, n):
    if not isinstance(w, Tensor):
        raise TypeError(f"cov(): argument '{name}' must be Tensor, not {type(w).__name__}")
    if w.ndim > 1:
        raise RuntimeError(f"cov(): expected {name} to have one or fewer dimensions but got "
                           f"{name} with {w.ndim} dimensions")
    integral = name == "fweights"
    if integral and w.dtype is not D.int64 or not integral and not w.dtype.is_floating_point:
        raise RuntimeError(f"cov(): expected {name} to have "
                           f"{'integral' if integral else 'floating point'} dtype but got "
                           f"{name} with {_type_name(w.dtype)} dtype")
    if w.numel() != n:
        raise RuntimeError(f"cov(): expected {name} to have the same numel as there are "
                           f"observations in the input but got {w.numel()} != {n}")
    if n and (_numpy_view(w) < 0).any():
        raise RuntimeError(f"cov(): {name} cannot be negative")


def cov(input, *, correction=1, fweights=None, aweights=None):
    """The covariance matrix of the variables in input's rows (observations in columns; a
    1-d input is one variable), weighted by integer frequencies fweights and float
    weights aweights, divided by the weight sum minus correction (0 or less: PyTorch's
    warning, and infinities or NaN)."""
    _tensor_arg(input, "cov", "input", 1)
    if isinstance(correction, (bool, np.bool_)) or not isinstance(correction,
                                                                  numbers.Integral):
        raise TypeError(f"cov(): argument 'correction' must be int, not "
                        f"{type(correction).__name__}")
    correction = int(correction)
    if input.ndim > 2:
        raise RuntimeError(f"cov(): expected input to have two or fewer dimensions but got "
                           f"an input with {input.ndim} dimensions")
    if input.dtype is D.bool_:
        raise RuntimeError("cov(): bool dtype is not supported for input")
    x = input.reshape(1, -1) if input.ndim < 2 else input
    n = x.shape[1]
    w = None
    if fweights is not None:
        _weights_check(fweights, "fweights", n)
        w = fweights
    if aweights is not None:
        _weights_check(aweights, "aweights", n)
        w = aweights if w is None else w * aweights
    if w is None:       # (all in Python: no value read, nothing for a replay to redo)
        # (PyTorch divides by 0-d int64 tensors; the same, in the float dtype the
        # division computes in, without an integer conversion)
        fdt = x.dtype if x.dtype.is_floating_point else D.default_float()
        avg = x.sum(1) / _constant(lambda: tensor(n, dtype=fdt))
        factor = n - correction
        if factor <= 0:
            warnings.warn(_DOF_WARNING, UserWarning, stacklevel=2)
            factor = 0
        norm_factor = _constant(lambda: tensor(factor, dtype=fdt))
    else:               # (the weights' values decide: read, as PyTorch reads them)
        w_sum = w.sum()
        if not (_numpy_view(w_sum) != 0):
            raise RuntimeError("cov(): weights sum to zero, can't be normalized")
        avg = (x * w).sum(1) / w_sum
        if correction != 0 and aweights is not None:
            norm_factor = w_sum - (w * aweights).sum() * correction / w_sum
        else:
            norm_factor = w_sum - correction
        if bool(_numpy_view(norm_factor) <= 0):
            warnings.warn(_DOF_WARNING, UserWarning, stacklevel=2)
            norm_factor = norm_factor * 0
    x = x - avg.unsqueeze(1)
    c = x.mm((x if w is None else x * w).t())
    return (c / norm_factor).squeeze()


def corrcoef(input):
    """Pearson's correlation coefficients of the variables in input's rows: cov
    normalised by the standard deviations, clipped to [-1, 1]."""
    _tensor_arg(input, "corrcoef", "input", 1)
    if input.ndim > 2:
        raise RuntimeError(f"corrcoef(): expected input to have two or fewer dimensions but "
                           f"got an input with {input.ndim} dimensions")
    c = cov(input)
    if c.ndim == 0:
        return c / c
    d = c.diagonal()
    std = d.sqrt()
    c = c / std.view(-1, 1)
    c = c / std.view(1, -1)
    return c.clamp(-1, 1)


def _cov_method(self, *, correction=1, fweights=None, aweights=None):
    """The covariance matrix of self's rows (tapegrad.cov)."""
    return cov(self, correction=correction, fweights=fweights, aweights=aweights)


# ---------------------------------------------------------------- logspace
def _bound(value, name, other_name, fn="logspace"):
    if isinstance(value, Tensor):
        if value.ndim:
            raise RuntimeError(f"{fn} only supports 0-dimensional start and end tensors, but "
                               f"got {name} with {value.ndim} dimension(s).")
        return value.item()
    if not isinstance(value, numbers.Real):
        raise TypeError(f"{fn}(): argument '{name}' must be Number, not "
                        f"{type(value).__name__}")
    return value


def logspace(start, end, steps, base=10.0, *, out=None, dtype=None, device=None,
             requires_grad=False):
    """steps values base ** e for e evenly spaced from start to end, computed as
    PyTorch's CPU logspace (float64 powers, the second half counted back from end,
    rounded once to the dtype)."""
    check_device(device, "logspace")
    if out is not None:
        return _factory_out(out, "logspace", dtype, requires_grad,
                            lambda dt: logspace(start, end, steps, base, dtype=dt))
    if isinstance(start, Tensor) and isinstance(end, Tensor) and (start.ndim or end.ndim):
        raise RuntimeError(f"logspace only supports 0-dimensional start and end tensors, but "
                           f"got start with {start.ndim} dimension(s) and end with "
                           f"{end.ndim} dimension(s).")
    start, end = _bound(start, "start", "end"), _bound(end, "end", "start")
    if isinstance(steps, Tensor):
        steps = steps.__index__()
    if not isinstance(steps, numbers.Integral) or isinstance(steps, (bool, np.bool_)):
        raise TypeError(f"logspace(): argument 'steps' (position 3) must be int, not "
                        f"{type(steps).__name__}")
    if isinstance(base, Tensor) or not isinstance(base, numbers.Real):
        raise TypeError(f"logspace(): argument 'base' (position 4) must be float, not "
                        f"{type(base).__name__}")
    steps = int(steps)
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    dt = _dtype_arg(dtype, fn="logspace")
    if dt is D.bool_:
        raise NotImplementedError("\"logspace_cpu\" not implemented for 'Bool'")
    if requires_grad and not dt.is_floating_point:
        raise RuntimeError("Only Tensors of floating point and complex dtype can require "
                           "gradients")
    sizes.check_new((steps,), dt.itemsize)
    return _from_array(_logspace_values(start, end, steps, float(base), dt.np), dt,
                       requires_grad)


def _logspace_values(start, end, steps, base, npdt):
    if steps == 0:
        return np.zeros(0, npdt)
    with np.errstate(all="ignore"):
        if steps == 1:
            v = _pow(base, float(start))
            return _cast(np.full(1, v), npdt)
        integral = npdt.kind == "i"
        if integral:     # (start and end as the dtype; their difference in int64)
            s0, s1 = _as_int64(start), _as_int64(end)
            step = np.float64(int(np.int64(s1) - np.int64(s0))) / np.float64(steps - 1)
        else:
            s0, s1 = npdt.type(start), npdt.type(end)
            step = np.float64(npdt.type(s1 - s0)) / np.float64(steps - 1)
        i = np.arange(steps, dtype=np.int64)
        half = steps // 2
        up = np.float64(s0) + step * i.astype(np.float64)
        down = np.float64(s1) - step * (steps - i - 1).astype(np.float64)
        e = np.where(i < half, up, down)
        # (libm's pow, as PyTorch's kernel calls it: NumPy's vectorised power can differ
        # in the last bit)
        return _cast(np.fromiter(map(_pow, itertools.repeat(base), e.tolist()),
                                 np.float64, steps), npdt)


def _pow(base, e):
    try:
        return math.pow(base, e)
    except (OverflowError, ValueError):     # (C's pow gives inf or NaN)
        return float(np.power(np.float64(base), np.float64(e)))


def _as_int64(x):
    return int(math.trunc(x)) if isinstance(x, float) else int(x)


def _cast(values, npdt):
    """float64 values to the dtype as C++'s static_cast (integers: truncated)."""
    if npdt.kind == "i":
        with np.errstate(all="ignore"):
            return np.trunc(values).astype(np.int64)
    return values.astype(npdt)


# ---------------------------------------------------------------- registration
def _register():
    methods.functions(dist=dist, cdist=cdist, cov=cov, corrcoef=corrcoef, logspace=logspace)
    methods.methods(dist=_dist_method, cov=_cov_method, corrcoef=corrcoef)


_register()
