"""F.linear with a bias on a matrix: out = x @ W.T + b as one row, like PyTorch's addmm
(grad_fn AddmmBackward0, inputs in its order: bias, input, weight).

One row instead of three (mm, the transposed view, the broadcast add): the weight's
gradient G.T @ x is written straight into its own layout, where the composed graph
summed a transposed copy, and the bias gradient is a column sum instead of a broadcast
add's reduction. Python routes only contiguous 2-D inputs here (others are composed).
"""
import numpy as np
from numba import carray

from .._engine.layout import K_OK, F32, M_DTYPE, M_NDIM, M_SHAPE, E_DTYPE, E_SHAPE, \
    R_IN, IN_SAVED, IW, R_OSHAPE, R_IATTR
from .._engine.lowlevel import jit, jit_reduction, ctx_of, meta_of, tape_of, ptr_f32, ptr_f64
from .._engine.blas import gemm
from .._engine.core import (data_addr, make_output, input_id, set_outputs1, row_grad_addr,
                            edge_grad_addr, grad_for_write, is_contiguous)
from .registry import OpDef, register

_M = __name__
KERNEL_DTYPE = -1       # F32 or F64 in each compiled copy (registry._per_dtype)


@jit
def _forward(X, W, B, O):
    gemm(X, W.T, O, 0.0)
    n, m = O.shape
    for i in range(n):
        for j in range(m):
            O[i, j] += B[j]


@jit_reduction
def _column_sums(G, GB):
    n, m = G.shape
    for i in range(n):
        for j in range(m):
            GB[j] += G[i, j]


@jit
def _backward(G, X, W, GX, GW, GB, x_fresh, w_fresh):
    """Fresh gradient buffers (grad_for_write) are the GEMMs' outputs; others add the
    product in."""
    if GB.shape[0]:
        _column_sums(G, GB)
    if GX.shape[0]:
        gemm(G, W, GX, 0.0 if x_fresh else 1.0)
    if GW.shape[0]:
        gemm(G.T, X, GW, 0.0 if w_fresh else 1.0)


@jit
def _mat32(addr, r, c):
    return carray(ptr_f32(addr), (r if addr else 0, c))


@jit
def _mat64(addr, r, c):
    return carray(ptr_f64(addr), (r if addr else 0, c))


def linear_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    b = input_id(C, row, 0)
    x = input_id(C, row, 1)
    w = input_id(C, row, 2)
    dt = M[x, M_DTYPE]
    if dt != KERNEL_DTYPE or M[w, M_DTYPE] != dt or M[b, M_DTYPE] != dt:
        return E_DTYPE
    if M[x, M_NDIM] != 2 or M[w, M_NDIM] != 2 or M[b, M_NDIM] != 1:
        return E_SHAPE
    n, k = M[x, M_SHAPE], M[x, M_SHAPE + 1]
    m = M[w, M_SHAPE]
    if M[w, M_SHAPE + 1] != k or M[b, M_SHAPE] != m:
        return E_SHAPE
    if not (is_contiguous(M, x) and is_contiguous(M, w) and is_contiguous(M, b)):
        return E_SHAPE
    tape_of(C)[row, R_IATTR] = k    # for the backward: with only the bias wanting a
    shape = np.empty(2, np.int64)   # gradient, neither x nor the weight is kept
    shape[0] = n
    shape[1] = m
    out = make_output(C, dt, 2, shape)
    if out < 0:
        return out
    if KERNEL_DTYPE == F32:
        _forward(_mat32(data_addr(C, x), n, k), _mat32(data_addr(C, w), m, k),
                 carray(ptr_f32(data_addr(C, b)), (m,)), _mat32(data_addr(C, out), n, m))
    else:
        _forward(_mat64(data_addr(C, x), n, k), _mat64(data_addr(C, w), m, k),
                 carray(ptr_f64(data_addr(C, b)), (m,)), _mat64(data_addr(C, out), n, m))
    return set_outputs1(C, out)


def linear_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    n = T[row, R_OSHAPE]
    m = T[row, R_OSHAPE + 1]
    k = T[row, R_IATTR]
    x = T[row, R_IN + IW + IN_SAVED]             # saved when the weight wants a gradient
    w = T[row, R_IN + 2 * IW + IN_SAVED]         # saved when the input wants one
    gb = edge_grad_addr(C, row, 0)
    gx, x_fresh = grad_for_write(C, row, 1, True)
    gw, w_fresh = grad_for_write(C, row, 2, True)
    g = row_grad_addr(C, row, 0)
    px = data_addr(C, x) if x >= 0 and gw != 0 else 0
    pw = data_addr(C, w) if w >= 0 and gx != 0 else 0
    if KERNEL_DTYPE == F32:
        _backward(_mat32(g, n, m), _mat32(px, n, k), _mat32(pw, m, k), _mat32(gx, n, k),
                  _mat32(gw, m, k), carray(ptr_f32(gb), (m if gb else 0,)), x_fresh, w_fresh)
    else:
        _backward(_mat64(g, n, m), _mat64(px, n, k), _mat64(pw, m, k), _mat64(gx, n, k),
                  _mat64(gw, m, k), carray(ptr_f64(gb), (m if gb else 0,)), x_fresh, w_fresh)
    return K_OK


register(OpDef("linear", "AddmmBackward0", "custom", module=_M, fwd_fn="linear_fwd",
               bwd_fn="linear_bwd", nin=3, diff=(0, 1, 2), saves_if={1: ("c",), 2: ("b",)},
               per_dtype=True))
