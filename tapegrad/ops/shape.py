"""Views and shape ops: view/reshape, permute/transpose/t/T/mT, expand, unbind.

A view is a new meta row over the same storage (so it shares data and the version
counter); its backward scatter-adds the gradient into the base's layout. Row int
attributes carry the target shape ([0] ndim, [1:] sizes), the permutation, or the dim.
"""
import numpy as np

from .._engine.layout import (K_OK, MAXD, M_DTYPE, M_NDIM, M_SHAPE, M_STRIDE, M_NUMEL, M_FLAGS,
                              M_ROW, M_OFF, M_SID, FL_REQ, FL_VIEW, FL_VIEWLEAF, R_IATTR,
                              R_ONDIM, R_OSHAPE, C_NOUTS)
from .._engine.lowlevel import jit, ctx_of, meta_of, tape_of, outs_of
from .._engine.core import (meta_new, meta_contiguous, copy_strided, data_addr, input_id,
                            set_outputs1)
from .._engine.core import contiguous_strides
from .reduce import input_grad, scatter_grad, numel
from .registry import OpDef, register

_M = __name__


@jit
def _view_of(C, a, nd, shape, strides, off):
    """A tensor over a's storage with the given layout; marks it as a view for the
    in-place rules."""
    M = meta_of(C)
    v = meta_new(C, M[a, M_SID], off, nd, M[a, M_DTYPE])
    n = 1
    for d in range(nd):
        M[v, M_SHAPE + d] = shape[d]
        M[v, M_STRIDE + d] = strides[d]
        n *= shape[d]
    M[v, M_NUMEL] = n
    fl = M[a, M_FLAGS]
    if fl & FL_REQ:
        M[v, M_FLAGS] |= FL_VIEW
        if M[a, M_ROW] < 0 or fl & FL_VIEWLEAF:
            M[v, M_FLAGS] |= FL_VIEWLEAF
    elif fl & FL_VIEW:
        M[v, M_FLAGS] |= fl & (FL_VIEW | FL_VIEWLEAF)
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
        outs[k] = _view_of(C, a, nd - 1, shape, strides, M[a, M_OFF] + k * step)
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


def _shape_op(name, grad_fn, fwd, bwd):
    return register(OpDef(name, grad_fn, "custom", module=_M, fwd_fn=fwd, bwd_fn=bwd, nin=1,
                          diff=(0,)))


_shape_op("view", "ViewBackward0", "view_fwd", "flat_bwd")
_shape_op("reshape_copy", "UnsafeViewBackward0", "reshape_copy_fwd", "flat_bwd")
_shape_op("permute", "PermuteBackward0", "permute_fwd", "permute_bwd")
_shape_op("transpose", "TransposeBackward0", "permute_fwd", "permute_bwd")
_shape_op("t", "TBackward0", "permute_fwd", "permute_bwd")
_shape_op("expand", "ExpandBackward0", "expand_fwd", "expand_bwd")
_shape_op("unbind", "UnbindBackward0", "unbind_fwd", "unbind_bwd")
