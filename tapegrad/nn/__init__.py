"""tapegrad.nn: modules, parameters, layers and losses (PyTorch spelling)."""
from . import functional, init, utils  # noqa: F401
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
