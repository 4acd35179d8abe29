"""Elementwise operands: the descriptors (strides, scalars, row broadcasting) the
generated loops of tapegrad.ops read, forward and backward, and the tangent entry the
compiled replay's fused ops use."""
import numpy as np

from .layout import *  # noqa: F401,F403  (column names are the vocabulary of this file)
from .threads import split_call
from .lowlevel import (jit, jit_native, ctx_of, meta_of, stor_of, tape_of, fattr_of, outs_of,
                       desc_of, f32_at, f64_at, call_kernel)
from .memory import KIND_META, bytes_of, data_addr, decref, itemsize, stor_new
from .loops import aligned_contiguous_strides, aligned_strides, broadcast_shape, make_output
from .grads import (edge_grad_addr, input_shape, new_leaf_grad, new_row_gbuf, out_numel,
                    row_grad_addr)


@jit
def span(M, t):
    """Elements from t's first to its last element (its extent in the storage)."""
    if M[t, M_NUMEL] == 0:
        return 0
    n = 1
    for d in range(M[t, M_NDIM]):
        n += (M[t, M_SHAPE + d] - 1) * M[t, M_STRIDE + d]
    return n


@jit
def contiguous_strides(nd, shape):
    st = np.empty(nd, np.int64)
    s = 1
    for d in range(nd - 1, -1, -1):
        st[d] = s
        s *= shape[d]
    return st


@jit
def _desc_is_contiguous(D, k, nd):
    """Whether operand row k of desc walks the index space contiguously."""
    s = 1
    for d in range(nd - 1, -1, -1):
        if D[D_ST + k * MAXD + d] != s and D[D_SHAPE + d] != 1:
            return False
        s *= D[D_SHAPE + d]
    return True


@jit
def _desc_scalar(C, D, dt, s, row):
    f64_at(C[C_DESC], DW)[D_S] = s
    D[D_S2] = tape_of(C)[row, R_S2]
    if dt == F32:
        f32_at(C[C_DESC] + D_SCAL * 8, 1)[0] = np.float32(s)
    else:
        f64_at(C[C_DESC] + D_SCAL * 8, 1)[0] = s


@jit
def ew_forward_prep(C, row, a, b):
    """Check an elementwise row's operands, make its output and describe the loop in
    desc. Returns the output id or a status."""
    M = meta_of(C)
    D = desc_of(C)
    dt = M[a, M_DTYPE]
    if (dt != F32 and dt != F64) or (b >= 0 and M[b, M_DTYPE] != dt):
        return E_DTYPE
    shape = D[D_SHAPE:D_SHAPE + MAXD]
    nd = broadcast_shape(M, a, b, shape)
    if nd < 0:
        return E_SHAPE
    out = make_output(C, dt, nd, shape)
    if out < 0:
        return out
    D[D_ST:D_ST + 6 * MAXD] = 0
    aligned_strides(M, a, nd, shape, D[D_ST:D_ST + MAXD])
    D[D_ADDR] = data_addr(C, a)
    D[D_SPAN] = span(M, a)
    if b >= 0:
        aligned_strides(M, b, nd, shape, D[D_ST + MAXD:D_ST + 2 * MAXD])
        D[D_ADDR + 1] = data_addr(C, b)
        D[D_SPAN + 1] = span(M, b)
    else:
        D[D_ADDR + 1] = C[C_DESC] + D_SCAL * 8
        D[D_SPAN + 1] = 1
    aligned_strides(M, out, nd, shape, D[D_ST + 2 * MAXD:D_ST + 3 * MAXD])
    D[D_ADDR + 2] = data_addr(C, out)
    D[D_SPAN + 2] = span(M, out)
    D[D_N] = M[out, M_NUMEL]
    D[D_ND] = nd
    D[D_BSCAL] = b < 0
    D[D_FLAT] = (_desc_is_contiguous(D, 0, nd) and _desc_is_contiguous(D, 2, nd)
                 and (b < 0 or _desc_is_contiguous(D, 1, nd)))
    _desc_scalar(C, D, dt, fattr_of(C)[row], row)
    return out


@jit_native
def tangent_entry(caddr, row, bits, ntan):
    """A fused op's forward writes d out / d input k into operand slots 4 + k (laid out
    like the output) for each input k that requires grad, when the row is recorded
    (bits & 1; bits >> 1: the op's differentiable inputs); the storage belongs to the row
    (R_TAN), like a saved tensor. op_entry calls this through C_TANGENT: compiled into it,
    these lines cost seconds of every cold start, for replays that fuse."""
    C = ctx_of(caddr)
    D = desc_of(C)
    D[D_W0] = 0
    D[D_W1] = 0
    if not bits & 1:
        return 0
    diff = bits >> 1
    T = tape_of(C)
    ids = (T[row, R_IN + IN_ID], T[row, R_IN + IW + IN_ID])
    M = meta_of(C)
    S = stor_of(C)
    n = D[D_N]
    isz = itemsize(M[ids[0], M_DTYPE])
    sid = stor_new(C, bytes_of(n, ntan, isz), False)
    if sid < 0:
        o = outs_of(C)[0]
        M[o, M_REFS] += 1
        decref(C, KIND_META, o)
        return E_NOMEM
    S[sid, S_REFS] = 1
    T[row, R_TAN] = sid
    for k in range(ntan):
        want = 0
        if ids[k] >= 0 and (diff >> k) & 1:
            if M[ids[k], M_FLAGS] & FL_REQ:
                want = 1
        D[D_W0 + k] = want
        D[D_ADDR + 4 + k] = S[sid, S_ADDR] + k * n * isz
        D[D_SPAN + 4 + k] = n
        for d in range(MAXD):       # (a loop: a slice copy costs seconds of compile here)
            D[D_ST + (4 + k) * MAXD + d] = D[D_ST + 2 * MAXD + d]
    return 0


@jit
def _broadcast_rows(D, backward):
    """Whether a non-flat loop's inner dim is unit-stride in what it writes (O; the
    incoming gradient G backward) and 0 or 1 in every other operand present, some 0 (a
    per-row value broadcast along rows of at least 16): the layout of KSLOT_ROWS loops."""
    nd = D[D_ND]
    if D[D_FLAT] != 0 or nd == 0 or D[D_N] == 0 or D[D_SHAPE + nd - 1] < 16:
        return False
    fixed = 3 if backward else 2
    if D[D_ST + fixed * MAXD + nd - 1] != 1:
        return False
    some = False
    for k in range(6 if backward else 2):
        if k == fixed or D[D_ADDR + k] == 0:
            continue
        s = D[D_ST + k * MAXD + nd - 1]
        if s == 0:
            some = True
        elif s != 1:
            return False
    return some


@jit
def call_ew(C, fn, table, rows, backward):
    """Run the elementwise kernel fn on the prepared descriptor, split across threads
    when it is flat and large enough. Where a per-row value is broadcast along the rows,
    the op's row-broadcast loop (table[rows]) runs instead once loaded; the first call
    that wants it runs fn's strided loop and marks it (C_WANT_ROWS), and the next op
    returns E_NEED_KERNEL for it before doing anything (Python loads it, the op runs
    again)."""
    D = desc_of(C)
    if C[C_WORKER] != 0 and D[D_FLAT] != 0 and D[D_N] >= 2 * C[C_PAR_MIN]:
        C[C_NSPLIT] += 1
        return split_call(C[C_WORKER], fn, C[C_DESC], D[D_N], C[C_NTHREADS], C[C_PAR_MIN])
    if table[rows] >= 0 and _broadcast_rows(D, backward):
        if table[rows] > 0:
            return call_kernel(table[rows], C[C_DESC], 0)
        C[C_WANT_ROWS] = rows + 1
    return call_kernel(fn, C[C_DESC], 0)


@jit
def grad_for_write(C, r, k, dense):
    """(address, fresh) of the buffer input k's gradient goes into. fresh: it was made now,
    unzeroed, for a kernel that writes every element of it once (dense), which then
    writes rather than adds (an elementwise loop with D_W0 == 2, a GEMM with its output
    argument): no memset, no read-modify-write. Otherwise edge_grad_addr's zeroed or
    existing buffer."""
    T = tape_of(C)
    M = meta_of(C)
    base = R_IN + k * IW
    pr = T[r, base + IN_ROW]
    t = T[r, base + IN_T]
    if (dense and pr >= 0 and T[pr, R_GBUF] < 0 and T[pr, R_NOUT] == 1
            and T[pr, R_STATE] & RS_MARK):
        if not new_row_gbuf(C, pr, False):
            return 0, False
        return stor_of(C)[T[pr, R_GBUF], S_ADDR], True
    if (dense and pr < 0 and t >= 0 and C[C_MODE] == MODE_BACKWARD
            and not M[t, M_FLAGS] & FL_HOOK and M[t, M_GRAD] < 0):
        g = new_leaf_grad(C, t, False)
        if g < 0:
            return 0, False
        return data_addr(C, g), True
    return edge_grad_addr(C, r, k), False


@jit
def ew_backward_prep(C, row):
    """Describe an elementwise row's backward loop in desc: its saved operands, incoming
    gradient and the gradient buffers of its inputs (broadcast dims get stride 0)."""
    M = meta_of(C)
    T = tape_of(C)
    D = desc_of(C)
    dt = T[row, R_ODTYPE]
    nd = T[row, R_ONDIM]
    shape = D[D_SHAPE:D_SHAPE + MAXD]
    for d in range(nd):
        shape[d] = T[row, R_OSHAPE + d]
    D[D_ST:D_ST + 6 * MAXD] = 0
    D[D_ADDR:D_ADDR + 6] = 0
    D[D_SPAN:D_SPAN + 6] = 0
    for k in range(-1, 2):
        sv = T[row, R_OSAVED] if k < 0 else (T[row, R_IN + k * IW + IN_SAVED]
                                             if k < T[row, R_NIN] else -1)
        slot = 2 if k < 0 else k
        if sv >= 0:
            aligned_strides(M, sv, nd, shape, D[D_ST + slot * MAXD:D_ST + (slot + 1) * MAXD])
            D[D_ADDR + slot] = data_addr(C, sv)
            D[D_SPAN + slot] = span(M, sv)
    bscal = T[row, R_NIN] < 2
    if bscal:
        D[D_ADDR + 1] = C[C_DESC] + D_SCAL * 8
        D[D_SPAN + 1] = 1
    n = out_numel(T, row)
    s = 1
    for d in range(nd - 1, -1, -1):
        D[D_ST + 3 * MAXD + d] = s
        s *= shape[d]
    D[D_ADDR + 3] = row_grad_addr(C, row, 0)
    D[D_SPAN + 3] = n
    ishape = D[D_IDX:D_IDX + MAXD]     # (scratch: the loop resets it)
    for k in range(T[row, R_NIN]):
        D[D_W0 + k] = 0
        base = R_IN + k * IW
        if T[row, base + IN_ROW] < 0 and T[row, base + IN_T] < 0:
            continue
        ni = input_shape(C, row, k, ishape)
        m = 1
        for d in range(ni):
            m *= ishape[d]
        g, fresh = grad_for_write(C, row, k, m == n)
        if g != 0:
            D[D_W0 + k] = 2 if fresh else 1
            aligned_contiguous_strides(ni, ishape, nd, shape,
                                       D[D_ST + (4 + k) * MAXD:D_ST + (5 + k) * MAXD])
            D[D_ADDR + 4 + k] = g
            D[D_SPAN + 4 + k] = m
    if T[row, R_NIN] < 2:
        D[D_W1] = 0
    sid = T[row, R_TAN]
    if sid >= 0:            # a fused op: its loop reads the tangents, laid out like G
        isz = itemsize(dt)
        for k in range(T[row, R_NIN]):
            D[D_ADDR + k] = stor_of(C)[sid, S_ADDR] + k * n * isz
            D[D_SPAN + k] = n
            for d in range(MAXD):
                D[D_ST + k * MAXD + d] = D[D_ST + 3 * MAXD + d]
        if T[row, R_NIN] < 2:
            D[D_ADDR + 1] = 0
        D[D_ADDR + 2] = 0
        bscal = False
    D[D_N] = n
    D[D_ND] = nd
    D[D_BSCAL] = bscal
    flat = True
    for k in range(6):
        if D[D_ADDR + k] != 0 and not (k == 1 and bscal):
            flat = flat and _desc_is_contiguous(D, k, nd)
    D[D_FLAT] = flat
    _desc_scalar(C, D, dt, fattr_of(C)[row], row)
    return 0
