"""tapegrad.nn.init: in-place initialisers drawing from tapegrad's seeded generator
(tapegrad.manual_seed), with PyTorch's formulas."""
import math

import numpy as np

from .._front import creation as _creation
from ..autograd import no_grad as _no_grad
from .._front.tensor import Tensor as _Tensor, _numpy_view


def _fill(tensor, values):
    if not isinstance(tensor, _Tensor):
        raise TypeError(f"expected a Tensor, got {type(tensor).__name__}")
    with _no_grad():
        _numpy_view(tensor)[...] = values
        from .._front.promotion import bump_version
        bump_version(tensor)
    return tensor


def _fans(tensor):
    if tensor.ndim < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 "
                         "dimensions")
    receptive = 1
    for s in tensor.shape[2:]:
        receptive *= s
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for a nonlinearity, as PyTorch's table."""
    if nonlinearity in ("linear", "conv1d", "conv2d", "conv3d", "sigmoid"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _generator(generator, fn):
    """PyTorch's generator= of the random initialisers: tapegrad draws from its one
    generator (tapegrad.manual_seed), so another one is refused, not ignored."""
    if generator is not None:
        raise NotImplementedError(f"{fn}(): generator objects are not supported; tapegrad "
                                  "draws from its one generator (tapegrad.manual_seed)")


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """Fill tensor in place from U(a, b), without recording."""
    _generator(generator, "uniform_")
    return _fill(tensor, _creation.uniform_values(tuple(tensor.shape), a, b))


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """Fill tensor in place from N(mean, std**2), without recording."""
    _generator(generator, "normal_")
    return _fill(tensor, _creation.normal_values(tuple(tensor.shape), mean, std))


def constant_(tensor, val):
    """Fill tensor in place with val, without recording."""
    return _fill(tensor, val)


def zeros_(tensor):
    """Fill tensor in place with zeros, without recording."""
    return _fill(tensor, 0.0)


def ones_(tensor):
    """Fill tensor in place with ones, without recording."""
    return _fill(tensor, 1.0)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He initialisation from a uniform distribution, in place."""
    _generator(generator, "kaiming_uniform_")
    fan_in, fan_out = _fans(tensor)
    fan = fan_in if mode == "fan_in" else fan_out
    bound = math.sqrt(3.0) * calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He initialisation from a normal distribution, in place."""
    _generator(generator, "kaiming_normal_")
    fan_in, fan_out = _fans(tensor)
    fan = fan_in if mode == "fan_in" else fan_out
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan))


def xavier_uniform_(tensor, gain=1.0, generator=None):
    """Glorot initialisation from a uniform distribution, in place."""
    _generator(generator, "xavier_uniform_")
    fan_in, fan_out = _fans(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound)


def xavier_normal_(tensor, gain=1.0, generator=None):
    """Glorot initialisation from a normal distribution, in place."""
    _generator(generator, "xavier_normal_")
    fan_in, fan_out = _fans(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


del np
