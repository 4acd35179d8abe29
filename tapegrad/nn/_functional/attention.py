"""nn.functional: attention. scaled_dot_product_attention and multi_head_attention_forward,
PyTorch's signatures, checks and messages, composed from table ops in the order PyTorch's
CPU code computes them, so values agree to rounding and dropout draws PyTorch's numbers.

scaled_dot_product_attention follows PyTorch's math backend (q and k each scaled by
sqrt(scale), q @ k^T, + mask, a softmax whose fully masked rows are 0, dropout, @ v); PyTorch
runs its flash kernel instead where that kernel applies (4-D inputs, no dropout, ...), which
computes the same values to rounding. Where the two backends differ in what they accept
(is_causal with an explicit mask; a negative dropout_p), the backend PyTorch would pick
decides, as in PyTorch.
"""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import math
import numbers
import warnings

from ..._front import dtype as D
from ..._front.tensor import Tensor, not_tensor as _not_tensor, type_label as _type_label
from ..._front.tensor import run as _run, _wrap
from ...ops.registry import BY_NAME
from ..._front.indexing import _constant, where as _where
from ..._front.creation import tensor as _tensor, zeros as _zeros
from ..._front.indexing import cat as _cat
from .basic import dropout as _dropout, linear as _linear
from .pooling import pad as _pad

__all__ = ["scaled_dot_product_attention", "multi_head_attention_forward"]

_C_NAMES = {D.float32: "float", D.float64: "double", D.int64: "long int", D.bool_: "bool"}
_T_NAMES = {D.float32: "Float", D.float64: "Double", D.int64: "Long", D.bool_: "Bool"}


def _num(p):
    """A C++ double as PyTorch's messages print it (3, 1.5, 0.1)."""
    return "%g" % p


def _scalar_const(value, dtype):
    """A 0-d constant (a compiled step holds it rather than logging a birth)."""
    return _constant(lambda: _tensor(value, dtype=dtype))


def _bool_to_additive(mask, dtype, masked_when):
    """A bool mask as the additive float mask PyTorch builds from it: -inf where the mask
    is masked_when, 0 elsewhere (recorded as a where, so a compiled step re-reads it)."""
    neg = _scalar_const(float("-inf"), dtype)
    zero = _scalar_const(0.0, dtype)
    return _where(mask, neg, zero) if masked_when else _where(mask, zero, neg)


def _broadcast_into(out_shape, shape):
    """PyTorch's in-place add check: shape must broadcast into out_shape unchanged."""
    no, ns = len(out_shape), len(shape)
    nd = max(no, ns)
    full = []
    for d in range(nd):
        x = out_shape[d - (nd - no)] if d - (nd - no) >= 0 else 1
        y = shape[d - (nd - ns)] if d - (nd - ns) >= 0 else 1
        if x != y and x != 1 and y != 1:
            raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b "
                               f"({y}) at non-singleton dimension {d}")
        full.append(x if y == 1 else y)
    if tuple(full) != tuple(out_shape):
        raise RuntimeError(f"output with shape {list(out_shape)} doesn't match the broadcast "
                           f"shape {full}")


def _batch_broadcast(a, b):
    """Broadcast batch shapes (matmul's message on a mismatch)."""
    na, nb = len(a), len(b)
    nd = max(na, nb)
    out = []
    for d in range(nd):
        x = a[d - (nd - na)] if d - (nd - na) >= 0 else 1
        y = b[d - (nd - nb)] if d - (nd - nb) >= 0 else 1
        if x != y and x != 1 and y != 1:
            raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b "
                               f"({y}) at non-singleton dimension {d}")
        out.append(x if y == 1 else y)
    return out


def _bmm_check(a_batch, k1, k2):
    if k1 != k2:
        n = 1
        for x in a_batch:
            n *= x
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                           f"[{n}, {k1}] but got: [{n}, {k2}].")


def _flash_applies(q, k, v, mask, dropout_p, enable_gqa):
    """Whether PyTorch's CPU backend choice is its flash kernel (sdp_utils_cpp.cpp)."""
    if dropout_p > 0.0 or q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        return False
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        return False
    hq, hk, hv = q.shape[1], k.shape[1], v.shape[1]
    if not (hq == hk == hv):
        if not enable_gqa or hk != hv or hq % hk:
            return False
    if mask is not None:
        if mask.requires_grad:
            return False
        if mask.ndim == 0:              # (PyTorch's check reads mask.size(-2))
            raise IndexError("Dimension specified as -2 but tensor has no dimensions")
        if mask.ndim == 1:
            raise IndexError("Dimension out of range (expected to be in range of [-1, 0], but "
                             "got -2)")
        if mask.shape[-2] not in (q.shape[2], 1) or mask.shape[-1] not in (k.shape[2], 1):
            return False
        if mask.ndim == 4:
            if mask.shape[0] not in (1, q.shape[0]) or mask.shape[1] not in (1, hq):
                return False
        elif mask.ndim != 2:
            return False
    if not (q.shape[3] == k.shape[3] == v.shape[3]):
        return False
    if q.shape[2] == 0 or k.shape[2] == 0:
        return False
    return all(t.stride(-1) == 1 for t in (q, k, v))


def _check_bool(value, name, fn):
    if not isinstance(value, bool):
        raise TypeError(f"{fn}(): argument '{name}' must be bool, not {_type_label(value)}")


def _check_float(value, name, fn):
    if isinstance(value, Tensor) and value.ndim == 0 and value.dtype.is_floating_point:
        return float(value.item())
    if not isinstance(value, numbers.Real):
        raise TypeError(f"{fn}(): argument '{name}' must be float, not {_type_label(value)}")
    return float(value)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, *, scale=None, enable_gqa=False):
    """softmax(query @ key^T * scale + mask) @ value over the last two dims (batch dims
    broadcast), with dropout on the attention weights when dropout_p > 0 (always applied:
    pass 0.0 when not training). attn_mask: bool (True takes part) or float (added);
    is_causal: the top-left aligned lower-triangular mask; scale defaults to
    1 / sqrt(query.size(-1)); enable_gqa repeats key/value heads (dim -3) to query's.
    Fully masked rows give 0, as PyTorch's CPU kernels do."""
    fn = "scaled_dot_product_attention"
    for pos, (t, name) in enumerate(((query, "query"), (key, "key"), (value, "value"))):
        if not isinstance(t, Tensor):
            raise _not_tensor(fn, t, name, pos + 1)
    if attn_mask is not None and not isinstance(attn_mask, Tensor):
        raise _not_tensor(fn, attn_mask, "attn_mask", None)
    dropout_p = _check_float(dropout_p, "dropout_p", fn)
    _check_bool(is_causal, "is_causal", fn)
    if scale is not None:
        scale = _check_float(scale, "scale", fn)
    _check_bool(enable_gqa, "enable_gqa", fn)
    dt = query.dtype
    if not (dt is key.dtype is value.dtype):
        raise RuntimeError(f"Expected query, key, and value to have the same dtype, but got "
                           f"query.dtype: {_C_NAMES[dt]} key.dtype: {_C_NAMES[key.dtype]} and "
                           f"value.dtype: {_C_NAMES[value.dtype]} instead.")
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        raise RuntimeError(f"Expected query, key, and value to all be  at least 2 dimensional, "
                           f"but got query.dim: {query.ndim} key.dim: {key.ndim} and value.dim: "
                           f"{value.ndim} instead.")
    if attn_mask is not None:
        md = attn_mask.dtype
        if not (md is D.bool_ or md is D.float32 or md is dt):
            raise RuntimeError(f"Expected attn_mask dtype to be bool or float or to match query "
                               f"dtype, but got attn_mask.dtype: {_C_NAMES[md]} and  query.dtype: "
                               f"{_C_NAMES[dt]} instead.")
    if not dt.is_floating_point:
        raise RuntimeError(f"expected scalar type Float but found {_T_NAMES[dt]}")
    flash = _flash_applies(query, key, value, attn_mask, dropout_p, enable_gqa)
    if flash and dropout_p != 0.0:
        raise RuntimeError("scaled_dot_product_attention_flash_attention: Currently do not "
                           "support dropout > 0")
    if is_causal and attn_mask is not None and not flash:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set "
                           "when is_causal=True")
    if enable_gqa and not flash:
        for t in (query, key, value):
            if t.ndim < 3:
                raise IndexError(f"Dimension out of range (expected to be in range of "
                                 f"[-{t.ndim}, {t.ndim - 1}], but got -3)")
        hq, hk, hv = query.shape[-3], key.shape[-3], value.shape[-3]
        if hq % hk or hq % hv:
            raise RuntimeError("Number of heads in key and value must divide the number of "
                               "heads in ")
    elif enable_gqa:
        hq, hk, hv = query.shape[-3], key.shape[-3], value.shape[-3]
    # shapes, checked before anything runs, with the messages of the ops PyTorch runs
    kshape, vshape = list(key.shape), list(value.shape)
    if enable_gqa and not (hq == hk == hv):
        kshape[-3], vshape[-3] = hq, hq
    L, S, E = query.shape[-2], key.shape[-2], query.shape[-1]
    batch = _batch_broadcast(list(query.shape[:-2]), kshape[:-2])
    _bmm_check(batch, E, key.shape[-1])
    attn_shape = batch + [L, S]
    if attn_mask is not None:
        _broadcast_into(attn_shape, list(attn_mask.shape))
    out_batch = _batch_broadcast(batch, vshape[:-2])
    _bmm_check(out_batch, S, value.shape[-2])
    if dropout_p > 1.0:
        raise RuntimeError(f"dropout probability has to be between 0 and 1, but got "
                           f"{_num(dropout_p)}")
    if dropout_p < 0.0:
        dropout_p = 0.0                 # (PyTorch's math backend applies no dropout then)
    # the additive mask (a causal mask alone is applied by the softmax kernel itself)
    fmask = None
    if attn_mask is not None:
        fmask = attn_mask if attn_mask.dtype is not D.bool_ else _bool_to_additive(
            attn_mask, dt, False)
    if enable_gqa and not (hq == hk == hv):
        key = key.repeat_interleave(hq // hk, -3)
        value = value.repeat_interleave(hq // hv, -3)
    return _attend(query, key, value, fmask, dropout_p,
                   1.0 / math.sqrt(E) if scale is None else scale, is_causal)


def _attend(q, k, v, fmask, dropout_p, scale, causal):
    """PyTorch's math backend: (q * sqrt(s)) @ (k * sqrt(s))^T + mask, a softmax whose rows
    masked whole give 0 (the causal mask applied by it), dropout, @ v."""
    s = math.sqrt(abs(scale))
    qs = q * (-s if scale < 0 else s)
    attn = qs.matmul((k * s).transpose(-2, -1))
    if fmask is not None:
        attn = attn + fmask
    attn = _safe_softmax(attn, causal)
    if dropout_p > 0.0:
        attn = _dropout(attn, dropout_p)
    return attn.matmul(v)


def _safe_softmax(x, causal):
    """softmax along the last dim, rows of -inf throughout giving 0 (PyTorch's
    _safe_softmax: one SafeSoftmaxBackward0 row); causal: query i (the second-to-last
    dim) takes keys j <= i only."""
    return _wrap(_run(_SAFE, x._i, iargs=_SAFE.pack(width=x.shape[-1], causal=int(causal),
                                                     qlen=x.shape[-2])))


_SAFE = BY_NAME["safe_softmax"]


def _attention_weights(q, k, mask, qscale):
    """MHA's weights: softmax(baddbmm(mask, q * qscale, k^T))."""
    w = (q * qscale).bmm(k.transpose(-2, -1))
    if mask is not None:
        w = w + mask
    return w.softmax(-1)


# ------------------------------------------------------------------ multi-head attention
def _none_or_dtype(input):
    if input is None:
        return None
    if isinstance(input, Tensor):
        return input.dtype
    raise RuntimeError("input to _none_or_dtype() must be None or torch.Tensor")


def _canonical_mask(mask, mask_name, other_type, other_name, target_type, check_other=True):
    """A bool mask as the float mask PyTorch makes of it (-inf where True), a float one as
    it is; other dtypes refused (PyTorch's F._canonical_mask)."""
    if mask is not None:
        md = mask.dtype
        is_float = md.is_floating_point
        if md is not D.bool_ and not is_float:
            raise AssertionError(f"only bool and floating types of {mask_name} are supported")
        if check_other and other_type is not None and md is not other_type:
            warnings.warn(f"Support for mismatched {mask_name} and {other_name} is deprecated. "
                          f"Use same type for both instead.", stacklevel=3)
        if not is_float:
            mask = _bool_to_additive(mask, target_type, True)
    return mask


def _mha_shape_check(query, key, value, key_padding_mask, attn_mask, num_heads):
    """Whether the input is batched, after PyTorch's rank checks of MHA's inputs."""
    if query.dim() == 3:
        if key.dim() != 3 or value.dim() != 3:
            raise AssertionError(f"For batched (3-D) `query`, expected `key` and `value` to be "
                                 f"3-D but found {key.dim()}-D and {value.dim()}-D tensors "
                                 f"respectively")
        if key_padding_mask is not None and key_padding_mask.dim() != 2:
            raise AssertionError(f"For batched (3-D) `query`, expected `key_padding_mask` to be "
                                 f"`None` or 2-D but found {key_padding_mask.dim()}-D tensor "
                                 f"instead")
        if attn_mask is not None and attn_mask.dim() not in (2, 3):
            raise AssertionError(f"For batched (3-D) `query`, expected `attn_mask` to be `None`, "
                                 f"2-D or 3-D but found {attn_mask.dim()}-D tensor instead")
        return True
    if query.dim() == 2:
        if key.dim() != 2 or value.dim() != 2:
            raise AssertionError(f"For unbatched (2-D) `query`, expected `key` and `value` to be "
                                 f"2-D but found {key.dim()}-D and {value.dim()}-D tensors "
                                 f"respectively")
        if key_padding_mask is not None and key_padding_mask.dim() != 1:
            raise AssertionError(f"For unbatched (2-D) `query`, expected `key_padding_mask` to "
                                 f"be `None` or 1-D but found {key_padding_mask.dim()}-D tensor "
                                 f"instead")
        if attn_mask is not None:
            if attn_mask.dim() not in (2, 3):
                raise AssertionError(f"For unbatched (2-D) `query`, expected `attn_mask` to be "
                                     f"`None`, 2-D or 3-D but found {attn_mask.dim()}-D tensor "
                                     f"instead")
            if attn_mask.dim() == 3:
                expected = (num_heads, query.shape[0], key.shape[0])
                if tuple(attn_mask.shape) != expected:
                    raise AssertionError(f"Expected `attn_mask` shape to be {expected} but got "
                                         f"{_size(attn_mask)}")
        return False
    raise AssertionError(f"query should be unbatched 2D or batched 3D tensor but received "
                         f"{query.dim()}-D query tensor")


def _size(t):
    return f"torch.Size({list(t.shape)})"


def _shape_str(shape):
    return f"torch.Size({list(shape)})"


def _in_projection_packed(q, k, v, w, b=None):
    """PyTorch's packed in-projection: one linear for self-attention, q and kv for
    encoder-decoder attention, three otherwise (w's rows: q, k, v)."""
    E = q.size(-1)
    if k is v:
        if q is k:
            proj = _lin(q, w, b)
            return proj[..., :E], proj[..., E:2 * E], proj[..., 2 * E:]
        w_q, w_kv = w.split([E, E * 2])
        b_q, b_kv = (None, None) if b is None else b.split([E, E * 2])
        kv = _lin(k, w_kv, b_kv)
        return _lin(q, w_q, b_q), kv[..., :E], kv[..., E:]
    w_q, w_k, w_v = w.chunk(3)
    b_q, b_k, b_v = (None, None, None) if b is None else b.chunk(3)
    return _lin(q, w_q, b_q), _lin(k, w_k, b_k), _lin(v, w_v, b_v)


def _lin(x, w, b):
    """F.linear over the leading dims folded into one (the one-row 2-D linear)."""
    if x.ndim == 2:
        return _linear(x, w, b)
    lead = x.shape[:-1]
    return _linear(x.reshape(-1, x.shape[-1]), w, b).view(*lead, w.shape[0])


def _in_projection(q, k, v, w_q, w_k, w_v, b_q=None, b_k=None, b_v=None):
    Eq, Ek, Ev = q.size(-1), k.size(-1), v.size(-1)
    for w, want, what in ((w_q, (Eq, Eq), "query"), (w_k, (Eq, Ek), "key"),
                          (w_v, (Eq, Ev), "value")):
        if tuple(w.shape) != want:
            raise AssertionError(f"expecting {what} weights shape of {want}, but got "
                                 f"{_size(w)}")
    for b, what in ((b_q, "query"), (b_k, "key"), (b_v, "value")):
        if b is not None and tuple(b.shape) != (Eq,):
            raise AssertionError(f"expecting {what} bias shape of {(Eq,)}, but got {_size(b)}")
    return _lin(q, w_q, b_q), _lin(k, w_k, b_k), _lin(v, w_v, b_v)


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads,
                                 in_proj_weight, in_proj_bias, bias_k, bias_v, add_zero_attn,
                                 dropout_p, out_proj_weight, out_proj_bias, training=True,
                                 key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None,
                                 k_proj_weight=None, v_proj_weight=None, static_k=None,
                                 static_v=None, average_attn_weights=True, is_causal=False):
    """Multi-head attention on (L, N, E) inputs (or unbatched (L, E)), as
    nn.MultiheadAttention computes it: the in-projections, per-head scaled dot-product
    attention with the masks merged, dropout on the weights when training, the
    out-projection. Returns (output, weights or None); weights are averaged over heads
    when average_attn_weights."""
    return _mha(query, key, value, embed_dim_to_check, num_heads, in_proj_weight,
                in_proj_bias, bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight,
                out_proj_bias, training, key_padding_mask, need_weights, attn_mask,
                use_separate_proj_weight, q_proj_weight, k_proj_weight, v_proj_weight,
                static_k, static_v, average_attn_weights, is_causal, False)


def _mha(query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
         bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias, training,
         key_padding_mask, need_weights, attn_mask, use_separate_proj_weight, q_proj_weight,
         k_proj_weight, v_proj_weight, static_k, static_v, average_attn_weights, is_causal,
         batch_first):
    """multi_head_attention_forward; batch_first: query/key/value are (N, L, E) (the module's
    batch_first, whose transposes PyTorch makes around this call; here the projections are
    computed in that layout, the same values) and the output is (N, L, E) as PyTorch's: a
    transposed view of (L, N, E) memory."""
    fn = "multi_head_attention_forward"
    for t, name in ((query, "query"), (key, "key"), (value, "value")):
        if not isinstance(t, Tensor):
            raise _not_tensor(fn, t, name, None)
    is_batched = _mha_shape_check(query, key, value, key_padding_mask, attn_mask, num_heads)
    if not is_batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
        batch_first = False
    if batch_first:
        bsz, tgt_len, embed_dim = query.shape
        src_len = key.shape[1]
    else:
        tgt_len, bsz, embed_dim = query.shape
        src_len = key.shape[0]
    key_padding_mask = _canonical_mask(key_padding_mask, "key_padding_mask",
                                       _none_or_dtype(attn_mask), "attn_mask", query.dtype)
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the "
                           "Transformer module method `generate_square_subsequent_mask` to "
                           "create this mask.")
    if is_causal and key_padding_mask is None and not need_weights:
        attn_mask = None
    else:
        attn_mask = _canonical_mask(attn_mask, "attn_mask", None, "", query.dtype, False)
        if key_padding_mask is not None:
            is_causal = False
    if embed_dim != embed_dim_to_check:
        raise AssertionError(f"was expecting embedding dimension of {embed_dim_to_check}, but "
                             f"got {embed_dim}")
    head_dim = embed_dim // num_heads
    if head_dim * num_heads != embed_dim:
        raise AssertionError(f"embed_dim {embed_dim} not divisible by num_heads {num_heads}")
    if use_separate_proj_weight:
        if key.shape[:2] != value.shape[:2]:
            raise AssertionError(f"key's sequence and batch dims {_seq_batch(key, batch_first)} "
                                 f"do not match value's {_seq_batch(value, batch_first)}")
    elif key.shape != value.shape:
        raise AssertionError(f"key shape {_key_shape(key, batch_first)} does not match value "
                             f"shape {_key_shape(value, batch_first)}")
    # the mask's shape, before any projection runs
    if attn_mask is not None:
        if attn_mask.dim() == 2:
            if tuple(attn_mask.shape) != (tgt_len, src_len):
                raise RuntimeError(f"The shape of the 2D attn_mask is {_size(attn_mask)}, but "
                                   f"should be {(tgt_len, src_len)}.")
            attn_mask = attn_mask.unsqueeze(0)
        elif attn_mask.dim() == 3:
            if tuple(attn_mask.shape) != (bsz * num_heads, tgt_len, src_len):
                raise RuntimeError(f"The shape of the 3D attn_mask is {_size(attn_mask)}, but "
                                   f"should be {(bsz * num_heads, tgt_len, src_len)}.")
        else:
            raise RuntimeError(f"attn_mask's dimension {attn_mask.dim()} is not supported")
    if bias_k is not None and bias_v is not None:
        if static_k is not None:
            raise AssertionError("bias cannot be added to static key.")
        if static_v is not None:
            raise AssertionError("bias cannot be added to static value.")
    else:
        if bias_k is not None:
            raise AssertionError("bias_k is set but bias_v is None")
        if bias_v is not None:
            raise AssertionError("bias_v is set but bias_k is None")
    packed = (not use_separate_proj_weight and query is key and key is value
              and bias_k is None and static_k is None and static_v is None)
    if packed and in_proj_weight is not None:
        # self-attention: one linear, then one copy into (3, N * H, L, hd) heads (PyTorch's
        # unflatten, transpose and contiguous), whose three parts are views
        proj = _lin(query, in_proj_weight, in_proj_bias)
        if batch_first:
            heads = _permute_copy(proj.view(bsz, tgt_len, 3, num_heads, head_dim),
                                  (2, 0, 3, 1, 4))
        else:
            heads = _permute_copy(proj.view(tgt_len, bsz, 3, num_heads, head_dim),
                                  (2, 1, 3, 0, 4))
        heads = heads.view(3, bsz * num_heads, tgt_len, head_dim)
        q, k, v = heads[0], heads[1], heads[2]
    elif not use_separate_proj_weight:
        if in_proj_weight is None:
            raise AssertionError("use_separate_proj_weight is False but in_proj_weight is None")
        q, k, v = _in_projection_packed(query, key, value, in_proj_weight, in_proj_bias)
    else:
        for w, name in ((q_proj_weight, "q"), (k_proj_weight, "k"), (v_proj_weight, "v")):
            if w is None:
                raise AssertionError(f"use_separate_proj_weight is True but {name}_proj_weight "
                                     f"is None")
        b_q = b_k = b_v = None
        if in_proj_bias is not None:
            b_q, b_k, b_v = in_proj_bias.chunk(3)
        q, k, v = _in_projection(query, key, value, q_proj_weight, k_proj_weight, v_proj_weight,
                                 b_q, b_k, b_v)
    # q, k, v: (L, N, E), or (N, L, E) when batch_first; made (N * H, L, hd) views
    if bias_k is not None:
        bk = bias_k.reshape(1, 1, embed_dim).expand(1, bsz, embed_dim)
        bv = bias_v.reshape(1, 1, embed_dim).expand(1, bsz, embed_dim)
        if batch_first:
            k = _cat([k, bk.transpose(0, 1)], 1)
            v = _cat([v, bv.transpose(0, 1)], 1)
        else:
            k = _cat([k, bk])
            v = _cat([v, bv])
        if attn_mask is not None:
            attn_mask = _pad(attn_mask, (0, 1))
        if key_padding_mask is not None:
            key_padding_mask = _pad(key_padding_mask, (0, 1))
    if not packed:
        q = _heads(q, bsz, num_heads, head_dim, batch_first)
    if packed:
        pass
    elif static_k is None:
        k = _heads(k, bsz, num_heads, head_dim, batch_first)
    else:
        _static_check(static_k, "static_k", bsz * num_heads, head_dim)
        k = static_k
    if packed:
        pass
    elif static_v is None:
        v = _heads(v, bsz, num_heads, head_dim, batch_first)
    else:
        _static_check(static_v, "static_v", bsz * num_heads, head_dim)
        v = static_v
    if add_zero_attn:
        z = _constant(lambda: _zeros(bsz * num_heads, 1, head_dim, dtype=k.dtype))
        k = _cat([k, z], dim=1)
        v = _cat([v, z], dim=1)
        if attn_mask is not None:
            attn_mask = _pad(attn_mask, (0, 1))
        if key_padding_mask is not None:
            key_padding_mask = _pad(key_padding_mask, (0, 1))
    src_len = k.size(1)
    if key_padding_mask is not None:
        if key_padding_mask.shape[0] != bsz:
            raise AssertionError(f"Expected key_padded_mask.shape[0] to be {bsz}, but got "
                                 f"{key_padding_mask.shape[0]}")
        if key_padding_mask.shape[1] != src_len:
            raise AssertionError(f"Expected key_padded_mask.shape[1] to be {src_len}, but got "
                                 f"{key_padding_mask.shape[1]}")
        kpm = (key_padding_mask.view(bsz, 1, 1, src_len).expand(-1, num_heads, -1, -1)
               .reshape(bsz * num_heads, 1, src_len))
        attn_mask = kpm if attn_mask is None else attn_mask + kpm
    if not training:
        dropout_p = 0.0
    if need_weights:
        if is_causal and attn_mask is None:
            raise AssertionError("FIXME: is_causal not implemented for need_weights")
        w = _attention_weights(q, k, attn_mask, math.sqrt(1.0 / float(head_dim)))
        if dropout_p > 0.0:
            w = _dropout(w, p=dropout_p)
        out = w.bmm(v)
        out = _merge_heads(out, bsz, num_heads, tgt_len, embed_dim, batch_first)
        out = _lin(out, out_proj_weight, out_proj_bias).view(tgt_len, bsz, -1)
        if batch_first:
            out = out.transpose(1, 0)
        w = w.view(bsz, num_heads, tgt_len, src_len)
        if average_attn_weights:
            w = w.mean(dim=1)
        if not is_batched:
            out = out.squeeze(1)
            w = w.squeeze(0)
        return out, w
    if attn_mask is not None:
        if attn_mask.size(0) == 1 and attn_mask.dim() == 3:
            attn_mask = attn_mask.unsqueeze(0)
        else:
            attn_mask = attn_mask.view(bsz, num_heads, -1, src_len)
    q = q.view(bsz, num_heads, tgt_len, head_dim)
    k = k.view(bsz, num_heads, src_len, head_dim)
    v = v.view(bsz, num_heads, src_len, head_dim)
    out = scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
    out = _merge_heads(out.view(bsz * num_heads, tgt_len, head_dim), bsz, num_heads, tgt_len,
                       embed_dim, batch_first)
    out = _lin(out, out_proj_weight, out_proj_bias).view(tgt_len, bsz, -1)
    if batch_first:
        out = out.transpose(1, 0)
    if not is_batched:
        out = out.squeeze(1)
    return out, None


def _seq_batch(t, batch_first):
    s = t.shape[:2] if not batch_first else (t.shape[1], t.shape[0])
    return _shape_str(s)


def _key_shape(t, batch_first):
    s = t.shape if not batch_first else (t.shape[1], t.shape[0], t.shape[2])
    return _shape_str(s)


def _static_check(t, name, n, head_dim):
    if t.size(0) != n:
        raise AssertionError(f"expecting {name}.size(0) of {n}, but got {t.size(0)}")
    if t.size(2) != head_dim:
        raise AssertionError(f"expecting {name}.size(2) of {head_dim}, but got {t.size(2)}")


def _permute_copy(x, perm):
    """x.permute(perm).contiguous() as one row (CloneBackward0) whose backward is one loop
    too (a view chain's backward took several times its forward)."""
    if x.ndim > 5 or not x.dtype.is_floating_point:
        return x.permute(*perm).contiguous()
    return _wrap(_run(_PERMUTE, x._i, iargs=_PERMUTE.pack(nd=x.ndim, shape=list(x.shape),
                                                          perm=list(perm))))


_PERMUTE = BY_NAME["permute_copy"]


def _heads(x, bsz, num_heads, head_dim, batch_first):
    """(L, N, E) (or (N, L, E) when batch_first) as (N * H, L, hd) (PyTorch's view and
    transpose; one copy)."""
    if batch_first:
        n, L = x.shape[0], x.shape[1]
        return _permute_copy(x.view(n, L, num_heads, head_dim), (0, 2, 1, 3)).view(
            n * num_heads, L, head_dim)
    L = x.shape[0]
    return _permute_copy(x.view(L, bsz, num_heads, head_dim), (1, 2, 0, 3)).view(
        bsz * num_heads, L, head_dim)


def _merge_heads(out, bsz, num_heads, tgt_len, embed_dim, batch_first):
    """(N * H, L, hd) back to (L * N, E) rows, PyTorch's order for either layout."""
    return _permute_copy(out.view(bsz, num_heads, tgt_len, -1), (2, 0, 1, 3)).view(
        tgt_len * bsz, embed_dim)
