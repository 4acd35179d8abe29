"""gradcheck and gradgradcheck: tapegrad's gradients, and gradients of gradients, against
central finite differences (float64); the same functions as tapegrad.autograd's."""
from .autograd.gradcheck import numerical_grad, gradcheck, gradgradcheck

__all__ = ["numerical_grad", "gradcheck", "gradgradcheck"]
