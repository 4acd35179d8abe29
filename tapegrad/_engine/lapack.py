"""LAPACK for the compiled kernels, called by symbol as blas.py calls BLAS.

SciPy (a dependency) exposes its Fortran LAPACK routines by address in
`scipy.linalg.cython_lapack.__pyx_capi__`. Each address is registered with LLVM's symbol
table under a name of ours (`tapegrad_lapack_dpotrf`, ...) before any kernel is compiled
or loaded, and the kernels call that name: the call links like malloc's, so kernels stay
cacheable. Every argument is passed by reference (the Fortran interface), the pointers as
int64; matrices are column-major, so a C-ordered array holding A^T is A for LAPACK.

The kernels compute in float64 (the d* routines): float32 operands are widened first.
"""
import ctypes

import numpy as np
from llvmlite import binding as ll
from numba import types

from .lowlevel import jit

_I64 = types.int64
_ROUTINES = {            # name: number of (pointer) arguments
    "dpotrf": 5, "dgetrf": 6, "dgetrs": 9, "dsyevd": 11, "dgesdd": 14, "dtrtrs": 10,
    "dgeqrf": 8, "dorgqr": 9,
}


def _addresses():
    from scipy.linalg import cython_lapack
    capi = cython_lapack.__pyx_capi__
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    name = ctypes.pythonapi.PyCapsule_GetName
    name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    return {f: get(capi[f], name(capi[f])) for f in _ROUTINES}


for _f, _addr in _addresses().items():
    ll.add_symbol("tapegrad_lapack_" + _f, _addr)

_fn = {f: types.ExternalFunction("tapegrad_lapack_" + f, types.void(*([_I64] * n)))
       for f, n in _ROUTINES.items()}
f_dpotrf = _fn["dpotrf"]
f_dgetrf = _fn["dgetrf"]
f_dgetrs = _fn["dgetrs"]
f_dsyevd = _fn["dsyevd"]
f_dgesdd = _fn["dgesdd"]
f_dtrtrs = _fn["dtrtrs"]
f_dgeqrf = _fn["dgeqrf"]
f_dorgqr = _fn["dorgqr"]

U8_L, U8_U, U8_N, U8_T, U8_V, U8_S, U8_A = 76, 85, 78, 84, 86, 83, 65


@jit
def _addr(a):
    # (every array whose address is taken is read again after the call: Numba frees an
    # array after its last use, and a later allocation would reuse its memory)
    return np.int64(a.ctypes.data)


@jit
def potrf(uplo, F):
    """Cholesky of the (n, n) column-major matrix F (a C-ordered array holding F^T) in
    place, LAPACK's uplo triangle; returns info (> 0: the leading minor of that order is
    not positive-definite)."""
    n = F.shape[0]
    ints = np.empty(3, np.int32)
    ints[0], ints[1], ints[2] = n, max(n, 1), 0
    ch = np.empty(1, np.uint8)
    ch[0] = uplo
    p = _addr(ints)
    f_dpotrf(_addr(ch), p, _addr(F), p + 4, p + 8)
    return ints[2] + 0 * ch[0]


@jit
def getrf(F, ipiv):
    """LU with partial pivoting of the (n, n) column-major F in place; returns info
    (> 0: U[info-1, info-1] is exactly zero)."""
    n = F.shape[0]
    ints = np.empty(3, np.int32)
    ints[0], ints[1], ints[2] = n, max(n, 1), 0
    p = _addr(ints)
    f_dgetrf(p, p, _addr(F), p + 4, _addr(ipiv), p + 8)
    return ints[2]


@jit
def getrs(trans, F, ipiv, B):
    """Solve op(A) X = B with getrf's factors F; B (nrhs, n) C-ordered holds the
    column-major (n, nrhs) right-hand sides, overwritten with X."""
    n = F.shape[0]
    ints = np.empty(4, np.int32)
    ints[0], ints[1], ints[2], ints[3] = n, B.shape[0], max(n, 1), 0
    ch = np.empty(1, np.uint8)
    ch[0] = trans
    p = _addr(ints)
    f_dgetrs(_addr(ch), p, p + 4, _addr(F), p + 8, _addr(ipiv), _addr(B), p + 8, p + 12)
    return ints[3] + 0 * ch[0]


@jit
def trtrs(uplo, trans, diag, F, B):
    """Solve op(A) X = B for triangular A (column-major F); B as in getrs."""
    n = F.shape[0]
    ints = np.empty(4, np.int32)
    ints[0], ints[1], ints[2], ints[3] = n, B.shape[0], max(n, 1), 0
    ch = np.empty(3, np.uint8)
    ch[0], ch[1], ch[2] = uplo, trans, diag
    q = _addr(ch)
    p = _addr(ints)
    f_dtrtrs(q, q + 1, q + 2, p, p + 4, _addr(F), p + 8, _addr(B), p + 8, p + 12)
    return ints[3] + 0 * ch[0]


@jit
def syevd(uplo, F, w):
    """Eigenvalues (ascending, into w) and eigenvectors (over F: column-major columns, so
    the rows of the C-ordered array) of the symmetric column-major F; returns info."""
    n = F.shape[0]
    ints = np.empty(6, np.int32)
    ints[0], ints[1], ints[2], ints[3], ints[4] = n, max(n, 1), -1, -1, 0
    ch = np.empty(2, np.uint8)
    ch[0], ch[1] = U8_V, uplo
    q = _addr(ch)
    p = _addr(ints)
    wq = np.empty(1, np.float64)
    iq = np.empty(1, np.int32)
    f_dsyevd(q, q + 1, p, _addr(F), p + 4, _addr(w), _addr(wq), p + 8, _addr(iq), p + 12,
             p + 16)
    lw = max(int(wq[0]), 1)
    li = max(int(iq[0]), 1)
    work = np.empty(lw, np.float64)
    iwork = np.empty(li, np.int32)
    ints[2], ints[3] = lw, li
    f_dsyevd(q, q + 1, p, _addr(F), p + 4, _addr(w), _addr(work), p + 8, _addr(iwork),
             p + 12, p + 16)
    return ints[4] + 0 * ch[0] + 0 * iwork[0] + 0 * int(work[0] * 0) + 0 * iq[0]


@jit
def gesdd(full, F, m, n, s, U, VT):
    """SVD of the column-major (m, n) F (destroyed): s, U (column-major (m, ucol)), VT
    (column-major (vrow, n)), jobz 'A' (full) or 'S'; returns info."""
    k = min(m, n)
    ints = np.empty(8, np.int32)
    ints[0], ints[1], ints[2] = m, n, max(m, 1)
    ints[3] = max(m, 1)                                   # ldu
    ints[4] = max(n if full else k, 1)                    # ldvt
    ints[5] = -1
    ints[6] = 0
    ch = np.empty(1, np.uint8)
    ch[0] = U8_A if full else U8_S
    q = _addr(ch)
    p = _addr(ints)
    iwork = np.empty(max(8 * k, 1), np.int32)
    wq = np.empty(1, np.float64)
    f_dgesdd(q, p, p + 4, _addr(F), p + 8, _addr(s), _addr(U), p + 12, _addr(VT), p + 16,
             _addr(wq), p + 20, _addr(iwork), p + 24)
    lw = max(int(wq[0]), 1)
    work = np.empty(lw, np.float64)
    ints[5] = lw
    f_dgesdd(q, p, p + 4, _addr(F), p + 8, _addr(s), _addr(U), p + 12, _addr(VT), p + 16,
             _addr(work), p + 20, _addr(iwork), p + 24)
    return ints[6] + 0 * ch[0] + 0 * iwork[0] + 0 * int(work[0] * 0)


@jit
def geqrf_orgqr(F, m, n, Q, ncol):
    """QR of the column-major (m, n) F (a C-ordered (n, m) array), overwritten with R in
    its upper triangle (and Householder vectors below); Q (a C-ordered (ncol, m) array:
    column-major (m, ncol), ncol >= min(m, n)) gets the first ncol columns of Q. Returns
    info."""
    k = min(m, n)
    ints = np.empty(8, np.int32)
    ints[0], ints[1], ints[2], ints[3], ints[4], ints[5] = m, n, max(m, 1), -1, 0, ncol
    ints[6] = k
    p = _addr(ints)
    tau = np.empty(max(k, 1), np.float64)
    wq = np.empty(1, np.float64)
    f_dgeqrf(p, p + 4, _addr(F), p + 8, _addr(tau), _addr(wq), p + 12, p + 16)
    lw = max(int(wq[0]), 1, n)
    work = np.empty(lw, np.float64)
    ints[3] = lw
    f_dgeqrf(p, p + 4, _addr(F), p + 8, _addr(tau), _addr(work), p + 12, p + 16)
    info = ints[4]
    if ncol == 0:
        return info + 0 * int(work[0] * 0)
    for j in range(ncol):                   # the reflectors, then orgqr forms Q in place
        for i in range(m):
            Q[j, i] = F[j, i] if j < n else 0.0
    ints[3] = -1
    f_dorgqr(p, p + 20, p + 24, _addr(Q), p + 8, _addr(tau), _addr(wq), p + 12, p + 16)
    lw2 = max(int(wq[0]), 1, ncol)
    work2 = np.empty(lw2, np.float64)
    ints[3] = lw2
    f_dorgqr(p, p + 20, p + 24, _addr(Q), p + 8, _addr(tau), _addr(work2), p + 12, p + 16)
    return info + ints[4] + 0 * int(work[0] * 0) + 0 * int(work2[0] * 0) + 0 * int(tau[0] * 0)
