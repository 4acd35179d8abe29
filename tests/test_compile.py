"""tapegrad.compile: a step recorded once and replayed in one compiled call.

Every replayed result is compared BITWISE with an eager run of an identical setup (the
same kernels run in the same order, so float32 results must be equal, not close). That
holds for replays without fusion, so this file compiles with fuse=False; fused replays
(whose gradients round differently) are compared with eager in test_fuse.py. Tests
that must not fall back to eager run with CompileWarning turned into an error, so a
silent fallback cannot pass for a replay; `stats` says how many recordings and replays
happened. Graph breaks are checked for one warning naming the user's line (found in this
file by its `# LINE:<tag>` marker) and for eager-correct results. Memory is checked with
the engine's live counts (flat over replays).
"""
import gc
import sys
import re
import warnings

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn, optim

E = tg._engine.state.engine()


def compile_(fn=None, **kw):
    """tg.compile without fusion (see the module docstring)."""
    kw.setdefault("fuse", False)
    return tg.compile(fn, **kw)


MEM_KEYS = ("tensors", "storages", "rows", "bytes")


# ============================================================ helpers
def _line_tags():
    tags = {}
    with open(__file__, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = re.search(r"# LINE:(\w+)\s*$", line)
            if m:
                tags[m.group(1)] = n
    return tags


LINE = _line_tags()


def arr(t):
    """A copy of a tensor's values (NumPy); other values pass through."""
    return np.array(t.detach().numpy())


def to_np(v):
    """Results (tensors, numbers, arrays, lists/tuples/dicts of them) as nested NumPy."""
    if isinstance(v, tg.Tensor):
        return arr(v)
    if isinstance(v, (list, tuple)):
        return [to_np(x) for x in v]
    if isinstance(v, dict):
        return {k: to_np(x) for k, x in v.items()}
    return np.asarray(v)


def assert_same(a, b, what="value"):
    """Bitwise equality of two results (same structure, dtype and values)."""
    a, b = to_np(a), to_np(b)
    if isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), what
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{what}[{i}]")
        return
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), what
        for k in a:
            assert_same(a[k], b[k], f"{what}[{k!r}]")
        return
    assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} != {b.dtype}"
    np.testing.assert_array_equal(a, b, err_msg=what, strict=True)


def assert_models_same(m1, m2):
    s1, s2 = m1.state_dict(), m2.state_dict()
    assert list(s1) == list(s2)
    for k in s1:
        assert_same(s1[k], s2[k], k)


def assert_opt_state_same(o1, o2):
    p1 = [p for g in o1.param_groups for p in g["params"]]
    p2 = [p for g in o2.param_groups for p in g["params"]]
    assert len(p1) == len(p2)
    n = 0
    for a, b in zip(p1, p2):
        assert (a in o1.state) == (b in o2.state)
        if a not in o1.state:
            continue
        sa, sb = o1.state[a], o2.state[b]
        assert sorted(sa) == sorted(sb)
        for k in sa:
            assert isinstance(sb[k], tg.Tensor) == isinstance(sa[k], tg.Tensor)
            assert_same(sa[k], sb[k], f"state[{k}]")
            n += 1
    return n


class no_break(warnings.catch_warnings):
    """A CompileWarning (a fallback to eager) is an error inside this block."""

    def __enter__(self):
        r = super().__enter__()
        warnings.simplefilter("error", tg.CompileWarning)
        return r


def batches(n, batch=16, nin=8, ncls=3, seed=0, dtype=np.float32, regression=False):
    """n (x, y) batches; class labels come from a fixed random linear teacher (so a
    model can learn them)."""
    rng = np.random.default_rng(seed)
    teacher = np.random.default_rng(1234).standard_normal((nin, ncls))
    out = []
    for _ in range(n):
        xa = rng.standard_normal((batch, nin)).astype(dtype)
        x = tg.tensor(xa)
        if regression:
            y = tg.tensor(rng.standard_normal((batch, ncls)).astype(dtype))
        else:
            y = tg.tensor((xa @ teacher).argmax(1).astype(np.int64))
        out.append((x, y))
    return out


def mlp(sizes, seed=0, act=nn.ReLU, dropout=0.0, bn=False, dtype=None):
    tg.manual_seed(seed)
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            if bn:
                layers.append(nn.BatchNorm1d(b))
            layers.append(act())
            if dropout:
                layers.append(nn.Dropout(dropout))
    m = nn.Sequential(*layers)
    return m.to(dtype) if dtype is not None else m


def train_step(model, opt, loss_fn=F.cross_entropy):
    def step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def mem():
    gc.collect()
    E.flush()
    s = E.stats()
    return {k: s[k] for k in MEM_KEYS}


class Setup:
    """A model, an optimizer and a step over them (a closure), built deterministically."""

    def __init__(self, sizes=(8, 16, 3), seed=0, bn=False, opt="sgd", dtype=None):
        self.model = mlp(sizes, seed=seed, bn=bn, dtype=dtype)
        if opt == "sgd":
            self.opt = optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
        elif opt == "plain":
            self.opt = optim.SGD(self.model.parameters(), lr=0.05)
        elif opt == "adam":
            self.opt = optim.Adam(self.model.parameters(), lr=0.01)
        else:
            self.opt = opt(self.model)
        self.step = train_step(self.model, self.opt)


class Twins:
    """The same Setup twice: `e` stepped eagerly, `c` through tapegrad.compile. Every
    call runs both with the same arguments and compares results, parameters and
    optimizer state bitwise. (No dropout here: both draw from one generator.)"""

    def __init__(self, make=Setup, fn=lambda s: s.step, **kw):
        self.e, self.c = make(**kw), make(**kw)
        self.fe, self.fc = fn(self.e), compile_(fn(self.c))

    def __call__(self, *args, breaks_ok=False, **kwargs):
        # (eager first: its first step creates optimizer state, a structural change the
        # compiled twin must see before it records - see test_no_op_structural_change...)
        re_ = self.fe(*args, **kwargs)
        if breaks_ok:
            rc = self.fc(*args, **kwargs)
        else:
            with no_break():
                rc = self.fc(*args, **kwargs)
        assert_same(re_, rc, "result")
        assert_models_same(self.e.model, self.c.model)
        assert_opt_state_same(self.e.opt, self.c.opt)
        return rc

    def both(self, change):
        change(self.e)
        change(self.c)

    @property
    def stats(self):
        return dict(self.fc.stats)


# ============================================================ 1. long run equals eager
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


# ============================================================ 2. optimizers, BN, dropout
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


# ============================================================ 3. lr scheduler outside
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


# ============================================================ 4. guards
LR = 0.1            # a module-level number read by _manual_sgd_step: a guard


def _manual_sgd_step(x, y):
    model = GLOBAL_SETUP.model
    model.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    with tg.no_grad():
        for p in model.parameters():
            p -= LR * p.grad
    return loss


GLOBAL_SETUP = None


def test_guard_global_python_float():
    """A global float read inside the function (manual SGD's lr) is baked into the
    recording, so changing it re-records; the same value again reuses the first plan."""
    global LR, GLOBAL_SETUP
    data = batches(8, seed=5)
    ref = Setup(seed=2)
    GLOBAL_SETUP = Setup(seed=2)
    c = compile_(_manual_sgd_step)
    lrs = [0.1, 0.1, 0.02, 0.02, 0.1, 0.3, 0.3, 0.02]
    expected_recordings = [1, 1, 2, 2, 2, 3, 3, 3]
    try:
        for (x, y), lr, nrec in zip(data, lrs, expected_recordings):
            LR = lr
            with no_break():
                lc = c(x, y)
            # eager reference: the same manual step on `ref`
            ref.model.zero_grad()
            le = F.cross_entropy(ref.model(x), y)
            le.backward()
            with tg.no_grad():
                for p in ref.model.parameters():
                    p -= lr * p.grad
            assert_same(le, lc)
            assert_models_same(ref.model, GLOBAL_SETUP.model)
            assert c.stats["recordings"] == nrec
        assert c.stats["replays"] == 5
    finally:
        LR = 0.1


def test_guard_closure_number():
    def make(model):
        lr = 0.1

        def set_lr(v):
            nonlocal lr
            lr = v

        def step(x, y):
            model.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            with tg.no_grad():
                for p in model.parameters():
                    p -= lr * p.grad
            return loss
        return step, set_lr
    me, mc = mlp((8, 16, 3), seed=1), mlp((8, 16, 3), seed=1)
    se, set_e = make(me)
    sc, set_c = make(mc)
    c = compile_(sc)
    data = batches(6, seed=6, regression=True)
    for i, (x, y) in enumerate(data):
        v = 0.1 if i < 2 else 0.01
        set_e(v)
        set_c(v)
        with no_break():
            lc = c(x, y)
        assert_same(se(x, y), lc)
        assert_models_same(me, mc)
    assert c.stats == {"recordings": 2, "replays": 4}


def test_guard_grad_mode():
    m = mlp((8, 16, 3), seed=1)
    f = compile_(lambda x: m(x))
    data = batches(6, seed=1)
    modes = [True, True, False, False, True, False]
    for (x, _), grad in zip(data, modes):
        with tg.set_grad_enabled(grad), no_break():
            rc = f(x)
        with tg.set_grad_enabled(grad):
            re_ = m(x)
        assert_same(re_, rc)
        assert rc.requires_grad is re_.requires_grad is grad
        assert (rc.grad_fn is None) is (not grad)
    assert f.stats == {"recordings": 2, "replays": 4}


def test_guard_argument_shape_dtype_and_back():
    f = compile_(lambda x, w: ((x * w).sum(1) ** 2).mean())
    rng = np.random.default_rng(0)
    seq = [(4, np.float32), (4, np.float32), (7, np.float32), (7, np.float32),
           (4, np.float64), (4, np.float64), (4, np.float32)]
    recs = [1, 1, 2, 2, 3, 3, 3]
    for (n, dt), nrec in zip(seq, recs):
        x = tg.tensor(rng.standard_normal((n, 5)).astype(dt))
        w = tg.tensor(rng.standard_normal(5).astype(dt))
        with no_break():
            rc = f(x, w)
        assert_same(((x * w).sum(1) ** 2).mean(), rc)
        assert rc.dtype == x.dtype
        assert f.stats["recordings"] == nrec
    assert f.stats["replays"] == 4
    assert len(f.plans) == 3


def _square_sum_backward(x):
    """(x * x).sum(), backpropagated when it requires grad."""
    y = (x * x).sum()
    if y.requires_grad:
        y.backward()
    return y


def test_guard_argument_requires_grad_and_is_leaf():
    f = compile_(_square_sum_backward)
    rng = np.random.default_rng(1)

    def arg(kind):
        a = rng.standard_normal((3, 4)).astype(np.float32)
        if kind == "plain":
            return tg.tensor(a), None
        leaf = tg.tensor(a, requires_grad=True)
        return (leaf, leaf) if kind == "leaf" else (leaf * 1.0, leaf)
    seq = ["plain", "plain", "leaf", "leaf", "nonleaf", "nonleaf", "plain", "leaf"]
    recs = [1, 1, 2, 2, 3, 3, 3, 3]
    args = [arg(kind) for kind in seq]
    for kind, nrec, (x, leaf) in zip(seq, recs, args):
        with no_break():
            rc = f(x)
        assert f.stats["recordings"] == nrec, kind
        assert rc.requires_grad is (kind != "plain")
        np.testing.assert_array_equal(arr(rc), arr((x.detach() * x.detach()).sum()))
        if leaf is not None:
            assert_same(leaf.grad, 2 * arr(leaf))   # the gradient reached the leaf
    assert f.stats["replays"] == 5


def test_guard_non_tensor_arguments():
    class Cfg:
        pass
    a, b = Cfg(), Cfg()
    a.k, b.k = 2.0, 3.0

    def fn(x, scale, reduction, flag, extra, cfg):
        y = F.mse_loss(x * scale, x * 0.5, reduction=reduction)
        if flag:
            y = y * 2
        if extra is not None:
            y = y + extra
        return y * cfg.k
    f = compile_(fn)
    x = tg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    calls = [
        ((2.0, "mean", False, None, a), 1),
        ((2.0, "mean", False, None, a), 1),
        ((3.0, "mean", False, None, a), 2),     # float by value
        ((3, "mean", False, None, a), 3),       # int 3 is not float 3.0
        ((3.0, "sum", False, None, a), 4),      # str
        ((3.0, "sum", True, None, a), 5),       # bool
        ((3.0, "sum", True, 1.5, a), 6),        # None -> float
        ((3.0, "sum", True, 1.5, b), 7),        # another object (by identity)
        ((2.0, "mean", False, None, a), 7),     # the first plan again
        ((3.0, "sum", True, 1.5, b), 7),
    ]
    for args, nrec in calls:
        with no_break():
            rc = f(x, *args)
        assert_same(fn(x, *args), rc)
        assert f.stats["recordings"] == nrec, args
    assert f.stats["replays"] == 3


def test_guard_parameter_replaced_by_a_new_parameter():
    def manual(s):
        def step(x, y):
            s.model.zero_grad()
            loss = F.cross_entropy(s.model(x), y)
            loss.backward()
            with tg.no_grad():
                for p in s.model.parameters():
                    p -= 0.1 * p.grad
            return loss
        return step
    t = Twins(fn=manual, opt="plain")
    data = batches(6, seed=7)
    t(*data[0])
    t(*data[1])
    w = np.random.default_rng(3).standard_normal((16, 8)).astype(np.float32)
    t.both(lambda s: setattr(s.model[0], "weight", nn.Parameter(tg.tensor(w))))
    t(*data[2])
    assert t.stats["recordings"] == 2
    t(*data[3])
    t(*data[4])
    assert t.stats == {"recordings": 2, "replays": 3}
    assert not np.array_equal(arr(t.c.model[0].weight), w)     # the new one was trained


def test_guard_parameter_data_swapped():
    """`p.data = other` gives the parameter a new tensor id: a guard."""
    t = Twins(opt="plain")
    data = batches(5, seed=8)
    t(*data[0])
    t(*data[1])
    w = np.full((3, 16), 0.01, np.float32)
    t.both(lambda s: setattr(s.model[2].weight, "data", tg.tensor(w)))
    t(*data[2])
    t(*data[3])
    assert t.stats == {"recordings": 2, "replays": 2}


def test_guard_module_to_float64():
    t = Twins(opt="plain")
    data32 = batches(3, seed=9)
    data64 = batches(3, seed=9, dtype=np.float64)
    t(*data32[0])
    t(*data32[1])
    t.both(lambda s: s.model.to(tg.float64))
    r = t(*data64[0])
    assert r.dtype == tg.float64 and t.c.model[0].weight.dtype == tg.float64
    t(*data64[1])
    t(*data64[2])
    assert t.stats == {"recordings": 2, "replays": 3}


def test_guard_parameter_requires_grad():
    t = Twins()
    data = batches(7, seed=10)
    t(*data[0])
    t(*data[1])
    t.both(lambda s: s.model[0].weight.requires_grad_(False))
    frozen = arr(t.c.model[0].weight)
    t(*data[2])
    assert t.stats["recordings"] == 2
    t(*data[3])
    assert_same(frozen, t.c.model[0].weight)     # not trained while frozen
    assert t.stats == {"recordings": 2, "replays": 2}
    t.both(lambda s: s.model[0].weight.requires_grad_(True))
    t(*data[4])
    t(*data[5])
    assert not np.array_equal(frozen, arr(t.c.model[0].weight))
    assert t.stats["replays"] >= 3


def test_guard_buffer_identity():
    t = Twins(bn=True, sizes=(8, 16, 3))
    data = batches(6, seed=11)
    t(*data[0])
    t(*data[1])
    t.both(lambda s: setattr(s.model[1], "running_mean", tg.full((16,), 0.5)))
    t(*data[2])
    assert t.stats["recordings"] == 2
    t(*data[3])
    assert t.stats == {"recordings": 2, "replays": 2}
    rm = arr(t.c.model[1].running_mean)
    assert not np.allclose(rm, 0.5)                 # the new buffer was updated
    assert int(t.c.model[1].num_batches_tracked.item()) == 4


def test_guard_training_flag():
    t = Twins(bn=True)
    data = batches(8, seed=12)
    t(*data[0])
    t(*data[1])
    t.both(lambda s: s.model.eval())
    rm = arr(t.c.model[1].running_mean)
    t(*data[2])
    assert t.stats["recordings"] == 2
    t(*data[3])
    assert_same(rm, t.c.model[1].running_mean)      # eval: running stats not updated
    assert t.stats == {"recordings": 2, "replays": 2}
    t.both(lambda s: s.model.train())
    t(*data[4])
    t(*data[5])
    assert not np.array_equal(rm, arr(t.c.model[1].running_mean))
    assert int(t.c.model[1].num_batches_tracked.item()) == 4


def test_guard_submodule_training_flag():
    t = Twins(bn=True)
    data = batches(5, seed=13)
    t(*data[0])
    t(*data[1])
    t.both(lambda s: s.model[1].eval())     # one layer only
    t(*data[2])
    t(*data[3])
    assert t.stats == {"recordings": 2, "replays": 2}


def test_guard_optimizer_load_state_dict():
    t = Twins(opt="adam")
    data = batches(8, seed=14)
    for x, y in data[:3]:
        t(x, y)
    saved = {}
    t.both(lambda s: saved.__setitem__(id(s), s.opt.state_dict()))
    t(*data[3])
    t(*data[4])
    assert t.stats == {"recordings": 1, "replays": 4}
    t.both(lambda s: s.opt.load_state_dict(saved[id(s)]))
    t(*data[5])
    assert t.stats["recordings"] == 2
    t(*data[6])
    t(*data[7])
    assert t.stats == {"recordings": 2, "replays": 6}
    assert float(t.c.opt.state[t.c.model[0].weight]["step"].item()) == 6.0


def test_guard_optimizer_add_param_group():
    def make(**kw):
        s = Setup(**kw)
        s.opt = optim.SGD(s.model[2].parameters(), lr=0.05, momentum=0.9)
        s.step = train_step(s.model, s.opt)
        return s
    t = Twins(make=make)
    data = batches(6, seed=15)
    w0 = arr(t.c.model[0].weight)
    t(*data[0])
    t(*data[1])
    assert_same(w0, t.c.model[0].weight)           # not in the optimizer yet
    t.both(lambda s: s.opt.add_param_group({"params": list(s.model[0].parameters()),
                                            "lr": 0.2}))
    t(*data[2])
    assert t.stats["recordings"] == 2
    t(*data[3])
    t(*data[4])
    assert not np.array_equal(w0, arr(t.c.model[0].weight))
    assert t.stats == {"recordings": 2, "replays": 3}


def test_guard_global_module_and_optimizer():
    """A function reaching its model and optimizer through module globals."""
    global GLOBAL_SETUP
    ref = Setup(seed=4, bn=True)
    GLOBAL_SETUP = Setup(seed=4, bn=True)
    c = compile_(_global_step)
    data = batches(6, seed=16)
    for i, (x, y) in enumerate(data):
        if i == 3:
            ref.model.eval()
            GLOBAL_SETUP.model.eval()
        le = ref.step(x, y)     # (eager first: see test_no_op_structural_change...)
        with no_break():
            lc = c(x, y)
        assert_same(le, lc)
        assert_models_same(ref.model, GLOBAL_SETUP.model)
    assert c.stats == {"recordings": 2, "replays": 4}


def _global_step(x, y):
    GLOBAL_SETUP.opt.zero_grad()
    loss = F.cross_entropy(GLOBAL_SETUP.model(x), y)
    loss.backward()
    GLOBAL_SETUP.opt.step()
    return loss


def test_guard_bound_method_self():
    class Trainer:
        def __init__(self):
            self.model = mlp((8, 16, 3), seed=6, bn=True)
            self.opt = optim.Adam(self.model.parameters(), lr=0.01)

        def step(self, x, y):
            self.opt.zero_grad()
            loss = F.cross_entropy(self.model(x), y)
            loss.backward()
            self.opt.step()
            return loss
    te, tc = Trainer(), Trainer()
    c = compile_(tc.step)
    data = batches(6, seed=17)
    for i, (x, y) in enumerate(data):
        if i == 3:
            te.model.eval()
            tc.model.eval()
        le = te.step(x, y)
        with no_break():
            lc = c(x, y)
        assert_same(le, lc)
    assert_models_same(te.model, tc.model)
    assert_opt_state_same(te.opt, tc.opt)
    assert c.stats == {"recordings": 2, "replays": 4}


def test_guard_module_passed_as_argument():
    me, mc = mlp((8, 16, 3), seed=8, bn=True), mlp((8, 16, 3), seed=8, bn=True)

    def fwd(x, model):
        return model(x).sum()
    f = compile_(fwd)
    x = batches(1, seed=1)[0][0]
    for i in range(5):
        if i == 2:
            me.eval()
            mc.eval()
        with no_break():
            rc = f(x, mc)
        assert_same(fwd(x, me), rc)
    assert f.stats == {"recordings": 2, "replays": 3}


def test_guard_module_passed_as_keyword_argument():
    me, mc = mlp((8, 16, 3), seed=8, bn=True), mlp((8, 16, 3), seed=8, bn=True)

    def fwd(x, model=None):
        return model(x).sum()
    f = compile_(fwd)
    x = batches(1, seed=1)[0][0]
    for i in range(4):
        if i == 2:
            me.eval()
            mc.eval()
        with no_break():
            rc = f(x, model=mc)
        assert_same(fwd(x, model=me), rc)
    assert f.stats["recordings"] == 2


def test_guard_leaf_hook_registered_outside():
    """Whether leaves have hooks is a guard: a hook registered between calls re-records,
    and the results (hook applied) equal eager's."""
    t = Twins()
    data = batches(6, seed=18)
    t(*data[0])
    t(*data[1])
    handles = []
    t.both(lambda s: handles.append(s.model[0].weight.register_hook(lambda g: g * 0.5)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tg.CompileWarning)
        t(*data[2], breaks_ok=True)
        assert t.stats["recordings"] == 2
        t(*data[3], breaks_ok=True)
        for h in handles:
            h.remove()
        t(*data[4], breaks_ok=True)
        t(*data[5], breaks_ok=True)


def test_hooks_on_leaves_outside_the_graph_do_not_break_a_replay():
    """A hooked leaf the step never reaches leaves the step compiled; a hook added on an
    argument later re-records (the hook's leaf is reached: eager, with the hook run)."""
    other = tg.tensor([1.0, 2.0], requires_grad=True)
    other.register_hook(lambda g: g * 2.0)
    w = tg.tensor([0.5, -1.0, 2.0], requires_grad=True)

    def step(x):
        loss = (x * w).tanh().sum()
        loss.backward()
        return loss

    c = compile_(step)
    with no_break():
        for _ in range(3):
            w.grad = None
            c(tg.tensor([1.0, 2.0, 3.0], requires_grad=True))
    assert c.stats == {"recordings": 1, "replays": 2}
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x.register_hook(lambda g: g * 10.0)
    with pytest.warns(tg.CompileWarning, match="hooks run during backward"):
        c(x)
    ref = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (ref * w).tanh().sum().backward()
    assert_same(x.grad, ref.grad * 10.0)


def test_hooked_leaf_that_died_does_not_change_the_key_at_the_next_collection():
    """A dead leaf's hooks stay in the hook table until a garbage collection prunes them;
    the guard key counts live hooked leaves only, so when that happens does not matter
    (it made a test of this file re-record depending on the collector's timing)."""
    hooked = tg.tensor([1.0], requires_grad=True)
    hooked.register_hook(lambda g: g)
    del hooked
    s = Setup()
    c = compile_(s.step)
    gc.disable()
    try:
        for i, (x, y) in enumerate(batches(6, seed=23)):
            if i == 3:
                gc.collect()            # prunes the dead leaf's entry
            with no_break():
                c(x, y)
    finally:
        gc.enable()
    assert c.stats == {"recordings": 1, "replays": 5}


@pytest.mark.parametrize("noop", ["train", "new_module", "other_optimizer_first_step",
                                  "requires_grad_argument"])
def test_no_op_structural_change_does_not_rerecord(noop):
    s = Setup(bn=True)
    c = compile_(s.step)
    other = Setup(opt="adam")
    data = batches(6, seed=19)
    for i, (x, y) in enumerate(data):
        if noop == "train":
            s.model.train()                     # the usual first line of an epoch loop
        elif noop == "new_module":
            nn.Linear(2, 2)                     # e.g. building something else
        elif noop == "other_optimizer_first_step" and i == 1:
            other.step(x, y)                    # another model's first Adam step
        elif noop == "requires_grad_argument":
            x = tg.tensor(arr(x), requires_grad=True)   # e.g. adversarial inputs
        with no_break():
            c(x, y)
    assert c.stats == {"recordings": 1, "replays": 5}


def test_train_eval_toggle_reuses_plans():
    t = Twins(bn=True)
    data = batches(8, seed=20)
    for i, (x, y) in enumerate(data):
        t.both(lambda s: s.model.train(i % 2 == 0))
        t(x, y)
    assert t.stats == {"recordings": 2, "replays": 6}


def test_same_tensor_passed_twice_then_two_tensors():
    def fn(u, v):
        return u * 2 + v
    f = compile_(fn)
    rng = np.random.default_rng(0)
    a = tg.tensor(rng.standard_normal((4, 3)).astype(np.float32))
    b = tg.tensor(rng.standard_normal((4, 3)).astype(np.float32))
    with no_break():
        assert_same(fn(a, a), f(a, a))
        assert_same(fn(a, b), f(a, b))


def test_alternating_argument_shapes_find_their_own_plans():
    # a call first tries the last replayed plan (its argument guards are checked in the
    # compiled call); a miss there must find the other plan, not record again
    f = compile_(lambda x, w: ((x * w).sum(1) ** 2).mean())
    rng = np.random.default_rng(5)
    xs = {n: tg.tensor(rng.standard_normal((n, 5)).astype(np.float32)) for n in (4, 7)}
    w = tg.tensor(rng.standard_normal(5).astype(np.float32))
    with no_break():
        for i in range(8):
            x = xs[(4, 7)[i % 2]]
            assert_same(((x * w).sum(1) ** 2).mean(), f(x, w))
    assert f.stats == {"recordings": 2, "replays": 6}


def test_same_tensor_twice_alternating_with_two_tensors():
    def fn(u, v):
        u.mul_(0.5)             # with u is v, v sees the write
        return (u * v).sum()
    f = compile_(fn)
    rng = np.random.default_rng(6)
    vals = rng.standard_normal((2, 4, 3)).astype(np.float32)
    a, b = tg.tensor(vals[0]), tg.tensor(vals[1])
    ea, eb = tg.tensor(vals[0]), tg.tensor(vals[1])
    with no_break():
        for pair, eager_pair in [((a, a), (ea, ea)), ((a, b), (ea, eb))] * 3:
            assert_same(fn(*eager_pair), f(*pair))
            assert_same(eager_pair[0], pair[0])
    assert f.stats == {"recordings": 2, "replays": 4}


def test_requires_grad_of_the_same_argument_switched_between_replays():
    # the same tensor (same id) with other flags: the compiled guard check sees it
    f = compile_(_square_sum_backward)
    x = tg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    with no_break():
        for grad, nrec in [(False, 1), (False, 1), (True, 2), (True, 2), (False, 2),
                           (True, 2)]:
            x.requires_grad_(grad)
            x.grad = None
            y = f(x)
            assert f.stats["recordings"] == nrec
            assert y.requires_grad is grad
            if grad:
                assert_same(x.grad, 2 * arr(x))
            else:
                assert x.grad is None
    assert f.stats["replays"] == 4


def test_more_tensor_arguments_than_the_last_replay_had():
    def fn(*xs):
        out = xs[0] * 1.0
        for x in xs[1:]:
            out = out + x
        return out
    f = compile_(fn)
    a, b, c = (tg.tensor([float(v)]) for v in (1, 10, 100))
    with no_break():
        for xs, want in [((a, b), 11.0), ((a, b), 11.0), ((a, b, c), 111.0),
                         ((a, b, c), 111.0), ((a, b), 11.0), ((b,), 10.0)]:
            assert arr(f(*xs)) == want
    assert f.stats == {"recordings": 3, "replays": 3}


def test_closure_variable_bound_after_the_first_call():
    # reading the closure must survive an unbound cell (the call then fails as eager)
    def make():
        def fn(x):
            return x * scale
        f = compile_(fn)
        with pytest.raises(NameError, match="scale"):
            f(tg.ones(2))
        scale = 3.0
        return f
    f = make()
    with no_break():
        assert arr(f(tg.ones(2))).tolist() == [3.0, 3.0]
        assert arr(f(tg.full((2,), 2.0))).tolist() == [6.0, 6.0]
    assert f.stats == {"recordings": 2, "replays": 1}


def test_list_member_replaced_between_replays():
    ws = [tg.tensor([1.0, 2.0, 3.0])]
    f = compile_(lambda x: (x * ws[0]).sum())
    x = tg.tensor([1.0, 1.0, 1.0])
    with no_break():
        assert arr(f(x)) == 6.0
        assert arr(f(x)) == 6.0
        ws[0] = tg.tensor([0.0, 0.0, 5.0])
        assert arr(f(x)) == 5.0
        assert arr(f(x)) == 5.0
    assert f.stats == {"recordings": 2, "replays": 2}


def test_dict_value_and_object_attribute_replaced_between_replays():
    class Cfg:
        pass
    cfg = Cfg()
    cfg.w = tg.tensor([1.0, 2.0, 3.0])
    table = {"v": tg.tensor([1.0, 0.0, 0.0])}
    f = compile_(lambda x: (x * cfg.w + table["v"]).sum())
    x = tg.tensor([1.0, 1.0, 1.0])
    with no_break():
        assert arr(f(x)) == 7.0
        assert arr(f(x)) == 7.0
        cfg.w = tg.tensor([0.0, 0.0, 5.0])          # an attribute rebound
        assert arr(f(x)) == 6.0
        table["v"] = tg.tensor([0.0, 0.0, 2.0])     # a dict value rebound
        assert arr(f(x)) == 7.0
        cfg.extra = 1                                # an attribute added
        assert arr(f(x)) == 7.0
        assert arr(f(x)) == 7.0
    assert f.stats == {"recordings": 4, "replays": 2}


def test_two_optimizers_hyperparameters_changed_between_replays():
    """Each optimizer's group is read on every replayed call (SGD's values by name, Adam's
    through its own reader): a change to either takes effect at once, as in eager."""
    res = []
    for compiled in (False, True):
        w1 = tg.tensor([1.0, -2.0, 0.5], requires_grad=True)
        w2 = tg.tensor([0.3, 0.2, -1.0], requires_grad=True)
        o1 = optim.SGD([w1], lr=0.1, momentum=0.5)
        o2 = optim.Adam([w2], lr=0.05)

        def step(x):
            o1.zero_grad()
            o2.zero_grad()
            loss = ((x * w1).tanh() * w2).sum()
            loss.backward()
            o1.step()
            o2.step()
            return loss
        f = compile_(step) if compiled else step
        losses = []
        with no_break():
            for i in range(6):
                if i == 2:
                    o1.param_groups[0]["lr"] = 0.02
                if i == 4:
                    o2.param_groups[0]["betas"] = (0.5, 0.9)
                    o1.param_groups[0]["momentum"] = 0.0
                losses.append(arr(f(tg.tensor([1.0, 0.5, -1.0]) * (i + 1))).item())
        if compiled:
            assert f.stats == {"recordings": 1, "replays": 5}
        res.append((losses, arr(w1).tolist(), arr(w2).tolist()))
    assert res[0] == res[1]


def test_manual_zeroing_when_grad_exists():
    def make(model):
        def step(x, y):
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.zero_()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            with tg.no_grad():
                for p in model.parameters():
                    p -= 0.1 * p.grad
            return loss
        return step
    me, mc = mlp((8, 16, 3), seed=2), mlp((8, 16, 3), seed=2)
    se, sc = make(me), compile_(make(mc))
    for x, y in batches(4, seed=21, regression=True):
        with no_break():
            lc = sc(x, y)
        assert_same(se(x, y), lc)
        assert_models_same(me, mc)


def test_param_and_input_values_are_not_guards():
    t = Twins()
    data = batches(6, seed=22)
    t(*data[0])
    t(*data[1])
    t.both(lambda s: s.model[0].weight.detach().mul_(0.5))
    t(*data[2])
    sd = t.c.model.state_dict()
    t.both(lambda s: s.model.load_state_dict({k: v * 1.0 for k, v in sd.items()}))
    t(*data[3])
    # the same tensor object with new values
    x, y = data[4]
    t(x, y)
    x.detach().add_(1.0)
    t(x, y)
    assert t.stats == {"recordings": 1, "replays": 5}


REBIND_MODEL = None
REBIND_W = None


def _rebind_fwd(x):
    return REBIND_MODEL(x) * REBIND_W


@pytest.mark.parametrize("what", ["global_module", "global_tensor", "closure_module"])
def test_guard_rebound_global_or_closure_variable(what):
    global REBIND_MODEL, REBIND_W
    a, b = mlp((8, 3), seed=1), mlp((8, 3), seed=2)
    REBIND_MODEL, REBIND_W = a, tg.tensor([1.0, 2.0, 3.0])
    holder = a

    def closure_fwd(x):
        return holder(x) * 2.0
    f = compile_(closure_fwd if what == "closure_module" else _rebind_fwd)
    x = batches(1, seed=66)[0][0]
    try:
        with no_break():
            f(x)
            f(x)
            if what == "global_module":
                REBIND_MODEL = b
            elif what == "global_tensor":
                REBIND_W = tg.tensor([-1.0, 0.5, 4.0])
            else:
                holder = b
            want = closure_fwd(x) if what == "closure_module" else _rebind_fwd(x)
            assert_same(want, f(x))
    finally:
        REBIND_MODEL = REBIND_W = None


class _Scale:
    __slots__ = ("factor",)

    def __init__(self, factor):
        self.factor = factor


def test_guard_identity_of_a_new_object_at_a_reused_address():
    def fn(x, cfg):
        return x * cfg.factor
    f = compile_(fn)
    x = tg.ones(3)
    got = []
    for j in range(1, 11):
        cfg = _Scale(float(j))
        with no_break():
            got.append(arr(f(x, cfg))[0])
        del cfg
    assert got == [float(j) for j in range(1, 11)]


step = 0        # a module-level loop counter named like a method the function calls


def _step_calls_opt_step(x, y):
    GLOBAL_SETUP.opt.zero_grad()
    loss = F.cross_entropy(GLOBAL_SETUP.model(x), y)
    loss.backward()
    GLOBAL_SETUP.opt.step()
    return loss


def test_global_named_like_an_attribute_is_not_a_guard():
    global step, GLOBAL_SETUP
    GLOBAL_SETUP = Setup(seed=3)
    ref = Setup(seed=3)
    c = compile_(_step_calls_opt_step)
    try:
        for step, (x, y) in enumerate(batches(5, seed=57)):
            le = ref.step(x, y)
            with no_break():
                assert_same(le, c(x, y))
        assert c.stats == {"recordings": 1, "replays": 4}
    finally:
        step = 0


@pytest.mark.parametrize("name,kw,change", [
    ("SGD", dict(lr=0.1, momentum=0.9), dict(nesterov=True)),
    ("SGD", dict(lr=0.1, momentum=0.9), dict(weight_decay=0.1, dampening=0.5)),
    ("Adam", dict(lr=0.01), dict(betas=(0.5, 0.9), eps=1e-3, weight_decay=0.1)),
    ("AdamW", dict(lr=0.01), dict(maximize=True, weight_decay=0.5)),
    ("RMSprop", dict(lr=0.01), dict(alpha=0.5, eps=1e-4)),
    ("Adagrad", dict(lr=0.05), dict(lr_decay=0.1, weight_decay=0.01)),
], ids=["sgd-nesterov", "sgd-wd-dampening", "adam-betas-eps-wd", "adamw-maximize",
        "rmsprop-alpha", "adagrad-decay"])
def test_optimizer_hyperparameters_changed_outside_are_not_guards(name, kw, change):
    t = Twins(opt=lambda m: getattr(optim, name)(m.parameters(), **kw))
    data = batches(6, seed=58)
    for i, (x, y) in enumerate(data):
        if i == 3:
            t.both(lambda s: s.opt.param_groups[0].update(change))
        t(x, y)
    assert t.stats == {"recordings": 1, "replays": 5}


@pytest.mark.parametrize("name,kw,change", [
    ("SGD", dict(lr=0.1), dict(momentum=0.9)),
    ("Adam", dict(lr=0.01), dict(amsgrad=True)),
    ("RMSprop", dict(lr=0.01), dict(momentum=0.9)),
    ("RMSprop", dict(lr=0.01), dict(centered=True)),
], ids=["sgd-momentum", "adam-amsgrad", "rmsprop-momentum", "rmsprop-centered"])
def test_optimizer_option_needing_new_state_switched_on(name, kw, change):
    data = batches(6, seed=59)
    res = []
    for compiled in (False, True):       # separate runs: nothing else touches the objects
        s = Setup(opt=lambda m: getattr(optim, name)(m.parameters(), **kw))
        f = compile_(s.step) if compiled else s.step
        out = []
        with no_break():
            for i, (x, y) in enumerate(data):
                if i == 3:
                    s.opt.param_groups[0].update(change)
                out.append(f(x, y))
        res.append((out, s))
    assert_same(res[0][0], res[1][0])
    assert_models_same(res[0][1].model, res[1][1].model)
    assert_opt_state_same(res[0][1].opt, res[1][1].opt)


@pytest.mark.parametrize("layout", ["transposed", "expanded", "strided"])
def test_noncontiguous_argument_after_contiguous_recording(layout):
    m = mlp((8, 16, 3), seed=1)

    def fwd(x):
        return m(x).softmax(1), x * 2
    f = compile_(fwd)
    rng = np.random.default_rng(60)
    x0 = tg.tensor(rng.standard_normal((16, 8)).astype(np.float32))
    with no_break():
        f(x0)
        f(x0)
    x = {"transposed": lambda: tg.tensor(rng.standard_normal((8, 16)).astype(np.float32)).t(),
         "expanded": lambda: tg.tensor(rng.standard_normal((1, 8)).astype(np.float32)
                                       ).expand(16, 8),
         "strided": lambda: tg.tensor(rng.standard_normal((16, 16)).astype(np.float32)
                                      )[:, ::2]}[layout]()
    assert not x.is_contiguous() and tuple(x.shape) == (16, 8)
    with no_break():
        rc = f(x)
    assert_same(fwd(x), rc)


def test_view_argument_with_offset():
    m = mlp((8, 16, 3), seed=1)
    f = compile_(lambda x: m(x) * 1.0)
    big = tg.tensor(np.random.default_rng(61).standard_normal((40, 8)).astype(np.float32))
    with no_break():
        for i in range(4):
            x = big[i * 8:i * 8 + 16]           # contiguous views at offsets
            assert_same(m(x) * 1.0, f(x))
    assert f.stats == {"recordings": 1, "replays": 3}


def test_plan_cache_evicts_and_kept_outputs_survive():
    m = nn.Linear(3, 2)

    def fn(x):
        return m(x) * 2.0
    f = compile_(fn)
    rng = np.random.default_rng(5)
    kept = []
    with no_break():
        for rnd in range(2):
            for n in range(1, 11):                  # 10 shapes > the cache of 8 plans
                for _ in range(2):
                    x = tg.tensor(rng.standard_normal((n, 3)).astype(np.float32))
                    kept.append((f(x), arr(fn(x))))
    assert len(f.plans) <= 8
    assert f.stats["recordings"] + f.stats["replays"] == 40
    assert f.stats["replays"] >= 10
    for got, want in kept:
        assert_same(want, got)


# ============================================================ 5. graph breaks
class Square(tg.autograd.Function):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return a * a

    @staticmethod
    def backward(ctx, g):
        a, = ctx.saved_tensors
        return 2 * a * g


def _b_item(m, o):
    def f(x, y):
        o.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        o.step()
        return loss.item()  # LINE:item
    return f


def _b_tolist(m, o):
    def f(x, y):
        out = m(x)
        vals = out.detach().tolist()  # LINE:tolist
        return out.sum(), vals
    return f


def _b_numpy(m, o):
    def f(x, y):
        out = m(x)
        a = out.detach().numpy().copy()  # LINE:numpy
        return out, a
    return f


def _b_print(m, o):
    def f(x, y):
        loss = F.cross_entropy(m(x), y)
        print(loss)  # LINE:print
        return loss
    return f


def _b_bool(m, o):
    def f(x, y):
        loss = F.cross_entropy(m(x), y)
        if loss > 100.0:  # LINE:bool
            loss = loss * 0.0
        return loss
    return f


def _b_float(m, o):
    def f(x, y):
        loss = F.cross_entropy(m(x), y)
        v = float(loss)  # LINE:float
        return loss * 2.0, v
    return f


def _b_function(m, o):
    def f(x, y):
        o.zero_grad()
        h = Square.apply(m(x))  # LINE:function
        loss = h.mean()
        loss.backward()
        o.step()
        return loss
    return f


def _b_hook(m, o):
    def f(x, y):
        o.zero_grad()
        h = m[0](x)
        h.register_hook(lambda g: g * 3.0)  # LINE:hook
        loss = F.cross_entropy(m[2](m[1](h)), y)
        loss.backward()
        o.step()
        return loss
    return f


def _b_retain(m, o):
    def f(x, y):
        o.zero_grad()
        h = m[0](x)
        h.retain_grad()  # LINE:retain
        loss = F.cross_entropy(m[2](m[1](h)), y)
        loss.backward()
        o.step()
        return loss, h.grad
    return f


def _b_autograd_grad(m, o):
    def f(x, y):
        loss = F.cross_entropy(m(x), y)
        g, = tg.autograd.grad(loss, [m[0].weight])  # LINE:autograd_grad
        return loss, g
    return f


def _b_scheduler(m, o):
    sched = optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5)

    def f(x, y):
        o.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        o.step()
        sched.step()  # LINE:scheduler
        return loss
    return f


def _b_created(maker):
    def build(m, o):
        def f(x, y):
            out = m(x) * maker()  # LINE:created
            return F.cross_entropy(out, y)
        return f
    return build


def _b_intops(m, o):
    def f(x, y):
        y2 = y * 2 - y  # LINE:intops
        return F.cross_entropy(m(x), y2)
    return f


def _b_gradset(m, o):
    def f(x, y):
        o.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        w = m[0].weight
        w.grad = w.grad * 0.5  # LINE:gradset
        o.step()
        return loss
    return f


def _b_index(m, o):
    idx = tg.tensor([0, 2, 2, 1])

    def f(x, y):
        out = m(x)
        sel = out[:4, idx]  # LINE:index
        return F.cross_entropy(sel, y[:4])
    return f


def test_row_gather_with_an_index_tensor_replays():
    """x[idx] with an int64 index tensor checks its indices in the kernel: no break, and
    new index values take effect in the replay."""
    rng = np.random.default_rng(57)
    x = tg.tensor(rng.standard_normal((10, 3)).astype(np.float32), requires_grad=True)
    f = compile_(lambda idx: (x[idx] * 2.0).sum())
    with no_break():
        for _ in range(4):
            idx = tg.tensor(rng.integers(-10, 10, 6))
            assert_same((x[idx] * 2.0).sum(), f(idx))
    assert f.stats == {"recordings": 1, "replays": 3}


def _b_accuracy(m, o):
    def f(x, y):
        out = m(x)
        acc = (out.argmax(1) == y).float().mean()  # LINE:accuracy
        return F.cross_entropy(out, y), acc
    return f


def _b_clip(m, o):
    def f(x, y):
        o.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(m.parameters(), 0.05)  # LINE:clip
        o.step()
        return loss
    return f


def _b_requires_grad(m, o):
    def f(x, y):
        x2 = x.detach()
        x2.requires_grad_(True)  # LINE:requires_grad
        return F.cross_entropy(m(x2), y)
    return f


BREAKS = [
    ("item", _b_item, "item"),
    ("tolist", _b_tolist, "tolist"),
    ("numpy", _b_numpy, "numpy"),
    ("print", _b_print, "print"),
    ("bool", _b_bool, "bool"),
    ("float", _b_float, "float"),
    ("function", _b_function, "function"),
    ("register_hook", _b_hook, "hook"),
    ("retain_grad", _b_retain, "retain"),
    ("autograd_grad", _b_autograd_grad, "autograd_grad"),
    ("scheduler_step", _b_scheduler, "scheduler"),
    ("int_numpy_ops", _b_intops, "intops"),
    ("grad_assign", _b_gradset, "gradset"),
    ("advanced_index", _b_index, "index"),
    ("clip_grad_norm", _b_clip, "clip"),
    ("accuracy_int_ops", _b_accuracy, "accuracy"),
    ("requires_grad_inside", _b_requires_grad, "requires_grad"),
]
CREATED = [      # (made on these lines, used on the LINE:created line)
    ("tensor", lambda: tg.tensor([1.0, 2.0, 0.5])),  # LINE:mk_tensor
    ("zeros", lambda: tg.zeros(3) + 1.0),  # LINE:mk_zeros
    ("ones", lambda: tg.ones(1, 3)),  # LINE:mk_ones
    ("full", lambda: tg.full((3,), 0.5)),  # LINE:mk_full
    ("from_numpy", lambda: tg.from_numpy(np.full(3, 0.5, np.float32))),  # LINE:mk_from_numpy
    ("randn", lambda: tg.randn(3)),  # LINE:mk_randn
]


def _check_break(build):
    data = batches(3, seed=23)
    me, mc = mlp((8, 16, 3), seed=9), mlp((8, 16, 3), seed=9)
    oe = optim.SGD(me.parameters(), lr=0.1, momentum=0.9)
    oc = optim.SGD(mc.parameters(), lr=0.1, momentum=0.9)
    fe, fc = build(me, oe), build(mc, oc)
    c = compile_(fc)
    tg.manual_seed(1)
    re0 = fe(*data[0])
    re1 = fe(*data[1])
    tg.manual_seed(1)
    with pytest.warns(tg.CompileWarning) as rec:
        rc0 = c(*data[0])
    msgs = [str(w.message) for w in rec if issubclass(w.category, tg.CompileWarning)]
    assert len(msgs) == 1, msgs
    assert c.eager is not None
    with no_break():
        rc1 = c(*data[1])
    assert_same(re0, rc0)
    assert_same(re1, rc1)
    assert_models_same(me, mc)
    assert c.stats == {"recordings": 1, "replays": 0}
    return msgs[0], c


@pytest.mark.parametrize("name,build,tag", [
    pytest.param(*b, id=b[0]) if type(b) is tuple else b for b in BREAKS])
def test_graph_break_warns_once_and_stays_eager(name, build, tag):
    msg, c = _check_break(build)
    assert "runs eagerly" in msg
    assert f"test_compile.py:{LINE[tag]}" in msg, msg


@pytest.mark.parametrize("name,maker", CREATED, ids=[c[0] for c in CREATED])
def test_graph_break_tensor_created_inside(name, maker):
    """A tensor made by a creation function inside the step and then used by an op: one
    warning naming where it was made (or used); eager results."""
    msg, c = _check_break(_b_created(maker))
    assert "runs eagerly" in msg
    lines = {LINE["created"], LINE[f"mk_{name}"]}
    assert any(f"test_compile.py:{n}" in msg for n in lines), msg


def test_graph_break_reason_is_in_message():
    msg, c = _check_break(_b_function)
    assert "autograd.Function" in msg and "Square" in msg
    assert isinstance(c.eager, Exception) and "Square" in c.eager.reason
    msg, c = _check_break(_b_scheduler)
    assert "scheduler" in msg
    msg, c = _check_break(_b_hook)
    assert "register_hook" in msg


def test_graph_break_with_steps_k_returns_k_eager_results():
    data = batches(4, seed=24)
    X = tg.tensor(np.stack([arr(x) for x, _ in data]))
    Y = tg.tensor(np.stack([arr(y) for _, y in data]))
    me, mc = mlp((8, 16, 3), seed=9), mlp((8, 16, 3), seed=9)
    oe = optim.SGD(me.parameters(), lr=0.1)
    oc = optim.SGD(mc.parameters(), lr=0.1)
    fe = _b_item(me, oe)
    c = compile_(_b_item(mc, oc), steps=4)
    with pytest.warns(tg.CompileWarning, match="runs eagerly"):
        rc = c(X, Y)
    re_ = [fe(x, y) for x, y in data]
    assert isinstance(rc, list) and len(rc) == 4
    assert rc == re_
    with no_break():
        rc2 = c(X, Y)
    assert rc2 == [fe(x, y) for x, y in data]
    assert_models_same(me, mc)


def test_manual_sgd_through_data_does_not_break():
    def make(model):
        def step(x, y):
            model.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            for p in model.parameters():
                p.data -= 0.1 * p.grad.data
            return loss
        return step
    me, mc = mlp((8, 16, 3), seed=2), mlp((8, 16, 3), seed=2)
    se, sc = make(me), compile_(make(mc))
    for x, y in batches(4, seed=25):
        with no_break():
            lc = sc(x, y)
        assert_same(se(x, y), lc)
    assert_models_same(me, mc)
    assert sc.stats == {"recordings": 1, "replays": 3}


# ============================================================ not breaks
def _nb_manual_nograd(m):
    def f(x, y):
        m.zero_grad(set_to_none=False)
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        with tg.no_grad():
            for p in m.parameters():
                p -= 0.05 * p.grad
        return loss
    return f


def _nb_detach_and_grads(m):
    def f(x, y):
        m.zero_grad()
        out = m(x)
        loss = F.cross_entropy(out, y)
        loss.backward()
        g = [p.grad for p in m.parameters()]
        with tg.no_grad():
            for p, gp in zip(m.parameters(), g):
                p.sub_(0.05 * gp)
        return loss, out.detach(), g[0]
    return f


def _nb_data_update(m):
    def f(x, y):
        m.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        for p in m.parameters():
            p.data.sub_(0.05 * p.grad.data)
        return loss
    return f


@pytest.mark.parametrize("make", [_nb_manual_nograd, _nb_detach_and_grads, _nb_data_update],
                         ids=["no_grad_isub", "detach_grad_reads", "data_sub_"])
def test_manual_sgd_patterns_replay(make):
    me, mc = mlp((8, 16, 3), seed=3), mlp((8, 16, 3), seed=3)
    fe, fc = make(me), compile_(make(mc))
    for x, y in batches(6, seed=26):
        with no_break():
            rc = fc(x, y)
        assert_same(fe(x, y), rc)
        assert_models_same(me, mc)
    assert fc.stats == {"recordings": 1, "replays": 5}


@pytest.mark.parametrize("set_to_none", [True, False])
@pytest.mark.parametrize("who", ["optimizer", "module"])
def test_zero_grad_variants(set_to_none, who):
    def make(m, o):
        def f(x, y):
            (o if who == "optimizer" else m).zero_grad(set_to_none=set_to_none)
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            o.step()
            return loss, m[0].weight.grad
        return f
    me, mc = mlp((8, 16, 3), seed=4), mlp((8, 16, 3), seed=4)
    oe = optim.Adam(me.parameters(), lr=0.01)
    oc = optim.Adam(mc.parameters(), lr=0.01)
    fe, fc = make(me, oe), compile_(make(mc, oc))
    kept_e, kept_c = [], []
    for x, y in batches(6, seed=27):
        re_ = fe(x, y)
        with no_break():
            rc = fc(x, y)
        kept_c.append(rc)
        kept_e.append(re_)
        assert_same(re_, rc)
    assert_same(kept_e, kept_c)      # kept gradients: same aliasing as eager
    assert_models_same(me, mc)
    assert_opt_state_same(oe, oc)
    assert fc.stats == {"recordings": 1, "replays": 5}


# ============================================================ 6. steps=k
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


# ============================================================ 7. return structures
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
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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


# ============================================================ 8. memory
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


# ============================================================ 9. inference / no backward
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


# ============================================================ 10. errors
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


# ============================================================ 11. other training steps
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
        assert "test_compile.py:" in str(cw[0].message)


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
            assert len(msgs) == 1 and f"test_compile.py:{LINE['bn_none']}" in msgs[0]
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
