"""tapegrad.compile(steps=k): k steps in one call over arguments stacked along a leading dim
equal k eager steps (dropout, structures, keyword tensors); wrong leading dims and steps
that are not positive ints are refused.

See tests/replay/helpers.py for how replays are compared with eager.
"""
import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import optim
from tests.replay.helpers import (arr, assert_models_same, assert_opt_state_same, assert_same,
                                  batches, compile_, mlp, no_break, train_step)


# ============================================================ steps=k
def test_steps_k_equals_k_eager_steps():
    k = 5
    data = batches(3 * k, seed=28)
    me, mc = mlp((8, 16, 3), seed=5, bn=True), mlp((8, 16, 3), seed=5, bn=True)
    oe = optim.Adam(me.parameters(), lr=0.01)
    oc = optim.Adam(mc.parameters(), lr=0.01)
    fe = train_step(me, oe)
    c = compile_(train_step(mc, oc), steps=k)
    le, lc = [], []
    for chunk in range(3):
        part = data[chunk * k:(chunk + 1) * k]
        X = tg.tensor(np.stack([arr(x) for x, _ in part]))
        Y = tg.tensor(np.stack([arr(y) for _, y in part]))
        le += [fe(x, y) for x, y in part]
        with no_break():
            out = c(X, Y)
        assert isinstance(out, list) and len(out) == k
        lc += out
    assert_same(le, lc)
    assert_models_same(me, mc)
    assert_opt_state_same(oe, oc)
    assert c.stats == {"recordings": 1, "replays": 3 * k - 1}
    assert lc[0].grad_fn.name() == "NllLossBackward0"


def test_steps_k_with_dropout_and_structures():
    k = 4
    data = batches(k, seed=29)
    X = tg.tensor(np.stack([arr(x) for x, _ in data]))
    Y = tg.tensor(np.stack([arr(y) for _, y in data]))
    res = []
    for compiled in (False, True):
        m = mlp((8, 16, 3), seed=6, dropout=0.5)
        o = optim.SGD(m.parameters(), lr=0.1)

        def f(x, y, scale):
            o.zero_grad()
            out = m(x)
            loss = F.cross_entropy(out, y) * scale
            loss.backward()
            o.step()
            return {"loss": loss, "out": (out, "tag")}
        tg.manual_seed(3)
        if compiled:
            c = compile_(f, steps=k)
            with no_break():
                r = c(X, Y, 2.0) + c(X, Y, 2.0)
            assert c.stats == {"recordings": 1, "replays": 2 * k - 1}
        else:
            r = [f(x, y, 2.0) for x, y in data] + [f(x, y, 2.0) for x, y in data]
        res.append((r, m))
    assert_same(res[0][0], res[1][0])
    assert res[1][0][3]["out"][1] == "tag"
    assert_models_same(res[0][1], res[1][1])


def test_steps_k_with_a_stacked_leaf_that_requires_grad():
    """Step i sees X[i] (a view of a leaf): gradients flow back into X.grad as in eager."""
    a = np.random.default_rng(69).standard_normal((3, 4)).astype(np.float32)

    def fn(x):
        loss = (x * x * x).sum()
        loss.backward()
        return loss
    Xe, Xc = tg.tensor(a, requires_grad=True), tg.tensor(a, requires_grad=True)
    le = [fn(Xe[i]) for i in range(3)] + [fn(Xe[i]) for i in range(3)]
    c = compile_(fn, steps=3)
    with no_break():
        lc = c(Xc) + c(Xc)
    assert_same(le, lc)
    assert_same(Xe.grad, Xc.grad)
    np.testing.assert_allclose(arr(Xc.grad), 2 * 3 * a * a, rtol=1e-5)   # (analytic)
    assert c.stats == {"recordings": 1, "replays": 5}


@pytest.mark.parametrize("shape", [(3, 16, 8), (5, 16, 8), ()])
def test_steps_k_wrong_leading_dim_raises(shape):
    f = compile_(lambda x: x.sum(), steps=4)
    x = tg.zeros(*shape)
    with pytest.raises(ValueError, match=r"steps="):
        f(x)
    assert f.stats == {"recordings": 0, "replays": 0}


def test_steps_k_wrong_leading_dim_after_recording_raises():
    f = compile_(lambda x, y: (x * y).sum(), steps=2)
    ok = f(tg.ones(2, 3), tg.ones(2, 3))
    assert_same(ok, [np.float32(3.0), np.float32(3.0)])
    with pytest.raises(ValueError, match=r"steps=2"):
        f(tg.ones(2, 3), tg.ones(3, 3))


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2"])
def test_steps_must_be_positive_int(bad):
    with pytest.raises(ValueError, match="steps"):
        compile_(lambda x: x, steps=bad)


def test_steps_k_keyword_tensor_is_sliced():
    def g(x, y=None):
        return (x * 2).sum() + y.sum()
    c = compile_(g, steps=2)
    rng = np.random.default_rng(0)
    X = tg.tensor(rng.standard_normal((2, 4)).astype(np.float32))
    Y = tg.tensor(rng.standard_normal((2, 4)).astype(np.float32))
    assert_same([g(X[i], y=Y[i]) for i in range(2)], c(X, y=Y))


def test_steps_k_mixed_arguments_and_results_match_eager():
    """A number between the tensors, a keyword tensor, a tuple result holding a slice
    itself: every step's values are eager's, on the recording call and on replays (where
    only the first step's slices get wrappers)."""
    def g(x, scale, y=None):
        return (x * scale + y).tanh().sum(), x, y * 1.0
    c = compile_(g, steps=3)
    rng = np.random.default_rng(71)
    for _ in range(3):
        X = tg.tensor(rng.standard_normal((3, 4)))
        Y = tg.tensor(rng.standard_normal((3, 4)))
        with no_break():
            got = c(X, 0.5, y=Y)
        assert_same([g(X[i], 0.5, y=Y[i]) for i in range(3)], got)
    assert c.stats == {"recordings": 1, "replays": 8}


def test_functions_returning_no_tensor_replay():
    """A step returning None, or only Python values, replays (the fast path included)."""
    x = tg.tensor(np.random.default_rng(72).standard_normal(5), requires_grad=True)

    def none(x):
        (x.sin() * x.exp()).sum().backward()

    def number(x):
        (x * x).sum().backward()
        return 3, "done"
    for fn, want in ((none, None), (number, (3, "done"))):
        c = compile_(fn)
        grads = []
        with no_break():
            for _ in range(4):
                x.grad = None
                assert c(x) == want
                grads.append(arr(x.grad))
        x.grad = None
        fn(x)
        for g in grads:
            assert_same(g, arr(x.grad))
        assert c.stats == {"recordings": 1, "replays": 3}
