"""What a replay of tapegrad.compile returns (structures, the same tensor twice, losses that
can be backpropagated) and the memory it holds: the engine's live counts stay flat over
replays, kept losses keep their values, and values outlive a dropped compiled function.

See tests/replay/helpers.py for how replays are compared with eager.
"""
import gc

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn, optim
from tests.helpers import E, REPO_ROOT
from tests.replay.helpers import (arr, assert_same, batches, compile_, mem, mlp, no_break, Setup,
                                  train_step)


# ============================================================ return structures
def test_return_structures():
    def make(m, o):
        def f(x, y):
            o.zero_grad()
            out = m(x)
            loss = F.cross_entropy(out, y)
            loss.backward()
            o.step()
            return {"loss": loss, "pair": (loss * 2.0, out), "list": [out.detach(), 3],
                    "param": m[0].bias, "const": "abc", "none": None, "x": x}
        return f
    me, mc = mlp((8, 16, 3), seed=7), mlp((8, 16, 3), seed=7)
    oe = optim.SGD(me.parameters(), lr=0.1)
    oc = optim.SGD(mc.parameters(), lr=0.1)
    fe, fc = make(me, oe), compile_(make(mc, oc))
    kept = []
    for x, y in batches(4, seed=30):
        with no_break():
            rc = fc(x, y)
        re_ = fe(x, y)
        kept.append((re_, rc))
        assert set(rc) == set(re_)
        assert type(rc["pair"]) is tuple and type(rc["list"]) is list
        assert rc["const"] == "abc" and rc["none"] is None and rc["list"][1] == 3
        assert rc["x"]._i == x._i
        assert rc["param"]._i == mc[0].bias._i and rc["param"].is_leaf
        assert rc["param"].requires_grad
        assert rc["loss"].requires_grad and rc["loss"].grad_fn.name() == "NllLossBackward0"
        assert rc["pair"][1].grad_fn is not None and rc["list"][0].grad_fn is None
        assert not rc["list"][0].requires_grad
        # the returned parameter IS the live parameter (sees later updates)
        assert_same(rc["param"], mc[0].bias)
    # earlier results kept alive: still their own values (not overwritten by later steps)
    for re_, rc in kept:
        for key in ("loss", "pair", "list"):
            assert_same(re_[key], rc[key])


DUP_RETURN = r"""
import sys
sys.path.insert(0, sys.argv[1])
import tapegrad as tg
def fn(x):
    y = x * 2
    return y, y
f = tg.compile(fn)
x = tg.ones(3)
f(x)
a, b = f(x)                     # a replay
print(a._i == b._i, b._i, b.detach().numpy().tolist())
"""


def test_same_tensor_returned_twice():
    import subprocess
    import sys
    root = REPO_ROOT
    r = subprocess.run([sys.executable, "-c", DUP_RETURN, root], capture_output=True,
                       text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "True", r.stdout
    assert r.stdout.strip().endswith("[2.0, 2.0, 2.0]"), r.stdout


def test_same_tensor_returned_twice_first_call():
    """The recording (eager) call returns the very same object twice."""
    def fn(x):
        y = x * 2
        return y, y
    f = compile_(fn)
    a, b = f(tg.ones(3))
    assert a is b
    assert_same(a, np.full(3, 2.0, np.float32))


def test_return_tuple_list_and_scalar_values():
    m = mlp((8, 4), seed=1)

    def f(x):
        out = m(x)
        return out.sum(), [out, out * 2], (out.mean(),), 7, 2.5
    c = compile_(f)
    for x, _ in batches(3, seed=31):
        with no_break():
            rc = c(x)
        assert type(rc) is tuple and len(rc) == 5
        assert rc[3] == 7 and rc[4] == 2.5
        assert_same(f(x), rc)


def test_returned_loss_backward_again_raises():
    s = Setup(seed=8)
    c = compile_(s.step)
    data = batches(3, seed=32)
    for x, y in data:
        with no_break():
            loss = c(x, y)
        assert loss.grad_fn.name() == "NllLossBackward0"
        with pytest.raises(RuntimeError, match="Trying to backward through the graph a "
                           "second time"):
            loss.backward()
    assert c.stats["replays"] == 2


def test_returned_mse_loss_grad_fn():
    m = mlp((2, 16, 16, 1), seed=2, act=nn.Tanh)
    o = optim.SGD(m.parameters(), lr=0.1)
    c = compile_(train_step(m, o, F.mse_loss))
    for x, y in batches(3, batch=8, nin=2, ncls=1, seed=33, regression=True):
        with no_break():
            loss = c(x, y)
        assert loss.grad_fn.name() == "MseLossBackward0" and loss.requires_grad
        assert loss.shape == () and loss.dtype == tg.float32


def test_returned_tensor_without_backward_can_be_backpropagated():
    """A step without its own backward returns a live graph the caller may backward."""
    m = mlp((8, 16, 3), seed=3)
    mref = mlp((8, 16, 3), seed=3)
    c = compile_(lambda x, y: F.cross_entropy(m(x), y))
    for x, y in batches(3, seed=34):
        m.zero_grad()
        mref.zero_grad()
        with no_break():
            loss = c(x, y)
        loss.backward()
        F.cross_entropy(mref(x), y).backward()
        for p, q in zip(m.parameters(), mref.parameters()):
            assert_same(q.grad, p.grad)
    assert c.stats["replays"] == 2


# ============================================================ memory
def _flat(run_step, warm=5, n=30):
    for _ in range(warm):
        run_step()
    a = mem()
    for _ in range(n):
        run_step()
    b = mem()
    for _ in range(2 * n):
        run_step()
    c = mem()
    return a, b, c


@pytest.mark.parametrize("kind", ["mlp_sgd", "bn_dropout_adam", "no_grad_inference"])
def test_memory_flat_over_replays(kind):
    data = batches(8, seed=35)
    if kind == "no_grad_inference":
        m = mlp((8, 16, 3), seed=1, dropout=0.2)
        m.eval()
        c = compile_(lambda x: m(x).softmax(1))
    else:
        m = mlp((8, 16, 16, 3), seed=1, bn=kind != "mlp_sgd",
                dropout=0.3 if kind != "mlp_sgd" else 0.0)
        o = (optim.SGD(m.parameters(), lr=0.01, momentum=0.9) if kind == "mlp_sgd"
             else optim.Adam(m.parameters(), lr=0.01))
        c = compile_(train_step(m, o))
    i = [0]

    def run():
        x, y = data[i[0] % len(data)]
        i[0] += 1
        with no_break():
            if kind == "no_grad_inference":
                with tg.no_grad():
                    c(x)
            else:
                c(x, y)
    a, b, d = _flat(run)
    assert a == b == d, (a, b, d)
    runner = next(iter(c.plans.values()))[0]
    assert runner.plan is not None          # replays run under the static memory plan
    assert c.stats["recordings"] == 1


def test_memory_flat_with_kept_losses():
    data = batches(8, seed=36)
    m = mlp((8, 16, 3), seed=2, dropout=0.3)
    o = optim.SGD(m.parameters(), lr=0.01)
    c = compile_(train_step(m, o))
    with no_break():
        for x, y in data[:4]:
            c(x, y)
    base = mem()
    for rnd in range(3):
        kept = []
        tg.manual_seed(100 + rnd)
        with no_break():
            for j in range(20):
                kept.append(c(*data[j % 8]))
        during = mem()
        assert during["tensors"] >= base["tensors"] + 20      # they are alive
        assert len({arr(t).tobytes() for t in kept}) > 10      # with their own values
        del kept
        after = mem()
        assert after == base, (rnd, after, base)


def test_kept_losses_keep_their_values():
    data = batches(8, seed=37)
    res = []
    for compiled in (False, True):
        m = mlp((8, 16, 3), seed=2, dropout=0.3)
        o = optim.SGD(m.parameters(), lr=0.05)
        f = train_step(m, o)
        if compiled:
            f = compile_(f)
        tg.manual_seed(5)
        with no_break():
            kept = [f(*data[j % 8]) for j in range(30)]
        res.append(kept)
    assert_same(res[0], res[1])


def test_values_of_a_dropped_compiled_function_outlive_it():
    """What a replay put in its plan's arena (the returned loss, a parameter's .grad)
    stays valid after the compiled function is dropped and collected; the arena goes once
    nothing uses it. (It was freed with the function: the values read freed memory.)"""
    from tapegrad.replay import plan as P
    rng = np.random.default_rng(70)
    x = tg.tensor(rng.standard_normal((8, 5)))
    w = tg.tensor(rng.standard_normal((5, 3)), requires_grad=True)

    def step(x):
        w.grad = None
        loss = (x @ w).tanh().sum()
        loss.backward()
        return loss * 2.0
    want = arr(step(x)), arr(w.grad)
    f = compile_(step)
    with no_break():
        for _ in range(3):
            out = f(x)
    arena = next(iter(f.plans.values()))[0].arena
    addr, size = arena.ctypes.data, arena.size
    del f, arena
    gc.collect()
    junk = [np.full(size, 7.0) for _ in range(50)]      # (reuses freed memory, if any)
    assert_same(out, want[0])
    assert_same(w.grad, want[1])
    assert any(a.ctypes.data == addr for a, _ in P._GRAVEYARD)
    del out, junk
    w.grad = None
    E.flush()
    P._bury(None, None)
    assert not any(a.ctypes.data == addr for a, _ in P._GRAVEYARD)


def test_memory_flat_steps_k():
    k = 4
    data = batches(k, seed=38)
    X = tg.tensor(np.stack([arr(x) for x, _ in data]))
    Y = tg.tensor(np.stack([arr(y) for _, y in data]))
    m = mlp((8, 16, 3), seed=3, dropout=0.2)
    o = optim.Adam(m.parameters(), lr=0.01)
    c = compile_(train_step(m, o), steps=k)

    def run():
        with no_break():
            c(X, Y)
    a, b, d = _flat(run, warm=3, n=10)
    assert a == b == d, (a, b, d)


def test_memory_flat_after_failed_replay():
    """A replay that fails (an out-of-range target) releases everything it made."""
    s = Setup(seed=4)
    c = compile_(s.step)
    data = batches(4, seed=39)
    bad_y = tg.tensor(np.full(16, 7))
    with no_break():
        for x, y in data:
            c(x, y)
    base = mem()
    for _ in range(3):
        with pytest.raises(IndexError, match="Target 7 is out of bounds"):
            c(data[0][0], bad_y)
    with no_break():
        for x, y in data:
            c(x, y)
    assert mem() == base
