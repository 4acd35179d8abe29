"""DistributedDataParallel scenarios, run on every rank by tests/distributed/test_ddp.py
(`mpirun -n 2`, and `-n 1` for the single-rank case): each scenario's results go into
one JSON object, printed as the last line. The models and the data are built here by
functions the test imports too, so it computes the single-process references itself.

    python tests/distributed/workers/ddp_scenarios.py [names...]
"""
import json
import sys
import traceback

import numpy as np

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn, optim

STEPS = 4
BATCH = 6           # per rank


# ------------------------------------------------------------ shared with the test
def make_model(kind, seed):
    """The scenario's model, float64, initialised from `seed`."""
    tg.manual_seed(seed)
    if kind == "mlp":
        m = nn.Sequential(nn.Linear(5, 12), nn.Tanh(), nn.Linear(12, 12), nn.ReLU(),
                          nn.Linear(12, 3))
    elif kind == "conv":
        m = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.Flatten(),
                          nn.Linear(4 * 5 * 5, 3))
    elif kind == "lstm":
        m = _EmbedLSTM()
    elif kind == "bn":
        m = nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    else:
        raise ValueError(kind)
    return m.to(tg.float64)


class _EmbedLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.lstm = nn.LSTM(4, 6, batch_first=True)
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        out, _ = self.lstm(self.emb(x))
        return self.head(out[:, -1])


def make_data(kind, world, steps=STEPS, seed=0):
    """Per step: (inputs, labels), each with a leading rank dim of size `world`."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        if kind == "conv":
            x = rng.standard_normal((world, BATCH, 2, 5, 5))
        elif kind == "lstm":
            x = rng.integers(0, 10, (world, BATCH, 7))
        else:
            x = rng.standard_normal((world, BATCH, 5))
        out.append((x, rng.integers(0, 3, (world, BATCH))))
    return out


def make_optimizer(params):
    return optim.SGD(params, lr=0.1, momentum=0.9)


def reference(kind, world, steps=STEPS):
    """One process trained on the ranks' batches concatenated (the model as rank 0 built
    it): its final parameters, as NumPy arrays."""
    m = make_model(kind, seed=1)
    opt = make_optimizer(m.parameters())
    for x, y in make_data(kind, world, steps):
        opt.zero_grad()
        xs = tg.tensor(x.reshape((-1,) + x.shape[2:]))
        F.cross_entropy(m(xs), tg.tensor(y.reshape(-1))).backward()
        opt.step()
    return [p.detach().numpy().copy() for p in m.parameters()]


# ------------------------------------------------------------ scenarios
def _values(ts):
    return [np.asarray(t.detach().numpy()).tolist() for t in ts]


def _train(ddp_cls, kind, rank, world, compiled=False, steps=STEPS):
    m = make_model(kind, seed=1 + rank)     # every rank its own init: the wrap broadcasts
    ddp = ddp_cls(m)
    opt = make_optimizer(ddp.parameters())

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        return loss
    fn = tg.compile(step, fuse=False) if compiled else step
    losses = [fn(tg.tensor(x[rank]), tg.tensor(y[rank])).item()
              for x, y in make_data(kind, world, steps)]
    return m, losses, fn


def scenario_train(ctx):
    """2-rank training of several models; the test compares with one process."""
    out = {}
    for kind in ("mlp", "conv", "lstm"):
        m, losses, _ = _train(ctx.DDP, kind, ctx.rank, ctx.world)
        out[kind] = _values(m.parameters())
    return out


def scenario_compiled(ctx):
    """The same training step through tapegrad.compile: bitwise equal to eager DDP, one
    recording and one replay per later step."""
    out = {}
    for kind in ("mlp", "bn"):
        me, le, _ = _train(ctx.DDP, kind, ctx.rank, ctx.world)
        mc, lc, fn = _train(ctx.DDP, kind, ctx.rank, ctx.world, compiled=True)
        se, sc = me.state_dict(), mc.state_dict()
        out[kind] = {
            "equal": le == lc and all(np.array_equal(se[k].numpy(), sc[k].numpy())
                                      for k in se),
            "stats": fn.stats, "eager": None if fn.eager is None else str(fn.eager)}
    return out


def scenario_compiled_more(ctx):
    """Compiled steps with find_unused_parameters=True, and a compiled step called inside
    no_sync() (its replay then accumulates locally, as the eager step does): bitwise equal
    to eager."""
    rank = ctx.rank
    x = tg.tensor(np.random.default_rng(rank).standard_normal((3, 4)))
    runs = []
    for compiled in (False, True):
        m = _Branches(rank)
        ddp = ctx.DDP(m, find_unused_parameters=True)
        opt = optim.SGD(m.parameters(), lr=0.01)

        def step(x):
            opt.zero_grad()
            loss = ddp(x).pow(2).sum()
            loss.backward()
            opt.step()
            return loss
        fn = tg.compile(step, fuse=False) if compiled else step
        losses = [fn(x).item() for _ in range(3)]
        m2 = make_model("mlp", seed=1 + rank)
        ddp2 = ctx.DDP(m2)

        def accumulate(x, y):
            loss = F.cross_entropy(ddp2(x), y)
            loss.backward()
            return loss
        fn2 = tg.compile(accumulate, fuse=False) if compiled else accumulate
        data = make_data("mlp", ctx.world, steps=4, seed=6)
        for k, (xb, yb) in enumerate(data):
            if k in (1, 2):
                with ddp2.no_sync():
                    fn2(tg.tensor(xb[rank]), tg.tensor(yb[rank]))
            else:
                fn2(tg.tensor(xb[rank]), tg.tensor(yb[rank]))
        runs.append((losses, m.state_dict(), [p.grad for p in m2.parameters()],
                     getattr(fn, "stats", None), getattr(fn2, "stats", None)))
    (le, se, ge, _, _), (lc, sc, gc, st1, st2) = runs
    return {"equal": le == lc and all(np.array_equal(se[k].numpy(), sc[k].numpy()) for k in se)
            and all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(ge, gc)),
            "stats": [st1, st2], "never_grad_none": m.never.weight.grad is None}


def scenario_no_sync(ctx):
    """Two microbatches under no_sync() and a third synchronised: the averaged sum."""
    rank, world = ctx.rank, ctx.world
    m = make_model("mlp", seed=1 + rank)
    ddp = ctx.DDP(m)
    data = make_data("mlp", world, steps=3, seed=5)
    with ddp.no_sync():
        for x, y in data[:2]:
            F.cross_entropy(ddp(tg.tensor(x[rank])), tg.tensor(y[rank])).backward()
    local_after_two = _values(p.grad for p in m.parameters())
    x, y = data[2]
    F.cross_entropy(ddp(tg.tensor(x[rank])), tg.tensor(y[rank])).backward()
    return {"grads": _values(p.grad for p in m.parameters()),
            "local_after_two": local_after_two}


class _Branches(nn.Module):
    """`a` is used on every rank, `rank0` on rank 0 only, `never` by no rank."""

    def __init__(self, rank):
        super().__init__()
        tg.manual_seed(3)
        self.a = nn.Linear(4, 3)
        self.rank0 = nn.Linear(4, 3)
        self.never = nn.Linear(4, 3)
        self.rank = rank
        self.to(tg.float64)

    def forward(self, x):
        y = self.a(x)
        if self.rank == 0:
            y = y + self.rank0(x)
        return y


def scenario_unused(ctx):
    """find_unused_parameters=True: a parameter no rank used keeps .grad None; one only
    rank 0 used gets the average (rank 0's gradient / world) on every rank."""
    rank = ctx.rank
    m = _Branches(rank)
    ddp = ctx.DDP(m, find_unused_parameters=True)
    x = tg.tensor(np.random.default_rng(rank).standard_normal((3, 4)))
    for _ in range(2):          # (a second iteration raises nothing)
        m.zero_grad()
        ddp(x).pow(2).sum().backward()
    return {n: (None if p.grad is None else np.asarray(p.grad.numpy()).tolist())
            for n, p in m.named_parameters()}


def scenario_unused_error(ctx):
    """Without find_unused_parameters, an unused parameter is PyTorch's error at the
    next forward."""
    m = _Branches(1)            # rank0 and never unused on every rank
    ddp = ctx.DDP(m)
    x = tg.tensor(np.ones((3, 4)))
    ddp(x).sum().backward()
    try:
        ddp(x)
    except RuntimeError as e:
        return {"error": str(e), "a_grad_none": m.a.weight.grad is None}
    return {"error": None}


def scenario_mismatch(ctx):
    """A model that differs across ranks at wrap time: every rank raises, naming the
    rank and the parameter."""
    out = {}
    tg.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 3 if ctx.rank == 0 else 2))
    try:
        ctx.DDP(m)
        out["shape"] = None
    except RuntimeError as e:
        out["shape"] = str(e)
    layers = [nn.Linear(4, 3)] + ([nn.Linear(3, 3)] if ctx.rank == 1 else [])
    try:
        ctx.DDP(nn.Sequential(*layers))
        out["count"] = None
    except RuntimeError as e:
        out["count"] = str(e)
    return out


def scenario_buffers(ctx):
    """Rank 0's parameters and buffers at wrap time; rank 0's buffers before each
    forward (BatchNorm's running statistics), each rank then updating them with its own
    batch."""
    rank, world = ctx.rank, ctx.world
    m = make_model("bn", seed=1 + rank)
    bn = m[1]
    with tg.no_grad():
        bn.running_mean.fill_(float(rank + 1))
    ddp = ctx.DDP(m)
    wrap_mean = bn.running_mean.numpy().copy()
    wrap_w = m[0].weight.detach().numpy().copy()
    data = make_data("mlp", world, steps=2, seed=9)
    seen = []           # the statistics BatchNorm starts its forward with
    bn.register_forward_pre_hook(lambda mod, args: seen.append(
        mod.running_mean.numpy().tolist()))
    steps = []
    for x, y in data:
        F.cross_entropy(ddp(tg.tensor(x[rank])), tg.tensor(y[rank])).backward()
        steps.append({"before": seen[-1], "after": bn.running_mean.numpy().tolist(),
                      "batches": int(bn.num_batches_tracked.item())})
    return {"wrap_mean": wrap_mean.tolist(), "wrap_weight": wrap_w.tolist(), "steps": steps}


def scenario_pickle(ctx):
    """A pickled and unpickled wrapper (default group) averages as the original."""
    import pickle
    rank = ctx.rank
    ddp = ctx.DDP(make_model("mlp", seed=1 + rank))
    copy = pickle.loads(pickle.dumps(ddp))
    x, y = make_data("mlp", ctx.world, steps=1, seed=4)[0]
    out = []
    for m in (ddp, copy):
        F.cross_entropy(m(tg.tensor(x[rank])), tg.tensor(y[rank])).backward()
        out.append(_values(p.grad for p in m.module.parameters()))
    return {"same": out[0] == out[1], "keys": list(copy.state_dict())[:2]}


def scenario_single(ctx):
    """One rank: a no-op wrapper, no communication (the collectives are replaced by
    functions that raise), gradients bitwise those of the plain model."""
    dist = ctx.dist
    saved = {n: getattr(dist, n) for n in ("all_reduce", "broadcast", "all_gather")}

    def refuse(*a, **k):
        raise AssertionError("communication with one rank")
    for n in saved:
        setattr(dist, n, refuse)
    try:
        m1, m2 = make_model("mlp", 1), make_model("mlp", 1)
        ddp = ctx.DDP(m1)
        x, y = make_data("mlp", 1)[0]
        F.cross_entropy(ddp(tg.tensor(x[0])), tg.tensor(y[0])).backward()
        F.cross_entropy(m2(tg.tensor(x[0])), tg.tensor(y[0])).backward()
        same = all(np.array_equal(a.grad.numpy(), b.grad.numpy())
                   for a, b in zip(m1.parameters(), m2.parameters()))
        keys = list(ddp.state_dict())
    finally:
        for n, f in saved.items():
            setattr(dist, n, f)
    return {"same": same, "keys": keys}


SCENARIOS = {name[len("scenario_"):]: fn for name, fn in globals().items()
             if name.startswith("scenario_")}


class _Ctx:
    def __init__(self):
        import tapegrad.distributed as dist
        if not dist.is_initialized():
            dist.init_process_group(backend="mpi")
        self.dist = dist
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.DDP = nn.parallel.DistributedDataParallel


def main(names):
    ctx = _Ctx()
    results = {"rank": ctx.rank, "world": ctx.world}
    for name in names or [n for n in SCENARIOS if n != "single"]:
        try:
            results[name] = SCENARIOS[name](ctx)
        except Exception:
            results[name] = {"exception": traceback.format_exc()}
    print(json.dumps(results))


if __name__ == "__main__":
    tg.set_num_threads(1)
    main(sys.argv[1:])
