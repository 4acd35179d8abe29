"""Training steps replayed by tapegrad.compile equal eager bitwise: a long run, every
optimizer with batch norm and dropout, learning-rate schedulers stepped outside the
compiled function, loss modules, float64 models, several models, heads and optimizers in
one step, gradient accumulation, the ops a step may use, and calls from two threads.

See tests/replay/helpers.py for how replays are compared with eager.
"""
import os
import sys
import warnings

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn, optim
from tests.replay.helpers import (arr, assert_models_same, assert_opt_state_same, assert_same,
                                  batches, compile_, line_tags, mlp, no_break, to_np, train_step,
                                  Twins)

# the markers `# LINE:<tag>` in this file: a graph break's warning names the user's line
LINE = line_tags(__file__)
THIS_FILE = os.path.basename(__file__)


# ============================================================ long run equals eager
def test_mlp_1000_steps_bitwise_equal_to_eager():
    data = batches(1000, batch=16, nin=8, ncls=3, seed=1)
    me = mlp((8, 32, 32, 3), seed=3)
    mc = mlp((8, 32, 32, 3), seed=3)
    assert_models_same(me, mc)
    oe = optim.SGD(me.parameters(), lr=0.05, momentum=0.9)
    oc = optim.SGD(mc.parameters(), lr=0.05, momentum=0.9)
    se, sc = train_step(me, oe), compile_(train_step(mc, oc))
    le = np.array([arr(se(x, y)) for x, y in data])
    with no_break():
        lc = np.array([arr(sc(x, y)) for x, y in data])
    assert sc.stats == {"recordings": 1, "replays": 999}
    assert sc.eager is None and len(sc.plans) == 1
    assert_same(le, lc, "losses")
    assert_models_same(me, mc)
    assert_opt_state_same(oe, oc)
    assert le[-50:].mean() < le[:50].mean()         # it trained (the test is not vacuous)
    assert not np.array_equal(arr(mc[0].weight), arr(mlp((8, 32, 32, 3), seed=3)[0].weight))


# ============================================================ optimizers, BN, dropout
OPTIMIZERS = [
    ("SGD", dict(lr=0.05)),
    ("SGD", dict(lr=0.05, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-2)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=1e-3)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, amsgrad=True, weight_decay=1e-2)),
    ("AdamW", dict(lr=0.01, weight_decay=0.05)),
    ("AdamW", dict(lr=0.01, amsgrad=True)),
    ("RMSprop", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, centered=True, momentum=0.9, weight_decay=1e-3)),
    ("Adagrad", dict(lr=0.05)),
    ("Adagrad", dict(lr=0.05, lr_decay=1e-2, weight_decay=1e-3)),
]


def _bn_dropout_run(name, kw, compiled, data):
    m = mlp((8, 16, 16, 3), seed=5, bn=True, dropout=0.3)
    opt = getattr(optim, name)(m.parameters(), **kw)
    step = train_step(m, opt)
    tg.manual_seed(11)              # the dropout stream: identical for both runs
    if not compiled:
        return [step(x, y) for x, y in data], m, opt, None
    c = compile_(step)
    with no_break():
        losses = [c(x, y) for x, y in data]
    return losses, m, opt, c


@pytest.mark.parametrize("name,kw", OPTIMIZERS,
                         ids=[f"{n}-{'-'.join(k for k in kw if k != 'lr') or 'plain'}"
                              for n, kw in OPTIMIZERS])
def test_optimizers_with_batchnorm_and_dropout_equal_eager(name, kw):
    data = batches(25, seed=2)
    le, me, oe, _ = _bn_dropout_run(name, kw, False, data)
    lc, mc, oc, c = _bn_dropout_run(name, kw, True, data)
    assert c.stats == {"recordings": 1, "replays": 24}
    assert_same(le, lc, "losses")
    assert_models_same(me, mc)      # parameters and BN running_mean/var/num_batches_tracked
    bn = mc[1]
    assert int(bn.num_batches_tracked.item()) == 25
    assert_same(me[1].running_mean, bn.running_mean)
    assert_same(me[1].running_var, bn.running_var)
    n = assert_opt_state_same(oe, oc)
    if kw.get("momentum") or name != "SGD":
        assert n > 0                # the state tensors were compared
    # dropout really drew different masks per step: 2 identical batches give 2 losses
    x, y = data[0]
    l1, l2 = c(x, y), c(x, y)
    assert not np.array_equal(arr(l1), arr(l2))


def test_dropout_same_seed_compiled_equals_eager_and_new_masks_each_step():
    m = nn.Sequential(nn.Dropout(0.5))
    x = tg.ones(4, 64)
    f = compile_(lambda t: m(t) * 1.0)
    tg.manual_seed(7)
    with no_break():
        rc = [arr(f(x)) for _ in range(6)]
    tg.manual_seed(7)
    re_ = [arr(m(x) * 1.0) for _ in range(6)]
    assert_same(re_, rc)
    assert f.stats["replays"] == 5
    assert len({r.tobytes() for r in rc}) == 6              # a fresh mask every step
    for r in rc:
        assert set(np.unique(r).tolist()) <= {0.0, 2.0}
        assert 0.25 < (r == 0).mean() < 0.75


# ============================================================ lr scheduler outside
@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
def test_steplr_outside_the_compiled_function(opt_name):
    data = batches(12, seed=4)
    res = []
    for compiled in (False, True):
        m = mlp((8, 16, 3), seed=1)
        opt = getattr(optim, opt_name)(m.parameters(), lr=0.1, **(
            {"momentum": 0.9} if opt_name == "SGD" else {}))
        sched = optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
        step = train_step(m, opt)
        if compiled:
            step = compile_(step)
        losses, lrs = [], []
        with no_break():
            for x, y in data:
                losses.append(arr(step(x, y)))
                lrs.append(opt.param_groups[0]["lr"])
                sched.step()
        res.append((losses, lrs, m, opt, step))
    (le, lre, me, oe, _), (lc, lrc, mc, oc, c) = res
    assert lre == lrc and lrc[0] == 0.1 and lrc[-1] == 0.1 * 0.5 ** 3
    assert c.stats == {"recordings": 1, "replays": 11}
    assert_same(le, lc, "losses")
    assert_models_same(me, mc)
    assert_opt_state_same(oe, oc)


def test_lr_set_by_hand_between_calls_takes_effect_without_rerecording():
    t = Twins()
    data = batches(6, seed=3)
    for i, (x, y) in enumerate(data):
        t.both(lambda s: s.opt.param_groups[0].__setitem__("lr", 0.05 * (i + 1)))
        t(x, y)
    assert t.stats == {"recordings": 1, "replays": 5}
    # lr = 0 freezes the parameters in a replay too
    t.both(lambda s: s.opt.param_groups[0].__setitem__("lr", 0.0))
    before = arr(t.c.model[0].weight)
    t.both(lambda s: [st["momentum_buffer"].zero_() for st in s.opt.state.values()])
    t(*data[0])
    assert_same(before, t.c.model[0].weight)
    assert t.stats["recordings"] == 1

# ============================================================ other training steps
@pytest.mark.parametrize("crit", ["CrossEntropyLoss", "MSELoss", "NLLLoss", "L1Loss",
                                  "SmoothL1Loss", "HuberLoss", "BCEWithLogitsLoss"])
def test_loss_modules(crit):
    regression = crit not in ("CrossEntropyLoss", "NLLLoss")
    data = batches(6, seed=46, regression=regression)
    if crit == "BCEWithLogitsLoss":
        data = [(x, (y > 0).to(tg.float32)) for x, y in data]
    res = []
    for compiled in (False, True):
        m = mlp((8, 16, 3), seed=3)
        if crit == "NLLLoss":
            m = nn.Sequential(m, nn.LogSoftmax(dim=1))
        o = optim.SGD(m.parameters(), lr=0.05, momentum=0.5)
        criterion = getattr(nn, crit)()

        def step(x, y):
            o.zero_grad()
            loss = criterion(m(x), y)
            loss.backward()
            o.step()
            return loss
        f = compile_(step) if compiled else step
        with no_break():
            res.append(([f(x, y) for x, y in data], m, f))
    assert_same(res[0][0], res[1][0])
    assert_models_same(res[0][1], res[1][1])
    assert res[1][2].stats == {"recordings": 1, "replays": 5}


def test_tiny_regression_model_mse():
    rng = np.random.default_rng(47)
    xs = rng.uniform(-1, 1, (200, 8, 2)).astype(np.float32)
    ys = (np.sin(xs[..., :1] * 3) * xs[..., 1:]).astype(np.float32)
    data = [(tg.tensor(a), tg.tensor(b)) for a, b in zip(xs, ys)]
    res = []
    for compiled in (False, True):
        m = mlp((2, 16, 16, 1), seed=4, act=nn.Tanh)
        o = optim.Adam(m.parameters(), lr=0.01)
        f = train_step(m, o, F.mse_loss)
        if compiled:
            f = compile_(f)
        with no_break():
            res.append(([arr(f(x, y)) for x, y in data], m))
    assert_same(res[0][0], res[1][0])
    assert_models_same(res[0][1], res[1][1])
    assert np.mean(res[1][0][-20:]) < np.mean(res[1][0][:20])


@pytest.mark.parametrize("opt_name", ["SGD", "Adam", "RMSprop"])
def test_float64_model(opt_name):
    data = batches(10, seed=48, dtype=np.float64)
    res = []
    for compiled in (False, True):
        m = mlp((8, 16, 3), seed=5, bn=True, dropout=0.2, dtype=tg.float64)
        o = getattr(optim, opt_name)(m.parameters(), lr=0.01)
        f = train_step(m, o)
        if compiled:
            f = compile_(f)
        tg.manual_seed(2)
        with no_break():
            res.append(([f(x, y) for x, y in data], m, o))
    assert res[1][0][0].dtype == tg.float64
    assert_same(res[0][0], res[1][0])
    assert_models_same(res[0][1], res[1][1])
    assert_opt_state_same(res[0][2], res[1][2])


def test_train_step_and_eval_step_share_a_model():
    data = batches(10, seed=49)
    val = batches(2, seed=50)
    res = []
    for compiled in (False, True):
        m = mlp((8, 16, 16, 3), seed=6, bn=True, dropout=0.2)
        o = optim.SGD(m.parameters(), lr=0.05, momentum=0.9)

        def train(x, y):
            o.zero_grad()
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            o.step()
            return loss

        def evaluate(x, y):
            with tg.no_grad():
                out = m(x)
                return F.cross_entropy(out, y), out.softmax(1)
        if compiled:
            train, evaluate = compile_(train), compile_(evaluate)
        tg.manual_seed(9)
        out = []
        with no_break():
            for epoch in range(2):
                m.train()
                for x, y in data:
                    out.append(train(x, y))
                m.eval()
                for x, y in val:
                    out.append(evaluate(x, y))
        res.append((out, m, train, evaluate))
    assert_same(res[0][0], res[1][0])
    assert_models_same(res[0][1], res[1][1])
    train_c, eval_c = res[1][2], res[1][3]
    assert train_c.stats["recordings"] + train_c.stats["replays"] == 20
    assert eval_c.stats["recordings"] + eval_c.stats["replays"] == 4
    assert train_c.stats["replays"] >= 17 and eval_c.stats["replays"] >= 2


def test_keyword_tensor_arguments():
    t = Twins()
    data = batches(6, seed=51)
    t(data[0][0], y=data[0][1])
    t(data[1][0], y=data[1][1])
    t(x=data[2][0], y=data[2][1])
    t(y=data[3][1], x=data[3][0])              # the same key, whatever the order
    t(data[4][0], y=data[4][1])
    assert t.stats == {"recordings": 2, "replays": 3}
    assert len(t.fc.plans) == 2


def test_decorator_forms_and_wrapping():
    m = mlp((8, 3), seed=7)

    @compile_
    def fwd(x):
        """doc of fwd"""
        return m(x).sum()

    @compile_(steps=2)
    def fwd2(x):
        return m(x).sum()
    assert fwd.__name__ == "fwd" and fwd.__doc__ == "doc of fwd"
    assert isinstance(fwd, tg.replay.compiled.CompiledFunction)
    assert fwd2.steps == 2
    xs = [x for x, _ in batches(2, seed=52)]
    X = tg.tensor(np.stack([arr(x) for x in xs]))
    with no_break():
        assert_same([m(x).sum() for x in xs], fwd2(X))
        assert_same([m(x).sum() for x in xs], [fwd(x) for x in xs])
    assert fwd.stats == {"recordings": 1, "replays": 1}


def test_gradient_accumulation_and_retain_graph():
    data = batches(5, seed=53)
    res = []
    for compiled in (False, True):
        m = mlp((8, 16, 3), seed=8)
        o = optim.Adam(m.parameters(), lr=0.01)

        def step(x, y):
            o.zero_grad()
            l1 = F.cross_entropy(m(x[:8]), y[:8])
            l1.backward()
            l2 = F.cross_entropy(m(x[8:]), y[8:])
            l2.backward(retain_graph=True)
            (l2 * 0.5).backward()
            o.step()
            return l1 + l2
        f = compile_(step) if compiled else step
        with no_break():
            res.append(([f(x, y) for x, y in data], m))
    assert_same(res[0][0], res[1][0])
    assert_models_same(res[0][1], res[1][1])


@pytest.mark.parametrize("set_to_none", [True, False])
def test_gradient_accumulation_across_compiled_calls(set_to_none):
    """A compiled forward+backward called 4 times per optimizer step (zero_grad and step
    outside): replays accumulate into existing .grad exactly as eager does."""
    data = batches(16, seed=62)
    res = []
    for compiled in (False, True):
        m = mlp((8, 16, 3), seed=5)
        o = optim.SGD(m.parameters(), lr=0.1)

        def fb(x, y):
            loss = F.cross_entropy(m(x), y) / 4
            loss.backward()
            return loss
        f = compile_(fb) if compiled else fb
        out = []
        with no_break():
            for i, (x, y) in enumerate(data):
                out.append(f(x, y))
                if i % 4 == 3:
                    o.step()
                    o.zero_grad(set_to_none=set_to_none)
        res.append((out, m, f))
    assert_same(res[0][0], res[1][0])
    assert_models_same(res[0][1], res[1][1])
    assert res[1][2].stats == {"recordings": 1, "replays": 15}


def test_zero_grad_at_the_end_of_the_step():
    data = batches(6, seed=63)
    res = []
    for compiled in (False, True):
        m = mlp((8, 16, 3), seed=6)
        o = optim.Adam(m.parameters(), lr=0.01)

        def step(x, y):
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            o.step()
            o.zero_grad()
            return loss
        f = compile_(step) if compiled else step
        with no_break():
            res.append(([f(x, y) for x, y in data], m, o))
        assert all(p.grad is None for p in m.parameters())
    assert_same(res[0][0], res[1][0])
    assert_models_same(res[0][1], res[1][1])
    assert_opt_state_same(res[0][2], res[1][2])


REPLAYABLE_OPS = {
    "where": lambda x, y: tg.where(x > y, x, y),
    "clamp": lambda x, y: x.clamp(-0.5, 0.5) + y,
    "max_dim": lambda x, y: x.max(1)[0] + y.sum(1),
    "cat_stack": lambda x, y: tg.cat([x, y], 0).sum(0) + tg.stack([x, y]).mean(0).sum(0),
    "views": lambda x, y: x.reshape(6, 4).t().permute(1, 0).reshape(-1) * y.view(-1),
    "slices": lambda x, y: x[:, 1:] * y[0][1:] + x[1:3].sum(),
    "softmax": lambda x, y: F.log_softmax(x, 1) * F.softmax(y, 0),
    "pow_sqrt": lambda x, y: (x * x + 1).sqrt() ** 1.5 / (y.abs() + 1),
    "min_max": lambda x, y: tg.maximum(x, y) - tg.minimum(x, y),
    "var_std_norm": lambda x, y: x.var(1) + y.std(0).sum() + x.norm(),
    "expand": lambda x, y: x.unsqueeze(0).expand(3, 4, 6).sum(0) * y,
    "logsumexp": lambda x, y: x - x.mean(1, keepdim=True) + y.logsumexp(1, keepdim=True),
    "activations": lambda x, y: x.sigmoid() * y.tanh() + F.relu(x) * x.exp(),
    "clone_inplace": lambda x, y: x.clone().mul_(2).add_(y),
    "writes_into_views": lambda x, y: _writes_into_views(x * 1, y),
}


def test_a_key_and_a_value_written_from_arguments_are_guards():
    """x[i] = v with i and v arguments: a replay's positions and scalar are plan
    constants, right because each (i, v) is a guard (a new pair records again)."""
    W = tg.ones(4, requires_grad=True)

    def f(x, i, v):
        y = x * W
        y[i] = v
        y[:, i].mul_(3.0)
        y.sum().backward()
        g = W.grad.clone()
        W.grad = None
        return y, g
    c = compile_(f)
    X = tg.tensor(np.arange(12.0).reshape(3, 4))
    with no_break():
        for i, v in ((0, 0.0), (1, 0.0), (0, 0.0), (2, 5.0), (1, 0.0), (1, 2.5)):
            assert_same(f(X, i, v), c(X, i, v))
    assert c.stats == {"recordings": 4, "replays": 2}


def _writes_into_views(z, y):
    """x[key] = v and in-place ops through views: their positions are plan constants."""
    z[:, 0] = y[:, 1] * 2
    z[1].mul_(y[0])
    z.t()[2].add_(1.0)
    z[2:, 3:].copy_(y[:2, :3].exp())
    return z


@pytest.mark.parametrize("name", list(REPLAYABLE_OPS))
def test_ops_replay_with_gradients_of_arguments(name):
    op = REPLAYABLE_OPS[name]

    def fn(x, y):
        out = op(x, y)
        out.sum().backward()
        return out, x.grad, y.grad
    f = compile_(fn)
    rng = np.random.default_rng(64)
    pairs = [tuple(tg.tensor(rng.standard_normal((4, 6)).astype(np.float32),
                             requires_grad=True) for _ in range(2)) for _ in range(4)]
    refs = [tuple(tg.tensor(arr(t), requires_grad=True) for t in p) for p in pairs]
    with no_break():
        for (a, b), (ra, rb) in zip(pairs, refs):
            assert_same(fn(ra, rb), f(a, b))
    assert f.stats == {"recordings": 1, "replays": 3}


@pytest.mark.parametrize("name,op", [
    ("bool_to_float", lambda x: (x > 0).float() * x),
    ("masked_fill", lambda x: x.masked_fill(x > 0.5, 0.0)),
    ("setitem", lambda x: (lambda z: (z.__setitem__((slice(None), 0), 0.0), z)[1])(x * 1)),
    ("one_hot", lambda x: F.one_hot(x.argmax(1), 6).float() * x),
])
def test_ops_that_may_break_are_still_correct(name, op):
    f = compile_(op)
    rng = np.random.default_rng(65)
    xs = [tg.tensor(rng.standard_normal((4, 6)).astype(np.float32)) for _ in range(3)]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always", tg.CompileWarning)
        got = [f(x) for x in xs]
    assert_same([op(x) for x in xs], got)
    cw = [x for x in w if x.category is tg.CompileWarning]
    assert len(cw) == (0 if f.eager is None else 1)
    if cw:
        assert f"{THIS_FILE}:" in str(cw[0].message)


def test_two_heads_selected_by_argument_with_weight_decay():
    data = batches(8, seed=67)
    res = []
    for compiled in (False, True):
        body, h1, h2 = mlp((8, 16), seed=1), mlp((16, 3), seed=2), mlp((16, 3), seed=3)
        params = [*body.parameters(), *h1.parameters(), *h2.parameters()]
        o = optim.SGD(params, lr=0.1, weight_decay=0.1)

        def step(x, y, first):
            o.zero_grad(set_to_none=False)
            z = body(x).relu()
            loss = F.cross_entropy(h1(z) if first else h2(z), y)
            loss.backward()
            o.step()
            return loss
        f = compile_(step) if compiled else step
        with no_break():
            out = [f(x, y, i % 2 == 0) for i, (x, y) in enumerate(data)]
        res.append((out, [arr(p) for p in params]))
    assert_same(res[0][0], res[1][0])
    assert_same(res[0][1], res[1][1])


def test_two_heads_selected_by_argument_with_momentum():
    data = batches(8, seed=68)
    res = []
    for compiled in (False, True):
        body, h1, h2 = mlp((8, 16), seed=1), mlp((16, 3), seed=2), mlp((16, 3), seed=3)
        params = [*body.parameters(), *h1.parameters(), *h2.parameters()]
        o = optim.SGD(params, lr=0.1, momentum=0.9)

        def step(x, y, first):
            o.zero_grad()
            z = body(x).relu()
            loss = F.cross_entropy(h1(z) if first else h2(z), y)
            loss.backward()
            o.step()
            return loss
        f = compile_(step) if compiled else step
        with no_break():
            out = [f(x, y, i % 2 == 0) for i, (x, y) in enumerate(data)]
        res.append((out, [arr(p) for p in params], f))
    assert_same(res[0][0], res[1][0])
    assert_same(res[0][1], res[1][1])
    assert res[1][2].stats["replays"] >= 4


def test_two_models_two_optimizers_in_one_step():
    data = batches(6, seed=54)
    res = []
    for compiled in (False, True):
        enc = mlp((8, 16), seed=9)
        head = mlp((16, 3), seed=10)
        o1 = optim.SGD(enc.parameters(), lr=0.05, momentum=0.9)
        o2 = optim.AdamW(head.parameters(), lr=0.01)

        def step(x, y):
            o1.zero_grad()
            o2.zero_grad()
            z = enc(x).relu()
            loss = F.cross_entropy(head(z), y) + 0.01 * (z ** 2).mean()
            loss.backward()
            o1.step()
            o2.step()
            return loss, z.detach()
        f = compile_(step) if compiled else step
        with no_break():
            res.append(([f(x, y) for x, y in data], enc, head, o1, o2))
    assert_same(res[0][0], res[1][0])
    assert_models_same(res[0][1], res[1][1])
    assert_models_same(res[0][2], res[1][2])
    assert_opt_state_same(res[0][3], res[1][3])
    assert_opt_state_same(res[0][4], res[1][4])


def test_embedding_layernorm_gelu_model():
    rng = np.random.default_rng(55)
    data = [(tg.tensor(rng.integers(0, 20, (8, 5))), tg.tensor(rng.integers(0, 4, 8)))
            for _ in range(6)]
    res = []
    for compiled in (False, True):
        tg.manual_seed(11)
        emb = nn.Embedding(20, 6)
        body = nn.Sequential(nn.Flatten(), nn.Linear(30, 12), nn.LayerNorm(12), nn.GELU(),
                             nn.Linear(12, 4))
        o = optim.Adam(list(emb.parameters()) + list(body.parameters()), lr=0.01)

        def step(tok, y):
            o.zero_grad()
            loss = F.cross_entropy(body(emb(tok)), y, label_smoothing=0.1)
            loss.backward()
            o.step()
            return loss
        f = compile_(step) if compiled else step
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always", tg.CompileWarning)
            res.append(([f(a, b) for a, b in data], emb, body, f, w))
    assert_same(res[0][0], res[1][0])
    assert_models_same(res[0][1], res[1][1])
    assert_models_same(res[0][2], res[1][2])
    f, w = res[1][3], res[1][4]
    # the embedding's row gather checks its indices in the kernel: nothing breaks
    assert f.eager is None and not w
    assert f.stats == {"recordings": 1, "replays": 5}
    bad = tg.tensor(np.full((8, 5), 20))
    with pytest.raises(IndexError, match="index 20 is out of bounds for dimension 0 with "
                                         "size 20"):
        f(bad, data[0][1])
    with no_break():
        f(*data[0])                                     # it goes on after the error
    assert f.stats == {"recordings": 1, "replays": 6}


def test_batchnorm_cumulative_average_momentum_none_breaks_correctly():
    """BatchNorm1d(momentum=None) reads num_batches_tracked in Python (.item()): a graph
    break at the user's line calling the model; the results are eager's."""
    data = batches(6, seed=56)
    res = []
    for compiled in (False, True):
        tg.manual_seed(3)
        m = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16, momentum=None), nn.ReLU(),
                          nn.Linear(16, 3))
        o = optim.SGD(m.parameters(), lr=0.05)

        def step(x, y):
            o.zero_grad()
            loss = F.cross_entropy(m(x), y)  # LINE:bn_none
            loss.backward()
            o.step()
            return loss
        if compiled:
            c = compile_(step)
            with pytest.warns(tg.CompileWarning) as rec:
                out = [c(x, y) for x, y in data]
            msgs = [str(w.message) for w in rec if w.category is tg.CompileWarning]
            assert len(msgs) == 1 and f"{THIS_FILE}:{LINE['bn_none']}" in msgs[0]
        else:
            out = [step(x, y) for x, y in data]
        res.append((out, m))
    assert_same(res[0][0], res[1][0])
    assert_models_same(res[0][1], res[1][1])
    assert int(res[1][1][1].num_batches_tracked.item()) == 6


def test_two_threads_share_one_compiled_function():
    """Calls from two threads are serialised per compiled function: each gets the replay
    of its own arguments."""
    import threading
    rng = np.random.default_rng(58)
    w = tg.tensor(rng.standard_normal((4, 3)).astype(np.float32), requires_grad=True)
    f = compile_(lambda x: ((x @ w).tanh() * 2.0).sum(1))
    xs = [tg.tensor(rng.standard_normal((5, 4)).astype(np.float32)) for _ in range(8)]
    with no_break():
        f(xs[0])
        f(xs[1])
    want = [((x @ w).tanh() * 2.0).sum(1).detach().numpy() for x in xs]
    errors = []

    def work(order):
        try:
            for _ in range(100):
                for i in order:
                    got = f(xs[i]).detach().numpy()
                    if not np.array_equal(got, want[i]):
                        errors.append(i)
        except Exception as e:      # noqa: BLE001  (reported below)
            errors.append(repr(e))
    threads = [threading.Thread(target=work, args=(o,)) for o in ([0, 1, 2, 3, 4, 5, 6, 7],
                                                                   [7, 6, 5, 4, 3, 2, 1, 0])]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)         # switch threads often: races show up, if any
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    assert f.stats["recordings"] == 1


def test_copying_values_in_a_compiled_function_falls_back_to_eager():
    """Both copy a tensor's values in Python, which a replay would not repeat: a graph
    break, and every call copies the values it was given."""
    import copy
    import pickle

    for how, clone in (("copy.deepcopy of a tensor", copy.deepcopy),
                       ("reads or writes a tensor's values",
                        lambda t: pickle.loads(pickle.dumps(t)))):
        c = compile_(lambda x: clone(x) * 2.0)
        with pytest.warns(tg.CompileWarning, match=how):
            assert c(tg.tensor([1.0, 2.0])).tolist() == [2.0, 4.0]
        assert c(tg.tensor([5.0, 6.0])).tolist() == [10.0, 12.0]


def test_assigning_data_of_a_tensor_the_function_sees_records_again():
    """`t.data = ...` keeps the Python object and gives it a new id; the plan replays the
    ids it recorded, so the guard reads the ids of the tensors the function sees (not only
    those of modules and optimizers): the next call records again and uses the new data."""
    w = tg.tensor(np.arange(3, dtype=np.float32), requires_grad=True)
    holder = {"b": tg.tensor(np.ones(3, np.float32), requires_grad=True)}

    def f(x):
        w.grad = holder["b"].grad = None
        y = x * w + holder["b"]
        y.sum().backward()
        return y * 1
    cf = tg.compile(f)
    x = tg.tensor(np.full(3, 2.0, np.float32))
    for _ in range(2):
        cf(x)
    for t, value in ((w, 10.0), (holder["b"], -4.0)):
        t.data = tg.tensor(np.full(3, value, np.float32))
        for _ in range(2):
            yc = to_np(cf(x))
        gc_ = to_np(w.grad), to_np(holder["b"].grad)
        assert_same(yc, to_np(f(x)))
        assert_same(gc_[0], to_np(w.grad))
        assert_same(gc_[1], to_np(holder["b"].grad))
    assert cf.stats["recordings"] == 3
