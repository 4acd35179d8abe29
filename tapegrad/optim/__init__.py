"""tapegrad.optim: SGD, Adam, AdamW, RMSprop, Adagrad and learning-rate schedulers."""
from .optimizer import Optimizer, SGD, Adam, AdamW, RMSprop, Adagrad  # noqa: F401
from . import lr_scheduler  # noqa: F401
