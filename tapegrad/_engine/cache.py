"""Where compiled kernels are cached.

Numba revalidates a cached function only against its own file, so a kernel that inlines
helpers from another module would load stale code after an upgrade or an edit. So each
kernel file's entries live in a directory keyed by a hash of that file and of every
tapegrad module it imports, directly or through others (read from their syntax trees),
under a root per Numba and Python version: editing one op's module recompiles that op's
kernels (and those of the modules importing it), nothing else. A module marked
NO_KERNELS (pure Python that no kernel reads) is left out of every key. Inside the root,
entries go by the file's place in the package, not by its absolute path as Numba's own
locators do: a clone or install elsewhere loads them. All of it is tapegrad's own cache
class (KernelCache), which only tapegrad's dispatchers and cfuncs use (lowlevel):
Numba's settings and locators, and so a user's own cached functions, are left as they
are.
"""
import contextlib
import functools
import hashlib
import os
import re
import sys
import tempfile

import numba
from numba.core import caching

from . import compile_speed

# A line holding this marks a module as pure Python no kernel reads: left out of keys.
NO_KERNELS = "# tapegrad: no kernels"  # tapegrad: no kernels

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _root():
    env = os.environ.get("TAPEGRAD_CACHE_DIR")
    if env:
        return env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tapegrad")


def _writable_dir(name):
    for root in (_root(), os.path.join(tempfile.gettempdir(), "tapegrad-cache")):
        path = os.path.join(root, name)
        try:
            os.makedirs(path, exist_ok=True)
            probe = os.path.join(path, ".probe")
            with open(probe, "w") as f:
                f.write("ok")
            return path
        except OSError:
            continue
    raise RuntimeError("tapegrad: no writable directory for the kernel cache; "
                       "set TAPEGRAD_CACHE_DIR")


_TAG = f"numba{numba.__version__}-py{sys.version_info.major}.{sys.version_info.minor}"
CACHE_DIR = _writable_dir(_TAG)
GENERATED_DIR = os.path.join(CACHE_DIR, "generated")
os.makedirs(GENERATED_DIR, exist_ok=True)


_ROOT = [None]      # CACHE_DIR while kernels are declared (kernel_cache), else None


@contextlib.contextmanager
def kernel_cache():
    """Declare kernels inside this block so their cache lands under CACHE_DIR."""
    old = _ROOT[0]
    _ROOT[0] = CACHE_DIR
    try:
        yield
    finally:
        _ROOT[0] = old


@functools.lru_cache(maxsize=None)
def _source(path):
    with open(path, "rb") as f:
        return f.read()


def _module_file(dotted):
    """The source file of tapegrad module `dotted`, or None (a package's __init__ holds
    no kernels; an attribute is not a module)."""
    path = os.path.join(os.path.dirname(_REAL_PKG), *dotted.split(".")) + ".py"
    return path if os.path.isfile(path) else None


# import statements, read from the text: parsing every kernel file's syntax tree at each
# start took a sizeable share of `import tapegrad` (a docstring that happens to look like
# an import only makes a key depend on one more file)
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#]*)"
                     r"|import[ \t]+([\w.][\w., \t]*))", re.M)


def _statements(text):
    """(module, [imported names]) for each import statement of a source text; module is
    relative (leading dots) as written."""
    for m in _IMPORT.finditer(text.replace("\\\n", " ")):
        if m.group(1) is not None:
            names = m.group(2).strip("() \t").replace("\n", " ").split(",")
            yield m.group(1), [n.split()[0] for n in names if n.strip()]
        else:
            for n in m.group(3).split(","):
                if n.strip():
                    yield n.split()[0], []


@functools.lru_cache(maxsize=None)
def _imports(path):
    """The tapegrad source files that the file at path imports, anywhere in it."""
    here = _place(path)
    found = set()
    for module, imported in _statements(_source(path).decode()):
        level = len(module) - len(module.lstrip("."))
        if level:
            if here is None or here == "tapegrad.generated":
                continue
            parts = here.split(".")[:len(here.split(".")) - level + 1]
            mod = ".".join(parts + ([module[level:]] if module[level:] else []))
        else:
            mod = module
        for name in [mod] + [f"{mod}.{n}" for n in imported]:
            if name.startswith("tapegrad."):
                f = _module_file(name)
                if f is not None and NO_KERNELS.encode() not in _source(f):
                    found.add(f)
    return frozenset(found)


@functools.lru_cache(maxsize=None)
def source_key(path):
    """A hash of the file at path and of every tapegrad module it reaches by imports:
    what its kernels may inline."""
    seen, todo = set(), [os.path.realpath(path)]
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            todo.extend(_imports(p))
    h = hashlib.sha256()
    for p in sorted(seen, key=_order):
        h.update(os.path.basename(p).encode())
        h.update(_source(p))
    return h.hexdigest()[:16]


def _order(path):
    """Where a file goes in a key's hash: by its place in the package (a generated file
    first), never by the absolute path, which sorts the package's files and the cache's
    generated ones differently from one clone, cache directory or machine to the next."""
    if os.path.dirname(path) == _REAL_GENERATED:
        return (0, os.path.basename(path))
    return (1, os.path.relpath(path, os.path.dirname(_REAL_PKG)))


def kernel_dir(py_file):
    """Where the cache entries of the kernels declared in py_file go (None: the file is
    not tapegrad's)."""
    place = _place(py_file)
    if place is None:
        return None
    stem = os.path.splitext(os.path.basename(py_file))[0]
    return os.path.join(CACHE_DIR, place, f"{stem}-{source_key(py_file)}")


def _place(py_file):
    """The cache subdirectory of a kernel file: its package-relative directory
    ("tapegrad.ops"), or None for a file that is not tapegrad's."""
    path = os.path.realpath(py_file)
    if os.path.dirname(path) == _REAL_GENERATED:
        return "tapegrad.generated"
    if not path.startswith(_REAL_PKG + os.sep):
        return None
    return os.path.relpath(os.path.dirname(path),
                           os.path.dirname(_REAL_PKG)).replace(os.sep, ".")


_REAL_PKG = os.path.realpath(_PKG)     # (once: _place runs for every kernel declared)
_REAL_GENERATED = os.path.realpath(GENERATED_DIR)


class _PackageLocator(caching._CacheLocator):
    """Numba's locators file a function's entries under a hash of its source directory's
    absolute path, so a second clone of the same sources (a CI checkout, another
    virtual environment) compiled every kernel again. Under our keyed directories the path
    adds nothing: entries go by the file's place in the package, and are checked against
    the file's content (Numba's older versions check its timestamp, which a clone
    changes)."""

    def __init__(self, py_func, py_file, cache_path):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = cache_path

    def get_cache_path(self):
        return self._cache_path

    def get_source_stamp(self):
        return hashlib.sha256(_source(os.path.realpath(self._py_file))).hexdigest()

    def get_disambiguator(self):
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):
        root = _ROOT[0]
        if root is None or not os.path.exists(py_file):
            return None         # declared outside kernel_cache(): Numba's own locators
        where = kernel_dir(py_file)
        if where is None:
            return None
        self = cls(py_func, py_file, where)
        try:
            self.ensure_cache_path()
        except OSError:
            return None
        return self


class _KernelCacheImpl(caching.CompileResultCacheImpl):
    _locator_classes = [_PackageLocator, *caching.CompileResultCacheImpl._locator_classes]


class KernelCache(caching.FunctionCache):
    """The cache of one of tapegrad's kernels: found by _PackageLocator under the keyed
    directory, loaded by compile_speed's light load."""
    _impl_class = _KernelCacheImpl

    def __init__(self, py_func):
        super().__init__(py_func)
        self.load_overload = compile_speed.light_load_overload(self, self.load_overload)
