"""Loss functions as single fused rows, where PyTorch has one node: the pointwise losses
(mse, huber, smooth_l1, binary cross entropy with and without logits) and nll_loss /
cross_entropy (log_softmax and nll in one numerically stable pass).

Row int attributes: [0] reduction (0 none, 1 mean, 2 sum), [1] the loss kind; pointwise:
the float attribute is delta / beta; nll: [2] ignore_index, [3:6] N, C, D (the input is
contiguous N x C x D, targets N x D), [6] 1 when a class weight is the third input, and the
float attribute is the label smoothing. Forward-only iargs FV: the output's ndim and shape.
"""
import math

import numpy as np

from .._engine.layout import (K_OK, F32, F64, E_DTYPE, E_VALUE, M_DTYPE, M_NDIM, M_SHAPE,
                              M_STRIDE, R_IATTR, R_IN, IW, IN_SAVED, R_ODTYPE,
                              R_NIN, M_NUMEL, D_IDX)
from .._engine.lowlevel import jit, ctx_of, meta_of, tape_of, fattr_of, iargs_of, err_of, \
    f32_at, f64_at, i64_at, desc_of
from .._engine.core import (data_addr, meta_contiguous, input_id, set_outputs1, span,
                            is_contiguous, row_grad_addr, edge_grad_addr, out_numel)
from .index import offsets
from .along import _read, _write, _accumulate
from .opinfo import POS, PROB, T, XY, Fixed, Index
from .registry import OpDef, Sample, register, samples
from ._vmath import exp, log1p, maxnum, vsum, vsqdist, pick

_M = __name__
FV = 16
KERNEL_DTYPE = -1       # F32 or F64 in each compiled copy of nll's kernels (_per_dtype)
NONE, MEAN, SUM = 0, 1, 2
MSE, HUBER, SMOOTH_L1, BCE, BCE_LOGITS, BCE_LOGITS_POS, BCE_LOGITS_BOTH = 0, 1, 2, 3, 4, 5, 6


@jit
def _values(C, t):
    """t's elements in row-major order, as float64."""
    M = meta_of(C)
    if is_contiguous(M, t):
        return _read(M[t, M_DTYPE], data_addr(C, t), M[t, M_NUMEL])
    nd = M[t, M_NDIM]
    off = offsets(M[t, M_SHAPE:M_SHAPE + nd].copy(), M[t, M_STRIDE:M_STRIDE + nd].copy())
    V = np.empty(off.shape[0], np.float64)
    if M[t, M_DTYPE] == F32:
        src = f32_at(data_addr(C, t), span(M, t))
        for j in range(V.shape[0]):
            V[j] = src[off[j]]
    else:
        src64 = f64_at(data_addr(C, t), span(M, t))
        for j in range(V.shape[0]):
            V[j] = src64[off[j]]
    return V


@jit
def _loss_output(C, dt, red, L, denom, shape):
    """The loss tensor: the per-element losses L (reduction none, of the given shape), or
    their sum, divided by denom for the mean. (Sums here use vsum, not ndarray.sum: a
    kernel calling that method makes its cache entry import numba.np.arraymath, and with
    it SciPy's linalg, on every warm start.)"""
    if red == NONE:
        out = meta_contiguous(C, dt, shape.shape[0], shape, False)
        if out >= 0:
            _write(C, dt, data_addr(C, out), L)
        return out
    out = meta_contiguous(C, dt, 0, np.empty(0, np.int64), False)
    if out >= 0:
        V = np.empty(1, np.float64)
        V[0] = vsum(L, 0.0) / denom if red == MEAN else vsum(L, 0.0)
        _write(C, dt, data_addr(C, out), V)
    return out


@jit
def _log_clamped(v):
    return max(math.log(v), -100.0) if v > 0.0 else -100.0


@jit
def _softplus_neg(x):
    """log(1 + exp(-x)), stable."""
    return max(-x, 0.0) + math.log1p(math.exp(-abs(x)))


@jit
def _pointwise(kind, x, y, w, pw, s):
    """(loss, d loss / dx, d loss / dy) of one element; w the weight, pw the positive
    weight (BCE_LOGITS_POS, BCE_LOGITS_BOTH). Huber, smooth L1 and unweighted BCE with
    logits have loops of their own (_huber_like_*, _bce_logits_*)."""
    if kind == MSE:
        d = x - y
        return d * d, 2.0 * d, -2.0 * d
    if kind == BCE:
        lx = _log_clamped(x)
        l1x = _log_clamped(1.0 - x)
        loss = -w * (y * lx + (1.0 - y) * l1x)
        # the target's gradient is PyTorch's -logit(x), unclamped (infinite at 0 and 1)
        return (loss, w * (x - y) / max((1.0 - x) * x, 1e-12),
                w * (math.log(1.0 - x) - math.log(x)))
    sig = 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))
    if kind == BCE_LOGITS:
        return w * ((1.0 - y) * x + _softplus_neg(x)), w * (sig - y), -w * x
    c = 1.0 + (pw - 1.0) * y
    return (w * ((1.0 - y) * x + c * _softplus_neg(x)), w * (c * sig - pw * y),
            w * (-x + (pw - 1.0) * _softplus_neg(x)))


@jit
def _weights(kind, W, present, j, n):
    """(weight, positive weight) of element j: the third input holds the weight, the
    positive weight (BCE_LOGITS_POS), or both stacked (BCE_LOGITS_BOTH)."""
    if not present:
        return 1.0, 1.0
    if kind == BCE_LOGITS_POS:
        return 1.0, W[j]
    if kind == BCE_LOGITS_BOTH:
        return W[j], W[n + j]
    return W[j], 1.0


@jit
def _direct(M, kind, red, x, y, w):
    """Whether a row of mse, huber, smooth L1 or unweighted BCE with logits reads its
    contiguous operands in place (no float64 copies): the same values as the general path
    computes (the sum reassociated)."""
    return ((kind == MSE or kind == HUBER or kind == SMOOTH_L1 or kind == BCE_LOGITS)
            and red != NONE and w < 0
            and is_contiguous(M, x) and is_contiguous(M, y) and M[x, M_NUMEL] == M[y, M_NUMEL])


@jit
def _mse_grads(X, Y, n, g, GX, GY, want_x, want_y):
    for j in range(n):
        d = np.float64(X[j]) - np.float64(Y[j])
        if want_x:
            GX[j] += g * (2.0 * d)
        if want_y:
            GY[j] += g * (-2.0 * d)


@jit
def _direct_sum(kind, X, Y, s, zero):
    return vsqdist(X, Y) if kind == MSE else _losses_sum(kind, X, Y, s, zero)


@jit
def _direct_fwd(C, dt, red, kind, s, x, y):
    M = meta_of(C)
    n = M[x, M_NUMEL]
    out = meta_contiguous(C, dt, 0, M[x, M_SHAPE:M_SHAPE], False)
    if out < 0:
        return out
    if dt == F32:
        v = _direct_sum(kind, f32_at(data_addr(C, x), n), f32_at(data_addr(C, y), n), s,
                        np.float32(0.0))
        f32_at(data_addr(C, out), 1)[0] = v / n if red == MEAN else v
    else:
        v = _direct_sum(kind, f64_at(data_addr(C, x), n), f64_at(data_addr(C, y), n), s, 0.0)
        f64_at(data_addr(C, out), 1)[0] = v / n if red == MEAN else v
    return set_outputs1(C, out)


@jit
def _direct_grads(kind, s, g, X, Y, GX, GY, zero):
    """GX, GY (each when not empty) += the gradients for an incoming gradient g."""
    if kind == MSE:
        _mse_grads(X, Y, X.shape[0], g, GX, GY, GX.shape[0] != 0, GY.shape[0] != 0)
    elif kind == BCE_LOGITS:
        _bce_logits_grads(X, Y, np.empty(0), g, GX, GY, zero)
    else:
        for GD, sign in ((GX, 1.0), (GY, -1.0)):
            if GD.shape[0]:
                _huber_like_grads(kind, X, Y, s, np.empty(0), g, GD, sign)


@jit
def _direct_bwd(C, row, dt, red, kind, s, x, y, gx, gy):
    M = meta_of(C)
    n = M[x, M_NUMEL]
    ga = row_grad_addr(C, row, 0)
    nx, ny = (n if gx != 0 else 0), (n if gy != 0 else 0)
    if dt == F32:
        g = np.float64(f32_at(ga, 1)[0])
        _direct_grads(kind, s, g / n if red == MEAN else g, f32_at(data_addr(C, x), n),
                      f32_at(data_addr(C, y), n), f32_at(gx, nx), f32_at(gy, ny),
                      np.float32(0.0))
    else:
        g = f64_at(ga, 1)[0]
        _direct_grads(kind, s, g / n if red == MEAN else g, f64_at(data_addr(C, x), n),
                      f64_at(data_addr(C, y), n), f64_at(gx, nx), f64_at(gy, ny), 0.0)
    return K_OK


@jit
def _huber_like_losses(kind, X, Y, s, L):
    """Huber's or smooth L1's losses into L: _pointwise's formulas in loops of their own,
    one per kind and branch-free, so they vectorise (through _pointwise, with a dispatch
    and branches per element, they stay scalar)."""
    if kind == HUBER:
        for j in range(X.shape[0]):
            d = np.float64(X[j]) - np.float64(Y[j])
            ad = abs(d)
            L[j] = pick(ad < s, 0.5 * d * d, s * (ad - 0.5 * s))
    else:
        inner = s > 0.0
        for j in range(X.shape[0]):
            d = np.float64(X[j]) - np.float64(Y[j])
            ad = abs(d)
            L[j] = pick(inner and ad < s, 0.5 * d * d / s, ad - 0.5 * s)


@jit
def _huber_like_dx(kind, x, y, s):
    """d loss / dx of one element, branch-free, as PyTorch's backward: NaN for NaN, but
    0 for smooth L1 with beta 0 (PyTorch's l1_loss: sign(NaN) = 0)."""
    d = np.float64(x) - np.float64(y)
    if kind == HUBER:
        return pick(d < -s, -s, pick(d > s, s, d))
    if s > 0.0:
        return pick(d < -s, -1.0, pick(d > s, 1.0, d / s))
    return pick(d > 0.0, 1.0, pick(d < 0.0, -1.0, 0.0))


@jit
def _huber_like_grads(kind, X, Y, s, G, g, GD, sign):
    """GD += sign * (the incoming gradient (G's elements, or g when G is empty) times
    d loss / dx): x's gradient (sign 1) or y's (-1)."""
    if G.shape[0] != 0:
        for j in range(X.shape[0]):
            GD[j] += (G[j] * _huber_like_dx(kind, X[j], Y[j], s)) * sign
    else:
        for j in range(X.shape[0]):
            GD[j] += (g * _huber_like_dx(kind, X[j], Y[j], s)) * sign


@jit
def _bce_logits_losses(X, Y, L, zero):
    """Unweighted BCE with logits: _pointwise's formula in a loop of its own, in X's dtype
    (zero: 0 in it) with _vmath's exp and log1p, so a float32 loop has 8 lanes (as
    PyTorch's float32 kernel computes in float32; through _pointwise the loop is scalar,
    and in float64 it takes about twice PyTorch's time)."""
    one = exp(zero)
    for j in range(X.shape[0]):
        x = X[j]
        L[j] = (one - Y[j]) * x + (maxnum(-x, zero) + log1p(exp(-abs(x))))


@jit
def _bce_logits_grads(X, Y, G, g, GX, GY, zero):
    """GX += (G's elements, or g when G is empty) * (sigmoid(x) - y), GY += that * -x (each
    when not empty); sigmoid in X's dtype."""
    one = exp(zero)
    each = G.shape[0] != 0
    if GX.shape[0]:
        for j in range(X.shape[0]):
            x = X[j]
            e = exp(-abs(x))
            sig = pick(x >= zero, one, e) / (one + e)       # (one division)
            GX[j] += (G[j] if each else g) * (sig - Y[j])
    if GY.shape[0]:
        for j in range(X.shape[0]):
            GY[j] += (G[j] if each else g) * -X[j]


@jit
def _losses_sum(kind, X, Y, s, zero):
    """The sum of huber's, smooth L1's or BCE with logits' losses, a block at a time (a
    float64 buffer the size of the input would double the memory traffic)."""
    L = np.empty(1024)
    total = 0.0
    for c in range(0, X.shape[0], 1024):
        e = min(c + 1024, X.shape[0])
        if kind == BCE_LOGITS:
            _bce_logits_losses(X[c:e], Y[c:e], L, zero)
        else:
            _huber_like_losses(kind, X[c:e], Y[c:e], s, L)
        total += vsum(L[:e - c], 0.0)
    return total


def pointwise_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    x = input_id(C, row, 0)
    y = input_id(C, row, 1)
    w = input_id(C, row, 2)
    dt = M[x, M_DTYPE]
    if (dt != F32 and dt != F64) or M[y, M_DTYPE] != dt or (w >= 0 and M[w, M_DTYPE] != dt):
        return E_DTYPE
    red = T[row, R_IATTR]
    kind = T[row, R_IATTR + 1]
    s = fattr_of(C)[row]
    if _direct(M, kind, red, x, y, w):
        return _direct_fwd(C, dt, red, kind, s, x, y)
    X = _values(C, x)
    Y = _values(C, y)
    W = _values(C, w) if w >= 0 else np.ones(1, np.float64)
    n = X.shape[0]
    if kind == BCE:
        for j in range(n):
            if not (X[j] >= 0.0 and X[j] <= 1.0):
                err_of(C)[0] = j
                return E_VALUE
    L = np.empty(n, np.float64)
    if kind == HUBER or kind == SMOOTH_L1:
        _huber_like_losses(kind, X, Y, s, L)
    elif kind == BCE_LOGITS and w < 0:
        _bce_logits_losses(X, Y, L, 0.0)
    else:
        for j in range(n):
            wj, pj = _weights(kind, W, w >= 0, j, n)
            L[j] = _pointwise(kind, X[j], Y[j], wj, pj, s)[0]
    nd = M[x, M_NDIM]
    out = _loss_output(C, dt, red, L, float(n), M[x, M_SHAPE:M_SHAPE + nd].copy())
    if out < 0:
        return out
    return set_outputs1(C, out)


def pointwise_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    gx = edge_grad_addr(C, row, 0)
    gy = edge_grad_addr(C, row, 1)
    if gx == 0 and gy == 0:
        return K_OK
    red = T[row, R_IATTR]
    kind = T[row, R_IATTR + 1]
    s = fattr_of(C)[row]
    dt = T[row, R_ODTYPE]
    sx = T[row, R_IN + IN_SAVED]
    sy = T[row, R_IN + IW + IN_SAVED]
    sw = T[row, R_IN + 2 * IW + IN_SAVED] if T[row, R_NIN] > 2 else -1
    if _direct(meta_of(C), kind, red, sx, sy, sw):
        return _direct_bwd(C, row, dt, red, kind, s, sx, sy, gx, gy)
    X = _values(C, sx)
    Y = _values(C, sy)
    W = _values(C, sw) if sw >= 0 else np.ones(1, np.float64)
    n = X.shape[0]
    G = _read(dt, row_grad_addr(C, row, 0), out_numel(T, row))
    GX = np.zeros(n, np.float64)
    GY = np.zeros(n, np.float64)
    g0 = 0.0 if red == NONE else (G[0] / n if red == MEAN else G[0])
    Gj = G if red == NONE else G[:0]        # (the loops take G's elements, or g0)
    if kind == HUBER or kind == SMOOTH_L1:
        _huber_like_grads(kind, X, Y, s, Gj, g0, GX, 1.0)
        _huber_like_grads(kind, X, Y, s, Gj, g0, GY, -1.0)
    elif kind == BCE_LOGITS and sw < 0:
        _bce_logits_grads(X, Y, Gj, g0, GX, GY, 0.0)
    else:
        for j in range(n):
            g = G[j] if red == NONE else (G[0] / n if red == MEAN else G[0])
            wj, pj = _weights(kind, W, sw >= 0, j, n)
            l, dx, dy = _pointwise(kind, X[j], Y[j], wj, pj, s)
            GX[j] = g * dx
            GY[j] = g * dy
    if gx != 0:
        _accumulate(dt, gx, GX)
    if gy != 0:
        _accumulate(dt, gy, GY)
    return K_OK


# ---------------------------------------------------------------- nll / cross entropy
@jit
def _line_exps(X, N, K, D, E):
    """Per line (sample n, position d) of an N x K x D input: its max over the classes
    and the sum of exp(x - max); writes E[i] = exp(X[i] - max of i's line). E is float32
    for float32 logits (as PyTorch computes them; 8 lanes instead of 4), float64
    otherwise. The exps are one flat loop over the block (vectorised: several times
    faster than a libm call per logit inside each line's sum)."""
    MX = np.empty(N * D)
    S = np.empty(N * D)
    for n in range(N):              # one line at a time (line by line, not a pass over
        for d in range(D):          # the block per class, which is slower)
            b = n * K * D + d
            m = -np.inf
            for k in range(K):      # (max(), not a branch: random logits mispredict it)
                m = max(m, X[b + k * D])
            MX[n * D + d] = m
            for k in range(K):
                E[b + k * D] = X[b + k * D] - m
    for i in range(N * K * D):
        E[i] = exp(E[i])
    for n in range(N):
        for d in range(D):
            b = n * K * D + d
            s = 0.0
            for k in range(K):
                s += E[b + k * D]
            S[n * D + d] = s
    return MX, S


@jit
def _nll_lines(row_kind, ign, eps, N, K, D, X, tgt, W, E):
    """Per-sample losses, per-sample target weights, and (for cross entropy) the
    log-sum-exp of each sample's logits; E: room for the exps, in the logits' dtype."""
    L = np.zeros(N * D, np.float64)
    WT = np.zeros(N * D, np.float64)
    LSE = np.zeros(N * D, np.float64)
    if row_kind == 1:
        MX, S = _line_exps(X, N, K, D, E)
    for n in range(N):
        for d in range(D):
            i = n * D + d
            c = tgt[i]
            if c == ign:
                continue
            base = n * K * D + d
            lse = 0.0
            if row_kind == 1:
                lse = MX[i] + math.log(S[i])
            LSE[i] = lse
            wt = W[c]
            WT[i] = wt
            loss = -wt * (X[base + c * D] - lse)
            if eps > 0.0:
                sm = 0.0
                for k in range(K):
                    sm -= W[k] * (X[base + k * D] - lse)
                loss = (1.0 - eps) * loss + eps / K * sm
            L[i] = loss
    return L, WT, LSE


@jit
def _minus(R, out, m):
    for k in range(R.shape[0]):
        out[k] = R[k] - m


@jit
def _exp_in_place(E):
    for i in range(E.shape[0]):
        E[i] = exp(E[i])


@jit
def _add_scaled(G, E, r):
    for k in range(G.shape[0]):
        G[k] += E[k] * r


@jit
def _ce_lines(X, tgt, ign, N, K, E, MX, S, zero):
    """The plain cross entropy of N x K logits X, up to the logs: the count of samples not
    ignored; MX (X's dtype) ends holding each counted line's max, E exp(x - that max), S
    their sums. Every pass is a loop LLVM vectorises: each line's max (maxnum) and x - max,
    one exp over all lines at once (a line of 10 would leave most of its exps to the
    scalar remainder), each line's sum in X's dtype (zero), reassociated as PyTorch's
    vectorised sum (one running max and a float64 sum would be scalar chains, taking
    well over twice as long)."""
    for n in range(N):
        if tgt[n] == ign:   # (skipped: with K = 0 every line is, as any target is out of range)
            continue
        R = X[n * K:(n + 1) * K]
        m = R[0]
        for k in range(1, K):
            m = maxnum(m, R[k])
        MX[n] = m
        _minus(R, E[n * K:(n + 1) * K], m)
    _exp_in_place(E)
    count = 0
    for n in range(N):
        if tgt[n] == ign:
            S[n] = 1            # (a defined log in _ce_fwd)
            continue
        S[n] = vsum(E[n * K:(n + 1) * K], zero)
        count += 1
    return count


@jit
def _ce_scratch(X, N, K):
    """E, MX and S of _ce_lines, one allocation."""
    W = np.empty(N * K + 2 * N, X.dtype)
    return W[:N * K], W[N * K:N * K + N], W[N * K + N:]


@jit
def _ce_grads(X, tgt, ign, N, K, g, red, GX, zero):
    """GX += the plain cross entropy's gradient for an incoming gradient g."""
    E, MX, S = _ce_scratch(X, N, K)
    count = _ce_lines(X, tgt, ign, N, K, E, MX, S, zero)
    coef = g / count if red == MEAN else g
    for n in range(N):
        c = tgt[n]
        if c == ign:
            continue
        G = GX[n * K:(n + 1) * K]
        L = E[n * K:(n + 1) * K]
        r = coef / S[n]
        at_target = G[c]
        _add_scaled(G, L, r)
        G[c] = at_target + (L[c] * r - coef)     # (one rounding, as every other element)


@jit
def _ce_fwd(C, dt, red, X, tgt, ign, N, K, zero):
    """The loss: each line's max + log(sum) - its target's logit, summed in float64; the
    logs as log1p(s - 1) in one vectorised loop (s >= 1: exact for a float32 s); the
    scratch arrays are one allocation, which matters for small inputs."""
    E, MX, S = _ce_scratch(X, N, K)
    count = _ce_lines(X, tgt, ign, N, K, E, MX, S, zero)
    LG = np.empty(N + 1, np.float64)
    for n in range(N):
        LG[n] = log1p(np.float64(S[n]) - 1.0)
    total = 0.0
    for n in range(N):
        c = tgt[n]
        if c != ign:
            total += MX[n] + LG[n] - X[n * K + c]
    out = meta_contiguous(C, dt, 0, desc_of(C)[D_IDX:D_IDX], False)
    if out < 0:
        return out
    LG[N] = total / count if red == MEAN else total
    _write(C, dt, data_addr(C, out), LG[N:])
    return set_outputs1(C, out)


@jit
def _bad_target(C, tgt, ign, K):
    """Whether a target is out of range (the kernels index by them: check them all);
    the first such target goes to err[1]."""
    for i in range(tgt.shape[0]):
        c = tgt[i]
        if c != ign and (c < 0 or c >= K):
            err_of(C)[1] = c
            return True
    return False


def ce_plain_fwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    x = input_id(C, row, 0)
    dt = meta_of(C)[x, M_DTYPE]
    if dt != KERNEL_DTYPE:
        return E_DTYPE
    N = T[row, R_IATTR + 3]
    K = T[row, R_IATTR + 4]
    ign = T[row, R_IATTR + 2]
    tgt = i64_at(data_addr(C, input_id(C, row, 1)), N)
    if _bad_target(C, tgt, ign, K):
        return E_VALUE
    n = N * K               # (the exps in the logits' dtype, as PyTorch computes them)
    if KERNEL_DTYPE == F32:
        return _ce_fwd(C, dt, T[row, R_IATTR], f32_at(data_addr(C, x), n), tgt, ign, N, K,
                       np.float32(0.0))
    return _ce_fwd(C, dt, T[row, R_IATTR], f64_at(data_addr(C, x), n), tgt, ign, N, K, 0.0)


def ce_plain_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    gx = edge_grad_addr(C, row, 0)
    if gx == 0:
        return K_OK
    N = T[row, R_IATTR + 3]
    K = T[row, R_IATTR + 4]
    n = N * K
    tgt = i64_at(data_addr(C, T[row, R_IN + IW + IN_SAVED]), N)
    x = data_addr(C, T[row, R_IN + IN_SAVED])
    ga = row_grad_addr(C, row, 0)
    ign = T[row, R_IATTR + 2]
    red = T[row, R_IATTR]
    if KERNEL_DTYPE == F32:
        _ce_grads(f32_at(x, n), tgt, ign, N, K, np.float64(f32_at(ga, 1)[0]), red,
                  f32_at(gx, n), np.float32(0.0))
    else:
        _ce_grads(f64_at(x, n), tgt, ign, N, K, f64_at(ga, 1)[0], red, f64_at(gx, n), 0.0)
    return K_OK


def nll_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    ia = iargs_of(C)
    x = input_id(C, row, 0)
    t = input_id(C, row, 1)
    w = input_id(C, row, 2)
    dt = M[x, M_DTYPE]
    if dt != KERNEL_DTYPE:
        return E_DTYPE
    N = T[row, R_IATTR + 3]
    K = T[row, R_IATTR + 4]
    D = T[row, R_IATTR + 5]
    tgt = i64_at(data_addr(C, t), N * D)
    if _bad_target(C, tgt, T[row, R_IATTR + 2], K):
        return E_VALUE
    red = T[row, R_IATTR]
    X = _read(dt, data_addr(C, x), N * K * D)
    ne = N * K * D if T[row, R_IATTR + 1] == 1 else 0     # exps: cross entropy only
    if KERNEL_DTYPE == F32:
        E = np.empty(ne, np.float32)
    else:
        E = np.empty(ne)
    W = _read(M[w, M_DTYPE], data_addr(C, w), K) if w >= 0 else np.ones(K, np.float64)
    L, WT, LSE = _nll_lines(T[row, R_IATTR + 1], T[row, R_IATTR + 2], fattr_of(C)[row],
                            N, K, D, X, tgt, W, E)
    nd = ia[FV]
    out = _loss_output(C, dt, red, L, vsum(WT, 0.0), ia[FV + 1:FV + 1 + nd].copy())
    if out < 0:
        return out
    return set_outputs1(C, out)


@jit
def _nll_grads(GX, E, S, kind, tgt, ign, G, red, denom, W, wsum, eps, N, K, D):
    """GX (zeros) += the input's gradient; E, S: the exps and their line sums (kind 1)."""
    for n in range(N):
        for d in range(D):
            i = n * D + d
            c = tgt[i]
            base = n * K * D + d
            if c == ign:
                continue
            coef = G[i] if red == NONE else G[0] / denom
            if kind == 0:
                GX[base + c * D] = -coef * W[c]
                continue
            s = S[i]
            for k in range(K):
                p = E[base + k * D] / s
                v = (1.0 - eps) * W[c] * (p - (1.0 if k == c else 0.0))
                if eps > 0.0:
                    v += eps / K * (wsum * p - W[k])
                GX[base + k * D] = coef * v


def nll_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    gx = edge_grad_addr(C, row, 0)
    if gx == 0:
        return K_OK
    kind = T[row, R_IATTR + 1]
    ign = T[row, R_IATTR + 2]
    eps = fattr_of(C)[row]
    red = T[row, R_IATTR]
    dt = T[row, R_ODTYPE]
    N = T[row, R_IATTR + 3]
    K = T[row, R_IATTR + 4]
    D = T[row, R_IATTR + 5]
    sx = T[row, R_IN + IN_SAVED]
    st = T[row, R_IN + IW + IN_SAVED]
    sw = T[row, R_IN + 2 * IW + IN_SAVED] if T[row, R_NIN] > 2 else -1
    M = meta_of(C)
    tgt = i64_at(data_addr(C, st), N * D)
    W = _read(M[sw, M_DTYPE], data_addr(C, sw), K) if sw >= 0 else np.ones(K, np.float64)
    X = _read(M[sx, M_DTYPE], data_addr(C, sx), N * K * D) if kind == 1 else np.zeros(1)
    G = _read(dt, row_grad_addr(C, row, 0), out_numel(T, row))
    denom = 1.0
    if red == MEAN:
        denom = 0.0
        for i in range(N * D):
            if tgt[i] != ign:
                denom += W[tgt[i]]
    wsum = vsum(W, 0.0)
    GX = np.zeros(N * K * D, np.float64)
    if KERNEL_DTYPE == F32:
        E = np.empty(N * K * D if kind == 1 else 0, np.float32)
    else:
        E = np.empty(N * K * D if kind == 1 else 0)
    S = _line_exps(X, N, K, D, E)[1] if kind == 1 else np.empty(0)
    _nll_grads(GX, E, S, kind, tgt, ign, G, red, denom, W, wsum, eps, N, K, D)
    _accumulate(dt, gx, GX)
    return K_OK


def _value_error(e):
    """PyTorch's words for an input value a loss refuses."""
    if e.code != E_VALUE:
        return None
    if e.name.startswith(("nll_loss", "cross_entropy")):
        return IndexError(f"Target {int(e.err[1])} is out of bounds.")
    if e.name == "binary_cross_entropy":
        return RuntimeError("all elements of input should be between 0 and 1")
    return None


# the rows' integer attributes: a pointwise loss's reduction and which loss; a class
# loss's reduction, kind (1: cross entropy), ignore_index, the rows, classes and inner
# extent (a 2-d loss's pixels), and whether there are class weights
_POINTWISE_ATTRS = ("reduction", "kind")
_CLASS_ATTRS = ("reduction", "kind", "ignore_index", "rows", "classes", "inner", "weighted")


def _loss(name, grad_fn, fwd, bwd, diff, saves_if, per_dtype=False):
    pointwise = fwd == "pointwise_fwd"
    return register(OpDef(name, grad_fn, "custom", module=_M, fwd_fn=fwd, bwd_fn=bwd, nin=3,
                          diff=diff, saves_if=saves_if, per_dtype=per_dtype,
                          errors=_value_error,
                          attrs=_POINTWISE_ATTRS if pointwise else _CLASS_ATTRS))


_PW_SAVES = {0: ("a", "b", "c"), 1: ("a", "b", "c")}
_loss("mse_loss", "MseLossBackward0", "pointwise_fwd", "pointwise_bwd", (0, 1), _PW_SAVES)
samples("mse_loss", "F.mse_loss(x, y)", "F.mse_loss(x, y, reduction='sum')",
        "F.mse_loss(x, y, reduction='none')", "L.nn.MSELoss()(x, y)",
        "F.mse_loss(x, y, weight=w)", errors=["F.mse_loss(x, y, reduction='bad')"],
        x=T(3, 4), y=T(3, 4), w=T(3, 4, domain=POS, grad=False))
_loss("huber_loss", "HuberLossBackward0", "pointwise_fwd", "pointwise_bwd", (0, 1), _PW_SAVES)
samples("huber_loss", "F.huber_loss(x, y)", "F.huber_loss(x, y, delta=0.5, reduction='sum')",
        "F.huber_loss(x, y, reduction='none', delta=2.0)", "L.nn.HuberLoss(delta=0.7)(x, y)",
        errors=["F.huber_loss(x, y, delta=0.0)"], **XY)
_loss("smooth_l1_loss", "SmoothL1LossBackward0", "pointwise_fwd", "pointwise_bwd", (0, 1),
      _PW_SAVES)
samples("smooth_l1_loss", "F.smooth_l1_loss(x, y)",
        "F.smooth_l1_loss(x, y, beta=0.5, reduction='none')",
        "L.nn.SmoothL1Loss(beta=2.0, reduction='sum')(x, y)",
        errors=["F.smooth_l1_loss(x, y, beta=-1.0)"], **XY)
_loss("binary_cross_entropy", "BinaryCrossEntropyBackward0", "pointwise_fwd", "pointwise_bwd",
      (0, 1), _PW_SAVES)
samples("binary_cross_entropy", "F.binary_cross_entropy(x, y)",
        "F.binary_cross_entropy(x, y, w, reduction='sum')",
        "F.binary_cross_entropy(x, y, reduction='none')", "L.nn.BCELoss(weight=w)(x, y)",
        errors=[Sample("F.binary_cross_entropy(x, y)", y=T(4, domain=PROB)),
                "F.binary_cross_entropy(x + 1, y)"],
        x=T(3, 4, domain=PROB), y=T(3, 4, domain=PROB), w=T(4, domain=POS, grad=False))
_loss("binary_cross_entropy_with_logits", "BinaryCrossEntropyWithLogitsBackward0",
      "pointwise_fwd", "pointwise_bwd", (0, 1), _PW_SAVES)
samples("binary_cross_entropy_with_logits", "F.binary_cross_entropy_with_logits(x, y)",
        "F.binary_cross_entropy_with_logits(x, y, pos_weight=p)",
        "F.binary_cross_entropy_with_logits(x, y, w, reduction='none', pos_weight=p)",
        "F.binary_cross_entropy_with_logits(x, y, w, reduction='sum')",
        "L.nn.BCEWithLogitsLoss()(x, y)",
        errors=[Sample("F.binary_cross_entropy_with_logits(x, y)", y=T(4, domain=PROB))],
        x=T(3, 4), y=T(3, 4, domain=PROB), w=T(3, 4, domain=POS, grad=False),
        p=T(4, domain=POS, grad=False))
_CLASSES = dict(x=T(3, 4), t=Index(3, high=4), w=T(4, domain=POS, grad=False))
_loss("nll_loss", "NllLossBackward0", "nll_fwd", "nll_bwd", (0,), {0: ("b", "c")}, True)
samples("nll_loss", "F.nll_loss(x, t)", "F.nll_loss(x, t, w)",
        "F.nll_loss(x, t, reduction='none')", "F.nll_loss(x, t, w, reduction='sum')",
        Sample("F.nll_loss(x, t, ignore_index=1)", t=Fixed([1, 0, 3])),
        Sample("F.nll_loss(x, t)", x=T(4), t=Fixed(2)),
        Sample("F.nll_loss(x, t, w)", x=T(2, 4, 3), t=Index(2, 3, high=4)),
        "L.nn.NLLLoss(weight=w)(x, t)",
        errors=[Sample("F.nll_loss(x, t)", t=Index(2, high=4)),
                Sample("F.nll_loss(x, t)", t=Fixed([0, 5, 1])),
                Sample("F.nll_loss(x, t, w)", w=T(3, grad=False))], **_CLASSES)
_loss("cross_entropy", "NllLossBackward0", "nll_fwd", "nll_bwd", (0,), {0: ("a", "b", "c")},
      True)
samples("cross_entropy", "F.cross_entropy(x, t, w)", "F.cross_entropy(x, t, label_smoothing=0.1)",
        "F.cross_entropy(x, t, reduction='none')",
        "F.cross_entropy(x, t, w, label_smoothing=0.2, reduction='sum')",
        Sample("F.cross_entropy(x, t)", x=T(2, 4, 3), t=Index(2, 3, high=4)),
        "L.nn.CrossEntropyLoss(weight=w)(x, t)",
        errors=[Sample("F.cross_entropy(x, t, w)", t=Fixed([0, 5, 1])),
                "F.cross_entropy(x, t, label_smoothing=1.5)",
                Sample("F.cross_entropy(x, t)", t=T(3, grad=False), xfail={"error": (
                    "a float target of the wrong shape: tapegrad 'cross_entropy: expected "
                    "target of the input's shape [3, 4] for class probabilities, got [3]', "
                    "PyTorch 'expected target dtype to be Long or Byte, but got Float'")})],
        **_CLASSES)
# A training step's call, N x C logits with no class weights, no label smoothing and a
# reduced loss, has kernels of its own: they read the logits in place, and a program that
# only makes such calls compiles neither the general kernels' code nor their other dtype's.
_loss("cross_entropy_plain", "NllLossBackward0", "ce_plain_fwd", "ce_plain_bwd", (0,),
      {0: ("a", "b")}, True)
samples("cross_entropy_plain", "F.cross_entropy(x, t)", "F.cross_entropy(x, t, reduction='sum')",
        "L.nn.CrossEntropyLoss()(x, t)",
        Sample("F.cross_entropy(x, t, ignore_index=1)", t=Fixed([1, 0, 3])),
        errors=[Sample("F.cross_entropy(x, t)", t=Index(2, high=4)),
                Sample("F.cross_entropy(x, t)", t=Fixed([0, 4, 1]))], **_CLASSES)
# PyTorch's names for (N, C, H, W) inputs
_loss("nll_loss2d", "NllLoss2DBackward0", "nll_fwd", "nll_bwd", (0,), {0: ("b", "c")}, True)
samples("nll_loss2d", "F.nll_loss(x, t)", "F.nll_loss(x, t, reduction='none')",
        "F.nll_loss(x, t, w, ignore_index=0)",
        errors=[Sample("F.nll_loss(x, t)", t=Index(2, 2, 3, high=3), xfail={"error": (
            "message: tapegrad 'size mismatch (got input: [2, 3, 2, 2], target: [2, 2, 3])', "
            "PyTorch 'size mismatch (got input: [2, 3, 2, 2] , target: [2, 2, 3]'")})],
        x=T(2, 3, 2, 2), t=Index(2, 2, 2, high=3), w=T(3, domain=POS, grad=False))
_loss("cross_entropy2d", "NllLoss2DBackward0", "nll_fwd", "nll_bwd", (0,), {0: ("a", "b", "c")},
      True)
samples("cross_entropy2d", "F.cross_entropy(x, t)",
        "F.cross_entropy(x, t, label_smoothing=0.2, reduction='sum')",
        "F.cross_entropy(x, t, w, reduction='none')",
        x=T(2, 3, 2, 2), t=Index(2, 2, 2, high=3), w=T(3, domain=POS, grad=False))
