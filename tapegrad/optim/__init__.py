"""tapegrad.optim: PyTorch's optimizers (SGD, Adam, AdamW, RMSprop, Adagrad, NAdam, RAdam,
Adamax, Adadelta, Rprop, ASGD, LBFGS) and learning-rate schedulers."""
from .optimizer import Optimizer, SGD, Adam, AdamW, RMSprop, Adagrad  # noqa: F401
from ._more import NAdam, RAdam, Adamax, Adadelta, Rprop, ASGD  # noqa: F401
from .lbfgs import LBFGS  # noqa: F401
from . import optimizer  # noqa: F401
from . import lr_scheduler  # noqa: F401
