"""Module-level spellings of the ops (tapegrad.exp(x), tapegrad.add(a, b), ...)."""
from .tensor import Tensor
from .ops.registry import OPS

__all__ = []


def install():
    g = globals()
    for op in OPS:
        if op.kind == "unary" and not op.name.endswith("_"):
            g[op.name] = getattr(Tensor, op.name)
            __all__.append(op.name)
    for name in ("add", "sub", "mul", "div", "pow", "true_divide"):
        g[name] = getattr(Tensor, name)
        __all__.append(name)
