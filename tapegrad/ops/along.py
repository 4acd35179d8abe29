"""Ops along one dim (or over everything): softmax, log_softmax, logsumexp, cumsum, prod,
var/std, vector norms.

Every kernel walks *lines*: the elements of the input that share all indices except the
dim's. Row int attributes: [0] dim (-1: every element, as one line), [1] keepdim, [2] an
int parameter (the variance's correction); the float attribute is the norm's order.
Sums accumulate in float64.
"""
import math

import numpy as np

from .._engine.layout import K_OK, F32, E_DTYPE, F64, M_DTYPE, M_NDIM, M_SHAPE, M_STRIDE, \
    M_NUMEL, R_IATTR, R_IN, IN_SAVED, R_OSAVED, R_ODTYPE, IW
from .._engine.lowlevel import jit, ctx_of, meta_of, tape_of, fattr_of, f32_at, f64_at
from .._engine.core import (data_addr, meta_contiguous, input_id, set_outputs1, span,
                            is_contiguous,
                            contiguous_strides, row_grad_addr, edge_grad_addr, input_shape,
                            out_numel, _gather)
from .reduce import _advance_skipping
from .opinfo import NONZERO, Fixed, T, signed
from .registry import OpDef, Sample, register, samples
from ._vmath import exp, maxnum, vsum, vdot, vsqdev, pick

_M = __name__
KERNEL_DTYPE = -1       # F32 or F64 in each compiled copy of the softmax family's kernels


# ---------------------------------------------------------------- lines
@jit
def lines(shape, strides, dim):
    """(bases, step, length) of every line along dim, in row-major order of the other
    dims; dim < 0: the whole (contiguous) tensor as one line."""
    nd = shape.shape[0]
    if dim < 0:
        n = 1
        for d in range(nd):
            n *= shape[d]
        return np.zeros(1, np.int64), 1, n
    nl = 1
    for d in range(nd):
        if d != dim:
            nl *= shape[d]
    bases = np.empty(nl, np.int64)
    idx = np.zeros(nd, np.int64)
    for k in range(nl):
        p = 0
        for d in range(nd):
            p += idx[d] * strides[d]
        bases[k] = p
        _advance_skipping(idx, shape, dim)
    return bases, strides[dim], shape[dim]


@jit
def _shape(M, t):
    nd = M[t, M_NDIM]
    return M[t, M_SHAPE:M_SHAPE + nd].copy(), M[t, M_STRIDE:M_STRIDE + nd].copy()


@jit
def _reduced_shape(shape, dim, keep):
    if dim < 0:
        return np.ones(shape.shape[0] if keep else 0, np.int64)
    nd = shape.shape[0]
    out = np.empty(nd if keep else nd - 1, np.int64)
    j = 0
    for d in range(nd):
        if d == dim:
            if keep:
                out[j] = 1
                j += 1
        else:
            out[j] = shape[d]
            j += 1
    return out


@jit
def _input_lines(C, t, dim):
    """Lines of tensor t as (X, bases, step, m): X is t's data, or a contiguous copy when
    the whole tensor is one line and t is strided."""
    M = meta_of(C)
    shape, st = _shape(M, t)
    if dim < 0:
        n = M[t, M_NUMEL]
        X = np.empty(n, np.float64)
        if M[t, M_DTYPE] == F32:
            _gather(f32_at(data_addr(C, t), span(M, t)), 0, shape, st, X)
        else:
            _gather(f64_at(data_addr(C, t), span(M, t)), 0, shape, st, X)
        b, step, m = lines(shape, st, dim)
        return X, b, step, m
    b, step, m = lines(shape, st, dim)
    sp = span(M, t)
    X = np.empty(sp, np.float64)
    if M[t, M_DTYPE] == F32:
        src = f32_at(data_addr(C, t), sp)
        for i in range(sp):
            X[i] = src[i]
    else:
        src64 = f64_at(data_addr(C, t), sp)
        for i in range(sp):
            X[i] = src64[i]
    return X, b, step, m


@jit
def _write(C, dt, addr, V):
    n = V.shape[0]
    if dt == F32:
        O = f32_at(addr, n)
        for i in range(n):
            O[i] = V[i]
    else:
        O64 = f64_at(addr, n)
        for i in range(n):
            O64[i] = V[i]


@jit
def _read(dt, addr, n):
    V = np.empty(n, np.float64)
    if dt == F32:
        src = f32_at(addr, n)
        for i in range(n):
            V[i] = src[i]
    else:
        src64 = f64_at(addr, n)
        for i in range(n):
            V[i] = src64[i]
    return V


@jit
def _accumulate(dt, addr, V):
    n = V.shape[0]
    if dt == F32:
        O = f32_at(addr, n)
        for i in range(n):
            O[i] += V[i]
    else:
        O64 = f64_at(addr, n)
        for i in range(n):
            O64[i] += V[i]


@jit
def _prologue(C, row):
    """Input, dtype, dim, keepdim, input shape of an along-dim row."""
    M = meta_of(C)
    T = tape_of(C)
    a = input_id(C, row, 0)
    shape, st = _shape(M, a)
    return a, M[a, M_DTYPE], T[row, R_IATTR], T[row, R_IATTR + 1] != 0, shape


@jit
def _grad_lines(C, row, k):
    """Contiguous lines of input k's gradient buffer: (addr, shape, bases, step, m)."""
    T = tape_of(C)
    ga = edge_grad_addr(C, row, k)
    ishape = np.empty(8, np.int64)
    nd = input_shape(C, row, k, ishape) if ga != 0 else 0
    shape = ishape[:nd].copy()
    b, step, m = lines(shape, contiguous_strides(nd, shape), T[row, R_IATTR])
    return ga, shape, b, step, m


@jit
def _backward_start(C, row):
    """What every backward here starts from: input 0's gradient lines (ga 0: none
    wanted), the output dtype, the incoming gradient as float64, and a zeroed float64
    buffer for the input's gradient."""
    T = tape_of(C)
    ga, shape, b, step, m = _grad_lines(C, row, 0)
    dt = T[row, R_ODTYPE]
    if ga == 0:
        return ga, shape, b, step, m, dt, np.empty(0, np.float64), np.empty(0, np.float64)
    nin = 1
    for d in range(shape.shape[0]):
        nin *= shape[d]
    G = _read(dt, row_grad_addr(C, row, 0), out_numel(T, row))
    return ga, shape, b, step, m, dt, G, np.zeros(nin, np.float64)


@jit
def _reduced_output(C, dt, shape, dim, keep, nlines):
    """The output of a reduction along dim (or everything) and a float64 buffer for it."""
    osh = _reduced_shape(shape, dim, keep)
    return (meta_contiguous(C, dt, osh.shape[0], osh, False),
            np.empty(nlines, np.float64))


@jit
def _out_lines(shape, dim):
    """The same lines in a contiguous tensor of the input's shape."""
    return lines(shape, contiguous_strides(shape.shape[0], shape), dim)


@jit
def _saved_values(C, sv, dim):
    return _input_lines(C, sv, dim)


# ---------------------------------------------------------------- softmax family
# kind: 0 softmax, 1 log_softmax (same shape); 2 logsumexp (reduced). Per dtype and in it,
# as PyTorch's vectorised kernels: exps from _vmath, maxima by maxnum, sums reassociated
# in the dtype. A line along the last dim is one run of memory; along another dim the
# `inner` lines of a block are walked side by side, one unit-stride row of each at a time.
# (Scalar float64 loops with libm exps take about nine times PyTorch's time.)
@jit
def _blocks(shape, dim):
    """(outer, m, inner): element j of line (o, i) along dim of a contiguous tensor of
    this shape is at (o * m + j) * inner + i; dim < 0: the whole tensor as one line."""
    nd = shape.shape[0]
    if dim < 0:
        n = 1
        for d in range(nd):
            n *= shape[d]
        return 1, n, 1
    outer = 1
    for d in range(dim):
        outer *= shape[d]
    inner = 1
    for d in range(dim + 1, nd):
        inner *= shape[d]
    return outer, shape[dim], inner


@jit
def _max_into(MX, R):
    for i in range(MX.shape[0]):
        MX[i] = maxnum(MX[i], R[i])


@jit
def _exp_sum_into(R, MX, Y, S, store):
    """S += exp(R - MX) for one row of a block's lines, the exps also into Y when
    `store` (no reduction inside the loop: it vectorises as it is)."""
    if store:
        for i in range(R.shape[0]):
            e = exp(R[i] - MX[i])
            Y[i] = e
            S[i] += e
    else:
        for i in range(R.shape[0]):
            S[i] += exp(R[i] - MX[i])


@jit
def _exps(R, mx, E):
    """E = exp(R - mx): apart from the sum, which vectorises only reassociated (vsum),
    and reassociating inside exp's polynomial would change its rounding."""
    for k in range(R.shape[0]):
        E[k] = exp(R[k] - mx)


@jit
def _finish(R, Y, MX, S, kind):
    """One row of the output from the block's maxima and sums (S: 1 / sum for softmax,
    log(sum) for log_softmax), as PyTorch computes it: e * (1 / sum), x - max - log(sum)."""
    if kind == 0:
        for i in range(Y.shape[0]):
            Y[i] *= S[i]
    else:
        for i in range(Y.shape[0]):
            Y[i] = R[i] - MX[i] - S[i]


@jit
def _softmax_lines(X, Y, V, outer, m, inner, kind, zero):
    """softmax / log_softmax of contiguous X into Y, or logsumexp into V (outer * inner
    values), along the lines of _blocks. logsumexp shifts by 0 where a line's maximum is
    infinite (PyTorch's rule: -inf for a line of -inf, not NaN)."""
    one = zero + 1
    if inner == 1:
        E = np.empty(m if kind == 2 else 0, X.dtype)
        for o in range(outer):
            R = X[o * m:(o + 1) * m]
            if m == 0:
                if kind == 2:
                    V[o] = -np.inf
                continue
            mx = R[0]
            for k in range(1, m):
                mx = maxnum(mx, R[k])
            if kind == 2 and (mx == np.inf or mx == -np.inf):
                mx = zero
            L = E if kind == 2 else Y[o * m:(o + 1) * m]
            _exps(R, mx, L)
            s = vsum(L, zero)
            if kind == 2:
                V[o] = math.log(s) + mx
            elif kind == 0:
                r = one / s
                for k in range(m):
                    L[k] *= r
            else:
                ls = math.log(s)
                for k in range(m):
                    L[k] = R[k] - mx - ls
        return
    MX = np.empty(inner, X.dtype)
    S = np.empty(inner, X.dtype)
    for o in range(outer):
        base = o * m * inner
        if m == 0:
            if kind == 2:
                V[o * inner:(o + 1) * inner] = -np.inf
            continue
        MX[:] = X[base:base + inner]
        for j in range(1, m):
            _max_into(MX, X[base + j * inner:base + (j + 1) * inner])
        if kind == 2:
            for i in range(inner):
                if MX[i] == np.inf or MX[i] == -np.inf:
                    MX[i] = zero
        S[:] = zero
        for j in range(m):
            p = base + j * inner
            _exp_sum_into(X[p:p + inner], MX, Y[p:p + inner] if kind == 0 else S, S,
                          kind == 0)
        if kind == 2:
            for i in range(inner):
                V[o * inner + i] = math.log(S[i]) + MX[i]
            continue
        for i in range(inner):
            S[i] = one / S[i] if kind == 0 else math.log(S[i])
        for j in range(m):
            p = base + j * inner
            _finish(X[p:p + inner], Y[p:p + inner], MX, S, kind)


@jit
def _softmax_grads(G, O, GA, outer, m, inner, kind, zero):
    """GA += the gradient of softmax (O * (G - sum(G * O))) or log_softmax
    (G - exp(O) * sum(G)) from the output O and its gradient G, line by line."""
    if inner == 1:
        for o in range(outer):
            Gr = G[o * m:(o + 1) * m]
            Or = O[o * m:(o + 1) * m]
            Ar = GA[o * m:(o + 1) * m]
            if kind == 0:
                s = vdot(Gr, Or, zero)
                for k in range(m):
                    Ar[k] += Or[k] * (Gr[k] - s)
            else:
                s = vsum(Gr, zero)
                for k in range(m):
                    Ar[k] += Gr[k] - exp(Or[k]) * s
        return
    S = np.empty(inner, G.dtype)
    for o in range(outer):
        base = o * m * inner
        S[:] = zero
        for j in range(m):
            p = base + j * inner
            Gr = G[p:p + inner]
            Or = O[p:p + inner]
            if kind == 0:
                for i in range(inner):
                    S[i] += Gr[i] * Or[i]
            else:
                for i in range(inner):
                    S[i] += Gr[i]
        for j in range(m):
            p = base + j * inner
            Gr = G[p:p + inner]
            Or = O[p:p + inner]
            Ar = GA[p:p + inner]
            if kind == 0:
                for i in range(inner):
                    Ar[i] += Or[i] * (Gr[i] - S[i])
            else:
                for i in range(inner):
                    Ar[i] += Gr[i] - exp(Or[i]) * S[i]


@jit
def _logsumexp_grads(X, G, O, GA, outer, m, inner):
    """GA += G * exp(X - logsumexp), G and O holding one value per line."""
    if inner == 1:
        for o in range(outer):
            Xr = X[o * m:(o + 1) * m]
            Ar = GA[o * m:(o + 1) * m]
            g = G[o]
            lse = O[o]
            for k in range(m):
                Ar[k] += g * exp(Xr[k] - lse)
        return
    for o in range(outer):
        for j in range(m):
            p = (o * m + j) * inner
            Xr = X[p:p + inner]
            Ar = GA[p:p + inner]
            Gr = G[o * inner:(o + 1) * inner]
            Or = O[o * inner:(o + 1) * inner]
            for i in range(inner):
                Ar[i] += Gr[i] * exp(Xr[i] - Or[i])


@jit
def _row_major(C, t, n, src):
    """Tensor t's n elements in row-major order, in src's dtype (src: t's memory from its
    data address on, span(t) elements): src itself when t is contiguous, else a gathered
    copy."""
    M = meta_of(C)
    if is_contiguous(M, t):
        return src[:n]
    shape, st = _shape(M, t)
    X = np.empty(n, src.dtype)
    _gather(src, 0, shape, st, X)
    return X


@jit
def _values32(C, t, n):
    return _row_major(C, t, n, f32_at(data_addr(C, t), span(meta_of(C), t)))


@jit
def _values64(C, t, n):
    return _row_major(C, t, n, f64_at(data_addr(C, t), span(meta_of(C), t)))


def softmax_fwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    a, dt, dim, keep, shape = _prologue(C, row)
    if dt != KERNEL_DTYPE:
        return E_DTYPE
    kind = T[row, R_IATTR + 2]
    outer, m, inner = _blocks(shape, dim)
    n = outer * m * inner
    if kind == 2:
        osh = _reduced_shape(shape, dim, keep)
        out = meta_contiguous(C, dt, osh.shape[0], osh, False)
        nv = outer * inner
    else:
        out = meta_contiguous(C, dt, shape.shape[0], shape, False)
        nv = 0
    if out < 0:
        return out
    if KERNEL_DTYPE == F32:
        Y = f32_at(data_addr(C, out), n if kind != 2 else 0)
        _softmax_lines(_values32(C, a, n), Y, f32_at(data_addr(C, out), nv), outer, m, inner,
                       kind, np.float32(0.0))
    else:
        Y64 = f64_at(data_addr(C, out), n if kind != 2 else 0)
        _softmax_lines(_values64(C, a, n), Y64, f64_at(data_addr(C, out), nv), outer, m,
                       inner, kind, 0.0)
    return set_outputs1(C, out)


def softmax_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    ga = edge_grad_addr(C, row, 0)
    if ga == 0:
        return K_OK
    kind = T[row, R_IATTR + 2]
    ishape = np.empty(8, np.int64)
    nd = input_shape(C, row, 0, ishape)
    outer, m, inner = _blocks(ishape[:nd].copy(), T[row, R_IATTR])
    x = T[row, R_IN + IN_SAVED]             # (logsumexp's; -1 for the others)
    n = outer * m * inner
    no = outer * inner if kind == 2 else n
    g = row_grad_addr(C, row, 0)
    o = data_addr(C, T[row, R_OSAVED])
    if KERNEL_DTYPE == F32:
        if kind == 2:
            _logsumexp_grads(_values32(C, x, n), f32_at(g, no), f32_at(o, no), f32_at(ga, n),
                             outer, m, inner)
        else:
            _softmax_grads(f32_at(g, n), f32_at(o, n), f32_at(ga, n), outer, m, inner, kind,
                           np.float32(0.0))
    else:
        if kind == 2:
            _logsumexp_grads(_values64(C, x, n), f64_at(g, no), f64_at(o, no), f64_at(ga, n),
                             outer, m, inner)
        else:
            _softmax_grads(f64_at(g, n), f64_at(o, n), f64_at(ga, n), outer, m, inner, kind,
                           0.0)
    return K_OK


# ---------------------------------------------------------------- cumsum
def cumsum_fwd(caddr, row):
    C = ctx_of(caddr)
    a, dt, dim, keep, shape = _prologue(C, row)
    if dt != F32 and dt != F64:
        return E_DTYPE
    X, b, step, m = _input_lines(C, a, dim)
    out = meta_contiguous(C, dt, shape.shape[0], shape, False)
    if out < 0:
        return out
    ob, ostep, om = _out_lines(shape, dim)
    V = np.empty(meta_of(C)[out, M_NUMEL], np.float64)
    for k in range(b.shape[0]):
        s = 0.0
        for j in range(m):
            s += X[b[k] + j * step]
            V[ob[k] + j * ostep] = s
    _write(C, dt, data_addr(C, out), V)
    return set_outputs1(C, out)


def cumsum_bwd(caddr, row):
    C = ctx_of(caddr)
    ga, shape, b, step, m, dt, G, GA = _backward_start(C, row)
    if ga == 0:
        return K_OK
    for k in range(b.shape[0]):
        s = 0.0
        for j in range(m - 1, -1, -1):
            p = b[k] + j * step
            s += G[p]
            GA[p] = s
    _accumulate(dt, ga, GA)
    return K_OK


# ---------------------------------------------------------------- cumprod / logcumsumexp
# kind 0 cumprod, 1 logcumsumexp; both accumulate in float64, as PyTorch's CPU kernels
# (acc_type of float is double there too)
@jit
def _log_add_exp(x, acc):
    """PyTorch's _log_add_exp_helper: NaN in the accumulator wins, two equal infinities
    stay what they are."""
    if acc != acc:
        return acc
    lo = min(x, acc)
    hi = max(x, acc)
    if lo != hi or (lo - lo) == 0.0:
        return hi + math.log1p(math.exp(lo - hi))
    return x


@jit
def _cumprod_blocks(X, Y, outer, m, inner):
    """Y = cumprod of contiguous X along the middle dim of (outer, m, inner), products in
    float64: each line's in its order, the inner lines of a block side by side (a loop
    that vectorises, and no float64 copies of X and Y)."""
    if inner == 1:
        # eight lines side by side: eight independent chains of multiplies, not one
        acc8 = np.empty(8, np.float64)
        o = 0
        while o + 8 <= outer:
            acc8[:] = 1.0
            for j in range(m):
                for r in range(8):
                    q = (o + r) * m + j
                    acc8[r] *= X[q]
                    Y[q] = acc8[r]
            o += 8
        for o in range(o, outer):
            a = 1.0
            for j in range(o * m, (o + 1) * m):
                a *= X[j]
                Y[j] = a
        return
    acc = np.empty(inner, np.float64)
    for o in range(outer):
        acc[:] = 1.0
        for j in range(m):
            p = (o * m + j) * inner
            Xr = X[p:p + inner]
            Yr = Y[p:p + inner]
            for i in range(inner):
                acc[i] *= Xr[i]
                Yr[i] = acc[i]


@jit
def _cumprod_grad_blocks(X, G, GA, outer, m, inner):
    """GA += cumprod's gradient (cumop_bwd's formula, in the same order per line) for
    contiguous X, G, GA laid out as (outer, m, inner)."""
    pre = np.empty(m * inner, np.float64)       # products of the elements before j
    if inner == 1:
        # eight lines side by side (as in _cumprod_blocks), then the rest one by one
        pre8 = np.empty(8 * m, np.float64)
        t8 = np.empty(8, np.float64)
        o0 = 0
        while o0 + 8 <= outer:
            pre8[:8] = 1.0
            for j in range(1, m):
                for r in range(8):
                    pre8[j * 8 + r] = pre8[(j - 1) * 8 + r] * X[(o0 + r) * m + j - 1]
            t8[:] = 0.0
            for j in range(m - 1, -1, -1):
                for r in range(8):
                    q = (o0 + r) * m + j
                    if j < m - 1:
                        t8[r] *= X[q + 1]
                    t8[r] += G[q]
                    GA[q] += pre8[j * 8 + r] * t8[r]
            o0 += 8
        for o in range(o0, outer):
            base = o * m
            if m > 0:
                pre[0] = 1.0
            for j in range(1, m):
                pre[j] = pre[j - 1] * X[base + j - 1]
            t = 0.0
            for j in range(m - 1, -1, -1):
                if j < m - 1:
                    t *= X[base + j + 1]
                t += G[base + j]
                GA[base + j] += pre[j] * t
        return
    s = np.empty(inner, np.float64)
    for o in range(outer):
        base = o * m * inner
        pre[:inner] = 1.0
        for j in range(1, m):
            Pr = pre[j * inner:(j + 1) * inner]
            Pp = pre[(j - 1) * inner:j * inner]
            Xr = X[base + (j - 1) * inner:base + j * inner]
            for i in range(inner):
                Pr[i] = Pp[i] * Xr[i]
        s[:] = 0.0
        for j in range(m - 1, -1, -1):
            p = base + j * inner
            Gr = G[p:p + inner]
            Ar = GA[p:p + inner]
            Pr = pre[j * inner:(j + 1) * inner]
            if j < m - 1:
                Xn = X[p + inner:p + 2 * inner]
                for i in range(inner):
                    s[i] *= Xn[i]
            for i in range(inner):
                s[i] += Gr[i]
                Ar[i] += Pr[i] * s[i]


def cumop_fwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    a, dt, dim, keep, shape = _prologue(C, row)
    if dt != F32 and dt != F64:
        return E_DTYPE
    kind = T[row, R_IATTR + 2]
    if kind == 0 and is_contiguous(meta_of(C), a):
        out = meta_contiguous(C, dt, shape.shape[0], shape, False)
        if out < 0:
            return out
        outer, m, inner = _blocks(shape, dim)
        n = outer * m * inner
        if dt == F32:
            _cumprod_blocks(f32_at(data_addr(C, a), n), f32_at(data_addr(C, out), n), outer, m,
                            inner)
        else:
            _cumprod_blocks(f64_at(data_addr(C, a), n), f64_at(data_addr(C, out), n), outer, m,
                            inner)
        return set_outputs1(C, out)
    X, b, step, m = _input_lines(C, a, dim)
    out = meta_contiguous(C, dt, shape.shape[0], shape, False)
    if out < 0:
        return out
    ob, ostep, om = _out_lines(shape, dim)
    V = np.empty(meta_of(C)[out, M_NUMEL], np.float64)
    for k in range(b.shape[0]):
        if kind == 0:
            s = 1.0
            for j in range(m):
                s *= X[b[k] + j * step]
                V[ob[k] + j * ostep] = s
        else:
            s = -np.inf
            for j in range(m):
                s = _log_add_exp(X[b[k] + j * step], s)
                V[ob[k] + j * ostep] = s
    _write(C, dt, data_addr(C, out), V)
    return set_outputs1(C, out)


def cumop_bwd(caddr, row):
    """cumprod: dx_j = (prod_{i<j} x_i) S_j with S_j = g_j + x_{j+1} S_{j+1}: the sum over
    k >= j of g_k times the product of the others, exact with zeros in the line.
    logcumsumexp: dx_j = exp(x_j - y_j) R_j with R_j = g_j + exp(y_j - y_{j+1}) R_{j+1}
    (y non-decreasing along the line, so no factor exceeds 1)."""
    C = ctx_of(caddr)
    T = tape_of(C)
    dim = T[row, R_IATTR]
    kind = T[row, R_IATTR + 2]
    sx = T[row, R_IN + IN_SAVED]
    if kind == 0 and is_contiguous(meta_of(C), sx):
        ga = edge_grad_addr(C, row, 0)
        if ga == 0:
            return K_OK
        ishape = np.empty(8, np.int64)
        nd = input_shape(C, row, 0, ishape)
        outer, m, inner = _blocks(ishape[:nd].copy(), dim)
        n = outer * m * inner
        g = row_grad_addr(C, row, 0)
        if T[row, R_ODTYPE] == F32:
            _cumprod_grad_blocks(f32_at(data_addr(C, sx), n), f32_at(g, n), f32_at(ga, n), outer,
                                 m, inner)
        else:
            _cumprod_grad_blocks(f64_at(data_addr(C, sx), n), f64_at(g, n), f64_at(ga, n), outer,
                                 m, inner)
        return K_OK
    ga, shape, b, step, m, dt, G, GA = _backward_start(C, row)
    if ga == 0:
        return K_OK
    X, xb, xstep, xm = _saved_values(C, sx, dim)
    # (cumprod's gradient does not read the output: no float64 copy of it)
    Y = _read(dt, data_addr(C, T[row, R_OSAVED]), G.shape[0] if kind == 1 else 0)
    pre = np.empty(m + 1, np.float64)
    for k in range(b.shape[0]):
        if kind == 0:
            pre[0] = 1.0
            for j in range(m):
                pre[j + 1] = pre[j] * X[xb[k] + j * xstep]
            s = 0.0
            for j in range(m - 1, -1, -1):
                p = b[k] + j * step
                if j < m - 1:
                    s *= X[xb[k] + (j + 1) * xstep]
                s += G[p]
                GA[p] = pre[j] * s
        else:
            r = 0.0
            for j in range(m - 1, -1, -1):
                p = b[k] + j * step
                if j < m - 1:
                    yn = Y[p + step]
                    if yn != Y[p]:
                        r *= math.exp(Y[p] - yn)
                r += G[p]
                x = X[xb[k] + j * xstep]
                GA[p] = r * math.exp(x - Y[p]) if x != Y[p] else r
    _accumulate(dt, ga, GA)
    return K_OK


# ---------------------------------------------------------------- prod
def prod_fwd(caddr, row):
    C = ctx_of(caddr)
    a, dt, dim, keep, shape = _prologue(C, row)
    if dt != F32 and dt != F64:
        return E_DTYPE
    X, b, step, m = _input_lines(C, a, dim)
    out, V = _reduced_output(C, dt, shape, dim, keep, b.shape[0])
    if out < 0:
        return out
    for k in range(b.shape[0]):
        p = 1.0
        for j in range(m):
            p *= X[b[k] + j * step]
        V[k] = p
    _write(C, dt, data_addr(C, out), V)
    return set_outputs1(C, out)


def prod_bwd(caddr, row):
    """d prod / d x_j = product of the others, from prefix and suffix products (exact
    with zeros, unlike prod / x_j)."""
    C = ctx_of(caddr)
    T = tape_of(C)
    ga, shape, b, step, m, dt, G, GA = _backward_start(C, row)
    if ga == 0:
        return K_OK
    dim = T[row, R_IATTR]
    X, xb, xstep, xm = _saved_values(C, T[row, R_IN + IN_SAVED], dim)
    pre = np.empty(m + 1, np.float64)
    for k in range(b.shape[0]):
        pre[0] = 1.0
        for j in range(m):
            pre[j + 1] = pre[j] * X[xb[k] + j * xstep]
        suf = 1.0
        for j in range(m - 1, -1, -1):
            GA[b[k] + j * step] = G[k] * pre[j] * suf
            suf *= X[xb[k] + j * xstep]
    _accumulate(dt, ga, GA)
    return K_OK


# ---------------------------------------------------------------- var / std
# kind [3]: 0 var, 1 std; [2] the correction
@jit
def _mean(X, p, step, m):
    """The mean, corrected by the mean of the residuals: exact for a line of equal values
    (PyTorch's Welford mean is, so their variance is exactly 0 there too)."""
    mean = 0.0
    for j in range(m):
        mean += X[p + j * step]
    mean /= m
    r = 0.0
    for j in range(m):
        r += X[p + j * step] - mean
    return mean + r / m


@jit
def _moments(X, p, step, m):
    mean = _mean(X, p, step, m)
    ss = 0.0
    for j in range(m):
        d = X[p + j * step] - mean
        ss += d * d
    return mean, ss


def var_fwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    a, dt, dim, keep, shape = _prologue(C, row)
    if dt != F32 and dt != F64:
        return E_DTYPE
    corr = T[row, R_IATTR + 2]
    is_std = T[row, R_IATTR + 3] != 0
    X, b, step, m = _input_lines(C, a, dim)
    out, V = _reduced_output(C, dt, shape, dim, keep, b.shape[0])
    if out < 0:
        return out
    dof = m - corr
    for k in range(b.shape[0]):
        mean, ss = _moments(X, b[k], step, m) if m > 0 else (np.nan, np.nan)
        v = ss / dof if dof > 0 else (np.nan if ss != ss or ss == 0 else np.inf)
        V[k] = math.sqrt(v) if is_std else v
    _write(C, dt, data_addr(C, out), V)
    return set_outputs1(C, out)


def var_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    ga, shape, b, step, m, dt, G, GA = _backward_start(C, row)
    if ga == 0:
        return K_OK
    dim = T[row, R_IATTR]
    corr = T[row, R_IATTR + 2]
    is_std = T[row, R_IATTR + 3] != 0
    X, xb, xstep, xm = _saved_values(C, T[row, R_IN + IN_SAVED], dim)
    S = _saved_values(C, T[row, R_OSAVED], -1)[0] if is_std else G
    dof = m - corr
    for k in range(b.shape[0]):
        mean = _mean(X, xb[k], xstep, m)
        g = G[k]
        if is_std:      # PyTorch's std_backward: var's, of g / (2 std), 0 where std == 0
            g = g / (2.0 * S[k]) if S[k] != 0.0 else 0.0
        for j in range(m):
            x = X[xb[k] + j * xstep]
            if dim < 0 and dof <= 0:
                # PyTorch's var_backward without a dim: 2 / 0 times (x - mean), with
                # NaN where x == mean (inf * 0), inf elsewhere
                GA[b[k] + j * step] = g * (np.nan if x == mean else np.inf)
            else:
                GA[b[k] + j * step] = 2.0 / dof * g * (x - mean)
    _accumulate(dt, ga, GA)
    return K_OK


# ---------------------------------------------------------------- vector norms
# the float attribute is the order p (inf allowed)
@jit
def _pnorm(X, p, step, m, ord_):
    if ord_ == np.inf:
        r = 0.0
        for j in range(m):
            v = abs(X[p + j * step])
            if v > r or v != v:
                r = v
        return r
    if ord_ == -np.inf:
        r = np.inf
        for j in range(m):
            v = abs(X[p + j * step])
            if v < r or v != v:
                r = v
        return r
    if ord_ == 0.0:
        r = 0.0
        for j in range(m):
            r += X[p + j * step] != 0.0
        return r
    s = 0.0
    if ord_ == 2.0:
        for j in range(m):
            v = X[p + j * step]
            s += v * v
        return math.sqrt(s)
    if ord_ == 1.0:
        for j in range(m):
            s += abs(X[p + j * step])
        return s
    for j in range(m):
        s += abs(X[p + j * step]) ** ord_
    return s ** (1.0 / ord_)


@jit
def _l2_lines(X, outer, m, V):
    for o in range(outer):
        V[o] = math.sqrt(vsqdev(X[o * m:(o + 1) * m], 0.0))


@jit
def _l2_grads(X, G, N, GA, outer, m):
    """GA += g * x / norm line by line (0 where x or the norm is 0): norm_bwd's p = 2."""
    for o in range(outer):
        nk = np.float64(N[o])
        if nk == 0.0:
            continue
        g = np.float64(G[o])
        R = X[o * m:(o + 1) * m]
        A = GA[o * m:(o + 1) * m]
        for j in range(m):
            x = np.float64(R[j])
            A[j] += g * pick(x == 0.0, 0.0, x / nk)


@jit
def _l2_fast(C, a, dim, shape, ord_):
    """(outer, m) when the 2-norm of a along dim reads contiguous lines in place (a
    contiguous, dim the last or every dim), else (0, 0): the other norms walk float64
    copies (forward and backward about 2.7 times PyTorch's time)."""
    outer, m, inner = _blocks(shape, dim)
    if ord_ == 2.0 and inner == 1 and is_contiguous(meta_of(C), a):
        return outer, m
    return 0, 0


def norm_fwd(caddr, row):
    C = ctx_of(caddr)
    a, dt, dim, keep, shape = _prologue(C, row)
    if dt != F32 and dt != F64:
        return E_DTYPE
    ord_ = fattr_of(C)[row]
    outer, m = _l2_fast(C, a, dim, shape, ord_)
    if outer > 0:
        out, V = _reduced_output(C, dt, shape, dim, keep, outer)
        if out < 0:
            return out
        if dt == F32:
            _l2_lines(f32_at(data_addr(C, a), outer * m), outer, m, V)
        else:
            _l2_lines(f64_at(data_addr(C, a), outer * m), outer, m, V)
        _write(C, dt, data_addr(C, out), V)
        return set_outputs1(C, out)
    X, b, step, m = _input_lines(C, a, dim)
    out, V = _reduced_output(C, dt, shape, dim, keep, b.shape[0])
    if out < 0:
        return out
    for k in range(b.shape[0]):
        V[k] = _pnorm(X, b[k], step, m, ord_)
    _write(C, dt, data_addr(C, out), V)
    return set_outputs1(C, out)


def norm_bwd(caddr, row):
    """PyTorch's linalg_vector_norm_backward: x |x|^(p-2) / norm^(p-1), 0 where the
    norm is 0; for inf-norms the gradient is split among the elements attaining it."""
    C = ctx_of(caddr)
    T = tape_of(C)
    ga = edge_grad_addr(C, row, 0)
    if ga == 0:
        return K_OK
    sx = T[row, R_IN + IN_SAVED]
    shape, _ = _shape(meta_of(C), sx)
    outer, m = _l2_fast(C, sx, T[row, R_IATTR], shape, fattr_of(C)[row])
    if outer > 0:
        n = outer * m
        g = row_grad_addr(C, row, 0)
        o = data_addr(C, T[row, R_OSAVED])
        if T[row, R_ODTYPE] == F32:
            _l2_grads(f32_at(data_addr(C, sx), n), f32_at(g, outer), f32_at(o, outer),
                      f32_at(ga, n), outer, m)
        else:
            _l2_grads(f64_at(data_addr(C, sx), n), f64_at(g, outer), f64_at(o, outer),
                      f64_at(ga, n), outer, m)
        return K_OK
    ga, shape, b, step, m, dt, G, GA = _backward_start(C, row)
    dim = T[row, R_IATTR]
    ord_ = fattr_of(C)[row]
    X, xb, xstep, xm = _saved_values(C, T[row, R_IN + IN_SAVED], dim)
    N = _saved_values(C, T[row, R_OSAVED], -1)[0]
    for k in range(b.shape[0]):
        nk = N[k]
        if ord_ == 0.0:
            continue
        if ord_ == np.inf or ord_ == -np.inf:
            cnt = 0
            for j in range(m):
                cnt += abs(X[xb[k] + j * xstep]) == nk
            for j in range(m):
                x = X[xb[k] + j * xstep]
                if abs(x) == nk:
                    GA[b[k] + j * step] = G[k] * np.sign(x) / cnt
            continue
        for j in range(m):
            x = X[xb[k] + j * xstep]
            if x == 0.0:
                v = 0.0         # PyTorch's masked gradient at a zero element
            elif ord_ == 1.0:
                v = np.sign(x)
            elif ord_ == 2.0:
                v = x / nk if nk != 0.0 else 0.0
            elif ord_ < 1.0:
                v = np.sign(x) * abs(x) ** (ord_ - 1.0) / nk ** (ord_ - 1.0) if nk != 0.0 else 0.0
            else:
                v = x * abs(x) ** (ord_ - 2.0) / nk ** (ord_ - 1.0) if nk != 0.0 else 0.0
            GA[b[k] + j * step] = G[k] * v
    _accumulate(dt, ga, GA)
    return K_OK


# ---------------------------------------------------------------- layer_norm
# PyTorch's native_layer_norm as one row. Int attributes: [0] rows N (the leading dims),
# [1] their length D (the normalized dims); the float attribute is eps. Inputs: x, and
# the weight and bias (D contiguous elements each), either absent. Each row's mean and
# variance are two float64 passes (the variance from x - mean); the backward recomputes
# them from the saved x (PyTorch saves them: N values each) and writes PyTorch's
# formulas: with h = (x - mean) * rstd and g = dy * weight,
# dx = rstd * (g - mean(g) - h * mean(g * h)), dweight = sum(dy * h), dbias = sum(dy).
# (Composed of nine elementwise and mean ops it took twice PyTorch's time, and its
# grad_fn was the last of them.)
@jit
def _row_stats(R, eps):
    """(mean, 1 / sqrt(var + eps)) of one row, in float64."""
    D = R.shape[0]
    mean = vsum(R, 0.0) / D
    return mean, 1.0 / math.sqrt(vsqdev(R, mean) / D + eps)


@jit
def _layer_norm_rows(X, Y, W, B, N, D, eps):
    """Y = layer_norm(X) row by row, times W and plus B when they are not empty."""
    for r in range(N):
        R = X[r * D:(r + 1) * D]
        O = Y[r * D:(r + 1) * D]
        mean, rstd = _row_stats(R, eps)
        for j in range(D):
            v = (np.float64(R[j]) - mean) * rstd
            if W.shape[0]:
                v = v * W[j]
            if B.shape[0]:
                v = v + B[j]
            O[j] = v


@jit
def _layer_norm_grads(X, G, W, GX, GW, GB, N, D, eps):
    """GX, GW, GB += the gradients (each only when its array is not empty). X is empty
    when only the bias wants one (x was not saved), W when there is no weight or it was
    not saved (only x's gradient reads it)."""
    H = np.empty(D)
    Gw = np.empty(D)
    SW = np.zeros(D if GW.shape[0] else 0)
    SB = np.zeros(D if GB.shape[0] else 0)
    for r in range(N):
        Gr = G[r * D:(r + 1) * D]
        for j in range(SB.shape[0]):
            SB[j] += Gr[j]
        if X.shape[0] == 0:
            continue
        R = X[r * D:(r + 1) * D]
        mean, rstd = _row_stats(R, eps)
        for j in range(D):
            H[j] = (np.float64(R[j]) - mean) * rstd
            Gw[j] = Gr[j] * W[j] if W.shape[0] else np.float64(Gr[j])
        if GX.shape[0]:
            a = vsum(Gw, 0.0) / D
            b = vdot(Gw, H, 0.0) / D
            A = GX[r * D:(r + 1) * D]
            for j in range(D):
                A[j] += rstd * (Gw[j] - a - H[j] * b)
        for j in range(SW.shape[0]):
            SW[j] += Gr[j] * H[j]
    for j in range(SW.shape[0]):
        GW[j] += SW[j]
    for j in range(SB.shape[0]):
        GB[j] += SB[j]


def layer_norm_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    x = input_id(C, row, 0)
    w = input_id(C, row, 1)
    b = input_id(C, row, 2)
    dt = M[x, M_DTYPE]
    if dt != KERNEL_DTYPE or (w >= 0 and M[w, M_DTYPE] != dt) or (b >= 0 and M[b, M_DTYPE] != dt):
        return E_DTYPE
    N = T[row, R_IATTR]
    D = T[row, R_IATTR + 1]
    n = N * D
    shape, _ = _shape(M, x)
    out = meta_contiguous(C, dt, shape.shape[0], shape, False)
    if out < 0:
        return out
    eps = fattr_of(C)[row]
    wa, nw = (data_addr(C, w), D) if w >= 0 else (0, 0)
    ba, nb = (data_addr(C, b), D) if b >= 0 else (0, 0)
    if KERNEL_DTYPE == F32:
        _layer_norm_rows(_values32(C, x, n), f32_at(data_addr(C, out), n), f32_at(wa, nw),
                         f32_at(ba, nb), N, D, eps)
    else:
        _layer_norm_rows(_values64(C, x, n), f64_at(data_addr(C, out), n), f64_at(wa, nw),
                         f64_at(ba, nb), N, D, eps)
    return set_outputs1(C, out)


def layer_norm_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    gx = edge_grad_addr(C, row, 0)
    gw = edge_grad_addr(C, row, 1)
    gb = edge_grad_addr(C, row, 2)
    if gx == 0 and gw == 0 and gb == 0:
        return K_OK
    N = T[row, R_IATTR]
    D = T[row, R_IATTR + 1]
    n = N * D
    eps = fattr_of(C)[row]
    g = row_grad_addr(C, row, 0)
    x = T[row, R_IN + IN_SAVED]             # (-1: only the bias wants a gradient)
    w = T[row, R_IN + IW + IN_SAVED]        # (-1: no weight, or x needs no gradient)
    wa, nw = (data_addr(C, w), D) if w >= 0 else (0, 0)
    if KERNEL_DTYPE == F32:
        _layer_norm_grads(_values32(C, x, n) if x >= 0 else np.empty(0, np.float32),
                          f32_at(g, n), f32_at(wa, nw), f32_at(gx, n if gx else 0),
                          f32_at(gw, D if gw else 0), f32_at(gb, D if gb else 0), N, D, eps)
    else:
        _layer_norm_grads(_values64(C, x, n) if x >= 0 else np.empty(0),
                          f64_at(g, n), f64_at(wa, nw), f64_at(gx, n if gx else 0),
                          f64_at(gw, D if gw else 0), f64_at(gb, D if gb else 0), N, D, eps)
    return K_OK


def _along(name, grad_fn, fwd, bwd, saves=(), per_dtype=False, attrs=("dim", "keepdim")):
    """attrs: the row's integer attributes (the dim, -1 for all, and keepdim first)."""
    return register(OpDef(name, grad_fn, "custom", module=_M, fwd_fn=fwd, bwd_fn=bwd, nin=1,
                          diff=(0,), saves_if={0: saves}, per_dtype=per_dtype, attrs=attrs))


_SOFTMAX_ATTRS = ("dim", "keepdim", "kind")     # kind: 0 softmax, 1 log_softmax, 2 logsumexp
_VAR_ATTRS = ("dim", "keepdim", "correction", "std")


_along("softmax", "SoftmaxBackward0", "softmax_fwd", "softmax_bwd", ("out",), True,
       _SOFTMAX_ATTRS)
samples("softmax", "x.softmax(1)", "F.softmax(x, dim=0)", "L.softmax(x, -1)",
        Sample("x.softmax(1)", x=T(2, 3, 4)), "x.t().softmax(0)",
        errors=["x.softmax(2)", Sample("x.softmax(None)", xfail={"error": (
            "message: tapegrad \"softmax(): argument 'dim' must be int, not NoneType\", "
            "PyTorch's says \"argument 'dim' (position 1) must be int\"")})])
_along("log_softmax", "LogSoftmaxBackward0", "softmax_fwd", "softmax_bwd", ("out",), True,
       _SOFTMAX_ATTRS)
samples("log_softmax", "x.log_softmax(1)", "F.log_softmax(x, dim=0)", "L.log_softmax(x, -1)",
        Sample("x.log_softmax(0)", x=T(2, 3, 4)), errors=["x.log_softmax(-3)"])
_along("logsumexp", "LogsumexpBackward0", "softmax_fwd", "softmax_bwd", ("a", "out"), True,
       _SOFTMAX_ATTRS)
samples("logsumexp", "x.logsumexp(1)", "L.logsumexp(x, 0, keepdim=True)",
        "x.logsumexp((0, 1))", Sample("x.logsumexp(-1)", x=T(2, 3, 4)),
        errors=["x.logsumexp(2)"])
# (x's gradient reads x and the weight, the weight's reads x; the bias's reads neither)
# (next_functions: three entries, None for an absent weight or bias, as PyTorch's)
register(OpDef("layer_norm", "NativeLayerNormBackward0", "custom", module=_M,
               fwd_fn="layer_norm_fwd", bwd_fn="layer_norm_bwd", nin=3, diff=(0, 1, 2),
               saves_if={0: ("a", "b"), 1: ("a",)}, per_dtype=True,
               attrs=("rows", "width"))).edges = (0, 1, 2)
samples("layer_norm", "F.layer_norm(x, (4,), w, b)", "F.layer_norm(x, (4,))",
        "F.layer_norm(x, [4], weight=w, eps=1e-3)", "F.layer_norm(x, (4,), None, b)",
        Sample("F.layer_norm(x, (3, 4), w, b)", x=T(2, 3, 4), w=T(3, 4), b=T(3, 4)),
        errors=["F.layer_norm(x, (3,))", Sample("F.layer_norm(x, (4,), w)", w=T(3))],
        x=T(3, 4), w=T(4), b=T(4))
_along("cumsum", "CumsumBackward0", "cumsum_fwd", "cumsum_bwd")
samples("cumsum", "x.cumsum(1)", "L.cumsum(x, dim=0)", "x.cumsum(-1)",
        Sample("x.cumsum(1)", x=T(2, 3, 4)), errors=["x.cumsum(2)"])
_CUM_ATTRS = ("dim", "keepdim", "kind")         # kind: 0 cumprod, 1 logcumsumexp
_along("cumprod", "CumprodBackward0", "cumop_fwd", "cumop_bwd", ("a", "out"), attrs=_CUM_ATTRS)
samples("cumprod", "x.cumprod(1)", "L.cumprod(x, dim=0)", "x.cumprod(-1)", "x.t().cumprod(1)",
        Sample("x.cumprod(1)", x=T(2, 3, 4, domain=signed(0.5, 1.5))),
        Sample("x.cumprod(1)", x=Fixed([[0.5, 0.0, 1.5, -2.0], [0.0, 1.2, 0.0, 0.7],
                                        [1.1, -0.9, 1.3, 0.8]], "float")),
        errors=["x.cumprod(2)"], x=T(3, 4, domain=signed(0.5, 1.5)))
_along("logcumsumexp", "LogcumsumexpBackward0", "cumop_fwd", "cumop_bwd", ("a", "out"),
       attrs=_CUM_ATTRS)
samples("logcumsumexp", "x.logcumsumexp(1)", "L.logcumsumexp(x, 0)", "x.t().logcumsumexp(1)",
        Sample("x.logcumsumexp(-1)", x=T(2, 3, 4)), errors=["x.logcumsumexp(2)"])
# (the result is saved, as PyTorch saves it, only to be version-checked)
_along("prod", "ProdBackward0", "prod_fwd", "prod_bwd", ("a", "out"))
samples("prod", "x.prod()", "L.prod(x)", x=T(3, 4, domain=signed(0.5, 1.5)))
_along("prod_dim", "ProdBackward1", "prod_fwd", "prod_bwd", ("a", "out"))
# (a zero, then two zeros, in a line: PyTorch's backward takes other paths there)
samples("prod_dim", "x.prod(1)", "L.prod(x, 0, keepdim=True)", "x.prod(-1)",
        Sample("x.prod(1)", x=Fixed([[0.5, 0.0, 1.5, -2.0], [0.0, 1.2, 0.0, 0.7],
                                     [1.1, -0.9, 1.3, 0.8]], "float")),
        errors=["x.prod(2)"], x=T(3, 4, domain=signed(0.5, 1.5)))
_along("var", "VarBackward0", "var_fwd", "var_bwd", ("a",), attrs=_VAR_ATTRS)
samples("var", "x.var()", "x.var(1)", "L.var(x, 0, unbiased=False)",
        "x.var(1, keepdim=True, correction=0)", "L.var(x, dim=(0, 1))", "x.var(False)",
        Sample("x.var(0)", x=T(2, 3, 4)), errors=["x.var(2)"])
_along("std", "StdBackward0", "var_fwd", "var_bwd", ("a", "out"), attrs=_VAR_ATTRS)
samples("std", "x.std()", "x.std(1)", "L.std(x, 0, unbiased=False)",
        "x.std(1, keepdim=True, correction=0)", errors=["x.std(-3)"])
_along("norm", "LinalgVectorNormBackward0", "norm_fwd", "norm_bwd", ("a", "out"))
samples("norm", "x.norm()", "L.norm(x, 1, dim=1)", "x.norm(p=3, dim=0)",
        "x.norm(dim=1, keepdim=True)", "x.norm(float('inf'), dim=1)", "x.norm(0.5)",
        "L.norm(x, p='fro')", errors=["x.norm(dim=2)"],
        x=T(3, 4, domain=NONZERO))
