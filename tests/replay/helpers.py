"""Helpers of the tapegrad.compile tests in this folder: a step recorded once and
replayed in one compiled call, compared with an eager run of an identical setup.

Every replayed result is compared BITWISE with eager (the same kernels run in the same
order, so float32 results must be equal, not close). That holds for replays without
fusion, so these tests compile with fuse=False (`compile_`); fused replays (whose
gradients round differently) are compared with eager in test_fuse.py. Tests that must not
fall back to eager run inside `no_break()`, where a CompileWarning is an error, so a
silent fallback cannot pass for a replay; `stats` says how many recordings and replays
happened. Graph breaks are checked for one warning naming the user's line (found in the
test file by its `# LINE:<tag>` marker, `line_tags`) and for eager-correct results.
Memory is checked with the engine's live counts (`mem()`, flat over replays).
"""
import re
import warnings

import numpy as np

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn, optim
from tests.helpers import engine_stats


def compile_(fn=None, **kw):
    """tg.compile without fusion (see the module docstring)."""
    kw.setdefault("fuse", False)
    return tg.compile(fn, **kw)


MEM_KEYS = ("tensors", "storages", "rows", "bytes")


def line_tags(path):
    """{tag: line number} of the `# LINE:<tag>` markers in the file at path: a graph
    break's warning must name the user's line, which a test finds by its marker."""
    tags = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = re.search(r"# LINE:(\w+)\s*$", line)
            if m:
                tags[m.group(1)] = n
    return tags


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
    s = engine_stats()
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
