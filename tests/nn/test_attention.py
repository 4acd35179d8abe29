"""Attention and transformer layers against PyTorch: F.scaled_dot_product_attention,
F.multi_head_attention_forward, nn.MultiheadAttention and the Transformer modules: default
initialisation bit for bit after the same manual_seed, state_dicts loading across, values
and float64 gradients from the same weights, dropout's masks (PyTorch's random stream),
PyTorch's errors, and a compiled training step equal to eager."""
import copy
import inspect
import warnings

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F
from tests.replay.helpers import compile_, no_break

torch = pytest.importorskip("torch")
TF = torch.nn.functional


# ------------------------------------------------------------------ helpers
def rng(seed):
    return np.random.default_rng(seed)


def pair(a, requires_grad=False, dtype="float64"):
    """The same values in tapegrad and torch."""
    a = np.asarray(a)
    if a.dtype.kind == "f":
        a = a.astype(dtype)
    return (tg.tensor(a, requires_grad=requires_grad),
            torch.tensor(a, requires_grad=requires_grad))


def rand(seed, *shape, requires_grad=True, dtype="float64"):
    return pair(rng(seed).uniform(-1.5, 1.5, shape), requires_grad, dtype)


def np_(t):
    return t.detach().numpy() if t is not None else None


def close(a, b, tol=1e-10):
    np.testing.assert_allclose(np_(a), np_(b), rtol=tol, atol=tol)


def copy_weights(ours, theirs):
    """theirs' state_dict loaded into ours (PyTorch's parameter names)."""
    ours.load_state_dict({k: tg.tensor(v.detach().numpy()) for k, v in
                          theirs.state_dict().items()})


def same_params(ours, theirs):
    """Parameters by name, PyTorch's names and values bit for bit."""
    a = dict(ours.named_parameters())
    b = dict(theirs.named_parameters())
    assert list(a) == list(b)
    for k in a:
        assert np.array_equal(np_(a[k]), np_(b[k])), k


def raised(fn):
    try:
        fn()
    except Exception as e:      # noqa: BLE001  (the type and message are compared)
        return type(e), str(e)
    return None, None


def same_error(ours, theirs):
    got, want = raised(ours), raised(theirs)
    assert want[0] is not None, "PyTorch accepts it"
    assert got == want


# ------------------------------------------------------------------ scaled_dot_product_attention
SDPA_CASES = {
    # name: (q shape, k shape, v shape, mask (None, ("bool"/"float", shape)), kwargs)
    "4d": ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 8), None, {}),
    "3d": ((3, 4, 8), (3, 5, 8), (3, 5, 6), None, {}),
    "2d": ((4, 8), (5, 8), (5, 8), None, {}),
    "bool_mask": ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 8), ("bool", (4, 5)), {}),
    "float_mask": ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 8), ("float", (4, 5)), {}),
    "broadcast_mask": ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 8), ("bool", (2, 1, 4, 5)), {}),
    "mask_3d_math": ((3, 4, 8), (3, 5, 8), (3, 5, 8), ("bool", (3, 4, 5)), {}),
    "kv_batch_broadcast": ((2, 3, 4, 8), (1, 3, 5, 8), (1, 3, 5, 8), None, {}),
    "kv_heads_broadcast": ((2, 3, 4, 8), (2, 1, 5, 8), (2, 1, 5, 8), None, {}),
    "causal": ((2, 3, 4, 8), (2, 3, 4, 8), (2, 3, 4, 8), None, {"is_causal": True}),
    "causal_long_query": ((2, 6, 8), (2, 4, 8), (2, 4, 8), None, {"is_causal": True}),
    "causal_short_query": ((2, 3, 8), (2, 5, 8), (2, 5, 8), None, {"is_causal": True}),
    "causal_and_mask_flash": ((2, 3, 4, 8), (2, 3, 4, 8), (2, 3, 4, 8), ("bool", (4, 4)),
                              {"is_causal": True}),
    "scale": ((2, 4, 8), (2, 5, 8), (2, 5, 8), None, {"scale": 0.3}),
    "negative_scale": ((2, 4, 8), (2, 5, 8), (2, 5, 8), None, {"scale": -0.7}),
    "gqa": ((2, 4, 3, 8), (2, 2, 5, 8), (2, 2, 5, 8), None, {"enable_gqa": True}),
    "gqa_math": ((4, 3, 8), (2, 5, 8), (1, 5, 8), None, {"enable_gqa": True}),
    "value_dim": ((2, 4, 8), (2, 5, 8), (2, 5, 3), ("float", (4, 5)), {}),
}


def _mask(spec, seed):
    kind, shape = spec
    r = rng(seed)
    if kind == "bool":
        m = r.uniform(size=shape) < 0.6
        m[..., 0, :] = False            # a row masked whole: 0 there, as PyTorch's kernels
        return pair(m)
    m = r.uniform(-1, 1, shape)
    m[..., 1, 2] = -np.inf
    m[..., 0, :] = -np.inf
    return pair(m)


@pytest.mark.parametrize("name", list(SDPA_CASES))
def test_sdpa_values_and_gradients(name):
    qs, ks, vs, mspec, kw = SDPA_CASES[name]
    (q, tq), (k, tk), (v, tv) = rand(1, *qs), rand(2, *ks), rand(3, *vs)
    m = tm = None
    if mspec is not None:
        m, tm = _mask(mspec, 4)
    out = F.scaled_dot_product_attention(q, k, v, m, **kw)
    want = TF.scaled_dot_product_attention(tq, tk, tv, tm, **kw)
    close(out, want)
    g = rng(5).uniform(-1, 1, tuple(want.shape))
    out.backward(tg.tensor(g))
    want.backward(torch.tensor(g))
    for a, b in ((q, tq), (k, tk), (v, tv)):
        close(a.grad, b.grad)


def test_sdpa_float32_and_a_float_mask_that_requires_grad():
    (q, tq), (k, tk), (v, tv) = (rand(s, 2, 4, 8, dtype="float32") for s in (1, 2, 3))
    m, tm = rand(4, 4, 5, dtype="float32")
    k, tk = rand(2, 2, 5, 8, dtype="float32")
    v, tv = rand(3, 2, 5, 8, dtype="float32")
    out = F.scaled_dot_product_attention(q, k, v, m)
    want = TF.scaled_dot_product_attention(tq, tk, tv, tm)
    assert out.dtype is tg.float32
    close(out, want, 1e-5)
    out.sum().backward()
    want.sum().backward()
    close(m.grad, tm.grad, 1e-5)
    close(q.grad, tq.grad, 1e-5)


@pytest.mark.parametrize("shape, mask", [((2, 3, 4, 8), None), ((3, 4, 8), (4, 5)),
                                         ((2, 4, 8), "causal")])
def test_sdpa_dropout_draws_pytorchs_masks(shape, mask):
    """dropout_p > 0 is PyTorch's math backend: its bernoulli draws, in its order."""
    q, tq = rand(1, *shape)
    k, tk = rand(2, *shape[:-2], 5 if mask != "causal" else shape[-2], 8)
    v, tv = rand(3, *tk.shape)
    m = tm = None
    if isinstance(mask, tuple):
        m, tm = _mask(("bool", mask), 4)
    kw = {"is_causal": True} if mask == "causal" else {}
    tg.manual_seed(7)
    out = F.scaled_dot_product_attention(q, k, v, m, 0.4, **kw)
    torch.manual_seed(7)
    want = TF.scaled_dot_product_attention(tq, tk, tv, tm, 0.4, **kw)
    close(out, want)
    out.sum().backward()
    want.sum().backward()
    close(q.grad, tq.grad)
    close(v.grad, tv.grad)
    # the generators moved alike
    assert tg.rand(3).tolist() == pytest.approx(torch.rand(3, dtype=torch.float32).tolist())


def test_sdpa_dropout_one_and_negative():
    (q, tq), (k, tk), (v, tv) = (rand(s, 3, 4, 8) for s in (1, 2, 3))
    close(F.scaled_dot_product_attention(q, k, v, dropout_p=1.0),
          TF.scaled_dot_product_attention(tq, tk, tv, dropout_p=1.0))
    # 3-D: PyTorch's math backend, which applies no dropout for p <= 0
    close(F.scaled_dot_product_attention(q, k, v, dropout_p=-0.5),
          TF.scaled_dot_product_attention(tq, tk, tv, dropout_p=-0.5))


def _sdpa_error_calls(L):
    F_ = L.nn.functional
    sd = F_.scaled_dot_product_attention
    q = L.ones(2, 3, 4, 8)
    k = L.ones(2, 3, 5, 8)
    v = L.ones(2, 3, 5, 8)
    b = L.ones(4, 5, dtype=L.bool)
    return [
        lambda: sd(q, k, v, attn_mask=L.ones(4, 6, dtype=L.bool)),
        lambda: sd(q, k, v, attn_mask=L.ones(4, 5, dtype=L.int64)),
        lambda: sd(q, k, v, attn_mask=L.ones(4, 5, dtype=L.float64)),
        lambda: sd(q, k, v.double()),
        lambda: sd(q, k[..., :7], v),
        lambda: sd(q[0, 0, 0], k[0, 0, 0], v[0, 0, 0]),
        lambda: sd(q, k[:, :2], v[:, :2]),
        lambda: sd(q, k[:, :2], v[:, :2], enable_gqa=True),
        lambda: sd(q, k, v, dropout_p=1.5),
        lambda: sd(q, k, v, dropout_p=-0.5),
        lambda: sd(q[0], k[0], v[0], attn_mask=b, is_causal=True),
        lambda: sd(q, k, v, attn_mask=L.ones(3, 2, 3, 4, 5, dtype=L.bool)),
        lambda: sd(q, k, v, attn_mask=b, is_causal=True, dropout_p=0.5),
        lambda: sd(q.long(), k.long(), v.long()),
        lambda: sd(q, k, v, attn_mask=0.0),
        lambda: sd(1, k, v),
        lambda: sd(q, k, "v"),
        lambda: sd(q, k, v, dropout_p=None),
        lambda: sd(q, k, v, is_causal=1),
        lambda: sd(q, k, v, scale="a"),
        lambda: sd(q, k, v, enable_gqa=None),
        lambda: sd(q, k, v, None, 0.0, False, 1.0),
        lambda: sd(q, k, v, foo=1),
        lambda: sd(q[0, 0], k[0, 0], v[0, 0], enable_gqa=True),
        lambda: sd(q, k, v, attn_mask=L.ones(5, dtype=L.bool)),
        lambda: sd(q, k, v, attn_mask=L.ones((), dtype=L.bool)),
    ]


def test_sdpa_errors_are_pytorchs():
    """(Not compared: a value whose length differs from key's, which PyTorch's flash kernel
    takes, reading past its end, and tapegrad refuses with bmm's message; a non-tensor
    attn_mask given by position, whose message here lacks PyTorch's "(position 4)".)"""
    ours, theirs = _sdpa_error_calls(tg), _sdpa_error_calls(torch)
    for k, (a, b) in enumerate(zip(ours, theirs)):
        got, want = raised(a), raised(b)
        assert want[0] is not None, k
        assert got == want, k


def test_sdpa_is_causal_with_a_mask_on_the_flash_path():
    """PyTorch's flash kernel (4-D, no dropout) applies both; its math backend refuses."""
    (q, tq), (k, tk), (v, tv) = (rand(s, 2, 2, 4, 8) for s in (1, 2, 3))
    m, tm = _mask(("bool", (4, 4)), 3)
    close(F.scaled_dot_product_attention(q, k, v, m, is_causal=True),
          TF.scaled_dot_product_attention(tq, tk, tv, tm, is_causal=True))


# ------------------------------------------------------------------ MultiheadAttention
MHA_CONFIGS = {
    "default": dict(),
    "no_bias": dict(bias=False),
    "bias_kv": dict(add_bias_kv=True),
    "zero_attn": dict(add_zero_attn=True),
    "kdim_vdim": dict(kdim=6, vdim=5),
    "batch_first": dict(batch_first=True),
    "everything": dict(add_bias_kv=True, add_zero_attn=True, kdim=6, vdim=5,
                       batch_first=True),
}


@pytest.mark.parametrize("name", list(MHA_CONFIGS))
def test_mha_initialisation_and_state_dict(name):
    kw = MHA_CONFIGS[name]
    tg.manual_seed(3)
    ours = tg.nn.MultiheadAttention(8, 2, **kw)
    torch.manual_seed(3)
    theirs = torch.nn.MultiheadAttention(8, 2, **kw)
    same_params(ours, theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert type(ours.out_proj).__name__ == "NonDynamicallyQuantizableLinear"
    assert (ours.bias_k is None) == (theirs.bias_k is None)
    assert repr(ours) == repr(theirs)
    # and a state_dict of ours loads into PyTorch's
    theirs.load_state_dict({k: torch.tensor(np_(v)) for k, v in ours.state_dict().items()})


def _mha_inputs(cfg, batched=True, L=4, S=5, N=3):
    E = 8
    kd, vd = cfg.get("kdim", E), cfg.get("vdim", E)
    bf = cfg.get("batch_first", False)

    def shape(n, d):
        if not batched:
            return (n, d)
        return (N, n, d) if bf else (n, N, d)
    return rand(10, *shape(L, E)), rand(11, *shape(S, kd)), rand(12, *shape(S, vd))


MHA_CALLS = {
    "weights": dict(),
    "no_weights": dict(need_weights=False),
    "per_head_weights": dict(average_attn_weights=False),
    "kpm_bool": dict(kpm="bool"),
    "kpm_float": dict(kpm="float", need_weights=False),
    "mask_2d_bool": dict(mask=("bool", 2)),
    "mask_3d_float": dict(mask=("float", 3), need_weights=False),
    "both_masks": dict(mask=("bool", 2), kpm="bool"),
    "causal_hint": dict(mask=("causal", 2), is_causal=True, need_weights=False),
}


def _mha_masks(spec, L, S, N, H, dtype="float64"):
    kpm = tkpm = m = tm = None
    r = rng(20)
    if spec.get("kpm") == "bool":
        a = r.uniform(size=(N, S)) < 0.3
        a[:, 0] = False
        kpm, tkpm = pair(a)
    elif spec.get("kpm") == "float":
        kpm, tkpm = pair(r.uniform(-1, 0, (N, S)), dtype=dtype)
    if "mask" in spec:
        kind, nd = spec["mask"]
        shape = (L, S) if nd == 2 else (N * H, L, S)
        if kind == "bool":
            a = r.uniform(size=shape) < 0.3
            a[..., 0] = False
            m, tm = pair(a)
        elif kind == "float":
            m, tm = pair(r.uniform(-2, 0, shape), dtype=dtype)
        else:
            a = np.triu(np.full((L, S), -np.inf), 1)
            m, tm = pair(a, dtype=dtype)
    return kpm, tkpm, m, tm


@pytest.mark.parametrize("call", list(MHA_CALLS))
@pytest.mark.parametrize("name", ["default", "bias_kv", "zero_attn", "kdim_vdim",
                                  "batch_first", "everything", "no_bias"])
def test_mha_forward_and_gradients(name, call):
    cfg, spec = MHA_CONFIGS[name], dict(MHA_CALLS[call])
    if spec.get("is_causal") and (cfg.get("add_bias_kv") or cfg.get("add_zero_attn")):
        pytest.skip("a causal (L, L) mask does not fit the added key")
    L = 5 if spec.get("is_causal") else 4
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(8, 2, dtype=torch.float64, **cfg)
    ours = tg.nn.MultiheadAttention(8, 2, dtype=tg.float64, **cfg)
    copy_weights(ours, theirs)
    (q, tq), (k, tk), (v, tv) = _mha_inputs(cfg, L=L)
    kpm, tkpm, m, tm = _mha_masks(spec, L, 5, 3, 2)
    kw = {k_: spec[k_] for k_ in ("need_weights", "average_attn_weights", "is_causal")
          if k_ in spec}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out, w = ours(q, k, v, key_padding_mask=kpm, attn_mask=m, **kw)
        tout, tw = theirs(tq, tk, tv, key_padding_mask=tkpm, attn_mask=tm, **kw)
    close(out, tout)
    assert tuple(out.shape) == tuple(tout.shape)
    assert (w is None) == (tw is None)
    if w is not None:
        close(w, tw)
    loss = (out * out).sum() + (0 if w is None else w.sum())
    tloss = (tout * tout).sum() + (0 if tw is None else tw.sum())
    loss.backward()
    tloss.backward()
    for a, b in ((q, tq), (k, tk), (v, tv)):
        close(a.grad, b.grad)
    for (n, p), (tn, tp) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert n == tn
        close(p.grad, tp.grad)


@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_unbatched_and_same_tensor_self_attention(need_weights):
    torch.manual_seed(1)
    theirs = torch.nn.MultiheadAttention(8, 4, dtype=torch.float64)
    ours = tg.nn.MultiheadAttention(8, 4, dtype=tg.float64)
    copy_weights(ours, theirs)
    x, tx = rand(5, 6, 8)
    kpm, tkpm = pair(np.array([False, True, False, False, True, False]))
    out, w = ours(x, x, x, key_padding_mask=kpm, need_weights=need_weights)
    tout, tw = theirs(tx, tx, tx, key_padding_mask=tkpm, need_weights=need_weights)
    close(out, tout)
    if need_weights:
        close(w, tw)
    out.sum().backward()
    tout.sum().backward()
    close(x.grad, tx.grad)


@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_dropout_in_training_draws_pytorchs_masks(need_weights):
    torch.manual_seed(2)
    theirs = torch.nn.MultiheadAttention(8, 2, dropout=0.3, batch_first=True,
                                         dtype=torch.float64)
    ours = tg.nn.MultiheadAttention(8, 2, dropout=0.3, batch_first=True, dtype=tg.float64)
    copy_weights(ours, theirs)
    x, tx = rand(6, 3, 5, 8)
    tg.manual_seed(9)
    torch.manual_seed(9)
    out, _ = ours(x, x, x, need_weights=need_weights)
    tout, _ = theirs(tx, tx, tx, need_weights=need_weights)
    close(out, tout)
    ours.eval()
    theirs.eval()
    with tg.no_grad(), torch.no_grad():     # (PyTorch's fused inference path)
        close(ours(x, x, x)[0], theirs(tx, tx, tx)[0])


def test_mha_fully_masked_rows():
    """need_weights=True: PyTorch's softmax gives NaN for a row masked whole; without
    weights its scaled_dot_product_attention gives 0."""
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(4, 2, dtype=torch.float64)
    ours = tg.nn.MultiheadAttention(4, 2, dtype=tg.float64)
    copy_weights(ours, theirs)
    x, tx = rand(1, 3, 2, 4)
    kpm, tkpm = pair(np.array([[False, False, False], [True, True, True]]))
    for nw in (True, False):
        out = ours(x, x, x, key_padding_mask=kpm, need_weights=nw)[0]
        tout = theirs(tx, tx, tx, key_padding_mask=tkpm, need_weights=nw)[0]
        np.testing.assert_allclose(np_(out), np_(tout), rtol=1e-10, atol=1e-10)
        assert np.isnan(np_(out)).any() == nw


def _mha_error_calls(L):
    nn = L.nn
    x = L.ones(4, 2, 8)
    m = nn.MultiheadAttention(8, 2)
    return [
        lambda: nn.MultiheadAttention(8, 3),
        lambda: nn.MultiheadAttention(0, 2),
        lambda: nn.MultiheadAttention(8, -1),
        lambda: m(x, x, x, key_padding_mask=L.ones(2, 4, dtype=L.int64)),
        lambda: m(x, x, x, attn_mask=L.ones(4, 4, dtype=L.int64)),
        lambda: m(x, x, x, attn_mask=L.ones(4, 5, dtype=L.bool)),
        lambda: m(x, x, x, attn_mask=L.ones(3, 4, 4, dtype=L.bool)),
        lambda: m(x, x, x, attn_mask=L.ones(1, 2, 4, 4, dtype=L.bool)),
        lambda: m(x, x, x, key_padding_mask=L.ones(3, 4, dtype=L.bool)),
        lambda: m(x, x, x, key_padding_mask=L.ones(2, 5, dtype=L.bool)),
        lambda: m(x, x, x, key_padding_mask=L.ones(2, dtype=L.bool)),
        lambda: m(x, x[:, :, :4], x),
        lambda: m(x, x, x[:3]),
        lambda: m(x[0, 0], x[0, 0], x[0, 0]),
        lambda: m(x, x[0], x[0]),
        lambda: m(x[:, :, :6], x[:, :, :6], x[:, :, :6]),
        lambda: m(x, x, x, is_causal=True),
        lambda: m(x[0], x[0], x[0], attn_mask=L.ones(3, 4, 4, dtype=L.bool)),
        lambda: m(1, x, x),
        lambda: m(x, 2, x),
        lambda: m(x, x, [3]),
        lambda: m(x, x, x, key_padding_mask=1),
        lambda: m(x, x, x, attn_mask=[1], key_padding_mask=1),
        lambda: L.nn.functional.multi_head_attention_forward(
            x, x, x, 8, 3, m.in_proj_weight, m.in_proj_bias, None, None, False, 0.0,
            m.out_proj.weight, m.out_proj.bias),
        lambda: L.nn.functional.multi_head_attention_forward(
            x, x, x, 8, 2, None, m.in_proj_bias, None, None, False, 0.0,
            m.out_proj.weight, m.out_proj.bias),
        lambda: L.nn.functional.multi_head_attention_forward(
            x, x, x, 8, 2, m.in_proj_weight, m.in_proj_bias, L.ones(1, 1, 8), None, False,
            0.0, m.out_proj.weight, m.out_proj.bias),
    ]


def test_mha_errors_are_pytorchs():
    ours, theirs = _mha_error_calls(tg), _mha_error_calls(torch)
    for k, (a, b) in enumerate(zip(ours, theirs)):
        got, want = raised(a), raised(b)
        assert want[0] is not None, k
        assert got == want, k


def test_mismatched_mask_types_warn_as_pytorch():
    m = tg.nn.MultiheadAttention(8, 2)
    x = tg.ones(4, 2, 8)
    with pytest.warns(UserWarning, match="Support for mismatched key_padding_mask and "
                                         "attn_mask is deprecated"):
        m(x, x, x, key_padding_mask=tg.zeros(2, 4, dtype=tg.bool), attn_mask=tg.zeros(4, 4))


def test_functional_signatures_match_pytorchs():
    ours = inspect.signature(F.multi_head_attention_forward)
    theirs = inspect.signature(TF.multi_head_attention_forward)
    assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == \
        [(p.name, p.kind, p.default) for p in theirs.parameters.values()]
    sig = inspect.signature(F.scaled_dot_product_attention)
    assert list(sig.parameters) == ["query", "key", "value", "attn_mask", "dropout_p",
                                    "is_causal", "scale", "enable_gqa"]
    for cls in ("MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder",
                "TransformerDecoderLayer", "TransformerDecoder", "Transformer"):
        for meth in ("__init__", "forward"):
            a = inspect.signature(getattr(getattr(tg.nn, cls), meth))
            b = inspect.signature(getattr(getattr(torch.nn, cls), meth))
            assert list(a.parameters) == list(b.parameters), (cls, meth)
            assert [p.default for p in a.parameters.values()
                    if not callable(p.default)] == \
                [p.default for p in b.parameters.values() if not callable(p.default)]


def test_f_multi_head_attention_forward_with_separate_weights_and_statics():
    torch.manual_seed(4)
    theirs = torch.nn.MultiheadAttention(8, 2, kdim=6, vdim=5, dtype=torch.float64)
    ours = tg.nn.MultiheadAttention(8, 2, kdim=6, vdim=5, dtype=tg.float64)
    copy_weights(ours, theirs)
    (q, tq), (k, tk), (v, tv) = _mha_inputs(dict(kdim=6, vdim=5))
    sk, tsk = rand(30, 6, 5, 4)
    sv, tsv = rand(31, 6, 5, 4)

    def call(Fn, m, q, k, v, sk, sv):
        return Fn.multi_head_attention_forward(
            q, k, v, 8, 2, None, m.in_proj_bias, None, None, False, 0.0, m.out_proj.weight,
            m.out_proj.bias, use_separate_proj_weight=True, q_proj_weight=m.q_proj_weight,
            k_proj_weight=m.k_proj_weight, v_proj_weight=m.v_proj_weight, static_k=sk,
            static_v=sv)
    out, w = call(F, ours, q, k, v, sk, sv)
    tout, tw = call(TF, theirs, tq, tk, tv, tsk, tsv)
    close(out, tout)
    close(w, tw)
    out.sum().backward()
    tout.sum().backward()
    close(sk.grad, tsk.grad)
    close(q.grad, tq.grad)


# ------------------------------------------------------------------ transformer layers
LAYER_CONFIGS = {
    "post_norm": dict(),
    "norm_first": dict(norm_first=True),
    "gelu_batch_first": dict(activation="gelu", batch_first=True),
    "callable_no_bias": dict(activation="tanh", bias=False, layer_norm_eps=1e-3),
}


def _activation(kw, L):
    kw = dict(kw)
    if kw.get("activation") == "tanh":
        kw["activation"] = L.tanh
    return kw


@pytest.mark.parametrize("name", list(LAYER_CONFIGS))
def test_encoder_layer_and_encoder(name):
    kw = LAYER_CONFIGS[name]
    torch.manual_seed(5)
    tl = torch.nn.TransformerEncoderLayer(8, 2, 16, 0.0, dtype=torch.float64,
                                          **_activation(kw, torch))
    tg.manual_seed(5)
    gl = tg.nn.TransformerEncoderLayer(8, 2, 16, 0.0, dtype=tg.float64, **_activation(kw, tg))
    same_params(gl, tl)
    assert gl.activation_relu_or_gelu == tl.activation_relu_or_gelu
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tenc = torch.nn.TransformerEncoder(tl, 2, torch.nn.LayerNorm(8, dtype=torch.float64))
        genc = tg.nn.TransformerEncoder(gl, 2, tg.nn.LayerNorm(8, dtype=tg.float64))
    same_params(genc, tenc)
    bf = kw.get("batch_first", False)
    x, tx = rand(7, *((3, 5, 8) if bf else (5, 3, 8)))
    mask, tmask = pair(np.triu(np.full((5, 5), -np.inf), 1))
    kpm = np.zeros((3, 5), bool)
    kpm[1, 3:] = True
    kpm, tkpm = pair(kpm)
    for args in (dict(), dict(mask=(mask, tmask), is_causal=True), dict(kpm=(kpm, tkpm))):
        m, tm = args.get("mask", (None, None))
        p, tp = args.get("kpm", (None, None))
        out = genc(x, mask=m, src_key_padding_mask=p, is_causal=args.get("is_causal"))
        tout = tenc(tx, mask=tm, src_key_padding_mask=tp, is_causal=args.get("is_causal"))
        close(out, tout)
        out.sum().backward()
        tout.sum().backward()
        close(x.grad, tx.grad)
        for (n, a), (tn, b) in zip(genc.named_parameters(), tenc.named_parameters()):
            assert n == tn
            close(a.grad, b.grad)
        x.grad = None
        tx.grad = None
        genc.zero_grad()
        tenc.zero_grad()


def test_encoder_warns_and_pads_as_pytorchs_nested_tensor_path():
    layer = dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0, batch_first=True)
    with pytest.warns(UserWarning, match="enable_nested_tensor is True, but "
                                         "self.use_nested_tensor is False because "
                                         "encoder_layer.norm_first was True"):
        tg.nn.TransformerEncoder(tg.nn.TransformerEncoderLayer(**layer, norm_first=True), 1)
    torch.manual_seed(6)
    tenc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(**layer), 2)
    genc = tg.nn.TransformerEncoder(tg.nn.TransformerEncoderLayer(**layer), 2)
    copy_weights(genc, tenc)
    tenc.eval()
    genc.eval()
    x, tx = rand(8, 3, 5, 8, requires_grad=False, dtype="float32")
    kpm = np.zeros((3, 5), bool)
    kpm[0, 3:] = True
    kpm[2, 1:] = True
    # a float mask counts as padding where it is nonzero (PyTorch's logical_not)
    for kp in (kpm, np.where(kpm, -1.5, 0.0).astype("float32")):
        kp, tkp = pair(kp, dtype="float32")
        with tg.no_grad(), torch.no_grad():
            out = genc(x, src_key_padding_mask=kp)
            tout = tenc(tx, src_key_padding_mask=tkp)
        close(out, tout, 1e-5)
        assert np_(out)[0, 3:].tolist() == [[0.0] * 8] * 2     # (the nested path's padding)


@pytest.mark.parametrize("name", ["post_norm", "norm_first", "gelu_batch_first"])
def test_decoder_and_transformer(name):
    kw = LAYER_CONFIGS[name]
    torch.manual_seed(8)
    tt = torch.nn.Transformer(8, 2, 2, 2, 16, 0.0, dtype=torch.float64, **kw)
    tg.manual_seed(8)
    gt = tg.nn.Transformer(8, 2, 2, 2, 16, 0.0, dtype=tg.float64, **kw)
    same_params(gt, tt)
    assert list(gt.state_dict()) == list(tt.state_dict())
    bf = kw.get("batch_first", False)
    src, tsrc = rand(9, *((3, 6, 8) if bf else (6, 3, 8)))
    tgt, ttgt = rand(10, *((3, 5, 8) if bf else (5, 3, 8)))
    tm = torch.nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    gm = tg.nn.Transformer.generate_square_subsequent_mask(5, dtype=tg.float64)
    assert np.array_equal(np_(gm), np_(tm))
    mkp = np.zeros((3, 6), bool)
    mkp[2, 4:] = True
    mkp, tmkp = pair(mkp)
    out = gt(src, tgt, tgt_mask=gm, memory_key_padding_mask=mkp, tgt_is_causal=True)
    tout = tt(tsrc, ttgt, tgt_mask=tm, memory_key_padding_mask=tmkp, tgt_is_causal=True)
    close(out, tout)
    out.sum().backward()
    tout.sum().backward()
    close(src.grad, tsrc.grad)
    close(tgt.grad, ttgt.grad)
    for (n, a), (tn, b) in zip(gt.named_parameters(), tt.named_parameters()):
        assert n == tn
        close(a.grad, b.grad)


def test_transformer_errors_and_activation():
    for L in (tg, torch):
        with pytest.raises(RuntimeError, match="activation should be relu/gelu, not elu"):
            L.nn.TransformerEncoderLayer(8, 2, activation="elu")
    same_error(lambda: tg.nn.Transformer(8, 2, 1, 1, 16)(tg.ones(3, 2, 8), tg.ones(3, 4, 8)),
               lambda: torch.nn.Transformer(8, 2, 1, 1, 16)(torch.ones(3, 2, 8),
                                                            torch.ones(3, 4, 8)))
    same_error(lambda: tg.nn.Transformer(8, 2, 1, 1, 16)(tg.ones(3, 2, 6), tg.ones(3, 2, 6)),
               lambda: torch.nn.Transformer(8, 2, 1, 1, 16)(torch.ones(3, 2, 6),
                                                            torch.ones(3, 2, 6)))


def test_encoder_layer_dropout_in_training_draws_pytorchs_masks():
    """Every dropout of a batch_first layer (attention weights, dropout1 on the attention's
    (L, N, E)-ordered output, the feed-forward ones) draws PyTorch's numbers."""
    for norm_first in (False, True):
        torch.manual_seed(0)
        tl = torch.nn.TransformerEncoderLayer(8, 2, 16, 0.3, batch_first=True,
                                              norm_first=norm_first, dtype=torch.float64)
        gl = tg.nn.TransformerEncoderLayer(8, 2, 16, 0.3, batch_first=True,
                                           norm_first=norm_first, dtype=tg.float64)
        copy_weights(gl, tl)
        x, tx = rand(3, 4, 6, 8)
        tm = torch.nn.Transformer.generate_square_subsequent_mask(6, dtype=torch.float64)
        gm = tg.tensor(np_(tm))
        tg.manual_seed(4)
        torch.manual_seed(4)
        close(gl(x, gm, is_causal=True), tl(tx, tm, is_causal=True))


# ------------------------------------------------------------------ the character model
class _CharModel:
    """A character transformer: embeddings + positions -> TransformerEncoder (norm_first)
    -> Linear, in library L."""

    def __init__(self, L, p, vocab=11, d=16, ctx=6, layers=2):
        nn = L.nn
        L.manual_seed(0)
        self.L = L
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        layer = nn.TransformerEncoderLayer(d, 4, 32, p, batch_first=True, norm_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)
        self.mods = nn.ModuleList([self.tok, self.pos, self.enc, self.head])
        self.opt = L.optim.AdamW(self.mods.parameters(), lr=1e-2)
        self.mask = nn.Transformer.generate_square_subsequent_mask(ctx)
        self.positions = L.arange(ctx)
        self.vocab = vocab

    def step(self, idx, tgt):
        L = self.L
        self.opt.zero_grad()
        x = self.tok(idx) + self.pos(self.positions)
        x = self.enc(x, mask=self.mask, is_causal=True)
        loss = L.nn.functional.cross_entropy(self.head(x).view(-1, self.vocab), tgt.view(-1))
        loss.backward()
        self.opt.step()
        return loss


@pytest.mark.parametrize("p", [0.0, 0.1])
def test_char_transformer_steps_match_pytorch_and_compile_equals_eager(p):
    r = rng(0)
    data = [(r.integers(0, 11, (4, 6)), r.integers(0, 11, (4, 6))) for _ in range(6)]
    mt, me, mc = _CharModel(torch, p), _CharModel(tg, p), _CharModel(tg, p)
    same_params(me.mods, mt.mods)
    compiled = compile_(mc.step)
    torch.manual_seed(1)
    tg.manual_seed(1)
    lt = [mt.step(torch.tensor(a), torch.tensor(b)).item() for a, b in data]
    le = [me.step(tg.tensor(a), tg.tensor(b)).item() for a, b in data]
    tg.manual_seed(1)
    with no_break():
        lc = [compiled(tg.tensor(a), tg.tensor(b)).item() for a, b in data]
    assert compiled.stats["replays"] == len(data) - 1
    np.testing.assert_allclose(le, lt, rtol=2e-5)
    assert le == lc                                 # bitwise: the same kernels in order
    for (n, a), (_, b) in zip(me.mods.named_parameters(), mc.mods.named_parameters()):
        assert np.array_equal(np_(a), np_(b)), n
    assert le[-1] < le[0]


def test_deepcopy_of_layers_and_repr():
    torch.manual_seed(0)
    tl = torch.nn.TransformerDecoderLayer(8, 2, 16)
    gl = tg.nn.TransformerDecoderLayer(8, 2, 16)
    # (LayerNorm's own repr, nn/layers.py's, leaves out PyTorch's ", bias=True")
    assert [x for x in repr(gl).splitlines() if "LayerNorm" not in x] == \
        [x for x in repr(tl).splitlines() if "LayerNorm" not in x]
    c = copy.deepcopy(gl)
    assert c.self_attn.in_proj_weight is not gl.self_attn.in_proj_weight
    assert np.array_equal(np_(c.self_attn.in_proj_weight), np_(gl.self_attn.in_proj_weight))
