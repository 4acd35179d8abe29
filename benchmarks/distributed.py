"""DistributedDataParallel on 2 MPI ranks against one process: throughput of a training step.

    python -m benchmarks.distributed [--ranks 2] [--steps 30] [--rounds 3] [--no-save]

The model is the 512-1024-2048-100 MLP (ReLU), float32, cross entropy, SGD with
momentum; every process runs on one thread and trains on batches of 256. This process
launches the runs itself, one after the other (never at the same time: the machine's
cores are the ranks'): one process without DDP, then `mpirun -n <ranks>` of the same
step under nn.parallel.DistributedDataParallel, each eager and compiled with
tapegrad.compile, in interleaved rounds (medians). Reported per run: the step's time,
the throughput (samples per second over all ranks), its ratio to one process, and for
DDP the time per step spent in the gradient all-reduce (bucket copies, MPI and waiting,
measured inside the reduction). A third run starts <ranks> one-process runs at once,
without communication: the throughput the machine gives that many processes together,
the ceiling of the DDP ratio (on a machine other processes share, it is well below
<ranks>x).

Writes the report to benchmarks/results/distributed-<UTC date-time>-<commit>-<N>r.md
(machine-written; --no-save prints it only).
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = (512, 1024, 2048, 100)
BATCH = 256
TARGET = 1.7


# ------------------------------------------------------------ the measured process
def _worker(args):
    import time
    import numpy as np
    import tapegrad as tg
    import tapegrad.nn.functional as F
    from tapegrad import nn, optim
    tg.set_num_threads(1)
    ddp_on = args.worker == "ddp"
    rank, world = 0, 1
    if ddp_on:
        import tapegrad.distributed as dist
        dist.init_process_group(backend="mpi")
        rank, world = dist.get_rank(), dist.get_world_size()
    rng = np.random.default_rng(rank)
    xs = [tg.tensor(rng.standard_normal((BATCH, SIZES[0])).astype(np.float32))
          for _ in range(4)]
    ys = [tg.tensor(rng.integers(0, SIZES[-1], BATCH)) for _ in range(4)]
    out = {"rank": rank, "world": world}
    for mode in ("eager", "compiled"):
        tg.manual_seed(0)
        layers = []
        for i, (a, b) in enumerate(zip(SIZES[:-1], SIZES[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(SIZES) - 2:
                layers.append(nn.ReLU())
        model = nn.Sequential(*layers)
        comm = [0.0]
        if ddp_on:
            model = nn.parallel.DistributedDataParallel(model)
            reduce = model._reduce

            def timed(*a, _reduce=reduce):
                t0 = time.perf_counter()
                _reduce(*a)
                comm[0] += time.perf_counter() - t0
            model._reduce = timed
        opt = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def step(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss
        fn = tg.compile(step) if mode == "compiled" else step
        for k in range(5):                      # warm-up: kernels, recording, memory plan
            fn(xs[k % 4], ys[k % 4])
        if ddp_on:
            dist.barrier()
        times, comms = [], []
        for k in range(args.steps):
            comm[0] = 0.0
            t0 = time.perf_counter()
            fn(xs[k % 4], ys[k % 4])
            times.append(time.perf_counter() - t0)
            comms.append(comm[0])
        out[mode] = {"step": statistics.median(times), "best": min(times),
                     "comm": statistics.median(comms), "comm_best": min(comms),
                     "eager_fallback": getattr(fn, "eager", None) is not None}
    print(json.dumps(out))


# ------------------------------------------------------------ the launcher
def _env():
    env = dict(os.environ)
    env.update(TAPEGRAD_NUM_THREADS="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    # every run (one process and the ranks alike) with tapegrad's malloc settings: MPI's
    # all-reduce mallocs and frees message-sized buffers each step, and with glibc's
    # defaults the heap is then trimmed and refaulted every step (about 5,800 page faults
    # per step here, slowing the forward and backward of the ranks by a third)
    env.setdefault("TAPEGRAD_MALLOPT", "1")
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = REPO + (os.pathsep + path if path else "")
    return env


def _last_json(text, what):
    lines = [x for x in text.splitlines() if x.strip()]
    if not lines:
        raise RuntimeError(f"{what} printed nothing")
    return json.loads(lines[-1])


def _run_single(steps):
    cmd = [sys.executable, "-m", "benchmarks.distributed", "--worker", "single",
           "--steps", str(steps)]
    p = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True,
                       timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(f"the one-process run failed:\n{p.stderr[-4000:]}")
    return _last_json(p.stdout, "the one-process run")


def _run_pair(ranks, steps):
    """`ranks` independent one-process runs at the same time (no communication): what the
    machine allows ranks processes running together to reach (the ceiling of DDP)."""
    cmd = [sys.executable, "-m", "benchmarks.distributed", "--worker", "single",
           "--steps", str(steps)]
    procs = [subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(ranks)]
    out = []
    for p in procs:
        so, se = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(f"a concurrent one-process run failed:\n{se[-4000:]}")
        out.append(_last_json(so, "a concurrent one-process run"))
    return out


def _run_ddp(ranks, steps):
    if shutil.which("mpirun") is None:
        raise SystemExit("mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")
    with tempfile.TemporaryDirectory(prefix="tapegrad-bench-") as out:
        # (--bind-to none: on a machine other processes share, a rank pinned to a busy
        # core waits for it while the other core idles)
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
               "-n", str(ranks),
               "--output-filename", out, sys.executable, "-m", "benchmarks.distributed",
               "--worker", "ddp", "--steps", str(steps)]
        p = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True,
                           timeout=1800)
        res = []
        for r in range(ranks):
            folder = os.path.join(out, "1", f"rank.{r}")
            try:
                with open(os.path.join(folder, "stdout")) as f:
                    text = f.read()
                with open(os.path.join(folder, "stderr")) as f:
                    err = f.read()
            except OSError:
                text, err = "", ""
            if p.returncode != 0:
                raise RuntimeError(f"mpirun exited with {p.returncode}; rank {r}:\n"
                                   f"{err[-4000:]}\n{p.stderr[-2000:]}")
            res.append(_last_json(text, f"rank {r}"))
    return res


def _commit():
    try:
        rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "tapegrad"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (rev or "nogit") + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "nogit"


def _cpu():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def _load():
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def report(single, ddp, pair, ranks, steps, rounds, load_before, load_after):
    """The Markdown report's lines, from the rounds' results (medians)."""
    import tapegrad as tg
    med = statistics.median
    lines = [f"# DistributedDataParallel, {ranks} MPI ranks vs one process: the "
             f"{'-'.join(map(str, SIZES))} MLP, float32, batch {BATCH} per process",
             "",
             f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
             f"- tapegrad {tg.__version__} (git {_commit()}), Python "
             f"{platform.python_version()}",
             f"- CPU: {_cpu()} ({os.cpu_count()} logical cores); 1 thread per process; "
             f"TAPEGRAD_MALLOPT={_env()['TAPEGRAD_MALLOPT']} in every process",
             f"- load average (1 min) before the runs {load_before:.2f}, after "
             f"{load_after:.2f}",
             f"- {rounds} interleaved rounds of {steps} timed steps (after 5 warm-up "
             "steps) per run; medians over steps, then over rounds; SGD with momentum, "
             "cross entropy (benchmarks/distributed.py)",
             "",
             "| step | run | step ms: median (best) | samples/s (median) | throughput vs "
             "one process: median (best) | all-reduce ms/step: median (best) |",
             "|---|---|---|---|---|---|"]
    ratios = {}
    for mode in ("eager", "compiled"):
        t1 = med(r[mode]["step"] for r in single)
        b1 = min(r[mode]["best"] for r in single)
        tn = med(max(rk[mode]["step"] for rk in r) for r in ddp)     # (the slowest rank)
        bn = min(max(rk[mode]["best"] for rk in r) for r in ddp)
        comm = med(r[0][mode]["comm"] for r in ddp)
        comm_best = min(r[0][mode]["comm_best"] for r in ddp)
        ratio = (ranks * BATCH / tn) / (BATCH / t1)
        best = (ranks * BATCH / bn) / (BATCH / b1)
        ratios[mode] = ratio
        lines.append(f"| {mode} | one process | {t1 * 1e3:.1f} ({b1 * 1e3:.1f}) | "
                     f"{BATCH / t1:.0f} | 1.00x | — |")
        lines.append(f"| {mode} | DDP, {ranks} ranks | {tn * 1e3:.1f} ({bn * 1e3:.1f}) | "
                     f"{ranks * BATCH / tn:.0f} | **{ratio:.2f}x** ({best:.2f}x) | "
                     f"{comm * 1e3:.1f} ({comm_best * 1e3:.1f}) |")
        tp = med(max(rk[mode]["step"] for rk in r) for r in pair)
        bp = min(max(rk[mode]["best"] for rk in r) for r in pair)
        lines.append(f"| {mode} | {ranks} processes at once, no DDP (the ceiling) | "
                     f"{tp * 1e3:.1f} ({bp * 1e3:.1f}) | {ranks * BATCH / tp:.0f} | "
                     f"{(ranks * BATCH / tp) / (BATCH / t1):.2f}x "
                     f"({(ranks * BATCH / bp) / (BATCH / b1):.2f}x) | — |")
    fallback = any(rk["compiled"]["eager_fallback"] for r in ddp for rk in r) or any(
        r["compiled"]["eager_fallback"] for r in single)
    lines += ["",
              f"- target: throughput >= {TARGET}x one process: eager "
              f"{'met' if ratios['eager'] >= TARGET else 'not met'}, compiled "
              f"{'met' if ratios['compiled'] >= TARGET else 'not met'}",
              "- the compiled steps replayed (no fallback to eager): "
              + ("no" if fallback else "yes"),
              f"- {ranks} processes at once: {ranks} independent one-process runs started "
              "together, without communication: how much of the machine that many "
              "processes get together (the ceiling of the DDP ratio)",
              "- best: the fastest step of all rounds (the machine is shared: other "
              "processes' load shows in the medians, see the load average above)",
              "- all-reduce ms/step: time inside DDP's reduction per step on rank 0 "
              "(filling the buckets, the MPI all-reduces and waiting for the other rank, "
              "copying the averages back); it follows the backward sweep, it does not "
              "overlap it"]
    return lines, ratios


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--worker", choices=("single", "ddp"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker(args)
    load_before = _load()
    single, ddp, pair = [], [], []
    for k in range(args.rounds):
        print(f"round {k + 1}/{args.rounds}: one process ...", file=sys.stderr)
        single.append(_run_single(args.steps))
        print(f"round {k + 1}/{args.rounds}: mpirun -n {args.ranks} ...", file=sys.stderr)
        ddp.append(_run_ddp(args.ranks, args.steps))
        print(f"round {k + 1}/{args.rounds}: {args.ranks} processes at once ...",
              file=sys.stderr)
        pair.append(_run_pair(args.ranks, args.steps))
    lines, _ = report(single, ddp, pair, args.ranks, args.steps, args.rounds, load_before,
                      _load())
    print("\n".join(lines))
    if not args.no_save:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%M")
        folder = os.path.join(REPO, "benchmarks", "results")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"distributed-{stamp}-{_commit()}-{args.ranks}r.md")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        print(f"written to {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
