"""Graph breaks in tapegrad.compile: Python that reads values (item, tolist, numpy, print,
bool, float), autograd.Function, hooks, retain_grad, autograd.grad, schedulers, tensors
made inside the step... warns once, naming the user's line (its `# LINE:<tag>` marker), and
stays eager with eager's results; manual SGD and zero_grad patterns that need no break
replay.

See tests/replay/helpers.py for how replays are compared with eager.
"""
import os

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn, optim
from tests.replay.helpers import (arr, assert_models_same, assert_opt_state_same, assert_same,
                                  batches, compile_, line_tags, mlp, no_break)

# the markers `# LINE:<tag>` in this file: a graph break's warning names the user's line
LINE = line_tags(__file__)
THIS_FILE = os.path.basename(__file__)


# ============================================================ graph breaks
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
    assert f"{THIS_FILE}:{LINE[tag]}" in msg, msg


@pytest.mark.parametrize("name,maker", CREATED, ids=[c[0] for c in CREATED])
def test_graph_break_tensor_created_inside(name, maker):
    """A tensor made by a creation function inside the step and then used by an op: one
    warning naming where it was made (or used); eager results."""
    msg, c = _check_break(_b_created(maker))
    assert "runs eagerly" in msg
    lines = {LINE["created"], LINE[f"mk_{name}"]}
    assert any(f"{THIS_FILE}:{n}" in msg for n in lines), msg


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
