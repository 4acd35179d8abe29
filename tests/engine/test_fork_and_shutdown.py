"""A process forked after tapegrad was used works in the child (os.fork, multiprocessing's
fork start method, DataLoader workers), even when another thread held the engine's lock at
the fork; interpreter shutdown with live tensors, retained graphs, hooks, compiled steps
and a daemon thread still computing is clean. Each case runs in a fresh interpreter and
must exit 0 with nothing on stderr."""
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def run(code, timeout=300):
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONWARNINGS="default")
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=timeout, env=env, cwd=ROOT)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert p.stderr == "", p.stderr
    return p.stdout


WARM = """
import os, sys, threading, time
import numpy as np
import tapegrad as tg
tg.set_num_threads(2)
w = tg.randn(200000, requires_grad=True)
(w * 2).sin().sum().backward()       # engine, sweep and a split elementwise loop in use
"""


def test_os_fork_while_another_thread_holds_the_engine_lock():
    out = run(WARM + """
E = tg._engine.state.engine()
ready = threading.Event()
def holder():
    with E.lock:
        ready.set()
        time.sleep(0.5)
t = threading.Thread(target=holder)
t.start()
ready.wait()
pid = os.fork()
if pid == 0:
    y = tg.randn(200000, requires_grad=True)
    (y * 3).sum().backward()
    ok = float(y.grad[0]) == 3.0 and float(y.grad[-1]) == 3.0
    os._exit(0 if ok else 3)
_, st = os.waitpid(pid, 0)
t.join()
print(os.waitstatus_to_exitcode(st))
""")
    assert out.strip() == "0"


def test_fork_during_a_paused_sweep_in_another_thread():
    # a hook blocks the sweep of another thread (holding the lock) while this one forks:
    # the child has neither that thread nor its sweep, and backward works there
    out = run(WARM + """
E = tg._engine.state.engine()
inside, go = threading.Event(), threading.Event()
def hook(g):
    inside.set()
    go.wait()
    return g
def trainer():
    x = tg.ones(3, requires_grad=True)
    y = x * 2
    y.register_hook(hook)
    y.sum().backward()
t = threading.Thread(target=trainer)
t.start()
inside.wait()
tg._engine.state._FORK_WAIT = 0.2
pid = os.fork()
if pid == 0:
    a = tg.ones(4, requires_grad=True)
    with tg.enable_grad():      # (the hook's thread had grad mode off while grad mode is
        b = (a * 5).sum()       # process-wide; per-thread grad mode makes this moot)
    b.backward()
    os._exit(0 if a.grad.tolist() == [5.0] * 4 else 3)
go.set()
t.join()
_, st = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(st))
""")
    assert out.strip() == "0"


def test_multiprocessing_fork_pool():
    out = run(WARM + """
import multiprocessing as mp
def work(i):
    x = tg.full((1000,), float(i), requires_grad=True)
    (x * x).sum().backward()
    return float(x.grad.sum())
if __name__ == "__main__":
    with mp.get_context("fork").Pool(2) as pool:
        print(pool.map(work, range(4)))
""")
    assert out.strip() == str([2000.0 * i for i in range(4)])


def test_dataloader_fork_workers_after_training():
    out = run(WARM + """
from tapegrad.utils.data import DataLoader, TensorDataset
class Sq:
    def __len__(self):
        return 8
    def __getitem__(self, i):
        x = tg.full((2,), float(i), requires_grad=True)
        (x * x).sum().backward()            # autograd inside the worker
        return x.grad.detach()
if __name__ == "__main__":
    dl = DataLoader(Sq(), batch_size=4, num_workers=2, multiprocessing_context="fork")
    print([b.tolist() for b in dl])
""")
    assert out.strip() == str([[[2.0 * i] * 2 for i in range(4)],
                               [[2.0 * i] * 2 for i in range(4, 8)]])


def test_shutdown_with_live_graphs_hooks_compiled_steps_and_a_daemon_thread():
    out = run(WARM + """
from tapegrad import nn, optim
model = nn.Linear(8, 4)
opt = optim.SGD(model.parameters(), lr=0.1)
def step(x):
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    return loss
cstep = tg.compile(step)
x = tg.randn(16, 8)
for _ in range(3):
    cstep(x)
a = tg.randn(5, requires_grad=True)
b = (a * 2).exp()
b.register_hook(lambda g: g * 2)
a.register_hook(lambda g: g)
keep = b.sum()
keep.backward(retain_graph=True)        # a retained graph, alive at exit
c = a.sin()
c.retain_grad()
cycle = [c]
cycle.append(cycle)                     # reached only by the collector at shutdown
stop = threading.Event()
def busy():
    v = tg.randn(64, requires_grad=True)
    while not stop.is_set():
        (v * v).sum().backward()
threading.Thread(target=busy, daemon=True).start()
time.sleep(0.2)
print("done")
""")
    assert out.strip() == "done"


def test_shutdown_in_a_forked_child_and_its_parent():
    out = run(WARM + """
g = (w * 3).exp()
pid = os.fork()
if pid == 0:
    (g.sum()).backward(retain_graph=True)
    sys.exit(0)                         # a normal exit of the child (atexit, finalizers)
_, st = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(st))
""")
    assert out.strip() == "0"
