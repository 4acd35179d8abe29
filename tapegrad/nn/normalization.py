"""tapegrad.nn: normalization modules (PyTorch's names, signatures, defaults and initialisation)."""
__all__ = []
