"""mkdocs hook: pictures drawn at build time, those of docs/guide/visualising.md by
tapegrad.viz and the benchmark plots of docs/guide/performance.md by benchmarks.compare.

A Python block of a page whose first line is ``# picture: NAME`` is run (each block in a
fresh namespace, in page order) and must leave a ``graphviz.Digraph`` in ``dot``; the
hook adds it to the site as ``<page folder>/pictures/NAME.svg``, the path the page links.
So the pictures are always those of the code shown. Rendering needs Graphviz's ``dot``
program (``apt-get install graphviz``); without it the build fails and says so.

A page line that is exactly ``<!-- benchmark plots -->`` becomes the plots of the newest
report ``python -m benchmarks.compare --save`` wrote to benchmarks/results/ (the same
plots as the HTML report's under its table, as SVG in ``<page folder>/benchmarks/``),
with the report's file name and header; drawing them needs matplotlib.
"""
import contextlib
import io
import os
import re
import sys

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

_BLOCK = re.compile(r"^```python\n# picture: ([\w-]+)\n(.*?)^```$", re.M | re.S)
BENCHMARK_MARK = "<!-- benchmark plots -->"
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_benchmark_plots = {}       # page src_uri -> (saved report's path, [plot links])


def pictures(markdown):
    """[(name, code)] of the blocks of a page that draw a picture."""
    return [(m[1], m[2]) for m in _BLOCK.finditer(markdown)]


def draw(code):
    """The SVG of the Digraph a block leaves in ``dot``."""
    ns = {"__name__": "__docs__"}
    with contextlib.redirect_stdout(io.StringIO()):     # (what the block prints is on the page)
        exec(compile(code, "<docs picture>", "exec"), ns)  # noqa: S102  (the docs' own code)
    return ns["dot"].pipe("svg")


def on_files(files, config):
    """Add the pictures of every page that has some, and the benchmark plots of pages
    that show them."""
    _benchmark_plots.clear()
    plots = None
    for page in [f for f in files if f.src_uri.endswith(".md") and f.abs_src_path]:
        with open(page.abs_src_path, encoding="utf-8") as fh:
            text = fh.read()
        folder = os.path.dirname(page.src_uri)
        for name, code in pictures(text):
            try:
                svg = draw(code)
            except Exception as err:        # a failing picture fails the build, clearly
                raise PluginError(f"{page.src_uri}: picture {name!r} failed: {err}") from err
            uri = "/".join(p for p in (folder, "pictures", f"{name}.svg") if p)
            files.append(File.generated(config, uri, content=svg))
        if BENCHMARK_MARK in text.splitlines():
            if plots is None:
                plots = benchmark_plots()
            report, svgs = plots
            for name, svg in svgs.items():
                uri = "/".join(p for p in (folder, "benchmarks", name) if p)
                files.append(File.generated(config, uri, content=svg))
            _benchmark_plots[page.src_uri] = (report, [f"benchmarks/{n}" for n in svgs])
    return files


def _compare():
    if _REPO not in sys.path:
        sys.path.insert(0, _REPO)
    from benchmarks import compare
    return compare


def benchmark_plots(folder=None):
    """(path of the newest saved benchmark report in `folder` (default
    benchmarks/results/) or None, {file name: SVG bytes} of its plots)."""
    compare = _compare()
    report = compare.newest_saved_report(folder)
    if report is None:
        return None, {}
    try:
        return report, compare.saved_report_plots(report)
    except ImportError as err:
        raise PluginError(f"the benchmark plots of the performance page need matplotlib "
                          f"(pip install matplotlib): {err}") from err


def benchmark_markdown(report, uris):
    """What stands in the page for BENCHMARK_MARK: the plots, then where they come from
    (the report's file and its header lines: date, versions, CPU, threads)."""
    if report is None:
        return ("*No saved benchmark report yet: `python -m benchmarks.compare --save` "
                "writes one to `benchmarks/results/`.*")
    with open(report, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    header = []
    for line in lines[1:]:
        if line.startswith("|"):
            break
        if line.startswith("- "):
            header.append(line)
    name = os.path.relpath(report, _REPO).replace(os.sep, "/")
    if name.startswith("../"):
        name = report
    out = [f"![tapegrad / peer per workload, log axis]({uri})" for uri in uris]
    out += ["", f"Drawn as the site was built from `{name}`, the newest saved report: "
            "tapegrad's time (memory, in the peak memory rows) over each peer's, per "
            "workload, on a log axis; left of the 1.0 line tapegrad is ahead. The run:",
            ""] + header
    return "\n".join(out)


def on_page_markdown(markdown, page, config, files):
    """Put the benchmark plots where a page has BENCHMARK_MARK."""
    found = _benchmark_plots.get(page.file.src_uri)
    if found is None:
        return markdown
    return "\n".join(benchmark_markdown(*found) if line == BENCHMARK_MARK else line
                     for line in markdown.splitlines())
