"""Where compiled kernels are cached.

Numba revalidates a cached function only against its own file, so a kernel that inlines
helpers from another module would load stale code after an upgrade. We key the cache
directory by a hash of every kernel source file and the Numba version instead. Inside
that directory a kernel's entries are found by the file's place in the package, not by
its absolute path as Numba's own locators do: a clone or install elsewhere loads them.
All of it is tapegrad's own cache class (KernelCache), which only tapegrad's dispatchers
and cfuncs use (lowlevel): Numba's settings and locators, and so a user's own cached
functions, are left as they are.
"""
import contextlib
import functools
import hashlib
import os
import sys
import tempfile

import numba
from numba.core import caching

from . import compile_speed

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_KERNEL_DIRS = ("_engine", "ops", "optim", "replay")
_NOT_KERNELS = {"state.py", "cache.py", "sizes.py", "__init__.py", "optimizer.py",
                "lr_scheduler.py", "recorder.py", "plan.py",
                "compiled.py"}  # pure Python: no compiled code


def _source_hash(dirs=_KERNEL_DIRS):
    h = hashlib.sha256()
    h.update(numba.__version__.encode())
    h.update(sys.version.encode())
    for sub in dirs:
        folder = os.path.join(_PKG, sub)
        for name in sorted(os.listdir(folder)):
            if name.endswith(".py") and name not in _NOT_KERNELS:
                with open(os.path.join(folder, name), "rb") as f:
                    h.update(name.encode())
                    h.update(f.read())
    return h.hexdigest()[:16]


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


# Two keys: the engine core depends only on _engine/, so editing or adding an op leaves
# its (largest) compiled part cached; op kernels depend on everything.
ENGINE_CACHE_DIR = _writable_dir("engine-" + _source_hash(("_engine",)))
CACHE_DIR = _writable_dir(_source_hash())
GENERATED_DIR = os.path.join(CACHE_DIR, "generated")
os.makedirs(GENERATED_DIR, exist_ok=True)


_ROOT = [None]      # the keyed directory kernels declared now cache in (kernel_cache)


@contextlib.contextmanager
def kernel_cache(engine=False):
    """Declare kernels inside this block so their cache lands in CACHE_DIR (or, for the
    engine core, ENGINE_CACHE_DIR)."""
    old = _ROOT[0]
    _ROOT[0] = ENGINE_CACHE_DIR if engine else CACHE_DIR
    try:
        yield
    finally:
        _ROOT[0] = old


@functools.lru_cache(maxsize=None)
def _content_stamp(path, mtime, size):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


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
        st = os.stat(self._py_file)
        return _content_stamp(self._py_file, st.st_mtime, st.st_size)

    def get_disambiguator(self):
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):
        root = _ROOT[0]
        if root is None or not os.path.exists(py_file):
            return None         # declared outside kernel_cache(): Numba's own locators
        place = _place(py_file)
        if place is None:
            return None
        self = cls(py_func, py_file, os.path.join(root, place))
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
