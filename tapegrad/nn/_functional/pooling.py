"""nn.functional: pooling, resizing and padding, PyTorch's spelling, defaults and checks.

Each function validates its arguments with PyTorch's exception types and messages, then
records one row of the op table (tapegrad/ops/pool.py). A 1-d pooling is PyTorch's 2-d one
on an unsqueezed input, squeezed back (its grad_fn chain: SqueezeBackward1,
MaxPool2DWithIndicesBackward0, UnsqueezeBackward0, as in PyTorch); circular padding is
PyTorch's composition of slice copies (CopySlices rows)."""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import math
import numbers

import numpy as np

from ..._front.tensor import Tensor, run as _run, _wrap, type_label as _type_label
from ..._front import methods as _methods
from ..._front import dtype as D
from ..._front.creation import tensor as _new_tensor
from ...ops.registry import BY_NAME
from ...ops import pool as _pool

__all__ = ["lp_pool1d", "lp_pool2d", "max_pool1d", "max_pool2d", "max_pool1d_with_indices",
           "max_pool2d_with_indices",
           "avg_pool1d", "avg_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
           "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool1d_with_indices",
           "adaptive_max_pool2d_with_indices", "interpolate", "upsample", "upsample_nearest",
           "upsample_bilinear", "pixel_shuffle", "pixel_unshuffle", "pad"]

_MAXPOOL = BY_NAME["max_pool2d"]
_AVGPOOL = BY_NAME["avg_pool2d"]
_AMAXPOOL = BY_NAME["adaptive_max_pool2d"]
_AAVGPOOL = BY_NAME["adaptive_avg_pool2d"]
_CPAD = BY_NAME["constant_pad_nd"]


# ---------------------------------------------------------------- argument parsing
def _pos(pos):
    return "" if pos is None else f" (position {pos})"


def _is_int(v):
    return isinstance(v, (numbers.Integral, np.integer)) and not isinstance(v, (bool, np.bool_))


def _ints(value, fn, name, pos):
    """A list of ints from an int or a tuple/list of ints, with PyTorch's TypeErrors."""
    if _is_int(value):
        return [int(value)]
    if isinstance(value, Tensor) and value.ndim == 0 and not value.dtype.is_floating_point:
        return [int(value.item())]
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"{fn}(): argument '{name}'{_pos(pos)} must be tuple of ints, not "
                        f"{_type_label(value)}")
    out = []
    for k, v in enumerate(value):
        if not _is_int(v):
            raise TypeError(f"{fn}(): argument '{name}'{_pos(pos)} must be tuple of ints, but "
                            f"found element of type {type(v).__name__} at pos {k}")
        out.append(int(v))
    return out


def _bool(value, fn, name, pos):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{fn}(): argument '{name}'{_pos(pos)} must be bool, not "
                        f"{_type_label(value)}")
    return bool(value)


def _tensor(input, fn):
    if not isinstance(input, Tensor):
        raise TypeError(f"{fn}(): argument 'input' (position 1) must be Tensor, not "
                        f"{_type_label(input)}")


def _float_input(input, kernel):
    """PyTorch's refusal of a dtype its kernel lacks (kernel: the name its message gives)."""
    if not input.dtype.is_floating_point:
        name = "Long" if input.dtype is D.int64 else "Bool"
        raise NotImplementedError(f'"{kernel}" not implemented for \'{name}\'')


def _two(values, fn, what, allow_empty=False):
    n = len(values)
    if n == 2 or n == 1 or (allow_empty and n == 0):
        return values
    raise RuntimeError(f"{fn}: {what}")


def _pool_out(size, k, pad, stride, dilation, ceil_mode):
    """PyTorch's pooling_output_shape, with its checks."""
    if stride == 0:
        raise RuntimeError("stride should not be zero")
    if pad < 0:
        raise RuntimeError(f"pad must be non-negative, but got pad: {pad}")
    if pad > ((k - 1) * dilation + 1) // 2:
        raise RuntimeError(f"pad should be at most half of effective kernel size, but got "
                           f"pad={pad}, kernel_size={k} and dilation={dilation}")
    out = (size + 2 * pad - dilation * (k - 1) - 1 + (stride - 1 if ceil_mode else 0)) \
        // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _pool2d_check(input, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    """PyTorch's pool2d_shape_check."""
    if kw <= 0 or kh <= 0:
        raise RuntimeError(f"kernel size should be greater than zero, but got kH: {kh} kW: {kw}")
    if sw <= 0 or sh <= 0:
        raise RuntimeError(f"stride should be greater than zero, but got dH: {sh} dW: {sw}")
    if dh <= 0 or dw <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got dilationH: {dh} "
                           f"dilationW: {dw}")
    s = list(input.shape)
    nd = len(s)
    if not ((nd == 3 and s[0] != 0 and s[1] != 0 and s[2] != 0)
            or (nd == 4 and s[1] != 0 and s[2] != 0 and s[3] != 0)):
        raise RuntimeError(f"Expected 3D or 4D (batch mode) tensor with optional 0 dim batch "
                           f"size for input, but got:{_size(s)}")
    if kw // 2 < pw or kh // 2 < ph:
        raise RuntimeError(f"pad should be smaller than or equal to half of kernel size, but "
                           f"got padW = {pw}, padH = {ph}, kW = {kw}, kH = {kh}")
    if ow < 1 or oh < 1:
        raise RuntimeError(f"Given input size: ({s[-3]}x{s[-2]}x{s[-1]}). Calculated output "
                           f"size: ({s[-3]}x{oh}x{ow}). Output size is too small")


def _size(shape):
    return "[" + ", ".join(str(int(n)) for n in shape) + "]"


def _run_pool(op, input, oh, ow, **attrs):
    attrs = {"kh": 0, "kw": 0, "sh": 1, "sw": 1, "ph": 0, "pw": 0, "dh": 1, "dw": 1,
             "count_include_pad": 0, "divisor": 0, **attrs}
    if any(abs(v) >= 2 ** 31 for v in attrs.values()):
        # (PyTorch's kernels hold these in 32-bit ints and refuse larger ones so)
        raise RuntimeError("value cannot be converted to type int without overflow")
    ids = _run(op, input._i, iargs=op.pack(**attrs), fargs=[oh, ow],
               all_outputs=op is _MAXPOOL or op is _AMAXPOOL)
    if isinstance(ids, list):
        return _wrap(ids[0]), _wrap(ids[1])
    return _wrap(ids)


# ---------------------------------------------------------------- max pooling
def _max_pool2d_impl(input, kernel_size, stride, padding, dilation, ceil_mode, fn="max_pool2d"):
    _tensor(input, fn)
    k = _two(_ints(kernel_size, fn, "kernel_size", 2), "max_pool2d",
             "kernel_size must either be a single int, or a tuple of two ints")
    st = _two(_ints(stride, fn, "stride", 3) if stride is not None else [], "max_pool2d",
              "stride must either be omitted, a single int, or a tuple of two ints", True)
    p = _two(_ints(padding, fn, "padding", 4), "max_pool2d",
             "padding must either be a single int, or a tuple of two ints")
    d = _two(_ints(dilation, fn, "dilation", 5), "max_pool2d",
             "dilation must be either a single int, or a tuple of two ints")
    ceil_mode = _bool(ceil_mode, fn, "ceil_mode", 6)
    kh, kw = k[0], k[-1]
    sh, sw = (kh, kw) if not st else (st[0], st[-1])
    ph, pw = p[0], p[-1]
    dh, dw = d[0], d[-1]
    if input.ndim not in (3, 4):
        raise RuntimeError("non-empty 3D or 4D (batch mode) tensor expected for input")
    oh = _pool_out(input.shape[-2], kh, ph, sh, dh, ceil_mode)
    ow = _pool_out(input.shape[-1], kw, pw, sw, dw, ceil_mode)
    _pool2d_check(input, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)
    if input.dtype is D.int64:      # (no gradient: the float64 kernel's picks, exact values)
        _, idx = _run_pool(_MAXPOOL, input.to(D.float64), oh, ow, kind=_pool.MAX, kh=kh,
                           kw=kw, sh=sh, sw=sw, ph=ph, pw=pw, dh=dh, dw=dw)
        return input.flatten(-2).gather(-1, idx.flatten(-2)).reshape(idx.shape), idx
    _float_input(input, "max_pool2d")
    return _run_pool(_MAXPOOL, input, oh, ow, kind=_pool.MAX, kh=kh, kw=kw, sh=sh, sw=sw,
                     ph=ph, pw=pw, dh=dh, dw=dw)


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False, return_indices=False):
    """2-d max pooling over the last two dims of a (N, C, H, W) or (C, H, W) input: the
    values and the index (h * W + w in the input plane) of each window's max (the first of
    equal maxima; a NaN wins)."""
    return _max_pool2d_impl(input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """2-d max pooling (stride defaults to kernel_size); with return_indices=True also the
    indices of the maxima, as max_pool2d_with_indices."""
    v, i = _max_pool2d_impl(input, kernel_size, stride, padding, dilation, ceil_mode)
    return (v, i) if _bool(return_indices, "max_pool2d", "return_indices", 7) else v


def _one(values, fn, name, allow_empty=False):
    n = len(values)
    if n == 1 or (allow_empty and n == 0):
        return values
    raise RuntimeError(f"{fn} {name}")


def _max_pool1d_impl(input, kernel_size, stride, padding, dilation, ceil_mode,
                     with_indices=True):
    fn = "max_pool1d"
    _tensor(input, fn)
    k = _ints(kernel_size, fn, "kernel_size", 2)
    st = _ints(stride, fn, "stride", 3) if stride is not None else []
    p = _ints(padding, fn, "padding", 4)
    d = _ints(dilation, fn, "dilation", 5)
    ceil_mode = _bool(ceil_mode, fn, "ceil_mode", 6)
    s = list(input.shape)
    if not ((len(s) == 2 and s[1] != 0) or (len(s) == 3 and s[1] != 0 and s[2] != 0)):
        raise RuntimeError(f"max_pool1d: Expected 2D or 3D (batch mode) tensor with optional 0 "
                           f"dim batch size for input, but got:{_size(s)}")
    if len(k) != 1:
        raise RuntimeError(f"max_pool1d() kernel_size must be an int, list of ints or tuple of "
                           f"ints of size 1 but got size {len(k)}")
    if len(st) not in (0, 1):
        raise RuntimeError(f"max_pool1d() stride must be None, an int, list of ints, or tuple "
                           f"of ints of size 1 but got size {len(st)}")
    if len(p) != 1:
        raise RuntimeError(f"max_pool1d() padding must be an int, list of ints, or tuple of "
                           f"ints of size 1 but got size {len(p)}")
    if len(d) != 1:
        raise RuntimeError(f"max_pool1d() dilation must be an int, list of ints or tuple of "
                           f"ints of size 1 but got size {len(d)}")
    k, st, p, d = k[0], (st or k)[0], p[0], d[0]
    if k <= 0:
        raise RuntimeError(f"max_pool1d() kernel_size must be greater than zero, but got {k}")
    if st <= 0:
        raise RuntimeError(f"max_pool1d() stride must be greater than zero, but got {st}")
    if p < 0:
        raise RuntimeError(f"max_pool1d() padding must be non-negative, but got {p}")
    if p > k // 2:
        raise RuntimeError(f"max_pool1d() padding should be at most half of kernel size, but "
                           f"got padding={p} and kernel_size={k}")
    if d <= 0:
        raise RuntimeError(f"max_pool1d() dilation must be greater than zero, but got {d}")
    ow = _pool_out(s[-1], k, p, st, d, ceil_mode)
    if ow <= 0:
        raise RuntimeError(f"max_pool1d() Invalid computed output size: {ow}")
    # (without indices PyTorch runs its own 1-d kernel, which has no integer version)
    _float_input(input, "max_pool2d" if with_indices else "max_pool1d_impl")
    v, i = _run_pool(_MAXPOOL, input.unsqueeze(-2), 1, ow, kind=_pool.MAX, kh=1, kw=k, sh=1,
                     sw=st, ph=0, pw=p, dh=1, dw=d)
    return v.squeeze(-2), i.squeeze(-2)


def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False, return_indices=False):
    """1-d max pooling over the last dim of a (N, C, L) or (C, L) input: values and indices."""
    return _max_pool1d_impl(input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """1-d max pooling (the 2-d one on a unit height); return_indices=True also gives the
    indices."""
    with_indices = _bool(return_indices, "max_pool1d", "return_indices", 7)
    if with_indices and input.dtype is D.int64:
        v, i = max_pool2d(input.unsqueeze(-2), (1, *_ints(kernel_size, "max_pool1d",
                                                            "kernel_size", 2)),
                          None if stride is None else (1, *_ints(stride, "max_pool1d",
                                                                 "stride", 3)),
                          (0, *_ints(padding, "max_pool1d", "padding", 4)),
                          (1, *_ints(dilation, "max_pool1d", "dilation", 5)), ceil_mode, True)
        return v.squeeze(-2), i.squeeze(-2)
    v, i = _max_pool1d_impl(input, kernel_size, stride, padding, dilation, ceil_mode,
                            with_indices)
    return (v, i) if with_indices else v


# ---------------------------------------------------------------- average pooling
def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """2-d average pooling: each window's sum over its size (the padded size with
    count_include_pad, the in-range taps without), or over divisor_override."""
    fn = "avg_pool2d"
    _tensor(input, fn)
    k = _two(_ints(kernel_size, fn, "kernel_size", 2), fn,
             "kernel_size must either be a single int, or a tuple of two ints")
    st = _two(_ints(stride, fn, "stride", 3) if stride is not None else [], fn,
              "stride must either be omitted, a single int, or a tuple of two ints", True)
    p = _two(_ints(padding, fn, "padding", 4), fn,
             "padding must either be a single int, or a tuple of two ints")
    ceil_mode = _bool(ceil_mode, fn, "ceil_mode", 5)
    count_include_pad = _bool(count_include_pad, fn, "count_include_pad", 6)
    if divisor_override is not None:
        if not _is_int(divisor_override):
            raise TypeError(f"avg_pool2d(): argument 'divisor_override' (position 7) must be "
                            f"int, not {_type_label(divisor_override)}")
        if divisor_override == 0:
            raise RuntimeError("divisor must be not zero")
    kh, kw = k[0], k[-1]
    sh, sw = (kh, kw) if not st else (st[0], st[-1])
    ph, pw = p[0], p[-1]
    if input.ndim < 3:
        n = max(input.ndim, 1)
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], "
                         f"but got -3)")
    oh = _pool_out(input.shape[-2], kh, ph, sh, 1, ceil_mode)
    ow = _pool_out(input.shape[-1], kw, pw, sw, 1, ceil_mode)
    _pool2d_check(input, kh, kw, sh, sw, ph, pw, 1, 1, oh, ow)
    if input.dtype is D.int64:
        raise NotImplementedError("tapegrad: avg_pool1d/avg_pool2d of an int64 tensor (PyTorch's "
                                  "integer division of window sums) is not supported; convert "
                                  "with .double() first")
    _float_input(input, "avg_pool2d")
    return _run_pool(_AVGPOOL, input, oh, ow, kind=_pool.AVG, kh=kh, kw=kw, sh=sh, sw=sw,
                     ph=ph, pw=pw, count_include_pad=int(count_include_pad),
                     divisor=int(divisor_override or 0))


def _dims_2_to_3(input, fn):
    if input.ndim not in (2, 3):
        raise RuntimeError(f"Expected 2 to 3 dimensions, but got {input.ndim}-dimensional tensor "
                           f"for argument #1 'self' (while checking arguments for {fn})")


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    """1-d average pooling (the 2-d one on a unit height)."""
    fn = "avg_pool1d"
    _tensor(input, fn)
    k = _ints(kernel_size, fn, "kernel_size", 2)
    st = _ints(stride, fn, "stride", 3) if stride is not None else []
    p = _ints(padding, fn, "padding", 4)
    ceil_mode = _bool(ceil_mode, fn, "ceil_mode", 5)
    count_include_pad = _bool(count_include_pad, fn, "count_include_pad", 6)
    _dims_2_to_3(input, fn)
    for name, v, empty in (("kernel_size", k, False), ("stride", st, True),
                           ("padding", p, False)):
        if len(v) != 1 and not (empty and not v):
            raise RuntimeError(f"avg_pool1d() argument '{name}' should contain one int (got "
                               f"{len(v)})")
    return avg_pool2d(input.unsqueeze(-2), (1, k[0]), (1, st[0]) if st else (1, k[0]),
                      (0, p[0]), ceil_mode, count_include_pad).squeeze(-2)


# ---------------------------------------------------------------- power-average pooling
def _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, pool, area):
    if isinstance(norm_type, (int, float)):
        if norm_type == float("inf"):
            return pool(input.abs(), kernel_size, stride, 0, 1, ceil_mode)
        if norm_type == -float("inf"):
            return -pool(-input.abs(), kernel_size, stride, 0, 1, ceil_mode)
    avg = avg_pool1d if pool is max_pool1d else avg_pool2d
    if stride is not None:
        out = avg(input.pow(norm_type), kernel_size, stride, 0, ceil_mode)
    else:
        out = avg(input.pow(norm_type), kernel_size, padding=0, ceil_mode=ceil_mode)
    return (out.sign() * out.abs().relu()).mul(area).pow(1.0 / norm_type)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """Power-average pooling: (sum over each window of x ** p) ** (1 / p), PyTorch's
    composition (avg_pool1d of x ** p, times the window size; max pooling of |x| for
    p = inf)."""
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, max_pool1d, kernel_size)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """2-d power-average pooling, as lp_pool1d."""
    kw, kh = (kernel_size, kernel_size) if _is_int(kernel_size) else tuple(kernel_size)
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, max_pool2d, kw * kh)


# ---------------------------------------------------------------- adaptive pooling
def _output_size(output_size, input, fn, n):
    """output_size as n ints, None entries taking the input's size (PyTorch's
    _list_with_default)."""
    if _is_int(output_size):
        return [int(output_size)] * n if n == 2 else [int(output_size)]
    if output_size is None:
        return list(input.shape[-n:])
    if isinstance(output_size, (tuple, list)):
        sizes = list(input.shape[-len(output_size):]) if len(output_size) <= input.ndim \
            else [None] * len(output_size)
        out = []
        for k, v in enumerate(output_size):
            if v is None:
                out.append(sizes[k])
            elif not _is_int(v):
                raise TypeError(f"{fn}(): argument 'output_size' (position 2) must be tuple of "
                                f"ints, but found element of type {type(v).__name__} at pos {k}")
            else:
                out.append(int(v))
        return out
    raise TypeError(f"{fn}(): argument 'output_size' (position 2) must be tuple of ints, but "
                    f"found element of type {type(output_size).__name__} at pos 0")


def _adaptive_check(input, fn, colon):
    s = list(input.shape)
    if input.ndim not in (3, 4):
        raise RuntimeError(f"{fn}(): Expected 3D or 4D tensor, but got{':' if colon else ''} "
                           f"{_size(s)}")
    for d in range(1, input.ndim):
        if s[d] == 0:
            raise RuntimeError(f"{fn}(): Expected input to have non-zero size for non-batch "
                               f"dimensions, but input has sizes {_size(s)} with dimension {d} "
                               f"being empty")


def adaptive_avg_pool2d(input, output_size):
    """2-d adaptive average pooling to output_size (an int, or (H, W) with None for the
    input's size): window i spans [floor(i * In / Out), ceil((i + 1) * In / Out)). A 1 x 1
    output is the mean over the last two dims, as PyTorch computes it."""
    fn = "adaptive_avg_pool2d"
    _tensor(input, fn)
    size = _output_size(output_size, input, fn, 2)
    if len(size) != 2:
        raise RuntimeError("adaptive_avg_pool2d: output_size must be 2")
    _adaptive_check(input, fn, False)
    if size[0] < 0 or size[1] < 0:
        raise RuntimeError(f"adaptive_avg_pool2d: elements of output_size must be greater than "
                           f"or equal to 0 but received {{{size[0]}, {size[1]}}}")
    if size == [1, 1]:
        return input.mean((-1, -2), keepdim=True)
    _float_input(input, fn)
    if size == [1, 1]:
        return input.mean((-1, -2), keepdim=True)
    return _run_pool(_AAVGPOOL, input, size[0], size[1], kind=_pool.AAVG)


def adaptive_avg_pool1d(input, output_size):
    """1-d adaptive average pooling (the 2-d one on a unit height)."""
    fn = "adaptive_avg_pool1d"
    _tensor(input, fn)
    size = _ints(output_size, fn, "output_size", 2)
    _dims_2_to_3(input, fn)
    if len(size) != 1:
        raise RuntimeError(f"adaptive_avg_pool1d() argument 'output_size' should contain one "
                           f"int (got {len(size)})")
    return adaptive_avg_pool2d(input.unsqueeze(-2), (1, size[0])).squeeze(-2)


def _adaptive_max2d(input, output_size, fn="adaptive_max_pool2d"):
    _tensor(input, fn)
    size = _output_size(output_size, input, fn, 2)
    if len(size) != 2:
        raise RuntimeError("adaptive_max_pool2d(): internal error: output_size.size() must be 2")
    _adaptive_check(input, "adaptive_max_pool2d", True)
    if size[0] < 0 or size[1] < 0:
        shape = list(input.shape[:-2]) + size
        bad = size[0] if size[0] < 0 else size[1]
        raise RuntimeError(f"Trying to create tensor with negative dimension {bad}: "
                           f"{_size(shape)}")
    _float_input(input, "adaptive_max_pool2d")
    return _run_pool(_AMAXPOOL, input, size[0], size[1], kind=_pool.AMAX)


def adaptive_max_pool2d_with_indices(input, output_size, return_indices=False):
    """2-d adaptive max pooling: values and indices (h * W + w in the input plane)."""
    return _adaptive_max2d(input, output_size)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """2-d adaptive max pooling; return_indices=True also gives the indices."""
    v, i = _adaptive_max2d(input, output_size)
    return (v, i) if _bool(return_indices, "adaptive_max_pool2d", "return_indices", 3) else v


def _adaptive_max1d(input, output_size):
    fn = "adaptive_max_pool1d"
    _tensor(input, fn)
    size = _ints(output_size, fn, "output_size", 2)
    _dims_2_to_3(input, fn)
    if len(size) != 1:
        raise RuntimeError(f"adaptive_max_pool1d() argument 'output_size' should contain one "
                           f"int (got {len(size)})")
    v, i = _adaptive_max2d(input.unsqueeze(-2), (1, size[0]))
    return v.squeeze(-2), i.squeeze(-2)


def adaptive_max_pool1d_with_indices(input, output_size, return_indices=False):
    """1-d adaptive max pooling: values and indices."""
    return _adaptive_max1d(input, output_size)


def adaptive_max_pool1d(input, output_size, return_indices=False):
    """1-d adaptive max pooling; return_indices=True also gives the indices."""
    v, i = _adaptive_max1d(input, output_size)
    return (v, i) if _bool(return_indices, "adaptive_max_pool1d", "return_indices", 3) else v


# ---------------------------------------------------------------- resizing
_MODES = "nearest | linear | bilinear | bicubic | trilinear | lanczos | area | nearest-exact"
_UPSAMPLE_OPS = {("nearest", 3): "upsample_nearest1d", ("nearest", 4): "upsample_nearest2d",
                 ("nearest-exact", 3): "upsample_nearest_exact1d",
                 ("nearest-exact", 4): "upsample_nearest_exact2d",
                 ("linear", 3): "upsample_linear1d", ("bilinear", 4): "upsample_bilinear2d"}
_MODE_CODE = {"nearest": _pool.NEAREST, "nearest-exact": _pool.NEAREST_EXACT,
              "linear": _pool.LINEAR, "bilinear": _pool.LINEAR}


def _bits(v):
    return int(np.float64(v).view(np.int64))


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resize the spatial dims of a (N, C, L) or (N, C, H, W) input to size, or by
    scale_factor: modes "nearest", "nearest-exact", "linear" (3-d), "bilinear" (4-d),
    "area" (adaptive average pooling); PyTorch's source positions and weights."""
    _tensor(input, "interpolate")
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating "
                             "modes: linear | bilinear | bicubic | trilinear")
    elif align_corners is None:
        align_corners = False
    dim = input.ndim - 2
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        scales = None
        if isinstance(size, (list, tuple)):
            if len(size) != dim:
                raise ValueError(
                    "Input and output must have the same number of spatial dimensions, but got "
                    f"input with spatial dimensions of {list(input.shape[2:])} and output size "
                    f"of {size}. Please provide input tensor in (N, C, d1, d2, ...,dK) format "
                    "and output size in (o1, o2, ...,oK) format.")
            if not all(_is_int(v) for v in size):
                raise TypeError("expected size to be one of int or Tuple[int] or Tuple[int, int] "
                                "or Tuple[int, int, int], but got size with types "
                                f"{[type(v) for v in size]}")
            out = [int(v) for v in size]
        else:
            if not _is_int(size):
                raise TypeError(f"interpolate(): size must be an int or a tuple of ints, not "
                                f"{_type_label(size)}")
            out = [int(size)] * max(dim, 0)
    elif scale_factor is not None:
        out = None
        if isinstance(scale_factor, (list, tuple)):
            if len(scale_factor) != dim:
                raise ValueError(
                    "Input and scale_factor must have the same number of spatial dimensions, but "
                    f"got input with spatial dimensions of {list(input.shape[2:])} and "
                    f"scale_factor of shape {scale_factor}. Please provide input tensor in (N, C, "
                    "d1, d2, ...,dK) format and scale_factor in (s1, s2, ...,sK) format.")
            scales = list(scale_factor)
        else:
            scales = [scale_factor] * max(dim, 0)
        for v in scales:
            if not isinstance(v, numbers.Real) or isinstance(v, bool):
                raise TypeError(f"interpolate(): scale_factor must be a float or a tuple of "
                                f"floats, not {_type_label(v)}")
        scales = [float(v) for v in scales]
    else:
        raise ValueError("either size or scale_factor should be defined")
    if recompute_scale_factor and size is not None:
        raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
    if mode == "area" and out is None:
        recompute_scale_factor = True
    if recompute_scale_factor:
        out = [math.floor(input.shape[i + 2] * scales[i]) for i in range(dim)]
        scales = None
    if antialias and not (mode in ("bilinear", "bicubic", "lanczos") and input.ndim == 4):
        raise ValueError("Anti-alias option is restricted to bilinear, bicubic, and lanczos modes "
                         "and requires a 4-D tensor as input")
    if antialias:
        raise NotImplementedError("tapegrad: interpolate(antialias=True) is not supported")
    nd = input.ndim
    if mode == "area" and nd in (3, 4):
        return (adaptive_avg_pool1d(input, out) if nd == 3 else adaptive_avg_pool2d(input, out))
    name = _UPSAMPLE_OPS.get((mode, nd))
    if name is None:
        if mode in ("linear", "bilinear", "trilinear", "bicubic") and nd in (3, 4, 5):
            need = {"linear": 3, "bilinear": 4, "trilinear": 5, "bicubic": 4}[mode]
            if nd != need:
                raise NotImplementedError(f"Got {nd}D input, but {mode} mode needs {need}D input")
        if nd in (3, 4, 5) and mode in ("nearest", "nearest-exact", "area", "linear",
                                        "bilinear", "bicubic", "trilinear", "lanczos"):
            raise NotImplementedError(f"tapegrad: interpolate mode {mode!r} on a {nd}-D input "
                                      "is not supported")
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got "
                                  f"{nd}D) for the modes: {_MODES} (got {mode})")
    if out is None:
        out = [int(input.shape[i + 2] * scales[i]) for i in range(dim)]
    ins = list(input.shape[2:])
    if any(o <= 0 for o in out) or any(i <= 0 for i in ins):
        if dim == 1:
            raise RuntimeError(f"Input and output sizes should be greater than 0, but got input "
                               f"(W: {ins[0]}) and output (W: {out[0]})")
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input (H: "
                           f"{ins[0]}, W: {ins[1]}) output (H: {out[0]}, W: {out[1]})")
    _float_input(input, "compute_indices_weights_nearest" if nd == 3 and mode != "linear" else
                 {"nearest": "upsample_nearest2d_channels_last",
                  "nearest-exact": "upsample_nearest2d_channels_last",
                  "bilinear": "upsample_bilinear2d_channels_last",
                  "linear": "compute_indices_weights_linear"}[mode])
    op = BY_NAME[name]
    sc = scales if scales is not None else [0.0] * dim
    code = _MODE_CODE[mode]
    mode_h, scale_h = (-1, 0.0) if dim == 1 else (code, sc[0])
    return _wrap(_run(op, input._i, iargs=op.pack(
        mode_h=mode_h, mode_w=code, align_corners=int(bool(align_corners)),
        scale_h=_bits(scale_h), scale_w=_bits(sc[-1])), fargs=[out[0] if dim == 2 else 1,
                                                              out[-1]]))


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Deprecated spelling of interpolate (PyTorch's warning)."""
    import warnings
    warnings.warn("`nn.functional.upsample` is deprecated. Use `nn.functional.interpolate` "
                  "instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    """Deprecated: interpolate(mode="nearest") (PyTorch's warning)."""
    import warnings
    warnings.warn("`nn.functional.upsample_nearest` is deprecated. Use "
                  "`nn.functional.interpolate` instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """Deprecated: interpolate(mode="bilinear", align_corners=True) (PyTorch's warning)."""
    import warnings
    warnings.warn("`nn.functional.upsample_bilinear` is deprecated. Use "
                  "`nn.functional.interpolate` instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


# ---------------------------------------------------------------- pixel shuffle
def _factor(value, fn, name):
    if not _is_int(value):
        raise TypeError(f"{fn}(): argument '{name}' (position 2) must be int, not "
                        f"{_type_label(value)}")
    return int(value)


def pixel_shuffle(input, upscale_factor):
    """(*, C * r * r, H, W) -> (*, C, H * r, W * r)."""
    fn = "pixel_shuffle"
    _tensor(input, fn)
    r = _factor(upscale_factor, fn, "upscale_factor")
    if input.ndim < 3:
        raise RuntimeError(f"pixel_shuffle expects input to have at least 3 dimensions, but got "
                           f"input with {input.ndim} dimension(s)")
    if r <= 0:
        raise RuntimeError(f"pixel_shuffle expects a positive upscale_factor, but got {r}")
    c = input.shape[-3]
    if c % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be divisible "
                           f"by the square of upscale_factor, but input.size(-3)={c} is not "
                           f"divisible by {r * r}")
    if not input.dtype.is_floating_point:       # (no gradient: a permutation of views)
        *lead, c, h, w = input.shape
        return (input.reshape(*lead, c // (r * r), r, r, h, w)
                .permute(*range(len(lead)), -5, -2, -4, -1, -3)
                .reshape(*lead, c // (r * r), h * r, w * r))
    op = BY_NAME["pixel_shuffle"]
    return _wrap(_run(op, input._i, iargs=op.pack(factor=r, inverse=0)))


def pixel_unshuffle(input, downscale_factor):
    """(*, C, H * r, W * r) -> (*, C * r * r, H, W)."""
    fn = "pixel_unshuffle"
    _tensor(input, fn)
    r = _factor(downscale_factor, fn, "downscale_factor")
    if input.ndim < 3:
        raise RuntimeError(f"pixel_unshuffle expects input to have at least 3 dimensions, but "
                           f"got input with {input.ndim} dimension(s)")
    if r <= 0:
        raise RuntimeError(f"pixel_unshuffle expects a positive downscale_factor, but got {r}")
    h, w = input.shape[-2], input.shape[-1]
    if h % r:
        raise RuntimeError(f"pixel_unshuffle expects height to be divisible by downscale_factor, "
                           f"but input.size(-2)={h} is not divisible by {r}")
    if w % r:
        raise RuntimeError(f"pixel_unshuffle expects width to be divisible by downscale_factor, "
                           f"but input.size(-1)={w} is not divisible by {r}")
    if not input.dtype.is_floating_point:
        *lead, c, h, w = input.shape
        return (input.reshape(*lead, c, h // r, r, w // r, r)
                .permute(*range(len(lead)), -5, -3, -1, -4, -2)
                .reshape(*lead, c * r * r, h // r, w // r))
    op = BY_NAME["pixel_unshuffle"]
    return _wrap(_run(op, input._i, iargs=op.pack(factor=r, inverse=1)))


# ---------------------------------------------------------------- padding
_PAD_COMBOS = ("Supported combinations for non-constant padding:\n"
               "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
               "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
               "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)")
_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _run_pad(op, input, before, oshape, mode, value=0.0):
    nd = input.ndim
    return _wrap(_run(op, input._i, s=float(value),
                      iargs=op.pack(mode=mode, before=before), fargs=[nd, *oshape]))


def pad(input, pad, mode="constant", value=None):
    """Pad the last len(pad) // 2 dims: pad = (left, right) of the last dim, then of the one
    before, ... Modes: "constant" (value, default 0; negative amounts crop), "reflect"
    (mirrored without the edge), "replicate" (the edge repeated), "circular" (wrapped
    around), with PyTorch's rank rules: a non-constant mode pads 1, 2 or 3 dims of an input
    with one or two more dims."""
    _tensor(input, "pad")
    if not isinstance(pad, (tuple, list)):
        raise TypeError(f"pad(): argument 'pad' (position 2) must be tuple of ints, not "
                        f"{_type_label(pad)}")
    pads = _ints(pad, "pad", "pad", 2)
    if not isinstance(mode, str):
        raise TypeError(f"pad(): argument 'mode' (position 3) must be str, not "
                        f"{_type_label(mode)}")
    if value is not None and (not isinstance(value, numbers.Real) or isinstance(value, bool)):
        raise TypeError(f"pad(): argument 'value' (position 4) must be float, not "
                        f"{_type_label(value)}")
    if mode not in _PAD_MODES:
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if len(pads) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    nd = input.ndim
    if len(pads) > 2 * nd:
        raise RuntimeError(f"Padding length should be less than or equal to two times the input "
                           f"dimension but got padding length {len(pads)} and input of "
                           f"dimension {nd}")
    if mode == "constant":
        return _constant_pad(input, pads, 0.0 if value is None else value)
    if value is not None and value != 0:
        raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
    k = len(pads) // 2
    if not (k in (1, 2, 3) and nd in (k + 1, k + 2)):
        raise NotImplementedError(f"Padding size {len(pads)} is not supported for {nd}D input "
                                  f"tensor.\n{_PAD_COMBOS}")
    if mode == "circular":
        return _circular_pad(input, pads)
    shape = list(input.shape)
    batch = nd - k - 1          # dims before the channel dim (0 unbatched)
    if any(shape[d] == 0 for d in range(batch + 1 if batch else 0, nd)) or \
            (not batch and shape[0] == 0):
        raise RuntimeError(f"Expected {k + 1}D or {k + 2}D (batch mode) tensor with possibly 0 "
                           f"batch size and other non-zero dimensions for input, but got: "
                           f"{_size(shape)}")
    if input.dtype is D.bool_:
        _float_input(input, ("reflection_pad" if mode == "reflect" else "replication_pad")
                     + f"{k}d")
    before = [0] * nd
    oshape = list(shape)
    names = "WHD"
    for j in range(k):
        d = nd - 1 - j
        lo, hi = pads[2 * j], pads[2 * j + 1]
        if mode == "reflect" and (lo >= shape[d] or hi >= shape[d]):
            raise RuntimeError(f"Argument #4: Padding size should be less than the corresponding "
                               f"input dimension, but got: padding ({lo}, {hi}) at dimension {d} "
                               f"of input {_size(shape)}")
        before[d] = lo
        oshape[d] = shape[d] + lo + hi
    for j in range(k - 1, -1, -1):
        d = nd - 1 - j
        if oshape[d] < (0 if mode == "reflect" else 1):
            raise RuntimeError(f"input ({names[j]}: {shape[d]}) is too small. Calculated output "
                               f"{names[j]}: {oshape[d]}")
    name = ("reflection_pad" if mode == "reflect" else "replication_pad") + f"{k}d"
    code = _pool.REFLECT if mode == "reflect" else _pool.REPLICATE
    if input.dtype is D.int64:      # (no gradient: the positions read, dim by dim)
        out = input
        for d in range(nd - k, nd):
            j = np.arange(oshape[d]) - before[d]
            n = shape[d]
            j = (np.where(j < 0, -j, np.where(j >= n, 2 * (n - 1) - j, j)) if code == _pool.REFLECT
                 else np.clip(j, 0, n - 1))
            key = (slice(None),) * d + (_new_tensor(j.astype(np.int64)),)
            out = out[key]
        return out
    return _run_pad(BY_NAME[name], input, before, oshape, code)


def _constant_pad(input, pads, value):
    """constant_pad_nd: one ConstantPadNdBackward0 row."""
    nd = input.ndim
    shape = list(input.shape)
    before = [0] * nd
    oshape = list(shape)
    for j in range(len(pads) // 2):
        d = nd - 1 - j
        lo, hi = pads[2 * j], pads[2 * j + 1]
        if shape[d] + min(lo, 0) + min(hi, 0) < 0:
            raise RuntimeError("narrow(): length must be non-negative.")
        before[d] = lo
        oshape[d] = shape[d] + lo + hi
    for j in range(len(pads) // 2 - 1, -1, -1):
        d = nd - 1 - j
        if oshape[d] < 0:
            raise RuntimeError(f"The input size {shape[d]}, plus negative padding "
                               f"{pads[2 * j]} and {pads[2 * j + 1]} resulted in a negative "
                               f"output size, which is invalid. Check dimension {d} of your "
                               f"input.")
    if not input.dtype.is_floating_point:
        out = input.new_full(oshape, value)
        src, dst = [slice(None)] * nd, [slice(None)] * nd
        for d in range(nd):
            lo, n = before[d], shape[d]
            kept = oshape[d] - max(lo, 0) - max(oshape[d] - n - lo, 0)
            src[d] = slice(max(-lo, 0), max(-lo, 0) + kept)
            dst[d] = slice(max(lo, 0), max(lo, 0) + kept)
        out[tuple(dst)] = input[tuple(src)]
        return out
    return _run_pad(_CPAD, input, before, oshape, _pool.CONSTANT, value)


def _circular_pad(input, pads):
    """PyTorch's _pad_circular: the input copied into an empty tensor, then each padded dim's
    sides copied from the other end (CopySlices rows, as PyTorch records them)."""
    shape = list(input.shape)
    nd = input.ndim
    k = len(pads) // 2
    oshape = list(shape)
    for j in range(k):
        d = nd - 1 - j
        lo, hi = pads[2 * j], pads[2 * j + 1]
        oshape[d] = shape[d] + lo + hi
        if lo > shape[d] or hi > shape[d]:
            raise RuntimeError("Padding value causes wrapping around more than once.")
        if oshape[d] < 0:
            raise RuntimeError("Negative padding value is resulting in an empty dimension")
    # (the base is a padded copy without history rather than new_empty's, so that a
    # compiled replay, which re-runs ops, remakes it; every element is overwritten below)
    out = (_constant_pad(input.detach(), pads, 0.0) if input.dtype.is_floating_point
           else input.new_empty(oshape))
    dst, src = [slice(None)] * nd, [slice(None)] * nd
    for j in range(k):
        d = nd - 1 - j
        lo, hi = pads[2 * j], pads[2 * j + 1]
        dst[d] = slice(max(lo, 0), oshape[d] - max(hi, 0))
        src[d] = slice(max(-lo, 0), shape[d] - max(-hi, 0))
    out[tuple(dst)] = input[tuple(src)]
    for j in range(k):
        d = nd - 1 - j
        lo, hi = pads[2 * j], pads[2 * j + 1]
        key = [slice(None)] * nd
        if lo > 0:
            a, b = list(key), list(key)
            a[d] = slice(0, lo)
            b[d] = slice(oshape[d] - lo - max(hi, 0), oshape[d] - max(hi, 0))
            out[tuple(a)] = out[tuple(b)]
        if hi > 0:
            a, b = list(key), list(key)
            a[d] = slice(oshape[d] - hi, oshape[d])
            b[d] = slice(max(lo, 0), max(lo, 0) + hi)
            out[tuple(a)] = out[tuple(b)]
    return out


# ---------------------------------------------------------------- tapegrad.<name>
def constant_pad_nd(input, pad, value=0):
    """tapegrad.constant_pad_nd: F.pad's constant mode."""
    _tensor(input, "constant_pad_nd")
    pads = _ints(pad, "constant_pad_nd", "pad", 2)
    if len(pads) % 2:
        raise RuntimeError(f"Length of pad must be even but instead it equals {len(pads)}")
    if len(pads) > 2 * input.ndim:
        raise RuntimeError(f"Length of pad should be no more than twice the number of dimensions "
                           f"of the input. Pad length is {len(pads)}while the input has "
                           f"{input.ndim}dimensions.")
    return _constant_pad(input, pads, value)


def _max_pool1d_fn(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """tapegrad.max_pool1d: F.max_pool1d's values."""
    return _max_pool1d_impl(input, kernel_size, stride if stride != () else None, padding,
                            dilation, ceil_mode)[0]


def _max_pool1d_with_indices_fn(input, kernel_size, stride=(), padding=0, dilation=1,
                                ceil_mode=False):
    """tapegrad.max_pool1d_with_indices: values and indices."""
    return _max_pool1d_impl(input, kernel_size, stride if stride != () else None, padding,
                            dilation, ceil_mode)


def _max_pool2d_fn(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """tapegrad.max_pool2d: F.max_pool2d's values."""
    return _max_pool2d_impl(input, kernel_size, stride if stride != () else None, padding,
                            dilation, ceil_mode)[0]


def _adaptive_max_pool1d_fn(input, output_size):
    """tapegrad.adaptive_max_pool1d: values and indices, as PyTorch's returns them."""
    return _adaptive_max1d(input, output_size)


_max_pool1d_fn.__name__ = "max_pool1d"
_max_pool1d_with_indices_fn.__name__ = "max_pool1d_with_indices"
_max_pool2d_fn.__name__ = "max_pool2d"
_adaptive_max_pool1d_fn.__name__ = "adaptive_max_pool1d"
TOP_LEVEL = {"max_pool1d": _max_pool1d_fn, "max_pool2d": _max_pool2d_fn,
             "max_pool1d_with_indices": _max_pool1d_with_indices_fn,
             "avg_pool1d": avg_pool1d, "adaptive_avg_pool1d": adaptive_avg_pool1d,
             "adaptive_max_pool1d": _adaptive_max_pool1d_fn, "pixel_shuffle": pixel_shuffle,
             "pixel_unshuffle": pixel_unshuffle, "constant_pad_nd": constant_pad_nd}
# PyTorch's top-level spellings, registered for tapegrad's namespace. The package's
# install (tapegrad/__init__.py) runs before nn loads, so they appear there only once it
# installs again after importing nn (or re-exports TOP_LEVEL).
for _name, _fn in TOP_LEVEL.items():
    _methods.function(_name, _fn)
del _name, _fn
