"""The updates of NAdam, RAdam, Adamax, Adadelta, Rprop and ASGD: one compiled call per
param group, with the calling convention of _kernels.py (ids table, hyper-parameter array).

Arithmetic follows PyTorch's single-tensor CPU implementations op by op, in the
parameter's dtype (Python scalars rounded to it), with a fused multiply-add where
PyTorch's CPU kernels use one (add with alpha, addcmul, lerp; not addcdiv), so that
trajectories agree to the last bit, not only to rounding. Per-parameter 0-d state (NAdam's
mu_product, ASGD's eta and mu) sits in a buffer column and is read and written in its
own dtype (float32 as PyTorch creates it; the parameter's after a state dict load, as
PyTorch casts it), so the rounding PyTorch's float32 scalars give is reproduced.
"""
import numpy as np

from .._engine.layout import F32, M_GRAD, M_NUMEL, M_DTYPE
from .._engine.lowlevel import jit, jit_entry, ctx_of, meta_of, f32_at, f64_at
from .._engine.core import data_addr, bump_version
from ._kernels import (P_ID, B1, B2, B3, STEP, E_LAYOUT, E_STATE, _check, _require,
                       _bump, _step_value, _tables, _fma, _lerp)


@jit
def _two32(C, ids, i, n):
    """The parameter, its gradient and the first two buffers (float32)."""
    p = ids[i, P_ID]
    P = f32_at(data_addr(C, p), n)
    G = f32_at(data_addr(C, meta_of(C)[p, M_GRAD]), n)
    X = f32_at(data_addr(C, ids[i, B1]), n) if ids[i, B1] >= 0 else f32_at(0, 0)
    Y = f32_at(data_addr(C, ids[i, B2]), n) if ids[i, B2] >= 0 else f32_at(0, 0)
    return P, G, X, Y


@jit
def _two64(C, ids, i, n):
    """The parameter, its gradient and the first two buffers (float64)."""
    p = ids[i, P_ID]
    P = f64_at(data_addr(C, p), n)
    G = f64_at(data_addr(C, meta_of(C)[p, M_GRAD]), n)
    X = f64_at(data_addr(C, ids[i, B1]), n) if ids[i, B1] >= 0 else f64_at(0, 0)
    Y = f64_at(data_addr(C, ids[i, B2]), n) if ids[i, B2] >= 0 else f64_at(0, 0)
    return P, G, X, Y


@jit
def _get(C, s):
    """The value of the 0-d tensor s (float32 or float64)."""
    if meta_of(C)[s, M_DTYPE] == F32:
        return float(f32_at(data_addr(C, s), 1)[0])
    return f64_at(data_addr(C, s), 1)[0]


@jit
def _set(C, s, v):
    """Store v into the 0-d tensor s, rounded to its dtype; returns the stored value."""
    if meta_of(C)[s, M_DTYPE] == F32:
        a = f32_at(data_addr(C, s), 1)
        a[0] = np.float32(v)
        bump_version(C, s)
        return float(a[0])
    a64 = f64_at(data_addr(C, s), 1)
    a64[0] = v
    bump_version(C, s)
    return v


@jit
def _is32(C, ids, i):
    return meta_of(C)[ids[i, P_ID], M_DTYPE] == F32


# ---------------------------------------------------------------- NAdam
@jit
def _nadam(P, G, EA, EAS, w1, b2, w2, bc2, eps, wd, decoupled, decay, c1, c2, maximize,
           one):
    for j in range(P.shape[0]):
        g = -G[j] if maximize else G[j]
        p = P[j]
        if wd != 0:
            if decoupled:
                p = p * decay
            else:
                g = _fma(wd, p, g)
        ea = _lerp(EA[j], g, w1, one)
        eas = _fma(w2 * g, g, EAS[j] * b2)
        EA[j] = ea
        EAS[j] = eas
        denom = np.sqrt(eas / bc2) + eps
        p = p + c1 * g / denom
        P[j] = p + c2 * ea / denom


@jit
def nadam_step(caddr, ids, h):
    """h: lr, beta1, beta2, eps, weight_decay, momentum_decay, decoupled, maximize.
    Buffers: exp_avg, exp_avg_sq, mu_product (0-d)."""
    C = ctx_of(caddr)
    if _check(C, ids) < 0:
        return E_LAYOUT
    if not (_require(ids, B1, True) and _require(ids, B2, True) and _require(ids, B3, True)
            and _require(ids, STEP, True)):
        return E_STATE
    M = meta_of(C)
    lr, b1, b2, eps, wd, md = h[0], h[1], h[2], h[3], h[4], h[5]
    decoupled, maximize = h[6] != 0, h[7] != 0
    for i in range(ids.shape[0]):
        n = M[ids[i, P_ID], M_NUMEL]
        step = _step_value(C, ids, i)
        bc2 = 1 - b2 ** step
        mu = b1 * (1.0 - 0.5 * 0.96 ** (step * md))
        mu_next = b1 * (1.0 - 0.5 * 0.96 ** ((step + 1) * md))
        s = ids[i, B3]
        if M[s, M_DTYPE] == F32:            # (mu_product *= mu, in its dtype)
            mp = _set(C, s, float(np.float32(_get(C, s)) * np.float32(mu)))
        else:
            mp = _set(C, s, _get(C, s) * mu)
        c1 = -lr * (1.0 - mu) / (1.0 - mp)
        c2 = (-lr * mu_next) / (1.0 - mp * mu_next)
        decay = 1 - lr * wd
        if _is32(C, ids, i):
            P, G, EA, EAS = _two32(C, ids, i, n)
            f = np.float32
            _nadam(P, G, EA, EAS, f(1 - b1), f(b2), f(1 - b2), f(bc2), f(eps), f(wd),
                   decoupled, f(decay), f(c1), f(c2), maximize, f(1))
        else:
            P64, G64, EA64, EAS64 = _two64(C, ids, i, n)
            _nadam(P64, G64, EA64, EAS64, 1 - b1, b2, 1 - b2, bc2, eps, wd, decoupled, decay,
                   c1, c2, maximize, 1.0)
        _bump(C, ids, i)
    return 0


# ---------------------------------------------------------------- RAdam
@jit
def _radam(P, G, EA, EAS, w1, b2, w2, bc1, eps, wd, decoupled, decay, lr, bc2_sqrt, rect,
           rectified, maximize, one):
    for j in range(P.shape[0]):
        g = -G[j] if maximize else G[j]
        p = P[j]
        if wd != 0:
            if decoupled:
                p = p * decay
            else:
                g = _fma(wd, p, g)
        ea = _lerp(EA[j], g, w1, one)
        eas = _fma(w2 * g, g, EAS[j] * b2)
        EA[j] = ea
        EAS[j] = eas
        u = ea / bc1 * lr
        if rectified:
            u = u * (bc2_sqrt / (np.sqrt(eas) + eps)) * rect
        P[j] = p - u


@jit
def radam_step(caddr, ids, h):
    """h: lr, beta1, beta2, eps, weight_decay, decoupled, maximize.
    Buffers: exp_avg, exp_avg_sq."""
    C = ctx_of(caddr)
    if _check(C, ids) < 0:
        return E_LAYOUT
    if not (_require(ids, B1, True) and _require(ids, B2, True) and _require(ids, STEP, True)):
        return E_STATE
    M = meta_of(C)
    lr, b1, b2, eps, wd = h[0], h[1], h[2], h[3], h[4]
    decoupled, maximize = h[5] != 0, h[6] != 0
    for i in range(ids.shape[0]):
        n = M[ids[i, P_ID], M_NUMEL]
        step = _step_value(C, ids, i)
        bc1 = 1 - b1 ** step
        bc2 = 1 - b2 ** step
        rho_inf = 2 / (1 - b2) - 1
        rho_t = rho_inf - 2 * step * (b2 ** step) / bc2
        rectified = rho_t > 5.0
        rect = 0.0
        if rectified:
            rect = ((rho_t - 4) * (rho_t - 2) * rho_inf
                    / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
        decay = 1 - lr * wd
        if _is32(C, ids, i):
            P, G, EA, EAS = _two32(C, ids, i, n)
            f = np.float32
            _radam(P, G, EA, EAS, f(1 - b1), f(b2), f(1 - b2), f(bc1), f(eps), f(wd),
                   decoupled, f(decay), f(lr), f(bc2 ** 0.5), f(rect), rectified, maximize, f(1))
        else:
            P64, G64, EA64, EAS64 = _two64(C, ids, i, n)
            _radam(P64, G64, EA64, EAS64, 1 - b1, b2, 1 - b2, bc1, eps, wd, decoupled, decay,
                   lr, bc2 ** 0.5, rect, rectified, maximize, 1.0)
        _bump(C, ids, i)
    return 0


# ---------------------------------------------------------------- Adamax
@jit
def _adamax(P, G, EA, EI, w1, b2, eps, wd, clr, maximize, one):
    for j in range(P.shape[0]):
        g = -G[j] if maximize else G[j]
        if wd != 0:
            g = _fma(wd, P[j], g)
        ea = _lerp(EA[j], g, w1, one)
        EA[j] = ea
        a = EI[j] * b2
        b = abs(g) + eps
        ei = a if a > b or a != a else b        # (torch.maximum propagates NaN)
        EI[j] = ei
        P[j] = P[j] + clr * ea / ei


@jit
def adamax_step(caddr, ids, h):
    """h: lr, beta1, beta2, eps, weight_decay, maximize. Buffers: exp_avg, exp_inf."""
    C = ctx_of(caddr)
    if _check(C, ids) < 0:
        return E_LAYOUT
    if not (_require(ids, B1, True) and _require(ids, B2, True) and _require(ids, STEP, True)):
        return E_STATE
    M = meta_of(C)
    lr, b1, b2, eps, wd, maximize = h[0], h[1], h[2], h[3], h[4], h[5] != 0
    for i in range(ids.shape[0]):
        n = M[ids[i, P_ID], M_NUMEL]
        step = _step_value(C, ids, i)
        clr = lr / (1 - b1 ** step)
        if _is32(C, ids, i):
            P, G, EA, EI = _two32(C, ids, i, n)
            f = np.float32
            _adamax(P, G, EA, EI, f(1 - b1), f(b2), f(eps), f(wd), f(-clr), maximize, f(1))
        else:
            P64, G64, EA64, EI64 = _two64(C, ids, i, n)
            _adamax(P64, G64, EA64, EI64, 1 - b1, b2, eps, wd, -clr, maximize, 1.0)
        _bump(C, ids, i)
    return 0


# ---------------------------------------------------------------- Adadelta
@jit
def _adadelta(P, G, SA, AD, rho, w, eps, wd, nlr, maximize):
    for j in range(P.shape[0]):
        g = -G[j] if maximize else G[j]
        if wd != 0:
            g = _fma(wd, P[j], g)
        sa = _fma(w * g, g, SA[j] * rho)
        SA[j] = sa
        std = np.sqrt(sa + eps)
        delta = np.sqrt(AD[j] + eps) / std * g
        AD[j] = _fma(w * delta, delta, AD[j] * rho)
        P[j] = _fma(nlr, delta, P[j])


@jit
def adadelta_step(caddr, ids, h):
    """h: lr, rho, eps, weight_decay, maximize. Buffers: square_avg, acc_delta."""
    C = ctx_of(caddr)
    if _check(C, ids) < 0:
        return E_LAYOUT
    if not (_require(ids, B1, True) and _require(ids, B2, True) and _require(ids, STEP, True)):
        return E_STATE
    M = meta_of(C)
    lr, rho, eps, wd, maximize = h[0], h[1], h[2], h[3], h[4] != 0
    for i in range(ids.shape[0]):
        n = M[ids[i, P_ID], M_NUMEL]
        _step_value(C, ids, i)
        if _is32(C, ids, i):
            P, G, SA, AD = _two32(C, ids, i, n)
            f = np.float32
            _adadelta(P, G, SA, AD, f(rho), f(1 - rho), f(eps), f(wd), f(-lr), maximize)
        else:
            P64, G64, SA64, AD64 = _two64(C, ids, i, n)
            _adadelta(P64, G64, SA64, AD64, rho, 1 - rho, eps, wd, -lr, maximize)
        _bump(C, ids, i)
    return 0


# ---------------------------------------------------------------- Rprop
@jit
def _rprop(P, G, PREV, SS, etaminus, etaplus, lo, hi, maximize, zero, one):
    for j in range(P.shape[0]):
        g = -G[j] if maximize else G[j]
        s = g * PREV[j]
        if s > 0:
            f = etaplus
        elif s < 0:
            f = etaminus
        elif s == 0:
            f = one
        else:
            f = s                   # (NaN stays NaN, as PyTorch's masked writes leave it)
        ss = SS[j] * f
        ss = min(max(ss, lo), hi) if ss == ss else ss
        SS[j] = ss
        if f == etaminus:
            g = zero
        sg = one if g > 0 else (-one if g < 0 else (zero if g == 0 else g))
        P[j] = P[j] + (-sg) * ss
        PREV[j] = g


@jit
def rprop_step(caddr, ids, h):
    """h: etaminus, etaplus, step_size_min, step_size_max, maximize. Buffers: prev,
    step_size."""
    C = ctx_of(caddr)
    if _check(C, ids) < 0:
        return E_LAYOUT
    if not (_require(ids, B1, True) and _require(ids, B2, True) and _require(ids, STEP, True)):
        return E_STATE
    M = meta_of(C)
    em, ep, lo, hi, maximize = h[0], h[1], h[2], h[3], h[4] != 0
    for i in range(ids.shape[0]):
        n = M[ids[i, P_ID], M_NUMEL]
        _step_value(C, ids, i)
        if _is32(C, ids, i):
            P, G, PV, SS = _two32(C, ids, i, n)
            f = np.float32
            _rprop(P, G, PV, SS, f(em), f(ep), f(lo), f(hi), maximize, f(0), f(1))
        else:
            P64, G64, PV64, SS64 = _two64(C, ids, i, n)
            _rprop(P64, G64, PV64, SS64, em, ep, lo, hi, maximize, 0.0, 1.0)
        _bump(C, ids, i)
    return 0


# ---------------------------------------------------------------- ASGD
@jit
def _asgd(P, G, AX, decay, neta, wd, mu, average, maximize):
    for j in range(P.shape[0]):
        g = -G[j] if maximize else G[j]
        p = P[j]
        if wd != 0:
            g = _fma(wd, p, g)
        p = p * decay
        p = _fma(neta, g, p)
        P[j] = p
        if average:
            AX[j] = AX[j] + (p - AX[j]) * mu
        else:
            AX[j] = p


@jit
def asgd_step(caddr, ids, h):
    """h: lr, lambd, alpha, t0, weight_decay, maximize, whether the default dtype is
    float32. Buffers: ax, eta (0-d), mu (0-d)."""
    C = ctx_of(caddr)
    if _check(C, ids) < 0:
        return E_LAYOUT
    if not (_require(ids, B1, True) and _require(ids, B2, True) and _require(ids, B3, True)
            and _require(ids, STEP, True)):
        return E_STATE
    M = meta_of(C)
    lr, lambd, alpha, t0, wd, maximize = h[0], h[1], h[2], h[3], h[4], h[5] != 0
    for i in range(ids.shape[0]):
        n = M[ids[i, P_ID], M_NUMEL]
        step = _step_value(C, ids, i)
        eta = _get(C, ids[i, B2])
        mu = _get(C, ids[i, B3])
        if _is32(C, ids, i):
            P, G, AX, _ = _two32(C, ids, i, n)
            f = np.float32
            _asgd(P, G, AX, f(1 - lambd * eta), f(-eta), f(wd), f(mu), mu != 1, maximize)
        else:
            P64, G64, AX64, _ = _two64(C, ids, i, n)
            _asgd(P64, G64, AX64, 1 - lambd * eta, -eta, wd, mu, mu != 1, maximize)
        new_eta = lr / ((1 + lambd * lr * step) ** alpha)
        new_mu = 1 / max(1.0, step - t0)
        if h[6] != 0:       # (PyTorch makes them tensors of the default dtype first)
            new_eta, new_mu = float(np.float32(new_eta)), float(np.float32(new_mu))
        _set(C, ids[i, B2], new_eta)
        _set(C, ids[i, B3], new_mu)
        _bump(C, ids, i)
    return 0


# ---------------------------------------------------------------- native entries
@jit_entry
def nadam_native(caddr, ids_addr, n, h_addr):
    """NAdam's update of one param group (the ids table and hyper-parameters by
    address); 0, or a negative E_* code."""
    ids, h = _tables(ids_addr, n, h_addr)
    return nadam_step(caddr, ids, h)


@jit_entry
def radam_native(caddr, ids_addr, n, h_addr):
    """RAdam's update of one param group (the ids table and hyper-parameters by
    address); 0, or a negative E_* code."""
    ids, h = _tables(ids_addr, n, h_addr)
    return radam_step(caddr, ids, h)


@jit_entry
def adamax_native(caddr, ids_addr, n, h_addr):
    """Adamax's update of one param group (the ids table and hyper-parameters by
    address); 0, or a negative E_* code."""
    ids, h = _tables(ids_addr, n, h_addr)
    return adamax_step(caddr, ids, h)


@jit_entry
def adadelta_native(caddr, ids_addr, n, h_addr):
    """Adadelta's update of one param group (the ids table and hyper-parameters by
    address); 0, or a negative E_* code."""
    ids, h = _tables(ids_addr, n, h_addr)
    return adadelta_step(caddr, ids, h)


@jit_entry
def rprop_native(caddr, ids_addr, n, h_addr):
    """Rprop's update of one param group (the ids table and hyper-parameters by
    address); 0, or a negative E_* code."""
    ids, h = _tables(ids_addr, n, h_addr)
    return rprop_step(caddr, ids, h)


@jit_entry
def asgd_native(caddr, ids_addr, n, h_addr):
    """ASGD's update of one param group (the ids table and hyper-parameters by
    address); 0, or a negative E_* code."""
    ids, h = _tables(ids_addr, n, h_addr)
    return asgd_step(caddr, ids, h)
