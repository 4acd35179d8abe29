"""Losses, dtype promotion and casts.

1. The losses in tapegrad.nn.functional: values against NumPy references (float64),
   gradients by finite differences (gradcheck, float64), and values, gradients, grad_fn
   names and errors against PyTorch (float32).
2. PyTorch's type promotion between float32, float64, int64, bool and Python scalars,
   integer arithmetic, gradients through mixed float32/float64 ops, in-place rules.
3. Integer and bool tensors: no gradients, casts, unary ops and reductions.
4. A cold start compiles only the kernels the program uses.

PyTorch is optional: a test that compares with it imports it with pytest.importorskip.
"""
import json
import operator
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad.testing import gradcheck

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REDUCTIONS = ("none", "mean", "sum")


# ------------------------------------------------------------------ shared helpers
def rng(seed=0):
    return np.random.default_rng(seed)


def dtype_name(dt):
    """'float32' for tapegrad.float32 and torch.float32 alike."""
    return str(dt).rsplit(".", 1)[-1]


def as_tensor(L, a, float_dtype="float64", requires_grad=False):
    """A tapegrad or torch (L) tensor of NumPy array a; float arrays become float_dtype."""
    a = np.asarray(a)
    name = float_dtype if a.dtype.kind == "f" else {"i": "int64", "b": "bool"}[a.dtype.kind]
    return L.tensor(a.astype(name), dtype=getattr(L, name), requires_grad=requires_grad)


def functional(L):
    """tapegrad.nn.functional or torch.nn.functional."""
    return F if L is tg else L.nn.functional


def assert_close(ours, theirs, rtol=1e-5):
    """float32 agreement: relative, with an absolute floor scaled to the values' size."""
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    assert ours.shape == theirs.shape
    finite = np.abs(theirs[np.isfinite(theirs)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=1e-6 * scale, equal_nan=True)


def raised(prog, L):
    """(exception type, message) that prog(L) raises, or (None, None)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prog(L)
    except Exception as e:      # noqa: BLE001
        return type(e), str(e)
    return None, None


def assert_same_error(prog):
    """prog raises in both libraries, with the same type and PyTorch's message."""
    torch = pytest.importorskip("torch")
    t1, m1 = raised(prog, tg)
    t2, m2 = raised(prog, torch)
    assert t2 is not None, "PyTorch does not raise"
    assert (t1, m1.replace("tapegrad", "torch") if m1 else m1) == (t2, m2)


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


# ------------------------------------------------------------------ dtype promotion
# operand kinds: dimensioned tensors, 0-d tensors, Python scalars
KINDS = {
    "f32": lambda L: L.tensor([1.5, 2.0], dtype=L.float32),
    "f64": lambda L: L.tensor([1.5, 2.0], dtype=L.float64),
    "i64": lambda L: L.tensor([3, 2]),
    "bool": lambda L: L.tensor([True, False]),
    "f32_0d": lambda L: L.tensor(1.5, dtype=L.float32),
    "f64_0d": lambda L: L.tensor(2.5, dtype=L.float64),
    "i64_0d": lambda L: L.tensor(3),
    "bool_0d": lambda L: L.tensor(True),
    "int": lambda L: 2,
    "float": lambda L: 0.5,
    "py_bool": lambda L: True,
}
SCALARS = ("int", "float", "py_bool")
PAIRS = [(a, b) for a in KINDS for b in KINDS if not (a in SCALARS and b in SCALARS)]
OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
       "**": operator.pow, "<": operator.lt, "==": operator.eq, ">=": operator.ge}


def _outcome(L, op, ka, kb):
    """('float32', values) or (exception type, message) of KINDS[ka] op KINDS[kb]."""
    try:
        r = OPS[op](KINDS[ka](L), KINDS[kb](L))
    except Exception as e:      # noqa: BLE001
        return type(e).__name__, str(e).replace("tapegrad", "torch")
    return dtype_name(r.dtype), np.asarray(r.tolist(), np.float64)


@pytest.mark.parametrize("op", list(OPS))
def test_promotion_table_matches_torch(op):
    """Every (operand kind, operand kind) pair: same dtype and values, or same error."""
    torch = pytest.importorskip("torch")
    wrong = []
    for ka, kb in PAIRS:
        (d1, v1), (d2, v2) = _outcome(tg, op, ka, kb), _outcome(torch, op, ka, kb)
        if isinstance(v1, np.ndarray) and isinstance(v2, np.ndarray):
            same = v1.shape == v2.shape and np.allclose(v1, v2, rtol=1e-6, equal_nan=True)
        else:
            same = v1 == v2
        if d1 != d2 or not same:
            wrong.append(f"{ka} {op} {kb}: tapegrad {d1} {v1}; torch {d2} {v2}")
    assert not wrong, "\n".join(wrong)


def test_result_type_matches_torch():
    torch = pytest.importorskip("torch")
    wrong = [f"{ka}, {kb}" for ka, kb in PAIRS
             if dtype_name(tg.result_type(KINDS[ka](tg), KINDS[kb](tg)))
             != dtype_name(torch.result_type(KINDS[ka](torch), KINDS[kb](torch)))]
    assert not wrong


# (description, program, dtype, values): no PyTorch needed
KEY_PROMOTIONS = [
    ("int_tensor * 0.5", lambda: tg.tensor([1, 3]) * 0.5, tg.float32, [0.5, 1.5]),
    ("0.5 * int_tensor", lambda: 0.5 * tg.tensor([1, 3]), tg.float32, [0.5, 1.5]),
    ("int / int", lambda: tg.tensor([1, 3]) / tg.tensor([2, 2]), tg.float32, [0.5, 1.5]),
    ("int / 2", lambda: tg.tensor([1, -3]) / 2, tg.float32, [0.5, -1.5]),
    ("f32 + f64", lambda: tg.tensor([1.5]) + tg.tensor([0.25], dtype=tg.float64),
     tg.float64, [1.75]),
    ("f64 * f32", lambda: tg.tensor([1.5], dtype=tg.float64) * tg.tensor([2.0]),
     tg.float64, [3.0]),
    ("f32 * 0-d f64", lambda: tg.tensor([1.5, 2.0]) * tg.tensor(2.0, dtype=tg.float64),
     tg.float32, [3.0, 4.0]),
    ("0-d f64 - f32", lambda: tg.tensor(2.0, dtype=tg.float64) - tg.tensor([1.5]),
     tg.float32, [0.5]),
    ("int * 0-d f64", lambda: tg.tensor([1, 2]) * tg.tensor(0.5, dtype=tg.float64),
     tg.float64, [0.5, 1.0]),
    ("int + 0-d f32", lambda: tg.tensor([1, 2]) + tg.tensor(0.5), tg.float32, [1.5, 2.5]),
    ("f32 + 0-d int", lambda: tg.tensor([1.5]) + tg.tensor(2), tg.float32, [3.5]),
    ("0-d f32 * 0-d f64", lambda: tg.tensor(1.5) * tg.tensor(2.0, dtype=tg.float64),
     tg.float64, 3.0),
    ("int + 0-d int", lambda: tg.tensor([1, 2]) + tg.tensor(5), tg.int64, [6, 7]),
    ("f32 ** 2", lambda: tg.tensor([1.5]) ** 2, tg.float32, [2.25]),
    ("f64 + 1", lambda: tg.tensor([1.5], dtype=tg.float64) + 1, tg.float64, [2.5]),
    ("bool + bool", lambda: tg.tensor([True, False]) + tg.tensor([True, False]),
     tg.bool, [True, False]),
    ("bool * 2", lambda: tg.tensor([True, False]) * 2, tg.int64, [2, 0]),
    ("bool + 0.5", lambda: tg.tensor([True, False]) + 0.5, tg.float32, [1.5, 0.5]),
    ("bool + 0-d int", lambda: tg.tensor([True, False]) + tg.tensor(3), tg.int64, [4, 3]),
    ("int < 2.5", lambda: tg.tensor([1, 3]) < 2.5, tg.bool, [True, False]),
    ("f32 == f64", lambda: tg.tensor([1.5, 2.0]) == tg.tensor([1.5, 1.0], dtype=tg.float64),
     tg.bool, [True, False]),
]


@pytest.mark.parametrize("desc,prog,dtype,values", KEY_PROMOTIONS,
                         ids=[k[0] for k in KEY_PROMOTIONS])
def test_key_promotions(desc, prog, dtype, values):
    r = prog()
    assert r.dtype is dtype
    assert r.tolist() == values


def test_result_type_key_cases():
    f64_0d, i64 = tg.tensor(1.0, dtype=tg.float64), tg.tensor([1])
    assert tg.result_type(i64, 0.5) is tg.float32
    assert tg.result_type(tg.tensor([1.0]), tg.tensor([1.0], dtype=tg.float64)) is tg.float64
    assert tg.result_type(tg.tensor([1.0]), f64_0d) is tg.float32
    assert tg.result_type(i64, f64_0d) is tg.float64
    assert tg.result_type(tg.tensor([True]), True) is tg.bool
    assert tg.result_type(tg.tensor([True]), 2) is tg.int64
    assert tg.result_type(i64, i64) is tg.int64
    assert tg.promote_types(tg.int64, tg.float32) is tg.float32
    assert tg.promote_types(tg.bool, tg.int64) is tg.int64


INT_A = np.array([2 ** 62, -7, 5, 0, 123456789])
INT_B = np.array([2, 3, -4, 9, -1])


@pytest.mark.parametrize("name,f", [
    ("a+b", lambda a, b: a + b), ("a-b", lambda a, b: a - b), ("a*b", lambda a, b: a * b),
    ("a*4", lambda a, b: a * 4), ("10-a", lambda a, b: 10 - a),
    ("a+True", lambda a, b: a + True), ("-a", lambda a, b: -a), ("abs", lambda a, b: abs(a)),
    ("b**3", lambda a, b: b ** 3), ("b**|b|", lambda a, b: b ** abs(b)),
    ("2**|b|", lambda a, b: 2 ** abs(b)), ("a==b", lambda a, b: a == b),
])
def test_int_arithmetic_matches_numpy(name, f):
    """int64 results, wrapping on overflow exactly like NumPy."""
    r = f(tg.tensor(INT_A), tg.tensor(INT_B))
    expected = f(INT_A, INT_B)
    assert dtype_name(r.dtype) == expected.dtype.name
    assert r.tolist() == expected.tolist()


def test_int_true_division_is_float32():
    a, b = np.array([7, -7, 5, 1]), np.array([2, 2, -3, 3])
    r = tg.tensor(a) / tg.tensor(b)
    assert r.dtype is tg.float32
    np.testing.assert_array_equal(r.numpy(), a.astype(np.float32) / b.astype(np.float32))


def test_int_pow_negative_exponent_tensor():
    """PyTorch (unlike NumPy, and unlike a negative Python-int exponent, see
    INT_BOOL_ERRORS): 1 ** n = 1, (-1) ** n = +-1 and 0 otherwise."""
    r = tg.tensor([1, 2, -1, -1, 3]) ** tg.tensor([-1, -1, -1, -2, 2])
    assert r.dtype is tg.int64 and r.tolist() == [1, 0, -1, 1, 9]


# float32 / float64 operands, broadcasting both ways, a 0-d operand on either side
MIXED = [((2, 3), "float32", (), "float64"), ((), "float64", (2, 3), "float32"),
         ((3,), "float32", (2, 3), "float64"), ((2, 3), "float64", (3,), "float32")]
MIXED_IDS = ["*".join(f"{'x'.join(map(str, s)) or '0d'}-f{d[5:]}" for s, d in (m[:2], m[2:]))
             for m in MIXED]
MIXED_OPS = {"mul": lambda a, b: a * b, "div": lambda a, b: a / b,
             "pow": lambda a, b: a ** b, "sub": lambda a, b: a - b,
             "chain": lambda a, b: ((a + b) * a).exp().sum()}


def _mixed_leaves(L, sa, da, sb, db):
    a = np.arange(1, 1 + int(np.prod(sa))).reshape(sa) * 0.5
    b = np.arange(2, 2 + int(np.prod(sb))).reshape(sb) * 0.25
    return as_tensor(L, a, da, True), as_tensor(L, b, db, True)


@pytest.mark.parametrize("sa,da,sb,db", MIXED, ids=MIXED_IDS)
def test_gradients_flow_through_mixed_float_ops(sa, da, sb, db):
    """a * b: each operand's gradient arrives in its own dtype and shape."""
    a, b = _mixed_leaves(tg, sa, da, sb, db)
    (a * b).sum().backward()
    an, bn = a.detach().numpy().astype(np.float64), b.detach().numpy().astype(np.float64)
    shape = np.broadcast_shapes(sa, sb)
    ga = np.broadcast_to(bn, shape).sum(tuple(range(len(shape) - len(sa))))
    gb = np.broadcast_to(an, shape).sum(tuple(range(len(shape) - len(sb))))
    assert dtype_name(a.grad.dtype) == da and a.grad.shape == sa
    assert dtype_name(b.grad.dtype) == db and b.grad.shape == sb
    np.testing.assert_allclose(a.grad.numpy(), ga.reshape(sa), rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), gb.reshape(sb), rtol=1e-6)


@pytest.mark.parametrize("op", list(MIXED_OPS))
@pytest.mark.parametrize("sa,da,sb,db", MIXED, ids=MIXED_IDS)
def test_mixed_float_gradients_match_torch(sa, da, sb, db, op):
    torch = pytest.importorskip("torch")
    (a, b), (ta, tb) = _mixed_leaves(tg, sa, da, sb, db), _mixed_leaves(torch, sa, da, sb, db)
    out, tout = MIXED_OPS[op](a, b), MIXED_OPS[op](ta, tb)
    assert dtype_name(out.dtype) == dtype_name(tout.dtype)
    out.sum().backward()
    tout.sum().backward()
    for o, t in ((a, ta), (b, tb)):
        assert dtype_name(o.grad.dtype) == dtype_name(t.grad.dtype)
        assert_close(o.grad.numpy(), t.grad.numpy())


# ------------------------------------------------------------------ in-place promotion
def _iop(dtype, values, op, other):
    """x op= other on a fresh tensor x; returns x, checking op= kept it in place."""
    def prog(L):
        x = L.tensor(values, dtype=getattr(L, dtype))
        y = op(x, other(L) if callable(other) else other)
        assert y is x
        return x
    return prog


# (id, program, dtype and values, or the error message): the result must fit the target
INPLACE = [
    ("f32+=f64", _iop("float32", [1.0, 2.0], operator.iadd,
                      lambda L: L.tensor([0.5, 0.25], dtype=L.float64)), ("float32", [1.5, 2.25])),
    ("f64-=int", _iop("float64", [1.5, 2.0], operator.isub, lambda L: L.tensor([1, 2])),
     ("float64", [0.5, 0.0])),
    ("f32*=0-d f64", _iop("float32", [1.5, 2.0], operator.imul,
                          lambda L: L.tensor(2.0, dtype=L.float64)), ("float32", [3.0, 4.0])),
    ("int+=True", _iop("int64", [1, 2], operator.iadd, True), ("int64", [2, 3])),
    ("int*=3", _iop("int64", [1, -2], operator.imul, 3), ("int64", [3, -6])),
    ("int+=bool", _iop("int64", [1, 2], operator.iadd, lambda L: L.tensor([True, False])),
     ("int64", [2, 2])),
    ("int+=0.5", _iop("int64", [1, 2], operator.iadd, 0.5),
     "result type Float can't be cast to the desired output type Long"),
    ("int*=f32", _iop("int64", [1, 2], operator.imul, lambda L: L.tensor([1.5, 2.0])),
     "result type Float can't be cast to the desired output type Long"),
    ("int+=0-d f64", _iop("int64", [1, 2], operator.iadd,
                          lambda L: L.tensor(1.0, dtype=L.float64)),
     "result type Double can't be cast to the desired output type Long"),
    ("int/=2", _iop("int64", [1, 2], operator.itruediv, 2),
     "result type Float can't be cast to the desired output type Long"),
    ("bool+=1", _iop("bool", [True, False], operator.iadd, 1),
     "result type Long can't be cast to the desired output type Bool"),
]


@pytest.mark.parametrize("name,prog,expected", INPLACE, ids=[i[0] for i in INPLACE])
def test_inplace_promotion(name, prog, expected):
    if isinstance(expected, str):
        assert raised(prog, tg) == (RuntimeError, expected)
        return
    r = prog(tg)
    assert (dtype_name(r.dtype), r.tolist()) == expected


@pytest.mark.parametrize("name,prog,expected", INPLACE, ids=[i[0] for i in INPLACE])
def test_inplace_promotion_matches_torch(name, prog, expected):
    torch = pytest.importorskip("torch")
    if isinstance(expected, str):
        assert_same_error(prog)
        return
    r, t = prog(tg), prog(torch)
    assert (dtype_name(r.dtype), r.tolist()) == (dtype_name(t.dtype), t.tolist())


def test_inplace_mixed_dtype_carries_both_gradients():
    a = tg.tensor([1.0, 2.0], requires_grad=True)
    b = tg.tensor([0.5, 0.25], dtype=tg.float64, requires_grad=True)
    h = a * 3
    h += b * 2
    assert h.dtype is tg.float32
    h.sum().backward()
    assert a.grad.dtype is tg.float32 and a.grad.tolist() == [3.0, 3.0]
    assert b.grad.dtype is tg.float64 and b.grad.tolist() == [2.0, 2.0]


# ------------------------------------------------------------------ int/bool tensors
# (id, program, PyTorch's message)
REQUIRES_GRAD_ERRORS = [
    ("tensor_int", lambda L: L.tensor([1, 2], requires_grad=True),
     "Only Tensors of floating point and complex dtype can require gradients"),
    ("tensor_bool", lambda L: L.tensor([True, False], requires_grad=True),
     "Only Tensors of floating point and complex dtype can require gradients"),
    ("arange_int", lambda L: L.arange(3, requires_grad=True),
     "Only Tensors of floating point and complex dtype can require gradients"),
    ("ones_int", lambda L: L.ones(2, dtype=L.int64, requires_grad=True),
     "Only Tensors of floating point and complex dtype can require gradients"),
    ("zeros_bool", lambda L: L.zeros(2, dtype=L.bool, requires_grad=True),
     "Only Tensors of floating point and complex dtype can require gradients"),
    ("full_int", lambda L: L.full((2,), 3, requires_grad=True),
     "Only Tensors of floating point and complex dtype can require gradients"),
    ("requires_grad_int", lambda L: L.tensor([1, 2]).requires_grad_(),
     "only Tensors of floating point dtype can require gradients"),
    ("requires_grad_bool", lambda L: L.tensor([True]).requires_grad_(),
     "only Tensors of floating point dtype can require gradients"),
    ("requires_grad_after_long", lambda L: L.tensor([1.5]).long().requires_grad_(True),
     "only Tensors of floating point dtype can require gradients"),
    ("set_requires_grad_attr", lambda L: setattr(L.tensor([1, 2]), "requires_grad", True),
     "only Tensors of floating point and complex dtype can require gradients"),
]
RG_IDS = [r[0] for r in REQUIRES_GRAD_ERRORS]


@pytest.mark.parametrize("name,prog,msg", REQUIRES_GRAD_ERRORS, ids=RG_IDS)
def test_int_and_bool_tensors_cannot_require_grad(name, prog, msg):
    assert raised(prog, tg) == (RuntimeError, msg)


@pytest.mark.parametrize("name,prog,msg", REQUIRES_GRAD_ERRORS, ids=RG_IDS)
def test_requires_grad_errors_match_torch(name, prog, msg):
    assert_same_error(prog)


def test_int_tensor_requires_grad_false_is_fine():
    x = tg.tensor([1, 2]).requires_grad_(False)
    assert x.requires_grad is False and x.dtype is tg.int64


SOURCES = {"float32": [1.5, -2.7, 0.0, 3.0], "float64": [1.5, -2.7, 0.0, 3.0],
           "int64": [2, -3, 0, 7], "bool": [True, False, False, True]}
# how -> (target dtype, cast); a target of None keeps the source dtype
CASTS = {
    "to_float32": ("float32", lambda t, L: t.to(L.float32)),
    "to_float64": ("float64", lambda t, L: t.to(L.float64)),
    "to_int64": ("int64", lambda t, L: t.to(L.int64)),
    "to_bool": ("bool", lambda t, L: t.to(L.bool)),
    "to_dtype_kw": ("float64", lambda t, L: t.to(dtype=L.float64)),
    "float": ("float32", lambda t, L: t.float()),
    "double": ("float64", lambda t, L: t.double()),
    "long": ("int64", lambda t, L: t.long()),
    "bool": ("bool", lambda t, L: t.bool()),
    "to_other_f64": ("float64", lambda t, L: t.to(L.tensor([1.0], dtype=L.float64))),
    "to_other_int": ("int64", lambda t, L: t.to(L.tensor([1]))),
    "to_cpu": (None, lambda t, L: t.to("cpu")),
    "to_cpu_f64": ("float64", lambda t, L: t.to("cpu", L.float64)),
}


def _source(L, src):
    dt = getattr(L, src)
    return L.tensor(SOURCES[src], dtype=dt, requires_grad=dt.is_floating_point)


@pytest.mark.parametrize("how", list(CASTS))
@pytest.mark.parametrize("src", list(SOURCES))
def test_casts(src, how):
    """Values as NumPy's astype; float -> other float records ToCopyBackward0, a cast to
    the same dtype returns the tensor itself, int/bool results never require grad."""
    target, cast = CASTS[how]
    target = target or src
    x = _source(tg, src)
    y = cast(x, tg)
    assert dtype_name(y.dtype) == target
    assert y.tolist() == np.array(SOURCES[src], dtype=src).astype(target).tolist()
    if target == src:
        assert y is x
    elif src.startswith("float") and target.startswith("float"):
        assert y.requires_grad and y.grad_fn.name() == "ToCopyBackward0"
    else:
        assert not y.requires_grad and y.grad_fn is None


@pytest.mark.parametrize("src", list(SOURCES))
def test_casts_match_torch(src):
    torch = pytest.importorskip("torch")
    for how, (_, cast) in CASTS.items():
        x, tx = _source(tg, src), _source(torch, src)
        y, ty = cast(x, tg), cast(tx, torch)
        assert dtype_name(y.dtype) == dtype_name(ty.dtype), how
        assert y.tolist() == ty.tolist(), how
        assert (y is x) == (ty is tx), how
        assert y.requires_grad == ty.requires_grad, how
        assert (y.grad_fn and y.grad_fn.name()) == (ty.grad_fn and ty.grad_fn.name()), how


def test_float_casts_carry_gradients():
    """gradcheck through a float32 round trip: eps=1e-3 keeps float32 rounding (1e-7) out
    of the finite differences, which are exact for these polynomials."""
    x = as_tensor(tg, rng(12).uniform(0.5, 2.0, (2, 3)), requires_grad=True)
    assert gradcheck(lambda t: t.float().double() ** 2, [x], eps=1e-3) is True
    assert gradcheck(lambda t: t.to(tg.float32).to(tg.float64) * t, [x], eps=1e-3) is True
    assert gradcheck(lambda t: t.float() * t, [x], eps=1e-3) is True
    assert x.float().grad_fn.name() == "ToCopyBackward0"
    x32 = tg.tensor([1.0, -2.0], requires_grad=True)
    y = x32.double()
    assert y.grad_fn.name() == "ToCopyBackward0"
    (y * tg.tensor([3.0, 4.0], dtype=tg.float64)).sum().backward()
    assert x32.grad.dtype is tg.float32 and x32.grad.tolist() == [3.0, 4.0]


def test_casts_to_int_or_bool_cut_the_graph():
    x = tg.tensor([1.5, -2.5], requires_grad=True)
    for y in (x.long(), x.bool(), x.to(tg.int64), (x * 2).long()):
        assert not y.requires_grad and y.grad_fn is None
    back = x.long().float()
    assert not back.requires_grad


FLOAT_UNARY = {"exp": np.exp, "sqrt": np.sqrt, "sin": np.sin,
               "sigmoid": lambda a: 1 / (1 + np.exp(-a)), "tanh": np.tanh}


@pytest.mark.parametrize("src", ["int64", "bool"])
@pytest.mark.parametrize("name", list(FLOAT_UNARY))
def test_float_unary_ops_on_int_and_bool_give_float32(name, src):
    a = np.array([1, 4, 9, 2] if src == "int64" else [True, False, True, True])
    for r in (getattr(tg.tensor(a), name)(), getattr(tg, name)(tg.tensor(a))):
        assert r.dtype is tg.float32 and not r.requires_grad
        np.testing.assert_allclose(r.numpy(), FLOAT_UNARY[name](a.astype(np.float64)),
                                   rtol=1e-6)


def test_neg_and_abs_keep_int64():
    x = tg.tensor([3, -4, 0])
    for r, expected in ((-x, [-3, 4, 0]), (x.neg(), [-3, 4, 0]), (abs(x), [3, 4, 0]),
                        (x.abs(), [3, 4, 0]), (tg.abs(x), [3, 4, 0])):
        assert r.dtype is tg.int64 and r.tolist() == expected


_MASK_HINT = ("If you are trying to invert a mask, use the `~` or `logical_not()` operator "
              "instead.")
# (id, program, exception type, PyTorch's message)
INT_BOOL_ERRORS = [
    ("neg_bool", lambda L: -L.tensor([True, False]), RuntimeError,
     "Negation, the `-` operator, on a bool tensor is not supported. " + _MASK_HINT),
    ("abs_bool", lambda L: L.tensor([True]).abs(), NotImplementedError,
     "\"abs_cpu\" not implemented for 'Bool'"),
    ("bool_minus_bool", lambda L: L.tensor([True]) - L.tensor([False]), RuntimeError,
     "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
     "`logical_xor()` operator instead."),
    ("bool_minus_int", lambda L: L.tensor([True]) - 1, RuntimeError,
     "Subtraction, the `-` operator, with a bool tensor is not supported. " + _MASK_HINT),
    ("float_minus_bool", lambda L: L.tensor([1.5]) - L.tensor([True]), RuntimeError,
     "Subtraction, the `-` operator, with a bool tensor is not supported. " + _MASK_HINT),
    ("bool_pow_bool", lambda L: L.tensor([True]) ** L.tensor([False]), NotImplementedError,
     "\"pow\" not implemented for 'Bool'"),
    ("int_pow_negative_int", lambda L: L.tensor([1, 2]) ** -1, RuntimeError,
     "Integers to negative integer powers are not allowed."),
    ("mean_int", lambda L: L.tensor([1, 2]).mean(), RuntimeError,
     "mean(): could not infer output dtype. Input dtype must be either a floating point or "
     "complex dtype. Got: Long"),
]
IB_IDS = [e[0] for e in INT_BOOL_ERRORS]


@pytest.mark.parametrize("name,prog,exc,msg", INT_BOOL_ERRORS, ids=IB_IDS)
def test_int_and_bool_op_errors(name, prog, exc, msg):
    assert raised(prog, tg) == (exc, msg)


@pytest.mark.parametrize("name,prog,exc,msg", INT_BOOL_ERRORS, ids=IB_IDS)
def test_int_and_bool_op_errors_match_torch(name, prog, exc, msg):
    assert_same_error(prog)


def test_int_and_bool_reductions():
    b = tg.tensor([[True, False, True], [True, True, False]])
    i = tg.tensor([[3, -7, 5], [2, 9, -1]])
    for r, expected in ((b.sum(), 4), (b.sum(0), [2, 1, 1]), (b.sum(1, keepdim=True), [[2], [2]]),
                        (i.sum(), 11), (i.sum(1), [1, 10]), (tg.sum(i, 0), [5, 2, 4])):
        assert r.dtype is tg.int64 and r.tolist() == expected
    assert i.max().dtype is tg.int64 and i.max().item() == 9
    assert i.min().dtype is tg.int64 and i.min().item() == -7
    values, indices = i.max(1)
    assert values.dtype is tg.int64 and values.tolist() == [5, 9]
    assert indices.dtype is tg.int64 and indices.tolist() == [2, 1]
    values, indices = i.min(0)
    assert values.tolist() == [2, -7, -1] and indices.tolist() == [1, 0, 1]
    assert b.max().dtype is tg.bool and b.max().item() is True


def test_int_and_bool_reductions_match_torch():
    torch = pytest.importorskip("torch")
    progs = [lambda L, t: t.sum(), lambda L, t: t.sum(0), lambda L, t: t.max(),
             lambda L, t: t.min(), lambda L, t: t.max(1).values, lambda L, t: t.min(0).indices,
             lambda L, t: L.sum(t, 1, keepdim=True)]
    for values in ([[3, -7, 5], [2, 9, -1]], [[True, False, True], [True, True, False]]):
        for f in progs:
            r, t = f(tg, tg.tensor(values)), f(torch, torch.tensor(values))
            assert (dtype_name(r.dtype), r.tolist()) == (dtype_name(t.dtype), t.tolist())


# ------------------------------------------------------------------ cold start
COLD_START = r"""
import json
import tapegrad as tg
from tapegrad._engine.layout import NKSLOT
from tapegrad._engine.state import engine
from tapegrad.ops.registry import OPS

x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
y = tg.tensor([4.0, 5.0, 6.0], requires_grad=True)
(x * y).sum().backward()
loaded = sorted({OPS[i // NKSLOT].name for i in engine()._kernels})
print(json.dumps({"ops": loaded, "grad": x.grad.tolist()}))
"""


def test_cold_start_loads_only_the_kernels_it_uses():
    """A fresh interpreter (sharing the parent's TAPEGRAD_CACHE_DIR, if any) that runs
    (x * y).sum().backward() loads the kernels of mul and sum and nothing else."""
    proc = subprocess.run([sys.executable, "-c", COLD_START], cwd=ROOT, env=dict(os.environ),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["grad"] == [4.0, 5.0, 6.0]
    assert set(report["ops"]) == {"mul", "sum"}
    assert not {"cross_entropy", "nll_loss", "softmax", "log_softmax", "gather"} & \
        set(report["ops"])


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
