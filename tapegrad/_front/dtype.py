"""tapegrad dtypes: float32 (the default, as in PyTorch), float64, int64, bool.

PyTorch's other dtypes (float16, bfloat16, int32, uint8, complex64, ...) exist as dtype
objects, so a script that names them (`x.dtype == torch.int32`, `torch.finfo(torch.half)`)
runs; making a tensor of one is refused (as_dtype) with a TypeError naming the supported
ones. The default dtype (set_default_dtype) is float32 or float64.
"""
import builtins

import numpy as np

from .._engine import layout as L


class dtype:
    """An element type, as PyTorch's torch.dtype: name, itemsize, is_floating_point,
    is_complex, is_signed. Tensors are float32 (the default), float64, int64 or bool; the
    other dtypes PyTorch names exist for comparisons and finfo/iinfo, and a tensor of one
    is refused."""
    __slots__ = ("name", "code", "np", "is_floating_point", "is_complex", "is_signed",
                 "itemsize", "tensor_type", "_real", "_complex")

    def __init__(self, name, code, np_dtype, is_float, tensor_type, itemsize=None,
                 is_complex=False, is_signed=True, real=None, complex=None):
        self.name = name
        self.code = code            # the engine's dtype code; None: no tensor has it
        self.np = None if np_dtype is None else np.dtype(np_dtype)
        self.is_floating_point = is_float
        self.is_complex = is_complex
        self.is_signed = is_signed
        self.itemsize = self.np.itemsize if itemsize is None else itemsize
        self.tensor_type = tensor_type
        self._real = real
        self._complex = complex

    def __repr__(self):
        return f"tapegrad.{self.name}"

    def __reduce__(self):
        return (_any_by_name, (self.name,))

    def to_real(self):
        """The real dtype of a complex dtype (complex64 -> float32); any other dtype
        itself, as in PyTorch."""
        return _ALL[self._real] if self._real else self

    def to_complex(self):
        """The complex dtype of a floating point dtype (float32 -> complex64); a complex
        dtype itself. Integer and bool dtypes have none: PyTorch's RuntimeError."""
        if self.is_complex:
            return self
        if self._complex is None:
            raise RuntimeError(f"Unknown Complex ScalarType for {type_name(self)}")
        return _ALL[self._complex]


float32 = dtype("float32", L.F32, np.float32, True, "FloatTensor", complex="complex64")
float64 = dtype("float64", L.F64, np.float64, True, "DoubleTensor", complex="complex128")
int64 = dtype("int64", L.I64, np.int64, False, "LongTensor")
bool_ = dtype("bool", L.BOOL, np.bool_, False, "BoolTensor", is_signed=False)
float = float32     # noqa: A001  (PyTorch's aliases)
double = float64
long = int64

BY_CODE = (float32, float64, int64, bool_)
SUPPORTED = "float32, float64, int64 or bool"


def _other(name, np_dtype, itemsize, tensor_type, is_float=False, is_complex=False,
           is_signed=True, real=None, complex=None):
    return dtype(name, None, np_dtype, is_float, tensor_type, itemsize, is_complex,
                 is_signed, real, complex)


# PyTorch's other dtypes, with its attributes (np: the NumPy dtype where NumPy has one,
# which finfo/iinfo read)
float16 = _other("float16", np.float16, 2, "HalfTensor", True, complex="complex32")
bfloat16 = _other("bfloat16", None, 2, "BFloat16Tensor", True, complex="complex64")
float8_e4m3fn = _other("float8_e4m3fn", None, 1, "Float8_e4m3fnTensor", True)
float8_e5m2 = _other("float8_e5m2", None, 1, "Float8_e5m2Tensor", True)
float8_e4m3fnuz = _other("float8_e4m3fnuz", None, 1, "Float8_e4m3fnuzTensor", True)
float8_e5m2fnuz = _other("float8_e5m2fnuz", None, 1, "Float8_e5m2fnuzTensor", True)
complex32 = _other("complex32", None, 4, "ComplexHalfTensor", is_complex=True,
                   real="float16")
complex64 = _other("complex64", np.complex64, 8, "ComplexFloatTensor", is_complex=True,
                   real="float32")
complex128 = _other("complex128", np.complex128, 16, "ComplexDoubleTensor", is_complex=True,
                    real="float64")
uint8 = _other("uint8", np.uint8, 1, "ByteTensor", is_signed=False)
uint16 = _other("uint16", np.uint16, 2, "UInt16Tensor", is_signed=False)
uint32 = _other("uint32", np.uint32, 4, "UInt32Tensor", is_signed=False)
uint64 = _other("uint64", np.uint64, 8, "UInt64Tensor", is_signed=False)
int8 = _other("int8", np.int8, 1, "CharTensor")
int16 = _other("int16", np.int16, 2, "ShortTensor")
int32 = _other("int32", np.int32, 4, "IntTensor")
half = float16
cfloat = complex64
cdouble = complex128
chalf = complex32
short = int16
int = int32         # noqa: A001  (PyTorch's alias: torch.int is int32)

_ALL = {d.name: d for d in (
    float32, float64, int64, bool_, float16, bfloat16, float8_e4m3fn, float8_e5m2,
    float8_e4m3fnuz, float8_e5m2fnuz, complex32, complex64, complex128, uint8, uint16,
    uint32, uint64, int8, int16, int32)}
ALL = tuple(_ALL.values())

_NUMPY = {np.dtype(np.float32): float32, np.dtype(np.float64): float64,
          np.dtype(np.int64): int64, np.dtype(np.bool_): bool_}


def _by_name(name):
    """A supported dtype by name (checkpoints hold only these)."""
    return {"float32": float32, "float64": float64, "int64": int64, "bool": bool_}[name]


def _any_by_name(name):
    return _ALL[name]


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


def unsupported(dt, fn):
    """The TypeError for a tensor of a dtype tapegrad does not have (fn: the function
    asked to make it)."""
    hint = ("float32 or float64" if dt.is_floating_point else
            "no complex dtype" if dt.is_complex else
            "int64 or bool" if dt.name == "uint8" else "int64")
    return TypeError(f"{fn}(): tapegrad.{dt.name} is not supported: tapegrad tensors are "
                     f"{SUPPORTED} (use {hint})")


def as_dtype(arg, fn, name="dtype"):
    """A dtype argument as a tapegrad dtype: a dtype, or, as PyTorch takes them, the Python
    types float (float64), int (int64) and bool; anything else (a string, a NumPy dtype,
    a tensor, None where a dtype is required) is PyTorch's TypeError. A dtype tapegrad
    has no tensors of (int32, float16, ...) is refused with a TypeError naming it."""
    if isinstance(arg, dtype):
        if arg.code is None:
            raise unsupported(arg, fn)
        return arg
    if isinstance(arg, type) and arg in _PYTHON_DTYPES:
        return _PYTHON_DTYPES[arg]
    raise TypeError(f"{fn}(): argument '{name}' must be tapegrad.dtype, not "
                    f"{type(arg).__name__}")


# ---------------------------------------------------------------- the default dtype
_DEFAULT = [float32]


def default_float():
    """The dtype of floating point tensors made without a dtype: float32 unless
    set_default_dtype said float64."""
    return _DEFAULT[0]


def get_default_dtype():
    """The default floating point dtype (float32 unless set_default_dtype changed it): what
    tensor([1.0]), zeros, rand, arange(0.5, ...) and the layers of nn make."""
    return _DEFAULT[0]


def set_default_dtype(d, /):
    """Set the default floating point dtype, float32 or float64, as PyTorch's
    torch.set_default_dtype: factories without a dtype, Python floats in tensor(), float
    results of integer tensors (int / int, int * 0.5) and nn layers use it. Integer,
    bool and complex dtypes are PyTorch's TypeError; float16 and bfloat16, which PyTorch
    allows, are refused as tapegrad has no such tensors."""
    if not isinstance(d, dtype):
        raise TypeError("invalid dtype object: only floating-point types are supported as "
                        "the default type")
    if not d.is_floating_point:
        raise TypeError("only floating-point types are supported as the default type")
    if d.code is None:
        raise TypeError(f"set_default_dtype(): tapegrad.{d.name} is not supported: the "
                        "default dtype is float32 or float64")
    _DEFAULT[0] = d


# ---------------------------------------------------------------- finfo and iinfo
_BFLOAT16 = dict(bits=16, eps=0.0078125, max=3.3895313892515355e+38,
                 tiny=1.1754943508222875e-38, resolution=0.01)


class finfo:
    """PyTorch's torch.finfo: the limits of a floating point dtype (the default dtype
    when none is given; a complex dtype gives its real dtype's): bits, eps, max, min,
    tiny (= smallest_normal), resolution, and dtype (its name)."""
    __slots__ = ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution",
                 "dtype")

    def __init__(self, type=_DEFAULT):  # noqa: A002  (PyTorch's parameter name)
        dt = _DEFAULT[0] if type is _DEFAULT else _PYTHON_DTYPES.get(type, type)
        if not isinstance(dt, dtype):
            raise TypeError(f"finfo(): argument 'type' (position 1) must be tapegrad.dtype, "
                            f"not {builtins.type(type).__name__}")
        dt = dt.to_real()
        if not dt.is_floating_point:
            raise TypeError("tapegrad.finfo() requires a floating point input type. Use "
                            "tapegrad.iinfo to handle 'tapegrad.finfo'")
        if dt.name == "bfloat16":
            v = _BFLOAT16
        elif dt.np is not None:
            i = np.finfo(dt.np)
            v = dict(bits=i.bits, eps=builtins.float(i.eps), max=builtins.float(i.max),
                     tiny=builtins.float(i.smallest_normal),
                     resolution=10.0 ** -i.precision)   # (NumPy's is rounded to the dtype)
        else:
            raise TypeError(f"tapegrad.finfo(): tapegrad has no limits of tapegrad.{dt.name}")
        self.bits, self.eps, self.max = v["bits"], v["eps"], v["max"]
        self.min, self.tiny = -v["max"], v["tiny"]
        self.smallest_normal, self.resolution = v["tiny"], v["resolution"]
        self.dtype = dt.name

    def __eq__(self, other):
        return isinstance(other, finfo) and self.dtype == other.dtype

    def __hash__(self):
        return hash(("finfo", self.dtype))

    def __repr__(self):
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, "
                f"eps={self.eps:g}, smallest_normal={self.smallest_normal:g}, "
                f"tiny={self.tiny:g}, dtype={self.dtype})")

    __str__ = __repr__


class iinfo:
    """PyTorch's torch.iinfo: the limits of an integer dtype: bits, max, min, and dtype
    (its name). bool is refused, as in PyTorch."""
    __slots__ = ("bits", "max", "min", "dtype")

    def __init__(self, type):           # noqa: A002  (PyTorch's parameter name)
        type = _PYTHON_DTYPES.get(type, type)
        if not isinstance(type, dtype):
            raise TypeError(f"iinfo(): argument 'type' (position 1) must be tapegrad.dtype, "
                            f"not {builtins.type(type).__name__}")
        if type is bool_:
            raise TypeError("tapegrad.bool is not supported by tapegrad.iinfo")
        if type.is_floating_point or type.is_complex:
            raise TypeError("tapegrad.iinfo() requires an integer input type. Use "
                            "tapegrad.finfo to handle 'tapegrad.iinfo'")
        i = np.iinfo(type.np)
        self.bits, self.max, self.min = i.bits, builtins.int(i.max), builtins.int(i.min)
        self.dtype = type.name

    def __eq__(self, other):
        return isinstance(other, iinfo) and self.dtype == other.dtype

    def __hash__(self):
        return hash(("iinfo", self.dtype))

    def __repr__(self):
        return f"iinfo(min={self.min:g}, max={self.max:g}, dtype={self.dtype})"

    __str__ = __repr__
