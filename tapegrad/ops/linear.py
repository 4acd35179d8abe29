"""F.linear with a bias on a matrix: out = x @ W.T + b as one row, like PyTorch's addmm
(grad_fn AddmmBackward0, inputs in its order: bias, input, weight).

One row instead of three (mm, the transposed view, the broadcast add): the weight's
gradient G.T @ x is written straight into its own layout, where the composed graph
summed a transposed copy, and the bias gradient is a column sum instead of a broadcast
add's reduction. Python routes only contiguous 2-D inputs here (others are composed).
"""
import numpy as np
from numba import carray

from .._engine.layout import K_OK, F32, M_DTYPE, M_NDIM, M_SHAPE, M_STRIDE, E_DTYPE, \
    E_SHAPE, E_FALLBACK, R_IN, IN_SAVED, IW, R_OSHAPE, R_IATTR, R_OSAVED, D_IDX
from .._engine.lowlevel import (jit, jit_reduction, ctx_of, meta_of, tape_of, desc_of, ptr_f32,
                                ptr_f64)
from .._engine.blas import gemm
from .._engine.core import (data_addr, make_output, input_id, set_outputs1, row_grad_addr,
                            edge_grad_addr, grad_for_write, is_contiguous)
from .linalg import _mat, _mat_in, _matmul_one, _matmul_bwd_2d
from .opinfo import T
from .registry import OpDef, Sample, register, samples
from ._vmath import pick

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
samples("linear", "F.linear(x, w, b)", "F.linear(x, w, bias=b)", "L.nn.functional.linear(x, w, b)",
        Sample("F.linear(x, w, b)", x=T(1, 4)),
        errors=[Sample("F.linear(x, w, b)", w=T(5, 3)), Sample("F.linear(x, w, b)", b=T(4), xfail={
            "error": "message: tapegrad 'The size of tensor a (5) must match the size of tensor "
                     "b (4) at non-singleton dimension 1', PyTorch 'The expanded size of the "
                     "tensor (5) must match the existing size (4) at non-singleton dimension 1.  "
                     "Target sizes: [3, 5].  Tensor sizes: [4]'"})],
        x=T(3, 4), w=T(5, 4), b=T(5))


# ---------------------------------------------------------------- x @ W + b [then relu]
# A replayed program's matrix product whose only reader adds a bias vector (and whose sum
# only relu reads) runs as one row (replay/fuse.py fuse_bias): one op and one backward row
# fewer per layer. The product is matmul's own code, and the bias add and relu are the
# eager ops' arithmetic in their order, so values and gradients are bitwise the eager ones
# (tests/replay/test_fuse_bias.py). Operands it does not cover (not two matrices and a bias vector
# of the product's width, in one dtype) get E_FALLBACK before anything is made: the
# executor then runs the replaced ops.

@jit
def _add_bias(O, B, n, m, sb, relu, zero):
    """O (n x m) += the bias B (stride sb), then relu; branch-free rows over a contiguous
    bias, so they vectorise (an index times a stride does not, and takes about ten times
    as long)."""
    if sb == 1:
        Bc = B[:m]
        for i in range(n):
            R = O[i * m:(i + 1) * m]
            if relu:
                for j in range(m):
                    v = R[j] + Bc[j]
                    R[j] = pick(v < zero, zero, v)      # (relu's formula: -0. stays -0.)
            else:
                for j in range(m):
                    R[j] += Bc[j]
    else:
        for i in range(n):
            for j in range(m):
                v = O[i * m + j] + B[j * sb]
                O[i * m + j] = pick(relu and v < zero, zero, v)


@jit
def _bias_grads(G, O, GB, n, m, relu, zero):
    """relu: G masked in place (the row's own gradient buffer: no one else reads it), as
    relu's backward writes it; GB: + the column sums of G, row after row, as the bias add's
    backward sums them (GB empty: no bias gradient wanted)."""
    if relu:
        for q in range(n * m):
            G[q] = zero if O[q] <= zero else G[q]
    if GB.shape[0]:
        for i in range(n):
            R = G[i * m:(i + 1) * m]
            for j in range(m):
                GB[j] += R[j]


def mm_bias_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    a = input_id(C, row, 0)
    w = input_id(C, row, 1)
    b = input_id(C, row, 2)
    dt = M[a, M_DTYPE]
    if (dt != KERNEL_DTYPE or M[w, M_DTYPE] != dt or M[b, M_DTYPE] != dt
            or M[a, M_NDIM] != 2 or M[w, M_NDIM] != 2 or M[b, M_NDIM] != 1):
        return E_FALLBACK
    n, k, ars, acs = _mat(M, a, 2, True)
    k2, m, brs, bcs = _mat(M, w, 2, False)
    if k != k2 or M[b, M_SHAPE] != m:
        return E_FALLBACK
    shape = desc_of(C)[D_IDX:D_IDX + 2]
    shape[0] = n
    shape[1] = m
    out = make_output(C, dt, 2, shape)
    if out < 0:
        return out
    relu = tape_of(C)[row, R_IATTR] != 0
    sb = M[b, M_STRIDE]
    na = 1 + (n - 1) * ars + (k - 1) * acs
    nbb = 1 + (k - 1) * brs + (m - 1) * bcs
    nbias = 1 + (m - 1) * sb
    if KERNEL_DTYPE == F32:
        O = carray(ptr_f32(data_addr(C, out)), (n * m,))
        _matmul_one(carray(ptr_f32(data_addr(C, a)), (na,)),
                    carray(ptr_f32(data_addr(C, w)), (nbb,)), O,
                    0, 0, 0, n, k, m, ars, acs, brs, bcs)
        _add_bias(O, carray(ptr_f32(data_addr(C, b)), (nbias,)), n, m, sb, relu,
                  np.float32(0.0))
    else:
        O64 = carray(ptr_f64(data_addr(C, out)), (n * m,))
        _matmul_one(carray(ptr_f64(data_addr(C, a)), (na,)),
                    carray(ptr_f64(data_addr(C, w)), (nbb,)), O64,
                    0, 0, 0, n, k, m, ars, acs, brs, bcs)
        _add_bias(O64, carray(ptr_f64(data_addr(C, b)), (nbias,)), n, m, sb, relu, 0.0)
    return set_outputs1(C, out)


def mm_bias_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    n = T[row, R_OSHAPE]
    m = T[row, R_OSHAPE + 1]
    relu = T[row, R_IATTR] != 0
    g = row_grad_addr(C, row, 0)
    gb = edge_grad_addr(C, row, 2)
    o = data_addr(C, T[row, R_OSAVED]) if relu else 0
    if KERNEL_DTYPE == F32:
        _bias_grads(carray(ptr_f32(g), (n * m,)), carray(ptr_f32(o), (n * m if o else 0,)),
                    carray(ptr_f32(gb), (m if gb else 0,)), n, m, relu, np.float32(0.0))
    else:
        _bias_grads(carray(ptr_f64(g), (n * m,)), carray(ptr_f64(o), (n * m if o else 0,)),
                    carray(ptr_f64(gb), (m if gb else 0,)), n, m, relu, 0.0)
    _, n, k, ars, acs = _mat_in(C, row, 0, True)
    _, k, m, brs, bcs = _mat_in(C, row, 1, False)
    return _matmul_bwd_2d(C, row, T[row, R_IN + IN_SAVED], T[row, R_IN + IW + IN_SAVED],
                          n, k, m, ars, acs, brs, bcs)


def _mm_bias(name, grad_fn, out):
    """The row is named after its last member, as replay/fuse.py names fused ops; with
    relu it saves its output (relu's backward reads it) whenever it records."""
    op = register(OpDef(name, grad_fn, "custom", module=_M, fwd_fn="mm_bias_fwd",
                        bwd_fn="mm_bias_bwd", nin=3, diff=(0, 1, 2), per_dtype=True,
                        saves_if={0: ("b",) + out, 1: ("a",) + out, 2: out}))
    op.method = False           # (made by the replay only)
    return op


MM_BIAS = _mm_bias("mm_bias", "AddBackward0", ())
# (made by fused replays only: the records check replays; the node's edges are x, W, b)
_FUSED = dict(fused_only=True, next_fns=("AccumulateGrad",) * 3, x=T(3, 4), w=T(4, 5), b=T(5))
samples("mm_bias", "x @ w + b", "b + x @ w", "L.addmm(b, x, w)", **_FUSED)
MM_BIAS_RELU = _mm_bias("mm_bias_relu", "ReluBackward0", ("out",))
samples("mm_bias_relu", "(x @ w + b).relu()", "F.relu(x @ w + b)", "L.relu(L.addmm(b, x, w))",
        **_FUSED)
