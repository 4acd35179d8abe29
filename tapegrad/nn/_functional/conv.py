"""nn.functional's convolutions: conv1d, conv2d, conv_transpose1d, conv_transpose2d, unfold
and fold, with PyTorch's signatures, defaults and messages.

Each checks its arguments in PyTorch's order (argument types, then the shapes and values
at::convolution and im2col check) and then records one row of ops/conv.py
(ConvolutionBackward0, Im2ColBackward0, Col2ImBackward0). A 1-d convolution is the 2-d
kernel with a unit height: the row's attributes get height 1 (stride 1, padding 0), and its
tensors keep their 3-d shapes. Unbatched input is unsqueezed and the result squeezed, as
PyTorch does (so the result's grad_fn is SqueezeBackward1, as there); padding='same' with
an even total padding is PyTorch's padded copy of the input, with its warning.
"""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import numbers
import warnings

from ..._front import methods as _methods
from ..._front.tensor import Tensor, run as _run, _wrap
from ..._front.promotion import _type_name
from ...ops.registry import BY_NAME
from .pooling import pad as _pad

__all__ = ["conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "unfold", "fold"]

_CONV = BY_NAME["convolution"]
_CONV_T = BY_NAME["conv_transpose"]
_IM2COL = BY_NAME["im2col"]
_COL2IM = BY_NAME["col2im"]

_CONV_SIGS = ("Tensor input, Tensor weight, Tensor bias = None, tuple of ints stride = 1, "
              "tuple of ints padding = 0, tuple of ints dilation = 1, int groups = 1",
              "Tensor input, Tensor weight, Tensor bias = None, tuple of ints stride = 1, "
              "str padding = \"valid\", tuple of ints dilation = 1, int groups = 1")
_TORCH_TYPES = {"float32": "torch.FloatTensor", "float64": "torch.DoubleTensor",
                "int64": "torch.LongTensor", "bool": "torch.BoolTensor"}
_SCALAR_NAMES = {"float32": "Float", "float64": "Double", "int64": "Long", "bool": "Bool"}
_C_NAMES = {"float32": "float", "float64": "double", "int64": "long int", "bool": "bool"}
_SAME_WARNED = [False]


def _is_int(v):
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _label(v):
    return "Tensor" if isinstance(v, Tensor) else type(v).__name__


def _combination(fn, args, kwargs):
    """PyTorch's TypeError for conv1d/conv2d arguments that fit neither overload."""
    got = ", ".join([_label(a) for a in args] + [f"{k}={_label(v)}" for k, v in kwargs.items()])
    lines = "".join(f" * ({s})\n" for s in _CONV_SIGS)
    return TypeError(f"{fn}() received an invalid combination of arguments - got ({got}), "
                     f"but expected one of:\n{lines}")


def _int_list(v, dim=1):
    """v as a list of ints when PyTorch's 'tuple of ints' takes it (one int: dim copies,
    as its argument parser repeats it to the declared size), else None."""
    if _is_int(v):
        return [int(v)] * dim
    if isinstance(v, (tuple, list)) and all(_is_int(e) for e in v):
        return [int(e) for e in v]
    return None


def _expand(values, name, dim):
    """A per-dimension parameter: one value for every dim, or one each (PyTorch's
    expand_param_if_needed)."""
    if len(values) == 1:
        return values * dim
    if len(values) != dim:
        raise RuntimeError(f"expected {name} to be a single integer value or a list of {dim} "
                           f"values to match the convolution dimensions, but got "
                           f"{name}={list(values)}")
    return list(values)


def _sizes(t):
    return list(t.shape)


def _check_shapes(input, weight, bias, stride, padding, dilation, groups, transposed,
                  output_padding):
    """at::_convolution's checks (check_shape_forward and the kernels' own), in its order;
    returns the expanded (stride, padding, dilation, output_padding)."""
    k = weight.ndim
    if k < 3:
        raise RuntimeError("weight should have at least three dimensions")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    dim = k - 2
    stride = _expand(stride, "stride", dim)
    padding = _expand(padding, "padding", dim)
    dilation = _expand(dilation, "dilation", dim)
    output_padding = _expand(output_padding, "output_padding", dim)
    if any(p < 0 for p in padding):
        raise RuntimeError("negative padding is not supported")
    if any(p < 0 for p in output_padding):
        raise RuntimeError("negative output_padding is not supported")
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(d < 0 for d in dilation):
        raise RuntimeError("dilation should be greater than zero")
    ws = _sizes(weight)
    if input.ndim != k:
        raise RuntimeError(f"Expected {k}-dimensional input for {k}-dimensional weight {ws}, "
                           f"but got {input.ndim}-dimensional input of size {_sizes(input)} "
                           "instead")
    if ws[0] < groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be at least {groups} at "
                           f"dimension 0, but got weight of size {ws} instead")
    if ws[0] % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} "
                           f"at dimension 0, but got weight of size [{ws}] instead")
    xs = _sizes(input)
    if not transposed:
        if xs[1] != ws[1] * groups:
            raise RuntimeError(f"Given groups={groups}, weight of size {ws}, expected "
                               f"input{xs} to have {ws[1] * groups} channels, but got {xs[1]} "
                               "channels instead")
        if bias is not None and (bias.ndim != 1 or bias.shape[0] != ws[0]):
            raise RuntimeError(f"Given weight of size {ws}, expected bias to be 1-dimensional "
                               f"with {ws[0]} elements, but got bias of size {_sizes(bias)} "
                               "instead")
        padded = [xs[i + 2] + 2 * padding[i] for i in range(dim)]
        kernel = [dilation[i] * (ws[i + 2] - 1) + 1 for i in range(dim)]
        if any(p < q for p, q in zip(padded, kernel)):
            raise RuntimeError(
                f"Calculated padded input size per channel: ({' x '.join(map(str, padded))}). "
                f"Kernel size: ({' x '.join(map(str, kernel))}). Kernel size can't be greater "
                "than actual input size")
    else:
        if xs[1] != ws[0]:
            raise RuntimeError(f"Given transposed=1, weight of size {ws}, expected input{xs} "
                               f"to have {ws[0]} channels, but got {xs[1]} channels instead")
        if bias is not None and (bias.ndim != 1 or bias.shape[0] != ws[1] * groups):
            raise RuntimeError(f"Given transposed=1, weight of size {ws}, expected bias to be "
                               f"1-dimensional with {ws[1] * groups} elements, but got bias of "
                               f"size {_sizes(bias)} instead")
    if any(d == 0 for d in dilation):
        raise RuntimeError("non-positive dilation is not supported")
    return stride, padding, dilation, output_padding


def _check_dtypes(input, weight, bias, fn, transposed):
    """The kernels' dtype checks, after the shapes (PyTorch's order and words)."""
    di, dw = input.dtype, weight.dtype
    if di is not dw:
        if di.name == "float32" or not di.is_floating_point:
            raise RuntimeError(f"Input type ({_TORCH_TYPES[di.name]}) and weight type "
                               f"({_TORCH_TYPES[dw.name]}) should be the same or input should "
                               "be a MKLDNN tensor and weight is a dense tensor")
        raise RuntimeError(f"expected scalar type {_SCALAR_NAMES[di.name]} but found "
                           f"{_SCALAR_NAMES[dw.name]}")
    if transposed and bias is not None and bias.dtype is not di:
        raise RuntimeError(f"Input type ({_TORCH_TYPES[di.name]}) and bias type "
                           f"({_TORCH_TYPES[bias.dtype.name]}) should be the same or input "
                           "should be a MKLDNN tensor and bias is a dense tensor")
    if not di.is_floating_point:
        if di.name == "bool":
            raise NotImplementedError(f"\"slow_conv{'_transpose' if transposed else ''}2d_cpu\" "
                                      "not implemented for 'Bool'")
        raise NotImplementedError(f"{fn}: {_type_name(di)} tensors are not supported by "
                                  "tapegrad (PyTorch computes integer convolutions); convert "
                                  "them to a floating point dtype")


def _record(op, input, weight, bias, groups, stride, padding, dilation, extra, kernel=(0, 0)):
    """One row of op (attributes in ops/conv.py's ATTRS layout, 2-d: a 1-d op has height
    1)."""
    if len(stride) == 1:
        stride, padding, dilation, extra = ([1] + list(stride), [0] + list(padding),
                                            [1] + list(dilation), [0] + list(extra))
    iargs = op.pack(kind=_KINDS[op.name], groups=groups, stride=stride, padding=padding,
                    dilation=dilation, extra=extra, kernel=kernel)
    if weight is None:
        return _wrap(_run(op, input._i, iargs=iargs))
    if bias is None:
        return _wrap(_run(op, input._i, weight._i, iargs=iargs))
    return _wrap(_run(op, input._i, weight._i, iargs=iargs, c=bias._i))


_KINDS = {"convolution": 0, "conv_transpose": 1, "im2col": 2, "col2im": 3}


def _batchify(input, dim, fn):
    """(batched input, whether it was batched): PyTorch's batchify."""
    if input.ndim not in (dim + 1, dim + 2):
        raise RuntimeError(f"Expected {dim + 1}D (unbatched) or {dim + 2}D (batched) input to "
                           f"{fn}, but got input of size: {_sizes(input)}")
    if input.ndim == dim + 1:
        return input.unsqueeze(0), False
    return input, True


def _same_padding(input, weight, stride, dilation, dim):
    """padding='same': (the input, padded on the right where the total padding is odd,
    with PyTorch's one-time warning; the symmetric padding)."""
    if len(stride) not in (1, dim):
        raise RuntimeError(f"stride cannot broadcast to {dim} dimensions")
    if len(dilation) not in (1, dim):
        raise RuntimeError(f"dilation cannot broadcast to {dim} dimensions")
    if any(s != 1 for s in stride):
        raise RuntimeError("padding='same' is not supported for strided convolutions")
    left, extra = [], []
    for i in range(dim):
        d = dilation[0] if len(dilation) == 1 else dilation[i]
        total = d * (weight.shape[i + 2] - 1)
        left.append(total // 2)
        extra.append(total - 2 * (total // 2))
    if any(extra):
        if not _SAME_WARNED[0]:
            _SAME_WARNED[0] = True
            warnings.warn("Using padding='same' with even kernel lengths and odd dilation may "
                          "require a zero-padded copy of the input be created", UserWarning,
                          stacklevel=4)
        amounts = []
        for i in reversed(range(dim)):
            amounts += [0, extra[i]]
        input = _pad(input, amounts)
    return input, left


def _conv(fn, dim, args, kwargs, input, weight, bias, stride, padding, dilation, groups):
    """conv1d/conv2d: the argument checks of PyTorch's two overloads, then the op."""
    pad_str = isinstance(padding, str)
    stride_l, dil_l = _int_list(stride, dim), _int_list(dilation, dim)
    pad_l = None if pad_str else _int_list(padding, dim)
    if (not isinstance(input, Tensor) or not isinstance(weight, Tensor)
            or not (bias is None or isinstance(bias, Tensor)) or stride_l is None
            or dil_l is None or (pad_l is None and not pad_str) or not _is_int(groups)):
        raise _combination(fn, args, kwargs)
    groups = int(groups)
    if bias is not None and bias.dtype is not input.dtype:
        raise RuntimeError(f"Input type ({_C_NAMES[input.dtype.name]}) and bias type "
                           f"({_C_NAMES[bias.dtype.name]}) should be the same")
    x, batched = _batchify(input, dim, fn)
    if pad_str:
        if padding == "same":
            if weight.ndim < 3:
                raise RuntimeError("weight should have at least three dimensions")
            if groups <= 0:
                raise RuntimeError("non-positive groups is not supported")
            k = weight.ndim
            if k != x.ndim:
                raise RuntimeError(f"Expected {k}-dimensional input for {k}-dimensional "
                                   f"weight{_sizes(weight)}, but got {x.ndim}-dimensional "
                                   f"input of size {_sizes(x)} instead")
            x, pad_l = _same_padding(x, weight, stride_l, dil_l, k - 2)
        elif padding == "valid":
            pad_l = [0]
        else:
            raise RuntimeError(f"Invalid padding string: '{padding}'")
    s, p, d, _ = _check_shapes(x, weight, bias, stride_l, pad_l, dil_l, groups, False, [0])
    _check_dtypes(x, weight, bias, fn, False)
    out = _record(_CONV, x, weight, bias, groups, s, p, d, [0] * len(s))
    if x.shape[1] == 0:
        out = out[:, :0]        # (PyTorch's result for an input without channels)
    return out if batched else out.squeeze(0)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """A 1-d convolution (cross-correlation) of input (N, C_in, L) or (C_in, L) with weight
    (C_out, C_in / groups, k), plus bias (C_out); padding an int, a 1-tuple, 'valid' or
    'same' (stride 1 only)."""
    return _conv("conv1d", 1, [input, weight], _given_kw(bias, stride, padding, dilation, groups),
                 input, weight, bias, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """A 2-d convolution (cross-correlation) of input (N, C_in, H, W) or (C_in, H, W) with
    weight (C_out, C_in / groups, kH, kW), plus bias (C_out); stride, padding and dilation
    an int or a pair, padding also 'valid' or 'same' (stride 1 only)."""
    return _conv("conv2d", 2, [input, weight], _given_kw(bias, stride, padding, dilation, groups),
                 input, weight, bias, stride, padding, dilation, groups)


_DEFAULTS = (None, 1, 0, 1, 1)
_NAMES = ("bias", "stride", "padding", "dilation", "groups")


def _given_kw(*values):
    """The arguments after input and weight as PyTorch's message lists them: a Python
    function cannot tell which were given by position, so those that differ from their
    defaults are listed by name."""
    return {n: v for n, v, dflt in zip(_NAMES, values, _DEFAULTS)
            if not (v is dflt or (type(v) is type(dflt) and v == dflt))}


def _tr_arg(fn, name, pos, value, what):
    return TypeError(f"{fn}(): argument '{name}' (position {pos}) must be {what}, not "
                     f"{type(value).__name__}")


def _conv_t(fn, dim, input, weight, bias, stride, padding, output_padding, groups, dilation):
    for pos, name, v in ((1, "input", input), (2, "weight", weight)):
        if not isinstance(v, Tensor):
            raise _tr_arg(fn, name, pos, v, "Tensor")
    if bias is not None and not isinstance(bias, Tensor):
        raise _tr_arg(fn, "bias", 3, bias, "Tensor")
    lists = []
    for pos, name, v in ((4, "stride", stride), (5, "padding", padding),
                         (6, "output_padding", output_padding), (8, "dilation", dilation)):
        lv = _int_list(v, dim)
        if lv is None:
            if isinstance(v, (tuple, list)):
                k = next(i for i, e in enumerate(v) if not _is_int(e))
                raise TypeError(f"{fn}(): argument '{name}' (position {pos}) must be tuple of "
                                f"ints, but found element of type {type(v[k]).__name__} at "
                                f"pos {k}")
            raise _tr_arg(fn, name, pos, v, "tuple of ints")
        lists.append(lv)
    if not _is_int(groups):
        raise _tr_arg(fn, "groups", 7, groups, "int")
    groups = int(groups)
    x, batched = _batchify(input, dim, fn)
    s, p, d, op = _check_shapes(x, weight, bias, lists[0], lists[1], lists[3], groups, True,
                                lists[2])
    _check_dtypes(x, weight, bias, fn, True)
    if any(o >= si and o >= di for o, si, di in zip(op, s, d)):
        names = ("height", "width") if len(s) == 2 else ("width",)
        parts = [f"output_padding_{n}: {o}" for n, o in zip(names, op)]
        parts += [f"stride_{n}: {v}" for n, v in zip(names, s)]
        parts += [f"dilation_{n}: {v}" for n, v in zip(names, d)]
        raise RuntimeError("output padding must be smaller than either stride or dilation, but "
                           "got " + " ".join(parts))
    out_sizes = [(x.shape[i + 2] - 1) * s[i] - 2 * p[i] + d[i] * (weight.shape[i + 2] - 1)
                 + op[i] + 1 for i in range(len(s))]
    if any(n < 0 for n in out_sizes):
        raise RuntimeError(f"{fn}: the output size {out_sizes} is negative (input "
                           f"{_sizes(x)}, weight {_sizes(weight)}, stride {s}, padding {p}, "
                           f"dilation {d}, output_padding {op})")
    out = _record(_CONV_T, x, weight, bias, groups, s, p, d, op)
    return out if batched else out.squeeze(0)


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """The transposed 1-d convolution (the gradient of conv1d with respect to its input) of
    input (N, C_in, L) or (C_in, L) with weight (C_in, C_out / groups, k), plus bias
    (C_out)."""
    return _conv_t("conv_transpose1d", 1, input, weight, bias, stride, padding,
                   output_padding, groups, dilation)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """The transposed 2-d convolution (the gradient of conv2d with respect to its input) of
    input (N, C_in, H, W) or (C_in, H, W) with weight (C_in, C_out / groups, kH, kW), plus
    bias (C_out)."""
    return _conv_t("conv_transpose2d", 2, input, weight, bias, stride, padding,
                   output_padding, groups, dilation)


# ---------------------------------------------------------------- unfold / fold
def _pair(v):
    """PyTorch's _pair: an iterable as a tuple, anything else twice."""
    if isinstance(v, (tuple, list, str)) or (hasattr(v, "__iter__") and
                                             not isinstance(v, Tensor)):
        return tuple(v)
    return (v, v)


def _pairs(fn, args):
    """The im2col/col2im integer pairs: (name, position, value) -> lists, with PyTorch's
    TypeError for an element that is not an int and RuntimeError for a wrong length."""
    out = []
    for name, pos, v in args:
        t = _pair(v)
        for k, e in enumerate(t):
            if not _is_int(e):
                raise TypeError(f"{fn}(): argument '{name}' (position {pos}) must be tuple of "
                                f"ints, but found element of type {type(e).__name__} at pos "
                                f"{k}")
        out.append([int(e) for e in t])
    for (name, _, _), t in zip(args, out):
        if len(t) != 2:
            raise RuntimeError(f"It is expected {name} equals to 2, but got size {len(t)}")
    return out


def _block_checks(kernel, dilation, padding, stride):
    kh, kw = kernel
    if kh <= 0 or kw <= 0:
        raise RuntimeError(f"kernel size should be greater than zero, but got kernel_height: "
                           f"{kh} kernel_width: {kw}")
    if stride[0] <= 0 or stride[1] <= 0:
        raise RuntimeError(f"stride should be greater than zero, but got stride_height: "
                           f"{stride[0]} stride_width: {stride[1]}")
    if dilation[0] <= 0 or dilation[1] <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got dilation_height: "
                           f"{dilation[0]} dilation_width: {dilation[1]}")
    if padding[0] < 0 or padding[1] < 0:
        raise RuntimeError(f"padding should be non-negative, but got pad_height: {padding[0]} "
                           f"pad_width: {padding[1]}")


def _blocks(size, kernel, dilation, padding, stride):
    return [(size[i] + 2 * padding[i] - (dilation[i] * (kernel[i] - 1) + 1)) // stride[i] + 1
            for i in range(2)]


def _float_only(input, kernel_name):
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"\"{kernel_name}\" not implemented for "
                                  f"'{_SCALAR_NAMES[input.dtype.name]}'")


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """Sliding local blocks of a batched (N, C, H, W) or unbatched (C, H, W) input, as
    columns: (N, C * prod(kernel_size), L)."""
    if not isinstance(input, Tensor):
        raise TypeError(f"im2col(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    kernel, dilation, padding, stride = _pairs("im2col", (
        ("kernel_size", 2, kernel_size), ("dilation", 3, dilation), ("padding", 4, padding),
        ("stride", 5, stride)))
    _block_checks(kernel, dilation, padding, stride)
    nd = input.ndim
    if nd < 3:
        n = max(nd, 1)
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], "
                         f"but got {n})")
    xs = _sizes(input)
    if nd > 4 or any(v == 0 for v in xs[nd - 3:]):
        raise RuntimeError(f"Expected 3D or 4D (batch mode) tensor with possibly 0 batch size "
                           f"and other non-zero dimensions for input, but got: {xs}")
    blocks = _blocks(xs[nd - 2:], kernel, dilation, padding, stride)
    if blocks[0] < 1 or blocks[1] < 1:
        raise RuntimeError(
            f"Given input with spatial size ({xs[nd - 2]}, {xs[nd - 1]}), "
            f"kernel_size=({kernel[0]}, {kernel[1]}), dilation=({dilation[0]}, {dilation[1]}), padding=({padding[0]}, "
            f"{padding[1]}), calculated shape of the array of sliding blocks as ({blocks[0]}, "
            f"{blocks[1]}), but its components must be at least one.")
    _float_only(input, "im2col_out_cpu")
    return _record(_IM2COL, input, None, None, 1, stride, padding, dilation, [0, 0], kernel)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """Sums sliding local blocks (N, C * prod(kernel_size), L) or (C * prod(kernel_size), L)
    into an image (N, C, *output_size): the adjoint of unfold."""
    if not isinstance(input, Tensor):
        raise TypeError(f"col2im(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    size, kernel, dilation, padding, stride = _pairs("col2im", (
        ("output_size", 2, output_size), ("kernel_size", 3, kernel_size),
        ("dilation", 4, dilation), ("padding", 5, padding), ("stride", 6, stride)))
    if size[0] <= 0 or size[1] <= 0:
        raise RuntimeError(f"output_size should be greater than zero, but got output_height: "
                           f"{size[0]} output_width: {size[1]}")
    _block_checks(kernel, dilation, padding, stride)
    nd = input.ndim
    xs = _sizes(input)
    if nd not in (2, 3) or any(v == 0 for v in xs[nd - 2:]):
        raise RuntimeError(f"Expected 2D or 3D (batch mode) tensor for input with possibly 0 "
                           f"batch size and non-zero dimensions for input, but got: {xs}")
    c = xs[nd - 2]
    if c % (kernel[0] * kernel[1]):
        raise RuntimeError(f"Expected size of input's dimension 1 to be divisible by the product "
                           f"of kernel_size, but got input.size(1)={c} and "
                           f"kernel_size=({kernel[0]}, {kernel[1]}).")
    blocks = _blocks(size, kernel, dilation, padding, stride)
    if xs[nd - 1] != blocks[0] * blocks[1] or blocks[0] < 1 or blocks[1] < 1:
        raise RuntimeError(
            f"Given output_size=({size[0]}, {size[1]}), kernel_size=({kernel[0]}, {kernel[1]}), "
            f"dilation=({dilation[0]}, {dilation[1]}), padding=({padding[0]}, {padding[1]}), "
            f"stride=({stride[0]}, {stride[1]}), expected size of input's dimension 2 to match "
            f"the calculated number of sliding blocks {blocks[0]} * {blocks[1]} = "
            f"{blocks[0] * blocks[1]}, but got input.size(2)={xs[nd - 1]}.")
    _float_only(input, "col2im_out_cpu")
    return _record(_COL2IM, input, None, None, 1, stride, padding, dilation, size, kernel)


# torch.conv1d ... take nn.functional's signatures
_methods.functions(conv1d=conv1d, conv2d=conv2d, conv_transpose1d=conv_transpose1d,
                   conv_transpose2d=conv_transpose2d)
