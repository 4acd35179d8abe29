"""tapegrad.utils: PyTorch's torch.utils namespace (data loading)."""
from . import data

__all__ = ["data"]
