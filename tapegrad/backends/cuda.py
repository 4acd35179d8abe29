"""tapegrad.backends.cuda: PyTorch's CUDA backend flags (matmul.allow_tf32, ...), with the
defaults of its CPU-only build. tapegrad has no CUDA: they are stored and change
nothing."""


class _MatmulFlags:
    """torch.backends.cuda.matmul: the flags scripts set before training on a GPU."""

    def __init__(self):
        self.allow_tf32 = False
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True


matmul = _MatmulFlags()


def is_built():
    """Whether tapegrad was built with CUDA support: False."""
    return False
