"""The engine's memory: storages, meta rows and tape rows made and freed, their reference
counts, the recording log, and the byte counts (checked for overflow) every allocation
goes through. Compiled once (cache=True); it reaches the tables through the ctx array's
addresses."""
from .layout import *  # noqa: F401,F403  (column names are the vocabulary of this file)
from .lowlevel import (jit, jit_entry, ctx_of, meta_of, stor_of, tape_of, err_of, work_of, i64_at,
                       u8_at, c_malloc, c_calloc, c_free)


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
def refused_sweep(C, nbytes):
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
