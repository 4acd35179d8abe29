"""Memory: the engine's live counts stay flat in training-like loops, and everything a
graph holds is released when the graph goes away (with or without backward).

Counts come from ``engine().stats()``; wrappers are released in batches, so every
reading first collects garbage and flushes the release queue. Assertions compare with
a baseline taken in the same test, with margins; nothing here measures time.
"""

import numpy as np
import pytest

import tapegrad as tg
from tests.helpers import E, REPO_ROOT, engine_stats

KEYS = ("tensors", "storages", "rows", "bytes")


def delta(now, base):
    return {k: now[k] - base[k] for k in KEYS}


def _mlp_params():
    tg.manual_seed(0)
    w1 = tg.randn(4, 8, requires_grad=True)
    b1 = tg.zeros(8, requires_grad=True)
    w2 = tg.randn(8, 1, requires_grad=True)
    return [w1, b1, w2]


def _step(params, x, t, lr=0.01, clear="none"):
    w1, b1, w2 = params
    h = (x @ w1 + b1).tanh()
    out = h @ w2
    loss = ((out - t) ** 2).mean()
    loss.backward()
    with tg.no_grad():
        for p in params:
            p -= lr * p.grad
    for p in params:
        if clear == "none":
            p.grad = None
        else:
            p.grad.zero_()
    return loss.item()


@pytest.mark.parametrize("clear", ["none", "zero_"])
def test_training_loop_keeps_counts_flat(clear):
    params = _mlp_params()
    x = tg.randn(16, 4)
    t = tg.randn(16, 1)
    base = engine_stats()
    snap = {}
    losses = []
    for step in range(1, 2001):
        losses.append(_step(params, x, t, clear=clear))
        if step in (200, 2000):
            snap[step] = (engine_stats(), E.meta.shape[0], E.stor.shape[0], E.tape.shape[0])
    s200, s2000 = snap[200][0], snap[2000][0]
    for k in ("tensors", "storages", "rows"):
        assert s2000[k] <= s200[k] + 2, (k, s200, s2000)
    assert s2000["bytes"] <= s200["bytes"] + 1024, (s200, s2000)
    # the tables were not grown between step 200 and step 2000: rows and ids are reused
    assert snap[2000][1:] == snap[200][1:]
    # nothing of a step survives it (params, their grads (zero_ mode) and inputs aside)
    assert delta(s2000, base)["rows"] <= 2
    assert delta(s2000, base)["tensors"] <= 2 * len(params) + 2
    # it did train: the loss went down
    assert losses[-1] < losses[0]
    assert np.isfinite(losses).all()


def test_autograd_grad_loop_keeps_counts_flat():
    x = tg.randn(8, requires_grad=True)
    base = engine_stats()
    readings = []
    for step in range(1, 2001):
        (g,) = tg.autograd.grad((x.sin() * x).sum(), x)
        if step in (200, 2000):
            readings.append(engine_stats())
        del g
    assert readings[1] == readings[0]
    assert delta(engine_stats(), base) == dict.fromkeys(KEYS, 0)
    assert x.grad is None


def test_retain_graph_loop_keeps_counts_flat():
    x = tg.randn(5, requires_grad=True)
    loss = (x.exp() * x).sum()
    readings = []
    for step in range(1, 1001):
        loss.backward(retain_graph=True)
        x.grad = None
        if step in (100, 1000):
            readings.append(engine_stats())
    assert readings[1] == readings[0]


def test_deleting_a_graph_without_backward_frees_its_rows():
    x = tg.rand(100, requires_grad=True)
    base = engine_stats()
    y = x
    for _ in range(50):
        y = (y * 1.5).exp().log()
    loss = y.sum()
    del y
    during = delta(engine_stats(), base)
    assert during["rows"] == 151
    # each exp output stays alive (saved by exp and by log); x * 1.5 saves nothing
    assert during["tensors"] >= 100 and during["bytes"] >= 100 * 4 * 50
    del loss
    assert delta(engine_stats(), base) == dict.fromkeys(KEYS, 0)


def test_deleting_a_deep_graph_without_backward():
    x = tg.tensor(1.0, requires_grad=True)
    base = engine_stats()
    y = x
    for _ in range(100_000):
        y = y * 1.0
    assert delta(engine_stats(), base)["rows"] == 100_000
    del y                           # releasing a 100k-long chain: no recursion
    assert delta(engine_stats(), base) == dict.fromkeys(KEYS, 0)
    assert x.grad is None


def test_backward_frees_saved_tensors_and_rows_go_with_the_output():
    x = tg.ones(1000, requires_grad=True)
    base = engine_stats()
    y = x
    for _ in range(10):
        y = y.exp() * 0.5
    loss = y.sum()
    del y
    before = delta(engine_stats(), base)
    assert before["rows"] == 21
    assert before["bytes"] >= 10 * 4000            # the saved exp outputs
    loss.backward()
    after = delta(engine_stats(), base)
    assert after["rows"] == 21                     # the loss still holds its history
    assert after["bytes"] <= 4000 + 64             # x.grad (+ the loss): saved values gone
    del loss
    after = delta(engine_stats(), base)
    assert after["rows"] == 0
    assert after["tensors"] == 1 and after["bytes"] == 4000    # x.grad
    x.grad = None
    assert delta(engine_stats(), base) == dict.fromkeys(KEYS, 0)


def test_retain_graph_keeps_saved_tensors_until_the_graph_goes():
    x = tg.ones(1000, requires_grad=True)
    base = engine_stats()
    loss = (x.exp() * 0.5).exp().sum()
    loss.backward(retain_graph=True)
    kept = delta(engine_stats(), base)
    assert kept["bytes"] >= 2 * 4000 + 4000        # two saved exp outputs and x.grad
    del loss
    x.grad = None
    assert delta(engine_stats(), base) == dict.fromkeys(KEYS, 0)


def test_a_grad_fn_reference_keeps_its_row_alive():
    x = tg.ones(10, requires_grad=True)
    base = engine_stats()
    y = x.exp()
    fn = y.grad_fn
    del y
    held = delta(engine_stats(), base)
    assert held["rows"] == 1
    assert fn.name() == "ExpBackward0"
    assert fn.next_functions[0][0].variable is x
    del fn
    assert delta(engine_stats(), base) == dict.fromkeys(KEYS, 0)


def test_failed_backward_leaks_nothing():
    x = tg.ones(4, requires_grad=True)
    base = engine_stats()
    y = x.exp()
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    del y
    assert delta(engine_stats(), base) == dict.fromkeys(KEYS, 0)
    assert x.grad is None


def test_failed_ops_leak_nothing():
    a = tg.ones(3, requires_grad=True)
    b = tg.ones(2)
    base = engine_stats()
    for _ in range(300):
        with pytest.raises(RuntimeError):
            a * b
        with pytest.raises(RuntimeError):
            a.reshape(2, 2)
        with pytest.raises(IndexError):
            a.sum(3)
    assert delta(engine_stats(), base) == dict.fromkeys(KEYS, 0)


def test_numpy_export_keeps_storage_until_the_array_dies():
    base = engine_stats()
    a = tg.full((10,), 3.0).numpy()
    held = delta(engine_stats(), base)
    assert held["storages"] == 1 and held["bytes"] == 40
    np.testing.assert_array_equal(a, np.full(10, 3.0, np.float32))
    del a
    assert delta(engine_stats(), base) == dict.fromkeys(KEYS, 0)


def test_from_numpy_releases_its_storage():
    base = engine_stats()
    nbase = len(E.ext)
    arr = np.arange(100.0)
    t = tg.from_numpy(arr)
    assert delta(engine_stats(), base)["storages"] == 1
    assert delta(engine_stats(), base)["bytes"] == 0      # the memory is NumPy's
    assert len(E.ext) == nbase + 1
    del t
    assert delta(engine_stats(), base) == dict.fromkeys(KEYS, 0)
    assert len(E.ext) == nbase
    np.testing.assert_array_equal(arr, np.arange(100.0))      # still NumPy's, still valid


def test_many_short_lived_tensors_are_reused():
    base = engine_stats()
    for _ in range(5000):
        a = tg.ones(4) * 2.0
        del a
    caps = (E.meta.shape[0], E.stor.shape[0])
    for _ in range(5000):
        a = tg.ones(4) * 2.0
        del a
    assert (E.meta.shape[0], E.stor.shape[0]) == caps
    assert delta(engine_stats(), base) == dict.fromkeys(KEYS, 0)


def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def test_resident_memory_stays_flat_over_large_tensor_steps():
    """A loop over 1M-element float64 tensors reuses or returns its blocks: resident
    memory after 5 steps is what it is after 40."""
    x = tg.tensor(np.random.default_rng(0).standard_normal(1_000_000), requires_grad=True)

    def step():
        x.grad = None
        (x.sin() * x.exp() + x ** 2).sum().backward()

    for _ in range(5):
        step()
    base = _rss_mb()
    for _ in range(35):
        step()
    assert _rss_mb() - base < 24, (base, _rss_mb())      # 3 of the 8 MB buffers


def test_malloc_tuning_is_opt_in():
    """glibc's malloc is the process's: tapegrad changes its thresholds only when asked."""
    import os
    import platform
    import subprocess
    import sys
    code = "import tapegrad as tg; print(tg._engine.state.MALLOC_TUNED)"
    root = REPO_ROOT
    glibc = platform.libc_ver()[0] == "glibc"
    for value, want in ((None, "False"), ("0", "False"), ("1", str(glibc))):
        env = dict(os.environ)
        env.pop("TAPEGRAD_MALLOPT", None)
        if value is not None:
            env["TAPEGRAD_MALLOPT"] = value
        res = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                             text=True, env=env, timeout=300)
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == want


def test_node_release_and_flush_load_no_code_when_they_run():
    """A grad_fn node dies in __del__ and the release queue drains in a gc callback:
    both may run inside Numba's own code generation (a collection it triggers), where
    loading compiled code re-enters LLVM and aborts the process (a fuzz run did). So
    the entries they call are loaded beforehand: with the engine core, and with the
    first node."""
    from tapegrad._engine import core
    from tapegrad._front import nodes as graph
    x = tg.ones(2, requires_grad=True)
    n = (x * x).grad_fn
    assert core.drain_queue in E.entries
    assert graph._DECREF[0] is E.entries[core.decref_row]
    assert type(n).__name__ == "MulBackward0"
    del n
    engine_stats()


def test_pinn_steps_with_second_derivatives_keep_memory_flat():
    """10,000 physics-informed steps (u_xx through create_graph, Adam): the engine's
    counts at step 1,000 are those at step 10,000, and resident memory stays put."""
    tg.manual_seed(0)
    net = tg.nn.Sequential(tg.nn.Linear(1, 8), tg.nn.Tanh(), tg.nn.Linear(8, 1))
    opt = tg.optim.Adam(net.parameters(), lr=1e-3)
    x = tg.linspace(0, 1, 16).reshape(-1, 1).requires_grad_()
    f = -(np.pi ** 2) * tg.sin(np.pi * x.detach())

    def step():
        opt.zero_grad()
        u = net(x)
        (u_x,) = tg.autograd.grad(u.sum(), x, create_graph=True)
        (u_xx,) = tg.autograd.grad(u_x.sum(), x, create_graph=True)
        loss = ((u_xx - f) ** 2).mean() + (u[0] ** 2 + u[-1] ** 2).sum()
        loss.backward()
        opt.step()

    readings = []
    for n in range(1, 10_001):
        step()
        if n in (1000, 10_000):
            readings.append((engine_stats(), _rss_mb()))
    (counts0, rss0), (counts1, rss1) = readings
    assert counts1 == counts0
    assert rss1 - rss0 < 8, (rss0, rss1)
