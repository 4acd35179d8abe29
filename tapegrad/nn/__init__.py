"""tapegrad.nn: modules, parameters, layers and losses (PyTorch spelling)."""
# ruff: noqa: F403  (the topic modules' public names)
from . import functional, init, utils  # noqa: F401
from . import parallel  # noqa: F401
from .parameter import Parameter  # noqa: F401
from .module import Module  # noqa: F401
from .layers import (Sequential, ModuleList, ModuleDict, ParameterList,  # noqa: F401
                     Identity, Linear, Flatten, ReLU, Tanh, Sigmoid, GELU, LeakyReLU,
                     Softplus, Softmax, LogSoftmax, SiLU, ELU, Hardtanh, ReLU6, LogSigmoid,
                     Softsign,
                     Dropout, Embedding, LayerNorm, BatchNorm1d, MSELoss, L1Loss, HuberLoss,
                     SmoothL1Loss, BCELoss, BCEWithLogitsLoss, NLLLoss, CrossEntropyLoss,
                     Mish, Hardswish, Hardsigmoid, SELU, CELU, GLU, Threshold, Softshrink,
                     Hardshrink, Tanhshrink, Softmin, PReLU, RMSNorm, GroupNorm,
                     CosineSimilarity, PairwiseDistance, Unflatten, ParameterDict, RNNCell,
                     LSTMCell, GRUCell, KLDivLoss, SoftMarginLoss, PoissonNLLLoss,
                     GaussianNLLLoss, CosineEmbeddingLoss, MarginRankingLoss)
from .conv import *
from .pooling import *
from .normalization import *
from .rnn import *
from .transformer import *
from .sparse import *
