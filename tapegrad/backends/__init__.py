"""tapegrad.backends: the flags and queries of PyTorch's torch.backends that scripts set
or ask (cudnn.deterministic, cudnn.benchmark, mps.is_available(), cuda.matmul.allow_tf32),
with the values PyTorch's CPU-only build has. tapegrad runs on the CPU: the flags are
stored and read back, and change nothing."""
from . import cudnn, mps, cuda  # noqa: F401  (torch.backends.cudnn, ... after one import)
