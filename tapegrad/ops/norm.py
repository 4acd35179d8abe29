"""The norm op family: batch normalisation as one row (PyTorch's native_batch_norm, which
instance_norm and group_norm share), the running statistics' update it makes in
training, and embedding_bag (at the end).

The input is read as (outer, channels, inner) in row-major order (a strided input is
gathered by the kernel): batch_norm's (N, C, *) is (N, C, prod(*)); instance_norm's is
(1, N * C, prod(*)), each sample's channel a channel of its own, the weight shared by the
N copies (the weight index is the channel modulo `wchannels`, so no repeated weight is
made); group_norm's is (1, N * G, C / G * prod(*)) with `sub` = C / G runs per channel,
each with its own weight. An (N, C) input (inner 1) is walked by rows, its channels
being columns. Statistics are float64 sums (PyTorch's CPU kernels accumulate in double
too); the backward recomputes them from the saved input (PyTorch saves them: 2 * C
values), as layer_norm does. (The composition of mean, sub, mul, rsqrt and affine ops
took five times PyTorch's time on a (64, 32, 16, 16) step, and its grad_fn was the last
of them.)
"""
import math

import numpy as np

from .._engine.layout import (K_OK, F32, F64, I64, E_DTYPE, E_VALUE, M_DTYPE, M_NUMEL, M_SHAPE,
                              R_IATTR, R_IN, IN_SAVED, IW, R_OSHAPE, R_OSAVED, R_ODTYPE,
                              C_NOUTS)
from .._engine.lowlevel import (jit, ctx_of, meta_of, tape_of, fattr_of, f32_at, f64_at, i64_at,
                                err_of, outs_of)
from .._engine.core import (data_addr, meta_contiguous, input_id, set_outputs1,
                            row_grad_addr, edge_grad_addr)
from .along import _shape, _values32, _values64
from .opinfo import DISTINCT, POS, Fixed, Index, T
from .registry import OpDef, Sample, register, samples
from ._vmath import vsum, vsqdev

_M = __name__
KERNEL_DTYPE = -1       # F32 or F64 in each compiled copy of the kernels


@jit
def _stats(X, outer, nch, inner, c):
    """(mean, sum of squared deviations) of channel c, in float64 (two passes)."""
    s = 0.0
    for n in range(outer):
        p = (n * nch + c) * inner
        s += vsum(X[p:p + inner], 0.0)
    cnt = outer * inner
    mean = s / cnt if cnt else 0.0
    q = 0.0
    for n in range(outer):
        p = (n * nch + c) * inner
        q += vsqdev(X[p:p + inner], mean)
    return mean, q


@jit(fastmath={"reassoc", "nsz"})
def _vdevdot(X, G, m):
    """sum((X - m) * G) in float64, reassociated so that it vectorises."""
    s = 0.0
    for j in range(X.shape[0]):
        s += (np.float64(X[j]) - m) * np.float64(G[j])
    return s


@jit
def _col_stats(X, N, C):
    """Per column of an (N, C) row-major X: (means, sums of squared deviations) in
    float64, walking rows so the loops run along memory (a (N, C) batch norm's
    channels are columns: one strided run per channel would be slow)."""
    S = np.zeros(C)
    for n in range(N):
        R = X[n * C:(n + 1) * C]
        for c in range(C):
            S[c] += R[c]
    if N:
        for c in range(C):
            S[c] = S[c] / N
    Q = np.zeros(C)
    for n in range(N):
        R = X[n * C:(n + 1) * C]
        for c in range(C):
            d = np.float64(R[c]) - S[c]
            Q[c] += d * d
    return S, Q


@jit
def _bn_forward_cols(X, Y, W, B, N, C, training, eps):
    """_bn_forward of an (N, C) input (inner 1, one weight per channel)."""
    A = np.empty(C, X.dtype)
    Sh = np.empty(C, X.dtype)
    if training:
        S, Q = _col_stats(X, N, C)
        for c in range(C):
            m = X.dtype.type(S[c])
            a = X.dtype.type(1.0 / math.sqrt(Q[c] / N + eps))
            if W.shape[0]:
                a = a * W[c]
            A[c] = a
            Sh[c] = B[c] - m * a if B.shape[0] else -m * a
    else:
        for c in range(C):
            A[c] = W[c]
            Sh[c] = B[c]
    for n in range(N):
        Xr = X[n * C:(n + 1) * C]
        Yr = Y[n * C:(n + 1) * C]
        for c in range(C):
            Yr[c] = Xr[c] * A[c] + Sh[c]


@jit
def _bn_backward_cols(X, G, W, GX, GW, GB, N, C, training, eps):
    """_bn_backward of an (N, C) input (inner 1, one weight per channel)."""
    Mn = np.zeros(C)
    Inv = np.ones(C)
    if training and X.shape[0]:
        Mn, Q = _col_stats(X, N, C)
        for c in range(C):
            Inv[c] = 1.0 / math.sqrt(Q[c] / N + eps)
    SG = np.zeros(C)
    DOT = np.zeros(C)
    for n in range(N):
        Gr = G[n * C:(n + 1) * C]
        for c in range(C):
            SG[c] += Gr[c]
        if X.shape[0]:
            Xr = X[n * C:(n + 1) * C]
            for c in range(C):
                DOT[c] += (np.float64(Xr[c]) - Mn[c]) * Gr[c]
    for c in range(GB.shape[0]):
        GB[c] += SG[c]
    for c in range(GW.shape[0]):
        GW[c] += DOT[c] * Inv[c] if training else DOT[c]
    if GX.shape[0] == 0:
        return
    K = np.empty(C)
    GM = np.empty(C)
    F = np.empty(C)
    for c in range(C):
        w = np.float64(W[c]) if W.shape[0] else 1.0
        if training:
            K[c] = DOT[c] * Inv[c] * Inv[c] / N
            GM[c] = SG[c] / N
            F[c] = Inv[c] * w
        else:
            K[c] = 0.0
            GM[c] = 0.0
            F[c] = w
    for n in range(N):
        Gr = G[n * C:(n + 1) * C]
        Ar = GX[n * C:(n + 1) * C]
        if training:
            Xr = X[n * C:(n + 1) * C]
            for c in range(C):
                Ar[c] += ((Gr[c] - GM[c]) - (np.float64(Xr[c]) - Mn[c]) * K[c]) * F[c]
        else:
            for c in range(C):
                Ar[c] += Gr[c] * F[c]


@jit
def _bn_forward(X, Y, W, B, outer, nch, inner, wch, sub, training, eps):
    """Y = X normalised per channel (training: by the channel's batch statistics, times W
    plus B when they are not empty; eval: W and B are the scale and shift PyTorch's
    eval kernel applies, x * scale + shift). A channel's inner elements are `sub` runs
    of inner / sub, run s of channel c taking weight (c % wch) * sub + s (group_norm's
    channels within a group; 1 otherwise). The scale and shift are rounded to the dtype
    and applied in it, as PyTorch's transform kernel does."""
    if inner == 1 and sub == 1 and wch == nch:
        _bn_forward_cols(X, Y, W, B, outer, nch, training, eps)
        return
    one = X.dtype.type(1.0)
    isz = inner // sub
    for c in range(nch):
        mean, q = 0.0, 0.0
        if training:
            mean, q = _stats(X, outer, nch, inner, c)
        m = X.dtype.type(mean)
        invstd = X.dtype.type(1.0 / math.sqrt(q / (outer * inner) + eps)) if training else one
        for s in range(sub):
            k = (c % wch) * sub + s
            if training:
                a = invstd
                if W.shape[0]:
                    a = a * W[k]
                sh = -m * a
                if B.shape[0]:
                    sh = B[k] - m * a
            else:
                a = W[k] * one
                sh = B[k] * one
            for n in range(outer):
                p = (n * nch + c) * inner + s * isz
                Xr = X[p:p + isz]
                Yr = Y[p:p + isz]
                for j in range(isz):
                    Yr[j] = Xr[j] * a + sh


@jit
def _bn_backward(X, G, W, GX, GW, GB, outer, nch, inner, wch, sub, training, eps):
    """GX, GW, GB += the gradients (each only when its array is not empty). X is empty
    when only the bias wants one; W is empty when absent (training) or not saved.
    Training, with gw = dy * w, xhat = (x - mean) invstd and means over the channel:
    dx = invstd (gw - mean(gw) - xhat mean(gw xhat)) (PyTorch's formula when w is one per
    channel), dw = sum(dy xhat), db = sum(dy). Eval (W the scale): dx = dy scale,
    dscale = sum(dy x), dshift = sum(dy)."""
    if inner == 1 and sub == 1 and wch == nch:
        _bn_backward_cols(X, G, W, GX, GW, GB, outer, nch, training, eps)
        return
    cnt = outer * inner
    isz = inner // sub
    for c in range(nch):
        mean, invstd = 0.0, 1.0
        if training and X.shape[0]:
            mean, q = _stats(X, outer, nch, inner, c)
            invstd = 1.0 / math.sqrt(q / cnt + eps)
        sgw = 0.0
        dotw = 0.0
        for s in range(sub):
            k = (c % wch) * sub + s
            w = np.float64(W[k]) if W.shape[0] else 1.0
            sg = 0.0
            dot = 0.0
            for n in range(outer):
                p = (n * nch + c) * inner + s * isz
                Gr = G[p:p + isz]
                sg += vsum(Gr, 0.0)
                if X.shape[0]:
                    dot += _vdevdot(X[p:p + isz], Gr, mean)
            if GB.shape[0]:
                GB[k] += sg
            if GW.shape[0]:
                GW[k] += dot * invstd if training else dot
            sgw += sg * w
            dotw += dot * w
        if GX.shape[0] == 0:
            continue
        kk = dotw * invstd * invstd / cnt if training else 0.0
        gm = sgw / cnt if training else 0.0
        for s in range(sub):
            k = (c % wch) * sub + s
            w = np.float64(W[k]) if W.shape[0] else 1.0
            for n in range(outer):
                p = (n * nch + c) * inner + s * isz
                Xr = X[p:p + isz]
                Gr = G[p:p + isz]
                Ar = GX[p:p + isz]
                if training:
                    for j in range(isz):
                        Ar[j] += ((Gr[j] * w - gm) - (np.float64(Xr[j]) - mean) * kk) * invstd
                else:
                    for j in range(isz):
                        Ar[j] += Gr[j] * W[k]


def batch_norm_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    x = input_id(C, row, 0)
    w = input_id(C, row, 1)
    b = input_id(C, row, 2)
    dt = M[x, M_DTYPE]
    if dt != KERNEL_DTYPE or (w >= 0 and M[w, M_DTYPE] != dt) or (b >= 0 and M[b, M_DTYPE] != dt):
        return E_DTYPE
    outer = T[row, R_IATTR]
    nch = T[row, R_IATTR + 1]
    inner = T[row, R_IATTR + 2]
    training = T[row, R_IATTR + 3] != 0
    wch = T[row, R_IATTR + 4]
    sub = T[row, R_IATTR + 5]
    n = outer * nch * inner
    shape, _ = _shape(M, x)
    out = meta_contiguous(C, dt, shape.shape[0], shape, False)
    if out < 0:
        return out
    eps = fattr_of(C)[row]
    wa, nw = (data_addr(C, w), wch * sub) if w >= 0 else (0, 0)
    ba, nb = (data_addr(C, b), wch * sub) if b >= 0 else (0, 0)
    if KERNEL_DTYPE == F32:
        _bn_forward(_values32(C, x, n), f32_at(data_addr(C, out), n), f32_at(wa, nw),
                    f32_at(ba, nb), outer, nch, inner, wch, sub, training, eps)
    else:
        _bn_forward(_values64(C, x, n), f64_at(data_addr(C, out), n), f64_at(wa, nw),
                    f64_at(ba, nb), outer, nch, inner, wch, sub, training, eps)
    return set_outputs1(C, out)


def batch_norm_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    gx = edge_grad_addr(C, row, 0)
    gw = edge_grad_addr(C, row, 1)
    gb = edge_grad_addr(C, row, 2)
    if gx == 0 and gw == 0 and gb == 0:
        return K_OK
    outer = T[row, R_IATTR]
    nch = T[row, R_IATTR + 1]
    inner = T[row, R_IATTR + 2]
    training = T[row, R_IATTR + 3] != 0
    wch = T[row, R_IATTR + 4]
    sub = T[row, R_IATTR + 5]
    nw = wch * sub
    n = outer * nch * inner
    eps = fattr_of(C)[row]
    g = row_grad_addr(C, row, 0)
    x = T[row, R_IN + IN_SAVED]             # (-1: only the bias wants a gradient)
    w = T[row, R_IN + IW + IN_SAVED]        # (-1: no weight, or x needs no gradient)
    wa = data_addr(C, w) if w >= 0 else 0
    if w < 0:
        nw = 0
    if KERNEL_DTYPE == F32:
        _bn_backward(_values32(C, x, n) if x >= 0 else np.empty(0, np.float32),
                     f32_at(g, n), f32_at(wa, nw), f32_at(gx, n if gx else 0),
                     f32_at(gw, wch * sub if gw else 0),
                     f32_at(gb, wch * sub if gb else 0), outer, nch, inner, wch, sub,
                     training, eps)
    else:
        _bn_backward(_values64(C, x, n) if x >= 0 else np.empty(0),
                     f64_at(g, n), f64_at(wa, nw), f64_at(gx, n if gx else 0),
                     f64_at(gw, wch * sub if gw else 0),
                     f64_at(gb, wch * sub if gb else 0), outer, nch, inner, wch, sub,
                     training, eps)
    return K_OK


# ---------------------------------------------------------------- running statistics
@jit
def _bn_update(X, RM, RV, O, outer, nch, inner, wch, momentum):
    """O[0:wch] = the new running mean, O[wch:2 wch] the new running variance (unbiased
    batch variance), as PyTorch's update: momentum * batch + (1 - momentum) * running,
    in double; channels sharing a running value (instance_norm's copies) averaged."""
    cnt = outer * inner
    copies = nch // wch
    for k in range(wch):
        O[k] = 0.0
        O[wch + k] = 0.0
    S = np.empty(0)
    Q = np.empty(0)
    if inner == 1:
        S, Q = _col_stats(X, outer, nch)
    for c in range(nch):
        k = c % wch
        if inner == 1:
            mean, q = S[c], Q[c]
        else:
            mean, q = _stats(X, outer, nch, inner, c)
        var = q / (cnt - 1) if cnt > 1 else np.inf
        # (each copy's new value rounded to the dtype before the average, as PyTorch
        # writes the copies' running values first)
        O[k] += X.dtype.type(momentum * mean + (1.0 - momentum) * np.float64(RM[k]))
        O[wch + k] += X.dtype.type(momentum * var + (1.0 - momentum) * np.float64(RV[k]))
    if copies > 1:
        for k in range(2 * wch):
            O[k] = O[k] / copies


def batch_norm_update_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    x = input_id(C, row, 0)
    rm = input_id(C, row, 1)
    rv = input_id(C, row, 2)
    dt = M[x, M_DTYPE]
    if dt != KERNEL_DTYPE or M[rm, M_DTYPE] != dt or M[rv, M_DTYPE] != dt:
        return E_DTYPE
    outer = T[row, R_IATTR]
    nch = T[row, R_IATTR + 1]
    inner = T[row, R_IATTR + 2]
    wch = T[row, R_IATTR + 4]
    n = outer * nch * inner
    shape = np.empty(1, np.int64)
    shape[0] = 2 * wch
    out = meta_contiguous(C, dt, 1, shape, False)
    if out < 0:
        return out
    momentum = fattr_of(C)[row]
    if KERNEL_DTYPE == F32:
        _bn_update(_values32(C, x, n), _values32(C, rm, wch), _values32(C, rv, wch),
                   f32_at(data_addr(C, out), 2 * wch), outer, nch, inner, wch, momentum)
    else:
        _bn_update(_values64(C, x, n), _values64(C, rm, wch), _values64(C, rv, wch),
                   f64_at(data_addr(C, out), 2 * wch), outer, nch, inner, wch, momentum)
    return set_outputs1(C, out)


def batch_norm_update_bwd(caddr, row):
    return K_OK                 # never called: running statistics carry no gradient


_ATTRS = ("outer", "channels", "inner", "training", "wchannels", "sub")

# (x's gradient reads x and the weight, the weight's reads x; the bias's reads neither)
# (next_functions: three entries, None for an absent weight or bias, as PyTorch's)
register(OpDef("batch_norm", "NativeBatchNormBackward0", "custom", module=_M,
               fwd_fn="batch_norm_fwd", bwd_fn="batch_norm_bwd", nin=3, diff=(0, 1, 2),
               saves_if={0: ("a", "b"), 1: ("a",)}, per_dtype=True,
               attrs=_ATTRS)).edges = (0, 1, 2)
samples("batch_norm",
        "F.batch_norm(x, None, None, w, b, training=True)",
        "F.batch_norm(x, None, None, training=True, eps=1e-3)",
        Sample("F.batch_norm(x, None, None, w, b, True)", x=T(2, 3, 4)),
        Sample("F.batch_norm(x, None, None, None, b, True)", x=T(2, 3, 2, 2)),
        Sample("F.batch_norm(x.transpose(0, 2), None, None, w, b, True)", x=T(4, 3, 2)),
        Sample("F.instance_norm(x, weight=w, bias=b)", x=T(2, 3, 4)),
        Sample("F.instance_norm(x)", x=T(2, 3, 2, 2)),
        Sample("F.batch_norm(x, m, v, w, b)", x=T(4, 3, 2), m=T(3, grad=False),
               v=T(3, domain=POS, grad=False)),
        errors=["F.batch_norm(x, None, None, w, b, True, eps=1e-3, momentum=0.1, cudnn=1)",
                Sample("F.batch_norm(x, None, None, w, b, True)", w=T(4)),
                Sample("F.batch_norm(x, None, None, training=True)", x=T(1, 3))],
        x=T(4, 3), w=T(3), b=T(3))
register(OpDef("batch_norm_update", "BatchNormUpdateBackward", "custom", module=_M,
               fwd_fn="batch_norm_update_fwd", bwd_fn="batch_norm_update_bwd", nin=3,
               diff=(), per_dtype=True, attrs=_ATTRS))
samples("batch_norm_update",
        "(F.batch_norm(x, m, v, training=True), L.stack([m, v]))[1]",
        Sample("(F.batch_norm(x, m, v, None, None, True, 0.3), L.stack([m, v]))[1]",
               x=T(3, 3, 4)),
        Sample("(F.instance_norm(x, m, v, momentum=0.2), L.stack([m, v]))[1]", x=T(2, 3, 4)),
        grad="running statistics are updated under no_grad: no gradient",
        records="the update records no node: the running buffers have no history",
        x=T(4, 3), m=T(3, grad=False), v=T(3, domain=POS, grad=False))
register(OpDef("group_norm", "NativeGroupNormBackward0", "custom", module=_M,
               fwd_fn="batch_norm_fwd", bwd_fn="batch_norm_bwd", nin=3, diff=(0, 1, 2),
               saves_if={0: ("a", "b"), 1: ("a",)}, per_dtype=True,
               attrs=_ATTRS)).edges = (0, 1, 2)
samples("group_norm", "F.group_norm(x, 2, w, b)", "F.group_norm(x, 1)",
        "F.group_norm(x, 4, weight=w, eps=1e-3)",
        Sample("F.group_norm(x, 3, w, b)", x=T(2, 6, 2, 2), w=T(6), b=T(6)),
        Sample("L.nn.GroupNorm(2, 4, dtype=x.dtype)(x)", x=T(3, 4),
               replay="the module built inside the step makes Parameters: a graph break"),
        errors=["F.group_norm(x, 3)", Sample("F.group_norm(x, 2, w)", w=T(3))],
        x=T(2, 4, 3), w=T(4), b=T(4))


# ---------------------------------------------------------------- embedding_bag
# PyTorch's embedding_bag as one row: inputs the (R, D) source rows (the weight, or the
# per-sample-weighted gathered rows), the int64 indices into them (n) and the int64
# offsets (L) where bags start (include_last_offset: the last is the end). Integer
# attributes: mode (0 sum, 1 mean, 2 max), bags, padding_idx (-1: none; its entries are
# left out, a bag of none gives zeros). The kernel checks the offsets and indices itself,
# so a compiled replay checks them too. Sum and mean save the indices and offsets; max
# has a second output, the row each maximum came from (-1: an empty bag), saved as
# PyTorch saves max_indices.
@jit
def _bag_bounds(off, b, n):
    """[start, end) of bag b, clamped inside [0, n]."""
    L = off.shape[0]
    s = min(max(off[b], 0), n)
    e = off[b + 1] if b + 1 < L else n
    return s, min(max(e, s), n)


@jit
def _bag_check(idx, off, rows, E):
    """0 when the offsets and indices are valid, else E_VALUE with E[1] what (1: offsets[0]
    is not 0, 2: offsets[-1] is past the input, 0: an index is out of range) and E[2:5]
    the values PyTorch's message names."""
    n = idx.shape[0]
    L = off.shape[0]
    if L and off[0] != 0:
        E[1] = 1
        E[2] = off[0]
        return E_VALUE
    if L and off[L - 1] > n:
        E[1] = 2
        E[2] = off[L - 1]
        E[3] = n
        return E_VALUE
    for i in range(n):
        v = idx[i]
        if v < 0 or v >= rows:
            E[1] = 0
            E[2] = i
            E[3] = v
            E[4] = rows
            return E_VALUE
    return 0


@jit
def _bag_forward(W, D, idx, off, nbags, mode, pad, O, I):
    n = idx.shape[0]
    for b in range(nbags):
        s, e = _bag_bounds(off, b, n)
        Ob = O[b * D:(b + 1) * D]
        for j in range(D):
            Ob[j] = 0.0
        if mode == 2:
            for j in range(D):
                I[b * D + j] = -1
        cnt = 0
        for i in range(s, e):
            v = idx[i]
            if v == pad:
                continue
            Wr = W[v * D:(v + 1) * D]
            if mode == 2:
                for j in range(D):
                    if cnt == 0 or Wr[j] > Ob[j]:
                        Ob[j] = Wr[j]
                        I[b * D + j] = v
            else:
                for j in range(D):
                    Ob[j] += Wr[j]
            cnt += 1
        if mode == 1 and cnt > 0:
            for j in range(D):
                Ob[j] = Ob[j] / cnt


@jit
def _bag_backward(G, D, idx, off, nbags, mode, pad, I, GW):
    if mode == 2:
        for k in range(nbags * D):
            v = I[k]
            if v >= 0:
                GW[v * D + k % D] += G[k]
        return
    n = idx.shape[0]
    for b in range(nbags):
        s, e = _bag_bounds(off, b, n)
        Gb = G[b * D:(b + 1) * D]
        cnt = 0
        if mode == 1:
            for i in range(s, e):
                if idx[i] != pad:
                    cnt += 1
        for i in range(s, e):
            v = idx[i]
            if v == pad:
                continue
            Dst = GW[v * D:(v + 1) * D]
            if mode == 1:
                for j in range(D):
                    Dst[j] += Gb[j] / cnt
            else:
                for j in range(D):
                    Dst[j] += Gb[j]


def embedding_bag_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    w = input_id(C, row, 0)
    p = input_id(C, row, 1)
    q = input_id(C, row, 2)
    dt = M[w, M_DTYPE]
    if (dt != F32 and dt != F64) or M[p, M_DTYPE] != I64 or M[q, M_DTYPE] != I64:
        return E_DTYPE
    rows = M[w, M_SHAPE]
    D = M[w, M_SHAPE + 1]
    n = M[p, M_NUMEL]
    idx = i64_at(data_addr(C, p), n)
    off = i64_at(data_addr(C, q), M[q, M_NUMEL])
    st = _bag_check(idx, off, rows, err_of(C))
    if st != 0:                     # (checked before anything is made: nothing to undo)
        return st
    mode = T[row, R_IATTR]
    nbags = T[row, R_IATTR + 1]
    pad = T[row, R_IATTR + 2]
    shape = np.empty(2, np.int64)
    shape[0] = nbags
    shape[1] = D
    out = meta_contiguous(C, dt, 2, shape, False)
    if out < 0:
        return out
    inds = -1
    if mode == 2:
        inds = meta_contiguous(C, I64, 2, shape, False)
        if inds < 0:
            return inds
    k = nbags * D
    I = i64_at(data_addr(C, inds), k) if inds >= 0 else np.empty(0, np.int64)
    if dt == F32:
        _bag_forward(_values32(C, w, rows * D), D, idx, off, nbags, mode, pad,
                     f32_at(data_addr(C, out), k), I)
    else:
        _bag_forward(_values64(C, w, rows * D), D, idx, off, nbags, mode, pad,
                     f64_at(data_addr(C, out), k), I)
    if inds < 0:
        return set_outputs1(C, out)
    outs = outs_of(C)
    outs[0] = out
    outs[1] = inds
    C[C_NOUTS] = 2
    return K_OK


def embedding_bag_bwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    gw = edge_grad_addr(C, row, 0)
    if gw == 0:
        return K_OK
    mode = T[row, R_IATTR]
    nbags = T[row, R_IATTR + 1]
    pad = T[row, R_IATTR + 2]
    rows = T[row, R_IATTR + 3]
    D = T[row, R_OSHAPE + 1]
    k = nbags * D
    g = row_grad_addr(C, row, 0)
    if mode == 2:
        I = i64_at(data_addr(C, T[row, R_OSAVED]), k)
        idx = np.empty(0, np.int64)
        off = np.empty(0, np.int64)
    else:
        p = T[row, R_IN + IW + IN_SAVED]
        q = T[row, R_IN + 2 * IW + IN_SAVED]
        idx = i64_at(data_addr(C, p), M[p, M_NUMEL])
        off = i64_at(data_addr(C, q), M[q, M_NUMEL])
        I = np.empty(0, np.int64)
    if T[row, R_ODTYPE] == F32:
        _bag_backward(f32_at(g, k), D, idx, off, nbags, mode, pad, I, f32_at(gw, rows * D))
    else:
        _bag_backward(f64_at(g, k), D, idx, off, nbags, mode, pad, I, f64_at(gw, rows * D))
    return K_OK


def _bag_errors(e):
    """PyTorch's words for offsets and indices its kernels refuse (the kernel's details;
    the index message depends on the kernel PyTorch would run: the front's `message`)."""
    if e.code != E_VALUE:
        return None
    what, a, b = int(e.err[1]), int(e.err[2]), int(e.err[3])
    if what == 1:
        return RuntimeError(f"offsets[0] has to be 0, i.e., the first sequence in the "
                            f"mini-batch has to start from position 0. However, got {a}\n"
                            "[ tapegrad.LongTensor{} ]")
    if what == 2:
        return RuntimeError(f"offsets[-1] can not be greater than input's length {b} but got "
                            f"offsets[-1] of {a}")
    if e.name == "embedding_bag_max" or e.type_a != "Float":
        return RuntimeError(f"embedding_bag: Expected idx >= 0 && idx < num_embeddings but "
                            f"found idx to be {b}")
    return RuntimeError(f"Index {a} of input takes value {b} which is not in the valid range "
                        f"[0, {int(e.err[4])})")


_BAG_ATTRS = ("mode", "bags", "padding_idx", "rows")
# (next_functions: the weight's alone, as PyTorch's lists the weight first; the indices
# and offsets are not differentiable)
_bag = register(OpDef("embedding_bag", "EmbeddingBagBackward0", "custom", module=_M,
                      fwd_fn="embedding_bag_fwd", bwd_fn="embedding_bag_bwd", nin=3,
                      diff=(0,), saves_if={0: ("b", "c")}, attrs=_BAG_ATTRS,
                      errors=_bag_errors))
_bag.edges = (0,)
samples("embedding_bag", "F.embedding_bag(i, x, o)", "F.embedding_bag(i, x, o, mode='sum')",
        "F.embedding_bag(i, x, o, mode='sum', padding_idx=2)",
        "F.embedding_bag(i, x, e, include_last_offset=True)",
        Sample("F.embedding_bag(j, x, mode='mean')", j=Index(3, 2, high=5)),
        "F.embedding_bag(i, x, o, mode='sum', per_sample_weights=p)",
        "F.embedding_bag(i, x.t().contiguous().t(), o)",
        errors=[Sample("F.embedding_bag(i, x, o)", i=Fixed([0, 7, 1, 2, 3, 4])),
                Sample("F.embedding_bag(i, x, o)", o=Fixed([1, 3]))],
        x=T(5, 4), i=Fixed([0, 2, 4, 1, 2, 3]), o=Fixed([0, 2, 2]), e=Fixed([0, 2, 6]),
        p=T(6))
_bag_max = register(OpDef("embedding_bag_max", "EmbeddingBagBackward0", "custom", module=_M,
                          fwd_fn="embedding_bag_fwd", bwd_fn="embedding_bag_bwd", nin=3,
                          diff=(0,), saves_if={0: ("out",)}, saved_out=1, attrs=_BAG_ATTRS,
                          errors=_bag_errors))
_bag_max.edges = (0,)
samples("embedding_bag_max", "F.embedding_bag(i, x, o, mode='max')",
        "F.embedding_bag(i, x, o, mode='max', padding_idx=4)",
        Sample("F.embedding_bag(j, x, mode='max')", j=Index(3, 2, high=5)),
        errors=[Sample("F.embedding_bag(i, x, o, mode='max')", i=Fixed([0, 7, 1, 2, 3, 4]))],
        x=T(5, 4, domain=DISTINCT), i=Fixed([0, 2, 4, 1, 2, 3]), o=Fixed([0, 2, 2]))
