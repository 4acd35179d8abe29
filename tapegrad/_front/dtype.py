"""tapegrad dtypes: float32 (the default, as in PyTorch), float64, int64, bool."""
import builtins

import numpy as np

from .._engine import layout as L


class dtype:
    """An element type: tapegrad.float32 (the default), float64, int64 or bool; name,
    itemsize and is_floating_point as in PyTorch."""
    __slots__ = ("name", "code", "np", "is_floating_point", "itemsize", "tensor_type")

    def __init__(self, name, code, np_dtype, is_float, tensor_type):
        self.name = name
        self.code = code
        self.np = np.dtype(np_dtype)
        self.is_floating_point = is_float
        self.itemsize = self.np.itemsize
        self.tensor_type = tensor_type

    def __repr__(self):
        return f"tapegrad.{self.name}"

    def __reduce__(self):
        return (_by_name, (self.name,))


float32 = dtype("float32", L.F32, np.float32, True, "FloatTensor")
float64 = dtype("float64", L.F64, np.float64, True, "DoubleTensor")
int64 = dtype("int64", L.I64, np.int64, False, "LongTensor")
bool_ = dtype("bool", L.BOOL, np.bool_, False, "BoolTensor")
float = float32     # noqa: A001  (PyTorch's aliases)
double = float64
long = int64

BY_CODE = (float32, float64, int64, bool_)
_NUMPY = {np.dtype(np.float32): float32, np.dtype(np.float64): float64,
          np.dtype(np.int64): int64, np.dtype(np.bool_): bool_}


def _by_name(name):
    return {"float32": float32, "float64": float64, "int64": int64, "bool": bool_}[name]


def from_numpy_dtype(npd):
    d = _NUMPY.get(np.dtype(npd))
    if d is None:
        raise TypeError(f"can't convert np.ndarray of type numpy.{np.dtype(npd).name}. "
                        "The only supported types are: float64, float32, int64, and bool.")
    return d


def type_name(dt):
    """PyTorch's scalar type name in messages: Float, Double, Long, Bool."""
    return dt.tensor_type[:-len("Tensor")]


_PYTHON_DTYPES = {builtins.float: float64, builtins.int: int64, builtins.bool: bool_}


def is_dtype(arg):
    """Whether arg stands for a dtype: a tapegrad dtype, or one of the Python types
    PyTorch takes for one (float, int, bool)."""
    return isinstance(arg, dtype) or (isinstance(arg, type) and arg in _PYTHON_DTYPES)


def as_dtype(arg, fn, name="dtype"):
    """A dtype argument as a tapegrad dtype: a dtype, or, as PyTorch takes them, the Python
    types float (float64), int (int64) and bool; anything else (a string, a NumPy dtype,
    a tensor, None where a dtype is required) is PyTorch's TypeError."""
    if isinstance(arg, dtype):
        return arg
    if isinstance(arg, type) and arg in _PYTHON_DTYPES:
        return _PYTHON_DTYPES[arg]
    raise TypeError(f"{fn}(): argument '{name}' must be tapegrad.dtype, not "
                    f"{type(arg).__name__}")
