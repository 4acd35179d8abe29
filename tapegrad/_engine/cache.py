"""Where compiled kernels are cached.

Numba revalidates a cached function only against its own file's timestamp, so a kernel
that inlines helpers from another module would load stale code after an upgrade. We key
the cache directory by a hash of every kernel source file and the Numba version instead,
and set it only while our own kernels are declared, leaving the user's Numba cache alone.
"""
import contextlib
import hashlib
import os
import sys
import tempfile

import numba

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_KERNEL_DIRS = ("_engine", "ops", "optim", "replay")
_NOT_KERNELS = {"state.py", "cache.py", "__init__.py", "optimizer.py",
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


@contextlib.contextmanager
def kernel_cache(engine=False):
    """Declare kernels inside this block so their cache lands in CACHE_DIR (or, for the
    engine core, ENGINE_CACHE_DIR)."""
    old = numba.config.CACHE_DIR
    numba.config.CACHE_DIR = ENGINE_CACHE_DIR if engine else CACHE_DIR
    try:
        yield
    finally:
        numba.config.CACHE_DIR = old
