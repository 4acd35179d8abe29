"""Large elementwise loops run on several threads (tapegrad/_engine/threads.py): the parts
are disjoint index ranges of a flat loop, so every thread count gives bitwise the same
values, forward and backward; strided loops stay on one thread."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad._engine import layout as L
from tapegrad._engine.state import engine
from tests.helpers import REPO_ROOT

RNG = np.random.default_rng(7)


@pytest.fixture
def small_parts():
    """Split loops of a few thousand elements (the default minimum is 65,536 per
    thread), so odd sizes and many parts are cheap to test; restore afterwards."""
    E = engine()
    old_min, old_n = int(E.ctx[L.C_PAR_MIN]), tg.get_num_threads()
    E.ctx[L.C_PAR_MIN] = 1000
    yield E
    E.ctx[L.C_PAR_MIN] = old_min
    tg.set_num_threads(old_n)


def _splits():
    return int(engine().ctx[L.C_NSPLIT])


def _step(x0, w0, dtype):
    """Unary, binary, scalar and in-place ops and their gradients."""
    x = tg.tensor(x0, dtype=dtype, requires_grad=True)
    w = tg.tensor(w0, dtype=dtype, requires_grad=True)
    y = (x.sin() * w.exp() + x ** 2) / (w.abs() + 1.5) - x.tanh() * 0.5
    z = y.sigmoid() * 1
    z.mul_(3.0)
    z.add_(w)
    z.sum().backward()
    return z.detach().numpy(), x.grad.numpy(), w.grad.numpy()


@pytest.mark.parametrize("dtype", [tg.float32, tg.float64])
def test_every_thread_count_gives_the_same_bits(small_parts, dtype):
    n = 3 * 7919 + 13                  # not a multiple of any part size
    x0, w0 = RNG.standard_normal(n), RNG.standard_normal(n)
    tg.set_num_threads(1)
    before = _splits()
    ref = _step(x0, w0, dtype)
    assert _splits() == before          # one thread: nothing split
    for threads in (2, 3, 5):
        tg.set_num_threads(threads)
        before = _splits()
        got = _step(x0, w0, dtype)
        assert _splits() - before >= 10, "the loops were not split"
        for a, b in zip(got, ref):
            np.testing.assert_array_equal(a, b)


def test_split_values_are_right(small_parts):
    """Against NumPy, float64: the forward and the gradient of x*sin(x) + exp(-x)."""
    tg.set_num_threads(2)
    x0 = RNG.uniform(-3, 3, 10_007)
    x = tg.tensor(x0, requires_grad=True)
    before = _splits()
    y = x * x.sin() + (-x).exp()
    y.sum().backward()
    assert _splits() > before
    np.testing.assert_allclose(y.detach().numpy(), x0 * np.sin(x0) + np.exp(-x0), rtol=1e-14)
    np.testing.assert_allclose(x.grad.numpy(), np.sin(x0) + x0 * np.cos(x0) - np.exp(-x0),
                               rtol=1e-13, atol=1e-15)


def test_strided_and_small_loops_stay_on_one_thread(small_parts):
    tg.set_num_threads(2)
    a = tg.tensor(RNG.standard_normal((300, 200)))
    before = _splits()
    t = a.t() * 2.0                     # a transposed view: not flat
    assert _splits() == before
    np.testing.assert_array_equal(t.numpy(), a.numpy().T * 2.0)
    tg.tensor(RNG.standard_normal(1999)) + 1.0       # under two parts' minimum
    assert _splits() == before
    tg.tensor(RNG.standard_normal(2000)) + 1.0
    assert _splits() == before + 1


def test_default_size_threshold():
    """With the default minimum, a million elements split and ten thousand do not."""
    E = engine()
    old = tg.get_num_threads()
    try:
        tg.set_num_threads(2)
        assert E.ctx[L.C_PAR_MIN] == 1 << 16
        before = _splits()
        tg.ones(10_000) * 2.0
        assert _splits() == before
        big = tg.ones(1_000_000) * 2.0
        assert _splits() == before + 1
        assert float(big.sum()) == 2_000_000.0
    finally:
        tg.set_num_threads(old)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", None])
def test_set_num_threads_rejects_non_positive_integers(bad):
    with pytest.raises(ValueError, match=r"set_num_threads: expected a positive integer"):
        tg.set_num_threads(bad)


def test_get_num_threads_reports_the_setting():
    old = tg.get_num_threads()
    try:
        tg.set_num_threads(3)
        assert tg.get_num_threads() == 3
        tg.set_num_threads(1)
        assert tg.get_num_threads() == 1
        assert engine().ctx[L.C_WORKER] == 0
    finally:
        tg.set_num_threads(old)


def test_default_comes_from_the_environment():
    import subprocess
    import sys
    import os
    root = REPO_ROOT
    code = "import tapegrad as tg; print(tg.get_num_threads())"
    for env, want in (({"TAPEGRAD_NUM_THREADS": "3"}, "3"),
                      ({"TAPEGRAD_NUM_THREADS": "", "OMP_NUM_THREADS": "1"}, "1")):
        res = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                             text=True, env=dict(os.environ, **env), timeout=300)
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == want
