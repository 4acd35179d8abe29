"""A bounded slice of the differential fuzzer (scripts/fuzz_graphs.py) against PyTorch:
random graphs (values, gradients, grad_fn names and errors) and wrong arguments to common
functions (exception types), each case in a worker process so that a crash is a finding.
TAPEGRAD_GRAPH_FUZZ / TAPEGRAD_INPUT_FUZZ set the number of cases (from
TAPEGRAD_FUZZ_SEED); the longer run before a release is in scripts/fuzz.sh."""
import importlib.util
import os

import pytest

pytest.importorskip("torch")

_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "scripts", "fuzz_graphs.py")
_spec = importlib.util.spec_from_file_location("fuzz_graphs", _PATH)
fz = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fz)

SEED = int(os.environ.get("TAPEGRAD_FUZZ_SEED", "0"))


def _report(found, allowed=("message",)):
    bad = [f for f in found if f["kind"] not in allowed and not f["kind"].startswith("known")]
    assert not bad, "\n".join(fz.format_finding(f) for f in bad)


def test_random_graphs():
    n = int(os.environ.get("TAPEGRAD_GRAPH_FUZZ", "2000"))
    _report(fz.fuzz("graphs", range(SEED, SEED + n), workers=2))


def test_bad_inputs():
    n = int(os.environ.get("TAPEGRAD_INPUT_FUZZ", "2000"))
    _report(fz.fuzz("inputs", range(SEED, SEED + n), workers=2),
            allowed=("message", "stricter"))


def test_a_crash_is_one_finding_and_the_worker_comes_back(monkeypatch):
    # the worker aborts (as a segfault would end it) on seed 5: one finding, with its seed
    # and its program, and the cases after it still run in a new worker
    monkeypatch.setenv("TAPEGRAD_FUZZ_CRASH_AT", "5")
    got = []
    pool = fz.Pool(1, timeout=60)
    try:
        found = pool.run("graphs", [4, 5, 6, 7], lambda s, r: got.append(s))
    finally:
        pool.close()
    assert [(f["seed"], f["kind"]) for f in found] == [(5, "crash")]
    assert found[0]["program"].startswith("import torch\nl0 = torch.tensor(")
    assert sorted(got) == [4, 6, 7]


def test_reproducer_is_pytorch_spelling_and_shrunk():
    import torch
    import tapegrad as tg
    # a made-up difference (a message compare that always differs) shrinks to the lines
    # that make it: the error line and what it needs
    lines = ["a = torch.ones(2, requires_grad=True)", "b = a * 2", "c = torch.ones(3)",
             "a.add_(1.0)"]

    def check(ls):
        e1, _ = fz.run_program(ls, torch)
        e2, _ = fz.run_program(ls, tg)
        return ("error", "") if e1 and e2 and e1[1] == e2[1] == "RuntimeError" else None

    assert check(lines) is not None
    assert fz.shrink(lines, "error", check) == [lines[0], lines[3]]
