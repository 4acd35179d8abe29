"""matmul in all its PyTorch forms: dot (1-D, 1-D), mv, vm, mm and batched with broadcast
batch dims. A 1-D operand is promoted to a matrix (a row for the left, a column for the
right) and the promoted dim is dropped from the result, as in torch.matmul.

BLAS runs through _engine/blas.py's gemm (NumPy's OpenBLAS, called by symbol).
Transposed weights (x @ W.T, what nn.Linear does) are read in place as Fortran-ordered
matrices, without a copy.
"""
import numpy as np
from numba import carray, types
from numba.extending import overload

from .._engine.layout import (K_OK, MAXD, F32, F64, M_DTYPE, M_NDIM, M_SHAPE, M_STRIDE, R_IN,
                              IN_SAVED, R_ODTYPE, IW, E_DTYPE, E_SHAPE, D_IDX, R_IATTR,
                              R_OSAVED)
from .._engine.lowlevel import jit, ctx_of, meta_of, tape_of, desc_of, ptr_f32, ptr_f64, \
    OVERLOAD_OPTIONS
from .._engine.blas import gemm
from .._engine.core import (data_addr, make_output, input_id, set_outputs1, row_grad_addr,
                            grad_for_write, input_shape, contiguous_strides, meta_contiguous,
                            edge_grad_addr)
from .._engine.lowlevel import fattr_of, f32_at, f64_at
from .along import _values32, _values64
from .reduce import numel, _advance_skipping
from .opinfo import T
from .registry import OpDef, Sample, register, samples

_M = __name__


@jit
def _operand_layout(nd, shape, strides, left):
    """(batch shape, batch strides, rows, cols, row stride, col stride) of a (batch of)
    matrices; a vector becomes a row (left operand) or a column (right operand)."""
    if nd == 1:
        if left:
            return np.empty(0, np.int64), np.empty(0, np.int64), 1, shape[0], 0, strides[0]
        return np.empty(0, np.int64), np.empty(0, np.int64), shape[0], 1, strides[0], 0
    return (shape[:nd - 2].copy(), strides[:nd - 2].copy(), shape[nd - 2], shape[nd - 1],
            strides[nd - 2], strides[nd - 1])


@jit
def _operand(M, t, left):
    nd = M[t, M_NDIM]
    return _operand_layout(nd, M[t, M_SHAPE:M_SHAPE + nd].copy(),
                           M[t, M_STRIDE:M_STRIDE + nd].copy(), left)


@jit
def _operand_of(C, row, k, left):
    """Layout of input k for its gradient: the saved tensor, or (when only its shape is
    needed because it was not saved) its shape as a contiguous matrix."""
    T = tape_of(C)
    sv = T[row, R_IN + k * IW + IN_SAVED]
    if sv >= 0:
        return _operand(meta_of(C), sv, left)
    shape = np.empty(MAXD, np.int64)
    nd = input_shape(C, row, k, shape)
    return _operand_layout(nd, shape[:nd].copy(), contiguous_strides(nd, shape[:nd]), left)


@jit
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


@jit
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


@jit
def _contig_batch_strides(shape, inner):
    nd = shape.shape[0]
    out = np.empty(nd, np.int64)
    s = inner
    for d in range(nd - 1, -1, -1):
        out[d] = s
        s *= shape[d]
    return out


@jit
def _load(P, off, r, c, rs, cs):
    """Copy a (r, c) matrix with strides (rs, cs) into a C-ordered array."""
    out = np.empty((r, c), P.dtype)
    for i in range(r):
        for j in range(c):
            out[i, j] = P[off + i * rs + j * cs]
    return out


@jit
def _is_c(r, c, rs, cs):
    return (cs == 1 or c == 1) and (rs == c or r == 1)


@jit
def _is_f(r, c, rs, cs):
    return (rs == 1 or r == 1) and (cs == r or c == 1)


def _c_view(P, off, r, c):
    """P[off:off + r * c] as an (r, c) C-ordered matrix, in place."""
    raise NotImplementedError("tapegrad.ops.linalg._c_view is for compiled kernels")


@overload(_c_view, jit_options=OVERLOAD_OPTIONS)
def _c_view_impl(P, off, r, c):
    # carray from the address: a reshape would call Numba's C helper for every view, and
    # a small step makes about 15 of them
    if P.dtype == types.float32:
        return lambda P, off, r, c: carray(ptr_f32(np.int64(P.ctypes.data) + off * 4), (r, c))
    return lambda P, off, r, c: carray(ptr_f64(np.int64(P.ctypes.data) + off * 8), (r, c))


@jit
def _as_c(P, off, r, c, rs, cs):
    """The matrix as a C-ordered array: in place when it is one, else a copy."""
    if _is_c(r, c, rs, cs):
        return _c_view(P, off, r, c)
    return _load(P, off, r, c, rs, cs)


@jit
def _batch_offsets(idx, bshape, s0, s1, s2):
    o0 = 0
    o1 = 0
    o2 = 0
    for d in range(bshape.shape[0]):
        o0 += idx[d] * s0[d]
        o1 += idx[d] * s1[d]
        o2 += idx[d] * s2[d]
    return o0, o1, o2


@jit
def _matmul_one(PA, PB, PO, oa, ob, oo, n, k, m, ars, acs, brs, bcs):
    A = _as_c(PA, oa, n, k, ars, acs)
    O = _c_view(PO, oo, n, m)
    if _is_f(k, m, brs, bcs) and not _is_c(k, m, brs, bcs):
        gemm(A, _c_view(PB, ob, m, k).T, O, 0.0)   # x @ W.T: W read in place, transposed
    else:
        gemm(A, _as_c(PB, ob, k, m, brs, bcs), O, 0.0)


@jit
def _matmul_batches(PA, PB, PO, bshape, sa, sb, so, n, k, m, ars, acs, brs, bcs):
    idx = np.zeros(bshape.shape[0], np.int64)
    for bi in range(numel(bshape)):
        oa, ob, oo = _batch_offsets(idx, bshape, sa, sb, so)
        _matmul_one(PA, PB, PO, oa, ob, oo, n, k, m, ars, acs, brs, bcs)
        _advance_skipping(idx, bshape, -1)


@jit
def _matmul_fwd_2d(C, a, b, dt, nda, ndb):
    """matmul of matrices and vectors (no batch dims): what nn.Linear and MLPs run, with
    no batch-shape arrays to allocate."""
    M = meta_of(C)
    n, k, ars, acs = _mat(M, a, nda, True)
    k2, m, brs, bcs = _mat(M, b, ndb, False)
    if k != k2:
        return E_SHAPE
    oshape = desc_of(C)[D_IDX:D_IDX + 2]    # (scratch, see layout.D_IDX)
    ond = 0
    if nda > 1:
        oshape[ond] = n
        ond += 1
    if ndb > 1:
        oshape[ond] = m
        ond += 1
    out = make_output(C, dt, ond, oshape[:ond])
    if out < 0:
        return out
    na = 1 + (n - 1) * ars + (k - 1) * acs
    nbb = 1 + (k - 1) * brs + (m - 1) * bcs
    if dt == F32:
        _matmul_one(carray(ptr_f32(data_addr(C, a)), (na,)),
                    carray(ptr_f32(data_addr(C, b)), (nbb,)),
                    carray(ptr_f32(data_addr(C, out)), (n * m,)),
                    0, 0, 0, n, k, m, ars, acs, brs, bcs)
    else:
        _matmul_one(carray(ptr_f64(data_addr(C, a)), (na,)),
                    carray(ptr_f64(data_addr(C, b)), (nbb,)),
                    carray(ptr_f64(data_addr(C, out)), (n * m,)),
                    0, 0, 0, n, k, m, ars, acs, brs, bcs)
    return set_outputs1(C, out)


@jit
def _extent(bshape, bstr, r, c, rs, cs):
    e = 1 + (r - 1) * rs + (c - 1) * cs
    for d in range(bshape.shape[0]):
        e += (bshape[d] - 1) * bstr[d]
    return e


@jit
def _mat(M, t, nd, left):
    """(rows, cols, row stride, col stride) of a matrix or vector operand, as
    _operand_layout sees it, without building its (empty) batch arrays."""
    if nd == 1:
        if left:
            return 1, M[t, M_SHAPE], 0, M[t, M_STRIDE]
        return M[t, M_SHAPE], 1, M[t, M_STRIDE], 0
    return M[t, M_SHAPE], M[t, M_SHAPE + 1], M[t, M_STRIDE], M[t, M_STRIDE + 1]


@jit
def _mat_in(C, row, k, left):
    """(ndim, rows, cols, row stride, col stride) of input k for its gradient, as
    _operand_of sees it (the batch dims, when ndim > 2, are not described)."""
    sv = tape_of(C)[row, R_IN + k * IW + IN_SAVED]
    M = meta_of(C)
    if sv >= 0:
        nd = M[sv, M_NDIM]
        if nd > 2:
            return nd, 0, 0, 0, 0
        r, c, rs, cs = _mat(M, sv, nd, left)
        return nd, r, c, rs, cs
    shape = np.empty(MAXD, np.int64)
    nd = input_shape(C, row, k, shape)
    if nd == 1:
        return (1, 1, shape[0], 0, 1) if left else (1, shape[0], 1, 1, 0)
    return nd, shape[nd - 2], shape[nd - 1], shape[nd - 1], 1


def matmul_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    a = input_id(C, row, 0)
    b = input_id(C, row, 1)
    dt = M[a, M_DTYPE]
    if (dt != F32 and dt != F64) or M[b, M_DTYPE] != dt:
        return E_DTYPE
    if M[a, M_NDIM] <= 2 and M[b, M_NDIM] <= 2:
        return _matmul_fwd_2d(C, a, b, dt, M[a, M_NDIM], M[b, M_NDIM])
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


@jit
def _matmul_grads_one(PA, PB, PG, PGA, PGB, oa, ob, og, oga, ogb, n, k, m,
                      ars, acs, brs, bcs, want_a, want_b, a_fresh, b_fresh):
    """GA += G @ B^T and GB += A^T @ G for one matrix of the batch. A fresh buffer
    (grad_for_write) is the GEMM's output instead."""
    G = _c_view(PG, og, n, m)
    if want_a:
        GA = _c_view(PGA, oga, n, k)
        beta = 0.0 if a_fresh else 1.0
        if _is_f(k, m, brs, bcs) and not _is_c(k, m, brs, bcs):   # B^T C-ordered
            gemm(G, _c_view(PB, ob, m, k), GA, beta)
        else:
            gemm(G, _as_c(PB, ob, k, m, brs, bcs).T, GA, beta)
    if want_b:
        gemm(_as_c(PA, oa, n, k, ars, acs).T, G, _c_view(PGB, ogb, k, m),
             0.0 if b_fresh else 1.0)


@jit
def _matmul_grads(PA, PB, PG, PGA, PGB, bshape, sa, sb, sga, sgb, n, k, m,
                  ars, acs, brs, bcs, want_a, want_b, a_fresh, b_fresh):
    """The gradients batch by batch (a broadcast batch dim has stride 0 in the gradient
    buffer, so its contributions add up; a fresh buffer has one batch per block)."""
    idx = np.zeros(bshape.shape[0], np.int64)
    for bi in range(numel(bshape)):
        oa, ob, oga = _batch_offsets(idx, bshape, sa, sb, sga)
        ogb = _batch_offsets(idx, bshape, sgb, sgb, sgb)[0]
        _matmul_grads_one(PA, PB, PG, PGA, PGB, oa, ob, bi * n * m, oga, ogb, n, k, m,
                          ars, acs, brs, bcs, want_a, want_b, a_fresh, b_fresh)
        _advance_skipping(idx, bshape, -1)


@jit
def _matmul_bwd_2d(C, row, a, b, n, k, m, ars, acs, brs, bcs):
    ga, a_fresh = grad_for_write(C, row, 0, True)
    gb, b_fresh = grad_for_write(C, row, 1, True)
    pa = data_addr(C, a) if a >= 0 else 0
    pb = data_addr(C, b) if b >= 0 else 0
    na = 1 + (n - 1) * ars + (k - 1) * acs if pa else 0
    nbb = 1 + (k - 1) * brs + (m - 1) * bcs if pb else 0
    g = row_grad_addr(C, row, 0)
    if tape_of(C)[row, R_ODTYPE] == F32:
        _matmul_grads_one(carray(ptr_f32(pa), (na,)), carray(ptr_f32(pb), (nbb,)),
                          carray(ptr_f32(g), (n * m,)),
                          carray(ptr_f32(ga), (n * k if ga else 0,)),
                          carray(ptr_f32(gb), (k * m if gb else 0,)),
                          0, 0, 0, 0, 0, n, k, m, ars, acs, brs, bcs, ga != 0, gb != 0,
                          a_fresh, b_fresh)
    else:
        _matmul_grads_one(carray(ptr_f64(pa), (na,)), carray(ptr_f64(pb), (nbb,)),
                          carray(ptr_f64(g), (n * m,)),
                          carray(ptr_f64(ga), (n * k if ga else 0,)),
                          carray(ptr_f64(gb), (k * m if gb else 0,)),
                          0, 0, 0, 0, 0, n, k, m, ars, acs, brs, bcs, ga != 0, gb != 0,
                          a_fresh, b_fresh)
    return K_OK


def matmul_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    a = T[row, R_IN + IN_SAVED]           # saved only when b requires grad
    b = T[row, R_IN + IW + IN_SAVED]      # saved only when a requires grad
    nda, n, k, ars, acs = _mat_in(C, row, 0, True)
    ndb, k2, m, brs, bcs = _mat_in(C, row, 1, False)
    if nda <= 2 and ndb <= 2:
        return _matmul_bwd_2d(C, row, a, b, n, k, m, ars, acs, brs, bcs)
    ab, asb, n, k, ars, acs = _operand_of(C, row, 0, True)
    bb, bsb, k2, m, brs, bcs = _operand_of(C, row, 1, False)
    bshape, ok = _bcast(ab, bb)
    # dense: the operand has every batch of the broadcast (each block written once)
    ga, a_fresh = grad_for_write(C, row, 0, numel(ab) == numel(bshape))
    gb, b_fresh = grad_for_write(C, row, 1, numel(bb) == numel(bshape))
    pa = data_addr(C, a) if a >= 0 else 0
    pb = data_addr(C, b) if b >= 0 else 0
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
        _matmul_grads(carray(ptr_f32(pa), (na if pa else 0,)),
                      carray(ptr_f32(pb), (nbb if pb else 0,)),
                      carray(ptr_f32(g), (no,)),
                      carray(ptr_f32(ga), (nga if ga else 0,)),
                      carray(ptr_f32(gb), (ngb if gb else 0,)),
                      bshape, sa, sb, sga, sgb, n, k, m, ars, acs, brs, bcs, ga != 0, gb != 0,
                      a_fresh, b_fresh)
    else:
        _matmul_grads(carray(ptr_f64(pa), (na if pa else 0,)),
                      carray(ptr_f64(pb), (nbb if pb else 0,)),
                      carray(ptr_f64(g), (no,)),
                      carray(ptr_f64(ga), (nga if ga else 0,)),
                      carray(ptr_f64(gb), (ngb if gb else 0,)),
                      bshape, sa, sb, sga, sgb, n, k, m, ars, acs, brs, bcs, ga != 0, gb != 0,
                      a_fresh, b_fresh)
    return K_OK


def _dtype_mismatch(e):
    """PyTorch's words for a product of two different float dtypes (each product's own)."""
    if e.code != E_DTYPE or e.type_b is None or e.type_a == e.type_b:
        return None
    ca, cb, sa, sb = e.type_a, e.type_b, e.shape_a, e.shape_b
    if e.name == "dot":
        return RuntimeError(f"dot : expected both vectors to have same dtype, but found {ca} "
                            f"and {cb}")
    if e.name == "mv" or (e.name == "matmul" and len(sb) == 1 and len(sa) > 2):
        return RuntimeError(f"addmv input tensors must have the same dtype, but got {cb}, "
                            f"{ca}, and {cb}")
    if len(sb) > 2:
        return RuntimeError(f"expected scalar type {ca} but found {cb}")
    return RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {ca.lower()} != "
                        f"{cb.lower()}")


def _mm(name, grad_fn):
    return register(OpDef(name, grad_fn, "custom", module=_M, fwd_fn="matmul_fwd",
                          bwd_fn="matmul_bwd", nin=2, diff=(0, 1),
                          saves_if={0: ("b",), 1: ("a",)}, errors=_dtype_mismatch))


_mm("dot", "DotBackward0")
samples("dot", "L.dot(x, y)", "x.dot(y)", "x @ y",
        errors=[Sample("L.dot(x, y)", y=T(5)), Sample("L.dot(x, y)", x=T(3, 4), y=T(3, 4))],
        x=T(4), y=T(4))
_mm("mv", "MvBackward0")
samples("mv", "L.mv(x, y)", "x.mv(y)", "x @ y", "x.t() @ y[:3]",
        errors=[Sample("L.mv(x, y)", y=T(5))], x=T(3, 4), y=T(4))
_mm("mm", "MmBackward0")
samples("mm", "x @ y", "L.mm(x, y)", "L.matmul(x, y)", "x.mm(y)", "y.t() @ x.t()",
        Sample("x.t() @ y", x=T(4, 3)),
        errors=[Sample("x @ y", y=T(3, 5)), Sample("L.mm(x, y)", y=T(4), xfail={"error": (
            "message: tapegrad 'mm: unexpected dims 2D and 1D', PyTorch 'mat2 must be a "
            "matrix'")})],
        x=T(3, 4), y=T(4, 5))
_mm("matmul", "BmmBackward0")
samples("matmul", "x @ y", "L.matmul(x, y)", "L.bmm(x, y)", "x @ y.transpose(1, 2).mT",
        Sample("x @ y", y=T(4, 5)), Sample("x @ y", x=T(4)), Sample("x @ y", y=T(4)),
        Sample("x @ y", x=T(3, 4), y=T(2, 4, 5)), Sample("x @ y", x=T(2, 1, 3, 4)),
        errors=[Sample("x @ y", y=T(3, 4, 5)), Sample("x @ y", y=T(2, 3, 5)),
                Sample("L.bmm(x, y)", y=T(4, 5))],
        x=T(2, 3, 4), y=T(2, 4, 5))


# ---------------------------------------------------------------- cdist
# p-norm distances between the rows of a (..., P, M) and b (..., R, M), batch dims equal
# (the front broadcasts them; p = 2 by matrix products is a composition there): PyTorch's
# CdistBackward0 as one row, computed in the dtype as PyTorch's CPU kernels: forward, per
# pair of rows, one sum (one max for p = inf) over the columns in order, vectorised here
# over the rows of b (b transposed); backward, per row i and column k, the terms of the
# other operand's rows summed in order, vectorised over the columns. (As a composition,
# a (P, R, M) difference, its norm and broadcast-reduced gradients: 20 times PyTorch's
# time.) kind (int attribute 0): 0 p = 0, 1 p = 1, 2 0 < p < 2, 3 p = 2, 4 inf, 5 p > 2;
# p is the float attribute.
KERNEL_DTYPE = -1       # F32 or F64 in each compiled copy (registry._per_dtype)


@jit
def _cdist_row(acc, a, Bk, kind, p):
    """acc[j] = red(acc[j], map(|a - Bk[j]|)): one column of one row against every row."""
    zero = acc.dtype.type(0.0)
    one = acc.dtype.type(1.0)
    if kind == 1:
        for j in range(acc.shape[0]):
            acc[j] += abs(a - Bk[j])
    elif kind == 3:
        for j in range(acc.shape[0]):
            d = abs(a - Bk[j])
            acc[j] += d * d
    elif kind == 0:
        for j in range(acc.shape[0]):
            d = abs(a - Bk[j])
            acc[j] += one if d > zero else (zero if d == zero else d)   # min(ceil(d), 1)
    elif kind == 4:
        for j in range(acc.shape[0]):
            d = abs(a - Bk[j])
            acc[j] = d if acc[j] < d else acc[j]                        # std::max
    else:
        for j in range(acc.shape[0]):
            acc[j] += abs(a - Bk[j]) ** p


@jit
def _cdist_values(A, B, O, nb, n1, n2, m, kind, p):
    """O (nb, n1, n2) = the distances of A (nb, n1, m) and B (nb, n2, m), row-major."""
    Bt = np.empty(m * n2, A.dtype)
    acc = np.empty(n2, A.dtype)
    inv = 1.0 / np.float64(p)
    for q in range(nb):
        Bq = B[q * n2 * m:(q + 1) * n2 * m]
        for j in range(n2):
            for k in range(m):
                Bt[k * n2 + j] = Bq[j * m + k]
        for i in range(n1):
            acc[:] = 0.0
            Ai = A[(q * n1 + i) * m:(q * n1 + i + 1) * m]
            for k in range(m):
                _cdist_row(acc, Ai[k], Bt[k * n2:(k + 1) * n2], kind, p)
            Oi = O[(q * n1 + i) * n2:(q * n1 + i + 1) * n2]
            if kind == 3:
                for j in range(n2):
                    Oi[j] = np.sqrt(acc[j])
            elif kind == 2 or kind == 5:
                for j in range(n2):     # std::pow(agg, 1.0 / p): in double
                    Oi[j] = np.float64(acc[j]) ** inv
            else:
                Oi[:] = acc


@jit
def _cdist_terms(res, Ai, Bj, g, dist, kind, p):
    """res[k] += PyTorch's backward term of column k for one pair of rows."""
    zero = res.dtype.type(0.0)
    one = res.dtype.type(1.0)
    if kind == 1:
        for k in range(res.shape[0]):
            d = Ai[k] - Bj[k]
            res[k] += g * ((one if d > zero else zero) - (one if d < zero else zero))
    elif kind == 3:
        if dist != zero:
            for k in range(res.shape[0]):
                res[k] += g * (Ai[k] - Bj[k]) / dist
    elif kind == 2:
        if dist != zero:
            dp = dist ** (p - one)
            for k in range(res.shape[0]):
                d = Ai[k] - Bj[k]
                s = (one if d > zero else zero) - (one if d < zero else zero)
                t = s * abs(d) ** (p - one) * g / dp
                res[k] += zero if (d == zero and p < one) else t
    elif kind == 5:
        if dist != zero:
            dp = dist ** (p - one)
            for k in range(res.shape[0]):
                d = Ai[k] - Bj[k]
                res[k] += d * abs(d) ** (p - (one + one)) * g / dp
    elif kind == 4:
        for k in range(res.shape[0]):
            d = Ai[k] - Bj[k]
            s = (one if d > zero else zero) - (one if d < zero else zero)
            res[k] += g * s * (one if abs(d) == dist else zero)


@jit
def _cdist_grads(A, B, G, D, GA, nb, n1, n2, m, gi, gj, kind, p):
    """GA (nb, n1, m) += for each row i of A, the terms of every row j of B in order; the
    gradient and distance of pair (i, j) at i * gi + j * gj of each batch (x2's gradient
    is x1's with the operands swapped and G, D read transposed)."""
    res = np.empty(m, A.dtype)
    for q in range(nb):
        Gq = G[q * n1 * n2:(q + 1) * n1 * n2]
        Dq = D[q * n1 * n2:(q + 1) * n1 * n2]
        for i in range(n1):
            res[:] = 0.0
            Ai = A[(q * n1 + i) * m:(q * n1 + i + 1) * m]
            for j in range(n2):
                Bj = B[(q * n2 + j) * m:(q * n2 + j + 1) * m]
                _cdist_terms(res, Ai, Bj, Gq[i * gi + j * gj], Dq[i * gi + j * gj], kind, p)
            Gi = GA[(q * n1 + i) * m:(q * n1 + i + 1) * m]
            for k in range(m):
                Gi[k] += res[k]


@jit
def _cdist_sizes(M, a, b):
    """(batches, P, R, M) of a cdist row's operands."""
    nd = M[a, M_NDIM]
    nb = 1
    for d in range(nd - 2):
        nb *= M[a, M_SHAPE + d]
    return nb, M[a, M_SHAPE + nd - 2], M[b, M_SHAPE + nd - 2], M[a, M_SHAPE + nd - 1]


def cdist_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    a = input_id(C, row, 0)
    b = input_id(C, row, 1)
    dt = M[a, M_DTYPE]
    if dt != KERNEL_DTYPE or M[b, M_DTYPE] != dt:
        return E_DTYPE
    nb, n1, n2, m = _cdist_sizes(M, a, b)
    nd = M[a, M_NDIM]
    oshape = M[a, M_SHAPE:M_SHAPE + nd].copy()
    oshape[nd - 1] = n2
    out = meta_contiguous(C, dt, nd, oshape, False)
    if out < 0:
        return out
    kind = T[row, R_IATTR]
    p = fattr_of(C)[row]
    if KERNEL_DTYPE == F32:
        _cdist_values(_values32(C, a, nb * n1 * m), _values32(C, b, nb * n2 * m),
                      f32_at(data_addr(C, out), nb * n1 * n2), nb, n1, n2, m, kind,
                      np.float32(p))
    else:
        _cdist_values(_values64(C, a, nb * n1 * m), _values64(C, b, nb * n2 * m),
                      f64_at(data_addr(C, out), nb * n1 * n2), nb, n1, n2, m, kind, p)
    return set_outputs1(C, out)


def cdist_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    g1 = edge_grad_addr(C, row, 0)
    g2 = edge_grad_addr(C, row, 1)
    if g1 == 0 and g2 == 0:
        return K_OK
    a = T[row, R_IN + IN_SAVED]
    b = T[row, R_IN + IW + IN_SAVED]
    nb, n1, n2, m = _cdist_sizes(meta_of(C), a, b)
    kind = T[row, R_IATTR]
    p = fattr_of(C)[row]
    no = nb * n1 * n2
    g = row_grad_addr(C, row, 0)
    o = data_addr(C, T[row, R_OSAVED])
    if KERNEL_DTYPE == F32:
        A = _values32(C, a, nb * n1 * m)
        B = _values32(C, b, nb * n2 * m)
        G = f32_at(g, no)
        D = f32_at(o, no)
        if g1 != 0:
            _cdist_grads(A, B, G, D, f32_at(g1, nb * n1 * m), nb, n1, n2, m, n2, 1, kind,
                         np.float32(p))
        if g2 != 0:
            _cdist_grads(B, A, G, D, f32_at(g2, nb * n2 * m), nb, n2, n1, m, 1, n2, kind,
                         np.float32(p))
    else:
        A64 = _values64(C, a, nb * n1 * m)
        B64 = _values64(C, b, nb * n2 * m)
        G64 = f64_at(g, no)
        D64 = f64_at(o, no)
        if g1 != 0:
            _cdist_grads(A64, B64, G64, D64, f64_at(g1, nb * n1 * m), nb, n1, n2, m, n2, 1,
                         kind, p)
        if g2 != 0:
            _cdist_grads(B64, A64, G64, D64, f64_at(g2, nb * n2 * m), nb, n2, n1, m, 1, n2,
                         kind, p)
    return K_OK


register(OpDef("cdist", "CdistBackward0", "custom", module=_M, fwd_fn="cdist_fwd",
               bwd_fn="cdist_bwd", nin=2, diff=(0, 1),
               saves_if={0: ("a", "b", "out"), 1: ("a", "b", "out")}, per_dtype=True,
               attrs=("kind",)))
samples("cdist", "L.cdist(x, y, p=1.0)", "L.cdist(x, y, 0.5)", "L.cdist(x, y, 3.0)",
        "L.cdist(x, y, float('inf'))", "L.cdist(x, y, 0.0)", "L.cdist(x, x.flip(0), 1.5)",
        "L.cdist(x, y, 2.0, 'donot_use_mm_for_euclid_dist')", "L.cdist(x.t()[:2], y[:, :3], 1)",
        Sample("L.cdist(x, y, 1)", x=T(2, 3, 4), y=T(5, 4)),
        Sample("L.cdist(x, y, 4.0)", x=T(2, 1, 3, 4), y=T(3, 2, 4)),
        errors=["L.cdist(x, y, -1.0)", Sample("L.cdist(x, y)", y=T(5, 3))],
        x=T(3, 4), y=T(5, 4))
