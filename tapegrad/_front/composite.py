"""Ops PyTorch has that tapegrad builds from its table ops (their grad_fn names are the
composing ops').

addcmul, addcdiv, lerp, nan_to_num, logit, xlogy, fmax/fmin, movedim/moveaxis, unflatten,
tile, roll, diag, diagonal (a strided view, DiagonalBackward0), trace, diff,
take_along_dim, tensor_split/hsplit/vsplit, aminmax, nanmean, repeat_interleave,
and Tensor.sum_to_size/nelement/element_size/is_complex. Values and gradients are
PyTorch's; NaN and infinity tests are comparisons (x != x, x == inf) rather than
isnan/isinf, and the constants they fill in are made by `_indexing._constant`, so a step
using them can be recorded by tapegrad.compile. Index-driven ops (take_along_dim,
repeat_interleave with a tensor of repeats, tensor_split with a tensor of indices) read
their indices in Python, a graph break as for gather and index_select. Arguments are
checked here, with PyTorch's messages."""
import collections
import math
import numbers

import numpy as np

from . import dtype as D
from . import methods
from .tensor import Tensor, _dim, _is_scalar, _numpy_view, _wrap, run
from ..ops.registry import BY_NAME
from .indexing import where, cat, _slice, _view, _layout, _contiguous_strides, _constant, _int
from .promotion import result_type, to, from_array, _type_name
from .creation import tensor, zeros
from .promotion import as_dtype

_aminmax_ret = collections.namedtuple("aminmax", ["min", "max"])


# ---------------------------------------------------------------- helpers
def _const(value, dtype):
    """A 0-d tensor holding a Python value: a constant to a compiled replay."""
    return _constant(lambda: tensor(value, dtype=dtype))


def _shape_const(arr):
    """A tensor NumPy made from shapes and Python ints: a constant to a compiled replay."""
    return _constant(lambda: from_array(arr))


def _check(input, fn):
    if not isinstance(input, Tensor):
        raise TypeError(f"{fn}(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")


def _pos(pos):
    return f" (position {pos})" if pos else ""


def _is_int(x):
    return isinstance(x, numbers.Integral) and not isinstance(x, (bool, np.bool_))


def _int_arg(x, fn, name, pos=None):
    if isinstance(x, Tensor) and x.ndim == 0 and x.dtype is D.int64:
        return int(x.item())
    if not _is_int(x):
        raise TypeError(f"{fn}(): argument '{name}'{_pos(pos)} must be int, not "
                        f"{type(x).__name__}")
    return int(x)


def _ints_arg(x, fn, name, pos=None, single=True):
    """A tuple of ints from a tuple/list of ints (or, with single, one int)."""
    if single and (_is_int(x) or isinstance(x, Tensor) and x.ndim == 0
                   and x.dtype is D.int64):
        return [_int(x, fn)]
    if not isinstance(x, (tuple, list)):
        raise TypeError(f"{fn}(): argument '{name}'{_pos(pos)} must be tuple of ints, not "
                        f"{type(x).__name__}")
    out = []
    for k, v in enumerate(x):
        if isinstance(v, Tensor) and v.ndim == 0 and v.dtype is D.int64:
            v = int(v.item())
        if not _is_int(v):
            raise TypeError(f"{fn}(): argument '{name}'{_pos(pos)} must be tuple of ints, but "
                            f"found element of type {type(v).__name__} at pos {k}")
        out.append(int(v))
    return out


def _invalid(fn, args, signatures):
    """PyTorch's message for arguments that match none of a function's signatures."""
    got = ", ".join(type(a).__name__ if not isinstance(a, Tensor) else "Tensor" for a in args)
    lines = "".join(f" * ({s})\n" for s in signatures)
    return TypeError(f"{fn}() received an invalid combination of arguments - got ({got}), "
                     f"but expected one of:\n{lines}")


def _torch_dtype_name(dt):
    """The dtype as PyTorch's C++ names it in lerp's messages."""
    return {"float32": "float", "float64": "double", "int64": "long int",
            "bool": "bool"}[dt.name]


def _tensor_arg(x, fn, name, pos):
    if not isinstance(x, Tensor):
        raise TypeError(f"{fn}(): argument '{name}' (position {pos}) must be Tensor, not "
                        f"{type(x).__name__}")


# ---------------------------------------------------------------- pointwise
def _addc(fn, input, tensor1, tensor2, value):
    for k, (t, name) in enumerate(((input, "input"), (tensor1, "tensor1"),
                                   (tensor2, "tensor2"))):
        _tensor_arg(t, fn, name, k + 1)
    if not _is_scalar(value):
        raise TypeError(f"{fn}(): argument 'value' must be Number, not {type(value).__name__}")
    if fn == "addcdiv" and not tensor1.dtype.is_floating_point and \
            not tensor2.dtype.is_floating_point:
        raise RuntimeError(
            "Integer division with addcdiv is no longer supported, and in a future  release "
            "addcdiv will perform a true division of tensor1 and tensor2. The historic addcdiv "
            "behavior can be implemented as (input + value * torch.trunc(tensor1 / tensor2))"
            ".to(input.dtype) for integer inputs and as (input + value * tensor1 / tensor2) "
            "for float inputs. The future addcdiv behavior is just the latter implementation: "
            "(input + value * tensor1 / tensor2), for all dtypes.")
    rt = result_type(input, tensor1, tensor2)
    if rt is D.bool_:
        raise NotImplementedError(f"\"{fn}_cpu_out\" not implemented for 'Bool'")
    # an integer result takes value truncated to an integer, as PyTorch does (silently)
    value = float(value) if rt.is_floating_point else int(value)
    t1, t2 = to(tensor1, rt), to(tensor2, rt)
    if value != 1:
        t1 = t1 * value                 # PyTorch's order: value * tensor1 (op) tensor2
    term = t1 * t2 if fn == "addcmul" else t1 / t2
    return to(input, rt) + term


def addcmul(input, tensor1, tensor2, *, value=1):
    """input + value * tensor1 * tensor2."""
    return _addc("addcmul", input, tensor1, tensor2, value)


def addcdiv(input, tensor1, tensor2, *, value=1):
    """input + value * tensor1 / tensor2 (tensor1 and tensor2 not both integers)."""
    return _addc("addcdiv", input, tensor1, tensor2, value)


def lerp(input, end, weight):
    """input + weight * (end - input), by PyTorch's two formulas: the one from input for
    |weight| < 0.5, the one from end otherwise (so weight 1 gives end exactly)."""
    _check(input, "lerp")
    tensor_weight = isinstance(weight, Tensor)
    if not isinstance(end, Tensor) or not (tensor_weight or _is_scalar(weight)):
        raise _invalid("lerp", (input, end, weight), (
            "Tensor input, Tensor end, Tensor weight, *, Tensor out = None",
            "Tensor input, Tensor end, Number weight, *, Tensor out = None"))
    for t, name in ((end, "end"), (weight, "weight")):
        if isinstance(t, Tensor) and t.dtype is not input.dtype:
            raise RuntimeError(f"expected dtype {_torch_dtype_name(input.dtype)} for `{name}` "
                               f"but got dtype {_torch_dtype_name(t.dtype)}")
    if not input.dtype.is_floating_point:
        kind = "tensor" if tensor_weight else "scalar"
        raise NotImplementedError(f"\"lerp_kernel_{kind}\" not implemented for "
                                  f"'{_type_name(input.dtype)}'")
    diff = end - input
    if not tensor_weight:
        w = float(weight)
        return input + diff * w if abs(w) < 0.5 else end - diff * (1.0 - w)
    return where(weight.abs() < 0.5, input + weight * diff, end - diff * (1.0 - weight))


def _fill_arg(v, name):
    if v is None:
        return None
    if isinstance(v, Tensor):
        return float(v)
    if not _is_scalar(v):
        raise TypeError(f"nan_to_num(): argument '{name}' must be float, not {type(v).__name__}")
    return float(v)


def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    """NaN, +inf and -inf replaced by nan, posinf and neginf (defaults: 0 and the dtype's
    largest and lowest finite values); the gradient is 1 where input is finite and 0
    where a value was replaced, as in PyTorch."""
    _check(input, "nan_to_num")
    nan, posinf, neginf = (_fill_arg(nan, "nan"), _fill_arg(posinf, "posinf"),
                           _fill_arg(neginf, "neginf"))
    if not input.dtype.is_floating_point:
        return input.clone()
    fi = np.finfo(input.dtype.np)
    dt = input.dtype
    out = where(input == math.inf, _const(float(fi.max) if posinf is None else posinf, dt),
                input)
    out = where(input == -math.inf, _const(float(fi.min) if neginf is None else neginf, dt),
                out)
    return where(input != input, _const(0.0 if nan is None else nan, dt), out)


def logit(input, eps=None):
    """log(x / (1 - x)), x clamped to [eps, 1 - eps] when eps is given (the gradient is 0
    outside, as in PyTorch). An integer input is converted to the default dtype."""
    _check(input, "logit")
    if eps is not None and not _is_scalar(eps):
        raise TypeError(f"logit(): argument 'eps' must be float, not {type(eps).__name__}")
    x = input if input.dtype.is_floating_point else input.to(D.default_float())
    if eps is not None:
        lo, hi = float(eps), 1.0 - float(eps)
        if lo <= hi:
            x = x.clamp(lo, hi)
        else:           # (eps > 0.5) PyTorch tests x < lo first, then x > hi
            x = where(x < lo, _const(lo, x.dtype), where(x > hi, _const(hi, x.dtype), x))
    return (x / (1.0 - x)).log()


def xlogy(input, other):
    """input * log(other), 0 where input == 0 (unless other is NaN). Gradients as
    PyTorch's: input's is log(other), but 0 where input == 0 and other <= 0; other's is
    input / other (so 0 where input == 0, and NaN where input == other == 0). One
    difference: where input == 0 and other == +inf, input's gradient is 0 (PyTorch: inf)."""
    if not (isinstance(input, Tensor) or isinstance(other, Tensor)) or \
            not (isinstance(input, Tensor) or _is_scalar(input)) or \
            not (isinstance(other, Tensor) or _is_scalar(other)):
        raise _invalid("xlogy", (input, other), (
            "Tensor input, Tensor other, *, Tensor out = None",
            "Number self, Tensor other, *, Tensor out = None",
            "Tensor input, Number other, *, Tensor out = None"))
    rt = result_type(input, other)
    if not rt.is_floating_point:
        rt = D.default_float()
    x = to(input, rt) if isinstance(input, Tensor) else _const(float(input), rt)
    y = to(other, rt) if isinstance(other, Tensor) else _const(float(other), rt)
    one = _const(1.0, rt)
    at_zero = x == 0
    # where input == 0 and other <= 0 or +inf, the log reads 1: the value is 0 (not
    # 0 * log(other)) and input's gradient 0; elsewhere x * log(y) and its gradients
    safe = where(y <= 0, one, where(y == math.inf, one, y))
    out = x * where(at_zero, safe, y).log()
    # a zero whose gradient for other is 0 * d(sqrt)(0) = NaN where input == other == 0,
    # and 0 everywhere else (PyTorch's 0 / 0 there)
    both_zero = where(at_zero, where(y == 0, y, one), one)
    return out + _const(0.0, rt) * both_zero.sqrt()


def _fextreme(name, ge):
    def fn(input, other):
        _check(input, name)
        _tensor_arg(other, name, "other", 2)
        keep = input >= other if ge else input <= other
        # input where other is NaN or input wins (ties too), else other: PyTorch's masks
        return where(other != other, input, where(keep, input, other))
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"Elementwise {'max' if ge else 'min'}imum ignoring NaN: NaN only where "
                  "both are NaN. A tie's gradient goes to input, as in PyTorch.")
    return fn


fmax = _fextreme("fmax", True)
fmin = _fextreme("fmin", False)


# ---------------------------------------------------------------- shapes
def movedim(input, source, destination):
    """A permute moving dims source to positions destination, the others keeping their
    order."""
    _check(input, "movedim")
    seqs = isinstance(source, (tuple, list)), isinstance(destination, (tuple, list))
    try:
        if seqs[0] != seqs[1]:
            raise TypeError
        src = _ints_arg(source, "movedim", "source")
        dst = _ints_arg(destination, "movedim", "destination")
    except TypeError:
        raise _invalid("movedim", (input, source, destination), (
            "Tensor input, int source, int destination",
            "Tensor input, tuple of ints source, tuple of ints destination")) from None
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({src} dims) "
                           f"should contain the same number of dims as destination ({dst} "
                           "dims)")
    nd = input.ndim
    s = [_dim(d, nd, "movedim") for d in src]
    t = [_dim(d, nd, "movedim") for d in dst]
    if len(set(s)) != len(s):
        raise RuntimeError(f"movedim: repeated dim in `source` ({src})")
    if len(set(t)) != len(t):
        raise RuntimeError(f"movedim: repeated dim in `destination` ({dst})")
    if nd == 0:                 # (source and destination 0 or -1)
        return input.permute([])
    order = [-1] * nd
    for a, b in zip(s, t):
        order[b] = a
    rest = iter(d for d in range(nd) if d not in s)
    return input.permute([d if d >= 0 else next(rest) for d in order])


def unflatten(input, dim, sizes):
    """A view splitting dim into sizes (one of them may be -1)."""
    _check(input, "unflatten")
    dim = _int_arg(dim, "unflatten", "dim", 2)
    if not isinstance(sizes, (tuple, list)):
        raise TypeError(f"unflatten(): argument 'sizes' (position 3) must be tuple of ints, "
                        f"not {type(sizes).__name__}")
    sizes = _ints_arg(sizes, "unflatten", "sizes", 3, single=False)
    if input.ndim == 0:         # (PyTorch reports its internal errors this way)
        raise RuntimeError("unflatten got an unexpected error:\nDimension specified as 0 but "
                           "tensor has no dimensions")
    d = _dim(dim, input.ndim, "unflatten")
    if not sizes:
        raise RuntimeError("unflatten: sizes must be non-empty")
    shape = list(input.shape)
    n = shape[d]
    if sizes.count(-1) > 1:
        raise RuntimeError("unflatten got an unexpected error:\nonly one dimension can be "
                           "inferred")
    known = 1
    for s in sizes:
        known *= s if s != -1 else 1
    if -1 in sizes:
        if known == 0 and n == 0:
            raise RuntimeError(f"unflatten got an unexpected error:\ncannot reshape tensor of "
                               f"0 elements into shape {sizes} because the unspecified "
                               "dimension size -1 can be any value and is ambiguous")
        if known != 0 and n % known == 0:
            sizes[sizes.index(-1)] = n // known
            known = n
    if known != n:
        raise RuntimeError(f"unflatten: Provided sizes {sizes} don't multiply up to the size of "
                           f"dim {d} ({n}) in the input tensor")
    return input.view(shape[:d] + sizes + shape[d + 1:])


def tile(input, dims):
    """input repeated dims[i] times along each dim; a short dims is padded with leading 1s
    (PyTorch's: a repeat)."""
    _check(input, "tile")
    dims = _ints_arg(dims, "tile", "dims", 2, single=False)
    dims = [1] * (input.ndim - len(dims)) + dims
    if not dims:
        return input.clone()
    return input.repeat(dims)


def _tile_method(self, *dims):
    """x.tile(2, 1) as well as x.tile((2, 1)): *dims as in PyTorch."""
    if not dims:
        raise TypeError('tile() missing 1 required positional arguments: "dims"')
    return tile(self, dims[0] if len(dims) == 1 and isinstance(dims[0], (tuple, list))
                else dims)


_tile_method.__name__ = _tile_method.__qualname__ = "tile"


def _roll1(t, shift, d):
    n = t.shape[d]
    shift %= n
    if shift == 0:
        return t
    if not t.is_contiguous():
        t = t.contiguous()          # (the op's kernel moves contiguous blocks)
    op = BY_NAME["roll"]
    return _wrap(run(op, t._i, iargs=op.pack(dim=d, shift=shift)))


def roll(input, shifts, dims=None):
    """Elements shifted along dims (wrapping around); without dims, along the flattened
    tensor. One RollBackward0 row per rolled dim."""
    _check(input, "roll")
    shifts = _ints_arg(shifts, "roll", "shifts", 2)
    dims = [] if dims is None else _ints_arg(dims, "roll", "dims", 3)
    if not shifts:
        raise RuntimeError("`shifts` required")
    if not dims and len(shifts) == 1:
        if input.numel() == 0:
            return input.clone()
        flat = input.flatten()
        out = _roll1(flat, shifts[0], 0)
        return input.clone() if out is flat else out.view(input.shape)
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, "
                           f"dims:{len(dims)}")
    if input.ndim == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    ds = [_dim(d, input.ndim, "roll") for d in dims]
    if input.numel() == 0:
        return input.clone()
    out = input
    for s, d in zip(shifts, ds):
        out = _roll1(out, s, d)
    return input.clone() if out is input else out


def diagonal(input, offset=0, dim1=0, dim2=1):
    """A view of the diagonal of dims dim1 and dim2 (offset above it, below when negative),
    as the last dim; DiagonalBackward0."""
    _check(input, "diagonal")
    return _diagonal(input, _int_arg(offset, "diagonal", "offset", 2),
                     _int_arg(dim1, "diagonal", "dim1", 3), _int_arg(dim2, "diagonal", "dim2", 4))


def _diagonal(input, offset, dim1, dim2):
    nd = input.ndim
    d1, d2 = _dim(dim1, nd, "diagonal"), _dim(dim2, nd, "diagonal")
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    shape, st, off = _layout(input)
    cst = _contiguous_strides(shape)
    if offset >= 0:
        n = max(min(shape[d1], shape[d2] - offset), 0)
        start, gstart = offset * st[d2], offset * cst[d2]
    else:
        n = max(min(shape[d1] + offset, shape[d2]), 0)
        start, gstart = -offset * st[d1], -offset * cst[d1]
    if n == 0:              # (PyTorch keeps the offset of an empty diagonal)
        start = gstart = 0
    keep = [d for d in range(nd) if d not in (d1, d2)]
    return _view(input, "diagonal", [shape[d] for d in keep] + [n],
                 [st[d] for d in keep] + [st[d1] + st[d2]], off + start,
                 [cst[d] for d in keep] + [cst[d1] + cst[d2]], gstart)


def diag(input, diagonal=0):
    """A 2-D input's diagonal (a copy) or a 1-D input placed on a diagonal of a square
    matrix (zeros elsewhere)."""
    _check(input, "diag")
    k = _int_arg(diagonal, "diag", "diagonal", 2)
    if input.ndim == 2:
        return _diagonal(input, k, 0, 1).clone()
    if input.ndim != 1:
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {input.ndim}D")
    n, dt = input.shape[0], input.dtype
    m = n + abs(k)
    row = input                 # column j of the result holds row[j] on the diagonal
    if k:
        pad = _constant(lambda: zeros(abs(k), dtype=dt))
        row = cat([pad, input] if k > 0 else [input, pad])
    mask = _shape_const(np.eye(m, k=k, dtype=bool))
    return where(mask, row.unsqueeze(0), _const(False if dt is D.bool_ else 0, dt))


def trace(input):
    """The sum of a matrix's diagonal."""
    _check(input, "trace")
    if input.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.ndim}")
    if input.dtype is D.bool_:
        raise NotImplementedError("\"trace\" not implemented for 'Bool'")
    return diagonal(input).sum()


def diff(input, n=1, dim=-1, prepend=None, append=None):
    """The n-th forward difference along dim (after joining prepend and append to input);
    for bool, whether neighbours differ."""
    _check(input, "diff")
    n = _int_arg(n, "diff", "n", 2)
    dim = _int_arg(dim, "diff", "dim", 3)
    if input.ndim == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    if n < 0:
        raise RuntimeError(f"order must be non-negative but got {n}")
    d = _dim(dim, input.ndim, "diff")
    for name, t in (("prepend", prepend), ("append", append)):
        if t is None:
            continue
        if not isinstance(t, Tensor):
            raise TypeError(f"diff(): argument '{name}' must be Tensor, not {type(t).__name__}")
        if t.ndim != input.ndim:
            raise RuntimeError("diff expects prepend or append to be the same dimension as "
                               "input")
        for i in range(input.ndim):
            if i != d and t.shape[i] != input.shape[i]:
                raise RuntimeError(
                    "diff expects the shape of tensor to prepend or append to match that of "
                    f"input except along the differencing dimension; input.size({i}) = "
                    f"{input.shape[i]}, but got tensor.size({i}) = {t.shape[i]}")
    if n == 0:                  # (PyTorch then ignores prepend and append)
        return input.clone()
    parts = [t for t in (prepend, input, append) if t is not None]
    x = cat(parts, d) if len(parts) > 1 else input
    for _ in range(n):
        size = x.shape[d]
        if size == 0:
            break
        a, b = x.narrow(d, 1, size - 1), x.narrow(d, 0, size - 1)
        x = a != b if x.dtype is D.bool_ else a - b
    return input.clone() if x is input else x


def take_along_dim(input, indices, dim=None):
    """input's elements at indices along dim (input and indices broadcast against each
    other except along dim), or at flat positions without dim: a gather. Along a dim,
    PyTorch 2.13 takes every index modulo the dim's size (-1 is the last element, and so
    is size - 1 + size); without dim, indices must be in range, as gather's."""
    _check(input, "take_along_dim")
    _tensor_arg(indices, "take_along_dim", "indices", 2)
    if dim is not None:
        dim = _int_arg(dim, "take_along_dim", "dim", 3)
    if indices.dtype is not D.int64:
        raise RuntimeError("torch.take_along_dim(): dtype of indices should be Long but got "
                           f"{_type_name(indices.dtype)}")
    if dim is None:
        return input.reshape(-1).gather(0, indices.reshape(-1))
    nd = input.ndim
    if nd == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    d = _dim(dim, nd, "take_along_dim")
    if indices.ndim != nd:
        raise RuntimeError(f"torch.take_along_dim(): input and indices should have the same "
                           f"number of dimensions, but got {nd} dimensions for input, and "
                           f"{indices.ndim} dimensions for indices")
    size = input.shape[d]
    idx = _numpy_view(indices)
    if size and idx.size and ((idx < 0) | (idx >= size)).any():
        indices = from_array(np.mod(idx, size))
    sizes = list(input.shape)
    sizes[d] = indices.shape[d]
    shape = []
    for k, (a, b) in enumerate(zip(sizes, indices.shape)):
        if a != b and a != 1 and b != 1:
            raise RuntimeError(f"The size of tensor a ({a}) must match the size of tensor b "
                               f"({b}) at non-singleton dimension {k}")
        shape.append(max(a, b) if a != 1 and b != 1 else a * b)
    idx = indices if list(indices.shape) == shape else indices.expand(shape)
    shape[d] = input.shape[d]
    src = input if list(input.shape) == shape else input.expand(shape)
    return src.gather(d, idx)


# ---------------------------------------------------------------- splitting
def tensor_split(input, indices_or_sections, dim=0):
    """Views (slices) of input along dim: `sections` pieces as equal as possible (the
    first ones one longer), or the pieces between the given indices."""
    _check(input, "tensor_split")
    if input.ndim == 0:
        raise RuntimeError("tensor_split expected at least a 1-dimensional tensor, but got a "
                           "tensor with 0 dims")
    dim = _int_arg(dim, "tensor_split", "dim", 3)
    arg = indices_or_sections
    if isinstance(arg, Tensor):
        if arg.dtype is not D.int64:
            raise RuntimeError("tensor_split expected tensor_indices_or_sections to have dtype "
                               f"of long, but got {_type_name(arg.dtype)}")
        if arg.ndim > 1:
            raise RuntimeError("tensor_split expected tensor_indices_or_sections to be a "
                               "zero-dimensional or one-dimensional tensor, but got a tensor "
                               f"with {arg.ndim} dims")
        arg = _numpy_view(arg).tolist()
    is_list = isinstance(arg, (tuple, list))
    if not (is_list or _is_int(arg)) or is_list and not all(_is_int(i) for i in arg):
        raise _invalid("tensor_split", (input, indices_or_sections), (
            "Tensor input, tuple of ints indices, int dim = 0",
            "Tensor input, Tensor tensor_indices_or_sections, int dim = 0",
            "Tensor input, int sections, int dim = 0"))
    d = _dim(dim, input.ndim, "tensor_split")
    if is_list:
        bounds = [int(i) for i in arg]
    else:
        if arg <= 0:
            raise RuntimeError(f"number of sections must be larger than 0, got {arg}")
        size, bounds, start = input.shape[d], [], 0
        small, extra = divmod(size, int(arg))
        for k in range(int(arg) - 1):
            start += small + (1 if k < extra else 0)
            bounds.append(start)
    out, start = [], 0
    for end in bounds:
        out.append(_slice(input, d, start, end, 1))
        start = end
    out.append(_slice(input, d, start, None, 1))
    return tuple(out)


def _split_along(fn, input, arg, min_nd):
    _check(input, fn)
    nd = input.ndim
    if nd < min_nd:
        raise RuntimeError(f"torch.{fn} requires a tensor with at least {min_nd} dimension, but "
                           f"got a tensor with {nd} dimensions!")
    d = 1 if fn == "hsplit" and nd > 1 else 0
    if _is_int(arg):
        size = input.shape[d]
        if arg == 0 or size % arg:
            raise RuntimeError(f"torch.{fn} attempted to split along dimension {d}, but the "
                               f"size of the dimension {size} is not divisible by the "
                               f"split_size {arg}!")
    elif not (isinstance(arg, (tuple, list)) and all(_is_int(i) for i in arg)):
        raise _invalid(fn, (input, arg), ("Tensor input, int sections",
                                          "Tensor input, tuple of ints indices"))
    return tensor_split(input, arg, d)


def hsplit(input, indices_or_sections):
    """tensor_split along dim 1 (dim 0 of a 1-D tensor); sections must divide it."""
    return _split_along("hsplit", input, indices_or_sections, 1)


def vsplit(input, indices_or_sections):
    """tensor_split along dim 0 of a tensor of at least 2 dims; sections must divide it."""
    return _split_along("vsplit", input, indices_or_sections, 2)


def _varargs_split(fn):
    """x.hsplit(1, 3) as well as x.hsplit([1, 3]) or x.hsplit(2): *args as in PyTorch."""
    def method(self, *args):
        if not args:
            raise _invalid(fn.__name__, (self,), ("int sections", "tuple of ints indices"))
        return fn(self, args[0] if len(args) == 1 else list(args))
    method.__name__ = method.__qualname__ = fn.__name__
    return method


# ---------------------------------------------------------------- reductions
def aminmax(input, *, dim=None, keepdim=False):
    """(min, max) as a named tuple: amin and amax (a tie shares the gradient evenly)."""
    _check(input, "aminmax")
    nd = input.ndim
    if dim is None:
        if input.numel() == 0:
            raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as "
                               "the operation has no identity.")
        dims = tuple(range(nd))
    else:
        if not _is_int(dim):
            raise TypeError(f"aminmax(): argument 'dim' must be int, not {type(dim).__name__}")
        d = _dim(dim, nd, "aminmax")
        if nd and input.shape[d] == 0:
            raise IndexError(f"aminmax: Expected reduction dim {d} to have non-zero size.")
        dims = (d,) if nd else ()
    return _aminmax_ret(input.amin(dims, keepdim), input.amax(dims, keepdim))


def _reduce_dims(dim, keepdim, nd, fn):
    if dim is None:
        return tuple(range(nd)) if keepdim else None
    if _is_int(dim):
        return int(dim)
    if isinstance(dim, (tuple, list)) and all(_is_int(d) for d in dim):
        return tuple(dim)
    raise TypeError(f"{fn}(): argument 'dim' (position 2) must be tuple of ints, not "
                    f"{type(dim).__name__}")


def nanmean(input, dim=None, keepdim=False, *, dtype=None):
    """The mean of the elements that are not NaN (NaN where all are). A NaN element's
    gradient is 0, also in an all-NaN slice (PyTorch's is NaN there: 0 * (g / 0))."""
    _check(input, "nanmean")
    if not input.dtype.is_floating_point:
        raise RuntimeError("nanmean(): expected input to have floating point or complex dtype "
                           f"but got {_type_name(input.dtype)}")
    if dtype is not None:
        dtype = as_dtype(dtype, "nanmean")
    if dtype is not None and not dtype.is_floating_point:
        raise RuntimeError("nanmean(): could not infer output dtype. Optional dtype must be "
                           "either a floating point or complex dtype. Got: "
                           f"{_type_name(dtype)}")
    dims = _reduce_dims(dim, keepdim, input.ndim, "nanmean")
    x = input if dtype is None else input.to(dtype)
    kept = x == x
    total = where(kept, x, _const(0.0, x.dtype)).sum(dims, keepdim)
    count = where(kept, _const(1.0, x.dtype), _const(0.0, x.dtype)).sum(dims, keepdim)
    return total / count


# ---------------------------------------------------------------- repeats
def _repeat_indices(reps, size, d, output_size):
    if reps.size == 1 and size != 1:
        reps = np.full(size, reps[0], np.int64)
    if reps.size != size:
        raise RuntimeError(f"repeats must have the same size as input along dim, but got "
                           f"repeats.size(0) = {reps.size} and input.size({d}) = {size}")
    if (reps < 0).any():
        raise RuntimeError("repeats can not be negative")
    if output_size is not None and output_size != int(reps.sum()):
        raise RuntimeError("allocated size does not match required size")
    return np.repeat(np.arange(size, dtype=np.int64), reps)


def _repeats_array(repeats):
    if repeats.dtype is not D.int64:
        raise NotImplementedError(f"\"repeat_interleave_cpu\" not implemented for "
                                  f"'{_type_name(repeats.dtype)}'")
    return _numpy_view(repeats)


def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """Each element (or slice along dim) repeated `repeats` times in place: an int
    (an expand and a reshape, ExpandBackward0's gradient) or a tensor of counts per
    element (an index_select). Without dim, of the flattened input. With input alone (a
    1-D int64 tensor of counts), the indices repeated that many times."""
    _check(input, "repeat_interleave")
    if repeats is None:
        reps = _repeats_array(input)
        if input.ndim != 1:
            raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
        return from_array(_repeat_indices(reps, reps.size, 0, output_size))
    tensor_repeats = isinstance(repeats, Tensor)
    if not (tensor_repeats or _is_int(repeats)) or \
            dim is not None and not _is_int(dim) or \
            output_size is not None and not _is_int(output_size):
        raise _invalid("repeat_interleave", (input, repeats) + (() if dim is None else (dim,)), (
            "Tensor input, Tensor repeats, int dim = None, *, int output_size = None",
            "Tensor repeats, *, int output_size = None",
            "Tensor input, int repeats, int dim = None, *, int output_size = None"))
    if dim is None:
        x, d = input.flatten(), 0
    else:
        x, d = input, _dim(dim, input.ndim, "repeat_interleave")
    shape = list(x.shape)
    if tensor_repeats:
        reps = _repeats_array(repeats)
        if repeats.ndim > 1:
            raise RuntimeError("repeats must be 0-dim or 1-dim tensor")
        size = shape[d] if shape else 1
        idx = _repeat_indices(reps.reshape(-1), size, d, output_size)
        return x.index_select(d, from_array(idx))
    r = int(repeats)
    if r < 0:
        raise RuntimeError("Repeats must be non-negative")
    if output_size is not None and output_size != shape[d] * r:
        raise RuntimeError(f"repeat_interleave: Invalid output_size, expected {shape[d] * r} "
                           f"but got {output_size}")
    y = x.unsqueeze(d + 1).expand(shape[:d + 1] + [r] + shape[d + 1:])
    y = y.reshape(shape[:d] + [shape[d] * r] + shape[d + 1:])
    return y.clone() if r == 1 else y       # (always a copy, as in PyTorch)


# ---------------------------------------------------------------- Tensor-only
def sum_to_size(self, *size):
    """self summed down to size (which must broadcast to self's shape); self itself when
    it already has that shape."""
    if not size:
        raise TypeError('sum_to_size() missing 1 required positional arguments: "size"')
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    for s in size:
        if not _is_int(s):
            raise TypeError(f"sum_to_size(): argument 'size' (position 1) must be tuple of "
                            f"ints, not {type(s).__name__}")
    size = [int(s) for s in size]
    shape = list(self.shape)
    lead = len(shape) - len(size)
    if lead < 0 or any(s != shape[lead + i] and s != 1 for i, s in enumerate(size)):
        raise RuntimeError(f"size {{{size}}} is not expandable to size {{{shape}}}.")
    dims = list(range(lead)) + [lead + i for i, s in enumerate(size)
                                if s == 1 and shape[lead + i] != 1]
    out = self.sum(tuple(dims), keepdim=True) if dims else self
    return out.view(size) if list(out.shape) != size else out


def is_complex(input):
    """False: tapegrad has no complex dtypes."""
    if not isinstance(input, Tensor):
        raise TypeError(f"is_complex(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    return False


def _element_size(self):
    return self.dtype.itemsize


_FUNCTIONS = ("addcmul", "addcdiv", "lerp", "nan_to_num", "logit", "xlogy", "fmax", "fmin",
              "movedim", "unflatten", "tile", "roll", "diag", "diagonal", "trace", "diff",
              "take_along_dim", "tensor_split", "hsplit", "vsplit", "aminmax",
              "nanmean", "repeat_interleave", "is_complex")


def _register():
    special = dict(moveaxis=movedim, tile=_tile_method,     # x.tile(2, 1) and x.tile((2, 1))
                   hsplit=_varargs_split(hsplit),           # x.hsplit(1, 3): indices
                   vsplit=_varargs_split(vsplit), sum_to_size=sum_to_size,
                   nelement=Tensor.numel, element_size=_element_size)
    for name in _FUNCTIONS:
        if name not in special:
            methods.method(name, globals()[name])
        methods.function(name, globals()[name])
    methods.methods(**special)
    methods.function("moveaxis", movedim)


_register()
