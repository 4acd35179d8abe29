"""Typed loops over strided memory (copies, gathers, transposed tiles, accumulation) and
the shape arithmetic of broadcasting and output allocation."""
import numpy as np

from .layout import *  # noqa: F401,F403  (column names are the vocabulary of this file)
from .lowlevel import jit, meta_of, stor_of, tape_of, outs_of, f32_at, f64_at, i64_at, u8_at
from .memory import itemsize, meta_contiguous


@jit
def copy_strided(C, t, dst_addr):
    """Gather tensor t (any layout, any dtype) into a contiguous buffer."""
    M = meta_of(C)
    nd = M[t, M_NDIM]
    gather_layout(C, t, M[t, M_OFF], M[t, M_SHAPE:M_SHAPE + nd], M[t, M_STRIDE:M_STRIDE + nd],
                  dst_addr)


@jit
def gather_layout(C, t, off, shape, strides, dst_addr):
    """Gather the elements of t's storage at offset off in the layout (shape, strides; a
    stride may be negative where off starts at the dim's last element: flip) into a
    contiguous buffer, in t's dtype."""
    M = meta_of(C)
    S = stor_of(C)
    dt = M[t, M_DTYPE]
    n = M[t, M_NUMEL]
    base = S[M[t, M_SID], S_ADDR]
    cap = S[M[t, M_SID], S_NBYTES] // itemsize(dt)
    if dt == F32:
        _gather(f32_at(base, cap), off, shape, strides, f32_at(dst_addr, n))
    elif dt == F64:
        _gather(f64_at(base, cap), off, shape, strides, f64_at(dst_addr, n))
    elif dt == I64:
        _gather(i64_at(base, cap), off, shape, strides, i64_at(dst_addr, n))
    else:
        _gather(u8_at(base, cap), off, shape, strides, u8_at(dst_addr, n))


@jit
def _reversed_row(R, D, inner):
    """D = R reversed. LLVM does not vectorise R[inner - 1 - j] (nor a slice of step -1):
    blocks of 8 become a load, a shuffle and a store (as fast as a plain copy)."""
    j = 0
    while j + 8 <= inner:
        S = R[inner - 8 - j:inner - j]
        T = D[j:j + 8]
        T[0] = S[7]
        T[1] = S[6]
        T[2] = S[5]
        T[3] = S[4]
        T[4] = S[3]
        T[5] = S[2]
        T[6] = S[1]
        T[7] = S[0]
        j += 8
    while j < inner:
        D[j] = R[inner - 1 - j]
        j += 1


@jit
def transposed_tiles(D, d0, S, s1, R, Cn, scale, add):
    """D[i * d0 + j] = S[i + j * s1] (add: += S[...] * scale) for i < R, j < Cn: a
    transposition, in 32 x 32 tiles whose rows stay in cache (each read a contiguous
    piece of S). Row by row, every write or every read is a stride of a whole row: on a
    large matrix that takes nearly twice as long as the tiles."""
    for j0 in range(0, Cn, 32):
        j1 = min(j0 + 32, Cn)
        for i0 in range(0, R, 32):
            i1 = min(i0 + 32, R)
            for j in range(j0, j1):
                Sc = S[i0 + j * s1:i1 + j * s1]
                if add:
                    for i in range(i1 - i0):
                        D[(i0 + i) * d0 + j] += Sc[i] * scale
                else:
                    for i in range(i1 - i0):
                        D[(i0 + i) * d0 + j] = Sc[i]


@jit
def _gather(src, off, shape, strides, dst):
    nd = shape.shape[0]
    n = dst.shape[0]
    if n == 0:
        return
    if nd == 0:
        dst[0] = src[off]
        return
    if (nd == 2 and strides[0] == 1 and strides[1] > 1 and shape[0] >= 16
            and shape[1] >= 16):    # a transposed matrix
        transposed_tiles(dst, shape[1], src[off:], strides[1], shape[0], shape[1],
                         dst[0] * 0 + 1, False)     # (a copy: the scale is not read)
        return
    idx = np.zeros(nd, np.int64)
    inner = shape[nd - 1]
    si = strides[nd - 1]
    p = off
    o = 0
    while o < n:
        if si == 1:         # (slices: a copy LLVM vectorises; an index times a stride is not)
            dst[o:o + inner] = src[p:p + inner]
        elif si == -1:      # a flipped row: blocks of 8 read forward, stored reversed
            _reversed_row(src[p - inner + 1:p + 1], dst[o:o + inner], inner)
        else:
            for j in range(inner):
                dst[o + j] = src[p + j * si]
        o += inner
        d = nd - 2
        while d >= 0:
            idx[d] += 1
            p += strides[d]
            if idx[d] < shape[d]:
                break
            p -= strides[d] * shape[d]
            idx[d] = 0
            d -= 1


@jit
def add_into(dt, dst_addr, src_addr, n):
    if dt == F32:
        d = f32_at(dst_addr, n)
        s = f32_at(src_addr, n)
        for i in range(n):
            d[i] += s[i]
    else:
        d64 = f64_at(dst_addr, n)
        s64 = f64_at(src_addr, n)
        for i in range(n):
            d64[i] += s64[i]


@jit
def add_one(dt, dst_addr, n):
    if dt == F32:
        d = f32_at(dst_addr, n)
        for i in range(n):
            d[i] += np.float32(1.0)
    else:
        d64 = f64_at(dst_addr, n)
        for i in range(n):
            d64[i] += 1.0


@jit
def broadcast_shape(M, a, b, out):
    """Broadcast shapes of a and b (b < 0: a Python scalar) into out; returns ndim or -1."""
    na = M[a, M_NDIM]
    if b < 0:
        for d in range(na):
            out[d] = M[a, M_SHAPE + d]
        return na
    nb = M[b, M_NDIM]
    nd = na if na > nb else nb
    for d in range(nd):
        da = d - (nd - na)
        db = d - (nd - nb)
        sa = M[a, M_SHAPE + da] if da >= 0 else 1
        sb = M[b, M_SHAPE + db] if db >= 0 else 1
        if sa == sb or sb == 1:
            out[d] = sa
        elif sa == 1:
            out[d] = sb
        else:
            return -1
    return nd


@jit
def aligned_strides(M, t, nd, shape, out):
    """t's element strides seen from an nd-dim broadcast shape (0 where broadcast)."""
    nt = M[t, M_NDIM]
    for d in range(nd):
        dt = d - (nd - nt)
        if dt < 0 or (M[t, M_SHAPE + dt] == 1 and shape[d] != 1):
            out[d] = 0
        else:
            out[d] = M[t, M_STRIDE + dt]


@jit
def aligned_contiguous_strides(nt, tshape, nd, shape, out):
    """Strides of a contiguous buffer of shape tshape[0:nt] seen from broadcast shape."""
    st = 1
    for d in range(nd - 1, -1, -1):
        dt = d - (nd - nt)
        if dt < 0:
            out[d] = 0
        else:
            n = tshape[dt]
            out[d] = 0 if (n == 1 and shape[d] != 1) else st
            st *= n


@jit
def make_output(C, dt, nd, shape):
    """The output of an op: a fresh contiguous tensor, or for an in-place op the target,
    whose shape must equal the result's. Negative on error."""
    tgt = C[C_INPLACE]
    if tgt < 0:
        return meta_contiguous(C, dt, nd, shape, False)
    M = meta_of(C)
    if M[tgt, M_NDIM] != nd or M[tgt, M_DTYPE] != dt:
        return E_INPLACE_SHAPE
    for d in range(nd):
        if M[tgt, M_SHAPE + d] != shape[d]:
            return E_INPLACE_SHAPE
    return tgt


@jit
def input_id(C, row, k):
    T = tape_of(C)
    return T[row, R_IN + k * IW + IN_ID]


@jit
def set_outputs1(C, out):
    o = outs_of(C)
    o[0] = out
    C[C_NOUTS] = 1
    return K_OK
