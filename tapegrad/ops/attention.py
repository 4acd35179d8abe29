"""Attention's own ops: the softmax of scaled_dot_product_attention along the last dim,
whose rows masked whole (all -inf) give 0 rather than NaN (PyTorch's _safe_softmax,
SafeSoftmaxBackward0), with the gradient read from that output (0 on such rows). It can
apply the causal mask itself (is_causal: no mask tensor, no add, no exps of masked keys).

Attention's rows are short (a key length of 32 is typical), where a general softmax spends
more on each row's set-up than on its elements, and half of a causal row is masked, whose
exps would be denormal (many times slower): one flat loop per row here, with exps far
below the row's maximum set to 0. Row attributes: width (the last dim), causal, qlen (the
query length L, so row r is query r % L).

permute_copy is x.permute(perm).contiguous() as one row (the heads' split and merge of
multi-head attention): a view chain's backward (a transposed copy, then a strided add into
the base's gradient) took several times the forward's copy; here both directions are one
loop over runs of the last dim. Row attributes: nd, the input's shape, perm (at most 5
dims)."""
import numpy as np

from .._engine.layout import (K_OK, F32, E_DTYPE, R_IATTR, R_OSAVED, M_DTYPE, M_NDIM,
                              M_SHAPE, M_STRIDE, M_NUMEL)
from .._engine.lowlevel import jit, ctx_of, meta_of, tape_of, f32_at, f64_at
from .._engine.core import (data_addr, meta_contiguous, set_outputs1, row_grad_addr,
                            edge_grad_addr, input_shape, input_id, span)
from .along import _values32, _values64
from ._vmath import exp, maxnum, vdot
from .opinfo import T, Fixed, Mask
from .registry import OpDef, Sample, register, samples

_M = __name__
KERNEL_DTYPE = -1       # F32 or F64 in each compiled copy of the kernels (per_dtype)


@jit(fastmath={"reassoc", "nsz"})
def _row_sum(W, n, zero):
    """W[:n]'s sum, reassociated so that it vectorises."""
    s = zero
    for j in range(n):
        s += W[j]
    return s


@jit
def _row_max(R, n):
    mx = R[0]
    for j in range(1, n):
        mx = maxnum(mx, R[j])
    return mx


@jit
def _row_exps(R, W, n, mx, low, zero):
    for j in range(n):
        d = R[j] - mx
        e = exp(max(d, low))
        W[j] = e if d >= low else zero


@jit
def _row_scale(W, n, inv):
    for j in range(n):
        W[j] *= inv


@jit
def _softmax_rows(X, Y, rows, S, causal, qlen, low):
    """Y = the softmax of each row of S elements of X, along the row; causal: row r
    (query position r % qlen) takes the keys j <= r % qlen, the others 0; a row masked
    whole (-inf throughout) gives 0. An exp whose argument is below low (far below the
    row's maximum: it would be at most the dtype's smallest normal) gives 0, so no
    denormal is computed (they are many times slower) and -inf gives 0 exactly. (Each
    row's loops index a slice from 0, so that they vectorise.)"""
    zero = low - low
    one = low / low
    for r in range(rows):
        p = r * S
        R = X[p:p + S]
        W = Y[p:p + S]
        n = S if not causal else min(r % qlen + 1, S)
        mx = _row_max(R, n)
        if mx == -np.inf:
            n = 0
        else:
            _row_exps(R, W, n, mx, low, zero)
            _row_scale(W, n, one / _row_sum(W, n, zero))
        for j in range(n, S):
            W[j] = zero


@jit
def _softmax_row_grads(G, O, GA, rows, S, zero):
    """GA += O * (G - sum(G * O)) along each row of S (0 where O is 0)."""
    for r in range(rows):
        p = r * S
        Gr = G[p:p + S]
        Or = O[p:p + S]
        Ar = GA[p:p + S]
        s = vdot(Gr, Or, zero)
        for j in range(S):
            Ar[j] += Or[j] * (Gr[j] - s)


def safe_softmax_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T_ = tape_of(C)
    a = input_id(C, row, 0)
    dt = M[a, M_DTYPE]
    if dt != KERNEL_DTYPE:
        return E_DTYPE
    nd = M[a, M_NDIM]
    shape = M[a, M_SHAPE:M_SHAPE + nd].copy()
    n = M[a, M_NUMEL]
    S = T_[row, R_IATTR]
    out = meta_contiguous(C, dt, nd, shape, False)
    if out < 0:
        return out
    rows = n // S if S > 0 else 0
    causal = T_[row, R_IATTR + 1] != 0
    qlen = max(T_[row, R_IATTR + 2], 1)
    if KERNEL_DTYPE == F32:
        _softmax_rows(_values32(C, a, n), f32_at(data_addr(C, out), n), rows, S, causal,
                      qlen, np.float32(-87.0))
    else:
        _softmax_rows(_values64(C, a, n), f64_at(data_addr(C, out), n), rows, S, causal,
                      qlen, -708.0)
    return set_outputs1(C, out)


def safe_softmax_bwd(caddr, row):
    C = ctx_of(caddr)
    T_ = tape_of(C)
    ga = edge_grad_addr(C, row, 0)
    if ga == 0:
        return K_OK
    ishape = np.empty(8, np.int64)
    nd = input_shape(C, row, 0, ishape)
    n = 1
    for d in range(nd):
        n *= ishape[d]
    S = T_[row, R_IATTR]
    rows = n // S if S > 0 else 0
    g = row_grad_addr(C, row, 0)
    o = data_addr(C, T_[row, R_OSAVED])
    if KERNEL_DTYPE == F32:
        _softmax_row_grads(f32_at(g, n), f32_at(o, n), f32_at(ga, n), rows, S,
                           np.float32(0.0))
    else:
        _softmax_row_grads(f64_at(g, n), f64_at(o, n), f64_at(ga, n), rows, S, 0.0)
    return K_OK


# ---------------------------------------------------------------- permute_copy
@jit
def _permute_runs(A, B, oshape, ast, back):
    """Walk the output (oshape, row-major) and the input (strides ast per output dim):
    back False: B[out] = A[in] (A the input's memory, B the output); back True: A[in] +=
    B[out] (A the input's gradient, B the output's)."""
    nd = oshape.shape[0]
    total = 1
    for d in range(nd):
        total *= oshape[d]
    if total == 0:
        return
    inner = oshape[nd - 1]
    s1 = ast[nd - 1]
    idx = np.zeros(nd, np.int64)
    off = 0
    q = 0
    for _ in range(total // inner):
        if s1 == 1:
            Ra = A[off:off + inner]
            Rb = B[q:q + inner]
            if back:
                for j in range(inner):
                    Ra[j] += Rb[j]
            else:
                for j in range(inner):
                    Rb[j] = Ra[j]
        else:
            for j in range(inner):
                if back:
                    A[off + j * s1] += B[q + j]
                else:
                    B[q + j] = A[off + j * s1]
        q += inner
        d = nd - 2
        while d >= 0:
            idx[d] += 1
            off += ast[d]
            if idx[d] < oshape[d]:
                break
            off -= ast[d] * oshape[d]
            idx[d] = 0
            d -= 1


def permute_copy_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T_ = tape_of(C)
    a = input_id(C, row, 0)
    dt = M[a, M_DTYPE]
    if dt != KERNEL_DTYPE:
        return E_DTYPE
    nd = T_[row, R_IATTR]
    oshape = np.empty(nd, np.int64)
    ast = np.empty(nd, np.int64)
    for i in range(nd):
        p = T_[row, R_IATTR + 6 + i]
        oshape[i] = M[a, M_SHAPE + p]
        ast[i] = M[a, M_STRIDE + p]
    out = meta_contiguous(C, dt, nd, oshape, False)
    if out < 0:
        return out
    n = M[a, M_NUMEL]
    if KERNEL_DTYPE == F32:
        _permute_runs(f32_at(data_addr(C, a), span(M, a)), f32_at(data_addr(C, out), n),
                      oshape, ast, False)
    else:
        _permute_runs(f64_at(data_addr(C, a), span(M, a)), f64_at(data_addr(C, out), n),
                      oshape, ast, False)
    return set_outputs1(C, out)


def permute_copy_bwd(caddr, row):
    C = ctx_of(caddr)
    T_ = tape_of(C)
    ga = edge_grad_addr(C, row, 0)
    if ga == 0:
        return K_OK
    ishape = np.empty(8, np.int64)
    nd = input_shape(C, row, 0, ishape)
    cst = np.empty(nd, np.int64)
    n = 1
    for d in range(nd - 1, -1, -1):
        cst[d] = n
        n *= ishape[d]
    oshape = np.empty(nd, np.int64)
    ast = np.empty(nd, np.int64)
    for i in range(nd):
        p = T_[row, R_IATTR + 6 + i]
        oshape[i] = ishape[p]
        ast[i] = cst[p]
    g = row_grad_addr(C, row, 0)
    if KERNEL_DTYPE == F32:
        _permute_runs(f32_at(ga, n), f32_at(g, n), oshape, ast, True)
    else:
        _permute_runs(f64_at(ga, n), f64_at(g, n), oshape, ast, True)
    return K_OK


# (along the last dim: a row is a run of the contiguous input's memory)
register(OpDef("safe_softmax", "SafeSoftmaxBackward0", "custom", module=_M,
               fwd_fn="safe_softmax_fwd", bwd_fn="safe_softmax_bwd", nin=1, diff=(0,),
               saves_if={0: ("out",)}, per_dtype=True, attrs=("width", "causal", "qlen")))
# (row 1 of mf and batch element 1 of kp are masked whole: 0 there, and no gradient)
samples("safe_softmax", "F.scaled_dot_product_attention(q, k, v, attn_mask=m)",
        Sample("F.scaled_dot_product_attention(q, k, v, attn_mask=mf)",
               mf=Fixed([[True, False, True, True, False]] + [[False] * 5]
                        + [[True, True, False, False, True]], "mask")),
        Sample("F.scaled_dot_product_attention(q, k, v, is_causal=True)", q=T(2, 6, 4)),
        Sample("F.scaled_dot_product_attention(q, k, v, m, scale=0.3)",
               q=T(2, 2, 3, 4), k=T(2, 2, 5, 4), v=T(2, 2, 5, 4)),
        Sample("F.multi_head_attention_forward(x, x, x, 4, 2, w, None, None, None, False, 0.0, "
               "wo, None, key_padding_mask=kp, need_weights=False)[0]",
               x=T(3, 2, 4), w=T(12, 4), wo=T(4, 4),
               kp=Fixed([[False, True, False], [True, True, True]], "mask")),
        errors=["F.scaled_dot_product_attention(q, k[..., :3], v, attn_mask=m)",
                "F.scaled_dot_product_attention(q, k, v, attn_mask=m[:, :4])",
                "F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=True)",
                "F.scaled_dot_product_attention(q[0, 0], k[0, 0], v[0, 0], attn_mask=m)",
                "F.scaled_dot_product_attention(q, k, v, attn_mask=m, dropout_p=2.0)"],
        q=T(2, 3, 4), k=T(2, 5, 4), v=T(2, 5, 4), m=Mask(3, 5))

register(OpDef("permute_copy", "CloneBackward0", "custom", module=_M, fwd_fn="permute_copy_fwd",
               bwd_fn="permute_copy_bwd", nin=1, diff=(0,), saves_if={0: ()}, per_dtype=True,
               attrs=("nd", "shape[5]", "perm[5]")))
samples("permute_copy",
        "F.multi_head_attention_forward(x, x, x, 4, 2, w, b, None, None, False, 0.0, wo, bo)[0]",
        "F.multi_head_attention_forward(x, x, x, 4, 2, w, b, None, None, False, 0.0, wo, bo, "
        "need_weights=False)[0]",
        x=T(3, 2, 4), w=T(12, 4), b=T(12), wo=T(4, 4), bo=T(4))
