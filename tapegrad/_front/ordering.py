"""sort, argsort, topk, flip, tril, triu: ops PyTorch has as primitives, composed here from
gather, index_select and masked_fill. The order comes from NumPy (a stable sort, NaN
counting as the largest value, as in PyTorch); values and gradients are PyTorch's, the
grad_fn names are the composing ops' (GatherBackward0 for sort and topk,
IndexSelectBackward0 for flip, MaskedFillBackward0 for tril/triu). The order is read in
Python, so inside tapegrad.compile they are graph breaks, like every NumPy-made index."""
import collections

import numpy as np

from . import methods
from .tensor import _numpy_view, _dim, _wrap, run
from ..ops.registry import BY_NAME
from .math_ops import _check
from .promotion import from_array

_sort_ret = collections.namedtuple("sort", ["values", "indices"])
_topk_ret = collections.namedtuple("topk", ["values", "indices"])


def _order(a, d, descending):
    """Indices sorting NumPy array a along axis d, stably; NaN sorts as the largest. The
    descending order sorts the reversed line ascending and reverses the result: NaN comes
    first and equal values keep their order, with no negation (-x of an int64 minimum
    overflows)."""
    if not descending:
        return np.argsort(a, axis=d, kind="stable")
    n = a.shape[d]
    rev = np.flip(a, d)
    return n - 1 - np.flip(np.argsort(rev, axis=d, kind="stable"), d)


def _index(arr):
    # (np.ascontiguousarray would make a 0-d array 1-d)
    return from_array(np.require(arr, np.int64, "C").reshape(np.shape(arr)))


def sort(input, dim=-1, descending=False, stable=False):
    # (stable: tapegrad's sort always is, which stable=False allows)
    _check(input, "sort")
    if input.ndim == 0:
        return _sort_ret(input.clone(), _index(np.zeros((), np.int64)))
    d = _dim(dim, input.ndim, "sort")
    idx = _index(_order(_numpy_view(input), d, descending))
    return _sort_ret(input.gather(d, idx), idx)


def argsort(input, dim=-1, descending=False, stable=False):
    return sort(input, dim, descending, stable).indices


def topk(input, k, dim=-1, largest=True, sorted=True):  # noqa: A002
    _check(input, "topk")
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool):
        raise TypeError(f"topk(): argument 'k' (position 2) must be int, not "
                        f"{type(k).__name__}")
    if input.ndim == 0:
        if k not in (0, 1):
            raise RuntimeError("selected index k out of range")
        return _topk_ret(input.clone(), _index(np.zeros((), np.int64)))
    d = _dim(dim, input.ndim, "topk")
    if k < 0 or k > input.shape[d]:
        raise RuntimeError("selected index k out of range")
    idx = _index(_top(_numpy_view(input), d, k, largest))
    return _topk_ret(input.gather(d, idx), idx)


def _top(a, d, k, largest):
    """The first k of _order(a, d, largest) along d, without sorting whole lines
    (ops/ordering.py: one pass per line keeping the k best): a full stable sort of every
    line takes tens of times PyTorch's topk."""
    n = a.shape[d]
    if k == 0 or 4 * k > n:
        return np.take(_order(a, d, largest), np.arange(k), axis=d)
    b = np.moveaxis(a, d, -1)
    lines = b.shape[:-1]
    out = np.empty((int(np.prod(lines)), k), np.int64)
    _top_lines()(b.reshape(-1, n), k, bool(largest), out)
    return np.moveaxis(out.reshape(lines + (k,)), -1, d)


_TOP = []


def _top_lines():
    if not _TOP:
        from .._engine.cache import kernel_cache
        with kernel_cache():
            from ..ops.ordering import top_lines
        _TOP.append(top_lines)
    return _TOP[0]


def flip(input, dims):
    _check(input, "flip")
    dims = (dims,) if isinstance(dims, (int, np.integer)) else tuple(dims)
    mask = 0
    for dm in dims:
        d = _dim(dm, input.ndim, "flip")
        if mask >> d & 1:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
        mask |= 1 << d
    if not input.ndim:
        mask = 0
    op = BY_NAME["flip"]
    return _wrap(run(op, input._i, iargs=op.pack(dims=mask)))


def _triangle(input, diagonal, fn, lower):
    _check(input, fn)
    if input.ndim < 2:
        raise RuntimeError(f"{fn}: input tensor must have at least 2 dimensions")
    if not isinstance(diagonal, (int, np.integer)) or isinstance(diagonal, bool):
        raise TypeError(f"{fn}(): argument 'diagonal' must be int, not "
                        f"{type(diagonal).__name__}")
    r, c = input.shape[-2:]
    keep = (np.tril if lower else np.triu)(np.ones((r, c), bool), int(diagonal))
    return input.masked_fill(from_array(~keep), 0)


def tril(input, diagonal=0):
    return _triangle(input, diagonal, "tril", True)


def triu(input, diagonal=0):
    return _triangle(input, diagonal, "triu", False)


def square(input):
    _check(input, "square")
    return input ** 2


for _name in ("sort", "argsort", "topk", "flip", "tril", "triu", "square"):
    methods.method(_name, globals()[_name])
    methods.function(_name, globals()[_name])
del _name
