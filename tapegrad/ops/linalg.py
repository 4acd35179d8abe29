"""matmul in all its PyTorch forms: dot (1-D, 1-D), mv, vm, mm and batched with broadcast
batch dims. A 1-D operand is promoted to a matrix (a row for the left, a column for the
right) and the promoted dim is dropped from the result, as in torch.matmul.

BLAS runs through Numba's np.dot (which binds SciPy's cython BLAS, so it caches).
Transposed weights (x @ W.T, what nn.Linear does) are read in place as Fortran-ordered
matrices, without a copy.
"""
import numpy as np
from numba import njit, carray

from .._engine.layout import (MAXD, F32, F64, M_DTYPE, M_NDIM, M_SHAPE, M_STRIDE, R_IN,
                              IN_SAVED, R_ODTYPE, IW, E_DTYPE, E_SHAPE)
from .._engine.lowlevel import ctx_of, meta_of, tape_of, ptr_f32, ptr_f64
from .._engine.core import (data_addr, make_output, input_id, set_outputs1, row_grad_addr,
                            edge_grad_addr)
from .registry import OpDef, register

_M = __name__


@njit(cache=True)
def _operand(M, t, left):
    """(batch shape, batch strides, rows, cols, row stride, col stride) of t as a (batch
    of) matrices; a vector becomes a row (left) or a column (right)."""
    nd = M[t, M_NDIM]
    if nd == 1:
        n = M[t, M_SHAPE]
        s = M[t, M_STRIDE]
        if left:
            return np.empty(0, np.int64), np.empty(0, np.int64), 1, n, 0, s
        return np.empty(0, np.int64), np.empty(0, np.int64), n, 1, s, 0
    return (M[t, M_SHAPE:M_SHAPE + nd - 2].copy(), M[t, M_STRIDE:M_STRIDE + nd - 2].copy(),
            M[t, M_SHAPE + nd - 2], M[t, M_SHAPE + nd - 1],
            M[t, M_STRIDE + nd - 2], M[t, M_STRIDE + nd - 1])


@njit(cache=True)
def _bcast(sa, sb):
    na, nb = sa.shape[0], sb.shape[0]
    nd = max(na, nb)
    out = np.empty(nd, np.int64)
    for d in range(nd):
        x = sa[d - (nd - na)] if d - (nd - na) >= 0 else 1
        y = sb[d - (nd - nb)] if d - (nd - nb) >= 0 else 1
        if x != y and x != 1 and y != 1:
            return out[:0], False
        out[d] = x if x != 1 else y
    return out, True


@njit(cache=True)
def _aligned(bshape, shape, strides):
    """Strides of a batch operand over the broadcast batch shape (0 where broadcast)."""
    nd = bshape.shape[0]
    nt = shape.shape[0]
    out = np.zeros(nd, np.int64)
    for d in range(nd):
        k = d - (nd - nt)
        if k >= 0 and shape[k] == bshape[d]:
            out[d] = strides[k]
    return out


@njit(cache=True)
def _contig_batch_strides(shape, inner):
    nd = shape.shape[0]
    out = np.empty(nd, np.int64)
    s = inner
    for d in range(nd - 1, -1, -1):
        out[d] = s
        s *= shape[d]
    return out


@njit(cache=True)
def _load(P, off, r, c, rs, cs):
    """A (r, c) matrix starting at element off of P with strides (rs, cs), as a C-ordered
    array (copied only when it is neither C- nor F-ordered)."""
    out = np.empty((r, c), P.dtype)
    for i in range(r):
        for j in range(c):
            out[i, j] = P[off + i * rs + j * cs]
    return out


@njit(cache=True)
def _matmul_batches(PA, PB, PO, bshape, sa, sb, so, n, k, m, ars, acs, brs, bcs):
    nb = 1
    for d in range(bshape.shape[0]):
        nb *= bshape[d]
    idx = np.zeros(bshape.shape[0], np.int64)
    for bi in range(nb):
        oa = 0
        ob = 0
        oo = 0
        for d in range(bshape.shape[0]):
            oa += idx[d] * sa[d]
            ob += idx[d] * sb[d]
            oo += idx[d] * so[d]
        A = _load(PA, oa, n, k, ars, acs)
        B = _load(PB, ob, k, m, brs, bcs)
        R = np.dot(A, B)
        for i in range(n):
            for j in range(m):
                PO[oo + i * m + j] = R[i, j]
        d = bshape.shape[0] - 1
        while d >= 0:
            idx[d] += 1
            if idx[d] < bshape[d]:
                break
            idx[d] = 0
            d -= 1


@njit(cache=True)
def _extent(bshape, bstr, r, c, rs, cs):
    e = 1 + (r - 1) * rs + (c - 1) * cs
    for d in range(bshape.shape[0]):
        e += (bshape[d] - 1) * bstr[d]
    return e


def matmul_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    a = input_id(C, row, 0)
    b = input_id(C, row, 1)
    dt = M[a, M_DTYPE]
    if (dt != F32 and dt != F64) or M[b, M_DTYPE] != dt:
        return E_DTYPE
    ab, asb, n, k, ars, acs = _operand(M, a, True)
    bb, bsb, k2, m, brs, bcs = _operand(M, b, False)
    if k != k2:
        return E_SHAPE
    bshape, ok = _bcast(ab, bb)
    if not ok:
        return E_SHAPE
    nbd = bshape.shape[0]
    oshape = np.empty(MAXD, np.int64)
    ond = 0
    for d in range(nbd):
        oshape[ond] = bshape[d]
        ond += 1
    if M[a, M_NDIM] > 1:
        oshape[ond] = n
        ond += 1
    if M[b, M_NDIM] > 1:
        oshape[ond] = m
        ond += 1
    out = make_output(C, dt, ond, oshape[:ond])
    if out < 0:
        return out
    sa = _aligned(bshape, ab, asb)
    sb = _aligned(bshape, bb, bsb)
    so = _contig_batch_strides(bshape, n * m)
    na = _extent(bshape, sa, n, k, ars, acs)
    nbb = _extent(bshape, sb, k, m, brs, bcs)
    no = 1
    for d in range(nbd):
        no *= bshape[d]
    no *= n * m
    if dt == F32:
        _matmul_batches(carray(ptr_f32(data_addr(C, a)), (na,)),
                        carray(ptr_f32(data_addr(C, b)), (nbb,)),
                        carray(ptr_f32(data_addr(C, out)), (no,)),
                        bshape, sa, sb, so, n, k, m, ars, acs, brs, bcs)
    else:
        _matmul_batches(carray(ptr_f64(data_addr(C, a)), (na,)),
                        carray(ptr_f64(data_addr(C, b)), (nbb,)),
                        carray(ptr_f64(data_addr(C, out)), (no,)),
                        bshape, sa, sb, so, n, k, m, ars, acs, brs, bcs)
    return set_outputs1(C, out)


@njit(cache=True)
def _matmul_grads(PA, PB, PG, PGA, PGB, bshape, sa, sb, sga, sgb, n, k, m,
                  ars, acs, brs, bcs, want_a, want_b):
    """GA += G @ B^T and GB += A^T @ G, batch by batch (a broadcast batch dim has stride 0
    in the gradient buffer, so its contributions add up)."""
    nb = 1
    for d in range(bshape.shape[0]):
        nb *= bshape[d]
    idx = np.zeros(bshape.shape[0], np.int64)
    for bi in range(nb):
        oa = 0
        ob = 0
        oga = 0
        ogb = 0
        for d in range(bshape.shape[0]):
            oa += idx[d] * sa[d]
            ob += idx[d] * sb[d]
            oga += idx[d] * sga[d]
            ogb += idx[d] * sgb[d]
        G = _load(PG, bi * n * m, n, m, m, 1)
        if want_a:
            B = _load(PB, ob, k, m, brs, bcs)
            R = np.dot(G, B.T)
            for i in range(n):
                for j in range(k):
                    PGA[oga + i * k + j] += R[i, j]
        if want_b:
            A = _load(PA, oa, n, k, ars, acs)
            R2 = np.dot(A.T, G)
            for i in range(k):
                for j in range(m):
                    PGB[ogb + i * m + j] += R2[i, j]
        d = bshape.shape[0] - 1
        while d >= 0:
            idx[d] += 1
            if idx[d] < bshape[d]:
                break
            idx[d] = 0
            d -= 1


def matmul_bwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    a = T[row, R_IN + IN_SAVED]
    b = T[row, R_IN + IW + IN_SAVED]
    ga = edge_grad_addr(C, row, 0)
    gb = edge_grad_addr(C, row, 1)
    ab, asb, n, k, ars, acs = _operand(M, a, True)
    bb, bsb, k2, m, brs, bcs = _operand(M, b, False)
    bshape, ok = _bcast(ab, bb)
    sa = _aligned(bshape, ab, asb)
    sb = _aligned(bshape, bb, bsb)
    sga = _aligned(bshape, ab, _contig_batch_strides(ab, n * k))
    sgb = _aligned(bshape, bb, _contig_batch_strides(bb, k * m))
    na = _extent(bshape, sa, n, k, ars, acs)
    nbb = _extent(bshape, sb, k, m, brs, bcs)
    nga = n * k
    for d in range(ab.shape[0]):
        nga *= ab[d]
    ngb = k * m
    for d in range(bb.shape[0]):
        ngb *= bb[d]
    no = n * m
    for d in range(bshape.shape[0]):
        no *= bshape[d]
    g = row_grad_addr(C, row, 0)
    if T[row, R_ODTYPE] == F32:
        _matmul_grads(carray(ptr_f32(data_addr(C, a)), (na,)),
                      carray(ptr_f32(data_addr(C, b)), (nbb,)),
                      carray(ptr_f32(g), (no,)),
                      carray(ptr_f32(ga), (nga if ga else 0,)),
                      carray(ptr_f32(gb), (ngb if gb else 0,)),
                      bshape, sa, sb, sga, sgb, n, k, m, ars, acs, brs, bcs, ga != 0, gb != 0)
    else:
        _matmul_grads(carray(ptr_f64(data_addr(C, a)), (na,)),
                      carray(ptr_f64(data_addr(C, b)), (nbb,)),
                      carray(ptr_f64(g), (no,)),
                      carray(ptr_f64(ga), (nga if ga else 0,)),
                      carray(ptr_f64(gb), (ngb if gb else 0,)),
                      bshape, sa, sb, sga, sgb, n, k, m, ars, acs, brs, bcs, ga != 0, gb != 0)
    return 0


def _mm(name, grad_fn):
    return register(OpDef(name, grad_fn, "custom", module=_M, fwd_fn="matmul_fwd",
                          bwd_fn="matmul_bwd", nin=2, diff=(0, 1), saves=("a", "b")))


_mm("dot", "DotBackward0")
_mm("mv", "MvBackward0")
_mm("mm", "MmBackward0")
_mm("matmul", "BmmBackward0")
