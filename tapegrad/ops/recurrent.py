"""The recurrent op family: a whole layer of nn.RNN / nn.LSTM / nn.GRU (every time step,
both directions) as one tape row.

A row has at most three inputs (layout.MAXIN), so the front hands a layer over as
  X  the layer's input, contiguous: (T*B, I) time-major, (B*T, I) batch-first, or a
     PackedSequence's data (N, I);
  W  the layer's parameters flattened and concatenated in PyTorch's registration order
     (per direction weight_ih, weight_hh, [bias_ih, bias_hh], [weight_hr]), so their
     gradients flow back to the Parameters through the concatenation;
  S  (optional) h0 then c0 (LSTM), flattened, then for packed input the batch sizes (as
     floats: they are small integers, exact in either dtype), the one integer sequence a
     row cannot carry in its 12 attributes.
The output is one flat tensor [output | h_n | c_n] the front views. The forward runs the
input projection of every step as one GEMM, then per step the hidden GEMM and the gates;
what the backward reads (activated gates, previous states, tanh(c)) lives in a workspace
storage owned by the row (R_TAN, freed with the row or after a backward, like a saved
tensor), laid out in X's row order so that each weight gradient is one GEMM over all
steps. Rows of a packed batch past their sequence's length are not touched, so their
state carries on unchanged (PyTorch's semantics for variable lengths).
"""
import numpy as np
from numba import carray, types
from numba.core.extending import overload

from .._engine.blas import NO_TRANS, ROW_MAJOR, TRANS, cblas_dgemm, cblas_sgemm
from .._engine.core import (
    data_addr,
    edge_grad_addr,
    input_id,
    is_contiguous,
    make_output,
    row_grad_addr,
    set_outputs1,
)
from .._engine.layout import (
    E_DTYPE,
    E_GROW_STOR,
    E_NOMEM,
    E_SHAPE,
    F32,
    IN_SAVED,
    IW,
    K_OK,
    M_DTYPE,
    M_NUMEL,
    R_IATTR,
    R_IN,
    R_TAN,
    S_ADDR,
    S_REFS,
)
from .._engine.lowlevel import (
    OVERLOAD_OPTIONS,
    ctx_of,
    jit,
    meta_of,
    ptr_f32,
    ptr_f64,
    stor_of,
    tape_of,
)
from .._engine.memory import KIND_STOR, decref, stor_new
from ._vmath import exp, tanh
from .opinfo import Fixed
from .opinfo import T as Tn
from .registry import OpDef, Sample, register, samples

_M = __name__
KERNEL_DTYPE = -1       # F32 or F64 in each compiled copy (registry._per_dtype)

RNN_TANH, RNN_RELU, LSTM, GRU = 0, 1, 2, 3
ATTRS = ("mode", "steps", "batch", "input", "hidden", "proj", "ndir", "bias", "layout",
         "save", "state")
TIME_MAJOR, BATCH_FIRST, PACKED = 0, 1, 2


def gates_of(mode):
    """Gate blocks per hidden unit: 1 (RNN), 4 (LSTM), 3 (GRU)."""
    return 4 if mode == LSTM else 3 if mode == GRU else 1


def weights_per_direction(mode, inp, hidden, proj, bias):
    """Elements of one direction's flattened parameters (proj: 0 for none)."""
    gh = gates_of(mode) * hidden
    p = proj if proj else hidden
    return gh * inp + gh * p + (2 * gh if bias else 0) + (p * hidden if proj else 0)


@jit
def workspace_per_direction(mode, n, hidden, proj):
    """Elements of one direction's workspace over n rows of X."""
    p = proj if proj else hidden
    if mode == LSTM:
        return n * (4 * hidden + 2 * hidden + p + (hidden if proj else 0))
    if mode == GRU:
        return n * (3 * hidden + 2 * hidden)
    return n * 2 * hidden


# ---------------------------------------------------------------- BLAS by address
def _mm(A, ao, lda, ta, Bm, bo, ldb, tb, O, oo, ldo, m, n, k, beta):
    """O[oo:] (m x n, leading dim ldo) = op(A[ao:]) @ op(Bm[bo:]) + beta * O, row-major,
    ta/tb: transpose flags (compiled code only)."""
    raise NotImplementedError("tapegrad.ops.recurrent._mm is for compiled kernels")


@overload(_mm, jit_options=OVERLOAD_OPTIONS)
def _mm_impl(A, ao, lda, ta, Bm, bo, ldb, tb, O, oo, ldo, m, n, k, beta):
    f32 = A.dtype == types.float32
    call = cblas_sgemm if f32 else cblas_dgemm
    cast = np.float32 if f32 else np.float64

    def impl(A, ao, lda, ta, Bm, bo, ldb, tb, O, oo, ldo, m, n, k, beta):
        if m <= 0 or n <= 0:
            return
        if k <= 0:
            if beta == 0:
                for i in range(m):
                    for j in range(n):
                        O[oo + i * ldo + j] = 0
            return
        isz = A.itemsize
        call(np.int32(ROW_MAJOR), np.int32(TRANS if ta else NO_TRANS),
             np.int32(TRANS if tb else NO_TRANS), m, n, k, cast(1),
             np.int64(A.ctypes.data) + ao * isz, lda, np.int64(Bm.ctypes.data) + bo * isz,
             ldb, cast(beta), np.int64(O.ctypes.data) + oo * isz, ldo)
    return impl


# ---------------------------------------------------------------- the layer's arithmetic
@jit
def _sigmoid(v, one):
    return one / (one + exp(-v))


@jit
def _offsets(mode, inp, H, P, proj, bias):
    """Offsets in one direction's weights: w_ih, w_hh, b_ih, b_hh, w_hr, and its size."""
    gh = (4 if mode == LSTM else 3 if mode == GRU else 1) * H
    wih = 0
    whh = gh * inp
    bih = whh + gh * P
    bhh = bih + (gh if bias else 0)
    whr = bhh + (gh if bias else 0)
    size = whr + (P * H if proj else 0)
    return wih, whh, bih, bhh, whr, size


@jit
def _step_rows(layout, t, B, L, offs):
    """(first row of step t in X's row order, row step between batch entries)."""
    if layout == BATCH_FIRST:
        return t, L
    if layout == PACKED:
        return offs[t], 1
    return t * B, 1


@jit
def _forward(mode, X, W, S, Y, WS, bs, offs, L, B, inp, H, P, ndir, bias, layout, sh,
             proj, N, one):
    """The whole layer: Y = [output | h_n | c_n], WS the workspace (see _backward)."""
    zero = one - one
    G = (4 if mode == LSTM else 3 if mode == GRU else 1)
    GH = G * H
    D = ndir * P
    hn0 = N * D
    cn0 = hn0 + ndir * B * P
    c0off = ndir * B * P
    wih, whh, bih, bhh, whr, wsz = _offsets(mode, inp, H, P, proj, bias)
    h = np.empty(max(B * P, 1), Y.dtype)
    c = np.empty(max(B * H, 1), Y.dtype)
    hg = np.empty(max(B * GH, 1), Y.dtype)
    mb = np.empty(max(B * H, 1), Y.dtype)
    WT = np.empty(max(GH * P, 1), Y.dtype)
    for d in range(ndir):
        w0 = d * wsz
        ws0 = d * (WS.shape[0] // ndir)
        g0 = ws0                             # gates: N x GH
        if mode == LSTM:
            cp0 = g0 + N * GH                # c before the step: N x H
            tc0 = cp0 + N * H                # tanh(c after the step): N x H
            hp0 = tc0 + N * H                # h before the step: N x P
            mm0 = hp0 + N * P                # o * tanh(c) before the projection: N x H
        elif mode == GRU:
            cp0 = g0 + N * GH                # the hidden part of the n gate: N x H
            tc0 = cp0
            hp0 = cp0 + N * H
            mm0 = hp0
        else:
            cp0 = g0 + N * GH
            tc0 = cp0
            hp0 = cp0
            mm0 = hp0
        # the input projection of every step: one GEMM, then b_ih (as addmm adds it)
        _mm(X, 0, inp, False, W, w0 + wih, inp, True, WS, g0, GH, N, GH, inp, 0.0)
        if bias:
            Bi = W[w0 + bih:w0 + bih + GH]
            for r in range(N):
                R = WS[g0 + r * GH:g0 + (r + 1) * GH]
                for j in range(GH):
                    R[j] += Bi[j]
        for q in range(B * P):
            h[q] = S[(d * B) * P + q] if sh else zero
        # W_hh transposed once (P x GH): the per-step product is then a plain NN GEMM,
        # which OpenBLAS's AVX-512 kernels run faster than a transposed operand
        for j in range(GH):
            Wr = W[w0 + whh + j * P:w0 + whh + (j + 1) * P]
            for k in range(P):
                WT[k * GH + j] = Wr[k]
        if mode == LSTM:
            for q in range(B * H):
                c[q] = S[c0off + (d * B) * H + q] if sh else zero
        for s in range(L):
            t = s if d == 0 else L - 1 - s
            nt = bs[t]
            base, rstep = _step_rows(layout, t, B, L, offs)
            _mm(h, 0, P, False, WT, 0, GH, False, hg, 0, GH, nt, GH, P, 0.0)
            if bias:
                Bh = W[w0 + bhh:w0 + bhh + GH]
                for b in range(nt):
                    R = hg[b * GH:(b + 1) * GH]
                    for j in range(GH):
                        R[j] += Bh[j]
            for b in range(nt):
                r = base + b * rstep
                Hp = WS[hp0 + r * P:hp0 + (r + 1) * P]
                hb = h[b * P:(b + 1) * P]
                for j in range(P):
                    Hp[j] = hb[j]
                Gr = WS[g0 + r * GH:g0 + (r + 1) * GH]
                Hg = hg[b * GH:(b + 1) * GH]
                if mode == LSTM:
                    cb = c[b * H:(b + 1) * H]
                    Cp = WS[cp0 + r * H:cp0 + (r + 1) * H]
                    Tc = WS[tc0 + r * H:tc0 + (r + 1) * H]
                    mbb = mb[b * H:(b + 1) * H]
                    # (loops over one or two arrays each, so that LLVM vectorises them)
                    for j in range(GH):
                        Gr[j] = Hg[j] + Gr[j]
                    Gif = Gr[0:2 * H]
                    for j in range(2 * H):
                        Gif[j] = _sigmoid(Gif[j], one)
                    Gi = Gr[0:H]
                    Gf = Gr[H:2 * H]
                    Gg = Gr[2 * H:3 * H]
                    Go = Gr[3 * H:4 * H]
                    for j in range(H):
                        Gg[j] = tanh(Gg[j])
                    for j in range(H):
                        Go[j] = _sigmoid(Go[j], one)
                    for j in range(H):
                        Cp[j] = cb[j]
                    for j in range(H):
                        cb[j] = Gf[j] * cb[j] + Gi[j] * Gg[j]
                    for j in range(H):
                        Tc[j] = tanh(cb[j])
                    for j in range(H):
                        mbb[j] = Go[j] * Tc[j]
                elif mode == GRU:
                    Gn = WS[cp0 + r * H:cp0 + (r + 1) * H]
                    Grz = Gr[0:2 * H]
                    for j in range(2 * H):
                        Grz[j] = Hg[j] + Grz[j]
                    for j in range(2 * H):
                        Grz[j] = _sigmoid(Grz[j], one)
                    Gr_ = Gr[0:H]
                    Gz = Gr[H:2 * H]
                    Gg = Gr[2 * H:3 * H]
                    Hn = Hg[2 * H:3 * H]
                    for j in range(H):
                        Gn[j] = Hn[j]
                    for j in range(H):
                        Gg[j] = tanh(Gg[j] + Gn[j] * Gr_[j])
                    for j in range(H):
                        hb[j] = (hb[j] - Gg[j]) * Gz[j] + Gg[j]
                elif mode == RNN_TANH:
                    for j in range(H):
                        v = tanh(Hg[j] + Gr[j])
                        Gr[j] = v
                        hb[j] = v
                else:
                    for j in range(H):
                        v = Hg[j] + Gr[j]
                        v = max(v, zero)     # (relu: NaN stays NaN)
                        Gr[j] = v
                        hb[j] = v
            if mode == LSTM:
                if proj:
                    _mm(mb, 0, H, False, W, w0 + whr, H, True, h, 0, P, nt, P, H, 0.0)
                    for b in range(nt):
                        r = base + b * rstep
                        Mm = WS[mm0 + r * H:mm0 + (r + 1) * H]
                        mbb = mb[b * H:(b + 1) * H]
                        for j in range(H):
                            Mm[j] = mbb[j]
                else:
                    for q in range(nt * H):
                        h[q] = mb[q]
            for b in range(nt):
                r = base + b * rstep
                O = Y[r * D + d * P:r * D + (d + 1) * P]
                hb = h[b * P:(b + 1) * P]
                for j in range(P):
                    O[j] = hb[j]
        for q in range(B * P):
            Y[hn0 + d * B * P + q] = h[q]
        if mode == LSTM:
            for q in range(B * H):
                Y[cn0 + d * B * H + q] = c[q]


@jit
def _colsum_into(A, a0, n, m, O, o0):
    """O[o0:o0 + m] += the column sums of A[a0:] (n x m, row-major)."""
    for i in range(n):
        R = A[a0 + i * m:a0 + (i + 1) * m]
        Q = O[o0:o0 + m]
        for j in range(m):
            Q[j] += R[j]


@jit
def _backward(mode, X, W, GY, WS, GX, GW, GS, bs, offs, L, B, inp, H, P, ndir, bias, layout,
              sh, proj, N, want_x, want_w, want_s, one, SC):
    """Backpropagation through time of _forward, adding into GX, GW, GS (each empty when
    not wanted); SC: scratch of _scratch_size elements."""
    zero = one - one
    G = (4 if mode == LSTM else 3 if mode == GRU else 1)
    GH = G * H
    D = ndir * P
    hn0 = N * D
    cn0 = hn0 + ndir * B * P
    c0off = ndir * B * P
    wih, whh, bih, bhh, whr, wsz = _offsets(mode, inp, H, P, proj, bias)
    dh = np.empty(max(B * P, 1), GY.dtype)
    dc = np.empty(max(B * H, 1), GY.dtype)
    dht = np.empty(max(B * P, 1), GY.dtype)
    dm = np.empty(max(B * H, 1), GY.dtype)
    DG = SC[0:N * GH]                                   # gate gradients, X's row order
    DGH = SC[N * GH:2 * N * GH] if mode == GRU else DG  # (GRU: the hidden side's)
    DHT = SC[N * GH:N * GH + N * P] if (mode == LSTM and proj) else DG  # dh before W_hr
    for d in range(ndir):
        w0 = d * wsz
        ws0 = d * (WS.shape[0] // ndir)
        g0 = ws0
        if mode == LSTM:
            cp0 = g0 + N * GH
            tc0 = cp0 + N * H
            hp0 = tc0 + N * H
            mm0 = hp0 + N * P
        elif mode == GRU:
            cp0 = g0 + N * GH
            tc0 = cp0
            hp0 = cp0 + N * H
            mm0 = hp0
        else:
            cp0 = g0 + N * GH
            tc0 = cp0
            hp0 = cp0
            mm0 = hp0
        for q in range(B * P):
            dh[q] = GY[hn0 + d * B * P + q]
        if mode == LSTM:
            for q in range(B * H):
                dc[q] = GY[cn0 + d * B * H + q]
        for s in range(L - 1, -1, -1):
            t = s if d == 0 else L - 1 - s
            nt = bs[t]
            base, rstep = _step_rows(layout, t, B, L, offs)
            for b in range(nt):
                r = base + b * rstep
                Go = GY[r * D + d * P:r * D + (d + 1) * P]
                dhb = dh[b * P:(b + 1) * P]
                dtb = dht[b * P:(b + 1) * P]
                for j in range(P):
                    dtb[j] = dhb[j] + Go[j]
            if mode == LSTM:
                if proj:
                    for b in range(nt):
                        r = base + b * rstep
                        Dh = DHT[r * P:(r + 1) * P]
                        dtb = dht[b * P:(b + 1) * P]
                        for j in range(P):
                            Dh[j] = dtb[j]
                    _mm(dht, 0, P, False, W, w0 + whr, H, False, dm, 0, H, nt, H, P, 0.0)
                dmv = dm if proj else dht
                for b in range(nt):
                    r = base + b * rstep
                    Gr = WS[g0 + r * GH:g0 + (r + 1) * GH]
                    Cp = WS[cp0 + r * H:cp0 + (r + 1) * H]
                    Tc = WS[tc0 + r * H:tc0 + (r + 1) * H]
                    Dg = DG[r * GH:(r + 1) * GH]
                    dcb = dc[b * H:(b + 1) * H]
                    dmb = dmv[b * H:(b + 1) * H]
                    Gi = Gr[0:H]
                    Gf = Gr[H:2 * H]
                    Gg = Gr[2 * H:3 * H]
                    Go = Gr[3 * H:4 * H]
                    Di = Dg[0:H]
                    Df = Dg[H:2 * H]
                    Dgg = Dg[2 * H:3 * H]
                    Do = Dg[3 * H:4 * H]
                    # (loops over few arrays each, so that LLVM vectorises them)
                    for j in range(H):
                        dcb[j] = dcb[j] + dmb[j] * Go[j] * (one - Tc[j] * Tc[j])
                    for j in range(H):
                        Do[j] = dmb[j] * Tc[j] * Go[j] * (one - Go[j])
                    for j in range(H):
                        Di[j] = dcb[j] * Gg[j] * Gi[j] * (one - Gi[j])
                    for j in range(H):
                        Df[j] = dcb[j] * Cp[j] * Gf[j] * (one - Gf[j])
                    for j in range(H):
                        Dgg[j] = dcb[j] * Gi[j] * (one - Gg[j] * Gg[j])
                    for j in range(H):
                        dcb[j] = dcb[j] * Gf[j]
            elif mode == GRU:
                for b in range(nt):
                    r = base + b * rstep
                    Gr = WS[g0 + r * GH:g0 + (r + 1) * GH]
                    Gn = WS[cp0 + r * H:cp0 + (r + 1) * H]
                    Hp = WS[hp0 + r * P:hp0 + (r + 1) * P]
                    Dg = DG[r * GH:(r + 1) * GH]
                    Dgh = DGH[r * GH:(r + 1) * GH]
                    dtb = dht[b * P:(b + 1) * P]
                    dhb = dh[b * P:(b + 1) * P]
                    Gr_ = Gr[0:H]
                    Gz = Gr[H:2 * H]
                    Gg = Gr[2 * H:3 * H]
                    Dr = Dg[0:H]
                    Dz = Dg[H:2 * H]
                    Dn = Dg[2 * H:3 * H]
                    Dhn = Dgh[2 * H:3 * H]
                    for j in range(H):
                        Dn[j] = dtb[j] * (one - Gz[j]) * (one - Gg[j] * Gg[j])
                    for j in range(H):
                        Dr[j] = Dn[j] * Gn[j] * Gr_[j] * (one - Gr_[j])
                    for j in range(H):
                        Dz[j] = dtb[j] * (Hp[j] - Gg[j]) * Gz[j] * (one - Gz[j])
                    for j in range(2 * H):
                        Dgh[j] = Dg[j]
                    for j in range(H):
                        Dhn[j] = Dn[j] * Gr_[j]
                    for j in range(H):
                        dhb[j] = dtb[j] * Gz[j]
            else:
                for b in range(nt):
                    r = base + b * rstep
                    Gr = WS[g0 + r * GH:g0 + (r + 1) * GH]
                    Dg = DG[r * GH:(r + 1) * GH]
                    dtb = dht[b * P:(b + 1) * P]
                    if mode == RNN_TANH:
                        for j in range(H):
                            Dg[j] = dtb[j] * (one - Gr[j] * Gr[j])
                    else:
                        for j in range(H):
                            Dg[j] = dtb[j] if Gr[j] > zero else zero
            # dh for the previous step: the hidden GEMM's gradient (rows past a sequence's
            # length keep theirs: their state was not updated)
            if mode == GRU:
                _mm(DGH, base * GH, rstep * GH, False, W, w0 + whh, P, False, dh, 0, P, nt,
                    P, GH, 1.0)
            else:
                _mm(DG, base * GH, rstep * GH, False, W, w0 + whh, P, False, dh, 0, P, nt,
                    P, GH, 0.0)
        if want_s:
            for q in range(B * P):
                GS[(d * B) * P + q] += dh[q]
            if mode == LSTM:
                for q in range(B * H):
                    GS[c0off + (d * B) * H + q] += dc[q]
        DH = DGH if mode == GRU else DG
        if want_w:
            _mm(DH, 0, GH, True, WS, hp0, P, False, GW, w0 + whh, P, GH, P, N, 1.0)
            _mm(DG, 0, GH, True, X, 0, inp, False, GW, w0 + wih, inp, GH, inp, N, 1.0)
            if bias:
                if mode == GRU:
                    _colsum_into(DG, 0, N, GH, GW, w0 + bih)
                    _colsum_into(DH, 0, N, GH, GW, w0 + bhh)
                else:               # (both biases' gradients are the same sums)
                    sums = np.zeros(GH, GW.dtype)
                    _colsum_into(DG, 0, N, GH, sums, 0)
                    for j in range(GH):
                        GW[w0 + bih + j] += sums[j]
                        GW[w0 + bhh + j] += sums[j]
            if mode == LSTM and proj:
                _mm(DHT, 0, P, True, WS, mm0, H, False, GW, w0 + whr, H, P, H, N, 1.0)
        if want_x:
            _mm(DG, 0, GH, False, W, w0 + wih, inp, False, GX, 0, inp, N, inp, GH, 1.0)


@jit
def _scratch_size(mode, N, GH, P, proj):
    return max(N * GH * (2 if mode == GRU else 1) + (N * P if (mode == LSTM and proj) else 0),
               1)


@jit
def _attrs(T, row):
    a = R_IATTR
    return (T[row, a], T[row, a + 1], T[row, a + 2], T[row, a + 3], T[row, a + 4],
            T[row, a + 5], T[row, a + 6], T[row, a + 7], T[row, a + 8], T[row, a + 9],
            T[row, a + 10])


@jit
def _batch_sizes(S, soff, L, B, layout):
    """(batch size per step, first row per step, rows) or rows -1 when packed batch sizes
    are not a non-increasing sequence in [1, B] starting at B."""
    bs = np.empty(max(L, 1), np.int64)
    offs = np.empty(max(L, 1), np.int64)
    n = 0
    for t in range(L):
        if layout == PACKED:
            v = S[soff + t]
            k = np.int64(v)
            if not (k >= 1 and k <= B and k == v) or (t > 0 and k > bs[t - 1]) or (
                    t == 0 and k != B):
                return bs, offs, -1
            bs[t] = k
        else:
            bs[t] = B
        offs[t] = n
        n += bs[t]
    return bs, offs, n


@jit
def _sizes(mode, L, B, inp, H, P, ndir, bias, sh, proj, layout):
    """(weights, state elements, output elements) the attributes imply."""
    wsz = _offsets(mode, inp, H, P, proj, bias)[5] * ndir
    ns = ((ndir * B * P + (ndir * B * H if mode == LSTM else 0)) if sh else 0) + (
        L if layout == PACKED else 0)
    return wsz, ns


def rnn_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    x = input_id(C, row, 0)
    w = input_id(C, row, 1)
    s = input_id(C, row, 2)
    mode, L, B, inp, H, proj, ndir, bias, layout, save, sh = _attrs(T, row)
    P = proj if proj else H
    dt = M[x, M_DTYPE]
    if dt != KERNEL_DTYPE or M[w, M_DTYPE] != dt or (s >= 0 and M[s, M_DTYPE] != dt):
        return E_DTYPE
    if not (is_contiguous(M, x) and is_contiguous(M, w)) or (s >= 0 and not is_contiguous(M, s)):
        return E_SHAPE
    wsz, ns = _sizes(mode, L, B, inp, H, P, ndir, bias, sh, proj, layout)
    if M[w, M_NUMEL] != wsz or (ns > 0 and (s < 0 or M[s, M_NUMEL] != ns)):
        return E_SHAPE
    if KERNEL_DTYPE == F32:
        Sv = carray(ptr_f32(data_addr(C, s) if s >= 0 else 0), (ns,))
    else:
        Sv = carray(ptr_f64(data_addr(C, s) if s >= 0 else 0), (ns,))
    bs, offs, N = _batch_sizes(Sv, ns - L, L, B, layout)
    if N < 0 or M[x, M_NUMEL] != N * inp:
        return E_SHAPE
    ny = N * ndir * P + ndir * B * P + (ndir * B * H if mode == LSTM else 0)
    nws = ndir * workspace_per_direction(mode, N, H, proj)
    isz = 4 if KERNEL_DTYPE == F32 else 8
    wsaddr = 0
    if save:            # the row keeps the workspace (op_entry frees it if this fails)
        sid = stor_new(C, max(nws, 1) * isz, False)
        if sid < 0:
            return E_GROW_STOR if sid == -1 else E_NOMEM
        stor_of(C)[sid, S_REFS] = 1
        T[row, R_TAN] = sid
        wsaddr = stor_of(C)[sid, S_ADDR]
    shape = np.empty(1, np.int64)
    shape[0] = ny
    out = make_output(C, dt, 1, shape)
    if out < 0:
        return out
    if KERNEL_DTYPE == F32:
        WS = (carray(ptr_f32(wsaddr), (nws,)) if save else np.empty(nws, np.float32))
        _forward(mode, carray(ptr_f32(data_addr(C, x)), (N * inp,)),
                 carray(ptr_f32(data_addr(C, w)), (wsz,)), Sv,
                 carray(ptr_f32(data_addr(C, out)), (ny,)), WS, bs, offs, L, B, inp, H, P,
                 ndir, bias, layout, sh, proj, N, np.float32(1.0))
    else:
        WS = (carray(ptr_f64(wsaddr), (nws,)) if save else np.empty(nws, np.float64))
        _forward(mode, carray(ptr_f64(data_addr(C, x)), (N * inp,)),
                 carray(ptr_f64(data_addr(C, w)), (wsz,)), Sv,
                 carray(ptr_f64(data_addr(C, out)), (ny,)), WS, bs, offs, L, B, inp, H, P,
                 ndir, bias, layout, sh, proj, N, 1.0)
    return set_outputs1(C, out)


def rnn_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    mode, L, B, inp, H, proj, ndir, bias, layout, _save, sh = _attrs(T, row)
    P = proj if proj else H
    if T[row, R_TAN] < 0:
        return E_SHAPE          # (recorded without its workspace: the front never does)
    x = T[row, R_IN + IN_SAVED]
    w = T[row, R_IN + IW + IN_SAVED]
    s = T[row, R_IN + 2 * IW + IN_SAVED]
    wsz, ns = _sizes(mode, L, B, inp, H, P, ndir, bias, sh, proj, layout)
    gx = edge_grad_addr(C, row, 0)
    gw = edge_grad_addr(C, row, 1)
    gs = edge_grad_addr(C, row, 2)
    g = row_grad_addr(C, row, 0)
    if g == 0 or w < 0:
        return K_OK
    want_w = gw != 0 and x >= 0
    wsaddr = stor_of(C)[T[row, R_TAN], S_ADDR]
    if KERNEL_DTYPE == F32:
        Sv = carray(ptr_f32(data_addr(C, s) if s >= 0 else 0), (ns if s >= 0 else 0,))
    else:
        Sv = carray(ptr_f64(data_addr(C, s) if s >= 0 else 0), (ns if s >= 0 else 0,))
    if layout == PACKED and s < 0:
        return E_SHAPE
    bs, offs, N = _batch_sizes(Sv, ns - L, L, B, layout)
    M = meta_of(C)
    # (what the forward accepted always passes: checked again before any index is used)
    if N < 0 or M[w, M_NUMEL] != wsz or (want_w and M[x, M_NUMEL] != N * inp):
        return E_SHAPE
    nws = ndir * workspace_per_direction(mode, N, H, proj)
    ny = N * ndir * P + ndir * B * P + (ndir * B * H if mode == LSTM else 0)
    nx = N * inp if want_w else 0
    # the scratch is an engine storage, so a compiled replay's memory plan places it (a
    # fresh malloc of megabytes costs page faults every step)
    nsc = _scratch_size(mode, N, (4 if mode == LSTM else 3 if mode == GRU else 1) * H, P,
                        proj)
    isz = 4 if KERNEL_DTYPE == F32 else 8
    sc = stor_new(C, nsc * isz, False)
    scaddr = 0
    if sc >= 0:
        stor_of(C)[sc, S_REFS] = 1
        scaddr = stor_of(C)[sc, S_ADDR]
    if KERNEL_DTYPE == F32:
        _backward(mode, carray(ptr_f32(data_addr(C, x) if want_w else 0), (nx,)),
                  carray(ptr_f32(data_addr(C, w)), (wsz,)), carray(ptr_f32(g), (ny,)),
                  carray(ptr_f32(wsaddr), (nws,)),
                  carray(ptr_f32(gx), (N * inp if gx else 0,)),
                  carray(ptr_f32(gw), (wsz if want_w else 0,)),
                  carray(ptr_f32(gs), (ns if gs else 0,)), bs, offs, L, B, inp, H, P, ndir,
                  bias, layout, sh, proj, N, gx != 0, want_w, gs != 0 and sh != 0, np.float32(1.0),
                  carray(ptr_f32(scaddr), (nsc,)) if sc >= 0 else np.empty(nsc, np.float32))
    else:
        _backward(mode, carray(ptr_f64(data_addr(C, x) if want_w else 0), (nx,)),
                  carray(ptr_f64(data_addr(C, w)), (wsz,)), carray(ptr_f64(g), (ny,)),
                  carray(ptr_f64(wsaddr), (nws,)),
                  carray(ptr_f64(gx), (N * inp if gx else 0,)),
                  carray(ptr_f64(gw), (wsz if want_w else 0,)),
                  carray(ptr_f64(gs), (ns if gs else 0,)), bs, offs, L, B, inp, H, P, ndir,
                  bias, layout, sh, proj, N, gx != 0, want_w, gs != 0 and sh != 0, 1.0,
                  carray(ptr_f64(scaddr), (nsc,)) if sc >= 0 else np.empty(nsc, np.float64))
    if sc >= 0:
        decref(C, KIND_STOR, sc)
    return K_OK


_SAVES = {0: ("b", "c"), 1: ("a", "b", "c"), 2: ("b", "c")}
for _name, _grad_fn in (("rnn_tanh", "RnnTanhBackward0"), ("rnn_relu", "RnnReluBackward0"),
                        ("lstm", "LstmBackward0"), ("gru", "GruBackward0")):
    register(OpDef(_name, _grad_fn, "custom", module=_M, fwd_fn="rnn_fwd", bwd_fn="rnn_bwd",
                   nin=3, diff=(0, 1, 2), saves_if=_SAVES, per_dtype=True, attrs=ATTRS))


def _call(fn, *args):
    """A sample's two spellings: tapegrad.nn.rnn.<fn>(...) (the function nn.LSTM & co
    call) and PyTorch's torch.<fn>(...)."""
    a = ", ".join(args)
    return {"call": f"L.nn.rnn.{fn}({a})", "torch": f"L.{fn}({a})"}


def _s(fn, *args, **kw):
    c = _call(fn, *args)
    return Sample(c["call"], torch=c["torch"], **kw)


_PACKED = "(the batch sizes are read in Python: a compiled step falls back to eager)"
_IN = {"x": Tn(5, 2, 3), "xb": Tn(2, 5, 3), "d": Tn(5, 3), "bsz": Fixed([2, 2, 1]), "h": Tn(1, 2, 4),
           "c": Tn(1, 2, 4), "h2": Tn(2, 2, 4), "c2": Tn(2, 2, 4), "hp": Tn(1, 2, 2), "h4": Tn(4, 2, 4)}
_LSTM_W = {"wi": Tn(16, 3), "wh": Tn(16, 4), "bi": Tn(16), "bh": Tn(16), "whp": Tn(16, 2), "wr": Tn(2, 4)}
samples("lstm",
        _s("lstm", "x", "(h, c)", "[wi, wh, bi, bh]", "True", "1", "0.0", "False", "False",
           "False"),
        _s("lstm", "xb", "(hp, c)", "[wi, whp, wr]", "False", "1", "0.0", "False", "False",
           "True"),
        _s("lstm", "d", "bsz", "(h2, c2)", "[wi, wh, bi, bh, wi, wh, bi, bh]", "True", "1",
           "0.0", "False", "True", replay=_PACKED),
        **_IN, **_LSTM_W)
samples("gru",
        _s("gru", "x", "h", "[wi, wh, bi, bh]", "True", "1", "0.0", "False", "False",
           "False"),
        _s("gru", "xb", "h4", "[wi, wh, wi, wh, wi8, wh, wi8, wh]", "False", "2", "0.0",
           "False", "True", "True"),
        _s("gru", "d", "bsz", "h", "[wi, wh, bi, bh]", "True", "1", "0.0", "False", "False",
           replay=_PACKED),
        **_IN, wi=Tn(12, 3), wh=Tn(12, 4), bi=Tn(12), bh=Tn(12), wi8=Tn(12, 8))
_RNN_W = {"wi": Tn(4, 3), "wh": Tn(4, 4), "bi": Tn(4), "bh": Tn(4)}
samples("rnn_tanh",
        _s("rnn_tanh", "x", "h", "[wi, wh, bi, bh]", "True", "1", "0.0", "False", "False",
           "False"),
        _s("rnn_tanh", "d", "bsz", "h2", "[wi, wh, bi, bh, wi, wh, bi, bh]", "True", "1",
           "0.0", "False", "True", replay=_PACKED),
        **_IN, **_RNN_W)
samples("rnn_relu",
        _s("rnn_relu", "xb", "h", "[wi, wh]", "False", "1", "0.0", "False", "False", "True"),
        **_IN, **_RNN_W)
