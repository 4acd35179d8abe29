"""Which OpenBLAS tapegrad's matrix products call: NumPy's, or on AVX-512 machines where
NumPy's picks AVX2 kernels, a private copy of it told to use its AVX-512 ones; and the
handles whose thread counts set_num_threads sets (that one, and SciPy's, whose LAPACK
runs tapegrad.linalg's decompositions).

OpenBLAS chooses its kernels once, when it loads, from the CPU it recognises. The copy
NumPy ships does not recognise every AVX-512 CPU (AMD's Zen 4 gets its Haswell kernels),
and its SkylakeX kernels run a training step's products 1.4-1.9x faster there. Changing
NumPy's library would change NumPy's own products for the user's code, so tapegrad loads
a second instance: the same file copied into tapegrad's cache directory (a different path
is a different library to the dynamic loader), loaded with OPENBLAS_CORETYPE set only
while it initialises. NumPy's library is left as it was. TAPEGRAD_BLAS=numpy keeps
NumPy's instance for tapegrad too.
"""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import ctypes
import glob
import os
import shutil

import numpy as np

_AVX512 = {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
_AVX512_CORES = {b"SkylakeX", b"Cooperlake", b"SapphireRapids"}


def bundled_libraries():
    """Shared libraries shipped inside NumPy's wheel (Linux: numpy.libs, macOS: .dylibs,
    Windows: numpy.libs / numpy/.libs)."""
    root = os.path.dirname(np.__file__)
    found = []
    for d in (os.path.join(root, os.pardir, "numpy.libs"), os.path.join(root, ".dylibs"),
              os.path.join(root, ".libs")):
        found += sorted(glob.glob(os.path.join(d, "*openblas*")))
    return found


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _corename(lib):
    for name in ("scipy_openblas_get_corename64_", "openblas_get_corename64_",
                 "openblas_get_corename"):
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = ctypes.c_char_p
            return fn()
    return None


def _private_copy(path, lib, cache_dir):
    """A second instance of the library at path using its SkylakeX kernels, or None when
    NumPy's already uses AVX-512 kernels, the CPU lacks them, or anything fails."""
    if os.environ.get("TAPEGRAD_BLAS") == "numpy" or not _AVX512 <= _cpu_flags():
        return None
    core = _corename(lib)
    if core is None or core in _AVX512_CORES:
        return None
    try:
        folder = os.path.join(cache_dir, "blas")
        os.makedirs(folder, exist_ok=True)
        copy = os.path.join(folder, f"{os.path.getsize(path)}-{os.path.basename(path)}")
        if not os.path.exists(copy):
            tmp = f"{copy}.{os.getpid()}.tmp"
            shutil.copyfile(path, tmp)
            os.replace(tmp, copy)          # (atomic: a concurrent process sees all or none)
        old = os.environ.get("OPENBLAS_CORETYPE")
        os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
        try:
            private = ctypes.CDLL(copy, mode=ctypes.RTLD_LOCAL)
        finally:
            if old is None:
                del os.environ["OPENBLAS_CORETYPE"]
            else:
                os.environ["OPENBLAS_CORETYPE"] = old
    except OSError:
        return None
    return private if _corename(private) == b"SkylakeX" else None


def numpy_cblas(cache_dir):
    """(sgemm address, dgemm address, library handle) of the ILP64 cblas tapegrad calls:
    NumPy's OpenBLAS or a private AVX-512 instance of it; None without NumPy's symbols."""
    for path in bundled_libraries():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for s, d in (("scipy_cblas_sgemm64_", "scipy_cblas_dgemm64_"),
                     ("cblas_sgemm64_", "cblas_dgemm64_")):
            if hasattr(lib, s) and hasattr(lib, d):
                lib = _private_copy(path, lib, cache_dir) or lib
                return (ctypes.cast(getattr(lib, s), ctypes.c_void_p).value,
                        ctypes.cast(getattr(lib, d), ctypes.c_void_p).value, lib)
    return None


def scipy_openblas():
    """A handle of the OpenBLAS SciPy ships (its LAPACK runs tapegrad.linalg's
    decompositions), or None."""
    try:
        import scipy
    except ImportError:
        return None
    root = os.path.dirname(scipy.__file__)
    for d in (os.path.join(root, os.pardir, "scipy.libs"), os.path.join(root, ".dylibs")):
        for path in sorted(glob.glob(os.path.join(d, "*openblas*"))):
            try:
                return ctypes.CDLL(path)
            except OSError:
                continue
    return None


def set_threads(lib, n):
    """Set the thread count of an OpenBLAS library handle (no-op for another BLAS)."""
    for name in ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_",
                 "scipy_openblas_set_num_threads", "openblas_set_num_threads"):
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.argtypes, fn.restype = [ctypes.c_int], None
            fn(n)
            return


def corename(lib):
    """The kernels an OpenBLAS handle uses ("Haswell", "SkylakeX", ...), or None."""
    core = _corename(lib)
    return None if core is None else core.decode()
