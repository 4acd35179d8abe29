"""tapegrad.backends.mps: Apple's Metal (MPS) backend, which tapegrad does not have."""


def is_available():
    """Whether MPS can be used: False (tapegrad runs on the CPU only)."""
    return False


def is_built():
    """Whether tapegrad was built with MPS support: False."""
    return False
