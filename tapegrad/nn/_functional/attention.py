"""nn.functional: attention."""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
__all__ = []
