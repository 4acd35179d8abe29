"""The DataLoader's TensorDataset batch in one compiled call: a fresh contiguous tensor per
dataset tensor, its rows gathered from the dataset's at the batch's indices.

Each batch owns its storage, as a stacked batch does in PyTorch. The call first releases
the tensors Python let go of (the previous batches, once the loop drops them), so the
allocator hands their blocks, still in cache, to the next batch. Rows are copied while
the rows a few indices ahead are prefetched: a shuffled gather reads rows at random
places, which the hardware prefetcher cannot guess."""
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic

from ..._engine.layout import (C_META_CAP, C_LIVE_META, C_STOR_CAP, C_LIVE_STOR, C_EXTN,
                               M_NDIM, M_DTYPE, M_FLAGS, M_ROW, M_BASE, M_SHAPE, M_STRIDE,
                               M_REFS, FL_REQ, MAXD, E_GROW_META, E_GROW_STOR)
from ..._engine.lowlevel import jit, jit_entry, ctx_of, meta_of, i64_at, u8_at
from ..._engine.memory import (KIND_META, data_addr, decref, drain, itemsize,
                               meta_contiguous)

TW = 2 + MAXD           # a tensor's row of the table: source id, batch id, shape scratch
GATHER_SIG = "int64(int64, int64, int64, int64, int64)"

# statuses besides the engine's (E_GROW_*, E_NOMEM): Python takes the general path
NOT_PLAIN = -1001       # a tensor requires grad, or its rows are not contiguous
OUT_OF_RANGE = -1002    # an index outside [-len, len) of a tensor
FLUSH = 1               # done; adopted arrays were released (Python forgets them)

PREFETCH_AHEAD = 2      # rows prefetched ahead of the one being copied


@intrinsic
def _prefetch(typingctx, addr):
    """A read prefetch of the cache line at addr into every cache level (a hint: it
    never faults)."""
    sig = types.void(types.int64)

    def codegen(context, builder, signature, args):
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        # (the unmangled name: LLVM's auto-upgrade gives it the mangling of its pointer
        # type, typed (LLVM 14, Numba 0.60) or opaque)
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch")
        builder.call(fn, [builder.inttoptr(args[0], i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()
    return sig, codegen


@jit
def _plain_rows(M, t):
    """Bytes of one row of t (its elements after dim 0 contiguous), or -1 when t
    requires grad (its gather is recorded) or its rows are strided."""
    if M[t, M_FLAGS] & FL_REQ or M[t, M_ROW] >= 0:
        return -1
    b = M[t, M_BASE]
    if b >= 0 and M[b, M_FLAGS] & FL_REQ:
        return -1
    nd = M[t, M_NDIM]
    if nd < 1:
        return -1
    expect = 1
    for d in range(nd - 1, 0, -1):
        n = M[t, M_SHAPE + d]
        if n != 1 and M[t, M_STRIDE + d] != expect:
            return -1
        expect *= n
    return expect * itemsize(M[t, M_DTYPE])


@jit
def _copy_rows(src, step, I, n, length, dst, rb):
    """Rows I[0:n] (already checked to be in [-length, length)) of the rows at src, step
    bytes apart, to dst, rb bytes each: in 8-byte words when every row is aligned to
    them (a label is then one load and one store), else in bytes."""
    lines = rb if rb < 4096 else 4096           # (a long row streams by itself)
    for i in range(min(PREFETCH_AHEAD, n)):
        r = I[i] + length if I[i] < 0 else I[i]
        for b in range(0, lines, 64):
            _prefetch(src + r * step + b)
    words = (src | step | dst | rb) & 7 == 0
    w = rb >> 3
    for i in range(n):
        if i + PREFETCH_AHEAD < n:
            r = I[i + PREFETCH_AHEAD]
            r = r + length if r < 0 else r
            for b in range(0, lines, 64):
                _prefetch(src + r * step + b)
        r = I[i] + length if I[i] < 0 else I[i]
        if words:
            s8 = i64_at(src + r * step, w)
            d8 = i64_at(dst + i * rb, w)
            for j in range(w):
                d8[j] = s8[j]
        else:
            s = u8_at(src + r * step, rb)
            d = u8_at(dst + i * rb, rb)
            for j in range(rb):
                d[j] = s[j]


@jit_entry
def gather_batch(caddr, tab, k, idx, n):
    """Gather rows idx[0:n] of the k tensors whose ids are in column 0 of the table at
    tab (k rows of TW) into fresh contiguous tensors, whose ids (held once, for their
    wrappers) go to column 1. Returns 0 or FLUSH, or a status with nothing made."""
    C = ctx_of(caddr)
    drain(C)
    if C[C_META_CAP] - C[C_LIVE_META] < k + 16:
        return E_GROW_META
    if C[C_STOR_CAP] - C[C_LIVE_STOR] < k + 16:
        return E_GROW_STOR
    M = meta_of(C)
    T = i64_at(tab, k * TW)
    I = i64_at(idx, n)
    for j in range(k):
        t = T[j * TW]
        if _plain_rows(M, t) < 0:
            return NOT_PLAIN
        length = M[t, M_SHAPE]
        for i in range(n):
            if I[i] < -length or I[i] >= length:
                return OUT_OF_RANGE
    for j in range(k):
        t = T[j * TW]
        nd = M[t, M_NDIM]
        shape = T[j * TW + 2:j * TW + 2 + nd]
        shape[0] = n
        for d in range(1, nd):
            shape[d] = M[t, M_SHAPE + d]
        o = meta_contiguous(C, M[t, M_DTYPE], nd, shape, False)
        if o < 0:
            for q in range(j):                  # (E_NOMEM: give back what was made)
                decref(C, KIND_META, T[q * TW + 1])
            return o
        M[o, M_REFS] = 1
        T[j * TW + 1] = o
        rb = _plain_rows(M, t)
        step = M[t, M_STRIDE] * itemsize(M[t, M_DTYPE])
        _copy_rows(data_addr(C, t), step, I, n, M[t, M_SHAPE], data_addr(C, o), rb)
    return FLUSH if C[C_EXTN] > 0 else 0
