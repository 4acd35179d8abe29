"""Pooling, resizing and padding: max/avg pooling (fixed and adaptive windows), nearest and
(bi)linear upsampling, pixel (un)shuffle, and constant/reflect/replicate padding.

Every kernel sees its input as planes: the leading dims (batch, channels) are one dim P
and the last two are H x W, so a 1-d op is its 2-d op with a unit H (the fronts add the
dim, or, for the upsampling ops PyTorch has 1-d kernels of, the kernel's H is the
identity). Index arithmetic follows PyTorch's CPU kernels (aten/src/ATen/native/cpu/
MaxPoolKernel.cpp, AvgPoolKernel.cpp, AdaptiveAvgPoolKernel.cpp, UpSampleKernel.cpp,
UpSample.h, PaddingKernel.cpp), so windows, picked indices, source positions and weights
are PyTorch's; sums run in the input's dtype in PyTorch's order.

Rows' integer attributes: see the OpDefs at the end (pool: kind, window, stride,
padding, dilation, count_include_pad, divisor; upsample: the modes of the H and W axes,
align_corners, the scales as float64 bits; shuffle: the factor and its direction; pad:
the mode and the padding before each dim). Forward-only iargs (FV on): the output's
spatial size (pool, upsample) or its ndim and shape (pad).
"""
import math

import numpy as np

from .._engine.layout import (K_OK, F32, E_DTYPE, I64, M_DTYPE, M_NDIM, M_SHAPE, M_STRIDE,
                              M_NUMEL, R_IATTR, R_OSHAPE, R_ONDIM, R_OSAVED, MAXD, C_NOUTS)
from .._engine.lowlevel import (jit, ctx_of, meta_of, tape_of, iargs_of, outs_of, fattr_of,
                                f32_at, f64_at, i64_at)
from .._engine.core import (data_addr, meta_contiguous, input_id, set_outputs1, span,
                            is_contiguous, row_grad_addr, edge_grad_addr, input_shape,
                            out_numel, _gather)
from .opinfo import T, spaced
from .registry import OpDef, Sample, register, samples
from ._vmath import _fma

_M = __name__
FV = 16
KERNEL_DTYPE = -1       # F32 or F64 in each compiled copy (registry._per_dtype)
MAX, AVG, AMAX, AAVG = 0, 1, 2, 3           # pool kinds
NEAREST, LINEAR, NEAREST_EXACT = 0, 1, 2    # upsample axis modes
CONSTANT, REFLECT, REPLICATE = 0, 1, 2      # pad modes


# ---------------------------------------------------------------- shared
@jit
def _dense(C, t, src):
    """Tensor t's elements in row-major order, in src's dtype (src: t's memory from its
    data address on): src itself when t is contiguous, else a gathered copy."""
    M = meta_of(C)
    n = M[t, M_NUMEL]
    if is_contiguous(M, t):
        return src[:n]
    nd = M[t, M_NDIM]
    X = np.empty(n, src.dtype)
    _gather(src, 0, M[t, M_SHAPE:M_SHAPE + nd].copy(), M[t, M_STRIDE:M_STRIDE + nd].copy(), X)
    return X


@jit
def _planes(shape, nd, one_d):
    """(P, H, W) of a shape seen as planes; one_d: the last dim is W, H = 1."""
    W = shape[nd - 1]
    H = 1 if one_d else shape[nd - 2]
    P = 1
    for d in range(nd - (1 if one_d else 2)):
        P *= shape[d]
    return P, H, W


@jit
def _in_planes(C, row, one_d):
    """(P, H, W) of row's input 0 (alive or not)."""
    shape = np.empty(MAXD, np.int64)
    nd = input_shape(C, row, 0, shape)
    return _planes(shape, nd, one_d)


@jit
def _out_hw(C, row):
    T = tape_of(C)
    nd = T[row, R_ONDIM]
    return T[row, R_OSHAPE + nd - 2], T[row, R_OSHAPE + nd - 1]


@jit
def _out_shape(C, a, oh, ow):
    """Input a's shape with its last two dims replaced by (oh, ow)."""
    M = meta_of(C)
    nd = M[a, M_NDIM]
    shape = M[a, M_SHAPE:M_SHAPE + nd].copy()
    shape[nd - 2] = oh
    shape[nd - 1] = ow
    return shape


@jit
def _round(B, v):
    """v rounded to B's dtype (B: a one-element scratch array), returned in that dtype:
    one float32 operation done in float64 and rounded is the float32 operation."""
    B[0] = v
    return B[0]


@jit
def _bits(v):
    """The float64 whose bits int64 v holds."""
    a = np.empty(1, np.int64)
    a[0] = v
    return a.view(np.float64)[0]


# ---------------------------------------------------------------- pooling
@jit
def _window(o, size, osize, k, s, p, d, adaptive):
    """(first, end) input positions of output position o's window along one axis: PyTorch's
    start and end index for adaptive pooling, else its first in-range tap (a multiple of
    the dilation from the window's start) and the end of the taps."""
    if adaptive:
        return (o * size) // osize, ((o + 1) * size + osize - 1) // osize
    i0 = o * s - p
    i1 = min(i0 + (k - 1) * d + 1, size)
    if i0 < 0:          # (PyTorch steps by d until in range: the same tap, found at once)
        i0 += ((d - 1 - i0) // d) * d
    return i0, i1


@jit
def _max_pool_2x2(X, O, I, P, H, W, OH, OW):
    """_max_pool for 2x2 windows at stride 2 without padding or dilation, every window in
    range (the common case): the same picks (first of equal maxima, the last NaN), without
    the window bookkeeping. (NaN is tested once per window, a branch almost never taken,
    so that the usual path is three compare-and-selects: branches there mispredict on
    random data, and NaN tests in every comparison cost as much again; about three times
    as fast as the general loop on LeNet's first pooling.)"""
    for p in range(P):
        for oh in range(OH):
            r0 = 2 * oh * W
            b0 = p * H * W + r0
            o0 = (p * OH + oh) * OW
            for ow in range(OW):
                a = X[b0 + 2 * ow]
                b = X[b0 + 2 * ow + 1]
                c = X[b0 + W + 2 * ow]
                d = X[b0 + W + 2 * ow + 1]
                if (a != a) | (b != b) | (c != c) | (d != d):
                    if d != d:
                        mv = d
                        mi = W + 1
                    elif c != c:
                        mv = c
                        mi = W
                    elif b != b:
                        mv = b
                        mi = 1
                    else:
                        mv = a
                        mi = 0
                else:
                    t = b > a
                    mv = b if t else a
                    mi = 1 if t else 0
                    t = c > mv
                    mv = c if t else mv
                    mi = W if t else mi
                    t = d > mv
                    mv = d if t else mv
                    mi = W + 1 if t else mi
                O[o0 + ow] = mv
                I[o0 + ow] = r0 + 2 * ow + mi


@jit
def _max_pool(X, O, I, P, H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw, adaptive):
    """O, I = each window's max and its index in the plane (h * W + w): the first of equal
    maxima, the last NaN (PyTorch's `val > max || isnan(val)`). (Column windows come from
    a table and taps are walked with while loops: a range with a variable step costs
    about twice as much.)"""
    if (not adaptive and kh == 2 and kw == 2 and sh == 2 and sw == 2 and ph == 0 and pw == 0
            and dh == 1 and dw == 1 and 2 * OH <= H and 2 * OW <= W):
        _max_pool_2x2(X, O, I, P, H, W, OH, OW)
        return
    if adaptive:
        dh = 1
        dw = 1
    W0 = np.empty(OW, np.int64)
    W1 = np.empty(OW, np.int64)
    for ow in range(OW):
        W0[ow], W1[ow] = _window(ow, W, OW, kw, sw, pw, dw, adaptive)
    neg = -np.inf
    for p in range(P):
        xb = p * H * W
        ob = p * OH * OW
        for oh in range(OH):
            h0, h1 = _window(oh, H, OH, kh, sh, ph, dh, adaptive)
            o = ob + oh * OW
            for ow in range(OW):
                w0 = W0[ow]
                w1 = W1[ow]
                mi = h0 * W + w0
                mv = neg
                h = h0
                while h < h1:
                    r = h * W
                    w = w0
                    while w < w1:
                        v = X[xb + r + w]
                        if v > mv or v != v:
                            mv = v
                            mi = r + w
                        w += dw
                    h += dh
                O[o + ow] = mv
                I[o + ow] = mi


@jit
def _avg_window(oh, ow, H, W, OH, OW, kh, kw, sh, sw, ph, pw, cip, divisor, adaptive):
    """(h0, h1, w0, w1, d1, d2) of a window: its in-range taps and the divisors (adaptive:
    its height and width, divided in turn; else one divisor and 1)."""
    if adaptive:
        h0, h1 = _window(oh, H, OH, 0, 0, 0, 1, True)
        w0, w1 = _window(ow, W, OW, 0, 0, 0, 1, True)
        return h0, h1, w0, w1, h1 - h0, w1 - w0
    h0 = oh * sh - ph
    w0 = ow * sw - pw
    h1 = min(h0 + kh, H + ph)
    w1 = min(w0 + kw, W + pw)
    pool = (h1 - h0) * (w1 - w0)
    h0 = max(h0, 0)
    w0 = max(w0, 0)
    h1 = min(h1, H)
    w1 = min(w1, W)
    if divisor != 0:        # (divisor_override, of either sign)
        return h0, h1, w0, w1, divisor, 1
    if cip:
        return h0, h1, w0, w1, pool, 1
    return h0, h1, w0, w1, (h1 - h0) * (w1 - w0), 1


@jit
def _avg_pool(X, O, P, H, W, OH, OW, kh, kw, sh, sw, ph, pw, cip, divisor, adaptive):
    """O = each window's sum (in X's dtype, row by row) over its divisor(s)."""
    B = np.empty(1, X.dtype)
    zero = _round(B, 0.0)
    for p in range(P):
        xb = p * H * W
        ob = p * OH * OW
        for oh in range(OH):
            for ow in range(OW):
                h0, h1, w0, w1, d1, d2 = _avg_window(oh, ow, H, W, OH, OW, kh, kw, sh, sw,
                                                     ph, pw, cip, divisor, adaptive)
                if h0 >= h1 or w0 >= w1:
                    O[ob + oh * OW + ow] = 0.0
                    continue
                s = zero
                for h in range(h0, h1):
                    r = xb + h * W
                    for w in range(w0, w1):
                        s += X[r + w]
                v = _round(B, s / d1)
                if d2 != 1:
                    v = _round(B, v / d2)
                O[ob + oh * OW + ow] = v


@jit
def _avg_pool_grad(G, GI, P, H, W, OH, OW, kh, kw, sh, sw, ph, pw, cip, divisor, adaptive):
    """GI += each output's gradient over its divisor(s), spread over its window's taps."""
    B = np.empty(1, G.dtype)
    for p in range(P):
        xb = p * H * W
        ob = p * OH * OW
        for oh in range(OH):
            for ow in range(OW):
                h0, h1, w0, w1, d1, d2 = _avg_window(oh, ow, H, W, OH, OW, kh, kw, sh, sw,
                                                     ph, pw, cip, divisor, adaptive)
                if h0 >= h1 or w0 >= w1:
                    continue
                delta = _round(B, G[ob + oh * OW + ow] / d1)
                if d2 != 1:
                    delta = _round(B, delta / d2)
                for h in range(h0, h1):
                    r = xb + h * W
                    for w in range(w0, w1):
                        GI[r + w] += delta


@jit
def _max_pool_grad(G, I, GI, P, HW, OHW):
    """GI += each output's gradient at its max's index."""
    for p in range(P):
        for o in range(OHW):
            GI[p * HW + I[p * OHW + o]] += G[p * OHW + o]


@jit
def _pool_attrs(T, row):
    a = T[row, R_IATTR:R_IATTR + 11]
    return a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10]


def pool_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    a = input_id(C, row, 0)
    dt = M[a, M_DTYPE]
    if dt != KERNEL_DTYPE:
        return E_DTYPE
    kind, kh, kw, sh, sw, ph, pw, dh, dw, cip, divisor = _pool_attrs(T, row)
    nd = M[a, M_NDIM]
    P, H, W = _planes(M[a, M_SHAPE:M_SHAPE + nd], nd, False)
    ia = iargs_of(C)
    OH = ia[FV]
    OW = ia[FV + 1]
    oshape = _out_shape(C, a, OH, OW)
    out = meta_contiguous(C, dt, nd, oshape, False)
    if out < 0:
        return out
    n = P * OH * OW
    adaptive = kind == AMAX or kind == AAVG
    if kind == MAX or kind == AMAX:
        inds = meta_contiguous(C, I64, nd, oshape, False)
        if inds < 0:
            return inds
        I = i64_at(data_addr(C, inds), n)
        if KERNEL_DTYPE == F32:
            _max_pool(_dense(C, a, f32_at(data_addr(C, a), span(M, a))),
                      f32_at(data_addr(C, out), n), I, P, H, W, OH, OW, kh, kw, sh, sw, ph,
                      pw, dh, dw, adaptive)
        else:
            _max_pool(_dense(C, a, f64_at(data_addr(C, a), span(M, a))),
                      f64_at(data_addr(C, out), n), I, P, H, W, OH, OW, kh, kw, sh, sw, ph,
                      pw, dh, dw, adaptive)
        outs = outs_of(C)
        outs[0] = out
        outs[1] = inds
        C[C_NOUTS] = 2
        return K_OK
    if KERNEL_DTYPE == F32:
        _avg_pool(_dense(C, a, f32_at(data_addr(C, a), span(M, a))),
                  f32_at(data_addr(C, out), n), P, H, W, OH, OW, kh, kw, sh, sw, ph, pw, cip,
                  divisor, adaptive)
    else:
        _avg_pool(_dense(C, a, f64_at(data_addr(C, a), span(M, a))),
                  f64_at(data_addr(C, out), n), P, H, W, OH, OW, kh, kw, sh, sw, ph, pw, cip,
                  divisor, adaptive)
    return set_outputs1(C, out)


def pool_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    gi = edge_grad_addr(C, row, 0)
    if gi == 0:
        return K_OK
    kind, kh, kw, sh, sw, ph, pw, _, _, cip, divisor = _pool_attrs(T, row)
    P, H, W = _in_planes(C, row, False)
    OH, OW = _out_hw(C, row)
    n = out_numel(T, row)
    g = row_grad_addr(C, row, 0)
    if kind == MAX or kind == AMAX:
        I = i64_at(data_addr(C, T[row, R_OSAVED]), n)
        if KERNEL_DTYPE == F32:
            _max_pool_grad(f32_at(g, n), I, f32_at(gi, P * H * W), P, H * W, OH * OW)
        else:
            _max_pool_grad(f64_at(g, n), I, f64_at(gi, P * H * W), P, H * W, OH * OW)
        return K_OK
    adaptive = kind == AAVG
    if KERNEL_DTYPE == F32:
        _avg_pool_grad(f32_at(g, n), f32_at(gi, P * H * W), P, H, W, OH, OW, kh, kw, sh, sw,
                       ph, pw, cip, divisor, adaptive)
    else:
        _avg_pool_grad(f64_at(g, n), f64_at(gi, P * H * W), P, H, W, OH, OW, kh, kw, sh, sw,
                       ph, pw, cip, divisor, adaptive)
    return K_OK


# ---------------------------------------------------------------- upsampling
@jit
def _scale(B, size, osize, align, scale):
    """PyTorch's area_pixel_compute_scale in B's dtype: (size - 1) / (osize - 1) with
    align_corners, else 1 / scale when a scale was given, else size / osize."""
    if align:
        return _round(B, (size - 1) / (osize - 1)) if osize > 1 else _round(B, 0.0)
    if scale > 0.0:
        return _round(B, 1.0 / scale)
    return _round(B, np.float64(_round(B, size)) / np.float64(_round(B, osize)))


@jit
def _linear_table(B, size, osize, align, scale):
    """Per output position of one axis: the two source positions and their weights
    (PyTorch's compute_source_index_and_lambda, in B's dtype); equal sizes copy."""
    i0 = np.empty(osize, np.int64)
    i1 = np.empty(osize, np.int64)
    l0 = np.empty(osize, B.dtype)
    l1 = np.empty(osize, B.dtype)
    ratio = np.float64(_scale(B, size, osize, align, scale))
    for o in range(osize):
        if osize == size:
            i0[o] = o
            i1[o] = o
            l0[o] = 1.0
            l1[o] = 0.0
            continue
        if align:
            real = np.float64(_round(B, ratio * o))
        else:
            # (PyTorch's build contracts scale * (o + 0.5) - 0.5 into one fused multiply-add;
            # in float64 that also rounds a float32 fma once before its float32 rounding)
            real = np.float64(_round(B, _fma(ratio, o + 0.5, -0.5)))
            if real < 0.0:
                real = 0.0
        k = min(math.floor(real), size - 1)
        lam = min(max(np.float64(_round(B, real - k)), 0.0), 1.0)
        i0[o] = k
        i1[o] = k + (1 if k < size - 1 else 0)
        l1[o] = lam
        l0[o] = _round(B, 1.0 - lam)
    return i0, i1, l0, l1


@jit
def _nearest_table(size, osize, scale, exact):
    """Per output position of one axis: its source position (PyTorch's nearest_idx and
    nearest_exact_idx, in float32 as PyTorch's)."""
    idx = np.empty(osize, np.int64)
    F = np.empty(1, np.float32)
    if scale > 0.0:
        sc = _round(F, 1.0 / scale)
    else:
        sc = _round(F, np.float64(_round(F, size)) / osize)
    for o in range(osize):
        if exact:
            v = math.floor(np.float64(_round(F, (o + 0.5) * np.float64(sc))))
        elif osize == size:
            idx[o] = o
            continue
        elif osize == 2 * size:
            idx[o] = o >> 1
            continue
        else:
            v = math.floor(np.float64(_round(F, np.float64(_round(F, o)) * np.float64(sc))))
        idx[o] = min(v, size - 1)
    return idx


@jit
def _axis(B, mode, size, osize, align, scale):
    """An axis's (i0, i1, l0, l1): nearest modes give i1 = i0 and weights (1, 0)."""
    if mode == LINEAR:
        return _linear_table(B, size, osize, align, scale)
    i0 = _nearest_table(size, osize, scale, mode == NEAREST_EXACT)
    l0 = np.empty(osize, B.dtype)
    l1 = np.empty(osize, B.dtype)
    for o in range(osize):
        l0[o] = 1.0
        l1[o] = 0.0
    return i0, i0, l0, l1


@jit
def _upsample(X, O, P, H, W, OH, OW, hi0, hi1, hl0, hl1, wi0, wi1, wl0, wl1, lin_h, lin_w):
    """O = X resampled: per plane, rows (H) then columns (W), each linear or nearest; a
    bilinear output is (x00 w0 + x01 w1) h0 + (x10 w0 + x11 w1) h1, PyTorch's order."""
    for p in range(P):
        xb = p * H * W
        ob = p * OH * OW
        for oh in range(OH):
            r0 = xb + hi0[oh] * W
            r1 = xb + hi1[oh] * W
            o = ob + oh * OW
            if lin_h and lin_w:
                h0 = hl0[oh]
                h1 = hl1[oh]
                for ow in range(OW):
                    a, b = wi0[ow], wi1[ow]
                    O[o + ow] = ((X[r0 + a] * wl0[ow] + X[r0 + b] * wl1[ow]) * h0
                                 + (X[r1 + a] * wl0[ow] + X[r1 + b] * wl1[ow]) * h1)
            elif lin_w:
                for ow in range(OW):
                    O[o + ow] = X[r0 + wi0[ow]] * wl0[ow] + X[r0 + wi1[ow]] * wl1[ow]
            elif lin_h:
                h0 = hl0[oh]
                h1 = hl1[oh]
                for ow in range(OW):
                    O[o + ow] = X[r0 + wi0[ow]] * h0 + X[r1 + wi0[ow]] * h1
            else:
                for ow in range(OW):
                    O[o + ow] = X[r0 + wi0[ow]]


@jit
def _upsample_grad(G, GI, P, H, W, OH, OW, hi0, hi1, hl0, hl1, wi0, wi1, wl0, wl1, lin_h,
                   lin_w):
    """GI += the gradient, output by output in order (PyTorch's accumulation order)."""
    for p in range(P):
        xb = p * H * W
        ob = p * OH * OW
        for oh in range(OH):
            r0 = xb + hi0[oh] * W
            r1 = xb + hi1[oh] * W
            o = ob + oh * OW
            if lin_h and lin_w:
                h0 = hl0[oh]
                h1 = hl1[oh]
                for ow in range(OW):
                    g = G[o + ow]
                    a, b = wi0[ow], wi1[ow]
                    GI[r0 + a] += h0 * wl0[ow] * g
                    GI[r0 + b] += h0 * wl1[ow] * g
                    GI[r1 + a] += h1 * wl0[ow] * g
                    GI[r1 + b] += h1 * wl1[ow] * g
            elif lin_w:
                for ow in range(OW):
                    g = G[o + ow]
                    GI[r0 + wi0[ow]] += wl0[ow] * g
                    GI[r0 + wi1[ow]] += wl1[ow] * g
            elif lin_h:
                h0 = hl0[oh]
                h1 = hl1[oh]
                for ow in range(OW):
                    g = G[o + ow]
                    GI[r0 + wi0[ow]] += h0 * g
                    GI[r1 + wi0[ow]] += h1 * g
            else:
                for ow in range(OW):
                    GI[r0 + wi0[ow]] += G[o + ow]


@jit
def _tables(B, T, row, H, W, OH, OW):
    mh = max(T[row, R_IATTR], NEAREST)     # (-1: a 1-d op, no H axis)
    mw = T[row, R_IATTR + 1]
    align = T[row, R_IATTR + 2] != 0
    hi0, hi1, hl0, hl1 = _axis(B, mh, H, OH, align, _bits(T[row, R_IATTR + 3]))
    wi0, wi1, wl0, wl1 = _axis(B, mw, W, OW, align, _bits(T[row, R_IATTR + 4]))
    return hi0, hi1, hl0, hl1, wi0, wi1, wl0, wl1, mh == LINEAR, mw == LINEAR


def upsample_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    a = input_id(C, row, 0)
    dt = M[a, M_DTYPE]
    if dt != KERNEL_DTYPE:
        return E_DTYPE
    nd = M[a, M_NDIM]
    one_d = T[row, R_IATTR] < 0
    P, H, W = _planes(M[a, M_SHAPE:M_SHAPE + nd], nd, one_d)
    ia = iargs_of(C)
    OH = 1 if one_d else ia[FV]
    OW = ia[FV + 1]
    oshape = M[a, M_SHAPE:M_SHAPE + nd].copy()
    oshape[nd - 1] = OW
    if not one_d:
        oshape[nd - 2] = OH
    out = meta_contiguous(C, dt, nd, oshape, False)
    if out < 0:
        return out
    n = P * OH * OW
    if KERNEL_DTYPE == F32:
        B = np.empty(1, np.float32)
        hi0, hi1, hl0, hl1, wi0, wi1, wl0, wl1, lh, lw = _tables(B, T, row, H, W, OH, OW)
        _upsample(_dense(C, a, f32_at(data_addr(C, a), span(M, a))),
                  f32_at(data_addr(C, out), n), P, H, W, OH, OW, hi0, hi1, hl0, hl1, wi0, wi1,
                  wl0, wl1, lh, lw)
    else:
        B = np.empty(1, np.float64)
        hi0, hi1, hl0, hl1, wi0, wi1, wl0, wl1, lh, lw = _tables(B, T, row, H, W, OH, OW)
        _upsample(_dense(C, a, f64_at(data_addr(C, a), span(M, a))),
                  f64_at(data_addr(C, out), n), P, H, W, OH, OW, hi0, hi1, hl0, hl1, wi0, wi1,
                  wl0, wl1, lh, lw)
    return set_outputs1(C, out)


def upsample_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    gi = edge_grad_addr(C, row, 0)
    if gi == 0:
        return K_OK
    one_d = T[row, R_IATTR] < 0
    P, H, W = _in_planes(C, row, one_d)
    nd = T[row, R_ONDIM]
    OW = T[row, R_OSHAPE + nd - 1]
    OH = 1 if one_d else T[row, R_OSHAPE + nd - 2]
    n = out_numel(T, row)
    g = row_grad_addr(C, row, 0)
    if KERNEL_DTYPE == F32:
        B = np.empty(1, np.float32)
        hi0, hi1, hl0, hl1, wi0, wi1, wl0, wl1, lh, lw = _tables(B, T, row, H, W, OH, OW)
        _upsample_grad(f32_at(g, n), f32_at(gi, P * H * W), P, H, W, OH, OW, hi0, hi1, hl0,
                       hl1, wi0, wi1, wl0, wl1, lh, lw)
    else:
        B = np.empty(1, np.float64)
        hi0, hi1, hl0, hl1, wi0, wi1, wl0, wl1, lh, lw = _tables(B, T, row, H, W, OH, OW)
        _upsample_grad(f64_at(g, n), f64_at(gi, P * H * W), P, H, W, OH, OW, hi0, hi1, hl0,
                       hl1, wi0, wi1, wl0, wl1, lh, lw)
    return K_OK


# ---------------------------------------------------------------- pixel (un)shuffle
@jit
def _shuffle(X, O, P, Cs, r, H, W, inverse, add):
    """Pixel shuffle of X (P x Cs*r*r x H x W) into O (P x Cs x H*r x W*r), or with inverse
    the other way; add: accumulate (a gradient) instead of writing."""
    Wr = W * r
    for p in range(P):
        for c in range(Cs):
            for i in range(r):
                for j in range(r):
                    small = ((p * Cs + c) * r * r + i * r + j) * H * W
                    large = (p * Cs + c) * H * r * Wr + i * Wr + j
                    for h in range(H):
                        a = small + h * W
                        b = large + h * r * Wr
                        for w in range(W):
                            src, dst = (b + w * r, a + w) if inverse else (a + w, b + w * r)
                            if add:
                                O[dst] += X[src]
                            else:
                                O[dst] = X[src]


@jit
def _shuffle_dims(shape, nd, r, inverse):
    """(P, Cs, H, W) of the shuffled (small-channel) side: H, W the small spatial size."""
    P = 1
    for d in range(nd - 3):
        P *= shape[d]
    if inverse:         # shape is the large-spatial side
        return P, shape[nd - 3], shape[nd - 2] // r, shape[nd - 1] // r
    return P, shape[nd - 3] // (r * r), shape[nd - 2], shape[nd - 1]


def shuffle_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    a = input_id(C, row, 0)
    dt = M[a, M_DTYPE]
    if dt != KERNEL_DTYPE:
        return E_DTYPE
    r = T[row, R_IATTR]
    inverse = T[row, R_IATTR + 1] != 0
    nd = M[a, M_NDIM]
    P, Cs, H, W = _shuffle_dims(M[a, M_SHAPE:M_SHAPE + nd], nd, r, inverse)
    oshape = M[a, M_SHAPE:M_SHAPE + nd].copy()
    if inverse:
        oshape[nd - 3] = Cs * r * r
        oshape[nd - 2] = H
        oshape[nd - 1] = W
    else:
        oshape[nd - 3] = Cs
        oshape[nd - 2] = H * r
        oshape[nd - 1] = W * r
    out = meta_contiguous(C, dt, nd, oshape, False)
    if out < 0:
        return out
    n = M[a, M_NUMEL]
    if KERNEL_DTYPE == F32:
        _shuffle(_dense(C, a, f32_at(data_addr(C, a), span(M, a))), f32_at(data_addr(C, out), n),
                 P, Cs, r, H, W, inverse, False)
    else:
        _shuffle(_dense(C, a, f64_at(data_addr(C, a), span(M, a))), f64_at(data_addr(C, out), n),
                 P, Cs, r, H, W, inverse, False)
    return set_outputs1(C, out)


def shuffle_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    gi = edge_grad_addr(C, row, 0)
    if gi == 0:
        return K_OK
    r = T[row, R_IATTR]
    inverse = T[row, R_IATTR + 1] != 0
    nd = T[row, R_ONDIM]
    # the gradient moves from the output's side back: the opposite direction
    P, Cs, H, W = _shuffle_dims(T[row, R_OSHAPE:R_OSHAPE + nd], nd, r, not inverse)
    n = out_numel(T, row)
    g = row_grad_addr(C, row, 0)
    if KERNEL_DTYPE == F32:
        _shuffle(f32_at(g, n), f32_at(gi, n), P, Cs, r, H, W, not inverse, True)
    else:
        _shuffle(f64_at(g, n), f64_at(gi, n), P, Cs, r, H, W, not inverse, True)
    return K_OK


# ---------------------------------------------------------------- padding
@jit
def _source(o, before, size, mode):
    """The input position output position o reads along one dim; -1: the constant."""
    j = o - before
    if j >= 0 and j < size:
        return j
    if mode == CONSTANT:
        return -1
    if mode == REFLECT:
        return -j if j < 0 else 2 * (size - 1) - j
    return 0 if j < 0 else size - 1


@jit
def _pad_rows(X, O, ishape, oshape, before, mode, value, GI, G):
    """Forward (GI empty): O = X padded. Backward (GI not empty): GI += G's elements at the
    positions they were read from, output by output in order. Rows of the last dim at a
    time; a row whose outer position reads the constant is all constant."""
    nd = ishape.shape[0]
    backward = GI.shape[0] != 0
    if nd == 0:             # (a 0-d tensor: nothing to pad)
        if backward:
            GI[0] += G[0]
        else:
            O[0] = X[0]
        return
    ist = np.ones(nd, np.int64)
    for d in range(nd - 2, -1, -1):
        ist[d] = ist[d + 1] * ishape[d + 1]
    OW = oshape[nd - 1]
    IW = ishape[nd - 1]
    bw = before[nd - 1]
    cols = np.empty(OW, np.int64)
    for o in range(OW):
        cols[o] = _source(o, bw, IW, mode)
    rows = 1
    for d in range(nd - 1):
        rows *= oshape[d]
    idx = np.zeros(max(nd - 1, 1), np.int64)
    for rr in range(rows):
        base = 0
        const = False
        for d in range(nd - 1):
            s = _source(idx[d], before[d], ishape[d], mode)
            if s < 0:
                const = True
            base += s * ist[d]
        ob = rr * OW
        if backward:
            if not const:
                for o in range(OW):
                    c = cols[o]
                    if c >= 0:
                        GI[base + c] += G[ob + o]
        elif const:
            for o in range(OW):
                O[ob + o] = value
        else:
            for o in range(OW):
                c = cols[o]
                O[ob + o] = X[base + c] if c >= 0 else value
        d = nd - 2
        while d >= 0:
            idx[d] += 1
            if idx[d] < oshape[d]:
                break
            idx[d] = 0
            d -= 1


def pad_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    a = input_id(C, row, 0)
    dt = M[a, M_DTYPE]
    if dt != KERNEL_DTYPE:
        return E_DTYPE
    nd = M[a, M_NDIM]
    ia = iargs_of(C)
    oshape = ia[FV + 1:FV + 1 + nd].copy()
    out = meta_contiguous(C, dt, nd, oshape, False)
    if out < 0:
        return out
    mode = T[row, R_IATTR]
    before = T[row, R_IATTR + 1:R_IATTR + 1 + nd].copy()
    ishape = M[a, M_SHAPE:M_SHAPE + nd].copy()
    value = fattr_of(C)[row]
    n = M[out, M_NUMEL]
    if KERNEL_DTYPE == F32:
        _pad_rows(_dense(C, a, f32_at(data_addr(C, a), span(M, a))),
                  f32_at(data_addr(C, out), n), ishape, oshape, before, mode, value,
                  np.empty(0, np.float32), np.empty(0, np.float32))
    else:
        _pad_rows(_dense(C, a, f64_at(data_addr(C, a), span(M, a))),
                  f64_at(data_addr(C, out), n), ishape, oshape, before, mode, value,
                  np.empty(0, np.float64), np.empty(0, np.float64))
    return set_outputs1(C, out)


def pad_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    gi = edge_grad_addr(C, row, 0)
    if gi == 0:
        return K_OK
    ishape = np.empty(MAXD, np.int64)
    nd = input_shape(C, row, 0, ishape)
    ishape = ishape[:nd].copy()
    oshape = T[row, R_OSHAPE:R_OSHAPE + nd].copy()
    mode = T[row, R_IATTR]
    before = T[row, R_IATTR + 1:R_IATTR + 1 + nd].copy()
    n = out_numel(T, row)
    ni = 1
    for d in range(nd):
        ni *= ishape[d]
    g = row_grad_addr(C, row, 0)
    if ni == 0:
        return K_OK
    if KERNEL_DTYPE == F32:
        _pad_rows(np.empty(0, np.float32), np.empty(0, np.float32), ishape, oshape, before,
                  mode, 0.0, f32_at(gi, ni), f32_at(g, n))
    else:
        _pad_rows(np.empty(0, np.float64), np.empty(0, np.float64), ishape, oshape, before,
                  mode, 0.0, f64_at(gi, ni), f64_at(g, n))
    return K_OK


# ---------------------------------------------------------------- the entries
POOL_ATTRS = ("kind", "kh", "kw", "sh", "sw", "ph", "pw", "dh", "dw", "count_include_pad",
              "divisor")
UPSAMPLE_ATTRS = ("mode_h", "mode_w", "align_corners", "scale_h", "scale_w")
SHUFFLE_ATTRS = ("factor", "inverse")
PAD_ATTRS = ("mode", "before[8]")


def _op(name, grad_fn, fwd, bwd, attrs, **kw):
    return register(OpDef(name, grad_fn, "custom", module=_M, fwd_fn=fwd, bwd_fn=bwd, nin=1,
                          diff=(0,), per_dtype=True, attrs=attrs, **kw))


DISTINCT = spaced(-2.0, 2.0)
_op("max_pool2d", "MaxPool2DWithIndicesBackward0", "pool_fwd", "pool_bwd", POOL_ATTRS,
    saves_if={0: ("out",)}, saved_out=1)
_op("avg_pool2d", "AvgPool2DBackward0", "pool_fwd", "pool_bwd", POOL_ATTRS)
_op("adaptive_max_pool2d", "AdaptiveMaxPool2DBackward0", "pool_fwd", "pool_bwd", POOL_ATTRS,
    saves_if={0: ("out",)}, saved_out=1)
_op("adaptive_avg_pool2d", "AdaptiveAvgPool2DBackward0", "pool_fwd", "pool_bwd", POOL_ATTRS)
_op("upsample_nearest1d", "UpsampleNearest1DBackward0", "upsample_fwd", "upsample_bwd",
    UPSAMPLE_ATTRS)
_op("upsample_nearest2d", "UpsampleNearest2DBackward0", "upsample_fwd", "upsample_bwd",
    UPSAMPLE_ATTRS)
_op("upsample_nearest_exact1d", "UpsampleNearestExact1DBackward0", "upsample_fwd",
    "upsample_bwd", UPSAMPLE_ATTRS)
_op("upsample_nearest_exact2d", "UpsampleNearestExact2DBackward0", "upsample_fwd",
    "upsample_bwd", UPSAMPLE_ATTRS)
_op("upsample_linear1d", "UpsampleLinear1DBackward0", "upsample_fwd", "upsample_bwd",
    UPSAMPLE_ATTRS)
_op("upsample_bilinear2d", "UpsampleBilinear2DBackward0", "upsample_fwd", "upsample_bwd",
    UPSAMPLE_ATTRS)
_op("pixel_shuffle", "PixelShuffleBackward0", "shuffle_fwd", "shuffle_bwd", SHUFFLE_ATTRS)
_op("pixel_unshuffle", "PixelUnshuffleBackward0", "shuffle_fwd", "shuffle_bwd", SHUFFLE_ATTRS)
_op("constant_pad_nd", "ConstantPadNdBackward0", "pad_fwd", "pad_bwd", PAD_ATTRS)
for _k in (1, 2, 3):
    _op(f"reflection_pad{_k}d", f"ReflectionPad{_k}DBackward0", "pad_fwd", "pad_bwd", PAD_ATTRS)
    _op(f"replication_pad{_k}d", f"ReplicationPad{_k}DBackward0", "pad_fwd", "pad_bwd",
        PAD_ATTRS)
# (samples: max pooling on distinct values, so finite differences never straddle a tie)
_IMG = T(2, 3, 5, 6)
samples("max_pool2d", "F.max_pool2d(x, 2)", "F.max_pool2d(x, 3, 2, 1, ceil_mode=True)",
        "F.max_pool2d(x, (2, 3), (1, 2), dilation=(2, 1), return_indices=True)[0]",
        "L.nn.MaxPool2d(2, 1)(x)", "F.max_pool1d(x[0], 2)",
        Sample("F.max_pool2d(x, 2)", x=T(3, 4, 5, domain=DISTINCT)),
        errors=["F.max_pool2d(x, 7)", "F.max_pool2d(x, 3, padding=2)", "F.max_pool2d(x, 0)",
                "F.max_pool2d(x[0, 0], 2)", "F.max_pool2d(x, 'a')", "F.max_pool1d(x[0], 7)"],
        x=T(2, 3, 5, 6, domain=DISTINCT))
samples("avg_pool2d", "F.avg_pool2d(x, 2)", "F.avg_pool2d(x, 3, 2, 1, ceil_mode=True)",
        "F.avg_pool2d(x, 3, 2, 1, count_include_pad=False)",
        "F.avg_pool2d(x, 2, 1, divisor_override=3)", "L.nn.AvgPool1d(2)(x[0])",
        "F.avg_pool2d(x, (3, 2), (3, 1), (1, 1), True, False, -2)",
        Sample("F.avg_pool2d(x, 2)", x=T(3, 4, 5)),
        errors=["F.avg_pool2d(x, 7)", "F.avg_pool2d(x, 2, divisor_override=0)",
                "F.avg_pool2d(x[0, 0], 2)", "F.avg_pool1d(x, 2)"], x=_IMG)
samples("adaptive_max_pool2d", "F.adaptive_max_pool2d(x, (2, 4))",
        "F.adaptive_max_pool2d(x, 3, return_indices=True)[0]",
        "L.nn.AdaptiveMaxPool1d(4)(x[0])",
        errors=["F.adaptive_max_pool2d(x, (2, 2, 2))", "F.adaptive_max_pool2d(x[0, 0], 2)"],
        x=T(2, 3, 5, 6, domain=DISTINCT))
samples("adaptive_avg_pool2d", "F.adaptive_avg_pool2d(x, (2, 4))",
        "F.adaptive_avg_pool2d(x, (None, 4))", "L.nn.AdaptiveAvgPool1d(4)(x[0])",
        "F.interpolate(x, size=(3, 4), mode='area')",
        errors=["F.adaptive_avg_pool2d(x, (2, 2, 2))", "F.adaptive_avg_pool2d(x, -1)",
                "F.adaptive_avg_pool1d(x[0], (2, 2))"], x=_IMG)
samples("upsample_nearest1d", "F.interpolate(x, scale_factor=2)", "F.interpolate(x, size=7)",
        "L.nn.Upsample(scale_factor=1.7)(x)", errors=["F.interpolate(x, size=0)"],
        x=T(2, 3, 4))
samples("upsample_nearest2d", "F.interpolate(x, scale_factor=2)",
        "F.interpolate(x, size=(7, 3))", "F.interpolate(x, scale_factor=(1.5, 0.7))",
        "L.nn.UpsamplingNearest2d(scale_factor=2)(x)",
        errors=["F.interpolate(x)", "F.interpolate(x, size=4, scale_factor=2)",
                "F.interpolate(x, size=(4, 4, 4))", "F.interpolate(x, size=4, align_corners=True)"],
        x=_IMG)
samples("upsample_nearest_exact1d", "F.interpolate(x, scale_factor=1.7, mode='nearest-exact')",
        x=T(2, 3, 4))
samples("upsample_nearest_exact2d", "F.interpolate(x, size=(7, 4), mode='nearest-exact')",
        x=_IMG)
samples("upsample_linear1d", "F.interpolate(x, scale_factor=2, mode='linear')",
        "F.interpolate(x, size=9, mode='linear', align_corners=True)",
        "F.interpolate(x, size=3, mode='linear')",
        errors=["F.interpolate(x, scale_factor=2, mode='bilinear')"], x=T(2, 3, 4))
samples("upsample_bilinear2d", "F.interpolate(x, scale_factor=2, mode='bilinear')",
        "F.interpolate(x, size=(7, 3), mode='bilinear', align_corners=True)",
        "F.interpolate(x, scale_factor=(1.3, 2.6), mode='bilinear')",
        "F.interpolate(x, scale_factor=1.5, mode='bilinear', recompute_scale_factor=True)",
        "L.nn.UpsamplingBilinear2d(size=(6, 7))(x)",
        # (positions and weights are PyTorch's; its CPU kernels combine the four taps in an
        # order that depends on the sizes and the thread count, a few ulps apart)
        rtol={"float32": 5e-6},
        errors=["F.interpolate(x, scale_factor=2, mode='linear')",
                "F.interpolate(x, scale_factor=2, mode='foo')"], x=_IMG)
samples("pixel_shuffle", "F.pixel_shuffle(x, 2)", "L.nn.PixelShuffle(2)(x[0])",
        errors=["F.pixel_shuffle(x, 3)", "F.pixel_shuffle(x[0, 0], 2)"],
        x=T(2, 8, 3, 2))
samples("pixel_unshuffle", "F.pixel_unshuffle(x, 2)", "L.nn.PixelUnshuffle(2)(x[0])",
        errors=["F.pixel_unshuffle(x, 3)", "F.pixel_unshuffle(x, 0)"], x=T(2, 3, 4, 6))
samples("constant_pad_nd", "F.pad(x, (1, 2))", "F.pad(x, (1, 2, -1, 3), value=0.5)",
        "F.pad(x, (0, 1, 1, 0, 1, 1, 0, 2))", "L.nn.ConstantPad2d(2, 1.5)(x)",
        "L.nn.ZeroPad1d((1, 2))(x)",
        errors=["F.pad(x, (1,))", "F.pad(x, (1, 1) * 5)", "F.pad(x, (-7, 1))",
                "F.pad(x, (1, 1), mode='foo')"], x=_IMG)
samples("reflection_pad1d", "F.pad(x, (2, 3), mode='reflect')",
        "F.pad(x[0], (-1, 2), mode='reflect')", "L.nn.ReflectionPad1d(2)(x)",
        errors=["F.pad(x, (4, 1), mode='reflect')", "F.pad(x[0, 0], (1, 1), mode='reflect')"],
        x=T(2, 3, 4))
samples("reflection_pad2d", "F.pad(x, (2, 3, 1, 3), mode='reflect')",
        "L.nn.ReflectionPad2d(1)(x[0])",
        errors=["F.pad(x, (1, 1, 1, 1), mode='reflect', value=1.0)",
                "F.pad(x, (6, 1, 1, 1), mode='reflect')"], x=_IMG)
samples("reflection_pad3d", "F.pad(x, (1, 2, 1, 1, 2, 1), mode='reflect')", x=_IMG)
samples("replication_pad1d", "F.pad(x, (2, 5), mode='replicate')",
        "L.nn.ReplicationPad1d((3, 1))(x)", errors=["F.pad(x, (-8, 1), mode='replicate')"],
        x=T(2, 3, 4))
samples("replication_pad2d", "F.pad(x, (2, 3, 1, 3), mode='replicate')",
        "L.nn.ReplicationPad2d(2)(x)", x=_IMG)
samples("replication_pad3d", "F.pad(x, (1, 2, 1, 1, 2, 1), mode='replicate')", x=_IMG)
