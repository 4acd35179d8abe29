"""tapegrad.nn: rnn modules (PyTorch's names, signatures, defaults and initialisation)."""
__all__ = []
