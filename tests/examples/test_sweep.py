"""examples/sweep_dask.py: a small sweep on a 2-worker LocalCluster gives, trial for trial,
the metrics of the same trial run in this process, bit for bit (the seed fixes them),
whatever the warm-up strategy; the workers run tapegrad on the threads asked for."""
import importlib.util
import os

import pytest

distributed = pytest.importorskip(
    "distributed", reason="the sweep example needs Dask distributed (pip install "
    "'tapegrad[sweep]')")

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "examples", "sweep_dask.py")
STEPS = 20
CONFIGS = [dict(lr=0.01, hidden=16, seed=0, steps=STEPS),
           dict(lr=0.03, hidden=16, seed=1, steps=STEPS),
           dict(lr=0.1, hidden=8, seed=0, steps=STEPS),
           dict(lr=0.003, hidden=24, seed=2, steps=STEPS)]
METRICS = ("train_loss", "train_acc", "val_loss", "val_acc")


def _example():
    spec = importlib.util.spec_from_file_location("sweep_dask_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def example():
    return _example()


@pytest.fixture(scope="module")
def client(example):
    cluster, client = example.start_cluster(workers=2, threads=1)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


@pytest.fixture(scope="module")
def expected():
    """Each trial run here, in this process (on its default thread count)."""
    from tapegrad._demo.trial import trial
    return {(c["lr"], c["hidden"], c["seed"]): trial(**c) for c in CONFIGS}


def _key(r):
    return (r["lr"], r["hidden"], r["seed"])


@pytest.mark.parametrize("strategy", ["split", "first", "none"])
def test_sweep_equals_in_process(example, client, expected, strategy):
    results, warm, wall = example.run_sweep(client, CONFIGS, strategy)
    assert sorted(map(_key, results)) == sorted(expected)
    for r in results:
        want = expected[_key(r)]
        assert r["steps"] == STEPS
        # bitwise: the same floats, not close ones
        assert [r[k] for k in METRICS] == [want[k] for k in METRICS], _key(r)
        assert r["pid"] != os.getpid()          # it ran in a worker
    assert warm >= 0.0 and wall > 0.0
    # the trials differ: a sweep that ran one trial four times would pass the above
    assert len({r["val_loss"] for r in results}) == len(CONFIGS)


def test_workers_single_threaded_and_share_the_cache(client):
    import tapegrad as tg
    from tapegrad._engine.cache import CACHE_DIR

    def probe():
        import tapegrad
        from tapegrad._engine.cache import CACHE_DIR
        return (tapegrad.get_num_threads(), os.environ.get("TAPEGRAD_NUM_THREADS"),
                CACHE_DIR, os.getpid())
    seen = client.run(probe)
    assert len(seen) == 2 and len({pid for *_, pid in seen.values()}) == 2
    for threads, env, cache, _ in seen.values():
        assert (threads, env) == (1, "1")
        assert cache == CACHE_DIR                # one cache for the workers and this process
    assert tg.get_num_threads() >= 1


def test_split_warm_up_runs_each_half_once(example, client):
    """The cold start's split (run here on a warm cache, where it only loads): the first
    two workers take one half each, any further worker none; a bad part is refused."""
    from tapegrad._demo.trial import warm_up
    addresses = sorted(client.scheduler_info()["workers"])
    took = client.run(example._warm_half, addresses + ["tcp://not-a-worker:1"])
    assert sorted(took) == addresses and all(t >= 0.0 for t in took.values())
    assert client.run(example._warm_half, addresses[:1])[addresses[1]] == 0.0
    with pytest.raises(ValueError, match="part must be None, 0 or 1"):
        warm_up(2)


def test_threads_overridable(example):
    cluster, client = example.start_cluster(workers=1, threads=2)
    try:
        got = list(client.run(lambda: __import__("tapegrad").get_num_threads()).values())
    finally:
        client.close()
        cluster.close()
    assert got == [2]


def test_table_sorted_by_validation_loss(example, expected):
    text = example.table(list(expected.values())).splitlines()
    col = text[0].split().index("val_loss")
    losses = [float(line.split()[col]) for line in text[1:]]
    assert len(losses) == len(CONFIGS) and losses == sorted(losses)


def test_grid_and_bad_trial_arguments(example):
    from tapegrad._demo.trial import trial
    g = example.grid([0.1, 0.2], [8], [0, 1, 2], 5)
    assert len(g) == 6 and g[0] == dict(lr=0.1, hidden=8, seed=0, steps=5)
    for kwargs, message in ((dict(steps=0), "steps must be a positive integer"),
                            (dict(hidden=2.5), "hidden must be a positive integer"),
                            (dict(lr=-1.0), "lr must be a positive number"),
                            (dict(lr=True), "lr must be a positive number")):
        with pytest.raises(ValueError, match=message):
            trial(**kwargs)
