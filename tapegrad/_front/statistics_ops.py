"""Cumulative ops (cumprod, logcumsumexp, cummax, cummin), order statistics (kthvalue,
median, nanmedian, mode, quantile, nanquantile), the no-gradient utilities (unique,
unique_consecutive, bincount, histc, histogram, bucketize, searchsorted), the bitwise
functions and shifts, and floor division.

cumprod and logcumsumexp are op-table rows (ops/along.py). The others that take
gradients select elements: the selection (an order, a position) is computed with NumPy
and the values are taken with gather, so the gradient goes to the selected elements as
PyTorch's does (its value_selecting_reduction_backward); the grad_fn names are the
composing ops' (GatherBackward0), and, as for sort, they are graph breaks inside
tapegrad.compile. median() without a dim spreads the gradient evenly over the elements
equal to the median, as PyTorch's evenly_distribute_backward.
"""
import collections
import numbers

import numpy as np

from . import dtype as D
from . import methods
from .indexing import _take
from .math_ops import _along, _check, _int_dim, _reduction_dtype
from .promotion import _type_name, from_array, result_type
from .tensor import Tensor, _dim, _is_scalar, _numpy_view, not_tensor

_ret = {name: collections.namedtuple(name, fields) for name, fields in (
    ("cummax", ["values", "indices"]), ("cummin", ["values", "indices"]),
    ("kthvalue", ["values", "indices"]), ("median", ["values", "indices"]),
    ("nanmedian", ["values", "indices"]), ("mode", ["values", "indices"]),
    ("histogram", ["hist", "bin_edges"]))}


def _index(arr):
    return from_array(np.asarray(arr, np.int64))       # (from_array copies a strided one)


def _is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


# ---------------------------------------------------------------- cumulative
def cumprod(input, dim, *, dtype=None):
    """The cumulative product along dim (PyTorch's gradient, exact with zeros)."""
    _check(input, "cumprod")
    _int_dim(dim, "cumprod")
    d = -1 if input.ndim == 0 else _dim(dim, input.ndim, "cumprod")
    input = _reduction_dtype(input, dtype, "cumprod")
    if not input.dtype.is_floating_point:
        a = _numpy_view(input).astype(np.int64)
        return from_array(np.cumprod(a, axis=d if a.ndim else None).reshape(a.shape))
    return _along("cumprod", input, d, kind=0)


def cumprod_(self, dim, *, dtype=None):
    """In-place cumprod."""
    r = cumprod(self, dim, dtype=dtype)
    return self.copy_(r)


def logcumsumexp(input, dim):
    """log(cumsum(exp(x))) along dim, computed without overflow."""
    _check(input, "logcumsumexp")
    _int_dim(dim, "logcumsumexp")
    d = -1 if input.ndim == 0 else _dim(dim, input.ndim, "logcumsumexp")
    if not input.dtype.is_floating_point:
        raise NotImplementedError("\"logcumsumexp_out_cpu\" not implemented for "
                                  f"'{_type_name(input.dtype)}'")
    return _along("logcumsumexp", input, d, kind=1)


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _cum_extreme(name):
    def fn(input, dim):
        _check(input, name)
        _int_dim(dim, name)
        if input.ndim == 0:
            _dim(dim, 1, name)
            return _ret[name](input.clone(), _index(np.zeros((), np.int64)))
        d = _dim(dim, input.ndim, name)
        a = np.moveaxis(_numpy_view(input), d, -1)
        # (np.empty: calloc's fresh pages would fault in inside the kernel)
        idx = np.empty(a.shape, np.int64)
        pos = np.empty(a.shape, np.int64)
        if a.size:
            # (float lines in their dtype: a converted copy costs more than the kernel;
            # along the last dim of a contiguous tensor, no copy at all)
            lines = np.ascontiguousarray(a.reshape(-1, a.shape[-1]),
                                         a.dtype if a.dtype in _FLOATS else np.int64)
            _line_kernel("cum_extreme_lines")(lines, name == "cummax",
                                              int(np.prod(input.shape[d + 1:])),
                                              idx.reshape(lines.shape), pos.reshape(lines.shape))
        if d != input.ndim - 1:
            idx, pos = np.moveaxis(idx, -1, d), np.moveaxis(pos, -1, d)
        idx = _index(idx)
        if input.dtype is D.bool_ or not input.dtype.is_floating_point:
            return _ret[name](from_array(np.take_along_axis(_numpy_view(input), _numpy_view(idx),
                                                            d)), idx)
        # gather's values and gradient, from the kernel's positions (valid by construction)
        return _ret[name](_take(input, "gather", pos, idx), idx)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"The running {'maximum' if name == 'cummax' else 'minimum'} along dim and "
                  "its indices (the last of equal values; NaN propagates), as PyTorch.")
    return fn


cummax = _cum_extreme("cummax")
cummin = _cum_extreme("cummin")


# ---------------------------------------------------------------- order statistics
def _select(input, d, idx, keepdim, name):
    """values and indices from an index array (keepdim shape) into input along d."""
    it = _index(idx)
    if input.dtype.is_floating_point:
        # gather's row, from positions made here (idx is valid by construction: gather's
        # own checks and positions cost more than the selection)
        nd = input.ndim
        cs = np.cumprod([1] + list(input.shape[:0:-1]))[::-1]
        pos = np.asarray(idx, np.int64) * cs[d]
        for k in range(nd):
            if k != d:
                pos = pos + (np.arange(idx.shape[k], dtype=np.int64) * cs[k]).reshape(
                    [-1 if m == k else 1 for m in range(nd)])
        v = _take(input, "gather", np.ascontiguousarray(pos, np.int64), it)
    else:
        v = from_array(np.take_along_axis(_numpy_view(input), idx, d))
    if not keepdim:
        v = v.squeeze(d)
        it = it.squeeze(d)
    return _ret[name](v, it)


def _order(a, axis):
    """A stable ascending order along axis, NaN last."""
    return np.argsort(a, axis=axis, kind="stable")


def _dim_or_all(input, dim, name):
    _int_dim(dim, name)
    if input.ndim == 0:
        _dim(dim, 1, name)
        return None
    return _dim(dim, input.ndim, name)


def kthvalue(input, k, dim=-1, keepdim=False):
    """The k-th smallest element along dim and its index."""
    _check(input, "kthvalue")
    if not _is_int(k):
        raise TypeError(f"kthvalue(): argument 'k' (position 2) must be int, not "
                        f"{type(k).__name__}")
    d = _dim_or_all(input, dim, "kthvalue")
    n = 1 if d is None else input.shape[d]
    if k < 1 or k > n:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension "
                           f"{0 if d is None else d}")
    if d is None:
        return _ret["kthvalue"](input.clone(), _index(np.zeros((), np.int64)))
    b = np.moveaxis(_numpy_view(input), d, -1)
    lines = np.ascontiguousarray(b.reshape(-1, b.shape[-1]),
                                 np.float64 if b.dtype.kind == "f" else np.int64)
    out = np.empty(lines.shape[0], np.int64)
    _line_kernel("kth_lines")(lines, np.full(lines.shape[0], k - 1, np.int64), out)
    idx = np.moveaxis(out.reshape(b.shape[:-1] + (1,)), -1, d)
    return _select(input, d, idx, keepdim, "kthvalue")


_SPECIAL = {}


def _line_kernel(name):
    """A line kernel of ops/special.py (kth_lines, cum_extreme_lines), loaded (compiled)
    on first use."""
    if name not in _SPECIAL:
        from .._engine.cache import kernel_cache
        with kernel_cache():
            from ..ops import special
        _SPECIAL[name] = getattr(special, name)
    return _SPECIAL[name]


def _median_dim(input, dim, keepdim, name, ignore_nan):
    d = _dim_or_all(input, dim, name)
    if d is None:
        return _ret[name](input.clone(), _index(np.zeros((), np.int64)))
    if input.shape[d] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
    # PyTorch's order is (value, index): the element of rank k in it, by a selection
    # (NaN last), then the right one among the values equal to it (ops/special.py)
    b = np.moveaxis(_numpy_view(input), d, -1)
    n = b.shape[-1]
    lines = np.ascontiguousarray(b.reshape(-1, n), b.dtype if b.dtype in _FLOATS else
                                 np.int64)
    pick = np.empty(len(lines), np.int64)
    _line_kernel("median_lines")(lines, ignore_nan, pick)
    idx = np.moveaxis(pick.reshape(b.shape[:-1] + (1,)), -1, d)
    return _select(input, d, idx, keepdim, name)


def _median_all(input, name, ignore_nan):
    a = _numpy_view(input).reshape(-1)
    if a.size == 0:
        return input.new_full((), float("nan")) if input.dtype.is_floating_point else \
            _raise_empty(name)
    s = np.sort(a, kind="stable")
    if a.dtype.kind == "f" and np.isnan(s[-1]):
        cnt = int(np.count_nonzero(~np.isnan(s))) if ignore_nan else 0
        v = s[(cnt - 1) // 2] if cnt else np.nan
    else:
        v = s[(a.size - 1) // 2]
    if not input.dtype.is_floating_point:
        return from_array(np.asarray(v, a.dtype))
    v = np.asarray(v, a.dtype)
    hit = (a == v) | (np.isnan(a) & np.isnan(v))
    w = hit / max(int(hit.sum()), 1)
    # the value exactly, plus a zero whose gradient is the even split over the ties
    x = input.reshape(-1)
    wt = from_array(w.astype(a.dtype))
    if not np.isfinite(v):          # (NaN or an infinity: the weighted sum of the hits is v)
        return (x.masked_fill(from_array(~hit), 0) * wt).sum()
    return from_array(v.copy()) + (_zero(x) * wt).sum()


def _zero(x):
    """Zeros whose gradient with respect to x is 1 (0 at x's non-finite elements, where
    x - x is NaN)."""
    z = x - x.detach()
    bad = ~np.isfinite(_numpy_view(x))
    return z.masked_fill(from_array(bad), 0) if bad.any() else z


def _raise_empty(name):
    raise IndexError(f"{name}(): Expected reduction dim to be specified for input.numel() "
                     "== 0.")


def median(input, dim=None, keepdim=False):
    """The lower median of all elements (NaN if any), or along dim with its index."""
    _check(input, "median")
    if dim is None:
        if keepdim is not False:
            raise TypeError("median() received an invalid combination of arguments: "
                            "keepdim needs dim")
        return _median_all(input, "median", False)
    return _median_dim(input, dim, keepdim, "median", False)


def nanmedian(input, dim=None, keepdim=False):
    """median ignoring NaN (NaN only where every element is)."""
    _check(input, "nanmedian")
    if dim is None:
        if keepdim is not False:
            raise TypeError("nanmedian() received an invalid combination of arguments: "
                            "keepdim needs dim")
        return _median_all(input, "nanmedian", True)
    return _median_dim(input, dim, keepdim, "nanmedian", True)


def mode(input, dim=-1, keepdim=False):
    """The most frequent value along dim (the smallest of equally frequent ones) and the
    index of its last occurrence, as PyTorch's CPU kernel."""
    _check(input, "mode")
    d = _dim_or_all(input, dim, "mode")
    if d is None:
        return _ret["mode"](input.clone(), _index(np.zeros((), np.int64)))
    if input.shape[d] == 0:
        raise IndexError(f"mode(): Expected reduction dim {d} to have non-zero size.")
    a = np.moveaxis(_numpy_view(input), d, -1)
    lines = np.ascontiguousarray(a.reshape(-1, a.shape[-1]),
                                 a.dtype if a.dtype in _FLOATS else np.int64)
    # the lines' values sorted (NumPy's vectorised sort; no argsort needed), the longest
    # run in them, then its value's last occurrence (ops/special.py)
    last = np.empty(len(lines), np.int64)
    _line_kernel("mode_lines")(np.sort(lines, axis=1), lines, last)
    idx = last.reshape(a.shape[:-1] + (1,))
    return _select(input, d, np.moveaxis(idx, -1, d), keepdim, "mode")


_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(name, ignore_nan):
    def fn(input, q, dim=None, keepdim=False, *, interpolation="linear"):
        _check(input, name)
        if not input.dtype.is_floating_point:
            raise RuntimeError(f"{name}() input tensor must be either float or double dtype")
        if isinstance(q, Tensor):
            if q.dtype is not input.dtype:
                raise RuntimeError(f"{name}() q tensor must be same dtype as the input tensor")
            if q.ndim > 1:
                raise RuntimeError(f"{name}() q must be a scalar or 1D tensor")
            qa = _numpy_view(q).astype(input.dtype.np)
            scalar = q.ndim == 0
        elif isinstance(q, numbers.Real) and not isinstance(q, bool):
            qa = np.asarray(q, input.dtype.np)
            scalar = True
        else:
            raise TypeError(f"{name}() received an invalid combination of arguments: q must "
                            f"be float or Tensor, not {type(q).__name__}")
        if not isinstance(interpolation, str):
            raise TypeError(f"{name}(): argument 'interpolation' must be str, not "
                            f"{type(interpolation).__name__}")
        if input.numel() == 0:
            raise RuntimeError(f"{name}() input tensor must be non-empty")
        for v in qa.reshape(-1):
            if not 0 <= v <= 1:
                raise RuntimeError(f"{name}() q values must be in the range [0, 1]"
                                   if not scalar else
                                   f"{name}() q must be in the range [0, 1] but got {float(v)}")
        if interpolation not in _INTERPOLATIONS:
            raise RuntimeError(f"{name}() interpolation must be one of linear, lower, higher, "
                               f"midpoint or nearest, but got {interpolation}")
        if dim is None:
            x = input.reshape(-1)
            d = 0
        else:
            _int_dim(dim, name)
            d = _dim(dim, max(input.ndim, 1), name)
            x = input.reshape(1) if input.ndim == 0 else input
        a = _numpy_view(x)
        n = a.shape[d]
        order = _order(a, d)
        dt = a.dtype.type
        shp = [1 if i == d else s for i, s in enumerate(a.shape)]
        nans = np.isnan(a).sum(axis=d, keepdims=True)
        qs = qa.reshape(-1)
        outs = []
        for qv in qs:
            if ignore_nan:
                ranks = (qv * ((n - nans) - 1).astype(dt)).astype(dt)
                ranks = np.where(ranks < 0, dt(0), ranks).astype(dt)
            else:
                ranks = np.full(shp, qv * dt(n - 1), dt)
                ranks = np.where(nans > 0, dt(n - 1), ranks).astype(dt)
            if interpolation in ("lower", "higher", "nearest"):
                r = {"lower": np.floor, "higher": np.ceil, "nearest": np.rint}[interpolation](ranks)
                v = x.gather(d, _index(np.take_along_axis(order, r.astype(np.int64), d)))
            else:
                below = ranks.astype(np.int64)
                above = np.ceil(ranks).astype(np.int64)
                w = np.full(shp, 0.5, dt) if interpolation == "midpoint" else \
                    (ranks - below.astype(dt)).astype(dt)
                lo = x.gather(d, _index(np.take_along_axis(order, below, d)))
                hi = x.gather(d, _index(np.take_along_axis(order, above, d)))
                wt = from_array(w)
                # PyTorch's lerp: from the nearer end
                small = from_array(w < 0.5)
                v = (lo + wt * (hi - lo)).where(small, hi - (hi - lo) * (1 - wt))
            if dim is None:
                v = v.reshape([1] * input.ndim) if keepdim else v.reshape(())
            elif not keepdim:
                v = v.squeeze(d) if input.ndim else v.reshape(())
            elif input.ndim == 0:
                v = v.reshape(())
            outs.append(v)
        if scalar:
            return outs[0]
        from .indexing import stack
        return stack(outs) if outs else input.new_empty((0,))
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"The q-th quantiles along dim (of all elements by default), interpolated "
                  f"as PyTorch's{' (NaN ignored)' if ignore_nan else ''}.")
    return fn


quantile = _quantile("quantile", False)
nanquantile = _quantile("nanquantile", True)


# ---------------------------------------------------------------- no-gradient utilities
def _bool_arg(v, fn, name):
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{fn}(): argument '{name}' must be bool, not {type(v).__name__}")
    return bool(v)


def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """The distinct elements (or slices along dim), sorted, with the inverse indices and
    counts when asked (NaN values are distinct, as in PyTorch)."""
    _check(input, "unique")
    for nm, v in (("sorted", sorted), ("return_inverse", return_inverse),
                  ("return_counts", return_counts)):
        _bool_arg(v, "unique", nm)
    a = _numpy_view(input)
    if dim is None:
        flat = a.reshape(-1)
        order = np.argsort(flat, kind="stable")
        s = flat[order]
        new = np.ones(s.shape, bool)
        if s.size:
            new[1:] = s[1:] != s[:-1]       # (NaN != NaN: each NaN its own value)
        groups = np.cumsum(new) - 1
        out = s[new]
        inv = np.empty(flat.shape, np.int64)
        inv[order] = groups
        inv = inv.reshape(a.shape)
        counts = np.bincount(groups, minlength=out.size).astype(np.int64) if s.size else \
            np.zeros(0, np.int64)
    else:
        d = _dim(dim, max(a.ndim, 1), "unique")
        if a.ndim == 0:
            raise IndexError("unique(): dim is out of range for a 0-d tensor")
        out, inv, counts = np.unique(a, return_inverse=True, return_counts=True, axis=d)
        inv = inv.reshape(-1)
    res = [from_array(out.astype(a.dtype))]
    if return_inverse:
        res.append(_index(inv))
    if return_counts:
        res.append(_index(counts))
    return res[0] if len(res) == 1 else tuple(res)


def unique_consecutive(input, return_inverse=False, return_counts=False, dim=None):
    """Each run of equal consecutive elements (or slices along dim) once."""
    _check(input, "unique_consecutive")
    _bool_arg(return_inverse, "unique_consecutive", "return_inverse")
    _bool_arg(return_counts, "unique_consecutive", "return_counts")
    a = _numpy_view(input)
    if dim is None:
        lines = a.reshape(-1, 1)
        d = None
    else:
        if a.ndim == 0:
            raise IndexError("unique_consecutive(): dim is out of range for a 0-d tensor")
        d = _dim(dim, a.ndim, "unique_consecutive")
        m = np.moveaxis(a, d, 0)
        lines = m.reshape(m.shape[0], -1)
    n = lines.shape[0]
    new = np.ones(n, bool)
    if n > 1:
        new[1:] = (lines[1:] != lines[:-1]).any(axis=1)
    starts = np.flatnonzero(new)
    if d is None:
        out = a.reshape(-1)[starts]
    else:
        out = np.take(a, starts, axis=d)
    inv = (np.cumsum(new) - 1).astype(np.int64)
    counts = np.diff(np.append(starts, n)).astype(np.int64)
    res = [from_array(np.ascontiguousarray(out))]
    if return_inverse:
        res.append(_index(inv.reshape(a.shape) if d is None else inv))
    if return_counts:
        res.append(_index(counts))
    return res[0] if len(res) == 1 else tuple(res)


def bincount(input, weights=None, minlength=0):
    """Counts (or summed weights) of each non-negative integer of a 1-d tensor."""
    _check(input, "bincount")
    if not _is_int(minlength):
        raise TypeError(f"bincount(): argument 'minlength' must be int, not "
                        f"{type(minlength).__name__}")
    if input.dtype.is_floating_point or input.dtype is D.bool_:
        raise NotImplementedError(f"\"bincount_cpu\" not implemented for "
                                  f"'{_type_name(input.dtype)}'")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    a = _numpy_view(input)
    if a.ndim != 1 or (a.size and a.min() < 0):
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is not None:
        if not isinstance(weights, Tensor):
            raise TypeError(f"bincount(): argument 'weights' must be Tensor, not "
                            f"{type(weights).__name__}")
        w = _numpy_view(weights)
        if w.ndim != 1 or w.shape[0] != a.shape[0]:
            raise RuntimeError("weights should be 1-d and have the same length as input")
        dt = np.float32 if weights.dtype is D.float32 else np.float64
        return from_array(np.bincount(a, w.astype(np.float64), minlength).astype(dt))
    return _index(np.bincount(a, minlength=minlength))


def _float_only(input, kernel):
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"\"{kernel}\" not implemented for "
                                  f"'{_type_name(input.dtype)}'")


def _g(v):
    """A number as C++ streams print it (PyTorch's messages): 6 significant digits, NaN with
    its sign."""
    v = float(v)
    if v != v:
        return "-nan" if np.signbit(v) else "nan"
    return f"{v:g}"


def _histogram_counts(a, edges, weight, dt):
    """PyTorch's binning: bin i holds edges[i] <= x < edges[i+1], the last bin includes
    its right edge, values outside (and NaN) are dropped."""
    n = len(edges) - 1
    a = a.reshape(-1)
    keep = (a >= edges[0]) & (a <= edges[-1])
    pos = np.searchsorted(edges, a[keep], side="right") - 1
    pos = np.minimum(pos, n - 1)
    w = None if weight is None else weight.reshape(-1)[keep].astype(np.float64)
    return np.bincount(pos, w, minlength=n).astype(dt)


def histc(input, bins=100, min=0, max=0):
    """A histogram of bins equal bins over [min, max] (the data's range when both are
    0); elements outside are ignored."""
    _check(input, "histc")
    _float_only(input, "histogram_cpu")
    if not _is_int(bins):
        raise TypeError(f"histc(): argument 'bins' must be int, not {type(bins).__name__}")
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for "
                           "dimension 0")
    a = _numpy_view(input)
    dt = a.dtype
    lo, hi = dt.type(min), dt.type(max)
    if lo == hi and a.size:
        lo, hi = a.min(), a.max()
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise RuntimeError(f"torch.histc: range of [{_g(lo)}, {_g(hi)}] is not finite")
    if lo > hi:
        raise RuntimeError("torch.histc: max must be larger than min")
    edges = np.linspace(lo, hi, bins + 1).astype(dt)
    # PyTorch's bin of x: (x - lo) * bins / (hi - lo), truncated, the top edge in the last
    x = a.reshape(-1)
    x = x[(x >= lo) & (x <= hi)]
    pos = ((x - lo) * dt.type(bins) / (hi - lo)).astype(np.int64)
    pos = np.minimum(pos, bins - 1)
    del edges
    return from_array(np.bincount(pos, minlength=bins).astype(dt))


def histogram(input, bins, *, range=None, weight=None, density=False):
    """hist and bin_edges of input (bins an int or the edges), weighted, as a density."""
    _check(input, "histogram")
    _float_only(input, "histogramdd")
    a = _numpy_view(input)
    dt = a.dtype
    if isinstance(bins, Tensor):
        if range is not None:
            raise TypeError("histogram() received an invalid combination of arguments: "
                            "range= with bins given as a tensor")
        edges = _numpy_view(bins).astype(dt)
        if edges.ndim != 1:
            raise RuntimeError("torch.histogramdd: bins tensor should have one dimension, but "
                               f"got {edges.ndim} dimensions in the bins tensor for dimension 0")
        if edges.size < 1:
            raise RuntimeError("torch.histogramdd: bins tensor should have at least 1 element, "
                               "but got 0 elements in the bins tensor for dimension 0")
    elif _is_int(bins):
        if bins <= 0:
            raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for "
                               "dimension 0")
        if range is None:
            lo, hi = (a.min(), a.max()) if a.size else (dt.type(0), dt.type(0))
        else:
            lo, hi = dt.type(range[0]), dt.type(range[1])
            if lo > hi:
                raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got "
                                   f"min {_g(lo)} max {_g(hi)} for dimension 0")
        if lo == hi:
            lo, hi = lo - dt.type(0.5), hi + dt.type(0.5)
        edges = _linspace(lo, hi, bins + 1, dt)
    else:
        raise TypeError(f"histogram(): argument 'bins' must be int or Tensor, not "
                        f"{type(bins).__name__}")
    w = None
    if weight is not None:
        if not isinstance(weight, Tensor):
            raise TypeError(f"histogram(): argument 'weight' must be Tensor, not "
                            f"{type(weight).__name__}")
        if tuple(weight.shape) != tuple(input.shape):
            raise RuntimeError("torch.histogramdd: if weight tensor is provided it should "
                               "have the same shape as the input tensor excluding its "
                               f"innermost dimension, but got input with shape "
                               f"{list(input.shape) + [1]} and weight with shape "
                               f"{list(weight.shape)}")
        w = _numpy_view(weight)
    hist = _histogram_counts(a, edges, w, np.float64)
    if density:
        hist = hist / (hist.sum() * np.diff(edges.astype(np.float64)))
    return _ret["histogram"](from_array(hist.astype(dt)), from_array(edges))


def _linspace(lo, hi, steps, dt):
    """PyTorch's CPU linspace in dtype dt: the first half stepped up from lo, the second
    down from hi."""
    lo, hi = dt.type(lo), dt.type(hi)
    step = (hi - lo) / dt.type(max(steps - 1, 1))
    i = np.arange(steps)
    up = lo + step * i.astype(dt)
    down = hi - step * (steps - 1 - i).astype(dt)
    return np.where(i < steps // 2, up, down).astype(dt)


def _search_args(out_int32, right, side, fn):
    _bool_arg(out_int32, fn, "out_int32")
    _bool_arg(right, fn, "right")
    if out_int32:
        raise RuntimeError(f"{fn}(): out_int32=True needs int32, which tapegrad does not "
                           "have (tensors are float32, float64, int64 or bool)")
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.{fn}(): side can only be 'left' or 'right' but got "
                               f"{side}")
        if right and side == "left":
            raise RuntimeError(f"torch.{fn}(): side and right can't be set to opposites, got side "
                               f"of left while right was True")
        right = side == "right"
    return "right" if right else "left"


def _search_dtype(seq, x):
    if isinstance(x, Tensor) and isinstance(seq, Tensor):
        return result_type(seq, x).np
    return None


def searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None,
                 sorter=None):
    """For each value, its insertion index into the innermost dim of sorted_sequence
    (batched over the leading dims)."""
    _check(sorted_sequence, "searchsorted", "sorted_sequence")
    side = _search_args(out_int32, right, side, "searchsorted")
    seq = _numpy_view(sorted_sequence)
    scalar = not isinstance(input, Tensor)
    if scalar and not _is_scalar(input):
        raise TypeError(f"searchsorted(): argument 'input' (position 2) must be Tensor, not "
                        f"{type(input).__name__}")
    x = np.asarray(input) if scalar else _numpy_view(input)
    if seq.ndim == 0:
        raise RuntimeError("torch.searchsorted(): boundaries tensor should have positive "
                           "dimension, but got 0 dimension")
    if sorter is not None:
        if not isinstance(sorter, Tensor) or sorter.dtype is not D.int64:
            raise RuntimeError("torch.searchsorted(): sorter must be a tensor of long dtype")
        so = _numpy_view(sorter)
        if so.shape != seq.shape:
            raise RuntimeError("torch.searchsorted(): boundary and sorter must have the same "
                               "size, but got boundary tensor "
                               f"{list(seq.shape)}and got sorter tensor {list(so.shape)}")
        if so.size and (so.min() < 0 or so.max() >= seq.shape[-1]):
            raise RuntimeError("torch.searchsorted(): sorter index out of range")
        seq = np.take_along_axis(seq, so, -1)
    if seq.ndim > 1 and (x.ndim != seq.ndim or x.shape[:-1] != seq.shape[:-1]):
        raise RuntimeError("torch.searchsorted(): boundaries tensor should be 1 dimension or "
                           "the first N-1 dimensions of boundaries tensor and input value "
                           "tensor must match, but we got boundaries tensor "
                           f"{list(seq.shape)} and input value tensor {list(x.shape)}")
    if seq.ndim == 1:
        r = np.searchsorted(seq, x, side=side)
    else:
        s2 = seq.reshape(-1, seq.shape[-1])
        x2 = x.reshape(-1, x.shape[-1])
        r = np.stack([np.searchsorted(s2[i], x2[i], side=side) for i in range(len(s2))]) \
            if len(s2) else np.zeros(x2.shape, np.int64)
        r = r.reshape(x.shape)
    return _index(np.asarray(r, np.int64))


def bucketize(input, boundaries, *, out_int32=False, right=False):
    """The bucket of each value between 1-d boundaries (right: boundaries[i-1] <= x <
    boundaries[i], else boundaries[i-1] < x <= boundaries[i])."""
    if not isinstance(input, Tensor) and not _is_scalar(input):
        raise TypeError(f"bucketize(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    _check(boundaries, "bucketize", "boundaries", 2)
    if boundaries.ndim != 1:
        raise RuntimeError("boundaries tensor must be 1 dimension, but got dim("
                           f"{boundaries.ndim})")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


# ---------------------------------------------------------------- bitwise, shifts, //
def _int_operands(fn, kernel, a, b):
    rt = result_type(a, b)
    if rt.is_floating_point:
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{_type_name(rt)}'")
    av = _numpy_view(a) if isinstance(a, Tensor) else np.asarray(a)
    bv = _numpy_view(b) if isinstance(b, Tensor) else np.asarray(b)
    return rt, av, bv


def _bitwise_fn(name):
    meth = getattr(Tensor, f"bitwise_{name}", None) or methods.METHODS[f"bitwise_{name}"]

    def fn(input, other):
        if not isinstance(input, Tensor):
            if _is_scalar(input) and isinstance(other, Tensor):
                return meth(other, input)
            raise not_tensor(f"bitwise_{name}", input)
        return meth(input, other)
    fn.__name__ = fn.__qualname__ = f"bitwise_{name}"
    fn.__doc__ = f"Elementwise bitwise {name} of integer or bool tensors (logical for bool)."
    return fn


def _shift(name, np_fn, kernel):
    def fn(input, other):
        if not isinstance(input, Tensor) and not isinstance(other, Tensor):
            raise not_tensor(name, input)
        for v in (input, other):
            if not isinstance(v, Tensor) and not _is_scalar(v):
                return NotImplemented
        rt, av, bv = _int_operands(name, kernel, input, other)
        av = av.astype(np.int64)
        bv = bv.astype(np.int64)
        # PyTorch: a shift by 64 or more (or negative) gives 0 (or -1 right-shifting a
        # negative value)
        big = (bv < 0) | (bv >= 64)
        safe = np.where(big, 0, bv)
        r = np_fn(av, safe)
        if np_fn is np.right_shift:
            r = np.where(big, np.where(av < 0, -1, 0), r)
        else:
            r = np.where(big, 0, r)
        return from_array(np.asarray(r, rt.np))
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise {name.replace('_', ' ')} of integer tensors."
    return fn


bitwise_left_shift = _shift("bitwise_left_shift", np.left_shift, "lshift_cpu")
bitwise_right_shift = _shift("bitwise_right_shift", np.right_shift, "rshift_cpu")


def _lshift(self, other):
    """self << other."""
    if not (isinstance(other, Tensor) or _is_scalar(other)):
        return NotImplemented
    return bitwise_left_shift(self, other)


def _rshift(self, other):
    """self >> other."""
    if not (isinstance(other, Tensor) or _is_scalar(other)):
        return NotImplemented
    return bitwise_right_shift(self, other)


def _rlshift(self, other):
    """other << self, other a Python scalar."""
    return bitwise_left_shift(other, self) if _is_scalar(other) else NotImplemented


def _rrshift(self, other):
    """other >> self, other a Python scalar."""
    return bitwise_right_shift(other, self) if _is_scalar(other) else NotImplemented


def _bitwise_not(input):
    """~input for an integer or bool tensor."""
    if not isinstance(input, Tensor):
        raise not_tensor("bitwise_not", input)
    return methods.METHODS["bitwise_not"](input)


def _floor_div_arrays(input, other):
    rt = result_type(input, other)
    av = (_numpy_view(input) if isinstance(input, Tensor) else np.asarray(input)).astype(rt.np)
    bv = (_numpy_view(other) if isinstance(other, Tensor) else np.asarray(other)).astype(rt.np)
    return rt, av, bv


def floor_divide(input, other):
    """input / other rounded down (PyTorch's floor semantics; an integer division by 0 is
    its RuntimeError). The result takes no gradient (PyTorch has none)."""
    if not isinstance(input, Tensor):
        raise not_tensor("floor_divide", input)
    if not (isinstance(other, Tensor) or _is_scalar(other)):
        raise not_tensor("floor_divide", other, "other", 2)
    return _div_rounded(input, other, "floor", None)


def _div_rounded(input, other, mode, grad_from):
    rt, av, bv = _floor_div_arrays(input, other)
    if rt is D.bool_:
        rt = D.int64
        av, bv = av.astype(np.int64), bv.astype(np.int64)
    if not rt.is_floating_point:
        if np.any(bv == 0):
            raise RuntimeError("ZeroDivisionError")
        if mode == "floor":
            r = np.floor_divide(av, bv)
        else:
            q = np.floor_divide(np.abs(av), np.abs(bv))
            r = np.where((av < 0) != (bv < 0), -q, q)
        return from_array(np.asarray(r, np.int64))
    with np.errstate(divide="ignore", invalid="ignore"):
        if mode == "trunc":
            r = np.trunc(av / bv)
        else:
            r = _py_floor_div(av, bv)
    return from_array(np.asarray(r, rt.np))


def _py_floor_div(a, b):
    """PyTorch's div_floor_floating: from fmod, so a // b matches Python's on floats."""
    mod = np.fmod(a, b)
    div = (a - mod) / b
    fix = (mod != 0) & ((b < 0) != (mod < 0))
    div = np.where(fix, div - 1, div)
    fl = np.floor(div)
    fl = np.where(div - fl > 0.5, fl + 1, fl)
    out = np.where(div != 0, fl, np.copysign(np.zeros_like(div), a / b))
    return np.where(b == 0, a / b, out)


def _floordiv(self, other):
    """self // other."""
    if not (isinstance(other, Tensor) or _is_scalar(other)):
        return NotImplemented
    return floor_divide(self, other)


def _rfloordiv(self, other):
    """other // self, other a Python scalar."""
    if not _is_scalar(other):
        return NotImplemented
    return _div_rounded(other, self, "floor", None)


# ---------------------------------------------------------------- special functions
def _special(name, kind, doc):
    def fn(input):
        _check(input, name)
        if not input.dtype.is_floating_point:
            input = input.to(D.default_float())
        return _along(name, input, -1, kind=kind, n=0)

    def fn_(self):
        _check(self, f"{name}_")
        if not self.dtype.is_floating_point:
            raise RuntimeError(f"result type Float can't be cast to the desired output type "
                               f"{_type_name(self.dtype)}")
        return self.copy_(fn(self.clone()))   # (the backward reads the old values)
    fn.__name__ = fn.__qualname__ = name
    fn_.__name__ = fn_.__qualname__ = name + "_"
    fn.__doc__ = doc
    fn_.__doc__ = f"In-place {name}."
    return fn, fn_


lgamma, lgamma_ = _special("lgamma", 0, "log |Gamma(x)|, elementwise.")
digamma, digamma_ = _special("digamma", 1, "The logarithmic derivative of Gamma, elementwise "
                             "(-inf at 0, NaN at negative integers, as PyTorch).")
erfinv, erfinv_ = _special("erfinv", 2, "The inverse of erf, elementwise (+-inf at +-1, NaN "
                           "outside [-1, 1]).")


def polygamma(n, input):
    """The n-th derivative of digamma, elementwise (n = 0: digamma)."""
    if not _is_int(n):
        raise TypeError(f"polygamma(): argument 'n' (position 1) must be int, not "
                        f"{type(n).__name__}")
    _check(input, "polygamma", "input", 2)
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    if not input.dtype.is_floating_point:
        input = input.to(D.default_float())
    if n == 0:
        return digamma(input)
    return _along("polygamma", input, -1, kind=3, n=int(n))


def _polygamma_method(self, n):
    """x.polygamma(n): polygamma(n, x)."""
    return polygamma(n, self)


def polygamma_(self, n):
    """In-place polygamma(n, self)."""
    _check(self, "polygamma_")
    if not self.dtype.is_floating_point:
        raise RuntimeError(f"result type Float can't be cast to the desired output type "
                           f"{_type_name(self.dtype)}")
    return self.copy_(polygamma(n, self.clone()))


def sgn(input):
    """sign(x) for a real tensor (PyTorch's sgn is x / |x| for complex ones, which tapegrad
    does not have)."""
    _check(input, "sgn")
    return input.sign()


def sgn_(self):
    """In-place sgn."""
    _check(self, "sgn_")
    return self.sign_()


# ---------------------------------------------------------------- div(rounding_mode=)
_DIV = methods.METHODS["div"]
_DIV_ = methods.METHODS["div_"]


def _rounding(rounding_mode):
    if rounding_mode is not None and not isinstance(rounding_mode, str):
        raise TypeError(f"div(): argument 'rounding_mode' must be str, not "
                        f"{type(rounding_mode).__name__}")
    if rounding_mode not in (None, "trunc", "floor"):
        raise RuntimeError("div expected rounding_mode to be one of None, 'trunc', or "
                           f"'floor' but found '{rounding_mode}'")
    return rounding_mode


def _rounded_with_grad(input, other, mode):
    """The rounded quotient; for float operands that require grad, one whose gradient is
    0, as PyTorch's DivBackward2."""
    r = _div_rounded(input, other, mode, None)
    if r.dtype.is_floating_point:
        for t in (input, other):
            if isinstance(t, Tensor) and t.requires_grad:
                r = r + _zero(t) * 0
    return r


def div(self, other, *, rounding_mode=None):
    """self / other; rounding_mode "trunc" or "floor" rounds the quotient (as integers
    keep their dtype then), with a zero gradient, as PyTorch."""
    if _rounding(rounding_mode) is None:
        return _DIV(self, other)
    if not isinstance(self, Tensor):
        raise not_tensor("div", self)
    if not (isinstance(other, Tensor) or _is_scalar(other)):
        raise not_tensor("div", other, "other", 2)
    return _rounded_with_grad(self, other, rounding_mode)


def div_(self, other, *, rounding_mode=None):
    """In-place div."""
    if _rounding(rounding_mode) is None:
        return _DIV_(self, other)
    return self.copy_(div(self, other, rounding_mode=rounding_mode))


# ---------------------------------------------------------------- einsum with diagonals
_EINSUM = methods.FUNCTIONS["einsum"]


def einsum(equation, *operands):
    """einsum as tapegrad's, plus subscripts repeated within one operand (a diagonal:
    "ii->i", a trace: "ii->"), taken with diagonal() before the contraction."""
    if not isinstance(equation, str) or "." in equation:
        return _EINSUM(equation, *operands)
    ops = tuple(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) \
        else operands
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(ops) or all(len(set(s)) == len(s) for s in ins):
        return _EINSUM(equation, *operands)
    if not arrow:
        counts = collections.Counter("".join(ins))
        out = "".join(sorted(c for c, k in counts.items() if k == 1))
    new_ops, new_ins = [], []
    for k, (sub, t) in enumerate(zip(ins, ops)):
        if not isinstance(t, Tensor) or len(sub) != t.ndim:
            return _EINSUM(equation, *operands)
        sub = list(sub)
        while len(set(sub)) != len(sub):
            c = next(ch for ch in sub if sub.count(ch) > 1)
            i = sub.index(c)
            j = sub.index(c, i + 1)
            if t.shape[i] != t.shape[j]:
                raise RuntimeError(f"einsum(): subscript {c} is repeated for operand {k} but "
                                   f"the sizes don't match, {t.shape[j]} != {t.shape[i]}")
            t = t.diagonal(0, i, j)
            sub = [ch for m, ch in enumerate(sub) if m not in (i, j)] + [c]
        new_ops.append(t)
        new_ins.append("".join(sub))
    return _EINSUM(",".join(new_ins) + "->" + out, *new_ops)


def _register():
    fns = dict(cumprod=cumprod, logcumsumexp=logcumsumexp, cummax=cummax, cummin=cummin,
               kthvalue=kthvalue, median=median, nanmedian=nanmedian, mode=mode,
               quantile=quantile, nanquantile=nanquantile, unique=unique,
               unique_consecutive=unique_consecutive, bincount=bincount, histc=histc,
               bitwise_left_shift=bitwise_left_shift, bitwise_right_shift=bitwise_right_shift,
               floor_divide=floor_divide, lgamma=lgamma, digamma=digamma, erfinv=erfinv,
               sgn=sgn)
    for name, fn in fns.items():
        methods.method(name, fn)
    methods.functions(**fns, histogram=histogram, searchsorted=searchsorted,
                      bucketize=bucketize)
    for name in ("and", "or", "xor"):
        methods.function(f"bitwise_{name}", _bitwise_fn(name))
    methods.methods(cumprod_=cumprod_, lgamma_=lgamma_, digamma_=digamma_, erfinv_=erfinv_,
                    sgn_=sgn_, polygamma=_polygamma_method, polygamma_=polygamma_)
    methods.function("polygamma", polygamma)
    methods.function("bitwise_not", _bitwise_not)
    methods.methods(replace=True, div=div, div_=div_, true_divide=_DIV, true_divide_=_DIV_)
    methods.function("einsum", einsum, replace=True)
    methods.methods(histogram=histogram, __lshift__=_lshift, __rshift__=_rshift,
                    __rlshift__=_rlshift, __rrshift__=_rrshift,
                    __floordiv__=_floordiv, __rfloordiv__=_rfloordiv)


_register()
