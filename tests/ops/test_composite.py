"""Ops tapegrad composes from its table ops (tapegrad/_composite.py): addcmul, addcdiv,
lerp, nan_to_num, logit, xlogy, fmax/fmin, movedim/moveaxis, unflatten, tile, roll, diag,
diagonal, trace, diff, take_along_dim, tensor_split/hsplit/vsplit, aminmax,
nansum/nanmean, repeat_interleave, Tensor.sum_to_size/nelement/element_size/is_complex.
Values and gradients against PyTorch (float64) and finite differences, exact values,
views, argument errors (type and message, checked against PyTorch's too), and a compiled
replay of the ops that need no index read in Python."""
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import gradcheck
from tests.helpers import F64, leaf, numpy_of, values

NAN, INF = float("nan"), float("inf")


def _outputs(out):
    return list(out) if isinstance(out, tuple) else [out]


def assert_matches_torch(fn, *arrays, atol=1e-12):
    """fn(M, *leaves) with M = tapegrad and M = torch, on float64 leaves holding arrays:
    the same shapes, values (NaN where PyTorch has NaN) and grad_fn-less-ness, and the
    same gradients of sum(out * w) for fixed random weights w (over every output of a
    tuple)."""
    torch = pytest.importorskip("torch")
    tg_in = [leaf(a) for a in arrays]
    th_in = [torch.tensor(np.asarray(a, np.float64), requires_grad=True) for a in arrays]
    outs, refs = _outputs(fn(tg, *tg_in)), _outputs(fn(torch, *th_in))
    assert len(outs) == len(refs)
    rng = np.random.default_rng(7)
    loss, ref_loss = 0, 0
    for out, ref in zip(outs, refs):
        assert tuple(out.shape) == tuple(ref.shape)
        assert str(out.dtype).split(".")[1] == str(ref.dtype).split(".")[1]
        np.testing.assert_allclose(numpy_of(out), ref.detach().numpy(), rtol=1e-10, atol=atol)
        w = rng.standard_normal(tuple(ref.shape))
        loss = loss + (out * tg.tensor(w, dtype=F64)).sum()
        ref_loss = ref_loss + (ref * torch.tensor(w)).sum()
    loss.backward()
    ref_loss.backward()
    for a, b in zip(tg_in, th_in):
        expected = np.zeros(tuple(b.shape)) if b.grad is None else b.grad.numpy()
        got = np.zeros(a.shape) if a.grad is None else numpy_of(a.grad)
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=atol)


# ------------------------------------------------------------------ against PyTorch
A, B = values(1, 3, 4), values(2, 3, 4)
POS = values(3, 3, 4, low=0.5, high=2.0)
R3 = values(4, 2, 3, 4)
V3 = values(5, 3)
WITH_NONFINITE = np.array([NAN, INF, -INF, 1.5, -2.0, 0.0])
PROBS = np.array([0.05, 0.1, 0.2, 0.5, 0.8, 0.9, 0.95])      # (eps=0.1 hits both bounds)
XS = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 2.0, -1.0, 3.0, 1.0])
YS = np.array([0.0, 0.5, 2.0, -1.0, NAN, -INF, 0.0, INF, 0.5, NAN, -1.0])
F1 = np.array([1.0, NAN, 2.0, NAN, 3.0, -1.0])
F2 = np.array([NAN, 1.0, 2.0, NAN, 1.0, 5.0])
TIES = np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 0.0]])
NANS = np.array([[1.0, NAN, 2.0], [NAN, 4.0, NAN], [0.5, 1.5, -1.0]])

MATCHES = [
    ("addcmul", lambda M, a, b, c: M.addcmul(a, b, c, value=0.7), (A, B, POS)),
    ("addcmul_broadcast", lambda M, a, b, c: M.addcmul(a, b, c), (A[0], B, POS[:, :1])),
    ("addcdiv", lambda M, a, b, c: a.addcdiv(b, c, value=-2), (A, B, POS)),
    ("lerp_tensor_weight", lambda M, a, b, w: M.lerp(a, b, w),
     (A, B, values(6, 3, 4, low=-1, high=2))),
    ("lerp_small_weight", lambda M, a, b: M.lerp(a, b, 0.3), (A, B)),
    ("lerp_large_weight", lambda M, a, b: a.lerp(b, 0.8), (A, B[1])),
    ("nan_to_num", lambda M, a: M.nan_to_num(a), (WITH_NONFINITE,)),
    ("nan_to_num_values", lambda M, a: a.nan_to_num(1.0, 2.0, -3.0), (WITH_NONFINITE,)),
    ("logit", lambda M, a: M.logit(a), (PROBS,)),
    ("logit_eps", lambda M, a: M.logit(a, 0.1), (PROBS,)),
    ("logit_eps_above_half", lambda M, a: a.logit(0.7), (PROBS,)),
    ("xlogy", lambda M, a, b: M.xlogy(a, b), (XS, YS)),
    ("xlogy_scalar_input", lambda M, b: M.xlogy(2, b), (POS,)),
    ("xlogy_scalar_other", lambda M, a: a.xlogy(3.0), (np.array([0.0, 1.5, -2.0]),)),
    ("fmax", lambda M, a, b: M.fmax(a, b), (F1, F2)),
    ("fmin", lambda M, a, b: a.fmin(b), (F1, F2)),
    ("fmax_broadcast", lambda M, a, b: M.fmax(a, b), (A, B[:1])),
    ("movedim", lambda M, a: M.movedim(a, (0, 2), (1, 0)), (R3,)),
    ("moveaxis", lambda M, a: a.moveaxis(-1, 0), (R3,)),
    ("unflatten", lambda M, a: a.unflatten(2, (2, -1)), (R3,)),
    ("unflatten_strided", lambda M, a: a.transpose(0, 2).unflatten(0, (2, 2)), (R3,)),
    ("tile", lambda M, a: a.tile(2), (R3,)),
    ("tile_more_dims", lambda M, a: M.tile(a, (2, 1, 1, 3)), (R3,)),
    ("roll_flat", lambda M, a: M.roll(a, 5), (R3,)),
    ("roll_dims", lambda M, a: a.roll((1, -5), (0, 2)), (R3,)),
    ("diag_of_matrix", lambda M, a: M.diag(a, 1), (A,)),
    ("diag_of_matrix_below", lambda M, a: M.diag(a, -1), (A,)),
    ("diag_of_vector", lambda M, v: M.diag(v), (V3,)),
    ("diag_of_vector_above", lambda M, v: M.diag(v, 2), (V3,)),
    ("diag_of_vector_below", lambda M, v: v.diag(-1), (V3,)),
    ("diagonal", lambda M, a: M.diagonal(a, 1, 2, 0), (R3,)),
    ("diagonal_negative", lambda M, a: a.diagonal(-1, -1, 1), (R3,)),
    ("diagonal_of_strided", lambda M, a: a[:, 1:].t().diagonal(), (A,)),
    ("diagonal_empty", lambda M, a: a.diagonal(5), (A,)),
    ("trace", lambda M, a: M.trace(a), (A,)),
    ("diff", lambda M, a: M.diff(a), (A,)),
    ("diff_prepend_append", lambda M, a, p: M.diff(a, 2, 0, prepend=p, append=p),
     (A, B[:2])),
    ("diff_beyond_length", lambda M, a: a.diff(6), (A,)),
    ("take_along_dim", lambda M, a: M.take_along_dim(a, M.tensor([[0], [3], [1]]), 1), (A,)),
    ("take_along_dim_broadcast",
     lambda M, a: M.take_along_dim(a[:1], M.tensor([[0, 0], [3, 1], [1, 2]]), 1), (A,)),
    ("take_along_dim_wrapping", lambda M, a: M.take_along_dim(a, M.tensor([[-1, 5, -9, 2]]), 0),
     (A,)),
    ("take_along_dim_flat", lambda M, a: a.take_along_dim(M.tensor([[0, 11], [5, 5]])),
     (A,)),
    ("tensor_split_sections", lambda M, a: M.tensor_split(a, 3, 1), (A,)),
    ("tensor_split_indices", lambda M, a: a.tensor_split([3, 1, 9, -1], 1), (A,)),
    ("tensor_split_tensor", lambda M, a: a.tensor_split(M.tensor([1, 2])), (A,)),
    ("hsplit", lambda M, a: a.hsplit(2), (A,)),
    ("vsplit", lambda M, a: M.vsplit(a, [1]), (A,)),
    ("aminmax", lambda M, a: M.aminmax(a), (TIES,)),
    ("aminmax_dim", lambda M, a: a.aminmax(dim=1, keepdim=True), (TIES,)),
    ("aminmax_keepdim", lambda M, a: a.aminmax(keepdim=True), (TIES,)),
    ("nansum", lambda M, a: M.nansum(a), (NANS,)),
    ("nansum_dim", lambda M, a: a.nansum(1, keepdim=True), (NANS,)),
    ("nansum_keepdim", lambda M, a: a.nansum(keepdim=True), (NANS,)),
    ("nanmean", lambda M, a: M.nanmean(a), (NANS,)),
    ("nanmean_dim", lambda M, a: a.nanmean((0,)), (NANS,)),
    ("repeat_interleave", lambda M, a: M.repeat_interleave(a, 2), (A,)),
    ("repeat_interleave_dim", lambda M, a: a.repeat_interleave(3, 1), (A,)),
    ("repeat_interleave_tensor", lambda M, a: a.repeat_interleave(M.tensor([2, 0, 1]), 0),
     (A,)),
    ("repeat_interleave_one_count", lambda M, a: a.repeat_interleave(M.tensor([2]), -1),
     (A,)),
    ("sum_to_size", lambda M, a: a.sum_to_size(4), (A,)),
    ("sum_to_size_keep", lambda M, a: a.sum_to_size(3, 1), (A,)),
]


@pytest.mark.parametrize("fn, arrays", [m[1:] for m in MATCHES], ids=[m[0] for m in MATCHES])
def test_matches_torch(fn, arrays):
    assert_matches_torch(fn, *arrays)


def test_xlogy_gradients_where_input_is_zero_match_torch_except_at_infinity():
    """PyTorch's gradient for input is log(other), 0 where input == 0 and other <= 0;
    for other it is input / other (NaN at 0 / 0). Where input == 0 and other == +inf
    tapegrad keeps the value 0 and gives input the gradient 0 (PyTorch: inf)."""
    torch = pytest.importorskip("torch")
    x, y = leaf([0.0, 0.0]), leaf([INF, 3.0])
    xt, yt = (torch.tensor([0.0, 0.0], dtype=torch.float64, requires_grad=True),
              torch.tensor([INF, 3.0], dtype=torch.float64, requires_grad=True))
    tg.xlogy(x, y).sum().backward()
    torch.xlogy(xt, yt).sum().backward()
    assert xt.grad.tolist() == pytest.approx([INF, np.log(3.0)])
    assert numpy_of(x.grad).tolist() == pytest.approx([0.0, np.log(3.0)])
    assert numpy_of(y.grad).tolist() == yt.grad.tolist() == [0.0, 0.0]


def test_diagonal_is_a_view_like_torchs():
    """The same shape, strides and storage offset as PyTorch's view; writes through it
    reach the base, and an in-place op on it under autograd gives PyTorch's gradient."""
    torch = pytest.importorskip("torch")
    a = np.arange(60.0).reshape(3, 4, 5)
    for args in ((), (1,), (-2, 2, 0), (1, -1, 1), (7,), (0, 0, 2)):
        for tr in (lambda t: t, lambda t: t.transpose(0, 2), lambda t: t[:, 1:, ::2]):
            d = tr(tg.tensor(a)).diagonal(*args)
            r = tr(torch.tensor(a)).diagonal(*args)
            assert tuple(d.shape) == tuple(r.shape) and d.stride() == r.stride()
            assert d.tolist() == r.tolist()
    x = tg.zeros(3, 3)
    x.diagonal().fill_(2.0)
    x.diagonal(1).fill_(5.0)
    assert x.tolist() == [[2, 5, 0], [0, 2, 5], [0, 0, 2]]
    w = leaf(values(11, 3, 3))
    wt = torch.tensor(numpy_of(w), requires_grad=True)
    y, yt = w * 1.0, wt * 1.0
    y.diagonal().mul_(3.0)
    yt.diagonal().mul_(3.0)
    (y * y).sum().backward()
    (yt * yt).sum().backward()
    np.testing.assert_allclose(numpy_of(w.grad), wt.grad.numpy(), rtol=1e-12)
    assert tg.diagonal(leaf(values(12, 2, 2))).grad_fn.name() == "DiagonalBackward0"


# ------------------------------------------------------------------ finite differences
GRADCHECKS = [
    ("addcmul", lambda a, b, c: tg.addcmul(a, b, c, value=-1.5), (A, B[:1], POS)),
    ("addcdiv", lambda a, b, c: tg.addcdiv(a, b, c, value=0.5), (A, B, POS)),
    ("lerp", lambda a, b, w: tg.lerp(a, b, w), (A, B, values(13, 3, 4, low=-1, high=2))),
    ("lerp_scalar", lambda a, b: tg.lerp(a, b, 0.9) + tg.lerp(a, b, -0.2), (A, B)),
    ("nan_to_num", lambda a: tg.nan_to_num(a / 3, 1.0, 2.0), (A,)),
    ("logit", lambda a: tg.logit(a) + tg.logit(a, 0.25), (PROBS + 0.013,)),
    ("xlogy", lambda a, b: tg.xlogy(a, b), (A, POS)),
    ("fmax_fmin", lambda a, b: tg.fmax(a, b) * 2 + tg.fmin(a, b), (A, B)),
    ("movedim", lambda a: tg.movedim(a, 1, -1) * tg.tensor(R3.transpose(0, 2, 1)), (R3,)),
    ("unflatten", lambda a: a.unflatten(-1, (2, 2)).sum(-1), (R3,)),
    ("tile", lambda a: tg.tile(a, (3, 2)), (A,)),
    ("roll", lambda a: tg.roll(a, (2, -1), (1, 0)) * tg.tensor(A), (A,)),
    ("diag", lambda a, v: tg.diag(a, 1) * 2 + tg.diag(v, -1)[1:, :3].sum(0), (A, V3)),
    ("diagonal", lambda a: tg.diagonal(a.transpose(0, 1), 1, 0, 2) ** 2, (R3,)),
    ("trace", lambda a: tg.trace(a * a), (A,)),
    ("diff", lambda a, p: tg.diff(a * a, 2, 0, append=p), (A, B[:1])),
    ("take_along_dim", lambda a: tg.take_along_dim(a, tg.tensor([[3], [0], [3]]), 1), (A,)),
    ("tensor_split", lambda a: tuple(p * p for p in tg.tensor_split(a, 3, 1)), (A,)),
    ("aminmax", lambda a: tuple(tg.aminmax(a, dim=0)), (A,)),
    ("nansum_nanmean", lambda a: tg.nansum(a, 0) + tg.nanmean(a * a, 0), (A,)),
    ("repeat_interleave", lambda a: a.repeat_interleave(2, 0) * 1.5
     + a.repeat_interleave(tg.tensor([1, 0, 5]), 0)[:6], (A,)),
    ("sum_to_size", lambda a: (a * a).sum_to_size(1, 4), (A,)),
]


@pytest.mark.parametrize("fn, arrays", [g[1:] for g in GRADCHECKS], ids=[g[0] for g in GRADCHECKS])
def test_gradients_match_finite_differences(fn, arrays):
    assert gradcheck(fn, tuple(leaf(a) for a in arrays))


# ------------------------------------------------------------------ exact values
def test_pointwise_values_and_dtypes():
    x = tg.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert tg.addcmul(x, x, x, value=2).tolist() == [[3, 10], [21, 36]]
    assert tg.addcdiv(tg.zeros(2), tg.tensor([1.0, 3.0]), tg.tensor([2.0, 4.0])).tolist() == \
        [0.5, 0.75]
    i = tg.tensor([1, 2])
    # an integer result truncates value (2.9 -> 2), as PyTorch does
    assert tg.addcmul(i, i, i, value=2.9).tolist() == [3, 10]
    assert tg.addcmul(i, i, i).dtype is tg.int64
    assert tg.addcdiv(i, x[0], i).tolist() == [2.0, 3.0]
    assert tg.addcmul(i, x[0], i, value=True).tolist() == [2.0, 6.0]
    # PyTorch's two formulas: weight 0 gives start and weight 1 gives end exactly
    # (for these, a + (b - a) * 1 != b at [3], and b - (b - a) * 1 != a elsewhere)
    sa, sb = np.array([0.1, 0.3, 1e-3, 7.0]), np.array([0.7, 3.3, 2.9, -1e-5])
    a, b = tg.tensor(sa, dtype=F64), tg.tensor(sb, dtype=F64)
    assert tg.lerp(a, b, 0.0).tolist() == sa.tolist()
    assert tg.lerp(a, b, 1.0).tolist() == sb.tolist()
    for w in ([0.0] * 4, [1.0] * 4):
        assert tg.lerp(a, b, tg.tensor(w, dtype=F64)).tolist() == (sa if w[0] == 0 else sb).tolist()
    big = np.finfo(np.float32).max
    assert tg.nan_to_num(tg.tensor([NAN, INF, -INF, 7.0])).tolist() == [0.0, big, -big, 7.0]
    assert tg.nan_to_num(tg.tensor([INF], dtype=F64)).item() == np.finfo(np.float64).max
    assert tg.nan_to_num(tg.tensor([NAN]), nan=tg.tensor(3.0)).item() == 3.0
    n = tg.tensor([1, 2])
    out = tg.nan_to_num(n)
    assert out.tolist() == [1, 2] and out.dtype is tg.int64
    out[0] = 5
    assert n.tolist() == [1, 2]                                      # a copy
    assert tg.logit(tg.tensor([0.5, 0.0, 1.0])).tolist() == [0.0, -INF, INF]
    assert tg.logit(tg.tensor([1, 0])).dtype is tg.float32
    assert tg.logit(tg.tensor([0.0, 1.0]), eps=0.25).tolist() == pytest.approx(
        [np.log(1 / 3), np.log(3)])
    assert tg.xlogy(tg.tensor([0.0, 0.0, 2.0]), tg.tensor([0.0, NAN, np.e])).tolist()[::2] == \
        pytest.approx([0.0, 2.0])
    assert np.isnan(tg.xlogy(tg.tensor([0.0]), tg.tensor([NAN])).item())
    assert tg.xlogy(tg.tensor([2, 0]), 3).dtype is tg.float32
    assert tg.xlogy(tg.tensor([1.0], dtype=F64), tg.tensor(2.0)).dtype is F64
    f = tg.fmax(tg.tensor([NAN, 1.0, NAN]), tg.tensor([2.0, NAN, NAN])).tolist()
    assert f[:2] == [2.0, 1.0] and np.isnan(f[2])
    assert tg.fmin(tg.tensor([3, 1]), tg.tensor([2, 5])).tolist() == [2, 1]
    assert tg.fmax(tg.tensor([True, False]), tg.tensor([False, False])).tolist() == \
        [True, False]


def test_shape_ops_values_and_views():
    x = tg.arange(24.0).reshape(2, 3, 4)
    a = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(numpy_of(tg.movedim(x, (0, 1), (2, 0))),
                                  np.moveaxis(a, (0, 1), (2, 0)))
    assert tg.movedim(tg.tensor(1.0), 0, 0).shape == ()
    u = x.unflatten(1, (3, 1))
    assert u.shape == (2, 3, 1, 4)
    u[0, 0, 0, 0] = -1.0                                             # a view
    assert x[0, 0, 0].item() == -1.0
    assert x.unflatten(-1, [-1, 2]).shape == (2, 3, 2, 2)
    t = tg.tensor([[1, 2]])
    assert tg.tile(t, (2,)).tolist() == [[1, 2, 1, 2]]
    assert t.tile(2, 1).tolist() == [[1, 2], [1, 2]]
    same = tg.tile(t, ())
    same[0, 0] = 9
    assert t.tolist() == [[1, 2]]                                    # always a copy
    assert tg.tile(tg.tensor(2.0), ()).shape == ()
    r = tg.tensor([[1, 2, 3], [4, 5, 6]])
    assert tg.roll(r, 1).tolist() == [[6, 1, 2], [3, 4, 5]]
    assert r.roll(-1, 1).tolist() == [[2, 3, 1], [5, 6, 4]]
    assert r.roll((1, 4), (0, 1)).tolist() == [[6, 4, 5], [3, 1, 2]]
    assert tg.roll(tg.zeros(0, 2), 1, 0).shape == (0, 2)
    assert tg.roll(tg.tensor(3.0), 2).tolist() == 3.0
    for kept in (r.roll(3, 1), tg.roll(r, 6)):                     # a copy, not r
        assert kept.tolist() == r.tolist()
        kept[0, 0] = 0
        assert r[0, 0].item() == 1
    assert tg.diag(tg.tensor([1, 2]), 1).tolist() == [[0, 1, 0], [0, 0, 2], [0, 0, 0]]
    assert tg.diag(tg.tensor([True, True]), -1).tolist() == \
        [[False, False, False], [True, False, False], [False, True, False]]
    assert tg.diag(tg.zeros(0), 2).tolist() == [[0, 0], [0, 0]]
    m = tg.tensor([[1.0, 2.0], [3.0, 4.0]])
    d = tg.diag(m)
    d[0] = 7.0
    assert m[0, 0].item() == 1.0 and d.tolist() == [7.0, 4.0]    # diag of a matrix copies
    assert tg.diag(m, 5).shape == (0,)
    assert tg.trace(tg.tensor([[1, 2], [3, 4]])).item() == 5
    assert tg.trace(tg.tensor([[1, 2], [3, 4]])).dtype is tg.int64
    assert tg.trace(tg.zeros(0, 3)).item() == 0.0


def test_diff_values():
    x = tg.tensor([1, 4, 9, 16])
    assert tg.diff(x).tolist() == [3, 5, 7]
    assert x.diff(2).tolist() == [2, 2]
    assert x.diff(0).tolist() == [1, 4, 9, 16]
    assert tg.diff(x, prepend=tg.tensor([0]), append=tg.tensor([0])).tolist() == \
        [1, 3, 5, 7, -16]
    assert tg.diff(tg.tensor([True, False, False])).tolist() == [True, False]
    assert tg.diff(tg.tensor([1.0, 2.0]), 3).shape == (0,)
    assert tg.diff(tg.tensor([True]), prepend=tg.tensor([1])).tolist() == [0]
    # n = 0 ignores prepend and append, as PyTorch does
    assert tg.diff(x, 0, prepend=tg.tensor([5])).tolist() == [1, 4, 9, 16]
    y = tg.tensor([[1.0, 2.0], [4.0, 8.0]])
    assert tg.diff(y, dim=0).tolist() == [[3.0, 6.0]]
    assert tg.diff(y, prepend=tg.zeros(2, 1, dtype=F64)).dtype is F64


def test_take_along_dim_and_splits_values():
    x = tg.tensor([[10, 30, 20], [60, 50, 40]])
    order = tg.argsort(x, dim=1)
    assert tg.take_along_dim(x, order, dim=1).tolist() == [[10, 20, 30], [40, 50, 60]]
    assert tg.take_along_dim(x, tg.tensor([5, 0])).tolist() == [40, 10]
    assert tg.take_along_dim(x, tg.tensor([[1]]), 0).tolist() == [[60, 50, 40]]
    # along a dim, PyTorch 2.13 takes indices modulo the size (not only negative ones)
    assert tg.take_along_dim(x, tg.tensor([[-1, 3, 7]]), 1).tolist() == \
        [[20, 10, 30], [40, 60, 50]]
    y = tg.arange(7.0)
    assert [p.tolist() for p in tg.tensor_split(y, 3)] == [[0, 1, 2], [3, 4], [5, 6]]
    assert [p.tolist() for p in y.tensor_split(tg.tensor(2))] == [[0, 1, 2, 3], [4, 5, 6]]
    assert [len(p) for p in tg.tensor_split(y, [2, 2, 5, 100])] == [2, 0, 3, 2, 0]
    assert [len(p) for p in tg.tensor_split(y, 9)] == [1] * 7 + [0, 0]
    assert len(tg.tensor_split(y, ())) == 1
    piece = tg.tensor_split(y, 2)[1]
    piece[0] = -1.0                                                 # views of y
    assert y[4].item() == -1.0
    assert piece.grad_fn is None
    z = tg.arange(12.0).reshape(2, 6)
    assert [p.shape for p in z.hsplit(3)] == [(2, 2)] * 3
    assert [p.shape for p in z.hsplit(1, 4)] == [(2, 1), (2, 3), (2, 2)]
    assert [p.shape for p in tg.hsplit(z[0], [4])] == [(4,), (2,)]
    assert [p.shape for p in z.vsplit(2)] == [(1, 6)] * 2
    assert [p.shape for p in z.vsplit(1)] == [(2, 6)]
    assert tg.tensor_split(leaf(values(14, 4)), 2)[0].grad_fn.name() == "SliceBackward0"


def test_reductions_values():
    x = tg.tensor([[1.0, 5.0, -2.0], [3.0, 0.0, 7.0]])
    r = tg.aminmax(x)
    assert type(r).__name__ == "aminmax" and r._fields == ("min", "max")
    assert (r.min.item(), r.max.item()) == (-2.0, 7.0)
    mn, mx = x.aminmax(dim=-1)
    assert mn.tolist() == [-2.0, 0.0] and mx.tolist() == [5.0, 7.0]
    assert tg.aminmax(x, dim=0, keepdim=True).max.shape == (1, 3)
    assert tg.aminmax(tg.tensor(4.0), dim=0).min.item() == 4.0
    assert tg.aminmax(tg.zeros(0, 2), dim=1).max.shape == (0,)
    b = tg.aminmax(tg.tensor([True, False]))
    assert b.min.item() is False and b.max.dtype is tg.bool
    assert tg.aminmax(tg.tensor([3, 1, 2])).max.item() == 3
    assert np.isnan(tg.aminmax(tg.tensor([1.0, NAN])).min.item())
    n = tg.tensor([[1.0, NAN], [NAN, NAN]])
    assert tg.nansum(n).item() == 1.0
    assert tg.nansum(n, 1).tolist() == [1.0, 0.0]
    assert tg.nansum(n, ()).item() == 1.0
    assert tg.nansum(n, dtype=F64).dtype is F64
    assert tg.nansum(tg.tensor([1, 2])).item() == 3
    assert tg.nansum(tg.tensor([1, 2]), dtype=F64).dtype is F64
    m = tg.nanmean(n, 1).tolist()
    assert m[0] == 1.0 and np.isnan(m[1])
    assert tg.nanmean(n, dtype=F64).dtype is F64
    assert tg.nanmean(tg.tensor([2.0, NAN, 4.0])).item() == 3.0


def test_nanmean_gradient_at_an_all_nan_slice_is_zero():
    """(PyTorch: NaN there, 0 * (g / 0); tapegrad's where gives NaN elements no path.)"""
    x = leaf([[1.0, NAN], [3.0, NAN]])
    tg.nanmean(x, 0).sum().backward()
    assert numpy_of(x.grad).tolist() == [[0.5, 0.0], [0.5, 0.0]]


def test_repeat_interleave_values():
    x = tg.tensor([[1, 2], [3, 4]])
    assert tg.repeat_interleave(x, 2).tolist() == [1, 1, 2, 2, 3, 3, 4, 4]
    assert x.repeat_interleave(2, dim=0).tolist() == [[1, 2], [1, 2], [3, 4], [3, 4]]
    assert x.repeat_interleave(tg.tensor([1, 2]), dim=1).tolist() == [[1, 2, 2], [3, 4, 4]]
    assert x.repeat_interleave(tg.tensor(2), dim=1, output_size=4).tolist() == \
        [[1, 1, 2, 2], [3, 3, 4, 4]]
    assert x.repeat_interleave(0, 1).shape == (2, 0)
    assert tg.repeat_interleave(tg.tensor([2, 0, 1])).tolist() == [0, 0, 2]
    assert tg.repeat_interleave(tg.tensor(3.0), 2).tolist() == [3.0, 3.0]
    once = x.repeat_interleave(1, 0)
    once[0, 0] = 9
    assert x[0, 0].item() == 1                                      # always a copy
    y = tg.tensor([1.0, 2.0])
    once = y.repeat_interleave(1)
    once[0] = 9.0
    assert y[0].item() == 1.0


def test_tensor_only_methods():
    x = tg.arange(6.0).reshape(2, 3)
    assert x.sum_to_size(2, 3) is x
    assert x.sum_to_size(3).tolist() == [3.0, 5.0, 7.0]
    assert x.sum_to_size((2, 1)).tolist() == [[3.0], [12.0]]
    assert x.sum_to_size([1]).tolist() == [15.0]
    assert x.sum_to_size(()).shape == ()
    i = tg.tensor([[1, 2], [3, 4]])
    assert i.sum_to_size(2).tolist() == [4, 6] and i.sum_to_size(2).dtype is tg.int64
    assert x.nelement() == 6 and tg.zeros(0, 4).nelement() == 0
    assert [tg.zeros(1, dtype=d).element_size() for d in (tg.float32, F64, tg.int64, tg.bool)] \
        == [4, 8, 8, 1]
    assert x.is_complex() is False and tg.is_complex(i) is False


def test_installed_as_functions_and_methods():
    functions = ("addcmul", "addcdiv", "lerp", "nan_to_num", "logit", "xlogy", "fmax", "fmin",
                 "movedim", "moveaxis", "unflatten", "tile", "roll", "diag", "diagonal",
                 "trace", "diff", "take_along_dim", "tensor_split", "hsplit", "vsplit",
                 "aminmax", "nansum", "nanmean", "repeat_interleave", "is_complex")
    for name in functions:
        assert callable(getattr(tg, name)), name
        assert callable(getattr(tg.Tensor, name)), name
    for name in ("sum_to_size", "nelement", "element_size"):
        assert callable(getattr(tg.Tensor, name)) and not hasattr(tg, name), name


def test_installed_where_torch_has_them():
    torch = pytest.importorskip("torch")
    for name in ("addcmul", "addcdiv", "lerp", "nan_to_num", "logit", "xlogy", "fmax", "fmin",
                 "movedim", "moveaxis", "unflatten", "tile", "roll", "diag", "diagonal",
                 "trace", "diff", "take_along_dim", "tensor_split", "hsplit", "vsplit",
                 "aminmax", "nansum", "nanmean", "repeat_interleave", "is_complex",
                 "sum_to_size", "nelement", "element_size"):
        assert hasattr(tg, name) == hasattr(torch, name), name
        assert hasattr(tg.Tensor, name) == hasattr(torch.Tensor, name), name


# ------------------------------------------------------------------ argument errors
def _x(M):
    return M.arange(12.0).reshape(3, 4)


def _i(M):
    return M.arange(12).reshape(3, 4)


ERRORS = [
    (lambda M: M.addcdiv(_i(M), _i(M), _i(M)), RuntimeError,
     "Integer division with addcdiv is no longer supported"),
    (lambda M: M.addcmul(_x(M), _x(M), _x(M), value=_x(M)), TypeError,
     "addcmul(): argument 'value' must be Number, not Tensor"),
    (lambda M: M.addcmul(_x(M), _x(M), 2.0), TypeError,
     "addcmul(): argument 'tensor2' (position 3) must be Tensor, not float"),
    (lambda M: M.addcmul(*[M.tensor([True])] * 3), NotImplementedError,
     "\"addcmul_cpu_out\" not implemented for 'Bool'"),
    (lambda M: M.addcmul(M.ones(3), M.ones(2, 3), M.ones(4)), RuntimeError,
     "The size of tensor a (3) must match the size of tensor b (4) at non-singleton "
     "dimension 1"),
    (lambda M: M.lerp(_x(M), _x(M).double(), 0.5), RuntimeError,
     "expected dtype float for `end` but got dtype double"),
    (lambda M: M.lerp(_x(M), _x(M), _i(M)), RuntimeError,
     "expected dtype float for `weight` but got dtype long int"),
    (lambda M: M.lerp(_i(M), _i(M), 0.5), NotImplementedError,
     "\"lerp_kernel_scalar\" not implemented for 'Long'"),
    (lambda M: M.lerp(_i(M), _i(M), _i(M)), NotImplementedError,
     "\"lerp_kernel_tensor\" not implemented for 'Long'"),
    (lambda M: M.lerp(_x(M), 1.0, 0.5), TypeError,
     "lerp() received an invalid combination of arguments - got (Tensor, float, float)"),
    (lambda M: M.nan_to_num(_x(M), nan="a"), TypeError,
     "nan_to_num(): argument 'nan' must be float, not str"),
    (lambda M: M.nan_to_num(_x(M), posinf=[1]), TypeError,
     "nan_to_num(): argument 'posinf' must be float, not list"),
    (lambda M: M.logit(_x(M), eps="a"), TypeError,
     "logit(): argument 'eps' must be float, not str"),
    (lambda M: M.xlogy(2, 3), TypeError,
     "xlogy() received an invalid combination of arguments - got (int, int)"),
    (lambda M: M.fmax(_x(M), 1.0), TypeError,
     "fmax(): argument 'other' (position 2) must be Tensor, not float"),
    (lambda M: M.fmin([1.0], _x(M)), TypeError,
     "fmin(): argument 'input' (position 1) must be Tensor, not list"),
    (lambda M: M.movedim(M.zeros(2, 3, 4), (0, 0), (2, 1)), RuntimeError,
     "movedim: repeated dim in `source` ([0, 0])"),
    (lambda M: M.movedim(M.zeros(2, 3, 4), (0, 1), (2, -1)), RuntimeError,
     "movedim: repeated dim in `destination` ([2, -1])"),
    (lambda M: M.movedim(M.zeros(2, 3, 4), (0, 1), (2,)), RuntimeError,
     "movedim: Invalid source or destination dims: source ([0, 1] dims) should contain the "
     "same number of dims as destination ([2] dims)"),
    (lambda M: M.movedim(M.zeros(2, 3, 4), 3, 0), IndexError,
     "Dimension out of range (expected to be in range of [-3, 2], but got 3)"),
    (lambda M: M.movedim(_x(M), 0, (1,)), TypeError,
     "movedim() received an invalid combination of arguments - got (Tensor, int, tuple)"),
    (lambda M: M.unflatten(_x(M), 1, ()), RuntimeError, "unflatten: sizes must be non-empty"),
    (lambda M: M.unflatten(_x(M), 0, (2, 2)), RuntimeError,
     "unflatten: Provided sizes [2, 2] don't multiply up to the size of dim 0 (3) in the "
     "input tensor"),
    (lambda M: M.unflatten(_x(M), -1, (3, -1)), RuntimeError,
     "unflatten: Provided sizes [3, -1] don't multiply up to the size of dim 1 (4) in the "
     "input tensor"),
    (lambda M: M.unflatten(_x(M), 1, (-1, -1)), RuntimeError,
     "unflatten got an unexpected error:\nonly one dimension can be inferred"),
    (lambda M: M.unflatten(M.zeros(3, 0), 1, (0, -1)), RuntimeError,
     "unflatten got an unexpected error:\ncannot reshape tensor of 0 elements into shape "
     "[0, -1] because the unspecified dimension size -1 can be any value and is ambiguous"),
    (lambda M: M.unflatten(M.tensor(1.0), 0, (1,)), RuntimeError,
     "unflatten got an unexpected error:\nDimension specified as 0 but tensor has no "
     "dimensions"),
    (lambda M: M.unflatten(_x(M), 1, 4), TypeError,
     "unflatten(): argument 'sizes' (position 3) must be tuple of ints, not int"),
    (lambda M: M.unflatten(_x(M), 1, (2.0, 2)), TypeError,
     "unflatten(): argument 'sizes' (position 3) must be tuple of ints, but found element "
     "of type float at pos 0"),
    (lambda M: M.unflatten(_x(M), 1.0, (2, 2)), TypeError,
     "unflatten(): argument 'dim' (position 2) must be int, not float"),
    (lambda M: M.tile(_x(M), 2), TypeError,
     "tile(): argument 'dims' (position 2) must be tuple of ints, not int"),
    (lambda M: M.tile(_x(M), (2.0,)), TypeError,
     "tile(): argument 'dims' (position 2) must be tuple of ints, but found element of type "
     "float at pos 0"),
    (lambda M: M.tile(_x(M), (-1,)), RuntimeError,
     "Trying to create tensor with negative dimension -4: [3, -4]"),
    (lambda M: M.roll(_x(M), (1, 2), 0), RuntimeError,
     "shifts and dimensions must align. shifts: 2, dims:1"),
    (lambda M: M.roll(_x(M), (1, 2)), RuntimeError,
     "shifts and dimensions must align. shifts: 2, dims:0"),
    (lambda M: M.roll(_x(M), 1, (0, 0)), RuntimeError,
     "shifts and dimensions must align. shifts: 1, dims:2"),
    (lambda M: M.roll(_x(M), (), ()), RuntimeError, "`shifts` required"),
    (lambda M: M.roll(_x(M), 1.5), TypeError,
     "roll(): argument 'shifts' (position 2) must be tuple of ints, not float"),
    (lambda M: M.roll(_x(M), 1, 2), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    (lambda M: M.roll(M.tensor(1.0), 1, 0), IndexError,
     "Dimension specified as 0 but tensor has no dimensions"),
    (lambda M: M.diag(M.zeros(2, 2, 2)), RuntimeError,
     "diag(): Supports 1D or 2D tensors. Got 3D"),
    (lambda M: M.diag(M.tensor(1.0)), RuntimeError, "diag(): Supports 1D or 2D tensors. Got 0D"),
    (lambda M: M.diag(_x(M), 1.0), TypeError,
     "diag(): argument 'diagonal' (position 2) must be int, not float"),
    (lambda M: M.diag(_x(M), True), TypeError,
     "diag(): argument 'diagonal' (position 2) must be int, not bool"),
    (lambda M: M.diag([1, 2]), TypeError,
     "diag(): argument 'input' (position 1) must be Tensor, not list"),
    (lambda M: M.diagonal(_x(M), 0, -1, 1), RuntimeError,
     "diagonal dimensions cannot be identical -1, 1"),
    (lambda M: M.diagonal(M.zeros(3)), IndexError,
     "Dimension out of range (expected to be in range of [-1, 0], but got 1)"),
    (lambda M: M.diagonal(_x(M), 0.5), TypeError,
     "diagonal(): argument 'offset' (position 2) must be int, not float"),
    (lambda M: M.trace(M.zeros(3)), RuntimeError,
     "trace: expected a matrix, but got tensor with dim 1"),
    (lambda M: M.trace(M.ones(2, 2, dtype=M.bool)), NotImplementedError,
     "\"trace\" not implemented for 'Bool'"),
    (lambda M: M.diff(M.tensor(1.0)), RuntimeError,
     "diff expects input to be at least one-dimensional"),
    (lambda M: M.diff(_x(M), -1), RuntimeError, "order must be non-negative but got -1"),
    (lambda M: M.diff(_x(M), 1.0), TypeError,
     "diff(): argument 'n' (position 2) must be int, not float"),
    (lambda M: M.diff(_x(M), 1, 0, prepend=M.zeros(4)), RuntimeError,
     "diff expects prepend or append to be the same dimension as input"),
    (lambda M: M.diff(_x(M), 1, 0, append=M.zeros(1, 3)), RuntimeError,
     "diff expects the shape of tensor to prepend or append to match that of input except "
     "along the differencing dimension; input.size(1) = 4, but got tensor.size(1) = 3"),
    (lambda M: M.diff(_x(M), prepend=1.0), TypeError,
     "diff(): argument 'prepend' must be Tensor, not float"),
    (lambda M: M.take_along_dim(_x(M), M.tensor([0, 5]), 0), RuntimeError,
     "torch.take_along_dim(): input and indices should have the same number of dimensions, "
     "but got 2 dimensions for input, and 1 dimensions for indices"),
    (lambda M: M.take_along_dim(_x(M), M.tensor([[0.0]]), 0), RuntimeError,
     "torch.take_along_dim(): dtype of indices should be Long but got Float"),
    (lambda M: M.take_along_dim(_x(M), M.tensor([[0, 1, 2]]), 0), RuntimeError,
     "The size of tensor a (4) must match the size of tensor b (3) at non-singleton "
     "dimension 1"),
    (lambda M: M.take_along_dim(_x(M), M.tensor([[12]])), RuntimeError,
     "index 12 is out of bounds for dimension 0 with size 12"),
    (lambda M: M.take_along_dim(_x(M), M.tensor([-1])), RuntimeError,
     "index -1 is out of bounds for dimension 0 with size 12"),
    (lambda M: M.take_along_dim(_x(M), [[0]], 1), TypeError,
     "take_along_dim(): argument 'indices' (position 2) must be Tensor, not list"),
    (lambda M: M.take_along_dim(_x(M), M.tensor([[0]]), 1.0), TypeError,
     "take_along_dim(): argument 'dim' (position 3) must be int, not float"),
    (lambda M: M.tensor_split(M.tensor(1.0), 2), RuntimeError,
     "tensor_split expected at least a 1-dimensional tensor, but got a tensor with 0 dims"),
    (lambda M: M.tensor_split(_x(M), 0, 1), RuntimeError,
     "number of sections must be larger than 0, got 0"),
    (lambda M: M.tensor_split(_x(M), M.tensor([[2]]), 1), RuntimeError,
     "tensor_split expected tensor_indices_or_sections to be a zero-dimensional or "
     "one-dimensional tensor, but got a tensor with 2 dims"),
    (lambda M: M.tensor_split(_x(M), M.tensor([2.0]), 1), RuntimeError,
     "tensor_split expected tensor_indices_or_sections to have dtype of long, but got Float"),
    (lambda M: M.tensor_split(_x(M), 2.0), TypeError,
     "tensor_split() received an invalid combination of arguments - got (Tensor, float)"),
    (lambda M: M.tensor_split(_x(M), 2, 2), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    (lambda M: M.hsplit(_x(M), 3), RuntimeError,
     "torch.hsplit attempted to split along dimension 1, but the size of the dimension 4 "
     "is not divisible by the split_size 3!"),
    (lambda M: M.hsplit(_x(M), 0), RuntimeError,
     "torch.hsplit attempted to split along dimension 1, but the size of the dimension 4 "
     "is not divisible by the split_size 0!"),
    (lambda M: M.hsplit(M.zeros(4), 3), RuntimeError,
     "torch.hsplit attempted to split along dimension 0, but the size of the dimension 4 "
     "is not divisible by the split_size 3!"),
    (lambda M: M.hsplit(M.tensor(1.0), 1), RuntimeError,
     "torch.hsplit requires a tensor with at least 1 dimension, but got a tensor with 0 "
     "dimensions!"),
    (lambda M: M.hsplit(_x(M), 2.0), TypeError,
     "hsplit() received an invalid combination of arguments - got (Tensor, float)"),
    (lambda M: M.vsplit(M.zeros(4), 2), RuntimeError,
     "torch.vsplit requires a tensor with at least 2 dimension, but got a tensor with 1 "
     "dimensions!"),
    (lambda M: M.vsplit(_x(M), 2), RuntimeError,
     "torch.vsplit attempted to split along dimension 0, but the size of the dimension 3 "
     "is not divisible by the split_size 2!"),
    (lambda M: M.aminmax(M.zeros(0)), RuntimeError,
     "aminmax(): cannot compute aminmax over an empty dimension as the operation has no "
     "identity."),
    (lambda M: M.aminmax(M.zeros(0, 3), dim=0), IndexError,
     "aminmax: Expected reduction dim 0 to have non-zero size."),
    (lambda M: M.aminmax(_x(M), dim=(0, 1)), TypeError,
     "aminmax(): argument 'dim' must be int, not tuple"),
    (lambda M: M.aminmax(_x(M), 1), TypeError,
     "aminmax() takes 1 positional argument but 2 were given"),
    (lambda M: M.nanmean(_i(M)), RuntimeError,
     "nanmean(): expected input to have floating point or complex dtype but got Long"),
    (lambda M: M.nanmean(_x(M), dtype=M.int64), RuntimeError,
     "nanmean(): could not infer output dtype. Optional dtype must be either a floating "
     "point or complex dtype. Got: Long"),
    (lambda M: M.nansum(_x(M), 1.0), TypeError,
     "nansum(): argument 'dim' (position 2) must be tuple of ints, not float"),
    (lambda M: M.repeat_interleave(_x(M), -1, 1), RuntimeError, "Repeats must be non-negative"),
    (lambda M: M.repeat_interleave(_x(M), M.tensor([1, -2, 1]), 0), RuntimeError,
     "repeats can not be negative"),
    (lambda M: M.repeat_interleave(_x(M), M.tensor([1, 2]), 0), RuntimeError,
     "repeats must have the same size as input along dim, but got repeats.size(0) = 2 and "
     "input.size(0) = 3"),
    (lambda M: M.repeat_interleave(_x(M), M.tensor([1, 2])), RuntimeError,
     "repeats must have the same size as input along dim, but got repeats.size(0) = 2 and "
     "input.size(0) = 12"),
    (lambda M: M.repeat_interleave(_x(M), M.tensor([[1, 2]]), 0), RuntimeError,
     "repeats must be 0-dim or 1-dim tensor"),
    (lambda M: M.repeat_interleave(_x(M), M.tensor([1.0, 2.0, 3.0]), 0), NotImplementedError,
     "\"repeat_interleave_cpu\" not implemented for 'Float'"),
    (lambda M: M.repeat_interleave(_x(M), 2, 0, output_size=5), RuntimeError,
     "repeat_interleave: Invalid output_size, expected 6 but got 5"),
    (lambda M: M.repeat_interleave(_x(M), M.tensor([1, 1, 1]), 0, output_size=4),
     RuntimeError, "allocated size does not match required size"),
    (lambda M: M.repeat_interleave(M.tensor(3)), RuntimeError,
     "repeat_interleave only accept 1D vector as repeat"),
    (lambda M: M.repeat_interleave(M.tensor([1, -2])), RuntimeError,
     "repeats can not be negative"),
    (lambda M: M.repeat_interleave(_x(M), 2.0, 0), TypeError,
     "repeat_interleave() received an invalid combination of arguments - got (Tensor, "
     "float, int)"),
    (lambda M: M.repeat_interleave(_x(M), True), TypeError,
     "repeat_interleave() received an invalid combination of arguments - got (Tensor, "
     "bool)"),
    (lambda M: M.repeat_interleave(M.tensor(3.0), 2, 0), IndexError,
     "Dimension out of range (expected to be in range of [-1, 0], but got 1)"),
    (lambda M: _x(M).sum_to_size(3), RuntimeError,
     "size {[3]} is not expandable to size {[3, 4]}."),
    (lambda M: _x(M).sum_to_size(1, 3, 4), RuntimeError,
     "size {[1, 3, 4]} is not expandable to size {[3, 4]}."),
    (lambda M: _x(M).sum_to_size(-1, 4), RuntimeError,
     "size {[-1, 4]} is not expandable to size {[3, 4]}."),
    (lambda M: _x(M).sum_to_size(), TypeError,
     "sum_to_size() missing 1 required positional arguments: \"size\""),
    (lambda M: _x(M).sum_to_size(2.0), TypeError,
     "sum_to_size(): argument 'size' (position 1) must be tuple of ints, not float"),
    (lambda M: M.is_complex(1.0), TypeError,
     "is_complex(): argument 'input' (position 1) must be Tensor, not float"),
]


@pytest.mark.parametrize("call, exc, message", ERRORS, ids=[e[2][:60] for e in ERRORS])
def test_argument_errors(call, exc, message):
    """tapegrad raises exactly this type with a message that starts with this text."""
    with pytest.raises(exc) as info:
        call(tg)
    assert type(info.value) is exc
    assert str(info.value).startswith(message), str(info.value)


@pytest.mark.parametrize("call, exc, message", ERRORS, ids=[e[2][:60] for e in ERRORS])
def test_argument_errors_are_torchs(call, exc, message):
    """...and so does PyTorch (its messages may go on: signatures, a C++ trace)."""
    torch = pytest.importorskip("torch")
    with pytest.raises(exc) as info:
        call(torch)
    assert str(info.value).startswith(message), str(info.value)


# ------------------------------------------------------------------ tapegrad.compile
REPLAYED = {
    "addcmul_addcdiv": lambda y, z: tg.addcmul(y, y, z, value=0.5) + tg.addcdiv(y, y, z * z + 1),
    "lerp": lambda y, z: tg.lerp(y, z, 0.7) + tg.lerp(y, z, z.sigmoid()),
    "nan_to_num": lambda y, z: tg.nan_to_num(y.log()),
    "logit": lambda y, z: tg.logit(y.sigmoid(), eps=0.2) + tg.logit(y.sigmoid()),
    "xlogy": lambda y, z: tg.xlogy(y, z.abs()) + tg.xlogy(y - y, z),
    "fmax_fmin": lambda y, z: tg.fmax(y, z.log()) + tg.fmin(y, z),
    "movedim_unflatten": lambda y, z: tg.movedim(y, 0, 1).unflatten(0, (1, 3)),
    "tile_roll": lambda y, z: y.tile(2, 1).roll(1) + y.roll((1, 2), (0, 1)).repeat(2, 1),
    "diag": lambda y, z: tg.diag(y[0], 1).sum(0) + tg.diag(tg.diag(y[:, :2]), 2).sum(1),
    "diagonal_trace": lambda y, z: y.diagonal(1) * tg.trace(y),
    "diff": lambda y, z: tg.diff(y, 2, prepend=z),
    "splits": lambda y, z: tg.tensor_split(y, 2, 1)[1] * y.hsplit([1])[1],
    "aminmax": lambda y, z: tg.aminmax(y, dim=1).max - tg.aminmax(y).min,
    "nansum_nanmean": lambda y, z: tg.nansum(y.log(), 1) + tg.nanmean(y.log(), 1),
    "repeat_interleave_sum_to_size": lambda y, z: y.repeat_interleave(2, 0).sum_to_size(1, 3),
}


@pytest.mark.parametrize("name", list(REPLAYED))
def test_compiled_replay_matches_eager(name):
    """Ops that read no index in Python record without a graph break (their constants
    are made once) and replay the values and gradients of an eager run."""
    fn = REPLAYED[name]

    def run(step, k):
        w.grad = None
        x = tg.tensor(np.full((2, 3), k + 0.5), dtype=F64)
        z = tg.tensor(np.linspace(-1.0, 1.0, 6).reshape(2, 3) * (k + 1), dtype=F64)
        return step(x, z).item(), numpy_of(w.grad).copy()

    def step(x, z):
        out = fn(x * w, z)
        loss = (out * out).sum()
        loss.backward()
        return loss

    w = leaf(np.arange(1.0, 7.0).reshape(2, 3) / 3 - 1)
    compiled = tg.compile(step, fuse=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", tg.CompileWarning)
        replayed = [run(compiled, k) for k in range(3)]
    assert compiled.stats == {"recordings": 1, "replays": 2}
    for k, (loss, grad) in enumerate(replayed):
        ref_loss, ref_grad = run(step, k)
        np.testing.assert_array_equal(loss, ref_loss)
        np.testing.assert_array_equal(grad, ref_grad)
