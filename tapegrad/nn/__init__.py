"""tapegrad.nn: layers and losses (PyTorch spelling)."""
from . import functional  # noqa: F401
