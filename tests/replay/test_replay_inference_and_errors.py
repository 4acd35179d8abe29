"""tapegrad.compile without backward (inference under no_grad, plain forwards, functions
without tensor arguments) and errors: the first call's and a replay's errors are eager's, a
replay after a failed one is right, and compiled functions nest.

See tests/replay/helpers.py for how replays are compared with eager.
"""
import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn, optim
from tests.replay.helpers import (arr, assert_models_same, assert_same, batches, compile_, mlp,
                                  no_break, Setup, Twins)


# ============================================================ inference / no backward
def test_inference_no_grad_replay_new_values():
    m = mlp((8, 16, 3), seed=5, bn=True)
    m.eval()
    f = compile_(lambda x: F.softmax(m(x), dim=1))
    outs = []
    for x, _ in batches(5, seed=40):
        with tg.no_grad(), no_break():
            rc = f(x)
        with tg.no_grad():
            re_ = F.softmax(m(x), dim=1)
        assert_same(re_, rc)
        assert not rc.requires_grad and rc.grad_fn is None
        outs.append(arr(rc))
    assert len({o.tobytes() for o in outs}) == 5
    assert f.stats == {"recordings": 1, "replays": 4}


def test_plain_forward_replay():
    m = mlp((8, 16, 3), seed=6)

    def fwd(x):
        h = m(x)
        return h, h.relu().sum(1)
    f = compile_(fwd)
    for x, _ in batches(4, seed=41):
        with no_break():
            rc = f(x)
        assert_same(fwd(x), rc)
        assert rc[0].requires_grad and rc[1].grad_fn is not None
    assert f.stats == {"recordings": 1, "replays": 3}


def test_function_without_tensor_arguments():
    w = tg.tensor(np.arange(4, dtype=np.float32), requires_grad=True)

    def fn():
        w.grad = None
        loss = (w * w).sum()
        loss.backward()
        with tg.no_grad():
            w.sub_(0.1 * w.grad)
        return loss
    wr = tg.tensor(np.arange(4, dtype=np.float32), requires_grad=True)

    def ref():
        wr.grad = None
        loss = (wr * wr).sum()
        loss.backward()
        with tg.no_grad():
            wr.sub_(0.1 * wr.grad)
        return loss
    c = compile_(fn)
    for _ in range(4):
        with no_break():
            rc = c()
        assert_same(ref(), rc)
        assert_same(wr, w)
    assert c.stats == {"recordings": 1, "replays": 3}


# ============================================================ errors
def _inplace_error_fn(x):
    h = x.exp()
    h.add_(1.0)             # exp saved its output: backward must refuse
    loss = h.sum()
    loss.backward()
    return loss


def test_error_in_first_call_is_raised():
    x = tg.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation") as eager:
        _inplace_error_fn(x)
    c = compile_(_inplace_error_fn)
    for _ in range(2):
        with no_break(), pytest.raises(RuntimeError,
                                       match="modified by an inplace operation") as got:
            c(x)
        assert str(got.value) == str(eager.value)
    assert c.eager is None and not c.plans
    # the engine is not left recording: eager code and other compiled functions still work
    f = compile_(lambda a: (a * 2).sum())
    with no_break():
        assert_same(f(tg.ones(3)), np.float32(6))
        assert_same(f(tg.ones(3)), np.float32(6))
    assert f.stats == {"recordings": 1, "replays": 1}


def test_shape_error_in_first_call_is_raised():
    m = nn.Linear(8, 3)
    c = compile_(lambda x: m(x).sum())
    x = tg.ones(4, 5)
    with pytest.raises(RuntimeError) as eager:
        m(x).sum()
    with pytest.raises(RuntimeError) as got:
        c(x)
    assert type(got.value) is type(eager.value) and str(got.value) == str(eager.value)


def test_replay_error_is_eagers_error():
    s = Setup(seed=4)
    c = compile_(s.step)
    data = batches(2, seed=42)
    with no_break():
        c(*data[0])
        c(*data[1])
    bad_y = tg.tensor(np.full(16, 7))
    with pytest.raises(IndexError, match="Target 7 is out of bounds"):
        s.step(data[0][0], bad_y)
    with pytest.raises(IndexError, match="Target 7 is out of bounds"):
        c(data[0][0], bad_y)


def test_replay_after_failed_replay_still_correct():
    t = Twins()
    data = batches(4, seed=43)
    t(*data[0])
    t(*data[1])
    bad_y = tg.tensor(np.full(16, 9))
    with pytest.raises((IndexError, RuntimeError)):
        t.fc(data[2][0], bad_y)
    with pytest.raises(IndexError, match="out of bounds"):
        t.fe(data[2][0], bad_y)
    assert_models_same(t.e.model, t.c.model)
    t(*data[2])
    t(*data[3])
    assert t.stats["recordings"] == 1


def test_nested_first_call_joins_the_outer_recording():
    """A compiled function called for the first time while another one records runs
    eagerly as part of that recording: the outer replays include its ops; afterwards the
    inner function compiles and replays on its own."""
    m = mlp((8, 16, 3), seed=1)
    inner = compile_(lambda x: m(x))
    outer = compile_(lambda x: inner(x).sum())
    data = batches(3, seed=44)
    with no_break():
        for x, _ in data:
            assert_same(m(x).sum(), outer(x))
    assert outer.stats == {"recordings": 1, "replays": 2}
    assert inner.stats == {"recordings": 0, "replays": 0}
    x = data[0][0]
    with no_break():
        assert_same(m(x), inner(x))
        assert_same(m(x), inner(x))
    assert inner.stats["replays"] == 1 and len(inner.plans) == 1


def test_inner_already_compiled_function_inside_a_compiled_step():
    data = batches(6, seed=45)
    res = []
    for compiled in (False, True):
        m = mlp((8, 16, 3), seed=2)
        o = optim.Adam(m.parameters(), lr=0.01)
        fwd = (lambda x: m(x))
        if compiled:
            fwd = compile_(fwd)
            with no_break():
                fwd(data[0][0])
                fwd(data[1][0])
                fwd(data[2][0])

        def step(x, y):
            o.zero_grad()
            loss = F.cross_entropy(fwd(x), y)
            loss.backward()
            o.step()
            return loss
        if compiled:
            step = compile_(step)
        with no_break():
            res.append(([step(x, y) for x, y in data], m))
    assert_same(res[0][0], res[1][0])
    assert_models_same(res[0][1], res[1][1])
