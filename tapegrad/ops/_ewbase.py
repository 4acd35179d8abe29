"""Shared plumbing of the generated elementwise kernels: operand layout and dispatch.

A generated kernel only supplies its loops (per formula); preparing shapes, broadcast
strides and gradient targets lives here once.
"""
import numpy as np
from numba import njit

from .._engine.layout import (MAXD, F32, F64, M_DTYPE, M_NDIM, M_SHAPE, M_STRIDE, M_NUMEL,
                              R_IN, IW, IN_SAVED, R_ONDIM, R_OSHAPE, R_ODTYPE, R_OSAVED,
                              E_DTYPE, E_SHAPE)
from .._engine.lowlevel import meta_of, tape_of, f32_at, f64_at
from .._engine.core import (data_addr, broadcast_shape, aligned_strides,
                            aligned_contiguous_strides, make_output, input_id,
                            edge_grad_addr, row_grad_addr, input_shape)


@njit(cache=True)
def span(M, t):
    """Elements from t's first to its last element (its extent in the storage)."""
    if M[t, M_NUMEL] == 0:
        return 0
    n = 1
    for d in range(M[t, M_NDIM]):
        n += (M[t, M_SHAPE + d] - 1) * M[t, M_STRIDE + d]
    return n


@njit(cache=True)
def contiguous_strides(nd, shape):
    st = np.empty(nd, np.int64)
    s = 1
    for d in range(nd - 1, -1, -1):
        st[d] = s
        s *= shape[d]
    return st


@njit(cache=True)
def same(x, y):
    for d in range(x.shape[0]):
        if x[d] != y[d]:
            return False
    return True


@njit(cache=True)
def prep_forward(C, row, nin):
    """Checks dtypes and shapes of the inputs of an elementwise row and makes its output.
    Returns (status or output id, dtype, shape, [strides of a, b, out], flat)."""
    M = meta_of(C)
    a = input_id(C, row, 0)
    b = input_id(C, row, 1) if nin == 2 else -1
    dt = M[a, M_DTYPE]
    shape = np.empty(MAXD, np.int64)
    strides = np.zeros((3, MAXD), np.int64)
    if (dt != F32 and dt != F64) or (b >= 0 and M[b, M_DTYPE] != dt):
        return E_DTYPE, dt, shape[:0], strides, False
    nd = broadcast_shape(M, a, b, shape)
    if nd < 0:
        return E_SHAPE, dt, shape[:0], strides, False
    shape = shape[:nd]
    out = make_output(C, dt, nd, shape)
    if out < 0:
        return out, dt, shape, strides, False
    st = strides[:, :nd]
    aligned_strides(M, a, nd, shape, st[0])
    if b >= 0:
        aligned_strides(M, b, nd, shape, st[1])
    aligned_strides(M, out, nd, shape, st[2])
    cs = contiguous_strides(nd, shape)
    flat = same(st[0], cs) and same(st[2], cs) and (b < 0 or same(st[1], cs))
    return out, dt, shape, st, flat


@njit(cache=True)
def prep_backward(C, row, nin):
    """Gradient targets and saved operands of an elementwise row.
    Returns (dtype, out shape, strides[5: a, b, out, ga, gb], addrs[5], spans[5],
    wants[2], flat)."""
    M = meta_of(C)
    T = tape_of(C)
    dt = T[row, R_ODTYPE]
    nd = T[row, R_ONDIM]
    shape = T[row, R_OSHAPE:R_OSHAPE + nd].copy()
    st = np.zeros((5, nd), np.int64)
    addrs = np.zeros(5, np.int64)
    spans = np.zeros(5, np.int64)
    cs = contiguous_strides(nd, shape)
    flat = True
    for k in range(nin):
        sv = T[row, R_IN + k * IW + IN_SAVED]
        if sv >= 0:
            aligned_strides(M, sv, nd, shape, st[k])
            addrs[k] = data_addr(C, sv)
            spans[k] = span(M, sv)
            flat = flat and same(st[k], cs)
    sv = T[row, R_OSAVED]
    if sv >= 0:
        aligned_strides(M, sv, nd, shape, st[2])
        addrs[2] = data_addr(C, sv)
        spans[2] = span(M, sv)
        flat = flat and same(st[2], cs)
    ishape = np.empty(MAXD, np.int64)
    for k in range(nin):
        g = edge_grad_addr(C, row, k)
        if g != 0:
            ni = input_shape(C, row, k, ishape)
            aligned_contiguous_strides(ni, ishape, nd, shape, st[3 + k])
            addrs[3 + k] = g
            n = 1
            for d in range(ni):
                n *= ishape[d]
            spans[3 + k] = n
            flat = flat and same(st[3 + k], cs)
    return dt, shape, st, addrs, spans, flat


@njit(cache=True)
def grad_of_row(C, row, n):
    """The (contiguous) incoming gradient of output 0 of row."""
    return row_grad_addr(C, row, 0)
