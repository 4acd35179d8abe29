"""The namespace functions that take out=, as PyTorch's do: tapegrad.add, sub, mul, div,
matmul, sum, cat and stack. Without out= each is the function (or Tensor method) it wraps;
with out=, the result is computed as without it and written into out with PyTorch's
rules (out.py): dtype checks worded as each PyTorch function words them, resizing with
its warning, and autograd refused. The Tensor methods take no out=, as in PyTorch.
tapegrad/__init__.py exports these after the functions they wrap.
"""
from . import methods
from . import out as _out
from .dtype import as_dtype, type_name
from .functions import sum as _sum, matmul as _matmul
from .indexing import cat as _cat, stack as _stack

__all__ = ["add", "sub", "mul", "div", "matmul", "sum", "cat", "stack"]

_ADD, _SUB = methods.METHODS["add"], methods.METHODS["sub"]
_MUL, _DIV = methods.METHODS["mul"], methods.METHODS["div"]
_C_NAMES = {"float32": "float", "float64": "double", "int64": "long int", "bool": "bool"}
_NO_DIM = object()


def _elementwise(result, out):
    _out.cast_check(result.dtype, out)
    return _out.write(out, result)


def add(input, other, *, alpha=1, out=None):
    """input + alpha * other, with broadcasting and PyTorch's type promotion; out=: written
    into out (see tapegrad._front.out)."""
    if out is None:
        return _ADD(input, other, alpha=alpha)
    _out.check("add", out, (input, other))
    return _elementwise(_ADD(input, other, alpha=alpha), out)


def sub(input, other, *, alpha=1, out=None):
    """input - alpha * other, with broadcasting and PyTorch's type promotion; out=: written
    into out."""
    if out is None:
        return _SUB(input, other, alpha=alpha)
    _out.check("sub", out, (input, other))
    return _elementwise(_SUB(input, other, alpha=alpha), out)


def mul(input, other, *, out=None):
    """input * other, with broadcasting and PyTorch's type promotion; out=: written into
    out."""
    if out is None:
        return _MUL(input, other)
    _out.check("mul", out, (input, other))
    return _elementwise(_MUL(input, other), out)


def div(input, other, *, rounding_mode=None, out=None):
    """input / other (true division: integers give the default dtype), with broadcasting;
    rounding_mode "trunc" or "floor" rounds the quotient (Tensor.div's); out=: written
    into out."""
    r = _DIV(input, other) if rounding_mode is None else _DIV(input, other,
                                                               rounding_mode=rounding_mode)
    if out is None:
        return r
    _out.check("div", out, (input, other))
    return _elementwise(r, out)


def matmul(input, other, *, out=None):
    """The matrix product in all its forms (dot, matrix-vector, batched); out=: written
    into out, which must have the result's dtype (PyTorch's messages per form)."""
    if out is None:
        return _matmul(input, other)
    _out.check("matmul", out, (input, other))
    r = _matmul(input, other)
    if r.dtype is not out.dtype:
        if input.ndim == 1 and other.ndim == 1:
            raise RuntimeError(f"result dtype {type_name(out.dtype)} does not match input "
                               f"dtype {type_name(input.dtype)}")
        if input.ndim >= 2 and other.ndim == 1:
            raise RuntimeError(f"addmv input tensors must have the same dtype, but got "
                               f"{type_name(out.dtype)}, {type_name(input.dtype)}, and "
                               f"{type_name(other.dtype)}")
        raise RuntimeError(f"Expected out tensor to have dtype {_C_NAMES[r.dtype.name]}, but "
                           f"got {_C_NAMES[out.dtype.name]} instead")
    return _out.write(out, r)


def sum(input, dim=_NO_DIM, keepdim=False, *, dtype=None, out=None):  # noqa: A001
    """The sum of all elements, or along dim (keepdim keeps it as size 1); dtype: the
    accumulation and result dtype. out= (with a dim, as PyTorch requires): the sum is taken
    in out's dtype and written into out."""
    if out is None:
        return _sum(input, None if dim is _NO_DIM else dim, keepdim, dtype=dtype)
    if dim is _NO_DIM:
        raise TypeError("sum() received an invalid combination of arguments - got (Tensor, "
                        "out=Tensor), but expected one of:\n * (Tensor input, *, "
                        "tapegrad.dtype dtype = None)\n * (Tensor input, tuple of ints dim, "
                        "bool keepdim = False, *, tapegrad.dtype dtype = None, Tensor out = "
                        "None)\n")
    _out.check("sum", out, (input,))
    if dtype is not None:
        dt = as_dtype(dtype, "sum")
        if dt is not out.dtype:
            raise RuntimeError(f"Expected out tensor to have dtype {_C_NAMES[dt.name]}, but "
                               f"got {_C_NAMES[out.dtype.name]} instead")
    return _out.write(out, _sum(input, dim, keepdim, dtype=out.dtype))


def _joined(fn, join, tensors, dim, out):
    _out.check(fn, out, tensors if isinstance(tensors, (list, tuple)) else ())
    r = join(tensors, dim)
    if not _out.can_cast(r.dtype, out.dtype):
        raise TypeError(f"tapegrad.cat(): input types can't be cast to the desired output "
                        f"type {type_name(out.dtype)}")
    return _out.write(out, r)


def cat(tensors, dim=0, *, out=None):
    """The tensors joined along dim (PyTorch's type promotion); out=: written into out."""
    if out is None:
        return _cat(tensors, dim)
    return _joined("cat", _cat, tensors, dim, out)


def stack(tensors, dim=0, *, out=None):
    """The tensors stacked along a new dim; out=: written into out."""
    if out is None:
        return _stack(tensors, dim)
    return _joined("stack", _stack, tensors, dim, out)
