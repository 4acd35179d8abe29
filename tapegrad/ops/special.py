"""Special functions: lgamma, digamma, erfinv, elementwise.

Their formulas need loops and branches the generated elementwise kernels cannot hold (and
helpers the code generator does not import), so they are one custom op each, sharing one
pair of kernels (attribute kind), compiled per dtype. Values follow PyTorch's CPU
definitions, implemented from the mathematics. float64 as PyTorch computes it: digamma
(the reflection x < 0, the recurrence psi(x) = psi(x + 1) - 1/x up to x >= 10, then the
asymptotic series), trigamma (six recurrence steps), lgamma (libm's), erfinv (calc_erfinv:
a rational first guess refined by two Newton steps on erf). float32 lgamma, digamma and
erfinv: evaluated in float64 without branches or libm calls, so their loops vectorise,
and rounded once: correctly rounded (PyTorch's are SLEEF's lgamma and MKL's erfinv,
within an ulp of that, and its float32 digamma, off by its float32 rounding); float32
trigamma in float32 as PyTorch's. polygamma of order >= 2 is computed in float64 and
rounded.
"""
import math

import numpy as np

from .._engine.core import (
    data_addr,
    edge_grad_addr,
    meta_contiguous,
    out_numel,
    row_grad_addr,
    set_outputs1,
)
from .._engine.layout import E_DTYPE, F32, IN_SAVED, K_OK, M_NUMEL, R_IATTR, R_IN
from .._engine.lowlevel import (
    ctx_of,
    f32_at,
    f64_at,
    jit,
    jit_entry,
    jit_inline,
    meta_of,
    tape_of,
)
from ._vmath import (
    _LN2_HI,
    _LN2_LO,
    _MAGIC,
    _MAGIC_BITS,
    _SQRT_HALF_BITS,
    _by_quadrant,
    _f64_as_i64,
    _fma,
    _i64_as_f64,
    _log1p64,
    _reduce_pio2_64,
    _select,
    _sin_cos_poly64,
    exp,
)
from .along import _prologue, _values32, _values64
from .opinfo import T, uniform
from .registry import OpDef, register, samples

_M = __name__
KERNEL_DTYPE = -1       # F32 or F64 in each compiled copy (registry._per_dtype)

_PSI_10 = 2.25175258906672110764      # digamma(10)
# the asymptotic series of digamma: B_2k / (2k) for k = 7 .. 1, highest power first
_PSI_A = (8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
          -4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
          8.33333333333333333333E-2)
_ERFINV_A = (0.886226899, -1.645349621, 0.914624893, -0.140543331)
_ERFINV_B = (-2.118377725, 1.442710462, -0.329097515, 0.012229801)
_ERFINV_C = (-1.970840454, -1.624906493, 3.429567803, 1.641345311)
_ERFINV_D = (3.543889200, 1.637067800)
# float32 erfinv(y) = y * P(t): fits of erfinv(y) / y (Chebyshev, on 500 nodes, against
# mpmath at 40 digits; relative errors below 1e-11, a ten-thousandth of a float32 ulp, so
# the result is erfinv rounded once) in t in [-1, 1] on three pieces: z = y^2 <= 0.49;
# w = -log(1 - y^2) < 5; sqrt(w) in [sqrt 5, 4.1] (|y| <= 1 - 2^-24: every float32 below 1)
_ERFINV_Z = (0.9522911160903408, 0.07721299054526418, 0.013531510308643177,
             0.0029524707261460986, 0.0007151971112941432, 0.00018417545656503618,
             4.9369713344037276e-05, 1.3612161910821608e-05, 3.833190246213427e-06,
             1.1018671596280124e-06, 3.1996955647937973e-07, 8.766432488012782e-08,
             2.557350327676218e-08, 1.168019265303452e-08, 3.597451853140056e-09)
_ERFINV_W = (1.5014093511111337, 0.6166006918277998, -0.026108235821030407,
             -0.019573559821461608, 0.00852540186380849, -0.00048791206838639416,
             -0.000834142907193137, 0.0002922578142577499, 2.0500713676570044e-05,
             -4.160382691103504e-05, 8.59322405666863e-06, 3.09384956037455e-06,
             -1.7855539484477201e-06, -5.006537450379699e-08, 1.6053013770520947e-07)
_ERFINV_S = (3.0015268114640272, 0.9359706743008839, 0.0055620282925591385,
             -0.0037984833441783716, 0.0024791866697427022, -0.0015519422187884131,
             0.0007586231343651484, -0.00021475138464415158, -2.3440686162054773e-05,
             5.998970638847809e-05, -2.859213182526219e-05, 2.023839558861364e-06,
             4.23613422952555e-06, -1.4497551451160953e-06, -3.0846718885632736e-08)
_ERFINV_S_LO = math.sqrt(5.0)
_ERFINV_S_SCALE = 2.0 / (4.1 - math.sqrt(5.0))


@jit_inline
def _digamma_pos(x):
    """digamma for x > 0 (or NaN), in x's dtype: PyTorch's recurrence up to 10 and
    asymptotic series."""
    F = type(x)
    result = F(0.0)
    while x < F(10.0):
        result -= F(1.0) / x
        x += F(1.0)
    if x == F(10.0):
        return result + F(_PSI_10)
    y = F(0.0)
    if x < F(1.0e17):
        z = F(1.0) / (x * x)
        p = F(0.0)
        for c in _PSI_A:
            p = p * z + F(c)
        y = z * p
    return result + F(math.log(x)) - F(0.5) / x - y


@jit
def _digamma(x):
    """digamma in x's dtype as PyTorch's CPU kernel: the reflection for x < 0 (its
    pi / tan(pi r) in float64, r the fractional part), subtracted from digamma(1 - x)."""
    F = type(x)
    if x == F(0.0):
        return F(math.copysign(np.inf, -x))
    if x < F(0.0):
        if x == np.trunc(x):
            return F(np.nan)
        xd = np.float64(x)
        p = F(math.pi / math.tan(math.pi * (xd - np.trunc(xd))))
        return _digamma_pos(F(1.0) - x) - p
    return _digamma_pos(x)


@jit
def _trigamma(x):
    """trigamma in x's dtype, as PyTorch's."""
    F = type(x)
    sign = F(1.0)
    result = F(0.0)
    if x < F(0.5):
        sign = F(-1.0)
        s = F(math.sin(F(math.pi) * x))
        result -= (F(math.pi) * F(math.pi)) / (s * s)
        x = F(1.0) - x
    for _ in range(6):
        result += F(1.0) / (x * x)
        x += F(1.0)
    ixx = F(1.0) / (x * x)
    result += (F(1.0) + F(1.0) / (F(2.0) * x)
               + ixx * (F(1.0 / 6.0) - ixx * (F(1.0 / 30.0) - ixx * F(1.0 / 42.0)))) / x
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


# lgamma(1 + t) = -gamma t + sum_k>=2 (-1)^k zeta(k) / k t^k (|t| < 0.2: 25 terms reach
# 1e-19), and Stirling's series' B_2k / (2k (2k - 1)), k = 1 .. 7 (z >= 10: 3e-17)
_LG_T1 = (0.0, -0.5772156649015329, 0.8224670334241132, -0.40068563438653143, 0.27058080842778454,
          -0.20738555102867398, 0.1695571769974082, -0.1440498967688461, 0.12550966952474304,
          -0.11133426586956469, 0.1000994575127818, -0.09095401714582904, 0.083353840546109,
          -0.0769325164113522, 0.07143294629536133, -0.06666870588242046, 0.06250095514121304,
          -0.058823978658684585, 0.055555767627403614, -0.05263167937961666, 0.05000004769810169,
          -0.047619070330142226, 0.04545455629320467, -0.04347826605304026, 0.04166666915034121,
          -0.04000000119214014)
_LG_ST = (0.08333333333333333, -0.002777777777777778, 0.0007936507936507937,
          -0.0005952380952380953, 0.0008417508417508417, -0.0019175269175269176,
          0.00641025641025641)
_HALF_LOG_2PI = 0.9189385332046728
_LOG_PI = 1.1447298858494002


@jit_inline
def _log64(u):
    """log of a positive normal float64, vectorisable: log1p of its mantissa in
    [sqrt(1/2), sqrt(2)) (exact - 1) plus k ln 2."""
    ix = _f64_as_i64(u) - _SQRT_HALF_BITS
    m = _i64_as_f64((ix & 0x000fffffffffffff) + _SQRT_HALF_BITS)
    kf = _i64_as_f64((ix >> 52) + _MAGIC_BITS) - _MAGIC
    return kf * _LN2_HI + (_log1p64(m - 1.0) + kf * _LN2_LO)


@jit_inline
def _lgamma_near1(t):
    """lgamma(1 + t), |t| < 0.2 (Horner written out: a loop over the tuple does not
    vectorise)."""
    c = _LG_T1
    p = c[25]
    p = p * t + c[24]
    p = p * t + c[23]
    p = p * t + c[22]
    p = p * t + c[21]
    p = p * t + c[20]
    p = p * t + c[19]
    p = p * t + c[18]
    p = p * t + c[17]
    p = p * t + c[16]
    p = p * t + c[15]
    p = p * t + c[14]
    p = p * t + c[13]
    p = p * t + c[12]
    p = p * t + c[11]
    p = p * t + c[10]
    p = p * t + c[9]
    p = p * t + c[8]
    p = p * t + c[7]
    p = p * t + c[6]
    p = p * t + c[5]
    p = p * t + c[4]
    p = p * t + c[3]
    p = p * t + c[2]
    p = p * t + c[1]
    p = p * t + c[0]
    return p


@jit_inline
def _lgamma32(x):
    """lgamma of a float32, in float64 without a branch (so loops of it vectorise) and
    rounded once: for y = x (or 1 - x, then the reflection log(pi / |sin(pi x)|) - lgamma(y))
    Stirling's series at y, or at y + 10 less the log of y (y + 1) .. (y + 9); the Taylor
    series at 1 and 2 near those zeros. Correctly rounded but for one point in 700000
    checked against SciPy's gammaln; PyTorch's float32 lgamma (SLEEF's) is within an ulp."""
    xd = np.float64(x)
    neg = xd < 0.0
    y = _select(neg, 1.0 - xd, xd)
    small = y < 10.0
    prod = y
    for i in range(1, 10):
        prod *= y + i
    z = _select(small, y + 10.0, _select(y < 1e300, y, 1e300))
    iz = 1.0 / z
    iz2 = iz * iz
    c = _LG_ST
    s = ((((((c[6] * iz2 + c[5]) * iz2 + c[4]) * iz2 + c[3]) * iz2 + c[2]) * iz2 + c[1]) * iz2
         + c[0])
    g = (z - 0.5) * _log64(z) - z + _HALF_LOG_2PI + s * iz
    g = g - _select(small, _log64(prod), 0.0)
    t1 = y - 1.0
    t2 = y - 2.0
    g = _select(abs(t1) < 0.2, _lgamma_near1(t1),
                _select(abs(t2) < 0.2, _lgamma_near1(t2) + _log1p64(t2), g))
    rr, rlo, kf = _reduce_pio2_64(math.pi * (xd - np.trunc(xd)))
    sn, cs = _sin_cos_poly64(rr, rlo)
    r = _select(neg, _LOG_PI - _log64(abs(_by_quadrant(kf, 0, sn, cs))) - g, g)
    r = _select((xd == np.trunc(xd)) & (xd <= 0.0), np.inf, r)     # poles; -inf too
    r = _select(abs(xd) == np.inf, np.inf, r)
    return np.float32(_select(xd == xd, r, xd))


@jit
def _lgamma32_lines(X, V):
    for i in range(X.shape[0]):
        V[i] = _lgamma32(X[i])


@jit_inline
def _digamma32(x):
    """digamma of a float32, evaluated in float64 without a branch (so loops of it
    vectorise) and rounded once: the reflection for x < 0 (pi / tan(pi r) from _vmath's
    sin and cos), ten recurrence steps for every y = x or 1 - x below 10 (a fixed count
    instead of PyTorch's up to 10), the asymptotic series at y + 10 or y. Correctly
    rounded on a million points checked against SciPy's float64 digamma; PyTorch's float32
    kernel, evaluated in float32, is off by its own rounding (most near the root 1.46)."""
    xd = np.float64(x)
    neg = xd < 0.0
    y = _select(neg, 1.0 - xd, xd)
    small = y < 10.0
    s = 0.0
    for i in range(10):
        s += 1.0 / (y + i)
    z = _select(small, y + 10.0, y)
    iz2 = 1.0 / (z * z)
    p = 0.0
    for c in _PSI_A:
        p = p * iz2 + c
    r = _log1p64(z - 1.0) - 0.5 / z - iz2 * p - _select(small, s, 0.0)
    rr, rlo, kf = _reduce_pio2_64(math.pi * (xd - np.trunc(xd)))
    sn, cs = _sin_cos_poly64(rr, rlo)
    r = _select(neg, r - math.pi * _by_quadrant(kf, 1, sn, cs) / _by_quadrant(kf, 0, sn, cs), r)
    r = _select(neg & (xd == np.trunc(xd)), np.nan, r)         # (-inf too)
    r = _select(xd == 0.0, np.copysign(np.inf, -xd), r)
    return np.float32(_select(xd == xd, r, xd))


@jit
def _digamma32_lines(X, V):
    for i in range(X.shape[0]):
        V[i] = _digamma32(X[i])


@jit
def _digamma32_grads(X, G, GA):
    """lgamma's gradient, G * digamma(X)."""
    for i in range(X.shape[0]):
        GA[i] += G[i] * _digamma32(X[i])


@jit
def _erfinv(y):
    """float64 erfinv as PyTorch's calc_erfinv: a rational first guess, two Newton steps."""
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


@jit_inline
def _horner15(c, t):
    p = _fma(_fma(_fma(_fma(_fma(c[14], t, c[13]), t, c[12]), t, c[11]), t, c[10]), t, c[9])
    p = _fma(_fma(_fma(_fma(_fma(p, t, c[8]), t, c[7]), t, c[6]), t, c[5]), t, c[4])
    return _fma(_fma(_fma(_fma(p, t, c[3]), t, c[2]), t, c[1]), t, c[0])


@jit_inline
def _erfinv32_outer(y):
    """erfinv of a float32 y (as float64) with |y| > 0.7, NaN, |y| >= 1 (branch-free)."""
    w = -_log1p64(-(y * y))                # (1 - y^2 is exact in float64)
    mid = _horner15(_ERFINV_W, w * 0.4 - 1.0)
    s = np.sqrt(_select(w < 5.0, 5.0, w))
    tail = _horner15(_ERFINV_S, (s - _ERFINV_S_LO) * _ERFINV_S_SCALE - 1.0)
    r = y * _select(w < 5.0, mid, tail)
    ay = abs(y)
    r = _select(ay < 1.0, r, _select(ay == 1.0, math.copysign(np.inf, y), np.nan))
    return _select(y == y, r, y)


@jit
def _erfinv32_lines(X, V):
    """V = erfinv(X), float32: the central polynomial for every element (vectorised),
    then, only if some |x| > 0.7 or NaN, a second vectorised pass selecting the outer
    pieces for those."""
    outer = 0
    for i in range(X.shape[0]):
        y = np.float64(X[i])
        z = y * y
        V[i] = np.float32(y * _horner15(_ERFINV_Z, z * (1.0 / 0.245) - 1.0))
        outer += not (z <= 0.49)
    if outer:
        for i in range(X.shape[0]):
            y = np.float64(X[i])
            V[i] = np.float32(_select(y * y <= 0.49, np.float64(V[i]), _erfinv32_outer(y)))


@jit
def _values(X, V, kind, n):
    """V = the special function `kind` of X (same dtype): lgamma from libm in float64,
    digamma in the dtype as PyTorch's, erfinv and polygamma in float64 (float32 lgamma,
    digamma and erfinv: the vectorised *_lines)."""
    if kind == 0:
        for i in range(X.shape[0]):
            x = np.float64(X[i])
            V[i] = math.lgamma(x) if x == x else x
    elif kind == 1:
        for i in range(X.shape[0]):
            x = X[i]
            V[i] = _digamma(x) if x == x else x
    elif kind == 2:
        for i in range(X.shape[0]):
            x = np.float64(X[i])
            V[i] = _erfinv(x) if x == x else x
    else:
        for i in range(X.shape[0]):
            x = np.float64(X[i])
            V[i] = _polygamma(n, x) if x == x else x


@jit
def _grads(X, G, GA, kind, n):
    """GA += G * the derivative, in the dtype as PyTorch's formulas (grad * digamma(x),
    grad * polygamma(1, x), 0.5 sqrt(pi) exp(erfinv(x)^2) grad)."""
    if kind == 0:
        for i in range(X.shape[0]):
            GA[i] += G[i] * _digamma(X[i])
    elif kind == 1:
        for i in range(X.shape[0]):
            GA[i] += G[i] * _trigamma(X[i])
    elif kind == 2:
        c = 0.5 * math.sqrt(math.pi)
        for i in range(X.shape[0]):
            e = _erfinv(np.float64(X[i]))
            GA[i] += c * math.exp(e * e) * G[i]
    else:
        for i in range(X.shape[0]):
            GA[i] += G[i] * _polygamma(n + 1, np.float64(X[i]))


@jit
def _erfinv32_grads(X, G, GA):
    """GA += 0.5 sqrt(pi) exp(erfinv(X)^2) G, in float32 as PyTorch's formula."""
    E = np.empty(X.shape[0], np.float32)
    _erfinv32_lines(X, E)
    c = np.float32(0.5 * math.sqrt(math.pi))
    for i in range(X.shape[0]):
        GA[i] += c * exp(E[i] * E[i]) * G[i]


def special_fwd(caddr, row):
    C = ctx_of(caddr)
    T_ = tape_of(C)
    a, dt, _, _, shape = _prologue(C, row)
    if dt != KERNEL_DTYPE:
        return E_DTYPE
    out = meta_contiguous(C, dt, shape.shape[0], shape, False)
    if out < 0:
        return out
    n = meta_of(C)[out, M_NUMEL]
    kind = T_[row, R_IATTR + 2]
    if KERNEL_DTYPE == F32:
        X = _values32(C, a, n)
        V = f32_at(data_addr(C, out), n)
        if kind == 2:
            _erfinv32_lines(X, V)
        elif kind == 1:
            _digamma32_lines(X, V)
        elif kind == 0:
            _lgamma32_lines(X, V)
        else:
            _values(X, V, kind, T_[row, R_IATTR + 3])
    else:
        _values(_values64(C, a, n), f64_at(data_addr(C, out), n), kind, T_[row, R_IATTR + 3])
    return set_outputs1(C, out)


def special_bwd(caddr, row):
    C = ctx_of(caddr)
    T_ = tape_of(C)
    ga = edge_grad_addr(C, row, 0)
    if ga == 0:
        return K_OK
    n = out_numel(T_, row)
    x = T_[row, R_IN + IN_SAVED]
    g = row_grad_addr(C, row, 0)
    kind = T_[row, R_IATTR + 2]
    if KERNEL_DTYPE == F32:
        X = _values32(C, x, n)
        if kind == 2:
            _erfinv32_grads(X, f32_at(g, n), f32_at(ga, n))
        elif kind == 0:
            _digamma32_grads(X, f32_at(g, n), f32_at(ga, n))
        else:
            _grads(X, f32_at(g, n), f32_at(ga, n), kind, T_[row, R_IATTR + 3])
    else:
        _grads(_values64(C, x, n), f64_at(g, n), f64_at(ga, n), kind, T_[row, R_IATTR + 3])
    return K_OK


# dim -1 (the whole tensor); kind 0 lgamma, 1 digamma, 2 erfinv, 3 polygamma of order n
_ATTRS = ("dim", "keepdim", "kind", "n")
for _name, _grad_fn in (("lgamma", "LgammaBackward0"), ("digamma", "DigammaBackward0"),
                        ("erfinv", "ErfinvBackward0"), ("polygamma", "PolygammaBackward0")):
    register(OpDef(_name, _grad_fn, "custom", module=_M, fwd_fn="special_fwd",
                   bwd_fn="special_bwd", nin=1, diff=(0,), saves_if={0: ("a",)},
                   attrs=_ATTRS, per_dtype=True))
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


# ---------------------------------------------------------------- median's index
# (a helper of the median / nanmedian fronts: PyTorch orders (value, index) pairs, so the
# median's index is fixed by its value: the value of rank k by a selection of the values
# alone, then one pass for how many are smaller and which of the equal ones it is)
@jit
def _select_value(arr, n, k):
    """The value of rank k of arr[:n] (no NaN), reordering it: a quickselect with the
    median of three as pivot."""
    lo = 0
    hi = n - 1
    while hi > lo:
        if hi == lo + 1:
            if arr[hi] < arr[lo]:
                arr[lo], arr[hi] = arr[hi], arr[lo]
            break
        p = (lo + hi) >> 1
        arr[p], arr[lo + 1] = arr[lo + 1], arr[p]
        if arr[lo + 1] > arr[hi]:
            arr[lo + 1], arr[hi] = arr[hi], arr[lo + 1]
        if arr[lo] > arr[hi]:
            arr[lo], arr[hi] = arr[hi], arr[lo]
        if arr[lo + 1] > arr[lo]:
            arr[lo + 1], arr[lo] = arr[lo], arr[lo + 1]
        i = lo + 1
        j = hi
        piv = arr[lo]
        while True:
            i += 1
            while piv > arr[i]:
                i += 1
            j -= 1
            while arr[j] > piv:
                j -= 1
            if j < i:
                break
            arr[i], arr[j] = arr[j], arr[i]
        arr[lo], arr[j] = arr[j], arr[lo]
        if j <= k:
            lo = i
        if j >= k:
            hi = j - 1
    return arr[k]


@jit_entry
def mode_lines(S, V, out):
    """out[l] = the index along line l of V of its mode as PyTorch's: the most frequent
    value (the smallest of equally frequent ones; NaNs count as equal), its last
    occurrence. S: the lines sorted (NaN last)."""
    nl, n = S.shape
    for li in range(nl):
        best = S[li, 0]
        best_run = 0
        run = 0
        for j in range(n):
            x = S[li, j]
            if j > 0 and (x == S[li, j - 1] or (x != x and S[li, j - 1] != S[li, j - 1])):
                run += 1
            else:
                run = 1
            if run > best_run:
                best_run = run
                best = x
        for j in range(n - 1, -1, -1):
            x = V[li, j]
            if x == best or (x != x and best != best):
                out[li] = j
                break


@jit_entry
def median_lines(V, ignore_nan, out):
    """out[l] = the index along line l of V (one line per row; float32, float64 or int64,
    as the tensor's) of its median as PyTorch's median (a NaN: the first NaN) or
    nanmedian (NaNs left out; a line of NaNs: its first)."""
    nl, n = V.shape
    arr = np.empty(n, V.dtype)
    for li in range(nl):
        line = V[li]
        m = 0                       # the values other than NaN, into arr
        first_nan = -1
        for j in range(n):
            x = line[j]
            if x == x:
                arr[m] = x
                m += 1
            elif first_nan < 0:
                first_nan = j
        if m < n and (not ignore_nan or m == 0):
            out[li] = first_nan
            continue
        k = (m - 1) // 2 if ignore_nan else (n - 1) // 2
        v = _select_value(arr, m, k)
        less = 0
        for j in range(n):
            less += line[j] < v
        r = k - less                # v's place among the elements equal to it
        for j in range(n):
            if line[j] == v:
                if r == 0:
                    out[li] = j
                    break
                r -= 1


# ---------------------------------------------------------------- cummax / cummin's indices
@jit_entry
def cum_extreme_lines(V, largest, inner, out, pos):
    """out[l, j] = the index of the running maximum (largest) or minimum of line l of V up
    to j, as PyTorch's: the last of equal values, and once a NaN is met the latest NaN; and
    pos[l, j] its row-major position in the tensor the lines came from, line l being
    (o, i) of a (outer, n, inner) view, so gather needs no positions of its own.
    (V: float32, float64 or int64, as the tensor's, so no converted copy.) After a NaN only
    NaNs move the index, so the comparison loop stops there."""
    nl, n = V.shape
    for li in range(nl):
        if n == 0:
            continue
        o = li // inner
        base = o * n * inner + (li - o * inner)
        best = V[li, 0]
        cur = 0
        out[li, 0] = 0
        pos[li, 0] = base
        j = 1
        if best == best:
            while j < n:
                v = V[li, j]
                if (v >= best) if largest else (v <= best):
                    best = v
                    cur = j
                elif v != v:
                    cur = j
                    break
                out[li, j] = cur
                pos[li, j] = base + cur * inner
                j += 1
        for k in range(j, n):
            if V[li, k] != V[li, k]:
                cur = k
            out[li, k] = cur
            pos[li, k] = base + cur * inner


# ---------------------------------------------------------------- scatter / index_add positions
# (a helper of the scatter and index_* fronts: their checks and flat offsets in one pass,
# where NumPy took a temporary array per dim)
@jit_entry
def scatter_positions(iv, vec, shape, cs, d, size, pos):
    """pos[p], p in row-major order over `shape`: the offset, in a tensor of contiguous
    strides cs, of p's coordinates with the d-th replaced by the index value (iv[p], or
    iv[coordinate d] when vec). Returns the first p whose value is outside [0, size) (pos
    is then incomplete), or -1. Row by row along the last dim (a loop that vectorises,
    its range check folded into a flag), an odometer over the others."""
    nd = shape.shape[0]
    last = shape[nd - 1]
    if pos.shape[0] == 0 or last == 0:
        return -1
    ctr = np.zeros(nd, np.int64)
    base = 0                # the offset of the row's other coordinates (d's excluded)
    cd = cs[d]
    cl = cs[nd - 1] if d != nd - 1 else 0
    for r in range(pos.shape[0] // last):
        p0 = r * last
        bad = False
        if vec and d != nd - 1:
            v = iv[ctr[d]]
            bad = v < 0 or v >= size
            b = base + v * cd
            for c in range(last):
                pos[p0 + c] = b + c * cl
        else:
            for c in range(last):
                v = iv[c] if vec else iv[p0 + c]
                bad |= (v < 0) | (v >= size)
                pos[p0 + c] = base + c * cl + v * cd
        if bad:
            for c in range(last):
                v = iv[ctr[d] if (vec and d != nd - 1) else c] if vec else iv[p0 + c]
                if v < 0 or v >= size:
                    return p0 + c
        k = nd - 2
        while k >= 0:
            ctr[k] += 1
            if k != d:
                base += cs[k]
            if ctr[k] < shape[k]:
                break
            if k != d:
                base -= cs[k] * shape[k]
            ctr[k] = 0
            k -= 1
    return -1
