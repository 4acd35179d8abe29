"""out= arguments, with PyTorch's rules: the result is computed as without out=, then
written into out (converted to out's dtype where PyTorch's casting rules allow, resized
when its shape differs), and out itself is returned. Autograd does not run through out=:
PyTorch refuses it while grad mode is on and an argument requires grad, and so does
tapegrad. The functions that take out= call these helpers (factories in creation.py and
utilities.py, ops in out_ops.py).
"""
import warnings

from .dtype import as_dtype, type_name
from .tensor import Tensor
from .._engine.state import GRAD_MODE

_RESIZED = ("An output with one or more elements was resized since it had shape {old}, "
            "which does not match the required output shape {new}. This behavior is "
            "deprecated, and in a future PyTorch release outputs will not be resized unless "
            "they have zero elements.")


def check(fn, out, inputs=(), name=None):
    """Before computing: out is a tensor, and no argument (out included) requires grad
    while grad mode is on. name: the function as PyTorch's autograd message names it
    (aten::zeros for a factory)."""
    if not isinstance(out, Tensor):
        raise TypeError(f"{fn}(): argument 'out' must be Tensor, not {type(out).__name__}")
    if GRAD_MODE.on and (out.requires_grad or any(
            isinstance(t, Tensor) and t.requires_grad for t in inputs)):
        raise RuntimeError(f"{name or fn}(): functions with out=... arguments don't support "
                           "automatic differentiation, but one of the arguments requires "
                           "grad.")


def can_cast(src, dst):
    """PyTorch's canCast: a float result cannot go into an integer or bool out, nor a
    non-bool result into a bool out."""
    if src.is_floating_point and not dst.is_floating_point:
        return False
    return dst.name != "bool" or src.name == "bool"


def cast_check(result_dtype, out):
    """PyTorch's error for a result an elementwise op or reduction cannot write to out."""
    if not can_cast(result_dtype, out.dtype):
        raise RuntimeError(f"result type {type_name(result_dtype)} can't be cast to the "
                           f"desired output type {type_name(out.dtype)}")


def factory_dtype(fn, out, dtype):
    """The dtype a factory makes with out=: out's; a different dtype given is PyTorch's
    RuntimeError."""
    if dtype is not None:
        dt = as_dtype(dtype, fn)
        if dt is not out.dtype:
            raise RuntimeError(f"dtype {type_name(dt)} does not match dtype of out parameter "
                               f"({type_name(out.dtype)})")
    return out.dtype


def write(out, result, warn=True):
    """result's values written into out, converted to out's dtype; returns out. When the
    shapes differ, out becomes a new tensor of result's shape (the same Python object, as
    PyTorch resizes in place; tensors that were views of the old out keep the old
    memory), with PyTorch's deprecation warning when out had elements (warn=False: the
    factories, which resize without one)."""
    if tuple(out.shape) == tuple(result.shape):
        return out.copy_(result)
    if warn and out.numel():
        warnings.warn(_RESIZED.format(old=list(out.shape), new=list(result.shape)),
                      UserWarning, stacklevel=3)
    resize(out, result)
    return out


def resize(out, result):
    """out holds a copy of result (converted to out's dtype), whatever its shape was."""
    out.data = result.to(out.dtype, copy=True)
