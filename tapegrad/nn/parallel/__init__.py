"""tapegrad.nn.parallel: DistributedDataParallel (PyTorch's torch.nn.parallel spelling)."""
from .distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
