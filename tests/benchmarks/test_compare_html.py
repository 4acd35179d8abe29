"""python -m benchmarks.compare --html: a self-contained report built from a canned result
and, for the asv history, a small results tree in asv's own format (no benchmark runs
here)."""
import base64
import re

import pytest

from benchmarks import compare

CANNED = [
    "# tapegrad vs peers (quick, 3 interleaved rounds)",
    "",
    "- threads: 1",
    "- jax: not installed, skipped (No module named 'jax')",
    "",
    "| workload | unit | tapegrad median (min–max) | torch | tapegrad/torch | numpy | "
    "tapegrad/numpy |",
    "|---|---|---|---|---|---|---|",
    "| tiny op | µs/op | 1.20 (1.10–1.30) | 4.00 | 0.30 | 0.80 | 1.50 |",
    "| MLP step | µs/step | 50.0 (48.0–52.0) | 100 | 0.50 | — | — |",
    "| <odd> & name | µs | ABORTED: x | — | — | — | — |",
    "",
    "Times in µs, `medians` over rounds.",
    "",
    "| target | ratio allowed | this run | |",
    "|---|---|---|---|",
    "| tiny recorded op | <= 0.5 | 0.30 | met |",
]


def test_ratios_are_read_from_the_table():
    assert compare.ratio_rows(CANNED) == [("tiny op", {"torch": 0.30, "numpy": 1.50}),
                                          ("MLP step", {"torch": 0.50})]


def test_html_report_is_self_contained(tmp_path):
    pytest.importorskip("matplotlib")
    path = compare.write_html(CANNED, str(tmp_path / "report.html"),
                              asv_results=str(tmp_path / "no-asv-results"))
    text = open(path, encoding="utf-8").read()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    assert len(images) == 1
    # no asv results: the history section is a short note, no image
    assert "<h2>asv history of the key benchmarks</h2>" in text
    assert "No asv results in" in text and "--set-commit-hash" in text
    assert 'alt="asv history' not in text
    assert base64.b64decode(images[0]).startswith(b"\x89PNG")
    outside = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", text)
    assert "http" not in outside and "src=" not in outside.replace('src=""', "")
    assert "<link" not in text and "<script" not in text
    for cell in ("tiny op", "0.30", "1.50", "MLP step", "&lt;odd&gt; &amp; name",
                 "<code>medians</code>", "tiny recorded op"):
        assert cell in text
    assert text.count("<table>") == 2


def test_html_flag_is_parsed():
    assert compare.parse_args(["--html", "r.html"]).html == "r.html"
    assert compare.parse_args([]).html is None


# ---------------------------------------------------------------- asv history
# asv 0.6 writes <results_dir>/benchmarks.json, <machine>/machine.json and one
# <machine>/<commit[:8]>-<env>.json per machine, commit and environment (format version 2:
# a row of result_columns per benchmark, "result" a value per parameter combination,
# null for a failed benchmark, NaN for a failed combination; "date" is the commit's date in
# ms). The trees below are written in that layout (as `asv run --python=same
# --set-commit-hash=...` writes it for this suite).
ENV = "existing-py_usr_bin_python3.11"
COLUMNS = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a",
           "stats_ci_99_b", "stats_q_25", "stats_q_75", "stats_number", "stats_repeat",
           "samples", "profile"]
PARAMS = {"bench_core.Chain1M.time_chain_1m": [["'float32'", "'float64'"]],
          "bench_core.ReplayMLPStepCE.time_replay_mlp_step_ce": [["1", "16"]]}


def _write_asv_run(folder, commit, date_ms, scale, machine="vm", failed=()):
    """One results file: every key benchmark (and one that is not key) at `scale` times a
    base value, `failed` benchmarks with asv's null result."""
    import json
    mdir = folder / machine
    mdir.mkdir(parents=True, exist_ok=True)
    (mdir / "machine.json").write_text(json.dumps(
        {"arch": "x86_64", "cpu": "AMD EPYC", "machine": machine, "num_cpu": "2",
         "os": "Linux", "ram": "25276502016", "version": 1}))
    results = {}
    names = [k[0] for k in compare.ASV_KEY_BENCHMARKS] + ["bench_core.OpsMix.time_ops_mix"]
    for i, name in enumerate(names):
        params = PARAMS.get(name, [])
        n = len(params[0]) if params else 1
        value = [scale * 1e-4 * (i + 1) * (k + 1) for k in range(n)]
        if name in failed:
            value = None
        row = [value, params, "0" * 64, date_ms + 1000, 1.5, value, value, value, value,
               [1] * n, [10] * n]
        results[name] = row
    data = {"commit_hash": commit, "env_name": ENV, "date": date_ms,
            "params": {"arch": "x86_64", "cpu": "AMD EPYC", "machine": machine,
                       "num_cpu": "2", "os": "Linux", "ram": "25276502016",
                       "python": "3.11"},
            "python": "3.11", "requirements": {}, "env_vars": {},
            "result_columns": COLUMNS, "results": results,
            "durations": {"<build>": 4e-05}, "version": 2}
    (mdir / f"{commit[:8]}-{ENV}.json").write_text(json.dumps(data))
    (folder / "benchmarks.json").write_text(json.dumps(
        {name: {"name": name, "params": PARAMS.get(name, []), "type": "time",
                "unit": "seconds", "version": "0" * 64} for name in names} | {"version": 2}))


def _asv_tree(tmp_path):
    folder = tmp_path / "results"
    c = [f"{i:x}" * 40 for i in range(1, 5)]          # 1111..., 2222..., ...
    _write_asv_run(folder, c[0], 1_700_000_000_000, 1.0)
    _write_asv_run(folder, c[2], 1_700_000_200_000, 0.8,
                   failed=("bench_core.MLPStep.time_mlp_step",))
    _write_asv_run(folder, c[1], 1_700_000_100_000, 0.9)
    # not in the log (another branch): placed by its commit date, between c[1] and c[2]
    _write_asv_run(folder, c[3], 1_700_000_150_000, 0.85)
    (folder / "vm" / "notes.json").write_text('{"not": "asv results"}')
    return folder, c


def test_asv_results_are_read_in_asvs_format(tmp_path):
    folder, c = _asv_tree(tmp_path)
    runs = compare.read_asv_results(str(folder))
    assert sorted(r["commit"] for r in runs) == sorted(c)
    first = next(r for r in runs if r["commit"] == c[0])
    assert first["machine"] == "vm" and first["date"] == 1_700_000_000_000
    i = [k[0] for k in compare.ASV_KEY_BENCHMARKS].index("bench_core.Chain1M.time_chain_1m")
    assert first["values"]["bench_core.Chain1M.time_chain_1m"] == [
        ("float32", pytest.approx(1e-4 * (i + 1))), ("float64", pytest.approx(2e-4 * (i + 1)))]
    assert first["values"]["bench_core.TinyOp.time_tiny_op"] == [("", pytest.approx(1e-4))]
    failed = next(r for r in runs if r["commit"] == c[2])
    assert "bench_core.MLPStep.time_mlp_step" not in failed["values"]
    assert compare.read_asv_results(str(tmp_path / "absent")) == []


def test_asv_nan_results_are_left_out(tmp_path):
    import json
    folder, c = _asv_tree(tmp_path)
    path = folder / "vm" / f"{c[0][:8]}-{ENV}.json"
    d = json.loads(path.read_text())
    d["results"]["bench_core.Chain1M.time_chain_1m"][0] = [float("nan"), 0.5]
    path.write_text(json.dumps(d))              # (json writes NaN as asv's files have it)
    run = next(r for r in compare.read_asv_results(str(folder)) if r["commit"] == c[0])
    assert run["values"]["bench_core.Chain1M.time_chain_1m"] == [("float32", None),
                                                                 ("float64", 0.5)]
    commits, history, _ = compare.asv_history([run], log=[])
    assert set(history["bench_core.Chain1M.time_chain_1m"]) == {"float64"}


def test_asv_history_orders_commits_as_git_log(tmp_path):
    folder, c = _asv_tree(tmp_path)
    runs = compare.read_asv_results(str(folder))
    commits, history, dates = compare.asv_history(runs, log=["f" * 40, c[0], c[1], c[2]])
    assert commits == [c[0], c[1], c[3], c[2]]
    tiny = history["bench_core.TinyOp.time_tiny_op"]
    assert list(tiny) == [""]                   # one series, values in µs per op
    assert tiny[""] == {c[0]: pytest.approx(0.1), c[1]: pytest.approx(0.09),
                        c[2]: pytest.approx(0.08), c[3]: pytest.approx(0.085)}
    assert set(history["bench_core.ReplayMLPStepCE.time_replay_mlp_step_ce"]) == {"1", "16"}
    assert c[2] not in history["bench_core.MLPStep.time_mlp_step"][""]
    assert "bench_core.OpsMix.time_ops_mix" not in history      # not a key benchmark


def test_order_commits_places_unlogged_commits_by_date():
    dates = {"a": 10, "b": 20, "c": 30, "x": 25, "y": 5, "z": 99}
    assert compare.order_commits(dates, ["a", "b", "c"]) == ["y", "a", "b", "x", "c", "z"]
    # the log's order wins over dates (a rebase keeps old dates); an unlogged commit goes
    # before the first logged one newer than it
    assert compare.order_commits(dates, ["c", "a", "b"]) == ["y", "x", "c", "a", "b", "z"]
    assert compare.order_commits(dates, []) == ["y", "a", "b", "x", "c", "z"]
    assert compare.order_commits({"b": 1, "a": 1}, ["b", "a"]) == ["b", "a"]


def test_html_report_has_one_history_image_per_key_benchmark(tmp_path):
    pytest.importorskip("matplotlib")
    folder, c = _asv_tree(tmp_path)
    path = compare.write_html(CANNED, str(tmp_path / "report.html"), asv_results=str(folder))
    text = open(path, encoding="utf-8").read()
    history = re.findall(r'alt="asv history: ([^"]+)" src="data:image/png;base64,'
                         r'([A-Za-z0-9+/=]+)"', text)
    assert len(history) == len(compare.ASV_KEY_BENCHMARKS)
    import html
    assert [html.unescape(t) for t, _ in history] == [k[1] for k in compare.ASV_KEY_BENCHMARKS]
    for _, png in history:
        assert base64.b64decode(png).startswith(b"\x89PNG")
    assert "No asv results" not in text and "4 runs, 4 commits" in text
    outside = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", text)
    assert "http" not in outside
    assert "<link" not in text and "<script" not in text


def test_history_section_notes_key_benchmarks_without_results(tmp_path):
    pytest.importorskip("matplotlib")
    folder, c = _asv_tree(tmp_path)
    import json
    for f in (folder / "vm").glob(f"*-{ENV}.json"):
        d = json.loads(f.read_text())
        del d["results"]["bench_core.WarmStart.track_warm_start_seconds"]
        f.write_text(json.dumps(d))
    lines = compare.asv_history_html(str(folder), log=c)
    assert sum('alt="asv history' in line for line in lines) == \
        len(compare.ASV_KEY_BENCHMARKS) - 1
    assert any("bench_core.WarmStart.track_warm_start_seconds</code>): no results" in line
               for line in lines)
