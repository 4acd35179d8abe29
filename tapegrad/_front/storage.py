"""A tensor's memory as PyTorch programs see it on the CPU: data_ptr, storage_offset,
untyped_storage (data_ptr, nbytes, size), the Python-callback writes apply_ and map_,
and PyTorch's CPU answers for pinned and shared memory.

data_ptr is the address of the first element (the storage's address plus the offset),
so views of one tensor agree with each other exactly as PyTorch's do; an empty storage
reports 0, as PyTorch's unallocated one. pin_memory raises what PyTorch's CPU-only build
raises (there is no accelerator to pin for); is_pinned is False. share_memory_ is
refused: tapegrad cannot move a live storage into shared memory, and pretending would
let a Hogwild-style program train separate copies in each process without a word.
"""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import numpy as np

from . import methods
from .tensor import Tensor, E, _numpy_view
from .._engine import layout as L
from .promotion import bump_version
from .device import device as _device


def _storage_row(t):
    m = E.meta[t._i]
    return E.stor[int(m[L.M_SID])]


def _unallocated(t):
    """Whether PyTorch would have allocated nothing: an empty tensor made empty (tapegrad
    still allocates its minimum block, of 8 bytes)."""
    return int(_storage_row(t)[L.S_NBYTES]) <= 8 and t.numel() == 0 and \
        int(E.meta[t._i, L.M_OFF]) == 0


def data_ptr(self):
    """The address of the tensor's first element (0 for an empty tensor made empty, as
    PyTorch's unallocated storage)."""
    s = _storage_row(self)
    if _unallocated(self):
        return 0
    return int(s[L.S_ADDR]) + int(E.meta[self._i, L.M_OFF]) * self.dtype.itemsize


def storage_offset(self):
    """The offset of the first element in the storage, in elements."""
    return int(E.meta[self._i, L.M_OFF])


class UntypedStorage:
    """The bytes under a tensor (shared by its views), as PyTorch's UntypedStorage shows
    them to CPU programs: data_ptr(), nbytes(), size(), len(), device, element_size()."""
    __slots__ = ("_tensor",)

    def __init__(self, tensor):
        self._tensor = tensor           # (keeps the storage alive)

    def data_ptr(self):
        """The address of the storage's first byte (0 when it has none)."""
        return 0 if _unallocated(self._tensor) else int(_storage_row(self._tensor)[L.S_ADDR])

    def nbytes(self):
        """The storage's size in bytes."""
        if _unallocated(self._tensor):
            return 0
        return int(_storage_row(self._tensor)[L.S_NBYTES])

    def size(self):
        """The storage's size in bytes (an untyped storage's elements are bytes)."""
        return self.nbytes()

    def __len__(self):
        return self.nbytes()

    def element_size(self):
        """1: an untyped storage counts bytes."""
        return 1

    @property
    def device(self):
        """The CPU."""
        return _device("cpu")

    def is_pinned(self, device="cuda"):
        """False: the CPU build has no pinned memory."""
        return False

    def is_shared(self):
        """False: tapegrad storages are private to the process."""
        return False

    def __repr__(self):
        return f" [tapegrad.storage.UntypedStorage(device=cpu) of size {self.nbytes()}]"


def untyped_storage(self):
    """The storage under this tensor (UntypedStorage); views share it (equal data_ptr())."""
    return UntypedStorage(self)


def _callback_check(self, fn):
    if self.requires_grad:
        raise RuntimeError(f"Can't call {fn}() on Variable that requires grad. Use "
                           f"var.detach().{fn}() instead.")


_PY = {"float32": float, "float64": float, "int64": int, "bool": bool}


def apply_(self, callable):
    """Each element replaced by callable(element) (a Python number), in place; a Python
    call per element, as in PyTorch (refused on a tensor that requires grad)."""
    _callback_check(self, "apply_")
    a = _numpy_view(self)
    conv = _PY[self.dtype.name]
    flat = [callable(conv(v)) for v in a.reshape(-1).tolist()]
    a[...] = _converted(flat, a)
    bump_version(self)
    return self


def map_(self, tensor, callable):
    """Each element replaced by callable(element, the matching element of tensor) (tensor
    broadcast to self's shape, of self's dtype), in place."""
    _callback_check(self, "map_")
    if not isinstance(tensor, Tensor):
        raise TypeError(f"map_(): argument 'tensor' (position 1) must be Tensor, not "
                        f"{type(tensor).__name__}")
    if tensor.dtype is not self.dtype:
        raise TypeError(f"map_: expected torch.{self.dtype.tensor_type} for 'other' (got "
                        f"torch.{tensor.dtype.tensor_type})")
    other = tensor.detach().expand(self.shape)
    a = _numpy_view(self)
    b = np.array(_numpy_view(other))
    conv = _PY[self.dtype.name]
    flat = [callable(conv(x), conv(y)) for x, y in zip(a.reshape(-1).tolist(),
                                                        b.reshape(-1).tolist())]
    a[...] = _converted(flat, a)
    bump_version(self)
    return self


def _converted(values, a):
    if a.dtype.kind == "i":     # (C++'s conversion of a Python float: truncation)
        return np.array([int(v) for v in values], dtype=np.int64).reshape(a.shape)
    if a.dtype.kind == "b":
        return np.array([bool(v) for v in values], dtype=np.bool_).reshape(a.shape)
    return np.array(values, dtype=a.dtype).reshape(a.shape)


def pin_memory(self, device=None):
    """PyTorch's CPU-only build has no accelerator to pin memory for: its error."""
    raise RuntimeError("Cannot access accelerator device when none is available.")


def is_pinned(self, device=None):
    """False: the CPU build has no pinned memory."""
    return False


def share_memory_(self):
    """Refused: tapegrad cannot move a tensor into shared memory (see the module's
    docstring)."""
    raise RuntimeError("share_memory_(): tapegrad tensors cannot be moved to shared memory "
                       "(tapegrad has no multiprocessing tensor sharing; a no-op would let "
                       "each process silently update its own copy)")


def is_shared(self):
    """False: tapegrad tensors live in memory private to the process."""
    return False


methods.methods(data_ptr=data_ptr, storage_offset=storage_offset,
                untyped_storage=untyped_storage, apply_=apply_, map_=map_,
                pin_memory=pin_memory, is_pinned=is_pinned, share_memory_=share_memory_,
                is_shared=is_shared)
