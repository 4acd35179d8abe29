"""tapegrad.nn.init: PyTorch's initialisers, making the same calls in the same order
(bounds computed by the same formulas, then tensor.uniform_ / normal_ / fill_ / zero_
under no_grad), so a model built after manual_seed holds PyTorch's numbers."""
import math
import warnings

from ..autograd import no_grad as _no_grad
from .._front.creation import empty_like as _empty_like
from .._front.indexing import where as _where
from .._front.tensor import Tensor as _Tensor


def _tensor_arg(tensor):
    if not isinstance(tensor, _Tensor):
        raise TypeError(f"expected a Tensor, got {type(tensor).__name__}")
    return tensor


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for a nonlinearity, as PyTorch's table (1 for the linear
    ones)."""
    if nonlinearity in ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                        "conv_transpose2d", "conv_transpose3d", "sigmoid"):
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            negative_slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, int) or isinstance(param, float):
            negative_slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + negative_slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """Fill tensor in place from U(a, b) (tensor.uniform_), without recording."""
    with _no_grad():
        return _tensor_arg(tensor).uniform_(a, b, generator=generator)


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """Fill tensor in place from N(mean, std**2) (tensor.normal_), without recording."""
    with _no_grad():
        return _tensor_arg(tensor).normal_(mean, std, generator=generator)


def constant_(tensor, val):
    """Fill tensor in place with val, without recording."""
    with _no_grad():
        return _tensor_arg(tensor).fill_(val)


def ones_(tensor):
    """Fill tensor in place with ones, without recording."""
    return constant_(tensor, 1.0)


def zeros_(tensor):
    """Fill tensor in place with zeros, without recording."""
    with _no_grad():
        return _tensor_arg(tensor).zero_()


def _calculate_fan_in_and_fan_out(tensor):
    dimensions = tensor.dim()
    if dimensions < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 "
                         "dimensions")
    num_input_fmaps = tensor.size(1)
    num_output_fmaps = tensor.size(0)
    receptive_field_size = 1
    for s in tensor.shape[2:]:
        receptive_field_size *= s
    return num_input_fmaps * receptive_field_size, num_output_fmaps * receptive_field_size


def _calculate_correct_fan(tensor, mode):
    mode = mode.lower()
    valid_modes = ["fan_in", "fan_out"]
    if mode not in valid_modes:
        raise ValueError(f"Mode {mode} not supported, please use one of {valid_modes}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def _kaiming_std(tensor, a, mode, nonlinearity):
    """He initialisation's std, gain / sqrt(fan); None for a zero-element tensor, which
    is left as it is, with PyTorch's warning (stacklevel: the caller's caller)."""
    _tensor_arg(tensor)
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=3)
        return None
    return calculate_gain(nonlinearity, a) / math.sqrt(_calculate_correct_fan(tensor, mode))


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He initialisation from U(-bound, bound), bound = sqrt(3) * gain / sqrt(fan), in
    place (a zero-element tensor is left as it is, with PyTorch's warning)."""
    std = _kaiming_std(tensor, a, mode, nonlinearity)
    if std is None:
        return tensor
    bound = math.sqrt(3.0) * std
    with _no_grad():
        return tensor.uniform_(-bound, bound, generator=generator)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He initialisation from N(0, (gain / sqrt(fan))**2), in place (a zero-element tensor
    is left as it is, with PyTorch's warning)."""
    std = _kaiming_std(tensor, a, mode, nonlinearity)
    if std is None:
        return tensor
    with _no_grad():
        return tensor.normal_(0, std, generator=generator)


def xavier_uniform_(tensor, gain=1.0, generator=None):
    """Glorot initialisation from U(-a, a), a = sqrt(3) * gain * sqrt(2 / (fan_in +
    fan_out)), in place."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(_tensor_arg(tensor))
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    a = math.sqrt(3.0) * std
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    """Glorot initialisation from N(0, (gain * sqrt(2 / (fan_in + fan_out)))**2), in
    place."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(_tensor_arg(tensor))
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """N(mean, std**2) restricted to [a, b], in place, as PyTorch draws it: normal draws
    with the ones outside redrawn (a whole tensor at a time) while most of the mass lies
    inside, else uniform proposals on [a, b] accepted against the normal density."""
    def norm_cdf(x):
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    _tensor_arg(tensor)
    if (mean < a - 2 * std) or (mean > b + 2 * std):
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. "
                      "The distribution of values may be incorrect.", stacklevel=2)
    with _no_grad():
        p = norm_cdf((b - mean) / std) - norm_cdf((a - mean) / std)
        if p > 0.3:
            lo = tensor.new_tensor(a).item()
            hi = tensor.new_tensor(b).item()
            result = tensor.normal_(mean, std, generator=generator)
            while True:
                mask = (result < lo) | (result > hi)
                if not mask.any():
                    break
                result = _where(mask, _empty_like(result).normal_(mean, std,
                                                                generator=generator), result)
            if tensor is not result:
                tensor.copy_(result)
        else:
            mode = max(a, min(mean, b))
            log_peak = -0.5 * ((mode - mean) / std) ** 2
            candidates = _empty_like(tensor)
            accept_buf = _empty_like(tensor)
            tensor.uniform_(a, b, generator=generator)
            candidates.copy_(tensor)
            candidates.sub_(mean).div_(std).pow_(2).mul_(-0.5).sub_(log_peak)
            pending = accept_buf.uniform_(generator=generator).log_().gt(candidates)
            if pending.any():
                result = tensor
                while True:
                    candidates.uniform_(a, b, generator=generator)
                    result = _where(pending, candidates, result)
                    candidates.sub_(mean).div_(std).pow_(2).mul_(-0.5).sub_(log_peak)
                    pending = _where(pending,
                                    accept_buf.uniform_(generator=generator).log_().gt(
                                        candidates), pending)
                    if not pending.any():
                        break
                tensor.copy_(result)
        return tensor
