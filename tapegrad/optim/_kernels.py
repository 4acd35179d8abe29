"""The optimizers' updates: one compiled call updates every parameter of a group.

A call gets the engine's ctx, a table of ids (one row per parameter whose grad is set:
parameter, state buffers, the 0-d step counter, a flag for buffers created this step)
and the group's hyper-parameters. Gradients are found through the parameter's .grad slot.
Arithmetic follows PyTorch's single-tensor CPU implementations op by op, in the
parameter's dtype (scalars rounded to it), with a fused multiply-add where PyTorch's CPU
kernels use one (add with alpha, addcmul, lerp; not addcdiv), so trajectories match
PyTorch's to the last bit but for its sqrt (MKL's, not always correctly rounded).
"""
import numpy as np
from numba import types
from numba.core.extending import intrinsic

from .._engine.layout import F32, M_GRAD, M_NUMEL, M_DTYPE
from .._engine.lowlevel import (jit, jit_entry, ctx_of, meta_of, f32_at, f64_at, i64_at,
                                call_native_i4)
from .._engine.core import data_addr, bump_version, is_contiguous

P_ID, B1, B2, B3, STEP, NEW = 0, 1, 2, 3, 4, 5      # columns of the ids table
NCOL = 6
E_LAYOUT = -1           # a parameter or gradient that is not contiguous
E_STATE = -2            # a state buffer the options need is missing (Python creates them)
E_STALE = -3            # the table no longer matches which parameters have a gradient


@jit
def _arrays32(C, ids, i, n):
    M = meta_of(C)
    p = ids[i, P_ID]
    P = f32_at(data_addr(C, p), n)
    G = f32_at(data_addr(C, M[p, M_GRAD]), n)
    B1_ = f32_at(data_addr(C, ids[i, B1]), n) if ids[i, B1] >= 0 else f32_at(0, 0)
    B2_ = f32_at(data_addr(C, ids[i, B2]), n) if ids[i, B2] >= 0 else f32_at(0, 0)
    B3_ = f32_at(data_addr(C, ids[i, B3]), n) if ids[i, B3] >= 0 else f32_at(0, 0)
    return P, G, B1_, B2_, B3_


@jit
def _arrays64(C, ids, i, n):
    M = meta_of(C)
    p = ids[i, P_ID]
    P = f64_at(data_addr(C, p), n)
    G = f64_at(data_addr(C, M[p, M_GRAD]), n)
    B1_ = f64_at(data_addr(C, ids[i, B1]), n) if ids[i, B1] >= 0 else f64_at(0, 0)
    B2_ = f64_at(data_addr(C, ids[i, B2]), n) if ids[i, B2] >= 0 else f64_at(0, 0)
    B3_ = f64_at(data_addr(C, ids[i, B3]), n) if ids[i, B3] >= 0 else f64_at(0, 0)
    return P, G, B1_, B2_, B3_


@jit
def _step_value(C, ids, i):
    """Increment the parameter's step counter (a 0-d tensor, as PyTorch keeps it) and
    return the new value."""
    s = ids[i, STEP]
    if s < 0:
        return 0.0
    if meta_of(C)[s, M_DTYPE] == F32:
        a = f32_at(data_addr(C, s), 1)
        a[0] += np.float32(1.0)
        bump_version(C, s)
        return float(a[0])
    a64 = f64_at(data_addr(C, s), 1)
    a64[0] += 1.0
    bump_version(C, s)
    return a64[0]


@jit
def _check(C, ids):
    M = meta_of(C)
    for i in range(ids.shape[0]):
        p = ids[i, P_ID]
        if not is_contiguous(M, p) or not is_contiguous(M, M[p, M_GRAD]):
            return E_LAYOUT
    return 0


@jit
def _require(ids, col, needed):
    """Whether every row has the buffer in column col when needed."""
    if not needed:
        return True
    for i in range(ids.shape[0]):
        if ids[i, col] < 0:
            return False
    return True


@intrinsic
def _fma(typingctx, a, b, c):
    """a * b + c rounded once (llvm.fma), in the arguments' float type."""
    if not (isinstance(a, types.Float) and a == b == c):
        return None

    def codegen(context, builder, signature, args):
        return builder.fma(*args)
    return a(a, b, c), codegen


@jit
def _lerp(a, b, w, one):
    """PyTorch's lerp (a + w (b - a), or b - (b - a)(1 - w) for |w| >= 0.5, fused)."""
    if abs(w) < 0.5:
        return _fma(w, b - a, a)
    return _fma(a - b, one - w, b)


@jit
def _bump(C, ids, i):
    for k in (P_ID, B1, B2, B3):
        if ids[i, k] >= 0:
            bump_version(C, ids[i, k])


# ---------------------------------------------------------------- SGD
@jit
def _sgd(P, G, B, new, lr, momentum, keep, wd, nesterov, maximize):
    """keep = 1 - dampening (PyTorch's alpha, computed in double, then rounded)."""
    for j in range(P.shape[0]):
        g = -G[j] if maximize else G[j]
        if wd != 0:
            g = _fma(wd, P[j], g)
        if momentum != 0:
            if new:
                B[j] = g
            else:
                B[j] = _fma(keep, g, B[j] * momentum)
            g = _fma(momentum, B[j], g) if nesterov else B[j]
        P[j] = _fma(-lr, g, P[j])


@jit
def sgd_step(caddr, ids, h):
    """h: lr, momentum, dampening, weight_decay, nesterov, maximize."""
    C = ctx_of(caddr)
    if _check(C, ids) < 0:
        return E_LAYOUT
    if not _require(ids, B1, h[1] != 0):
        return E_STATE
    M = meta_of(C)
    for i in range(ids.shape[0]):
        p = ids[i, P_ID]
        n = M[p, M_NUMEL]
        new = ids[i, NEW] != 0
        if M[p, M_DTYPE] == F32:
            P, G, B, _, _ = _arrays32(C, ids, i, n)
            f = np.float32
            _sgd(P, G, B, new, f(h[0]), f(h[1]), f(1 - h[2]), f(h[3]), h[4] != 0, h[5] != 0)
        else:
            P64, G64, B64, _, _ = _arrays64(C, ids, i, n)
            _sgd(P64, G64, B64, new, h[0], h[1], 1 - h[2], h[3], h[4] != 0, h[5] != 0)
        _bump(C, ids, i)
    return 0


# ---------------------------------------------------------------- Adam / AdamW
@jit
def _adam(P, G, EA, EAS, MX, w1, b2, w2, eps, wd, amsgrad, maximize, decoupled, step_size,
          bc2_sqrt, decay, one):
    """w1 = 1 - beta1, w2 = 1 - beta2 (in double, then rounded, as PyTorch's scalars).
    Each element's values stay in locals, stored once: with AdamW's decay stored into P[j]
    under its flag (and the moments read back from memory), plain Adam's loop did not
    vectorise (it took about twice as long; this way it is on par with PyTorch's fused
    Adam). The lerp's branch is chosen before the loop: chosen inside it (through
    _lerp), the loop ran 25 times slower for beta1 >= 0.5."""
    small = abs(w1) < 0.5
    for j in range(P.shape[0]):
        g = -G[j] if maximize else G[j]
        p = P[j]
        if decoupled:
            p = p * decay
        elif wd != 0:
            g = _fma(wd, p, g)
        if small:           # (PyTorch's lerp; the branch chosen outside the loop)
            ea = _fma(w1, g - EA[j], EA[j])
        else:
            ea = _fma(EA[j] - g, one - w1, g)
        eas = _fma(w2 * g, g, EAS[j] * b2)
        EA[j] = ea
        EAS[j] = eas
        if amsgrad:
            MX[j] = max(MX[j], eas)
            denom = np.sqrt(MX[j]) / bc2_sqrt + eps
        else:
            denom = np.sqrt(eas) / bc2_sqrt + eps
        P[j] = p + (-step_size) * ea / denom


@jit
def adam_step(caddr, ids, h):
    """h: lr, beta1, beta2, eps, weight_decay, amsgrad, maximize, decoupled (AdamW)."""
    C = ctx_of(caddr)
    if _check(C, ids) < 0:
        return E_LAYOUT
    if not (_require(ids, B1, True) and _require(ids, B2, True) and _require(ids, B3, h[5] != 0)
            and _require(ids, STEP, True)):
        return E_STATE
    M = meta_of(C)
    lr, b1, b2, eps, wd = h[0], h[1], h[2], h[3], h[4]
    amsgrad, maximize, decoupled = h[5] != 0, h[6] != 0, h[7] != 0
    for i in range(ids.shape[0]):
        p = ids[i, P_ID]
        n = M[p, M_NUMEL]
        step = _step_value(C, ids, i)
        step_size = lr / (1 - b1 ** step)
        bc2_sqrt = (1 - b2 ** step) ** 0.5
        decay = 1 - lr * wd
        if M[p, M_DTYPE] == F32:
            P, G, EA, EAS, MX = _arrays32(C, ids, i, n)
            f = np.float32
            _adam(P, G, EA, EAS, MX, f(1 - b1), f(b2), f(1 - b2), f(eps), f(wd), amsgrad,
                  maximize, decoupled, f(step_size), f(bc2_sqrt), f(decay), f(1))
        else:
            P64, G64, EA64, EAS64, MX64 = _arrays64(C, ids, i, n)
            _adam(P64, G64, EA64, EAS64, MX64, 1 - b1, b2, 1 - b2, eps, wd, amsgrad, maximize,
                  decoupled, step_size, bc2_sqrt, decay, 1.0)
        _bump(C, ids, i)
    return 0


# ---------------------------------------------------------------- RMSprop
@jit
def _rmsprop(P, G, SA, GA, B, lr, alpha, w, eps, wd, momentum, centered, maximize, minus):
    """w = 1 - alpha, minus = -1, in the parameter's dtype."""
    for j in range(P.shape[0]):
        g = -G[j] if maximize else G[j]
        if wd != 0:
            g = _fma(wd, P[j], g)
        SA[j] = _fma(w * g, g, SA[j] * alpha)
        if centered:
            GA[j] = _lerp(GA[j], g, w, -minus)
            avg = np.sqrt(_fma(minus * GA[j], GA[j], SA[j]))
        else:
            avg = np.sqrt(SA[j])
        avg = avg + eps
        if momentum > 0:
            B[j] = B[j] * momentum + g / avg
            P[j] = _fma(-lr, B[j], P[j])
        else:
            P[j] = P[j] + (-lr) * g / avg


@jit
def rmsprop_step(caddr, ids, h):
    """h: lr, alpha, eps, weight_decay, momentum, centered, maximize. Buffers: square_avg,
    grad_avg, momentum_buffer."""
    C = ctx_of(caddr)
    if _check(C, ids) < 0:
        return E_LAYOUT
    if not (_require(ids, B1, True) and _require(ids, B2, h[5] != 0)
            and _require(ids, B3, h[4] > 0)):
        return E_STATE
    M = meta_of(C)
    for i in range(ids.shape[0]):
        p = ids[i, P_ID]
        n = M[p, M_NUMEL]
        _step_value(C, ids, i)
        if M[p, M_DTYPE] == F32:
            P, G, SA, GA, B = _arrays32(C, ids, i, n)
            f = np.float32
            _rmsprop(P, G, SA, GA, B, f(h[0]), f(h[1]), f(1 - h[1]), f(h[2]), f(h[3]), f(h[4]),
                     h[5] != 0, h[6] != 0, f(-1))
        else:
            P64, G64, SA64, GA64, B64 = _arrays64(C, ids, i, n)
            _rmsprop(P64, G64, SA64, GA64, B64, h[0], h[1], 1 - h[1], h[2], h[3], h[4],
                     h[5] != 0, h[6] != 0, -1.0)
        _bump(C, ids, i)
    return 0


# ---------------------------------------------------------------- Adagrad
@jit
def _adagrad(P, G, S, clr, eps, wd, maximize):
    for j in range(P.shape[0]):
        g = -G[j] if maximize else G[j]
        if wd != 0:
            g = _fma(wd, P[j], g)
        S[j] = _fma(g, g, S[j])
        std = np.sqrt(S[j]) + eps
        P[j] = P[j] + (-clr) * g / std


@jit
def adagrad_step(caddr, ids, h):
    """h: lr, lr_decay, weight_decay, eps, maximize. Buffer: sum."""
    C = ctx_of(caddr)
    if _check(C, ids) < 0:
        return E_LAYOUT
    if not (_require(ids, B1, True) and _require(ids, STEP, True)):
        return E_STATE
    M = meta_of(C)
    for i in range(ids.shape[0]):
        p = ids[i, P_ID]
        n = M[p, M_NUMEL]
        step = _step_value(C, ids, i)
        clr = h[0] / (1 + (step - 1) * h[1])
        if M[p, M_DTYPE] == F32:
            P, G, S, _, _ = _arrays32(C, ids, i, n)
            f = np.float32
            _adagrad(P, G, S, f(clr), f(h[3]), f(h[2]), h[4] != 0)
        else:
            P64, G64, S64, _, _ = _arrays64(C, ids, i, n)
            _adagrad(P64, G64, S64, clr, h[3], h[2], h[4] != 0)
        _bump(C, ids, i)
    return 0


# ---------------------------------------------------------------- native entries
# One int-only signature per optimizer: Python calls it through its C entry point and a
# compiled replay through its native address, so each update is compiled once.
NATIVE_SIG = "int64(int64, int64, int64, int64)"
NHYPER = 16             # the hyper-parameter array's length (each kernel reads its own)


@jit
def _tables(ids_addr, n, h_addr):
    return i64_at(ids_addr, n * NCOL).reshape((n, NCOL)), f64_at(h_addr, NHYPER)


@jit_entry
def sgd_native(caddr, ids_addr, n, h_addr):
    ids, h = _tables(ids_addr, n, h_addr)
    return sgd_step(caddr, ids, h)


@jit_entry
def adam_native(caddr, ids_addr, n, h_addr):
    ids, h = _tables(ids_addr, n, h_addr)
    return adam_step(caddr, ids, h)


@jit_entry
def rmsprop_native(caddr, ids_addr, n, h_addr):
    ids, h = _tables(ids_addr, n, h_addr)
    return rmsprop_step(caddr, ids, h)


@jit_entry
def adagrad_native(caddr, ids_addr, n, h_addr):
    ids, h = _tables(ids_addr, n, h_addr)
    return adagrad_step(caddr, ids, h)


@jit
def table_stale(C, ids_addr, n, left_addr, nleft):
    """Whether a parameter of the table lacks a gradient or one it left out has one now
    (then the table must be rebuilt: state may need creating)."""
    M = meta_of(C)
    ids = i64_at(ids_addr, n * NCOL)
    for r in range(n):
        if M[ids[r * NCOL + P_ID], M_GRAD] < 0:
            return True
    left = i64_at(left_addr, nleft)
    for r in range(nleft):
        if M[left[r], M_GRAD] >= 0:
            return True
    return False


@jit_entry
def step_if_current(kernel, caddr, ids_addr, n, h_addr, left_addr, nleft):
    """An optimizer's update (kernel: its native address) with a table Python keeps
    between steps: E_STALE, and nothing changed, when the table no longer fits."""
    if table_stale(ctx_of(caddr), ids_addr, n, left_addr, nleft):
        return E_STALE
    return call_native_i4(kernel, caddr, ids_addr, n, h_addr)


STEP_IF_CURRENT_SIG = "int64(int64, int64, int64, int64, int64, int64, int64)"
