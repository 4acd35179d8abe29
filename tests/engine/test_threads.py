"""Several Python threads using tapegrad at once get the same values as one thread: the
multi-step engine paths (int arguments, then the call; the sweep's set-up; table growth)
are atomic."""
import sys
import threading

import numpy as np
import pytest

import tapegrad as tg


def _work(seed, steps):
    rng = np.random.default_rng(seed)
    x = tg.tensor(rng.standard_normal((3, 4)), dtype=tg.float64, requires_grad=True)
    w = tg.tensor(rng.standard_normal((4, 2)), dtype=tg.float64, requires_grad=True)
    out = []
    for _ in range(steps):
        h = (x @ w).tanh()
        loss = (h.sum(1, keepdim=True) * h.max(1, keepdim=True).values).reshape(3).mean()
        loss = loss + x.transpose(0, 1).unbind(0)[1].sum()
        loss.backward()
        out.append((loss.item(), x.grad.numpy().copy(), w.grad.numpy().copy()))
        x.grad = None
        w.grad = None
    return out


def _run_threads(work, n):
    """work(0) ... work(n - 1), each on a thread of its own, switching threads as often as
    possible."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(seed,)) for seed in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)


def test_threads_compute_what_one_thread_computes():
    steps = 150
    expected = {seed: _work(seed, steps) for seed in range(4)}
    got = {}
    _run_threads(lambda s: got.__setitem__(s, _work(s, steps)), 4)
    for seed in range(4):
        assert len(got[seed]) == steps
        for (l1, gx1, gw1), (l2, gx2, gw2) in zip(expected[seed], got[seed]):
            assert l1 == l2
            np.testing.assert_array_equal(gx1, gx2)
            np.testing.assert_array_equal(gw1, gw2)


def _multi_output_work(seed, rounds, failures):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((5, 7))
    x = tg.tensor(a, requires_grad=True)
    w = tg.ones(7, 3, dtype=tg.float64)
    keep = []
    for k in range(rounds):
        y = x * 1.0                             # one-call paths, no lock
        m = y.max(1, keepdim=True)              # two outputs, read from outs[] after the call
        parts = (y @ w).unbind(1)               # matmul with no lock; unbind's many outputs
        if (m.values.tolist() != a.max(1, keepdims=True).tolist()
                or m.indices.tolist() != a.argmax(1)[:, None].tolist()
                or [p.tolist() for p in parts] != list(a.sum(1)[None].repeat(3, 0).tolist())):
            failures.append((seed, k))
        keep.append(m.values)
        keep.extend(tg.zeros(1) for _ in range(8))      # the tables grow meanwhile
    loss = sum(v.sum() for v in keep[::9])
    loss.backward()
    expected = np.zeros_like(a)
    expected[np.arange(5), a.argmax(1)] = rounds
    if x.grad.tolist() != expected.tolist():
        failures.append((seed, "grad"))


def test_multi_output_ops_and_table_growth_under_threads():
    """max(dim) and unbind read their outputs from a buffer after their call, under the
    engine lock; the one-call paths of other threads take no lock, so their outputs go to
    a buffer of their own (layout.OPF_SOLO) and never replace them. Meanwhile the tables
    grow: the switch to the new arrays happens with no Python call in between, so no op
    of another thread writes to an old table after its copy was taken."""
    failures = []
    _run_threads(lambda s: _multi_output_work(s, 300, failures), 4)
    assert failures == []



def _compiled_work(f, seed, rounds, failures):
    rng = np.random.default_rng(seed)
    n = 3 + seed % 2            # two threads per shape: they share that shape's plan
    try:
        for k in range(rounds):
            a = rng.standard_normal(n)
            x = tg.tensor(a, requires_grad=True)
            loss = f(x).item()
            grad = x.grad.numpy()
            if (not np.isclose(loss, 2 * np.tanh(a).sum(), rtol=1e-12, atol=0)
                    or not np.allclose(grad, 2 * (1 - np.tanh(a) ** 2), rtol=1e-12, atol=0)):
                failures.append((seed, k))
    except Exception as e:      # (an exception in a thread would only warn)
        failures.append((seed, repr(e)))


def test_one_compiled_function_replayed_by_threads_at_once():
    """A replay takes the engine's lock only, not its function's: four threads replay one
    compiled function, two per shape (two plans, each with one set of argument and result
    buffers). Calls alternate between the plans, so the fast path misses its guard and
    the locked path replays the other plan while other threads replay. Every value is
    the eager one. (No recording happens meanwhile: a recording sees every thread's
    ops.)"""
    @tg.compile
    def f(x):
        loss = (x.tanh() * 2.0).sum()
        loss.backward()
        return loss

    for n in (3, 4):                    # record both plans first
        for _ in range(2):
            f(tg.ones(n, dtype=tg.float64, requires_grad=True))
    assert f.stats == {"recordings": 2, "replays": 2}
    failures = []
    _run_threads(lambda s: _compiled_work(f, s, 500, failures), 4)
    assert failures == []
    assert f.stats["recordings"] == 2


def test_set_num_threads_sets_the_openblas_the_products_run_on():
    from tapegrad._engine import blas
    if blas.SOURCE != "numpy":
        pytest.skip("the products run on SciPy's BLAS here")
    get = blas.LIBRARY.scipy_openblas_get_num_threads64_
    before = tg.get_num_threads()
    from tapegrad._engine import blas_library
    scipys = blas_library.scipy_openblas()
    try:
        tg.set_num_threads(1)
        assert get() == 1
        assert scipys is None or scipys.scipy_openblas_get_num_threads() == 1
        tg.set_num_threads(2)
        assert get() == 2
        assert scipys is None or scipys.scipy_openblas_get_num_threads() == 2
    finally:
        tg.set_num_threads(before)


def _grad_mode_beside_no_grad_thread(lib):
    """The training thread records while another thread sits inside no_grad (and
    inference_mode, set_grad_enabled(False)); a thread started inside no_grad starts with
    grad mode on. Returns what each thread saw."""
    x = lib.ones(3, requires_grad=True)
    inside, leave = threading.Event(), threading.Event()
    seen = {}

    def other(mode):
        with mode():
            inside.set()
            leave.wait()
            seen[mode.__name__] = ((x * 2).requires_grad, lib.is_grad_enabled())

    for mode in (lib.no_grad, lib.inference_mode, lambda: lib.set_grad_enabled(False)):
        inside.clear()
        leave.clear()
        t = threading.Thread(target=other, args=(mode,))
        t.start()
        inside.wait()
        y = (x * 3).sum()
        seen["main " + mode.__name__] = (y.requires_grad, lib.is_grad_enabled())
        leave.set()
        t.join()
        y.backward()
        seen["grad " + mode.__name__] = x.grad.tolist()
        x.grad = None

    def fresh():
        seen["fresh"] = lib.is_grad_enabled()
    with lib.no_grad():
        t = threading.Thread(target=fresh)
        t.start()
        t.join()
    return seen


def test_grad_mode_is_per_thread_as_in_pytorch():
    seen = _grad_mode_beside_no_grad_thread(tg)
    assert seen["main no_grad"] == (True, True) and seen["no_grad"] == (False, False)
    assert seen["grad no_grad"] == [3.0, 3.0, 3.0]
    assert seen["fresh"] is True
    torch = pytest.importorskip("torch")
    assert seen == _grad_mode_beside_no_grad_thread(torch)
