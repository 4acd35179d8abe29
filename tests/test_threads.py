"""Several Python threads using tapegrad at once get the same values as one thread: the
multi-step engine paths (int arguments, then the call; the sweep's set-up; table growth)
are atomic."""
import sys
import threading

import numpy as np

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


def test_threads_compute_what_one_thread_computes():
    steps = 150
    expected = {seed: _work(seed, steps) for seed in range(4)}
    got = {}
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)         # switch threads as often as possible
    try:
        threads = [threading.Thread(target=lambda s=seed: got.__setitem__(s, _work(s, steps)))
                   for seed in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    for seed in range(4):
        assert len(got[seed]) == steps
        for (l1, gx1, gw1), (l2, gx2, gw2) in zip(expected[seed], got[seed]):
            assert l1 == l2
            np.testing.assert_array_equal(gx1, gx2)
            np.testing.assert_array_equal(gw1, gw2)
