"""tapegrad.nn: conv modules (PyTorch's names, signatures, defaults and initialisation)."""
__all__ = []
