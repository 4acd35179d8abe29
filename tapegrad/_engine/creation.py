"""Tensors made by the engine for Python: new and adopted storages, aliases, detach,
contiguous copies and clones."""
from .layout import *  # noqa: F401,F403  (column names are the vocabulary of this file)
from .lowlevel import jit, jit_entry, jit_native, ctx_of, meta_of, stor_of, iargs_of
from .memory import KIND_STOR, data_addr, decref, drain, meta_contiguous, meta_new, rec_event
from .views import meta_alias
from .loops import copy_strided


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
