"""The losses in tapegrad.nn.functional: values against NumPy references (float64), gradients
by finite differences (gradcheck, float64), and values, gradients, grad_fn names and errors
against PyTorch (float32); cross_entropy's plain and general kernels (non-finite logits,
lines of any width, layouts off the one-call path).

PyTorch is optional: a test that compares with it imports it with pytest.importorskip.
"""
import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad.testing import gradcheck
from tests.helpers import as_tensor, assert_close, assert_same_error, functional, raised, rng

REDUCTIONS = ("none", "mean", "sum")


# ------------------------------------------------------------------ NumPy references
def _reduce(loss, reduction, shape=None, denom=None):
    if reduction == "none":
        return loss if shape is None else loss.reshape(shape)
    if reduction == "sum":
        return loss.sum()
    with np.errstate(invalid="ignore"):                  # all targets ignored: 0 / 0
        return loss.sum() / (loss.size if denom is None else denom)


def ref_mse_loss(x, y, reduction="mean"):
    return _reduce((x - y) ** 2, reduction)


def ref_l1_loss(x, y, reduction="mean"):
    return _reduce(np.abs(x - y), reduction)


def ref_huber_loss(x, y, reduction="mean", delta=1.0):
    d = np.abs(x - y)
    return _reduce(np.where(d < delta, 0.5 * d ** 2, delta * (d - 0.5 * delta)), reduction)


def ref_smooth_l1_loss(x, y, reduction="mean", beta=1.0):
    d = np.abs(x - y)
    loss = d if beta == 0 else np.where(d < beta, 0.5 * d ** 2 / beta, d - 0.5 * beta)
    return _reduce(loss, reduction)


def ref_binary_cross_entropy(p, y, weight=None, reduction="mean"):
    with np.errstate(divide="ignore"):
        log_p, log_q = np.maximum(np.log(p), -100), np.maximum(np.log(1 - p), -100)
    w = 1.0 if weight is None else weight
    return _reduce(-w * (y * log_p + (1 - y) * log_q), reduction)


def ref_binary_cross_entropy_with_logits(x, y, weight=None, reduction="mean",
                                         pos_weight=None):
    w = 1.0 if weight is None else weight
    pw = 1.0 if pos_weight is None else pos_weight
    # -[pw y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))], with log sigmoid(x) = -softplus(-x)
    return _reduce(w * (pw * y * np.logaddexp(0, -x) + (1 - y) * np.logaddexp(0, x)), reduction)


def _classes_last(a):
    """(N, C, d1, ...) -> (N * d1 * ..., C); one sample (C,) -> (1, C)."""
    return a[None] if a.ndim == 1 else np.moveaxis(a, 1, -1).reshape(-1, a.shape[1])


def _out_shape(x):
    return () if x.ndim == 1 else (x.shape[0],) + x.shape[2:]


def _class_index_loss(logp, x, t, weight, ignore_index, reduction, eps):
    m, c = logp.shape
    w = np.ones(c) if weight is None else weight
    t = np.asarray(t).reshape(-1)
    keep = t != ignore_index
    tc = np.where(keep, t, 0)
    nll = -w[tc] * logp[np.arange(m), tc]
    smooth = -(logp * w).sum(1)
    loss = np.where(keep, (1 - eps) * nll + eps / c * smooth, 0.0)
    return _reduce(loss, reduction, _out_shape(x), denom=np.where(keep, w[tc], 0.0).sum())


def ref_nll_loss(x, t, weight=None, ignore_index=-100, reduction="mean"):
    return _class_index_loss(_classes_last(x), x, t, weight, ignore_index, reduction, 0.0)


def ref_cross_entropy(x, t, weight=None, ignore_index=-100, reduction="mean",
                      label_smoothing=0.0):
    z = _classes_last(x)
    mx = z.max(1, keepdims=True)
    logp = z - mx - np.log(np.exp(z - mx).sum(1, keepdims=True))
    if t.dtype.kind != "f":
        return _class_index_loss(logp, x, t, weight, ignore_index, reduction, label_smoothing)
    c = z.shape[1]
    q = _classes_last(t) * (1 - label_smoothing) + label_smoothing / c
    w = np.ones(c) if weight is None else weight
    return _reduce(-(logp * q * w).sum(1), reduction, _out_shape(x))


REFS = {name[4:]: fn for name, fn in list(globals().items()) if name.startswith("ref_")}


# ------------------------------------------------------------------ loss configurations
X = rng(1).standard_normal((3, 4))
Y = rng(2).standard_normal((3, 4))
P = rng(3).uniform(0.1, 0.9, (3, 4))            # probabilities, away from the clamp
T01 = rng(4).uniform(0.0, 1.0, (3, 4))          # soft binary targets
W = rng(5).uniform(0.5, 2.0, (3, 4))
PW = rng(6).uniform(0.5, 2.0, 4)                # pos_weight broadcasts over the last dim

POINTWISE = [
    ("mse_loss", (X, Y), {}),
    ("l1_loss", (X, Y), {}),
    ("huber_loss", (X, Y), {}),
    ("huber_loss", (X, Y), {"delta": 0.7}),
    ("smooth_l1_loss", (X, Y), {"beta": 0.7}),
    ("smooth_l1_loss", (X, Y), {"beta": 0.0}),
    ("binary_cross_entropy", (P, T01), {}),
    ("binary_cross_entropy", (P, T01), {"weight": W}),
    ("binary_cross_entropy_with_logits", (3 * X, T01), {}),
    ("binary_cross_entropy_with_logits", (3 * X, T01), {"weight": W}),
    ("binary_cross_entropy_with_logits", (3 * X, T01), {"pos_weight": PW}),
    ("binary_cross_entropy_with_logits", (3 * X, T01), {"weight": W, "pos_weight": PW}),
]

NCLS = 5
CW = rng(7).uniform(0.5, 2.0, NCLS)              # class weights
CLASS_SHAPES = {"1d": ((NCLS,), ()), "2d": ((4, NCLS), (4,)),
                "4d": ((2, NCLS, 3, 2), (2, 3, 2))}


def _class_configs():
    """(id, fn, input, target, kwargs) for nll_loss and cross_entropy."""
    for sid, (xshape, tshape) in CLASS_SHAPES.items():
        x = rng(8).standard_normal(xshape)
        t = rng(9).integers(0, NCLS, tshape)
        some_ignored = t.copy()
        some_ignored.reshape(-1)[1:2] = -100
        custom = t.copy()
        custom.reshape(-1)[:1] = 1
        e = np.exp(rng(10).standard_normal(xshape))
        probs = e / e.sum(0 if len(xshape) == 1 else 1, keepdims=True)
        common = [
            ("plain", t, {}),
            ("weight", t, {"weight": CW}),
            ("all_ignored", np.full(tshape, -100), {}),
            ("all_ignored_custom", np.full(tshape, 3), {"ignore_index": 3, "weight": CW}),
        ]
        if t.ndim:          # a lone 0-d target is either ignored or not: covered above
            common += [
                ("ignore", some_ignored, {}),
                ("ignore_weight", some_ignored, {"weight": CW}),
                ("ignore_custom_weight", custom, {"ignore_index": 1, "weight": CW}),
            ]
        smoothing = [
            ("smoothing", t, {"label_smoothing": 0.2}),
            ("smoothing_full_weight", t, {"label_smoothing": 1.0, "weight": CW}),
            ("probs", probs, {}),
            ("probs_smoothing", probs, {"label_smoothing": 0.3}),
            ("probs_smoothing_weight", probs, {"label_smoothing": 0.3, "weight": CW}),
        ]
        if t.ndim:
            smoothing.append(("smoothing_weight_ignore", some_ignored,
                              {"label_smoothing": 0.2, "weight": CW}))
        for cid, target, kw in common:
            yield f"nll_loss-{sid}-{cid}", "nll_loss", np.log(probs), target, kw
        for cid, target, kw in common + smoothing:
            yield f"cross_entropy-{sid}-{cid}", "cross_entropy", x, target, kw


def _loss_cases():
    for fn, inputs, kw in POINTWISE:
        for red in REDUCTIONS:
            opts = "-".join(k if isinstance(v, np.ndarray) else f"{k}={v}"
                            for k, v in kw.items())
            yield pytest.param((fn, inputs, dict(kw, reduction=red)),
                               id="-".join(filter(None, (fn, opts, red))))
    for cid, fn, x, t, kw in _class_configs():
        for red in REDUCTIONS:
            yield pytest.param((fn, (x, t), dict(kw, reduction=red)), id=f"{cid}-{red}")


LOSS_CASES = list(_loss_cases())


def make_loss(L, case, float_dtype="float64"):
    """(loss, input tensors) of a case in library L; float inputs require grad."""
    fn, inputs, kw = case
    ins = [as_tensor(L, a, float_dtype, requires_grad=np.asarray(a).dtype.kind == "f")
           for a in inputs]
    kws = {k: as_tensor(L, v, float_dtype) if isinstance(v, np.ndarray) else v
           for k, v in kw.items()}
    return getattr(functional(L), fn)(*ins, **kws), ins, kws


# ------------------------------------------------------------------ losses: values, grads
@pytest.mark.parametrize("case", LOSS_CASES)
def test_loss_values_match_numpy(case):
    fn, inputs, kw = case
    loss, _, _ = make_loss(tg, case)
    expected = np.asarray(REFS[fn](*inputs, **kw))
    assert loss.dtype is tg.float64 and loss.shape == expected.shape
    np.testing.assert_allclose(loss.detach().numpy(), expected, rtol=1e-10, atol=1e-12,
                               equal_nan=True)


@pytest.mark.parametrize("case", LOSS_CASES)
def test_loss_gradcheck(case):
    """Input gradient, and the target's where it is a float tensor (PyTorch's rule)."""
    fn, _, _ = case
    loss, ins, kws = make_loss(tg, case)
    if np.isnan(loss.detach().numpy()).any():           # mean over all-ignored targets
        loss.backward()
        assert ins[1].grad is None
        np.testing.assert_array_equal(ins[0].grad.numpy(), 0.0)
        return
    assert gradcheck(lambda *t: getattr(F, fn)(*t, **kws), ins) is True


@pytest.mark.parametrize("case", LOSS_CASES)
def test_loss_matches_torch(case):
    """float32 values and the gradients of every float input, with a random upstream
    gradient (so reduction='none' checks each element's)."""
    torch = pytest.importorskip("torch")
    ours, o_in, _ = make_loss(tg, case, "float32")
    theirs, t_in, _ = make_loss(torch, case, "float32")
    assert ours.dtype is tg.float32
    assert_close(ours.detach().numpy(), theirs.detach().numpy())
    g = rng(11).standard_normal(tuple(theirs.shape)).astype(np.float32)
    ours.backward(tg.tensor(g))
    theirs.backward(torch.tensor(g))
    for o, t in zip(o_in, t_in):
        if t.requires_grad:
            assert o.grad is not None and o.grad.dtype is tg.float32
            assert_close(o.grad.numpy(), t.grad.numpy())


# cross_entropy is one fused row in tapegrad (log_softmax + nll, label smoothing included),
# where PyTorch composes label smoothing (AddBackward0): not compared. PyTorch's mean over
# class probabilities divides by a C++ Scalar (DivBackward1), Python's `/` gives DivBackward0.
def _grad_fn_name(loss):
    name = loss.grad_fn.name()
    return "DivBackward0" if name == "DivBackward1" else name


@pytest.mark.parametrize("fn", ["mse_loss", "l1_loss", "huber_loss", "smooth_l1_loss",
                                "binary_cross_entropy", "binary_cross_entropy_with_logits",
                                "nll_loss", "cross_entropy"])
def test_loss_grad_fn_matches_torch(fn):
    torch = pytest.importorskip("torch")
    wrong = []
    for p in LOSS_CASES:
        case = p.values[0]
        if case[0] != fn or ("label_smoothing" in case[2] and case[1][1].dtype.kind != "f"):
            continue
        ours = _grad_fn_name(make_loss(tg, case, "float32")[0])
        theirs = _grad_fn_name(make_loss(torch, case, "float32")[0])
        if ours != theirs:
            wrong.append(f"{p.id}: {ours} (PyTorch: {theirs})")
    assert not wrong, "\n".join(wrong)


GRAD_FNS = [
    ("mse_loss", (X, Y), {}, "MseLossBackward0"),
    ("l1_loss", (X, Y), {}, "MeanBackward0"),
    ("l1_loss", (X, Y), {"reduction": "sum"}, "SumBackward0"),
    ("l1_loss", (X, Y), {"reduction": "none"}, "AbsBackward0"),
    ("huber_loss", (X, Y), {"delta": 0.5}, "HuberLossBackward0"),
    ("smooth_l1_loss", (X, Y), {"beta": 0.5}, "SmoothL1LossBackward0"),
    ("binary_cross_entropy", (P, T01), {"weight": W}, "BinaryCrossEntropyBackward0"),
    ("binary_cross_entropy_with_logits", (X, T01), {"pos_weight": PW},
     "BinaryCrossEntropyWithLogitsBackward0"),
    ("nll_loss", (X, np.array([0, 3, 1])), {}, "NllLossBackward0"),
    ("cross_entropy", (X, np.array([0, 3, 1])), {"weight": CW[:4]}, "NllLossBackward0"),
    ("cross_entropy", (X[0], np.array(2)), {}, "NllLossBackward0"),
]


@pytest.mark.parametrize("fn,inputs,kw,name", GRAD_FNS,
                         ids=[f"{g[0]}-{g[3]}" for g in GRAD_FNS])
def test_loss_grad_fn_names(fn, inputs, kw, name):
    assert make_loss(tg, (fn, inputs, kw))[0].grad_fn.name() == name


def test_bce_clamps_the_log_at_minus_100():
    """p = 0 or 1 gives finite losses (|log| clamped at 100) and finite input gradients."""
    p = tg.tensor([0.0, 1.0, 0.0, 1.0, 0.5], dtype=tg.float64, requires_grad=True)
    y = tg.tensor([0.0, 1.0, 1.0, 0.0, 0.25], dtype=tg.float64)
    loss = F.binary_cross_entropy(p, y, reduction="none")
    np.testing.assert_allclose(loss.detach().numpy(), [0.0, 0.0, 100.0, 100.0, np.log(2)],
                               rtol=1e-12)
    assert F.binary_cross_entropy(p, y, reduction="sum").item() == pytest.approx(200 + np.log(2))
    loss.sum().backward()
    assert np.isfinite(p.grad.numpy()).all()
    np.testing.assert_allclose(p.grad.numpy()[[0, 1, 4]], [0.0, 0.0, 1.0], rtol=1e-12)


@pytest.mark.parametrize("fn", ["binary_cross_entropy", "binary_cross_entropy_with_logits"])
def test_bce_at_the_boundaries_matches_torch(fn):
    """Probabilities 0 and 1, and logits up to 1e4: values and both gradients."""
    torch = pytest.importorskip("torch")
    if fn == "binary_cross_entropy":
        x, y = np.array([0.0, 1.0, 0.0, 1.0, 0.5]), np.array([0.0, 1.0, 1.0, 0.0, 0.25])
        kws = [{}]
    else:
        x = np.array([-1e4, -200.0, -50.0, 0.0, 50.0, 200.0, 1e4])
        y = np.array([1.0, 1.0, 0.0, 0.5, 1.0, 0.0, 0.0])
        kws = [{}, {"pos_weight": np.full(7, 2.0)}]
    for kw in kws:
        case = (fn, (x, y), dict(kw, reduction="none"))
        (ours, o_in, _), (theirs, t_in, _) = make_loss(tg, case, "float32"), \
            make_loss(torch, case, "float32")
        assert np.isfinite(ours.detach().numpy()).all()
        assert_close(ours.detach().numpy(), theirs.detach().numpy())
        ours.sum().backward()
        theirs.sum().backward()
        assert_close(o_in[0].grad.numpy(), t_in[0].grad.numpy())
        assert_close(o_in[1].grad.numpy(), t_in[1].grad.numpy())


@pytest.mark.parametrize("pos_weight", [None, 3.0])
def test_bce_with_logits_large_logits_stay_finite(pos_weight):
    xs, ys = np.array([-1e4, -200.0, 0.0, 200.0, 1e4]), np.array([1.0, 1.0, 0.5, 0.0, 0.0])
    x = tg.tensor(xs, dtype=tg.float32, requires_grad=True)
    pw = None if pos_weight is None else tg.tensor([pos_weight])
    loss = F.binary_cross_entropy_with_logits(x, tg.tensor(ys, dtype=tg.float32),
                                              reduction="none", pos_weight=pw)
    expected = ref_binary_cross_entropy_with_logits(xs, ys, reduction="none",
                                                    pos_weight=pos_weight)
    np.testing.assert_allclose(loss.detach().numpy(), expected, rtol=1e-6)
    loss.sum().backward()
    assert np.isfinite(x.grad.numpy()).all()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("wants", ["x", "y", "both", "same"])
def test_mse_in_place_reads_equal_the_general_path(dtype, reduction, wants):
    """mse_loss reads contiguous operands in place; strided ones (transposed views) go
    through float64 copies. Both must give bitwise the same loss and gradients."""
    r = rng(7)
    xn = r.standard_normal((5, 3)).astype(dtype)
    yn = r.standard_normal((5, 3)).astype(dtype)
    out = []
    for strided in (False, True):
        def leaf(a, grad):
            if strided:     # a leaf holding the transpose, seen through .t(): not contiguous
                base = tg.tensor(a.T.copy(), requires_grad=grad)
                return base, base.t()
            t = tg.tensor(a, requires_grad=grad)
            return t, t
        bx, x = leaf(xn, wants in ("x", "both", "same"))
        by, y = leaf(yn, wants in ("y", "both"))
        if wants == "same":
            by, y = bx, x
        assert x.is_contiguous() != strided
        loss = F.mse_loss(x, y, reduction=reduction)
        loss.backward()
        grads = [None if b.grad is None else
                 (b.grad.t() if strided else b.grad).detach().numpy().copy() for b in (bx, by)]
        out.append((loss.item(), grads))
    (l0, g0), (l1, g1) = out
    assert l0 == l1
    d = xn.astype(np.float64) - yn.astype(np.float64)
    want = (d * d).sum() / (d.size if reduction == "mean" else 1)
    assert l0 == (0.0 if wants == "same" else pytest.approx(want, rel=1e-6))
    for a, b in zip(g0, g1):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.dtype == np.dtype(dtype)
            np.testing.assert_array_equal(a, b)
    scale = 2.0 / (d.size if reduction == "mean" else 1)
    if wants in ("x", "both"):
        np.testing.assert_allclose(g0[0], scale * d, rtol=1e-6)
    if wants in ("y", "both"):
        np.testing.assert_allclose(g0[1], -scale * d, rtol=1e-6)
    if wants == "same":
        np.testing.assert_array_equal(g0[0], np.zeros_like(xn))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_plain_cross_entropy_equals_the_general_path(dtype, reduction):
    """cross_entropy without weights or smoothing on N x C logits reads them in place (exps
    in their dtype); all-ones class weights send the same call through the general path
    (float64 copies). Losses and gradients agree to the dtype's round-off, ignored samples
    and extreme logits included; against the closed form in float64."""
    r = rng(8)
    xn = (3 * r.standard_normal((7, 5))).astype(dtype)
    xn[1, 2], xn[2, :] = 80.0, -80.0
    xn[3, 0] = -np.inf
    t = r.integers(0, 5, 7)
    t[4] = 3
    res = []
    for weight in (None, tg.tensor(np.full(5, 1.0, dtype))):
        x = tg.tensor(xn, requires_grad=True)
        loss = F.cross_entropy(x, tg.tensor(t), weight=weight, ignore_index=3,
                               reduction=reduction)
        loss.backward()
        res.append((loss.item(), x.grad.numpy().copy()))
    (l0, g0), (l1, g1) = res
    tol = 1e-6 if dtype == "float32" else 1e-13
    assert l0 == pytest.approx(l1, rel=tol)
    np.testing.assert_allclose(g0, g1, rtol=tol, atol=tol)
    x64 = xn.astype(np.float64)
    m = x64.max(1, keepdims=True)
    p = np.exp(x64 - m) / np.exp(x64 - m).sum(1, keepdims=True)
    keep = t != 3
    lse = (m + np.log(np.exp(x64 - m).sum(1, keepdims=True)))[:, 0]
    want = (lse - x64[np.arange(7), t])[keep].sum() / (keep.sum() if reduction == "mean" else 1)
    assert l0 == pytest.approx(want, rel=tol)
    onehot = np.eye(5)[t]
    gw = (p - onehot) * keep[:, None] / (keep.sum() if reduction == "mean" else 1)
    np.testing.assert_allclose(g0, gw, rtol=tol, atol=tol)


def test_losses_on_mixed_float_dtypes_promote():
    a = tg.tensor([1.0, 2.0], requires_grad=True)
    b = tg.tensor([0.5, 3.0], dtype=tg.float64, requires_grad=True)
    loss = F.mse_loss(a, b)
    assert loss.dtype is tg.float64 and loss.item() == pytest.approx(0.625)
    loss.backward()
    assert a.grad.dtype is tg.float32 and b.grad.dtype is tg.float64
    np.testing.assert_allclose(a.grad.numpy(), [0.5, -1.0])
    np.testing.assert_allclose(b.grad.numpy(), [-0.5, 1.0])


# ------------------------------------------------------------------ losses: errors
def _bad_reduction(name, *shapes):
    def prog(L):
        ins = [L.full(s, 0.5) if isinstance(s, tuple) else s(L) for s in shapes]
        return getattr(functional(L), name)(*ins, reduction="mean_")
    return prog


# (id, program, exception type, PyTorch's message with "torch" spelled "tapegrad")
LOSS_ERRORS = [
    ("target_out_of_range",
     lambda L: functional(L).cross_entropy(L.zeros(3, 5), L.tensor([0, 5, 1])),
     IndexError, "Target 5 is out of bounds."),
    ("target_negative",
     lambda L: functional(L).nll_loss(L.zeros(3, 5), L.tensor([0, -1, 1])),
     IndexError, "Target -1 is out of bounds."),
    ("target_out_of_range_1d", lambda L: functional(L).cross_entropy(L.zeros(5), L.tensor(5)),
     IndexError, "Target 5 is out of bounds."),
    ("target_out_of_range_4d",
     lambda L: functional(L).nll_loss(L.zeros(2, 5, 2, 2), L.full((2, 2, 2), 7)),
     IndexError, "Target 7 is out of bounds."),
    ("batch_mismatch", lambda L: functional(L).cross_entropy(L.zeros(3, 5), L.tensor([0, 1])),
     ValueError, "Expected input batch_size (3) to match target batch_size (2)."),
    ("batch_mismatch_4d",
     lambda L: functional(L).nll_loss(L.zeros(2, 5, 2, 2), L.zeros(3, 2, 2, dtype=L.int64)),
     ValueError, "Expected input batch_size (2) to match target batch_size (3)."),
    ("class_weight_shape",
     lambda L: functional(L).cross_entropy(L.zeros(3, 5), L.tensor([0, 1, 2]), weight=L.ones(4)),
     RuntimeError, "weight tensor should be defined either for all 5 classes or no classes "
                   "but got weight tensor of shape: [4]"),
    ("class_weight_2d",
     lambda L: functional(L).nll_loss(L.zeros(3, 5), L.tensor([0, 1, 2]), weight=L.ones(5, 1)),
     RuntimeError, "weight tensor should be defined either for all 5 classes or no classes "
                   "but got weight tensor of shape: [5, 1]"),
    ("bce_weight_shape",
     lambda L: functional(L).binary_cross_entropy(L.full((3,), 0.5), L.zeros(3), weight=L.ones(4)),
     RuntimeError, "Attempting to broadcast a dimension of length 4 at -1! Mismatching "
                   "argument at index 1 had tapegrad.Size([4]); but expected shape should be "
                   "broadcastable to [3]"),
    ("bce_logits_weight_shape",
     lambda L: functional(L).binary_cross_entropy_with_logits(L.zeros(3), L.zeros(3),
                                                        weight=L.ones(4)),
     RuntimeError, "The size of tensor a (3) must match the size of tensor b (4) at "
                   "non-singleton dimension 0"),
    ("bce_logits_pos_weight_shape",
     lambda L: functional(L).binary_cross_entropy_with_logits(L.zeros(2, 3), L.zeros(2, 3),
                                                        pos_weight=L.ones(4)),
     RuntimeError, "The size of tensor a (4) must match the size of tensor b (3) at "
                   "non-singleton dimension 1"),
    ("bce_input_above_1",
     lambda L: functional(L).binary_cross_entropy(L.tensor([0.5, 1.5]), L.zeros(2)),
     RuntimeError, "all elements of input should be between 0 and 1"),
    ("bce_input_below_0",
     lambda L: functional(L).binary_cross_entropy(L.tensor([-0.1, 0.5]), L.zeros(2)),
     RuntimeError, "all elements of input should be between 0 and 1"),
    ("bce_input_nan",
     lambda L: functional(L).binary_cross_entropy(L.tensor([float("nan"), 0.5]), L.zeros(2)),
     RuntimeError, "all elements of input should be between 0 and 1"),
    ("mse_shapes_do_not_broadcast", lambda L: functional(L).mse_loss(L.zeros(3), L.zeros(2)),
     RuntimeError, "The size of tensor a (3) must match the size of tensor b (2) at "
                   "non-singleton dimension 0"),
] + [
    (f"bad_reduction_{name}", _bad_reduction(name, *shapes), ValueError,
     "mean_ is not a valid value for reduction")
    for name, shapes in [
        ("mse_loss", ((3,), (3,))), ("l1_loss", ((3,), (3,))), ("huber_loss", ((3,), (3,))),
        ("smooth_l1_loss", ((3,), (3,))), ("binary_cross_entropy", ((3,), (3,))),
        ("binary_cross_entropy_with_logits", ((3,), (3,))),
        ("nll_loss", ((3, 5), lambda L: L.tensor([0, 1, 2]))),
        ("cross_entropy", ((3, 5), lambda L: L.tensor([0, 1, 2]))),
    ]
]
ERROR_IDS = [e[0] for e in LOSS_ERRORS]


@pytest.mark.parametrize("name,prog,exc,msg", LOSS_ERRORS, ids=ERROR_IDS)
def test_loss_errors(name, prog, exc, msg):
    assert raised(prog, tg) == (exc, msg)


@pytest.mark.parametrize("name,prog,exc,msg", LOSS_ERRORS, ids=ERROR_IDS)
def test_loss_errors_match_torch(name, prog, exc, msg):
    assert_same_error(prog)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("where", ["max", "other", "target"])
@pytest.mark.parametrize("reduction, width", [("none", 4), ("sum", 4), ("sum", 40)])
def test_cross_entropy_with_non_finite_logits_matches_torch(bad, where, reduction, width):
    """The per-line maximum ignores nothing that matters: logits holding nan or +-inf (at
    the line's maximum, elsewhere, at the target class) give PyTorch's losses and
    gradients (nan where PyTorch has nan), through the general kernels (reduction none)
    and the plain ones (sum), whose line maximum is a vectorised maxnum on lines as wide
    as 40."""
    torch = pytest.importorskip("torch")
    x = np.full((3, width), -3.0)
    x[:, :4] = [[1.0, 3.0, -2.0, 0.5], [0.0, 2.0, 1.0, -1.0], [4.0, 1.0, 2.0, 3.0]]
    col = {"max": 1, "other": 2, "target": 3}[where]
    x[0, col] = bad
    y = np.array([3, 1, 0])
    out = []
    for L in (tg, torch):
        xt = L.tensor(x, requires_grad=True)
        loss = L.nn.functional.cross_entropy(xt, L.tensor(y), reduction=reduction)
        if L is tg:
            assert _op_name(loss) == ("cross_entropy" if reduction == "none"
                                      else "cross_entropy_plain")
        loss.sum().backward()
        out.append((loss.detach().numpy(), xt.grad.numpy()))
    np.testing.assert_allclose(out[0][0], out[1][0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-12, atol=1e-12)


def _op_name(t):
    from tapegrad._engine import layout as L
    from tapegrad._engine.state import engine
    from tapegrad.ops.registry import OPS
    return OPS[int(engine().tape[t.grad_fn._row, L.R_OP])].name


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(3, 1), (5, 17), (16, 300), (3, 2049)])
def test_cross_entropy_plain_lines_of_any_width(dtype, shape):
    """The plain kernels run each step over a line as a vectorised loop (the max, x - max,
    the exps, the sum in the logits' dtype), with scalar remainders: lines of 1 to 2049
    classes, one sample ignored, give the float64 log-softmax's loss and gradient."""
    N, K = shape
    r = rng(7)
    X = (r.standard_normal(shape) * 5).astype(dtype)
    target = r.integers(0, K, N)
    target[1] = -100
    keep = target != -100
    x64 = X.astype(np.float64)
    logp = x64 - x64.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    onehot = np.zeros(shape)
    onehot[np.arange(N)[keep], target[keep]] = 1
    tol = 2e-6 if dtype == "float32" else 1e-12
    for reduction in ("mean", "sum"):
        x = tg.tensor(X, requires_grad=True)
        loss = F.cross_entropy(x, tg.tensor(target), reduction=reduction)
        assert _op_name(loss) == "cross_entropy_plain"
        (loss * 3.0).backward()
        div = keep.sum() if reduction == "mean" else 1
        ref = -logp[np.arange(N)[keep], target[keep]].sum() / div
        grad = 3.0 * (np.exp(logp) - onehot) * keep[:, None] / div
        assert abs(loss.item() - ref) <= tol * abs(ref)
        np.testing.assert_allclose(x.grad.numpy(), grad, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name, kw", [("mse_loss", {}), ("huber_loss", {"delta": 0.5}),
                                      ("smooth_l1_loss", {"beta": 0.5}),
                                      ("smooth_l1_loss", {"beta": 0.0}),
                                      ("binary_cross_entropy_with_logits", {})])
def test_regression_losses_in_place_and_general_against_torch(dtype, name, kw):
    """mse, huber, smooth L1 and BCE with logits read contiguous operands in place for a
    reduced loss and go through float64 copies otherwise (transposed operands, reduction
    none), in loops of their own per loss: both give PyTorch's values and gradients (the
    target's too), at d = +-0, at |d| = delta / beta exactly, and for NaN."""
    torch = pytest.importorskip("torch")
    r = rng(21)
    X = r.standard_normal((40, 9)).astype(dtype)
    Y = r.standard_normal((40, 9)).astype(dtype)
    X[0, :4] = [0.0, -0.0, 0.5, np.nan]
    Y[0, :4] = [0.0, 0.0, 0.0, 1.0]
    X[1, 0], Y[1, 0] = 1.25, 0.75
    tol = 2e-6 if dtype == "float32" else 1e-13
    for reduction in ("none", "mean", "sum"):
        for transposed in (False, True):
            out = []
            for L in (tg, torch):
                x = L.tensor(X.T.copy() if transposed else X, requires_grad=True)
                y = L.tensor(Y.T.copy() if transposed else Y, requires_grad=True)
                xv, yv = (x.t(), y.t()) if transposed else (x, y)
                loss = getattr(L.nn.functional, name)(xv, yv, reduction=reduction, **kw)
                (loss * L.tensor(np.cos(np.arange(loss.numel())).reshape(
                    tuple(loss.shape)).astype(dtype))).sum().backward()
                out.append((loss.detach().numpy(), x.grad.numpy(), y.grad.numpy()))
            for a, b in zip(*out):
                np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def test_cross_entropy_layouts_off_the_one_call_path():
    """cross_entropy's training-step call goes to the engine in one call when the logits
    and targets are contiguous; transposed logits, strided targets, a NumPy integer
    ignore_index and an empty batch take the general path, with the same values."""
    r = rng(11)
    X = r.standard_normal((6, 4))
    target = np.array([3, 0, 2, 2, 1, 0])
    logp = X - X.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    ref = -logp[np.arange(6), target].mean()
    wide_t = tg.tensor(np.stack([target, target], 1))[:, 0]         # stride 2
    cases = [(tg.tensor(X), tg.tensor(target), -100),
             (tg.tensor(np.ascontiguousarray(X.T)).t(), tg.tensor(target), -100),
             (tg.tensor(X), wide_t, -100),
             (tg.tensor(X), tg.tensor(target), np.int64(-100))]
    for x, t, ign in cases:
        x.requires_grad_(x.is_leaf)
        loss = F.cross_entropy(x, t, ignore_index=ign)
        assert _op_name(loss) == "cross_entropy_plain"
        assert abs(loss.item() - ref) <= 1e-12
    with tg.no_grad():
        loss = F.cross_entropy(tg.tensor(X), tg.tensor(target), reduction="sum")
    assert loss.grad_fn is None and abs(loss.item() + logp[np.arange(6), target].sum()) < 1e-12
    empty = F.cross_entropy(tg.zeros(0, 4, dtype=tg.float64), tg.tensor(np.zeros(0, np.int64)))
    assert np.isnan(empty.item())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cross_entropy_plain_kernels_match_the_general_ones(dtype):
    """A training step's call (N x C logits, no class weights, no smoothing, a reduced
    loss) runs cross_entropy_plain's kernels; every other call the general ones. Both
    give the same loss and gradient (weights of ones take the general path), and the
    node is NllLossBackward0 either way."""
    r = rng(3)
    X = r.standard_normal((7, 5)).astype(dtype)
    target = tg.tensor(np.array([0, 4, 2, 2, -100, 1, 3]))
    for reduction in ("mean", "sum"):
        out = []
        for weight in (None, tg.ones(5, dtype=getattr(tg, dtype))):
            x = tg.tensor(X, requires_grad=True)
            loss = F.cross_entropy(x, target, weight=weight, reduction=reduction)
            assert loss.grad_fn.name() == "NllLossBackward0"
            assert _op_name(loss) == ("cross_entropy_plain" if weight is None
                                      else "cross_entropy")
            (loss * 3.0).backward()
            out.append((loss.item(), x.grad.numpy().copy()))
        (l0, g0), (l1, g1) = out
        tol = 1e-6 if dtype == "float32" else 1e-12
        assert abs(l0 - l1) <= tol * abs(l1)
        np.testing.assert_allclose(g0, g1, rtol=tol, atol=tol)
        # the reference: log-softmax by hand, the ignored sample (-100) left out
        x64 = X.astype(np.float64)
        logp = x64 - x64.max(1, keepdims=True)
        logp -= np.log(np.exp(logp).sum(1, keepdims=True))
        keep = [i for i, c in enumerate(target.tolist()) if c != -100]
        losses = [-logp[i, target.tolist()[i]] for i in keep]
        ref = sum(losses) / (len(keep) if reduction == "mean" else 1)
        assert abs(l0 - ref) <= 1e-5 * abs(ref)
    x = tg.tensor(X, requires_grad=True)
    assert _op_name(F.cross_entropy(x, target, reduction="none")) == "cross_entropy"
    assert _op_name(F.cross_entropy(x, target, label_smoothing=0.1)) == "cross_entropy"
    with pytest.raises(IndexError, match="Target 5 is out of bounds."):
        F.cross_entropy(x, tg.tensor(np.array([0, 5, 0, 0, 0, 0, 0])))
