"""Front of the ops along a dim (softmax, log_softmax, logsumexp, cumsum, prod, var, std,
norm) and of the elementwise ops with arguments (clamp, maximum, minimum, hardtanh,
gelu, softplus), plus outer and einsum. Arguments are checked here."""
import math
import numbers
import warnings

import numpy as np

from . import dtype as D
from . import methods
from .._engine import layout as L
from .._engine.state import GRAD_MODE
from .arithmetic import _binary_method
from .tensor import Tensor, run, _wrap, _dim, _numpy_view, not_tensor, _is_scalar, _ALL_DIMS
from ..ops.registry import BY_NAME, OPS
from .promotion import as_dtype, to, _type_name, from_array, bump_version


def _check(input, fn, name="input", position=None):
    if not isinstance(input, Tensor):
        raise not_tensor(fn, input, name, position)


def _float_input(input, fn, dtype=None, kernel=None):
    """input for an op computed in floating point, converted to dtype= (checked as
    PyTorch does) first. An integer tensor is PyTorch's NotImplementedError when kernel
    names PyTorch's kernel (softmax), else computed in the default dtype (logsumexp)."""
    _check(input, fn)
    if dtype is not None:
        input = to(input, as_dtype(dtype, fn))
    if not input.dtype.is_floating_point:
        if kernel is not None:
            raise NotImplementedError(f"\"{kernel}\" not implemented for "
                                      f"'{_type_name(input.dtype)}'")
        input = input.to(D.default_float())
    return input


def _int_dim(dim, fn):
    """A dim PyTorch takes as an int only (None is its TypeError)."""
    if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool):
        raise TypeError(f"{fn}(): argument 'dim' must be int, not {type(dim).__name__}")
    return dim


def _one_dim(dim, nd, fn):
    """A single dim (or -1 for all dims) from an int, a tuple or None."""
    if dim is None:
        return -1
    if isinstance(dim, (tuple, list)):
        dims = sorted({_dim(d, nd, fn) for d in dim})
        if len(dims) == 0 or len(dims) == max(nd, 1):
            return -1
        if len(dims) > 1:
            raise NotImplementedError(f"{fn}(): reducing over several (but not all) dims is "
                                      "not supported; reshape or permute first")
        dim = dims[0]
    return -1 if nd == 0 else _dim(dim, nd, fn)


def _along(opname, input, dim, keepdim=False, s=0.0, **attrs):
    """An op along dim (-1: all dims) with its integer attributes by name (OpDef.attrs)."""
    op = BY_NAME[opname]
    return _wrap(run(op, input._i, s=s, iargs=op.pack(dim=dim, keepdim=bool(keepdim), **attrs)))


# ---------------------------------------------------------------- softmax family
def _softmax_dim(input, dim, fn, stacklevel=3):
    if dim is None:
        warnings.warn(f"Implicit dimension choice for {fn} has been deprecated. Change the call "
                      "to include dim=X as an argument.", UserWarning, stacklevel=stacklevel)
        dim = 0 if input.ndim in (0, 1, 3) else 1
    return -1 if input.ndim == 0 else _dim(dim, input.ndim, fn)


def _softmax(name, kind):
    """softmax and log_softmax as tapegrad.softmax(input, dim, dtype=None) and
    Tensor.softmax(dim, dtype=None): dim an int, as PyTorch's; nn.functional's spelling
    (dim optional: PyTorch's implicit choice, _stacklevel before dtype) calls them."""
    def fn(input, dim, dtype=None):
        input = _float_input(input, name, dtype, f"{name}_kernel_impl")
        _int_dim(dim, name)
        return _along(name, input, _softmax_dim(input, dim, name), kind=kind)
    fn.__name__ = fn.__qualname__ = name
    return fn


softmax = _softmax("softmax", 0)
log_softmax = _softmax("log_softmax", 1)


def logsumexp(input, dim, keepdim=False):
    input = _float_input(input, "logsumexp")
    if dim is None:
        raise TypeError("logsumexp(): argument 'dim' must be tuple of ints, not NoneType")
    return _along("logsumexp", input, _one_dim(dim, input.ndim, "logsumexp"), keepdim, kind=2)


def _reduction_dtype(input, dtype, fn):
    """input in the dtype= of cumsum or prod (checked as PyTorch does)."""
    if dtype is None:
        return input
    return to(input, as_dtype(dtype, fn))


def cumsum(input, dim, *, dtype=None):
    _check(input, "cumsum")
    _int_dim(dim, "cumsum")
    d = -1 if input.ndim == 0 else _dim(dim, input.ndim, "cumsum")
    input = _reduction_dtype(input, dtype, "cumsum")
    if input.dtype is D.bool_:
        raise NotImplementedError("\"cumsum_out_cpu\" not implemented for 'Bool'")
    if not input.dtype.is_floating_point:
        a = _numpy_view(input)
        return from_array(np.cumsum(a, axis=d if a.ndim else None, dtype=np.int64).reshape(a.shape))
    return _along("cumsum", input, d)


def prod(input, dim=_ALL_DIMS, keepdim=False, *, dtype=None):
    _check(input, "prod")
    if dim is _ALL_DIMS:
        if keepdim is not False:
            raise TypeError("prod(): keepdim= needs a dim (PyTorch's prod() takes keepdim "
                            "only with dim)")
        dim = None
    else:
        _int_dim(dim, "prod")
    input = _reduction_dtype(input, dtype, "prod")
    if input.dtype is D.bool_ and dtype is not None:    # a product in bool: all()
        ints = input.to(D.int64)
        return (prod(ints) if dim is None else prod(ints, dim, keepdim)).to(D.bool_)
    if not input.dtype.is_floating_point:
        a = _numpy_view(input)
        ax = None if dim is None else _dim(dim, a.ndim, "prod")
        return from_array(np.asarray(np.prod(a, axis=ax, keepdims=keepdim if ax is not None
                                             else False, dtype=np.int64)))
    if dim is None:
        return _along("prod", input, -1)
    return _along("prod_dim", input, _one_dim(dim, input.ndim, "prod"), keepdim)


def _correction(unbiased, correction, fn):
    if correction is not None:
        if unbiased is not None:
            raise RuntimeError(f"{fn}: can't pass both unbiased and correction")
        if not isinstance(correction, numbers.Integral):
            raise NotImplementedError(f"{fn}: a non-integer correction is not supported")
        return int(correction)
    return 0 if unbiased is False else 1


def _var_std(name, is_std):
    def fn(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
        if isinstance(dim, bool):           # var(x, False): the old unbiased position
            dim, unbiased = None, dim
        _check(input, name)
        if not input.dtype.is_floating_point:
            raise RuntimeError("std and var only support floating point and complex dtypes")
        corr = _correction(unbiased, correction, name)
        return _along(name, input, _one_dim(dim, input.ndim, name), keepdim, correction=corr,
                      std=is_std)
    fn.__name__ = name
    return fn


var = _var_std("var", False)
std = _var_std("std", True)


def norm(input, p="fro", dim=None, keepdim=False, dtype=None):
    """Tensor.norm; tapegrad.norm is _norm_function (PyTorch's has out= before dtype)."""
    _check(input, "norm")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"linalg.vector_norm: Expected a floating point or complex tensor "
                           f"as input. Got {_type_name(input.dtype)}")
    if dtype is not None:
        dtype = as_dtype(dtype, "linalg_vector_norm")
        if not dtype.is_floating_point:
            raise RuntimeError(f"linalg.vector_norm: dtype should be floating point or "
                               f"complex, but got {_type_name(dtype)}")
        input = input.to(dtype)
    if p == "fro" or p is None:
        p = 2.0
    elif p == "nuc":
        raise NotImplementedError("norm(p='nuc') is not supported")
    elif isinstance(p, str):
        raise RuntimeError(f"norm(): unknown p {p!r}")
    d = _one_dim(dim, input.ndim, "norm")
    p = float(p)
    if p < 0 or p == math.inf:      # no identity: PyTorch refuses an empty reduction
        where = ("an empty tensor because" if d < 0 else
                 f"the dimension {d}because this dimension is empty and")   # (sic)
        if (input.numel() if d < 0 else input.shape[d]) == 0:
            raise RuntimeError(f"linalg.vector_norm cannot compute the {p:g} norm on {where} "
                               "the operation does not have an identity")
    return _along("norm", input, d, keepdim, s=p)


def _norm_function(input, p="fro", dim=None, keepdim=False, out=None, dtype=None):
    """tapegrad.norm: PyTorch's function takes out= (not supported here) before dtype, so
    a positional dtype lands where PyTorch's does."""
    if out is not None:
        raise NotImplementedError("norm(): out= is not supported")
    return norm(input, p, dim, keepdim, dtype)


_norm_function.__name__ = _norm_function.__qualname__ = "norm"


# ---------------------------------------------------------------- elementwise with arguments
def _unary_param(opname, input, s=0.0, s2=None, inplace=False):
    flags = GRAD_MODE.on | (L.OPF_INPLACE if inplace else 0)
    r = run(BY_NAME[opname], input._i, s=s, s2=s2, flags=flags)
    return input if inplace else _wrap(r)


def clamp(input, min=None, max=None):  # noqa: A002
    return _clamp(input, min, max, False)


def clamp_(input, min=None, max=None):  # noqa: A002
    return _clamp(input, min, max, True)


def _clamp(input, min, max, inplace):  # noqa: A002
    _check(input, "clamp_" if inplace else "clamp")
    for bound, what in ((min, "min"), (max, "max")):
        if not (bound is None or isinstance(bound, Tensor) or _is_scalar(bound)):
            raise TypeError(f"clamp(): argument '{what}' must be Number, not "
                            f"{type(bound).__name__}")
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        if not all(b is None or isinstance(b, Tensor) for b in (min, max)):
            raise TypeError("clamp(): min and max must both be numbers or both be tensors "
                            "(PyTorch's clamp takes one form or the other)")
        if (min is None or min.numel() == 1) and (max is None or max.numel() == 1):
            min = None if min is None else min.item()
            max = None if max is None else max.item()
        else:
            raise NotImplementedError("clamp with tensor bounds is not supported; use "
                                      "maximum/minimum")
    if not input.dtype.is_floating_point:
        if isinstance(min, float) or isinstance(max, float):
            if inplace:
                raise RuntimeError("result type Float can't be cast to the desired output "
                                   "type Long")
            return _clamp(input.to(D.default_float()), min, max, False)
        a = _numpy_view(input)
        r = np.clip(a, min, max)
        if inplace:
            a[...] = r
            bump_version(input)
            return input
        return from_array(np.asarray(r, dtype=a.dtype))
    lo = -math.inf if min is None else float(min)
    hi = math.inf if max is None else float(max)
    return _unary_param("clamp", input, lo, hi, inplace)


def _clamp_one(opname, input, bound, inplace=False):
    _check(input, opname + ("_" if inplace else ""))
    if isinstance(bound, Tensor):
        bound = bound.item()
    elif not _is_scalar(bound):
        raise TypeError(f"{opname}(): argument '{opname[-3:]}' must be Number, not "
                        f"{type(bound).__name__}")
    if not input.dtype.is_floating_point:
        lo, hi = (bound, None) if opname == "clamp_min" else (None, bound)
        return _clamp(input, lo, hi, inplace)
    return _unary_param(opname, input, float(bound), inplace=inplace)


def clamp_min(input, min):  # noqa: A002
    return _clamp_one("clamp_min", input, min)


def clamp_max(input, max):  # noqa: A002
    return _clamp_one("clamp_max", input, max)


def clamp_min_(input, min):  # noqa: A002
    return _clamp_one("clamp_min", input, min, inplace=True)


def clamp_max_(input, max):  # noqa: A002
    return _clamp_one("clamp_max", input, max, inplace=True)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    input = _float_input(input, "hardtanh")
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    return _unary_param("hardtanh", input, float(min_val), float(max_val), inplace=inplace)


def relu6(input, inplace=False):
    return hardtanh(input, 0.0, 6.0, inplace)


def softsign(input):
    _check(input, "softsign")
    return input / (input.abs() + 1)            # PyTorch's composition


def gelu(input, approximate="none"):
    input = _float_input(input, "gelu")
    if approximate not in ("none", "tanh"):
        raise RuntimeError(f"approximate argument must be either none or tanh, got {approximate}")
    return _unary_param("gelu" if approximate == "none" else "gelu_tanh", input)


def softplus(input, beta=1.0, threshold=20.0):
    input = _float_input(input, "softplus")
    return _unary_param("softplus", input, float(beta), float(threshold))


maximum = _binary_method(BY_NAME["maximum"], named=True)
minimum = _binary_method(BY_NAME["minimum"], named=True)


def _tensor_pair(fn):
    def f(input, other):
        if not isinstance(input, Tensor) or not isinstance(other, Tensor):
            raise TypeError(f"{fn.__name__}(): expected both arguments to be Tensors")
        return fn(input, other)
    f.__name__ = fn.__name__
    return f


def bmm(input, mat2):
    _check(input, "bmm")
    _check(mat2, "bmm")
    if input.ndim != 3:
        raise RuntimeError("batch1 must be a 3D tensor")
    if mat2.ndim != 3:
        raise RuntimeError("batch2 must be a 3D tensor")
    if input.shape[0] != mat2.shape[0] or input.shape[2] != mat2.shape[1]:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                           f"[{input.shape[0]}, {input.shape[2]}] but got: "
                           f"[{mat2.shape[0]}, {mat2.shape[1]}].")
    return input @ mat2


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """beta * input + alpha * (mat1 @ mat2), PyTorch's composition; beta = 0 ignores input
    (NaN in it does not propagate), as in PyTorch."""
    for t in (input, mat1, mat2):
        _check(t, "addmm")
    if mat1.ndim != 2 or mat2.ndim != 2:
        raise RuntimeError(f"{'mat1' if mat1.ndim != 2 else 'mat2'} must be a matrix")
    out = mat1 @ mat2
    if alpha != 1:
        out = out * alpha
    if beta == 0:
        return out
    return out + (input if beta == 1 else input * beta)


# ---------------------------------------------------------------- outer / einsum
def outer(input, vec2):
    _check(input, "outer")
    _check(vec2, "outer", "vec2", 2)
    if input.ndim != 1 or vec2.ndim != 1:
        raise RuntimeError(f"outer: expected 1D tensors, but got {input.ndim}D and "
                           f"{vec2.ndim}D tensors")
    return input.reshape(input.shape[0], 1) * vec2          # PyTorch's decomposition


def _parse(equation, n):
    eq = equation.replace(" ", "")
    if "." in eq:
        raise NotImplementedError("einsum(): '...' is not supported; write the dims out")
    lhs, arrow, out = eq.partition("->")
    ins = lhs.split(",")
    if len(ins) != n:
        raise RuntimeError("einsum(): more operands were provided than specified in the "
                           "equation" if n > len(ins) else "einsum(): fewer operands were "
                           "provided than specified in the equation")
    for s in ins + [out]:
        if not all(c.isalpha() for c in s):
            raise RuntimeError(f"einsum(): invalid subscript given in the equation: {equation!r}")
    if not arrow:
        counts = {}
        for s in ins:
            for c in s:
                counts[c] = counts.get(c, 0) + 1
        out = "".join(sorted(c for c, k in counts.items() if k == 1))
    if len(set(out)) != len(out):
        raise RuntimeError("einsum(): output subscript appears more than once in the output")
    for c in out:
        if not any(c in s for s in ins):
            raise RuntimeError(f"einsum(): output subscript {c} does not appear in the equation "
                               "for any input operand")
    return ins, out


def _sum_out(t, subs, keep):
    """Sum the letters of t that are not in keep."""
    drop = [i for i, c in enumerate(subs) if c not in keep]
    if drop:
        t = t.sum(tuple(drop))
        subs = "".join(c for c in subs if c in keep)
    return t, subs


def _contract(a, sa, b, sb, out):
    sizes = {}
    for t, s in ((a, sa), (b, sb)):
        for c, n in zip(s, t.shape):
            if sizes.setdefault(c, n) != n:
                raise RuntimeError("einsum(): operands do not broadcast with remapped shapes "
                                   f"(subscript {c} has sizes {sizes[c]} and {n})")
    a, sa = _sum_out(a, sa, set(sb) | set(out))
    b, sb = _sum_out(b, sb, set(sa) | set(out))
    batch = [c for c in out if c in sa and c in sb]
    left = [c for c in out if c in sa and c not in sb]
    right = [c for c in out if c in sb and c not in sa]
    contract = [c for c in sa if c in sb and c not in out]

    def size(cs):
        n = 1
        for c in cs:
            n *= sizes[c]
        return n
    pa = a.permute([sa.index(c) for c in batch + left + contract])
    pb = b.permute([sb.index(c) for c in batch + contract + right])
    r = pa.reshape(size(batch), size(left), size(contract)) @ \
        pb.reshape(size(batch), size(contract), size(right))
    r = r.reshape([sizes[c] for c in batch + left + right])
    order = batch + left + right
    perm = [order.index(c) for c in out]
    return r.permute(perm) if perm != list(range(len(perm))) else r


def einsum(equation, *operands):
    """einsum("ij,jk", a, b) or einsum("ij,jk", [a, b]): *operands as in PyTorch."""
    if not isinstance(equation, str):
        raise TypeError(f"einsum(): argument 'equation' (position 1) must be str, not "
                        f"{type(equation).__name__}")
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    for t in operands:
        _check(t, "einsum")
    ins, out = _parse(equation, len(operands))
    for s, t in zip(ins, operands):
        if len(s) != t.ndim:
            raise RuntimeError(f"einsum(): the number of subscripts in the equation ({len(s)}) "
                               f"does not match the number of dimensions ({t.ndim}) for "
                               f"operand {ins.index(s)}")
        if len(set(s)) != len(s):
            raise NotImplementedError("einsum(): a repeated subscript in one operand "
                                      "(a diagonal) is not supported")
    if len(operands) == 1:
        t, s = _sum_out(operands[0], ins[0], set(out))
        perm = [s.index(c) for c in out]
        return t.permute(perm)
    t, s = operands[0], ins[0]
    for k in range(1, len(operands)):
        rest = set(out).union(*ins[k + 1:])
        mid = out if k == len(operands) - 1 else "".join(
            c for c in dict.fromkeys(s + ins[k]) if c in rest)
        t = _contract(t, s, operands[k], ins[k], mid)
        s = mid
    return t


def view_as(self, other):
    _check(other, "view_as", "other")
    return self.view(other.shape)


def reshape_as(self, other):
    _check(other, "reshape_as", "other")
    return self.reshape(other.shape)


def _register():
    T = {name: globals()[name] for name in (
        "softmax", "log_softmax", "logsumexp", "cumsum", "prod", "var", "std", "norm", "clamp",
        "clamp_", "clamp_min", "clamp_max", "clamp_min_", "clamp_max_", "maximum", "minimum")}
    T.update(clip=clamp, clip_=clamp_, bmm=bmm, addmm=addmm, view_as=view_as,
             reshape_as=reshape_as, outer=outer, ger=outer)
    methods.methods(**T)
    for name in ("softmax", "log_softmax", "logsumexp", "cumsum", "prod", "var", "std",
                 "clamp", "clamp_min", "clamp_max", "outer", "einsum"):
        methods.function(name, globals()[name])
    for op in OPS:          # every plain unary op of the table: tapegrad.log1p(x), ...
        if op.kind == "unary" and op.method and not op.name.endswith("_"):
            methods.function(op.name, methods.METHODS[op.name])
    for name in ("atan2", "hypot", "fmod", "remainder", "logaddexp", "arctan2"):
        methods.function(name, methods.METHODS[name])
    methods.functions(norm=_norm_function, clip=clamp, bmm=bmm, addmm=addmm, ger=outer,
                      maximum=_tensor_pair(maximum), minimum=_tensor_pair(minimum))


_register()
