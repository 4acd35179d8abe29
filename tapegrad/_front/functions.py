"""The Python side of the ops that take arguments: validation (every user input is
checked here, before a kernel sees it), then one engine call. Installed as Tensor
methods and as module-level functions (tapegrad.sum(x), x.sum(), ...)."""
import collections
import numbers

import numpy as np

from . import dtype as D
from .._engine import layout as L
from .._engine import sizes as _sizes
from .._engine.state import GRAD_MODE
from . import arithmetic  # noqa: F401  (registers the methods this module names as functions)
from . import methods
from .tensor import Tensor, E, run, _wrap, _dim, _CADDR, not_tensor, _ALL_DIMS, _is_scalar
from ..ops.registry import BY_NAME, OPS
from .promotion import from_array, _type_name, as_dtype, to
from .tensor import _numpy_view
from . import math_ops as _math
from .indexing import _layout, _view, view_strides, _contiguous_strides

__all__ = [  # (the unary and binary ops' functions come from the method registry)
    "sum", "mean", "max", "min", "matmul", "mm", "dot", "mv", "reshape",
    "transpose", "permute", "t", "unbind", "flatten"]

_ALL = {name: BY_NAME[name] for name in ("sum", "mean")}
_BY_DIM = {name: BY_NAME[name + "_dim"] for name in ("sum", "mean")}
# the reductions' integer attributes by name (their OpDef's attrs), for the fast paths
# below, which write the engine's iargs themselves
_DIMS, _KEEP, _MEAN = (BY_NAME["sum"].slot(a) for a in ("dims", "keepdim", "mean"))
_XDIMS, _XKEEP, _WHICH = (BY_NAME["max"].slot(a) for a in ("dims", "keepdim", "which"))
_MW, _MN, _MDT = L.MW, L.M_NDIM, L.M_DTYPE
_VIEW, _UNBIND, _EXPAND = BY_NAME["view"], BY_NAME["unbind"], BY_NAME["expand"]
_max_ret = collections.namedtuple("max", ["values", "indices"])
_min_ret = collections.namedtuple("min", ["values", "indices"])


def _dims_mask(dim, ndim, fn):
    if dim is None:
        return (1 << ndim) - 1
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    if len(dims) == 0:              # PyTorch: an empty dim list reduces everything
        return (1 << ndim) - 1
    for i, d in enumerate(dims):    # (every element's type before any range: PyTorch's)
        if len(dims) > 1 and (not isinstance(d, (int, np.integer)) or isinstance(d, bool)):
            raise TypeError(f"{fn}(): argument 'dim' failed to unpack the object at pos "
                            f"{i + 1} with error \"type must be tuple of ints,but got "
                            f"{type(d).__name__}\"")
    mask = 0
    for d in dims:
        d = _dim(d, ndim, fn)
        if mask >> d & 1:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
        mask |= 1 << d
    return mask


def _reduce(self, name, dim, keepdim, flag):
    if not isinstance(self, Tensor):
        raise TypeError(f"{name}(): argument 'input' must be Tensor, not {type(self).__name__}")
    i = self._i
    if dim is None:             # x.sum(): the common case, one compiled call; the mask -1
        with E.lock:            # has every dim's bit set, whatever the rank
            ia = E.iargs_mv
            ia[_DIMS] = -1
            ia[_KEEP] = 0
            ia[_MEAN] = flag
            r = E.op(_CADDR, _ALL[name].opcode, i, -1, 0.0, GRAD_MODE.on)
        if r >= 0:
            return _wrap(r)
    mv = E.meta_mv
    nd = mv[i * _MW + _MN]
    if mv[i * _MW + _MDT] > L.F64:
        return _int_reduce(self, name, dim, keepdim)
    if dim is None:
        return _wrap(_run_reduction(_ALL[name], i, -1, 0, flag))
    if dim.__class__ is int and -nd <= dim < nd:    # x.sum(1): the common call
        mask = 1 << (dim + nd if dim < 0 else dim)
    else:
        mask = _dims_mask(dim, nd, name)
    return _wrap(_run_reduction(_BY_DIM[name], i, mask, 1 if keepdim else 0, flag))


def _int_reduce(self, name, dim, keepdim):
    """sum of an int or bool tensor: int64, by NumPy (no gradient to carry)."""
    if name != "sum":
        raise RuntimeError(f"{name}(): could not infer output dtype. Input dtype must be either "
                           f"a floating point or complex dtype. Got: "
                           f"{_type_name(self.dtype)}")
    a = _numpy_view(self)
    axis = None if dim is None else tuple(_dim(d, self.ndim, name) for d in
                                          (dim if isinstance(dim, (tuple, list)) else (dim,)))
    return from_array(np.asarray(a.sum(axis=axis, keepdims=bool(keepdim), dtype=np.int64)))


def _int_extreme(input, name, ret, dim, keepdim):
    a = _numpy_view(input)
    if a.size == 0:
        raise RuntimeError(f"{name}(): Expected reduction dim to be specified for "
                           "input.numel() == 0.")
    if dim is None:
        return from_array(np.asarray(a.max() if name == "max" else a.min()))
    d = _dim(dim, input.ndim, name)
    if a.ndim == 0:
        return ret(from_array(a.copy()), from_array(np.zeros((), np.int64)))
    idx = (np.argmax if name == "max" else np.argmin)(a, axis=d)
    vals = np.take_along_axis(a, np.expand_dims(idx, d), d)
    if not keepdim:
        vals = vals.squeeze(d)
    else:
        idx = np.expand_dims(idx, d)
    return ret(from_array(vals), from_array(idx.astype(np.int64)))


def _run_reduction(op, a, mask, keepdim, flag):
    """run() for sum or mean, without the general path's argument handling."""
    with E.lock:
        ia = E.iargs_mv
        ia[_DIMS] = mask
        ia[_KEEP] = keepdim
        ia[_MEAN] = flag
        r = E.op(_CADDR, op.opcode, a, -1, 0.0, GRAD_MODE.on)
        if r < 0:
            return run(op, a, iargs=op.pack(dims=mask, keepdim=keepdim, mean=flag))
    return r


def _as(input, dtype, fn):
    """input converted to a reduction's dtype= argument (checked as PyTorch does)."""
    if dtype is None:
        return input
    if not isinstance(input, Tensor):
        raise not_tensor(fn, input)
    return to(input, as_dtype(dtype, fn))


def sum(input, dim=None, keepdim=False, *, dtype=None):  # noqa: A001
    t = input if dtype is None else _as(input, dtype, "sum")
    if dtype is not None and t.dtype is D.bool_:     # a sum of bools in bool: any
        return to(_reduce(t, "sum", dim, keepdim, 0), D.bool_)
    return _reduce(t, "sum", dim, keepdim, 0)


def mean(input, dim=None, keepdim=False, *, dtype=None):
    t = input if dtype is None else _as(input, dtype, "mean")
    if dtype is not None and not t.dtype.is_floating_point:
        raise RuntimeError(f"mean(): could not infer output dtype. Optional dtype must be "
                           f"either a floating point or complex dtype. Got: "
                           f"{_type_name(t.dtype)}")
    return _reduce(t, "mean", dim, keepdim, 1)     # (an integer input: _int_reduce refuses)




def _extreme(name, ret, flag):
    code = BY_NAME[name + "_dim"].opcode

    def fn(input, dim=_ALL_DIMS, keepdim=False):
        if dim.__class__ is int and isinstance(input, Tensor):
            # x.max(1): a float tensor, a dim in range, a non-empty line: one engine call
            # with the outputs read back (every check below would pass)
            b = input._i * _MW
            mv = E.meta_mv
            nd = mv[b + _MN]
            d = dim + nd if dim < 0 else dim
            if 0 <= d < nd and mv[b + _MDT] <= L.F64 and mv[b + L.M_SHAPE + d] > 0:
                with E.lock:
                    ia = E.iargs_mv
                    ia[_XDIMS] = 1 << d
                    ia[_XKEEP] = 1 if keepdim else 0
                    ia[_WHICH] = flag
                    if E.op(_CADDR, code, input._i, -1, 0.0, GRAD_MODE.on) >= 0:
                        # (both read before any Python call: a lock-free op of another
                        # thread cannot run in between and overwrite them)
                        outs = E.outs_mv
                        values, indices = outs[0], outs[1]
                        return ret(_wrap(values), _wrap(indices))
        if not isinstance(input, Tensor):
            raise not_tensor(name, input)
        if isinstance(dim, Tensor):             # max(a, b): elementwise
            return (_math.maximum if name == "max" else _math.minimum)(input, dim)
        if dim is _ALL_DIMS:
            if keepdim is not False:
                raise TypeError(f"{name}(): keepdim= needs a dim (PyTorch's max() and min() "
                                "take keepdim only with dim)")
            dim = None
        else:
            _dim(dim, input.ndim, name)     # (dim=None: PyTorch's TypeError)
        if not input.dtype.is_floating_point:
            return _int_extreme(input, name, ret, dim, keepdim)
        if dim is None:
            if input.numel() == 0:
                raise RuntimeError(f"{name}(): Expected reduction dim to be specified for "
                                   "input.numel() == 0. Specify the reduction dim with the "
                                   "'dim' argument.")
            op = BY_NAME[name]
            return _wrap(run(op, input._i, iargs=op.pack(dims=0, keepdim=0, which=flag)))
        d = _dim(dim, input.ndim, name)
        if input.ndim and input.shape[d] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
        mask = 1 << d if input.ndim else 0      # 0-d: the element itself, index 0
        op = BY_NAME[name + "_dim"]
        ids = run(op, input._i, iargs=op.pack(dims=mask, keepdim=bool(keepdim), which=flag),
                  all_outputs=True)
        return ret(_wrap(ids[0]), _wrap(ids[1]))
    fn.__name__ = name
    return fn


max = _extreme("max", _max_ret, 0)  # noqa: A001
min = _extreme("min", _min_ret, 1)  # noqa: A001


def matmul(input, other):
    if not isinstance(other, Tensor) or not isinstance(input, Tensor):
        _tensors("matmul", (input, "input"), (other, "other"))
    mv = E.meta_mv
    if mv[input._i * _MW + _MN] == 2 and mv[other._i * _MW + _MN] == 2:
        # matrices (every linear layer): the kernel checks the inner sizes and dtypes, and
        # on any failure nothing has changed and the checks below say what is wrong
        r = E.op(_CADDR, _MM, input._i, other._i, 0.0, GRAD_MODE.on | L.OPF_SOLO)
        if r >= 0:
            return _wrap(r)
    na, nb = input.ndim, other.ndim
    if na == 0 or nb == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are "
                           f"{na}D and {nb}D")
    sa, sb = input.shape, other.shape
    k1 = sa[-1]
    k2 = sb[0] if nb == 1 else sb[-2]
    if k1 != k2:
        if na == 2 and nb == 1:
            raise RuntimeError(f"size mismatch, got input ({sa[0]}), mat ({sa[0]}x{sa[1]}), "
                               f"vec ({sb[0]})")
        if na >= 3 and nb >= 3 and sa[:-2] == sb[:-2]:
            batch = 1
            for x in sa[:-2]:
                batch *= x
            raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                               f"[{batch}, {k1}] but got: [{batch}, {k2}].")
        if na == 1 and nb == 1:
            raise RuntimeError(f"inconsistent tensor size, expected tensor [{sa[0]}] and src "
                               f"[{sb[0]}] to have the same number of elements, but got "
                               f"{sa[0]} and {sb[0]} elements respectively")
        if na <= 2 and nb <= 2:
            rows = 1 if na == 1 else sa[0]
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied "
                               f"({rows}x{k1} and {k2}x{sb[-1] if nb > 1 else 1})")
        raise RuntimeError(f"matmul: the last dim of the first operand ({k1}) must equal the "
                           f"{'first' if nb == 1 else 'second-to-last'} dim of the second "
                           f"({k2}); shapes {list(sa)} and {list(sb)}")
    name = ("dot" if na == 1 and nb == 1 else "mv" if na == 2 and nb == 1 else
            "mm" if na == 2 and nb == 2 else "matmul")
    if name == "matmul":
        ba, bb = list(sa[:-2]), list(sb[:-2]) if nb > 1 else []
        nd = len(ba) if len(ba) > len(bb) else len(bb)     # (max is ours here)
        for d in range(nd - 1, -1, -1):
            x = ba[d - (nd - len(ba))] if d - (nd - len(ba)) >= 0 else 1
            y = bb[d - (nd - len(bb))] if d - (nd - len(bb)) >= 0 else 1
            if x != y and x != 1 and y != 1:
                raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b "
                                   f"({y}) at non-singleton dimension {d}")
    return _wrap(run(BY_NAME[name], input._i, other._i))


_MM = BY_NAME["mm"].opcode


def _tensors(fn, *named):
    """PyTorch's TypeError for a non-tensor among the (value, name) pairs named."""
    for k, (value, name) in enumerate(named):
        if not isinstance(value, Tensor):
            raise not_tensor(fn, value, name, k + 1)


def _checked(name, a, b):
    _tensors(name, (a, "input"), (b, "vec" if name == "mv" else "mat2"))
    if a.ndim != 2 or b.ndim != (1 if name == "mv" else 2):
        raise RuntimeError(f"{name}: unexpected dims {a.ndim}D and {b.ndim}D")
    return matmul(a, b)


def mm(input, mat2):
    return _checked("mm", input, mat2)


def mv(input, vec):
    return _checked("mv", input, vec)


def dot(input, other):
    _tensors("dot", (input, "input"), (other, "tensor"))
    if input.ndim != 1 or other.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {input.ndim}D and {other.ndim}D tensors")
    return matmul(input, other)


def _resolve_shape(shape, numel, fn):
    if not shape:               # (x.view(()) is a 0-d view; x.view() is PyTorch's error)
        if fn == "view":
            raise TypeError("view() received an invalid combination of arguments - got (), "
                            "but expected one of: (torch.dtype dtype), (tuple of ints size)")
        raise TypeError(f'{fn}() missing 1 required positional arguments: "shape"')
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    shape = list(shape)
    infer = None
    known = 1
    for i, s in enumerate(shape):
        if isinstance(s, Tensor):
            s = shape[i] = int(s)
        if not isinstance(s, numbers.Integral) or isinstance(s, bool):
            raise TypeError(f"{fn}(): shape must be a sequence of ints, got {shape!r}")
        _sizes.check_int64(s, fn, i + 1, "size" if fn == "view" else "shape")
        if s == -1:
            if infer is not None:
                raise RuntimeError("only one dimension can be inferred")
            infer = i
        elif s < 0:
            raise RuntimeError(f"invalid shape dimension {s} at index {i} of shape {shape}")
        else:
            known *= s
    if infer is not None:
        if known == 0 and numel == 0:
            raise RuntimeError(f"cannot reshape tensor of 0 elements into shape {shape} because "
                               "the unspecified dimension size -1 can be any value and is "
                               "ambiguous")
        if known == 0 or numel % known:
            given = [(-1 if i == infer else x) for i, x in enumerate(shape)]
            raise RuntimeError(f"shape '{given}' is invalid for input of size {numel}")
        shape[infer] = numel // known
    elif known != numel:
        raise RuntimeError(f"shape '{shape}' is invalid for input of size {numel}")
    if len(shape) > L.MAXD:
        raise RuntimeError(f"tapegrad tensors have at most {L.MAXD} dims, got {len(shape)}")
    _sizes.check_view(shape, contiguous=True)      # (0 elements allow any other size)
    return shape


def view(self, *shape):
    _tensors("view", (self, "input"))
    if len(shape) == 1 and isinstance(shape[0], D.dtype):
        raise NotImplementedError("view(dtype) is not supported")
    shape = _resolve_shape(shape, self.numel(), "view")
    if not self.is_contiguous():
        v = _strided_view(self, shape, "view_strided")
        if v is None:
            raise RuntimeError("view size is not compatible with input tensor's size and stride "
                               "(at least one dimension spans across two contiguous subspaces). "
                               "Use .reshape(...) instead.")
        return v
    return _wrap(run(_VIEW, self._i, iargs=_VIEW.pack(ndim=len(shape), shape=shape)))


def _strided_view(t, shape, opname):
    """A view of a strided t as shape, if its layout allows one (else None)."""
    old, st, off = _layout(t)
    new_st = view_strides(old, st, shape)
    if new_st is None:
        return None
    return _view(t, opname, shape, new_st, off, _contiguous_strides(shape), 0)


def _reshape_method(input, *shape):
    """Tensor.reshape: x.reshape(2, 3) or x.reshape((2, 3))."""
    _tensors("reshape", (input, "input"))
    shape = _resolve_shape(shape, input.numel(), "reshape")
    if input.is_contiguous():
        return _wrap(run(_VIEW, input._i, iargs=_VIEW.pack(ndim=len(shape), shape=shape)))
    v = _strided_view(input, shape, "reshape_alias")    # (PyTorch's reshape is a view
    if v is not None:                                   # whenever one exists)
        return v
    op = BY_NAME["reshape_copy"]
    return _wrap(run(op, input._i, iargs=op.pack(ndim=len(shape), shape=shape)))


def flatten(input, start_dim=0, end_dim=-1):
    _tensors("flatten", (input, "input"))
    nd = input.ndim
    if nd == 0:
        return _reshape_method(input, 1)
    s, e = _dim(start_dim, nd, "flatten"), _dim(end_dim, nd, "flatten")
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    if s == e:
        return input            # (PyTorch returns the tensor itself: no view, no node)
    sh = list(input.shape)
    n = 1
    for x in sh[s:e + 1]:
        n *= x
    return _reshape_method(input, sh[:s] + [n] + sh[e + 1:])


def _permute_run(opname, t, perm):
    op = BY_NAME[opname]
    return _wrap(run(op, t._i, iargs=op.pack(dims=perm)))


def _permute_method(input, *dims):
    """Tensor.permute: x.permute(1, 0) or x.permute((1, 0))."""
    _tensors("permute", (input, "input"))
    if not dims:
        raise TypeError('permute() missing 1 required positional arguments: "dims"')
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    for d in dims:
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool):
            raise TypeError(f"permute(): argument 'dims' must be tuple of ints, but found "
                            f"element of type {type(d).__name__}")
    nd = input.ndim
    if len(dims) != nd:
        raise RuntimeError(f"permute(sparse_coo): number of dimensions in the tensor input does "
                           f"not match the length of the desired ordering of dimensions i.e. "
                           f"input.dim() = {nd} is not equal to len(dims) = {len(dims)}")
    perm = [_dim(d, nd, "permute") for d in dims]
    if len(set(perm)) != nd:
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    return _permute_run("permute", input, perm)


def transpose(input, dim0, dim1):
    _tensors("transpose", (input, "input"))
    nd = input.ndim
    perm = list(range(nd))
    if nd == 0:
        _dim(dim0, 0, "transpose"), _dim(dim1, 0, "transpose")
        return _permute_run("transpose", input, perm)
    d0, d1 = _dim(dim0, nd, "transpose"), _dim(dim1, nd, "transpose")
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return _permute_run("transpose", input, perm)


def t(input):
    _tensors("t", (input, "input"))
    if input.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {input.ndim}D")
    return _permute_run("t", input, list(range(input.ndim))[::-1])


def _T(self):
    return _permute_run("permute", self, list(range(self.ndim))[::-1])


def _mT(self):
    if self.ndim < 2:
        raise RuntimeError("tensor.mT is only supported on matrices or batches of matrices. "
                           f"Got {self.ndim}-D tensor.")
    return transpose(self, -2, -1)


def expand(self, *sizes):
    _tensors("expand", (self, "input"))
    if not sizes:
        raise TypeError('expand() missing 1 required positional arguments: "size"')
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    for i, s in enumerate(sizes):
        if not isinstance(s, (int, np.integer)) or isinstance(s, bool):
            raise TypeError(f"expand(): argument 'size' must be tuple of ints, but found "
                            f"element of type {type(s).__name__}")
        _sizes.check_int64(int(s), "expand", i + 1)
    sh = list(self.shape)
    nd, na = len(sizes), len(sh)
    if nd < na:
        raise RuntimeError(f"expand(tapegrad.{self.dtype.tensor_type}{{{sh}}}, "
                           f"size={list(sizes)}): the number of sizes provided ({nd}) must "
                           f"be greater or equal to the number of dimensions in the tensor "
                           f"({na})")
    if nd > L.MAXD:
        raise RuntimeError(f"tapegrad tensors have at most {L.MAXD} dims, got {nd}")
    out = []
    for d, s in enumerate(sizes):
        da = d - (nd - na)
        cur = sh[da] if da >= 0 else None
        if s == -1:
            if cur is None:
                raise RuntimeError("expand: -1 is not allowed in a leading, non-existing dimension")
            s = cur
        if cur is not None and cur != s and cur != 1:
            raise RuntimeError(f"The expanded size of the tensor ({s}) must match the existing "
                               f"size ({cur}) at non-singleton dimension {d}.  Target sizes: "
                               f"{list(sizes)}.  Tensor sizes: {sh}")
        out.append(int(s))
    _sizes.check_view(out)      # (a size below -1 too: PyTorch's count overflows there)
    return _wrap(run(_EXPAND, self._i, iargs=_EXPAND.pack(ndim=nd, shape=out)))


def expand_as(self, other):
    _tensors("expand_as", (self, "input"), (other, "other"))
    return expand(self, other.shape)


def repeat(self, *sizes):
    """Tiles self sizes[d] times along each dim (leading sizes add dims): per repeated dim,
    a new dim of size 1 before it, expanded and merged into it by a reshape, so the
    gradient is the expand's (a sum over the copies)."""
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    if not sizes:
        raise TypeError('repeat() missing 1 required positional arguments: "repeats"')
    for i, r in enumerate(sizes):
        if not isinstance(r, numbers.Integral) or isinstance(r, bool):
            raise TypeError(f"repeat(): argument 'repeats' must be tuple of ints, but found "
                            f"element of type {type(r).__name__}")
        _sizes.check_int64(int(r), "repeat", i + 1, "repeats")
    nd = len(sizes)
    if nd < self.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number "
                           "of dimensions of tensor")
    shape = [1] * (nd - self.ndim) + list(self.shape)
    out = [int(r) * s for r, s in zip(sizes, shape)]
    if any(n < 0 for n in out):
        raise _sizes.negative_dimension_error(out)
    _sizes.check_new(out, self.dtype.itemsize)     # (the expands on the way are views)
    if nd >= L.MAXD and any(r != 1 for r in sizes):
        raise RuntimeError(f"repeat(): tapegrad tensors have at most {L.MAXD} dims, and "
                           f"repeating one of {nd} dims takes one more on the way")
    x = _reshape_method(self, shape)
    sizes = [int(r) for r in sizes]
    if 0 in out:        # an empty result: made empty first, so that no expand on the way
        d0 = out.index(0)   # counts more elements than int64 holds
        if shape[d0]:
            x, shape[d0] = x.narrow(d0, 0, 0), 0
        sizes[d0] = 1
    for d, r in enumerate(sizes):
        if r != 1:
            head, tail = out[:d], shape[d:]
            x = _reshape_method(expand(_reshape_method(x, head + [1] + tail),
                                       head + [int(r)] + tail),
                        out[:d + 1] + tail[1:])
    # repeat always copies: a reshape of an expand is a view of self when its layout allows
    # one (repeating size-1 dims)
    if E.meta[x._i, L.M_SID] == E.meta[self._i, L.M_SID]:
        x = x.clone()
    return x


def unbind(input, dim=0):
    _tensors("unbind", (input, "input"))
    nd = input.ndim
    d = _dim(dim, nd, "unbind")
    if nd == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    count = input.shape[d]
    E.reserve_args(count)
    if count == 0:
        return ()
    ids = run(_UNBIND, input._i, iargs=_UNBIND.pack(dim=d), all_outputs=True)
    return tuple(_wrap(i) for i in ids)


def _generated(name):
    return getattr(Tensor, name)


def _sequence_arg(fn, value, name):
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"{fn}(): argument '{name}' (position 2) must be tuple of ints, not "
                        f"{type(value).__name__}")
    return value


def reshape(input, shape):
    """tapegrad.reshape(input, shape): PyTorch's function takes the shape as one sequence
    (the method, x.reshape(2, 3), also as separate ints)."""
    return _reshape_method(input, _sequence_arg("reshape", shape, "shape"))


def permute(input, dims):
    """tapegrad.permute(input, dims): one sequence, as PyTorch's function takes it."""
    return _permute_method(input, _sequence_arg("permute", dims, "dims"))


for _m, _name in ((_reshape_method, "reshape"), (_permute_method, "permute")):
    _m.__name__ = _m.__qualname__ = _name       # (their messages name the method)
del _m, _name


def _register():
    T = {name: globals()[name] for name in (
        "sum", "mean", "max", "min", "matmul", "mm", "mv", "dot", "view", "flatten",
        "transpose", "t", "expand", "expand_as", "unbind", "repeat")}
    T.update(reshape=_reshape_method, permute=_permute_method, __matmul__=matmul,
             __rmatmul__=lambda self, other: matmul(other, self), T=property(_T),
             mT=property(_mT), swapaxes=T["transpose"])
    methods.methods(**T)
    for op in OPS:      # every plain unary op of the table: tapegrad.log1p(x), ...
        if op.kind == "unary" and op.method and not op.name.endswith("_"):
            methods.function(op.name, methods.METHODS[op.name])
    for name in ("add", "sub", "mul", "div", "true_divide"):
        methods.function(name, methods.METHODS[name])
    methods.function("pow", _pow)


def _pow(input, exponent):
    """input ** exponent, elementwise: a tensor to a tensor's or a number's power, or a
    number to a tensor's (PowBackward2), as torch.pow takes them."""
    if not isinstance(input, Tensor):
        if isinstance(exponent, Tensor) and _is_scalar(input):
            return exponent.__rpow__(input)
        raise not_tensor("pow", input)
    return methods.METHODS["pow"](input, exponent)


_pow.__name__ = _pow.__qualname__ = "pow"
_register()
