"""mkdocs hook: the pictures of docs/guide/visualising.md, drawn by tapegrad.viz at build time.

A Python block of a page whose first line is ``# picture: NAME`` is run (each block in a
fresh namespace, in page order) and must leave a ``graphviz.Digraph`` in ``dot``; the
hook adds it to the site as ``<page folder>/pictures/NAME.svg``, the path the page links.
So the pictures are always those of the code shown. Rendering needs Graphviz's ``dot``
program (``apt-get install graphviz``); without it the build fails and says so.
"""
import contextlib
import io
import os
import re

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

_BLOCK = re.compile(r"^```python\n# picture: ([\w-]+)\n(.*?)^```$", re.M | re.S)


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
    """Add the pictures of every page that has some."""
    for page in [f for f in files if f.src_uri.endswith(".md")]:
        with open(page.abs_src_path, encoding="utf-8") as fh:
            found = pictures(fh.read())
        folder = os.path.dirname(page.src_uri)
        for name, code in found:
            try:
                svg = draw(code)
            except Exception as err:        # a failing picture fails the build, clearly
                raise PluginError(f"{page.src_uri}: picture {name!r} failed: {err}") from err
            uri = "/".join(p for p in (folder, "pictures", f"{name}.svg") if p)
            files.append(File.generated(config, uri, content=svg))
    return files
