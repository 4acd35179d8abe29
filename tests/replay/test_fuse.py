"""Fusion of elementwise rows in compiled replays (tapegrad/replay/fuse.py).

A fused op evaluates its members' own formulas per element, each result rounded to the
dtype, so replayed forward values are BITWISE the eager ones; its gradient multiplies
the incoming gradient by a tangent built from the members' gradient formulas, so
gradients agree with eager (and with the closed form) to round-off. What the eager rows
would have saved is what the fused row saves, so the same errors come at the same
moments. Each test reads which ops were fused from the program (`Program.fused`).
"""
import gc
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn, optim
from tapegrad._engine import layout as L
from tests.helpers import E

RNG = np.random.default_rng(3)


def fused(cf):
    """The member op names of every fused op in cf's plans."""
    return [g for runner, _, _ in cf.plans.values() for g in runner.pg.fused]


def values(t):
    return np.array(t.detach().numpy())


class strict(warnings.catch_warnings):
    """A fallback to eager is an error (a silent fallback cannot pass for a replay)."""

    def __enter__(self):
        super().__enter__()
        warnings.simplefilter("error", tg.CompileWarning)


def replayed_like_eager(f, x):
    """Replays f(x) (which calls backward and returns tensors): its results bitwise and
    x's gradient to round-off the eager ones. Returns the compiled f and its results."""
    cf = tg.compile(f)
    with strict():
        for _ in range(2):
            x.grad = None
            rc = [values(v) for v in cf(x)]
    gc_ = values(x.grad)
    x.grad = None
    re_ = [values(v) for v in f(x)]
    for a, b in zip(rc, re_):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(gc_, values(x.grad), rtol=1e-14)
    return cf, rc


def chain(x):
    return (tg.sin(x) * tg.exp(x) + x ** 2).sum()


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-14), (np.float32, 1e-6)])
def test_the_issue_chain_is_one_loop_with_eager_values(dtype, rtol):
    x0 = RNG.standard_normal(2000).astype(dtype)
    x = tg.tensor(x0, requires_grad=True)

    def step(x):
        y = chain(x)
        y.backward()
        return y

    cf = tg.compile(step)
    with strict():
        for k in range(3):
            x.grad = None
            yc = cf(x)
    assert fused(cf) == [("sin", "exp", "mul", "pow", "add")]
    assert cf.stats == {"recordings": 1, "replays": 2}
    gc_ = values(x.grad)
    x.grad = None
    ye = step(x)
    ge = values(x.grad)
    assert values(yc).dtype == dtype and values(yc) == values(ye)     # the sum of equal values
    exact = np.cos(x0) * np.exp(x0) + np.sin(x0) * np.exp(x0) + 2 * x0
    np.testing.assert_allclose(gc_, ge, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(gc_, exact, rtol=10 * rtol, atol=10 * rtol)
    assert yc.grad_fn.name() == "SumBackward0"
    assert yc.grad_fn.next_functions[0][0].name() == "AddBackward0"     # the last member's


def test_two_inputs_broadcast_and_constants_bitwise_forward():
    """tanh, sigmoid, relu, pow 3, a scalar multiply, sub and clamp(lo, hi) over x (4, 5)
    and a broadcast w (5,): one fused op with two inputs; new x every call."""
    w = tg.tensor(RNG.standard_normal(5), requires_grad=True)

    def f(x):
        y = ((x * w).tanh() + tg.sigmoid(x) * 3.0 - (x - w).relu() ** 3).clamp(-1.5, 2.0)
        y.sum().backward()
        return y

    cf = tg.compile(f)
    with strict():
        for k in range(4):
            x0 = RNG.standard_normal((4, 5)) * 2
            xc = tg.tensor(x0, requires_grad=True)
            w.grad = None
            yc = cf(xc)
            gwc = values(w.grad)
            xe = tg.tensor(x0, requires_grad=True)
            w.grad = None
            ye = f(xe)
            np.testing.assert_array_equal(values(yc), values(ye))
            np.testing.assert_allclose(values(xc.grad), values(xe.grad), rtol=1e-13, atol=1e-15)
            np.testing.assert_allclose(gwc, values(w.grad), rtol=1e-13, atol=1e-15)
    assert fused(cf) == [("mul", "tanh", "sigmoid", "mul", "add", "sub", "relu", "pow",
                          "sub", "clamp")]
    assert cf.stats["replays"] == 3


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_selects_ties_and_nan_in_a_broadcast_loop_match_eager(dtype):
    """maximum/minimum (a tie splits the gradient), leaky_relu, abs and masked-off NaN:
    the formulas' conditional expressions (and `and`/`or`) become selects in the fused
    loop, both sides evaluated; x (3, 5) with a broadcast w (5,) runs the unit-stride
    path of the strided loop."""
    w = tg.tensor(np.array([0.5, -1.0, 2.0, 0.0, np.nan], dtype), requires_grad=True)

    def f(x):
        y = (tg.maximum(x, w) - tg.minimum(x, w) * 0.5
             + tg.nn.functional.leaky_relu(x * w, 0.1)).abs()
        y.sum().backward()
        return y

    cf = tg.compile(f)
    x0 = np.array([[0.5, -1.0, 1.0, 0.0, 3.0], [1.0, -2.0, 2.0, -0.5, 0.0],
                   [-3.0, 4.0, 2.5, 0.0, 1.0]], dtype)
    with strict():
        for k in range(3):
            xc = tg.tensor(x0 * (k + 1), requires_grad=True)
            w.grad = None
            yc = cf(xc)
            gwc = values(w.grad)
            xe = tg.tensor(x0 * (k + 1), requires_grad=True)
            w.grad = None
            ye = f(xe)
            np.testing.assert_array_equal(values(yc), values(ye))
            np.testing.assert_allclose(values(xc.grad), values(xe.grad), rtol=1e-6)
            np.testing.assert_allclose(gwc, values(w.grad), rtol=1e-6)
    assert fused(cf) == [("maximum", "minimum", "mul", "sub", "mul", "leaky_relu", "add",
                          "abs")]


def test_gradients_match_finite_differences():
    """A fused op's gradient against central differences of the eager function."""
    x0 = RNG.standard_normal(7)
    w0 = RNG.standard_normal(7)

    def g(x, w):
        return ((x * w).tanh() * tg.exp(-x) + (w - x) / (w * w + 1.0)).sum()

    def f(x, w):
        y = g(x, w)
        y.backward()
        return y

    cf = tg.compile(f)
    x = tg.tensor(x0, requires_grad=True)
    w = tg.tensor(w0, requires_grad=True)
    with strict():
        for _ in range(2):
            x.grad = w.grad = None
            cf(x, w)
    assert len(fused(cf)) == 1 and len(fused(cf)[0]) >= 8
    h = 1e-6
    for t, base in ((x, x0), (w, w0)):
        fd = np.empty(7)
        for i in range(7):
            e = np.zeros(7)
            e[i] = h
            args = {"x": x0, "w": w0}
            name = "x" if t is x else "w"
            up = dict(args, **{name: base + e})
            dn = dict(args, **{name: base - e})
            fd[i] = (g(tg.tensor(up["x"]), tg.tensor(up["w"])).item()
                     - g(tg.tensor(dn["x"]), tg.tensor(dn["w"])).item()) / (2 * h)
        np.testing.assert_allclose(values(t.grad), fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sin_of_the_second_input_and_huge_arguments_take_libm(dtype):
    """sin/cos read fused inputs only; one huge element sends the whole loop through
    libm (as the eager kernels do), and values stay the eager ones."""
    def f(x, w):
        y = tg.cos(w) * x + tg.sin(w)
        y.sum().backward()
        return y

    cf = tg.compile(f)
    for scale in (1.0, 1e10, 1.0):
        x0 = RNG.standard_normal(64).astype(dtype)
        w0 = (RNG.standard_normal(64) * scale).astype(dtype)
        res = []
        for fn in (cf, f):
            x = tg.tensor(x0, requires_grad=True)
            w = tg.tensor(w0, requires_grad=True)
            with strict():
                y = fn(x, w)
            res.append((values(y), values(x.grad), values(w.grad)))
        np.testing.assert_array_equal(res[0][0], res[1][0])
        tol = 1e-6 if dtype == np.float32 else 1e-14
        np.testing.assert_allclose(res[0][1], res[1][1], rtol=tol, atol=tol)
        np.testing.assert_allclose(res[0][2], res[1][2], rtol=tol, atol=tol * abs(x0).max())
        assert np.isfinite(res[0][0]).all()
        np.testing.assert_allclose(res[0][1], np.cos(w0.astype(np.float64)), rtol=1e-5, atol=1e-6)
    assert fused(cf) == [("cos", "mul", "sin", "add")]


def test_no_fusion_across_an_in_place_write():
    """sin(z) moved past z.add_(1) would read the new z: the write is a barrier."""
    z0 = RNG.standard_normal(6)
    w = tg.tensor(RNG.standard_normal(6), requires_grad=True)

    def f(z):
        t = tg.sin(z)
        z.add_(1.0)
        y = (t * w).exp()
        y.sum().backward()
        return y

    cf = tg.compile(f)
    with strict():
        for _ in range(3):
            w.grad = None
            yc = values(cf(tg.tensor(z0)))
    gc_ = values(w.grad)
    w.grad = None
    ye = values(f(tg.tensor(z0)))
    np.testing.assert_array_equal(yc, ye)
    np.testing.assert_allclose(gc_, values(w.grad), rtol=1e-14)
    assert fused(cf) == [("mul", "exp")]          # sin stays before the write


def test_intermediates_seen_elsewhere_are_not_fused_away():
    """An intermediate that is returned, or read by two ops, stays a tensor of its own
    with its eager value."""
    x = tg.tensor(RNG.standard_normal(5), requires_grad=True)

    def f(x):
        t = tg.exp(x)                   # returned
        u = tg.sin(x) * 2.0             # read twice
        y = (t * 3.0 + u * u + u).sum()
        y.backward()
        return t, u, y

    cf, rc = replayed_like_eager(f, x)
    groups = fused(cf)
    assert ("sin", "mul") in groups
    assert all("exp" not in g for g in groups)


def _inplace_error(fn):
    with pytest.raises(RuntimeError) as e:
        fn()
    return str(e.value)


def test_saved_input_modified_in_place_raises_like_eager():
    """mul saves w for x's gradient: w changed in place before backward raises, with the
    fused row as with the eager rows, naming the same versions."""
    x = tg.tensor(RNG.standard_normal(4), requires_grad=True)

    def f(x, w):
        return (x * w).exp()

    cf = tg.compile(f)
    msgs = []
    for fn in (cf, cf, f):
        w = tg.tensor(RNG.standard_normal(4))
        with strict():
            y = fn(x, w)
        w.mul_(2.0)
        msgs.append(_inplace_error(lambda: y.sum().backward()))
    assert fused(cf) == [("mul", "exp")]
    assert "modified by an inplace operation" in msgs[2]
    assert msgs[1] == msgs[2]


def test_backward_twice_raises_when_eager_would_and_not_otherwise():
    x = tg.tensor(RNG.standard_normal(4), requires_grad=True)
    y_ = tg.tensor(RNG.standard_normal(4), requires_grad=True)
    reads = tg.compile(lambda x: (x.exp() * 2.0).sum())
    linear = tg.compile(lambda x, y: (x + y - x * 1.0 * 1.0 + y).sum())
    linear_plain = tg.compile(lambda x, y: (x + y - (x - y)).sum())
    for _ in range(2):
        with strict():
            a = reads(x)
            b = linear_plain(x, y_)
        a.backward()
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            a.backward()
        x.grad = y_.grad = None
        b.backward()
        b.backward()                    # add/sub save nothing: allowed, as in PyTorch
        np.testing.assert_array_equal(values(x.grad), np.zeros(4))
        np.testing.assert_array_equal(values(y_.grad), np.full(4, 4.0))
        x.grad = y_.grad = None
    assert fused(reads) == [("exp", "mul")]
    assert fused(linear_plain) == [("add", "sub", "sub")]
    with strict():
        c = linear(x, y_)
        c = linear(x, y_)
    c.backward()
    with pytest.raises(RuntimeError, match="second time"):    # x * 1.0 saved the scalar
        c.backward()


def test_no_grad_replay_and_no_tangents():
    x = tg.tensor(RNG.standard_normal(5), requires_grad=True)
    cf = tg.compile(lambda x: tg.sigmoid(x * 2.0) + x)
    with tg.no_grad(), strict():
        r = [values(cf(x)) for _ in range(3)]
        e = values(tg.sigmoid(x * 2.0) + x)
    for v in r:
        np.testing.assert_array_equal(v, e)
    assert fused(cf) == [("mul", "sigmoid", "add")]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gradients_reading_only_the_result_come_from_the_saved_output(dtype):
    """relu(x + b) and exp(2x + b): their gradients read the fused result only, so the
    backward evaluates them from the saved output and the forward writes no tangents.
    Gradients equal eager's and the finite differences'; an in-place change of an input
    still raises like eager's (add saves nothing, so nothing is checked for x)."""
    from tapegrad.replay import fuse as fz
    x0 = RNG.standard_normal((6, 5))
    b0 = RNG.standard_normal(5)
    w = tg.tensor(RNG.standard_normal(5).astype(dtype))

    def loss(x, b):
        return ((x + b).relu() @ w).sum() + ((x * 2.0 + b).exp() @ w).sum()

    def f(x, b):
        y = loss(x, b)
        y.backward()
        return y

    cf = tg.compile(f)
    x = tg.tensor(x0.astype(dtype), requires_grad=True)
    b = tg.tensor(b0.astype(dtype), requires_grad=True)
    with strict():
        for _ in range(3):
            x.grad = b.grad = None
            got = values(cf(x, b))
    gx, gb = values(x.grad), values(b.grad)
    assert sorted(fused(cf)) == [("add", "relu"), ("mul", "add", "exp")]
    ops = [op for op in fz._FUSED.values()
           if op.grad_fn in ("ReluBackward0", "ExpBackward0") and op.spec[-1]]
    assert {op.grad_fn for op in ops} == {"ReluBackward0", "ExpBackward0"}
    assert all(op.ntan == 0 for op in ops)
    x.grad = b.grad = None
    want = values(f(x, b))
    np.testing.assert_array_equal(got, want)
    rtol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(gx, values(x.grad), rtol=rtol, atol=rtol)
    np.testing.assert_allclose(gb, values(b.grad), rtol=rtol, atol=rtol)
    if dtype == np.float64:
        h = 1e-6
        for base, g, name in ((x0, gx, "x"), (b0, gb, "b")):
            fd = np.empty(base.size)
            for i in range(base.size):
                e = np.zeros(base.size)
                e[i] = h
                e = e.reshape(base.shape)
                args = {"x": x0, "b": b0}
                up, dn = dict(args, **{name: base + e}), dict(args, **{name: base - e})
                fd[i] = (loss(tg.tensor(up["x"]), tg.tensor(up["b"])).item()
                         - loss(tg.tensor(dn["x"]), tg.tensor(dn["b"])).item()) / (2 * h)
            np.testing.assert_allclose(g.ravel(), fd, rtol=1e-6, atol=1e-7)


def test_fuse_false_keeps_every_op():
    x = tg.tensor(RNG.standard_normal(5), requires_grad=True)
    cf = tg.compile(lambda x: tg.sigmoid(x * 2.0) + x, fuse=False)
    with strict():
        cf(x)
        cf(x)
    assert fused(cf) == []


def test_threads_give_the_same_fused_values():
    """Fused loops split across threads like any flat elementwise loop: bitwise the same
    values and gradients for 1 and 3 threads."""
    old_min, old_n = int(E.ctx[L.C_PAR_MIN]), tg.get_num_threads()
    E.ctx[L.C_PAR_MIN] = 1000
    try:
        x0 = RNG.standard_normal(10007)
        out = []
        for n in (1, 3):
            tg.set_num_threads(n)
            x = tg.tensor(x0, requires_grad=True)
            cf = tg.compile(lambda x: chain(x))
            with strict():
                for _ in range(2):
                    x.grad = None
                    before = int(E.ctx[L.C_NSPLIT])
                    y = cf(x)
                    y.backward()
            out.append((values(y), values(x.grad), int(E.ctx[L.C_NSPLIT]) - before))
        assert out[0][2] == 0 and out[1][2] >= 2        # forward and backward were split
        np.testing.assert_array_equal(out[0][0], out[1][0])
        np.testing.assert_array_equal(out[0][1], out[1][1])
    finally:
        E.ctx[L.C_PAR_MIN] = old_min
        tg.set_num_threads(old_n)


def test_training_loop_memory_is_flat_and_matches_eager():
    """BatchNorm (composed of elementwise ops) and a squared-error loss, 60 SGD steps with
    momentum: losses and parameters follow eager to float32 round-off, and memory stays
    flat. (SGD: Adam would blow round-off in a gradient that is zero in exact arithmetic,
    such as a bias right before BatchNorm, up to full steps.)"""
    def model():
        tg.manual_seed(4)
        return nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.BatchNorm1d(12), nn.Linear(12, 1))

    teacher = RNG.standard_normal((6, 1))
    xs = [RNG.standard_normal((16, 6)).astype(np.float32) for _ in range(60)]
    data = [(tg.tensor(x), tg.tensor(np.tanh(x @ teacher * 0.3).astype(np.float32))) for x in xs]

    def run(compiled):
        m = model()
        opt = optim.SGD(m.parameters(), lr=0.01, momentum=0.9)

        def step(x, y):
            opt.zero_grad()
            loss = ((m(x) - y) ** 2 * 0.5).mean()
            loss.backward()
            opt.step()
            return loss

        fn = tg.compile(step) if compiled else step
        counts, losses = [], []
        for k, (x, y) in enumerate(data):
            with strict():
                losses.append(float(fn(x, y).item()))
            if k in (10, 59):
                gc.collect()
                E.flush()
                s = E.stats()
                counts.append((s["tensors"], s["storages"], s["rows"], s["bytes"]))
        return losses, m, counts, fn

    le, me, _, _ = run(False)
    lc, mc, counts, fn = run(True)
    assert counts[0] == counts[1]
    assert ("sub", "pow", "mul") in fused(fn)
    np.testing.assert_allclose(lc, le, rtol=1e-5)
    assert np.mean(lc[-10:]) < 0.5 * np.mean(lc[:10])       # it learned
    for (k, a), (_, b) in zip(me.state_dict().items(), mc.state_dict().items()):
        np.testing.assert_allclose(values(b), values(a), rtol=1e-4, atol=1e-5, err_msg=k)


def test_infinite_and_nan_constants():
    """Constants are written into the generated loops: clamp's missing bounds (-inf,
    inf), an infinite scalar and NaN have no Python literal and must still compile and
    give eager values."""
    x = tg.tensor(RNG.standard_normal(6), requires_grad=True)

    def f(x):
        y = (x.clamp(None, 0.5) * 2.0).exp() + x.clamp(-0.5, None) * 2.0
        w = (x * float("-inf")).exp() - 1.0             # 0 - 1 or inf: not backpropagated
        z = tg.maximum(x, x * float("nan")) + 1.0       # NaN propagates, as in PyTorch
        y.sum().backward()
        return y, w, z

    cf, rc = replayed_like_eager(f, x)
    assert np.isnan(rc[2]).all() and np.isinf(rc[1]).any()
    assert len(fused(cf)) == 3
