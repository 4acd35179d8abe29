"""tapegrad.accelerator: PyTorch's torch.accelerator as its CPU-only build answers: no
accelerator, so scripts that write

    device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() \\
        else "cpu"

run on the CPU."""
from ._front.device import NO_ACCELERATOR as _NO_ACCELERATOR


def is_available():
    """Whether an accelerator (CUDA, MPS, XPU, ...) can be used: False."""
    return False


def current_accelerator(check_available=False):
    """The accelerator's device type, as a device: None, as there is none."""
    return None


def device_count():
    """The number of accelerator devices: 0."""
    return 0


def current_device_index():
    """The index of the current accelerator device: PyTorch's RuntimeError, as there is
    none."""
    raise RuntimeError(_NO_ACCELERATOR)


def synchronize(device=None):
    """Wait for the accelerator: PyTorch's RuntimeError, as there is none."""
    raise RuntimeError(_NO_ACCELERATOR)
