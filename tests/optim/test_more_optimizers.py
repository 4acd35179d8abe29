"""NAdam, RAdam, Adamax, Adadelta, Rprop, ASGD and LBFGS against PyTorch, and the
optimizers' hooks.

Each optimizer of the registry runs 100 steps on two parameters in two param groups
with different hyper-parameters; both libraries get the same gradient function (NumPy,
float64, of each library's own current values), so the trajectories differ only by the
update's rounding (PyTorch's fused multiply-adds are reproduced; its sqrt, MKL's, is
not always correctly rounded, so the last bit may differ): float64 agrees to 1e-12,
float32 to a few float32 roundings. State dicts
round-trip, load across from and into PyTorch (continuing the same trajectory), and
have PyTorch's keys; flags are accepted or refused as PyTorch does on the CPU.
"""
import importlib
import inspect
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn

torch = pytest.importorskip("torch")

_r = np.random.default_rng(3)
X = _r.standard_normal((8, 5))
Y = _r.standard_normal((8, 3))
W0 = _r.standard_normal((5, 3)) * 0.5
B0 = _r.standard_normal(3) * 0.5


def gradients(w, b):
    """The gradient of 0.5 ||X w + b - Y||^2 + 0.05 sum(w^4) (float64, NumPy)."""
    r = X @ w + b - Y
    return X.T @ r + 0.2 * w ** 3, r.sum(0)


# name: [(group 0 options, group 1 options, defaults), ...]; learning rates small enough
# that 100 steps stay away from the optimum, where adaptive updates of near-zero gradients
# would amplify the last bit of rounding
CASES = {
    "NAdam": [({}, {"lr": 0.001}, {"lr": 0.002}),
              ({"weight_decay": 0.1}, {"decoupled_weight_decay": True, "weight_decay": 0.2},
               {"betas": (0.3, 0.9), "momentum_decay": 0.01}),
              ({"maximize": True}, {}, {"lr": 0.001})],
    "RAdam": [({}, {"lr": 0.001}, {"lr": 0.002}),
              ({"weight_decay": 0.1}, {"decoupled_weight_decay": True, "weight_decay": 0.2},
               {"betas": (0.6, 0.8)}),
              ({"maximize": True}, {}, {"lr": 0.001})],
    "Adamax": [({}, {"lr": 0.001}, {"lr": 0.002}),
               ({"weight_decay": 0.1}, {"maximize": True}, {"betas": (0.6, 0.8)})],
    "Adadelta": [({}, {"lr": 0.5}, {}),
                 ({"weight_decay": 0.1}, {"rho": 0.5, "maximize": True}, {}),
                 ({}, {"rho": 0.8}, {"eps": 1e-4, "lr": 0.1})],
    "Rprop": [({}, {"lr": 0.05}, {}),
              ({"etas": (0.3, 1.5)}, {"step_sizes": (1e-3, 0.1), "maximize": True},
               {"lr": 0.02})],
    "ASGD": [({}, {"lr": 0.002}, {}),
             ({"weight_decay": 0.1, "t0": 10}, {"lambd": 0.01, "alpha": 0.5},
              {"lr": 0.001, "t0": 5}),
             ({"maximize": True}, {}, {"lr": 0.001})],
}
NAMES = list(CASES)
# the optimizers tapegrad had before, through the same checks
CASES.update({
    "SGD": [({"momentum": 0.9, "nesterov": True}, {"lr": 0.001, "maximize": True},
             {"lr": 0.002, "momentum": 0.5, "dampening": 0.1, "weight_decay": 0.1})],
    "Adam": [({}, {"lr": 0.001, "amsgrad": True}, {"lr": 0.002, "weight_decay": 0.1}),
             ({"decoupled_weight_decay": True, "weight_decay": 0.3}, {"maximize": True},
              {"betas": (0.3, 0.9), "lr": 0.001})],
    "AdamW": [({}, {"lr": 0.001}, {"lr": 0.002})],
    "RMSprop": [({"centered": True, "momentum": 0.5}, {"lr": 0.001},
                 {"lr": 0.002, "weight_decay": 0.1})],
    "Adagrad": [({"lr_decay": 0.01}, {"initial_accumulator_value": 0.5},
                 {"lr": 0.02, "weight_decay": 0.1})],
})
PARAMS = [pytest.param(n, i, id=f"{n}-{i}") for n in CASES for i in range(len(CASES[n]))]


def np_of(t):
    return np.array(t.detach().numpy(), dtype=np.float64)


def make(lib, name, case, dtype, w0=W0, b0=B0):
    g0, g1, kw = CASES[name][case]
    w = lib.nn.Parameter(lib.tensor(w0.astype(dtype)))
    b = lib.nn.Parameter(lib.tensor(b0.astype(dtype)))
    opt = getattr(lib.optim, name)([dict(params=[w], **g0), dict(params=[b], **g1)], **kw)
    return w, b, opt


def steps(lib, w, b, opt, n, dtype):
    """n steps with the gradient of each library's own values; the values after each."""
    out = []
    sw, sb = (-1 if g.get("maximize") else 1 for g in opt.param_groups)
    for _ in range(n):
        gw, gb = gradients(np_of(w), np_of(b))      # (of -loss for a group that maximizes)
        gw, gb = sw * gw, sb * gb
        w.grad = lib.tensor(gw.astype(dtype))
        b.grad = lib.tensor(gb.astype(dtype))
        opt.step()
        out.append(np.concatenate([np_of(w).ravel(), np_of(b).ravel()]))
    return np.array(out)


TOL = {np.float64: dict(rtol=1e-12, atol=1e-12), np.float32: dict(rtol=2e-5, atol=2e-6)}


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name,case", PARAMS)
def test_trajectory_matches_pytorch(name, case, dtype):
    ours = steps(tg, *make(tg, name, case, dtype), 100, dtype)
    theirs = steps(torch, *make(torch, name, case, dtype), 100, dtype)
    assert np.abs(ours[-1] - ours[0]).max() > 1e-3          # (it moved)
    np.testing.assert_allclose(ours, theirs, **TOL[dtype])


def to_torch(v):
    if isinstance(v, tg.Tensor):
        return torch.tensor(v.detach().numpy().copy())
    if isinstance(v, dict):
        return {k: to_torch(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(to_torch(x) for x in v)
    return v


def to_tg(v):
    if isinstance(v, torch.Tensor):
        return tg.tensor(v.detach().numpy().copy())
    if isinstance(v, dict):
        return {k: to_tg(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(to_tg(x) for x in v)
    return v


@pytest.mark.parametrize("name,case", PARAMS)
def test_state_dicts_round_trip_and_load_across(name, case):
    d = np.float64
    w, b, opt = make(tg, name, case, d)
    tw, tb, topt = make(torch, name, case, d)
    steps(tg, w, b, opt, 30, d)
    steps(torch, tw, tb, topt, 30, d)
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert [list(s) for s in sd["state"].values()] == [list(s) for s in tsd["state"].values()]
    assert sd["param_groups"] == tsd["param_groups"]
    for k, st in tsd["state"].items():
        for key, v in st.items():
            ours = sd["state"][k][key]
            assert list(ours.shape) == list(v.shape) and str(ours.dtype)[9:] == str(v.dtype)[6:]
            np.testing.assert_allclose(np_of(ours), v.numpy(), rtol=1e-12, atol=1e-14)
    wv, bv = np_of(w), np_of(b)
    expected = steps(tg, w, b, opt, 20, d)
    # our state into a fresh tapegrad optimizer and into PyTorch's; PyTorch's into ours
    w2, b2, opt2 = make(tg, name, case, d, wv, bv)
    opt2.load_state_dict(sd)
    reloaded = steps(tg, w2, b2, opt2, 20, d)
    if not getattr(tg.optim, name).scalars:
        np.testing.assert_array_equal(reloaded, expected)
    # (a load casts 0-d state such as ASGD's eta to the parameter's dtype, in PyTorch too:
    # the reloaded run then rounds eta in float64, not float32 as before)
    tw2, tb2, topt2 = make(torch, name, case, d, wv, bv)
    topt2.load_state_dict(to_torch(sd))
    np.testing.assert_allclose(steps(torch, tw2, tb2, topt2, 20, d), reloaded, rtol=1e-12,
                               atol=1e-12)
    w3, b3, opt3 = make(tg, name, case, d, tw.detach().numpy(), tb.detach().numpy())
    opt3.load_state_dict(to_tg(tsd))
    twv = steps(torch, tw, tb, topt, 20, d)
    np.testing.assert_allclose(steps(tg, w3, b3, opt3, 20, d), twv, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", NAMES + ["LBFGS"])
def test_signature_group_keys_and_flags_as_pytorch(name):
    ours, theirs = getattr(tg.optim, name), getattr(torch.optim, name)
    sig = lambda f: [(p.name, p.kind, repr(p.default))  # noqa: E731
                     for p in inspect.signature(f).parameters.values()]
    assert sig(ours.__init__) == sig(theirs.__init__)
    p, tp = nn.Parameter(tg.ones(3)), torch.nn.Parameter(torch.ones(3))
    assert list(ours([p]).param_groups[0]) == list(theirs([tp]).param_groups[0])
    assert ours([p]).defaults == theirs([tp]).defaults
    with pytest.raises(TypeError, match="unexpected keyword argument 'fused'"):
        ours([p], fused=True)
    if name == "LBFGS":
        return
    ours([p], foreach=True)
    with pytest.raises(NotImplementedError, match="differentiable"):
        ours([p], differentiable=True)
    # capturable: PyTorch's CPU build fails at the first step with a parameter to update
    msgs = []
    for lib, q in ((tg, p), (torch, tp)):
        opt = getattr(lib.optim, name)([q], capturable=True)
        opt.step()                                  # (no gradient yet: nothing to do)
        q.grad = lib.ones(3)
        with pytest.raises(AssertionError) as e:
            opt.step()
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1]


ERRORS = [
    ("NAdam", dict(lr=-1.0)), ("NAdam", dict(betas=(1.0, 0.9))), ("NAdam", dict(eps=-1.0)),
    ("NAdam", dict(momentum_decay=-1.0)), ("RAdam", dict(betas=(0.9, 1.5))),
    ("RAdam", dict(weight_decay=-1.0)), ("Adamax", dict(betas=(-0.1, 0.9))),
    ("Adadelta", dict(rho=1.5)), ("Adadelta", dict(eps=-1.0)), ("Rprop", dict(etas=(1.5, 1.2))),
    ("Rprop", dict(lr=-1.0)), ("ASGD", dict(weight_decay=-1.0)), ("LBFGS", dict(lr=-1.0)),
]


@pytest.mark.parametrize("name,kw", ERRORS)
def test_invalid_hyper_parameters_raise_pytorchs_errors(name, kw):
    msgs = []
    for lib in (tg, torch):
        with pytest.raises(ValueError) as e:
            getattr(lib.optim, name)([lib.nn.Parameter(lib.ones(2))], **kw)
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1]


def test_rprop_step_size_starts_at_the_groups_lr_and_asgd_keeps_float32_scalars():
    w = nn.Parameter(tg.ones(2, dtype=tg.float64))
    w.grad = tg.ones(2, dtype=tg.float64)
    opt = tg.optim.Rprop([w], lr=0.25)
    opt.step()
    assert opt.state[w]["step_size"].tolist() == [0.25, 0.25]
    a = tg.optim.ASGD([w], lr=0.1)
    a.step()
    st = a.state[w]
    assert list(st) == ["step", "eta", "mu", "ax"]
    assert st["eta"].dtype is tg.float32 and st["mu"].dtype is tg.float32
    n = tg.optim.NAdam([w])
    n.step()
    assert n.state[w]["mu_product"].dtype is tg.float32


def test_compiled_steps_equal_eager():
    """A training step of a small model with each new optimizer, replayed by
    tapegrad.compile (fuse=False) equals the eager run bitwise."""
    for name in NAMES:
        results = []
        for compiled in (False, True):
            tg.manual_seed(0)
            m = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
            opt = getattr(tg.optim, name)(m.parameters())
            x, y = tg.randn(16, 4), tg.randn(16, 1)

            def step():
                opt.zero_grad()
                loss = ((m(x) - y) ** 2).mean()
                loss.backward()
                opt.step()
                return loss
            f = tg.compile(step, fuse=False) if compiled else step
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                losses = [float(f()) for _ in range(6)]
            results.append((losses, [p.detach().numpy().copy() for p in m.parameters()]))
        assert results[0][0] == results[1][0], name
        for a, b in zip(results[0][1], results[1][1]):
            np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------ LBFGS
A = _r.standard_normal((6, 4))
BV = _r.standard_normal(6)
X0 = _r.standard_normal(4) * 0.5
Y0 = _r.standard_normal((2, 2)) * 0.5

LBFGS_CASES = [dict(), dict(line_search_fn="strong_wolfe"),
               dict(history_size=3, max_iter=5, lr=0.5),
               dict(line_search_fn="strong_wolfe", history_size=2, max_iter=4),
               dict(max_iter=3, max_eval=2, tolerance_change=1e-5)]


def lbfgs_run(lib, kw, n=15, state=None):
    x = lib.nn.Parameter(lib.tensor(X0))
    y = lib.nn.Parameter(lib.tensor(Y0))
    a, b = lib.tensor(A), lib.tensor(BV)
    opt = lib.optim.LBFGS([x, y], **kw)
    calls = []

    def closure():
        opt.zero_grad()
        loss = ((a @ x - b) ** 2).sum() + ((y - 1) ** 4).sum() + (x ** 4).sum() * 0.1
        loss.backward()
        calls.append(1)
        return loss
    out = []
    for _ in range(n):
        loss = opt.step(closure)
        out.append(np.concatenate([np_of(x), np_of(y).ravel(), [float(loss.detach())]]))
    return np.array(out), opt, len(calls)


@pytest.mark.parametrize("kw", LBFGS_CASES, ids=[str(i) for i in range(len(LBFGS_CASES))])
def test_lbfgs_matches_pytorch(kw):
    ours, opt, calls = lbfgs_run(tg, kw)
    theirs, topt, tcalls = lbfgs_run(torch, kw)
    assert calls == tcalls
    # (the line search's decisions amplify the last bits of dot products summed in
    # another order)
    np.testing.assert_allclose(ours, theirs, rtol=1e-7, atol=1e-9)
    st, tst = opt.state_dict()["state"][0], topt.state_dict()["state"][0]
    assert list(st) == list(tst)
    assert (st["func_evals"], st["n_iter"]) == (tst["func_evals"], tst["n_iter"])
    assert len(st["old_dirs"]) == len(tst["old_dirs"])


def test_lbfgs_state_dict_loads_across():
    kw = dict(line_search_fn="strong_wolfe", history_size=4, max_iter=3)
    _, opt, _ = lbfgs_run(tg, kw, n=2)
    _, topt, _ = lbfgs_run(torch, kw, n=2)
    ours, theirs = [], []
    for lib, o, sd, out in ((tg, opt, to_tg(topt.state_dict()), ours),
                            (torch, topt, to_torch(opt.state_dict()), theirs)):
        o.load_state_dict(sd)
        x, y = o.param_groups[0]["params"]
        a, b = lib.tensor(A), lib.tensor(BV)

        def closure():
            o.zero_grad()
            loss = ((a @ x - b) ** 2).sum() + ((y - 1) ** 4).sum() + (x ** 4).sum() * 0.1
            loss.backward()
            return loss
        for _ in range(3):
            o.step(closure)
            out.append(np.concatenate([np_of(x), np_of(y).ravel()]))
    np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-11)


def test_lbfgs_refusals_as_pytorch():
    p = nn.Parameter(tg.ones(2))
    with pytest.raises(ValueError, match=r"LBFGS doesn't support per-parameter options "):
        tg.optim.LBFGS([{"params": [p]}, {"params": [nn.Parameter(tg.ones(1))]}])
    opt = tg.optim.LBFGS([p], line_search_fn="wolfe")

    def closure():
        opt.zero_grad()
        loss = (p ** 2).sum()
        loss.backward()
        return loss
    with pytest.raises(RuntimeError, match="only 'strong_wolfe' is supported"):
        opt.step(closure)
    with pytest.raises(TypeError, match="closure"):
        opt.step()
    # an optimum already reached: one closure call, the loss returned
    q = nn.Parameter(tg.zeros(2))
    o = tg.optim.LBFGS([q])
    calls = []

    def at_min():
        o.zero_grad()
        loss = (q ** 2).sum()
        loss.backward()
        calls.append(1)
        return loss
    assert float(o.step(at_min)) == 0.0 and len(calls) == 1


# ------------------------------------------------------------------ hooks
def test_step_hooks_order_arguments_and_removal():
    for lib in (tg, torch):
        p = lib.nn.Parameter(lib.ones(2))
        opt = lib.optim.SGD([p], lr=0.1)
        log = []
        h1 = opt.register_step_pre_hook(lambda o, a, k: log.append(("pre", o is opt, a, k)))
        h2 = opt.register_step_post_hook(lambda o, a, k: log.append(("post", len(a))))
        mod = importlib.import_module(lib.__name__ + ".optim.optimizer")
        g1 = mod.register_optimizer_step_pre_hook(lambda o, a, k: log.append(("gpre",)))
        g2 = mod.register_optimizer_step_post_hook(lambda o, a, k: log.append(("gpost",)))
        p.grad = lib.ones(2)
        opt.step()
        assert log == [("gpre",), ("pre", True, (opt,), {}), ("post", 1), ("gpost",)]
        for h in (h1, h2, g1, g2):
            h.remove()
        log.clear()
        opt.step()
        assert log == []
        # a pre-hook may replace the arguments (here: add a closure)
        opt.register_step_pre_hook(lambda o, a, k: (a, {"closure": lambda: 7.0}))
        assert opt.step() == 7.0
        bad = lib.optim.SGD([p], lr=0.1)
        bad.register_step_pre_hook(lambda o, a, k: 3)
        with pytest.raises(RuntimeError, match="must return None or a tuple of"):
            bad.step()


def test_state_dict_hooks():
    for lib in (tg, torch):
        p = lib.nn.Parameter(lib.ones(2))
        opt = lib.optim.Adam([p], lr=0.1)
        log = []
        opt.register_state_dict_pre_hook(lambda o: log.append("pre"))
        opt.register_state_dict_pre_hook(lambda o: log.append("pre0"), prepend=True)

        def post(o, sd):
            log.append("post")
            sd["extra"] = 1
        opt.register_state_dict_post_hook(post)
        sd = opt.state_dict()
        assert sd["extra"] == 1 and log == ["pre0", "pre", "post"]
        log.clear()

        def load_pre(o, sd):
            log.append("lpre")
            sd = dict(sd)
            sd["param_groups"] = [dict(sd["param_groups"][0], lr=0.5)]
            return sd
        h = opt.register_load_state_dict_pre_hook(load_pre)
        opt.register_load_state_dict_post_hook(lambda o: log.append("lpost"))
        opt.load_state_dict(sd)
        assert log == ["lpre", "lpost"] and opt.param_groups[0]["lr"] == 0.5
        assert sd["param_groups"][0]["lr"] == 0.1           # (the caller's dict untouched)
        with h:
            pass
        log.clear()
        opt.load_state_dict(sd)
        assert log == ["lpost"] and opt.param_groups[0]["lr"] == 0.1


def test_named_parameters_groups_and_the_callers_group_dict():
    out = []
    for lib in (tg, torch):
        m = lib.nn.Linear(2, 1)
        opt = lib.optim.Adam(m.named_parameters(), lr=0.1)
        g = {"params": [lib.nn.Parameter(lib.ones(1))], "lr": 0.5}
        errors = []
        try:
            opt.add_param_group(g)
        except ValueError as e:
            errors.append(str(e))
        g2 = {"params": [("w", lib.nn.Parameter(lib.ones(1)))], "lr": 0.5}
        opt.add_param_group(g2)
        g2["lr"] = 0.25                     # (the optimizer holds the caller's dict)
        try:
            lib.optim.SGD([("a", lib.nn.Parameter(lib.ones(1))), lib.nn.Parameter(lib.ones(1))])
        except ValueError as e:
            errors.append(str(e))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            p = lib.nn.Parameter(lib.ones(1))
            lib.optim.SGD([p, p])
        sd = opt.state_dict()
        opt2 = lib.optim.Adam(lib.nn.Linear(2, 1).named_parameters(), lr=0.3)
        opt2.add_param_group({"params": [("v", lib.nn.Parameter(lib.ones(1)))]})
        del sd["param_groups"][1]["amsgrad"]
        opt2.load_state_dict(sd)
        out.append((opt.param_groups[0]["param_names"], opt.param_groups[1]["lr"], errors,
                    [str(x.message)[:60] for x in w], sd["param_groups"][1]["param_names"],
                    sorted(opt2.param_groups[1]), opt2.param_groups[0]["lr"]))
    assert out[0] == out[1]
