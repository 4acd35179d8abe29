"""Matrix products: the compiled kernels call the BLAS that NumPy ships, by symbol.

NumPy's wheels bundle OpenBLAS with 64-bit integers (`scipy_cblas_sgemm64_`; NumPy 1.x:
`cblas_sgemm64_`); on AVX-512 CPUs where that library picks AVX2 kernels, a private
instance of it with its AVX-512 kernels (blas_library.py). Its address is registered with LLVM's symbol table under a name of
ours (`tapegrad_cblas_sgemm`/`_dgemm`) before any kernel is compiled or loaded, and the
kernels call that name: the call links like malloc's, so kernels stay cacheable.

Why not Numba's np.dot: it goes through SciPy's Cython BLAS (an older OpenBLAS here, and
a Fortran interface), and on the small products of a training step (32x64 @ 64x128 and
the like) NumPy's OpenBLAS takes about three quarters of np.dot's time, with bitwise
the same results; np.dot's glue (layout checks, copies) also compiles into every kernel
using it.

Without NumPy's ILP64 symbols (NumPy built against another BLAS), the names point to
compiled trampolines that call SciPy's Fortran `sgemm`/`dgemm` (always there: SciPy is a
dependency); `TAPEGRAD_BLAS=scipy` forces that path (the tests use it).
"""
import ctypes
import os

import numpy as np
from llvmlite import binding as ll
from numba import types, carray
from numba.extending import overload

from . import blas_library
from .cache import CACHE_DIR
from .lowlevel import jit, cfunc, ptr_f32, ptr_f64, OVERLOAD_OPTIONS

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112

_I64, _I32 = types.int64, types.int32
# cblas_?gemm(layout, transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), with
# 64-bit integers and the pointers passed as int64
_SIG32 = types.void(_I32, _I32, _I32, _I64, _I64, _I64, types.float32, _I64, _I64, _I64,
                    _I64, types.float32, _I64, _I64)
_SIG64 = types.void(_I32, _I32, _I32, _I64, _I64, _I64, types.float64, _I64, _I64, _I64,
                    _I64, types.float64, _I64, _I64)
cblas_sgemm = types.ExternalFunction("tapegrad_cblas_sgemm", _SIG32)
cblas_dgemm = types.ExternalFunction("tapegrad_cblas_dgemm", _SIG64)


def _numpy_cblas():
    """(sgemm address, dgemm address, library handle) of NumPy's ILP64 cblas (or of its
    private AVX-512 instance: blas_library.py), or None."""
    return blas_library.numpy_cblas(CACHE_DIR)


# ---------------------------------------------------------------- the fallback: SciPy
f77_sgemm = types.ExternalFunction("tapegrad_f77_sgemm", types.void(*([_I64] * 13)))
f77_dgemm = types.ExternalFunction("tapegrad_f77_dgemm", types.void(*([_I64] * 13)))
_INT32_MAX = 2 ** 31 - 1


def _f77_trampoline(f77, fdtype, ptr):
    """A cblas entry (row-major, int64) over a Fortran gemm (column-major, int32 by
    reference): C = A B row-major is C^T = B^T A^T column-major. A dimension past int32
    gives NaNs (loud, never plausible values): such products need NumPy's ILP64 BLAS."""
    def tramp(layout, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        if max(m, n, k, lda, ldb, ldc) > _INT32_MAX:
            out = carray(ptr(c), ((m - 1) * ldc + n,))
            for i in range(m):
                for j in range(n):
                    out[i * ldc + j] = np.nan
            return
        ints = np.empty(6, np.int32)
        ints[0], ints[1], ints[2], ints[3], ints[4], ints[5] = n, m, k, ldb, lda, ldc
        chars = np.empty(2, np.uint8)
        chars[0] = 84 if tb == TRANS else 78          # 'T' / 'N'
        chars[1] = 84 if ta == TRANS else 78
        sc = np.empty(2, fdtype)
        sc[0], sc[1] = alpha, beta
        p = np.int64(ints.ctypes.data)
        q = np.int64(chars.ctypes.data)
        f = np.int64(sc.ctypes.data)
        f77(q, q + 1, p, p + 4, p + 8, f, b, p + 12, a, p + 16, f + sc.itemsize, c, p + 20)
    return tramp


def _scipy_fortran():
    from scipy.linalg import cython_blas
    capi = cython_blas.__pyx_capi__
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    name = ctypes.pythonapi.PyCapsule_GetName
    name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    return [get(capi[f], name(capi[f])) for f in ("sgemm", "dgemm")]


_KEEP = []


def _register():
    """Bind the symbol names; returns (where they point: "numpy" or "scipy", the library's
    ctypes handle or None)."""
    found = None if os.environ.get("TAPEGRAD_BLAS") == "scipy" else _numpy_cblas()
    if found is not None:
        s, d, lib = found
        ll.add_symbol("tapegrad_cblas_sgemm", s)
        ll.add_symbol("tapegrad_cblas_dgemm", d)
        return "numpy", lib
    from .cache import kernel_cache
    fs, fd = _scipy_fortran()
    ll.add_symbol("tapegrad_f77_sgemm", fs)
    ll.add_symbol("tapegrad_f77_dgemm", fd)
    with kernel_cache():
        ts = cfunc(_SIG32, cache=True)(_f77_trampoline(f77_sgemm, np.float32, ptr_f32))
        td = cfunc(_SIG64, cache=True)(_f77_trampoline(f77_dgemm, np.float64, ptr_f64))
    _KEEP.extend((ts, td))
    ll.add_symbol("tapegrad_cblas_sgemm", ts.address)
    ll.add_symbol("tapegrad_cblas_dgemm", td.address)
    return "scipy", None


SOURCE, LIBRARY = _register()      # (LIBRARY: the OpenBLAS handle, None on SciPy's path)


# ---------------------------------------------------------------- the kernels' entry
@jit
def blas_layout(r, c, rs, cs):
    """(transpose flag, leading dim) of an (r, c) matrix with element strides (rs, cs)
    as row-major BLAS reads it, or (0, 0) when it cannot (the caller copies)."""
    if (cs == 1 or c == 1) and (rs >= max(c, 1) or r == 1):
        return NO_TRANS, max(rs if r > 1 else c, 1)
    if (rs == 1 or r == 1) and (cs >= max(r, 1) or c == 1):
        return TRANS, max(cs if c > 1 else r, 1)
    return 0, 0


def gemm(A, B, O, beta):
    """O = A @ B + beta * O for 2-D arrays (O C-ordered; A and B C- or F-ordered views,
    anything else is copied first). beta 0: O's old values are not read."""
    raise NotImplementedError("tapegrad._engine.blas.gemm is for compiled kernels")


@overload(gemm, jit_options=OVERLOAD_OPTIONS)
def _gemm_impl(A, B, O, beta):
    f32 = A.dtype == types.float32
    call = cblas_sgemm if f32 else cblas_dgemm
    cast = np.float32 if f32 else np.float64
    # C- and F-ordered operands are always BLAS-readable in place: the copying branch
    # (and np.ascontiguousarray's code) is compiled only for other layouts
    may_copy = not (A.layout in "CF" and B.layout in "CF")

    def impl(A, B, O, beta):
        m, k = A.shape
        n = B.shape[1]
        if m == 0 or n == 0:
            return
        if k == 0:
            if beta == 0:
                O[:, :] = 0
            return
        isz = A.itemsize
        ta, lda = blas_layout(m, k, A.strides[0] // isz, A.strides[1] // isz)
        tb, ldb = blas_layout(k, n, B.strides[0] // isz, B.strides[1] // isz)
        ldc = max(O.strides[0] // isz, n)
        if may_copy:
            if ta == 0 or tb == 0:
                Ac = np.ascontiguousarray(A)        # (a layout BLAS cannot read: copies)
                Bc = np.ascontiguousarray(B)
                call(ROW_MAJOR, NO_TRANS, NO_TRANS, m, n, k, cast(1),
                     np.int64(Ac.ctypes.data), max(k, 1), np.int64(Bc.ctypes.data),
                     max(n, 1), cast(beta), np.int64(O.ctypes.data), ldc)
                return
        call(ROW_MAJOR, ta, tb, m, n, k, cast(1), np.int64(A.ctypes.data), lda,
             np.int64(B.ctypes.data), ldb, cast(beta), np.int64(O.ctypes.data), ldc)
    return impl
