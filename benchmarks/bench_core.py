"""tapegrad's asv suite: op overhead, scalar chains, a training step, large elementwise
chains, peak memory and warm start.

Run from the repository root: ``asv machine --yes`` once, then
``asv run --python=same --quick`` (or without --quick for real numbers).

Data comes from fixed seeds. Every class checks in ``setup`` that the tapegrad at hand
has what it uses and raises NotImplementedError otherwise (asv then skips it), so that
older checkouts still load. Note on units: asv re-runs ``setup`` before every timed
call when a class has one, so microsecond-scale work is batched inside the benchmark
(``OPS`` ops per call): divide asv's number by ``OPS`` for the time per op.
Mostly tapegrad's basic PyTorch-style surface (creation, random draws, arithmetic, unary ops,
reductions, matmul, backward, no_grad, in-place sub_); MLPStepCE and OpsMix use
nn.functional and the indexing ops, and skip on checkouts that lack them.
"""
import compileall
import os
import subprocess
import sys
import time
import types

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_IMPORT_ERROR = None
try:
    import tapegrad as tg
except ImportError:
    # asv runs benchmarks from a temporary directory with only this package importable;
    # in an "existing" environment nothing is installed: use this checkout's tapegrad.
    sys.path.insert(0, REPO)
    try:
        import tapegrad as tg
    except Exception as e:      # a checkout that does not import: every class skips
        tg, _IMPORT_ERROR = None, e
except Exception as e:          # noqa: BLE001  (same: skip rather than break discovery)
    tg, _IMPORT_ERROR = None, e

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # asv runs us from elsewhere
from workloads import LR, CHAIN_OPS, CHAIN_X0, scalar_chain  # noqa: E402
TIMEOUT = 600                   # a cold kernel cache compiles on first use


def _need(*names):
    """Raise NotImplementedError (asv: skip) unless tapegrad has every dotted name."""
    if tg is None:
        raise NotImplementedError(f"tapegrad does not import: {_IMPORT_ERROR!r}")
    for name in names:
        obj = tg
        for part in name.split("."):
            if not hasattr(obj, part):
                raise NotImplementedError(f"tapegrad has no {name}")
            obj = getattr(obj, part)


class TinyOp:
    """One recorded op on tiny tensors: the per-op cost of recording."""
    OPS = 1000
    timeout = TIMEOUT

    def setup(self):
        _need("tensor", "float32")
        rng = np.random.default_rng(1)
        self.a = tg.tensor(rng.standard_normal(4).astype(np.float32), requires_grad=True)
        self.b = tg.tensor(rng.standard_normal(4).astype(np.float32))
        self.a * self.b             # load the kernel

    def time_tiny_op(self):
        """1000 recorded `a*b` on shape (4,), a.requires_grad (divide by 1000)."""
        a, b = self.a, self.b
        for _ in range(self.OPS):
            a * b


class RoundTrip:
    """Record, sum, backward on tiny tensors: the fixed cost of one backward."""
    OPS = 100
    timeout = TIMEOUT

    def setup(self):
        _need("tensor", "float32", "Tensor.backward", "Tensor.sum")
        rng = np.random.default_rng(1)
        self.a = tg.tensor(rng.standard_normal(4).astype(np.float32), requires_grad=True)
        self.b = tg.tensor(rng.standard_normal(4).astype(np.float32))
        self.time_round_trip()      # load the kernels

    def time_round_trip(self):
        """100 x `a.grad = None; (a*b).sum().backward()` on shape (4,) (divide by 100)."""
        a, b = self.a, self.b
        for _ in range(self.OPS):
            a.grad = None
            (a * b).sum().backward()


class ScalarChainForward:
    """Record a 10,000-op chain on a 0-d float64 tensor: the per-op recording cost
    (divide by 10,000 for the time per op)."""
    OPS = CHAIN_OPS
    timeout = TIMEOUT

    def setup(self):
        _need("tensor", "float64", "Tensor.tanh", "Tensor.backward")
        self.x = tg.tensor(CHAIN_X0, dtype=tg.float64, requires_grad=True)
        scalar_chain(self.x, 2).backward()        # load the kernels

    def time_scalar_chain_forward(self):
        scalar_chain(self.x, CHAIN_OPS // 5)


class ScalarChainBackward:
    """Sweep the 10,000-node graph of ScalarChainForward (divide by 10,000 for the time
    per node). A graph serves one backward: setup records a fresh one before every
    timed call (number = 1, no warm-up calls, also under asv runners that would
    otherwise batch calls after a single setup)."""
    OPS = CHAIN_OPS
    number = 1
    repeat = (5, 20, 20.0)
    warmup_time = 0
    timeout = TIMEOUT

    def setup(self):
        _need("tensor", "float64", "Tensor.tanh", "Tensor.backward")
        self.x = tg.tensor(CHAIN_X0, dtype=tg.float64, requires_grad=True)
        scalar_chain(self.x, 2).backward()        # load the kernels
        self.x.grad = None
        self.y = scalar_chain(self.x, CHAIN_OPS // 5)

    def teardown(self):
        self.y = None

    def time_scalar_chain_backward(self):
        self.y.backward()


def _mlp_data(obj):
    rng = np.random.default_rng(2)
    f = np.float32
    obj.X = tg.tensor(rng.standard_normal((32, 64)).astype(f))
    obj.params = [
        tg.tensor((rng.standard_normal((64, 128)) / 8.0).astype(f), requires_grad=True),
        tg.tensor((0.1 * rng.standard_normal(128)).astype(f), requires_grad=True),
        tg.tensor((rng.standard_normal((128, 10)) / np.sqrt(128)).astype(f), requires_grad=True),
        tg.tensor((0.1 * rng.standard_normal(10)).astype(f), requires_grad=True)]
    labels = rng.integers(0, 10, 32)
    onehot = np.zeros((32, 10), f)
    onehot[np.arange(32), labels] = 1
    obj.onehot = tg.tensor(onehot)
    return labels


def _sgd(params):
    with tg.no_grad():
        for p in params:
            p.sub_(p.grad * LR)
            p.grad = None


class MLPStep:
    """Eager training step of a hand-written 64-128-10 MLP, batch 32, float32:
    forward, cross-entropy via logsumexp, backward, SGD update under no_grad."""
    timeout = TIMEOUT

    def setup(self):
        _need("tensor", "float32", "no_grad", "Tensor.relu", "Tensor.max", "Tensor.exp",
              "Tensor.log", "Tensor.mean", "Tensor.sub_", "Tensor.detach", "Tensor.__matmul__")
        _mlp_data(self)
        self.time_mlp_step()        # load the kernels

    def time_mlp_step(self):
        W1, b1, W2, b2 = self.params
        h = (self.X @ W1 + b1).relu()
        z = h @ W2 + b2
        m = z.max(1, keepdim=True).values.detach()
        lse = (z - m).exp().sum(1, keepdim=True).log() + m
        loss = (lse - (z * self.onehot).sum(1, keepdim=True)).mean()
        loss.backward()
        _sgd(self.params)


class MLPStepCE:
    """The MLP step as people write it: nn.functional.cross_entropy (class indices) and
    optim.SGD."""
    timeout = TIMEOUT

    def setup(self):
        _need("tensor", "nn.functional.cross_entropy", "optim.SGD", "Tensor.relu")
        self.labels = tg.tensor(_mlp_data(self).astype(np.int64))
        self.opt = tg.optim.SGD(self.params, lr=LR)
        self.time_mlp_step_ce()

    def time_mlp_step_ce(self):
        W1, b1, W2, b2 = self.params
        self.opt.zero_grad()
        loss = tg.nn.functional.cross_entropy((self.X @ W1 + b1).relu() @ W2 + b2, self.labels)
        loss.backward()
        self.opt.step()


class ReplayMLPStepCE:
    """MLPStepCE's step under tapegrad.compile: forward, backward and the SGD update
    replayed in one compiled call per step (parameter: steps per call)."""
    timeout = TIMEOUT
    params = [1, 16]
    param_names = ["steps_per_call"]

    def setup(self, k):
        _need("compile", "nn.functional.cross_entropy", "optim.SGD", "stack")
        d = types.SimpleNamespace()         # (self.params is asv's parameter list)
        labels = tg.tensor(_mlp_data(d).astype(np.int64))
        opt = tg.optim.SGD(d.params, lr=LR)
        W1, b1, W2, b2 = d.params

        def step(x, y):
            opt.zero_grad()
            loss = tg.nn.functional.cross_entropy((x @ W1 + b1).relu() @ W2 + b2, y)
            loss.backward()
            opt.step()
            return loss
        self.step = tg.compile(step, steps=k if k > 1 else None)
        self.args = ((tg.stack([d.X] * k), tg.stack([labels] * k)) if k > 1
                     else (d.X, labels))
        self.step(*self.args)       # record
        self.step(*self.args)       # first replay (plans the memory)

    def time_replay_mlp_step_ce(self, k):
        self.step(*self.args)


class ReplayTinyMSE:
    """A 2-16-16-1 model, batch 16, F.mse_loss + optim.SGD, replayed: per-op overhead is
    everything here."""
    timeout = TIMEOUT

    def setup(self):
        _need("compile", "nn.functional.mse_loss", "optim.SGD")
        rng = np.random.default_rng(4)
        f = np.float32
        x = tg.tensor(rng.standard_normal((16, 2)).astype(f))
        y = tg.tensor(rng.standard_normal((16, 1)).astype(f))
        ps = []
        for a, b in ((2, 16), (16, 16), (16, 1)):
            ps.append(tg.tensor((rng.standard_normal((a, b)) / np.sqrt(a)).astype(f),
                                requires_grad=True))
            ps.append(tg.tensor((0.1 * rng.standard_normal(b)).astype(f), requires_grad=True))
        opt = tg.optim.SGD(ps, lr=LR)

        def step(x, y):
            opt.zero_grad()
            h = (x @ ps[0] + ps[1]).tanh()
            h = (h @ ps[2] + ps[3]).tanh()
            loss = tg.nn.functional.mse_loss(h @ ps[4] + ps[5], y)
            loss.backward()
            opt.step()
            return loss
        self.step = tg.compile(step)
        self.args = (x, y)
        self.step(x, y)
        self.step(x, y)

    def time_replay_tiny_mse(self):
        self.step(*self.args)


class OpsMix:
    """Indexing, slicing, cat, softmax, clamp, where, logsumexp, var: forward+backward."""
    timeout = TIMEOUT

    def setup(self):
        _need("cat", "where", "Tensor.softmax", "Tensor.logsumexp", "Tensor.var",
              "Tensor.clamp", "Tensor.__getitem__")
        rng = np.random.default_rng(5)
        self.x = tg.tensor(rng.standard_normal((64, 32)).astype(np.float32), requires_grad=True)
        self.idx = tg.tensor(rng.permutation(64).astype(np.int64))
        self.time_ops_mix()

    def time_ops_mix(self):
        x = self.x
        x.grad = None
        y = tg.cat([x[:, :16].softmax(1), x[self.idx][:, 16:].clamp(-1, 1)], 1)
        z = tg.where(y > 0, y, y * 0.1)
        (z.logsumexp(1) + z.var(1)).sum().backward()


class Chain1M:
    """`(sin(x)*exp(x) + x**2).sum()` forward+backward on 1M elements."""
    params = ["float32", "float64"]
    param_names = ["dtype"]
    timeout = TIMEOUT

    def setup(self, dtype):
        _need("tensor", dtype, "Tensor.sin", "Tensor.exp", "Tensor.backward")
        x = np.random.default_rng(3).standard_normal(1_000_000).astype(dtype)
        self.x = tg.tensor(x, requires_grad=True)
        self.time_chain_1m(dtype)   # load the kernels

    def time_chain_1m(self, dtype):
        x = self.x
        x.grad = None
        (x.sin() * x.exp() + x ** 2).sum().backward()


class RandomDraw1M:
    """1M-element draws from PyTorch's stream (tapegrad.Generator's mt19937): rand's
    uniforms and randn's normals (Box-Muller on blocks of 16)."""
    params = [["rand", "randn"], ["float32", "float64"]]
    param_names = ["fn", "dtype"]
    timeout = TIMEOUT

    def setup(self, fn, dtype):
        _need(fn, dtype, "manual_seed", "Generator")
        tg.manual_seed(0)
        self.time_random_draw_1m(fn, dtype)    # load the kernels

    def time_random_draw_1m(self, fn, dtype):
        getattr(tg, fn)(1_000_000, dtype=getattr(tg, dtype))


class ReplayChain1M:
    """Chain1M's step under tapegrad.compile: its five elementwise ops run as one fused
    loop, forward and backward."""
    params = ["float32", "float64"]
    param_names = ["dtype"]
    timeout = TIMEOUT

    def setup(self, dtype):
        _need("compile", "tensor", "Tensor.sin", "Tensor.exp", "Tensor.backward")
        x = np.random.default_rng(3).standard_normal(1_000_000).astype(dtype)
        self.x = tg.tensor(x, requires_grad=True)

        def step(x):
            (x.sin() * x.exp() + x ** 2).sum().backward()
        self.step = tg.compile(step)
        self.time_replay_chain_1m(dtype)    # records
        self.time_replay_chain_1m(dtype)    # compiles the fused loop

    def time_replay_chain_1m(self, dtype):
        self.x.grad = None
        self.step(self.x)


class PeakMemChain:
    """Peak memory (process max RSS, imports included) of a 200-op elementwise chain
    on 1M elements, forward and backward: what the tape keeps alive."""
    params = ["float32", "float64"]
    param_names = ["dtype"]
    timeout = TIMEOUT

    def setup(self, dtype):
        _need("tensor", dtype, "Tensor.tanh", "Tensor.backward")
        self.x = tg.tensor(np.random.default_rng(4).standard_normal(1_000_000).astype(dtype),
                           requires_grad=True)

    def peakmem_chain_200ops(self, dtype):
        x = self.x
        x.grad = None
        scalar_chain(x, 200 // 5).sum().backward()        # 200 chain ops, then the sum


class WarmStart:
    """Seconds for a fresh interpreter to import tapegrad and run one tiny backward
    with its caches already warm (median of 3): the kernel cache, and the bytecode of
    tapegrad's modules, which an installed wheel has and an editable checkout gets at its
    first import, unless PYTHONDONTWRITEBYTECODE is set (then every import compiled the
    sources again, a noticeable share of a warm start)."""
    timeout = TIMEOUT
    unit = "seconds"
    CODE = ("import tapegrad as tg; x = tg.ones(3, requires_grad=True); "
            "(x * x).sum().backward()")

    def setup(self):
        _need("ones", "Tensor.backward")
        root = os.path.dirname(os.path.dirname(os.path.abspath(tg.__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"]
                                    if env.get("PYTHONPATH") else "")
        self.env = env
        self._run()                 # fill the kernel cache
        compileall.compile_dir(os.path.join(root, "tapegrad"), quiet=1)

    def _run(self):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", self.CODE], env=self.env, check=True,
                       stdout=subprocess.DEVNULL, timeout=TIMEOUT)
        return time.perf_counter() - t0

    def track_warm_start_seconds(self):
        return sorted(self._run() for _ in range(3))[1]


class ColdStart:
    """Seconds for a fresh interpreter with an EMPTY kernel cache: compile time, which a
    first-time user pays once (the cache directory is a fresh temporary one each run)."""
    timeout = TIMEOUT
    unit = "seconds"
    number = 1
    repeat = 1
    FIRST_BACKWARD = WarmStart.CODE
    DEMO_KERNELS = ["-m", "tapegrad", "demo", "--steps", "2"]     # the README's demo

    def setup(self):
        _need("ones", "Tensor.backward")
        root = os.path.dirname(os.path.dirname(os.path.abspath(tg.__file__)))
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = root + (os.pathsep + self.env["PYTHONPATH"]
                                         if self.env.get("PYTHONPATH") else "")

    def _cold(self, args):
        """args: Python code, or the interpreter's arguments as a list."""
        import shutil
        import tempfile
        cache = tempfile.mkdtemp(prefix="tapegrad-cold-")
        try:
            env = dict(self.env, TAPEGRAD_CACHE_DIR=cache)
            t0 = time.perf_counter()
            args = args if isinstance(args, list) else ["-c", args]
            subprocess.run([sys.executable] + args, env=env, check=True,
                           stdout=subprocess.DEVNULL, timeout=TIMEOUT)
            return time.perf_counter() - t0
        finally:
            shutil.rmtree(cache, ignore_errors=True)

    def track_cold_start_first_backward_seconds(self):
        return self._cold(self.FIRST_BACKWARD)

    def track_cold_start_demo_kernels_seconds(self):
        return self._cold(self.DEMO_KERNELS)
