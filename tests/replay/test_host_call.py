"""Host calls (tapegrad._engine.state.host_call): a Python callable a recorded step logs
instead of breaking the graph. The compiled replay stops at that point of the step,
Python calls it, and the replay goes on; the callable works in place on tensors that
exist outside the program (gradients, buffers), as DistributedDataParallel's gradient
averaging does. Replays are compared with eager bitwise (see helpers.py)."""
import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import optim
from tapegrad._engine.state import host_call
from tests.replay.helpers import (arr, assert_models_same, assert_opt_state_same, assert_same,
                                  batches, compile_, mlp, no_break)


class GradScaler:
    """Scales every parameter's .grad in place by a factor that changes per call (so a
    replay that skipped the call, or called it with stale state, would differ)."""

    def __init__(self, model, numpy=True):
        self.model, self.numpy, self.calls, self.seen = model, numpy, 0, []

    def __call__(self):
        self.calls += 1
        k = 1.0 / (1 + self.calls % 3)
        ids = []
        for p in self.model.parameters():
            g = p.grad
            ids.append(g._i)
            if self.numpy:
                a = g.numpy()
                a *= np.asarray(k, a.dtype)
            else:
                with tg.no_grad():
                    g.mul_(k)
        self.seen.append(ids)


def _setup(opt="sgd", numpy=True, dtype=None, seed=3):
    m = mlp((8, 16, 3), seed=seed, dtype=dtype)
    o = (optim.SGD(m.parameters(), lr=0.05, momentum=0.9) if opt == "sgd"
         else optim.Adam(m.parameters(), lr=0.01))
    scaler = GradScaler(m, numpy=numpy)

    def step(x, y):
        o.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        host_call(scaler)
        o.step()
        return loss
    return m, o, scaler, step


@pytest.mark.parametrize("opt,numpy,dtype", [("sgd", True, None), ("adam", False, None),
                                             ("sgd", False, tg.float64)])
def test_host_call_replayed_each_step_bitwise_equal_to_eager(opt, numpy, dtype):
    data = batches(12, batch=8, nin=8, ncls=3, seed=5,
                   dtype=np.float64 if dtype is tg.float64 else np.float32)
    me, oe, se, fe = _setup(opt, numpy, dtype)
    mc, oc, sc, fc = _setup(opt, numpy, dtype)
    fc = compile_(fc)
    with no_break():
        for x, y in data:
            assert_same(fe(x, y), fc(x, y), "loss")
    assert fc.stats == {"recordings": 1, "replays": 11}
    assert se.calls == sc.calls == 12           # once per step, replays included
    assert_models_same(me, mc)
    assert_opt_state_same(oe, oc)
    # the callable saw the real .grad tensors of each step: the ones the optimizer read
    for ids, p in zip(sc.seen[-1], mc.parameters()):
        assert p.grad._i == ids


def test_host_call_in_steps_k_and_with_fusion():
    data = batches(9, batch=8, nin=8, ncls=3, seed=7)
    me, oe, se, fe = _setup()
    mc, oc, sc, fc = _setup()
    fk = tg.compile(fc, steps=3)               # (fusion on: grads round as fused ones do)
    le = [arr(fe(x, y)) for x, y in data]
    xs = [tg.stack([x for x, _ in data[i:i + 3]]) for i in range(0, 9, 3)]
    ys = [tg.stack([y for _, y in data[i:i + 3]]) for i in range(0, 9, 3)]
    with no_break():
        lc = [arr(v) for x, y in zip(xs, ys) for v in fk(x, y)]
    assert fk.stats["recordings"] == 1 and fk.stats["replays"] == 8
    assert sc.calls == 9
    np.testing.assert_allclose(np.array(lc), np.array(le), rtol=1e-5)
    for a, b in zip(me.parameters(), mc.parameters()):
        np.testing.assert_allclose(arr(b), arr(a), rtol=1e-4, atol=1e-6)


def test_host_call_writes_a_buffer_the_forward_reads_after_it():
    # the write happens between two elementwise ops: fusion must not move the first one
    # past the host call (it would read the new value)
    def make(fuse):
        w = tg.zeros(4)
        count = [0]

        def bump():
            count[0] += 1
            w.numpy()[:] = count[0]

        def f(x):
            a = x * w
            host_call(bump)
            return a + w
        return tg.compile(f, fuse=fuse), count

    x = tg.arange(4.0)
    for fuse in (False, True):
        fc, count = make(fuse)
        with no_break():
            outs = [arr(fc(x)) for _ in range(4)]
        assert count[0] == 4
        for k, o in enumerate(outs):        # a = x * (k); out = a + (k + 1)
            np.testing.assert_array_equal(o, np.arange(4.0) * k + (k + 1))


def test_host_call_eager_and_result():
    assert host_call(lambda: 7) == 7


def test_host_call_exception_propagates_from_a_replay():
    state = {"fail": False}

    def check():
        if state["fail"]:
            raise ValueError("host call failed")

    m = mlp((8, 16, 3), seed=1)
    o = optim.SGD(m.parameters(), lr=0.05)

    def step(x, y):
        o.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        host_call(check)
        o.step()
        return loss
    fc = compile_(step)
    data = batches(4, batch=8, seed=2)
    with no_break():
        fc(*data[0])
        fc(*data[1])
        state["fail"] = True
        with pytest.raises(ValueError, match="host call failed"):
            fc(*data[2])
        state["fail"] = False
        fc(*data[3])            # the next call replays again
    assert fc.stats["replays"] >= 2
