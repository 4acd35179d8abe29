"""nn.functional's activations, losses, dropout, embedding and normalisation, PyTorch's
spelling and defaults.

Losses PyTorch computes as one node are one fused row here (mse, huber, smooth_l1, the
binary cross entropies, nll, and cross_entropy = log_softmax + nll in one stable pass);
those PyTorch composes (l1_loss, cross_entropy with probability targets) are composed the
same way, so grad_fn chains match.
"""
import numbers
import warnings

import numpy as np

from ..._front import dtype as D
from ..._engine import layout as L
from ..._front import math_ops as _math
from ..._front import sampling as _sampling
from ..._front import generated as _generated  # noqa: F401  (the ops' declared fronts)
from ..._front import methods as _methods
from ..._front.math_ops import gelu, softplus, hardtanh, relu6, softsign, _unary_param
# (private names: tapegrad.nn.functional exports PyTorch's functions only)
from ..._front.promotion import (result_type as _result_type, to as _to, from_array as _from_array,
                                _type_name)
from ..._front.tensor import Tensor, run as _run, _wrap, _numpy_view, _FV
from ...ops.registry import BY_NAME
from ..._front.tensor import E as _E
from ..._engine.state import GRAD_MODE
from ...ops.loss import MSE, HUBER, SMOOTH_L1, BCE, BCE_LOGITS, BCE_LOGITS_POS, BCE_LOGITS_BOTH

_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}
_REDUCTION_NAMES = {v: k for k, v in _REDUCTIONS.items()}


def relu(input, inplace=False):
    """max(x, 0), elementwise (in place when inplace=True)."""
    try:
        return input.relu_() if inplace else input.relu()
    except AttributeError:      # (checked only then: F.relu is on every forward pass)
        _check(input, "input", "relu")
        raise


def _implicit_dim(input, dim, fn, stacklevel):
    """PyTorch's implicit softmax dim (with its warning, stacklevel frames above the
    nn.functional call, as PyTorch's _stacklevel counts them)."""
    if dim is None and isinstance(input, Tensor):
        return _math._softmax_dim(input, None, fn, stacklevel + 1)
    return dim


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    """tapegrad.softmax in nn.functional's spelling: dim optional (PyTorch's implicit
    choice, with its warning), _stacklevel before dtype."""
    return _math.softmax(input, _implicit_dim(input, dim, "softmax", _stacklevel), dtype)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    """log(softmax(input, dim)), computed stably; dim optional with PyTorch's warning."""
    return _math.log_softmax(input, _implicit_dim(input, dim, "log_softmax", _stacklevel),
                             dtype)


def sigmoid(input):
    """1 / (1 + exp(-x)), elementwise."""
    return input.sigmoid()


def tanh(input):
    """Hyperbolic tangent, elementwise."""
    return input.tanh()


def _float_only(input, fn, kernel):
    """Activations refuse integer tensors, as PyTorch's kernels do."""
    _check(input, "input", fn)
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{_type_name(input.dtype)}'"
                                  f" ({fn} takes floating point tensors)")


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """input / max(norm_p(input, dim), eps), PyTorch's formula."""
    if out is not None:
        raise NotImplementedError("normalize(): out= is not supported")
    _check(input, "input", "normalize")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"normalize(): expected a floating point input, got "
                           f"{input.dtype.name}")
    return input / input.norm(p, dim, keepdim=True).clamp_min(eps)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """sum(x1 / |x1| * x2 / |x2|) along dim, as PyTorch computes it: each norm is clamped
    to eps without autograd seeing the clamp (the gradient flows as if unclamped)."""
    from ...autograd import no_grad
    from ..._front.promotion import _broadcast_check
    _check(x1, "x1", "cosine_similarity")
    _check(x2, "x2", "cosine_similarity")
    rt = _result_type(x1, x2)
    if not rt.is_floating_point:
        raise RuntimeError(f"cosine_similarity(): expected common dtype to be floating point, "
                           f"yet common dtype is {_type_name(rt)}")
    _broadcast_check(x1, x2)
    shape = np.broadcast_shapes(tuple(x1.shape), tuple(x2.shape))
    x1, x2 = _to(x1, rt).expand(shape), _to(x2, rt).expand(shape)
    units = []
    for x in (x1, x2):
        n = x.norm(2, dim, keepdim=True).clone()
        with no_grad():
            n.clamp_(min=eps)
        units.append(x / n)
    return (units[0] * units[1]).sum(dim)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """Pointwise target * (log target - input) (target given as log target with
    log_target=True), 0 where target is 0; reduction "batchmean" divides the sum by the
    batch size, "mean" by the element count (with PyTorch's warning)."""
    legacy = size_average is not None or reduce is not None
    reduction = _legacy_reduction(reduction, size_average, reduce, 3)
    if reduction not in ("none", "mean", "sum", "batchmean"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    _check(input, "input", "kl_div")
    _check(target, "target", "kl_div")
    if not (input.dtype.is_floating_point and target.dtype.is_floating_point):
        raise RuntimeError("kl_div: Integral inputs not supported.")
    if reduction == "mean" and not legacy:      # (PyTorch warns of 'mean' given by name)
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the "
                      "support size.'batchmean' divides only by the batch size, and aligns with "
                      "the KL div math definition.'mean' will be changed to behave the same as "
                      "'batchmean' in the next major release.", UserWarning, stacklevel=2)
    if log_target:
        pointwise = target.exp() * (target - input)
    else:       # PyTorch's xlogy(target, target): 0 where target is 0, nan where negative
        tlogt = target * target.log()
        pointwise = tlogt.where(target != 0, _scalar(0.0, tlogt.dtype)) - target * input
    if reduction == "none":
        return pointwise
    if reduction == "mean":
        return pointwise.mean()
    total = pointwise.sum()
    return total / input.shape[0] if reduction == "batchmean" and input.ndim else total




def linear(input, weight, bias=None):
    """input @ weight.T + bias."""
    if (bias is not None and type(input) is Tensor and isinstance(weight, Tensor)
            and isinstance(bias, Tensor) and input.ndim == 2 and weight.ndim == 2
            and bias.ndim == 1 and input.dtype is weight.dtype is bias.dtype
            and input.dtype.is_floating_point and input.shape[1] == weight.shape[1]
            and bias.shape[0] == weight.shape[0] and _contiguous3(input, weight, bias)):
        return _wrap(_run(_LINEAR, bias._i, input._i, c=weight._i))   # one AddmmBackward0 row
    _check(input, "input", "linear")
    _check(weight, "weight", "linear")
    out = input @ weight.t() if weight.ndim == 2 else input @ weight
    return out if bias is None else out + bias


def _contiguous3(x, w, b):
    M = _E.meta
    for t in (x, w, b):
        m = M[t._i]
        nd = m[_NDIM]
        if m[_STRIDE + nd - 1] != 1 or (nd == 2 and m[_STRIDE] != m[_SHAPE + 1]
                                        and m[_SHAPE] != 1):
            return False
    return True


_LINEAR = BY_NAME["linear"]
_NDIM, _SHAPE, _STRIDE = L.M_NDIM, L.M_SHAPE, L.M_STRIDE


def _legacy_reduction(reduction, size_average, reduce, stacklevel=4):
    """The reduction a loss applies. PyTorch's deprecated size_average and reduce, when
    either is given, decide it instead of reduction (None counting as True): reduce=False
    means 'none', else size_average=False means 'sum', else 'mean'; with PyTorch's warning
    (stacklevel 4: the caller of a loss function that calls _reduction, or of a loss
    module's constructor)."""
    if size_average is None and reduce is None:
        return reduction
    reduce = True if reduce is None else reduce
    size_average = True if size_average is None else size_average
    reduction = "none" if not reduce else "mean" if size_average else "sum"
    warnings.warn("size_average and reduce args will be deprecated, please use "
                  f"reduction='{reduction}' instead.", UserWarning, stacklevel=stacklevel)
    return reduction


def _reduction(reduction, size_average=None, reduce=None):
    """The kernels' code (0 none, 1 mean, 2 sum) of a loss's reduction, legacy arguments
    included; an unknown name is PyTorch's ValueError."""
    reduction = _legacy_reduction(reduction, size_average, reduce)
    if reduction == "elementwise_mean":         # (PyTorch's deprecated spelling of 'mean')
        warnings.warn("reduction='elementwise_mean' is deprecated. Please use "
                      "reduction='mean' instead.", UserWarning, stacklevel=3)
        return 1
    code = _REDUCTIONS.get(reduction) if isinstance(reduction, str) else None
    if code is None:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return code


def _check(x, name, fn):
    if not isinstance(x, Tensor):
        raise TypeError(f"{fn}(): argument '{name}' (position 1) must be Tensor, not "
                        f"{type(x).__name__}")


def _pair(input, target, fn, strict=False):
    """Input and target in one float dtype and one shape (PyTorch warns and broadcasts
    when shapes differ; the binary cross entropies refuse)."""
    _check(input, "input", fn)
    _check(target, "target", fn)
    if input.shape != target.shape:
        if strict:
            raise ValueError(f"Using a target size ({_size(target)}) that is different to the "
                             f"input size ({_size(input)}) is deprecated. Please ensure they "
                             "have the same size.")
        warnings.warn(f"Using a target size ({_size(target)}) that is different to the input "
                      f"size ({_size(input)}). This will likely lead to incorrect results due "
                      "to broadcasting. Please ensure they have the same size.", UserWarning,
                      stacklevel=3)
        from ..._front.promotion import _broadcast_check
        _broadcast_check(input, target)
        shape = np.broadcast_shapes(tuple(input.shape), tuple(target.shape))
        input, target = input.expand(shape), target.expand(shape)
    rt = _result_type(input, target)
    if not rt.is_floating_point:
        rt = D.default_float()
    return _to(input, rt), _to(target, rt)


def _size(t):
    return f"tapegrad.Size({list(t.shape)})"


def _pointwise(opname, kind, input, target, red, s=0.0, weight=None, strict=False):
    x, y = _pair(input, target, opname, strict)
    w = -1
    if weight is not None:
        weight = _broadcast_weight(weight, x, opname, "weight")
        w = weight._i
    op = BY_NAME[opname]
    return _wrap(_run(op, x._i, y._i, s=s, c=w, iargs=op.pack(reduction=red, kind=kind)))


def _broadcast_weight(weight, x, opname, what):
    """weight (no gradient) in x's dtype and shape, with PyTorch's messages."""
    from ..._front.promotion import _broadcast_check
    _check(weight, what, opname)
    weight = _to(weight, x.dtype).detach()
    try:
        np.broadcast_shapes(tuple(weight.shape), tuple(x.shape))
    except ValueError:
        if opname == "binary_cross_entropy":
            raise RuntimeError(f"Attempting to broadcast a dimension of length "
                               f"{weight.shape[-1]} at -1! Mismatching argument at index 1 had "
                               f"{_size(weight)}; but expected shape should be broadcastable "
                               f"to {list(x.shape)}") from None
        if what == "pos_weight":
            _broadcast_check(weight, x)
        _broadcast_check(x, weight)
    return weight.expand(x.shape)


def _weighted(loss, input, weight, red, weighted_mean, fn):
    """weight * the unreduced loss, reduced as PyTorch's regression losses do: 'mean'
    divides by the sum of the weights (mse, l1) or by the element count (huber). The
    weight is an ordinary operand: a gradient reaches it."""
    _check(weight, "weight", fn)
    if weight.shape != input.shape:
        raise ValueError("Weights and input must have the same size.")
    loss = loss * weight
    if red == 1 and weighted_mean:
        return loss.sum() / weight.sum()
    return _reduce(loss, red)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """Mean squared error between input and target (reduction= as PyTorch)."""
    red = _reduction(reduction, size_average, reduce)
    if weight is not None:      # (the fused kernel has no weight: composed, as PyTorch)
        return _weighted(_pointwise("mse_loss", MSE, input, target, 0), input, weight, red,
                         True, "mse_loss")
    return _pointwise("mse_loss", MSE, input, target, red)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """Mean absolute error between input and target (reduction= as PyTorch)."""
    red = _reduction(reduction, size_average, reduce)
    x, y = _pair(input, target, "l1_loss")
    d = (x - y).abs()
    if weight is not None:
        return _weighted(d, input, weight, red, True, "l1_loss")
    return _reduce(d, red)


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """Squared error below delta, delta-scaled absolute error above it."""
    red = _reduction(reduction)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    if weight is not None:
        return _weighted(_pointwise("huber_loss", HUBER, input, target, 0, float(delta)),
                         input, weight, red, False, "huber_loss")
    return _pointwise("huber_loss", HUBER, input, target, red, float(delta))


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """Squared error / beta below beta, absolute error above it."""
    red = _reduction(reduction, size_average, reduce)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    if beta == 0:                   # PyTorch computes l1_loss then
        return l1_loss(input, target, reduction=_REDUCTION_NAMES[red])
    return _pointwise("smooth_l1_loss", SMOOTH_L1, input, target, red, float(beta))


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """Binary cross entropy between probabilities (input) and targets."""
    red = _reduction(reduction, size_average, reduce)
    return _pointwise("binary_cross_entropy", BCE, input, target, red, weight=weight,
                      strict=True)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None,
                                     reduce=None, reduction="mean", pos_weight=None):
    """Binary cross entropy on logits, computed stably; pos_weight as in PyTorch."""
    red = _reduction(reduction, size_average, reduce)
    _check(input, "input", "binary_cross_entropy_with_logits")
    _check(target, "target", "binary_cross_entropy_with_logits")
    if input.shape != target.shape:
        raise ValueError(f"Target size ({_size(target)}) must be the same as input size "
                         f"({_size(input)})")
    name = "binary_cross_entropy_with_logits"
    if pos_weight is None:
        return _pointwise(name, BCE_LOGITS, input, target, red, weight=weight)
    pw = _broadcast_weight(pos_weight, input, name, "pos_weight")
    if weight is None:
        return _pointwise(name, BCE_LOGITS_POS, input, target, red, weight=pw)
    from ..._front.indexing import stack
    both = stack([_broadcast_weight(weight, input, name, "weight"), pw]).contiguous()
    x, y = _pair(input, target, name)
    op = BY_NAME[name]
    return _wrap(_run(op, x._i, y._i, c=both._i,
                      iargs=op.pack(reduction=red, kind=BCE_LOGITS_BOTH)))


def _class_layout(input, target, fn):
    """N, C, D of an (N, C, d1, ...) or (C,) input, checking the target's shape."""
    shape, tshape = input.shape, target.shape
    if not shape:
        raise ValueError("Expected 1 or more dimensions (got 0)")
    if len(shape) == 1:
        if tshape:
            raise RuntimeError(f"{fn}: a 1-D input (one sample of {shape[0]} classes) needs a "
                               f"0-D target, got shape {list(tshape)}")
        return 1, shape[0], 1, []
    n, c = shape[0], shape[1]
    if not tshape or tshape[0] != n:
        raise ValueError(f"Expected input batch_size ({n}) to match target batch_size "
                         f"({tshape[0] if tshape else 0}).")
    if len(shape) == 2:
        if len(tshape) != 1:
            raise RuntimeError(f"size mismatch (got input: {list(shape)}, target: "
                               f"{list(tshape)})")
        return n, c, 1, [n]
    if tshape != (n,) + shape[2:]:
        raise RuntimeError(f"size mismatch (got input: {list(shape)}, target: {list(tshape)})")
    d = 1
    for s in shape[2:]:
        d *= s
    return n, c, d, [n] + list(shape[2:])


_PLAIN_CE = BY_NAME["cross_entropy_plain"].opcode
# the plain cross entropy row's integer attributes (its OpDef's attrs), for the fast path
_RED, _KIND, _IGNORE, _ROWS, _CLASSES, _INNER, _WEIGHTED = (
    BY_NAME["cross_entropy_plain"].slot(a) for a in ("reduction", "kind", "ignore_index", "rows",
                                                     "classes", "inner", "weighted"))
_MW, _MN, _MDT, _MS, _MST = L.MW, L.M_NDIM, L.M_DTYPE, L.M_SHAPE, L.M_STRIDE
_F64, _I64 = L.F64, L.I64


def _plain_cross_entropy(x, t, ignore_index, red):
    """A training step's call (contiguous N x C float logits x, contiguous int64 targets t
    of N, a reduced loss) in one engine call, reading the layout from the meta table:
    the id of the loss, or -1 when any of that does not hold or the engine asks for
    anything (the general path then does it all again: a failed op changes nothing).
    The kernel checks the targets' range."""
    mv = _E.meta_mv
    b, bt = x * _MW, t * _MW
    if mv[b + _MN] != 2 or mv[bt + _MN] != 1 or mv[b + _MDT] > _F64 or mv[bt + _MDT] != _I64:
        return -1
    n, c = mv[b + _MS], mv[b + _MS + 1]
    if (mv[bt + _MS] != n or mv[b + _MST + 1] != 1 or mv[b + _MST] != c
            or mv[bt + _MST] != 1 or n == 0):
        return -1
    with _E.lock:
        ia = _E.iargs_mv
        ia[_RED] = red
        ia[_KIND] = 1                   # (cross entropy)
        ia[_IGNORE] = ignore_index
        ia[_ROWS] = n
        ia[_CLASSES] = c
        ia[_INNER] = 1
        ia[_WEIGHTED] = 0
        ia[_FV] = 0
        return _E.op(_E.caddr, _PLAIN_CE, x, t, 0.0, GRAD_MODE.on)


def _class_loss(opname, kind, input, target, weight, ignore_index, red, smoothing):
    fn = "cross_entropy" if kind else "nll_loss"
    _check(input, "input", fn)
    if not isinstance(target, Tensor) or target.dtype is not D.int64:
        raise RuntimeError(f"{fn}: expected target of dtype int64 (class indices), got "
                           f"{getattr(target, 'dtype', type(target).__name__)}")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"{fn}: expected a floating point input, got {input.dtype}")
    n, c, d, out_shape = _class_layout(input, target, fn)
    w = -1
    if weight is not None:
        if not isinstance(weight, Tensor) or weight.ndim != 1 or weight.shape[0] != c:
            raise RuntimeError(f"weight tensor should be defined either for all {c} classes or "
                               "no classes but got weight tensor of shape: "
                               f"{list(getattr(weight, 'shape', []))}")
        weight = _to(weight, input.dtype).contiguous()
        w = weight._i
    x = input.contiguous()
    tt = target.contiguous()            # the kernel reads the targets as one flat run
    if input.ndim == 4:
        opname += "2d"
    elif kind == 1 and w < 0 and smoothing == 0.0 and d == 1 and red != 0:
        opname = "cross_entropy_plain"
    op = BY_NAME[opname]
    return _wrap(_run(op, x._i, tt._i, s=float(smoothing), c=w,
                      iargs=op.pack(reduction=red, kind=kind, ignore_index=ignore_index, rows=n,
                                    classes=c, inner=d, weighted=w >= 0),
                      fargs=[len(out_shape)] + out_shape if red == 0 else [0]))


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """Negative log likelihood of class indices, given log-probabilities."""
    red = _reduction(reduction, size_average, reduce)
    return _class_loss("nll_loss", 0, input, target, weight, ignore_index, red, 0.0)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    """log_softmax then nll_loss on class indices, or cross entropy against class
    probabilities; label_smoothing as in PyTorch."""
    if (weight is None and label_smoothing == 0.0 and size_average is None and reduce is None
            and ignore_index.__class__ is int and input.__class__ is Tensor
            and target.__class__ is Tensor):
        red = 1 if reduction == "mean" else 2 if reduction == "sum" else 0
        if red:
            r = _plain_cross_entropy(input._i, target._i, ignore_index, red)
            if r >= 0:
                return _wrap(r)
    red = _reduction(reduction, size_average, reduce)
    _check(input, "input", "cross_entropy")
    if weight is not None:
        _check(weight, "weight", "cross_entropy")
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    if isinstance(target, Tensor) and target.dtype.is_floating_point:
        return _cross_entropy_probs(input, target, weight, red, label_smoothing)
    return _class_loss("cross_entropy", 1, input, target, weight, ignore_index, red,
                       label_smoothing)


def _cross_entropy_probs(input, target, weight, red, eps):
    """Class probabilities as targets: composed, as PyTorch does."""
    if input.shape != target.shape:
        raise RuntimeError(f"cross_entropy: expected target of the input's shape "
                           f"{list(input.shape)} for class probabilities, got "
                           f"{list(target.shape)}")
    cdim = 0 if input.ndim == 1 else 1
    c = input.shape[cdim]
    logp = log_softmax(input, cdim)
    target = _to(target, logp.dtype)
    if eps > 0:
        target = target * (1 - eps) + eps / c
    prod = logp * target
    if weight is not None:
        shape = [1] * input.ndim
        shape[cdim] = c
        prod = prod * _to(weight, logp.dtype).reshape(shape)
    if red == 0:
        return -prod.sum(cdim)
    if red == 2:
        return -prod.sum()
    return -prod.sum() / (input.numel() / c)


def one_hot(tensor, num_classes=-1):
    """int64 one-hot encoding of an int64 tensor, with a new last dim of num_classes
    (inferred when -1)."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"one_hot(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(tensor).__name__}")
    if not isinstance(num_classes, (int, np.integer)) or isinstance(num_classes, bool):
        raise TypeError(f"one_hot(): argument 'num_classes' (position 2) must be int, not "
                        f"{type(num_classes).__name__}")
    if tensor.dtype is not D.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    a = _numpy_view(tensor)
    if num_classes < 0:
        num_classes = int(a.max()) + 1 if a.size else 0
    if a.size and (a.min() < 0 or a.max() >= num_classes):
        raise RuntimeError("Class values must be smaller than num_classes.")
    return _from_array(np.eye(num_classes, dtype=np.int64)[a])


del L


# ---------------------------------------------------------------- layers' functions
def dropout(input, p=0.5, training=True, inplace=False):
    """Zeroes elements with probability p, scales the rest by 1 / (1 - p); the identity
    when not training. As PyTorch's CPU dropout: a mask of bernoulli_(1 - p) draws from
    the default generator, divided by 1 - p, times input (p = 1 multiplies by zero and
    draws nothing); a compiled replay draws the same numbers."""
    _check(input, "input", "dropout")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0 or input.numel() == 0:
        return input
    if p == 1.0:
        return input.mul_(0.0) if inplace else input * 0.0
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"result type Float can't be cast to the desired output type "
                           f"{_type_name(input.dtype)}")
    mask = _sampling.dropout_mask(input.shape, input.dtype, p, like=input)
    return input.mul_(mask) if inplace else input * mask


def _embedding_options(max_norm, scale_grad_by_freq, sparse):
    """PyTorch's embedding options tapegrad does not implement: refused when set, not
    ignored (each changes the values or the gradient)."""
    for given, what in ((max_norm is not None, "max_norm (renormalizing the rows used)"),
                        (scale_grad_by_freq, "scale_grad_by_freq=True"),
                        (sparse, "sparse=True (sparse gradients)")):
        if given:
            raise NotImplementedError(f"embedding: {what} is not supported by tapegrad")


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """Rows of weight; norm_type only matters with max_norm (refused, as sparse and
    scale_grad_by_freq are)."""
    _embedding_options(max_norm, scale_grad_by_freq, sparse)
    _check(weight, "weight", "embedding")
    if not isinstance(input, Tensor) or input.dtype is not D.int64:
        raise RuntimeError("Expected tensor for argument #1 'indices' to have one of the "
                           "following scalar types: Long; but got "
                           f"{getattr(input, 'dtype', type(input).__name__)} instead")
    rows = weight[input]
    if padding_idx is not None:     # the padding row's value, but never a gradient
        pad = (input == padding_idx).unsqueeze(-1)
        rows = rows.detach().where(pad, rows) if rows.requires_grad else rows
    return rows


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalise over the last dims (normalized_shape), then scale and shift by weight and
    bias if given."""
    _check(input, "input", "layer_norm")
    ns = tuple(normalized_shape) if not isinstance(normalized_shape, int) else (normalized_shape,)
    d = len(ns)
    if tuple(input.shape[input.ndim - d:]) != ns or input.ndim < d:
        raise RuntimeError(f"Given normalized_shape={list(ns)}, expected input with shape "
                           f"[*, {', '.join(map(str, ns))}], but got input of size"
                           f"{list(input.shape)}")
    if input.dtype.is_floating_point and all(t is None or (isinstance(t, Tensor) and t.dtype
                                                           is input.dtype) for t in (weight, bias)):
        for t, what in ((weight, "weight"), (bias, "bias")):
            if t is not None and tuple(t.shape) != ns:
                raise RuntimeError(f"Expected {what} to be of same shape as normalized_shape, "
                                   f"but got {what} of shape {list(t.shape)} and "
                                   f"normalized_shape = {list(ns)}")
        D = 1
        for k in ns:
            D *= k
        wc = None if weight is None else weight.contiguous()      # (held until the op ran)
        bc = None if bias is None else bias.contiguous()
        op = BY_NAME["layer_norm"]
        return _wrap(_run(op, input._i, -1 if wc is None else wc._i, s=float(eps),
                          c=-1 if bc is None else bc._i,
                          iargs=op.pack(rows=input.numel() // D if D else 0, width=D)))
    x = input.reshape(*input.shape[:input.ndim - d], -1) if d != 1 else input
    xc = x - x.mean(-1, keepdim=True)
    y = xc / ((xc * xc).mean(-1, keepdim=True) + eps).sqrt()
    if d != 1:
        y = y.reshape(input.shape)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


# ---------------------------------------------------------------- more activations
# Composed from tapegrad's ops (so gradients, and compiled replays, follow), each in the
# order PyTorch's kernel computes it so values agree to the last bit or so, and with
# PyTorch's gradient at the kinks (noted where the composition had to be chosen for it).
def _in_place(input, fn, inplace):
    """fn(input), or, with inplace=True, fn of a copy written back into input (fn's own
    backward needs the old values, which the write would stale)."""
    if not inplace:
        return fn(input)
    return input.copy_(fn(input.clone()))


def mish(input, inplace=False):
    """x * tanh(softplus(x))."""
    _float_only(input, "mish", "mish_cpu")
    return _in_place(input, lambda x: x * softplus(x).tanh(), inplace)


def hardswish(input, inplace=False):
    """x * relu6(x + 3) / 6; the gradient is x / 3 + 1 / 2 strictly inside (-3, 3), 0 at
    -3 and below, 1 at 3 and above, as PyTorch's."""
    _float_only(input, "hardswish", "hardswish_cpu")
    return _in_place(input, lambda x: x * hardtanh(x + 3.0, 0.0, 6.0) / 6.0, inplace)


def hardsigmoid(input, inplace=False):
    """relu6(x + 3) / 6; the gradient is 1 / 6 strictly inside (-3, 3), else 0."""
    _float_only(input, "hardsigmoid", "hardsigmoid_cpu")
    return _in_place(input, lambda x: hardtanh(x + 3.0, 0.0, 6.0) / 6.0, inplace)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input, inplace=False):
    """scale * x for x > 0, scale * alpha * (exp(x) - 1) otherwise (PyTorch's constants)."""
    _float_only(input, "selu", "elu_cpu")
    return _in_place(input, lambda x: (x * _SELU_SCALE).where(
        x > 0, elu(x, _SELU_ALPHA * _SELU_SCALE)), inplace)  # noqa: F821  (from the op table)


def celu(input, alpha=1.0, inplace=False):
    """x for x > 0, alpha * (exp(x / alpha) - 1) otherwise."""
    _float_only(input, "celu", "elu_cpu")
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")
    inv, alpha = 1.0 / alpha, float(alpha)
    # (x clamped to <= 0 first: the branch where() drops stays finite, so its zero gradient
    # stays zero, whatever alpha's sign)
    return _in_place(input, lambda x: x.where(x > 0, (x.clamp_max(0.0) * inv).expm1() * alpha),
                     inplace)


def glu(input, dim=-1):
    """a * sigmoid(b), a and b the two halves of input along dim."""
    from ..._front.tensor import _dim
    _check(input, "input", "glu")
    if input.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    d = _dim(dim, input.ndim, "glu")
    _float_only(input, "glu", "glu_cpu")
    n = input.shape[d]
    if n % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {d} is size {n}")
    return input.narrow(d, 0, n // 2) * input.narrow(d, n // 2, n // 2).sigmoid()


def threshold(input, threshold, value, inplace=False):
    """value where input <= threshold, else input (NaN stays NaN); no gradient where
    replaced. On an integer tensor threshold and value are truncated to ints, as PyTorch
    converts them to the tensor's type."""
    _check(input, "input", "threshold")
    if not input.dtype.is_floating_point:
        threshold, value = int(threshold), int(value)
        if inplace:
            return input.masked_fill_(input <= threshold, value)
    else:
        threshold, value = float(threshold), float(value)
    return _in_place(input, lambda x: _where_scalar(x <= threshold, value, x), inplace)


def _where_scalar(cond, value, x):
    """value where cond, else x (in x's dtype): one where row."""
    from ..._front.indexing import where
    return where(cond, _scalar(value, x.dtype), x)


def _scalar(value, dtype):
    """A 0-d tensor holding a Python value; a compiled replay keeps it as a constant
    (where() would make it anew each call, which a replay cannot repeat)."""
    from ..._front.indexing import _constant
    from ..._front.creation import tensor
    return _constant(lambda: tensor(value, dtype=dtype))


def _lambd(input, lambd, fn, kernel):
    _float_only(input, fn, kernel)
    return float(lambd)


def softshrink(input, lambd=0.5):
    """x - lambd above lambd, x + lambd below -lambd, 0 between (gradient 0 at +-lambd)."""
    lambd = _lambd(input, lambd, "softshrink", "softshrink_check")
    if lambd < 0:
        big = np.finfo(input.dtype.np).max
        raise RuntimeError(f"lambda must be in range [0, {big:g}] for input dtype "
                           f"{_type_name(input.dtype)}, but found {lambd:g}")
    return input - input.clamp(-lambd, lambd)


def tanhshrink(input):
    """x - tanh(x), elementwise."""
    _check(input, "input", "tanhshrink")
    return input - input.tanh()


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    """softmax(-input, dim)."""
    _check(input, "input", "softmin")
    return softmax(-input, _implicit_dim(input, dim, "softmin", _stacklevel), dtype=dtype)


def prelu(input, weight):
    """x where x > 0, weight * x elsewhere; weight holds one slope, or one per channel
    (dim 1 of input; a 1-D input has one channel)."""
    _float_only(input, "prelu", "prelu_cpu")
    _check(weight, "weight", "prelu")
    if weight.ndim > 1:
        raise RuntimeError(f"prelu: Expected `weight` to be a scalar or 1D tensor, but got: "
                           f"ndim = {weight.ndim}")
    if weight.dtype is not input.dtype:
        raise RuntimeError(f"prelu: Type promoting not supported. Got "
                           f"{_type_name(input.dtype)} and {_type_name(weight.dtype)}")
    n = weight.numel()
    if n == 1:
        w = weight.reshape(())
    else:
        channels = input.shape[1] if input.ndim >= 2 else 1
        if n != channels:
            raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found "
                               f"parameter numbers = {n} and channel size = {channels}.")
        w = weight.reshape([1, n] + [1] * (input.ndim - 2))
    return input.where(input > 0, w * input)


# ---------------------------------------------------------------- normalization
def rms_norm(input, normalized_shape, weight=None, eps=None):
    """x / sqrt(mean(x ** 2) + eps) over the trailing normalized_shape dims, times weight;
    eps defaults to the machine epsilon of input's dtype, as PyTorch's."""
    _float_only(input, "rms_norm", "rms_norm")
    ns = (normalized_shape,) if isinstance(normalized_shape, numbers.Integral) \
        else tuple(normalized_shape)
    d = len(ns)
    if d == 0:
        raise RuntimeError("Expected normalized_shape to be at least 1-dimensional, i.e., "
                           "containing at least one element, but got normalized_shape = []")
    if input.ndim < d or tuple(input.shape[input.ndim - d:]) != ns:
        raise RuntimeError(f"Given normalized_shape={list(ns)}, expected input with shape "
                           f"[*{', '.join(map(str, ns))}], but got input of size"
                           f"{list(input.shape)}")
    if weight is not None and tuple(weight.shape) != ns:
        raise RuntimeError(f"Expected weight to be of same shape as normalized_shape, but got "
                           f"weight of shape {list(weight.shape)} and normalized_shape = "
                           f"{list(ns)}")
    if eps is None:
        eps = float(np.finfo(input.dtype.np).eps)
    dims = tuple(range(input.ndim - d, input.ndim))
    y = input * (input.pow(2).mean(dims, keepdim=True) + eps).rsqrt()
    return y if weight is None else y * weight


# ---------------------------------------------------------------- distances and losses
def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """norm_p(x1 - x2 + eps) along the last dim (of the broadcast shape)."""
    _check(x1, "x1", "pairwise_distance")
    _check(x2, "x2", "pairwise_distance")
    return (x1 - x2 + eps).norm(p, max(x1.ndim, x2.ndim) - 1, keepdim)


def _reduce(loss, red):
    return loss if red == 0 else (loss.mean() if red == 1 else loss.sum())


def cosine_embedding_loss(input1, input2, target, margin=0, size_average=None, reduce=None,
                          reduction="mean"):
    """1 - cos(x1, x2) where target is 1, max(0, cos(x1, x2) - margin) where it is -1 (0
    for other targets), cos over dim 1 of (N, D) inputs and an (N,) target, or of (D,)
    inputs and a 0-d target; PyTorch's composition (norms squared plus 1e-12)."""
    red = _reduction(reduction, size_average, reduce)
    for t, name in ((input1, "input1"), (input2, "input2"), (target, "target")):
        _check(t, name, "cosine_embedding_loss")
    td = target.ndim
    if td not in (0, 1):
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    if (input1.ndim, input2.ndim) != ((2, 2) if td else (1, 1)):
        raise RuntimeError(f"{td}D target tensor expects {td + 1}D input tensors, but found "
                           f"inputs with sizes {list(input1.shape)} and {list(input2.shape)}.")
    eps = 1e-12
    prod_sum = (input1 * input2).sum(td)
    mag1 = (input1 * input1).sum(td) + eps
    mag2 = (input2 * input2).sum(td) + eps
    cos = prod_sum / (mag1 * mag2).sqrt()
    zero = _scalar(0.0, cos.dtype)
    pos = (1 - cos).where(target == 1, zero)
    neg = (cos - margin).clamp_min(0).where(target == -1, zero)
    return _reduce(pos + neg, red)


def margin_ranking_loss(input1, input2, target, margin=0, size_average=None, reduce=None,
                        reduction="mean"):
    """max(0, -target * (input1 - input2) + margin)."""
    red = _reduction(reduction, size_average, reduce)
    for t, name in ((input1, "input1"), (input2, "input2"), (target, "target")):
        _check(t, name, "margin_ranking_loss")
    if input1.ndim != input2.ndim or input1.ndim != target.ndim:
        raise RuntimeError(f"margin_ranking_loss : All input tensors should have same dimension "
                           f"but got sizes: input1: {_size(input1)}, input2: {_size(input2)}, "
                           f"target: {_size(target)} ")
    return _reduce((-target * (input1 - input2) + margin).clamp_min(0), red)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """log(1 + exp(-target * input)); the loss has input's shape and dtype (target
    broadcasts to it), as PyTorch's out= kernel."""
    from ..._front.promotion import _broadcast_check
    red = _reduction(reduction, size_average, reduce)
    _check(input, "input", "soft_margin_loss")
    _check(target, "target", "soft_margin_loss")
    _broadcast_check(input, target)
    shape = np.broadcast_shapes(tuple(input.shape), tuple(target.shape))
    if shape != tuple(input.shape):
        raise RuntimeError(f"output with shape {list(input.shape)} doesn't match the broadcast "
                           f"shape {list(shape)}")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"result type Float can't be cast to the desired output type "
                           f"{_type_name(input.dtype)}")
    from ...autograd import is_grad_enabled
    if target.requires_grad and is_grad_enabled():
        raise RuntimeError("The function 'soft_margin_loss' is not differentiable with respect "
                           "to argument 'target'. This input cannot have requires_grad True.")
    loss = ((-input) * target).exp().log1p()
    return _reduce(_to(loss, input.dtype), red)


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """0.5 * (log(max(var, eps)) + (input - target) ** 2 / max(var, eps)) (+ 0.5 * log(2 pi)
    with full=True); var has input's shape, or one dim less, or a single mismatched dim of
    size 1 (homoscedastic). As in PyTorch, var is clamped out of autograd's sight, and a
    negative entry is refused (a check on values: a compiled replay skips it)."""
    import math
    from ..._engine.state import RECORDING
    _check(input, "input", "gaussian_nll_loss")
    _check(target, "target", "gaussian_nll_loss")
    if isinstance(var, numbers.Real) and not isinstance(var, bool):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        var = _scalar(float(var), input.dtype).expand(input.shape)
    elif not isinstance(var, Tensor):
        raise TypeError(f"gaussian_nll_loss(): argument 'var' must be Tensor or float, not "
                        f"{type(var).__name__}")
    elif RECORDING[0] is None and bool((var < 0).any()):
        raise ValueError("var has negative entry/entries")
    if var.shape != input.shape:
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = var.unsqueeze(-1)
        elif not (input.ndim == var.ndim and sum(
                y for x, y in zip(input.shape, var.shape) if x != y) == 1):
            raise ValueError("var is of incorrect size")
    if reduction not in _REDUCTIONS:
        raise ValueError(reduction + " is not valid")
    from ...autograd import no_grad
    var = var.clone()
    with no_grad():
        var.clamp_(min=eps)
    loss = 0.5 * (var.log() + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, _REDUCTIONS[reduction])


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8,
                     reduce=None, reduction="mean"):
    """exp(input) - target * input (log_input=True), or input - target * log(input + eps);
    full=True adds Stirling's term target * log(target) - target + 0.5 * log(2 pi target)
    where target > 1."""
    import math
    red = _reduction(reduction, size_average, reduce)
    _check(input, "input", "poisson_nll_loss")
    _check(target, "target", "poisson_nll_loss")
    if log_input:
        loss = input.exp() - target * input
    else:
        loss = input - target * (input + eps).log()
    if full:
        stirling = target * target.log() - target + 0.5 * (2 * math.pi * target).log()
        loss = loss + _where_scalar(target <= 1, 0.0, stirling)
    return _reduce(loss, red)



_methods.install_functional(globals())      # the functions the op table declares (silu, ...)
