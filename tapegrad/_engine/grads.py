"""Gradient buffers: where the sweep keeps a row's output gradient and a leaf's .grad,
made on first use, and the shapes of a row's inputs."""
from .layout import *  # noqa: F401,F403  (column names are the vocabulary of this file)
from .lowlevel import jit, meta_of, stor_of, tape_of
from .memory import bytes_of, data_addr, itemsize, meta_contiguous, stor_new
from .views import bump_version


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
