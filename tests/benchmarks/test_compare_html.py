"""python -m benchmarks.compare --html: a self-contained report built from a canned result
(no benchmark runs here)."""
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
    path = compare.write_html(CANNED, str(tmp_path / "report.html"))
    text = open(path, encoding="utf-8").read()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    assert len(images) == 1
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
