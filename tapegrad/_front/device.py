"""PyTorch's torch.device, for a library that runs on the CPU only.

A device object can name any device type PyTorch knows ("cuda:1", "mps", "meta", ...), as
torch.device can, so scripts that build one run; placing a tensor anywhere but the CPU
(a factory's device=, Tensor.to, Module.to, set_default_device, `with device(...)`) raises
what PyTorch's CPU-only build raises, naming the device: never a silent fallback to the
CPU. Tensor.device, is_cpu, is_cuda, ... and cuda() are registered here.
"""
import numbers
import warnings

import numpy as np

from . import methods

# the device types PyTorch's parser accepts, in the order its message lists them
TYPES = ("cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve",
         "fpga", "maia", "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia",
         "privateuseone")
_NOT_COMPILED = {"cuda": "CUDA", "xpu": "XPU", "mtia": "MTIA"}
NO_ACCELERATOR = "Cannot access accelerator device when none is available."
_INT64_MAX = (1 << 63) - 1


class NotCompiledError(RuntimeError, AssertionError):
    """Placing a tensor on CUDA, XPU or MTIA, which tapegrad has no support for. PyTorch's
    CPU-only build raises AssertionError there ("Torch not compiled with CUDA enabled"),
    so this is both an AssertionError (code written for PyTorch catches it) and a
    RuntimeError (as every other refused device is)."""


def unavailable(dev):
    """The error for placing a tensor on non-CPU device dev: the exception type PyTorch's
    CPU-only build raises, with a message naming the device."""
    where = f"tapegrad runs on the CPU only and cannot place a tensor on device '{dev}'"
    name = _NOT_COMPILED.get(dev.type)
    if name is not None:
        hint = " (tapegrad.cuda.is_available() is False)" if dev.type == "cuda" else ""
        return NotCompiledError(f"tapegrad not compiled with {name} enabled: {where}{hint}")
    return RuntimeError(f"tapegrad is not linked with support for {dev.type} devices: "
                        f"{where}")


def _invalid_combination(args):
    got = ", ".join(args)
    return TypeError(f"device() received an invalid combination of arguments - got ({got}), "
                     "but expected one of:\n * (tapegrad.device device)\n * (str type, int "
                     "index = -1)\n")


def _parse(text):
    """(type, index) of a device string, checked as PyTorch's parser checks it: a known
    type, optionally ':' and an index without sign or leading zeros."""
    if not text:
        raise RuntimeError("Device string must not be empty")
    name, colon, digits = text.partition(":")
    valid = (name and all(c.isascii() and (c.isalpha() or c == "_") for c in name)
             and (not colon or (digits and digits.isascii() and digits.isdigit()
                                and (digits == "0" or digits[0] != "0"))))
    if not valid:
        raise RuntimeError(f"Invalid device string: '{text}'")
    index = None
    if colon:
        index = int(digits)
        if index > 2 ** 31 - 1:         # (PyTorch reads the index with std::stoi)
            raise RuntimeError(f"Could not parse device index '{digits}' in device string "
                               f"'{text}'")
    if name not in TYPES:
        raise RuntimeError(f"Expected one of {', '.join(TYPES)} device type at start of "
                           f"device string: {name}")
    if name == "mkldnn":
        warnings.warn("'mkldnn' is no longer used as device type. So "
                      "tapegrad.device('mkldnn') will be deprecated and removed in the "
                      "future. Please use other valid device types instead.", UserWarning,
                      stacklevel=3)
    return name, index


def _index(value):
    """A device index argument: an int (a NumPy integer or an integer 0-d tensor counts, as
    in PyTorch) that is not negative."""
    if isinstance(value, (bool, np.bool_)) or not (
            isinstance(value, numbers.Integral) or hasattr(value, "__index__")):
        raise TypeError(f"device(): argument 'index' (position 2) must be int, not "
                        f"{type(value).__name__}")
    try:
        value = value.__index__()
    except TypeError:
        raise TypeError(f"device(): argument 'index' must be int, not "
                        f"{type(value).__name__}") from None
    if value > _INT64_MAX:
        raise ValueError("Overflow when unpacking long long")
    if value < 0:
        raise RuntimeError("Device index must not be negative")
    return value


_NO_ARG = object()


class device:
    """Where a tensor lives, as PyTorch's torch.device: device("cpu"), device("cpu", 0),
    device("cpu:0"), device(type="cpu"), or a copy of another device. Other device types
    PyTorch knows ("cuda", "cuda:1", "mps", "meta", ...) make a device object, but placing
    a tensor there raises: tapegrad runs on the CPU only. An int (device(0)) means an
    accelerator, and there is none. Equal when type and index are; hashable; str() is
    "cpu" or "cpu:0"; usable as `with device("cpu"):` (the default device inside)."""
    __slots__ = ("_type", "_index")

    def __init__(self, type=_NO_ARG, index=None, *, device=_NO_ARG):  # noqa: A002
        given = [a for a in (type, device) if a is not _NO_ARG]
        if len(given) != 1:
            names = [_type_name(a) for a in given]
            if index is not None:
                names.append(_type_name(index))
            raise _invalid_combination(names)
        arg = given[0]
        if isinstance(arg, bytes):
            arg = arg.decode()
        if isinstance(arg, _Device):
            if index is not None:
                raise TypeError("device(): argument 'type' (position 1) must be str, not "
                                "tapegrad.device")
            name, idx = arg._type, arg._index
        elif isinstance(arg, str):
            name, idx = _parse(arg)
            if index is not None:
                index = _index(index)
                if idx is not None:
                    raise RuntimeError(f"type (string) must not include an index because "
                                       f"index was passed explicitly: {arg}")
                idx = index
        elif isinstance(arg, numbers.Integral) and not isinstance(arg, (bool, np.bool_)):
            if index is not None:
                raise _invalid_combination([_type_name(arg), _type_name(index)])
            if arg < 0:
                raise RuntimeError("Device index must not be negative")
            raise RuntimeError(NO_ACCELERATOR)
        else:
            raise _invalid_combination([_type_name(arg)])
        object.__setattr__(self, "_type", name)
        object.__setattr__(self, "_index", idx)

    def __init_subclass__(cls, **kwargs):
        raise TypeError("type 'tapegrad.device' is not an acceptable base type")

    @property
    def type(self):
        """The device type: "cpu", "cuda", "mps", ..."""
        return self._type

    @property
    def index(self):
        """The device index, or None when none was given."""
        return self._index

    def __setattr__(self, name, value):
        if name in ("type", "index"):
            raise AttributeError(f"attribute '{name}' of 'tapegrad.device' objects is not "
                                 "writable")
        raise AttributeError(f"'tapegrad.device' object has no attribute '{name}'")

    def __eq__(self, other):
        if not isinstance(other, device):
            return NotImplemented
        return self._type == other._type and self._index == other._index

    def __hash__(self):
        return hash((self._type, self._index))

    def __str__(self):
        return self._type if self._index is None else f"{self._type}:{self._index}"

    def __format__(self, spec):
        return format(str(self), spec)

    def __repr__(self):
        if self._index is None:
            return f"device(type='{self._type}')"
        return f"device(type='{self._type}', index={self._index})"

    def __reduce__(self):
        return (device, (str(self),))

    def __enter__(self):
        """Make this the default device until the block ends (only the CPU can be)."""
        place(self)
        _CONTEXT.append(_DEFAULT[0])
        _DEFAULT[0] = self
        return self

    def __exit__(self, *exc):
        _DEFAULT[0] = _CONTEXT.pop()
        return False


_Device = device     # (the name `device` is also an argument of PyTorch's signatures)


def _type_name(value):
    return "tapegrad.device" if isinstance(value, _Device) else type(value).__name__


CPU = device("cpu")
_CUDA = device("cuda")
_DEFAULT = [None]       # the default device set by set_default_device (None: the CPU)
_CONTEXT = []           # the defaults that `with device(...)` blocks replaced


def as_device(arg, fn):
    """A device argument of fn as a device (None stays None): a device, a string, or an
    int (an accelerator index: PyTorch's error, as there is none); anything else is
    PyTorch's TypeError."""
    if arg is None or isinstance(arg, device):
        return arg
    if isinstance(arg, (str, bytes)) or (isinstance(arg, numbers.Integral)
                                         and not isinstance(arg, (bool, np.bool_))):
        return device(arg)
    raise TypeError(f"{fn}(): argument 'device' must be tapegrad.device, not "
                    f"{type(arg).__name__}")


def place(dev):
    """Check that a tensor can be placed on device dev (a device): the CPU only."""
    if dev._type != "cpu":
        raise unavailable(dev)


def check_device(arg, fn):
    """A factory's or to()'s device argument checked: None, or a device, string or int
    naming the CPU (any index, as PyTorch's CPU tensors ignore it); other devices raise
    what PyTorch's CPU-only build raises."""
    dev = as_device(arg, fn)
    if dev is not None and dev._type != "cpu":
        raise unavailable(dev)
    return dev


def set_default_device(device):
    """Set the device factories use when given none, as PyTorch's
    torch.set_default_device: the CPU (any index), or None for the CPU again. Any other
    device raises now (PyTorch raises at the next tensor made)."""
    dev = device if device is None or isinstance(device, _Device) else _Device(device)
    if dev is not None:
        place(dev)
    _DEFAULT[0] = dev


def get_default_device():
    """The default device: device(type='cpu') unless set_default_device named a CPU
    index."""
    return CPU if _DEFAULT[0] is None else _DEFAULT[0]


# ---------------------------------------------------------------- Tensor's side
def _device(self):
    """The tensor's device: always device(type='cpu')."""
    return CPU


def _false(self):
    """False: tapegrad tensors live in CPU memory."""
    return False


def _true(self):
    """True: tapegrad tensors live in CPU memory."""
    return True


def get_device(self):
    """The index of the tensor's device: -1, PyTorch's answer for a CPU tensor."""
    return -1


def refuse_cuda(device, fn="cuda"):
    """What Tensor.cuda() and Module.cuda() raise in PyTorch's CPU-only build: an int
    device is its RuntimeError (no accelerator), anything else its "not compiled with
    CUDA" AssertionError (also a RuntimeError here)."""
    dev = as_device(device, fn)         # (an int, a bad string: PyTorch's errors first)
    raise unavailable(dev if dev is not None and dev.type == "cuda" else _CUDA)


def cuda(self, device=None, non_blocking=False, memory_format=None):
    """A copy in CUDA memory, in PyTorch; tapegrad has no CUDA, so this raises what
    PyTorch's CPU-only build raises (an AssertionError, also a RuntimeError here)."""
    refuse_cuda(device)


methods.methods(device=property(_device), is_cpu=property(_true), is_cuda=property(_false),
                is_meta=property(_false), is_mps=property(_false), is_xpu=property(_false),
                get_device=get_device, cuda=cuda)
