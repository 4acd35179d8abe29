"""A hyper-parameter sweep of the demo's training on Dask distributed, on this machine.

    python examples/sweep_dask.py [--workers N] [--threads T] [--lr 0.003,0.01,0.03]
                                  [--hidden 16,32,64] [--seeds 0,1] [--steps 1000]
                                  [--warmup split|each|first|none] [--cache-dir DIR]

Every combination of learning rate x hidden width x seed is one trial: the spirals
classifier of ``python -m tapegrad demo`` trained with full-batch Adam under
tapegrad.compile (tapegrad._demo.trial.trial, which returns the trial's metrics). The
trials run on a ``dask.distributed.LocalCluster`` with one single-threaded worker
process per core, and the results are printed as a table sorted by validation loss.
Needs ``pip install "tapegrad[sweep]"`` (dask[distributed]).

Compiled kernels: the workers share tapegrad's on-disk kernel cache (TAPEGRAD_CACHE_DIR,
default ~/.cache/tapegrad; --cache-dir sets it for the workers), so what one process
compiled the others load. Numba writes each cache file under a temporary name and
renames it into place, so two workers compiling the same kernel at once both finish and
leave a valid entry. On a cold cache the --warmup strategy decides who compiles what
before the trials start (docs/sweeps.md has the measurements):
  split  (default) the two workers split the demo's compiling between them, as
         ``python -m tapegrad demo`` does on a cold start, one worker compiles what is
         left, then every worker loads it all from the cache: the shortest cold start,
         and no kernel compiled twice; on a warm cache, like each;
  each   every worker runs a 2-step trial first (compiles what is missing, else loads);
  first  the first trial runs alone, then the others (they start warm);
  none   all trials at once (on a cold cache, the first wave compiles the same kernels
         in every worker).

Threads: one worker per core, each tapegrad running one thread (--threads sets it):
more threads per worker than cores / workers only contend. The workers' environment sets
TAPEGRAD_NUM_THREADS before tapegrad is imported, and a worker plugin calls
tapegrad.set_num_threads in each worker (which also sets the BLAS's threads).

Why Dask rather than Ray: for a sweep on one machine both do the job; Dask distributed
is the lighter tool: an install a fifth the size of Ray's, done in half
the time, and a local cluster that is up and running tasks several times sooner (Ray
starts its GCS server and raylet daemons first). Both pickle with cloudpickle. Ray Tune's
search algorithms and early-stopping schedulers are the reason to pick Ray for large
sweeps. The measurements are in docs/sweeps.md.
"""
import argparse
import itertools
import os
import sys
import time

try:
    from distributed import Client, LocalCluster, WorkerPlugin, as_completed
except ImportError:     # pragma: no cover  (the message says what to install)
    sys.exit("this example needs Dask distributed: pip install 'tapegrad[sweep]' "
             "(or pip install 'dask[distributed]')")


class TapegradThreads(WorkerPlugin):
    """Sets tapegrad's thread count in each worker as it starts (and in the workers
    already running when the plugin is registered)."""

    name = "tapegrad-threads"

    def __init__(self, threads=1):
        self.threads = threads

    def setup(self, worker):
        """Import tapegrad in the worker and set its threads."""
        import tapegrad
        tapegrad.set_num_threads(self.threads)


def grid(lrs, hiddens, seeds, steps):
    """The trials' keyword arguments: every combination, in that order."""
    return [dict(lr=lr, hidden=h, seed=s, steps=steps)
            for lr, h, s in itertools.product(lrs, hiddens, seeds)]


def start_cluster(workers=None, threads=1, cache_dir=None, dashboard_address=":0"):
    """A LocalCluster of `workers` processes (default: one per core), one Dask thread
    each, tapegrad's threads set to `threads`, its cache at cache_dir (default: the
    caller's TAPEGRAD_CACHE_DIR or tapegrad's default), the scheduler's web server on
    dashboard_address (default: a free port, so that clusters started side by side do
    not compete for Dask's default 8787). Returns (cluster, client)."""
    if workers is None:
        workers = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                   else os.cpu_count() or 1)
    env = {"TAPEGRAD_NUM_THREADS": str(threads)}
    if cache_dir:
        env["TAPEGRAD_CACHE_DIR"] = os.path.abspath(cache_dir)
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                           dashboard_address=dashboard_address, env=env)
    client = Client(cluster)
    client.register_plugin(TapegradThreads(threads))
    return cluster, client


def _warm(dask_worker=None):
    """In a worker: load (or compile) every kernel a trial needs; returns seconds."""
    from tapegrad._demo.trial import warm_up
    return warm_up()


def _warm_half(order, dask_worker=None):
    """In a worker: its half of the demo's cold-start compiling if it is one of the
    first two in `order` (the others wait); returns seconds."""
    from tapegrad._demo.trial import warm_up
    part = order.index(dask_worker.address) if dask_worker.address in order else None
    return warm_up(part) if part is not None and part < 2 else 0.0


def warm_up(client, strategy="split"):
    """Get the kernels into the cache and every worker before the trials (see the
    module docstring); returns the seconds taken (0.0 for first and none)."""
    if strategy in ("first", "none"):
        return 0.0
    t0 = time.perf_counter()
    addresses = sorted(client.scheduler_info()["workers"])
    if strategy == "split" and len(addresses) > 1 and not client.submit(_is_warm).result():
        client.run(_warm_half, addresses)       # (client.run: on every worker at once)
        # what the halves leave out (a few seconds of compiling: the evaluation's eager
        # kernels, the step's own pieces) once, in one worker; the others then load it
        client.run(_warm, workers=addresses[:1])
    client.run(_warm)
    return time.perf_counter() - t0


def _is_warm():
    from tapegrad._demo.trial import is_warm
    return is_warm()


def run_sweep(client, configs, strategy="split", progress=None):
    """Run the trials on the client's cluster; returns (results in completion order,
    warm-up seconds, wall seconds of the trials). strategy: see the module docstring."""
    from tapegrad._demo.trial import trial
    warm = warm_up(client, strategy)
    t0 = time.perf_counter()
    # the longest trials first (a step's cost grows with the hidden width squared), so
    # that the last trials to finish are short ones and no worker idles long at the end
    todo = sorted(configs, key=lambda c: -c.get("steps", 1000) * c.get("hidden", 32) ** 2)
    results = []
    if strategy == "first" and configs:     # (trial 1 as given, alone)
        todo.remove(configs[0])
        results.append(client.submit(trial, **configs[0], pure=False).result())
        if progress:
            progress(results[-1], len(results), len(configs))
    futures = [client.submit(trial, **cfg, pure=False) for cfg in todo]
    for fut in as_completed(futures):
        results.append(fut.result())
        if progress:
            progress(results[-1], len(results), len(configs))
    return results, warm, time.perf_counter() - t0


def table(results, key="val_loss"):
    """The results as a text table, best (lowest validation loss) first."""
    cols = [("lr", "{:g}"), ("hidden", "{}"), ("seed", "{}"), ("val_loss", "{:.4f}"),
            ("val_acc", "{:.3f}"), ("train_loss", "{:.4f}"), ("train_acc", "{:.3f}"),
            ("first_step_s", "{:.3f}"), ("step_us", "{:.0f}"), ("pid", "{}")]
    rows = [[fmt.format(r[c]) for c, fmt in cols]
            for r in sorted(results, key=lambda r: (r[key], r["lr"], r["hidden"], r["seed"]))]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, (c, _) in enumerate(cols)]
    lines = ["  ".join(c.rjust(w) for (c, _), w in zip(cols, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in rows]
    return "\n".join(lines)


def _floats(text):
    return [float(v) for v in text.split(",") if v.strip()]


def _ints(text):
    return [int(v) for v in text.split(",") if v.strip()]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=None, help="default: one per core")
    p.add_argument("--threads", type=int, default=1, help="tapegrad threads per worker")
    p.add_argument("--lr", type=_floats, default=[0.003, 0.01, 0.03])
    p.add_argument("--hidden", type=_ints, default=[16, 32, 64])
    p.add_argument("--seeds", type=_ints, default=[0, 1])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--warmup", choices=("split", "each", "first", "none"), default="split")
    p.add_argument("--cache-dir", default=None,
                   help="the workers' TAPEGRAD_CACHE_DIR (default: as this process's)")
    args = p.parse_args(argv)
    if args.threads < 1 or args.steps < 1 or (args.workers is not None and args.workers < 1):
        p.error("--workers, --threads and --steps must be positive")
    configs = grid(args.lr, args.hidden, args.seeds, args.steps)
    t0 = time.perf_counter()
    cluster, client = start_cluster(args.workers, args.threads, args.cache_dir)
    n_workers = len(client.scheduler_info()["workers"])
    print(f"{n_workers} workers x {args.threads} thread(s), cluster up in "
          f"{time.perf_counter() - t0:.1f} s; {len(configs)} trials of {args.steps} steps")

    def progress(r, done, total):
        print(f"  [{done}/{total}] lr {r['lr']:g} hidden {r['hidden']} seed {r['seed']}: "
              f"val loss {r['val_loss']:.4f} (worker pid {r['pid']})", flush=True)
    try:
        results, warm, wall = run_sweep(client, configs, args.warmup, progress)
    finally:
        client.close()
        cluster.close()
    print(table(results))
    first = [r["first_step_s"] for r in results]
    print(f"warm-up ({args.warmup}) {warm:.1f} s, trials {wall:.1f} s; first step "
          f"{min(first):.3f}-{max(first):.3f} s; total {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
