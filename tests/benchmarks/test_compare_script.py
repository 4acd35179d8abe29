"""benchmarks/compare.py runs with and without PyTorch installed (absent peers are skipped)
and checks every peer's values before timing."""
import os
import subprocess
import sys

import pytest
from tests.helpers import REPO_ROOT



def _compare(tmp_path, hide_torch, only="tiny op"):
    env = dict(os.environ)
    if hide_torch:
        stub = tmp_path / "stub"
        stub.mkdir()
        (stub / "torch.py").write_text("raise ImportError('torch hidden by the test')\n")
        env["PYTHONPATH"] = str(stub) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-m", "benchmarks.compare", "--quick", "--rounds", "3",
                          "--only", only], cwd=REPO_ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def _table_header(text):
    return next(line for line in text.splitlines() if line.startswith("| workload"))


def test_compare_without_torch_skips_it(tmp_path):
    text = _compare(tmp_path, hide_torch=True)
    header = _table_header(text)
    assert "tapegrad median" in header and "numpy" in header and "torch" not in header
    row = next(line for line in text.splitlines() if line.startswith("| tiny op"))
    assert "ABORTED" not in row
    # the table carries its own reading of the host's speed, before and after
    speed = next(line for line in text.splitlines() if line.startswith("- host speed:"))
    before, after = (float(w) for w in speed.split() if w.replace(".", "").isdigit())
    assert before > 0 and after > 0         # (a reading, not a bound: no timing assert)


def test_compare_with_torch_compares_against_it(tmp_path):
    pytest.importorskip("torch")
    text = _compare(tmp_path, hide_torch=False)
    assert "tapegrad/torch" in _table_header(text)
    # the run's targets, from the same medians as the table's ratio
    row = next(line for line in text.splitlines() if line.startswith("| tiny op"))
    ratio = row.split("|")[5].strip()
    target = next(line for line in text.splitlines() if line.startswith("| tiny recorded op"))
    assert target.split("|")[2:4] == [" <= 0.5 ", f" {ratio} "]
    verdict = target.split("|")[4].strip()
    assert verdict == "met" or verdict.startswith("not met: ") and float(ratio) >= 0.5


def test_save_writes_the_report_under_benchmarks_results(tmp_path, monkeypatch):
    from benchmarks import compare
    monkeypatch.setattr(compare, "REPO", str(tmp_path))
    path = compare.save_report(["# report", "| a | b |"], 2)
    assert os.path.dirname(path) == str(tmp_path / "benchmarks" / "results")
    assert path.endswith("-2t.md")
    with open(path) as f:
        assert f.read() == "# report\n| a | b |\n"


def test_compare_targets_say_met_or_by_how_much_not():
    sys.path.insert(0, REPO_ROOT)
    from benchmarks.compare import targets
    rows = targets({("tiny_op", "main"): 0.41, ("round_trip", "main"): 0.125,
                    "peak_float64": 0.77, ("mlp_step", "main"): 0.25}, 1)
    assert rows[1] == "Targets, ratio tapegrad / torch (1 thread):"
    assert rows[5:] == [
        "| tiny recorded op | <= 0.5 | 0.41 | met |",
        "| round trip | <= 0.1 | 0.12 | not met: 25% over |",
        "| MLP training step, eager | <= 0.25 | 0.25 | met |",
        "| peak memory of the 200-op chain, float64 | <= 0.6 | 0.77 | not met: 28% over |"]
    assert targets({}, 2) == []         # no PyTorch: no targets block


def test_compare_measures_peak_memory_of_the_chain(tmp_path):
    """The 200-op chain's peak memory rows, one per dtype, in MB."""
    text = _compare(tmp_path, hide_torch=True, only="peak memory")
    rows = [line for line in text.splitlines() if line.startswith("| peak memory")]
    assert len(rows) == 2
    mb = [float(r.split("|")[3]) for r in rows]
    # one saved 1M-element array per 5-op cycle (tanh's output, which pow also reads)
    assert 100 < mb[0] < 400 and 200 < mb[1] < 800


def test_compare_row_broadcast_values_agree_with_torch(tmp_path):
    """The row-broadcast workload's loss and gradient agree with PyTorch's (a row whose
    peers disagree is aborted instead of timed)."""
    pytest.importorskip("torch")
    text = _compare(tmp_path, hide_torch=False, only="row_center")
    row = next(line for line in text.splitlines() if line.startswith("| row-broadcast"))
    assert "ABORTED" not in row
    assert float(row.split("|")[5]) > 0        # a tapegrad/torch ratio


def test_compare_large_single_ops_agree_with_torch(tmp_path):
    """The single-op rows (the row broadcast; on large inputs the softmax family,
    layer_norm, cross entropy with 1000 classes, the regression losses and BCE with
    logits, topk, amax, normalize, a transposed sum) compute PyTorch's values before they
    are timed: no row is aborted."""
    pytest.importorskip("torch")
    text = _compare(tmp_path, hide_torch=False, only="^op_")
    rows = [line for line in text.splitlines()
            if line.startswith("| ") and "float32, fwd+bwd" in line]
    assert len(rows) == 15
    for row in rows:
        assert "ABORTED" not in row and float(row.split("|")[5]) > 0, row


def test_op_sweep_times_an_op_against_torch():
    """benchmarks.op_sweep prints one timed line with a ratio per op it is asked for."""
    pytest.importorskip("torch")
    out = subprocess.run([sys.executable, "-m", "benchmarks.op_sweep", "softmax(0)"],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("softmax(0)")
    assert float(lines[0].split("ratio")[1].split()[0]) > 0
