"""Views and version counters: the counter a view shares with its base, bumps (which make
the views taken under no_grad stale), views made while an op writes in place, and a
view's history regenerated after its base changed."""
import numpy as np

from .layout import *  # noqa: F401,F403  (column names are the vocabulary of this file)
from .lowlevel import (jit, jit_entry, ctx_of, meta_of, stor_of, tape_of, fattr_of, err_of,
                       opinfo_of, fwd_table)
from .memory import KIND_ROW, decref, is_contiguous, meta_new, row_new


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


@jit_entry
def bump_version_id(caddr, t):
    """bump_version for a write Python made (nn.init, NumPy paths)."""
    bump_version(ctx_of(caddr), t)
    return 0


@jit
def views_ready(C, a):
    """Before an in-place op records on a: what re-deriving the histories of a's views
    will need (regen_views), so that nothing changes when it is not there."""
    M = meta_of(C)
    n = stor_of(C)[M[a, M_SID], S_HVIEWS]
    if n == 0:
        return 0
    if not is_contiguous(M, a):
        k = views_to_regen(C, a)
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
def views_to_regen(C, a):
    """How many of a's views regen_views will re-derive (a storage's count includes
    views made under no_grad, which it only marks stale)."""
    M = meta_of(C)
    n = 0
    for u in counted_views(C, M[a, M_SID]):
        if M[u, M_BASE] == a and not M[u, M_FLAGS] & FL_NOGRADVIEW and not is_multi_view(C, u):
            n += 1
    return n


@jit
def regen_views(C, a, r):
    """PyTorch's rule for the views of a tensor modified in place: each view's history
    becomes an as_strided of the base's new one (row r, a's in-place row), so a
    gradient through the view reaches what the base holds now, not what it held when
    the view was made. (PyTorch re-derives it when the view is next used; doing it now
    is the same, as nothing else can change the base's history in between.) a is
    contiguous (views_ready), so a view element's offset from a's is its position in
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
