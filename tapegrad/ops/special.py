"""Special functions: lgamma, digamma, erfinv, elementwise.

Their formulas need loops and branches the generated elementwise kernels cannot hold (and
helpers the code generator does not import), so they are one custom op each, sharing one
pair of kernels (attribute kind). Values follow PyTorch's CPU definitions, implemented
from the mathematics: lgamma is libm's; digamma is the reflection x < 0, the recurrence
psi(x) = psi(x + 1) - 1/x up to x >= 10, then the asymptotic series (its value at 10
exact); trigamma (digamma's derivative) the same way with six recurrence steps; erfinv a
rational first guess (central range |y| <= 0.7, a tail in sqrt(-log((1 - |y|) / 2)))
refined by two Newton steps on erf. Computed in float64 and rounded to the operand's
dtype (PyTorch computes float32 in float32: they agree to about an ulp of float32).
"""
import math

import numpy as np

from .._engine.core import data_addr, meta_contiguous, set_outputs1
from .._engine.layout import E_DTYPE, F32, F64, IN_SAVED, K_OK, M_NUMEL, R_IATTR, R_IN
from .._engine.lowlevel import ctx_of, jit, jit_entry, meta_of, tape_of
from .along import (
    _accumulate,
    _backward_start,
    _input_lines,
    _prologue,
    _saved_values,
    _write,
)
from .opinfo import T, uniform
from .registry import OpDef, register, samples

_M = __name__

_PSI_10 = 2.25175258906672110764      # digamma(10)
# the asymptotic series of digamma: B_2k / (2k) for k = 7 .. 1, highest power first
_PSI_A = (8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
          -4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
          8.33333333333333333333E-2)
_ERFINV_A = (0.886226899, -1.645349621, 0.914624893, -0.140543331)
_ERFINV_B = (-2.118377725, 1.442710462, -0.329097515, 0.012229801)
_ERFINV_C = (-1.970840454, -1.624906493, 3.429567803, 1.641345311)
_ERFINV_D = (3.543889200, 1.637067800)


@jit
def _digamma(x):
    if x == 0.0:
        return math.copysign(np.inf, -x)
    result = 0.0
    if x < 0.0:
        if x == math.trunc(x):
            return np.nan
        r = x - math.trunc(x)
        result = -math.pi / math.tan(math.pi * r)
        x = 1.0 - x
    while x < 10.0:
        result -= 1.0 / x
        x += 1.0
    if x == 10.0:
        return result + _PSI_10
    y = 0.0
    if x < 1.0e17:
        z = 1.0 / (x * x)
        p = 0.0
        for c in _PSI_A:
            p = p * z + c
        y = z * p
    return result + math.log(x) - 0.5 / x - y


@jit
def _trigamma(x):
    sign = 1.0
    result = 0.0
    if x < 0.5:
        sign = -1.0
        s = math.sin(math.pi * x)
        result -= (math.pi * math.pi) / (s * s)
        x = 1.0 - x
    for _ in range(6):
        result += 1.0 / (x * x)
        x += 1.0
    ixx = 1.0 / (x * x)
    result += (1.0 + 1.0 / (2.0 * x) + ixx * (1.0 / 6.0 - ixx * (1.0 / 30.0 - ixx * (1.0 / 42.0)))) / x
    return sign * result


_MACHEP = 1.11022302462515654042e-16
# Euler-Maclaurin coefficients of the Hurwitz zeta: (2k)! / B_2k
_ZETA_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
           7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
           -4.5979787224074726105e15, 1.8152105401943546773e17, -7.1661652561756670113e18)


@jit
def _zeta(x, q):
    """The Hurwitz zeta sum_k (k + q)^-x: a direct sum up to q + 9 or more, then the
    Euler-Maclaurin tail."""
    if x == 1.0:
        return np.inf
    if x < 1.0:
        return np.nan
    if q <= 0.0:
        if q == math.floor(q):
            return np.inf
        if x != math.floor(x):
            return np.nan
    s = q ** -x
    a = q
    i = 0
    b = 0.0
    while i < 9 or a <= 9.0:
        i += 1
        a += 1.0
        b = a ** -x
        s += b
        if abs(b / s) < _MACHEP:
            return s
    w = a
    s += b * w / (x - 1.0)
    s -= 0.5 * b
    a = 1.0
    k = 0.0
    for c in _ZETA_A:
        a *= x + k
        b /= w
        t = a * b / c
        s = s + t
        if abs(t / s) < _MACHEP:
            return s
        k += 1.0
        a *= x + k
        b /= w
        k += 1.0
    return s


@jit
def _polygamma(n, x):
    if n == 0:
        return _digamma(x)
    if n == 1:
        return _trigamma(x)
    sign = 1.0 if n % 2 == 1 else -1.0
    return sign * math.exp(math.lgamma(n + 1.0)) * _zeta(n + 1.0, x)


@jit
def _erfinv(y):
    ay = abs(y)
    if ay > 1.0:
        return np.nan
    if ay == 1.0:
        return math.copysign(np.inf, y)
    a, b, c, d = _ERFINV_A, _ERFINV_B, _ERFINV_C, _ERFINV_D
    if ay <= 0.7:
        z = y * y
        num = ((a[3] * z + a[2]) * z + a[1]) * z + a[0]
        dem = (((b[3] * z + b[2]) * z + b[1]) * z + b[0]) * z + 1.0
        x = y * num / dem
    else:
        z = math.sqrt(-math.log((1.0 - ay) / 2.0))
        num = ((c[3] * z + c[2]) * z + c[1]) * z + c[0]
        dem = (d[1] * z + d[0]) * z + 1.0
        x = math.copysign(num, y) / dem
    k = 2.0 / math.sqrt(math.pi)
    x = x - (math.erf(x) - y) / (k * math.exp(-x * x))
    x = x - (math.erf(x) - y) / (k * math.exp(-x * x))
    return x


@jit
def _values(X, V, kind, n):
    for i in range(X.shape[0]):
        x = X[i]
        if kind == 0:
            V[i] = math.lgamma(x) if x == x else x
        elif kind == 1:
            V[i] = _digamma(x) if x == x else x
        elif kind == 2:
            V[i] = _erfinv(x) if x == x else x
        else:
            V[i] = _polygamma(n, x) if x == x else x


@jit
def _grads(X, G, GA, kind, n):
    for i in range(X.shape[0]):
        x = X[i]
        if kind == 0:
            GA[i] = G[i] * _digamma(x)
        elif kind == 1:
            GA[i] = G[i] * _trigamma(x)
        elif kind == 2:
            e = _erfinv(x)
            GA[i] = 0.5 * math.sqrt(math.pi) * math.exp(e * e) * G[i]
        else:
            GA[i] = G[i] * _polygamma(n + 1, x)


def special_fwd(caddr, row):
    C = ctx_of(caddr)
    a, dt, dim, keep, shape = _prologue(C, row)
    if dt != F32 and dt != F64:
        return E_DTYPE
    X, b, step, m = _input_lines(C, a, -1)
    out = meta_contiguous(C, dt, shape.shape[0], shape, False)
    if out < 0:
        return out
    V = np.empty(meta_of(C)[out, M_NUMEL], np.float64)
    _values(X[:V.shape[0]], V, tape_of(C)[row, R_IATTR + 2], tape_of(C)[row, R_IATTR + 3])
    _write(C, dt, data_addr(C, out), V)
    return set_outputs1(C, out)


def special_bwd(caddr, row):
    C = ctx_of(caddr)
    T_ = tape_of(C)
    ga, shape, b, step, m, dt, G, GA = _backward_start(C, row)
    if ga == 0:
        return K_OK
    X, xb, xstep, xm = _saved_values(C, T_[row, R_IN + IN_SAVED], -1)
    _grads(X[:G.shape[0]], G, GA, T_[row, R_IATTR + 2], T_[row, R_IATTR + 3])
    _accumulate(dt, ga, GA)
    return K_OK


# dim -1 (the whole tensor); kind 0 lgamma, 1 digamma, 2 erfinv, 3 polygamma of order n
_ATTRS = ("dim", "keepdim", "kind", "n")
for _name, _grad_fn in (("lgamma", "LgammaBackward0"), ("digamma", "DigammaBackward0"),
                        ("erfinv", "ErfinvBackward0"), ("polygamma", "PolygammaBackward0")):
    register(OpDef(_name, _grad_fn, "custom", module=_M, fwd_fn="special_fwd",
                   bwd_fn="special_bwd", nin=1, diff=(0,), saves_if={0: ("a",)},
                   attrs=_ATTRS))
del _name, _grad_fn
samples("lgamma", "x.lgamma()", "L.lgamma(x)", "x.t().lgamma()", "x.clone().lgamma_()",
        x=T(3, 4, domain=uniform(0.1, 0.9)))
samples("digamma", "x.digamma()", "L.digamma(x)", "x.t().digamma()", "x.clone().digamma_()",
        x=T(3, 4, domain=uniform(2.0, 6.0)))
samples("polygamma", "x.polygamma(2)", "L.polygamma(3, x)", "L.polygamma(1, x.t())",
        "x.clone().polygamma_(2)", x=T(3, 4, domain=uniform(1.0, 4.0)))
samples("erfinv", "x.erfinv()", "L.erfinv(x)", "x.t().erfinv()", "x.clone().erfinv_()",
        x=T(3, 4, domain=uniform(-0.9, 0.9)))


# ---------------------------------------------------------------- kthvalue's selection
# (a helper of the kthvalue front, not an op: the position PyTorch's CPU kthvalue picks
# among equal values is that of its quickselect, Sedgewick's median-of-three partitioning
# with NaN as the largest value, so it is run as such)
@jit
def _gt_or_nan(x, y):
    return (x != x and y == y) or x > y


@jit_entry
def kth_lines(V, K, out):
    """out[l] = the index along line l of V (a 2-d array, one line per row) of the element
    PyTorch's quickselect leaves at position K[l]."""
    nl, n = V.shape
    arr = np.empty(n, V.dtype)
    idx = np.empty(n, np.int64)
    for li in range(nl):
        k = K[li]
        for j in range(n):
            arr[j] = V[li, j]
            idx[j] = j
        lo = 0
        hi = n - 1
        while hi > lo:
            if hi == lo + 1:
                if _gt_or_nan(arr[lo], arr[hi]):
                    arr[lo], arr[hi] = arr[hi], arr[lo]
                    idx[lo], idx[hi] = idx[hi], idx[lo]
                break
            p = (lo + hi) >> 1
            arr[p], arr[lo + 1] = arr[lo + 1], arr[p]
            idx[p], idx[lo + 1] = idx[lo + 1], idx[p]
            if _gt_or_nan(arr[lo + 1], arr[hi]):
                arr[lo + 1], arr[hi] = arr[hi], arr[lo + 1]
                idx[lo + 1], idx[hi] = idx[hi], idx[lo + 1]
            if _gt_or_nan(arr[lo], arr[hi]):
                arr[lo], arr[hi] = arr[hi], arr[lo]
                idx[lo], idx[hi] = idx[hi], idx[lo]
            if _gt_or_nan(arr[lo + 1], arr[lo]):
                arr[lo + 1], arr[lo] = arr[lo], arr[lo + 1]
                idx[lo + 1], idx[lo] = idx[lo], idx[lo + 1]
            i = lo + 1
            j = hi
            piv = arr[lo]
            while True:
                i += 1
                while _gt_or_nan(piv, arr[i]):
                    i += 1
                j -= 1
                while _gt_or_nan(arr[j], piv):
                    j -= 1
                if j < i:
                    break
                arr[i], arr[j] = arr[j], arr[i]
                idx[i], idx[j] = idx[j], idx[i]
            arr[lo], arr[j] = arr[j], arr[lo]
            idx[lo], idx[j] = idx[j], idx[lo]
            if j <= k:
                lo = i
            if j >= k:
                hi = j - 1
        out[li] = idx[k]


# ---------------------------------------------------------------- cummax / cummin's indices
@jit_entry
def cum_extreme_lines(V, largest, out):
    """out[l, j] = the index of the running maximum (largest) or minimum of line l of V up
    to j, as PyTorch's: the last of equal values, and the first NaN once one is met."""
    nl, n = V.shape
    for li in range(nl):
        if n == 0:
            continue
        best = V[li, 0]
        cur = 0
        out[li, 0] = 0
        for j in range(1, n):
            v = V[li, j]
            if best == best and (v != v or (v >= best if largest else v <= best)):
                best = v
                cur = j
            out[li, j] = cur
