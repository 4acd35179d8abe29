"""nn.utils.rnn: padding and packing variable-length sequences."""
__all__ = []
