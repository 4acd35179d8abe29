"""tapegrad.optim: SGD, Adam, AdamW, RMSprop, Adagrad and learning-rate schedulers."""
import os as _os

if not _os.environ.get("TAPEGRAD_KERNELS_ONLY"):
    from .optimizer import Optimizer, SGD, Adam, AdamW, RMSprop, Adagrad  # noqa: F401
    from . import lr_scheduler  # noqa: F401
