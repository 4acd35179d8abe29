"""Views and shape ops: view/reshape, permute/transpose/t/T/mT, expand, unbind.

A view is a new meta row over the same storage (so it shares data and the version
counter); its backward scatter-adds the gradient into the base's layout. Row int
attributes carry the target shape ([0] ndim, [1:] sizes), the permutation, or the dim.
"""
import numpy as np

from .._engine.layout import (K_OK, MAXD, F32, M_DTYPE, M_NDIM, M_SHAPE, M_STRIDE, M_NUMEL,
                              M_FLAGS, M_ROW, M_OFF, M_SID, M_BASE, M_REFS, FL_REQ, FL_VIEW,
                              FL_VIEWLEAF, FL_PLAINVIEW, R_IATTR, R_ONDIM, R_OSHAPE, R_ODTYPE,
                              R_NIN, C_NOUTS, E_OVERFLOW)
from .._engine.lowlevel import (jit, ctx_of, meta_of, tape_of, outs_of, iargs_of, err_of,
                                f32_at, f64_at, u8_at)
from .._engine.memory import itemsize
from .._engine.core import (meta_new, meta_contiguous, copy_strided, data_addr, input_id,
                            set_outputs1, count_of, decref, KIND_META)
from .._engine.core import (contiguous_strides, span, out_numel, row_grad_addr, edge_grad_addr,
                            _gather, gather_layout, make_output, grad_for_write)
from .reduce import input_grad, scatter_grad, numel, _odometer
from .opinfo import T
from .registry import OpDef, Sample, register, samples, BY_NAME

_M = __name__


@jit
def _view_of(C, a, nd, shape, strides, off):
    """A tensor over a's storage with the given layout; marks it as a view for the
    in-place rules. E_OVERFLOW when its element count would overflow int64 (Python checks
    every shape it asks for; this keeps a missed one out of the tables)."""
    M = meta_of(C)
    n = count_of(nd, shape)
    if n < 0:
        E = err_of(C)
        E[0] = nd
        for k in range(nd):
            E[1 + k] = shape[k]
        E[9] = 0
        return E_OVERFLOW
    v = meta_new(C, M[a, M_SID], off, nd, M[a, M_DTYPE])
    for d in range(nd):
        M[v, M_SHAPE + d] = shape[d]
        M[v, M_STRIDE + d] = strides[d]
    M[v, M_NUMEL] = n
    base = M[a, M_BASE] if M[a, M_BASE] >= 0 else a
    M[v, M_BASE] = base             # (held: a later in-place op on it finds its views)
    M[base, M_REFS] += 1
    fl = M[a, M_FLAGS]
    if fl & FL_REQ:
        M[v, M_FLAGS] |= FL_VIEW
        if M[a, M_ROW] < 0 or fl & FL_VIEWLEAF:
            M[v, M_FLAGS] |= FL_VIEWLEAF
    elif fl & FL_VIEW:
        M[v, M_FLAGS] |= fl & (FL_VIEW | FL_VIEWLEAF)
    else:
        M[v, M_FLAGS] |= FL_PLAINVIEW
    return v


@jit
def _target_shape(T, row):
    nd = T[row, R_IATTR]
    return T[row, R_IATTR + 1:R_IATTR + 1 + nd].copy()


# ---------------------------------------------------------------- view / reshape
def view_fwd(caddr, row):
    """Python checked that the input is contiguous and the sizes agree."""
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    a = input_id(C, row, 0)
    shape = _target_shape(T, row)
    v = _view_of(C, a, shape.shape[0], shape, contiguous_strides(shape.shape[0], shape),
                 M[a, M_OFF])
    if v < 0:
        return v
    return set_outputs1(C, v)


def reshape_copy_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    a = input_id(C, row, 0)
    shape = _target_shape(T, row)
    out = meta_contiguous(C, M[a, M_DTYPE], shape.shape[0], shape, False)
    if out < 0:
        return out
    copy_strided(C, a, data_addr(C, out))
    return set_outputs1(C, out)


def flat_bwd(caddr, row):
    """Gradient of an op that keeps the element order (view, reshape): a flat add."""
    C = ctx_of(caddr)
    ga, shape = input_grad(C, row)
    if ga == 0:
        return K_OK
    n = np.full(1, numel(shape))
    one = np.ones(1, np.int64)
    scatter_grad(C, row, ga, n[0], n, one, one, 1.0)
    return K_OK


# ---------------------------------------------------------------- permute
def permute_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    a = input_id(C, row, 0)
    nd = M[a, M_NDIM]
    shape = np.empty(MAXD, np.int64)
    strides = np.empty(MAXD, np.int64)
    for d in range(nd):
        p = T[row, R_IATTR + d]
        shape[d] = M[a, M_SHAPE + p]
        strides[d] = M[a, M_STRIDE + p]
    v = _view_of(C, a, nd, shape, strides, M[a, M_OFF])
    if v < 0:
        return v
    return set_outputs1(C, v)


def permute_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    ga, shape = input_grad(C, row)
    if ga == 0:
        return K_OK
    nd = shape.shape[0]
    cs = contiguous_strides(nd, shape)
    gst = np.empty(nd, np.int64)          # the input's gradient seen from the output
    for d in range(nd):
        gst[d] = cs[T[row, R_IATTR + d]]
    oshape = T[row, R_OSHAPE:R_OSHAPE + nd].copy()
    scatter_grad(C, row, ga, numel(shape), oshape, gst, contiguous_strides(nd, oshape), 1.0)
    return K_OK


# ---------------------------------------------------------------- expand
def expand_fwd(caddr, row):
    """Python validated the target shape; new and size-1 dims get stride 0."""
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    a = input_id(C, row, 0)
    shape = _target_shape(T, row)
    nd = shape.shape[0]
    na = M[a, M_NDIM]
    strides = np.zeros(MAXD, np.int64)
    for d in range(nd):
        da = d - (nd - na)
        if da >= 0 and M[a, M_SHAPE + da] == shape[d]:
            strides[d] = M[a, M_STRIDE + da]
    v = _view_of(C, a, nd, shape, strides, M[a, M_OFF])
    if v < 0:
        return v
    return set_outputs1(C, v)


def expand_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    ga, ishape = input_grad(C, row)
    if ga == 0:
        return K_OK
    na = ishape.shape[0]
    nd = T[row, R_ONDIM]
    oshape = T[row, R_OSHAPE:R_OSHAPE + nd].copy()
    gst = np.zeros(nd, np.int64)          # 0 along the expanded dims: they sum up
    s = 1
    for d in range(nd - 1, -1, -1):
        da = d - (nd - na)
        if da >= 0:
            if ishape[da] == oshape[d]:
                gst[d] = s
            s *= ishape[da]
    scatter_grad(C, row, ga, s, oshape, gst, contiguous_strides(nd, oshape), 1.0)
    return K_OK


# ---------------------------------------------------------------- unbind
def unbind_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    a = input_id(C, row, 0)
    dim = T[row, R_IATTR]
    nd = M[a, M_NDIM]
    count = M[a, M_SHAPE + dim]      # Python reserved room for count outputs
    shape = np.empty(MAXD, np.int64)
    strides = np.empty(MAXD, np.int64)
    j = 0
    for d in range(nd):
        if d != dim:
            shape[j] = M[a, M_SHAPE + d]
            strides[j] = M[a, M_STRIDE + d]
            j += 1
    outs = outs_of(C)
    step = M[a, M_STRIDE + dim]
    for k in range(count):
        v = _view_of(C, a, nd - 1, shape, strides, M[a, M_OFF] + k * step)
        if v < 0:
            for j in range(k):
                M[outs[j], M_REFS] += 1
                decref(C, KIND_META, outs[j])
            return v
        outs[k] = v
    C[C_NOUTS] = count
    return K_OK


def unbind_bwd(caddr, row):
    """The outputs' gradients sit one after another in the row's buffer: that is the
    input's gradient with dim moved to the front."""
    C = ctx_of(caddr)
    T = tape_of(C)
    ga, shape = input_grad(C, row)
    if ga == 0:
        return K_OK
    nd = shape.shape[0]
    dim = T[row, R_IATTR]
    gst = np.empty(nd, np.int64)
    s = 1
    for d in range(nd - 1, -1, -1):
        if d != dim:
            gst[d] = s
            s *= shape[d]
    gst[dim] = s
    scatter_grad(C, row, ga, numel(shape), shape, contiguous_strides(nd, shape), gst, 1.0)
    return K_OK


# ---------------------------------------------------------------- strided views
# select, slice, narrow, squeeze, unsqueeze, split, x[...]: Python computes the view's
# layout (forward-only iargs FV: offset, ndim, shape, strides) and where its elements sit
# in the base's contiguous gradient (row attrs: [0] offset, [1:] strides), so one kernel
# pair serves every view that only picks elements.
FV = 16


def strided_view_fwd(caddr, row):
    C = ctx_of(caddr)
    ia = iargs_of(C)
    a = input_id(C, row, 0)
    nd = ia[FV + 1]
    v = _view_of(C, a, nd, ia[FV + 2:FV + 2 + nd].copy(),
                 ia[FV + 2 + MAXD:FV + 2 + MAXD + nd].copy(), ia[FV])
    if v < 0:
        return v
    return set_outputs1(C, v)


def strided_view_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    ga, ishape = input_grad(C, row)
    if ga == 0:
        return K_OK
    nd = T[row, R_ONDIM]
    oshape = T[row, R_OSHAPE:R_OSHAPE + nd].copy()
    goff = T[row, R_IATTR]
    gst = T[row, R_IATTR + 1:R_IATTR + 1 + nd].copy()
    isz = 4 if T[row, R_ODTYPE] == F32 else 8
    scatter_grad(C, row, ga + goff * isz, numel(ishape) - goff, oshape, gst,
                 contiguous_strides(nd, oshape), 1.0)
    return K_OK


# ---------------------------------------------------------------- cat / stack
# attrs: [0] dim of the output, [1] 1 for stack (inputs lack that dim), [2 + k] input k's
# size along dim (the backward's layout: an input that needs no gradient is not kept, so
# its shape is not on the tape); forward-only iargs FV: output ndim and shape. More than
# MAXIN inputs are joined as a tree by Python.
@jit
def _part_layout(shape_k, nk, strides_k, dim, stack):
    """Input k's shape and strides in the output's dims (stack inserts a size-1 dim)."""
    nd = nk + 1 if stack else nk
    sh = np.empty(nd, np.int64)
    st = np.zeros(nd, np.int64)
    j = 0
    for d in range(nd):
        if stack and d == dim:
            sh[d] = 1
        else:
            sh[d] = shape_k[j]
            st[d] = strides_k[j]
            j += 1
    return sh, st


def cat_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    ia = iargs_of(C)
    dim = T[row, R_IATTR]
    stack = T[row, R_IATTR + 1] != 0
    nd = ia[FV]
    oshape = ia[FV + 1:FV + 1 + nd].copy()
    a0 = input_id(C, row, 0)
    dt = M[a0, M_DTYPE]
    out = meta_contiguous(C, dt, nd, oshape, False)
    if out < 0:
        return out
    ost = contiguous_strides(nd, oshape)
    n = M[out, M_NUMEL]
    # the parts are added into -0., which keeps every value's sign (0. would turn -0. to 0.)
    if dt == F32:
        f32_at(data_addr(C, out), n)[:] = np.float32(-0.0)
    else:
        f64_at(data_addr(C, out), n)[:] = -0.0
    off = 0
    for k in range(T[row, R_NIN]):
        t = input_id(C, row, k)
        nk = M[t, M_NDIM]
        sh, st = _part_layout(M[t, M_SHAPE:M_SHAPE + nk], nk, M[t, M_STRIDE:M_STRIDE + nk],
                              dim, stack)
        start = off * ost[dim]
        if dt == F32:
            _odometer(sh, st, ost, f32_at(data_addr(C, t), span(M, t)),
                      f32_at(data_addr(C, out) + 4 * start, n - start), True, np.float32(1))
        else:
            _odometer(sh, st, ost, f64_at(data_addr(C, t), span(M, t)),
                      f64_at(data_addr(C, out) + 8 * start, n - start), True, 1.0)
        off += sh[dim]
    return set_outputs1(C, out)


def cat_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    dim = T[row, R_IATTR]
    stack = T[row, R_IATTR + 1] != 0
    nd = T[row, R_ONDIM]
    gst = contiguous_strides(nd, T[row, R_OSHAPE:R_OSHAPE + nd].copy())
    n = out_numel(T, row)
    g = row_grad_addr(C, row, 0)
    f32 = T[row, R_ODTYPE] == F32
    off = 0
    for k in range(T[row, R_NIN]):
        sh = T[row, R_OSHAPE:R_OSHAPE + nd].copy()
        sh[dim] = T[row, R_IATTR + 2 + k]
        st = contiguous_strides(nd, sh)
        if stack:                   # (the input lacks dim: its size-1 dim has stride 0)
            st[dim] = 0
        start = off * gst[dim]
        off += sh[dim]
        ga = edge_grad_addr(C, row, k)
        if ga == 0:
            continue
        m = numel(sh)
        if f32:
            _odometer(sh, st, gst, f32_at(ga, m), f32_at(g + 4 * start, n - start), False,
                      np.float32(1))
        else:
            _odometer(sh, st, gst, f64_at(ga, m), f64_at(g + 8 * start, n - start), False, 1.0)
    return K_OK


# ---------------------------------------------------------------- dtype conversion
# attrs: [0] output dtype, [1] input dtype (float32 <-> float64; other casts carry no
# gradient and are done by NumPy in the front)
def to_copy_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    a = input_id(C, row, 0)
    nd = M[a, M_NDIM]
    shape = M[a, M_SHAPE:M_SHAPE + nd].copy()
    st = M[a, M_STRIDE:M_STRIDE + nd].copy()
    odt = T[row, R_IATTR]
    out = meta_contiguous(C, odt, nd, shape, False)
    if out < 0:
        return out
    n = M[out, M_NUMEL]
    if M[a, M_DTYPE] == F32:
        src = f32_at(data_addr(C, a), span(M, a))
        if odt == F32:
            _gather(src, 0, shape, st, f32_at(data_addr(C, out), n))
        else:
            _gather(src, 0, shape, st, f64_at(data_addr(C, out), n))
    else:
        src64 = f64_at(data_addr(C, a), span(M, a))
        if odt == F32:
            _gather(src64, 0, shape, st, f32_at(data_addr(C, out), n))
        else:
            _gather(src64, 0, shape, st, f64_at(data_addr(C, out), n))
    return set_outputs1(C, out)


@jit
def _add_cast(G, GA):
    for i in range(GA.shape[0]):
        GA[i] += G[i]


def to_copy_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    ga = edge_grad_addr(C, row, 0)
    if ga == 0:
        return K_OK
    n = out_numel(T, row)
    g = row_grad_addr(C, row, 0)
    if T[row, R_ODTYPE] == F32:
        if T[row, R_IATTR + 1] == F32:
            _add_cast(f32_at(g, n), f32_at(ga, n))
        else:
            _add_cast(f32_at(g, n), f64_at(ga, n))
    else:
        if T[row, R_IATTR + 1] == F32:
            _add_cast(f64_at(g, n), f32_at(ga, n))
        else:
            _add_cast(f64_at(g, n), f64_at(ga, n))
    return K_OK


# ---------------------------------------------------------------- flip
# One copy with the dims of the mask (int attribute 0) reversed, read through negative
# strides from the far end of each (PyTorch's FlipBackward0; its backward flips the
# gradient back). An index_select per dim would take ten times PyTorch's time.
@jit
def _flip_layout(shape, strides, off, mask):
    """strides and the start offset of the layout reading dims in mask backwards."""
    for d in range(shape.shape[0]):
        if (mask >> d) & 1 and shape[d] > 0:
            off += (shape[d] - 1) * strides[d]
            strides[d] = -strides[d]
    return off


def flip_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    a = input_id(C, row, 0)
    nd = M[a, M_NDIM]
    shape = M[a, M_SHAPE:M_SHAPE + nd].copy()
    strides = M[a, M_STRIDE:M_STRIDE + nd].copy()
    off = _flip_layout(shape, strides, M[a, M_OFF], tape_of(C)[row, R_IATTR])
    out = make_output(C, M[a, M_DTYPE], nd, shape)
    if out < 0:
        return out
    gather_layout(C, a, off, shape, strides, data_addr(C, out))
    return set_outputs1(C, out)


def flip_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    ga, fresh = grad_for_write(C, row, 0, True)
    if ga == 0:
        return K_OK
    nd = T[row, R_ONDIM]
    shape = T[row, R_OSHAPE:R_OSHAPE + nd].copy()
    strides = contiguous_strides(nd, shape)
    off = _flip_layout(shape, strides, 0, T[row, R_IATTR])
    g = row_grad_addr(C, row, 0)
    n = out_numel(T, row)
    if T[row, R_ODTYPE] == F32:
        _gather_grad(f32_at(g, n), off, shape, strides, f32_at(ga, n), fresh)
    else:
        _gather_grad(f64_at(g, n), off, shape, strides, f64_at(ga, n), fresh)
    return K_OK


@jit
def _gather_grad(G, off, shape, strides, GA, fresh):
    """GA (a fresh buffer) = or (an existing one) += G gathered in the layout."""
    if fresh:
        _gather(G, off, shape, strides, GA)
        return
    tmp = np.empty_like(G)
    _gather(G, off, shape, strides, tmp)
    for j in range(GA.shape[0]):
        GA[j] += tmp[j]


# ---------------------------------------------------------------- roll
# One dim per row (PyTorch's RollBackward0, whose backward rolls the gradient back): each
# of the outer blocks is two contiguous pieces moved, as bytes for every dtype (the front
# makes a strided input contiguous and passes 0 < shift < size). Two narrows joined by cat
# took three times PyTorch's time.
@jit
def _roll_blocks(shape, dim):
    """(outer, m, inner) of a contiguous tensor of this shape around dim."""
    outer = 1
    for d in range(dim):
        outer *= shape[d]
    inner = 1
    for d in range(dim + 1, shape.shape[0]):
        inner *= shape[d]
    return outer, shape[dim], inner


@jit
def _roll_copy(X, Y, outer, m, inner, s):
    """Y[o, j] = X[o, (j - s) mod m], in blocks of inner elements."""
    k = (m - s) * inner
    h = s * inner
    b = m * inner
    for o in range(outer):
        # (loops from 0 over slices, which LLVM turns into memcpy: a slice assignment
        # copies its source first, and offset indices keep a byte loop scalar)
        p = o * b
        Yr = Y[p:p + h]
        Xr = X[p + k:p + b]
        for q in range(h):
            Yr[q] = Xr[q]
        Yr = Y[p + h:p + b]
        Xr = X[p:p + k]
        for q in range(k):
            Yr[q] = Xr[q]


@jit
def _roll_add(G, GA, outer, m, inner, s):
    """GA[o, j] += G[o, (j + s) mod m]: the gradient of _roll_copy by s."""
    k = (m - s) * inner
    h = s * inner
    b = m * inner
    for o in range(outer):
        p = o * b
        Ar = GA[p:p + k]
        Gr = G[p + h:p + b]
        for q in range(k):
            Ar[q] += Gr[q]
        Ar = GA[p + k:p + b]
        Gr = G[p:p + h]
        for q in range(h):
            Ar[q] += Gr[q]


def roll_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    a = input_id(C, row, 0)
    nd = M[a, M_NDIM]
    shape = M[a, M_SHAPE:M_SHAPE + nd].copy()
    dt = M[a, M_DTYPE]
    out = meta_contiguous(C, dt, nd, shape, False)
    if out < 0:
        return out
    outer, m, inner = _roll_blocks(shape, T[row, R_IATTR])
    w = itemsize(dt)
    nb = outer * m * inner * w
    _roll_copy(u8_at(data_addr(C, a), nb), u8_at(data_addr(C, out), nb), outer, m, inner * w,
               T[row, R_IATTR + 1])
    return set_outputs1(C, out)


def roll_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    ga, fresh = grad_for_write(C, row, 0, True)
    if ga == 0:
        return K_OK
    nd = T[row, R_ONDIM]
    shape = T[row, R_OSHAPE:R_OSHAPE + nd].copy()
    outer, m, inner = _roll_blocks(shape, T[row, R_IATTR])
    s = T[row, R_IATTR + 1]
    g = row_grad_addr(C, row, 0)
    n = out_numel(T, row)
    f32 = T[row, R_ODTYPE] == F32
    if fresh:
        w = 4 if f32 else 8
        _roll_copy(u8_at(g, n * w), u8_at(ga, n * w), outer, m, inner * w, m - s)
    elif f32:
        _roll_add(f32_at(g, n), f32_at(ga, n), outer, m, inner, s)
    else:
        _roll_add(f64_at(g, n), f64_at(ga, n), outer, m, inner, s)
    return K_OK


def _shape_op(name, grad_fn, fwd, bwd, nin=1, diff=(0,), attrs=()):
    return register(OpDef(name, grad_fn, "custom", module=_M, fwd_fn=fwd, bwd_fn=bwd, nin=nin,
                          diff=diff, attrs=attrs))


_CAT_ATTRS = ("dim", "stack", "sizes*")     # sizes: each part's extent along dim


_shape_op("view", "ViewBackward0", "view_fwd", "flat_bwd", attrs=("ndim", "shape*"))
samples("view", "x.view(4, 3)", "x.view(-1)", "x.view((2, 6))", "x.view(2, -1, 3)",
        "x.reshape(6, 2)", "L.reshape(x, (12,))", "x.flatten()", "x.view_as(y)",
        errors=["x.view(5, 3)", "x.view(-1, -1)", "x.t().view(-1)"], x=T(3, 4), y=T(2, 6))
_shape_op("reshape_copy", "UnsafeViewBackward0", "reshape_copy_fwd", "flat_bwd",
          attrs=("ndim", "shape*"))
samples("reshape_copy", "x.t().reshape(-1)", "L.reshape(x.t(), (2, 6))", "x.t().flatten()",
        errors=["x.t().reshape(5, -1)"])
_shape_op("permute", "PermuteBackward0", "permute_fwd", "permute_bwd", attrs=("dims*",))
samples("permute", "x.permute(1, 0)", "L.permute(x, (1, 0))", "x.T",
        Sample("x.permute(2, 0, 1)", x=T(2, 3, 4)), Sample("x.permute((0, -1, 1))", x=T(2, 3, 4)),
        errors=["x.permute(0)", "x.permute(0, 0)", "x.permute(0, 2)"])
_shape_op("transpose", "TransposeBackward0", "permute_fwd", "permute_bwd", attrs=("dims*",))
samples("transpose", "x.transpose(0, 1)", "L.transpose(x, 1, 0)", "x.mT", "x.swapaxes(0, 1)",
        Sample("x.transpose(0, 2)", x=T(2, 3, 4)), errors=["x.transpose(0, 2)"])
_shape_op("t", "TBackward0", "permute_fwd", "permute_bwd", attrs=("dims*",))
samples("t", "x.t()", "L.t(x)", Sample("x.t()", x=T(4)),
        errors=[Sample("x.t()", x=T(2, 3, 4))])
_shape_op("expand", "ExpandBackward0", "expand_fwd", "expand_bwd", attrs=("ndim", "shape*"))
samples("expand", "x.expand(3, 4)", "x.expand(2, 3, 4)", "x.expand_as(y)",
        Sample("x.expand(3, -1)", x=T(1, 4)), Sample("x.expand(2, 3, 4)", x=T(3, 1)),
        errors=["x.expand(3, 5)", Sample("x.expand(4)", x=T(3, 4))], x=T(4), y=T(3, 4))
_shape_op("flip", "FlipBackward0", "flip_fwd", "flip_bwd", attrs=("dims",))
samples("flip", "x.flip(0)", "L.flip(x, (0, 1))", "x.flip(-1)",
        Sample("L.flip(x, (0, 2))", x=T(2, 3, 4)), errors=["x.flip(2)"])
_shape_op("roll", "RollBackward0", "roll_fwd", "roll_bwd", attrs=("dim", "shift"))
samples("roll", "x.roll(1, 0)", "L.roll(x, -1, 1)", "x.roll((1, 5), (0, 1))", "L.roll(x, 5)",
        "x.t().roll(2, 1)", Sample("x.roll(3, -1)", x=T(2, 3, 4)),
        Sample("L.roll(x, (1, -2), (2, 0))", x=T(2, 3, 4)),
        errors=["x.roll(1, 2)", "x.roll((1, 2), 0)"])
_shape_op("unbind", "UnbindBackward0", "unbind_fwd", "unbind_bwd", attrs=("dim",)).multi_view = True
samples("unbind", "x.unbind(1)", "L.unbind(x)", "x.unbind(-1)", errors=["x.unbind(2)"])
for _name, _grad_fn in (("select", "SelectBackward0"), ("slice", "SliceBackward0"),
                        ("alias", "AliasBackward0"), ("unsqueeze", "UnsqueezeBackward0"),
                        ("squeeze", "SqueezeBackward0"), ("squeeze_dim", "SqueezeBackward1"),
                        ("squeeze_dims", "SqueezeBackward2"), ("split", "SplitBackward0"),
                        ("split_with_sizes", "SplitWithSizesBackward0"),
                        # view/reshape of a strided tensor whose layout allows a view
                        ("view_strided", "ViewBackward0"),
                        ("diagonal", "DiagonalBackward0"),
                        ("reshape_alias", "ReshapeAliasBackward0"),
                        # a view's history re-derived after its base changed in place
                        # (views.regen_views makes these rows, no Python call does)
                        ("as_strided", "AsStridedBackward0")):
    # where its elements sit in the base's contiguous gradient, and which output of a split
    # it is (for messages)
    _shape_op(_name, _grad_fn, "strided_view_fwd", "strided_view_bwd",
              attrs=("grad_offset", "grad_strides[9]", "piece"))
for _name in ("split", "split_with_sizes"):
    BY_NAME[_name].multi_view = True
samples("select", "x[1]", "x.select(1, 2)", "L.select(x, 0, -1)", "x[:, -1]", "x[1, 2]",
        errors=["x[3]", "x.select(2, 0)", "x[:, 4]"])
samples("slice", "x[1:3]", "x[:, ::2]", "x[-2:]", "L.narrow(x, 1, 1, 2)", "x[1:, 1:3]",
        "x[:]", errors=["L.narrow(x, 0, 2, 2)", "x[::-1]"])
samples("alias", "x[...]", "x[:, :]", "x[..., :]")
samples("unsqueeze", "x.unsqueeze(0)", "L.unsqueeze(x, -1)", "x[:, None]", "x[None]",
        errors=["x.unsqueeze(3)"])
samples("squeeze", "x.squeeze()", "L.squeeze(x)", x=T(3, 1, 4))
samples("squeeze_dim", "x.squeeze(1)", "x.squeeze(0)", "L.squeeze(x, -2)",
        errors=["x.squeeze(3)"], x=T(3, 1, 4))
samples("squeeze_dims", "x.squeeze((1,))", "L.squeeze(x, (0, 1))", "x.squeeze((1, 3))",
        x=T(3, 1, 4, 1))
samples("split", "x.split(2)", "L.split(x, 3, dim=1)", "x.chunk(2)", "L.chunk(x, 2, 1)",
        errors=["x.split(-1)"])
samples("split_with_sizes", "x.split([1, 2])", "L.split(x, [3, 1], dim=1)",
        "x.split([0, 3])", errors=["x.split([1, 1])"])
# (non-contiguous inputs: a contiguous one records view, of the same name)
samples("view_strided", "x[::2].view(2, 2, 2)", "x.t().view(4, 3)",
        "x[:, 1:3].view(3, 2, 1)", "x[:, :2].view(3, 1, 2)")
samples("diagonal", "L.diagonal(x)", "x.diagonal(1)", "L.diagonal(x, -1)",
        Sample("L.diagonal(x, 0, 1, 2)", x=T(2, 3, 4)),
        Sample("x.diagonal(dim1=-1, dim2=0)", x=T(2, 3, 4)), errors=["L.diagonal(x, 0, 1, 1)"])
samples("reshape_alias", "x[::2].reshape(2, 2, 2)", "x.t().reshape(4, 3)",
        "x[:, 1:3].reshape(3, 2, 1)")
samples("as_strided", "view_after_write(x)")
_shape_op("cat", "CatBackward0", "cat_fwd", "cat_bwd", nin=3, diff=(0, 1, 2), attrs=_CAT_ATTRS)
samples("cat", "L.cat([x, y])", "L.cat((x, y, x), dim=0)", "L.cat([x, z], -1)",
        "L.concat([x, y])", "L.cat([x.t(), z.t()])", "L.cat([x])",
        errors=["L.cat([x, z])", "L.cat([x, y], 2)", Sample("L.cat([])", xfail={"error": (
            "tapegrad raises RuntimeError('cat(): expected a non-empty list of Tensors'), "
            "PyTorch ValueError('torch.cat(): expected a non-empty list of Tensors')")})],
        x=T(3, 4), y=T(2, 4), z=T(3, 2))
_shape_op("stack", "StackBackward0", "cat_fwd", "cat_bwd", nin=3, diff=(0, 1, 2), attrs=_CAT_ATTRS)
samples("stack", "L.stack([x, y])", "L.stack((x, y, x), dim=1)", "L.stack([x, y], -1)",
        "L.stack([x.t(), y.t()])", errors=["L.stack([x, z])", "L.stack([x, y], 3)"],
        x=T(3, 4), y=T(3, 4), z=T(3, 2))
# the last row of a stack of more than MAXIN tensors joins stacked parts
_shape_op("stack_parts", "StackBackward0", "cat_fwd", "cat_bwd", nin=3, diff=(0, 1, 2),
          attrs=_CAT_ATTRS)
# (a tree of rows where PyTorch has one node: next_functions lists the parts' stacks)
samples("stack_parts", "L.stack([x, y, z, w])",
        Sample("L.stack([x, y, z, w, x, y, z], dim=1)", next_fns=("StackBackward0",) * 3),
        next_fns=("StackBackward0", "StackBackward0"), x=T(3, 4), y=T(3, 4), z=T(3, 4),
        w=T(3, 4))
_shape_op("to_copy", "ToCopyBackward0", "to_copy_fwd", "to_copy_bwd", attrs=("dtype", "source"))
samples("to_copy", Sample("x.double()", dtypes=("float32",)),
        Sample("x.float()", dtypes=("float64",)),
        Sample("x.to(L.float64)", dtypes=("float32",)),
        Sample("x.t().to(dtype=L.float32)", dtypes=("float64",)))
