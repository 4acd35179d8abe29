"""nn.functional: normalization (batch, instance, group, local response), the channel-wise
and alpha dropouts, bilinear and embedding_bag, PyTorch's spelling, defaults and errors.

batch_norm, instance_norm and group_norm are one row each (tapegrad/ops/norm.py, grad_fn
NativeBatchNormBackward0 / NativeGroupNormBackward0 as PyTorch names them; instance_norm
ends in a ViewBackward0, as PyTorch's does). Dropout masks are drawn as PyTorch's CPU
kernels draw them (bernoulli_(1 - p) on a noise tensor of the input's shape, or of (N, C,
1, ...) for the feature dropouts), so after the same manual_seed the masks are PyTorch's;
a compiled replay draws the same numbers.
"""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import numbers
import warnings

import numpy as np

from ..._front import dtype as D
from ..._front import sampling as _sampling
from ..._front.promotion import _type_name
from ..._front.tensor import Tensor, run as _run, _wrap
from ..._engine.state import RECORDING
from ...ops.registry import BY_NAME
from .basic import _check

__all__ = ["batch_norm", "instance_norm", "group_norm", "local_response_norm", "dropout1d",
           "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout", "bilinear",
           "embedding_bag"]

_BN = BY_NAME["batch_norm"]
_GN = BY_NAME["group_norm"]
_BN_UPDATE = BY_NAME["batch_norm_update"]
_BAG = BY_NAME["embedding_bag"]
_BAG_MAX = BY_NAME["embedding_bag_max"]


# ---------------------------------------------------------------- batch and instance norm
def _size_list(t):
    return f"torch.Size({list(t.shape)})".replace("torch.", "tapegrad.")


def _verify_batch_size(input):
    if input.ndim < 1:
        raise IndexError("tuple index out of range")
    prod = input.shape[0]
    for s in input.shape[2:]:
        prod *= s
    if prod == 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input "
                         f"size {_size_list(input)}")


def _arg_types(fn, flag_name, flag, momentum):
    """PyTorch's binding checks of the flag (bool, position 6) and momentum (float,
    position 7)."""
    if not isinstance(flag, (bool, np.bool_)):
        raise TypeError(f"{fn}(): argument '{flag_name}' (position 6) must be bool, not "
                        f"{type(flag).__name__}")
    if isinstance(momentum, bool) or not isinstance(momentum, numbers.Real):
        raise TypeError(f"{fn}(): argument 'momentum' (position 7) must be float, not "
                        f"{type(momentum).__name__}")


def _eps_check(eps, training):
    if training and eps <= 0.0:
        raise ValueError(f"batch_norm eps must be positive during training, but got {eps}")
    if eps < 0.0:
        raise ValueError(f"batch_norm eps must be non-negative, but got {eps}")


def _norm_inputs(input, fn, kernel):
    _check(input, "input", fn)
    if input.ndim < 2:
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-max(input.ndim, 1)}, {max(input.ndim, 1) - 1}], but got 1)")
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"\"{kernel}\" not implemented for "
                                  f"'{_type_name(input.dtype)}'")


def _per_channel(tensors, expected, scale=1):
    """PyTorch's size checks of weight, bias, running_mean and running_var (each None or
    `expected` elements; scale: instance_norm's repetition of them over the batch), and
    its dtype rule (one dtype for all)."""
    for t, name in tensors:
        if t is None:
            continue
        if not isinstance(t, Tensor):
            raise TypeError(f"batch_norm(): argument '{name}' must be Tensor, not "
                            f"{type(t).__name__}")
        if t.numel() * scale != expected:
            raise RuntimeError(f"{name} should contain {expected} elements not "
                               f"{t.numel() * scale}")


def _same_dtype(input, tensors):
    for t, name in tensors:
        if t is not None and t.dtype is not input.dtype:
            if name.startswith("running"):
                raise RuntimeError(f"mixed dtype (CPU): expect parameter to have scalar type "
                                   f"of {_type_name(input.dtype)}")
            raise RuntimeError("mixed dtype (CPU): all inputs must share same datatype.")


def _layout(shape):
    n, c = shape[0], shape[1]
    inner = 1
    for s in shape[2:]:
        inner *= s
    return n, c, inner


def _flat(t):
    """t as one contiguous run (itself when it is one: no view row between the parameter
    and the norm's row, so its next_functions are AccumulateGrad's, as PyTorch's)."""
    if t is None or (t.ndim == 1 and t.is_contiguous()):
        return t
    return t.reshape(-1).contiguous()


def _update_running(x, running_mean, running_var, momentum, outer, nch, inner, wch):
    """running = momentum * batch statistic + (1 - momentum) * running (unbiased batch
    variance), written in place, out of autograd's sight, by one row."""
    from ...autograd import no_grad
    with no_grad():
        rm, rv = _flat(running_mean), _flat(running_var)
        new = _wrap(_run(_BN_UPDATE, x._i, rm._i, s=float(momentum), c=rv._i,
                         iargs=_BN_UPDATE.pack(outer=outer, channels=nch, inner=inner,
                                               training=1, wchannels=wch, sub=1)))
        running_mean.copy_(new[:wch].reshape(running_mean.shape))
        running_var.copy_(new[wch:].reshape(running_var.shape))


def _eval_affine(running_mean, running_var, weight, bias, eps):
    """The scale and shift PyTorch's eval kernel applies: invstd = 1 / sqrt(var + eps),
    scale = invstd * weight, shift = bias - mean * scale (in the dtype)."""
    scale = 1.0 / (running_var.reshape(-1) + eps).sqrt()
    if weight is not None:
        scale = scale * weight.reshape(-1)
    shift = running_mean.reshape(-1) * scale
    shift = -shift if bias is None else bias.reshape(-1) - shift
    return scale.contiguous(), shift.contiguous()


def _bn_row(op, x, w, b, eps, outer, nch, inner, training, wch, sub=1):
    # (a strided x is gathered by the kernel, which also writes its gradient row-major)
    return _wrap(_run(op, x._i, -1 if w is None else w._i, s=float(eps),
                      c=-1 if b is None else b._i,
                      iargs=op.pack(outer=outer, channels=nch, inner=inner,
                                    training=int(training), wchannels=wch, sub=sub)))


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """Normalise each channel (dim 1) of an (N, C, *) input with the batch's statistics
    (training: also updating the running ones in place, when given) or with the running
    ones (eval); then times weight plus bias per channel. One NativeBatchNormBackward0
    row."""
    _check(input, "input", "batch_norm")
    if training:
        _verify_batch_size(input)
    _eps_check(eps, training)
    _arg_types("batch_norm", "training", training, momentum)
    _norm_inputs(input, "batch_norm", "batch_norm")
    n, c, inner = _layout(input.shape)
    tensors = ((weight, "weight"), (bias, "bias"), (running_mean, "running_mean"),
               (running_var, "running_var"))
    _per_channel(tensors, c)
    if training and (running_mean is None) != (running_var is None):
        raise ValueError("running_mean and running_var must either both be None or neither "
                         "be None")
    if not training:
        for t, name in tensors[2:]:
            if t is None:
                raise RuntimeError(f"{name} must be defined in evaluation mode")
    _same_dtype(input, tensors)
    if input.numel() == 0:
        return input.clone()
    w, b = _flat(weight), _flat(bias)
    if not training:
        w, b = _eval_affine(running_mean, running_var, weight, bias, eps)
        return _bn_row(_BN, input, w, b, eps, n, c, inner, False, c)
    x = input
    if running_mean is not None:
        _update_running(x, running_mean, running_var, momentum, n, c, inner, c)
    return _bn_row(_BN, x, w, b, eps, n, c, inner, True, c)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """Normalise each channel of each sample of an (N, C, *) input over its positions
    (use_input_stats, updating the running statistics, averaged over the batch, when
    given), or with the running ones; then times weight plus bias per channel. As
    PyTorch: a batch norm of the (1, N * C, *) view, then a view back."""
    _check(input, "input", "instance_norm")
    if use_input_stats:
        prod = 1
        for s in input.shape[2:]:
            prod *= s
        if prod == 1:
            raise ValueError(f"Expected more than 1 spatial element when training, got input "
                             f"size {_size_list(input)}")
    _arg_types("instance_norm", "use_input_stats", use_input_stats, momentum)
    _norm_inputs(input, "instance_norm", "batch_norm")
    n, c, inner = _layout(input.shape)
    tensors = ((weight, "weight"), (bias, "bias"), (running_mean, "running_mean"),
               (running_var, "running_var"))
    _per_channel(tensors, n * c, n)
    if (running_mean is None) != (running_var is None):
        raise ValueError("running_mean and running_var must either both be None or neither "
                         "be None")
    if not use_input_stats and running_mean is None:
        raise RuntimeError("Expected running_mean and running_var to be defined when "
                           "use_input_stats is false")
    _eps_check(eps, use_input_stats)
    _same_dtype(input, tensors)
    if input.numel() == 0:
        return input.clone()
    x = input.contiguous().view(1, n * c, inner)
    if use_input_stats:
        if running_mean is not None:
            _update_running(x, running_mean, running_var, momentum, 1, n * c, inner, c)
        y = _bn_row(_BN, x, _flat(weight), _flat(bias), eps, 1, n * c, inner, True, c)
    else:
        w, b = _eval_affine(running_mean, running_var, weight, bias, eps)
        y = _bn_row(_BN, x, w, b, eps, 1, n * c, inner, False, c)
    return y.view(input.shape)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """(x - mean) / sqrt(var + eps) over each of num_groups groups of channels (and all
    positions) of each sample of an (N, C, *) input, then weight * . + bias per channel:
    one NativeGroupNormBackward0 row."""
    _check(input, "input", "group_norm")
    if input.ndim < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received "
                           f"{input.ndim}")
    if isinstance(num_groups, bool) or not isinstance(num_groups, numbers.Integral):
        raise TypeError(f"group_norm(): argument 'num_groups' (position 2) must be int, not "
                        f"{type(num_groups).__name__}")
    shape = list(input.shape)
    n, c, inner = _layout(shape)
    size = [n * c // num_groups, num_groups] + shape[2:]     # (0 groups: ZeroDivisionError)
    per = size[0]
    for s in size[2:]:
        per *= s
    if per == 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input "
                         f"size {size}")
    if num_groups < 0:
        raise RuntimeError(f"Expected num groups to be greater than 0, got {num_groups}")
    if c % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by "
                           f"num_groups, but got input of shape {shape} and "
                           f"num_groups={num_groups}")
    for t, what in ((weight, "weight"), (bias, "bias")):
        if t is not None and (t.ndim != 1 or t.numel() != c):
            raise RuntimeError(f"Expected {what} to be a vector of size equal to the number "
                               f"of channels in input, but got {what} of shape "
                               f"{list(t.shape)} and input of shape {shape}")
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"\"GroupNormKernelImpl\" not implemented for "
                                  f"'{_type_name(input.dtype)}'")
    for t in (weight, bias):
        if t is not None and t.dtype is not input.dtype:
            raise RuntimeError(f"GroupNorm only supports input and weight/bias of the same "
                               f"dtype; got {_type_name(input.dtype)} and "
                               f"{_type_name(t.dtype)}")
    if input.numel() == 0:
        return input.clone()
    cg = c // num_groups
    return _bn_row(_GN, input, _flat(weight), _flat(bias), eps, 1, n * num_groups,
                   cg * inner, True, num_groups, cg)


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """input / (k + alpha * mean of input ** 2 over `size` neighbouring channels) ** beta,
    the window zero-padded as PyTorch's (average pooling of the padded squares)."""
    from ..._front.indexing import cat
    _check(input, "input", "local_response_norm")
    dim = input.ndim
    if dim < 3:
        raise ValueError(f"Expected 3D or higher dimensionality                          "
                         f"input (got {dim} dimensions)")
    if input.numel() == 0:
        return input
    if size <= 0:
        raise RuntimeError("kernel size should be greater than zero, but got " + (
            f"kH: {size} kW: 1" if dim == 3 else f"kT: {size} kH: 1 kW: 1"))
    div = input.mul(input)
    c = input.shape[1]
    before, after = size // 2, (size - 1) // 2
    parts = []
    # (zero blocks as replay constants: new_zeros inside a compiled step would be a break)
    rest = list(input.shape[2:])
    if before:
        parts.append(_zeros([input.shape[0], before] + rest, div.dtype))
    parts.append(div)
    if after:
        parts.append(_zeros([input.shape[0], after] + rest, div.dtype))
    padded = cat(parts, 1) if len(parts) > 1 else div
    total = padded.narrow(1, 0, c)
    for j in range(1, size):
        total = total + padded.narrow(1, j, c)
    div = (total / size).mul(alpha).add(k).pow(beta)
    return input / div


def _zeros(shape, dtype):
    from ..._front.indexing import _constant
    from ..._front.creation import zeros
    return _constant(lambda: zeros(*shape, dtype=dtype))


# ---------------------------------------------------------------- dropouts
_SELU_ALPHA = 1.7580993408473766       # PyTorch's alpha_dropout constant


def _p_check(p):
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _bernoulli_noise(shape, dtype, keep, scale):
    """bernoulli_(keep) on a new tensor of shape, each draw kept as scale or 0, from the
    default generator in PyTorch's order (what sampling.dropout_mask draws, with the
    scale given), logged for a compiled replay."""
    mask = _sampling._fresh(tuple(shape), dtype)
    n = mask.numel()
    if n:
        _sampling._kernel("fill_dropout")(_sampling._data_addr(mask), n,
                                          int(dtype is D.float64),
                                          _sampling.default_generator._addr, keep, scale)
    if RECORDING[0] is not None:
        RECORDING[0].dropout_mask(mask._i, keep, scale, tuple(shape), dtype.code)
    return mask


def _dropout_impl(input, p, train, inplace, feature, alpha, batched=True):
    """PyTorch's _dropout_impl: noise of the input's shape (or (N, C, 1, ...) for the
    feature dropouts; unbatched inputs have no N) drawn bernoulli_(1 - p); dropout
    multiplies by noise / (1 - p), alpha dropout by noise * a and adds b."""
    _p_check(p)
    if p == 0 or not train or input.numel() == 0:
        return input
    if p == 1:
        return input.mul_(0.0) if inplace else input * 0.0
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"result type Float can't be cast to the desired output type "
                           f"{_type_name(input.dtype)}")
    shape = list(input.shape)
    if feature:
        if input.ndim < 2:
            raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
        keep_dims = 2 if batched else 1
        shape = shape[:keep_dims] + [1] * (input.ndim - keep_dims)
    dt = input.dtype
    if not alpha:
        noise = _sampling.dropout_mask(shape, dt, p) if not feature else \
            _bernoulli_noise(shape, dt, 1.0 - p, _scale(dt, 1.0 - p))
        return input.mul_(noise) if inplace else input * noise
    noise = _bernoulli_noise(shape, dt, 1.0 - p, 1.0)
    a = 1.0 / ((_SELU_ALPHA * _SELU_ALPHA * p + 1) * (1 - p)) ** 0.5
    b = (noise - 1.0) * (_SELU_ALPHA * a) + _SELU_ALPHA * a * p
    noise = noise * a
    if inplace:
        return input.mul_(noise).add_(b)
    return input * noise + b


def _scale(dtype, keep):
    """1 / keep in the dtype, as PyTorch's noise.div_(1 - p) leaves a kept draw."""
    import numpy as np
    return float(np.float32(1.0) / np.float32(keep)) if dtype is D.float32 else 1.0 / keep


def dropout1d(input, p=0.5, training=True, inplace=False):
    """Zero whole channels of an (N, C, L) or (C, L) input with probability p, scaling the
    rest by 1 / (1 - p)."""
    _check(input, "input", "dropout1d")
    _p_check(p)
    if input.ndim not in (2, 3):
        raise RuntimeError(f"dropout1d: Expected 2D or 3D input, but received a {input.ndim}D "
                           "input. Note that dropout1d exists to provide channel-wise dropout "
                           "on inputs with 1 spatial dimension, a channel dimension, and an "
                           "optional batch dimension (i.e. 2D or 3D inputs).")
    return _dropout_impl(input, p, training, inplace, True, False, input.ndim == 3)


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Zero whole channels of an (N, C, H, W) input with probability p, scaling the rest by
    1 / (1 - p); a 3-D input is read as (N, C, L), with PyTorch's warning."""
    _check(input, "input", "dropout2d")
    _p_check(p)
    nd = input.ndim
    if nd not in (3, 4):
        warnings.warn(f"dropout2d: Received a {nd}-D input to dropout2d, which is deprecated "
                      "and will result in an error in a future release. To retain the "
                      "behavior and silence this warning, please use dropout instead. Note "
                      "that dropout2d exists to provide channel-wise dropout on inputs with 2 "
                      "spatial dimensions, a channel dimension, and an optional batch "
                      "dimension (i.e. 3D or 4D inputs).", stacklevel=2)
    if nd == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that "
                      "channel-wise 1D dropout behavior is desired - input is interpreted as "
                      "shape (N, C, L), where C is the channel dim. This behavior will change "
                      "in a future release to interpret the input as one without a batch "
                      "dimension, i.e. shape (C, H, W). To maintain the 1D channel-wise "
                      "dropout behavior, please switch to using dropout1d instead.",
                      stacklevel=2)
    return _dropout_impl(input, p, training, inplace, True, False)


def dropout3d(input, p=0.5, training=True, inplace=False):
    """Zero whole channels of an (N, C, D, H, W) or (C, D, H, W) input with probability p,
    scaling the rest by 1 / (1 - p)."""
    _check(input, "input", "dropout3d")
    _p_check(p)
    nd = input.ndim
    if nd not in (4, 5):
        warnings.warn(f"dropout3d: Received a {nd}-D input to dropout3d, which is deprecated "
                      "and will result in an error in a future release. To retain the "
                      "behavior and silence this warning, please use dropout instead. Note "
                      "that dropout3d exists to provide channel-wise dropout on inputs with 3 "
                      "spatial dimensions, a channel dimension, and an optional batch "
                      "dimension (i.e. 4D or 5D inputs).", stacklevel=2)
    return _dropout_impl(input, p, training, inplace, True, False, nd == 5)


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    """SELU-preserving dropout: dropped elements become the SELU's negative saturation, and
    all are scaled and shifted so mean and variance are kept (PyTorch's constants)."""
    _check(input, "input", "alpha_dropout")
    _p_check(p)
    return _dropout_impl(input, p, training, inplace, False, True)


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    """alpha_dropout of whole channels (dim 1) of an (N, C, *) input."""
    _check(input, "input", "feature_alpha_dropout")
    _p_check(p)
    return _dropout_impl(input, p, training, inplace, True, True)


# ---------------------------------------------------------------- bilinear
def bilinear(input1, input2, weight, bias=None):
    """y[..., o] = sum_ij input1[..., i] weight[o, i, j] input2[..., j] + bias[o]: one
    matrix product of input1 with weight, then a product with input2 summed over j."""
    for t, name in ((input1, "input1"), (input2, "input2"), (weight, "weight")):
        _check(t, name, "bilinear")
    if bias is not None:
        _check(bias, "bias", "bilinear")
    if input1.ndim != input2.ndim:
        raise RuntimeError(f"bilinear(): input dimensions do not match: got {input1.ndim} "
                           f"and {input2.ndim}")
    for d in range(input1.ndim - 1):
        if input1.shape[d] != input2.shape[d]:
            raise RuntimeError(f"bilinear(): input batch dimensions do not match at dim {d}: "
                               f"got {input1.shape[d]} and {input2.shape[d]}")
    if weight.ndim != 3:
        raise RuntimeError(f"bilinear(): weight must be 3-dimensional (out_features, "
                           f"in1_features, in2_features), got {weight.ndim} dimensions")
    if input1.ndim == 0 or input1.shape[-1] != weight.shape[1]:
        raise RuntimeError(f"bilinear(): input1 size does not match weight size: got "
                           f"{input1.shape[-1] if input1.ndim else 0} but expected "
                           f"{weight.shape[1]}")
    if input2.shape[-1] != weight.shape[2]:
        raise RuntimeError(f"bilinear(): input2 size does not match weight size: got "
                           f"{input2.shape[-1]} but expected {weight.shape[2]}")
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != weight.shape[0]):
        raise RuntimeError(f"bilinear(): bias size does not match weight size: got "
                           f"{bias.shape[-1] if bias.ndim else 0} but expected "
                           f"{weight.shape[0]}")
    dts = [input1.dtype, input2.dtype, weight.dtype]
    if len(set(dts)) > 1:
        names = {D.float32: "float", D.float64: "double", D.int64: "long", D.bool: "bool"}
        raise RuntimeError(f"All tensors must have the same dtype, got input1: "
                           f"{names.get(dts[0], dts[0])}, input2: {names.get(dts[1], dts[1])}, "
                           f"weight: {names.get(dts[2], dts[2])}")
    o, i, j = weight.shape
    batch = list(input1.shape[:-1])
    x1 = input1.reshape(-1, i)
    x2 = input2.reshape(-1, j)
    t = x1 @ weight.permute(1, 0, 2).reshape(i, o * j)            # (B, O * J)
    y = (t.reshape(-1, o, j) * x2.unsqueeze(1)).sum(-1)          # (B, O)
    y = y.reshape(batch + [o])
    return y if bias is None else y + bias


# ---------------------------------------------------------------- embedding_bag
def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2,
                  scale_grad_by_freq=False, mode="mean", sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """Sums, means or maxima of bags of weight's rows: a 2-D input is one bag per row, a
    1-D input is cut into bags at offsets (include_last_offset: offsets ends with the
    input's length). per_sample_weights (mode 'sum') scale each row; entries equal to
    padding_idx are left out (a bag of none gives zeros). One EmbeddingBagBackward0 row,
    whose kernel checks the offsets and indices (so a compiled replay does too)."""
    from .basic import _embedding_options
    _check(input, "input", "embedding_bag")
    _check(weight, "weight", "embedding_bag")
    if weight.dtype is D.int64 and input.dtype.is_floating_point:
        warnings.warn("Argument order of nn.functional.embedding_bag was changed. Usage "
                      "`embedding_bag(weight, input, ...)` is deprecated, and should now be "
                      "`embedding_bag(input, weight, ...)`.", stacklevel=2)
        weight, input = input, weight
    if per_sample_weights is not None and input.shape != per_sample_weights.shape:
        raise ValueError(f"embedding_bag: If per_sample_weights "
                         f"({_size_list(per_sample_weights)}) is not None, then it must have "
                         f"the same shape as the input ({_size_list(input)})")
    if weight.ndim != 2:
        raise ValueError(f"weight has to be a 2D Tensor, but got Tensor of dimension "
                         f"{weight.ndim}")
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError("if input is 2D, then offsets has to be None, as input is treated "
                             "is a mini-batch of fixed length sequences. However, found offsets "
                             f"of type {type(offsets)}")
    elif input.ndim == 1:
        if offsets is None:
            raise ValueError("offsets has to be a 1D Tensor but got None")
        if not isinstance(offsets, Tensor) or offsets.ndim != 1:
            raise ValueError("offsets has to be a 1D Tensor")
    else:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension "
                         f"{input.ndim}")
    if mode not in ("sum", "mean", "max"):
        raise ValueError("mode has to be one of sum, mean or max")
    if mode == "max" and scale_grad_by_freq:
        raise ValueError("max mode does not support scaling the gradient by the frequency")
    if mode == "max" and sparse:
        raise ValueError("max mode does not support sparse weights")
    _embedding_options(max_norm, scale_grad_by_freq, sparse)
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError("embedding_bag: per_sample_weights was not None. "
                                  "per_sample_weights is only supported for mode='sum' "
                                  f"(got mode='{mode}'). Please open a feature request on "
                                  "GitHub.")
    for t, name in ((input, "indices"), (offsets, "offsets")):
        if t is not None and t.dtype is not D.int64:
            raise RuntimeError(f"Expected tensor for argument #1 '{name}' to have one of the "
                               f"following scalar types: Long, Int; but got "
                               f"{_legacy_type(t.dtype)} instead (while checking arguments "
                               "for embedding_bag)")
    if not weight.dtype.is_floating_point:
        raise RuntimeError(f"\"embedding_bag_cpu_out\" not implemented for "
                           f"'{_type_name(weight.dtype)}'")
    if per_sample_weights is not None and per_sample_weights.dtype is not weight.dtype:
        raise RuntimeError(f"Expected tensor for argument #1 'weight' to have the same type as "
                           f"tensor for argument #1 'per_sample_weights'; but type "
                           f"{_legacy_type(weight.dtype)} does not equal "
                           f"{_legacy_type(per_sample_weights.dtype)} (while checking "
                           "arguments for embedding_bag)")
    num = weight.shape[0]
    if padding_idx is not None:
        if not -num <= padding_idx < num:
            raise RuntimeError(f"padding_idx must be within the number of embeddings, {-num} "
                               f"through {num - 1}, but got {padding_idx}")
        padding_idx %= num
    if input.ndim == 2:
        nb, width = input.shape
        flat = input.reshape(-1)
        offsets = _int_constant(np.arange(nb, dtype=np.int64) * width)
        if per_sample_weights is not None:
            per_sample_weights = per_sample_weights.reshape(-1)
    else:
        flat = input
        nb = max(offsets.shape[0] - (1 if include_last_offset else 0), 0)
    flat, offsets = flat.contiguous(), offsets.contiguous()
    src, pad = weight.contiguous(), -1 if padding_idx is None else padding_idx
    if per_sample_weights is not None:
        # (sum mode: the bags of the weighted rows, one row per position; a padding entry's
        # weight is zero, so it adds nothing, and its weight gets no gradient)
        from ..._front.indexing import where
        from .basic import _scalar
        psw = per_sample_weights
        if RECORDING[0] is None:        # (PyTorch's message before the gather's own check)
            _psw_index_check(flat, num, weight.dtype)
        if padding_idx is not None:
            psw = where(flat != padding_idx, psw, _scalar(0.0, psw.dtype))
        src = weight[flat] * psw.unsqueeze(-1)
        flat, pad = _int_constant(np.arange(flat.shape[0], dtype=np.int64)), -1
    op = _BAG_MAX if mode == "max" else _BAG
    ids = _run(op, src._i, flat._i, c=offsets._i, all_outputs=True,
               iargs=op.pack(mode=("sum", "mean", "max").index(mode), bags=nb,
                             padding_idx=pad, rows=src.shape[0]))
    outs = [_wrap(i) for i in ids]
    return outs[0]


def _psw_index_check(flat, num, dtype):
    from ..._front.tensor import _numpy_view
    idx = _numpy_view(flat)
    bad = np.flatnonzero((idx < 0) | (idx >= num))
    if not bad.size:
        return
    k, v = int(bad[0]), int(idx[bad[0]])
    if dtype is D.float32:
        raise RuntimeError(f"Index {k} of input takes value {v} which is not in the valid "
                           f"range [0, {num})")
    raise RuntimeError(f"embedding_bag: Expected idx >= 0 && idx < num_embeddings but found "
                       f"idx to be {v}")


def _int_constant(values):
    """An int64 tensor of values a compiled replay keeps (they follow from shapes only)."""
    from ..._front.indexing import _constant
    from ..._front.creation import tensor as _tensor
    return _constant(lambda: _tensor(values))


def _legacy_type(dt):
    return f"tapegrad.{dt.tensor_type}"
