"""The flat world: allocation, reference counts, recording a row, the reverse sweep.

Everything here is compiled once (cache=True) and reaches its tables through the ctx
array's addresses. Per-op kernels (tapegrad.ops) are called through the FWD/BWD tables of
function addresses, so this module never grows with the number of ops.
"""
import numpy as np

from .layout import *  # noqa: F401,F403  (column names are the vocabulary of this file)
from .threads import split_call
from .lowlevel import (jit, jit_entry, jit_native, ctx_of, meta_of, stor_of, tape_of, fattr_of,
                       iargs_of, outs_of, err_of, work_of, opinfo_of, fwd_table, bwd_table,
                       desc_of, f32_at, f64_at, i64_at, u8_at, call_kernel, call_native_i2,
                       call_native_i4, c_malloc, c_calloc, c_free)


# ---------------------------------------------------------------- small helpers
@jit
def itemsize(dt):
    if dt == F32:
        return 4
    if dt == BOOL:
        return 1
    return 8


@jit
def numel_of(M, t):
    return M[t, M_NUMEL]


@jit
def is_contiguous(M, t):
    nd = M[t, M_NDIM]
    expect = 1
    for d in range(nd - 1, -1, -1):
        n = M[t, M_SHAPE + d]
        if n != 1 and M[t, M_STRIDE + d] != expect:
            return False
        expect *= n
    return True


@jit_entry
def contiguous_id(caddr, t):
    """is_contiguous for Python (Tensor.is_contiguous), through its C entry point."""
    return 1 if is_contiguous(meta_of(ctx_of(caddr)), t) else 0


@jit
def data_addr(C, t):
    M = meta_of(C)
    S = stor_of(C)
    return S[M[t, M_SID], S_ADDR] + M[t, M_OFF] * itemsize(M[t, M_DTYPE])


@jit
def set_contiguous_strides(M, t):
    nd = M[t, M_NDIM]
    st = 1
    for d in range(nd - 1, -1, -1):
        M[t, M_STRIDE + d] = st
        st *= M[t, M_SHAPE + d]
    M[t, M_NUMEL] = st


# ---------------------------------------------------------------- recording
@jit
def rec_at(C, n):
    """Where an n-word event goes in the recording log, or -1: not recording, or the log
    is full (then it is marked overflowed and the recording cannot be replayed)."""
    if C[C_REC] == 0:
        return -1
    p = C[C_RECN]
    if p < 0:
        return -1
    if p + n > C[C_RECCAP]:
        C[C_RECN] = -1
        return -1
    C[C_RECN] = p + n
    return p


@jit
def rec_log(C):
    return i64_at(C[C_REC], C[C_RECCAP])


@jit
def rec_event(C, n, kind, x, y, z):
    """Log an n-word event (n <= 4): kind, then x, y, z as far as n reaches."""
    p = rec_at(C, n)
    if p >= 0:
        R = rec_log(C)
        R[p] = kind
        R[p + 1] = x
        if n > 2:
            R[p + 2] = y
        if n > 3:
            R[p + 3] = z


# ---------------------------------------------------------------- allocation
# Sizes arrive checked by Python (sizes.py), but an op's result shape is the kernel's own
# (a broadcast of two expanded views, a matmul): every byte count is computed here with
# overflow checks, since a wrapped product would allocate a block too small for the tensor.
@jit
def checked_mul(a, b):
    """a * b for counts a, b >= 0; -1 when it overflows int64."""
    if a < 0 or b < 0 or (a != 0 and b > I64_MAX // a):
        return -1
    return a * b


@jit
def bytes_of(n, k, isz):
    """Bytes of k blocks of n items of isz bytes; -1 when that overflows int64."""
    m = checked_mul(n, k)
    return -1 if m < 0 else checked_mul(m, isz)


@jit
def count_of(nd, shape):
    """The element count of shape[0:nd]; -1 when it overflows, as PyTorch counts it: a
    partial product of the sizes overflows 64 unsigned bits (a later 0 does not undo
    that), or the count does not fit in int64 (a negative size reads as a huge one)."""
    n = 1
    big = False         # the partial product is in [2**63, 2**64): it does not fit n
    for d in range(nd):
        s = shape[d]
        if s < 0:
            return -1
        if s == 0:
            n = 0
            big = False
        elif s > 1:
            if big:
                return -1
            # (2**64 - 1) // s, from int64's maximum (2**63 - 1) without leaving int64
            if n > 2 * (I64_MAX // s) + (2 * (I64_MAX % s) + 1) // s:
                return -1
            if n > I64_MAX // s:
                big = True
            else:
                n *= s
    return -1 if big else n


@jit
def contiguous_nbytes(nd, shape, isz):
    """Bytes of a contiguous tensor of shape[0:nd]; -1 when it cannot exist, as PyTorch
    checks it: its element count (count_of), its byte count or a contiguous stride (0 sizes
    count as 1) overflows int64."""
    n = count_of(nd, shape)
    if n < 0:
        return -1
    st = 1
    for d in range(nd - 1, 0, -1):
        st = checked_mul(st, shape[d] if shape[d] > 1 else 1)
        if st < 0:
            return -1
    return checked_mul(n, isz)


@jit
def _refused(C, nbytes):
    """Note an allocation that cannot be made (nbytes < 0: its size overflowed)."""
    C[C_NOMEM_BYTES] = nbytes
    C[C_NOMEM_COUNT] += 1
    return -2


@jit
def _refused_sweep(C, nbytes):
    """The sweep's status for a gradient buffer it cannot make."""
    _refused(C, nbytes)
    return E_NOMEM


@jit
def _planned_addr(C, sid, nb, zero):
    """A replayed step's k-th allocation takes the arena block the plan gives it, if the
    sizes agree and the block is free (else it is malloc'ed: a plan can only save work,
    never hand out memory still in use)."""
    k = C[C_PLANK]
    if k >= C[C_PLANN]:
        return 0
    C[C_PLANK] = k + 1
    P = i64_at(C[C_PLAN], (k + 1) * PLW)[k * PLW:]
    addr = P[PL_ADDR]
    if addr == 0 or P[PL_BYTES] != nb:
        return 0
    occ = i64_at(P[PL_OCC], 1)
    if occ[0] != 0:
        return 0
    occ[0] = sid + 1
    stor_of(C)[sid, S_OCC] = P[PL_OCC]
    if zero:
        u8_at(addr, nb)[:] = 0
    return addr


@jit
def stor_new(C, nbytes, zero):
    """A storage of nbytes (refcount 0). Returns -1 when the table is full, -2 when the
    memory cannot be had: nbytes < 0 (an overflowed size), above the limit C_MAX_BYTES,
    or malloc fails. Callers reserve table room first, so -1 never happens mid-op."""
    S = stor_of(C)
    sid = C[C_STOR_FREE]
    if sid < 0:
        return -1
    if nbytes < 0 or nbytes > C[C_MAX_BYTES]:
        return _refused(C, nbytes)
    nb = nbytes if nbytes > 8 else 8
    kind = 0
    addr = 0
    if C[C_PLANN] > 0:
        addr = _planned_addr(C, sid, nb, zero)
        kind = 3 if addr != 0 else 0
    if addr == 0:
        if zero:
            addr = c_calloc(1, nb)
        else:
            addr = c_malloc(nb)
        if addr == 0:
            return _refused(C, nb)
        C[C_BYTES] += nb
    C[C_STOR_FREE] = S[sid, S_NEXT]
    S[sid, S_ADDR] = addr
    S[sid, S_NBYTES] = nb
    S[sid, S_REFS] = 0
    S[sid, S_VERSION] = 0
    S[sid, S_KIND] = kind
    S[sid, S_NEXT] = -1
    S[sid, S_HVIEWS] = 0
    C[C_LIVE_STOR] += 1
    if C[C_REC] != 0:
        rec_event(C, 3, EV_ALLOC, sid, nb, 0)
    return sid


@jit
def meta_new(C, sid, off, nd, dt):
    """A tensor id over storage sid (which it holds); shape and strides are the caller's."""
    M = meta_of(C)
    t = C[C_META_FREE]
    C[C_META_FREE] = M[t, M_NEXT]
    M[t, :] = 0
    M[t, M_SID] = sid
    M[t, M_OFF] = off
    M[t, M_NDIM] = nd
    M[t, M_DTYPE] = dt
    M[t, M_ROW] = -1
    M[t, M_GRAD] = -1
    M[t, M_SRCOP] = -1
    M[t, M_GTMP] = -1
    M[t, M_NEXT] = -1
    M[t, M_VSID] = sid
    M[t, M_BASE] = -1
    S = stor_of(C)
    S[sid, S_REFS] += 1
    C[C_LIVE_META] += 1
    if C[C_REC] != 0:
        rec_event(C, 2, EV_BIRTH, t, 0, 0)
    return t


@jit
def meta_contiguous(C, dt, nd, shape, zero):
    """A fresh contiguous tensor of the given shape (shape[0:nd]), or a status: E_OVERFLOW
    when no tensor can have that shape (err: its shape), E_NOMEM when its memory cannot be
    had (ctx: the bytes asked for)."""
    isz = itemsize(dt)
    nb = contiguous_nbytes(nd, shape, isz)
    if nb < 0:
        E = err_of(C)
        E[0] = nd
        for d in range(nd):
            E[1 + d] = shape[d]
        E[9] = isz
        _refused(C, -1)
        return E_OVERFLOW
    sid = stor_new(C, nb, zero)
    if sid == -1:
        return E_GROW_STOR
    if sid < 0:
        return E_NOMEM
    t = meta_new(C, sid, 0, nd, dt)
    M = meta_of(C)
    for d in range(nd):
        M[t, M_SHAPE + d] = shape[d]
    set_contiguous_strides(M, t)
    return t


@jit
def share_version(C, v, t):
    """Tensor v (over t's storage) counts versions with t's counter."""
    M = meta_of(C)
    vs = M[t, M_VSID]
    if vs != M[v, M_VSID]:
        M[v, M_VSID] = vs
        stor_of(C)[vs, S_REFS] += 1


@jit
def version_of(C, t):
    return stor_of(C)[meta_of(C)[t, M_VSID], S_VERSION]


@jit
def bump_version(C, t):
    M = meta_of(C)
    S = stor_of(C)
    S[M[t, M_VSID], S_VERSION] += 1
    if S[M[t, M_SID], S_HVIEWS] > 0:
        _stale_nograd_views(C, t)


@jit
def _stale_nograd_views(C, t):
    """PyTorch forbids using a view made under no_grad, or an output of a multi-view op
    (split, unbind), once its version counter moved, where a gradient could flow and its
    base requires grad (E_STALE_VIEW)."""
    M = meta_of(C)
    for u in counted_views(C, M[t, M_SID]):
        if M[u, M_VSID] == M[t, M_VSID] and (M[u, M_FLAGS] & FL_NOGRADVIEW
                                             or is_multi_view(C, u)):
            M[u, M_FLAGS] |= FL_STALE


@jit
def is_multi_view(C, u):
    """u is an output of an op returning several views (its history is not re-derived
    when its base changes: it goes stale instead, as in PyTorch)."""
    M = meta_of(C)
    r = M[u, M_ROW]
    return r >= 0 and (M[u, M_FLAGS] & FL_MULTIVIEW
                       or (opinfo_of(C)[tape_of(C)[r, R_OP], O_FLAGS] & OF_MULTIVIEW) != 0)


@jit
def counted_views(C, sid):
    """The live views a storage counts in S_HVIEWS (FL_HVIEW): a table scan, made only
    when the count is not 0."""
    M = meta_of(C)
    views = np.empty(stor_of(C)[sid, S_HVIEWS], np.int64)
    n = 0
    for u in range(C[C_META_CAP]):
        if n == views.size:
            break
        if M[u, M_FLAGS] & FL_HVIEW and M[u, M_SID] == sid and M[u, M_REFS] > 0:
            views[n] = u
            n += 1
    return views[:n]


@jit
def requires_grad_through_base(M, t):
    """A view without a history whose base requires grad (one made under no_grad, or
    before its base was set to require grad): PyTorch reports it as requiring grad, and
    an op on it records a node with no edge to it, so the gradient it would get is
    dropped."""
    b = M[t, M_BASE]
    return b >= 0 and M[t, M_ROW] < 0 and (M[b, M_FLAGS] & FL_REQ) != 0


@jit
def is_stale_view(M, u):
    return M[u, M_FLAGS] & FL_STALE and M[M[u, M_BASE], M_FLAGS] & FL_REQ


@jit
def meta_alias(C, t):
    """A tensor sharing t's storage, layout and version counter, without history
    (detach(), and what a row saves). Remembers which op produced t, for messages."""
    M = meta_of(C)
    a = meta_new(C, M[t, M_SID], M[t, M_OFF], M[t, M_NDIM], M[t, M_DTYPE])
    for d in range(MAXD):
        M[a, M_SHAPE + d] = M[t, M_SHAPE + d]
        M[a, M_STRIDE + d] = M[t, M_STRIDE + d]
    M[a, M_NUMEL] = M[t, M_NUMEL]
    share_version(C, a, t)
    r = M[t, M_ROW]
    if r >= 0:
        T = tape_of(C)
        M[a, M_SRCOP] = T[r, R_OP]
        M[a, M_SRCIDX] = M[t, M_OIDX]
    return a


@jit
def row_new(C):
    T = tape_of(C)
    r = C[C_TAPE_FREE]
    C[C_TAPE_FREE] = T[r, R_NEXT]
    T[r, :] = -1
    T[r, R_REFS] = 0
    T[r, R_STATE] = RS_LIVE
    T[r, R_NIN] = 0
    T[r, R_NOUT] = 0
    T[r, R_DEPS] = 0
    C[C_LIVE_ROWS] += 1
    return r


@jit
def row_discard(C, r):
    """Give back a row that holds nothing (an op that was not recorded)."""
    T = tape_of(C)
    T[r, R_STATE] = 0
    T[r, R_NEXT] = C[C_TAPE_FREE]
    C[C_TAPE_FREE] = r
    C[C_LIVE_ROWS] -= 1


# ---------------------------------------------------------------- release
KIND_META, KIND_ROW, KIND_STOR = 0, 1, 2


@jit
def _dec(C, W, n, kind, i):
    if kind == KIND_META:
        M = meta_of(C)
        M[i, M_REFS] -= 1
        if M[i, M_REFS] == 0:
            W[n] = i * 4 + kind
            return n + 1
    elif kind == KIND_ROW:
        T = tape_of(C)
        T[i, R_REFS] -= 1
        if T[i, R_REFS] == 0:
            W[n] = i * 4 + kind
            return n + 1
    else:
        S = stor_of(C)
        S[i, S_REFS] -= 1
        if S[i, S_REFS] == 0:
            W[n] = i * 4 + kind
            return n + 1
    return n


@jit
def decref(C, kind, i):
    """Drop one reference; frees what reaches zero, iteratively (deep graphs never
    recurse). The work list is a ctx scratch array sized to the tables by Python."""
    W = work_of(C)
    n = _dec(C, W, 0, kind, i)
    M = meta_of(C)
    T = tape_of(C)
    S = stor_of(C)
    while n > 0:
        n -= 1
        item = W[n]
        kind = item & 3
        i = item >> 2
        if kind == KIND_META:
            if M[i, M_FLAGS] & FL_HVIEW:
                S[M[i, M_SID], S_HVIEWS] -= 1
            if M[i, M_BASE] >= 0:
                n = _dec(C, W, n, KIND_META, M[i, M_BASE])
            n = _dec(C, W, n, KIND_STOR, M[i, M_SID])
            if M[i, M_VSID] != M[i, M_SID]:
                n = _dec(C, W, n, KIND_STOR, M[i, M_VSID])
            if M[i, M_ROW] >= 0:
                n = _dec(C, W, n, KIND_ROW, M[i, M_ROW])
            if M[i, M_GRAD] >= 0:
                n = _dec(C, W, n, KIND_META, M[i, M_GRAD])
            if M[i, M_GTMP] >= 0:
                n = _dec(C, W, n, KIND_STOR, M[i, M_GTMP])
            if M[i, M_FLAGS] & FL_RETAIN:
                C[C_NRETAIN] -= 1
            M[i, M_FLAGS] = 0
            M[i, M_NEXT] = C[C_META_FREE]
            C[C_META_FREE] = i
            C[C_LIVE_META] -= 1
        elif kind == KIND_ROW:
            for k in range(T[i, R_NIN]):
                base = R_IN + k * IW
                if T[i, base + IN_ROW] >= 0:
                    n = _dec(C, W, n, KIND_ROW, T[i, base + IN_ROW])
                elif T[i, base + IN_T] >= 0:
                    n = _dec(C, W, n, KIND_META, T[i, base + IN_T])
                if T[i, base + IN_SAVED] >= 0:
                    n = _dec(C, W, n, KIND_META, T[i, base + IN_SAVED])
            if T[i, R_OSAVED] >= 0:
                n = _dec(C, W, n, KIND_META, T[i, R_OSAVED])
            if T[i, R_TAN] >= 0:
                n = _dec(C, W, n, KIND_STOR, T[i, R_TAN])
            if T[i, R_GBUF] >= 0:
                n = _dec(C, W, n, KIND_STOR, T[i, R_GBUF])
            T[i, R_STATE] = 0
            T[i, R_NEXT] = C[C_TAPE_FREE]
            C[C_TAPE_FREE] = i
            C[C_LIVE_ROWS] -= 1
        else:
            if C[C_REC] != 0:
                rec_event(C, 3, EV_FREE, i, 0, 0)
            if S[i, S_KIND] == 0:
                c_free(S[i, S_ADDR])
                C[C_BYTES] -= S[i, S_NBYTES]
            elif S[i, S_KIND] == 3:
                i64_at(S[i, S_OCC], 1)[0] = 0       # the arena block is free again
            elif S[i, S_KIND] == 1:
                q = i64_at(C[C_EXTQ], C[C_STOR_CAP])
                q[C[C_EXTN]] = i
                C[C_EXTN] += 1
            S[i, S_ADDR] = 0
            S[i, S_NEXT] = C[C_STOR_FREE]
            C[C_STOR_FREE] = i
            C[C_LIVE_STOR] -= 1


@jit
def drain(C):
    """Release the ids whose Python wrappers died since the last compiled call
    (Tensor.__del__ queues them): their memory is reused by the very next op. The queue is
    a ring of id + 1; a slot still 0 has been claimed but not yet written, so the drain
    stops there and takes it next time."""
    cap = C[C_RELQ_CAP]
    q = i64_at(C[C_RELQ], cap)
    t = C[C_RELTAIL]
    while q[t] != 0:
        i = q[t] - 1
        q[t] = 0
        t = t + 1 if t + 1 < cap else 0
        decref(C, KIND_META, i)
    C[C_RELTAIL] = t


@jit_entry
def drain_queue(caddr):
    drain(ctx_of(caddr))
    return 0


@jit_entry
def release_id(caddr, t):
    """Drop one reference to tensor t now (a compiled replay's slot at its last use)."""
    decref(ctx_of(caddr), KIND_META, t)
    return 0


@jit_entry
def bump_version_id(caddr, t):
    """bump_version for a write Python made (nn.init, NumPy paths)."""
    bump_version(ctx_of(caddr), t)
    return 0


@jit_entry
def incref_meta(caddr, t):
    C = ctx_of(caddr)
    M = meta_of(C)
    M[t, M_REFS] += 1
    return 0


@jit_entry
def incref_row(caddr, r):
    C = ctx_of(caddr)
    T = tape_of(C)
    T[r, R_REFS] += 1
    return 0


@jit_entry
def decref_row(caddr, r):
    C = ctx_of(caddr)
    decref(C, KIND_ROW, r)
    return 0


# ---------------------------------------------------------------- typed loops
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


# ---------------------------------------------------------------- shapes
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


# ---------------------------------------------------------------- elementwise operands
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


# ---------------------------------------------------------------- recording
@jit
def clone_tensor(C, t):
    M = meta_of(C)
    nd = M[t, M_NDIM]
    c = meta_contiguous(C, M[t, M_DTYPE], nd, M[t, M_SHAPE:M_SHAPE + nd], False)
    if c < 0:
        return c
    copy_strided(C, t, data_addr(C, c))
    return c


@jit_native
def clone_entry(caddr, t):
    """clone_tensor for op_entry, which calls it through C_CLONE: the rare in-place op
    whose gradient needs self as it was then compiles it (seconds) instead of every
    cold start compiling it into op_entry."""
    return clone_tensor(ctx_of(caddr), t)


@jit
def _ranges_overlap(C, a, b):
    M = meta_of(C)
    if M[a, M_SID] != M[b, M_SID] or M[a, M_NUMEL] == 0 or M[b, M_NUMEL] == 0:
        return False
    same = M[a, M_OFF] == M[b, M_OFF] and M[a, M_NDIM] == M[b, M_NDIM]
    for d in range(M[a, M_NDIM]):
        same = (same and M[a, M_SHAPE + d] == M[b, M_SHAPE + d]
                and M[a, M_STRIDE + d] == M[b, M_STRIDE + d])
    if same:
        return False            # x.add_(x): each element reads only itself
    a0 = M[a, M_OFF]
    b0 = M[b, M_OFF]
    return a0 < b0 + span(M, b) and b0 < a0 + span(M, a)


@jit
def _inplace_check(C, op, a, b, grad_on, record):
    """PyTorch's refusals for an in-place write into a."""
    M = meta_of(C)
    if grad_on:
        if M[a, M_FLAGS] & FL_NOGRADVIEW and (record or M[M[a, M_BASE], M_FLAGS] & FL_REQ):
            return E_NOGRAD_VIEW_INPLACE
        if M[a, M_FLAGS] & FL_REQ and M[a, M_ROW] < 0:
            return E_LEAF_INPLACE
        if M[a, M_FLAGS] & (FL_VIEW | FL_PLAINVIEW) and record:
            return E_VIEW_INPLACE
    for d in range(M[a, M_NDIM]):
        # (an empty tensor has no elements to share memory, whatever its strides)
        if (M[a, M_STRIDE + d] == 0 and M[a, M_SHAPE + d] > 1 and M[a, M_NUMEL] > 0
                and not opinfo_of(C)[op, O_FLAGS] & OF_OVERLAP_OK):
            return E_SELF_OVERLAP
    if b >= 0 and _ranges_overlap(C, a, b):
        return E_OVERLAP
    return 0


@jit
def _log_op(C, op, ids, s, flags):
    nouts = C[C_NOUTS]
    n = 9 + nouts + EV_NIARG
    p = rec_at(C, n)
    if p < 0:
        return
    R = rec_log(C)
    R[p] = EV_OP
    R[p + 1] = n
    R[p + 2] = op
    for k in range(MAXIN):
        R[p + 3 + k] = ids[k]
    f64_at(C[C_REC] + (p + 6) * 8, 1)[0] = s
    R[p + 7] = flags
    R[p + 8] = nouts
    o = outs_of(C)
    for j in range(nouts):
        R[p + 9 + j] = o[j]
    ia = iargs_of(C)
    for j in range(EV_NIARG):
        R[p + 9 + nouts + j] = ia[j]


@jit_entry
def op_entry(caddr, op, a, b, s, flags):
    """Run op on tensors a, b (b < 0: absent or the Python scalar s); int arguments were
    written to iargs. Records a row when gradients are wanted. Returns the first output
    id (further outputs in outs[]) or a negative status; nothing changes on failure.
    With OPF_SOLO the outputs go to outs_solo[] instead (see layout.OPF_SOLO)."""
    C = ctx_of(caddr)
    solo = (flags & OPF_SOLO) != 0
    outs, nouts = C[C_OUTS], C[C_NOUTS]
    if solo:
        C[C_OUTS] = C[C_OUTS_SOLO]
    r = _op(caddr, op, a, b, s, flags & ~OPF_SOLO)     # (one call site: inlined once)
    if solo:
        C[C_OUTS] = outs
        C[C_NOUTS] = nouts
    return r


@jit
def _op(caddr, op, a, b, s, flags):
    """op_entry's work, with outs[] wherever C_OUTS points."""
    C = ctx_of(caddr)
    drain(C)
    M = meta_of(C)
    T = tape_of(C)
    if C[C_META_CAP] - C[C_LIVE_META] < 16 + C[C_OUTS_CAP]:
        return E_GROW_META
    if C[C_STOR_CAP] - C[C_LIVE_STOR] < 16 + C[C_OUTS_CAP]:
        return E_GROW_STOR
    if C[C_TAPE_CAP] - C[C_LIVE_ROWS] < 4:
        return E_GROW_TAPE
    want = C[C_WANT_ROWS]
    if want != 0:           # row-broadcast loops an earlier op wanted (call_ew): load them
        # (Python clears the mark when it loads them: a caller may drop this status and
        # call again)
        err_of(C)[0] = (want - 1) // NKSLOT
        err_of(C)[1] = (want - 1) % NKSLOT
        return E_NEED_KERNEL
    info = opinfo_of(C)
    ew = info[op, O_KIND] == KIND_EW
    dta = M[a, M_DTYPE]
    if ew and (dta != F32 and dta != F64):
        return E_DTYPE
    slot = op * NKSLOT + (1 if dta == F64 else 0)
    fwd = fwd_table(C)[slot]
    if fwd == 0:
        err_of(C)[0] = op
        err_of(C)[1] = slot - op * NKSLOT
        return E_NEED_KERNEL
    if info[op, O_TANGENT] > 0 and C[C_TANGENT] == 0:
        err_of(C)[0] = op
        err_of(C)[1] = KSLOT_TANGENT
        return E_NEED_KERNEL
    diff = info[op, O_DIFF]
    grad_on = (flags & 1) != 0
    inplace = (flags & 2) != 0

    ids = (a, b, iargs_of(C)[IA_IN2] if flags & OPF_IN2 else -1)     # (MAXIN of them)
    record = False
    need = 0          # what the gradients of the inputs that require grad will read
    if grad_on:
        for k in range(MAXIN):
            if ids[k] < 0 or not (diff >> k) & 1:
                continue
            if M[ids[k], M_FLAGS] & (FL_REQ | FL_STALE):
                if M[ids[k], M_FLAGS] & FL_STALE:
                    if is_stale_view(M, ids[k]) and not (inplace and k == 0):
                        err_of(C)[0] = ids[k]
                        return E_STALE_VIEW
                    if not M[ids[k], M_FLAGS] & FL_REQ:
                        continue
                record = True
                need |= info[op, O_SAVES_IF + k]
            elif requires_grad_through_base(M, ids[k]):
                record = True       # (with no edge to it: nothing to save for it)
    if inplace:
        if C[C_INPLACE_FN] == 0 or (record and need & 1 and C[C_CLONE] == 0):
            err_of(C)[0] = op
            err_of(C)[1] = KSLOT_INPLACE if C[C_INPLACE_FN] == 0 else KSLOT_CLONE
            return E_NEED_KERNEL
        st = call_native_i4(C[C_INPLACE_FN], caddr, a, b,
                            IP_CHECK | (IP_GRAD if grad_on else 0)
                            | (IP_RECORD if record else 0) | (op << IP_OP_SHIFT))
        if st < 0:
            return st
    r = row_new(C)
    if need:            # the versions of what will be saved, before any in-place write
        for k in range(MAXIN):
            if ids[k] >= 0 and (need >> k) & 1:
                T[r, R_IN + k * IW + IN_VER] = version_of(C, ids[k])
    T[r, R_OP] = op
    ia = iargs_of(C)
    for j in range(NIATTR):
        T[r, R_IATTR + j] = ia[j]
    fattr_of(C)[r] = s
    nin = 0
    for k in range(MAXIN):
        T[r, R_IN + k * IW + IN_ID] = ids[k]
        if ids[k] >= 0:
            nin = k + 1
    T[r, R_NIN] = nin

    self_copy = -1
    if inplace and record and need & 1:
        self_copy = call_native_i2(C[C_CLONE], caddr, a)   # the gradient needs self as it was
        if self_copy < 0:
            row_discard(C, r)
            return self_copy
        M[self_copy, M_REFS] += 1
        T[r, R_IN + IN_VER] = version_of(C, self_copy)
    C[C_INPLACE] = a if inplace else -1
    C[C_NOUTS] = 0
    if ew:
        st = ew_forward_prep(C, r, a, b)
        if st >= 0:
            outs_of(C)[0] = st
            C[C_NOUTS] = 1
            if info[op, O_TANGENT] > 0:
                st = call_native_i4(C[C_TANGENT], caddr, r, (1 if record else 0) | (diff << 1),
                                    info[op, O_TANGENT])
            if st >= 0:
                st = call_ew(C, fwd, fwd_table(C), slot + KSLOT_ROWS, False)
    else:
        st = call_kernel(fwd, caddr, r)
    C[C_INPLACE] = -1
    if st != K_OK:
        if st >= 0:
            err_of(C)[0] = op
            st = E_KERNEL
        if self_copy >= 0:
            decref(C, KIND_META, self_copy)
        if T[r, R_TAN] >= 0:
            decref(C, KIND_STOR, T[r, R_TAN])
        row_discard(C, r)
        return st
    outs = outs_of(C)
    nouts = C[C_NOUTS]
    if inplace:
        bump_version(C, a)
    else:
        for j in range(nouts):
            M[outs[j], M_REFS] += 1         # the Python wrapper about to be made
    if C[C_REC] != 0:
        _log_op(C, op, ids, s, flags)
    if not record:
        if not inplace:
            for j in range(nouts):      # a view made in grad mode of a tensor without a
                o = outs[j]             # history gets one if its base does; one made
                fl = M[o, M_FLAGS]      # under no_grad, or of such a view, is marked
                if fl & FL_HVIEW or not fl & (FL_PLAINVIEW | FL_VIEW):
                    continue
                if not grad_on or M[a, M_FLAGS] & FL_NOGRADVIEW:
                    M[o, M_FLAGS] |= FL_HVIEW | FL_NOGRADVIEW
                    stor_of(C)[M[o, M_SID], S_HVIEWS] += 1
                    if grad_on:                 # (named in PyTorch's message)
                        M[o, M_SRCOP] = op
                elif fl & FL_PLAINVIEW:
                    M[o, M_FLAGS] |= FL_HVIEW
                    stor_of(C)[M[o, M_SID], S_HVIEWS] += 1
        row_discard(C, r)
        return outs[0]

    for k in range(nin):
        t = ids[k]
        if t < 0:
            continue
        base = R_IN + k * IW
        if (diff >> k) & 1 and M[t, M_FLAGS] & FL_REQ:
            pr = M[t, M_ROW]
            if pr >= 0:
                T[r, base + IN_ROW] = pr
                T[r, base + IN_OIDX] = M[t, M_OIDX]
                T[pr, R_REFS] += 1
            else:
                T[r, base + IN_T] = t
                M[t, M_REFS] += 1
        if (need >> k) & 1:
            src = self_copy if (k == 0 and self_copy >= 0) else t
            al = meta_alias(C, src)
            M[al, M_REFS] = 1
            if src == self_copy:
                M[al, M_SRCOP] = M[a, M_SRCOP]
            T[r, base + IN_SAVED] = al
    if self_copy >= 0:
        decref(C, KIND_META, self_copy)
    if b < 0 and need & 2:
        T[r, R_STATE] |= RS_SCALAR

    ngrad = 0
    for j in range(nouts):
        o = outs[j]
        dto = M[o, M_DTYPE]
        if dto != F32 and dto != F64:
            continue
        if inplace:
            old = M[o, M_ROW]
            M[o, M_ROW] = r
            M[o, M_OIDX] = j
            T[r, R_REFS] += 1
            if old >= 0:
                decref(C, KIND_ROW, old)
        else:
            M[o, M_ROW] = r
            M[o, M_OIDX] = j
            T[r, R_REFS] += 1
            fl = M[o, M_FLAGS]
            nograd = ((fl & (FL_VIEW | FL_PLAINVIEW)) != 0
                      and (M[a, M_FLAGS] & FL_NOGRADVIEW) != 0)
            if nograd:          # a view, made in grad mode, of a view made under no_grad
                M[o, M_FLAGS] |= FL_NOGRADVIEW
                M[o, M_SRCOP] = op                  # (named in PyTorch's message)
            if not fl & FL_HVIEW and ((fl & FL_VIEW) != 0 or nograd):
                M[o, M_FLAGS] |= FL_HVIEW
                stor_of(C)[M[o, M_SID], S_HVIEWS] += 1
            if fl & FL_VIEW and is_multi_view(C, a):    # (PyTorch passes the rule on)
                M[o, M_FLAGS] |= FL_MULTIVIEW
        M[o, M_FLAGS] |= FL_REQ
        ngrad += 1
    o0 = outs[0]
    T[r, R_NOUT] = ngrad
    T[r, R_ODTYPE] = M[o0, M_DTYPE]
    T[r, R_ONDIM] = M[o0, M_NDIM]
    for d in range(MAXD):
        T[r, R_OSHAPE + d] = M[o0, M_SHAPE + d]
    if need & SAVE_OUT:
        al = meta_alias(C, outs[info[op, O_SAVED_OUT]])
        M[al, M_REFS] = 1
        T[r, R_OSAVED] = al
        T[r, R_OVER] = version_of(C, al)
    if inplace and stor_of(C)[M[a, M_SID], S_HVIEWS] > 0:
        call_native_i4(C[C_INPLACE_FN], caddr, a, r, 0)
    return outs[0]


@jit_native
def inplace_entry(caddr, a, x, what):
    """op_entry's in-place path, which it calls through C_INPLACE_FN: compiled into it,
    these lines cost a second of every cold start, for programs that may never write in
    place with the engine (the demo does not). what & IP_CHECK: before anything changes,
    PyTorch's refusals for a write into a (x: the other operand, -1 for none) and, when
    the op records (IP_RECORD), what re-deriving a's views will need. Else after the op
    recorded row x: re-derive the views' histories (_regen_views)."""
    C = ctx_of(caddr)
    if not what & IP_CHECK:
        _regen_views(C, a, x)
        return 0
    record = (what & IP_RECORD) != 0
    st = _inplace_check(C, what >> IP_OP_SHIFT, a, x, (what & IP_GRAD) != 0, record)
    if st < 0 or not record:
        return st
    return _views_ready(C, a)


@jit
def _views_ready(C, a):
    """Before an in-place op records on a: what re-deriving the histories of a's views
    will need (_regen_views), so that nothing changes when it is not there."""
    M = meta_of(C)
    n = stor_of(C)[M[a, M_SID], S_HVIEWS]
    if n == 0:
        return 0
    if not is_contiguous(M, a):
        k = _views_to_regen(C, a)
        if k > 0:
            err_of(C)[0] = k
            return E_VIEWS_LAYOUT
    op = C[C_AS_STRIDED]
    slot = op * NKSLOT + (1 if M[a, M_DTYPE] == F64 else 0)
    if fwd_table(C)[slot] == 0:
        err_of(C)[0] = op
        err_of(C)[1] = slot - op * NKSLOT
        return E_NEED_KERNEL
    if C[C_TAPE_CAP] - C[C_LIVE_ROWS] < 4 + n:
        return E_GROW_TAPE
    return 0


@jit
def _views_to_regen(C, a):
    """How many of a's views _regen_views will re-derive (a storage's count includes
    views made under no_grad, which it only marks stale)."""
    M = meta_of(C)
    n = 0
    for u in counted_views(C, M[a, M_SID]):
        if M[u, M_BASE] == a and not M[u, M_FLAGS] & FL_NOGRADVIEW and not is_multi_view(C, u):
            n += 1
    return n


@jit
def _regen_views(C, a, r):
    """PyTorch's rule for the views of a tensor modified in place: each view's history
    becomes an as_strided of the base's new one (row r, a's in-place row), so a
    gradient through the view reaches what the base holds now, not what it held when
    the view was made. (PyTorch re-derives it when the view is next used; doing it now
    is the same, as nothing else can change the base's history in between.) a is
    contiguous (_views_ready), so a view element's offset from a's is its position in
    a's contiguous gradient."""
    M = meta_of(C)
    T = tape_of(C)
    op = C[C_AS_STRIDED]
    for u in counted_views(C, M[a, M_SID]):
        old = M[u, M_ROW]
        if M[u, M_BASE] != a or M[u, M_FLAGS] & (FL_NOGRADVIEW | FL_STALE):
            continue                # (those went stale in bump_version)
        if M[u, M_FLAGS] & FL_PLAINVIEW:        # its base gains a history: so does it
            M[u, M_FLAGS] = (M[u, M_FLAGS] & ~FL_PLAINVIEW) | FL_VIEW | FL_REQ
        elif old < 0 or not M[u, M_FLAGS] & FL_REQ:
            continue
        q = row_new(C)
        T[q, R_OP] = op
        T[q, R_NIN] = 1
        T[q, R_IN + IN_ROW] = r
        T[q, R_IN + IN_OIDX] = M[a, M_OIDX]
        T[r, R_REFS] += 1
        nd = M[u, M_NDIM]
        for j in range(NIATTR):
            T[q, R_IATTR + j] = 0
        T[q, R_IATTR] = M[u, M_OFF] - M[a, M_OFF]
        for d in range(nd):
            T[q, R_IATTR + 1 + d] = M[u, M_STRIDE + d]
        fattr_of(C)[q] = 0.0
        T[q, R_NOUT] = 1
        T[q, R_ODTYPE] = M[u, M_DTYPE]
        T[q, R_ONDIM] = nd
        for d in range(MAXD):
            T[q, R_OSHAPE + d] = M[u, M_SHAPE + d]
        M[u, M_ROW] = q
        M[u, M_OIDX] = 0
        T[q, R_REFS] += 1
        if old >= 0:
            decref(C, KIND_ROW, old)


# ---------------------------------------------------------------- the sweep
@jit
def out_numel(T, r):
    n = 1
    for d in range(T[r, R_ONDIM]):
        n *= T[r, R_OSHAPE + d]
    return n


@jit
def row_grad_addr(C, r, k):
    """Address of the gradient of output k of row r (allocated zeroed on first use)."""
    T = tape_of(C)
    dt = T[r, R_ODTYPE]
    n = out_numel(T, r)
    if T[r, R_GBUF] < 0 and not new_row_gbuf(C, r, True):
        return 0
    return stor_of(C)[T[r, R_GBUF], S_ADDR] + k * n * itemsize(dt)


@jit
def new_row_gbuf(C, r, zero):
    """Make row r's gradient storage (all its outputs); False when out of memory."""
    T = tape_of(C)
    sid = stor_new(C, bytes_of(out_numel(T, r), T[r, R_NOUT], itemsize(T[r, R_ODTYPE])), zero)
    if sid < 0:
        return False
    stor_of(C)[sid, S_REFS] = 1
    T[r, R_GBUF] = sid
    return True


@jit
def new_leaf_grad(C, t, zero):
    """Make leaf t's .grad tensor; its id, or < 0 when out of memory."""
    M = meta_of(C)
    nd = M[t, M_NDIM]
    g = meta_contiguous(C, M[t, M_DTYPE], nd, M[t, M_SHAPE:M_SHAPE + nd], zero)
    if g >= 0:
        M[g, M_REFS] = 1
        M[t, M_GRAD] = g
    return g


@jit
def leaf_grad_addr(C, t):
    """Where a gradient for tensor t itself lands: .grad (backward) or the capture
    buffer (autograd.grad); 0 when nobody wants it."""
    M = meta_of(C)
    S = stor_of(C)
    dt = M[t, M_DTYPE]
    if C[C_MODE] == MODE_GRAD or M[t, M_FLAGS] & FL_HOOK:
        if C[C_MODE] == MODE_GRAD and not M[t, M_FLAGS] & FL_CAPTURE:
            return 0
        sid = M[t, M_GTMP]
        if sid < 0:
            sid = stor_new(C, bytes_of(M[t, M_NUMEL], 1, itemsize(dt)), True)
            if sid < 0:
                return 0
            S[sid, S_REFS] = 1
            M[t, M_GTMP] = sid
        return S[sid, S_ADDR]
    return grad_attr_addr(C, t)


@jit
def grad_attr_addr(C, t):
    """Address of t.grad's data, made zeroed on first use (its version moves otherwise);
    0 when out of memory."""
    M = meta_of(C)
    g = M[t, M_GRAD]
    if g < 0:
        g = new_leaf_grad(C, t, True)
        if g < 0:
            return 0
    else:
        bump_version(C, g)
    return data_addr(C, g)


@jit
def edge_grad_addr(C, r, k):
    """Address of a contiguous buffer, shaped like input k of row r, into which the
    row's backward kernel accumulates that input's gradient; 0: no gradient wanted."""
    T = tape_of(C)
    base = R_IN + k * IW
    pr = T[r, base + IN_ROW]
    if pr >= 0:     # (a row autograd.grad pruned is outside the sweep: nothing goes there)
        if not T[pr, R_STATE] & RS_MARK:
            return 0
        return row_grad_addr(C, pr, T[r, base + IN_OIDX])
    t = T[r, base + IN_T]
    if t < 0:
        return 0
    return leaf_grad_addr(C, t)


@jit
def input_shape(C, r, k, out):
    """Shape of input k of row r (into out); returns ndim. Works after the input died."""
    T = tape_of(C)
    M = meta_of(C)
    base = R_IN + k * IW
    pr = T[r, base + IN_ROW]
    if pr >= 0:
        nd = T[pr, R_ONDIM]
        for d in range(nd):
            out[d] = T[pr, R_OSHAPE + d]
        return nd
    t = T[r, base + IN_T]
    if t < 0:
        t = T[r, base + IN_SAVED]
    nd = M[t, M_NDIM]
    for d in range(nd):
        out[d] = M[t, M_SHAPE + d]
    return nd


@jit
def _deliver(C, m, r):
    """Copy row r's finished output gradient into tensor m's retained/captured slot."""
    M = meta_of(C)
    T = tape_of(C)
    n = out_numel(T, r)
    src = row_grad_addr(C, r, M[m, M_OIDX])
    if C[C_MODE] == MODE_GRAD and M[m, M_FLAGS] & FL_CAPTURE:
        dst = leaf_grad_addr(C, m)
        if dst != 0:
            add_into(T[r, R_ODTYPE], dst, src, n)
    if M[m, M_FLAGS] & FL_RETAIN:      # (autograd.grad fills retained grads too, as PyTorch)
        dst = grad_attr_addr(C, m)
        if dst != 0:
            add_into(T[r, R_ODTYPE], dst, src, n)


@jit
def _unmark(T, rows, n):
    for j in range(n):
        r = rows[j]
        T[r, R_STATE] &= ~(RS_MARK | RS_NORUN)
        T[r, R_DEPS] = 0


@jit
def _push_ready_inputs(T, r, stack, ns):
    """Row r is done: each input row it was the last waiting consumer of goes on the
    stack. Returns the new stack size. (An input autograd.grad pruned waits on nothing:
    its count stays 0 for later sweeps.)"""
    for k in range(T[r, R_NIN]):
        pr = T[r, R_IN + k * IW + IN_ROW]
        if pr >= 0 and T[pr, R_STATE] & RS_MARK:
            T[pr, R_DEPS] -= 1
            if T[pr, R_DEPS] == 0:
                stack[ns] = pr
                ns += 1
    return ns


@jit_native
def prune_entry(caddr, nm):
    """_prune_to_captures over the sweep's marked rows, for sweep, which calls it through
    C_PRUNE_FN: compiled into it, these lines cost a cold start's backward() for what
    only autograd.grad needs."""
    C = ctx_of(caddr)
    cap = C[C_SW_CAP]
    B = i64_at(C[C_SW_BUF], 4 * cap)
    return _prune_to_captures(C, B[3 * cap:4 * cap], B[0:cap], nm)


@jit
def _prune_to_captures(C, rows, stack, nm):
    """autograd.grad: keep only the marked rows on a path to a captured tensor, as
    PyTorch's engine does, so an unrelated branch is neither run (its hooks, its version
    checks, its release) nor charged. A kept row is needed (an input leads to a capture)
    or only captured at (RS_NORUN). Orders the rows consumers-first with R_DEPS (Kahn),
    decides them producers-first, and returns the kept count, compacted in rows."""
    T = tape_of(C)
    M = meta_of(C)
    ns = 0
    for j in range(nm):
        if T[rows[j], R_DEPS] == 0:
            stack[ns] = rows[j]
            ns += 1
    n = 0
    while ns > 0:
        ns -= 1
        r = stack[ns]
        rows[n] = r
        n += 1
        ns = _push_ready_inputs(T, r, stack, ns)
    for j in range(nm):
        r = rows[j]
        for k in range(T[r, R_NIN]):
            pr = T[r, R_IN + k * IW + IN_ROW]
            if pr >= 0:
                T[pr, R_DEPS] += 1
    for j in range(nm - 1, -1, -1):
        r = rows[j]
        needed = False
        for k in range(T[r, R_NIN]):
            pr = T[r, R_IN + k * IW + IN_ROW]
            t = T[r, R_IN + k * IW + IN_T]
            if pr >= 0:
                needed = needed or (T[pr, R_STATE] & RS_MARK) != 0
            elif t >= 0:
                needed = needed or (M[t, M_FLAGS] & FL_CAPTURE) != 0
        if needed:
            T[r, R_STATE] &= ~RS_NORUN
        elif not T[r, R_STATE] & RS_NORUN:
            T[r, R_STATE] &= ~RS_MARK
            T[r, R_DEPS] = 0
    kept = 0
    for j in range(nm):
        r = rows[j]
        if T[r, R_STATE] & RS_MARK:
            rows[kept] = r
            kept += 1
    return kept


@jit_entry
def sweep(caddr, nroots, ncap, mode, retain):
    """backward()/autograd.grad(): iargs holds root ids [0:nroots], their seed ids
    (-1: ones) [nroots:2*nroots] and captured ids [2*nroots:2*nroots+ncap]. Marks the
    rows reachable from the roots, checks versions and freed buffers before touching
    anything, then runs the rows in dependency order (each after all its consumers)."""
    C = ctx_of(caddr)
    if mode == MODE_GRAD and C[C_PRUNE_FN] == 0:
        err_of(C)[1] = KSLOT_PRUNE
        return E_NEED_KERNEL
    drain(C)
    M = meta_of(C)
    T = tape_of(C)
    I = iargs_of(C)
    E = err_of(C)
    bwd = bwd_table(C)
    C[C_MODE] = mode
    C[C_SW_REFUSED] = C[C_NOMEM_COUNT]
    info = opinfo_of(C)
    # the marked rows and the marking stack live in the regions of the pausable state
    # that hold them later (Python sizes them past the live rows): nothing to allocate
    cap = C[C_SW_CAP]
    B = i64_at(C[C_SW_BUF], 4 * cap)
    rows = B[3 * cap:4 * cap]
    stack = B[0:cap]
    nm = 0
    ns = 0
    for i in range(nroots):
        r = M[I[i], M_ROW]
        if r >= 0 and not T[r, R_STATE] & RS_MARK:
            T[r, R_STATE] |= RS_MARK
            rows[nm] = r
            nm += 1
            stack[ns] = r
            ns += 1
    while ns > 0:
        ns -= 1
        r = stack[ns]
        for k in range(T[r, R_NIN]):
            pr = T[r, R_IN + k * IW + IN_ROW]
            if pr >= 0:
                T[pr, R_DEPS] += 1
                if not T[pr, R_STATE] & RS_MARK:
                    T[pr, R_STATE] |= RS_MARK
                    rows[nm] = pr
                    nm += 1
                    stack[ns] = pr
                    ns += 1
    if mode == MODE_GRAD:
        for i in range(ncap):
            r = M[I[2 * nroots + i], M_ROW]
            if r >= 0 and T[r, R_STATE] & RS_MARK:
                T[r, R_STATE] |= RS_NORUN       # captured at (until found needed)
        nm = call_native_i2(C[C_PRUNE_FN], caddr, nm)
    # every check before any gradient is written: room for a gradient buffer per row and
    # per leaf edge, kernels present, saved tensors intact
    need = nroots + ncap + 8
    for j in range(nm):
        r = rows[j]
        need += 1
        for k in range(T[r, R_NIN]):
            if T[r, R_IN + k * IW + IN_T] >= 0:
                need += 1
    if C[C_STOR_CAP] - C[C_LIVE_STOR] < need:
        _unmark(T, rows, nm)
        return E_GROW_STOR
    if C[C_META_CAP] - C[C_LIVE_META] < need:
        _unmark(T, rows, nm)
        return E_GROW_META
    for j in range(nm):
        r = rows[j]
        op = T[r, R_OP]
        if T[r, R_STATE] & RS_NORUN:
            continue
        if T[r, R_STATE] & RS_RELEASED:
            _unmark(T, rows, nm)
            E[0] = r
            return E_FREED
        # gradient buffers no allocation can hold (a huge expanded view's): refused now,
        # before a row runs and frees what it saved
        nb = bytes_of(out_numel(T, r), T[r, R_NOUT], itemsize(T[r, R_ODTYPE]))
        for k in range(T[r, R_NIN]):
            t = T[r, R_IN + k * IW + IN_T]
            if t >= 0 and nb >= 0 and nb <= C[C_MAX_BYTES]:
                nb = bytes_of(M[t, M_NUMEL], 1, itemsize(M[t, M_DTYPE]))
        if nb < 0 or nb > C[C_MAX_BYTES]:
            _unmark(T, rows, nm)
            E[0] = r
            return _refused_sweep(C, nb)
        slot = op * NKSLOT + (1 if T[r, R_ODTYPE] == F64 else 0)
        if bwd[slot] == 0 and info[op, O_KIND] != KIND_PY:
            _unmark(T, rows, nm)
            E[0] = op
            E[1] = slot - op * NKSLOT
            return E_NEED_KERNEL
        for k in range(-1, T[r, R_NIN]):
            if k < 0:
                sv = T[r, R_OSAVED]
                ver = T[r, R_OVER]
            else:
                sv = T[r, R_IN + k * IW + IN_SAVED]
                ver = T[r, R_IN + k * IW + IN_VER]
            if sv >= 0 and version_of(C, sv) != ver:
                _unmark(T, rows, nm)
                E[0] = r
                E[1] = sv
                E[2] = version_of(C, sv)
                E[3] = ver
                E[4] = k
                return E_VERSION
    if C[C_REC] != 0:
        n = 6 + 2 * nroots
        p = rec_at(C, n)
        if p >= 0:
            R = rec_log(C)
            R[p] = EV_SWEEP
            R[p + 1] = n
            R[p + 2] = nroots
            R[p + 3] = ncap
            R[p + 4] = mode
            R[p + 5] = retain
            for i in range(2 * nroots):
                R[p + 6 + i] = I[i]
    # the state that must survive a pause for Python lives in buffers Python sized
    W_ = i64_at(C[C_SW_STATE], SWW)
    deliver = B[cap:2 * cap]
    nd_ = 0
    for i in range(ncap):
        m = I[2 * nroots + i]
        B[2 * cap + i] = m
        r = M[m, M_ROW]
        if r >= 0 and T[r, R_STATE] & RS_MARK:
            deliver[nd_] = m
            nd_ += 1
    if C[C_NRETAIN] > 0:
        for m in range(C[C_META_CAP]):
            if (M[m, M_REFS] > 0 and M[m, M_FLAGS] & FL_RETAIN
                    and not (mode == MODE_GRAD and M[m, M_FLAGS] & FL_CAPTURE)):
                r = M[m, M_ROW]
                if r >= 0 and T[r, R_STATE] & RS_MARK:
                    deliver[nd_] = m
                    nd_ += 1
    # seeds
    for i in range(nroots):
        t = I[i]
        seed = I[nroots + i]
        r = M[t, M_ROW]
        if r >= 0:
            if not T[r, R_STATE] & RS_MARK:     # (pruned by autograd.grad)
                continue
            dst = row_grad_addr(C, r, M[t, M_OIDX])
        else:
            dst = leaf_grad_addr(C, t)
        if dst == 0:
            continue
        if seed < 0:
            add_one(M[t, M_DTYPE], dst, M[t, M_NUMEL])
        else:
            add_into(M[t, M_DTYPE], dst, data_addr(C, seed), M[t, M_NUMEL])
    ns = 0
    for j in range(nm):
        r = rows[j]
        if T[r, R_DEPS] == 0:
            B[ns] = r
            ns += 1
    W_[SW_NS] = ns
    W_[SW_ND] = nd_
    W_[SW_NCAP] = ncap
    W_[SW_NM] = nm
    W_[SW_RETAIN] = retain
    W_[SW_STATUS] = 0
    W_[SW_PENDING] = -1
    W_[SW_ACTIVE] = 1
    return _sweep_loop(caddr)


@jit
def _sweep_loop(caddr):
    """Run the marked rows in dependency order. A row whose backward is Python's (an
    autograd.Function) or whose outputs have hooks makes the loop save its state and
    return E_CALLBACK; Python does its part and calls sweep_resume, which finishes that
    row and goes on."""
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    E = err_of(C)
    bwd = bwd_table(C)
    info = opinfo_of(C)
    cap = C[C_SW_CAP]
    B = i64_at(C[C_SW_BUF], 4 * cap)
    W_ = i64_at(C[C_SW_STATE], SWW)
    stack = B[0:cap]
    deliver = B[cap:2 * cap]
    ns = W_[SW_NS]
    nd_ = W_[SW_ND]
    status = W_[SW_STATUS]
    retain = W_[SW_RETAIN] != 0
    pending = W_[SW_PENDING]
    W_[SW_PENDING] = -1
    while ns > 0 or pending >= 0:
        if pending >= 0:
            r = pending
            pending = -1
            resumed = True
        else:
            ns -= 1
            r = stack[ns]
            resumed = False
        norun = (T[r, R_STATE] & RS_NORUN) != 0
        if T[r, R_GBUF] >= 0 and status == 0:
            op = T[r, R_OP]
            py = info[op, O_KIND] == KIND_PY
            if ((py and not norun) or T[r, R_STATE] & RS_HOOK) and not resumed:
                W_[SW_NS] = ns
                W_[SW_ND] = nd_
                W_[SW_STATUS] = status
                W_[SW_PENDING] = r
                E[0] = r
                E[1] = ((CB_FUNCTION if py and not norun else 0)
                        | (CB_HOOKS if T[r, R_STATE] & RS_HOOK else 0))
                return E_CALLBACK
            for q in range(nd_):
                if M[deliver[q], M_ROW] == r:
                    _deliver(C, deliver[q], r)
            if not py and not norun:    # (a Function's backward already ran, in Python)
                slot = op * NKSLOT + (1 if T[r, R_ODTYPE] == F64 else 0)
                fn = bwd[slot]
                if info[op, O_KIND] == KIND_EW:
                    ew_backward_prep(C, r)
                    st = call_ew(C, fn, bwd, slot + KSLOT_ROWS, True)
                else:
                    st = call_kernel(fn, caddr, r)
                if st != K_OK:
                    status = st if st < 0 else E_KERNEL
                    E[0] = r
        if status == 0 and C[C_NOMEM_COUNT] != C[C_SW_REFUSED]:
            status = E_NOMEM        # (a gradient buffer of this row or a seed was refused)
            E[0] = r
        T[r, R_STATE] &= ~(RS_MARK | RS_NORUN)
        if T[r, R_GBUF] >= 0:
            sid = T[r, R_GBUF]
            T[r, R_GBUF] = -1
            decref(C, KIND_STOR, sid)
        if norun:           # (its inputs were pruned: nothing waits on it)
            continue
        ns = _push_ready_inputs(T, r, stack, ns)
        if not retain:
            had = (T[r, R_STATE] & RS_SCALAR) != 0
            for k in range(T[r, R_NIN]):
                sv = T[r, R_IN + k * IW + IN_SAVED]
                if sv >= 0:
                    T[r, R_IN + k * IW + IN_SAVED] = -1
                    decref(C, KIND_META, sv)
                    had = True
            if T[r, R_OSAVED] >= 0:
                sv = T[r, R_OSAVED]
                T[r, R_OSAVED] = -1
                decref(C, KIND_META, sv)
                had = True
            if T[r, R_TAN] >= 0:
                sid = T[r, R_TAN]
                T[r, R_TAN] = -1
                decref(C, KIND_STOR, sid)
                had = True
            if had:
                T[r, R_STATE] |= RS_RELEASED
    W_[SW_ACTIVE] = 0
    if status == 0 and C[C_NOMEM_COUNT] != C[C_SW_REFUSED]:
        status = E_NOMEM
    if status < 0:
        return status
    # captured gradients become tensors the caller wraps
    outs = outs_of(C)
    for i in range(W_[SW_NCAP]):
        m = B[2 * cap + i]
        outs[i] = take_gtmp(C, m)
    return 0


@jit
def take_gtmp(C, m):
    """The gradient gathered in tensor m's M_GTMP buffer as a new tensor (refcount 1 for
    its wrapper), or -1."""
    M = meta_of(C)
    S = stor_of(C)
    sid = M[m, M_GTMP]
    if sid < 0:
        return -1
    g = meta_new(C, sid, 0, M[m, M_NDIM], M[m, M_DTYPE])
    S[sid, S_REFS] -= 1        # ownership moves from the slot to g
    M[m, M_GTMP] = -1
    for d in range(M[m, M_NDIM]):
        M[g, M_SHAPE + d] = M[m, M_SHAPE + d]
    set_contiguous_strides(M, g)
    M[g, M_REFS] = 1
    return g


@jit_entry
def sweep_resume(caddr):
    """Go on with a sweep paused by E_CALLBACK (Python has done the row's part)."""
    C = ctx_of(caddr)
    C[C_SW_REFUSED] = C[C_NOMEM_COUNT]      # (the callback's own ops raised for theirs)
    return _sweep_loop(caddr)


@jit_entry
def sweep_abort(caddr):
    """A Python callback failed: unmark every row of the paused sweep and free its
    gradient buffers, so later sweeps start clean."""
    C = ctx_of(caddr)
    T = tape_of(C)
    cap = C[C_SW_CAP]
    B = i64_at(C[C_SW_BUF], 4 * cap)
    W_ = i64_at(C[C_SW_STATE], SWW)
    if W_[SW_ACTIVE] == 0:
        return 0
    for j in range(W_[SW_NM]):
        r = B[3 * cap + j]
        T[r, R_STATE] &= ~(RS_MARK | RS_NORUN)
        T[r, R_DEPS] = 0
        if T[r, R_GBUF] >= 0:
            sid = T[r, R_GBUF]
            T[r, R_GBUF] = -1
            decref(C, KIND_STOR, sid)
    W_[SW_ACTIVE] = 0
    W_[SW_PENDING] = -1
    return 0


@jit_entry
def grad_of_row(caddr, r, k):
    """A tensor over the gradient of output k of row r (in the paused sweep), sharing its
    buffer: what hooks and a Function's backward receive. -1 if there is none."""
    C = ctx_of(caddr)
    T = tape_of(C)
    M = meta_of(C)
    sid = T[r, R_GBUF]
    if sid < 0:
        return -1
    nd = T[r, R_ONDIM]
    g = meta_new(C, sid, k * out_numel(T, r), nd, T[r, R_ODTYPE])
    if g < 0:
        return g
    for d in range(nd):
        M[g, M_SHAPE + d] = T[r, R_OSHAPE + d]
    set_contiguous_strides(M, g)
    M[g, M_REFS] = 1            # (meta_new took the storage reference)
    return g


@jit_entry
def add_to_edge(caddr, r, k, g):
    """Accumulate tensor g (contiguous, the input's shape and dtype: Python checked) into
    the gradient of input k of row r; 0, or 1 when that input wants no gradient."""
    C = ctx_of(caddr)
    M = meta_of(C)
    ga = edge_grad_addr(C, r, k)
    if ga == 0:
        return 1
    add_into(M[g, M_DTYPE], ga, data_addr(C, g), M[g, M_NUMEL])
    return 0


@jit_entry
def take_leaf_hook_grad(caddr, t):
    return take_gtmp(ctx_of(caddr), t)


# ---------------------------------------------------------------- creation
@jit_entry
def new_tensor(caddr, dt, nd, zero):
    """A contiguous leaf of shape iargs[0:nd]; refcount 1 for its wrapper."""
    C = ctx_of(caddr)
    drain(C)
    t = meta_contiguous(C, dt, nd, iargs_of(C)[:nd], zero)
    if t < 0:
        return t
    meta_of(C)[t, M_REFS] = 1
    return t


@jit_entry
def adopt(caddr, addr, nbytes, dt, nd, off):
    """A tensor over memory Python owns (from_numpy): shape iargs[0:nd], strides
    iargs[nd:2nd] in elements, element offset off from addr."""
    C = ctx_of(caddr)
    drain(C)
    S = stor_of(C)
    M = meta_of(C)
    sid = C[C_STOR_FREE]
    C[C_STOR_FREE] = S[sid, S_NEXT]
    S[sid, S_ADDR] = addr
    S[sid, S_NBYTES] = nbytes
    S[sid, S_REFS] = 0
    S[sid, S_VERSION] = 0
    S[sid, S_KIND] = 1
    S[sid, S_HVIEWS] = 0
    C[C_LIVE_STOR] += 1
    t = meta_new(C, sid, off, nd, dt)
    ia = iargs_of(C)
    n = 1
    for d in range(nd):
        M[t, M_SHAPE + d] = ia[d]
        M[t, M_STRIDE + d] = ia[nd + d]
        n *= ia[d]
    M[t, M_NUMEL] = n
    M[t, M_REFS] = 1
    return t


@jit_entry
def data_alias(caddr, t):
    """.data: shares storage but counts versions on its own (changes through it are
    invisible to autograd, as in PyTorch)."""
    C = ctx_of(caddr)
    drain(C)
    S = stor_of(C)
    M = meta_of(C)
    a = meta_alias(C, t)
    M[a, M_SRCOP] = -1
    M[a, M_REFS] = 1
    sid = C[C_STOR_FREE]
    C[C_STOR_FREE] = S[sid, S_NEXT]
    S[sid, S_ADDR] = 0
    S[sid, S_NBYTES] = 0
    S[sid, S_REFS] = 1
    S[sid, S_VERSION] = 0
    S[sid, S_KIND] = 2
    S[sid, S_HVIEWS] = 0
    C[C_LIVE_STOR] += 1
    vs = M[a, M_VSID]
    M[a, M_VSID] = sid
    if vs != M[a, M_SID]:
        decref(C, KIND_STOR, vs)
    if C[C_REC] != 0:
        rec_event(C, 4, EV_ALIAS, 1, t, a)
    return a


@jit_entry
def detach(caddr, t):
    C = ctx_of(caddr)
    drain(C)
    if C[C_META_CAP] - C[C_LIVE_META] < 16 + C[C_OUTS_CAP]:
        return E_GROW_META      # (Tensor.detach's one-call path: E.call grows, retries)
    a = meta_alias(C, t)
    M = meta_of(C)
    M[a, M_SRCOP] = -1
    M[a, M_REFS] = 1
    if C[C_REC] != 0:
        rec_event(C, 4, EV_ALIAS, 0, t, a)
    return a


@jit_entry
def contiguous_copy(caddr, t):
    """A contiguous copy without history (used by .grad setters, seeds, numpy export)."""
    C = ctx_of(caddr)
    drain(C)
    c = clone_tensor(C, t)
    if c < 0:
        return c
    meta_of(C)[c, M_REFS] = 1
    return c
