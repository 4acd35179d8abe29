"""tapegrad.nn: sparse modules (PyTorch's names, signatures, defaults and initialisation)."""
__all__ = []
