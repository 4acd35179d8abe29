"""Gradients of every op: finite differences (tapegrad.testing.gradcheck, float64) on small
shapes, with broadcasting and non-contiguous inputs, a few hypothesis-generated shapes, and
float32 gradients of composite expressions against PyTorch (when torch is importable).

Inputs stay away from non-differentiable points: log/sqrt/reciprocal/div/pow get positive
or bounded-away-from-zero operands, abs/relu get |x| >= 0.1, max/min get values without
ties (spaced 0.37 apart, far more than gradcheck's eps).
"""
import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import tapegrad as tg
from tapegrad.autograd import grad as tg_grad
from tapegrad.testing import gradcheck
from tests.helpers import (F64, assert_float32_composite_matches_torch, assert_gradcheck, leaf,
                           nc_leaf, rng)

HYP = settings(max_examples=12, deadline=None, derandomize=True,
               suppress_health_check=[HealthCheck.too_slow])


def away_from_zero(shape, seed=0, lo=0.1, hi=2.0):
    r = rng(seed)
    return r.uniform(lo, hi, size=shape) * r.choice([-1.0, 1.0], size=shape)


def positive(shape, seed=0, lo=0.25, hi=2.0):
    return rng(seed).uniform(lo, hi, size=shape)


def distinct(shape, seed=0):
    n = int(np.prod(shape))
    return ((rng(seed).permutation(n) - n / 2) * 0.37).reshape(shape)


# ------------------------------------------------------------------ the checker itself
def test_gradcheck_catches_a_wrong_gradient():
    x = leaf(away_from_zero((2, 3)))
    with pytest.raises(AssertionError):
        gradcheck(lambda x: x * x.detach(), [x])        # analytic x, numeric 2x
    assert gradcheck(lambda x: x * x.detach(), [x], raise_exception=False) is False


def test_gradcheck_rejects_float32():
    x = leaf(np.ones(2), tg.float32)
    with pytest.raises(ValueError):
        gradcheck(lambda x: x * 2, [x])


# ------------------------------------------------------------------ unary ops
UNARY = {
    "exp": "any", "log": "pos", "sin": "any", "cos": "any", "tanh": "any",
    "sigmoid": "any", "relu": "away", "sqrt": "pos", "abs": "away",
    "reciprocal": "pos", "neg": "any", "clone": "any",
}


def unary_data(kind, shape, seed=0):
    if kind == "pos":
        return positive(shape, seed)
    return away_from_zero(shape, seed)


# layout: (leaf shape, view applied inside fn)
LAYOUTS = {
    "contig": ((2, 3), lambda t: t),
    "T": ((3, 2), lambda t: t.T),
    "transpose02": ((4, 3, 2), lambda t: t.transpose(0, 2)),
    "expand": ((3, 1), lambda t: t.expand(2, 3, 4)),
    "0d": ((), lambda t: t),
    "nc_leaf": ((3, 4), None),
}


def layout_leaf(layout, data):
    if layout == "nc_leaf":
        return nc_leaf(data), (lambda t: t)
    return leaf(data), LAYOUTS[layout][1]


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_gradcheck(name, layout):
    shape = LAYOUTS[layout][0]
    x, view = layout_leaf(layout, unary_data(UNARY[name], shape))
    assert_gradcheck(lambda t: getattr(view(t), name)(), x)
    assert_gradcheck(lambda t: getattr(tg, name)(view(t)) * 1.5, x)


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_backward_values(name):
    """The analytic gradients themselves, element by element."""
    a = unary_data(UNARY[name], (5,), seed=4)
    deriv = {
        "exp": lambda: np.exp(a), "log": lambda: 1 / a, "sin": lambda: np.cos(a),
        "cos": lambda: -np.sin(a), "tanh": lambda: 1 - np.tanh(a) ** 2,
        "sigmoid": lambda: np.exp(-a) / (1 + np.exp(-a)) ** 2,
        "relu": lambda: (a > 0).astype(float), "sqrt": lambda: 0.5 / np.sqrt(a),
        "abs": lambda: np.sign(a), "reciprocal": lambda: -1 / a ** 2,
        "neg": lambda: -np.ones(5), "clone": lambda: np.ones(5),
    }[name]()
    x = leaf(a)
    g = rng(5).standard_normal(5)
    getattr(x, name)().backward(tg.tensor(g, dtype=F64))
    assert x.grad.shape == (5,) and x.grad.dtype is F64
    np.testing.assert_allclose(x.grad.numpy(), g * deriv, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ["relu", "abs"])
def test_relu_abs_subgradient_at_zero(name):
    x = leaf([0.0, -1.0, 2.0])
    getattr(x, name)().sum().backward()
    expected = {"relu": [0.0, 0.0, 1.0], "abs": [0.0, -1.0, 1.0]}[name]
    np.testing.assert_array_equal(x.grad.numpy(), expected)      # PyTorch's choice


# ------------------------------------------------------------------ binary ops
BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "pow": lambda a, b: a ** b,
}
SHAPE_PAIRS = [((2, 3), (2, 3)), ((3, 1, 4), (2, 4)), ((4,), (3, 4)), ((2, 1), (1, 3)),
               ((), (2, 3)), ((2, 3), ()), ((), ()), ((1,), (3,)), ((2, 1, 3), (1, 2, 1)),
               ((0, 3), (1, 3))]


def binary_data(name, sa, sb, seed=0):
    if name == "pow":
        return positive(sa, seed), rng(seed + 1).uniform(-1.5, 2.5, size=sb)
    if name == "div":
        return away_from_zero(sa, seed), away_from_zero(sb, seed + 1, lo=0.5)
    return away_from_zero(sa, seed), away_from_zero(sb, seed + 1)


@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_gradcheck_broadcast(name, shapes):
    a, b = binary_data(name, *shapes)
    ta, tb = leaf(a), leaf(b)
    f = BINARY[name]
    assert_gradcheck(f, ta, tb)
    assert_gradcheck(lambda x, y: getattr(tg, name)(x, y), ta, tb)


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_broadcast_grad_shapes(name):
    a, b = binary_data(name, (3, 1, 4), (2, 4))
    ta, tb = leaf(a), leaf(b)
    BINARY[name](ta, tb).sum().backward()
    assert ta.grad.shape == (3, 1, 4) and tb.grad.shape == (2, 4)
    if name == "add":
        np.testing.assert_array_equal(ta.grad.numpy(), np.full((3, 1, 4), 2.0))
        np.testing.assert_array_equal(tb.grad.numpy(), np.full((2, 4), 3.0))


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_gradcheck_non_contiguous(name):
    a, b = binary_data(name, (4, 3), (3, 4))
    ta, tb = leaf(a), leaf(b)
    f = BINARY[name]
    assert_gradcheck(lambda x, y: f(x.T, y), ta, tb)               # T op contig
    assert_gradcheck(lambda x, y: f(y, x.T) if name != "pow" else f(x.T, y.T.T), ta, tb)
    assert_gradcheck(lambda x, y: f(x.T, y.T.T.T.T), ta, tb)
    col_a, col_b = binary_data(name, (3, 1), (1, 4), seed=3)
    tca, tcb = leaf(col_a), leaf(col_b)
    assert_gradcheck(lambda x, y: f(x.expand(3, 4), y.expand(2, 3, 4)), tca, tcb)
    assert_gradcheck(lambda x, y: f(x.expand(3, 4).T, y.T), tca, tcb)
    na, nb = binary_data(name, (3, 4), (3, 4), seed=5)
    assert_gradcheck(f, nc_leaf(na), nc_leaf(nb))                   # non-contiguous leaves
    assert_gradcheck(f, nc_leaf(na), leaf(nb[0]))


SCALAR_CASES = [
    ("x+s", lambda x: x + 2.5), ("s+x", lambda x: 2.5 + x),
    ("x-s", lambda x: x - 2.5), ("s-x", lambda x: 2.5 - x),
    ("x*s", lambda x: x * -1.5), ("s*x", lambda x: 3 * x),
    ("x/s", lambda x: x / 4.0), ("s/x", lambda x: 2.0 / x),
    ("x**2", lambda x: x ** 2), ("x**3", lambda x: x ** 3), ("x**-1.5", lambda x: x ** -1.5),
    ("x**0.5", lambda x: x ** 0.5), ("x**0", lambda x: x ** 0), ("x**1", lambda x: x ** 1),
    ("s**x", lambda x: 2.0 ** x), ("0.5**x", lambda x: 0.5 ** x),
]


@pytest.mark.parametrize("layout", ["contig", "T", "expand", "0d", "nc_leaf"])
@pytest.mark.parametrize("case", SCALAR_CASES, ids=[c[0] for c in SCALAR_CASES])
def test_scalar_operand_gradcheck(case, layout):
    x, view = layout_leaf(layout, positive(LAYOUTS[layout][0]))
    f = case[1]
    assert_gradcheck(lambda t: f(view(t)), x)


def test_pow_negative_base_integer_exponent():
    x = leaf(-positive((2, 3), seed=9))
    for e in (2, 3, -1, -2, 2.0):
        assert_gradcheck(lambda t: t ** e, x)
    y = tg.tensor(np.array([[3.0, 2.0, -1.0]]), dtype=F64)
    assert_gradcheck(lambda t: t ** y, x)
    x.grad = None
    (x ** 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * x.detach().numpy() ** 2, rtol=1e-14)


def test_pow_zero_exponent_grad_is_zero():
    x = leaf([0.0, 2.0])
    (x ** 0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0])
    x = leaf([0.0, 2.0])
    y = leaf([0.0, 0.0])
    (x ** y).sum().backward()                       # d/dx x**0 = 0 even at x = 0
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0])


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_same_tensor_both_sides(name):
    a = positive((2, 3), seed=7) if name in ("pow", "div") else away_from_zero((2, 3), seed=7)
    x = leaf(a)
    f = BINARY[name]
    assert_gradcheck(lambda t: f(t, t), x)
    assert_gradcheck(lambda t: f(t, t.T.T) * t, x)
    f(x, x).sum().backward()
    expected = {"add": lambda: 2 * np.ones_like(a), "sub": lambda: np.zeros_like(a),
                "mul": lambda: 2 * a, "div": lambda: np.zeros_like(a),
                "pow": lambda: a ** a * (np.log(a) + 1)}[name]()
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_binary_only_one_side_requires_grad():
    a = leaf(away_from_zero((2, 3)))
    b = tg.tensor(positive((3,), seed=1), dtype=F64)
    assert_gradcheck(lambda x: x * b + b / x.abs(), a)
    (b ** a.abs()).sum().backward()
    bb, aa = b.numpy(), a.detach().numpy()
    expected = bb ** np.abs(aa) * np.log(bb) * np.sign(aa)
    np.testing.assert_allclose(a.grad.numpy(), expected, rtol=1e-12)
    assert b.grad is None


# ------------------------------------------------------------------ reductions
REDUCE_DIMS = [None, 0, 1, -1, (0, 2), (-1, 0), (0, 1, 2), ()]


@pytest.mark.parametrize("dim,keepdim",
                         [(d, k) for d in REDUCE_DIMS for k in (False, True)
                          if d is not None or not k], ids=repr)
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_sum_mean_gradcheck(op, dim, keepdim):

    def red(t):
        return getattr(t, op)() if dim is None else getattr(t, op)(dim, keepdim=keepdim)

    x = leaf(away_from_zero((2, 3, 4)))
    assert_gradcheck(red, x)
    y = leaf(away_from_zero((4, 3, 2), seed=1))
    assert_gradcheck(lambda t: red(t.transpose(0, 2)), y)
    z = leaf(away_from_zero((3, 1), seed=2))
    assert_gradcheck(lambda t: red(t.expand(2, 3, 4)), z)
    w = nc_leaf(away_from_zero((6, 4), seed=3).reshape(6, 4))
    assert_gradcheck(lambda t: red(t.reshape(2, 3, 4)), w)


@pytest.mark.parametrize("op", ["sum", "mean"])
def test_sum_mean_backward_values(op):
    x = leaf(away_from_zero((2, 3, 4)))
    getattr(x, op)((0, 2)).backward(tg.tensor([1.0, 2.0, 3.0], dtype=F64))
    scale = 1.0 if op == "sum" else 1.0 / 8
    expected = np.broadcast_to(np.array([1.0, 2.0, 3.0])[None, :, None], (2, 3, 4)) * scale
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-15)
    s = leaf(1.5)
    getattr(s, op)().backward()
    assert s.grad.shape == () and s.grad.item() == 1.0
    e = leaf(np.zeros((0, 3)))
    e.sum(0).backward(tg.zeros(3, dtype=F64))
    assert e.grad.shape == (0, 3)


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_gradcheck(op):
    x = leaf(distinct((3, 4, 2)))
    assert_gradcheck(lambda t: getattr(t, op)(), x)
    assert_gradcheck(lambda t: getattr(t.transpose(0, 2), op)() * 2, x)
    for dim in (0, 1, 2, -1):
        for keep in (False, True):
            assert_gradcheck(lambda t: getattr(t, op)(dim, keep).values, x)
            assert_gradcheck(lambda t: getattr(t.permute(2, 0, 1), op)(dim, keepdim=keep)[0], x)
    assert_gradcheck(lambda t: getattr(tg, op)(t, 1).values.exp(), nc_leaf(distinct((4, 5))))
    s = leaf(0.75)
    assert_gradcheck(lambda t: getattr(t, op)(), s)
    assert_gradcheck(lambda t: getattr(t, op)(0).values, s)


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_ties(op):
    """PyTorch: the full reduction splits the gradient evenly among tied extremes; the dim
    form sends it to the returned index only."""
    v = 3.0 if op == "max" else -3.0
    x = leaf([1.0 if op == "max" else -1.0, v, v, 0.0])
    getattr(x, op)().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 0.5, 0.5, 0.0])
    y = leaf([[v, 0.0, v]])
    res = getattr(y, op)(1)
    res.values.sum().backward()
    idx = res.indices.item()
    assert idx in (0, 2)
    expected = np.zeros((1, 3))
    expected[0, idx] = 1.0
    np.testing.assert_array_equal(y.grad.numpy(), expected)


# ------------------------------------------------------------------ matmul
MATMUL_SHAPES = [
    ((4,), (4,)), ((3, 4), (4,)), ((4,), (4, 5)), ((3, 4), (4, 5)),
    ((2, 3, 4), (2, 4, 5)), ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 2)), ((1, 3, 4), (2, 4, 5)), ((4,), (2, 4, 5)), ((2, 3, 4), (4,)),
    ((1, 1), (1, 1)), ((3, 0), (0, 2)),
]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=lambda s: f"{s[0]}@{s[1]}")
def test_matmul_gradcheck(shapes):
    sa, sb = shapes
    a, b = leaf(rng(1).standard_normal(sa)), leaf(rng(2).standard_normal(sb))
    assert_gradcheck(lambda x, y: x @ y, a, b)
    assert_gradcheck(lambda x, y: tg.matmul(x, y), a, b)


def test_mm_mv_dot_gradcheck():
    m, n = leaf(rng(1).standard_normal((3, 4))), leaf(rng(2).standard_normal((4, 2)))
    v, w = leaf(rng(3).standard_normal(4)), leaf(rng(4).standard_normal(4))
    assert_gradcheck(lambda x, y: x.mm(y), m, n)
    assert_gradcheck(lambda x, y: tg.mm(x, y.T.T), m, n)
    assert_gradcheck(lambda x, y: x.mv(y), m, v)
    assert_gradcheck(lambda x, y: tg.mv(x.T.T, y), m, v)
    assert_gradcheck(lambda x, y: x.dot(y), v, w)
    assert_gradcheck(lambda x: tg.dot(x, x), v)          # same tensor twice
    assert_gradcheck(lambda x: x @ x.T, m)
    assert_gradcheck(lambda x: x.T @ x, m)


def test_matmul_gradcheck_non_contiguous():
    x = leaf(rng(1).standard_normal((3, 4)))
    W = leaf(rng(2).standard_normal((5, 4)))
    A = leaf(rng(3).standard_normal((2, 4, 3)))
    B = leaf(rng(4).standard_normal((2, 4, 5)))
    col = leaf(rng(5).standard_normal((4, 1)))
    assert_gradcheck(lambda x, W: x @ W.T, x, W)                     # nn.Linear layout
    assert_gradcheck(lambda x, W: W.t().t() @ x.T, x, W)
    assert_gradcheck(lambda A, B: A.mT @ B, A, B)
    assert_gradcheck(lambda A, B: B.transpose(1, 2) @ A, A, B)
    assert_gradcheck(lambda A, B: B.permute(0, 2, 1) @ A.transpose(0, 1).transpose(0, 1), A, B)
    assert_gradcheck(lambda x, c: x @ c.expand(4, 6), x, col)
    assert_gradcheck(lambda x, c: c.expand(2, 4, 3).mT @ x.T, x, col)
    assert_gradcheck(lambda x, W: W.T.t().mv(x.T.unbind(1)[1]), x, W)
    assert_gradcheck(lambda x, W: x.T.expand(2, 4, 3) @ x, x, W.detach())
    assert_gradcheck(lambda a, b: a @ b, nc_leaf(rng(6).standard_normal((3, 4))),
                     nc_leaf(rng(7).standard_normal((4, 2))))


def test_matmul_backward_values():
    a, b = rng(1).standard_normal((2, 3, 4)), rng(2).standard_normal((4, 5))
    ta, tb = leaf(a), leaf(b)
    g = rng(3).standard_normal((2, 3, 5))
    (ta @ tb).backward(tg.tensor(g, dtype=F64))
    np.testing.assert_allclose(ta.grad.numpy(), g @ b.T, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tb.grad.numpy(), np.einsum("bij,bik->jk", a, g), rtol=1e-12,
                               atol=1e-12)


# ------------------------------------------------------------------ shape ops
SHAPE_FNS = [
    ("view", (2, 3, 4), lambda t: t.view(6, 4) * t.view(6, 4)),
    ("view_infer", (2, 3, 4), lambda t: t.view(-1, 3).exp()),
    ("reshape", (2, 3, 4), lambda t: t.reshape(4, 6).sin()),
    ("reshape_tuple", (2, 3, 4), lambda t: tg.reshape(t, (24,)) * 2),
    ("reshape_nc", (4, 3, 2), lambda t: t.transpose(0, 2).reshape(6, 4).exp()),
    ("reshape_expand", (3, 1), lambda t: t.expand(2, 3, 4).reshape(-1).sin()),
    ("flatten", (2, 3, 4), lambda t: t.flatten(1).exp()),
    ("flatten_nc", (4, 3, 2), lambda t: t.permute(2, 0, 1).flatten(0, 1).cos()),
    ("flatten_0d", (), lambda t: t.flatten() * 3),
    ("transpose", (2, 3, 4), lambda t: t.transpose(0, 2).exp()),
    ("transpose_neg", (2, 3, 4), lambda t: tg.transpose(t, -1, -2) * t.transpose(1, 2)),
    ("permute", (2, 3, 4), lambda t: t.permute(2, 0, 1).sin()),
    ("permute_chain", (2, 3, 4), lambda t: t.permute(1, 2, 0).permute(2, 1, 0).exp()),
    ("t", (3, 4), lambda t: t.t().exp()),
    ("t_1d", (4,), lambda t: t.t() * t),
    ("T", (2, 3, 4), lambda t: t.T.exp()),
    ("mT", (2, 3, 4), lambda t: t.mT.sin()),
    ("expand", (3, 1), lambda t: t.expand(2, 3, 4).exp()),
    ("expand_0d", (), lambda t: t.expand(2, 3).sin()),
    ("expand_infer", (1, 4), lambda t: t.expand(3, -1) * t),
    ("expand_T", (3, 1), lambda t: t.T.expand(5, 3).exp()),
    ("expand_nc", (4, 3), lambda t: t.T.unbind(1)[0].expand(2, 3).exp()),
    ("unbind", (3, 4), lambda t: t.unbind(0)),
    ("unbind_dim1", (3, 4), lambda t: tuple(x.exp() for x in t.unbind(1))),
    ("unbind_partial", (3, 4), lambda t: t.unbind(-1)[2].exp()),
    ("unbind_mix", (2, 3, 4),
     lambda t: t.unbind(1)[0] * t.unbind(1)[2] + t.unbind(0)[1].unbind(0)[0]),
    ("unbind_nc", (3, 4), lambda t: t.T.unbind(0)[1].sin()),
    ("iter", (3, 2), lambda t: sum((r * (k + 1) for k, r in enumerate(t)), t.unbind(0)[0])),
]


@pytest.mark.parametrize("case", SHAPE_FNS, ids=[c[0] for c in SHAPE_FNS])
def test_shape_op_gradcheck(case):
    _, shape, f = case
    assert_gradcheck(f, leaf(away_from_zero(shape)))
    if len(shape) == 2:
        assert_gradcheck(f, nc_leaf(away_from_zero(shape, seed=1)))


def test_expand_backward_values():
    x = leaf([[1.0], [2.0]])
    x.expand(3, 2, 4).backward(tg.ones(3, 2, 4, dtype=F64))
    np.testing.assert_array_equal(x.grad.numpy(), [[12.0], [12.0]])


def test_unbind_backward_unused_outputs_get_zero():
    x = leaf(away_from_zero((3, 2)))
    a, b, c = x.unbind(0)
    (b * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0.0, 0.0], [2.0, 2.0], [0.0, 0.0]])


# ------------------------------------------------------------------ in-place in graphs
def _chain_inplace(a, b):
    y = a * 1.0
    y.add_(b)
    y.mul_(b)
    y -= 0.5
    y /= b
    y.sub_(a)
    y.div_(2.0)
    return y


def test_inplace_chain_gradcheck():
    a = leaf(away_from_zero((2, 3)))
    b = leaf(away_from_zero((3,), seed=1, lo=0.5))
    assert_gradcheck(_chain_inplace, a, b)
    assert_gradcheck(lambda a, b: _chain_inplace(a.T.T, b.expand(2, 3)).exp(), a, b)


def test_pow_in_place_gradcheck_and_names():
    a = leaf(np.abs(away_from_zero((2, 3))))
    b = leaf(away_from_zero((3,), seed=1, lo=0.5))

    def f(a, b):
        y = a * 1.0
        y.pow_(3)
        y **= b
        return y
    assert_gradcheck(f, a, b)
    y = a * 1.0
    assert y.pow_(2) is y and y.grad_fn.name() == "PowBackward0"
    y **= b
    assert y.grad_fn.name() == "PowBackward1"
    np.testing.assert_allclose(y.detach().numpy(), (a.detach().numpy() ** 2) ** b.detach()
                               .numpy(), rtol=1e-14)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        a.pow_(2)
    i = tg.tensor([1, 2, 3])
    i.pow_(2)
    assert i.tolist() == [1, 4, 9] and i.dtype is tg.int64


def _more_inplace(lib, xs, ys):
    x = lib.tensor(xs, requires_grad=True)
    y = x * 1
    assert y.clamp_min_(-0.5) is y and y.clamp_max_(1.0) is y
    names = [y.grad_fn.name()]
    y.true_divide_(lib.tensor(ys))
    y.arctan2_(lib.tensor(ys))
    names.append(y.grad_fn.name())
    y.sum().backward()
    i = lib.tensor([-3, 1, 5])
    i.clamp_min_(0)
    i.clamp_max_(4)
    return names, y.detach().numpy(), x.grad.numpy(), i.tolist()


def test_clamp_min_max_true_divide_arctan2_in_place():
    xs, ys = away_from_zero((2, 3)), away_from_zero((3,), seed=1, lo=0.5)
    names, y, g, ints = _more_inplace(tg, xs, ys)
    assert names == ["ClampMaxBackward0", "Atan2Backward0"] and ints == [0, 1, 4]
    c = np.clip(xs, -0.5, 1.0)
    np.testing.assert_allclose(y, np.arctan2(c / ys, ys), rtol=1e-14)
    assert_gradcheck(lambda a, b: a.clamp_min(-0.5).clamp_max(1.0).true_divide(b)
                     .arctan2(b), leaf(xs), leaf(ys))
    inside = (xs > -0.5) & (xs < 1.0)
    t = c / ys
    np.testing.assert_allclose(g, inside * (ys / (t * t + ys * ys)) / ys, rtol=1e-12)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        leaf(xs).clamp_max_(0.0)
    torch = pytest.importorskip("torch")
    want = _more_inplace(torch, xs, ys)
    assert want[0] == names and want[3] == ints
    np.testing.assert_allclose(want[1], y, rtol=1e-14)
    np.testing.assert_allclose(want[2], g, rtol=1e-14)


def test_inplace_zero_fill_block_gradient():
    a = leaf(away_from_zero((2, 3)))
    y = a * 3.0
    z = y.exp().sum()
    y.zero_()
    w = (y + a).sum()
    w.backward()
    np.testing.assert_array_equal(a.grad.numpy(), np.ones((2, 3)))
    a.grad = None
    q = a * 3.0
    q.fill_(2.0)
    (q * a).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), np.full((2, 3), 2.0))
    del z


def test_inplace_on_saved_tensor_raises_at_backward():
    a = leaf(away_from_zero((3,)))
    y = a * 1.0
    z = y * y                     # saves y
    y.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()
    b = leaf(away_from_zero((3,)))
    e = b.exp()                   # saves its output
    e.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        e.sum().backward()


def test_inplace_mul_by_itself():
    a = leaf([1.0, 2.0])
    y = a * 1.0
    y.mul_(y)
    np.testing.assert_array_equal(y.detach().numpy(), [1.0, 4.0])
    try:
        y.sum().backward()
    except RuntimeError as exc:        # PyTorch's behaviour: a version-counter error
        assert "inplace" in str(exc)
        return
    np.testing.assert_array_equal(a.grad.numpy(), [2.0, 4.0])   # or the right gradient


def test_inplace_add_by_itself():
    a = leaf([1.0, 2.0])
    y = a * 1.0
    y.add_(y)
    y.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [2.0, 2.0])


def test_inplace_on_base_invalidates_saved_view():
    """Views share their base's version counter, so the check sees through them."""
    a = leaf([[1.0, 2.0], [3.0, 4.0]])
    y = a * 1.0
    z = y.T * y.T                 # saves the view y.T
    y.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()
    b = leaf([[1.0, 2.0], [3.0, 4.0]])
    w = b * 1.0
    v = w.view(4)
    d = v @ v                     # saves v (twice)
    w.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        d.backward()
    c = leaf([[1.0, 2.0], [3.0, 4.0]])
    u = c * 1.0
    e = u.unbind(0)[1].exp()      # exp saves its output, not the view: still fine
    u.mul_(2.0)
    e.sum().backward()
    np.testing.assert_allclose(c.grad.numpy(), [[0.0, 0.0], np.exp([3.0, 4.0])], rtol=1e-15)


def test_inplace_on_unsaved_tensor_is_fine():
    a = leaf(away_from_zero((3,)))
    y = a * 1.0
    z = y + 2.0                   # add saves nothing
    y.mul_(5.0)
    z.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), np.ones(3))


# ------------------------------------------------------------------ composites, accumulation
def test_composite_gradcheck():
    x = leaf(rng(1).standard_normal((4, 3)))
    W = leaf(rng(2).standard_normal((5, 3)))
    b = leaf(rng(3).standard_normal(5))

    def mlp(x, W, b):
        h = (x @ W.T + b).tanh()
        z = h - h.max(1, keepdim=True).values
        return (z.exp() / z.exp().sum(1, keepdim=True)).log().mean()

    assert_gradcheck(mlp, x, W, b)

    def diamond(x):
        s = x.sigmoid()
        return (s * s.T.T + s.sqrt() * x.abs().sqrt()).sum(0) / (1 + x.cos().sum())

    assert_gradcheck(diamond, leaf(away_from_zero((3, 2), seed=4)))


def test_backward_accumulates_and_retain_graph():
    x = leaf([1.0, 2.0, 3.0])
    y = (x * x).sum()
    y.backward(retain_graph=True)
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0, 6.0])
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 8.0, 12.0])
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()


def test_retain_grad_on_intermediate():
    x = leaf([1.0, 2.0])
    h = x * 3.0
    h.retain_grad()
    (h * h).sum().backward()
    np.testing.assert_array_equal(h.grad.numpy(), [6.0, 12.0])
    np.testing.assert_array_equal(x.grad.numpy(), [18.0, 36.0])


def test_autograd_grad_does_not_touch_dot_grad():
    x = leaf([1.0, 2.0])
    y = leaf([3.0, 4.0])
    out = x * y
    gx, gy = tg_grad(out, [x, y], grad_outputs=tg.tensor([1.0, 10.0], dtype=F64))
    np.testing.assert_array_equal(gx.numpy(), [3.0, 40.0])
    np.testing.assert_array_equal(gy.numpy(), [1.0, 20.0])
    assert x.grad is None and y.grad is None
    z = leaf([0.0])
    with pytest.raises(RuntimeError):
        tg_grad((x * 2).sum(), [x, z])
    g = tg_grad((x * 2).sum(), [x, z], allow_unused=True)
    assert g[1] is None
    np.testing.assert_array_equal(g[0].numpy(), [2.0, 2.0])


def test_grad_of_non_contiguous_leaf_is_contiguous_and_right():
    x = nc_leaf(rng(1).standard_normal((3, 4)))
    assert not x.is_contiguous() and x.is_leaf and x.stride() == (1, 3)
    (x * x).sum().backward()
    assert x.grad.shape == (3, 4) and x.grad.is_contiguous()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.detach().numpy(), rtol=1e-15)


# ------------------------------------------------------------------ hypothesis shapes
@HYP
@given(shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3),
       name=st.sampled_from(sorted(BINARY)), seed=st.integers(0, 2 ** 16))
def test_hyp_binary_broadcast(shapes, name, seed):
    sa, sb = shapes.input_shapes
    a, b = binary_data(name, sa, sb, seed)
    ta, tb = leaf(a), leaf(b)
    out = BINARY[name](ta, tb)
    assert out.shape == shapes.result_shape
    assert_gradcheck(BINARY[name], ta, tb)


@HYP
@given(shape=st.lists(st.integers(1, 3), min_size=1, max_size=4),
       data=st.data(), keepdim=st.booleans(), op=st.sampled_from(["sum", "mean"]))
def test_hyp_reduce_dims(shape, data, keepdim, op):
    nd = len(shape)
    dims = data.draw(st.lists(st.integers(-nd, nd - 1), min_size=1, max_size=nd,
                              unique_by=lambda d: d % nd))
    x = leaf(away_from_zero(tuple(shape), seed=len(dims)))
    out = getattr(x, op)(tuple(dims), keepdim=keepdim)
    ref = getattr(np, op)(x.detach().numpy(), axis=tuple(dims), keepdims=keepdim)
    assert out.shape == ref.shape
    np.testing.assert_allclose(out.detach().numpy(), ref, rtol=1e-12, atol=1e-12)
    assert_gradcheck(lambda t: getattr(t, op)(tuple(dims), keepdim=keepdim).sin(), x)


@HYP
@given(batch=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=2, max_side=3),
       n=st.integers(1, 3), k=st.integers(1, 3), m=st.integers(1, 3),
       transpose_a=st.booleans())
def test_hyp_batched_matmul(batch, n, k, m, transpose_a):
    ba, bb = batch.input_shapes
    a = rng(n * 7 + k).standard_normal(ba + ((k, n) if transpose_a else (n, k)))
    b = rng(m).standard_normal(bb + (k, m))
    ta, tb = leaf(a), leaf(b)

    def f(x, y):
        return (x.mT if transpose_a else x) @ y

    ref = np.matmul(np.swapaxes(a, -1, -2) if transpose_a else a, b)
    out = f(ta, tb)
    assert out.shape == ref.shape
    np.testing.assert_allclose(out.detach().numpy(), ref, rtol=1e-12, atol=1e-12)
    assert_gradcheck(f, ta, tb)


@HYP
@given(shape=st.lists(st.integers(1, 3), min_size=1, max_size=4), data=st.data())
def test_hyp_permute_reshape_expand(shape, data):
    nd = len(shape)
    perm = data.draw(st.permutations(range(nd)))
    lead = data.draw(st.lists(st.integers(1, 2), max_size=2))
    x = leaf(away_from_zero(tuple(shape), seed=nd))

    def f(t):
        p = t.permute(*perm)
        e = p.expand(*lead, *p.shape)
        return e.reshape(-1).exp() * e.flatten()

    a = np.transpose(x.detach().numpy(), perm)
    e = np.broadcast_to(a, tuple(lead) + a.shape).reshape(-1)
    np.testing.assert_allclose(f(x).detach().numpy(), np.exp(e) * e, rtol=1e-12)
    assert_gradcheck(f, x)


@HYP
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), data=st.data(),
       op=st.sampled_from(["max", "min"]))
def test_hyp_max_min_dim(shape, data, op):
    nd = len(shape)
    dim = data.draw(st.integers(-nd, nd - 1))
    x = leaf(distinct(tuple(shape), seed=nd))
    res = getattr(x, op)(dim)
    a = x.detach().numpy()
    np.testing.assert_array_equal(res.values.detach().numpy(), getattr(np, op)(a, axis=dim))
    np.testing.assert_array_equal(res.indices.numpy(), getattr(np, "arg" + op)(a, axis=dim))
    assert_gradcheck(lambda t: getattr(t, op)(dim).values * 2, x)


# ------------------------------------------------------------------ against PyTorch
# Each expression is written once and run by both libraries (same spelling); the leaf
# gradients must agree to ~1e-5 relative in float32.
def _softmax_nll(L, x, W, b):
    logits = x @ W.T + b
    z = logits - logits.max(1, keepdim=True).values
    return -(z - z.exp().sum(1, keepdim=True).log()).mean()


def _attention(L, x, W, b):
    q = x.reshape(2, 2, 3)
    s = (q @ q.mT) / math.sqrt(3.0)
    p = (s - s.max(-1, keepdim=True).values).exp()
    p = p / p.sum(-1, keepdim=True)
    return (p @ q).tanh().sum() + (W ** 2).sum().sqrt() * b.sigmoid().mean()


def _elementwise_zoo(L, x, W, b):
    y = (x.abs() + 0.5).log() * x.sin() - x.cos() / (x * x + 1.0).sqrt()
    y = y + (2.0 ** x.tanh()) - (x.relu() + 1.0).reciprocal() + 3.0 / (x.exp() + 1.0)
    return (y @ (W.T ** 2)).mean(0).dot(b) + (1.5 - x).pow(2).sum()


def _views_and_inplace(L, x, W, b):
    h = (W @ x.T).permute(1, 0)               # (4, 5)
    h = h.expand(2, 4, 5).transpose(0, 1).reshape(4, 10)
    g = h * 1.0
    g.mul_(b.expand(2, 5).flatten())
    g += 0.25
    g.div_(3.0)
    rows = g.unbind(0)
    return (rows[0] * rows[3]).sum() + g.min(0).values.sum() - h.max()


def _sums(L, x, W, b):
    return (x.sum(0, keepdim=True) * x).mean((0, 1)) + x.T.sum(-1).dot(x.mean(0)) + \
        L.sum(L.exp(W) * 0.1, (0, 1)) + W.mv(b.unbind(0)[0].expand(3)).mean()


COMPOSITES = [("softmax_nll", _softmax_nll), ("attention", _attention),
              ("elementwise_zoo", _elementwise_zoo), ("views_and_inplace", _views_and_inplace),
              ("sums", _sums)]


@pytest.mark.parametrize("case", COMPOSITES, ids=[c[0] for c in COMPOSITES])
def test_composite_grads_against_torch(case):
    assert_float32_composite_matches_torch(case[1], value_atol=1e-6)


TORCH_OPS = [
    ("add", lambda a, b: a + b), ("sub", lambda a, b: a - b), ("mul", lambda a, b: a * b),
    ("div", lambda a, b: a / b), ("pow", lambda a, b: a ** b), ("rsub", lambda a, b: 2.0 - a),
    ("rdiv", lambda a, b: 2.0 / a), ("rpow", lambda a, b: 1.5 ** a),
    ("pow_s", lambda a, b: a ** 2.5), ("neg", lambda a, b: -a),
    ("unary_chain", lambda a, b: a.exp().log().sin().cos().tanh().sigmoid().sqrt()
     .reciprocal().abs().relu().clone()),
    ("sum_mean", lambda a, b: a.sum(1) * a.mean((0, 2), keepdim=True)),
    ("max_min", lambda a, b: a.max(2).values * a.min(0).values + a.max() - a.min()),
    ("matmul", lambda a, b: a @ b.T),
    ("shapes", lambda a, b: a.transpose(0, 2).reshape(4, 3).t().expand(2, 3, 4).flatten()),
]


@pytest.mark.parametrize("case", TORCH_OPS, ids=[c[0] for c in TORCH_OPS])
@pytest.mark.parametrize("dtype", [tg.float32, tg.float64], ids=["f32", "f64"])
def test_op_grads_against_torch(case, dtype):
    torch = pytest.importorskip("torch")
    _, f = case
    a = distinct((3, 1, 4), seed=3) * 0.1 + 1.6
    b = rng(2).uniform(0.5, 1.5, size=(2, 4))
    tdt = {"float32": torch.float32, "float64": torch.float64}[dtype.name]
    ours = [leaf(v, dtype) for v in (a, b)]
    theirs = [torch.tensor(v, dtype=tdt, requires_grad=True) for v in (a, b)]
    out_t = f(*theirs)
    out_o = f(*ours)
    g = rng(5).standard_normal(tuple(out_t.shape))
    out_o.backward(tg.tensor(g, dtype=dtype))
    out_t.backward(torch.tensor(g, dtype=tdt))
    tol = dict(rtol=1e-5, atol=1e-6) if dtype is tg.float32 else dict(rtol=1e-11, atol=1e-12)
    for o, t in zip(ours, theirs):
        if t.grad is None:
            assert o.grad is None
            continue
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), **tol)


# ------------------------------------------------------------------ division by zero
# See test_values.py: a float division by zero inside a kernel is swallowed and the
# kernel's result is lost. In backward it silently zeroes the whole gradient (the finite
# elements too). Run in a fresh interpreter: the failure corrupts the engine's state.
_DIVZERO_SCRIPT = textwrap.dedent("""
    import json
    import tapegrad as tg
    out = {}
    def attempt(name, f):
        try:
            out[name] = f()
        except Exception as exc:
            out[name] = repr(exc)
    def sqrt_grad():
        x = tg.tensor([0.0, 1.0], dtype=tg.float64, requires_grad=True)
        x.sqrt().sum().backward()
        return x.grad.tolist()
    def log_grad():
        x = tg.tensor([0.0, 1.0], dtype=tg.float64, requires_grad=True)
        x.log().sum().backward()
        return x.grad.tolist()
    def div_grad():
        a = tg.tensor([1.0, 1.0], dtype=tg.float64, requires_grad=True)
        b = tg.tensor([0.0, 1.0], dtype=tg.float64, requires_grad=True)
        (a / b).sum().backward()
        return a.grad.tolist() + b.grad.tolist()
    attempt("sqrt", sqrt_grad)
    attempt("log", log_grad)
    attempt("div", div_grad)
    print(json.dumps(out))
""")
DIVZERO_GRAD_EXPECTED = {          # PyTorch's values
    "sqrt": [math.inf, 0.5],
    "log": [math.inf, 1.0],
    "div": [math.inf, 1.0, -math.inf, -1.0],
}


@pytest.fixture(scope="module")
def divzero_grads():
    root = os.path.dirname(os.path.dirname(os.path.abspath(tg.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", _DIVZERO_SCRIPT], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", list(DIVZERO_GRAD_EXPECTED))
def test_grad_division_by_zero(divzero_grads, case):
    got = divzero_grads[case]
    assert isinstance(got, list), got
    np.testing.assert_array_equal(np.array(got), np.array(DIVZERO_GRAD_EXPECTED[case]))
