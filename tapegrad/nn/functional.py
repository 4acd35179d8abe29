"""tapegrad.nn.functional: PyTorch's functional spelling, gathered from one module per topic
(nn/_functional/): activations, losses, dropout and the normalisations in ``basic``,
convolutions in ``conv``, pooling, resizing and padding in ``pooling``, the image and
sequence normalisations in ``normalization``, attention in ``attention``; ``basic`` also holds the
functions the op table declares (``silu``, ``leaky_relu``, ...)."""
# ruff: noqa: F401, F403  (this module re-exports the topic modules' public names)
from ._functional.basic import *
from ._functional.basic import _legacy_reduction, _embedding_options
from ._functional.conv import *
from ._functional.pooling import *
from ._functional.normalization import *
from ._functional.attention import *
