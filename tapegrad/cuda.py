"""tapegrad.cuda: PyTorch's torch.cuda as its CPU-only build answers. tapegrad runs on the
CPU only, so scripts that pick their device with

    device = "cuda" if torch.cuda.is_available() else "cpu"

run on the CPU. Seeding is a no-op (there is no CUDA generator); calls that need a GPU
raise PyTorch's CPU-build error.
"""
from ._front.device import device as _device, unavailable as _unavailable


def is_available():
    """Whether CUDA can be used: always False (tapegrad runs on the CPU only)."""
    return False


def device_count():
    """The number of CUDA devices: 0."""
    return 0


def is_initialized():
    """Whether CUDA has been initialised: False."""
    return False


def manual_seed(seed):
    """Seed the current CUDA device's generator: a no-op without CUDA, as in PyTorch's
    CPU-only build (which reads seed as an int first: a string is its ValueError)."""
    int(seed)


def manual_seed_all(seed):
    """Seed every CUDA device's generator: a no-op without CUDA, as in PyTorch's CPU-only
    build."""
    int(seed)


def seed():
    """Seed the CUDA generator randomly: a no-op without CUDA."""


def seed_all():
    """Seed every CUDA generator randomly: a no-op without CUDA."""


def empty_cache():
    """Release cached CUDA memory: nothing to release (PyTorch's CPU build does nothing
    either)."""


def memory_allocated(device=None):
    """CUDA memory held by tensors, in bytes: 0."""
    return 0


def max_memory_allocated(device=None):
    """Peak CUDA memory held by tensors, in bytes: 0."""
    return 0


def is_bf16_supported(including_emulation=True):
    """Whether CUDA supports bfloat16: False."""
    return False


def _no_cuda():
    return _unavailable(_device("cuda"))


def synchronize(device=None):
    """Wait for CUDA kernels to finish: raises without CUDA, as in PyTorch's CPU build."""
    raise _no_cuda()


def current_device():
    """The index of the current CUDA device: raises without CUDA, as in PyTorch's CPU
    build."""
    raise _no_cuda()


def get_device_name(device=None):
    """The name of a CUDA device: raises without CUDA, as in PyTorch's CPU build."""
    raise _no_cuda()
