"""Forward values of every op against NumPy (float32 and float64), grad_fn names against
PyTorch's, and in-place semantics (values, identity, version counter).

The torch comparisons at the end run only when torch is importable.
"""
import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapegrad as tg
from tests.helpers import DTYPES, make_tensor, numpy_of, rng

TOL = {"float32": dict(rtol=2e-6, atol=2e-6), "float64": dict(rtol=1e-13, atol=1e-13)}


def check(t, expected, dtype, tol_scale=1.0):
    """t has expected's shape, the given dtype, and (close to) its values."""
    expected = np.asarray(expected)
    assert isinstance(t, tg.Tensor)
    assert t.dtype is dtype
    assert tuple(t.shape) == expected.shape
    tol = {k: v * tol_scale for k, v in TOL[dtype.name].items()}
    np.testing.assert_allclose(numpy_of(t), expected.astype(dtype.np), **tol)


# ------------------------------------------------------------------ input layouts
# Each layout: (numpy base shape, how to view it in tapegrad, the same view in numpy).
LAYOUTS = {
    "contig": ((2, 3, 4), lambda t: t, lambda a: a),
    "T": ((4, 3), lambda t: t.T, lambda a: a.T),
    "transpose02": ((4, 3, 2), lambda t: t.transpose(0, 2), lambda a: a.transpose(2, 1, 0)),
    "permute": ((2, 3, 4), lambda t: t.permute(1, 2, 0), lambda a: a.transpose(1, 2, 0)),
    "expand": ((3, 1), lambda t: t.expand(2, 3, 5), lambda a: np.broadcast_to(a, (2, 3, 5))),
    "0d": ((), lambda t: t, lambda a: a),
    "empty": ((0, 3), lambda t: t, lambda a: a),
}


def layout_input(name, dtype, positive=False, seed=0):
    shape, tview, nview = LAYOUTS[name]
    base = rng(seed).uniform(-2.0, 2.0, size=shape)
    if positive:
        base = np.abs(base) + 0.25
    base = base.astype(dtype.np)
    t = tview(make_tensor(base, dtype))
    return t, nview(base)


def _sigmoid(a):
    return 1.0 / (1.0 + np.exp(-a))


UNARY = {
    # name: (numpy reference, needs positive input)
    "exp": (np.exp, False),
    "log": (np.log, True),
    "sin": (np.sin, False),
    "cos": (np.cos, False),
    "tanh": (np.tanh, False),
    "sigmoid": (_sigmoid, False),
    "relu": (lambda a: np.maximum(a, 0), False),
    "sqrt": (np.sqrt, True),
    "abs": (np.abs, False),
    "reciprocal": (lambda a: 1.0 / a, True),
    "neg": (np.negative, False),
    "clone": (np.copy, False),
}
UNARY_GRAD_FN = {"exp": "ExpBackward0", "log": "LogBackward0", "sin": "SinBackward0",
                 "cos": "CosBackward0", "tanh": "TanhBackward0",
                 "sigmoid": "SigmoidBackward0", "relu": "ReluBackward0",
                 "sqrt": "SqrtBackward0", "abs": "AbsBackward0",
                 "reciprocal": "ReciprocalBackward0", "neg": "NegBackward0",
                 "clone": "CloneBackward0"}


# ------------------------------------------------------------------ unary ops
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", list(UNARY))
@pytest.mark.parametrize("dtype", DTYPES)
def test_unary_values(name, dtype, layout):
    ref, positive = UNARY[name]
    t, a = layout_input(layout, dtype, positive)
    expected = ref(a.astype(np.float64))
    check(getattr(t, name)(), expected, dtype, tol_scale=2)
    check(getattr(tg, name)(t), expected, dtype, tol_scale=2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_unary_operator_spellings(dtype):
    t, a = layout_input("contig", dtype)
    check(-t, -a, dtype)
    check(abs(t), np.abs(a), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_unary_special_values(dtype):
    x = make_tensor([0.0, 1.0, -1.0, 1e-3, 50.0, -50.0], dtype)
    check(x.relu(), [0.0, 1.0, 0.0, 1e-3, 50.0, 0.0], dtype)
    check(x.abs(), [0.0, 1.0, 1.0, 1e-3, 50.0, 50.0], dtype)
    check(x.sigmoid(), _sigmoid(np.array([0.0, 1.0, -1.0, 1e-3, 50.0, -50.0])), dtype)
    check(x.tanh(), np.tanh([0.0, 1.0, -1.0, 1e-3, 50.0, -50.0]), dtype)
    p = make_tensor([0.0, 1.0, 4.0], dtype)
    check(p.sqrt(), [0.0, 1.0, 2.0], dtype)
    assert np.isneginf(numpy_of(p.log())[0]) and numpy_of(p.log())[1] == 0.0
    assert np.isposinf(numpy_of(p ** -1)[0])
    # division by zero: see test_division_by_zero (run in a subprocess)


NONFINITE = [-1.0, -1000.0, 1000.0, math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("name", [n for n in UNARY if n != "relu"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_unary_nonfinite_inputs(name, dtype):
    """Overflow, NaN and infinities propagate as in NumPy (and PyTorch)."""
    a = np.array(NONFINITE, dtype=dtype.np)
    with np.errstate(all="ignore"):
        expected = UNARY[name][0](a)
    got = numpy_of(getattr(make_tensor(a, dtype), name)())
    np.testing.assert_allclose(got, expected, rtol=2e-6, equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_relu_nonfinite_inputs(dtype):
    check(make_tensor([-1.0, -math.inf, math.inf, 2.0], dtype).relu(), [0.0, 0.0, math.inf, 2.0],
          dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_relu_propagates_nan(dtype):
    assert np.isnan(numpy_of(make_tensor([math.nan], dtype).relu())[0])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_abs_gradient_at_nan_zero_and_inf_is_torchs(dtype):
    """abs's gradient is g * sgn(x), and PyTorch's sgn of NaN is 0 (NumPy's sign is NaN):
    so the gradient at NaN is 0, as at +-0; l1_loss (composed of abs) inherits it."""
    torch = pytest.importorskip("torch")
    a = np.array([math.nan, 0.0, -0.0, -math.inf, math.inf, -2.5, 3.0], dtype)
    grads = []
    for L in (tg, torch):
        x = L.tensor(a, requires_grad=True)
        (x.abs() * L.tensor(np.arange(1.0, 8.0).astype(dtype))).sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_array_equal(grads[0], grads[1])
    np.testing.assert_array_equal(grads[0], [0.0, 0.0, 0.0, -4.0, 5.0, -6.0, 7.0])


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_grad_fn_name(name):
    t = make_tensor(np.full((2, 2), 0.5), tg.float32, requires_grad=True)
    out = getattr(t, name)()
    assert out.requires_grad and not out.is_leaf
    assert out.grad_fn.name() == UNARY_GRAD_FN[name]


def test_unary_no_grad_fn_without_requires_grad():
    t = make_tensor(np.ones(3), tg.float32)
    out = t.exp()
    assert out.grad_fn is None and not out.requires_grad and out.is_leaf


def test_clone_is_a_copy():
    x = make_tensor(np.arange(4.0), tg.float64)
    y = x.clone()
    x.add_(10)
    check(y, np.arange(4.0), tg.float64)
    check(x, np.arange(4.0) + 10, tg.float64)


# ------------------------------------------------------------------ division by zero
# A float division by zero inside a kernel raises ZeroDivisionError in the compiled code
# (Numba's Python error model); it is swallowed and the op returns tensor id 0, an unrelated
# tensor, which also corrupts reference counts. So these run in a fresh interpreter.
_DIVZERO_SCRIPT = textwrap.dedent("""
    import json, math
    import tapegrad as tg
    def attempt(f):
        try:
            return f()
        except Exception as exc:
            return repr(exc)
    out = {}
    for name, dt in (("f32", tg.float32), ("f64", tg.float64)):
        x = lambda: tg.tensor([0.0, 1.0, 4.0], dtype=dt)
        out[name + "-reciprocal"] = attempt(lambda: x().reciprocal().tolist())
        out[name + "-scalar/x"] = attempt(lambda: (1.0 / x()).tolist())
        out[name + "-x/0"] = attempt(lambda: (x() / 0.0).tolist())
        out[name + "-x/zeros"] = attempt(lambda: (x() / tg.zeros(3, dtype=dt)).tolist())
        def inplace():
            y = x()
            y.div_(0.0)
            return y.tolist()
        out[name + "-div_"] = attempt(inplace)
    print(json.dumps(out))
""")
DIVZERO_EXPECTED = {
    "reciprocal": [math.inf, 1.0, 0.25],
    "scalar/x": [math.inf, 1.0, 0.25],
    "x/0": [math.nan, math.inf, math.inf],
    "x/zeros": [math.nan, math.inf, math.inf],
    "div_": [math.nan, math.inf, math.inf],
}


def run_isolated(script):
    """Run script in a fresh interpreter that imports this same tapegrad; its stdout's last
    line is JSON."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(tg.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def divzero_results():
    return run_isolated(_DIVZERO_SCRIPT)


@pytest.mark.parametrize("case", list(DIVZERO_EXPECTED))
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_division_by_zero(divzero_results, dt, case):
    got = divzero_results[f"{dt}-{case}"]
    assert isinstance(got, list), got
    np.testing.assert_array_equal(np.array(got), np.array(DIVZERO_EXPECTED[case]))


# ------------------------------------------------------------------ binary ops
BINARY = {
    "add": (np.add, lambda a, b: a + b, "AddBackward0"),
    "sub": (np.subtract, lambda a, b: a - b, "SubBackward0"),
    "mul": (np.multiply, lambda a, b: a * b, "MulBackward0"),
    "div": (np.divide, lambda a, b: a / b, "DivBackward0"),
    "pow": (np.power, lambda a, b: a ** b, "PowBackward1"),
}
SHAPE_PAIRS = [((2, 3), (2, 3)), ((3, 1, 4), (2, 4)), ((4,), (3, 4)), ((2, 1), (1, 3)),
               ((), (2, 3)), ((2, 3), ()), ((), ()), ((1,), (3,)), ((2, 1, 3), (1, 4, 1)),
               ((0, 3), (1, 3))]


def binary_inputs(sa, sb, dtype, name, seed=0):
    r = rng(seed)
    a = r.uniform(-2, 2, size=sa)
    b = r.uniform(-2, 2, size=sb)
    if name == "pow":
        a = np.abs(a) + 0.25
    if name == "div":
        b = np.sign(b) * (np.abs(b) + 0.25) + (b == 0)
    return a.astype(dtype.np), b.astype(dtype.np)


@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("dtype", DTYPES)
def test_binary_broadcast(name, dtype, shapes):
    a, b = binary_inputs(*shapes, dtype, name)
    ref, opf, _ = BINARY[name]
    expected = ref(a.astype(np.float64), b.astype(np.float64))
    ta, tb = make_tensor(a, dtype), make_tensor(b, dtype)
    check(opf(ta, tb), expected, dtype, tol_scale=4)
    check(getattr(ta, name)(tb), expected, dtype, tol_scale=4)
    check(getattr(tg, name)(ta, tb), expected, dtype, tol_scale=4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_true_divide_alias(dtype):
    a, b = binary_inputs((2, 3), (3,), dtype, "div")
    check(make_tensor(a, dtype).true_divide(make_tensor(b, dtype)), a / b, dtype)
    check(tg.true_divide(make_tensor(a, dtype), make_tensor(b, dtype)), a / b, dtype)


SCALAR_CASES = [
    # id, tapegrad/numpy expression, positive base, grad_fn
    ("x+s", lambda x, s: x + s, False, "AddBackward0"),
    ("s+x", lambda x, s: s + x, False, "AddBackward0"),
    ("x-s", lambda x, s: x - s, False, "SubBackward0"),
    ("s-x", lambda x, s: s - x, False, "RsubBackward1"),
    ("x*s", lambda x, s: x * s, False, "MulBackward0"),
    ("s*x", lambda x, s: s * x, False, "MulBackward0"),
    ("x/s", lambda x, s: x / s, False, "DivBackward0"),
    ("s/x", lambda x, s: s / x, True, "MulBackward0"),
    ("x**s", lambda x, s: x ** s, True, "PowBackward0"),
    ("s**x", lambda x, s: s ** x, False, "PowBackward2"),
]


@pytest.mark.parametrize("scalar", [2.5, 3, -0.5], ids=["float", "int", "neg"])
@pytest.mark.parametrize("case", SCALAR_CASES, ids=[c[0] for c in SCALAR_CASES])
@pytest.mark.parametrize("dtype", DTYPES)
def test_scalar_operands(case, scalar, dtype):
    _, f, positive, _ = case
    if case[0] == "s**x" and scalar < 0:
        scalar = 0.5
    for layout in ("contig", "T", "expand", "0d"):
        t, a = layout_input(layout, dtype, positive)
        expected = f(a.astype(np.float64), scalar)
        out = f(t, scalar)
        check(out, expected, dtype, tol_scale=4)


@pytest.mark.parametrize("case", SCALAR_CASES, ids=[c[0] for c in SCALAR_CASES])
def test_scalar_operand_grad_fn_names(case):
    _, f, _, name = case
    x = make_tensor([0.5, 1.5], tg.float32, requires_grad=True)
    out = f(x, 2.0)
    assert out.grad_fn.name() == name
    nxt = out.grad_fn.next_functions
    if case[0] == "s/x":      # 2 / x is 2 * x.reciprocal(), as in PyTorch
        assert nxt[0][0].name() == "ReciprocalBackward0"
        assert nxt[1] == (None, 0)
        assert nxt[0][0].next_functions[0][0].variable is x
    elif name in ("AddBackward0", "SubBackward0", "MulBackward0", "DivBackward0"):
        assert len(nxt) == 2 and nxt[1] == (None, 0)
        assert nxt[0][0].variable is x
    else:
        assert len(nxt) == 1 and nxt[0][0].variable is x


def test_pow_special_exponents():
    x = make_tensor([0.5, 2.0, 3.0], tg.float64)
    check(x ** 0, [1.0, 1.0, 1.0], tg.float64)
    check(x ** 1, [0.5, 2.0, 3.0], tg.float64)
    check(x ** -1, [2.0, 0.5, 1 / 3], tg.float64)
    check(x ** 0.5, np.sqrt([0.5, 2.0, 3.0]), tg.float64)
    check(x.pow(2), [0.25, 4.0, 9.0], tg.float64)
    check(tg.pow(x, 3), [0.125, 8.0, 27.0], tg.float64)
    neg = make_tensor([-2.0, -3.0], tg.float64)
    check(neg ** 2, [4.0, 9.0], tg.float64)
    check(neg ** 3, [-8.0, -27.0], tg.float64)


def test_pow_tensor_grad_fn_names():
    x = make_tensor([0.5, 2.0], tg.float32, requires_grad=True)
    y = make_tensor([1.5, 2.0], tg.float32, requires_grad=True)
    assert (x ** 2).grad_fn.name() == "PowBackward0"
    assert (x ** y).grad_fn.name() == "PowBackward1"
    assert x.pow(y).grad_fn.name() == "PowBackward1"
    assert (2 ** x).grad_fn.name() == "PowBackward2"


@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("dtype", DTYPES)
def test_binary_non_contiguous(name, dtype):
    r = rng(3)
    ref, opf, _ = BINARY[name]
    lo = 0.25 if name in ("pow", "div") else -2.0
    base_a = r.uniform(lo, 2, size=(4, 3)).astype(dtype.np)
    base_b = r.uniform(0.25, 2, size=(3, 4)).astype(dtype.np)
    cases = [
        (make_tensor(base_a, dtype).T, base_a.T, make_tensor(base_b, dtype), base_b),  # T op C
        (make_tensor(base_b, dtype), base_b, make_tensor(base_a, dtype).T, base_a.T),  # C op T
        (make_tensor(base_a, dtype).T, base_a.T, make_tensor(base_a, dtype).T, base_a.T),  # T op T
    ]
    col = r.uniform(0.25, 2, size=(3, 1)).astype(dtype.np)
    cases.append((make_tensor(col, dtype).expand(3, 4), np.broadcast_to(col, (3, 4)),
                  make_tensor(base_a, dtype).T, base_a.T))
    b3 = r.uniform(0.25, 2, size=(4, 3, 2)).astype(dtype.np)
    cases.append((make_tensor(b3, dtype).transpose(0, 2), b3.transpose(2, 1, 0),
                  make_tensor(base_b, dtype), base_b))                # (2,3,4) op (3,4)
    for ta, a, tb, b in cases:
        check(opf(ta, tb), ref(a.astype(np.float64), b.astype(np.float64)), dtype, tol_scale=4)


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_grad_fn_name(name):
    _, opf, gf = BINARY[name]
    a = make_tensor([[0.5, 1.5]], tg.float32, requires_grad=True)
    b = make_tensor([[1.0], [2.0]], tg.float32, requires_grad=True)
    out = opf(a, b)
    assert out.grad_fn.name() == gf
    nxt = out.grad_fn.next_functions
    assert len(nxt) == 2 and nxt[0][0].variable is a and nxt[1][0].variable is b


def test_binary_one_side_requires_grad():
    a = make_tensor([1.0, 2.0], tg.float64, requires_grad=True)
    b = make_tensor([3.0, 4.0], tg.float64)
    out = a * b
    assert out.requires_grad and out.grad_fn.name() == "MulBackward0"
    assert out.grad_fn.next_functions[1] == (None, 0)
    check(out, [3.0, 8.0], tg.float64)


@pytest.mark.parametrize("scalar", [np.float64(2.0), np.float32(2.0), np.int64(2)],
                         ids=["np.float64", "np.float32", "np.int64"])
def test_numpy_scalar_operand(scalar):
    x = make_tensor([1.0, 2.0], tg.float32, requires_grad=True)
    for out in (x * scalar, scalar * x, x + scalar):
        assert isinstance(out, tg.Tensor)
        assert out.requires_grad


def test_binary_shape_mismatch_raises():
    with pytest.raises(RuntimeError, match="must match"):
        make_tensor(np.ones((2, 3)), tg.float32) + make_tensor(np.ones((4,)), tg.float32)


def test_binary_mixed_dtypes_promote_like_pytorch():
    r = make_tensor([1.5], tg.float32) + make_tensor([1.0], tg.float64)
    assert r.dtype is tg.float64
    check(r, [2.5], tg.float64)


def test_int_arithmetic_stays_int64():
    r = tg.tensor([1, 2]) + tg.tensor([3, 4])
    assert r.dtype is tg.int64
    assert r.tolist() == [4, 6]


# ------------------------------------------------------------------ sum / mean
REDUCE_DIMS = [None, 0, 1, -1, 2, -3, (0, 2), (2, 0), (-1, 1), (0, 1, 2), ()]


@pytest.mark.parametrize("keepdim", [False, True], ids=["nokeep", "keep"])
@pytest.mark.parametrize("dim", REDUCE_DIMS, ids=repr)
@pytest.mark.parametrize("op", ["sum", "mean"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_sum_mean(op, dtype, dim, keepdim):
    ref = getattr(np, op)
    for layout in ("contig", "transpose02", "expand", "permute"):
        t, a = layout_input(layout, dtype)
        a64 = a.astype(np.float64)
        np_axis = None if dim is None or dim == () else dim
        expected = ref(a64, axis=np_axis, keepdims=keepdim)
        if dim is None:
            if keepdim:
                continue
            outs = [getattr(t, op)(), getattr(tg, op)(t)]
        else:
            outs = [getattr(t, op)(dim, keepdim=keepdim), getattr(tg, op)(t, dim, keepdim),
                    getattr(t, op)(dim=dim, keepdim=keepdim)]
        for out in outs:
            check(out, expected, dtype, tol_scale=4)


@pytest.mark.parametrize("op", ["sum", "mean"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_sum_mean_0d(op, dtype):
    t = make_tensor(2.5, dtype)
    for out in (getattr(t, op)(), getattr(t, op)(0), getattr(t, op)(-1),
                getattr(t, op)(0, keepdim=True)):
        check(out, np.float64(2.5), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sum_mean_empty(dtype):
    t = make_tensor(np.zeros((0, 3)), dtype)
    check(t.sum(), np.float64(0.0), dtype)
    check(t.sum(0), np.zeros(3), dtype)
    check(t.sum(1), np.zeros(0), dtype)
    assert np.isnan(numpy_of(t.mean())).all()


def test_sum_bad_dims_raise():
    t = make_tensor(np.ones((2, 3)), tg.float32)
    with pytest.raises(IndexError):
        t.sum(2)
    with pytest.raises(IndexError):
        t.sum(-3)
    with pytest.raises(RuntimeError):
        t.sum((0, 0))


def test_sum_mean_grad_fn_names():
    t = make_tensor(np.ones((2, 3)), tg.float32, requires_grad=True)
    assert t.sum().grad_fn.name() == "SumBackward0"
    assert t.sum(1).grad_fn.name() == "SumBackward1"
    assert t.sum((0, 1)).grad_fn.name() == "SumBackward1"
    assert t.sum(()).grad_fn.name() == "SumBackward1"
    assert tg.sum(t, 0, keepdim=True).grad_fn.name() == "SumBackward1"
    assert t.mean().grad_fn.name() == "MeanBackward0"
    assert t.mean(-1).grad_fn.name() == "MeanBackward1"


def test_mean_int_raises():
    with pytest.raises(RuntimeError):
        tg.tensor([1, 2, 3]).mean()


# ------------------------------------------------------------------ max / min
def distinct(shape, dtype, seed=0):
    """Values without ties (a shuffled, spaced grid) so argmax is unique."""
    n = int(np.prod(shape))
    v = (rng(seed).permutation(n) - n / 2) * 0.37
    return v.reshape(shape).astype(dtype.np)


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_max_min_all(op, dtype):
    a = distinct((3, 4, 2), dtype)
    ref = getattr(np, op)
    for t, arr in ((make_tensor(a, dtype), a),
                   (make_tensor(a, dtype).transpose(0, 2), a.transpose(2, 1, 0)),
                   (make_tensor(a, dtype).permute(2, 0, 1), a.transpose(2, 0, 1))):
        for out in (getattr(t, op)(), getattr(tg, op)(t)):
            check(out, ref(arr), dtype)
            assert out.shape == ()
    check(getattr(make_tensor(1.5, dtype), op)(), np.float64(1.5), dtype)


@pytest.mark.parametrize("keepdim", [False, True], ids=["nokeep", "keep"])
@pytest.mark.parametrize("dim", [0, 1, 2, -1, -2])
@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_max_min_dim(op, dtype, dim, keepdim):
    a = distinct((3, 4, 2), dtype)
    vref, iref = getattr(np, op), getattr(np, "arg" + op)
    for t, arr in ((make_tensor(a, dtype), a),
                   (make_tensor(a, dtype).transpose(0, 2), a.transpose(2, 1, 0))):
        for res in (getattr(t, op)(dim, keepdim), getattr(t, op)(dim=dim, keepdim=keepdim),
                    getattr(tg, op)(t, dim, keepdim=keepdim)):
            values, indices = res                    # a (values, indices) pair
            assert res.values is values and res.indices is indices
            ev = vref(arr, axis=dim, keepdims=keepdim)
            ei = iref(arr, axis=dim)
            if keepdim:
                ei = np.expand_dims(ei, dim)
            check(values, ev, dtype)
            assert indices.dtype is tg.int64
            assert tuple(indices.shape) == ei.shape
            np.testing.assert_array_equal(numpy_of(indices), ei)


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_dim_0d(op):
    t = make_tensor(-1.25, tg.float64)
    values, indices = getattr(t, op)(0)
    check(values, np.float64(-1.25), tg.float64)
    assert indices.dtype is tg.int64 and indices.shape == () and indices.item() == 0


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_grad_fn_names(op):
    t = make_tensor(distinct((2, 3), tg.float32), tg.float32, requires_grad=True)
    cap = op.capitalize()
    assert getattr(t, op)().grad_fn.name() == f"{cap}Backward1"
    res = getattr(t, op)(1)
    assert res.values.grad_fn.name() == f"{cap}Backward0"
    assert res.indices.grad_fn is None and not res.indices.requires_grad


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_dim_0d_grad_fn_name(op):
    t = make_tensor(2.0, tg.float32, requires_grad=True)
    assert getattr(t, op)(0).values.grad_fn.name() == f"{op.capitalize()}Backward0"


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_propagate_nan(op):
    for data, idx in (([1.0, math.nan, 2.0], 1), ([math.nan, 1.0, 2.0], 0)):
        t = make_tensor(data, tg.float64)
        assert np.isnan(getattr(t, op)().item())
        values, indices = getattr(t, op)(0)
        assert np.isnan(values.item()) and indices.item() == idx


def test_max_empty_raises():
    with pytest.raises(RuntimeError):
        make_tensor(np.zeros((0, 2)), tg.float32).max()


# ------------------------------------------------------------------ matmul
MATMUL_SHAPES = [
    ((4,), (4,)),               # dot
    ((3, 4), (4,)),             # mv
    ((4,), (4, 5)),             # vm
    ((3, 4), (4, 5)),           # mm
    ((2, 3, 4), (2, 4, 5)),     # bmm
    ((2, 3, 4), (4, 5)),        # batched @ matrix
    ((3, 4), (2, 4, 5)),        # matrix @ batched
    ((2, 1, 3, 4), (5, 4, 2)),  # broadcast batch dims
    ((1, 3, 4), (2, 4, 5)),
    ((4,), (2, 4, 5)),          # vector @ batched
    ((2, 3, 4), (4,)),          # batched @ vector
    ((1, 1), (1, 1)),
    ((3, 0), (0, 2)),           # empty inner dim: zeros
]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=lambda s: f"{s[0]}@{s[1]}")
@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul(dtype, shapes):
    sa, sb = shapes
    r = rng(1)
    a = r.standard_normal(sa).astype(dtype.np)
    b = r.standard_normal(sb).astype(dtype.np)
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
    ta, tb = make_tensor(a, dtype), make_tensor(b, dtype)
    for out in (ta @ tb, ta.matmul(tb), tg.matmul(ta, tb)):
        check(out, expected, dtype, tol_scale=5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mm_mv_dot_spellings(dtype):
    r = rng(2)
    m = r.standard_normal((3, 4)).astype(dtype.np)
    n = r.standard_normal((4, 2)).astype(dtype.np)
    v = r.standard_normal(4).astype(dtype.np)
    w = r.standard_normal(4).astype(dtype.np)
    tm, tn, tv, tw = (make_tensor(x, dtype) for x in (m, n, v, w))
    for out in (tm.mm(tn), tg.mm(tm, tn)):
        check(out, m.astype(np.float64) @ n, dtype, tol_scale=5)
    for out in (tm.mv(tv), tg.mv(tm, tv)):
        check(out, m.astype(np.float64) @ v, dtype, tol_scale=5)
    for out in (tv.dot(tw), tg.dot(tv, tw)):
        check(out, np.dot(v.astype(np.float64), w), dtype, tol_scale=5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_non_contiguous(dtype):
    r = rng(4)
    x = r.standard_normal((3, 4)).astype(dtype.np)
    w = r.standard_normal((5, 4)).astype(dtype.np)
    A = r.standard_normal((2, 4, 3)).astype(dtype.np)
    B = r.standard_normal((2, 4, 5)).astype(dtype.np)
    col = r.standard_normal((4, 1)).astype(dtype.np)
    v = r.standard_normal(5).astype(dtype.np)
    tx, tw, tA, tB, tcol, tv = (make_tensor(q, dtype) for q in (x, w, A, B, col, v))
    f64 = lambda q: q.astype(np.float64)  # noqa: E731
    cases = [
        (tx @ tw.T, f64(x) @ f64(w).T),                       # nn.Linear layout
        (tw.T.T @ tx.T, f64(w) @ f64(x).T),
        (tx.t().t().mm(tw.t()), f64(x) @ f64(w).T),
        (tA.mT @ tB, np.swapaxes(f64(A), 1, 2) @ f64(B)),
        (tA.transpose(1, 2) @ tB.transpose(0, 1).transpose(0, 1),
         np.swapaxes(f64(A), 1, 2) @ f64(B)),
        (tx @ tcol.expand(4, 6), f64(x) @ np.broadcast_to(f64(col), (4, 6))),
        (tB.permute(0, 2, 1) @ tA, np.transpose(f64(B), (0, 2, 1)) @ f64(A)),
        (tw.T.mv(tv), f64(w).T @ f64(v)),
        (tv.dot(tw.T.unbind(0)[1]), f64(v) @ f64(w).T[1]),
        (tx.T.expand(2, 4, 3) @ tx, np.broadcast_to(f64(x).T, (2, 4, 3)) @ f64(x)),
    ]
    for out, expected in cases:
        check(out, expected, dtype, tol_scale=5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_0d_product_and_errors(dtype):
    v = make_tensor([1.0, 2.0, 3.0], dtype)
    out = v @ v
    assert out.shape == () and out.item() == pytest.approx(14.0)
    with pytest.raises(RuntimeError):
        make_tensor(np.ones((2, 3)), dtype) @ make_tensor(np.ones((2, 3)), dtype)
    with pytest.raises(RuntimeError):
        make_tensor(np.ones((2, 3, 4)), dtype) @ make_tensor(np.ones((3, 4, 5)), dtype)
    with pytest.raises(RuntimeError):
        make_tensor(2.0, dtype) @ v
    with pytest.raises(RuntimeError):
        v.dot(make_tensor(np.ones((3, 1)), dtype))


def test_matmul_grad_fn_names():
    m = make_tensor(np.ones((2, 3)), tg.float32, requires_grad=True)
    n = make_tensor(np.ones((3, 2)), tg.float32, requires_grad=True)
    v = make_tensor(np.ones(3), tg.float32, requires_grad=True)
    assert (m @ n).grad_fn.name() == "MmBackward0"
    assert m.mm(n).grad_fn.name() == "MmBackward0"
    assert tg.matmul(m, n).grad_fn.name() == "MmBackward0"
    assert (m @ v).grad_fn.name() == "MvBackward0"
    assert tg.mv(m, v).grad_fn.name() == "MvBackward0"
    assert (v @ v).grad_fn.name() == "DotBackward0"
    assert tg.dot(v, v).grad_fn.name() == "DotBackward0"
    out = m @ n.T.T
    nxt = out.grad_fn.next_functions
    assert nxt[0][0].variable is m and nxt[1][0].name() == "PermuteBackward0"


# ------------------------------------------------------------------ shape ops
@pytest.mark.parametrize("dtype", DTYPES)
def test_reshape_view_flatten(dtype):
    a = rng(5).standard_normal((2, 3, 4)).astype(dtype.np)
    t = make_tensor(a, dtype)
    check(t.reshape(6, 4), a.reshape(6, 4), dtype)
    check(t.reshape((4, -1)), a.reshape(4, -1), dtype)
    check(tg.reshape(t, (24,)), a.reshape(24), dtype)
    check(t.reshape(-1), a.reshape(-1), dtype)
    check(t.view(4, 6), a.reshape(4, 6), dtype)
    check(t.view(-1, 2, 3), a.reshape(-1, 2, 3), dtype)
    check(t.view((2, 12)), a.reshape(2, 12), dtype)
    check(t.flatten(), a.reshape(-1), dtype)
    check(t.flatten(1), a.reshape(2, 12), dtype)
    check(t.flatten(0, 1), a.reshape(6, 4), dtype)
    check(t.flatten(-2, -1), a.reshape(2, 12), dtype)
    check(t.reshape(2, 1, 3, 4, 1), a.reshape(2, 1, 3, 4, 1), dtype)
    s = make_tensor(3.0, dtype)
    check(s.reshape(1, 1), np.full((1, 1), 3.0), dtype)
    check(s.flatten(), np.array([3.0]), dtype)
    check(make_tensor([3.0], dtype).reshape(()), np.float64(3.0), dtype)


def test_module_level_flatten():
    t = make_tensor(np.ones((2, 3)), tg.float32)
    assert tg.flatten(t).shape == (6,)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reshape_non_contiguous_copies(dtype):
    a = rng(6).standard_normal((4, 3, 2)).astype(dtype.np)
    t = make_tensor(a, dtype).transpose(0, 2)               # (2, 3, 4), non-contiguous
    assert not t.is_contiguous()
    check(t.reshape(6, 4), a.transpose(2, 1, 0).reshape(6, 4), dtype)
    check(t.flatten(), a.transpose(2, 1, 0).reshape(-1), dtype)
    e = make_tensor(a[:, :1, :1], dtype).expand(4, 3, 2)
    check(e.reshape(-1), np.broadcast_to(a[:, :1, :1], (4, 3, 2)).reshape(-1), dtype)
    with pytest.raises(RuntimeError):
        t.view(24)


def test_reshape_bad_sizes_raise():
    t = make_tensor(np.ones((2, 3)), tg.float32)
    with pytest.raises(RuntimeError):
        t.reshape(4, 2)
    with pytest.raises(RuntimeError):
        t.reshape(-1, -1)
    with pytest.raises(RuntimeError):
        t.view(5, -1)


def test_views_share_storage_and_version():
    base = make_tensor(np.arange(6.0).reshape(2, 3), tg.float64)
    v, tt, e = base.view(6), base.T, base.unbind(0)[1]
    base.mul_(2)
    check(v, np.arange(6.0) * 2, tg.float64)
    check(tt, (np.arange(6.0).reshape(2, 3) * 2).T, tg.float64)
    check(e, np.array([6.0, 8.0, 10.0]), tg.float64)
    assert v._version == tt._version == e._version == base._version == 1
    v.add_(1)                      # in-place through a view writes the base
    check(base, np.arange(6.0).reshape(2, 3) * 2 + 1, tg.float64)
    assert base._version == 2


@pytest.mark.parametrize("dtype", DTYPES)
def test_transpose_permute_t(dtype):
    a = rng(7).standard_normal((2, 3, 4)).astype(dtype.np)
    t = make_tensor(a, dtype)
    check(t.transpose(0, 2), np.swapaxes(a, 0, 2), dtype)
    check(t.transpose(-1, 0), np.swapaxes(a, 0, 2), dtype)
    check(tg.transpose(t, 1, 2), np.swapaxes(a, 1, 2), dtype)
    check(t.transpose(1, 1), a, dtype)
    check(t.permute(2, 0, 1), a.transpose(2, 0, 1), dtype)
    check(t.permute((1, 2, 0)), a.transpose(1, 2, 0), dtype)
    check(t.permute(-1, -3, -2), a.transpose(2, 0, 1), dtype)
    check(tg.permute(t, (0, 2, 1)), a.transpose(0, 2, 1), dtype)
    check(t.T, a.transpose(2, 1, 0), dtype)
    check(t.mT, np.swapaxes(a, -1, -2), dtype)
    check(t.permute(2, 0, 1).transpose(0, 1).permute(1, 0, 2),
          a.transpose(2, 0, 1).swapaxes(0, 1).transpose(1, 0, 2), dtype)
    m = a[0]
    tm = make_tensor(m, dtype)
    check(tm.t(), m.T, dtype)
    check(tg.t(tm), m.T, dtype)
    check(tm.T, m.T, dtype)
    check(tm.mT, m.T, dtype)
    v = make_tensor(a[0, 0], dtype)
    check(v.t(), a[0, 0], dtype)
    check(v.T, a[0, 0], dtype)
    s = make_tensor(1.5, dtype)
    check(s.t(), np.float64(1.5), dtype)
    check(s.T, np.float64(1.5), dtype)
    assert t.transpose(0, 2).stride() == (1, 4, 12)
    with pytest.raises(RuntimeError):
        t.t()
    with pytest.raises(RuntimeError):
        t.permute(0, 0, 1)
    with pytest.raises(IndexError):
        t.transpose(0, 3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_expand(dtype):
    a = rng(8).standard_normal((3, 1)).astype(dtype.np)
    t = make_tensor(a, dtype)
    check(t.expand(3, 4), np.broadcast_to(a, (3, 4)), dtype)
    check(t.expand((2, 3, 4)), np.broadcast_to(a, (2, 3, 4)), dtype)
    check(t.expand(-1, 5), np.broadcast_to(a, (3, 5)), dtype)
    check(t.expand(2, -1, 2), np.broadcast_to(a, (2, 3, 2)), dtype)
    check(t.expand(3, 1), a, dtype)
    check(t.expand(3, 0), np.zeros((3, 0)), dtype)
    other = make_tensor(np.zeros((2, 3, 6)), dtype)
    check(t.expand_as(other), np.broadcast_to(a, (2, 3, 6)), dtype)
    s = make_tensor(2.0, dtype)
    check(s.expand(2, 2), np.full((2, 2), 2.0), dtype)
    e = t.expand(2, 3, 4)
    assert e.stride()[0] == 0 and e.stride()[2] == 0
    check(e.T.expand(2, 4, 3, 2), np.broadcast_to(np.broadcast_to(a, (2, 3, 4)).T, (2, 4, 3, 2)),
          dtype)
    with pytest.raises(RuntimeError):
        t.expand(2, 4)
    with pytest.raises(RuntimeError):
        t.expand(4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_unbind(dtype):
    a = rng(9).standard_normal((2, 3, 4)).astype(dtype.np)
    t = make_tensor(a, dtype)
    for dim in (0, 1, 2, -1, -3):
        parts = t.unbind(dim)
        assert isinstance(parts, tuple) and len(parts) == a.shape[dim]
        for k, p in enumerate(parts):
            check(p, np.take(a, k, axis=dim), dtype)
    parts = tg.unbind(t.transpose(0, 2), 1)
    for k, p in enumerate(parts):
        check(p, np.take(a.transpose(2, 1, 0), k, axis=1), dtype)
    vs = make_tensor(a[0, 0], dtype).unbind()
    assert len(vs) == 4
    for k, p in enumerate(vs):
        assert p.shape == () and p.item() == pytest.approx(float(a[0, 0, k]))
    rows = list(make_tensor(a[0], dtype))                # iteration unbinds dim 0
    for k, r in enumerate(rows):
        check(r, a[0, k], dtype)
    with pytest.raises(IndexError):
        make_tensor(1.0, dtype).unbind()


SHAPE_OP_NAMES = [
    ("view", lambda t: t.view(6), "ViewBackward0"),
    ("reshape", lambda t: t.reshape(3, 2), "ViewBackward0"),
    ("flatten", lambda t: t.flatten(), "ViewBackward0"),
    ("reshape_noncontig", lambda t: t.T.reshape(6), "UnsafeViewBackward0"),
    ("T", lambda t: t.T, "PermuteBackward0"),
    ("t", lambda t: t.t(), "TBackward0"),
    ("transpose", lambda t: t.transpose(0, 1), "TransposeBackward0"),
    ("mT", lambda t: t.mT, "TransposeBackward0"),
    ("permute", lambda t: t.permute(1, 0), "PermuteBackward0"),
    ("expand", lambda t: t.expand(4, 2, 3), "ExpandBackward0"),
    ("unbind", lambda t: t.unbind(1)[2], "UnbindBackward0"),
]


@pytest.mark.parametrize("case", SHAPE_OP_NAMES, ids=[c[0] for c in SHAPE_OP_NAMES])
def test_shape_op_grad_fn_names(case):
    _, f, name = case
    t = make_tensor(np.ones((2, 3)), tg.float32, requires_grad=True)
    out = f(t)
    assert out.grad_fn.name() == name
    if case[0] != "reshape_noncontig":
        assert out.grad_fn.next_functions[0][0].variable is t


def test_unbind_outputs_share_one_node():
    t = make_tensor(np.ones((2, 3)), tg.float32, requires_grad=True)
    a, b = t.unbind(0)
    assert a.grad_fn is b.grad_fn
    assert a.grad_fn.name() == "UnbindBackward0"


# ------------------------------------------------------------------ in-place ops
INPLACE = [
    ("add_", lambda x, o: x.add_(o), np.add),
    ("sub_", lambda x, o: x.sub_(o), np.subtract),
    ("mul_", lambda x, o: x.mul_(o), np.multiply),
    ("div_", lambda x, o: x.div_(o), np.divide),
]


def _iadd(x, o):
    x += o
    return x


def _isub(x, o):
    x -= o
    return x


def _imul(x, o):
    x *= o
    return x


def _idiv(x, o):
    x /= o
    return x


AUGMENTED = [("+=", _iadd, np.add), ("-=", _isub, np.subtract), ("*=", _imul, np.multiply),
             ("/=", _idiv, np.divide)]


@pytest.mark.parametrize("case", INPLACE + AUGMENTED, ids=[c[0] for c in INPLACE + AUGMENTED])
@pytest.mark.parametrize("dtype", DTYPES)
def test_inplace_values_identity_version(case, dtype):
    _, f, ref = case
    r = rng(10)
    base = r.uniform(0.5, 2, size=(2, 3)).astype(dtype.np)
    others = [(2.5, 2.5), (3, 3),
              (make_tensor(r.uniform(0.5, 2, size=(2, 3)), dtype), None),
              (make_tensor(r.uniform(0.5, 2, size=(3,)), dtype), None),      # broadcast row
              (make_tensor(r.uniform(0.5, 2, size=(2, 1)), dtype), None),    # broadcast column
              (make_tensor(1.75, dtype), None),                              # 0-d tensor
              (make_tensor(r.uniform(0.5, 2, size=(3, 2)), dtype).T, None)]  # non-contiguous
    x = make_tensor(base, dtype)
    expected = base.astype(np.float64)
    assert x._version == 0
    for k, (o, s) in enumerate(others):
        before = x
        out = f(x, o)
        assert out is before
        expected = ref(expected, s if s is not None else numpy_of(o).astype(np.float64))
        check(x, expected, dtype, tol_scale=10)
        assert x._version == k + 1
        if isinstance(o, tg.Tensor):
            assert o._version == 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_fill(dtype):
    x = make_tensor(np.arange(6.0).reshape(2, 3), dtype)
    assert x.zero_() is x
    check(x, np.zeros((2, 3)), dtype)
    assert x._version == 1
    assert x.fill_(2.5) is x
    check(x, np.full((2, 3), 2.5), dtype)
    assert x._version == 2
    x.fill_(make_tensor(-1.0, dtype))
    check(x, np.full((2, 3), -1.0), dtype)
    assert x._version == 3
    x.fill_(7)
    check(x, np.full((2, 3), 7.0), dtype)
    assert x._version == 4


@pytest.mark.parametrize("dtype", DTYPES)
def test_inplace_on_non_contiguous_views(dtype):
    a = np.arange(12.0).reshape(3, 4)
    base = make_tensor(a, dtype)
    tv = base.T
    tv.mul_(make_tensor(np.array([1.0, 2.0, 3.0]), dtype))    # scales base's rows
    check(base, a * np.array([[1.0], [2.0], [3.0]]), dtype)
    col = base.unbind(1)[2]
    col.fill_(0.0)
    expect = a * np.array([[1.0], [2.0], [3.0]])
    expect[:, 2] = 0
    check(base, expect, dtype)
    base.transpose(0, 1).zero_()
    check(base, np.zeros((3, 4)), dtype)
    assert base._version == 3


def test_out_of_place_ops_do_not_bump_version():
    x = make_tensor(np.ones((2, 3)), tg.float32)
    _ = x + 1, x.exp(), x.sum(), x.T, x.view(6), x @ x.T, x.max(1), x.clone()
    assert x._version == 0


def test_inplace_broadcast_to_bigger_shape_raises():
    x = make_tensor(np.ones(3), tg.float32)
    with pytest.raises(RuntimeError):
        x.add_(make_tensor(np.ones((2, 3)), tg.float32))
    check(x, np.ones(3), tg.float32)


def test_inplace_partial_overlap():
    m = make_tensor(np.arange(4.0).reshape(2, 2), tg.float64)
    try:
        m.add_(m.T)
    except RuntimeError:
        return                      # PyTorch's behaviour: refuse
    check(m, np.array([[0.0, 3.0], [3.0, 6.0]]), tg.float64)   # or compute it correctly


def test_inplace_on_expanded_tensor():
    z = make_tensor(np.zeros((3, 1)), tg.float32).expand(3, 4)
    try:
        z.add_(1.0)
    except RuntimeError:
        return                      # PyTorch's behaviour: refuse
    check(z, np.ones((3, 4)), tg.float32)


def test_inplace_full_overlap_is_fine():
    m = make_tensor(np.arange(4.0).reshape(2, 2), tg.float64)
    m.mul_(m)
    check(m, np.arange(4.0).reshape(2, 2) ** 2, tg.float64)
    m.T.add_(m.T)
    check(m, 2 * np.arange(4.0).reshape(2, 2) ** 2, tg.float64)


def test_inplace_on_leaf_requiring_grad_raises():
    x = make_tensor(np.ones(3), tg.float32, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        x.add_(1)
    with pytest.raises(RuntimeError, match="leaf"):
        x *= 2
    check(x, np.ones(3), tg.float32)


def test_inplace_on_leaf_under_no_grad():
    w = make_tensor(np.ones(3), tg.float32, requires_grad=True)
    with tg.no_grad():
        w.sub_(make_tensor([0.5, 1.0, 1.5], tg.float32))
        w *= 2
    check(w, [1.0, 0.0, -1.0], tg.float32)
    assert w.requires_grad and w.is_leaf and w.grad_fn is None
    assert w._version == 2


def test_inplace_mixed_dtype_keeps_the_target_dtype():
    x = make_tensor(np.ones(3), tg.float32)
    x.add_(make_tensor(np.full(3, 0.5), tg.float64))
    check(x, [1.5, 1.5, 1.5], tg.float32)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired "
                                           "output type Long"):
        tg.tensor([1, 2]).add_(0.5)


@pytest.mark.parametrize("case", INPLACE, ids=[c[0] for c in INPLACE])
def test_inplace_grad_fn_names(case):
    name, f, _ = case
    a = make_tensor([1.0, 2.0], tg.float32, requires_grad=True)
    y = a * 1.5
    f(y, 2.0)
    assert y.grad_fn.name() == {"add_": "AddBackward0", "sub_": "SubBackward0",
                                "mul_": "MulBackward0", "div_": "DivBackward0"}[name]
    assert y.grad_fn.next_functions[0][0].name() == "MulBackward0"
    z = a * 1.5
    z.zero_()
    assert z.grad_fn.name() == "ZeroBackward0"
    check(z, [0.0, 0.0], tg.float32)
    z.fill_(3.0)
    assert z.grad_fn.name() == "FillBackward2"
    check(z, [3.0, 3.0], tg.float32)


# ------------------------------------------------------------------ against PyTorch
# Expressions written once, run by both libraries on the same data: the grad_fn name of
# the result, the names of its next_functions, and the values must agree.
TORCH_CASES = [
    ("add", lambda a, b: a + b), ("add_scalar", lambda a, b: a + 2.0),
    ("radd_scalar", lambda a, b: 2.0 + a), ("sub", lambda a, b: a - b),
    ("rsub_scalar", lambda a, b: 2.0 - a), ("sub_scalar", lambda a, b: a - 2),
    ("mul", lambda a, b: a * b), ("rmul_scalar", lambda a, b: 3 * a),
    ("div", lambda a, b: a / b), ("rdiv_scalar", lambda a, b: 2.0 / a),
    ("div_scalar", lambda a, b: a / 4.0), ("pow_scalar", lambda a, b: a ** 2),
    ("pow_tensor", lambda a, b: a ** b), ("rpow", lambda a, b: 2.0 ** a),
    ("neg", lambda a, b: -a), ("exp", lambda a, b: a.exp()), ("log", lambda a, b: a.log()),
    ("sin", lambda a, b: a.sin()), ("cos", lambda a, b: a.cos()),
    ("tanh", lambda a, b: a.tanh()), ("sigmoid", lambda a, b: a.sigmoid()),
    ("relu", lambda a, b: (a - 1).relu()), ("sqrt", lambda a, b: a.sqrt()),
    ("abs", lambda a, b: (a - 1).abs()), ("reciprocal", lambda a, b: a.reciprocal()),
    ("clone", lambda a, b: a.clone()),
    ("sum", lambda a, b: a.sum()), ("sum_dim", lambda a, b: a.sum(1)),
    ("sum_tuple_keep", lambda a, b: a.sum((0, 2), keepdim=True)),
    ("sum_empty_tuple", lambda a, b: a.sum(())),
    ("mean", lambda a, b: a.mean()), ("mean_dim", lambda a, b: a.mean(-1)),
    ("max", lambda a, b: a.max()), ("min", lambda a, b: a.min()),
    ("max_dim", lambda a, b: a.max(2).values), ("min_dim_keep", lambda a, b: a.min(0, True)[0]),
    ("mm", lambda a, b: a.sum(1) @ b.T), ("mv", lambda a, b: b.mv(a.sum(1).unbind(0)[0])),
    ("dot", lambda a, b: b.unbind(0)[0].dot(b.unbind(0)[1])),
    ("view", lambda a, b: a.view(12)), ("reshape", lambda a, b: a.reshape(4, 3)),
    ("reshape_nc", lambda a, b: a.transpose(0, 2).reshape(12)),
    ("flatten", lambda a, b: a.flatten()), ("T2", lambda a, b: b.T),
    ("t", lambda a, b: b.t()), ("transpose", lambda a, b: a.transpose(0, 2)),
    ("mT", lambda a, b: a.mT), ("permute", lambda a, b: a.permute(2, 0, 1)),
    ("expand", lambda a, b: a.expand(3, 5, 4)), ("unbind", lambda a, b: a.unbind(2)[1]),
    ("composite", lambda a, b: ((a * b).exp() - b.sum(0)).tanh().mean(1)),
]


def _names(fn):
    return [(None if f is None else f.name(), k) for f, k in fn.next_functions]


@pytest.mark.parametrize("case", TORCH_CASES, ids=[c[0] for c in TORCH_CASES])
@pytest.mark.parametrize("dtype", DTYPES)
def test_against_torch(case, dtype):
    torch = pytest.importorskip("torch")
    _, f = case
    r = rng(11)
    a = distinct((3, 1, 4), dtype, seed=3) * 0.1 + 1.6           # positive, no ties
    b = r.uniform(0.5, 1.5, size=(2, 4)).astype(dtype.np)
    tdt = {"float32": torch.float32, "float64": torch.float64}[dtype.name]
    ours = f(make_tensor(a, dtype, True), make_tensor(b, dtype, True))
    theirs = f(torch.tensor(a, dtype=tdt, requires_grad=True),
               torch.tensor(b, dtype=tdt, requires_grad=True))
    assert ours.grad_fn.name() == theirs.grad_fn.name()
    if case[0] == "reshape_nc":
        # PyTorch copies with a separate CloneBackward0 node; tapegrad's copying reshape is
        # one node, so only the outer name is comparable.
        assert _names(ours.grad_fn) == [("TransposeBackward0", 0)]
    else:
        assert _names(ours.grad_fn) == _names(theirs.grad_fn)
    check(ours, theirs.detach().numpy().astype(np.float64), dtype, tol_scale=5)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [1, 7, 8195])
def test_in_place_flat_loops_write_the_operand_itself(dtype, n):
    """In-place ops on contiguous tensors take a loop that writes operand A itself (two
    arrays over one memory kept LLVM's loop scalar): values bitwise equal to NumPy's, for
    a tensor, a one-element tensor and a Python scalar operand, and for a.op_(a)."""
    rng = np.random.default_rng(n)
    an = rng.standard_normal(n).astype(dtype)
    bn = (rng.standard_normal(n) + 3).astype(dtype)
    s0 = np.asarray(rng.standard_normal() + 2, dtype)
    cases = [("sub_", lambda a: a.sub_(tg.tensor(bn)), lambda a: a - bn),
             ("mul_", lambda a: a.mul_(tg.tensor(s0)), lambda a: a * s0),
             ("div_", lambda a: a.div_(tg.tensor(bn)), lambda a: a / bn),
             ("add_ scalar", lambda a: a.add_(0.25), lambda a: a + np.asarray(0.25, dtype)),
             ("mul_ self", lambda a: a.mul_(a), lambda a: a * a),
             ("sub_ self", lambda a: a.sub_(a), lambda a: a - a)]
    for name, ours, ref in cases:
        a = tg.tensor(an.copy())
        before = a.numpy()              # shares the memory: the op writes where it was
        ours(a)
        assert a.numpy().dtype == np.dtype(dtype)
        np.testing.assert_array_equal(before, ref(an.copy()), err_msg=name)
        np.testing.assert_array_equal(a.numpy(), before, err_msg=name)
