"""tapegrad against its peers on the same workloads, as a Markdown table.

    python -m benchmarks.compare [--threads N] [--quick] [--only PATTERN] [--rounds R]
                                 [--save] [--html REPORT.html]
    python benchmarks/compare.py ...

--save also writes the report to benchmarks/results/ (machine-written, named by the
run's date, commit and thread count): the place the project's performance claims cite.
--html writes the same report as one self-contained HTML file: the table, a plot of
each workload's tapegrad/peer ratio per peer on a log axis, and the history across
commits of the asv suite's key benchmarks (ASV_KEY_BENCHMARKS) where asv results exist
(matplotlib, embedded as base64 PNGs; nothing is fetched when the file is opened). The
docs build (scripts/docs_hooks.py) draws the ratio plot of the newest saved report.

Peers: PyTorch eager, JAX (``jax.jit``) and hand-written NumPy forward+backward (the
floor), each only if importable. Every workload is first run once on fresh state by
every library and the values compared with tapegrad's (loss, gradients, updated
parameters); a row whose peers disagree is aborted with a message instead of timed.
Then, after warm-up (tapegrad compiles its kernels on first use and caches them on
disk, so a first run on a new checkout takes minutes), the libraries are timed in
interleaved rounds (round r starts with a different library) so that machine drift hits
all of them alike; a sample is one batch of calls, the table shows medians over rounds.
The header gives the date, versions, CPU and how fast the host ran plain Python before
and after the run; below the table, the project's targets (ratios to PyTorch) that the
run measured, each met or by how much not.

Thread-count environment variables are set before NumPy, Numba or PyTorch are imported,
so nothing heavy is imported at module level here (asv also imports this module when it
discovers benchmarks: keep names starting with time_/track_/peakmem_/mem_ out of it).
"""
import argparse
import datetime
import gc
import os
import platform
import re
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_pc = time.perf_counter

if __package__:
    from .workloads import (LR, CHAIN_OPS, CHAIN_CYCLES, CHAIN_X0, CHAIN_MUL, CHAIN_ADD,
                            CHAIN_SCALE, scalar_chain)
else:                                   # run as a plain script
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from workloads import (LR, CHAIN_OPS, CHAIN_CYCLES, CHAIN_X0, CHAIN_MUL, CHAIN_ADD,
                           CHAIN_SCALE, scalar_chain)
BIG = 1_000_000
RTOL = {"float32": 1e-4, "float64": 1e-9}
PEERS = ("torch", "jax", "numpy")
THREAD_VARS = ("TAPEGRAD_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
               "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
               "NUMEXPR_NUM_THREADS")


# ---------------------------------------------------------------- setup
def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1,
                   help="threads for every library (default 1)")
    p.add_argument("--quick", action="store_true", help="fewer and shorter rounds")
    p.add_argument("--only", metavar="PATTERN",
                   help="run only workloads whose key or title matches this regex")
    p.add_argument("--rounds", type=int, help="timing rounds (default 31, --quick 7)")
    p.add_argument("--save", action="store_true",
                   help="also write the report to benchmarks/results/")
    p.add_argument("--html", metavar="PATH",
                   help="also write the report as a self-contained HTML file with plots "
                        "(needs matplotlib)")
    a = p.parse_args(argv)
    if a.threads < 1:
        p.error("--threads must be >= 1")
    return a


def set_threads(n):
    """Must run before NumPy/Numba/PyTorch/JAX are imported."""
    early = [m for m in ("numpy", "numba", "torch", "jax") if m in sys.modules]
    if early:
        print(f"warning: {', '.join(early)} imported before the thread count was set",
              file=sys.stderr)
    for var in THREAD_VARS:
        os.environ[var] = str(n)
    if n > 1:
        # Interleaved libraries each keep a thread pool; pools that spin-wait after a
        # parallel region starve the next library's (on two cores, PyTorch's MLP step
        # after NumPy's OpenBLAS matmuls ran over a hundred times slower).
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if n == 1:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   " --xla_cpu_multi_thread_eigen=false"
                                   " intra_op_parallelism_threads=1").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


class Libs:
    """The imported libraries: np, tg, and the peers that could be imported."""

    def __init__(self, threads):
        if REPO not in sys.path:        # measure this checkout, also as a plain script
            sys.path.insert(0, REPO)
        import numpy as np
        import tapegrad as tg
        if hasattr(tg, "set_num_threads"):
            tg.set_num_threads(threads)
        self.np, self.tg = np, tg
        self.torch = self.jax = self.jnp = None
        self.skipped = {}
        try:
            import torch
            torch.set_num_threads(threads)
            try:
                torch.set_num_interop_threads(threads)
            except RuntimeError:
                pass
            self.torch = torch
        except ImportError as e:
            self.skipped["torch"] = str(e)
        try:
            import jax
            jax.config.update("jax_enable_x64", True)    # float64 rows; float32 stays 32
            import jax.numpy as jnp
            self.jax, self.jnp = jax, jnp
        except ImportError as e:
            self.skipped["jax"] = str(e)
        self.peers = [p for p in PEERS if p == "numpy" or getattr(self, p) is not None]


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_rev():
    try:
        out = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        rev = out.stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "tapegrad"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return rev + ("+dirty" if dirty else "") if rev else "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def host_loop_seconds(n=10_000_000):
    """Seconds per 10**7 additions in a plain Python loop of n: how fast this host runs
    Python right now (a shared machine drifts by 2x and more), printed with every table."""
    t0 = _pc()
    s = 0
    for i in range(n):
        s += i
    return (_pc() - t0) * 1e7 / n


def header(L, threads, loops=()):
    import numba
    lines = [
        f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"tapegrad {L.tg.__version__} (git {git_rev()}), numpy {L.np.__version__}, "
        f"numba {numba.__version__}, "
        f"torch {L.torch.__version__ if L.torch else 'absent'}, "
        f"jax {L.jax.__version__ if L.jax else 'absent'}, "
        f"Python {platform.python_version()}",
        f"CPU: {cpu_model()} ({os.cpu_count()} logical cores); threads: {threads}"
        + (f" (OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']})"
           if "OMP_WAIT_POLICY" in os.environ else ""),
    ]
    if loops:
        lines.append("host speed: a plain Python loop of 10^7 additions took "
                     + " s before and ".join(f"{t:.2f}" for t in loops) + " s after the run")
    return lines


# ---------------------------------------------------------------- implementations
class Impl:
    """One library's version of a workload.

    loop(n): run n calls (the harness times it); or timed(n): run n calls and return
    {row: seconds}, for workloads that time phases separately. values(): run once and
    return {name: array} to compare across libraries. fixed_n: calls per sample."""

    def __init__(self, values, loop=None, timed=None, fixed_n=None):
        self.values, self.fixed_n = values, fixed_n
        if timed is None:
            def timed(n, loop=loop):
                t0 = _pc()
                loop(n)
                return {"main": _pc() - t0}
        self.timed = timed


def _np(t):
    """A copy of a tapegrad/torch/jax value as a NumPy array."""
    if hasattr(t, "detach"):
        t = t.detach().numpy()
    import numpy as np
    return np.array(t, copy=True)


def _eager(L, lib):
    """tapegrad and torch share the PyTorch spelling: the same code runs on both."""
    return {"tapegrad": L.tg, "torch": L.torch}.get(lib)


class Workload:
    key = title = ""
    dtype = "float32"
    rows = (("main", "", "µs/call", 1),)     # (row key, label suffix, unit, units/call)
    tol = {}                                 # name -> rtol override

    def __init__(self, L):
        self.L = L

    def make(self, lib):
        M = _eager(self.L, lib)
        if M is not None:
            return self.eager(M)
        fn = getattr(self, lib, None)
        return fn() if fn else None


class TinyOp(Workload):
    key, title = "tiny_op", "tiny op recorded: a*b, shape (4,)"
    rows = (("main", "", "µs/op", 1),)

    def data(self):
        rng = self.L.np.random.default_rng(1)
        f = self.L.np.float32
        return rng.standard_normal(4).astype(f), rng.standard_normal(4).astype(f)

    def eager(self, M):
        an, bn = self.data()
        a, b = M.tensor(an, requires_grad=True), M.tensor(bn)

        def loop(n):
            for _ in range(n):
                a * b
        return Impl(lambda: {"a*b": _np(a * b)}, loop)

    def numpy(self):
        a, b = self.data()

        def loop(n):
            for _ in range(n):
                a * b
        return Impl(lambda: {"a*b": a * b}, loop)

    def jax(self):
        jnp = self.L.jnp
        a, b = (jnp.asarray(v) for v in self.data())
        f = self.L.jax.jit(lambda a, b: a * b)

        def loop(n):
            for _ in range(n):
                f(a, b).block_until_ready()
        return Impl(lambda: {"a*b": _np(f(a, b))}, loop)


class RoundTrip(TinyOp):
    key, title = "round_trip", "round trip: (a*b).sum().backward(), shape (4,)"
    rows = (("main", "", "µs/call", 1),)

    def eager(self, M):
        an, bn = self.data()
        a, b = M.tensor(an, requires_grad=True), M.tensor(bn)

        def loop(n):
            for _ in range(n):
                a.grad = None
                (a * b).sum().backward()

        def values():
            loop(1)
            return {"a.grad": _np(a.grad)}
        return Impl(values, loop)

    def numpy(self):
        np = self.L.np
        a, b = self.data()
        box = [None]

        def loop(n):
            for _ in range(n):
                p = a * b
                p.sum()
                box[0] = np.ones_like(p) * b        # d sum / d p, then d p / d a
        return Impl(lambda: (loop(1), {"a.grad": box[0]})[1], loop)

    def jax(self):
        jax, jnp = self.L.jax, self.L.jnp
        a, b = (jnp.asarray(v) for v in self.data())
        g = jax.jit(jax.grad(lambda a, b: (a * b).sum()))

        def loop(n):
            for _ in range(n):
                g(a, b).block_until_ready()
        return Impl(lambda: {"a.grad": _np(g(a, b))}, loop)


class ScalarChain(Workload):
    key = "scalar_chain"
    title = f"scalar chain, {CHAIN_OPS:,} ops (mul, add, tanh, pow 2, scale), float64 shape ()"
    dtype = "float64"
    rows = (("fwd", " forward", "µs/op", CHAIN_OPS),
            ("bwd", " backward", "µs/node", CHAIN_OPS))

    def eager(self, M):
        x = M.tensor(CHAIN_X0, dtype=M.float64, requires_grad=True)

        def forward():
            return scalar_chain(x)

        def timed(n):
            out = {"fwd": 0.0, "bwd": 0.0}
            for _ in range(n):
                x.grad = None
                t0 = _pc()
                y = forward()
                t1 = _pc()
                y.backward()
                t2 = _pc()
                out["fwd"] += t1 - t0
                out["bwd"] += t2 - t1
                del y
            return out

        def values():
            x.grad = None
            y = forward()
            y.backward()
            return {"y": _np(y), "x.grad": _np(x.grad)}
        return Impl(values, timed=timed, fixed_n=1)

    def numpy(self):
        np = self.L.np
        x = np.array(CHAIN_X0, np.float64)

        def forward():
            saved = []                     # the tape: tanh outputs (pow's input too)
            y = x
            for _ in range(CHAIN_CYCLES):
                y = y * CHAIN_MUL
                y = y + CHAIN_ADD
                t = np.tanh(y)
                saved.append(t)
                y = t ** 2
                y = y * CHAIN_SCALE
            return y, saved

        def backward(saved):
            g = 1.0
            for t in reversed(saved):
                g = g * CHAIN_SCALE
                g = g * (2.0 * t)
                g = g * (1.0 - t * t)
                g = g * CHAIN_MUL
            return g

        def timed(n):
            out = {"fwd": 0.0, "bwd": 0.0}
            for _ in range(n):
                t0 = _pc()
                y, saved = forward()
                t1 = _pc()
                backward(saved)
                t2 = _pc()
                out["fwd"] += t1 - t0
                out["bwd"] += t2 - t1
            return out

        def values():
            y, saved = forward()
            return {"y": np.asarray(y), "x.grad": np.asarray(backward(saved))}
        return Impl(values, timed=timed, fixed_n=1)

    def jax(self):
        jax, jnp = self.L.jax, self.L.jnp

        def f(x):
            def body(i, y):
                return jnp.tanh(y * CHAIN_MUL + CHAIN_ADD) ** 2 * CHAIN_SCALE
            return jax.lax.fori_loop(0, CHAIN_CYCLES, body, x)
        fj, gj = jax.jit(f), jax.jit(jax.grad(f))
        x = jnp.asarray(CHAIN_X0, dtype=jnp.float64)

        def timed(n):
            out = {"fwd": 0.0, "bwd": 0.0}
            for _ in range(n):
                t0 = _pc()
                fj(x).block_until_ready()
                t1 = _pc()
                gj(x).block_until_ready()      # includes its own forward
                t2 = _pc()
                out["fwd"] += t1 - t0
                out["bwd"] += t2 - t1
            return out
        return Impl(lambda: {"y": _np(fj(x)), "x.grad": _np(gj(x))}, timed=timed, fixed_n=1)


class MLPStep(Workload):
    key, title = "mlp_step", "MLP 64-128-10 training step, batch 32, float32"
    rows = (("main", "", "µs/step", 1),)
    B, D, H, C = 32, 64, 128, 10

    def data(self):
        np = self.L.np
        rng = np.random.default_rng(2)
        f = np.float32
        X = rng.standard_normal((self.B, self.D)).astype(f)
        W1 = (rng.standard_normal((self.D, self.H)) / np.sqrt(self.D)).astype(f)
        b1 = (0.1 * rng.standard_normal(self.H)).astype(f)
        W2 = (rng.standard_normal((self.H, self.C)) / np.sqrt(self.H)).astype(f)
        b2 = (0.1 * rng.standard_normal(self.C)).astype(f)
        onehot = np.zeros((self.B, self.C), f)
        onehot[np.arange(self.B), rng.integers(0, self.C, self.B)] = 1
        return X, [W1, b1, W2, b2], onehot

    def eager(self, M):
        Xn, pn, ohn = self.data()
        X, oh = M.tensor(Xn), M.tensor(ohn)
        params = [M.tensor(p, requires_grad=True) for p in pn]

        def step(record=None):
            W1, b1, W2, b2 = params
            h = (X @ W1 + b1).relu()
            z = h @ W2 + b2
            m = z.max(1, keepdim=True).values.detach()
            lse = (z - m).exp().sum(1, keepdim=True).log() + m
            loss = (lse - (z * oh).sum(1, keepdim=True)).mean()
            loss.backward()
            if record is not None:
                record["loss"] = _np(loss)
                for i, p in enumerate(params):
                    record[f"grad{i}"] = _np(p.grad)
            with M.no_grad():
                for p in params:
                    p.sub_(p.grad * LR)
                    p.grad = None
            return loss

        def loop(n):
            for _ in range(n):
                step()

        def values():
            rec = {}
            step(rec)
            for i, p in enumerate(params):
                rec[f"param{i}"] = _np(p)
            return rec
        return Impl(values, loop)

    def numpy(self):
        np = self.L.np
        X, params, oh = self.data()
        inv_b = np.float32(1.0 / self.B)

        def step(record=None):
            W1, b1, W2, b2 = params
            z1 = X @ W1 + b1
            h = np.maximum(z1, 0)
            z = h @ W2 + b2
            m = z.max(1, keepdims=True)
            e = np.exp(z - m)
            se = e.sum(1, keepdims=True)
            lse = np.log(se) + m
            loss = (lse - (z * oh).sum(1, keepdims=True)).mean()
            dz = (e / se - oh) * inv_b
            dW2 = h.T @ dz
            db2 = dz.sum(0)
            dz1 = (dz @ W2.T) * (h > 0)
            dW1 = X.T @ dz1
            db1 = dz1.sum(0)
            grads = (dW1, db1, dW2, db2)
            if record is not None:
                record["loss"] = np.asarray(loss)
                for i, g in enumerate(grads):
                    record[f"grad{i}"] = g.copy()
            for p, g in zip(params, grads):
                p -= g * np.float32(LR)
            return loss

        def loop(n):
            for _ in range(n):
                step()

        def values():
            rec = {}
            step(rec)
            for i, p in enumerate(params):
                rec[f"param{i}"] = p.copy()
            return rec
        return Impl(values, loop)

    def jax(self):
        jax, jnp = self.L.jax, self.L.jnp
        Xn, pn, ohn = self.data()
        X, oh = jnp.asarray(Xn), jnp.asarray(ohn)
        state = [[jnp.asarray(p) for p in pn]]

        def loss_fn(params):
            W1, b1, W2, b2 = params
            h = jax.nn.relu(X @ W1 + b1)
            z = h @ W2 + b2
            m = jax.lax.stop_gradient(z.max(1, keepdims=True))
            lse = jnp.log(jnp.exp(z - m).sum(1, keepdims=True)) + m
            return (lse - (z * oh).sum(1, keepdims=True)).mean()

        @jax.jit
        def step(params):
            loss, grads = jax.value_and_grad(loss_fn)(params)
            return loss, grads, [p - LR * g for p, g in zip(params, grads)]

        def loop(n):
            for _ in range(n):
                state[0] = jax.block_until_ready(step(state[0])[2])

        def values():
            loss, grads, new = step(state[0])
            rec = {"loss": _np(loss)}
            rec.update({f"grad{i}": _np(g) for i, g in enumerate(grads)})
            rec.update({f"param{i}": _np(p) for i, p in enumerate(new)})
            return rec
        return Impl(values, loop)


class MLPStepCE(MLPStep):
    """The same step as people write it: the fused nn.functional.cross_entropy on class
    indices and optim.SGD (zero_grad, step)."""
    key, title = ("mlp_step_ce", "MLP 64-128-10 step with F.cross_entropy and optim.SGD, "
                  "batch 32, float32")

    def setup(self, M):
        """Data, parameters, the loss and optim.SGD in library M."""
        Xn, pn, ohn = self.data()
        params = [M.tensor(p, requires_grad=True) for p in pn]
        return (M.tensor(Xn), M.tensor(ohn.argmax(1).astype("int64")), params,
                M.nn.functional.cross_entropy, M.optim.SGD(params, lr=LR))

    def eager(self, M):
        X, labels, params, ce, opt = self.setup(M)

        def step(record=None):
            W1, b1, W2, b2 = params
            opt.zero_grad()
            loss = ce((X @ W1 + b1).relu() @ W2 + b2, labels)
            loss.backward()
            if record is not None:
                record["loss"] = _np(loss)
                for i, p in enumerate(params):
                    record[f"grad{i}"] = _np(p.grad)
            opt.step()

        def loop(n):
            for _ in range(n):
                step()

        def values():
            rec = {}
            step(rec)
            for i, p in enumerate(params):
                rec[f"param{i}"] = _np(p)
            return rec
        return Impl(values, loop)

    jax = None


class ReplayMLP(MLPStepCE):
    """MLPStepCE's step under tapegrad.compile: forward, backward and the SGD update in
    one compiled call (PyTorch runs the same code eagerly)."""
    key, title = ("replay_mlp", "replayed MLP 64-128-10 step (F.cross_entropy + optim.SGD), "
                  "batch 32, float32")
    steps = None

    def eager(self, M):
        X, labels, params, ce, opt = self.setup(M)

        def step(x, y):
            opt.zero_grad()
            loss = ce(self.forward(x, params), y)
            loss.backward()
            opt.step()
            return loss
        tg = M is self.L.tg
        k = self.steps
        if tg:
            step = M.compile(step, steps=k)
        if k:                           # k batches per call (the same batch, k times)
            Xk, Yk = M.stack([X] * k), M.stack([labels] * k)
            call = (lambda: step(Xk, Yk)) if tg else (
                lambda: [step(Xk[i], Yk[i]) for i in range(k)])
        else:
            call = lambda: step(X, labels)      # noqa: E731

        def loop(n):
            for _ in range(n):
                call()

        def values():
            out = call()
            loss = out[-1] if k else out
            rec = {"loss": _np(loss)}
            for i, p in enumerate(params):
                rec[f"param{i}"] = _np(p)
            return rec
        return _two_steps_eager(Impl(values, loop), call)

    @staticmethod
    def forward(x, params):
        W1, b1, W2, b2 = params
        return (x @ W1 + b1).relu() @ W2 + b2

    def numpy(self):
        return self._peer(super().numpy())

    def jax(self):
        return self._peer(MLPStep.jax(self))

    def _peer(self, impl):
        """The peers' step, k times per call, values after as many steps."""
        k = self.steps or 1
        one = impl.timed

        def timed(n):
            return one(n * k)
        impl.timed = timed
        first = impl.values

        def values():
            one(2 * k - 1)
            rec = first()
            return {key: v for key, v in rec.items() if not key.startswith("grad")}
        impl.values = values
        return impl


def _two_steps_eager(impl, call):
    first = impl.values

    def values():
        call()
        return first()
    impl.values = values
    return impl


class ReplayMLPSteps(ReplayMLP):
    """The same step, 16 steps per call (tapegrad.compile(step, steps=16))."""
    key, title = ("replay_mlp_k16", "replayed MLP 64-128-10 step, 16 steps per call "
                  "(compile(steps=16)), batch 32, float32")
    steps = 16
    rows = (("main", "", "µs/step", 16),)


def _replayed(L, M, step, args, params):
    """A training step compiled with tapegrad.compile (PyTorch runs it eagerly); values
    after two steps (a replay's first call records)."""
    if M is L.tg:
        step = M.compile(step)

    def loop(n):
        for _ in range(n):
            step(*args)

    def values():
        step(*args)
        rec = {"loss": _np(step(*args))}
        for i, p in enumerate(params):
            rec[f"param{i}"] = _np(p)
        return rec
    return Impl(values, loop)


class ReplayTiny(Workload):
    """A tiny 2-16-16-1 model, batch 16, MSE and SGD: per-op overhead is everything."""
    key, title = ("replay_tiny", "replayed tiny 2-16-16-1 step (F.mse_loss + optim.SGD), "
                  "batch 16, float32")
    rows = (("main", "", "µs/step", 1),)
    sizes = (2, 16, 16, 1)
    B = 16

    def data(self):
        np = self.L.np
        rng = np.random.default_rng(4)
        f = np.float32
        X = rng.standard_normal((self.B, self.sizes[0])).astype(f)
        Y = rng.standard_normal((self.B, self.sizes[-1])).astype(f)
        ps = []
        for a, b in zip(self.sizes[:-1], self.sizes[1:]):
            ps.append((rng.standard_normal((a, b)) / np.sqrt(a)).astype(f))
            ps.append((0.1 * rng.standard_normal(b)).astype(f))
        return X, Y, ps

    def eager(self, M):
        Xn, Yn, pn = self.data()
        X, Y = M.tensor(Xn), M.tensor(Yn)
        params = [M.tensor(p, requires_grad=True) for p in pn]
        mse = M.nn.functional.mse_loss
        opt = M.optim.SGD(params, lr=LR)

        def step(x, y):
            opt.zero_grad()
            h = x
            for i in range(0, len(params), 2):
                h = h @ params[i] + params[i + 1]
                if i + 2 < len(params):
                    h = h.tanh()
            loss = mse(h, y)
            loss.backward()
            opt.step()
            return loss
        return _replayed(self.L, M, step, (X, Y), params)


class ReplayLargeMLP(ReplayMLP):
    """A BLAS-bound MLP: 512-1024-2048-100, batch 256 (the replay must not be slower)."""
    key, title = ("replay_large_mlp", "replayed MLP 512-1024-2048-100 step (cross_entropy + "
                  "SGD), batch 256, float32")
    B, D, H, C = 256, 512, 1024, 100

    def data(self):
        np = self.L.np
        rng = np.random.default_rng(5)
        f = np.float32
        X = rng.standard_normal((self.B, self.D)).astype(f)
        sizes = (self.D, self.H, 2048, self.C)
        ps = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            ps.append((rng.standard_normal((a, b)) / np.sqrt(a)).astype(f))
            ps.append((0.1 * rng.standard_normal(b)).astype(f))
        onehot = np.zeros((self.B, self.C), f)
        onehot[np.arange(self.B), rng.integers(0, self.C, self.B)] = 1
        return X, ps, onehot

    @staticmethod
    def forward(x, params):
        W1, b1, W2, b2, W3, b3 = params
        return ((x @ W1 + b1).relu() @ W2 + b2).relu() @ W3 + b3

    numpy = jax = None


class OpsMix(Workload):
    """Issue 3's ops in one graph: indexing, slicing, cat, softmax, clamp, logsumexp,
    var, where, forward and backward, on a (64, 32) float32 batch."""
    key, title = "ops_mix", "indexing/cat/softmax/logsumexp/var/where graph, (64, 32) float32"
    rows = (("main", "", "µs/call", 1),)

    def data(self):
        np = self.L.np
        rng = np.random.default_rng(5)
        return (rng.standard_normal((64, 32)).astype(np.float32),
                rng.permutation(64).astype(np.int64))

    def eager(self, M):
        xn, idxn = self.data()
        x = M.tensor(xn, requires_grad=True)
        idx = M.tensor(idxn)

        def call():
            x.grad = None
            y = M.cat([x[:, :16].softmax(1), x[idx][:, 16:].clamp(-1, 1)], 1)
            z = M.where(y > 0, y, y * 0.1)
            loss = (z.logsumexp(1) + z.var(1)).sum()
            loss.backward()
            return loss

        def loop(n):
            for _ in range(n):
                call()

        def values():
            loss = call()
            return {"loss": _np(loss), "x.grad": _np(x.grad)}
        return Impl(values, loop)


def _large_ops():
    """(key, title, shape, the op on a tensor x of that shape in library M): single ops,
    most on inputs large enough that per-op overhead does not count, forward and backward;
    first a per-row value broadcast along the rows (an operand with inner stride 0)."""
    def ce(M, x):
        import numpy as np
        return M.nn.functional.cross_entropy(x, M.tensor(np.arange(x.shape[0]) % x.shape[1]))

    def lnorm(M, x):
        import numpy as np
        w = M.tensor(np.linspace(0.5, 1.5, x.shape[1]).astype(np.float32))
        return M.nn.functional.layer_norm(x, (x.shape[1],), w, w * 0.1)
    mid, big = (256, 1000), (1000, 1000)
    return [
        ("row_center", "row-broadcast (x - x.mean(1, keepdim=True)) * w", (64, 512),
         lambda M, x: x - x.mean(1, keepdim=True)),
        ("softmax_last", "softmax(x, 1)", mid, lambda M, x: M.softmax(x, 1)),
        ("softmax_first", "softmax(x, 0)", mid, lambda M, x: M.softmax(x, 0)),
        ("log_softmax", "log_softmax(x, 1)", mid, lambda M, x: M.log_softmax(x, 1)),
        ("logsumexp", "logsumexp(x, 1)", mid, lambda M, x: M.logsumexp(x, 1)),
        ("layer_norm", "layer_norm over 1000 with weight and bias", mid, lnorm),
        ("cross_entropy_1000", "cross_entropy, 1000 classes", mid, ce),
        ("huber", "huber_loss", big, lambda M, x: M.nn.functional.huber_loss(x, x.detach() * 0.5)),
        ("smooth_l1", "smooth_l1_loss", big,
         lambda M, x: M.nn.functional.smooth_l1_loss(x, x.detach() * 0.5)),
        ("mse", "mse_loss", big, lambda M, x: M.nn.functional.mse_loss(x, x.detach() * 0.5)),
        ("bce_logits", "binary_cross_entropy_with_logits", big,
         lambda M, x: M.nn.functional.binary_cross_entropy_with_logits(x, x.detach() * 0.5)),
        ("topk", "topk(x, 5, 1).values", mid, lambda M, x: x.topk(5, 1).values),
        ("amax", "amax(x, 1)", mid, lambda M, x: M.amax(x, 1)),
        ("normalize", "normalize(x, dim=1)", mid, lambda M, x: M.nn.functional.normalize(x, dim=1)),
        ("transposed_sum", "x.t().sum(0)", big, lambda M, x: x.t().sum(0)),
    ]


class LargeOp(Workload):
    """One op on a large float32 input, forward and backward of its weighted sum (peers:
    PyTorch; the values are checked first)."""
    rows = (("main", "", "µs/call", 1),)

    def __init__(self, L, key, title, shape, fn):
        super().__init__(L)
        self.key = f"op_{key}"
        self.title = f"{title}, {shape} float32, fwd+bwd"
        self.shape, self.fn = shape, fn

    def eager(self, M):
        np = self.L.np
        xn = np.random.default_rng(8).standard_normal(self.shape).astype(np.float32)
        x = M.tensor(xn, requires_grad=True)
        y0 = self.fn(M, x)
        w = M.tensor(np.cos(np.arange(y0.numel())).reshape(tuple(y0.shape)).astype(np.float32))

        def call():
            x.grad = None
            loss = (self.fn(M, x) * w).sum()
            loss.backward()
            return loss

        def loop(n):
            for _ in range(n):
                call()
        return Impl(lambda: {"loss": _np(call()), "x.grad": _np(x.grad)}, loop)


class Chain1M(Workload):
    rows = (("main", "", "µs/call", 1),)

    def __init__(self, L, dtype):
        super().__init__(L)
        self.dtype = dtype
        self.key = f"chain_1m_{dtype}"
        self.title = f"1M-element {dtype} chain (sin(x)*exp(x)+x**2).sum(), fwd+bwd"

    def data(self):
        np = self.L.np
        return np.random.default_rng(3).standard_normal(BIG).astype(self.dtype)

    def eager(self, M):
        x = M.tensor(self.data(), requires_grad=True)

        def call():
            x.grad = None
            y = (x.sin() * x.exp() + x ** 2).sum()
            y.backward()
            return y

        def loop(n):
            for _ in range(n):
                call()
        return Impl(lambda: {"loss": _np(call()), "x.grad": _np(x.grad)}, loop)

    def numpy(self):
        np = self.L.np
        x = self.data()
        box = [None, None]

        def loop(n):
            for _ in range(n):
                s = np.sin(x)
                e = np.exp(x)
                se = s * e
                box[0] = (se + x * x).sum()
                box[1] = np.cos(x) * e + se + 2 * x
        return Impl(lambda: (loop(1), {"loss": np.asarray(box[0]), "x.grad": box[1]})[1],
                    loop)

    def jax(self):
        jax, jnp = self.L.jax, self.L.jnp
        x = jnp.asarray(self.data())
        vg = jax.jit(jax.value_and_grad(lambda x: (jnp.sin(x) * jnp.exp(x) + x ** 2).sum()))

        def loop(n):
            for _ in range(n):
                jax.block_until_ready(vg(x))

        def values():
            v, g = vg(x)
            return {"loss": _np(v), "x.grad": _np(g)}
        return Impl(values, loop)


class ReplayChain1M(Chain1M):
    """Chain1M's step under tapegrad.compile, where its five elementwise ops run as one
    fused loop (PyTorch runs the same code eagerly)."""

    def __init__(self, L, dtype):
        super().__init__(L, dtype)
        self.key = f"replay_chain_1m_{dtype}"
        self.title = (f"replayed 1M-element {dtype} chain (sin(x)*exp(x)+x**2).sum(), "
                      "fwd+bwd (one fused loop)")

    def eager(self, M):
        x = M.tensor(self.data(), requires_grad=True)

        def step(x):
            y = (x.sin() * x.exp() + x ** 2).sum()
            y.backward()
            return y
        if M is self.L.tg:
            step = M.compile(step)

        def call():
            x.grad = None
            return step(x)

        def loop(n):
            for _ in range(n):
                call()
        call()                          # a replay's first call records
        return Impl(lambda: {"loss": _np(call()), "x.grad": _np(x.grad)}, loop)


class RandomDraw1M(Workload):
    """A 1M-element float32 draw after manual_seed(0): tapegrad draws PyTorch's numbers, so
    the values are checked equal first (peers: PyTorch; NumPy's and JAX's streams are
    other numbers)."""
    rows = (("main", "", "µs/call", 1),)

    def __init__(self, L, fn):
        super().__init__(L)
        self.fn = fn
        self.key = f"{fn}_1m"
        self.title = f"{fn}(1_000_000) float32 (PyTorch's stream, values equal)"

    def eager(self, M):
        draw = getattr(M, self.fn)

        def loop(n):
            for _ in range(n):
                draw(BIG)

        def values():
            M.manual_seed(0)
            return {"values": _np(draw(BIG))}
        return Impl(values, loop)


class Loader(Workload):
    """One epoch of a shuffled DataLoader over a TensorDataset of 60,000 x 784 float32
    images and int64 labels, batch 64 (a training loop's input side, MNIST-sized). The
    floor, NumPy, slices a permuted array. Values: order-free totals of the epoch (the
    batch order itself is checked equal to PyTorch's in tests/data)."""
    key, title = "loader", "DataLoader epoch: TensorDataset 60000x784, batch 64, shuffle"
    rows = (("main", "", "µs/epoch", 1),)
    N, D, BATCH = 60_000, 784, 64

    def data(self):
        np = self.L.np
        rng = np.random.default_rng(5)
        x = rng.standard_normal((self.N, self.D), dtype=np.float32)
        return x, rng.integers(0, 10, self.N).astype(np.int64)

    @staticmethod
    def _totals(batches):
        count, labels, first = 0, 0, 0.0
        for xb, yb in batches:
            count += 1
            labels += int(yb.sum())
            first += float(xb[:, 0].sum())
        return {"batches": [count], "label sum": [labels], "column 0 sum": [first]}

    def eager(self, M):
        x, y = self.data()
        data = M.utils.data
        ds = data.TensorDataset(M.from_numpy(x), M.from_numpy(y))
        loader = data.DataLoader(ds, batch_size=self.BATCH, shuffle=True,
                                 generator=M.Generator().manual_seed(0))

        def loop(n):
            for _ in range(n):
                for _batch in loader:
                    pass
        return Impl(lambda: self._totals(loader), loop, fixed_n=1)

    def numpy(self):
        x, y = self.data()
        np, n, b = self.L.np, self.N, self.BATCH

        def epoch():
            perm = np.random.default_rng(0).permutation(n)
            for k in range(0, n, b):
                idx = perm[k:k + b]
                yield x[idx], y[idx]

        def loop(k):
            for _ in range(k):
                for _batch in epoch():
                    pass
        return Impl(lambda: self._totals(epoch()), loop, fixed_n=1)


def workloads(L):
    return [TinyOp(L), RoundTrip(L), ScalarChain(L), MLPStep(L), MLPStepCE(L), OpsMix(L),
            Chain1M(L, "float32"), Chain1M(L, "float64"), ReplayMLP(L),
            ReplayMLPSteps(L), ReplayTiny(L), ReplayLargeMLP(L), ReplayChain1M(L, "float32"),
            ReplayChain1M(L, "float64"), RandomDraw1M(L, "rand"), RandomDraw1M(L, "randn"),
            Loader(L)] + [LargeOp(L, *op) for op in _large_ops()] + _model_workloads(L)


def _model_workloads(L):
    """The small networks' training steps (benchmarks/models.py) and the gradients of
    gradients (benchmarks/higher_order.py), which import this module's harness: so
    imported here, when the workloads are made."""
    if __package__:
        from .models import model_workloads
        from .higher_order import higher_order_workloads
    else:
        from models import model_workloads
        from higher_order import higher_order_workloads
    return model_workloads(L) + higher_order_workloads(L)


# ---------------------------------------------------------------- checking
def compare_values(np, wl, lib, got, ref):
    """None if got matches ref (tapegrad's values), else a message."""
    base = RTOL[wl.dtype]
    for name, r in ref.items():
        if name not in got:
            return f"{lib} computed no {name!r}"
        g = np.asarray(got[name], np.float64)
        r = np.asarray(r, np.float64)
        if g.size != r.size:
            return f"{lib} {name}: shape {g.shape} vs tapegrad {r.shape}"
        g, r = g.reshape(r.shape), r
        rtol = wl.tol.get(name, base)
        scale = float(np.max(np.abs(r))) if r.size else 0.0
        if not np.all(np.isfinite(r)):
            return f"tapegrad {name} has non-finite values"
        if not np.allclose(g, r, rtol=rtol, atol=rtol * scale):
            diff = float(np.max(np.abs(g - r)))
            return (f"{lib} disagrees with tapegrad on {name}: max abs diff {diff:.3g} "
                    f"(max abs value {scale:.3g}, rtol {rtol:g})")
    return None


def _err(e):
    return f"{type(e).__name__}: {' '.join(str(e).split())}"


# ---------------------------------------------------------------- timing
def calibrate(impl, target):
    """Calls per sample so that a sample lasts about target seconds (also warms up)."""
    impl.timed(impl.fixed_n or 1)      # first call: compilation, caches (not counted)
    if impl.fixed_n:
        return impl.fixed_n
    for _ in range(2):      # (a compiled step records, then builds its plan: not counted)
        impl.timed(1)
    n = 1
    while True:
        t = sum(impl.timed(n).values())
        if t >= target or n >= 10_000_000:
            return n
        n = max(n + 1, int(n * min(10.0, 1.2 * target / max(t, 1e-9))))


def settled_live(tg, E):
    """Live tapegrad tensors once everything dropped so far has been released: dead
    wrappers are released in batches of 256, so drop 256 more to force one batch out
    (those leave at most 255 one-tensor entries queued, the same before and after)."""
    gc.collect()
    for _ in range(256):
        tg.zeros(1)
    return E.stats()["tensors"]


def run_workload(L, wl, args, rounds, target, log):
    np = L.np
    libs = ["tapegrad"] + L.peers
    notes = []
    E = L.tg._engine.state.engine()
    live0 = settled_live(L.tg, E)

    # 1. every library computes the same values (fresh state for each)
    ref = None
    present = []
    for lib in libs:
        try:
            impl = wl.make(lib)
            if impl is None:
                continue
            got = impl.values()
        except Exception as e:                          # noqa: BLE001
            if lib == "tapegrad":
                return None, [f"ABORTED: tapegrad failed: {_err(e)}"]
            notes.append(f"{lib} skipped: {_err(e)}")
            continue
        if lib == "tapegrad":
            ref = got
        else:
            msg = compare_values(np, wl, lib, got, ref)
            if msg:
                return None, [f"ABORTED: {msg}"]
        present.append(lib)
        del impl

    impls, number = {}, {}

    def failed(lib, e):
        if lib == "tapegrad":
            raise
        notes.append(f"{lib} dropped from this row: {_err(e)}")
        present.remove(lib)
        impls.pop(lib, None)

    # 2. fresh state, warm-up and calibration
    for lib in list(present):
        try:
            impls[lib] = wl.make(lib)
            number[lib] = calibrate(impls[lib], target)
            impls[lib].timed(number[lib])
        except Exception as e:                          # noqa: BLE001
            failed(lib, e)
    log(f"  calls per sample: {number}")

    # 3. interleaved rounds
    samples = {lib: {row[0]: [] for row in wl.rows} for lib in present}
    units = {row[0]: row[3] for row in wl.rows}
    gcold = gc.isenabled()
    try:
        for r in range(rounds):
            gc.collect()
            gc.disable()
            k = r % len(present)
            for lib in present[k:] + present[:k]:
                try:
                    res = impls[lib].timed(number[lib])
                except Exception as e:                  # noqa: BLE001
                    failed(lib, e)
                    samples.pop(lib)
                    continue
                for row, t in res.items():
                    samples[lib][row].append(t / (number[lib] * units[row]) * 1e6)
            if gcold:
                gc.enable()
    finally:
        if gcold:
            gc.enable()
    impls.clear()
    live1 = settled_live(L.tg, E)
    if live1 - live0 > 256:
        notes.append(f"tapegrad live tensors grew from {live0} to {live1} over this row "
                     "(a leak?)")
    return samples, notes


# ---------------------------------------------------------------- report
def fmt(us):
    if us >= 1000:
        return f"{us:,.0f}"
    if us >= 100:
        return f"{us:.0f}"
    if us >= 10:
        return f"{us:.1f}"
    return f"{us:.2f}"


def table(L, results):
    """(Markdown lines, {(workload key, row key): tapegrad median / PyTorch median}): the
    table, and the PyTorch ratios it printed, which the targets block below it reads."""
    np = L.np
    peers = L.peers
    ratios = {}
    head = ["workload", "unit", "tapegrad median (min–max)"]
    for p in peers:
        head += [p, f"tapegrad/{p}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for wl, samples, notes in results:
        for rowkey, label, unit, _ in wl.rows:
            name = wl.title + label
            if samples is None:
                msg = (notes[0] if notes else "aborted").replace("|", "\\|")
                lines.append("| " + " | ".join([name, unit, msg] + ["—"] * (2 * len(peers)))
                             + " |")
                continue
            t = samples["tapegrad"][rowkey]
            tm = float(np.median(t))
            cells = [name, unit, f"{fmt(tm)} ({fmt(min(t))}–{fmt(max(t))})"]
            for p in peers:
                s = samples.get(p, {}).get(rowkey)
                if not s:
                    cells += ["—", "—"]
                    continue
                pm = float(np.median(s))
                cells += [fmt(pm), f"{tm / pm:.2f}"]
                if p == "torch":
                    ratios[(wl.key, rowkey)] = tm / pm
            lines.append("| " + " | ".join(cells) + " |")
    return lines, ratios


# ---------------------------------------------------------------- targets
# The ratios tapegrad / PyTorch eager the project aims for (issue 6): (what, workload key,
# row key, most allowed); peak-memory keys are filled by peak_memory().
TARGETS = (
    ("tiny recorded op", "tiny_op", "main", 0.5),
    ("round trip", "round_trip", "main", 0.1),
    ("scalar chain backward, per node", "scalar_chain", "bwd", 0.1),
    ("MLP training step, eager", "mlp_step", "main", 0.25),
    ("1M-element chain, float32, forward and backward", "chain_1m_float32", "main", 1.0),
    ("1M-element chain, float64, forward and backward", "chain_1m_float64", "main", 1.0),
    ("rand(1_000_000) float32", "rand_1m", "main", 1.0),
    ("randn(1_000_000) float32", "randn_1m", "main", 1.0),
    ("DataLoader epoch, shuffled TensorDataset (>= 10x PyTorch)", "loader", "main",
     0.1),
    ("LeNet-5 training step, eager", "lenet_step", "main", 0.6),
    ("LeNet-5 training step, replayed", "replay_lenet", "main", 0.35),
    ("3-block CNN training step, eager (oneDNN's territory: reported)", "cnn3_step", "main",
     1.0),
    ("character LSTM training step, eager", "lstm_step", "main", 0.5),
    ("character LSTM training step, replayed", "replay_lstm", "main", 0.3),
    ("character transformer training step, eager", "transformer_step", "main", 0.6),
    ("character transformer training step, replayed", "replay_transformer", "main", 0.3),
    ("PINN step (u_xx through create_graph), eager", "pinn_step", "main", 0.5),
    ("WGAN-GP critic step, eager", "wgan_gp_step", "main", 0.5),
    ("Hessian-vector product of an MLP loss", "hvp", "main", 0.5),
    ("per-sample gradients, vmap(grad(loss))", "per_sample_grads", "main", 1.0),
    ("peak memory of the 200-op chain, float32", "peak_float32", None, 0.6),
    ("peak memory of the 200-op chain, float64", "peak_float64", None, 0.6),
)


def targets(ratios, threads):
    """The targets this run measured, as Markdown rows: met or by how much not."""
    lines = []
    for what, key, rowkey, limit in TARGETS:
        r = ratios.get((key, rowkey) if rowkey else key)
        if r is None:
            continue
        verdict = "met" if r <= limit else f"not met: {r / limit - 1:.0%} over"
        lines.append(f"| {what} | <= {limit:g} | {r:.2f} | {verdict} |")
    if not lines:
        return []
    return ["", f"Targets, ratio tapegrad / torch ({threads} thread"
            f"{'s' if threads > 1 else ''}):", "",
            "| target | ratio allowed | this run | |", "|---|---|---|---|"] + lines


# ---------------------------------------------------------------- peak memory
_PEAK_CODE = """
import os, sys
sys.path.insert(0, {repo!r})
import numpy as np
import {module} as M
from benchmarks.workloads import scalar_chain
dt = {dtype!r}
small = M.tensor(np.ones(16, dt), requires_grad=True)
scalar_chain(small, 2).sum().backward()          # kernels loaded, imports done
x = M.tensor(np.random.default_rng(4).standard_normal(1_000_000).astype(dt),
             requires_grad=True)
def status(key):      # this process's own (not ru_maxrss: that keeps the parent's peak)
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
base = status("VmRSS")
scalar_chain(x, 40).sum().backward()             # 200 chain ops, then the sum
print(status("VmHWM") - base)
"""


def peak_memory(L, log, processes, ratios):
    """Peak resident memory added by the 200-op chain on 1M elements (forward and
    backward), each library in `processes` fresh processes; rows for the Markdown table.
    PyTorch's value varies from process to process (404 to 1,572 MB in float64 on one
    machine: whether its allocator hands freed blocks back), so each cell is the median
    and the range; the minimum is nearest the memory the backward must keep. The ratios
    to PyTorch's medians go into `ratios` (keys peak_float32, peak_float64)."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    libs = [("tapegrad", "tapegrad")] + [(p, p) for p in L.peers if p == "torch"]
    rows = []
    for dtype in ("float32", "float64"):
        got = {}
        for name, module in libs:
            code = _PEAK_CODE.format(repo=repo, module=module, dtype=dtype)
            try:
                got[name] = [int(subprocess.run(
                    [sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                    cwd=repo, check=True).stdout.strip().splitlines()[-1]) / 2**20
                    for _ in range(processes)]
            except Exception as e:                      # noqa: BLE001
                log(f"  peak memory, {name} {dtype}: {_err(e)}")
        log(f"peak memory {dtype}: {got}")
        if "tapegrad" not in got:
            continue

        def cell(v):
            m = float(statistics.median(v))
            return f"{m:.0f}" if len(v) == 1 else f"{m:.0f} ({min(v):.0f}–{max(v):.0f})"
        mine = float(statistics.median(got["tapegrad"]))
        cells = [cell(got["tapegrad"])]
        for peer in L.peers:            # the table's columns: value and ratio per peer
            v = got.get(peer)
            cells += [cell(v), f"{mine / float(statistics.median(v)):.2f}"] if v else ["—", "—"]
        rows.append(f"| peak memory added by the 200-op chain, 1M {dtype}, fwd+bwd | MB | "
                    + " | ".join(cells) + " |")
        if got.get("torch"):
            ratios[f"peak_{dtype}"] = mine / float(statistics.median(got["torch"]))
    return rows


def main(argv=None):
    args = parse_args(argv)
    set_threads(args.threads)
    t_start = _pc()

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    log("importing (a first run on a new checkout compiles kernels: minutes)...")
    L = Libs(args.threads)
    loop_n = 1_000_000 if args.quick else 10_000_000
    loop_before = host_loop_seconds(loop_n)
    rounds = args.rounds or (7 if args.quick else 31)
    target = 0.01 if args.quick else 0.025
    wls = workloads(L)
    if args.only:
        pat = re.compile(args.only, re.IGNORECASE)
        wls = [w for w in wls if pat.search(w.key) or pat.search(w.title)]
        if not wls and not pat.search("peak memory"):
            log(f"no workload matches {args.only!r}; keys: "
                + ", ".join(w.key for w in workloads(L)) + ", peak memory")
            return 2
    results = []
    for wl in wls:
        log(f"{wl.key} ...")
        t0 = _pc()
        try:
            samples, notes = run_workload(L, wl, args, rounds, target, log)
        except Exception as e:                          # noqa: BLE001
            samples, notes = None, [f"ABORTED: tapegrad failed: {_err(e)}"]
        log(f"  {_pc() - t0:.1f} s")
        results.append((wl, samples, notes))

    out = [f"# tapegrad vs peers ({'quick, ' if args.quick else ''}{rounds} interleaved rounds)",
           ""]
    out += [f"- {line}" for line in header(L, args.threads,
                                           (loop_before, host_loop_seconds(loop_n)))]
    for lib, why in L.skipped.items():
        out.append(f"- {lib}: not installed, skipped ({why})")
    out.append("")
    lines, ratios = table(L, results)
    out += lines
    if not args.only or re.search(args.only, "peak memory", re.IGNORECASE):
        out += peak_memory(L, log, 1 if args.quick else 5, ratios)
    out.append("")
    out.append("Times in µs, medians over rounds (peak memory: the resident memory the chain "
               "adds, median (min–max) over fresh processes per library; PyTorch's varies "
               "with what its allocator hands back, its minimum is nearest what the backward "
               "keeps); tapegrad/peer > 1 means tapegrad is slower. "
               "numpy is a hand-written forward+backward (the floor); jax runs jax.jit-compiled "
               "functions (its scalar-chain backward is jit(grad), forward included).")
    for wl, samples, notes in results:
        for n in notes:
            if samples is not None or n != notes[0]:
                out.append(f"- {wl.key}: {n}")
    out += targets(ratios, args.threads)
    out.append(f"\nTotal wall time {_pc() - t_start:.0f} s.")
    print("\n".join(out))
    if args.save:
        log(f"saved to {save_report(out, args.threads)}")
    if args.html:
        log(f"HTML report written to {write_html(out, args.html)}")
    aborted = [wl.key for wl, samples, _ in results if samples is None]
    return 1 if aborted else 0


def save_report(lines, threads):
    """Write the report to benchmarks/results/<UTC date-time>-<commit>-<N>t.md."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                                capture_output=True, text=True).stdout.strip() or "nogit"
    except OSError:
        commit = "nogit"
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%M")
    folder = os.path.join(REPO, "benchmarks", "results")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{stamp}-{commit}-{threads}t.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


# ---------------------------------------------------------------- HTML report
def ratio_rows(lines):
    """The ratios a Markdown report's main table holds: [(workload, {peer: ratio})], in
    table order, read from its tapegrad/<peer> columns ("—" cells left out)."""
    out, head = [], None
    for line in lines:
        if line.startswith("| workload"):
            head = [c.strip() for c in line.strip().strip("|").split("|")]
            continue
        if not line.startswith("|"):
            head = None             # the table ended
        if head is None or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        ratios = {}
        for name, cell in zip(head, cells):
            if name.startswith("tapegrad/"):
                try:
                    ratios[name.split("/", 1)[1]] = float(cell)
                except ValueError:
                    pass
        if ratios:
            out.append((cells[0], ratios))
    return out


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _figure_bytes(fig, fmt):
    """fig as PNG or SVG bytes, closed. The SVG keeps its text as text (searchable, and
    the same file for the same figure: no date, fixed ids)."""
    import io
    plt = _pyplot()
    buf = io.BytesIO()
    if fmt == "svg":
        with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "tapegrad"}):
            fig.savefig(buf, format="svg", metadata={"Date": None})
    else:
        fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def _b64(data):
    import base64
    return base64.b64encode(data).decode("ascii")


def ratio_figure(rows):
    """A matplotlib figure: one horizontal bar per workload and peer, tapegrad/peer on a
    log axis, with the 1.0 line (left of it tapegrad is faster)."""
    plt = _pyplot()
    peers = sorted({p for _, r in rows for p in r}, key=lambda p: (p not in PEERS,
                                                                    PEERS.index(p)
                                                                    if p in PEERS else 0, p))
    height = 0.8 / max(len(peers), 1)
    longest = max((len(name) for name, _ in rows), default=0)
    # wide enough for the workload names at 8 points beside a readable bar area
    fig, ax = plt.subplots(figsize=(max(8.0, 4.5 + 0.062 * longest),
                                    1.2 + 0.2 * len(rows) * max(len(peers), 1)))
    for j, peer in enumerate(peers):
        ys = [i + j * height for i, (_, r) in enumerate(rows) if peer in r]
        xs = [r[peer] for _, r in rows if peer in r]
        bars = ax.barh(ys, xs, height=height, label=peer)
        ax.bar_label(bars, labels=[f"{x:.2f}" for x in xs], fontsize=6, padding=2)
    ax.set_xscale("log")
    ax.margins(x=0.08, y=0.01)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks([i + height * (len(peers) - 1) / 2 for i in range(len(rows))])
    ax.set_yticklabels([name for name, _ in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("tapegrad / peer, log axis (< 1: tapegrad faster, or smaller in memory)",
                  fontsize=8)
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1), ncol=max(len(peers), 1), fontsize=8,
              frameon=False)
    fig.tight_layout()
    return fig


def ratio_plot(rows):
    """ratio_figure(rows) as a base64 PNG."""
    return _b64(_figure_bytes(ratio_figure(rows), "png"))


# ---------------------------------------------------------------- saved reports, for the docs
RESULTS_DIR = os.path.join(REPO, "benchmarks", "results")
_SAVED_NAME = re.compile(r"^\d{4}-\d\d-\d\dT\d{4}-.*-\d+t\.md$")


def newest_saved_report(folder=None):
    """The newest report save_report() wrote to `folder` (default benchmarks/results/), by
    the UTC date-time its name starts with; None if there is none."""
    folder = RESULTS_DIR if folder is None else folder
    try:
        names = sorted(n for n in os.listdir(folder) if _SAVED_NAME.match(n))
    except OSError:
        return None
    return os.path.join(folder, names[-1]) if names else None


def saved_report_plots(path):
    """The plots of a saved Markdown report, as {file name: SVG bytes}: the ratio plot of
    its main table (what the HTML report shows under the table). The report's table holds
    every number the plot needs, so the plot is drawn from the saved .md itself."""
    with open(path, encoding="utf-8") as f:
        rows = ratio_rows(f.read().splitlines())
    return {"ratios.svg": _figure_bytes(ratio_figure(rows), "svg")} if rows else {}


def write_saved_report_plots(path, folder):
    """Write saved_report_plots(path) into `folder`; returns the paths written."""
    os.makedirs(folder, exist_ok=True)
    out = []
    for name, data in saved_report_plots(path).items():
        out.append(os.path.join(folder, name))
        with open(out[-1], "wb") as f:
            f.write(data)
    return out


# ---------------------------------------------------------------- asv history
# The asv benchmarks (benchmarks/bench_*.py) whose history across commits the HTML report
# plots: (asv name, title, unit, factor from asv's value in seconds to the unit). Some
# asv benchmarks batch microsecond-scale work (TinyOp: 1,000 ops a call, RoundTrip: 100,
# the scalar chain's backward: CHAIN_OPS nodes), hence the factors.
ASV_KEY_BENCHMARKS = (
    ("bench_core.TinyOp.time_tiny_op", "tiny op recorded: a*b, shape (4,)", "µs/op",
     1e6 / 1000),
    ("bench_core.RoundTrip.time_round_trip", "round trip: (a*b).sum().backward()",
     "µs/call", 1e6 / 100),
    ("bench_core.ScalarChainBackward.time_scalar_chain_backward",
     f"scalar chain backward, {CHAIN_OPS:,} nodes", "µs/node", 1e6 / CHAIN_OPS),
    ("bench_core.MLPStep.time_mlp_step", "MLP 64-128-10 training step, eager", "µs/step",
     1e6),
    ("bench_core.ReplayMLPStepCE.time_replay_mlp_step_ce",
     "replayed MLP step (tapegrad.compile), lines: steps per call", "µs/call", 1e6),
    ("bench_core.Chain1M.time_chain_1m", "1M-element chain, forward and backward",
     "ms/call", 1e3),
    ("bench_core.WarmStart.track_warm_start_seconds",
     "warm start: new interpreter, import, first backward", "s", 1.0),
    ("bench_core.ColdStart.track_cold_start_first_backward_seconds",
     "cold start: empty kernel cache, first backward", "s", 1.0),
)


def asv_results_dir():
    """asv's results directory, as asv.conf.json names it (relative to the repository)."""
    import json
    try:
        with open(os.path.join(REPO, "asv.conf.json"), encoding="utf-8") as f:
            conf = json.loads("".join(line for line in f
                                      if not line.lstrip().startswith("//")))
        return os.path.join(REPO, conf.get("results_dir", "results"))
    except (OSError, ValueError, AttributeError):
        return os.path.join(REPO, ".asv", "results")


def _asv_param(value):
    """asv stores parameter values as their repr: 'float32' with its quotes."""
    value = str(value)
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _asv_number(value):
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if value == value and abs(value) != float("inf") else None


def read_asv_results(folder):
    """The runs in an asv results tree (<folder>/<machine>/<commit[:8]>-<env>.json, asv's
    format version 2), as [{"machine", "env", "commit", "date" (commit date, ms since the
    epoch), "values": {benchmark: [(parameter label, value or None)]}}]. Files that are
    not asv results of that format are passed over; failed or skipped benchmarks have
    None (asv writes null or NaN)."""
    import itertools
    import json
    runs = []
    try:
        machines = sorted(os.listdir(folder))
    except OSError:
        return runs
    for machine in machines:
        mdir = os.path.join(folder, machine)
        if not os.path.isdir(mdir):
            continue
        for name in sorted(os.listdir(mdir)):
            if not name.endswith(".json") or name == "machine.json":
                continue
            try:
                with open(os.path.join(mdir, name), encoding="utf-8") as f:
                    d = json.load(f)
                cols = d["result_columns"]
                i_res = cols.index("result")
                i_par = cols.index("params") if "params" in cols else None
                results, commit = d["results"], d["commit_hash"]
                if d.get("version") != 2 or not isinstance(results, dict):
                    continue
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                continue
            values = {}
            for bench, row in results.items():
                res = row[i_res] if isinstance(row, list) and len(row) > i_res else None
                if res is None:
                    continue
                params = (row[i_par] if i_par is not None and len(row) > i_par else None) or []
                combos = list(itertools.product(*params)) if params else [()]
                res = res if isinstance(res, list) else [res]
                values[bench] = [(", ".join(_asv_param(v) for v in combo), _asv_number(r))
                                 for combo, r in zip(combos, res)]
            params = d.get("params") if isinstance(d.get("params"), dict) else {}
            runs.append({"machine": params.get("machine", machine),
                         "env": d.get("env_name", ""), "commit": str(commit),
                         "date": _asv_number(d.get("date")), "values": values})
    return runs


def git_log_commits():
    """The full hashes of HEAD's history, oldest first ([] where git is missing)."""
    try:
        out = subprocess.run(["git", "-C", REPO, "log", "--reverse", "--format=%H"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    return out.stdout.split() if out.returncode == 0 else []


def order_commits(dates, log):
    """The commits of `dates` ({hash: commit date}) in history order: those in `log`
    (hashes, oldest first) in its order, each other one (another branch, a rewritten
    history) before the first logged commit that is newer than it."""
    pos = {h: i for i, h in enumerate(log)}
    known = sorted((h for h in dates if h in pos), key=pos.get)
    out = list(known)
    for h in sorted((h for h in dates if h not in pos), key=lambda h: (dates[h] or 0, h)):
        at = next((i for i, k in enumerate(out)
                   if k in pos and (dates[k] or 0) > (dates[h] or 0)), len(out))
        out.insert(at, h)
    return out


def asv_history(runs, log=None):
    """(commits in history order, {benchmark: {series label: {commit: value}}}, {commit:
    commit date}) for the key benchmarks (ASV_KEY_BENCHMARKS) that have a value in `runs`
    (read_asv_results), values in the key's unit; a series is one parameter combination,
    per machine and environment where the runs come from several."""
    log = git_log_commits() if log is None else log
    machines = {r["machine"] for r in runs}
    envs = {r["env"] for r in runs}
    dates, history = {}, {}
    for run in runs:
        for bench, _, _, factor in ASV_KEY_BENCHMARKS:
            for label, value in run["values"].get(bench, ()):
                if value is None:
                    continue
                parts = ([run["machine"]] if len(machines) > 1 else []) + \
                        ([run["env"]] if len(envs) > 1 else []) + ([label] if label else [])
                series = history.setdefault(bench, {}).setdefault(", ".join(parts), {})
                series[run["commit"]] = value * factor
                dates.setdefault(run["commit"], run["date"])
    return order_commits(dates, log), history, dates


def history_figure(title, unit, series, commits, dates):
    """A small line plot of one benchmark: value against commit (oldest left), the
    commits labelled with their short hash and commit date."""
    import datetime as dt
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 2.6))
    shown = [c for c in commits if any(c in s for s in series.values())]
    x = {c: i for i, c in enumerate(shown)}
    for label, points in sorted(series.items()):
        cs = [c for c in shown if c in points]
        ax.plot([x[c] for c in cs], [points[c] for c in cs], marker="o", markersize=3,
                label=label or None)
    step = max(1, -(-len(shown) // 10))          # at most about ten labelled commits

    def tick(c):
        d = dates.get(c)
        day = (dt.datetime.fromtimestamp(d / 1000, dt.timezone.utc).strftime("%Y-%m-%d")
               if d else "")
        return f"{c[:7]}\n{day}"
    ax.set_xticks(range(0, len(shown), step))
    ax.set_xticklabels([tick(c) for c in shown[::step]], fontsize=7)
    ax.set_xlim(-0.5, len(shown) - 0.5)
    ax.set_ylim(bottom=0)
    ax.set_ylabel(unit, fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title(title, fontsize=9)
    if any(series):                 # labelled: parameters, machines or environments
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def asv_history_html(folder=None, log=None):
    """The report's asv section as HTML lines: one embedded PNG per key benchmark with
    results in the asv results tree `folder` (default: asv.conf.json's results_dir), or a
    short note where there are none."""
    import html
    folder = asv_results_dir() if folder is None else folder
    out = ["<h2>asv history of the key benchmarks</h2>"]
    runs = read_asv_results(folder)
    if not runs:
        out.append(f"<p>No asv results in <code>{html.escape(folder)}</code>: asv keeps the "
                   "results of a run in the current environment only when told the commit, "
                   "<code>asv run --python=same --set-commit-hash=HEAD</code>"
                   ".</p>")
        return out
    commits, history, dates = asv_history(runs, log)
    out.append(f"<p>From <code>{html.escape(folder)}</code>: {len(runs)} run"
               f"{'s' if len(runs) != 1 else ''}, {len(commits)} commit"
               f"{'s' if len(commits) != 1 else ''}, oldest left.</p>")
    for bench, title, unit, _ in ASV_KEY_BENCHMARKS:
        if bench not in history:
            out.append(f"<p>{html.escape(title)} (<code>{html.escape(bench)}</code>): "
                       "no results.</p>")
            continue
        png = _figure_bytes(history_figure(title, unit, history[bench], commits, dates), "png")
        out.append(f'<img alt="asv history: {html.escape(title)}" '
                   f'src="data:image/png;base64,{_b64(png)}">')
    return out


def _md_inline(text):
    import html
    text = html.escape(text)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)


def report_html(lines, asv_results=None, log=None):
    """The Markdown report as one HTML page: headings, lists, paragraphs and tables, the
    ratio plot under the main table, and at the end the asv history of the key benchmarks
    (asv_history_html(asv_results, log)). No external reference: styles are inline and the
    plots are data: URIs."""
    rows = ratio_rows(lines)
    body, table, listing = [], [], False

    def flush_table():
        if not table:
            return
        head, *rest = table
        body.append("<table>")
        body.append("<tr>" + "".join(f"<th>{_md_inline(c)}</th>" for c in head) + "</tr>")
        for r in rest:
            body.append("<tr>" + "".join(f"<td>{_md_inline(c)}</td>" for c in r) + "</tr>")
        body.append("</table>")
        if head and head[0] == "workload" and rows:
            body.append('<h2>tapegrad / peer, per workload</h2>')
            body.append(f'<img alt="tapegrad/peer time ratios, log axis" '
                        f'src="data:image/png;base64,{ratio_plot(rows)}">')
        table.clear()

    for line in lines:
        if line.startswith("|"):
            if not line.startswith("|---"):
                table.append([c.strip() for c in line.strip().strip("|").split("|")])
            continue
        flush_table()
        if line.startswith("- "):
            if not listing:
                body.append("<ul>")
                listing = True
            body.append(f"<li>{_md_inline(line[2:])}</li>")
            continue
        if listing:
            body.append("</ul>")
            listing = False
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            body.append(f"<h{level}>{_md_inline(line.lstrip('#').strip())}</h{level}>")
        elif line.strip():
            body.append(f"<p>{_md_inline(line.strip())}</p>")
    flush_table()
    if listing:
        body.append("</ul>")
    body += asv_history_html(asv_results, log)
    style = ("body{font-family:sans-serif;max-width:70em;margin:1em auto;padding:0 1em}"
             "table{border-collapse:collapse;font-size:90%}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
             "td:first-child,th:first-child{text-align:left}img{max-width:100%}")
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            "<title>tapegrad vs peers</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(body)
            + "\n</body></html>\n")


def write_html(lines, path, asv_results=None):
    """Write report_html(lines, asv_results) to path; returns the path."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(report_html(lines, asv_results))
    return path


if __name__ == "__main__":
    sys.exit(main())
