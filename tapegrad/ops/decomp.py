"""Matrix decompositions and solvers (torch.linalg), batched over leading dims, by LAPACK
(_engine/lapack.py, SciPy's routines called by symbol), with PyTorch's backward formulas
(FunctionsManual.cpp: cholesky_backward, linalg_eig_backward, svd_backward,
linalg_solve backward, slogdet_backward, linalg_solve_triangular backward).

Every op reads contiguous operands (the front makes them so) and writes one contiguous
output; an op with several results (eigh, svd, slogdet) packs them in one output which
the front splits into views, so their gradients meet in one buffer. The kernels compute
in float64 and round to the operands' dtype.
"""
import numpy as np

from .._engine.layout import (K_OK, F32, F64, E_DTYPE, E_VALUE, MAXD, M_DTYPE, M_NDIM,
                              M_SHAPE, R_IATTR, R_IN, IW, IN_SAVED, R_OSAVED, R_ODTYPE)
from .._engine.lowlevel import jit, ctx_of, meta_of, tape_of, err_of
from .._engine.core import (data_addr, meta_contiguous, input_id, set_outputs1,
                            row_grad_addr, edge_grad_addr, out_numel, input_shape)
from .._engine.blas import gemm
from .._engine import lapack as lp
from .along import _read, _write, _accumulate
from .opinfo import T
from .registry import OpDef, Sample, register, samples

_M = __name__


# ---------------------------------------------------------------- helpers
@jit
def _mm(A, B):
    O = np.empty((A.shape[0], B.shape[1]), np.float64)
    gemm(A, B, O, 0.0)
    return O


@jit
def _shape_of(M, t):
    nd = M[t, M_NDIM]
    return M[t, M_SHAPE:M_SHAPE + nd].copy()


@jit
def _in_shape(C, row, k):
    s = np.empty(MAXD, np.int64)
    nd = input_shape(C, row, k, s)
    return s[:nd].copy()


@jit
def _batch(shape, inner):
    b = 1
    for d in range(shape.shape[0] - inner):
        b *= shape[d]
    return b


@jit
def _tri_solve(Lm, lower, trans, unit, Bm):
    """Z with op(Lm) Z = Bm for a triangular row-major Lm (op: transpose when trans)."""
    F = Lm.T.copy()                       # column-major Lm
    R = Bm.T.copy()                       # column-major Bm
    lp.trtrs(lp.U8_L if lower else lp.U8_U, lp.U8_T if trans else lp.U8_N,
             lp.U8_U if unit else lp.U8_N, F, R)
    return R.T.copy()


@jit
def _lu_solve(F, ipiv, trans, Bm):
    """Z with op(A) Z = Bm, F and ipiv: getrf's factors of (column-major) A."""
    R = Bm.T.copy()
    lp.getrs(lp.U8_T if trans else lp.U8_N, F, ipiv, R)
    return R.T.copy()


class _LinAlgError(RuntimeError):
    """torch.linalg.LinAlgError: a decomposition or solver failed on the values of its
    input (singular, not positive-definite)."""


def _batch_prefix(e, b):
    return f"(Batch element {b}): " if len(e.shape_a) > 2 else ""


# ---------------------------------------------------------------- cholesky
@jit
def _cholesky_one(A, upper):
    """(L or L^H, info) of one symmetric matrix (its lower triangle read, as PyTorch)."""
    n = A.shape[0]
    F = A.copy()      # C-ordered A is column-major A^T: LAPACK's upper triangle is A's lower
    info = lp.potrf(lp.U8_U, F)
    for i in range(n):
        for j in range(n):
            if j > i:
                F[i, j] = 0.0
    if upper:
        return F.T.copy(), info
    return F, info


def cholesky_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    a = input_id(C, row, 0)
    dt = M[a, M_DTYPE]
    if dt != F32 and dt != F64:
        return E_DTYPE
    shape = _shape_of(M, a)
    n = shape[shape.shape[0] - 1]
    nb = _batch(shape, 2)
    upper = T[row, R_IATTR] != 0
    X = _read(dt, data_addr(C, a), nb * n * n)
    O = np.empty(nb * n * n, np.float64)
    for b in range(nb):
        Lm, info = _cholesky_one(X[b * n * n:(b + 1) * n * n].reshape(n, n), upper)
        if info > 0:
            err = err_of(C)
            err[0] = info
            err[1] = b
            err[2] = nb
            return E_VALUE
        O[b * n * n:(b + 1) * n * n] = Lm.ravel()
    out = meta_contiguous(C, dt, shape.shape[0], shape, False)
    if out < 0:
        return out
    _write(C, dt, data_addr(C, out), O)
    return set_outputs1(C, out)


def cholesky_bwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    ga = edge_grad_addr(C, row, 0)
    if ga == 0:
        return K_OK
    o = T[row, R_OSAVED]
    dt = T[row, R_ODTYPE]
    shape = _shape_of(M, o)
    n = shape[shape.shape[0] - 1]
    nb = _batch(shape, 2)
    upper = T[row, R_IATTR] != 0
    LL = _read(dt, data_addr(C, o), nb * n * n)
    G = _read(dt, row_grad_addr(C, row, 0), nb * n * n)
    GA = np.empty(nb * n * n, np.float64)
    for b in range(nb):
        s = slice(b * n * n, (b + 1) * n * n)
        Lm = LL[s].reshape(n, n)
        gL = G[s].reshape(n, n)
        if upper:                    # A = U^H U: L = U^H, gL = gU^H
            Lm = Lm.T.copy()
            gL = gL.T.copy()
        # gA = L^{-H} Phi(L^H gL) L^{-1}, symmetrised (Phi: the lower triangle, half diagonal)
        phi = _mm(Lm.T, gL)
        for i in range(n):
            phi[i, i] *= 0.5
            for j in range(i + 1, n):
                phi[i, j] = 0.0
        X = _tri_solve(Lm, True, True, False, phi)            # L^H X = phi
        Y = _tri_solve(Lm, True, True, False, X.T.copy())     # L^H Y = X^H: Y = (X L^{-1})^H
        for i in range(n):
            for j in range(n):
                GA[b * n * n + i * n + j] = 0.5 * (Y[j, i] + Y[i, j])
    _accumulate(dt, ga, GA)
    return K_OK


def _cholesky_errors(e):
    if e.code != E_VALUE:
        return None
    info, b = int(e.err[0]), int(e.err[1])
    where = _batch_prefix(e, b)
    return _LinAlgError(f"linalg.cholesky: {where}The factorization could not be completed "
                        f"because the input is not positive-definite (the leading minor of "
                        f"order {info} is not positive-definite).")


register(OpDef("linalg_cholesky", "LinalgCholeskyExBackward0", "custom", module=_M,
               fwd_fn="cholesky_fwd", bwd_fn="cholesky_bwd", nin=1, diff=(0,),
               saves_if={0: ("out",)}, attrs=("upper",), errors=_cholesky_errors))
_SPD = "x @ x.mT"
samples("linalg_cholesky", f"L.linalg.cholesky({_SPD})", f"L.linalg.cholesky({_SPD}, upper=True)",
        f"L.cholesky({_SPD})", Sample(f"L.linalg.cholesky({_SPD})", x=T(2, 4, 6)),
        errors=["L.linalg.cholesky(-x @ x.mT)"],
        rtol={"float32": 1e-4}, x=T(3, 5))


# ---------------------------------------------------------------- eigh
@jit
def _eigh_one(A, lower, out):
    """out (n + 1, n): the eigenvalues, then the eigenvectors as columns."""
    n = A.shape[0]
    V = A.copy()
    w = np.empty(n, np.float64)
    info = lp.syevd(lp.U8_U if lower else lp.U8_L, V, w)
    out[0, :] = w
    out[1:, :] = V.T
    return info


def eigh_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    a = input_id(C, row, 0)
    dt = M[a, M_DTYPE]
    if dt != F32 and dt != F64:
        return E_DTYPE
    shape = _shape_of(M, a)
    nd = shape.shape[0]
    n = shape[nd - 1]
    nb = _batch(shape, 2)
    lower = T[row, R_IATTR] == 0
    X = _read(dt, data_addr(C, a), nb * n * n)
    O = np.empty(nb * (n + 1) * n, np.float64)
    for b in range(nb):
        info = _eigh_one(X[b * n * n:(b + 1) * n * n].reshape(n, n), lower,
                         O[b * (n + 1) * n:(b + 1) * (n + 1) * n].reshape(n + 1, n))
        if info > 0:
            err_of(C)[0] = info
            return E_VALUE
    oshape = shape.copy()
    oshape[nd - 2] = n + 1
    out = meta_contiguous(C, dt, nd, oshape, False)
    if out < 0:
        return out
    _write(C, dt, data_addr(C, out), O)
    return set_outputs1(C, out)


def eigh_bwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    ga = edge_grad_addr(C, row, 0)
    if ga == 0:
        return K_OK
    o = T[row, R_OSAVED]
    dt = T[row, R_ODTYPE]
    shape = _shape_of(M, o)
    n = shape[shape.shape[0] - 1]
    nb = _batch(shape, 2)
    P = _read(dt, data_addr(C, o), nb * (n + 1) * n)
    G = _read(dt, row_grad_addr(C, row, 0), nb * (n + 1) * n)
    GA = np.empty(nb * n * n, np.float64)
    for b in range(nb):
        s = slice(b * (n + 1) * n, (b + 1) * (n + 1) * n)
        Pb = P[s].reshape(n + 1, n)
        Gb = G[s].reshape(n + 1, n)
        lam = Pb[0]
        V = Pb[1:].copy()
        gV = Gb[1:].copy()
        # gA = V (skew(V^H gV) / E + diag(gL)) V^H, E_ij = lam_j - lam_i
        R = _mm(V.T, gV)
        W = np.empty((n, n), np.float64)
        for i in range(n):
            for j in range(n):
                if i == j:
                    W[i, j] = Gb[0, i]
                else:
                    W[i, j] = 0.5 * (R[i, j] - R[j, i]) / (lam[j] - lam[i])
        GA[b * n * n:(b + 1) * n * n] = _mm(V, _mm(W, V.T)).ravel()
    _accumulate(dt, ga, GA)
    return K_OK


register(OpDef("linalg_eigh", "LinalgEighBackward0", "custom", module=_M,
               fwd_fn="eigh_fwd", bwd_fn="eigh_bwd", nin=1, diff=(0,),
               saves_if={0: ("out",)}, attrs=("upper",)))
_SYM = "(x + x.mT)"
samples("linalg_eigh", f"L.linalg.eigh({_SYM})[0]", f"L.linalg.eigh({_SYM}).eigenvalues",
        f"L.linalg.eigvalsh({_SYM}, UPLO='U')", f"L.linalg.eigh({_SYM})[1].abs()",
        Sample(f"L.linalg.eigvalsh({_SYM})", x=T(2, 3, 3)),
        rtol={"float32": 1e-4}, x=T(3, 3))


# ---------------------------------------------------------------- solve (LU)
def solve_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    a = input_id(C, row, 0)
    b = input_id(C, row, 1)
    dt = M[a, M_DTYPE]
    if (dt != F32 and dt != F64) or M[b, M_DTYPE] != dt:
        return E_DTYPE
    sa = _shape_of(M, a)
    sb = _shape_of(M, b)
    n = sa[sa.shape[0] - 1]
    k = sb[sb.shape[0] - 1]
    nb = _batch(sa, 2)
    A = _read(dt, data_addr(C, a), nb * n * n)
    inverse = tape_of(C)[row, R_IATTR] != 0     # (B is A again: the identity is solved for)
    B = np.empty(0, np.float64)
    if inverse:
        B = np.zeros(nb * n * n, np.float64)
        for bi in range(nb):
            for i in range(n):
                B[bi * n * n + i * n + i] = 1.0
    else:
        B = _read(dt, data_addr(C, b), nb * n * k)
    O = np.empty(nb * n * k, np.float64)
    ipiv = np.empty(max(n, 1), np.int32)
    for bi in range(nb):
        F = A[bi * n * n:(bi + 1) * n * n].reshape(n, n).T.copy()
        info = lp.getrf(F, ipiv)
        if info > 0:
            err_of(C)[0] = info
            err_of(C)[1] = bi
            err_of(C)[2] = tape_of(C)[row, R_IATTR]
            return E_VALUE
        O[bi * n * k:(bi + 1) * n * k] = _lu_solve(
            F, ipiv, False, B[bi * n * k:(bi + 1) * n * k].reshape(n, k)).ravel()
    out = meta_contiguous(C, dt, sb.shape[0], sb, False)
    if out < 0:
        return out
    _write(C, dt, data_addr(C, out), O)
    return set_outputs1(C, out)


def solve_bwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    ga = edge_grad_addr(C, row, 0)
    gb = edge_grad_addr(C, row, 1) if T[row, R_IATTR] == 0 else 0
    a = T[row, R_IN + IN_SAVED]
    x = T[row, R_OSAVED]
    dt = T[row, R_ODTYPE]
    sa = _shape_of(M, a)
    n = sa[sa.shape[0] - 1]
    nb = _batch(sa, 2)
    k = out_numel(T, row) // max(nb * n, 1)
    A = _read(dt, data_addr(C, a), nb * n * n)
    G = _read(dt, row_grad_addr(C, row, 0), nb * n * k)
    X = _read(dt, data_addr(C, x), nb * n * k) if ga != 0 else np.empty(0, np.float64)
    GA = np.empty(nb * n * n if ga != 0 else 0, np.float64)
    GB = np.empty(nb * n * k, np.float64)
    ipiv = np.empty(max(n, 1), np.int32)
    for bi in range(nb):
        F = A[bi * n * n:(bi + 1) * n * n].reshape(n, n).T.copy()
        lp.getrf(F, ipiv)
        # gB = A^{-H} gX, gA = -gB X^H
        gB = _lu_solve(F, ipiv, True, G[bi * n * k:(bi + 1) * n * k].reshape(n, k))
        GB[bi * n * k:(bi + 1) * n * k] = gB.ravel()
        if ga != 0:
            Xb = X[bi * n * k:(bi + 1) * n * k].reshape(n, k)
            GA[bi * n * n:(bi + 1) * n * n] = -_mm(gB, Xb.T).ravel()
    if ga != 0:
        _accumulate(dt, ga, GA)
    if gb != 0:
        _accumulate(dt, gb, GB)
    return K_OK


def _solve_errors(e):
    if e.code != E_VALUE:
        return None
    info, b = int(e.err[0]), int(e.err[1])
    if e.err[2]:
        return _LinAlgError(f"linalg.inv: {_batch_prefix(e, b)}The diagonal element {info} is "
                            f"zero, the inversion could not be completed because the input "
                            f"matrix is singular.")
    return _LinAlgError(f"torch.linalg.solve: {_batch_prefix(e, b)}The solver failed because "
                        f"the input matrix is singular.")


register(OpDef("linalg_solve", "LinalgSolveExBackward0", "custom", module=_M,
               fwd_fn="solve_fwd", bwd_fn="solve_bwd", nin=2, diff=(0, 1),
               saves_if={0: ("a", "out"), 1: ("a",)}, attrs=("inverse",),
               errors=_solve_errors))
_WELL = "(x @ x.mT)"
samples("linalg_solve", f"L.linalg.solve({_WELL}, y)", f"L.linalg.solve({_WELL}, y[:, 0])",
        f"L.linalg.inv({_WELL})",
        Sample("L.linalg.solve(x @ x.mT, y)", x=T(2, 3, 5), y=T(2, 3, 2)),
        errors=["L.linalg.solve(x[:, :3] * 0, y)"],
        rtol={"float32": 1e-4}, x=T(3, 5), y=T(3, 2))


# ---------------------------------------------------------------- slogdet (LU)
def slogdet_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    a = input_id(C, row, 0)
    dt = M[a, M_DTYPE]
    if dt != F32 and dt != F64:
        return E_DTYPE
    sa = _shape_of(M, a)
    nd = sa.shape[0]
    n = sa[nd - 1]
    nb = _batch(sa, 2)
    A = _read(dt, data_addr(C, a), nb * n * n)
    O = np.empty(nb * 2, np.float64)
    ipiv = np.empty(max(n, 1), np.int32)
    for bi in range(nb):
        F = A[bi * n * n:(bi + 1) * n * n].reshape(n, n).T.copy()
        info = lp.getrf(F, ipiv)
        sign = 1.0
        logabs = 0.0
        for i in range(n):
            d = F[i, i]
            if ipiv[i] != i + 1:
                sign = -sign
            if d < 0:
                sign = -sign
            logabs += np.log(abs(d))
        if info > 0:
            sign = 0.0
            logabs = -np.inf
        O[2 * bi] = sign
        O[2 * bi + 1] = logabs
    oshape = sa[:nd - 1].copy()
    oshape[nd - 2] = 2
    out = meta_contiguous(C, dt, nd - 1, oshape, False)
    if out < 0:
        return out
    _write(C, dt, data_addr(C, out), O)
    return set_outputs1(C, out)


def slogdet_bwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    ga = edge_grad_addr(C, row, 0)
    if ga == 0:
        return K_OK
    a = T[row, R_IN + IN_SAVED]
    dt = T[row, R_ODTYPE]
    sa = _shape_of(M, a)
    n = sa[sa.shape[0] - 1]
    nb = _batch(sa, 2)
    A = _read(dt, data_addr(C, a), nb * n * n)
    G = _read(dt, row_grad_addr(C, row, 0), nb * 2)
    GA = np.empty(nb * n * n, np.float64)
    ipiv = np.empty(max(n, 1), np.int32)
    eye = np.eye(n)
    for bi in range(nb):
        F = A[bi * n * n:(bi + 1) * n * n].reshape(n, n).T.copy()
        info = lp.getrf(F, ipiv)
        if info > 0:
            GA[bi * n * n:(bi + 1) * n * n] = np.nan
            continue
        # gA = g_logabsdet A^{-H}
        inv_t = _lu_solve(F, ipiv, True, eye)
        GA[bi * n * n:(bi + 1) * n * n] = (G[2 * bi + 1] * inv_t).ravel()
    _accumulate(dt, ga, GA)
    return K_OK


register(OpDef("linalg_slogdet", "LinalgSlogdetBackward0", "custom", module=_M,
               fwd_fn="slogdet_fwd", bwd_fn="slogdet_bwd", nin=1, diff=(0,),
               saves_if={0: ("a",)}))
samples("linalg_slogdet", "L.linalg.slogdet(x)[1]", "L.linalg.slogdet(x).logabsdet",
        "L.logdet(x @ x.mT)",
        Sample("L.linalg.slogdet(x)[1]", x=T(2, 3, 3)),
        rtol={"float32": 1e-4}, x=T(3, 3))


# ---------------------------------------------------------------- solve_triangular
def trisolve_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    a = input_id(C, row, 0)
    b = input_id(C, row, 1)
    dt = M[a, M_DTYPE]
    if (dt != F32 and dt != F64) or M[b, M_DTYPE] != dt:
        return E_DTYPE
    upper = T[row, R_IATTR] != 0
    unit = T[row, R_IATTR + 1] != 0
    sa = _shape_of(M, a)
    sb = _shape_of(M, b)
    n = sa[sa.shape[0] - 1]
    k = sb[sb.shape[0] - 1]
    nb = _batch(sa, 2)
    A = _read(dt, data_addr(C, a), nb * n * n)
    B = _read(dt, data_addr(C, b), nb * n * k)
    O = np.empty(nb * n * k, np.float64)
    for bi in range(nb):
        O[bi * n * k:(bi + 1) * n * k] = _tri_solve(
            A[bi * n * n:(bi + 1) * n * n].reshape(n, n), not upper, False, unit,
            B[bi * n * k:(bi + 1) * n * k].reshape(n, k)).ravel()
    out = meta_contiguous(C, dt, sb.shape[0], sb, False)
    if out < 0:
        return out
    _write(C, dt, data_addr(C, out), O)
    return set_outputs1(C, out)


def trisolve_bwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    ga = edge_grad_addr(C, row, 0)
    gb = edge_grad_addr(C, row, 1)
    upper = T[row, R_IATTR] != 0
    unit = T[row, R_IATTR + 1] != 0
    a = T[row, R_IN + IN_SAVED]
    x = T[row, R_OSAVED]
    dt = T[row, R_ODTYPE]
    sa = _shape_of(M, a)
    n = sa[sa.shape[0] - 1]
    nb = _batch(sa, 2)
    k = out_numel(T, row) // max(nb * n, 1)
    A = _read(dt, data_addr(C, a), nb * n * n)
    G = _read(dt, row_grad_addr(C, row, 0), nb * n * k)
    X = _read(dt, data_addr(C, x), nb * n * k) if ga != 0 else np.empty(0, np.float64)
    GA = np.empty(nb * n * n if ga != 0 else 0, np.float64)
    GB = np.empty(nb * n * k, np.float64)
    for bi in range(nb):
        # gB = A^{-H} gX, gA = -gB X^H restricted to A's triangle
        gB = _tri_solve(A[bi * n * n:(bi + 1) * n * n].reshape(n, n), not upper, True, unit,
                        G[bi * n * k:(bi + 1) * n * k].reshape(n, k))
        GB[bi * n * k:(bi + 1) * n * k] = gB.ravel()
        if ga != 0:
            P = _mm(gB, X[bi * n * k:(bi + 1) * n * k].reshape(n, k).T)
            for i in range(n):
                for j in range(n):
                    keep = (j >= i) if upper else (j <= i)
                    if unit and i == j:
                        keep = False
                    GA[bi * n * n + i * n + j] = -P[i, j] if keep else 0.0
    if ga != 0:
        _accumulate(dt, ga, GA)
    if gb != 0:
        _accumulate(dt, gb, GB)
    return K_OK


register(OpDef("linalg_solve_triangular", "LinalgSolveTriangularBackward0", "custom",
               module=_M, fwd_fn="trisolve_fwd", bwd_fn="trisolve_bwd", nin=2, diff=(0, 1),
               saves_if={0: ("a", "out"), 1: ("a",)}, attrs=("upper", "unitriangular")))
_TRI = "L.linalg.cholesky(x @ x.mT)"
samples("linalg_solve_triangular", f"L.linalg.solve_triangular({_TRI}, y, upper=False)",
        f"L.linalg.solve_triangular({_TRI}.mT, y, upper=True)",
        f"L.linalg.solve_triangular({_TRI}, y, upper=False, unitriangular=True)",
        f"L.linalg.solve_triangular({_TRI}, y.mT, upper=False, left=False)",
        rtol={"float32": 1e-4}, x=T(3, 5), y=T(3, 2))


# ---------------------------------------------------------------- svd
@jit
def _svd_sizes(m, n, full):
    """(k, U's columns, Vh's rows, packed size): U (m, ku), S (k), Vh (kv, n) in a row."""
    k = min(m, n)
    ku = m if full else k
    kv = n if full else k
    return k, ku, kv, m * ku + k + kv * n


def svd_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    a = input_id(C, row, 0)
    dt = M[a, M_DTYPE]
    if dt != F32 and dt != F64:
        return E_DTYPE
    full = T[row, R_IATTR] != 0
    sa = _shape_of(M, a)
    nd = sa.shape[0]
    m = sa[nd - 2]
    n = sa[nd - 1]
    nb = _batch(sa, 2)
    k, ku, kv, P = _svd_sizes(m, n, full)
    A = _read(dt, data_addr(C, a), nb * m * n)
    O = np.empty(nb * P, np.float64)
    s = np.empty(max(k, 1), np.float64)
    for bi in range(nb):
        # C-ordered A is column-major A^T (n, m) = U' S VT': U_A = VT'^T, Vh_A = U'^T, which
        # are C-ordered arrays as LAPACK writes them
        F = A[bi * m * n:(bi + 1) * m * n].copy()
        Vh = np.empty((kv, n), np.float64)
        U = np.empty((m, ku), np.float64)
        info = lp.gesdd(full, F, n, m, s, Vh, U)
        if info > 0:
            err_of(C)[0] = info
            return E_VALUE
        base = bi * P
        O[base:base + m * ku] = U.ravel()
        O[base + m * ku:base + m * ku + k] = s[:k]
        O[base + m * ku + k:base + P] = Vh.ravel()
    oshape = sa[:nd - 1].copy()
    oshape[nd - 2] = P
    out = meta_contiguous(C, dt, nd - 1, oshape, False)
    if out < 0:
        return out
    _write(C, dt, data_addr(C, out), O)
    return set_outputs1(C, out)


@jit
def _svd_grad_one(U, S, Vh, gU, gS, gVh, m, n, k):
    """PyTorch's svd_backward for one real matrix (U (m, k), Vh (k, n): the reduced
    factors)."""
    V = Vh.T.copy()
    gV = gVh.T.copy()
    A1 = _mm(U.T, gU)
    B1 = _mm(V.T, gV)
    R = np.empty((k, k), np.float64)
    for j in range(k):
        for l in range(k):
            if j == l:
                R[j, l] = gS[j]
            else:
                uh = A1[j, l] - A1[l, j]
                vh = B1[j, l] - B1[l, j]
                R[j, l] = (uh * S[l] + S[j] * vh) / (S[l] * S[l] - S[j] * S[j])
    if m > k:
        gUS = gU.copy()
        for i in range(m):
            for j in range(k):
                gUS[i, j] /= S[j]
        G = _mm(U, R) + gUS - _mm(U, _mm(U.T, gUS))
        return _mm(G, Vh)
    if n > k:
        SgVh = gVh.copy()
        for j in range(k):
            for i in range(n):
                SgVh[j, i] /= S[j]
        G = _mm(R, Vh) + SgVh - _mm(_mm(SgVh, V), Vh)
        return _mm(U, G)
    return _mm(U, _mm(R, Vh))


def svd_bwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    ga = edge_grad_addr(C, row, 0)
    if ga == 0:
        return K_OK
    full = T[row, R_IATTR] != 0
    o = T[row, R_OSAVED]
    dt = T[row, R_ODTYPE]
    sa = _in_shape(C, row, 0)
    nd = sa.shape[0]
    m = sa[nd - 2]
    n = sa[nd - 1]
    nb = _batch(sa, 2)
    k, ku, kv, P = _svd_sizes(m, n, full)
    Pk = _read(dt, data_addr(C, o), nb * P)
    G = _read(dt, row_grad_addr(C, row, 0), nb * P)
    GA = np.empty(nb * m * n, np.float64)
    for bi in range(nb):
        base = bi * P
        U = Pk[base:base + m * ku].reshape(m, ku)[:, :k].copy()
        gU = G[base:base + m * ku].reshape(m, ku)[:, :k].copy()
        S = Pk[base + m * ku:base + m * ku + k].copy()
        gS = G[base + m * ku:base + m * ku + k].copy()
        Vh = Pk[base + m * ku + k:base + P].reshape(kv, n)[:k].copy()
        gVh = G[base + m * ku + k:base + P].reshape(kv, n)[:k].copy()
        GA[bi * m * n:(bi + 1) * m * n] = _svd_grad_one(U, S, Vh, gU, gS, gVh, m, n, k).ravel()
    _accumulate(dt, ga, GA)
    return K_OK


register(OpDef("linalg_svd", "LinalgSvdBackward0", "custom", module=_M,
               fwd_fn="svd_fwd", bwd_fn="svd_bwd", nin=1, diff=(0,),
               saves_if={0: ("out",)}, attrs=("full_matrices",)))
samples("linalg_svd", "L.linalg.svd(x)[1]", "L.linalg.svdvals(x)", "L.linalg.svdvals(x.mT)",
        "L.linalg.svd(x, full_matrices=False).U.abs()",
        "L.linalg.svd(x.mT, full_matrices=False).Vh.abs()",
        "L.linalg.svd(x[:, :3]).Vh.abs()",
        Sample("L.linalg.svdvals(x)", x=T(2, 3, 4)),
        rtol={"float32": 1e-4}, x=T(3, 4))


# ---------------------------------------------------------------- qr
@jit
def _qr_sizes(m, n, mode):
    """(k, Q's columns, R's rows, packed size) for mode 0 reduced, 1 complete, 2 r."""
    k = min(m, n)
    kq = k if mode == 0 else (m if mode == 1 else 0)
    kr = m if mode == 1 else k
    return k, kq, kr, m * kq + kr * n


def qr_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    a = input_id(C, row, 0)
    dt = M[a, M_DTYPE]
    if dt != F32 and dt != F64:
        return E_DTYPE
    mode = T[row, R_IATTR]
    sa = _shape_of(M, a)
    nd = sa.shape[0]
    m = sa[nd - 2]
    n = sa[nd - 1]
    nb = _batch(sa, 2)
    k, kq, kr, P = _qr_sizes(m, n, mode)
    A = _read(dt, data_addr(C, a), nb * m * n)
    O = np.zeros(nb * P, np.float64)
    for bi in range(nb):
        F = A[bi * m * n:(bi + 1) * m * n].reshape(m, n).T.copy()     # column-major A
        Q = np.empty((kq, m), np.float64)
        lp.geqrf_orgqr(F, m, n, Q, kq)
        base = bi * P
        for i in range(m):
            for j in range(kq):
                O[base + i * kq + j] = Q[j, i]
        rb = base + m * kq
        for i in range(min(kr, k)):
            for j in range(i, n):
                O[rb + i * n + j] = F[j, i]
    oshape = sa[:nd - 1].copy()
    oshape[nd - 2] = P
    out = meta_contiguous(C, dt, nd - 1, oshape, False)
    if out < 0:
        return out
    _write(C, dt, data_addr(C, out), O)
    return set_outputs1(C, out)


@jit
def _qr_grad_square(Q, R, gQ, gR):
    """gA for A = Q R, R (n, n) invertible, Q (m, n), m >= n: (gQ + Q copyltu(M)) R^{-H},
    M = R gR^H - gQ^H Q."""
    Mm = _mm(R, gR.T) - _mm(gQ.T, Q)
    n = Mm.shape[0]
    for i in range(n):
        for j in range(i + 1, n):
            Mm[i, j] = Mm[j, i]
    B = gQ + _mm(Q, Mm)
    return _tri_solve(R, False, False, False, B.T.copy()).T.copy()


def qr_bwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    ga = edge_grad_addr(C, row, 0)
    if ga == 0:
        return K_OK
    mode = T[row, R_IATTR]
    o = T[row, R_OSAVED]
    dt = T[row, R_ODTYPE]
    sa = _in_shape(C, row, 0)
    nd = sa.shape[0]
    m = sa[nd - 2]
    n = sa[nd - 1]
    nb = _batch(sa, 2)
    k, kq, kr, P = _qr_sizes(m, n, mode)
    if mode == 1 and m > n:
        return E_VALUE      # (PyTorch: not differentiable when mode='complete', m > n)
    Pk = _read(dt, data_addr(C, o), nb * P)
    G = _read(dt, row_grad_addr(C, row, 0), nb * P)
    GA = np.empty(nb * m * n, np.float64)
    for bi in range(nb):
        base = bi * P
        Q = Pk[base:base + m * kq].reshape(m, kq).copy()
        gQ = G[base:base + m * kq].reshape(m, kq).copy()
        R = Pk[base + m * kq:base + P].reshape(kr, n).copy()
        gR = G[base + m * kq:base + P].reshape(kr, n).copy()
        if m >= n:
            gA = _qr_grad_square(Q, R[:n].copy(), gQ, gR[:n].copy())
        else:
            # A = Q [U | V]: Y = A[:, m:] = Q V, so gQ gains gV's share Y gV^H
            V = R[:, m:].copy()
            gV = gR[:, m:].copy()
            Y = _mm(Q, V)
            gX = _qr_grad_square(Q, R[:, :m].copy(), gQ + _mm(Y, gV.T), gR[:, :m].copy())
            gA = np.empty((m, n), np.float64)
            gA[:, :m] = gX
            gA[:, m:] = _mm(Q, gV)
        GA[bi * m * n:(bi + 1) * m * n] = gA.ravel()
    _accumulate(dt, ga, GA)
    return K_OK


register(OpDef("linalg_qr", "LinalgQrBackward0", "custom", module=_M,
               fwd_fn="qr_fwd", bwd_fn="qr_bwd", nin=1, diff=(0,),
               saves_if={0: ("out",)}, attrs=("mode",)))
samples("linalg_qr", "L.linalg.qr(x)[1]", "L.linalg.qr(x).Q", "L.linalg.qr(x.mT).R",
        "L.linalg.qr(x.mT)[0]", "L.linalg.qr(x[:3], mode='complete').Q",
        Sample("L.linalg.qr(x).R", x=T(2, 4, 3)),
        rtol={"float32": 1e-4}, x=T(4, 3))
