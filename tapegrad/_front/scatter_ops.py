"""The scatter family: scatter, scatter_add, scatter_reduce, index_add, index_copy,
index_fill, put, with their in-place forms.

Every index is checked here, with PyTorch's messages, before anything is written; the
positions are then turned (by NumPy) into row-major offsets into self, and the write is
one index_put row (IndexPutBackward0, accumulating for the adds): the gradient reaches
self's other elements and the written values, which are src's (a slice of it, so its
gradient is PyTorch's grad.gather(dim, index)). amax/amin/prod/mean reductions compute
their values with NumPy and route the gradient as PyTorch's backward does (evenly over
the elements equal to an extreme; result / x for a product). As for every NumPy-made
index, these are graph breaks inside tapegrad.compile.
"""
import warnings

import numpy as np

from . import dtype as D
from . import methods
from .indexing import _put
from .promotion import _type_name, from_array
from .statistics_ops import _zero
from .tensor import Tensor, _dim, _is_scalar, _numpy_view, not_tensor


def _is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _int_arg(v, fn, name, position=None):
    if not _is_int(v):
        pos = f" (position {position})" if position else ""
        raise TypeError(f"{fn}(): argument '{name}'{pos} must be int, not {type(v).__name__}")
    return int(v)


def _tensor_arg(v, fn, name, position=None):
    if not isinstance(v, Tensor):
        raise not_tensor(fn, v, name, position or 1)
    return v


def _scatter_index(self, dim, index, src, fn):
    """dim (wrapped) and the offsets into self of the scatter's positions, with src (or
    None) checked against index: PyTorch's scatter_gather_dtype_check and shape checks,
    then every index value in range."""
    _int_arg(dim, fn, "dim", 2)
    _tensor_arg(index, fn, "index", 3)
    nd = max(self.ndim, 1)
    d = _dim(dim, nd, fn)
    if index.dtype is not D.int64:
        raise RuntimeError("scatter(): Expected dtype int32/int64 for index")
    if src is not None and src.dtype is not self.dtype:
        raise RuntimeError("scatter(): Expected self.dtype to be equal to src.dtype")
    ish = list(index.shape)
    ssh = list(self.shape) or [1]
    if index.numel() == 0:
        return d, None
    if max(index.ndim, 1) != nd:
        raise RuntimeError("Index tensor must have the same number of dimensions as self "
                           "tensor")
    ish = ish or [1]
    if src is not None:
        if max(src.ndim, 1) != nd:
            raise RuntimeError("Index tensor must have the same number of dimensions as src "
                               "tensor")
        srcsh = list(src.shape) or [1]
        if any(ish[k] > srcsh[k] or (k != d and ish[k] > ssh[k]) for k in range(nd)):
            raise RuntimeError(f"Expected index {list(index.shape)} to be no larger than self "
                               f"{list(self.shape)} apart from dimension {d} and to be no "
                               f"larger size than src {list(src.shape)}")
    elif any(k != d and ish[k] > ssh[k] for k in range(nd)):
        raise RuntimeError(f"Expected index {list(index.shape)} to be no larger than self "
                           f"{list(self.shape)} apart from dimension {d}")
    iv = np.ascontiguousarray(_numpy_view(index)).reshape(-1)
    # row-major offsets into self: index along d, the position itself along the others
    cs = np.cumprod([1] + ssh[:0:-1])[::-1].astype(np.int64)
    pos = np.empty(ish, np.int64)
    bad = _positions()(iv, False, np.asarray(ish, np.int64), cs, d, ssh[d], pos.reshape(-1))
    if bad >= 0:
        raise RuntimeError(f"index {int(iv[bad])} is out of bounds for "
                           f"dimension {d} with size {ssh[d]}")
    return d, pos.reshape(index.shape) if self.ndim else pos.reshape(())


_KERNEL = []


def _positions():
    """ops/special.py's scatter_positions, loaded (compiled) on first use."""
    if not _KERNEL:
        from .._engine.cache import kernel_cache
        with kernel_cache():
            from ..ops import special
        _KERNEL.append(special.scatter_positions)
    return _KERNEL[0]


def _src_part(src, index):
    """src[:i0, :i1, ...]: the elements a scatter reads."""
    if src.ndim == 0 or tuple(src.shape) == tuple(index.shape):
        return src.reshape(index.shape) if src.ndim == 0 else src
    return src[tuple(slice(0, n) for n in index.shape)]


def _value_tensor(self, value, fn):
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise RuntimeError(f"{fn} only supports a 0-dimensional value tensor, but got "
                               f"tensor with {value.ndim} dimension(s).")
        return value.to(self.dtype)
    if not _is_scalar(value):
        raise TypeError(f"{fn}(): argument 'value' must be Number, not {type(value).__name__}")
    return from_array(np.asarray(value, self.dtype.np))


def _write(self, pos, v, accumulate):
    if pos is None:
        return self
    if not self.dtype.is_floating_point:      # (no gradient: NumPy writes, then copy_)
        a = _numpy_view(self).copy()
        vv = np.broadcast_to(_numpy_view(v).astype(a.dtype), pos.shape).reshape(-1)
        flat = a.reshape(-1)
        if accumulate:
            np.add.at(flat, pos.reshape(-1), vv)
        else:
            flat[pos.reshape(-1)] = vv
        return self.copy_(from_array(flat.reshape(a.shape)))
    _put(self, pos, v if v.dtype is self.dtype else v.to(self.dtype), accumulate)
    return self


# ---------------------------------------------------------------- scatter / scatter_add
def _scatter(self, dim, index, src, value, reduce, fn, inplace):
    _tensor_arg(self, fn, "input")
    if reduce is not None:
        if not isinstance(reduce, str):
            raise TypeError(f"{fn}(): argument 'reduce' must be str, not "
                            f"{type(reduce).__name__}")
        if reduce not in ("add", "multiply"):
            raise RuntimeError("reduce argument must be either add or multiply.")
        if src is not None:
            warnings.warn("The reduce argument of torch.scatter with Tensor src is deprecated "
                          "and will be removed in a future PyTorch release. Use "
                          "torch.scatter_reduce instead for more reduction options.",
                          UserWarning, stacklevel=3)
    if src is not None:
        _tensor_arg(src, fn, "src", 4)
    d, pos = _scatter_index(self, dim, index, src, fn)
    out = self if inplace else self.clone()
    if pos is None:
        return out
    v = _src_part(src, index) if src is not None else _value_tensor(self, value, fn)
    if reduce == "multiply":
        return _scatter_numpy(out, pos, v, np.multiply)
    return _write(out, pos, v, reduce == "add")


def _scatter_numpy(out, pos, v, ufunc):
    """scatter(reduce='multiply'): values by NumPy, no gradient (PyTorch has none)."""
    a = _numpy_view(out).copy().reshape(-1)
    vv = np.broadcast_to(_numpy_view(v.detach()), pos.shape)
    ufunc.at(a, pos.reshape(-1), vv.reshape(-1))
    r = from_array(a.reshape(out.shape))
    with _no_grad():
        out.copy_(r)
    return out


def _no_grad():
    from .._engine.state import GRAD_MODE

    class _NoGrad:
        def __enter__(self):
            self.prev = GRAD_MODE.on
            GRAD_MODE.on = 0

        def __exit__(self, *exc):
            GRAD_MODE.on = self.prev
    return _NoGrad()


def scatter(input, dim, index, src=None, value=None, *, reduce=None):
    """input with src's elements (or value) written at index along dim; reduce='add' or
    'multiply' combines them with input's instead."""
    src, value = _src_or_value(src, value, "scatter")
    return _scatter(input, dim, index, src, value, reduce, "scatter", False)


def scatter_(self, dim, index, src=None, value=None, *, reduce=None):
    """In-place scatter."""
    src, value = _src_or_value(src, value, "scatter_")
    return _scatter(self, dim, index, src, value, reduce, "scatter_", True)


def _src_or_value(src, value, fn):
    """PyTorch's overloads: scatter(dim, index, src) and scatter(dim, index, value)."""
    if src is not None and value is not None:
        raise TypeError(f"{fn}() received an invalid combination of arguments: got both "
                        "src and value")
    if src is None and value is None:
        raise TypeError(f"{fn}() missing required argument 'src' or 'value'")
    if src is not None and not isinstance(src, Tensor):
        if _is_scalar(src):
            return None, src
        raise TypeError(f"{fn}(): argument 'src' (position 4) must be Tensor, not "
                        f"{type(src).__name__}")
    return src, value


def scatter_add(input, dim, index, src):
    """input with src's elements added at index along dim (repeats accumulate)."""
    return _scatter_add(input, dim, index, src, "scatter_add", False)


def _scatter_add(self, dim, index, src, fn, inplace):
    _tensor_arg(self, fn, "input")
    _tensor_arg(src, fn, "src", 4)
    d, pos = _scatter_index(self, dim, index, src, fn)
    out = self if inplace else self.clone()
    return _write(out, pos, _src_part(src, index), True)


def scatter_add_(self, dim, index, src):
    """In-place scatter_add."""
    return _scatter_add(self, dim, index, src, "scatter_add_", True)


_REDUCES = ("sum", "prod", "mean", "amax", "amin")


def _scatter_reduce(self, dim, index, src, reduce, include_self, fn, inplace):
    _tensor_arg(self, fn, "input")
    _tensor_arg(src, fn, "src", 4)
    if not isinstance(reduce, str):
        raise TypeError(f"{fn}(): argument 'reduce' (position 5) must be str, not "
                        f"{type(reduce).__name__}")
    reduce = {"max": "amax", "min": "amin"}.get(reduce, reduce)     # (PyTorch accepts them)
    if reduce not in _REDUCES:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, "
                           f"got {reduce}")
    if not isinstance(include_self, (bool, np.bool_)):
        raise TypeError(f"{fn}(): argument 'include_self' must be bool, not "
                        f"{type(include_self).__name__}")
    d, pos = _scatter_index(self, dim, index, src, fn)
    if pos is None:
        return self if inplace else self.clone()
    v = _src_part(src, index)
    flat_pos = pos.reshape(-1)
    n = self.numel()
    hit = np.zeros(n, bool)
    hit[flat_pos] = True
    hit = hit.reshape(self.shape)
    base = self if include_self else self.masked_fill(from_array(hit), 0 if reduce in (
        "sum", "mean") else 1)
    if reduce in ("sum", "mean"):
        s = _write(base.clone(), pos, v, True)
        if reduce == "sum":
            return self.copy_(s) if inplace else s
        cnt = np.bincount(flat_pos, minlength=n).reshape(self.shape) + (1 if include_self else 0)
        cnt = np.maximum(cnt, 1)
        if self.dtype.is_floating_point:
            r = s / from_array(cnt.astype(self.dtype.np))
        else:
            r = from_array(np.floor_divide(_numpy_view(s), cnt).astype(self.dtype.np))
        return self.copy_(r) if inplace else r
    # amax, amin, prod: values by NumPy
    a = _numpy_view(base.detach()).copy().reshape(-1)
    vv = _numpy_view(v.detach()).reshape(-1)
    if not include_self:
        init = {"amax": -np.inf, "amin": np.inf, "prod": 1}[reduce]
        if a.dtype.kind != "f" and reduce != "prod":
            init = np.iinfo(np.int64).min if reduce == "amax" else np.iinfo(np.int64).max
        a[flat_pos] = init
    uf = {"amax": np.fmax, "amin": np.fmin, "prod": np.multiply}[reduce]
    if reduce != "prod" and a.dtype.kind == "f":
        uf = np.maximum if reduce == "amax" else np.minimum    # NaN propagates
    uf.at(a, flat_pos, vv)
    res = a.reshape(self.shape)
    r = from_array(res)
    if self.dtype.is_floating_point and (self.requires_grad or v.requires_grad):
        r = _reduce_grad(self, base, v, pos, res, reduce, include_self, hit)
    return self.copy_(r) if inplace else r


def _reduce_grad(self, base, v, pos, res, reduce, include_self, hit):
    """res exactly, plus zeros whose gradient is PyTorch's: for amax/amin the gradient of
    each result element split evenly over the elements (of self, when included, and of
    src) equal to it; for prod, result / x."""
    dt = self.dtype.np
    rv = res.reshape(-1)[pos]
    sv = _numpy_view(v.detach())
    bv = _numpy_view(self.detach())
    if reduce == "prod":
        with np.errstate(divide="ignore", invalid="ignore"):
            ws = np.where(hit, res / bv, 1.0) if include_self else np.where(hit, 0.0, 1.0)
            wv = rv / sv
    else:
        ms = ((bv == res) & hit & include_self) | ~hit
        mv = sv == rv
        cnt = np.where(hit, ms.astype(np.int64), 0).reshape(-1)
        np.add.at(cnt, pos.reshape(-1), mv.reshape(-1).astype(np.int64))
        cnt = np.maximum(cnt.reshape(self.shape), 1)
        ws = np.where(hit, ms / cnt, 1.0)
        wv = mv / cnt.reshape(-1)[pos]
    out = from_array(res.copy())
    if self.requires_grad:
        out = out + _zero(self) * from_array(ws.astype(dt))
    if v.requires_grad:
        z = from_array(np.zeros(self.shape, dt))
        out = out + _write(z, pos, _zero(v) * from_array(np.asarray(wv, dt)), True)
    return out


def scatter_reduce(input, dim, index, src, reduce, *, include_self=True):
    """input with src's elements combined in at index along dim by reduce (sum, prod,
    mean, amax, amin), input's own element included unless include_self=False."""
    return _scatter_reduce(input, dim, index, src, reduce, include_self, "scatter_reduce",
                           False)


def scatter_reduce_(self, dim, index, src, reduce, *, include_self=True):
    """In-place scatter_reduce."""
    return _scatter_reduce(self, dim, index, src, reduce, include_self, "scatter_reduce_",
                           True)


# ---------------------------------------------------------------- index_add / copy / fill
def _index_positions(self, dim, index, fn, source=None, wrap=False, kind=RuntimeError):
    """dim and the offsets into self of self.select(dim, index[i]) for every i, in the
    layout of source (index's positions along dim)."""
    _int_arg(dim, fn, "dim", 2)
    _tensor_arg(index, fn, "index", 3)
    nd = max(self.ndim, 1)
    d = _dim(dim, nd, fn)
    if index.dtype is not D.int64:
        raise RuntimeError(f"{fn}(): Expected dtype int32/int64 for index")
    if index.ndim > 1:
        raise IndexError(f"{fn}(): Index is supposed to be a vector, but got dim: "
                         f"{index.ndim} with type: Long and size: {list(index.shape)}")
    iv = _numpy_view(index).reshape(-1)
    shape = list(self.shape) or [1]
    if source is not None:
        if source.dtype is not self.dtype and fn == "index_copy_":
            raise RuntimeError("index_copy_(): self and source expected to have the same "
                               f"dtype, but got (self) {_type_name(self.dtype)} and (source) "
                               f"{_type_name(source.dtype)}")
        if source.dtype is not self.dtype:
            raise RuntimeError(f"{fn}(): self ({_type_name(self.dtype)}) and source "
                               f"({_type_name(source.dtype)}) must have the same scalar type")
        ssh = list(source.shape) or [1]
        if len(ssh) != nd or any(ssh[k] != shape[k] for k in range(nd) if k != d):
            raise RuntimeError("source tensor shape must match self tensor shape, excluding "
                               f"the specified dimension. Got self.shape = {list(self.shape)}"
                               f" source.shape = {list(source.shape)}")
        if ssh[d] != iv.size:
            raise RuntimeError(f"{fn}(): Number of indices ({iv.size}) should be equal to "
                               f"source.size(dim): ({ssh[d]}), for dim: {d}")
    lo = -shape[d] if wrap else 0
    bad = (iv < lo) | (iv >= shape[d])
    if bad.any():
        msg = f"index {int(iv[bad][0])} is out of bounds for dimension {d} with size {shape[d]}"
        raise kind(msg if kind is RuntimeError or fn == "index_fill_" else f"{fn}(): {msg}")
    iv = np.where(iv < 0, iv + shape[d], iv).astype(np.int64)
    cs = np.cumprod([1] + shape[:0:-1])[::-1].astype(np.int64)
    out = list(shape)
    out[d] = iv.size
    pos = np.empty(out, np.int64)
    _positions()(iv, True, np.asarray(out, np.int64), cs, d, shape[d], pos.reshape(-1))
    return d, pos


def _index_add(self, dim, index, source, alpha, fn, inplace):
    _tensor_arg(self, fn, "input")
    _tensor_arg(source, fn, "source", 4)
    if not _is_scalar(alpha):
        raise TypeError(f"{fn}(): argument 'alpha' must be Number, not {type(alpha).__name__}")
    d, pos = _index_positions(self, dim, index, "index_add_", source)
    out = self if inplace else self.clone()
    v = source.reshape(pos.shape)
    if alpha != 1:
        v = v * alpha
    if not self.ndim:
        pos = pos.reshape(v.shape)
    return _write(out, pos, v, True)


def index_add(input, dim, index, source, *, alpha=1):
    """input with alpha * source's slices added at index along dim (repeats accumulate)."""
    return _index_add(input, dim, index, source, alpha, "index_add", False)


def index_add_(self, dim, index, source, *, alpha=1):
    """In-place index_add."""
    return _index_add(self, dim, index, source, alpha, "index_add_", True)


def _index_copy(self, dim, index, source, fn, inplace):
    _tensor_arg(self, fn, "input")
    _tensor_arg(source, fn, "source", 4)
    d, pos = _index_positions(self, dim, index, "index_copy_", source, kind=IndexError)
    out = self if inplace else self.clone()
    return _write(out, pos, source.reshape(pos.shape), False)


def index_copy(input, dim, index, source):
    """input with source's slices written at index along dim."""
    return _index_copy(input, dim, index, source, "index_copy", False)


def index_copy_(self, dim, index, source):
    """In-place index_copy."""
    return _index_copy(self, dim, index, source, "index_copy_", True)


def _index_fill(self, dim, index, value, fn, inplace):
    _tensor_arg(self, fn, "input")
    d, pos = _index_positions(self, dim, index, "index_fill_", wrap=True, kind=IndexError)
    out = self if inplace else self.clone()
    return _write(out, pos, _value_tensor(self, value, "index_fill_"), False)


def index_fill(input, dim, index, value):
    """input with the slices at index along dim set to value."""
    return _index_fill(input, dim, index, value, "index_fill", False)


def index_fill_(self, dim, index, value):
    """In-place index_fill."""
    return _index_fill(self, dim, index, value, "index_fill_", True)


# ---------------------------------------------------------------- put
def _put_flat(self, index, source, accumulate, fn, inplace):
    _tensor_arg(self, fn, "input")
    _tensor_arg(index, fn, "index", 2)
    _tensor_arg(source, fn, "source", 3)
    if not isinstance(accumulate, (bool, np.bool_)):
        raise TypeError(f"{fn}(): argument 'accumulate' must be bool, not "
                        f"{type(accumulate).__name__}")
    if index.dtype is not D.int64:
        raise RuntimeError(f"put_(): Expected a long tensor for index, but got "
                           f"{_type_name(index.dtype)}")
    if source.dtype is not self.dtype:
        raise RuntimeError("put_(): self and source expected to have the same dtype, but got "
                           f"self.dtype = {_type_name(self.dtype)} and source.dtype = "
                           f"{_type_name(source.dtype)}")
    if index.numel() != source.numel():
        raise IndexError("put_(): Expected source and index to have the same number of "
                         f"elements, but got source.numel() = {source.numel()}, "
                         f"index.numel() = {index.numel()}")
    n = self.numel()
    iv = _numpy_view(index).reshape(-1)
    bad = (iv < -n) | (iv >= n)
    if bad.any():
        raise IndexError(f"out of range: tried to access index {int(iv[bad][0])} on a tensor "
                         f"of {n} elements.")
    out = self if inplace else self.clone()
    if iv.size == 0:
        return out
    pos = np.where(iv < 0, iv + n, iv).astype(np.int64)
    if not self.ndim:
        return _write(out, pos.reshape(()) if pos.size == 1 else pos, source.reshape(
            ()) if pos.size == 1 else source.reshape(-1), accumulate)
    return _write(out, pos, source.reshape(-1), accumulate)


def put_(self, index, source, accumulate=False):
    """self.flatten()[index] = source (+= with accumulate), in place; negative indices
    count from the end."""
    return _put_flat(self, index, source, accumulate, "put_", True)


def put(input, index, source, accumulate=False):
    """input with input.flatten()[index] = source (+= with accumulate)."""
    return _put_flat(input, index, source, accumulate, "put", False)


def _register():
    both = dict(scatter=scatter, scatter_add=scatter_add, scatter_reduce=scatter_reduce,
                index_add=index_add, index_copy=index_copy, index_fill=index_fill, put=put)
    methods.methods(**both, scatter_=scatter_, scatter_add_=scatter_add_,
                    scatter_reduce_=scatter_reduce_, index_add_=index_add_,
                    index_copy_=index_copy_, index_fill_=index_fill_, put_=put_)
    methods.functions(**both)


_register()
