"""The ops with arguments and the ops along a dim: clamp family, maximum/minimum, sign,
floor, ceil, round, erf, leaky_relu, gelu, softplus, softmax, log_softmax, logsumexp,
cumsum, prod, var/std, norm, outer, dot, einsum, argmax/argmin and comparisons.

Values against NumPy reference formulas (float32 and float64), gradients by finite
differences (tapegrad.testing.gradcheck, float64) on contiguous, transposed, step-sliced,
expanded, 0-d and non-contiguous-leaf inputs, grad_fn names, special values, a few
hypothesis-generated shapes, and (when torch is importable) PyTorch itself.

Gradcheck inputs keep |x - kink| >= 0.1 for every kink of the op, and no ties where an
op picks one element (maximum/minimum, inf-norms).
"""
import math
import operator

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

import tapegrad as tg
from tests.helpers import (DTYPES, F64, assert_float32_composite_matches_torch, assert_gradcheck,
                           leaf, make_tensor, nc_leaf, numpy_of, rng)

F = tg.nn.functional
INF = math.inf
NAN = math.nan
TOL = {"float32": dict(rtol=2e-6, atol=2e-6), "float64": dict(rtol=1e-12, atol=1e-12)}
HYP = settings(max_examples=15, deadline=None, derandomize=True,
               suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------ helpers
def check(t, expected, dtype, scale=1.0):
    """t is a tapegrad tensor of the given dtype with expected's shape and values."""
    expected = np.asarray(expected, dtype=np.float64)
    assert isinstance(t, tg.Tensor)
    assert t.dtype is dtype
    assert tuple(t.shape) == expected.shape
    tol = {k: v * scale for k, v in TOL[dtype.name].items()}
    np.testing.assert_allclose(numpy_of(t).astype(np.float64), expected, equal_nan=True, **tol)


def kink_free(shape, kinks=(), seed=0, lo=-2.0, hi=2.0, gap=0.1):
    """Uniform values in [lo, hi] at least gap away from every kink."""
    r = rng(seed)
    a = r.uniform(lo, hi, size=shape)
    kinks = np.asarray(kinks, np.float64).reshape(-1)
    for _ in range(1000):
        bad = np.zeros(np.shape(a), bool) if kinks.size == 0 else \
            (np.abs(np.asarray(a)[..., None] - kinks) < gap).any(-1)
        if not bad.any():
            return a
        a = np.where(bad, r.uniform(lo, hi, size=shape), a)
    raise AssertionError("could not draw kink-free values")


def distinct_abs(shape, seed=0, lo=0.2, step=0.043):
    """Random signs, magnitudes pairwise >= step apart and >= lo: no ties in |x|, no 0."""
    n = int(np.prod(shape))
    r = rng(seed)
    mags = lo + r.permutation(n) * step
    return (mags * r.choice([-1.0, 1.0], size=n)).reshape(shape)


# Input layouts: (base shape, the view in tapegrad, the same view in NumPy).
LAYOUTS = {
    "contig": ((3, 4), lambda t: t, lambda a: a),
    "T": ((4, 3), lambda t: t.T, lambda a: a.T),
    "step": ((6, 8), lambda t: t[1::2, ::2], lambda a: a[1::2, ::2]),
    "T_step": ((9, 4), lambda t: t.T[:, ::3], lambda a: a.T[:, ::3]),
    "expand": ((3, 1), lambda t: t.expand(2, 3, 4), lambda a: np.broadcast_to(a, (2, 3, 4))),
    "0d": ((), lambda t: t, lambda a: a),
}
GRAD_LAYOUTS = ["contig", "T", "step", "expand", "0d", "nc_leaf"]


def layout_input(layout, dtype, data):
    """(tapegrad view, NumPy view) of data (data has the layout's base shape)."""
    _, tview, nview = LAYOUTS[layout]
    base = np.asarray(data).astype(dtype.np)
    return tview(make_tensor(base, dtype)), nview(base).astype(np.float64)


def grad_leaf(layout, data_fn):
    """(leaf, view) for gradcheck: data_fn(shape) gives the leaf's float64 values."""
    if layout == "nc_leaf":
        return nc_leaf(data_fn((3, 4))), (lambda t: t)
    shape, tview, _ = LAYOUTS[layout]
    return leaf(data_fn(shape)), tview


def np_erf(a):
    return np.vectorize(math.erf, otypes=[np.float64])(a)


# ------------------------------------------------------------------ elementwise ops
HALF_GRID = np.arange(-2.5, 2.51, 0.5)        # jumps of floor / ceil / round (and sign)


def _gelu(a):
    return 0.5 * a * (1 + np_erf(a / math.sqrt(2)))


def _gelu_tanh(a):
    return 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3)))


def _softplus(a, beta=1.0, threshold=20.0):
    with np.errstate(over="ignore"):
        return np.where(a * beta > threshold, a, np.log1p(np.exp(a * beta)) / beta)


# name: (tapegrad call, NumPy reference, kinks)
ELEMENTWISE = {
    "clamp": (lambda t: t.clamp(-0.5, 0.8), lambda a: np.minimum(np.maximum(a, -0.5), 0.8),
              (-0.5, 0.8)),
    "clamp_min_only": (lambda t: tg.clamp(t, min=-0.5), lambda a: np.maximum(a, -0.5), (-0.5,)),
    "clamp_max_only": (lambda t: t.clamp(max=0.8), lambda a: np.minimum(a, 0.8), (0.8,)),
    "clamp_min_gt_max": (lambda t: t.clamp(1.0, -1.0), lambda a: np.full_like(a, -1.0),
                         (1.0, -1.0)),
    "clip": (lambda t: t.clip(-1.0, 1.0), lambda a: np.clip(a, -1.0, 1.0), (-1.0, 1.0)),
    "tg.clip": (lambda t: tg.clip(t, max=0.3), lambda a: np.minimum(a, 0.3), (0.3,)),
    "clamp_min": (lambda t: tg.clamp_min(t, 0.3), lambda a: np.maximum(a, 0.3), (0.3,)),
    "clamp_max": (lambda t: t.clamp_max(-0.3), lambda a: np.minimum(a, -0.3), (-0.3,)),
    "sign": (lambda t: t.sign(), np.sign, (0.0,)),
    "floor": (lambda t: tg.floor(t), np.floor, HALF_GRID),
    "ceil": (lambda t: t.ceil(), np.ceil, HALF_GRID),
    "round": (lambda t: tg.round(t), np.rint, HALF_GRID),
    "erf": (lambda t: tg.erf(t), np_erf, ()),
    "leaky_relu": (lambda t: F.leaky_relu(t), lambda a: np.where(a > 0, a, 0.01 * a), (0.0,)),
    "leaky_relu_slope": (lambda t: F.leaky_relu(t, negative_slope=0.2),
                         lambda a: np.where(a > 0, a, 0.2 * a), (0.0,)),
    "gelu": (lambda t: F.gelu(t), _gelu, ()),
    "gelu_tanh": (lambda t: F.gelu(t, approximate="tanh"), _gelu_tanh, ()),
    "softplus": (lambda t: F.softplus(t), _softplus, ()),
    "softplus_beta": (lambda t: F.softplus(t, beta=2.0, threshold=1.5),
                      lambda a: _softplus(a, 2.0, 1.5), (0.75,)),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", list(ELEMENTWISE))
@pytest.mark.parametrize("dtype", DTYPES)
def test_elementwise_values(name, dtype, layout):
    fn, ref, _ = ELEMENTWISE[name]
    t, a = layout_input(layout, dtype, kink_free(LAYOUTS[layout][0], seed=1))
    check(fn(t), ref(a), dtype, scale=2)


@pytest.mark.parametrize("layout", GRAD_LAYOUTS)
@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise_gradcheck(name, layout):
    fn, _, kinks = ELEMENTWISE[name]
    x, view = grad_leaf(layout, lambda s: kink_free(s, kinks, seed=2))
    assert_gradcheck(lambda t: fn(view(t)), x)


def test_elementwise_backward_values():
    """The analytic gradients themselves, element by element."""
    a = np.array([-1.7, -0.6, -0.2, 0.3, 0.9, 1.6])
    cases = [
        (lambda t: t.clamp(-0.5, 0.8), ((a >= -0.5) & (a <= 0.8)).astype(float)),
        (lambda t: t.clamp(1.0, -1.0), np.zeros(6)),
        (lambda t: F.leaky_relu(t, 0.2), np.where(a > 0, 1.0, 0.2)),
        (lambda t: tg.erf(t), 2 / math.sqrt(math.pi) * np.exp(-a * a)),
        (lambda t: F.gelu(t), 0.5 * (1 + np_erf(a / math.sqrt(2)))
         + a * np.exp(-a * a / 2) / math.sqrt(2 * math.pi)),
        (lambda t: F.softplus(t, beta=2.0, threshold=1.5),
         np.where(2 * a > 1.5, 1.0, 1 / (1 + np.exp(-2 * a)))),
    ]
    g = rng(3).standard_normal(6)
    for fn, deriv in cases:
        x = leaf(a)
        fn(x).backward(make_tensor(g))
        np.testing.assert_allclose(x.grad.numpy(), g * deriv, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ["sign", "floor", "ceil", "round"])
def test_piecewise_constant_ops_have_zero_gradient(name):
    x = leaf([-1.5, -0.5, 0.0, 0.5, 1.5, 2.5])       # jumps included: still exactly 0
    ELEMENTWISE[name][0](x).backward(make_tensor(np.arange(1.0, 7.0)))
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros(6))


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_half_to_even(dtype):
    x = make_tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.49999997, -0.49999997], dtype)
    check(x.round(), [-2.0, -2.0, -0.0, 0.0, 2.0, 2.0, 4.0, 0.0, -0.0], dtype)
    check(make_tensor([-1.5, -0.5, 0.5, 1.5], dtype).floor(), [-2.0, -1.0, 0.0, 1.0], dtype)
    check(make_tensor([-1.5, -0.5, 0.5, 1.5], dtype).ceil(), [-1.0, -0.0, 1.0, 2.0], dtype)


def test_sign_floor_ceil_round_keep_integer_and_bool_dtypes():
    i = tg.tensor([3, -2, 0])
    for name, expected in (("sign", [1, -1, 0]), ("floor", [3, -2, 0]), ("ceil", [3, -2, 0]),
                           ("round", [3, -2, 0])):
        out = getattr(i, name)()
        assert out.dtype is tg.int64 and out.tolist() == expected
    b = tg.tensor([True, False]).sign()                 # PyTorch: a bool tensor, unchanged
    assert b.dtype is tg.bool and b.tolist() == [True, False]


@pytest.mark.parametrize("dtype", DTYPES)
def test_erf_wide_range(dtype):
    a = np.array([-INF, -6.0, -1.0, -1e-3, 0.0, 1e-8, 0.5, 2.0, 6.0, INF])
    check(tg.erf(make_tensor(a, dtype)), np_erf(a), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softplus_threshold_returns_input(dtype):
    x = make_tensor([1.0, 10.0, 19.0, 21.0, 100.0, -100.0], dtype)
    out = numpy_of(F.softplus(x))
    assert out[3] == np.asarray(21.0, dtype.np) and out[4] == 100.0      # linear branch
    check(F.softplus(x), _softplus(numpy_of(x).astype(np.float64)), dtype)
    check(F.softplus(x, beta=0.5, threshold=2.0),
          _softplus(numpy_of(x).astype(np.float64), 0.5, 2.0), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_clamp_nan_stays_nan(dtype):
    x = make_tensor([NAN, -3.0, 0.5, 3.0, INF, -INF], dtype)
    for out in (x.clamp(-1.0, 1.0), x.clamp(min=0.0), x.clamp(max=0.0), x.clamp(2.0, 1.0),
                tg.clamp_min(x, 0.0), x.clamp_max(0.0)):
        assert np.isnan(numpy_of(out)[0])
    check(x.clamp(-1.0, 1.0), [NAN, -1.0, 0.5, 1.0, 1.0, -1.0], dtype)
    check(x.clamp(2.0, 1.0), [NAN, 1.0, 1.0, 1.0, 1.0, 1.0], dtype)   # min > max: max


def test_clamp_nan_gets_zero_gradient():
    x = leaf([NAN, 0.5, 3.0])
    x.clamp(-1.0, 1.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 1.0, 0.0])


def test_clamp_bounds_are_inclusive_for_the_gradient():
    x = leaf([-1.0, 0.0, 1.0])
    x.clamp(-1.0, 1.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 1.0, 1.0])      # PyTorch's mask


def test_clamp_arguments():
    x = make_tensor([0.5, 2.0], tg.float32)
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max'"):
        x.clamp()
    check(x.clamp(make_tensor(1.0, tg.float32)), [1.0, 2.0], tg.float32)  # 0-d tensor bound
    i = tg.tensor([1, 5, -3])
    out = i.clamp(0, 2)
    assert out.dtype is tg.int64 and out.tolist() == [1, 2, 0]
    assert i.clamp(min=0.5).dtype is tg.float32                           # promotes, as PyTorch


def test_clamp_inplace():
    base = np.array([[0.5, -2.0, 3.0], [1.5, -0.2, -9.0]])
    x = make_tensor(base)
    v0 = x._version
    assert x.clamp_(-1.0, 1.0) is x
    check(x, np.clip(base, -1.0, 1.0), F64)
    assert x._version == v0 + 1
    assert x.clip_(min=0.0) is x
    check(x, np.clip(base, 0.0, 1.0), F64)
    assert x._version == v0 + 2
    y = make_tensor(base)
    y.T[::2].clamp_(max=0.0)                   # through a strided view: writes the base
    check(y, np.where(np.arange(3) % 2 == 0, np.minimum(base, 0.0), base), F64)
    assert y._version == 1


def test_clamp_inplace_in_a_graph():
    w = leaf([0.5, -2.0, 3.0])
    with pytest.raises(RuntimeError, match="leaf"):
        w.clamp_(0.0, 1.0)
    h = w * 2.0
    h.clamp_(-1.0, 1.0)
    assert h.grad_fn.name() == "ClampBackward1"
    assert h.grad_fn.next_functions[0][0].name() == "MulBackward0"
    (h * make_tensor([1.0, 2.0, 3.0])).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 0.0, 0.0])
    assert_gradcheck(lambda t: (t * 1.0).clamp_(-1.0, 1.0).exp(),
                     leaf(kink_free((2, 3), (-1.0, 1.0), seed=4)))


# ------------------------------------------------------------------ maximum / minimum
MAXMIN = {"maximum": (tg.maximum, np.maximum), "minimum": (tg.minimum, np.minimum)}
SHAPE_PAIRS = [((2, 3), (2, 3)), ((3, 1, 4), (2, 4)), ((4,), (3, 4)), ((2, 1), (1, 3)),
               ((), (2, 3)), ((2, 3), ()), ((), ())]


def tie_free_pair(sa, sb, seed=0):
    """a on the grid 0.37 k, b on 0.37 k + 0.17: |a - b| >= 0.17 however they broadcast."""
    r = rng(seed)
    return r.integers(-5, 6, size=sa) * 0.37, r.integers(-5, 6, size=sb) * 0.37 + 0.17


@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", list(MAXMIN))
@pytest.mark.parametrize("dtype", DTYPES)
def test_maximum_minimum_values(name, dtype, shapes):
    fn, ref = MAXMIN[name]
    a, b = tie_free_pair(*shapes, seed=len(shapes[0]))
    ta, tb = make_tensor(a, dtype), make_tensor(b, dtype)
    expected = ref(a.astype(dtype.np), b.astype(dtype.np))
    check(fn(ta, tb), expected, dtype)
    check(getattr(ta, name)(tb), expected, dtype)


@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", list(MAXMIN))
def test_maximum_minimum_gradcheck(name, shapes):
    fn = MAXMIN[name][0]
    a, b = tie_free_pair(*shapes, seed=3)
    assert_gradcheck(fn, leaf(a), leaf(b))


@pytest.mark.parametrize("name", list(MAXMIN))
def test_maximum_minimum_gradcheck_non_contiguous(name):
    fn = MAXMIN[name][0]
    a, b = tie_free_pair((4, 3), (3, 8), seed=5)
    ta, tb = leaf(a), leaf(b)
    assert_gradcheck(lambda x, y: fn(x.T, y[:, ::2]), ta, tb)
    assert_gradcheck(lambda x, y: fn(y.T[::2].T, x.T[1]), ta, tb)
    assert_gradcheck(fn, nc_leaf(a), leaf(b[:, 0]))


@pytest.mark.parametrize("name", list(MAXMIN))
def test_maximum_minimum_ties_split_the_gradient(name):
    fn = MAXMIN[name][0]
    a, b = leaf([1.0, 2.0, 3.0]), leaf([1.0, 0.0, 5.0])
    fn(a, b).backward(make_tensor([2.0, 2.0, 2.0]))
    big = name == "maximum"
    np.testing.assert_array_equal(a.grad.numpy(), [1.0, 2.0 if big else 0.0, 0.0 if big else 2.0])
    np.testing.assert_array_equal(b.grad.numpy(), [1.0, 0.0 if big else 2.0, 2.0 if big else 0.0])
    c = leaf([0.7, -0.3])
    fn(c, c).sum().backward()                  # the same tensor on both sides: 1/2 + 1/2
    np.testing.assert_array_equal(c.grad.numpy(), [1.0, 1.0])


@pytest.mark.parametrize("name", list(MAXMIN))
@pytest.mark.parametrize("dtype", DTYPES)
def test_maximum_minimum_nan_propagates(name, dtype):
    fn = MAXMIN[name][0]
    a = make_tensor([NAN, 1.0, NAN, INF, -INF], dtype)
    b = make_tensor([1.0, NAN, NAN, 2.0, 2.0], dtype)
    ref = MAXMIN[name][1](numpy_of(a), numpy_of(b))
    check(fn(a, b), ref, dtype)
    check(fn(b, a), ref, dtype)


def test_maximum_minimum_need_tensors():
    with pytest.raises(TypeError):
        tg.maximum(tg.ones(2), 1.0)
    with pytest.raises(TypeError):
        tg.minimum(1.0, tg.ones(2))


# ------------------------------------------------------------------ ops along a dim
def np_softmax(a, axis):
    e = np.exp(a - a.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def np_log_softmax(a, axis):
    m = a.max(axis, keepdims=True)
    return a - m - np.log(np.exp(a - m).sum(axis, keepdims=True))


def np_logsumexp(a, axis=None, keepdims=False):
    m = a.max(axis, keepdims=True)
    r = m + np.log(np.exp(a - m).sum(axis, keepdims=True))
    return r if keepdims else np.squeeze(r, axis)


def np_norm(a, p, axis=None, keepdims=False):
    x = np.abs(a)
    if p == INF:
        return x.max(axis, keepdims=keepdims)
    if p == -INF:
        return x.min(axis, keepdims=keepdims)
    if p == 0:
        return (x != 0).sum(axis, keepdims=keepdims).astype(np.float64)
    return (x ** p).sum(axis, keepdims=keepdims) ** (1.0 / p)


# same-shape ops: name -> (tapegrad call(t, dim), NumPy reference(a, axis))
SCANS = {
    "softmax": (lambda t, d: tg.softmax(t, d), np_softmax),
    "softmax_method": (lambda t, d: t.softmax(dim=d), np_softmax),
    "log_softmax": (lambda t, d: F.log_softmax(t, d), np_log_softmax),
    "log_softmax_method": (lambda t, d: t.log_softmax(d), np_log_softmax),
    "cumsum": (lambda t, d: tg.cumsum(t, d), lambda a, ax: np.cumsum(a, ax)),
    "cumsum_method": (lambda t, d: t.cumsum(dim=d), lambda a, ax: np.cumsum(a, ax)),
}
NORM_PS = [2, 1, 3, 0.5, INF, -INF, 0]
# reductions: name -> (tapegrad call(t, **kw), NumPy reference(a, axis=, keepdims=));
# kw is {} (everything) or dim= and keepdim=
REDUCTIONS = {
    "logsumexp": (lambda t, **kw: tg.logsumexp(t, **kw), np_logsumexp),
    "logsumexp_method": (lambda t, **kw: t.logsumexp(**kw), np_logsumexp),
    "prod": (lambda t, **kw: t.prod(**kw), np.prod),
    "var": (lambda t, **kw: t.var(**kw), lambda a, **kw: np.var(a, ddof=1, **kw)),
    "var_unbiased_false": (lambda t, **kw: tg.var(t, unbiased=False, **kw), np.var),
    "var_correction0": (lambda t, **kw: t.var(correction=0, **kw), np.var),
    "var_correction2": (lambda t, **kw: t.var(correction=2, **kw),
                        lambda a, **kw: np.var(a, ddof=2, **kw)),
    "std": (lambda t, **kw: tg.std(t, **kw), lambda a, **kw: np.std(a, ddof=1, **kw)),
    "std_unbiased_false": (lambda t, **kw: t.std(unbiased=False, **kw), np.std),
    "std_correction2": (lambda t, **kw: t.std(correction=2, **kw),
                        lambda a, **kw: np.std(a, ddof=2, **kw)),
    "norm": (lambda t, **kw: t.norm(**kw), lambda a, **kw: np_norm(a, 2, **kw)),
    **{f"norm_p{p}": (lambda t, p=p, **kw: tg.norm(t, p, **kw),
                      lambda a, p=p, **kw: np_norm(a, p, **kw)) for p in NORM_PS},
}


def _dims_of(layout):
    return [0, 1, 2, -1] if layout == "expand" else [0, 1, -1, -2]


def _reduce_kws(name, layout):
    """(tapegrad kwargs, NumPy kwargs) for every dim / keepdim to try."""
    nd = 3 if layout == "expand" else 2
    out = []
    if name.startswith("logsumexp"):           # dim is required: all dims as a tuple
        out.append((dict(dim=tuple(range(nd))), dict(axis=tuple(range(nd)))))
    else:
        out.append(({}, {}))
        if not name.startswith("prod"):        # prod() takes no keepdim
            out.append((dict(dim=None, keepdim=True), dict(axis=None, keepdims=True)))
    for d in _dims_of(layout):
        for k in (False, True):
            out.append((dict(dim=d, keepdim=k), dict(axis=d, keepdims=k)))
    return out


ND_LAYOUTS = [k for k in LAYOUTS if k != "0d"]


@pytest.mark.parametrize("name", list(SCANS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_scan_values(name, dtype):
    fn, ref = SCANS[name]
    for layout in ND_LAYOUTS:
        t, a = layout_input(layout, dtype, kink_free(LAYOUTS[layout][0], seed=6))
        for d in _dims_of(layout):
            check(fn(t, d), ref(a, d), dtype, scale=4)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")        # NumPy's var with dof <= 0
@pytest.mark.parametrize("name", list(REDUCTIONS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_reduction_values(name, dtype):
    fn, ref = REDUCTIONS[name]
    for layout in ND_LAYOUTS:
        t, a = layout_input(layout, dtype, kink_free(LAYOUTS[layout][0], seed=7))
        for kw, npkw in _reduce_kws(name, layout):
            check(fn(t, **kw), ref(a, **npkw), dtype, scale=4)


@pytest.mark.parametrize("layout", [k for k in GRAD_LAYOUTS if k != "0d"])
@pytest.mark.parametrize("name", list(SCANS))
def test_scan_gradcheck(name, layout):
    fn = SCANS[name][0]
    x, view = grad_leaf(layout, lambda s: kink_free(s, seed=8))
    for d in (0, -1):
        assert_gradcheck(lambda t: fn(view(t), d), x)


@pytest.mark.parametrize("layout", [k for k in GRAD_LAYOUTS if k != "0d"])
@pytest.mark.parametrize("name", [n for n in REDUCTIONS if not n.endswith("_method")])
def test_reduction_gradcheck(name, layout):
    """Inputs without zeros or ties in |x|. The expanded (2, 3, 4) view varies along dim
    1 only: reducing another dim alone would give std = 0, where std is not differentiable."""
    fn = REDUCTIONS[name][0]
    x, view = grad_leaf(layout, lambda s: distinct_abs(s, seed=9))
    nd = 3 if layout == "expand" else 2
    kws = [dict(dim=tuple(range(nd)))] if name == "logsumexp" else [{}]
    kws += [dict(dim=1, keepdim=True), dict(dim=-2)] if layout == "expand" else \
        [dict(dim=0, keepdim=True), dict(dim=-1, keepdim=False)]
    for kw in kws:
        assert_gradcheck(lambda t: fn(view(t), **kw), x)


ZERO_D = [
    # (call, expected value, expected gradient)
    (lambda t: tg.softmax(t, 0), 1.0, 0.0),
    (lambda t: t.softmax(-1), 1.0, 0.0),
    (lambda t: tg.log_softmax(t, 0), 0.0, 0.0),
    (lambda t: t.log_softmax(-1), 0.0, 0.0),
    (lambda t: tg.logsumexp(t, 0), -1.5, 1.0),
    (lambda t: t.logsumexp(-1, keepdim=True), -1.5, 1.0),
    (lambda t: tg.cumsum(t, 0), -1.5, 1.0),
    (lambda t: t.prod(), -1.5, 1.0),
    (lambda t: t.prod(0), -1.5, 1.0),
    (lambda t: t.norm(), 1.5, -1.0),
    (lambda t: t.norm(1, dim=0), 1.5, -1.0),
    (lambda t: t.norm(INF), 1.5, -1.0),
    (lambda t: t.var(correction=0), 0.0, 0.0),
    (lambda t: t.std(0, unbiased=False), 0.0, None),
]


@pytest.mark.parametrize("case", range(len(ZERO_D)))
def test_along_ops_on_0d_input(case):
    fn, value, grad = ZERO_D[case]
    x = leaf(-1.5)
    out = fn(x)
    assert out.shape == () and out.dtype is F64
    assert out.item() == value
    if grad is not None:
        out.backward()
        assert x.grad.shape == () and x.grad.item() == grad


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_family_extreme_values(dtype):
    big = make_tensor([[1000.0, 1000.0, -1000.0], [-INF, 0.0, -INF], [5e3, 5e3 + 1, 5e3 - 1]],
                      dtype)
    a = numpy_of(big).astype(np.float64)
    check(tg.softmax(big, 1), [[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], np_softmax(a[2], 0)], dtype)
    check(tg.log_softmax(big, 1)[2], np_log_softmax(a[2], 0), dtype)
    check(tg.logsumexp(big, 1), [1000.0 + math.log(2.0), 0.0, np_logsumexp(a[2])], dtype)
    rows = make_tensor([[-INF, -INF], [INF, 1.0], [NAN, 1.0]], dtype)
    check(tg.logsumexp(rows, 1), [-INF, INF, NAN], dtype)
    check(tg.logsumexp(make_tensor(np.full((2, 3), 3e38 if dtype is tg.float32 else 1e308),
                                   dtype), 0),
          np.full(3, (3e38 if dtype is tg.float32 else 1e308)) + math.log(2.0), dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, dim", [((3, 37), 1), ((37, 3), 0), ((2, 19, 5), 1),
                                        ((2, 5, 19), 2), ((4, 40), 0)])
def test_softmax_family_against_torch(dtype, shape, dim):
    """Lines long enough for the vectorised loops and their remainders, along the last
    dim (a line is a run of memory) and others (lines side by side), contiguous and
    transposed inputs; some lines hold +-inf or NaN. Values and gradients are PyTorch's
    (softmax of a line with +inf is NaN throughout, as PyTorch's)."""
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(12)
    X = (r.standard_normal(shape) * 4).astype(dtype)
    line = [0] * X.ndim
    line[dim] = slice(None)
    X[tuple(line)] = -INF
    X.flat[-5], X.flat[-11] = INF, NAN
    W = np.cos(np.arange(X.size)).astype(dtype)
    tol = 2e-6 if dtype == "float32" else 1e-13
    for name in ("softmax", "log_softmax", "logsumexp"):
        for transposed in (False, True):
            out = []
            for L in (tg, torch):
                base = np.ascontiguousarray(np.swapaxes(X, 0, -1)) if transposed else X
                x = L.tensor(base, requires_grad=True)
                v = x.transpose(0, -1) if transposed else x
                y = getattr(L, name)(v, dim)
                (y * L.tensor(W[:y.numel()].reshape(tuple(y.shape)))).sum().backward()
                out.append((y.detach().numpy(), x.grad.numpy()))
            for a, b in zip(out[0], out[1]):
                np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_two_norm_of_contiguous_lines_against_torch(dtype):
    """The 2-norm along the last dim (or of everything) of a contiguous input reads its
    lines in place with a reassociated sum of squares; its gradient is x / norm times the
    incoming one, 0 on a line of zeros: PyTorch's values and gradients, and the strided
    and other-dim cases (walked as before) agree with them too."""
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(13)
    a = r.standard_normal((7, 45)).astype(dtype)
    a[2] = 0.0
    a[3, :5] = 0.0
    tol = 2e-6 if dtype == "float32" else 1e-13
    for case in ("last", "all", "first", "transposed"):
        out = []
        for L in (tg, torch):
            x = L.tensor(a, requires_grad=True)
            if case == "last":
                y = x.norm(dim=1)
            elif case == "all":
                y = x.norm()
            elif case == "first":
                y = x.norm(dim=0, keepdim=True)
            else:
                y = x.t().norm(dim=1)
            (y * L.tensor(np.cos(np.arange(y.numel())).reshape(tuple(y.shape))
                          .astype(dtype))).sum().backward()
            out.append((y.detach().numpy(), x.grad.numpy()))
        for got, want in zip(*out):
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_softmax_gradient_with_large_values_is_finite():
    x = leaf([[1000.0, 999.0, -1000.0]])
    (tg.softmax(x, 1) * make_tensor([1.0, 2.0, 3.0])).sum().backward()
    s = np_softmax(np.array([1000.0, 999.0, -1000.0]), 0)
    g = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(x.grad.numpy()[0], s * (g - (s * g).sum()), rtol=1e-12,
                               atol=1e-300)
    y = leaf([[1000.0, 1000.0]])
    tg.logsumexp(y, 1).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [[0.5, 0.5]], rtol=1e-12)


def brute_force_prod_grad(a, axis):
    """d prod / d a_j as the product of the other elements, with explicit loops."""
    a = np.moveaxis(np.asarray(a, np.float64), axis, -1)
    g = np.empty_like(a)
    for idx in np.ndindex(a.shape):
        row = a[idx[:-1]]
        g[idx] = np.prod(np.delete(row, idx[-1]))
    return np.moveaxis(g, -1, axis)


@pytest.mark.parametrize("dim", [None, 0, 1, -1])
def test_prod_gradient_with_zeros_is_exact(dim):
    rows = np.array([[2.0, 0.0, 3.0, -1.5],    # one zero
                     [0.0, 0.0, 3.0, 2.0],     # two zeros
                     [1.5, -2.0, 0.5, 3.0]])   # none
    # over everything: one zero in total, then two
    datas = [rows] if dim is not None else [rows[[0, 2]], rows[[1, 2]]]
    for a in datas:
        x = leaf(a)
        out = x.prod() if dim is None else x.prod(dim)
        np.testing.assert_array_equal(numpy_of(out),
                                      np.prod(a) if dim is None else np.prod(a, dim))
        out.backward(tg.ones_like(out))
        expected = brute_force_prod_grad(a.reshape(1, -1), 1).reshape(a.shape) \
            if dim is None else brute_force_prod_grad(a, dim)
        np.testing.assert_array_equal(x.grad.numpy(), expected)
        assert_gradcheck(lambda t: (t.prod() if dim is None else t.prod(dim, keepdim=True)) * 2,
                         x)
        assert_gradcheck(lambda t: t.T.prod(-1 if dim is None else dim), leaf(a.T.copy()))


def test_var_std_arguments():
    a = rng(10).standard_normal((3, 4))
    x = make_tensor(a)
    check(x.var(False), np.var(a), F64)                  # the old positional 'unbiased'
    check(x.std(1, False), np.std(a, 1), F64)
    check(x.var([1]), np.var(a, 1, ddof=1), F64)
    check(x.std(0, correction=1, keepdim=True), np.std(a, 0, ddof=1, keepdims=True), F64)
    check(x.var((0, 1), keepdim=True), np.var(a, keepdims=True, ddof=1), F64)


def test_var_std_too_few_elements():
    check(make_tensor([[2.0, 4.0]]).var(1, correction=2), [INF], F64)      # dof <= 0, PyTorch: inf
    check(make_tensor([[2.0]]).var(1), [NAN], F64)
    check(make_tensor([[2.0, 2.0]]).std(1, correction=2), [NAN], F64)


def test_std_gradient_where_std_is_zero_is_zero():
    """PyTorch masks std's gradient where the std is 0 (a constant row)."""
    x = leaf([[2.0, 2.0, 2.0], [1.0, 2.0, 4.0]])
    x.std(1).sum().backward()
    a = np.array([1.0, 2.0, 4.0])
    expected_row1 = (a - a.mean()) / (2 * np.std(a, ddof=1))
    np.testing.assert_allclose(x.grad.numpy()[1], expected_row1, rtol=1e-12)
    np.testing.assert_array_equal(x.grad.numpy()[0], [0.0, 0.0, 0.0])


@pytest.mark.parametrize("p", NORM_PS, ids=repr)
def test_norm_gradient_at_zero_row_is_zero(p):
    x = leaf([[0.0, 0.0, 0.0], [1.0, -2.0, 0.5]])
    out = x.norm(p, dim=1)
    check(out, np_norm(numpy_of(x), p, axis=1), F64)
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy()[0], [0.0, 0.0, 0.0])
    assert np.isfinite(x.grad.numpy()).all()


@pytest.mark.parametrize("p", [1, 1.5, 0.5, 3], ids=repr)
def test_norm_gradient_at_a_zero_element(p):
    """A zero element of a non-zero row gets gradient 0 (PyTorch's masking), not NaN."""
    a = np.array([0.0, 1.0, -2.0])
    x = leaf(a)
    x.norm(p).backward()
    n = np_norm(a, p)
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = np.sign(a) * np.abs(a) ** (p - 1) / n ** (p - 1)
    expected[0] = 0.0
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12)


def test_norm_inf_ties_split_the_gradient():
    x = leaf([2.0, -1.0, -2.0])
    x.norm(INF).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.5, 0.0, -0.5])
    y = leaf([0.5, -3.0, -0.5])
    y.norm(-INF).backward()
    np.testing.assert_array_equal(y.grad.numpy(), [0.5, 0.0, -0.5])


def test_norm_p0_counts_nonzeros_and_has_zero_gradient():
    x = leaf([[0.0, 1.5, -2.0], [0.0, 0.0, 3.0]])
    out = x.norm(0, dim=1)
    check(out, [2.0, 1.0], F64)
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((2, 3)))
    check(x.norm(0), 3.0, F64)


def test_norm_arguments():
    a = rng(11).standard_normal((3, 4))
    x = make_tensor(a)
    check(x.norm("fro"), np.sqrt((a * a).sum()), F64)
    check(x.norm(p=None), np.sqrt((a * a).sum()), F64)
    check(x.norm(dim=(0, 1), keepdim=True), np.sqrt((a * a).sum()).reshape(1, 1), F64)
    check(x.norm(dtype=tg.float32), np.sqrt((a * a).sum()), tg.float32)
    with pytest.raises(RuntimeError):
        x.norm(p="bad")


def test_along_ops_bad_dims():
    x = make_tensor(np.ones((2, 3)))
    for fn in (lambda: tg.softmax(x, 2), lambda: x.log_softmax(-3), lambda: x.cumsum(2),
               lambda: tg.logsumexp(x, 2), lambda: x.prod(-3), lambda: x.var(2),
               lambda: x.norm(dim=2), lambda: x.argmax(2)):
        with pytest.raises(IndexError):
            fn()


@pytest.mark.parametrize("dtype", DTYPES)
def test_int_inputs(dtype):
    i = tg.tensor([[1, 2, 3], [4, 5, 6]])
    c = tg.cumsum(i, 1)
    assert c.dtype is tg.int64 and c.tolist() == [[1, 3, 6], [4, 9, 15]]
    p = i.prod(0)
    assert p.dtype is tg.int64 and p.tolist() == [4, 10, 18]
    check(tg.softmax(i, 1, dtype=dtype), np_softmax(np.array([[1.0, 2, 3], [4, 5, 6]]), 1),
          dtype)


# ------------------------------------------------------------------ outer / dot / einsum
@pytest.mark.parametrize("dtype", DTYPES)
def test_outer_dot_values(dtype):
    a, b = rng(12).standard_normal(4), rng(13).standard_normal(3)
    ta, tb = make_tensor(a, dtype), make_tensor(b, dtype)
    a, b = a.astype(dtype.np).astype(np.float64), b.astype(dtype.np).astype(np.float64)
    for out in (tg.outer(ta, tb), ta.outer(tb), tg.ger(ta, tb), ta.ger(tb)):
        check(out, np.outer(a, b), dtype)
    check(tg.dot(ta, ta), a @ a, dtype, scale=2)
    check(ta[::2].dot(ta[1::2]), a[::2] @ a[1::2], dtype, scale=2)
    with pytest.raises(RuntimeError):
        tg.outer(ta, tb.reshape(3, 1))
    with pytest.raises(RuntimeError):
        tg.dot(ta, make_tensor(np.ones((2, 2)), dtype))


def test_outer_dot_gradcheck():
    m = leaf(rng(14).standard_normal((4, 6)))
    assert_gradcheck(lambda t: tg.outer(t[0], t[1, ::2]), m)
    assert_gradcheck(lambda t: tg.outer(t.T[::2, 1], t[2]), m)
    assert_gradcheck(lambda t: tg.dot(t[0], t.T[1]), leaf(rng(15).standard_normal((6, 6))))
    assert_gradcheck(lambda t: tg.dot(t[1, ::2], t[3, 1::2]), m)
    assert_gradcheck(lambda t: t[0].dot(t[0]), m)


EINSUM = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),
    ("i,i->", [(4,), (4,)]),
    ("ij->ji", [(2, 3)]),
    ("ij,j->i", [(3, 4), (4,)]),
    ("ij->", [(2, 3)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("ji,jk", [(3, 2), (3, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("ij,kj->ki", [(2, 3), (4, 3)]),
]


def _einsum_operands(shapes, seed, dtype=F64, transposed=False):
    """Operands, built as reversed-dim leaves viewed back through a permute if transposed."""
    arrs = [rng(seed + k).standard_normal(s) for k, s in enumerate(shapes)]
    if not transposed:
        return arrs, [make_tensor(a, dtype) for a in arrs]
    ts = [make_tensor(np.ascontiguousarray(a.T), dtype).permute(*reversed(range(a.ndim)))
          for a in arrs]
    return arrs, ts


@pytest.mark.parametrize("case", EINSUM, ids=[c[0] for c in EINSUM])
@pytest.mark.parametrize("dtype", DTYPES)
def test_einsum_values(case, dtype):
    eq, shapes = case
    for transposed in (False, True):
        arrs, ts = _einsum_operands(shapes, 16, dtype, transposed)
        expected = np.einsum(eq, *[a.astype(dtype.np).astype(np.float64) for a in arrs])
        check(tg.einsum(eq, *ts), expected, dtype, scale=4)
    check(tg.einsum(eq, ts), expected, dtype, scale=4)          # operands as one list


@pytest.mark.parametrize("case", EINSUM, ids=[c[0] for c in EINSUM])
def test_einsum_gradcheck(case):
    eq, shapes = case
    leaves = [leaf(rng(17 + k).standard_normal(s[::-1])) for k, s in enumerate(shapes)]

    def f(*ts):
        return tg.einsum(eq, *[t.permute(*reversed(range(t.ndim))) for t in ts])
    assert_gradcheck(f, *leaves)
    contiguous = [leaf(rng(18 + k).standard_normal(s)) for k, s in enumerate(shapes)]
    assert_gradcheck(lambda *ts: tg.einsum(eq, *ts), *contiguous)


EINSUM_ERRORS = [
    ("ij,jk->ik", [(2, 3)], "fewer operands"),
    ("ij->ij", [(2, 3), (2, 3)], "more operands"),
    ("ijk->i", [(2, 3)], "for operand 0"),
    ("ij->k", [(2, 3)], "does not appear"),
    ("ij->ii", [(2, 3)], "more than once"),
    ("i1->i", [(2, 3)], "subscript"),
    ("ij-ji", [(2, 3)], "subscript"),
    ("ij,jk->ik", [(2, 3), (4, 2)], "j"),
]


@pytest.mark.parametrize("case", EINSUM_ERRORS, ids=[c[0] + str(len(c[1])) for c in EINSUM_ERRORS])
def test_einsum_bad_equations_raise_runtime_error(case):
    """PyTorch raises RuntimeError for every malformed equation."""
    eq, shapes, msg = case
    with pytest.raises(RuntimeError) as ei:
        tg.einsum(eq, *[tg.ones(*s) for s in shapes])
    assert msg in str(ei.value)


# ------------------------------------------------------------------ argmax / argmin
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_argmin(name):
    ref = getattr(np, name)
    a = rng(19).permutation(24).reshape(2, 3, 4) * 0.37
    x = make_tensor(a, F64, requires_grad=True)
    for layout, t, arr in (("contig", x, a), ("T", x.transpose(0, 2), a.transpose(2, 1, 0)),
                           ("step", x[:, ::2], a[:, ::2])):
        for out, exp in ((getattr(t, name)(), ref(arr)),
                         (getattr(tg, name)(t), ref(arr)),
                         (getattr(t, name)(keepdim=True), ref(arr).reshape(1, 1, 1))):
            assert out.dtype is tg.int64 and out.shape == np.shape(exp), layout
            np.testing.assert_array_equal(out.numpy(), exp)
        for d in (0, 1, 2, -1):
            for k in (False, True):
                out = getattr(t, name)(d, keepdim=k)
                exp = ref(arr, axis=d, keepdims=k)
                assert out.shape == exp.shape
                np.testing.assert_array_equal(out.numpy(), exp)
        out = getattr(tg, name)(t, dim=1)
        assert not out.requires_grad and out.grad_fn is None and out.is_leaf
    s = make_tensor(2.5)
    assert getattr(s, name)().item() == 0 and getattr(s, name)(0).shape == ()


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_argmin_nan_returns_first_nan(name):
    a = np.array([[1.0, NAN, 3.0, NAN], [2.0, 5.0, -1.0, 0.0], [INF, -INF, NAN, 0.0]])
    x = make_tensor(a)
    assert getattr(x, name)().item() == 1
    np.testing.assert_array_equal(getattr(x, name)(1).numpy(), [1, 1 if name == "argmax" else 2,
                                                                2])
    np.testing.assert_array_equal(getattr(x, name)(0).numpy(), [2 if name == "argmax" else 0,
                                                                0, 2, 0])
    np.testing.assert_array_equal(getattr(x.T, name)(0).numpy(), getattr(x, name)(1).numpy())


def test_argmax_ties_return_first():
    x = make_tensor([[1.0, 3.0, 3.0], [0.0, 0.0, -1.0]])
    assert x.argmax().item() == 1
    assert x.argmin(1).tolist() == [0, 2]
    assert x.argmax(1).tolist() == [1, 0]


# ------------------------------------------------------------------ comparisons
COMPARE = [("<", operator.lt, "lt"), ("<=", operator.le, "le"), (">", operator.gt, "gt"),
           (">=", operator.ge, "ge"), ("==", operator.eq, "eq"), ("!=", operator.ne, "ne")]


@pytest.mark.parametrize("case", COMPARE, ids=[c[0] for c in COMPARE])
@pytest.mark.parametrize("dtype", DTYPES)
def test_comparisons(case, dtype):
    _, op, name = case
    a = np.array([[1.0, 2.0, 3.0], [2.0, NAN, -INF]])
    b = np.array([2.0, 2.0, 1.0])
    x = make_tensor(a, dtype, requires_grad=True)
    y = make_tensor(b, dtype)
    cases = [(op(x, y), op(a, b)), (op(x, 2.0), op(a, 2.0)), (op(x, 2), op(a, 2)),
             (op(2.0, x), op(2.0, a)), (op(x.T, y.reshape(3, 1)), op(a.T, b[:, None])),
             (getattr(x, name)(y), op(a, b)), (getattr(tg, name)(x, y), op(a, b)),
             (op(x, make_tensor(2.0, dtype)), op(a, 2.0)), (op(x[:, ::2], x[:, ::2]), op(a[:, ::2],
                                                                                a[:, ::2]))]
    for out, expected in cases:
        assert isinstance(out, tg.Tensor) and out.dtype is tg.bool
        assert not out.requires_grad and out.grad_fn is None
        assert out.shape == expected.shape
        np.testing.assert_array_equal(out.numpy(), expected)


def test_comparison_method_aliases():
    x, y = make_tensor([1.0, 2.0]), make_tensor([2.0, 2.0])
    assert x.greater(y).tolist() == [False, False] and x.less(y).tolist() == [True, False]
    assert x.greater_equal(y).tolist() == [False, True]
    assert x.less_equal(y).tolist() == [True, True] and x.not_equal(y).tolist() == [True, False]


def test_comparison_shape_mismatch_is_a_runtime_error():
    with pytest.raises(RuntimeError, match="must match the size"):
        tg.ones(3) < tg.ones(2)


# ------------------------------------------------------------------ grad_fn names
# (id, expression run by tapegrad and by torch, PyTorch's grad_fn name)
GRAD_FN_NAMES = [
    ("clamp", lambda L, x: x.clamp(-1.0, 1.0), "ClampBackward1"),
    ("clamp_min_kw", lambda L, x: L.clamp(x, min=0.0), "ClampBackward1"),
    ("clip", lambda L, x: x.clip(max=0.0), "ClampBackward1"),
    ("clamp_min", lambda L, x: L.clamp_min(x, 0.0), "ClampMinBackward0"),
    ("clamp_max", lambda L, x: x.clamp_max(0.0), "ClampMaxBackward0"),
    ("maximum", lambda L, x: L.maximum(x, x * 2), "MaximumBackward0"),
    ("minimum", lambda L, x: x.minimum(x * 2), "MinimumBackward0"),
    ("sign", lambda L, x: x.sign(), "SignBackward0"),
    ("floor", lambda L, x: L.floor(x), "FloorBackward0"),
    ("ceil", lambda L, x: x.ceil(), "CeilBackward0"),
    ("round", lambda L, x: L.round(x), "RoundBackward0"),
    ("erf", lambda L, x: L.erf(x), "ErfBackward0"),
    ("leaky_relu", lambda L, x: L.nn.functional.leaky_relu(x, 0.1), "LeakyReluBackward0"),
    ("gelu", lambda L, x: L.nn.functional.gelu(x), "GeluBackward0"),
    ("gelu_tanh", lambda L, x: L.nn.functional.gelu(x, approximate="tanh"), "GeluBackward0"),
    ("softplus", lambda L, x: L.nn.functional.softplus(x, beta=2.0), "SoftplusBackward0"),
    ("softmax", lambda L, x: L.softmax(x, -1), "SoftmaxBackward0"),
    ("log_softmax", lambda L, x: x.log_softmax(0), "LogSoftmaxBackward0"),
    ("logsumexp", lambda L, x: L.logsumexp(x, 1), "LogsumexpBackward0"),
    ("cumsum", lambda L, x: x.cumsum(1), "CumsumBackward0"),
    ("prod", lambda L, x: x.prod(), "ProdBackward0"),
    ("prod_dim", lambda L, x: L.prod(x, 1, keepdim=True), "ProdBackward1"),
    ("var", lambda L, x: x.var(1), "VarBackward0"),
    ("var_all", lambda L, x: L.var(x, correction=0), "VarBackward0"),
    ("std", lambda L, x: x.std(0, keepdim=True), "StdBackward0"),
    ("norm", lambda L, x: x.norm(), "LinalgVectorNormBackward0"),
    ("norm_dim", lambda L, x: L.norm(x, 1, dim=1), "LinalgVectorNormBackward0"),
    ("norm_inf", lambda L, x: x.norm(INF), "LinalgVectorNormBackward0"),
    ("outer", lambda L, x: L.outer(x[0], x[1]), "MulBackward0"),
    ("dot", lambda L, x: L.dot(x[0], x[1]), "DotBackward0"),
]


@pytest.mark.parametrize("case", GRAD_FN_NAMES, ids=[c[0] for c in GRAD_FN_NAMES])
def test_grad_fn_names(case):
    _, f, name = case
    x = make_tensor([[0.5, -1.5, 2.0], [1.0, 0.25, -0.75]], tg.float32, requires_grad=True)
    out = f(tg, x)
    assert out.requires_grad and out.grad_fn.name() == name


@pytest.mark.parametrize("case", GRAD_FN_NAMES, ids=[c[0] for c in GRAD_FN_NAMES])
def test_grad_fn_names_match_torch(case):
    torch = pytest.importorskip("torch")
    _, f, _ = case
    a = np.array([[0.5, -1.5, 2.0], [1.0, 0.25, -0.75]], np.float32)
    ours = f(tg, make_tensor(a, tg.float32, requires_grad=True))
    theirs = f(torch, torch.tensor(a, requires_grad=True))
    assert ours.grad_fn.name() == theirs.grad_fn.name()
    assert type(ours.grad_fn).__name__ == type(theirs.grad_fn).__name__
    assert isinstance(ours.grad_fn, tg.autograd.Node)


@pytest.mark.parametrize("case", GRAD_FN_NAMES, ids=[c[0] for c in GRAD_FN_NAMES])
def test_an_op_on_a_view_made_under_no_grad_records_with_no_edge_to_it(case):
    """The view requires grad through its base, as in PyTorch; the gradient it would get
    is dropped, and the backward runs."""
    _, f, name = case
    x = make_tensor([[0.5, -1.5, 2.0], [1.0, 0.25, -0.75]], tg.float32, requires_grad=True)
    with tg.no_grad():
        v = x.view(2, 3)
    assert v.requires_grad and v.is_leaf
    out = f(tg, v)
    assert out.requires_grad and out.grad_fn.name() == name
    out.sum().backward()
    assert x.grad is None and v.grad is None


# ------------------------------------------------------------------ against PyTorch
SPECIAL = [NAN, INF, -INF, 0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1e-3, 25.0, -25.0]
# (id, expression run by both libraries on SPECIAL)
TORCH_ELEMENTWISE = [
    ("clamp", lambda L, x: x.clamp(-0.5, 1.5)),
    ("clamp_min_gt_max", lambda L, x: x.clamp(1.0, -1.0)),
    ("clamp_min", lambda L, x: L.clamp(x, min=0.0)),
    ("clamp_max", lambda L, x: x.clamp(max=0.0)),
    ("clamp_nan_min", lambda L, x: x.clamp(min=NAN)),
    ("clamp_nan_max", lambda L, x: x.clamp(-1.0, NAN)),
    ("sign", lambda L, x: x.sign()),
    ("floor", lambda L, x: x.floor()),
    ("ceil", lambda L, x: x.ceil()),
    ("round", lambda L, x: x.round()),
    ("erf", lambda L, x: L.erf(x)),
    ("leaky_relu", lambda L, x: L.nn.functional.leaky_relu(x, 0.2)),
    ("gelu", lambda L, x: L.nn.functional.gelu(x)),
    ("gelu_tanh", lambda L, x: L.nn.functional.gelu(x, approximate="tanh")),
    ("softplus", lambda L, x: L.nn.functional.softplus(x)),
    ("softplus_beta", lambda L, x: L.nn.functional.softplus(x, beta=2.0, threshold=3.0)),
]


@pytest.mark.parametrize("case", TORCH_ELEMENTWISE, ids=[c[0] for c in TORCH_ELEMENTWISE])
@pytest.mark.parametrize("dtype", DTYPES)
def test_elementwise_special_values_against_torch(case, dtype):
    """Values (NaN, infinities, signed zeros, halves) and gradients agree with PyTorch."""
    torch = pytest.importorskip("torch")
    _, f = case
    tdt = getattr(torch, dtype.name)
    a = np.array(SPECIAL, dtype.np)
    x_o = make_tensor(a, dtype, requires_grad=True)
    x_t = torch.tensor(a, dtype=tdt, requires_grad=True)
    out_o, out_t = f(tg, x_o), f(torch, x_t)
    tol = TOL[dtype.name]
    want = out_t.detach().numpy().copy()
    if case[0] == "gelu":
        # PyTorch's AVX-512 float32 kernel gives NaN at +inf; its scalar loop (a 1-element
        # tensor), its AVX2 kernel and float64 give the limit, +inf, as tapegrad does
        want[np.isposinf(a)] = np.inf
    np.testing.assert_allclose(numpy_of(out_o), want, equal_nan=True, **tol)
    out_o.sum().backward()
    out_t.sum().backward()
    np.testing.assert_allclose(x_o.grad.numpy(), x_t.grad.numpy(), equal_nan=True, **tol)


@pytest.mark.parametrize("name", list(MAXMIN))
def test_maximum_minimum_nan_gradient_against_torch(name):
    """Where one operand is NaN, PyTorch passes the full gradient to both operands."""
    torch = pytest.importorskip("torch")
    a, b = np.array([NAN, 1.0, NAN, 1.0]), np.array([1.0, NAN, NAN, 1.0])
    grads = []
    for L, make in ((tg, leaf), (torch, lambda v: torch.tensor(v, requires_grad=True))):
        ta, tb = make(a), make(b)
        getattr(L, name)(ta, tb).sum().backward()
        grads.append((ta.grad.numpy(), tb.grad.numpy()))
    np.testing.assert_array_equal(grads[0][0], grads[1][0])
    np.testing.assert_array_equal(grads[0][1], grads[1][1])


def _composite_activations(L, x, W, b):
    Fn = L.nn.functional
    h = x @ W.T + b                                                # (4, 5)
    h = Fn.gelu(h) + Fn.leaky_relu(h, 0.1) * 0.5 + Fn.softplus(h, beta=2.0)
    p = L.softmax(h, -1)
    q = L.log_softmax(h * 0.5, 0)
    r = L.maximum(h, h.mean(0, keepdim=True)) - L.minimum(h.T, b[:4]).T
    return (p * q).sum() + L.logsumexp(r, 1).sum() + L.erf(h * 0.3).clamp(-0.5, 0.4).sum()


def _composite_reductions(L, x, W, b):
    h = (x @ W.T).tanh() + 1.5                                     # (4, 5), positive
    c = L.cumsum(h, 1).var(0, correction=1).sum() + h.std(1, keepdim=True).sum()
    n = h.norm(3, dim=1).sum() + h.T.norm(INF, dim=0).sum() + L.norm(h - 1.5, 1)
    e = L.einsum("ij,jk,k->i", x, W.T, b) * h.prod(1) * 0.1
    o = L.outer(b, x[0]).sum(0).dot(x[1]) + h.var(unbiased=False)
    return c + n + e.sum() + o


COMPOSITES = [("activations", _composite_activations), ("reductions", _composite_reductions)]


@pytest.mark.parametrize("case", COMPOSITES, ids=[c[0] for c in COMPOSITES])
def test_composite_float32_against_torch(case):
    assert_float32_composite_matches_torch(case[1])


# ------------------------------------------------------------------ hypothesis
SHAPES = st.lists(st.integers(1, 4), min_size=1, max_size=3)
HYP_OPS = {
    "softmax": (lambda t, d, k: tg.softmax(t, d), lambda a, d, k: np_softmax(a, d)),
    "log_softmax": (lambda t, d, k: t.log_softmax(d), lambda a, d, k: np_log_softmax(a, d)),
    "logsumexp": (lambda t, d, k: tg.logsumexp(t, d, keepdim=k), np_logsumexp),
    "cumsum": (lambda t, d, k: t.cumsum(d), lambda a, d, k: np.cumsum(a, d)),
    "var": (lambda t, d, k: t.var(d, keepdim=k),
            lambda a, d, k: np.var(a, d, ddof=1, keepdims=k)),
    "var_c0": (lambda t, d, k: tg.var(t, d, keepdim=k, correction=0),
               lambda a, d, k: np.var(a, d, keepdims=k)),
}


@HYP
@given(shape=SHAPES, data=st.data(), keepdim=st.booleans(), transpose=st.booleans(),
       op=st.sampled_from(sorted(HYP_OPS)))
def test_hyp_along_dim(shape, data, keepdim, transpose, op):
    shape, nd = list(shape), len(shape)
    dim = data.draw(st.integers(-nd, nd - 1))
    if op.startswith("var") and shape[dim] == 1:
        shape[dim] = 2                         # dof > 0
    a = kink_free(tuple(shape), seed=nd)
    x = leaf(a.T.copy() if transpose else a)
    view = (lambda t: t.T) if transpose else (lambda t: t)
    fn, ref = HYP_OPS[op]
    out = fn(view(x), dim, keepdim)
    expected = ref(a, dim, keepdim)
    assert out.shape == expected.shape
    np.testing.assert_allclose(numpy_of(out), expected, rtol=1e-12, atol=1e-12)
    assert_gradcheck(lambda t: fn(view(t), dim, keepdim), x)


@HYP
@given(shape=SHAPES, data=st.data(), keepdim=st.booleans(), p=st.sampled_from(NORM_PS),
       step=st.booleans())
def test_hyp_norm(shape, data, keepdim, p, step):
    nd = len(shape)
    dim = data.draw(st.one_of(st.none(), st.integers(-nd, nd - 1)))
    base = distinct_abs((2 * shape[0],) + tuple(shape[1:]), seed=nd)
    a = base[::2] if step else base[:shape[0]]
    x = leaf(base)
    view = (lambda t: t[::2]) if step else (lambda t: t[:shape[0]])
    kw = {} if dim is None and not keepdim else dict(dim=dim, keepdim=keepdim)
    out = view(x).norm(p, **kw)
    expected = np_norm(a, p, axis=dim, keepdims=keepdim)
    assert out.shape == np.shape(expected)
    np.testing.assert_allclose(numpy_of(out), expected, rtol=1e-12)
    assert_gradcheck(lambda t: view(t).norm(p, **kw), x)
