"""The performance page's plots: drawn at docs build time (scripts/docs_hooks.py) from the
newest report `python -m benchmarks.compare --save` wrote, here from small saved reports
in a temporary folder (no benchmark runs)."""
import html
import importlib.util
import os
import types

import pytest

from benchmarks import compare
from tests.helpers import REPO_ROOT

OLD = [
    "# tapegrad vs peers (31 interleaved rounds)",
    "",
    "- date: 2026-11-01 10:00 UTC",
    "",
    "| workload | unit | tapegrad median (min–max) | torch | tapegrad/torch |",
    "|---|---|---|---|---|",
    "| an older workload | µs/op | 1.00 (1.00–1.00) | 2.00 | 0.50 |",
]
NEW = [
    "# tapegrad vs peers (31 interleaved rounds)",
    "",
    "- date: 2026-11-28 11:14 UTC",
    "- CPU: some CPU (2 logical cores); threads: 1",
    "",
    "| workload | unit | tapegrad median (min–max) | torch | tapegrad/torch | numpy | "
    "tapegrad/numpy |",
    "|---|---|---|---|---|---|---|",
    "| tiny op recorded: a*b, shape (4,) | µs/op | 0.70 (0.68–0.72) | 1.42 | 0.49 | 0.20 "
    "| 3.53 |",
    "| MLP 64-128-10 training step, batch 32, float32 | µs/step | 50.0 (49.2–68.9) | 127 "
    "| 0.39 | — | — |",
    "| peak memory added by the 200-op chain, 1M float64, fwd+bwd | MB | 320 (320–320) "
    "| 1571 (1571–1572) | 0.20 | — | — |",
    "",
    "Targets, ratio tapegrad / torch (1 thread):",
    "",
    "| target | ratio allowed | this run | |",
    "|---|---|---|---|",
    "| tiny recorded op | <= 0.5 | 0.49 | met |",
]
NEW_NAMES = ["tiny op recorded: a*b, shape (4,)",
             "MLP 64-128-10 training step, batch 32, float32",
             "peak memory added by the 200-op chain, 1M float64, fwd+bwd"]


def _saved(folder):
    """Two saved reports named as save_report() names them, and a file that is not one."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "2026-11-01T1000-1234567-1t.md").write_text("\n".join(OLD) + "\n",
                                                          encoding="utf-8")
    (folder / "2026-11-28T1114-aa22fba-1t.md").write_text("\n".join(NEW) + "\n",
                                                          encoding="utf-8")
    (folder / "notes.md").write_text("| workload | x |\n", encoding="utf-8")
    return folder


def test_the_newest_saved_report_is_found(tmp_path):
    folder = _saved(tmp_path / "results")
    assert compare.newest_saved_report(str(folder)) == str(folder /
                                                           "2026-11-28T1114-aa22fba-1t.md")
    assert compare.newest_saved_report(str(tmp_path / "absent")) is None
    (tmp_path / "empty").mkdir()
    assert compare.newest_saved_report(str(tmp_path / "empty")) is None


def test_plot_files_are_drawn_from_a_saved_report(tmp_path):
    pytest.importorskip("matplotlib")
    folder = _saved(tmp_path / "results")
    written = compare.write_saved_report_plots(compare.newest_saved_report(str(folder)),
                                               str(tmp_path / "site"))
    assert written == [str(tmp_path / "site" / "ratios.svg")]
    svg = open(written[0], encoding="utf-8").read()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    text = html.unescape(svg)
    for name in NEW_NAMES + ["torch", "numpy"]:
        assert name in text, name
    assert "an older workload" not in text and "tiny recorded op" not in text
    # the same report draws the same file (a docs build does not churn)
    again = compare.saved_report_plots(str(folder / "2026-11-28T1114-aa22fba-1t.md"))
    assert again["ratios.svg"] == svg.encode("utf-8")


def _hooks():
    pytest.importorskip("mkdocs")
    spec = importlib.util.spec_from_file_location(
        "docs_hooks_under_test", os.path.join(REPO_ROOT, "scripts", "docs_hooks.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_docs_hook_adds_the_plots_to_the_performance_page(tmp_path, monkeypatch):
    """The hook as mkdocs runs it (loaded from a config's hooks:, events through mkdocs'
    plugin collection), on a small site whose performance page has the mark."""
    pytest.importorskip("matplotlib")
    hooks = _hooks()
    from mkdocs.config import load_config
    from mkdocs.structure.files import get_files
    monkeypatch.setattr(compare, "RESULTS_DIR", str(_saved(tmp_path / "results")))
    docs = tmp_path / "docs"
    (docs / "guide").mkdir(parents=True)
    (docs / "index.md").write_text("# Home\n")
    page_text = "# Performance\n\n## The latest saved results\n\n" + hooks.BENCHMARK_MARK + \
        "\n\n## Threads\n"
    (docs / "guide" / "performance.md").write_text(page_text)
    hook_path = os.path.join(REPO_ROOT, "scripts", "docs_hooks.py")
    (tmp_path / "mkdocs.yml").write_text(f"site_name: t\ndocs_dir: docs\nhooks:\n"
                                         f"  - {hook_path}\n")
    config = load_config(config_file=str(tmp_path / "mkdocs.yml"))
    files = config.plugins.on_files(get_files(config), config=config)
    plot = files.get_file_from_path("guide/benchmarks/ratios.svg")
    assert plot is not None and files.get_file_from_path("benchmarks/ratios.svg") is None
    text = html.unescape(plot.content_bytes.decode("utf-8"))
    assert all(name in text for name in NEW_NAMES)

    page = types.SimpleNamespace(file=files.get_file_from_path("guide/performance.md"))
    md = config.plugins.on_page_markdown(page_text, page=page, config=config, files=files)
    assert hooks.BENCHMARK_MARK not in md
    assert "![tapegrad / peer per workload, log axis](benchmarks/ratios.svg)" in md
    assert "2026-11-28T1114-aa22fba-1t.md" in md
    assert "- date: 2026-11-28 11:14 UTC" in md and "- CPU: some CPU" in md
    assert md.index("## The latest saved results") < md.index("ratios.svg") < \
        md.index("## Threads")
    home = types.SimpleNamespace(file=files.get_file_from_path("index.md"))
    assert config.plugins.on_page_markdown("# Home\n", page=home, config=config,
                                           files=files) == "# Home\n"


def test_docs_hook_says_when_there_is_no_saved_report(tmp_path, monkeypatch):
    hooks = _hooks()
    monkeypatch.setattr(compare, "RESULTS_DIR", str(tmp_path / "absent"))
    report, plots = hooks.benchmark_plots()
    assert (report, plots) == (None, {})
    assert "No saved benchmark report yet" in hooks.benchmark_markdown(None, [])
