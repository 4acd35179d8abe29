"""A hyper-parameter sweep on Dask distributed against the same trials one after another.

    python -m benchmarks.sweep [--trials 8] [--workers 2] [--steps 1000] [--rounds 5]
                               [--cold] [--no-save]

The trials are the demo's (tapegrad._demo.trial.trial: the spirals classifier of
``python -m tapegrad demo``, 1000 full-batch Adam steps under tapegrad.compile), over
learning rate x hidden width, run by examples/sweep_dask.py's functions on a LocalCluster
of --workers single-threaded worker processes, against the same trials one after another
in this process (one thread). Reported:

- warm: the cluster up and every worker warmed (the example's "each" warm-up), the wall
  time of the sweep against the sequential run, in interleaved rounds (medians), and
  whether both runs gave the same metrics bit for bit;
- from a fresh process, warm cache: ``import tapegrad`` + the trials in one process
  against starting the cluster + warming its workers + the trials;
- --cold: the same from an empty kernel cache (a fresh TAPEGRAD_CACHE_DIR each), the
  sequential run against each of the example's warm-up strategies (split, each, first,
  none), with the time to the first step of trial 1 against that of trials 2..n.

Writes the report to benchmarks/results/sweep-<UTC date-time>-<commit>-<N>w.md
(machine-written; --no-save prints it only).
"""
import argparse
import datetime
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "sweep_dask.py")
LRS = (0.003, 0.01, 0.03, 0.1)
HIDDEN = (32, 64, 16, 128)
STRATEGIES = ("split", "each", "first", "none")


def configs(trials, steps):
    """`trials` demo trials: learning rates x hidden widths (seed 0)."""
    out = [dict(lr=lr, hidden=h, seed=0, steps=steps) for h in HIDDEN for lr in LRS]
    if trials > len(out):
        raise SystemExit(f"--trials: at most {len(out)}")
    return out[:trials]


def example():
    """examples/sweep_dask.py as a module."""
    spec = importlib.util.spec_from_file_location("sweep_dask", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def sequential(cfgs):
    """The trials one after another in this process; (results, seconds)."""
    from tapegrad._demo.trial import trial
    t0 = time.perf_counter()
    results = [trial(**c) for c in cfgs]
    return results, time.perf_counter() - t0


def _metrics(results):
    """Each trial's metrics (what must not depend on where it ran), by its arguments."""
    keys = ("train_loss", "train_acc", "val_loss", "val_acc")
    return {(r["lr"], r["hidden"], r["seed"]): tuple(r[k] for k in keys) for r in results}


def warm(args):
    """The sweep and the sequential run, both warm, in interleaved rounds."""
    import tapegrad as tg
    from tapegrad._demo.trial import warm_up
    tg.set_num_threads(1)
    warm_up()
    ex = example()
    cfgs = configs(args.trials, args.steps)
    t0 = time.perf_counter()
    cluster, client = ex.start_cluster(args.workers, 1)
    up = time.perf_counter() - t0
    try:
        warmed = ex.warm_up(client, "each")
        seq, par, same = [], [], True
        for r in range(args.rounds):
            for kind in (("seq", "par") if r % 2 == 0 else ("par", "seq")):
                if kind == "seq":
                    res_s, t = sequential(cfgs)
                    seq.append(t)
                else:
                    res_p, _, t = ex.run_sweep(client, cfgs, "none")
                    par.append(t)
            same = same and _metrics(res_s) == _metrics(res_p)
    finally:
        client.close()
        cluster.close()
    med = lambda res, k: statistics.median(r[k] for r in res)
    return {"cluster_up_s": up, "warm_up_s": warmed, "seq_s": seq, "par_s": par,
            "same": same, "step_us_seq": med(res_s, "step_us"),
            "step_us_par": med(res_p, "step_us"), "cpu_us_seq": med(res_s, "step_cpu_us"),
            "cpu_us_par": med(res_p, "step_cpu_us")}


def child(argv):
    """A fresh process's run (--child MODE): prints a JSON line."""
    mode, workers, trials, steps = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    t0 = time.perf_counter()
    cfgs = configs(trials, steps)
    if mode == "seq":
        import tapegrad as tg
        tg.set_num_threads(1)
        res, t = sequential(cfgs)
        out = {"trials_s": t, "warm_up_s": 0.0}
    else:
        ex = example()
        cluster, client = ex.start_cluster(workers, 1)
        try:
            up = time.perf_counter() - t0
            res, w, t = ex.run_sweep(client, cfgs, mode)
        finally:
            client.close()
            cluster.close()
        out = {"trials_s": t, "warm_up_s": w, "cluster_up_s": up}
    by_cfg = {(r["lr"], r["hidden"]): r for r in res}
    first = [by_cfg[(c["lr"], c["hidden"])]["first_step_s"] for c in cfgs]
    out.update(total_s=time.perf_counter() - t0, first_step_trial1_s=first[0],
               first_step_rest_s=sorted(first[1:]), val_loss=[by_cfg[(c["lr"], c["hidden"])]
                                                              ["val_loss"] for c in cfgs])
    print(json.dumps(out), flush=True)


def fresh(mode, args, cache_dir=None):
    """Run child(mode) in a new Python process (its own kernel cache if cache_dir)."""
    env = dict(os.environ)
    if cache_dir:
        env["TAPEGRAD_CACHE_DIR"] = cache_dir
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "benchmarks.sweep", "--child", mode,
                        str(args.workers), str(args.trials), str(args.steps)],
                       cwd=REPO, env=env, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"{mode} run failed:\n{p.stderr[-3000:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["process_s"] = time.perf_counter() - t0
    return out


def report(args, w, fresh_warm, cold):
    """The Markdown report."""
    from benchmarks.compare import cpu_model, git_rev, host_loop_seconds
    import tapegrad as tg
    import distributed
    seq, par = statistics.median(w["seq_s"]), statistics.median(w["par_s"])
    L = [f"# Sweep of {args.trials} demo trials: Dask LocalCluster ({args.workers} workers x "
         "1 thread) vs one after another in one process (1 thread)", "",
         f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
         f"- tapegrad {tg.__version__} (git {git_rev()}), dask/distributed "
         f"{distributed.__version__}, Python {sys.version.split()[0]}",
         f"- CPU: {cpu_model()} ({os.cpu_count()} logical cores)",
         f"- host speed: a plain Python loop of 10^7 additions took "
         f"{host_loop_seconds():.2f} s; load average (1 min) before the run "
         f"{args.load_before:.2f}, after {os.getloadavg()[0]:.2f}",
         f"- trials: the demo's spirals MLP, {args.steps} full-batch Adam steps under "
         f"tapegrad.compile, lr in {LRS[:min(4, args.trials)]} x hidden in "
         f"{HIDDEN[:(args.trials + 3) // 4]}, seed 0 (benchmarks/sweep.py)", "",
         f"## Warm cache, cluster up and workers warmed ({args.rounds} interleaved rounds, "
         "medians)", "",
         "| run | wall s (min-max) | step µs, wall (median) | step µs, CPU (median) |",
         "|---|---|---|---|",
         f"| one after another, one process | {seq:.3f} ({min(w['seq_s']):.3f}-"
         f"{max(w['seq_s']):.3f}) | {w['step_us_seq']:.0f} | {w['cpu_us_seq']:.0f} |",
         f"| Dask, {args.workers} workers | {par:.3f} ({min(w['par_s']):.3f}-"
         f"{max(w['par_s']):.3f}) | {w['step_us_par']:.0f} | {w['cpu_us_par']:.0f} |", "",
         "(A step's wall time above its CPU time is time its process waited for a core: "
         "other processes on the machine.)", "",
         f"- **sweep / sequential wall time: {par / seq:.3f}x** (medians; target <= 0.6x: "
         f"{'met' if par / seq <= 0.6 else 'not met'}); fastest round against fastest "
         f"round: {min(w['par_s']) / min(w['seq_s']):.3f}x",
         f"- metrics (losses, accuracies) equal bit for bit between the two runs: "
         f"{'yes' if w['same'] else 'NO'}",
         f"- starting the cluster (workers importing tapegrad): {w['cluster_up_s']:.1f} s; "
         f"warming every worker (2-step trial, kernels from the cache): "
         f"{w['warm_up_s']:.2f} s", ""]
    if fresh_warm:
        s, d = fresh_warm
        L += ["## From a fresh process, warm cache", "",
              "| run | process wall s | trials s | first step, trial 1 s | first step, "
              "trials 2..n s: median (max) |", "|---|---|---|---|---|",
              _row("one after another (import tapegrad + trials)", s),
              _row("Dask (start cluster + warm-up each + trials)", d), "",
              f"- ratio of process wall times: {d['process_s'] / s['process_s']:.2f}x", ""]
    if cold:
        L += ["## Cold cache (a fresh TAPEGRAD_CACHE_DIR per run)", "",
              "| run | process wall s | warm-up s | trials s | first step, trial 1 s | "
              "first step, trials 2..n s: median (max) |", "|---|---|---|---|---|---|"]
        for name, r in cold:
            L.append(_row(name, r, warm=True))
        L += ["", "Warm-up strategies (examples/sweep_dask.py --warmup): split = the two "
              "workers compile the two halves of the demo's kernels at once, one worker "
              "compiles what is left (a 2-step trial), then every worker loads it all; "
              "each = every worker runs a 2-step trial first; "
              "first = trial 1 alone, then the rest; none = all trials at once.", ""]
    return L


def _row(name, r, warm=False):
    rest = r["first_step_rest_s"] or [0.0]
    cells = [name, f"{r['process_s']:.1f}"] + ([f"{r['warm_up_s']:.1f}"] if warm else []) + [
        f"{r['trials_s']:.2f}", f"{r['first_step_trial1_s']:.3f}",
        f"{statistics.median(rest):.3f} ({max(rest):.3f})"]
    return "| " + " | ".join(cells) + " |"


def save(lines, workers):
    """Write the report to benchmarks/results/sweep-<date-time>-<commit>-<N>w.md."""
    from benchmarks.compare import git_rev
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%M")
    commit = git_rev().replace("+", "-") if git_rev() != "?" else "nogit"
    folder = os.path.join(REPO, "benchmarks", "results")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"sweep-{stamp}-{commit}-{workers}w.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(argv[1:])
    p = argparse.ArgumentParser(prog="python -m benchmarks.sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=8)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--cold", action="store_true", help="also from an empty kernel cache")
    p.add_argument("--no-fresh", action="store_true", help="skip the fresh-process runs")
    p.add_argument("--no-save", action="store_true")
    args = p.parse_args(argv)
    if min(args.trials, args.workers, args.steps, args.rounds) < 1:
        p.error("--trials, --workers, --steps and --rounds must be positive")
    args.load_before = os.getloadavg()[0]
    print(f"warm: {args.trials} trials, {args.rounds} rounds ...", flush=True)
    w = warm(args)
    fresh_warm = None
    if not args.no_fresh:
        print("fresh processes, warm cache ...", flush=True)
        fresh_warm = (fresh("seq", args), fresh("each", args))
    cold = []
    if args.cold:
        for mode in ("seq",) + STRATEGIES:
            print(f"cold: {mode} ...", flush=True)
            with tempfile.TemporaryDirectory(prefix="tapegrad-sweep-cold-") as d:
                name = ("one after another, one process" if mode == "seq"
                        else f"Dask, --warmup {mode}")
                cold.append((name, fresh(mode, args, d)))
    lines = report(args, w, fresh_warm, cold)
    print("\n".join(lines))
    if not args.no_save:
        print(f"written to {save(lines, args.workers)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
