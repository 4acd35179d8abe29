"""tapegrad.nn: transformer modules (PyTorch's names, signatures, defaults and initialisation).

MultiheadAttention, TransformerEncoderLayer/Encoder, TransformerDecoderLayer/Decoder and
Transformer, with PyTorch's parameter names (so state_dicts load across), its
initialisation (the same draws in the same order after the same manual_seed) and its
checks. PyTorch's inference fast paths (nested tensors, fused layers) compute the same
values to rounding; where one of them gives other values (padded positions of
TransformerEncoder's nested-tensor path come out 0), that is reproduced.
"""
import copy
import warnings

from .._front import creation as _creation
from .._front.tensor import Tensor, type_label as _type_label
from .._engine.state import GRAD_MODE
from . import functional as F
from . import init
from ._functional import attention as _A
from .layers import Dropout, LayerNorm, Linear, ModuleList, _factory, _empty
from .module import Module
from .parameter import Parameter

__all__ = ["MultiheadAttention", "Transformer", "TransformerEncoder", "TransformerDecoder",
           "TransformerEncoderLayer", "TransformerDecoderLayer"]


class NonDynamicallyQuantizableLinear(Linear):
    """MultiheadAttention's out_proj: a Linear under PyTorch's class name."""


class MultiheadAttention(Module):
    """Multi-head attention (Attention Is All You Need): query, key and value projected
    per head, scaled dot-product attention, heads concatenated and projected back.
    Inputs are (L, N, E), (N, L, E) when batch_first, or unbatched (L, E)."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None,
                 dtype=None):
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got "
                             f"embed_dim={embed_dim} and num_heads={num_heads} instead")
        dt = _factory(device, dtype, "MultiheadAttention")
        super().__init__()
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != self.embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        if not self._qkv_same_embed_dim:
            self.q_proj_weight = Parameter(_empty(embed_dim, embed_dim, dtype=dt))
            self.k_proj_weight = Parameter(_empty(embed_dim, self.kdim, dtype=dt))
            self.v_proj_weight = Parameter(_empty(embed_dim, self.vdim, dtype=dt))
            self.register_parameter("in_proj_weight", None)
        else:
            self.in_proj_weight = Parameter(_empty(3 * embed_dim, embed_dim, dtype=dt))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(_empty(3 * embed_dim, dtype=dt))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias,
                                                        dtype=dt)
        if add_bias_kv:
            self.bias_k = Parameter(_empty(1, 1, embed_dim, dtype=dt))
            self.bias_v = Parameter(_empty(1, 1, embed_dim, dtype=dt))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self):
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
        if self.bias_v is not None:
            init.xavier_normal_(self.bias_v)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        """(attention output, attention weights or None): weights (N, L, S) averaged over
        heads, or (N, num_heads, L, S), when need_weights. key_padding_mask (N, S): True
        (or a float added) marks keys to ignore; attn_mask (L, S) or (N * num_heads, L, S),
        True marking positions not to attend; is_causal: a hint that attn_mask is the
        causal mask."""
        # (non-tensors fail where PyTorch's forward first touches them, with its errors)
        for t in (attn_mask, key_padding_mask):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"is_floating_point(): argument 'input' (position 1) must be "
                                f"Tensor, not {_type_label(t)}")
        if not isinstance(query, Tensor):
            raise AttributeError(f"'{type(query).__name__}' object has no attribute 'dim'")
        for t in (key, value):
            if not isinstance(t, Tensor):
                raise AttributeError(f"'{type(t).__name__}' object has no attribute "
                                     f"'is_nested'")
        is_batched = query.dim() == 3
        key_padding_mask = _A._canonical_mask(key_padding_mask, "key_padding_mask",
                                              _A._none_or_dtype(attn_mask), "attn_mask",
                                              query.dtype)
        attn_mask = _A._canonical_mask(attn_mask, "attn_mask", None, "", query.dtype, False)
        common = dict(training=self.training, key_padding_mask=key_padding_mask,
                      need_weights=need_weights, attn_mask=attn_mask,
                      average_attn_weights=average_attn_weights, is_causal=is_causal)
        args = (query, key, value, self.embed_dim, self.num_heads, self.in_proj_weight,
                self.in_proj_bias, self.bias_k, self.bias_v, self.add_zero_attn, self.dropout,
                self.out_proj.weight, self.out_proj.bias, common["training"],
                key_padding_mask, need_weights, attn_mask)
        if not self._qkv_same_embed_dim:
            sep = (True, self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        else:
            sep = (False, None, None, None)
        # batch_first: PyTorch transposes to (L, N, E) around the call; the projections
        # are computed in the given layout instead (the same values)
        return _A._mha(*args, *sep, None, None, average_attn_weights, is_causal,
                       self.batch_first and is_batched)

    def merge_masks(self, attn_mask, key_padding_mask, query):
        """(merged mask, mask type): the key padding mask alone (type 1), or both masks
        expanded to (N, num_heads, L, S) and added (type 2), as PyTorch's fast path merges
        them."""
        mask_type = None
        merged_mask = None
        if key_padding_mask is not None:
            mask_type = 1
            merged_mask = key_padding_mask
        if attn_mask is not None:
            batch_size, seq_len, _ = query.shape
            mask_type = 2
            if attn_mask.dim() == 3:
                attn_mask_expanded = attn_mask.view(batch_size, -1, seq_len, seq_len)
            else:
                attn_mask_expanded = attn_mask.view(1, 1, seq_len, seq_len).expand(
                    batch_size, self.num_heads, -1, -1)
            merged_mask = attn_mask_expanded
            if key_padding_mask is not None:
                kpm = key_padding_mask.view(batch_size, 1, 1, seq_len).expand(
                    -1, self.num_heads, -1, -1)
                merged_mask = attn_mask_expanded + kpm
        return merged_mask, mask_type

    def extra_repr(self):
        return ""


def _generate_square_subsequent_mask(sz, device=None, dtype=None):
    dt = _factory(device, dtype, "generate_square_subsequent_mask")
    return _creation.full((sz, sz), float("-inf"), dtype=dt).triu(diagonal=1)


def _get_seq_len(src, batch_first):
    size = src.size()
    if len(size) == 2:
        return size[0]
    return size[1 if batch_first else 0]


def _detect_is_causal_mask(mask, is_causal=None, size=None):
    """is_causal as PyTorch resolves it. PyTorch compares a mask given with is_causal=None
    to the causal mask; here that hint stays False, which gives the same values (the mask
    is applied as given) without reading the mask in Python, so a compiled step replays."""
    return is_causal is True


def _rows(linear, x):
    """linear(x) with x's leading dims folded into one (a view of the layers' contiguous
    values): the same values, and a 2-D linear is one row (a 3-D one is a batched matmul
    and an add)."""
    if x.dim() > 2 and isinstance(linear, Linear):
        lead = x.shape[:-1]
        return linear(x.reshape(-1, x.shape[-1])).view(*lead, -1)
    return linear(x)


def _get_clones(module, N):
    return ModuleList([copy.deepcopy(module) for _ in range(N)])


def _get_activation_fn(activation):
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")


def _is_relu(activation):
    from .layers import ReLU
    return activation is F.relu or isinstance(activation, ReLU)


def _is_gelu(activation):
    from .layers import GELU
    return activation is F.gelu or isinstance(activation, GELU)


class TransformerEncoderLayer(Module):
    """Self-attention then a feed-forward block (linear1, activation, linear2), each with
    dropout and a residual connection, layer-normalised after (or before, norm_first)."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation=F.relu,
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True,
                 device=None, dtype=None):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, device=device, dtype=dtype)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, device=device, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, device=device, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device,
                               dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device,
                               dtype=dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        if isinstance(activation, str):
            activation = _get_activation_fn(activation)
        if _is_relu(activation):
            self.activation_relu_or_gelu = 1
        elif _is_gelu(activation):
            self.activation_relu_or_gelu = 2
        else:
            self.activation_relu_or_gelu = 0
        self.activation = activation

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        """The layer on src ((S, N, E), (N, S, E) when batch_first, or (S, E)); src_mask
        (S, S) or (N * nhead, S, S) and src_key_padding_mask (N, S), bool (True: masked)
        or float (added); is_causal: a hint that src_mask is the causal mask."""
        src_key_padding_mask = _A._canonical_mask(src_key_padding_mask, "src_key_padding_mask",
                                                  _A._none_or_dtype(src_mask), "src_mask",
                                                  src.dtype)
        src_mask = _A._canonical_mask(src_mask, "src_mask", None, "", src.dtype, False)
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask,
                                   is_causal=is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask,
                                              is_causal=is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal=False):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        x = _rows(self.linear2, self.dropout(self.activation(_rows(self.linear1, x))))
        return self.dropout2(x)


class TransformerDecoderLayer(Module):
    """Self-attention, attention over the encoder's output (memory), then a feed-forward
    block, each with dropout and a residual connection, layer-normalised after (or
    before, norm_first)."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation=F.relu,
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True,
                 device=None, dtype=None):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout,
                                            batch_first=batch_first, bias=bias, device=device,
                                            dtype=dtype)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout,
                                                 batch_first=batch_first, bias=bias,
                                                 device=device, dtype=dtype)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, device=device, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, device=device, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device,
                               dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device,
                               dtype=dtype)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device,
                               dtype=dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        if isinstance(activation, str):
            self.activation = _get_activation_fn(activation)
        else:
            self.activation = activation

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        """The layer on tgt, attending to memory (the encoder's output); the masks as in
        TransformerEncoderLayer, for the self-attention (tgt_*) and the attention over
        memory (memory_*)."""
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask,
                                    memory_key_padding_mask, memory_is_causal)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask,
                                              tgt_is_causal))
            x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask,
                                               memory_is_causal))
            x = self.norm3(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal=False):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           is_causal=is_causal, need_weights=False)[0]
        return self.dropout1(x)

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal=False):
        x = self.multihead_attn(x, mem, mem, attn_mask=attn_mask,
                                key_padding_mask=key_padding_mask, is_causal=is_causal,
                                need_weights=False)[0]
        return self.dropout2(x)

    def _ff_block(self, x):
        x = _rows(self.linear2, self.dropout(self.activation(_rows(self.linear1, x))))
        return self.dropout3(x)


class TransformerEncoder(Module):
    """num_layers copies of encoder_layer applied in turn, then norm if given."""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True,
                 mask_check=True):
        super().__init__()
        self.layers = _get_clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.use_nested_tensor = enable_nested_tensor
        self.mask_check = mask_check
        enc_layer = "encoder_layer"
        why_not = ""
        if not isinstance(encoder_layer, TransformerEncoderLayer):
            why_not = f"{enc_layer} was not TransformerEncoderLayer"
        elif encoder_layer.norm_first:
            why_not = f"{enc_layer}.norm_first was True"
        elif not encoder_layer.self_attn.batch_first:
            why_not = (f"{enc_layer}.self_attn.batch_first was not True"
                       "(use batch_first for better inference performance)")
        elif not encoder_layer.self_attn._qkv_same_embed_dim:
            why_not = f"{enc_layer}.self_attn._qkv_same_embed_dim was not True"
        elif encoder_layer.self_attn.in_proj_bias is None:
            why_not = f"{enc_layer}.self_attn was passed bias=False"
        elif not encoder_layer.activation_relu_or_gelu:
            why_not = f"{enc_layer}.activation_relu_or_gelu was not True"
        elif encoder_layer.norm1.eps != encoder_layer.norm2.eps:
            why_not = f"{enc_layer}.norm1.eps was not equal to {enc_layer}.norm2.eps"
        elif encoder_layer.self_attn.num_heads % 2 == 1:
            why_not = f"{enc_layer}.self_attn.num_heads is odd"
        if enable_nested_tensor and why_not:
            warnings.warn(f"enable_nested_tensor is True, but self.use_nested_tensor is False "
                          f"because {why_not}", stacklevel=2)
            self.use_nested_tensor = False

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        """The layers on src, then norm; mask, src_key_padding_mask and is_causal as in
        TransformerEncoderLayer (is_causal=None: a hint only when True)."""
        src_key_padding_mask = _A._canonical_mask(src_key_padding_mask, "src_key_padding_mask",
                                                  _A._none_or_dtype(mask), "mask", src.dtype)
        mask = _A._canonical_mask(mask, "mask", None, "", src.dtype, False)
        output = src
        first_layer = self.layers[0]
        batch_first = first_layer.self_attn.batch_first
        padded = self._nested_path(src, mask, src_key_padding_mask)
        if padded is not None:      # (nested tensors leave the padded keys out altogether)
            src_key_padding_mask = _A._bool_to_additive(padded, src.dtype, True)
        seq_len = _get_seq_len(src, batch_first)
        is_causal = _detect_is_causal_mask(mask, is_causal, seq_len)
        for mod in self.layers:
            output = mod(output, src_mask=mask, is_causal=is_causal,
                         src_key_padding_mask=src_key_padding_mask)
        if padded is not None:       # PyTorch's nested tensors come back padded with 0
            output = output.masked_fill(padded.unsqueeze(-1), 0.0)
        if self.norm is not None:
            output = self.norm(output)
        return output

    def _nested_path(self, src, mask, kpm):
        """The padding (True: padded) when PyTorch would run the layers on nested tensors
        (inference with a left-aligned key padding mask), else None."""
        first = self.layers[0]
        if (not getattr(self, "use_nested_tensor", False) or first.training or src.dim() != 3
                or kpm is None or mask is not None):
            return None
        if GRAD_MODE.on and any(t is not None and t.requires_grad for t in (
                src, first.self_attn.in_proj_weight, first.self_attn.in_proj_bias,
                first.self_attn.out_proj.weight, first.self_attn.out_proj.bias,
                first.norm1.weight, first.norm1.bias, first.norm2.weight, first.norm2.bias,
                first.linear1.weight, first.linear1.bias, first.linear2.weight,
                first.linear2.bias)):
            return None
        import numpy as np
        from .._front.tensor import _numpy_view
        pad = _numpy_view(kpm) != 0     # (PyTorch's mask.logical_not() marks the valid keys)
        valid = ~pad
        if self.mask_check:
            # left-aligned: each row's valid positions come first
            counts = valid.sum(axis=1)
            if not np.array_equal(valid, np.arange(valid.shape[1])[None, :] < counts[:, None]):
                return None
        from .._front.promotion import from_array
        return from_array(pad)


class TransformerDecoder(Module):
    """num_layers copies of decoder_layer applied in turn, then norm if given."""

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = _get_clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False):
        """The layers on tgt attending to memory, then norm; the masks as in
        TransformerDecoderLayer."""
        output = tgt
        seq_len = _get_seq_len(tgt, self.layers[0].self_attn.batch_first)
        tgt_is_causal = _detect_is_causal_mask(tgt_mask, tgt_is_causal, seq_len)
        for mod in self.layers:
            output = mod(output, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                         tgt_key_padding_mask=tgt_key_padding_mask,
                         memory_key_padding_mask=memory_key_padding_mask,
                         tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)
        if self.norm is not None:
            output = self.norm(output)
        return output


class Transformer(Module):
    """An encoder-decoder transformer: TransformerEncoder (num_encoder_layers) and
    TransformerDecoder (num_decoder_layers), each followed by a LayerNorm; every weight
    matrix re-initialised with xavier_uniform_, as PyTorch's."""

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
                 dim_feedforward=2048, dropout=0.1, activation=F.relu, custom_encoder=None,
                 custom_decoder=None, layer_norm_eps=1e-5, batch_first=False, norm_first=False,
                 bias=True, device=None, dtype=None):
        super().__init__()
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            encoder_layer = TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout,
                                                    activation, layer_norm_eps, batch_first,
                                                    norm_first, bias, device=device, dtype=dtype)
            encoder_norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device,
                                     dtype=dtype)
            self.encoder = TransformerEncoder(encoder_layer, num_encoder_layers, encoder_norm)
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            decoder_layer = TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout,
                                                    activation, layer_norm_eps, batch_first,
                                                    norm_first, bias, device=device, dtype=dtype)
            decoder_norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device,
                                     dtype=dtype)
            self.decoder = TransformerDecoder(decoder_layer, num_decoder_layers, decoder_norm)
        self._reset_parameters()
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal=False):
        """The decoder's output for tgt attending to the encoded src; the masks as in the
        encoder and decoder layers."""
        is_batched = src.dim() == 3
        if not self.batch_first and src.size(1) != tgt.size(1) and is_batched:
            raise RuntimeError("the batch number of src and tgt must be equal")
        elif self.batch_first and src.size(0) != tgt.size(0) and is_batched:
            raise RuntimeError("the batch number of src and tgt must be equal")
        if src.size(-1) != self.d_model or tgt.size(-1) != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz, device=None, dtype=None):
        """The (sz, sz) causal mask: 0 on and below the diagonal, -inf above."""
        return _generate_square_subsequent_mask(sz, dtype=dtype, device=device)

    def _reset_parameters(self):
        for p in self.parameters():
            if p.dim() > 1:
                init.xavier_uniform_(p)
