"""tapegrad.backends.cudnn: the cuDNN flags scripts set (deterministic, benchmark,
enabled, allow_tf32), with PyTorch's defaults. tapegrad has no cuDNN: setting them is
allowed and changes nothing; is_available() is False."""

enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available():
    """Whether cuDNN can be used: False (tapegrad runs on the CPU only)."""
    return False


def version():
    """cuDNN's version: None, as in PyTorch's CPU-only build."""
    return None
