"""Convolutions, transposed convolutions, unfold and fold: one pair of kernels for all four
(PyTorch's grad_fns ConvolutionBackward0, Im2ColBackward0 and Col2ImBackward0).

Every op is an im2col (or its adjoint, col2im) around a BLAS GEMM (_engine/blas.py). A
convolution relates a "big" tensor B (N, Cb, Hb, Wb) and a "small" one S (N, Cs, Hs, Ws)
through a weight (Cs, Cb / groups, kh, kw): a convolution's input is B and its output S, a
transposed convolution's input is S and its output B (its weight has the same layout), so
three primitives carry both ops forwards and backwards:

- small_from_big: S = W @ im2col(B)      (conv forward, transposed conv's input gradient)
- big_from_small: B += col2im(W^T @ S)   (conv input gradient, transposed conv forward)
- weight_grad:    GW += S @ im2col(B)^T  (both weight gradients)

unfold is im2col and fold col2im (each the other's gradient). A 1-d op is the 2-d op with a
unit height (kernel height 1, no padding there), so 1-d and 2-d share every kernel, and the
four ops share one forward and one backward kernel per dtype (compile time). The work goes
through the GEMM in pieces whose im2col buffer stays under CHUNK elements (_pieces): several
small images at once (LeNet's 8x8 maps), a large image in bands of output rows, a long 1-d
signal in runs of columns, so memory stays bounded whatever the image size. The fronts
(nn/_functional/conv.py) check every argument with PyTorch's messages before a kernel runs;
the kernels check shapes again and refuse with E_SHAPE rather than read out of bounds.
"""
import numpy as np
from numba import carray, types
from numba.extending import overload

from .._engine.layout import (K_OK, F32, F64, M_DTYPE, M_NDIM, M_SHAPE, M_NUMEL, E_DTYPE,
                              E_SHAPE, R_IN, IN_SAVED, IN_ROW, IN_T, IW, R_OSHAPE, R_ONDIM,
                              R_IATTR, R_NIN, MAXD)
from .._engine.lowlevel import (jit, jit_reduction, ctx_of, meta_of, tape_of, ptr_f32, ptr_f64,
                                OVERLOAD_OPTIONS)
from .._engine.blas import gemm
from .._engine.core import (data_addr, make_output, input_id, set_outputs1, edge_grad_addr,
                            grad_for_write, is_contiguous, input_shape, copy_strided,
                            row_grad_addr)
from .opinfo import T
from .registry import OpDef, Sample, register, samples

_M = __name__
KERNEL_DTYPE = -1       # F32 or F64 in each compiled copy (registry._per_dtype)

CONV, CONV_T, UNFOLD, FOLD = 0, 1, 2, 3
# the rows' integer attributes (one layout for the four ops, so they share kernels)
ATTRS = ("kind", "groups", "stride[2]", "padding[2]", "dilation[2]", "extra[2]", "kernel[2]")
A_KIND, A_GROUPS, A_STRIDE, A_PAD, A_DIL, A_EXTRA, A_KERNEL = 0, 1, 2, 4, 6, 8, 10
# geometry (_geometry): sizes of the big and small tensors, the kernel's, and the steps
G_N, G_CB, G_CS, G_HB, G_WB, G_HS, G_WS, G_KH, G_KW = 0, 1, 2, 3, 4, 5, 6, 7, 8
G_SH, G_SW, G_PH, G_PW, G_DH, G_DW, G_GROUPS, G_SD, G_BATCHED = 9, 10, 11, 12, 13, 14, 15, 16, 17
G_LEN = 18
CHUNK = 1 << 18         # elements of the im2col buffer several samples may share
SHORT_ROW = 16          # output rows shorter than this are copied a plane at a time


# ---------------------------------------------------------------- im2col / col2im
@jit
def _plane_offsets(W, sh, sw, oh0, oh1, OW):
    """For output rows shorter than SHORT_ROW: the input offset of each output position
    (oh, ow) of rows oh0..oh1 from the plane's first one, so that a plane without padding is
    copied in one loop instead of one short loop per row (whose set-up costs more than its
    copy); empty otherwise."""
    if OW >= SHORT_ROW:
        return np.empty(0, np.int64)
    offs = np.empty((oh1 - oh0) * OW, np.int64)
    for oh in range(oh1 - oh0):
        for ow in range(OW):
            offs[oh * OW + ow] = oh * sh * W + ow * sw
    return offs


@jit
def _span(W, OW, off, sw):
    """The output columns [lo, hi) whose input column ow * sw + off lies in [0, W)."""
    lo = 0 if off >= 0 else min((-off + sw - 1) // sw, OW)
    hi = min(OW, (W - 1 - off) // sw + 1) if W - 1 - off >= 0 else 0
    return lo, max(hi, lo)


# (The loops below index with unsigned integers: an int64 index gets a wraparound check
# per element, and a slice costs reference counting per row segment; either made these
# copies several times slower.)
@jit
def _im2col(X, xo, Cg, H, W, kh, kw, sh, sw, ph, pw, dh, dw, oh0, oh1, ow0, ow1, OW, col, co,
            ld, add):
    """col[co + r * ld + (oh - oh0) * (ow1 - ow0) + ow - ow0] = X[xo + (c * H + ih) * W + iw]
    for the output positions oh0 <= oh < oh1, ow0 <= ow < ow1 (of OW columns) (0 where
    (ih, iw) falls in the padding; with add, += and the padding adds nothing),
    r = (c * kh + i) * kw + j, ih = oh * sh - ph + i * dh, iw = ow * sw - pw + j * dw."""
    u = np.uint64
    pwid = ow1 - ow0
    offs = _plane_offsets(W, sh, sw, oh0, oh1, pwid)
    n_plane = (oh1 - oh0) * pwid
    r = 0
    for c in range(Cg):
        for i in range(kh):
            for j in range(kw):
                off = j * dw - pw
                lo, hi = _span(W, OW, off, sw)
                lo, hi = min(max(lo, ow0), ow1), max(min(hi, ow1), ow0)
                hi = max(hi, lo)
                if offs.shape[0] and lo == ow0 and hi == ow1 \
                        and oh0 * sh - ph + i * dh >= 0 and (oh1 - 1) * sh - ph + i * dh < H:
                    # no padding in this plane: one gather over it (short rows)
                    base = u(co + r * ld)
                    src = u(xo + (c * H + oh0 * sh - ph + i * dh) * W + off + ow0 * sw)
                    if sw == 1 and not add:
                        # (unit column step: rows are contiguous, and row copies run
                        # about twice as fast as the gather through offs)
                        for oh in range(oh1 - oh0):
                            b2 = base + u(oh * pwid)
                            s2 = src + u(oh * sh * W)
                            for t in range(pwid):
                                col[b2 + u(t)] = X[s2 + u(t)]
                    elif add:
                        for q in range(n_plane):
                            col[base + u(q)] += X[src + u(offs[q])]
                    else:
                        for q in range(n_plane):
                            col[base + u(q)] = X[src + u(offs[q])]
                    r += 1
                    continue
                for oh in range(oh0, oh1):
                    ih = oh * sh - ph + i * dh
                    base = u(co + r * ld + (oh - oh0) * pwid)
                    if ih < 0 or ih >= H:
                        if not add:
                            for t in range(pwid):
                                col[base + u(t)] = 0
                        continue
                    src = u(xo + (c * H + ih) * W + off + lo * sw)
                    b2 = base + u(lo - ow0)
                    if not add:
                        for t in range(lo - ow0):
                            col[base + u(t)] = 0
                        for t in range(hi - ow0, pwid):
                            col[base + u(t)] = 0
                        if sw == 1:
                            for t in range(hi - lo):
                                col[b2 + u(t)] = X[src + u(t)]
                        else:
                            for t in range(hi - lo):
                                col[b2 + u(t)] = X[src + u(t * sw)]
                    elif sw == 1:
                        for t in range(hi - lo):
                            col[b2 + u(t)] += X[src + u(t)]
                    else:
                        for t in range(hi - lo):
                            col[b2 + u(t)] += X[src + u(t * sw)]
                r += 1


@jit
def _col2im(col, co, ld, X, xo, Cg, H, W, kh, kw, sh, sw, ph, pw, dh, dw, oh0, oh1, ow0, ow1,
            OW):
    """X += col2im(col): the adjoint of _im2col (every col element added to the input
    element it was read from; padding positions are dropped)."""
    u = np.uint64
    pwid = ow1 - ow0
    r = 0
    for c in range(Cg):
        for i in range(kh):
            for j in range(kw):
                off = j * dw - pw
                lo, hi = _span(W, OW, off, sw)
                lo, hi = min(max(lo, ow0), ow1), max(min(hi, ow1), ow0)
                hi = max(hi, lo)
                for oh in range(oh0, oh1):
                    ih = oh * sh - ph + i * dh
                    if ih < 0 or ih >= H:
                        continue
                    b2 = u(co + r * ld + (oh - oh0) * pwid + lo - ow0)
                    dst = u(xo + (c * H + ih) * W + off + lo * sw)
                    if sw == 1:
                        for t in range(hi - lo):
                            X[dst + u(t)] += col[b2 + u(t)]
                    else:
                        for t in range(hi - lo):
                            X[dst + u(t * sw)] += col[b2 + u(t)]
                r += 1


def _view(P, off, r, c):
    """P[off:off + r * c] as an (r, c) C-ordered matrix, in place."""
    raise NotImplementedError("tapegrad.ops.conv._view is for compiled kernels")


@overload(_view, jit_options=OVERLOAD_OPTIONS)
def _view_impl(P, off, r, c):
    # (carray from the address: a reshape calls Numba's C helper on every view)
    if P.dtype == types.float32:
        return lambda P, off, r, c: carray(ptr_f32(np.int64(P.ctypes.data) + off * 4), (r, c))
    return lambda P, off, r, c: carray(ptr_f64(np.int64(P.ctypes.data) + off * 8), (r, c))


def _at(addr, n, z):
    """n elements at addr, of z's dtype."""
    raise NotImplementedError("tapegrad.ops.conv._at is for compiled kernels")


@overload(_at, jit_options=OVERLOAD_OPTIONS)
def _at_impl(addr, n, z):
    if z == types.float32:
        return lambda addr, n, z: carray(ptr_f32(addr), (n,))
    return lambda addr, n, z: carray(ptr_f64(addr), (n,))


@jit
def _pieces(N, K, Hs, Ws):
    """How the work is cut so that the (K, columns) im2col buffer stays under CHUNK
    elements: (samples, output rows, output columns) per piece. Small images go several to
    a GEMM; a large one is cut into bands of whole output rows, a very wide one (a long 1-d
    signal) into pieces of one row (its whole im2col could take far more memory than its
    output). A piece's outputs are contiguous in each channel."""
    P = Hs * Ws
    if K * P <= CHUNK:
        return max(1, min(N, CHUNK // max(K * P, 1))), Hs, Ws
    if K * Ws <= CHUNK:
        return 1, max(1, min(Hs, CHUNK // max(K * Ws, 1))), Ws
    return 1, 1, max(1, min(Ws, CHUNK // max(K, 1)))


@jit
def _npieces(Hs, Ws, rows, cols):
    return ((Hs + rows - 1) // rows) * ((Ws + cols - 1) // cols)


@jit
def _piece(q, Hs, Ws, rows, cols):
    """Output rows [oh0, oh1) and columns [ow0, ow1) of piece q (whole rows, or columns of
    one row: contiguous in each channel either way)."""
    per_row = (Ws + cols - 1) // cols
    oh0 = (q // per_row) * rows
    ow0 = (q % per_row) * cols
    return oh0, ow0, min(Hs, oh0 + rows), min(Ws, ow0 + cols)


@jit
def _move(S, tmp, n0, m, gi, Cs, Csg, P, c0, pc, to_small, add):
    """Between S's group gi of samples n0..n0+m, columns c0..c0+pc of each channel, and tmp
    (Csg, m * pc) with the samples side by side: tmp = S (to_small False), or S =, +=
    (add) tmp."""
    ld = m * pc
    for k in range(m):
        for o in range(Csg):
            at = np.uint64(((n0 + k) * Cs + gi * Csg + o) * P + c0)
            to = np.uint64(o * ld + k * pc)
            if not to_small:
                for q in range(pc):
                    tmp[to + np.uint64(q)] = S[at + np.uint64(q)]
            elif add:
                for q in range(pc):
                    S[at + np.uint64(q)] += tmp[to + np.uint64(q)]
            else:
                for q in range(pc):
                    S[at + np.uint64(q)] = tmp[to + np.uint64(q)]


# ---------------------------------------------------------------- the three primitives
@jit
def _small_from_big(B, S, Wt, g, beta):
    """S (=, or += with beta 1) the convolution of B with Wt (geometry g)."""
    N, Cb, Cs, groups = g[G_N], g[G_CB], g[G_CS], g[G_GROUPS]
    Hb, Wb, Hs, Ws, kh, kw = g[G_HB], g[G_WB], g[G_HS], g[G_WS], g[G_KH], g[G_KW]
    Cbg, Csg = Cb // groups, Cs // groups
    K = Cbg * kh * kw
    P = Hs * Ws
    if N == 0 or Cs == 0 or P == 0:
        return
    if (kh == 1 and kw == 1 and g[G_SH] == 1 and g[G_SW] == 1 and g[G_PH] == 0
            and g[G_PW] == 0):          # a 1x1 convolution: B is its own im2col
        for n in range(N):
            for gi in range(groups):
                gemm(_view(Wt, gi * Csg * K, Csg, K), _view(B, (n * Cb + gi * Cbg) * P, K, P),
                     _view(S, (n * Cs + gi * Csg) * P, Csg, P), beta)
        return
    nb, rows, cols = _pieces(N, K, Hs, Ws)
    col = np.empty(K * nb * rows * cols, S.dtype)
    tmp = np.empty(Csg * nb * rows * cols, S.dtype)
    for n0 in range(0, N, nb):
        m = min(nb, N - n0)
        for q0 in range(_npieces(Hs, Ws, rows, cols)):
            oh0, ow0, oh1, ow1 = _piece(q0, Hs, Ws, rows, cols)
            pc = (oh1 - oh0) * (ow1 - ow0)
            ld = m * pc
            for gi in range(groups):
                for k in range(m):
                    _im2col(B, ((n0 + k) * Cb + gi * Cbg) * Hb * Wb, Cbg, Hb, Wb, kh, kw,
                            g[G_SH], g[G_SW], g[G_PH], g[G_PW], g[G_DH], g[G_DW], oh0, oh1, ow0,
                            ow1, Ws, col, k * pc, ld, False)
                Wg = _view(Wt, gi * Csg * K, Csg, K)
                if m == 1 and pc == P:      # one whole image: straight into S
                    gemm(Wg, _view(col, 0, K, P), _view(S, (n0 * Cs + gi * Csg) * P, Csg, P),
                         beta)
                else:
                    gemm(Wg, _view(col, 0, K, ld), _view(tmp, 0, Csg, ld), 0.0)
                    _move(S, tmp, n0, m, gi, Cs, Csg, P, oh0 * Ws + ow0, pc, True, beta != 0)


@jit
def _big_from_small(S, B, Wt, g):
    """B += col2im(W^T @ S), group by group."""
    N, Cb, Cs, groups = g[G_N], g[G_CB], g[G_CS], g[G_GROUPS]
    Hb, Wb, Hs, Ws, kh, kw = g[G_HB], g[G_WB], g[G_HS], g[G_WS], g[G_KH], g[G_KW]
    Cbg, Csg = Cb // groups, Cs // groups
    K = Cbg * kh * kw
    P = Hs * Ws
    if N == 0 or Cb == 0 or P == 0:
        return
    nb, rows, cols = _pieces(N, K, Hs, Ws)
    col = np.empty(K * nb * rows * cols, S.dtype)
    tmp = np.empty(Csg * nb * rows * cols, S.dtype)
    for n0 in range(0, N, nb):
        m = min(nb, N - n0)
        for q0 in range(_npieces(Hs, Ws, rows, cols)):
            oh0, ow0, oh1, ow1 = _piece(q0, Hs, Ws, rows, cols)
            pc = (oh1 - oh0) * (ow1 - ow0)
            ld = m * pc
            for gi in range(groups):
                WgT = _view(Wt, gi * Csg * K, Csg, K).T
                if m == 1 and pc == P:
                    Sg = _view(S, (n0 * Cs + gi * Csg) * P, Csg, P)
                else:
                    _move(S, tmp, n0, m, gi, Cs, Csg, P, oh0 * Ws + ow0, pc, False, False)
                    Sg = _view(tmp, 0, Csg, ld)
                gemm(WgT, Sg, _view(col, 0, K, ld), 0.0)
                for k in range(m):
                    _col2im(col, k * pc, ld, B, ((n0 + k) * Cb + gi * Cbg) * Hb * Wb, Cbg, Hb,
                            Wb, kh, kw, g[G_SH], g[G_SW], g[G_PH], g[G_PW], g[G_DH], g[G_DW],
                            oh0, oh1, ow0, ow1, Ws)


@jit
def _weight_grad(S, B, GW, g, beta):
    """GW (=, or += with beta 1) the sum over samples of S_n @ im2col(B_n)^T, per group."""
    N, Cb, Cs, groups = g[G_N], g[G_CB], g[G_CS], g[G_GROUPS]
    Hb, Wb, Hs, Ws, kh, kw = g[G_HB], g[G_WB], g[G_HS], g[G_WS], g[G_KH], g[G_KW]
    Cbg, Csg = Cb // groups, Cs // groups
    K = Cbg * kh * kw
    P = Hs * Ws
    if N == 0 or P == 0:
        if beta == 0:
            for q in range(GW.shape[0]):
                GW[q] = 0
        return
    nb, rows, cols = _pieces(N, K, Hs, Ws)
    col = np.empty(K * nb * rows * cols, S.dtype)
    tmp = np.empty(Csg * nb * rows * cols, S.dtype)
    first = True
    for n0 in range(0, N, nb):
        m = min(nb, N - n0)
        for q0 in range(_npieces(Hs, Ws, rows, cols)):
            oh0, ow0, oh1, ow1 = _piece(q0, Hs, Ws, rows, cols)
            pc = (oh1 - oh0) * (ow1 - ow0)
            ld = m * pc
            for gi in range(groups):
                for k in range(m):
                    _im2col(B, ((n0 + k) * Cb + gi * Cbg) * Hb * Wb, Cbg, Hb, Wb, kh, kw,
                            g[G_SH], g[G_SW], g[G_PH], g[G_PW], g[G_DH], g[G_DW], oh0, oh1, ow0,
                            ow1, Ws, col, k * pc, ld, False)
                if m == 1 and pc == P:
                    Sg = _view(S, (n0 * Cs + gi * Csg) * P, Csg, P)
                else:
                    _move(S, tmp, n0, m, gi, Cs, Csg, P, oh0 * Ws + ow0, pc, False, False)
                    Sg = _view(tmp, 0, Csg, ld)
                gemm(Sg, _view(col, 0, K, ld).T, _view(GW, gi * Csg * K, Csg, K),
                     beta if first else 1.0)
            first = False


@jit
def _add_bias(O, Bias, N, Cn, P):
    for n in range(N):
        for c in range(Cn):
            v = Bias[c]
            at = np.uint64((n * Cn + c) * P)
            for q in range(P):
                O[at + np.uint64(q)] += v


@jit_reduction
def _bias_grad(G, GB, N, Cn, P):
    for c in range(Cn):
        acc = GB[c] * 0
        for n in range(N):
            at = np.uint64((n * Cn + c) * P)
            for q in range(P):
                acc += G[at + np.uint64(q)]
        GB[c] += acc


# ---------------------------------------------------------------- geometry
@jit
def _geometry(T, row, kind, xnd, xs, wnd, ws, g):
    """Fill g from the row's attributes and the shapes of input x (xs) and the weight
    (ws); False when they do not fit together (refused with E_SHAPE)."""
    a = R_IATTR
    groups = T[row, a + A_GROUPS]
    sh, sw = T[row, a + A_STRIDE], T[row, a + A_STRIDE + 1]
    ph, pw = T[row, a + A_PAD], T[row, a + A_PAD + 1]
    dh, dw = T[row, a + A_DIL], T[row, a + A_DIL + 1]
    eh, ew = T[row, a + A_EXTRA], T[row, a + A_EXTRA + 1]
    if groups < 1 or sh < 1 or sw < 1 or dh < 1 or dw < 1 or ph < 0 or pw < 0:
        return False
    if kind == CONV or kind == CONV_T:
        sd = wnd - 2
        if sd < 1 or sd > 2 or xnd != wnd:
            return False
        if sd == 1:         # (the unit height: nothing may move along it)
            sh, ph, dh, eh = 1, 0, 1, 0
        kh = ws[2] if sd == 2 else 1
        kw = ws[wnd - 1]
    else:
        sd = 2
        kh, kw = T[row, a + A_KERNEL], T[row, a + A_KERNEL + 1]
    if kh < 1 or kw < 1:
        return False
    g[G_SD] = sd
    g[G_GROUPS] = groups
    g[G_KH], g[G_KW] = kh, kw
    g[G_SH], g[G_SW], g[G_PH], g[G_PW], g[G_DH], g[G_DW] = sh, sw, ph, pw, dh, dw
    g[G_BATCHED] = 1
    if kind == CONV or kind == CONV_T:
        N, Cx = xs[0], xs[1]
        H = xs[2] if sd == 2 else 1
        W = xs[xnd - 1]
        g[G_N] = N
        if kind == CONV:
            Cs = ws[0]
            if ws[1] * groups != Cx or Cs % groups != 0:
                return False
            Hs = (H + 2 * ph - dh * (kh - 1) - 1) // sh + 1
            Ws = (W + 2 * pw - dw * (kw - 1) - 1) // sw + 1
            if Hs < 0 or Ws < 0 or H + 2 * ph < dh * (kh - 1) + 1 \
                    or W + 2 * pw < dw * (kw - 1) + 1:
                return False
            g[G_CB], g[G_CS], g[G_HB], g[G_WB], g[G_HS], g[G_WS] = Cx, Cs, H, W, Hs, Ws
        else:
            if ws[0] != Cx or Cx % groups != 0:
                return False
            Hb = (H - 1) * sh - 2 * ph + dh * (kh - 1) + eh + 1
            Wb = (W - 1) * sw - 2 * pw + dw * (kw - 1) + ew + 1
            if Hb < 0 or Wb < 0 or eh < 0 or ew < 0:
                return False
            g[G_CB], g[G_CS], g[G_HB], g[G_WB], g[G_HS], g[G_WS] = (ws[1] * groups, Cx, Hb,
                                                                    Wb, H, W)
        return True
    # unfold: x (N, C, H, W) -> (N, C * kh * kw, L); fold: (N, C * kh * kw, L) -> x's shape
    g[G_BATCHED] = 1 if xnd == (4 if kind == UNFOLD else 3) else 0
    if kind == UNFOLD:
        if xnd != 3 and xnd != 4:
            return False
        b = xnd - 3
        N = xs[0] if b else 1
        Cb, H, W = xs[b], xs[b + 1], xs[b + 2]
    else:
        if xnd != 2 and xnd != 3:
            return False
        b = xnd - 2
        N = xs[0] if b else 1
        if xs[b] % (kh * kw) != 0:
            return False
        Cb, H, W = xs[b] // (kh * kw), eh, ew
    Hs = (H + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    Ws = (W + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if Hs < 1 or Ws < 1:
        return False
    if kind == FOLD and xs[xnd - 1] != Hs * Ws:
        return False
    g[G_N], g[G_CB], g[G_CS] = N, Cb, Cb * kh * kw
    g[G_HB], g[G_WB], g[G_HS], g[G_WS] = H, W, Hs, Ws
    return True


@jit
def _dense(C, t, z):
    """Tensor t's elements as a contiguous array: its own memory, or a copy."""
    M = meta_of(C)
    n = M[t, M_NUMEL]
    if is_contiguous(M, t):
        return _at(data_addr(C, t), n, z)
    A = _empty(n, z)
    copy_strided(C, t, np.int64(A.ctypes.data))
    return A


@jit
def _shape_of(M, t):
    nd = M[t, M_NDIM]
    s = np.zeros(MAXD, np.int64)
    for d in range(nd):
        s[d] = M[t, M_SHAPE + d]
    return nd, s


@jit
def _zero(A):
    for q in range(A.shape[0]):
        A[np.uint64(q)] = 0


# ---------------------------------------------------------------- kernels
@jit
def _forward(C, row, z):
    M = meta_of(C)
    T = tape_of(C)
    kind = T[row, R_IATTR + A_KIND]
    x = input_id(C, row, 0)
    w = input_id(C, row, 1)
    b = input_id(C, row, 2)
    dt = M[x, M_DTYPE]
    if dt != _kdt(z) or (w >= 0 and M[w, M_DTYPE] != dt) or (b >= 0 and M[b, M_DTYPE] != dt):
        return E_DTYPE
    if w < 0 and (kind == CONV or kind == CONV_T):
        return E_SHAPE
    xnd, xs = _shape_of(M, x)
    wnd, ws = _shape_of(M, w) if w >= 0 else (0, np.zeros(MAXD, np.int64))
    g = np.zeros(G_LEN, np.int64)
    if not _geometry(T, row, kind, xnd, xs, wnd, ws, g):
        return E_SHAPE
    N, Cb, Cs = g[G_N], g[G_CB], g[G_CS]
    if b >= 0 and (M[b, M_NDIM] != 1 or M[b, M_SHAPE] != (Cs if kind == CONV else Cb)):
        return E_SHAPE
    shape = np.empty(4, np.int64)
    sd = g[G_SD]
    if kind == CONV or kind == UNFOLD:      # the output is the small tensor
        nd = 2 + sd if kind == CONV else 2 + g[G_BATCHED]
        shape[0] = N
        shape[1] = Cs
        if kind == UNFOLD:
            shape[2] = g[G_HS] * g[G_WS]
        elif sd == 2:
            shape[2], shape[3] = g[G_HS], g[G_WS]
        else:
            shape[2] = g[G_WS]
    else:
        nd = 2 + sd if kind == CONV_T else 3 + g[G_BATCHED]
        shape[0] = N
        shape[1] = Cb
        if sd == 2:
            shape[2], shape[3] = g[G_HB], g[G_WB]
        else:
            shape[2] = g[G_WB]
    lead = 0 if g[G_BATCHED] else 1             # an unbatched unfold/fold drops N
    out = make_output(C, dt, nd, shape[lead:lead + nd])
    if out < 0:
        return out
    O = _at(data_addr(C, out), M[out, M_NUMEL], z)
    X = _dense(C, x, z)
    if kind == CONV:
        _small_from_big(X, O, _dense(C, w, z), g, 0.0)
        if b >= 0:
            _add_bias(O, _dense(C, b, z), N, Cs, g[G_HS] * g[G_WS])
    elif kind == CONV_T:
        _zero(O)
        _big_from_small(X, O, _dense(C, w, z), g)
        if b >= 0:
            _add_bias(O, _dense(C, b, z), N, Cb, g[G_HB] * g[G_WB])
    elif kind == UNFOLD:
        P = g[G_HS] * g[G_WS]
        for n in range(N):
            _im2col(X, n * Cb * g[G_HB] * g[G_WB], Cb, g[G_HB], g[G_WB], g[G_KH], g[G_KW],
                    g[G_SH], g[G_SW], g[G_PH], g[G_PW], g[G_DH], g[G_DW], 0, g[G_HS], 0,
                    g[G_WS], g[G_WS], O, n * Cs * P, P, False)
    else:
        _zero(O)
        P = g[G_HS] * g[G_WS]
        for n in range(N):
            _col2im(X, n * Cs * P, P, O, n * Cb * g[G_HB] * g[G_WB], Cb, g[G_HB], g[G_WB],
                    g[G_KH], g[G_KW], g[G_SH], g[G_SW], g[G_PH], g[G_PW], g[G_DH], g[G_DW],
                    0, g[G_HS], 0, g[G_WS], g[G_WS])
    return set_outputs1(C, out)


def _kdt(z):
    raise NotImplementedError("tapegrad.ops.conv._kdt is for compiled kernels")


@overload(_kdt, jit_options=OVERLOAD_OPTIONS)
def _kdt_impl(z):
    code = F32 if z == types.float32 else F64
    return lambda z: code


def _empty(n, z):
    """A new array of n elements of z's dtype."""
    raise NotImplementedError("tapegrad.ops.conv._empty is for compiled kernels")


@overload(_empty, jit_options=OVERLOAD_OPTIONS)
def _empty_impl(n, z):
    if z == types.float32:
        return lambda n, z: np.empty(n, np.float32)
    return lambda n, z: np.empty(n, np.float64)


@jit
def _has_edge(T, row, k):
    """Whether input k of the row takes a gradient (a producing row or a leaf's edge)."""
    return T[row, R_IN + k * IW + IN_ROW] >= 0 or T[row, R_IN + k * IW + IN_T] >= 0


@jit
def _known(T, row, k):
    """Whether input k's shape can be read in the backward (input_shape): an edge or a saved
    alias."""
    return _has_edge(T, row, k) or T[row, R_IN + k * IW + IN_SAVED] >= 0


@jit
def _backward(C, row, z):
    T = tape_of(C)
    kind = T[row, R_IATTR + A_KIND]
    conv = kind == CONV or kind == CONV_T
    nin = T[row, R_NIN]
    n_out = 1
    for d in range(T[row, R_ONDIM]):
        n_out *= T[row, R_OSHAPE + d]
    G = _at(row_grad_addr(C, row, 0), n_out, z)
    if conv and nin > 2:        # the bias: the output's (N, C, ...) shape is all it needs
        gb = edge_grad_addr(C, row, 2)
        Nn, Cn = T[row, R_OSHAPE], T[row, R_OSHAPE + 1]
        if gb != 0 and Nn * Cn > 0:
            _bias_grad(G, _at(gb, Cn, z), Nn, Cn, n_out // (Nn * Cn))
    # an input's shape is known after the forward through its edge or its saved alias; one
    # that wants a gradient has an edge, and then the other operand was saved
    if not (_has_edge(T, row, 0) or (conv and nin > 1 and _has_edge(T, row, 1))):
        return K_OK
    if not _known(T, row, 0) or (conv and not _known(T, row, 1)):
        return E_SHAPE
    xs = np.zeros(MAXD, np.int64)
    xnd = input_shape(C, row, 0, xs)
    ws = np.zeros(MAXD, np.int64)
    wnd = input_shape(C, row, 1, ws) if conv else 0
    g = np.zeros(G_LEN, np.int64)
    if not _geometry(T, row, kind, xnd, xs, wnd, ws, g):
        return E_SHAPE
    N, Cb, Cs = g[G_N], g[G_CB], g[G_CS]
    nx = 1
    for d in range(xnd):
        nx *= xs[d]
    if kind == UNFOLD or kind == FOLD:
        gx = edge_grad_addr(C, row, 0)
        if gx == 0:
            return K_OK
        GX = _at(gx, nx, z)
        P = g[G_HS] * g[G_WS]
        for n in range(N):
            if kind == UNFOLD:
                _col2im(G, n * Cs * P, P, GX, n * Cb * g[G_HB] * g[G_WB], Cb, g[G_HB], g[G_WB],
                        g[G_KH], g[G_KW], g[G_SH], g[G_SW], g[G_PH], g[G_PW], g[G_DH],
                        g[G_DW], 0, g[G_HS], 0, g[G_WS], g[G_WS])
            else:
                _im2col(G, n * Cb * g[G_HB] * g[G_WB], Cb, g[G_HB], g[G_WB], g[G_KH], g[G_KW],
                        g[G_SH], g[G_SW], g[G_PH], g[G_PW], g[G_DH], g[G_DW], 0, g[G_HS], 0,
                        g[G_WS], g[G_WS], GX, n * Cs * P, P, True)
        return K_OK
    nw = 1
    for d in range(wnd):
        nw *= ws[d]
    xsv = T[row, R_IN + IN_SAVED]             # saved when the weight wants a gradient
    wsv = T[row, R_IN + IW + IN_SAVED]        # saved when the input wants one
    gx, x_fresh = grad_for_write(C, row, 0, kind == CONV_T)
    if gx != 0 and wsv >= 0:
        GX = _at(gx, nx, z)
        if kind == CONV:
            _big_from_small(G, GX, _dense(C, wsv, z), g)
        else:
            _small_from_big(G, GX, _dense(C, wsv, z), g, 0.0 if x_fresh else 1.0)
    gw, w_fresh = grad_for_write(C, row, 1, True)
    if gw != 0 and xsv >= 0:
        GW = _at(gw, nw, z)
        beta = 0.0 if w_fresh else 1.0
        if kind == CONV:
            _weight_grad(G, _dense(C, xsv, z), GW, g, beta)
        else:
            _weight_grad(_dense(C, xsv, z), G, GW, g, beta)
    return K_OK


def conv_fwd(caddr, row):
    C = ctx_of(caddr)
    if KERNEL_DTYPE == F32:
        return _forward(C, row, np.float32(0))
    return _forward(C, row, np.float64(0))


def conv_bwd(caddr, row):
    C = ctx_of(caddr)
    if KERNEL_DTYPE == F32:
        return _backward(C, row, np.float32(0))
    return _backward(C, row, np.float64(0))


def _conv(name, grad_fn):
    return register(OpDef(name, grad_fn, "custom", module=_M, fwd_fn="conv_fwd",
                          bwd_fn="conv_bwd", nin=3, diff=(0, 1, 2), attrs=ATTRS,
                          saves_if={0: ("b",), 1: ("a",)}, per_dtype=True))


CONV_OP = _conv("convolution", "ConvolutionBackward0")
samples("convolution", "F.conv2d(x, w)", "F.conv2d(x, w, b)", "F.conv2d(x, w, b, 2, 1)",
        "F.conv2d(x, w, bias=b, stride=(2, 1), padding=(1, 2), dilation=(2, 1))",
        "F.conv2d(x, w, b, padding='same', dilation=2)", "F.conv2d(x, w, padding='valid')",
        "F.conv2d(x.transpose(2, 3), w.transpose(2, 3))",
        Sample("F.conv2d(x, w, b, groups=2)", w=T(6, 2, 3, 3)),
        Sample("F.conv2d(x, w, b, 1, 1)", x=T(4, 5, 5)),
        Sample("F.conv1d(x, w, b, 2, 1)", x=T(2, 4, 9), w=T(6, 4, 3)),
        Sample("F.conv1d(x, w, None, 1, 'same', 2, 2)", x=T(2, 4, 9), w=T(6, 2, 3)),
        Sample("F.conv2d(x, w, b)", x=T(2, 4, 3, 3), w=T(6, 4, 1, 1)),
        errors=["F.conv2d(x, w, b, stride=0)", "F.conv2d(x, w, b, padding=-1)",
                "F.conv2d(x, w, b, padding='same', stride=2)", "F.conv2d(x, w, b, groups=3)",
                "F.conv2d(x, w, b, padding='full')", "F.conv2d(x.float(), w.double())",
                "F.conv2d(x.double(), w.float())", "F.conv2d(x, w, b.double().float()[:5])",
                "F.conv2d(x[0, 0], w)", "F.conv2d(x, w, b[:4])", "F.conv2d(x, w, dilation=4)",
                Sample("F.conv1d(x, w)", w=T(6, 4, 3))],
        x=T(2, 4, 6, 5), w=T(6, 4, 3, 2), b=T(6))

_conv("conv_transpose", "ConvolutionBackward0")
samples("conv_transpose", "F.conv_transpose2d(x, w)", "F.conv_transpose2d(x, w, b)",
        "F.conv_transpose2d(x, w, b, 2, 1, 1)",
        "F.conv_transpose2d(x, w, b, stride=(2, 3), padding=(0, 1), output_padding=(1, 2), "
        "dilation=(1, 2))",
        Sample("F.conv_transpose2d(x, w, b, groups=2)", w=T(4, 3, 3, 2), b=T(6)),
        Sample("F.conv_transpose2d(x, w, b)", x=T(4, 5, 5)),
        Sample("F.conv_transpose1d(x, w, b, 2, 1, 1, 1, 2)", x=T(2, 4, 6), w=T(4, 3, 3)),
        errors=["F.conv_transpose2d(x, w, b, output_padding=1)",
                "F.conv_transpose2d(x, w, b, groups=3)", "F.conv_transpose2d(x, w[:3])",
                "F.conv_transpose2d(x, w, b, stride=-1)", "F.conv_transpose2d(x, w, b[:2])"],
        x=T(2, 4, 5, 4), w=T(4, 3, 3, 2), b=T(3))


def _fold_op(name, grad_fn):
    return register(OpDef(name, grad_fn, "custom", module=_M, fwd_fn="conv_fwd",
                          bwd_fn="conv_bwd", nin=1, diff=(0,), attrs=ATTRS, per_dtype=True))


_fold_op("im2col", "Im2ColBackward0")
samples("im2col", "F.unfold(x, 2)", "F.unfold(x, (2, 3), dilation=(1, 2), padding=1, stride=2)",
        "L.nn.Unfold(3, padding=1)(x)", Sample("F.unfold(x, 2, 1, 0, 2)", x=T(2, 5, 5)),
        errors=["F.unfold(x, 7)", "F.unfold(x[0, 0], 2)", "F.unfold(x, 2, stride=0)"],
        x=T(2, 3, 5, 4))
_fold_op("col2im", "Col2ImBackward0")
samples("col2im", "F.fold(x, (4, 5), 2)", "L.nn.Fold((4, 5), 2)(x)",
        Sample("F.fold(x, (5, 5), (2, 3), dilation=(1, 2), padding=1, stride=2)", x=T(2, 12, 6)),
        Sample("F.fold(x, (4, 5), 2)", x=T(12, 12)),
        errors=["F.fold(x, (4, 5), 3)", "F.fold(x, (4, 6), 2)", "F.fold(x[0, 0], (4, 5), 2)"],
        x=T(2, 12, 12))
