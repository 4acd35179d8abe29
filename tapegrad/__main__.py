"""python -m tapegrad demo [--model mlp|cnn|transformer] | warmup

demo:   trains a small model with a progress bar and the loss, then prints the accuracy,
        steps per second and how much of the start was import and kernel compilation;
        with PyTorch installed, runs the same loop (same code, same initial weights, same
        batches) in PyTorch and prints the speed ratio. Models (tapegrad/_demo/):
        mlp (default): nn.Sequential of Linear/Tanh, 2-32-32-3, on three spirals, Adam;
        cnn: LeNet-5 on 28x28 digits the demo draws itself, SGD with momentum;
        transformer: a 2-layer causal character transformer on a text the demo writes
        itself, AdamW.
warmup: compiles (or loads from the cache) every kernel, so later runs start warm.
"""
import argparse
import gc
import os
import subprocess
import sys
import time

import numpy as np


from tapegrad._demo.data import spirals  # noqa: E402  (the package's own, import is light)
from tapegrad._demo.models import copy_weights, mlp as make_model  # noqa: E402, F401


class Progress:
    """A one-line progress bar with the loss (plain lines when not on a terminal)."""

    def __init__(self, total, width=30):
        self.total, self.width = total, width
        self.tty = sys.stdout.isatty()
        self.every = max(total // (100 if self.tty else 10), 1)

    def update(self, step, loss):
        if step % self.every and step != self.total - 1:
            return
        done = (step + 1) / self.total
        bar = "#" * int(done * self.width)
        text = f"  [{bar:<{self.width}}] {step + 1:5d}/{self.total}  loss {loss:.4f}"
        print(("\r" + text) if self.tty else text, end="" if self.tty else "\n", flush=True)
        if self.tty and step == self.total - 1:
            print()


def train(lib, model, X, Y, steps, lr, progress=None, compiled=False):
    """Full-batch Adam on cross entropy; returns (loss, accuracy, steps/s, first step s).
    compiled: the step runs under tapegrad.compile (recorded once, then replayed)."""
    opt = lib.optim.Adam(model.parameters(), lr=lr)
    loss_fn = lib.nn.CrossEntropyLoss()
    Xt, Yt = lib.tensor(X), lib.tensor(Y)

    def train_step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss
    if compiled:
        train_step = lib.compile(train_step)
    t0 = time.perf_counter()
    t_first = None
    for step in range(steps):
        loss = train_step(Xt, Yt)
        if step == 0:
            t_first = time.perf_counter() - t0
            t0 = time.perf_counter()
        if progress is not None:
            progress.update(step, loss.item())
    elapsed = time.perf_counter() - t0
    if steps == 1:                  # nothing timed after the first step: report that one
        steps, elapsed = 2, t_first
    with lib.no_grad():
        logits = model(Xt)
        loss = loss_fn(logits, Yt).item()
        acc = float((logits.argmax(1).numpy() == Y).mean())
    return loss, acc, (steps - 1) / elapsed, t_first


# A cold start splits the compiling between this process and a helper so that the
# engine functions both halves call compile once: this process starts with op_entry,
# whose callees the sweep shares, while the helper compiles Adam and linear, which need
# few of them, then the sweep, which by then loads those callees from the cache instead
# of compiling them again. This process's share of compiling is the smaller one, sized
# so that both halves end together: it also imports PyTorch and makes its first Adam
# meanwhile (_prepare_peer), which would otherwise follow the compiling; the helper
# starts a little later (after this process's import).
_MAIN_TASKS = ("op_entry", "replay", "op:tanh", "eager", "random:uniform")
_HELPER_TASKS = ("optim:adam", "op:linear", "sweep", "op:cross_entropy_plain")
_EAGER_ENTRIES = ("drain_queue", "contiguous_id", "adopt", "bump_version_id")


def _cached(directory, prefix):
    """Whether Numba's cache in directory has an index file starting with prefix."""
    try:
        return any(f.startswith(prefix) and f.endswith(".nbi") for f in os.listdir(directory))
    except OSError:
        return False


# (kernel file, what its cache index files start with): a piece of each of the demo's
# tasks. Each kernel file is keyed on its own, so one cached is no sign of the others.
_DEMO_KERNELS = (("_engine/entry.py", "entry.op_entry-"), ("_engine/sweep.py", "sweep.sweep-"),
                 ("replay/_run.py", "_run.run-"), ("optim/_kernels.py", "_kernels.adam_native-"),
                 ("ops/loss.py", "loss.ce_plain_fwd_f32-"),
                 ("ops/linear.py", "linear.linear_fwd_f32-"),
                 ("_engine/mt19937.py", "mt19937.uniform-"))


def _demo_cached():
    """Whether this version's kernels for each of the demo's tasks are cached. (Some of
    them cached, by another program, is not a warm start: the rest would then compile
    here, on one core, inside the timed loop.)"""
    from tapegrad._engine.cache import kernel_dir, _PKG
    return all(_cached(kernel_dir(os.path.join(_PKG, *f.split("/"))), name)
               for f, name in _DEMO_KERNELS)


def _start_helper():
    """On a cold cache, start a second process on _HELPER_TASKS while this one does
    _MAIN_TASKS: two cores, half the wait. Both land in the shared cache."""
    if _demo_cached():
        return None
    # (Numba's error highlighting formats the messages of the overloads typing tries and
    # rejects: a small share of compiling, and the helper's output is discarded)
    env = dict(os.environ, NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING="1")
    return subprocess.Popen([sys.executable, "-m", "tapegrad", "warmup", "--tasks",
                             ",".join(_HELPER_TASKS)], env=env, stdout=subprocess.DEVNULL)


def _compile_task(task):
    """Compile (or load) one piece: "op_entry" or "sweep" (the engine core's two entry
    points), "replay" (the executor), "op:NAME" (float32 kernels), "optim:NAME",
    "random:NAME" (a kernel of _engine/mt19937.py)."""
    from tapegrad._engine.cache import kernel_cache
    if task in ("op_entry", "sweep"):
        from tapegrad._engine import core
        from tapegrad._engine.state import _entry, _OP_SIG, _SWEEP_SIG, _ENTRY_SIGS
        with kernel_cache():
            _entry(getattr(core, task), {"op_entry": _OP_SIG, "sweep": _SWEEP_SIG}[task])
    elif task == "eager":               # the small engine entries an eager step calls too
        from tapegrad._engine import core
        from tapegrad._engine.state import _entry, _ENTRY_SIGS
        with kernel_cache():
            for name in _EAGER_ENTRIES:
                _entry(getattr(core, name), _ENTRY_SIGS[name])
            core.incref_meta.compile("int64(int64, int64)")
    elif task == "replay":
        _compile_replay(demo=True)
    elif task.startswith("op:"):
        from tapegrad.ops.registry import BY_NAME
        BY_NAME[task[3:]].kernels(0)
    elif task.startswith("random:"):    # (the layers' initialisers draw with these)
        from tapegrad._front import sampling
        sampling._kernel(task[7:])
    elif task.startswith("optim:"):
        with kernel_cache():
            from tapegrad.optim import _kernels as K
        name = {"adamw": "adam"}.get(task[6:], task[6:])
        getattr(K, name + "_native").compile(K.NATIVE_SIG)
        K.step_if_current.compile(K.STEP_IF_CURRENT_SIG)
    else:
        raise ValueError(f"unknown warmup task {task!r}")


def _prepare_peer():
    """Import PyTorch for the comparison at the end while the helper process is still
    compiling (this process's core would otherwise sit idle), and make one Adam: the
    first one imports the rest of PyTorch's optimizer machinery."""
    try:
        import torch
    except ImportError:
        return
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])


def demo(steps=1000, n=512, lr=0.01, eager=False):
    import tapegrad as tg
    from tapegrad._engine.state import engine
    t_start = time.perf_counter() - tg._IMPORT_SECONDS
    helper = _start_helper()
    t0 = time.perf_counter()
    if helper is not None:      # this process's share of a cold start
        for task in _MAIN_TASKS:
            _compile_task(task)
    t_core = time.perf_counter() - t0
    if helper is not None:
        if helper.poll() is None:
            _prepare_peer()
        helper.wait()
    engine().compile_core()     # (cold: the sweep comes from the cache the helper filled)
    _compile_replay(demo=True)
    t_ready = time.perf_counter() - t0
    X, Y = spirals(n)
    tg.manual_seed(0)
    model = make_model(tg)
    print(f"tapegrad {tg.__version__}: {model}".replace("\n", "\n  "))
    print(f"three spirals, {n} points, full-batch Adam (lr {lr}), cross entropy, {steps} "
          "steps; the step runs under tapegrad.compile (recorded once, then replayed)")
    loss, acc, sps, first = train(tg, model, X, Y, steps, lr, Progress(steps), compiled=True)
    print(f"tapegrad: final loss {loss:.4f}, accuracy {acc:.3f}, {sps:,.0f} steps/s "
          f"({1e6 / sps:.0f} us/step)")
    if eager:
        _, _, esps, _ = train(tg, model_init(tg, lr), X, Y, steps, lr)
        print(f"          the same steps run eagerly: {1e6 / esps:.0f} us/step")
    if helper is not None:
        print(f"          cold start: {t_ready:.1f} s compiling on two cores (this process: "
              f"{', '.join(_MAIN_TASKS)} in {t_core:.1f} s; a helper process: "
              f"{', '.join(_HELPER_TASKS)}); the first step took {first:.1f} s. "
              "All is cached now: the next run starts warm.")
    else:
        print(f"          warm start: engine and kernels loaded from the cache in "
              f"{t_ready + first:.1f} s (import {tg._IMPORT_SECONDS:.1f} s)")
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed: no side-by-side comparison.")
        return 0
    torch.set_num_threads(1)
    tmodel = make_model(torch)
    copy_weights(model_init(tg, lr), tmodel, torch)
    tloss, tacc, tsps, _ = train(torch, tmodel, X, Y, steps, lr)
    print(f"PyTorch {torch.__version__}: final loss {tloss:.4f}, accuracy {tacc:.3f}, "
          f"{tsps:,.0f} steps/s ({1e6 / tsps:.0f} us/step)")
    print(f"speed: tapegrad's step takes {tsps / sps:.2f}x PyTorch's time "
          f"({sps / tsps:.1f}x the steps per second); final losses differ by "
          f"{abs(loss - tloss):.1e}")
    print(f"total {time.perf_counter() - t_start:.1f} s")
    return 0


def _model_demo(kind, steps):
    """The cnn and transformer demos: the same seeded model, batches and optimizer in
    tapegrad (the step under tapegrad.compile) and, when installed, PyTorch."""
    import tapegrad as tg
    from tapegrad._demo import data, models
    t0 = time.perf_counter()
    if kind == "cnn":
        X, Y = data.digits(2048, seed=0)
        Xtest, Ytest = data.digits(512, seed=1)
        stream = lambda: models.batches(X, Y, 64, seed=0)                   # noqa: E731
        build = lambda lib: models.lenet(lib)                               # noqa: E731
        optim = lambda lib, m: lib.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)  # noqa: E731
        what = "LeNet-5, digits drawn by the demo (2048 train, 512 test, 28x28), batch 64, SGD"
    else:
        corpus = data.text()
        vocab, tokens = data.char_dataset(corpus)
        context = 32
        stream = lambda: models.sequence_batches(tokens, context, 32, seed=0)  # noqa: E731
        build = lambda lib: models.char_transformer(lib, len(vocab), context)  # noqa: E731
        optim = lambda lib, m: lib.optim.AdamW(m.parameters(), lr=3e-3)     # noqa: E731
        what = (f"character transformer (2 layers, d_model 64, 4 heads, context {context}), "
                f"a {len(corpus):,}-character text written by the demo, batch 32, AdamW")
    tg.manual_seed(0)
    model = build(tg)
    tg.set_num_threads(1)           # (PyTorch's side runs on one thread too)
    print(f"tapegrad {tg.__version__}: {what}; {steps} steps, the step under "
          "tapegrad.compile; both libraries on one thread")

    def run(lib, model, compiled):
        step = models.classifier_step(lib, model, optim(lib, model))
        if compiled:
            step = lib.compile(step)
        it = stream()
        bar = Progress(steps) if lib is tg else None
        losses, t_first, t1 = [], None, time.perf_counter()
        for k in range(steps):
            xb, yb = next(it)
            loss = step(lib.tensor(xb), lib.tensor(yb))
            losses.append(loss.item())
            if k == 0:
                t_first, t1 = time.perf_counter() - t1, time.perf_counter()
            if bar is not None:
                bar.update(k, losses[-1])
        per_step = (time.perf_counter() - t1) / max(steps - 1, 1)
        return losses, per_step, t_first

    initial = build(tg)
    models.copy_weights(model, initial, tg)
    losses, per_step, first = run(tg, model, compiled=True)

    def score(lib, m):
        if kind != "cnn":
            return f"final loss {losses_of[lib][-1]:.4f}"
        with lib.no_grad():
            m.eval()
            acc = float((m(lib.tensor(Xtest)).argmax(1).numpy() == Ytest).mean())
        return f"final loss {losses_of[lib][-1]:.4f}, test accuracy {acc:.3f}"
    losses_of = {tg: losses}
    print(f"tapegrad: {score(tg, model)}, {1e3 * per_step:.2f} ms/step; start-up "
          f"{time.perf_counter() - t0 - per_step * (steps - 1):.1f} s (first step "
          f"{first:.1f} s: recording and, on a cold cache, compiling)")
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed: no side-by-side comparison.")
        return 0
    torch.set_num_threads(1)
    tmodel = build(torch)
    models.copy_weights(initial, tmodel, torch)
    tlosses, tper_step, _ = run(torch, tmodel, compiled=False)
    losses_of[torch] = tlosses
    print(f"PyTorch {torch.__version__}: {score(torch, tmodel)}, {1e3 * tper_step:.2f} ms/step")
    gap = float(np.max(np.abs(np.array(losses) - np.array(tlosses))))
    print(f"speed: tapegrad's step takes {per_step / tper_step:.2f}x PyTorch's time; the "
          f"loss curves differ by at most {gap:.1e}")
    return 0


def _compile_replay(demo=False):
    """The compiled replay's executor (a few seconds cold) and the small engine entries
    it calls: all of them, or (demo) those the demo calls: its step calls release_id,
    and making its model calls new_tensor and detach (as eager entries, which the same
    compiled code serves)."""
    from tapegrad._engine.cache import kernel_cache
    from tapegrad._engine.state import native_entry
    with kernel_cache():
        from tapegrad.replay import _run
    native_entry(_run.run, _run.RUN_SIG)
    from tapegrad.replay.plan import small_natives
    small_natives({_run.H_RELEASE, _run.H_NEW, _run.H_DETACH} if demo else None)


def model_init(tg, lr):
    """The demo model's initial weights (same seed as the trained one)."""
    tg.manual_seed(0)
    return make_model(tg)


def warmup(ops=None, dtypes=("float32", "float64"), optim=("sgd", "adam", "adamw",
                                                         "rmsprop", "adagrad"), replay=True,
           tasks=()):
    """Compile (or load) kernels into the cache: the given ops (default all) in the given
    dtypes, the optimizers' updates, the compiled replay's executor and the engine core.
    With tasks (see _compile_task), only those, in that order (the demo's helper process
    takes the op kernels and leaves the engine core to its parent)."""
    import tapegrad as tg
    from tapegrad.ops.registry import OPS, BY_NAME
    from tapegrad._engine.cache import kernel_cache
    t0 = time.perf_counter()
    if tasks:
        for task in tasks:
            _compile_task(task)
        print(f"{len(tasks)} tasks ready in {time.perf_counter() - t0:.1f} s")
        return 0
    from tapegrad._engine.state import engine
    engine().compile_core()
    chosen = OPS if ops is None else [BY_NAME[name] for name in ops]
    slots = sorted({("float32", "float64").index(d) for d in dtypes})
    for op in chosen:
        for slot in slots:
            op.kernels(slot)
    with kernel_cache():
        from tapegrad.optim import _kernels as K
    for name in optim:
        getattr(K, {"adamw": "adam"}.get(name, name) + "_native").compile(K.NATIVE_SIG)
    if replay:
        _compile_replay()
    print(f"{len(chosen)} ops ready in {time.perf_counter() - t0:.1f} s "
          f"(cache: {tg._engine.cache.CACHE_DIR})")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tapegrad", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="train a small classifier and compare with PyTorch")
    d.add_argument("--model", choices=("mlp", "cnn", "transformer"), default="mlp")
    d.add_argument("--steps", type=int,
                   help="training steps (default: mlp 1000, cnn 300, transformer 300)")
    d.add_argument("--eager", action="store_true",
                   help="also time the same steps without tapegrad.compile")
    w = sub.add_parser("warmup", help="compile kernels into the cache (default: all)")
    w.add_argument("--ops", help="comma-separated op names (default: every op)")
    w.add_argument("--dtypes", default="float32,float64")
    w.add_argument("--optim", default="sgd,adam,adamw,rmsprop,adagrad")
    w.add_argument("--no-replay", action="store_true",
                   help="skip the compiled replay's executor")
    w.add_argument("--tasks", default="",
                   help="only these, in order (a cold start's helper): op_entry, sweep, "
                        "replay, op:NAME (float32), optim:NAME")
    args = p.parse_args(argv)
    if args.cmd == "demo" and args.steps is not None and args.steps < 1:
        p.error("demo: --steps must be at least 1")
    if args.cmd == "demo" and args.model != "mlp" and args.eager:
        p.error("demo: --eager times the mlp demo's steps without tapegrad.compile; the "
                "cnn and transformer demos compare the compiled step with PyTorch only")
    if args.cmd == "demo" and args.model != "mlp":
        return _model_demo(args.model, args.steps or 300)
    if args.cmd == "demo":
        return demo(steps=args.steps or 1000, eager=args.eager)
    return warmup(args.ops.split(",") if args.ops else None, args.dtypes.split(","),
                  [o for o in args.optim.split(",") if o], replay=not args.no_replay,
                  tasks=[t for t in args.tasks.split(",") if t])


if __name__ == "__main__":
    rc = main()
    # The compiled code and PyTorch leave hundreds of thousands of objects that the
    # interpreter's shutdown would walk in full garbage collections: a noticeable wait
    # after the demo's last line. Frozen objects are left out of those collections.
    gc.freeze()
    sys.exit(rc)
