"""One training run of the demo's spirals classifier with given hyper-parameters,
returning its metrics: the unit of work of a hyper-parameter sweep
(examples/sweep_dask.py, benchmarks/sweep.py). The same data, model and step as
``python -m tapegrad demo`` (tapegrad/_demo/data.py, models.py), the step under
tapegrad.compile."""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import os
import time

from .data import spirals
from .models import classifier_step, mlp


def trial(lr=0.01, hidden=32, seed=0, steps=1000, n=512, n_val=512, compiled=True):
    """Train the demo's 2-hidden-hidden-3 tanh MLP with full-batch Adam (learning rate
    lr) on n points of three spirals (data seed 0) for `steps` steps, the weights drawn
    after ``tapegrad.manual_seed(seed)``; then score it on n_val other points (data seed
    1). The result depends on the arguments only (and not on the thread count), so a
    trial run in another process gives the same numbers bit for bit.

    Returns a dict: the arguments, ``train_loss`` and ``train_acc`` (the last step's
    model on the training set), ``val_loss`` and ``val_acc``, ``first_step_s`` (from the
    call to the end of the first step: building the model, recording the compiled step
    and loading or compiling its kernels), ``step_us`` (the later steps' mean wall
    time), ``step_cpu_us`` (their mean CPU time in this thread: less than step_us when
    the process waited for a core), ``total_s`` and ``pid``."""
    for name, value in (("steps", steps), ("hidden", hidden), ("n", n), ("n_val", n_val)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"trial: {name} must be a positive integer, got {value!r}")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
        raise ValueError(f"trial: lr must be a positive number, got {lr!r}")
    import tapegrad as tg
    t0 = time.perf_counter()
    X, Y = spirals(n, seed=0)
    Xv, Yv = spirals(n_val, seed=1)
    tg.manual_seed(seed)
    model = mlp(tg, hidden)
    step = classifier_step(tg, model, tg.optim.Adam(model.parameters(), lr=lr))
    if compiled:
        step = tg.compile(step)
    x, y = tg.tensor(X), tg.tensor(Y)
    step(x, y)
    first = time.perf_counter() - t0
    t1, c1 = time.perf_counter(), time.thread_time()
    for _ in range(steps - 1):
        step(x, y)
    rest, cpu = time.perf_counter() - t1, time.thread_time() - c1
    loss_fn = tg.nn.CrossEntropyLoss()
    with tg.no_grad():
        scores = {}
        for split, (xs, ys) in (("train", (x, Y)), ("val", (tg.tensor(Xv), Yv))):
            logits = model(xs)
            scores[f"{split}_loss"] = loss_fn(logits, tg.tensor(ys)).item()
            scores[f"{split}_acc"] = float((logits.argmax(1).numpy() == ys).mean())
    return {"lr": lr, "hidden": hidden, "seed": seed, "steps": steps, **scores,
            "first_step_s": first, "step_us": 1e6 * rest / max(steps - 1, 1),
            "step_cpu_us": 1e6 * cpu / max(steps - 1, 1),
            "total_s": time.perf_counter() - t0,
            "pid": os.getpid()}


def is_warm():
    """Whether the kernels of each of the demo's tasks are in the cache (what
    ``python -m tapegrad demo`` checks to decide on its two-process cold start)."""
    from .. import __main__ as cli
    return cli._demo_cached()


def warm_up(part=None):
    """Compile (or load from the cache) the kernels a trial needs, in this process.

    part None: one small trial (2 steps on 8 points), which loads every kernel a trial
    calls, compiling those the cache lacks. part 0 or 1: one of the two halves into which
    ``python -m tapegrad demo`` splits a cold cache's compiling between two processes
    (both halves in two processes at once take about half the time of one process
    compiling everything; see tapegrad/__main__.py); a part is followed by part None,
    which then mostly loads. Returns the seconds taken."""
    t0 = time.perf_counter()
    if part is not None:
        if part not in (0, 1):
            raise ValueError(f"warm_up: part must be None, 0 or 1, got {part!r}")
        import os as _os
        # (Numba formats a message, with highlighting, for every overload that typing
        # tries and rejects: a noticeable share of a cold compile, discarded here)
        _os.environ.setdefault("NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING", "1")
        from .. import __main__ as cli
        for task in (cli._MAIN_TASKS, cli._HELPER_TASKS)[part]:
            cli._compile_task(task)
    else:
        trial(steps=2, n=8, n_val=8)
    return time.perf_counter() - t0
