"""The package's layers: no module imports, anywhere in it (function bodies included), a
module that imports it back, and the engine imports nothing above it. Importing a module
runs its packages' __init__ first, so an import of tapegrad.autograd.function counts as
an import of tapegrad.autograd too (but a module's own packages are not counted: Python
has them loaded already). The root package, which assembles the public API from every
layer, is left out."""
import ast
import os

from tests.helpers import REPO_ROOT

PKG = os.path.join(REPO_ROOT, "tapegrad")

# the layers from the bottom up: a module may import from its own layer and those below
LAYERS = ["tapegrad._engine", "tapegrad.ops", "tapegrad._front", "tapegrad.autograd",
          "tapegrad.distributed", "tapegrad.nn", "tapegrad.func", "tapegrad.optim", "tapegrad.utils",
          "tapegrad.replay", "tapegrad.viz"]


def _modules():
    mods = {}
    for folder, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                name = os.path.relpath(path, REPO_ROOT)[:-3].replace(os.sep, ".")
                mods[name.removesuffix(".__init__")] = path
    return mods


def _imports(name, path, mods):
    """The tapegrad modules that module `name` imports (with their packages)."""
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                       for a in node.names]
        else:
            continue
        for target in targets:
            if not target.startswith("tapegrad."):
                continue
            parts = target.split(".")
            for k in range(2, len(parts) + 1):      # the module and each package on the way
                outer = ".".join(parts[:k])
                if outer in mods and outer != name and not name.startswith(outer + "."):
                    found.add(outer)
    return found


def _graph():
    mods = _modules()
    return {name: _imports(name, path, mods) for name, path in mods.items()
            if name != "tapegrad"}


def _cycles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _layer(name):
    for k, layer in enumerate(LAYERS):
        if name == layer or name.startswith(layer + "."):
            return k
    return None


def test_no_module_imports_one_that_imports_it_back():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_each_layer_imports_only_from_the_layers_below_it():
    wrong = []
    for name, imported in _graph().items():
        mine = _layer(name)
        if mine is None:
            continue
        for other in imported:
            theirs = _layer(other)
            if theirs is None or theirs > mine:
                wrong.append(f"{name} -> {other}")
    assert wrong == []


def test_the_engine_imports_nothing_from_the_front():
    graph = _graph()
    engine = {n: deps for n, deps in graph.items() if n.startswith("tapegrad._engine")}
    assert engine and all(d.startswith("tapegrad._engine") for deps in engine.values()
                          for d in deps), engine


def test_the_import_reader_sees_function_local_and_package_imports(tmp_path):
    mods = {"tapegrad.a": "", "tapegrad.b": "", "tapegrad.b.c": ""}
    src = tmp_path / "a.py"
    src.write_text("def f():\n    from .b.c import x\n")
    assert _imports("tapegrad.a", str(src), mods) == {"tapegrad.b", "tapegrad.b.c"}


def test_every_folder_of_the_package_is_a_regular_package():
    """A folder without __init__.py is a namespace package: an install from a wheel
    (setuptools' find) leaves it out, and documentation tools cannot resolve its names."""
    missing = [os.path.relpath(folder, REPO_ROOT) for folder, dirs, files in os.walk(PKG)
               if "__pycache__" not in folder and "__init__.py" not in files]
    assert missing == []
