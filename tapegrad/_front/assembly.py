"""PyTorch's functions that assemble tensors from others: stacking (hstack, vstack,
dstack, column_stack, row_stack, atleast_1d/2d/3d), broadcasting (broadcast_tensors,
broadcast_to, broadcast_shapes, meshgrid, cartesian_prod, combinations), products
(kron, tensordot, baddbmm, cross, vander), and placement (block_diag, diag_embed, rot90,
take).

Each is composed from table ops (cat, expand, mul, matmul, flip, index_select, copy_...),
so its gradient is theirs, and it works inside tapegrad.compile as they do; the grad_fn
names are the composing ops'. Integer products that tapegrad's matmul does not take
(tensordot, baddbmm) are computed by NumPy, without gradients, as for other integer ops.
Functions that read index values in Python (take, combinations) are graph breaks, as
index_select is. Arguments are checked here with PyTorch's messages.
"""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import itertools
import math
import numbers
import warnings

import numpy as np

from . import dtype as D
from . import methods
from . import out as _out
from .._engine import layout as L
from .._engine import sizes
from .._engine.state import RECORDING
from .tensor import Tensor, _dim, _is_scalar, _numpy_view
from .indexing import cat, _constant
from .promotion import result_type, to, from_array, _type_name
from .creation import zeros


# ---------------------------------------------------------------- argument checks
def _is_int(x):
    return isinstance(x, numbers.Integral) and not isinstance(x, (bool, np.bool_))


def _tensor_arg(x, fn, name, pos):
    if not isinstance(x, Tensor):
        raise TypeError(f"{fn}(): argument '{name}' (position {pos}) must be Tensor, not "
                        f"{type(x).__name__}")


def _int_arg(x, fn, name, pos):
    if isinstance(x, Tensor) and x.ndim == 0 and x.dtype is D.int64:
        return int(x.item())
    if not _is_int(x):
        raise TypeError(f"{fn}(): argument '{name}' (position {pos}) must be int, not "
                        f"{type(x).__name__}")
    return int(x)


def _bool_arg(x, fn, name, pos):
    if not isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{fn}(): argument '{name}' (position {pos}) must be bool, not "
                        f"{type(x).__name__}")
    return bool(x)


def _ints_arg(x, fn, name, pos):
    if isinstance(x, Tensor) or not isinstance(x, (tuple, list)):
        raise TypeError(f"{fn}(): argument '{name}' (position {pos}) must be tuple of ints, "
                        f"not {type(x).__name__}")
    out = []
    for k, v in enumerate(x):
        if isinstance(v, Tensor) and v.ndim == 0 and v.dtype is D.int64:
            v = int(v.item())
        if not _is_int(v):
            raise TypeError(f"{fn}(): argument '{name}' (position {pos}) must be tuple of "
                            f"ints, but found element of type {type(v).__name__} at pos {k}")
        out.append(int(v))
    return out


def _tensor_list(tensors, fn):
    """The tensors of a tensor-list argument (hstack(tensors), ...)."""
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{fn}(): argument 'tensors' (position 1) must be tuple of Tensors, "
                        f"not {type(tensors).__name__}")
    _elements(tensors)
    return list(tensors)


def _elements(tensors):
    """PyTorch's message for a non-tensor in a variadic tensor list."""
    for k, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"expected Tensor as element {k} in argument 0, but got "
                            f"{type(t).__name__}")


def _varargs(tensors):
    """f(a, b) or f([a, b]), as PyTorch's variadic tensor functions take them."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tensors[0]
    _elements(tensors)
    return list(tensors)


def _with_out(fn, result_of, out, inputs):
    if out is None:
        return result_of()
    _out.check(fn, out, inputs)
    result = result_of()
    _out.cast_check(result.dtype, out)
    return _out.write(out, result)


# ---------------------------------------------------------------- atleast / stacking
def _atleast(t, nd):
    if t.ndim >= nd:
        return t
    if nd == 1:
        return t.reshape(1)
    if nd == 2:
        return t.reshape(1, 1) if t.ndim == 0 else t.unsqueeze(0)
    if t.ndim == 0:
        return t.reshape(1, 1, 1)
    return t.unsqueeze(0).unsqueeze(-1) if t.ndim == 1 else t.unsqueeze(-1)


def _atleast_fn(nd):
    def atleast(*tensors):
        ts = _varargs(tensors)
        got = [_atleast(t, nd) for t in ts]
        if len(tensors) == 1 and isinstance(tensors[0], Tensor):
            return got[0]
        return tuple(got)
    atleast.__name__ = atleast.__qualname__ = f"atleast_{nd}d"
    atleast.__doc__ = (f"Each tensor viewed with at least {nd} dim(s), as PyTorch's "
                       f"atleast_{nd}d (one tensor: a tensor; several or a list: a tuple).")
    return atleast


atleast_1d, atleast_2d, atleast_3d = _atleast_fn(1), _atleast_fn(2), _atleast_fn(3)


def _stack_fn(name, nd, dim, doc, pre=None):
    def stacked(tensors, *, out=None):
        ts = _tensor_list(tensors, name)
        if not ts:
            raise RuntimeError(f"{name} expects a non-empty TensorList")
        ts = [pre(t) for t in ts] if pre else [_atleast(t, nd) for t in ts]
        d = dim if dim is not None else (0 if ts[0].ndim == 1 else 1)
        return _with_out("cat", lambda: cat(ts, d), out, ts)   # (PyTorch's names cat)
    stacked.__name__ = stacked.__qualname__ = name
    stacked.__doc__ = doc
    return stacked


def _column(t):
    return t.reshape(t.numel(), 1) if t.ndim <= 1 else t


hstack = _stack_fn("hstack", 1, None, "The tensors joined column-wise: along dim 0 for 1-d "
                   "tensors, dim 1 otherwise (0-d tensors count as 1-d).")
vstack = _stack_fn("vstack", 2, 0, "The tensors joined row-wise (along dim 0), 0-d and 1-d "
                   "tensors made rows first.")
row_stack = _stack_fn("row_stack", 2, 0, "vstack's other name.")
dstack = _stack_fn("dstack", 3, 2, "The tensors joined depth-wise (along dim 2), each "
                   "viewed with at least 3 dims first (atleast_3d).")
column_stack = _stack_fn("column_stack", 2, 1, "The tensors joined as columns (along dim "
                         "1); 0-d and 1-d tensors become (n, 1) columns first.", pre=_column)


# ---------------------------------------------------------------- broadcasting
def _broadcast_pair(a, b):
    """PyTorch's infer_size: a and b broadcast; its message names a and b."""
    n = max(len(a), len(b))
    out = []
    for i in range(n):
        k = n - 1 - i
        x = a[len(a) - 1 - i] if i < len(a) else 1
        y = b[len(b) - 1 - i] if i < len(b) else 1
        if x != y and x != 1 and y != 1:
            raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b "
                               f"({y}) at non-singleton dimension {k}")
        out.append(y if x == 1 else x)
    return out[::-1]


def broadcast_tensors(*tensors):
    """The tensors expanded to their common broadcast shape (views), as a tuple."""
    _elements(tensors)
    if not tensors:
        return ()
    shape = list(tensors[0].shape)
    for t in tensors[1:]:
        shape = _broadcast_pair(shape, list(t.shape))
    return tuple(t if list(t.shape) == shape else t.expand(shape) for t in tensors)


def broadcast_shapes(*shapes):
    """The shape tensors of these shapes (ints or sequences of ints; None skipped) would
    broadcast to, as a tapegrad.Size, without making any tensor."""
    from .tensor import Size
    norm = [(s,) if _is_int(s) else s for s in shapes if s is not None]
    for s in norm:
        if not isinstance(s, (tuple, list)) or not all(_is_int(v) for v in s):
            raise RuntimeError(f"Input shapes should be of type ints, a tuple of ints, or a "
                               f"list of ints, got {s}")
    if not norm:
        return Size([])
    common = [1] * max(len(s) for s in norm)
    for k, s in enumerate(norm):
        for i in range(-1, -1 - len(s), -1):
            if s[i] == common[i]:
                continue
            if common[i] == 1:
                if s[i] < 0:
                    raise ValueError("Attempting to broadcast a dimension with negative "
                                     "length!")
                common[i] = int(s[i])
            if s[i] != 1 and common[i] != s[i]:
                raise RuntimeError(f"Attempting to broadcast a dimension of length {s[i]} at "
                                   f"{i}! Mismatching argument at index {k} had {s}; but "
                                   f"expected shape should be broadcastable to {common}")
    return Size(common)


def broadcast_to(input, size):
    """input expanded (a view) to size, as input.expand(size)."""
    _tensor_arg(input, "broadcast_to", "input", 1)
    return input.expand(_ints_arg(size, "broadcast_to", "size", 2))


def _broadcast_to_method(self, *size):
    """self expanded (a view) to size: x.broadcast_to(2, 3) or x.broadcast_to((2, 3))."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    return self.expand(_ints_arg(list(size), "broadcast_to", "size", 1))


_WARNED = set()


def _warn_once(key, message):
    """PyTorch's TORCH_WARN_ONCE: the first time in the process only, whatever the
    warning filters say."""
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, UserWarning, stacklevel=3)


_MESHGRID_WARNING = ("torch.meshgrid: in an upcoming release, it will be required to pass "
                     "the indexing argument.")


def meshgrid(*tensors, indexing=None):
    """Coordinate grids of 0-d and 1-d tensors (expanded views), indexing "ij" (matrix,
    the default, with PyTorch's warning when it is not given) or "xy" (Cartesian: the
    first two grids' dims swapped)."""
    ts = _varargs(tensors)
    if indexing is None:
        _warn_once("meshgrid", _MESHGRID_WARNING)
        indexing = "ij"
    return _meshgrid(ts, indexing)


def _meshgrid(ts, indexing):
    if not ts:
        raise RuntimeError("meshgrid expects a non-empty TensorList")
    if any(t.dtype is not ts[0].dtype for t in ts):
        raise RuntimeError("meshgrid expects all tensors to have the same dtype")
    for t in ts:
        if t.ndim > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list "
                               f"but got a tensor of {t.ndim} dims, shape {list(t.shape)}")
    if indexing not in ("xy", "ij"):
        raise RuntimeError(f'torch.meshgrid: indexing must be one of "xy" or "ij", but '
                           f'received: {indexing}')
    shape = [t.numel() for t in ts]
    grids = []
    for k, t in enumerate(ts):
        view = [1] * len(ts)
        view[k] = shape[k]
        grids.append(t.reshape(view).expand(shape))
    if indexing == "xy" and len(ts) >= 2:      # (Cartesian: the first two dims swapped)
        grids = [g.transpose(0, 1) for g in grids]
    return tuple(grids)


def _vector_check(t):
    if t.ndim != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(t.shape)}")


def cartesian_prod(*tensors):
    """The Cartesian product of 1-d tensors: one row per tuple, in lexicographic order (a
    single tensor: itself)."""
    ts = _varargs(tensors)
    for t in ts:
        _vector_check(t)
    if len(ts) == 1:
        return ts[0]
    grids = _meshgrid(ts, "ij")
    from .indexing import stack
    return stack([g.reshape(-1) for g in grids], 1)


def combinations(input, r=2, with_replacement=False):
    """The r-element combinations of a 1-d tensor's elements (with_replacement: with
    repeats), one per row, in lexicographic order of positions, as Python's itertools."""
    _tensor_arg(input, "combinations", "input", 1)
    r = _int_arg(r, "combinations", "r", 2)
    with_replacement = _bool_arg(with_replacement, "combinations", "with_replacement", 3)
    _vector_check(input)
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return zeros(0, dtype=input.dtype)
    n = input.shape[0]
    count = math.comb(n + r - 1, r) if with_replacement else math.comb(n, r)
    sizes.check_new((count, r), 8)      # (the positions, before they are made)
    if r == 2:      # (the common case without a Python loop)
        rows, cols = np.triu_indices(n, 0 if with_replacement else 1)
        idx = np.stack([rows, cols], 1).astype(np.int64)
    else:
        pick = itertools.combinations_with_replacement if with_replacement else \
            itertools.combinations
        idx = np.fromiter(itertools.chain.from_iterable(pick(range(n), r)), np.int64)
    idx = idx.reshape(-1, r)
    pos = _constant(lambda: from_array(np.ascontiguousarray(idx.reshape(-1))))
    return input.index_select(0, pos).reshape(idx.shape[0], r)


# ---------------------------------------------------------------- products
def kron(input, other, *, out=None):
    """The Kronecker product: every element of input times all of other, laid out in
    blocks (the shorter shape padded with leading 1s)."""
    _tensor_arg(input, "kron", "input", 1)
    _tensor_arg(other, "kron", "other", 2)
    return _with_out("kron", lambda: _kron(input, other), out, (input, other))


def _kron(a, b):
    nd = max(a.ndim, b.ndim)
    sa = [1] * (nd - a.ndim) + list(a.shape)
    sb = [1] * (nd - b.ndim) + list(b.shape)
    if 2 * nd > L.MAXD:
        raise RuntimeError(f"kron: tapegrad tensors have at most {L.MAXD} dims, and kron of "
                           f"{nd}-d tensors needs {2 * nd} for its interleaved product")
    va = [x for s in sa for x in (s, 1)]
    vb = [x for s in sb for x in (1, s)]
    prod = a.reshape(va) * b.reshape(vb)
    return prod.reshape([x * y for x, y in zip(sa, sb)])


def _kron_method(self, other):
    """The Kronecker product of self and other (tapegrad.kron)."""
    return kron(self, other)


def _tensordot_dims(a, b, dims):
    if not isinstance(dims, (tuple, list, Tensor, numbers.Integral)):   # (a bool: an int)
        raise RuntimeError("tensordot expects dims to be int or tuple[list[int], list[int]] "
                           f"or list[list[int]] containing two lists, but got dims={dims}")
    if isinstance(dims, (tuple, list)):
        if len(dims) != 2:
            raise ValueError("too many values to unpack (expected 2)" if len(dims) > 2 else
                             f"not enough values to unpack (expected 2, got {len(dims)})")
        da, db = dims
    elif isinstance(dims, Tensor):
        if dims.numel() > 1:
            if dims.shape[0] != 2:
                raise AssertionError()
            da, db = dims[0].tolist(), dims[1].tolist()
        else:
            n = int(dims.item())
            if n < 0:
                raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
            da, db = list(range(-n, 0)), list(range(n))
    else:
        n = int(dims)
        if n < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={n}")
        if n > min(a.ndim, b.ndim):
            raise RuntimeError(f"tensordot expects dims < ndim_a or ndim_b, but got dims={n}")
        da, db = list(range(-n, 0)), list(range(n))
    da = _ints_arg(da, "tensordot", "dims_self", 3)
    db = _ints_arg(db, "tensordot", "dims_other", 4)
    return da, db


def tensordot(a, b, dims=2, out=None):
    """The sum of products of a and b over the dims dims pairs (an int n: a's last n dims
    with b's first n; a pair of lists, or a (2, k) tensor of them: those dims), as a
    matrix product of the permuted, reshaped operands."""
    _tensor_arg(a, "tensordot", "self", 1)
    _tensor_arg(b, "tensordot", "other", 2)
    da, db = _tensordot_dims(a, b, dims)
    return _with_out("tensordot", lambda: _tensordot(a, b, da, db), out, (a, b))


def _dims_set(dims, nd):
    out = []
    for d in dims:
        w = _dim(d, nd)
        if w in out:
            raise RuntimeError(f"dim {w} appears multiple times in the list of dims")
        out.append(w)
    return out


def _tensordot(a, b, da, db):
    if len(da) != len(db):
        raise RuntimeError("both dimension lists should have same length")
    if a.dtype is not b.dtype:
        raise RuntimeError("both inputs should have same dtype")
    raw_a, raw_b = da, db
    da, db = _dims_set(da, a.ndim), _dims_set(db, b.ndim)
    for x, y, rx, ry in zip(da, db, raw_a, raw_b):
        sx, sy = a.shape[x], b.shape[y]
        if sy == 1 and sx != 1:         # a broadcast dim: summed right away
            a = a.sum(x, keepdim=True)
        elif sx == 1 and sy != 1:
            b = b.sum(y, keepdim=True)
        elif sx != sy:
            raise RuntimeError(f"contracted dimensions need to match, but first has size "
                               f"{sx} in dim {rx} and second has size {sy} in dim {ry}")
    free_a = [d for d in range(a.ndim) if d not in da]
    free_b = [d for d in range(b.ndim) if d not in db]
    shape = [a.shape[d] for d in free_a] + [b.shape[d] for d in free_b]
    if a.dtype is D.bool_:
        raise NotImplementedError("\"addmm_impl_cpu_\" not implemented for 'Bool'")
    if a.dtype is D.int64:
        r = np.tensordot(_numpy_view(a), _numpy_view(b), axes=(da, db))
        return from_array(np.ascontiguousarray(r.astype(np.int64, copy=False).reshape(shape)))
    ka = int(np.prod([a.shape[d] for d in da], dtype=np.int64))
    ma = int(np.prod([a.shape[d] for d in free_a], dtype=np.int64))
    nb = int(np.prod([b.shape[d] for d in free_b], dtype=np.int64))
    pa = a.permute(free_a + da).reshape(ma, ka)
    pb = b.permute(db + free_b).reshape(ka, nb)
    return pa.mm(pb).reshape(shape)


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * (batch1 @ batch2), batch by batch: batch1 (b, n, m),
    batch2 (b, m, p), input broadcastable to (b, n, p); with beta 0 input is ignored
    (its NaNs too), as in PyTorch."""
    for k, (t, name) in enumerate(((input, "input"), (batch1, "batch1"),
                                   (batch2, "batch2"))):
        _tensor_arg(t, "baddbmm", name, k + 1)
    for v, name in ((beta, "beta"), (alpha, "alpha")):
        if not _is_scalar(v) or isinstance(v, Tensor):
            raise TypeError(f"baddbmm(): argument '{name}' must be Number, not "
                            f"{type(v).__name__}")
    return _with_out("baddbmm", lambda: _baddbmm(input, batch1, batch2, beta, alpha), out,
                     (input, batch1, batch2))


def _baddbmm(input, b1, b2, beta, alpha):
    if b1.ndim != 3:
        raise RuntimeError("batch1 must be a 3D tensor")
    if b2.ndim != 3:
        raise RuntimeError("batch2 must be a 3D tensor")
    bs, n, m = b1.shape
    if list(b2.shape[:2]) != [bs, m]:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                           f"[{bs}, {m}] but got: [{b2.shape[0]}, {b2.shape[1]}].")
    if not (input.dtype is b1.dtype is b2.dtype):
        raise RuntimeError(f"Input dtypes must be the same, got: input "
                           f"{_c_name(input.dtype)}, batch1: {_c_name(b1.dtype)}, batch2: "
                           f"{_c_name(b2.dtype)}")
    target = [bs, n, b2.shape[2]]
    base = input.expand(target)        # (PyTorch's message when input does not broadcast)
    if not input.dtype.is_floating_point:
        if input.dtype is D.bool_:
            raise RuntimeError("\"baddbmm_cpu\" not implemented for 'Bool'")
        prod = np.matmul(_numpy_view(b1), _numpy_view(b2)) * int(alpha)
        r = prod if beta == 0 else prod + int(beta) * _numpy_view(base)
        return from_array(np.ascontiguousarray(r.astype(np.int64, copy=False)))
    prod = b1.bmm(b2)
    if alpha != 1:
        prod = prod * alpha
    if beta == 0:
        return prod
    return (base if beta == 1 else base * beta) + prod


def _c_name(dt):
    return {"float32": "float", "float64": "double", "int64": "long int",
            "bool": "bool"}[dt.name]


def _baddbmm_method(self, batch1, batch2, *, beta=1, alpha=1):
    """beta * self + alpha * (batch1 @ batch2) (tapegrad.baddbmm)."""
    return baddbmm(self, batch1, batch2, beta=beta, alpha=alpha)


_CROSS_WARNING = ("Using torch.cross without specifying the dim arg is deprecated.\n"
                  "Please either pass the dim explicitly or simply use torch.linalg.cross.\n"
                  "The default value of dim will change to agree with that of linalg.cross "
                  "in a future release.")


def cross(input, other, dim=None, *, out=None):
    """The cross product of 3-vectors along dim (None: the first dim of size 3, with
    PyTorch's deprecation warning), input and other broadcast."""
    _tensor_arg(input, "cross", "input", 1)
    _tensor_arg(other, "cross", "other", 2)
    if dim is not None:
        dim = _int_arg(dim, "cross", "dim", 3)
    else:
        sizes = list(input.shape)
        if 3 not in sizes:
            raise RuntimeError("no dimension of size 3 in input")
        dim = sizes.index(3)
        _warn_once("cross", _CROSS_WARNING)
    return _with_out("cross", lambda: _cross(input, other, dim), out, (input, other))


def _cross(a, b, dim):
    if a.dtype is not b.dtype:
        raise RuntimeError(f"expected scalar type {_type_name(a.dtype)} but found "
                           f"{_type_name(b.dtype)}")
    if a.dtype is D.bool_:
        raise NotImplementedError("\"cross\" not implemented for 'Bool'")
    if a.ndim != b.ndim:
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    d = _dim(dim, a.ndim)
    if a.shape[d] != 3 or b.shape[d] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got "
                           f"{a.shape[d]} and {b.shape[d]}")
    shape = _broadcast_pair(list(a.shape), list(b.shape))
    a, b = a.expand(shape), b.expand(shape)
    a0, a1, a2 = (a.narrow(d, k, 1) for k in range(3))
    b0, b1, b2 = (b.narrow(d, k, 1) for k in range(3))
    return cat([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], d)


def _cross_method(self, other, dim=None):
    """The cross product of self and other along dim (tapegrad.cross)."""
    if dim is None:
        sizes = list(self.shape)
        if 3 not in sizes:
            raise RuntimeError("no dimension of size 3 in input")
        dim = sizes.index(3)
        _warn_once("cross", _CROSS_WARNING)
    return cross(self, other, _int_arg(dim, "cross", "dim", 2))


def vander(x, N=None, increasing=False):
    """The Vandermonde matrix of a 1-d tensor: columns x**(N-1), ..., x**0 (increasing:
    the other way), each power the previous times x, as PyTorch's cumulative product;
    integer and bool x give int64."""
    _tensor_arg(x, "vander", "x", 1)
    if N is not None:
        N = _int_arg(N, "vander", "N", 2)
    increasing = _bool_arg(increasing, "vander", "increasing", 3)
    if x.ndim != 1:
        raise RuntimeError("x must be a one-dimensional tensor.")
    if N is None:
        N = x.shape[0]
    if N < 0:
        raise RuntimeError("N must be non-negative.")
    sizes.check_new((x.shape[0], N), 8)
    dt = x.dtype if x.dtype.is_floating_point else D.int64
    x = to(x, dt)
    if N == 0:
        return zeros(x.shape[0], 0, dtype=dt)
    col = x.unsqueeze(1)
    cols = [_constant(lambda: _ones_column(x.shape[0], dt))]
    for _ in range(N - 1):
        cols.append(col if len(cols) == 1 else cols[-1] * col)
    if not increasing:
        cols = cols[::-1]
    return cat(cols, 1)


def _ones_column(n, dt):
    from .creation import ones
    return ones(n, 1, dtype=dt)


# ---------------------------------------------------------------- placement
def block_diag(*tensors):
    """The tensors placed along the diagonal of a zero matrix (0-d: 1x1, 1-d: one row),
    in the promoted dtype."""
    _elements(tensors)
    for k, t in enumerate(tensors):
        if t.ndim > 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer "
                               f"dimensions. Input {k} has {t.ndim} dimensions")
    if not tensors:
        return zeros(1, 0)
    dt = result_type(*tensors) if len(tensors) > 1 else tensors[0].dtype
    blocks = [to(t, dt).reshape(1, -1) if t.ndim < 2 else to(t, dt) for t in tensors]
    if len(blocks) == 1:
        return blocks[0].clone()
    width = sum(b.shape[1] for b in blocks)
    rows, left = [], 0
    for b in blocks:
        r, c = b.shape
        parts = []
        if left:
            parts.append(_zeros_const([r, left], dt))
        parts.append(b)
        if width - left - c:
            parts.append(_zeros_const([r, width - left - c], dt))
        rows.append(cat(parts, 1) if len(parts) > 1 else b)
        left += c
    return cat(rows, 0)


def _zeros_const(shape, dt):
    return _constant(lambda: zeros(shape, dtype=dt))


def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    """A tensor whose diagonals (offset, in the planes of dims dim1 and dim2 of the
    result) hold input's last dim; zeros elsewhere."""
    _tensor_arg(input, "diag_embed", "input", 1)
    offset = _int_arg(offset, "diag_embed", "offset", 2)
    dim1 = _int_arg(dim1, "diag_embed", "dim1", 3)
    dim2 = _int_arg(dim2, "diag_embed", "dim2", 4)
    nd = input.ndim + 1
    d1, d2 = _dim(dim1, nd), _dim(dim2, nd)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    if nd > L.MAXD:
        raise RuntimeError(f"tapegrad tensors have at most {L.MAXD} dims")
    m = input.shape[-1]
    n = m + abs(offset)
    shape = list(input.shape[:-1]) + [n, n]
    dt = input.dtype
    # zeros with input copied into their diagonal (CopySlices, as a write into a view):
    # no arithmetic touches the values, so the zeros stay +0 whatever input holds. While
    # tapegrad.compile records, the zeros are a constant, cloned so the write is an op's
    if RECORDING[0] is None:
        out = zeros(shape, dtype=dt)
    else:
        out = _zeros_const(shape, dt).clone()
    out.diagonal(offset, -2, -1).copy_(input)
    return out.movedim([nd - 2, nd - 1], [d1, d2])


def rot90(input, k=1, dims=(0, 1)):
    """input rotated by 90 degrees k times in the plane of dims, from the first dim
    towards the second."""
    _tensor_arg(input, "rot90", "input", 1)
    k = _int_arg(k, "rot90", "k", 2)
    dims = _ints_arg(dims, "rot90", "dims", 3)
    nd = input.ndim
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    if nd < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {nd}")
    d0, d1 = _dim(dims[0], nd), _dim(dims[1], nd)
    if d0 == d1:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = "
                           f"{dims[0]} and dim1 = {dims[1]}")
    k %= 4
    if k == 1:
        return input.flip(d1).transpose(d0, d1)
    if k == 2:
        return input.flip([d0, d1])
    if k == 3:
        return input.flip(d0).transpose(d0, d1)
    return input.clone()


def _rot90_method(self, k=1, dims=(0, 1)):
    """self rotated by 90 degrees k times in the plane of dims (tapegrad.rot90)."""
    return rot90(self, k, dims)


def take(input, index):
    """input's elements at index, counted in input's row-major order (negative: from the
    end), in index's shape."""
    _tensor_arg(input, "take", "input", 1)
    _tensor_arg(index, "take", "index", 2)
    if index.dtype is not D.int64:
        raise RuntimeError(f"take(): Expected a long tensor for index, but got "
                           f"{_type_name(index.dtype)}")
    n = input.numel()
    idx = np.array(_numpy_view(index), dtype=np.int64).reshape(-1)
    if n == 0 and idx.size:
        raise IndexError("take(): tried to take from an empty tensor")
    bad = (idx < -n) | (idx >= n)
    if bad.any():
        raise IndexError(f"out of range: tried to access index {int(idx[bad][0])} on a "
                         f"tensor of {n} elements.")
    idx = np.where(idx < 0, idx + n, idx)
    pos = _constant(lambda: from_array(idx))
    return input.reshape(-1).index_select(0, pos).reshape(index.shape)


# ---------------------------------------------------------------- registration
_FUNCTIONS = ("atleast_1d", "atleast_2d", "atleast_3d", "hstack", "vstack", "row_stack",
              "dstack", "column_stack", "broadcast_tensors", "broadcast_shapes",
              "broadcast_to", "meshgrid", "cartesian_prod", "combinations", "kron",
              "tensordot", "baddbmm", "cross", "vander", "block_diag", "diag_embed", "rot90",
              "take")


def _register():
    for name in _FUNCTIONS:
        methods.function(name, globals()[name])
    methods.methods(broadcast_to=_broadcast_to_method, kron=_kron_method,
                    baddbmm=_baddbmm_method, cross=_cross_method, rot90=_rot90_method,
                    diag_embed=diag_embed, take=take)


_register()
