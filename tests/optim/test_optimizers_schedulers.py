"""Optimizers, learning-rate schedulers and gradient clipping.

Trajectories are checked against NumPy references written from PyTorch's documented
update rules (float64) and, where PyTorch is installed, against PyTorch itself (float32
and float64). Also: parameter groups, state dicts (in memory and through tapegrad.save),
the in-place version bump of a step, flat memory over a long training loop, and the
`python -m tapegrad demo | warmup` commands.
"""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tapegrad as tg
from tests.helpers import INPLACE_MSG, REPO_ROOT

HAS_TORCH = importlib.util.find_spec("torch") is not None

# a small least-squares problem: loss(W) = 0.5 * ||X @ W - Y||^2, grad = X.T @ (X @ W - Y)
_rng = np.random.default_rng(0)
X = _rng.standard_normal((6, 3))
Y = _rng.standard_normal((6, 2))
W0 = _rng.standard_normal((3, 2))


def vals(t):
    """A copy of a tensor's values as a float64 NumPy array."""
    return np.array(t.detach().numpy(), dtype=np.float64)


def _run(args, timeout=600):
    """Run a Python subprocess in the checkout with the inherited environment."""
    return subprocess.run([sys.executable, *args], cwd=REPO_ROOT, env=dict(os.environ),
                          capture_output=True, text=True, timeout=timeout, check=False)


def lib_trajectory(lib, name, kw, dtype, steps=5):
    """W after each of `steps` steps of lib.optim.<name>(**kw) on the least-squares loss,
    the gradients computed by lib's own autograd."""
    w = lib.tensor(W0.astype(dtype), requires_grad=True)
    x, y = lib.tensor(X.astype(dtype)), lib.tensor(Y.astype(dtype))
    opt = getattr(lib.optim, name)([w], **kw)
    out = []
    for _ in range(steps):
        opt.zero_grad()
        (((x @ w - y) ** 2).sum() * 0.5).backward()
        opt.step()
        out.append(vals(w))
    return np.array(out)


# ----------------------------------------------------------- NumPy references (float64)
# PyTorch's documented algorithms; `maximize` negates the gradient first (as PyTorch's
# implementation does, so weight decay still pulls towards zero). st: per-parameter
# state dict, t: the step number (from 1).
def np_sgd(p, g, st, t, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False,
           maximize=False):
    g = -g if maximize else g
    if weight_decay:
        g = g + weight_decay * p
    if momentum:
        b = st["b"] = g if t == 1 else momentum * st["b"] + (1 - dampening) * g
        g = g + momentum * b if nesterov else b
    return p - lr * g


def np_adam(p, g, st, t, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
            amsgrad=False, maximize=False, decoupled=False):
    b1, b2 = betas
    g = -g if maximize else g
    if decoupled:
        p = p * (1 - lr * weight_decay)
    elif weight_decay:
        g = g + weight_decay * p
    m = st["m"] = b1 * st.get("m", 0.0) + (1 - b1) * g
    v = st["v"] = b2 * st.get("v", 0.0) + (1 - b2) * g * g
    if amsgrad:
        v = st["vmax"] = np.maximum(st.get("vmax", 0.0), v)
    return p - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)


def np_adamw(p, g, st, t, weight_decay=1e-2, **kw):
    return np_adam(p, g, st, t, weight_decay=weight_decay, decoupled=True, **kw)


def np_rmsprop(p, g, st, t, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
               centered=False, maximize=False):
    g = -g if maximize else g
    if weight_decay:
        g = g + weight_decay * p
    v = st["v"] = alpha * st.get("v", 0.0) + (1 - alpha) * g * g
    if centered:
        ga = st["ga"] = alpha * st.get("ga", 0.0) + (1 - alpha) * g
        v = v - ga * ga
    upd = g / (np.sqrt(v) + eps)
    if momentum > 0:
        upd = st["b"] = momentum * st.get("b", 0.0) + upd
    return p - lr * upd


def np_adagrad(p, g, st, t, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0,
               eps=1e-10, maximize=False):
    g = -g if maximize else g
    if weight_decay:
        g = g + weight_decay * p
    s = st["s"] = st.get("s", initial_accumulator_value) + g * g
    return p - lr / (1 + (t - 1) * lr_decay) * g / (np.sqrt(s) + eps)


REFERENCE = {"SGD": np_sgd, "Adam": np_adam, "AdamW": np_adamw, "RMSprop": np_rmsprop,
             "Adagrad": np_adagrad}


def np_trajectory(name, kw, steps=5):
    w, st, out = W0.copy(), {}, []
    for t in range(1, steps + 1):
        w = REFERENCE[name](w, X.T @ (X @ w - Y), st, t, **kw)
        out.append(w)
    return np.array(out)


CASES = [
    ("SGD", {"lr": 0.05}),
    ("SGD", {"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01}),
    ("SGD", {"lr": 0.02, "momentum": 0.8, "nesterov": True, "weight_decay": 0.1, "maximize": True}),
    ("Adam", {"lr": 0.1}),
    ("Adam", {"lr": 0.1, "betas": (0.8, 0.9), "weight_decay": 0.1, "amsgrad": True}),
    ("Adam", {"lr": 0.05, "weight_decay": 0.05, "maximize": True}),
    ("AdamW", {"lr": 0.1}),
    ("AdamW", {"lr": 0.1, "betas": (0.8, 0.9), "weight_decay": 0.5, "amsgrad": True}),
    ("RMSprop", {"lr": 0.01}),
    ("RMSprop", {"lr": 0.01, "alpha": 0.9, "momentum": 0.5, "centered": True, "weight_decay": 0.1}),
    ("RMSprop", {"lr": 0.01, "centered": True, "maximize": True}),
    ("Adagrad", {"lr": 0.1}),
    ("Adagrad", {"lr": 0.1, "lr_decay": 0.05, "initial_accumulator_value": 0.1,
                 "weight_decay": 0.1}),
    ("Adagrad", {"lr": 0.1, "eps": 1e-6, "maximize": True}),
]
CASE_IDS = [name + "-" + ",".join(f"{k}={v}" for k, v in kw.items()) for name, kw in CASES]
OPTIMIZERS = ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad"]


def make_opt(name, params, **kw):
    """An optimizer with a momentum-like state for every class (SGD gets momentum)."""
    if name == "SGD":
        kw.setdefault("momentum", 0.9)
    return getattr(tg.optim, name)(params, **kw)


# =========================================================== 1. update rules
@pytest.mark.parametrize("name,kw", CASES, ids=CASE_IDS)
def test_float64_trajectory_matches_numpy_reference(name, kw):
    ours = lib_trajectory(tg, name, kw, "float64")
    ref = np_trajectory(name, kw)
    assert np.abs(ref[-1] - W0).max() > 1e-3            # it moved
    np.testing.assert_allclose(ours, ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name,kw", CASES, ids=CASE_IDS)
def test_float32_trajectory_matches_numpy_reference(name, kw):
    ours = lib_trajectory(tg, name, kw, "float32")
    np.testing.assert_allclose(ours, np_trajectory(name, kw), rtol=1e-4, atol=1e-5)


def test_amsgrad_case_exercises_the_running_max():
    """The amsgrad reference case really takes the max (else it would test nothing)."""
    kw = {"lr": 0.1, "betas": (0.8, 0.9), "weight_decay": 0.1}
    assert np.abs(np_trajectory("Adam", dict(kw, amsgrad=True))
                  - np_trajectory("Adam", kw)).max() > 1e-4


@pytest.mark.parametrize("dtype,rtol,atol", [("float32", 1e-6, 1e-6),
                                              ("float64", 1e-12, 1e-14)])
@pytest.mark.parametrize("name,kw", CASES, ids=CASE_IDS)
def test_trajectory_matches_torch(name, kw, dtype, rtol, atol):
    torch = pytest.importorskip("torch")
    ours = lib_trajectory(tg, name, kw, dtype, steps=8)
    theirs = lib_trajectory(torch, name, kw, dtype, steps=8)
    np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=atol)


def test_invalid_hyperparameters_raise_value_error():
    w = tg.zeros(2, requires_grad=True)
    for bad in (lambda: tg.optim.SGD([w], lr=-1.0),
                lambda: tg.optim.SGD([w], lr=0.1, nesterov=True),
                lambda: tg.optim.SGD([w], lr=0.1, momentum=0.9, dampening=0.1, nesterov=True),
                lambda: tg.optim.Adam([w], betas=(1.0, 0.999)),
                lambda: tg.optim.RMSprop([w], alpha=-0.1),
                lambda: tg.optim.Adagrad([w], lr_decay=-1.0)):
        with pytest.raises(ValueError):
            bad()


# =========================================================== 2. parameter groups
def test_groups_use_their_own_options_and_inherit_the_defaults():
    a = tg.tensor([1.0, 2.0], requires_grad=True)
    b = tg.tensor([3.0], requires_grad=True)
    opt = tg.optim.SGD([{"params": [a]}, {"params": b, "lr": 0.5, "momentum": 0.9}], lr=0.1)
    assert opt.param_groups[0]["lr"] == 0.1 and opt.param_groups[0]["momentum"] == 0
    assert opt.param_groups[1]["lr"] == 0.5 and opt.param_groups[1]["params"] == [b]
    for _ in range(2):
        a.grad, b.grad = tg.tensor([1.0, -1.0]), tg.tensor([2.0])
        opt.step()
    np.testing.assert_allclose(vals(a), [0.8, 2.2], rtol=1e-6)
    np.testing.assert_allclose(vals(b), [3.0 - 0.5 * 2.0 - 0.5 * (0.9 * 2.0 + 2.0)],
                               rtol=1e-6)


def test_two_groups_match_torch():
    torch = pytest.importorskip("torch")

    def run(L):
        a = L.tensor(W0.astype(np.float32), requires_grad=True)
        b = L.tensor([0.5, -0.5], requires_grad=True)
        x, y = L.tensor(X.astype(np.float32)), L.tensor(Y.astype(np.float32))
        opt = L.optim.Adam([{"params": [a]}, {"params": [b], "lr": 0.01, "amsgrad": True}],
                           lr=0.1)
        for _ in range(5):
            opt.zero_grad()
            (((x @ a + b - y) ** 2).sum()).backward()
            opt.step()
        return vals(a), vals(b)

    for ours, theirs in zip(run(tg), run(torch)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)


def test_add_param_group():
    a = tg.tensor([1.0], requires_grad=True)
    b = tg.tensor([1.0], requires_grad=True)
    opt = tg.optim.SGD([a], lr=0.1)
    opt.add_param_group({"params": [b], "lr": 0.01})
    assert len(opt.param_groups) == 2
    assert opt.param_groups[1]["momentum"] == 0           # filled from the defaults
    a.grad, b.grad = tg.tensor([1.0]), tg.tensor([1.0])
    opt.step()
    assert a.item() == pytest.approx(0.9) and b.item() == pytest.approx(0.99)
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})
    assert len(opt.param_groups) == 2
    with pytest.raises(TypeError):
        opt.add_param_group([b])


def test_a_parameter_in_two_groups_raises():
    a = tg.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="some parameters appear in more than one parameter "
                                         "group"):
        tg.optim.Adam([{"params": [a]}, {"params": [a], "lr": 0.1}])


def test_empty_or_bad_parameter_lists_raise():
    with pytest.raises(ValueError, match="optimizer got an empty parameter list"):
        tg.optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="optimizer got an empty parameter list"):
        tg.optim.Adam(iter([]))
    with pytest.raises(TypeError):
        tg.optim.SGD(tg.zeros(2, requires_grad=True), lr=0.1)     # a tensor, not a list
    x = tg.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"):
        tg.optim.SGD([x * 2], lr=0.1)


def test_a_set_of_params_in_a_group_raises_type_error():
    """PyTorch refuses sets inside a group (their order, hence the state dict's, varies)."""
    a = tg.zeros(2, requires_grad=True)
    with pytest.raises(TypeError, match="ordered collections"):
        tg.optim.SGD([{"params": {a}}], lr=0.1)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop"])
def test_parameters_without_grad_are_skipped(name):
    used = tg.tensor([1.0, 2.0], requires_grad=True)
    idle = tg.tensor([3.0, 4.0], requires_grad=True)
    opt = make_opt(name, [used, idle], lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        (used * used).sum().backward()
        opt.step()
    assert idle.grad is None
    assert idle not in opt.state and used in opt.state
    np.testing.assert_array_equal(vals(idle), [3.0, 4.0])
    assert idle._version == 0
    assert not np.allclose(vals(used), [1.0, 2.0])
    if name != "SGD":                                  # per-parameter step counters
        idle.grad = tg.tensor([1.0, 1.0])
        opt.step()
        assert opt.state[idle]["step"].item() == 1.0
        assert opt.state[used]["step"].item() == 4.0


def test_plain_sgd_keeps_no_state():
    """PyTorch's SGD without momentum keeps no per-parameter state."""
    w = tg.tensor([1.0, 2.0], requires_grad=True)
    opt = tg.optim.SGD([w], lr=0.1)
    w.grad = tg.tensor([1.0, 1.0])
    opt.step()
    np.testing.assert_allclose(vals(w), [0.9, 1.9], rtol=1e-6)
    assert len(opt.state) == 0
    assert opt.state_dict()["state"] == {}


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_state_keys_match_torch(name):
    torch = pytest.importorskip("torch")
    kws = {"SGD": {"momentum": 0.9}, "Adam": {"amsgrad": True}, "AdamW": {},
           "RMSprop": {"momentum": 0.5, "centered": True}, "Adagrad": {}}[name]
    keys = []
    for L in (tg, torch):
        w = L.tensor([1.0, 2.0], requires_grad=True)
        opt = getattr(L.optim, name)([w], lr=0.1, **kws)
        w.grad = L.tensor([1.0, -1.0])
        opt.step()
        keys.append(sorted(opt.state[w]))
    assert keys[0] == keys[1]


def test_zero_grad():
    a = tg.tensor([1.0, 2.0], requires_grad=True)
    b = tg.tensor([3.0], requires_grad=True)
    opt = tg.optim.SGD([a, b], lr=0.1)
    (a.sum() * 2 + b.sum()).backward()
    g = a.grad
    opt.zero_grad(set_to_none=False)
    assert a.grad is g                                  # zeroed in place, same tensor
    np.testing.assert_array_equal(vals(a.grad), [0.0, 0.0])
    np.testing.assert_array_equal(vals(b.grad), [0.0])
    (a.sum() * 3).backward()                            # accumulates into the zeroed grad
    np.testing.assert_array_equal(vals(a.grad), [3.0, 3.0])
    opt.zero_grad()                                     # default: set_to_none=True
    assert a.grad is None and b.grad is None


def test_step_with_closure_returns_its_loss():
    w = tg.tensor([1.0, -2.0], requires_grad=True)
    opt = tg.optim.SGD([w], lr=0.1)
    calls = []

    def closure():
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        calls.append(loss.item())
        return loss

    with tg.no_grad():                                  # the closure runs with grad enabled
        loss = opt.step(closure)
    assert loss.item() == 5.0 and calls == [5.0]
    np.testing.assert_allclose(vals(w), [0.8, -1.6], rtol=1e-6)
    assert opt.step() is None


# =========================================================== 3. state dicts
RESUME = [("SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": True}),
          ("Adam", {"lr": 0.1, "amsgrad": True, "weight_decay": 0.1}),
          ("AdamW", {"lr": 0.1}),
          ("RMSprop", {"lr": 0.01, "momentum": 0.5, "centered": True}),
          ("Adagrad", {"lr": 0.1, "lr_decay": 0.01})]


def _ls_step(opt, w, x, y):
    opt.zero_grad()
    (((x @ w - y) ** 2).sum() * 0.5).backward()
    opt.step()


@pytest.mark.parametrize("via", ["memory", "file"])
@pytest.mark.parametrize("name,kw", RESUME, ids=[n for n, _ in RESUME])
def test_state_dict_resume_continues_identically(name, kw, via, tmp_path):
    x, y = tg.tensor(X.astype(np.float32)), tg.tensor(Y.astype(np.float32))
    w = tg.tensor(W0.astype(np.float32), requires_grad=True)
    opt = getattr(tg.optim, name)([w], **kw)
    for _ in range(3):
        _ls_step(opt, w, x, y)
    sd = opt.state_dict()
    if via == "file":
        tg.save(sd, tmp_path / "optim.pt")
        sd = tg.load(tmp_path / "optim.pt")
    w2 = tg.tensor(vals(w).astype(np.float32), requires_grad=True)
    opt2 = getattr(tg.optim, name)([w2], **dict(kw, lr=123.0))    # lr comes from sd
    opt2.load_state_dict(sd)
    assert opt2.param_groups[0]["lr"] == kw["lr"]
    for _ in range(3):
        _ls_step(opt, w, x, y)
        _ls_step(opt2, w2, x, y)
        np.testing.assert_array_equal(vals(w2), vals(w))
    for k, v in opt.state[w].items():
        np.testing.assert_array_equal(vals(opt2.state[w2][k]), vals(v))


def test_state_dict_layout():
    a = tg.tensor([1.0], requires_grad=True)
    b = tg.tensor([2.0, 3.0], requires_grad=True)
    opt = tg.optim.Adam([{"params": [a]}, {"params": [b], "lr": 0.5}])
    a.grad, b.grad = tg.tensor([1.0]), tg.tensor([1.0, 1.0])
    opt.step()
    sd = opt.state_dict()
    assert [g["params"] for g in sd["param_groups"]] == [[0], [1]]
    assert sd["param_groups"][1]["lr"] == 0.5
    assert sd["state"][1]["step"].item() == 1.0
    assert list(sd["state"][1]["exp_avg"].shape) == [2]


def test_load_state_dict_with_mismatched_groups_raises():
    a, b = tg.zeros(2, requires_grad=True), tg.zeros(2, requires_grad=True)
    src = tg.optim.SGD([a, b], lr=0.1, momentum=0.9)
    a.grad, b.grad = tg.ones(2), tg.ones(2)
    src.step()
    sd = src.state_dict()
    with pytest.raises(ValueError, match="doesn't match the size of optimizer's group"):
        tg.optim.SGD([tg.zeros(2, requires_grad=True)], lr=0.1).load_state_dict(sd)
    two = tg.optim.SGD([{"params": [tg.zeros(2, requires_grad=True)]},
                        {"params": [tg.zeros(2, requires_grad=True)]}], lr=0.1)
    with pytest.raises(ValueError, match="different number of parameter groups"):
        two.load_state_dict(sd)


@pytest.mark.parametrize("step", [3, 3.0, "int64", "float32", "float64"])
def test_loaded_step_counter_of_any_numeric_type(step):
    """PyTorch accepts a step stored as a number or a tensor of any numeric dtype (older
    checkpoints hold ints) and reads its value: Adam's 4th step here moves w by the same
    amount in every case."""
    if isinstance(step, str):
        step = tg.tensor(3, dtype=getattr(tg, step))
    w = tg.tensor([1.0, 2.0], requires_grad=True)
    opt = tg.optim.Adam([w], lr=0.1)
    groups = opt.state_dict()["param_groups"]
    opt.load_state_dict({"param_groups": groups, "state": {0: {
        "step": step, "exp_avg": tg.tensor([0.1, 0.1]), "exp_avg_sq": tg.tensor([0.01, 0.01])}}})
    w.grad = tg.tensor([1.0, 1.0])
    opt.step()
    st = {"m": np.full(2, 0.1), "v": np.full(2, 0.01)}
    expected = np_adam(np.array([1.0, 2.0]), np.ones(2), st, 4, lr=0.1)
    np.testing.assert_allclose(vals(w), expected, rtol=1e-6)
    assert float(opt.state[w]["step"].item()) == 4.0


TOGGLE_SCRIPT = """
import tapegrad as tg
w = tg.tensor([1.0, 2.0], requires_grad=True)
opt = tg.optim.{name}([w], lr=0.1)
w.grad = tg.tensor([1.0, 1.0])
opt.step()
opt.param_groups[0][{key!r}] = {value!r}
try:
    for _ in range(2):
        w.grad = tg.tensor([1.0, 1.0])
        opt.step()
        print(w.tolist(), flush=True)
except Exception as e:                  # PyTorch: KeyError naming the missing buffer
    print("raised", type(e).__name__, flush=True)
"""


@pytest.mark.parametrize("name,key,value", [("SGD", "momentum", 0.9),
                                            ("Adam", "amsgrad", True),
                                            ("RMSprop", "momentum", 0.5),
                                            ("RMSprop", "centered", True)])
def test_enabling_a_buffer_after_the_first_step_does_not_crash(name, key, value):
    """A group option that needs a state buffer, switched on after the state was created
    (e.g. momentum warm-up): PyTorch's SGD creates the momentum buffer then (and Adam and
    RMSprop raise KeyError); the process must survive either way. (Run in a subprocess:
    the failure mode is a segmentation fault.)"""
    res = _run(["-c", TOGGLE_SCRIPT.format(name=name, key=key, value=value)])
    assert res.returncode == 0, f"crashed with exit code {res.returncode}: {res.stderr[-500:]}"
    if name == "SGD":                   # PyTorch: buf = grad on the first momentum step
        lines = [json.loads(line) for line in res.stdout.split("\n") if line]
        np.testing.assert_allclose(lines, [[0.8, 1.8], [0.61, 1.61]], rtol=1e-6)


# =========================================================== 4. schedulers
def _lr_sequence(L, make, steps=30):
    """get_last_lr() after construction and after each of `steps` epochs (2 groups)."""
    ps = [L.zeros(2, requires_grad=True) for _ in range(2)]
    opt = L.optim.SGD([{"params": [ps[0]], "lr": 0.1}, {"params": [ps[1]], "lr": 0.3}], lr=0.1)
    sched = make(L.optim.lr_scheduler, opt)
    out = [list(sched.get_last_lr())]
    for _ in range(steps):
        for p in ps:
            p.grad = L.ones(2)
        opt.step()
        sched.step()
        out.append(list(sched.get_last_lr()))
        assert out[-1] == [g["lr"] for g in opt.param_groups]
    return out


SCHEDULERS = {
    "StepLR": lambda S, o: S.StepLR(o, step_size=4, gamma=0.5),
    "CosineAnnealingLR": lambda S, o: S.CosineAnnealingLR(o, T_max=12),
    "CosineAnnealingLR-past-T_max": lambda S, o: S.CosineAnnealingLR(o, T_max=7, eta_min=0.01),
    "LambdaLR": lambda S, o: S.LambdaLR(o, lambda e: 0.95 ** e),
    "LambdaLR-list": lambda S, o: S.LambdaLR(o, [lambda e: 1 / (e + 1), lambda e: e % 3]),
}


@pytest.mark.parametrize("kind", list(SCHEDULERS))
def test_scheduler_lrs_match_torch(kind):
    torch = pytest.importorskip("torch")
    ours = _lr_sequence(tg, SCHEDULERS[kind])
    theirs = _lr_sequence(torch, SCHEDULERS[kind])
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-15)


def test_scheduler_values():
    step = _lr_sequence(tg, SCHEDULERS["StepLR"], steps=9)
    assert [round(r[0], 12) for r in step] == [0.1] * 4 + [0.05] * 4 + [0.025] * 2
    cos = _lr_sequence(tg, lambda S, o: S.CosineAnnealingLR(o, T_max=4), steps=8)
    half = (1 - np.cos(np.pi / 4)) / 2                     # 0.1464...
    np.testing.assert_allclose([r[0] for r in cos],
                               0.1 * np.array([1, 1 - half, 0.5, half, 0, half, 0.5,
                                               1 - half, 1]), atol=1e-12)
    lam = _lr_sequence(tg, SCHEDULERS["LambdaLR-list"], steps=4)
    np.testing.assert_allclose(lam, [[0.1, 0.0], [0.05, 0.3], [0.1 / 3, 0.6], [0.025, 0.0],
                                     [0.02, 0.3]], atol=1e-15)


def test_lambda_lr_needs_one_lambda_per_group():
    opt = tg.optim.SGD([{"params": [tg.zeros(1, requires_grad=True)]},
                        {"params": [tg.zeros(1, requires_grad=True)]}], lr=0.1)
    with pytest.raises(ValueError, match="Expected 2 lr_lambdas, but got 1"):
        tg.optim.lr_scheduler.LambdaLR(opt, [lambda e: 1.0])


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_a_changed_lr_takes_effect_in_the_next_step(name):
    """A LambdaLR schedule 0 -> 1 -> 0.5 -> 0: each step uses the lr set before it (no
    move under lr 0; plain SGD moves lr * grad)."""
    w = tg.tensor([1.0, 1.0], requires_grad=True)
    opt = getattr(tg.optim, name)([w], lr=1.0)
    sched = tg.optim.lr_scheduler.LambdaLR(opt, lambda e: [0.0, 1.0, 0.5, 0.0][e])
    assert sched.get_last_lr() == [0.0]
    moves = []
    for _ in range(4):
        before = vals(w)
        w.grad = tg.tensor([1.0, 1.0])
        opt.step()
        moves.append(before[0] - vals(w)[0])
        if sched.last_epoch < 3:
            sched.step()
    assert moves[0] == 0.0 and moves[3] == 0.0
    assert moves[1] > 0
    if name == "SGD":
        np.testing.assert_allclose(moves[1:3], [1.0, 0.5], rtol=1e-6)
    assert sched.get_last_lr() == [0.0] == [opt.param_groups[0]["lr"]]


# =========================================================== 5. gradient clipping
def _with_grads(grads, dtype=np.float32):
    """Leaf tensors whose .grad are the given arrays."""
    ps = []
    for g in grads:
        p = tg.zeros(*np.shape(g), dtype=tg.float32 if dtype == np.float32 else tg.float64,
                     requires_grad=True)
        p.grad = tg.tensor(np.asarray(g, dtype))
        ps.append(p)
    return ps


GRADS = [np.arange(12.0).reshape(3, 4) / 7 - 0.8, np.array([0.3, -2.0, 1.5, 0.25, -0.1])]


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf"), 3.0])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_clip_grad_norm_returns_the_total_norm_and_scales(norm_type, dtype):
    flat = np.concatenate([g.ravel() for g in GRADS])
    total = np.linalg.norm(flat, norm_type)
    for max_norm in (total / 4, total * 2):
        ps = _with_grads(GRADS, dtype)
        norm = tg.nn.utils.clip_grad_norm_(ps, max_norm, norm_type=norm_type)
        assert norm.dim() == 0 and norm.dtype == ps[0].dtype
        assert norm.item() == pytest.approx(total, rel=1e-6)
        new = [vals(p.grad) for p in ps]
        if max_norm < total:
            coef = max_norm / (total + 1e-6)
            for n, g in zip(new, GRADS):
                np.testing.assert_allclose(n, g * coef, rtol=1e-6, atol=1e-7)
            new_norm = np.linalg.norm(np.concatenate([n.ravel() for n in new]), norm_type)
            assert new_norm == pytest.approx(max_norm, rel=1e-5)
        else:
            for n, g in zip(new, GRADS):
                np.testing.assert_array_equal(n, g.astype(dtype))


def test_clip_grad_norm_at_the_threshold_uses_pytorchs_epsilon():
    (p,) = _with_grads([[3.0, 4.0]], np.float64)
    tg.nn.utils.clip_grad_norm_(p, 5.0)                     # a single tensor also works
    np.testing.assert_allclose(vals(p.grad), np.array([3.0, 4.0]) * 5.0 / (5.0 + 1e-6),
                               rtol=1e-14)
    assert vals(p.grad)[1] < 4.0


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_clip_grad_norm_matches_torch(norm_type):
    torch = pytest.importorskip("torch")
    for max_norm in (0.5, 100.0):
        res = []
        for L in (tg, torch):
            ps = [L.zeros(*g.shape, requires_grad=True) for g in GRADS]
            for p, g in zip(ps, GRADS):
                p.grad = L.tensor(g.astype(np.float32))
            norm = L.nn.utils.clip_grad_norm_(ps, max_norm, norm_type=norm_type)
            res.append([vals(norm)] + [vals(p.grad) for p in ps])
        for ours, theirs in zip(*res):
            np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)


def test_clip_grad_norm_skips_missing_grads_and_handles_none_at_all():
    ps = _with_grads([[3.0, 4.0]]) + [tg.zeros(3, requires_grad=True)]
    assert tg.nn.utils.clip_grad_norm_(ps, 1.0).item() == pytest.approx(5.0)
    assert ps[1].grad is None
    assert tg.nn.utils.clip_grad_norm_([tg.zeros(2, requires_grad=True)], 1.0).item() == 0.0


def test_clip_grad_norm_total_norm_promotes_mixed_dtypes_like_torch():
    """PyTorch stacks the per-tensor norms with type promotion: float32 and float64
    gradients give a float64 total norm."""
    a = _with_grads([[3.0, 4.0]], np.float32)[0]
    b = _with_grads([[1e-4, 1.0]], np.float64)[0]
    norm = tg.nn.utils.clip_grad_norm_([a, b], 1.0)
    assert norm.dtype == tg.float64
    assert norm.item() == pytest.approx(np.sqrt(26.0 + 1e-8), rel=1e-12)


def test_clip_grad_norm_non_finite():
    ps = _with_grads([[1.0, np.nan, 2.0]])
    with pytest.raises(RuntimeError, match="is non-finite, so it cannot be clipped"):
        tg.nn.utils.clip_grad_norm_(ps, 1.0, error_if_nonfinite=True)
    np.testing.assert_array_equal(vals(ps[0].grad), [1.0, np.nan, 2.0])     # untouched
    ps = _with_grads([[1.0, np.inf]])
    with pytest.raises(RuntimeError, match="non-finite"):
        tg.nn.utils.clip_grad_norm_(ps, 1.0, norm_type=1.0, error_if_nonfinite=True)
    ps = _with_grads([[1.0, np.nan]])
    with np.errstate(invalid="ignore"):
        assert np.isnan(tg.nn.utils.clip_grad_norm_(ps, 1.0).item())    # default: no error


def test_clip_grad_value():
    ps = _with_grads([[0.5, -3.0, 2.0], [[-0.2, 7.0]]])
    g0 = ps[0].grad
    v = g0._version
    assert tg.nn.utils.clip_grad_value_(ps, 1.5) is None
    assert ps[0].grad is g0 and g0._version > v                 # in place
    np.testing.assert_array_equal(ps[0].grad.numpy(), np.float32([0.5, -1.5, 1.5]))
    np.testing.assert_array_equal(ps[1].grad.numpy(), np.float32([[-0.2, 1.5]]))
    (p,) = _with_grads([[-4.0, 0.1]])
    tg.nn.utils.clip_grad_value_(p, 0.05)
    np.testing.assert_allclose(vals(p.grad), [-0.05, 0.05], rtol=1e-6)


def test_clip_grad_value_matches_torch():
    torch = pytest.importorskip("torch")
    res = []
    for L in (tg, torch):
        ps = [L.zeros(*g.shape, requires_grad=True) for g in GRADS]
        for p, g in zip(ps, GRADS):
            p.grad = L.tensor(g.astype(np.float32))
        L.nn.utils.clip_grad_value_(ps, 0.7)
        res.append([vals(p.grad) for p in ps])
    for ours, theirs in zip(*res):
        np.testing.assert_array_equal(ours, theirs)


# =========================================================== 6. in-place versions
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_step_bumps_version_and_invalidates_saved_graphs(name):
    w = tg.tensor([1.0, 2.0], requires_grad=True)
    opt = make_opt(name, [w], lr=0.1)
    later = (w * w).sum()                                   # mul saved w at version 0
    (w * 3.0).sum().backward()
    opt.step()
    assert w._version == 1
    with pytest.raises(RuntimeError, match=INPLACE_MSG):
        later.backward()
    (w * 3.0).sum().backward()
    opt.step()
    assert w._version == 2


def test_step_error_matches_torch():
    torch = pytest.importorskip("torch")
    msgs = []
    for L in (tg, torch):
        w = L.tensor([1.0, 2.0], requires_grad=True)
        opt = L.optim.Adam([w], lr=0.1)
        later = (w * w).sum()
        (w * 3.0).sum().backward()
        opt.step()
        with pytest.raises(RuntimeError) as ei:
            later.backward()
        msgs.append(str(ei.value).split(" Hint")[0].replace("tapegrad", "torch"))
    assert msgs[0] == msgs[1]


# =========================================================== 7. memory
MEMORY_SCRIPT = r"""
import gc, json, os
import numpy as np
import tapegrad as tg
from tapegrad import nn

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

E = tg._engine.state.engine()
rng = np.random.default_rng(0)
tg.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 4))
opt = tg.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()
x = tg.tensor(rng.standard_normal((64, 8)).astype(np.float32))
y = tg.tensor(rng.integers(0, 4, 64))
for step in range(1, 10001):
    opt.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    if step in (1, 1000, 10000):
        gc.collect()
        E.flush()
        print(json.dumps({"step": step, "rss": rss(), "loss": loss.item(), **E.stats()}),
              flush=True)
"""


def test_training_loop_memory_stays_flat():
    res = _run(["-c", MEMORY_SCRIPT])
    assert res.returncode == 0, res.stderr
    first, at1k, at10k = [json.loads(line) for line in res.stdout.split("\n") if line]
    assert at10k["rss"] - at1k["rss"] < 20 * 2 ** 20, (at1k, at10k)
    for k in ("tensors", "storages", "rows", "bytes"):
        assert at10k[k] == at1k[k], (k, at1k, at10k)
    assert at10k["loss"] < first["loss"] / 2                 # it did train


# =========================================================== 8. python -m tapegrad
def test_demo_runs_and_reports():
    res = _run(["-m", "tapegrad", "demo", "--steps", "50"])
    assert res.returncode == 0, res.stderr
    out = res.stdout
    final = [line for line in out.splitlines() if line.startswith("tapegrad: final loss")]
    assert len(final) == 1 and "accuracy" in final[0] and "steps/s" in final[0]
    acc = float(final[0].split("accuracy ")[1].split(",")[0])
    assert 0.0 <= acc <= 1.0
    assert "50/50" in out
    if HAS_TORCH:
        assert any(line.startswith("PyTorch ") and "accuracy" in line
                   for line in out.splitlines())
        assert "speed:" in out
    else:
        assert "PyTorch is not installed" in out


@pytest.mark.parametrize("steps", ["1", "0"])
def test_demo_with_tiny_step_counts_does_not_crash(steps):
    """--steps 1 is a valid run (one step); --steps 0 may be refused by the argument
    parser, but neither may end in a traceback."""
    res = _run(["-m", "tapegrad", "demo", "--steps", steps])
    assert "Traceback" not in res.stderr, res.stderr[-800:]
    if steps == "1" or res.returncode == 0:
        assert res.returncode == 0 and "accuracy" in res.stdout
    else:
        assert res.returncode == 2 and "usage" in res.stderr


def test_warmup_runs():
    res = _run(["-m", "tapegrad", "warmup", "--ops", "add,mul", "--dtypes", "float32",
                "--optim", "sgd"])
    assert res.returncode == 0, res.stderr
    assert "2 ops ready" in res.stdout


def test_warmup_as_a_cold_start_helper():
    """The demo's helper runs its tasks in order, and only them (the engine core is its
    parent's); an unknown task is an error naming it."""
    from tapegrad.__main__ import _HELPER_TASKS
    env = dict(os.environ)
    res = subprocess.run([sys.executable, "-m", "tapegrad", "warmup", "--tasks",
                          ",".join(_HELPER_TASKS)],
                         cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600,
                         check=False)
    assert res.returncode == 0, res.stderr
    assert f"{len(_HELPER_TASKS)} tasks ready" in res.stdout
    res = subprocess.run([sys.executable, "-m", "tapegrad", "warmup", "--tasks", "op:tanh,nope"],
                         cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600,
                         check=False)
    assert res.returncode != 0 and "unknown warmup task 'nope'" in res.stderr


COVER_SCRIPT = """
import gc, json
from numba.core.registry import CPUDispatcher
from tapegrad.__main__ import _compile_task, _MAIN_TASKS, _HELPER_TASKS, train, spirals, make_model
from tapegrad.ops.registry import OPS
import tapegrad as tg
for t in _MAIN_TASKS + _HELPER_TASKS:
    _compile_task(t)
def compiled():
    sigs = {(d.py_func.__qualname__, str(s)) for d in gc.get_objects()
            if isinstance(d, CPUDispatcher) for s in d.signatures}
    return sigs | {(op.name, k) for op in OPS for k in (op._kernels or {})}
before = compiled()
X, Y = spirals(64)
tg.manual_seed(0)
train(tg, make_model(tg), X, Y, 3, 0.01, compiled=True)
print(json.dumps(sorted(map(str, compiled() - before))))
"""


def test_cold_start_tasks_cover_the_demo():
    """What the demo compiles on a cold start is its two processes' tasks, which run side
    by side: a kernel its steps compiled afterwards would be compiled alone, on one core."""
    res = _run(["-c", COVER_SCRIPT])
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1]) == []


def test_demo_starts_its_helper_unless_its_kernels_are_cached(tmp_path, monkeypatch):
    """Some of the demo's kernels cached by another program is not a warm start: the rest
    would compile in one process, inside the timed loop. Only every task's kernels cached
    skips the helper; a data file without its index does not count."""
    from tapegrad import __main__ as demo_main
    from tapegrad._engine import cache
    monkeypatch.setattr(cache, "CACHE_DIR", str(tmp_path))
    assert not demo_main._demo_cached()
    for k, (rel, prefix) in enumerate(demo_main._DEMO_KERNELS):
        where = cache.kernel_dir(os.path.join(cache._PKG, *rel.split("/")))
        assert where.startswith(str(tmp_path))
        os.makedirs(where, exist_ok=True)
        with open(os.path.join(where, prefix + "10.py311.1.nbc"), "w"):
            pass
        assert not demo_main._demo_cached()
        with open(os.path.join(where, prefix + "10.py311.nbi"), "w"):
            pass
        assert demo_main._demo_cached() == (k == len(demo_main._DEMO_KERNELS) - 1)


# =========================================================== cached parameter tables
def _momentum_steps(edit):
    """SGD(momentum 0.9, lr 0.1) on p = [1, 2] with gradient [1, 1] every step; `edit`
    runs between the second and third step. Returns p after each step (float64)."""
    p = tg.tensor([1.0, 2.0], dtype=tg.float64, requires_grad=True)
    opt = tg.optim.SGD([p], lr=0.1, momentum=0.9)
    out = []
    for k in range(4):
        if k == 2:
            edit(opt, p)
        opt.zero_grad()
        p.grad = tg.ones(2, dtype=tg.float64)
        opt.step()
        out.append(p.detach().numpy().copy())
    return np.array(out)


def _momentum_reference(buffers):
    """The same steps by hand: buf = g on the first step (or after the state is gone),
    then 0.9 buf + g; `buffers[k]` (if given) replaces buf before step k."""
    p, buf, out = np.array([1.0, 2.0]), None, []
    for k in range(4):
        if k in buffers:
            buf = buffers[k]
        buf = np.ones(2) if buf is None else 0.9 * buf + 1.0
        p = p - 0.1 * buf
        out.append(p)
    return np.array(out)


def test_state_replaced_by_hand_between_steps_takes_effect():
    """step() caches the kernel's table of parameter and buffer ids; a buffer replaced in
    opt.state (or the whole entry dropped, or opt.state reassigned) must be seen at the
    next step, as in PyTorch, which reads the state every step. (The reference is NumPy
    without the fused multiply-adds of PyTorch's update, hence a few ulps.)"""
    def replace(opt, p):
        opt.state[p]["momentum_buffer"] = tg.full((2,), 10.0, dtype=tg.float64)
    np.testing.assert_allclose(_momentum_steps(replace),
                               _momentum_reference({2: np.full(2, 10.0)}), rtol=1e-14)
    drop = lambda opt, p: opt.state.pop(p)                     # noqa: E731
    np.testing.assert_allclose(_momentum_steps(drop), _momentum_reference({2: None}),
                               rtol=1e-14)

    def reset(opt, p):
        opt.state = {}
    np.testing.assert_allclose(_momentum_steps(reset), _momentum_reference({2: None}),
                               rtol=1e-14)
    def entry_then_buffer(opt, p):          # a plain dict set as the entry, then edited
        opt.state[p] = {"momentum_buffer": tg.zeros(2, dtype=tg.float64)}
        opt.state[p]["momentum_buffer"] = tg.full((2,), 10.0, dtype=tg.float64)
    np.testing.assert_allclose(_momentum_steps(entry_then_buffer),
                               _momentum_reference({2: np.full(2, 10.0)}), rtol=1e-14)
    untouched = _momentum_steps(lambda opt, p: None)
    np.testing.assert_allclose(untouched, _momentum_reference({}), rtol=1e-14)
    assert not np.allclose(untouched, _momentum_steps(replace))


def test_params_list_edited_in_place_and_grads_appearing_are_stepped():
    """A parameter appended to a group's list, and one whose gradient appears only at a
    later step, are updated from that step on (the cached table is rebuilt)."""
    a = tg.tensor([1.0], requires_grad=True)
    b = tg.tensor([5.0], requires_grad=True)
    c = tg.tensor([7.0], requires_grad=True)
    opt = tg.optim.SGD([a, b], lr=0.5)
    a.grad = tg.tensor([1.0])
    opt.step()                                  # b has no gradient yet
    b.grad = tg.tensor([2.0])
    opt.step()
    opt.param_groups[0]["params"].append(c)
    c.grad = tg.tensor([4.0])
    opt.step()
    assert (a.item(), b.item(), c.item()) == (1.0 - 3 * 0.5, 5.0 - 2 * 2.0 * 0.5, 7.0 - 2.0)
    a.grad = None
    opt.step()                                  # a's gradient is gone: a stays
    assert (a.item(), b.item(), c.item()) == (-0.5, 2.0, 3.0)


def test_lr_changed_between_steps_takes_effect_with_cached_hyperparameters():
    p = tg.tensor([0.0], dtype=tg.float64, requires_grad=True)
    opt = tg.optim.SGD([p], lr=1.0)
    seen = []
    for lr in (1.0, 1.0, 0.25, 0.25, 2.0):
        opt.param_groups[0]["lr"] = lr
        p.grad = tg.ones(1, dtype=tg.float64)
        before = p.item()
        opt.step()
        seen.append(before - p.item())
    assert seen == [1.0, 1.0, 0.25, 0.25, 2.0]


def _gradient_comes_and_goes(lib, name):
    """Two parameters; b has a gradient only at steps 2, 4 and 5, a at all but step 4:
    the kernel's cached table goes stale both ways (and b's state is created late)."""
    a = lib.tensor([1.0, -2.0], dtype=lib.float64, requires_grad=True)
    b = lib.tensor([0.5, 3.0], dtype=lib.float64, requires_grad=True)
    opt = getattr(lib.optim, name)([a, b], lr=0.1, **({"momentum": 0.9} if name == "SGD"
                                                       else {}))
    out = []
    for k in range(6):
        opt.zero_grad()
        loss = 0
        if k != 4:
            loss = loss + (a * a).sum()
        if k in (2, 4, 5):
            loss = loss + (b * b * b).sum()
        loss.backward()
        opt.step()
        out.append(np.concatenate([a.detach().numpy(), b.detach().numpy()]))
    return np.array(out)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_gradients_appearing_and_vanishing_between_steps_match_pytorch(name):
    torch = pytest.importorskip("torch")
    np.testing.assert_allclose(_gradient_comes_and_goes(tg, name),
                               _gradient_comes_and_goes(torch, name), rtol=1e-12, atol=1e-14)
