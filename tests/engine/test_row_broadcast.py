"""Binary elementwise ops with an operand broadcast along the inner dim (a per-row value:
x - x.mean(-1, keepdim=True)) run their row-broadcast loops (KSLOT_ROWS, engine
call_ew) once Python has loaded them, which the op after the first one that wanted them
asks for. Every binary op's forward and gradients there are checked against the same
computation on the odometer's strided loop (the path before loading), and against
NumPy."""
import math

import numpy as np
import pytest

import tapegrad as tg
from tapegrad._engine import layout as L
from tapegrad._engine.state import engine
from tapegrad.ops.registry import BY_NAME

RNG = np.random.default_rng(5)

TENSOR_OPS = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "pow_tensor": lambda a, b: a ** b,
    "maximum": tg.maximum, "minimum": tg.minimum, "atan2": tg.atan2, "hypot": tg.hypot,
    "fmod_tensor": tg.fmod, "remainder_tensor": tg.remainder, "logaddexp": tg.logaddexp,
}
SCALAR_OPS = {
    "add": lambda a: a + 0.75, "sub": lambda a: a - 0.75, "rsub": lambda a: 0.75 - a,
    "mul": lambda a: a * 0.75, "div": lambda a: a / 0.75, "pow": lambda a: a ** 1.5,
    "rpow": lambda a: 1.5 ** a, "fmod": lambda a: tg.fmod(a, 0.75),
    "remainder": lambda a: tg.remainder(a, 0.75),
}
# (shape of a, shape of b): b (or a) broadcast along the inner dim, rows of 16 and more
LAYOUTS = [((6, 40), (6, 1)), ((6, 1), (6, 40)), ((3, 4, 20), (3, 4, 1)),
           ((3, 4, 20), (3, 1, 1)), ((2, 1, 33), (2, 5, 1))]


def _rows_index(name, dtype):
    """The kernel tables' entry of an op's row-broadcast loops for a dtype."""
    return BY_NAME[name].opcode * L.NKSLOT + (1 if dtype == np.float64 else 0) + L.KSLOT_ROWS


class _StridedPath:
    """Within the block, the op runs the odometer's strided loop (its row-broadcast
    kernels unloaded); afterwards they are back."""

    def __init__(self, name, dtype):
        self.i = _rows_index(name, dtype)

    def __enter__(self):
        E = engine()
        self.saved = (int(E.fwd[self.i]), int(E.bwd[self.i]))
        E.fwd[self.i] = E.bwd[self.i] = 0

    def __exit__(self, *exc):
        E = engine()
        E.fwd[self.i], E.bwd[self.i] = self.saved
        E.ctx[L.C_WANT_ROWS] = 0


def _run(f, an, bn, grads=(True, True)):
    a = tg.tensor(an, requires_grad=grads[0])
    b = tg.tensor(bn, requires_grad=grads[1]) if bn is not None else None
    y = f(a, b) if b is not None else f(a)
    g = RNG.standard_normal(tuple(y.shape)).astype(an.dtype)
    y.backward(tg.tensor(g))
    return (y.detach().numpy(), a.grad.numpy() if grads[0] else None,
            b.grad.numpy() if b is not None and grads[1] else None)


def _load_rows(name, dtype):
    i = _rows_index(name, dtype)
    engine().load_kernels(i // L.NKSLOT, i % L.NKSLOT)


def _same(x, y, dtype, exact=False):
    if x is None or y is None:
        assert x is None and y is None
        return
    if exact:
        np.testing.assert_array_equal(x, y)
    else:
        tol = 1e-12 if dtype == np.float64 else 2e-5
        np.testing.assert_allclose(x, y, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", sorted(TENSOR_OPS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tensor_ops_on_the_row_loops_match_the_strided_loop(name, dtype):
    f = TENSOR_OPS[name]
    _load_rows(name, dtype)
    for sa, sb in LAYOUTS:
        an = RNG.uniform(0.5, 2.0, sa).astype(dtype)
        bn = RNG.uniform(0.5, 2.0, sb).astype(dtype)
        for grads in ((True, True), (True, False), (False, True)):
            state = RNG.bit_generator.state
            rows = _run(f, an, bn, grads)
            RNG.bit_generator.state = state            # the same incoming gradient
            with _StridedPath(name, dtype):
                strided = _run(f, an, bn, grads)
            _same(rows[0], strided[0], dtype, exact=True)   # the same arithmetic
            _same(rows[1], strided[1], dtype)               # sums may be reordered
            _same(rows[2], strided[2], dtype)


@pytest.mark.parametrize("name", sorted(SCALAR_OPS))
def test_a_python_scalar_on_a_non_contiguous_tensor_takes_the_row_loops(name):
    # a[:, :24]: unit inner stride but not flat; the scalar is the stride-0 operand
    f = SCALAR_OPS[name]
    dtype = np.float64
    _load_rows(name, dtype)
    base = RNG.uniform(0.5, 2.0, (5, 40))
    x = tg.tensor(base, requires_grad=True)
    state = RNG.bit_generator.state

    def go():
        x.grad = None
        y = f(x[:, :24])
        g = RNG.standard_normal(tuple(y.shape))
        y.backward(tg.tensor(g))
        return y.detach().numpy(), x.grad.numpy()
    rows = go()
    RNG.bit_generator.state = state
    with _StridedPath(name, dtype):
        strided = go()
    _same(rows[0], strided[0], dtype, exact=True)
    _same(rows[1], strided[1], dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_centering_rows_matches_numpy(dtype):
    _load_rows("sub", dtype)
    _load_rows("div", dtype)
    xn = RNG.standard_normal((8, 64)).astype(dtype)
    x = tg.tensor(xn, requires_grad=True)
    m = x.mean(-1, keepdim=True)
    s = x.abs().sum(-1, keepdim=True)
    y = (x - m) / s
    g = RNG.standard_normal((8, 64)).astype(dtype)
    y.backward(tg.tensor(g))
    mn = xn.mean(-1, keepdims=True)
    sn = np.abs(xn).sum(-1, keepdims=True)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(y.detach().numpy(), (xn - mn) / sn, rtol=tol, atol=tol)
    # d/dx of sum(g * (x - mean) / s), s = sum|x|
    c = xn - mn
    gs = g / sn
    want = gs - gs.mean(-1, keepdims=True) - np.sign(xn) * (g * c / sn ** 2).sum(
        -1, keepdims=True)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=10 * tol, atol=10 * tol)


def test_in_place_with_a_row_value_on_the_row_loops():
    _load_rows("sub", np.float64)
    xn = RNG.standard_normal((4, 32))
    mn = RNG.standard_normal((4, 1))
    w = tg.tensor(xn, requires_grad=True)
    m = tg.tensor(mn, requires_grad=True)
    y = w * 1.0
    y.sub_(m)
    np.testing.assert_array_equal(y.detach().numpy(), xn - mn)
    y.backward(tg.tensor(np.ones((4, 32))))
    np.testing.assert_array_equal(w.grad.numpy(), np.ones((4, 32)))
    np.testing.assert_allclose(m.grad.numpy(), np.full((4, 1), -32.0))


@pytest.mark.parametrize("grad", [True, False])
def test_the_next_op_loads_the_row_loops_an_op_wanted(grad):
    E = engine()
    i = _rows_index("hypot", np.float32)
    saved = (int(E.fwd[i]), int(E.bwd[i]))
    E.fwd[i] = E.bwd[i] = 0          # as in a fresh process
    try:
        an = RNG.uniform(1, 2, (4, 50)).astype(np.float32)
        bn = RNG.uniform(1, 2, (4, 1)).astype(np.float32)
        a = tg.tensor(an, requires_grad=grad)
        b = tg.tensor(bn, requires_grad=grad)
        with tg.set_grad_enabled(grad):         # (inference too: no backward needed)
            y = tg.hypot(a, b)
            assert E.ctx[L.C_WANT_ROWS] == i + 1    # it asked (and ran the strided loop)
            assert E.fwd[i] == 0
            z = y * 2.0                             # the next op loads them first
            assert E.ctx[L.C_WANT_ROWS] == 0
            assert E.fwd[i] > 0 and E.bwd[i] > 0
            y2 = tg.hypot(a, b)                     # and they run from now on
        np.testing.assert_array_equal(y2.detach().numpy(), y.detach().numpy())
        np.testing.assert_array_equal(z.detach().numpy(), 2 * y.detach().numpy())
        np.testing.assert_allclose(y.detach().numpy(), np.hypot(an, bn), rtol=1e-6)
        # a unary op never has them: its table entry says so once its kernels load
        j = BY_NAME["exp"].opcode * L.NKSLOT + L.KSLOT_ROWS
        tg.tensor(np.ones(3, np.float32)).exp()
        assert E.fwd[j] == -1 and E.bwd[j] == -1
    finally:
        if saved[0]:
            E.fwd[i], E.bwd[i] = saved


def test_masked_fill_with_a_row_mask_on_the_row_loops():
    _load_rows("masked_fill", np.float64)
    xn = RNG.standard_normal((6, 40))
    mn = RNG.uniform(size=(6, 1)) > 0.5
    state = RNG.bit_generator.state

    def go():
        x = tg.tensor(xn, requires_grad=True)
        y = x.masked_fill(tg.tensor(mn), 0.5)
        g = RNG.standard_normal((6, 40))
        y.backward(tg.tensor(g))
        return y.detach().numpy(), x.grad.numpy(), g
    y, gx, g = go()
    np.testing.assert_array_equal(y, np.where(mn, 0.5, xn))
    np.testing.assert_array_equal(gx, np.where(mn, 0.0, g))
    RNG.bit_generator.state = state
    with _StridedPath("masked_fill", np.float64):
        y2, gx2, _ = go()
    np.testing.assert_array_equal(y, y2)
    np.testing.assert_array_equal(gx, gx2)


def test_row_loops_that_fail_to_compile_leave_the_strided_loop_and_warn(monkeypatch):
    E = engine()
    i = _rows_index("atan2", np.float64)
    saved = (int(E.fwd[i]), int(E.bwd[i]))
    E.fwd[i] = E.bwd[i] = 0
    real = E.kernel_loader

    def failing(opcode, slot):
        if slot >= L.KSLOT_ROWS:
            raise RuntimeError("no compiler today")
        return real(opcode, slot)
    monkeypatch.setattr(E, "kernel_loader", failing)
    try:
        an, bn = RNG.uniform(1, 2, (3, 20)), RNG.uniform(1, 2, (3, 1))
        a = tg.tensor(an, requires_grad=True)
        b = tg.tensor(bn, requires_grad=True)
        y = tg.atan2(a, b)
        with pytest.warns(RuntimeWarning, match="row-broadcast loops failed to compile"):
            loss = y.sum()                  # the op that tried to load them goes on
        assert E.fwd[i] == -1 and E.bwd[i] == -1
        np.testing.assert_allclose(loss.item(), np.arctan2(an, bn).sum(), rtol=1e-13)
        loss.backward()
        d = an ** 2 + bn ** 2
        np.testing.assert_allclose(a.grad.numpy(), bn / d, rtol=1e-13)
        np.testing.assert_allclose(b.grad.numpy(), (-an / d).sum(1, keepdims=True),
                                   rtol=1e-13)
        y = tg.atan2(a, b)                 # the strided loop, no further request
        assert E.ctx[L.C_WANT_ROWS] == 0
        # libm's atan2 (Python's math; NumPy's own is SIMD code on AVX-512 machines)
        want = [[math.atan2(u, v[0]) for u in ur] for ur, v in zip(an.tolist(), bn.tolist())]
        np.testing.assert_array_equal(y.detach().numpy(), np.array(want))
    finally:
        E.fwd[i], E.bwd[i] = saved
