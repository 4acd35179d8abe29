"""tapegrad.autograd.graph: the grad_fn node classes, where PyTorch's users find them."""
from .._front.nodes import Node, AccumulateGrad  # noqa: F401  (re-exported)

__all__ = ["Node", "AccumulateGrad"]
