"""exp, sin, cos, tanh, erf and log1p that vectorise, for the generated elementwise loops.

Numba here has no SVML, so np.exp/np.sin become one scalar libm call per element;
PyTorch's (SLEEF) are vectorised and 2-5x faster on large arrays. These are branch-free
arithmetic (selects, min/max, fma, Cody-Waite range reduction, a polynomial, 2^k built
from its bits rather than by a float->int conversion AVX2 cannot vectorise), so LLVM
vectorises the loops that call them. Errors, checked on millions of points
(tests/engine/test_vmath.py), against PyTorch's (SLEEF u10) bound of 1 ulp:

- float32 sin/cos/tanh evaluate in float64 and round once to float32: at most 0.51 ulp
  from the exact result (sin/cos: 0.5017 for every float32 below 2^23, checked
  exhaustively; one polynomial on |r| <= pi/2 after a reduction by pi, for cos by odd
  multiples of pi/2: a little over half the time of sin and cos polynomials on
  |r| <= pi/4 and a quadrant select). float32 exp is float32 arithmetic with fma (eight
  lanes instead of four, which brings it to PyTorch's speed): at most 0.93 ulp.
- float64 exp: reduction by a two-part ln2 keeping the rounding error of the reduced
  argument, a degree-12 polynomial with 1 + r summed exactly, and 2^k as the product of
  two powers of two (overflow gives inf; a subnormal result rounds in the last multiply):
  at most 0.66 ulp, 0.78 for subnormal results. float64 sin/cos: reduction by pi/2 in four
  parts to a double-double r + r_lo (exact even for the doubles closest to multiples of
  pi/2), polynomials of degree 15 and 14 with the r_lo correction, r^2 and r^3 kept
  exact: at most 0.67 ulp (80-bit long double references). float64 tanh is NumPy's.

The fma is llvm.fma: one instruction on AVX2 machines (a libm call on CPUs without FMA).

The fast sin/cos range reductions hold for |x| <= SINCOS_LIMIT32 = 2^23 and
SINCOS_LIMIT64 = 3294199 ((2^21 + 0.5) pi/2); past them the result is libm's (float64
sin/cos, rounded for float32). A data-dependent branch per element would stop
vectorisation, so the generated kernel of an op whose formulas call sin(a)/cos(a) first
scans a (`sincos_huge`, itself vectorised, a small part of the op's time) and its loops
call `sin_(big, a)` / `cos_(big, a)`: `big` is loop-invariant, LLVM unswitches the loop on
it, and the common case keeps the vectorised loop. One huge element sends the whole tensor
through libm. NaN and inf do not count as huge (the fast versions give NaN for them).

- float32 erf: two polynomials in float64 (erf(x)/x in x^2 below 0.9, erf itself above),
  a select, rounded once: at most 0.5007 ulp; float64 erf is libm's. log1p (both dtypes):
  fdlibm's scheme without branches (the exponent from the bits of 1 + x, its rounding
  error as a correction, log m = 2 atanh(s) by its Taylor series), float32 through float64:
  at most 0.5 ulp (float32), 0.84 (float64, libm's 0.84). On one thread float32 erf is
  about six times as fast as libm's, log1p about four times.

tanh is sign(x) * m / (m + 2) with m = expm1(2|x|), and expm1 is e^r - 1 evaluated as a
polynomial in r without the cancellation of e^r then - 1 (so small x keep full accuracy).

Formulas in the op table call exp(a), sin(a), cos(a), tanh(a); the generated kernels import
exp and tanh from here and call sin_/cos_ for sin/cos (tapegrad/ops/_codegen.py rewrites
the formulas). sin and cos themselves, for other compiled code, are right for any argument
but choose libm per element, which does not vectorise.
"""
import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.core.extending import intrinsic, overload

from tapegrad._engine.lowlevel import jit, jit_inline, jit_reduction, OVERLOAD_OPTIONS


def _bitcast(src, dst, irty):
    """An intrinsic reinterpreting the bits of a src value as a dst value."""
    @intrinsic
    def cast(typingctx, x):
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], irty)
        return dst(src), codegen
    return cast


_f64_as_i64 = _bitcast(types.float64, types.int64, ir.IntType(64))
_i64_as_f64 = _bitcast(types.int64, types.float64, ir.DoubleType())
_i32_as_f32 = _bitcast(types.int32, types.float32, ir.FloatType())


@intrinsic
def _select(typingctx, c, a, b):
    """a if c else b, as one LLVM select: the float64 helpers below are inlined at
    Numba-IR level, and Numba's inliner mishandles the phi of a conditional expression."""
    sig = types.float64(types.boolean, types.float64, types.float64)

    def codegen(context, builder, signature, args):
        return builder.select(*args)
    return sig, codegen


@intrinsic
def pick(typingctx, c, a, b):
    """a if c else b for two values of one type, as one LLVM select (no branch, so the
    loop around it still vectorises; a is not used when c is false)."""
    if a != b:
        return None

    def codegen(context, builder, signature, args):
        return builder.select(*args)
    return a(types.boolean, a, b), codegen


@intrinsic
def maxnum(typingctx, a, b):
    """The larger of two floats of one type, as llvm.maxnum: a loop keeping a running
    maximum this way vectorises (Python's max() lowers to a compare and select LLVM does
    not turn into a vector reduction: about four times slower on lines of 1000). A NaN
    operand is ignored, as in C's fmax."""
    if a != b or not isinstance(a, types.Float):
        return None

    def codegen(context, builder, signature, args):
        ty = context.get_value_type(signature.return_type)
        fn = builder.module.declare_intrinsic("llvm.maxnum", [ty], ir.FunctionType(ty, [ty, ty]))
        return builder.call(fn, args)
    return a(a, b), codegen


@intrinsic
def minnum(typingctx, a, b):
    """The smaller of two floats of one type, as llvm.minnum (see maxnum)."""
    if a != b or not isinstance(a, types.Float):
        return None

    def codegen(context, builder, signature, args):
        ty = context.get_value_type(signature.return_type)
        fn = builder.module.declare_intrinsic("llvm.minnum", [ty], ir.FunctionType(ty, [ty, ty]))
        return builder.call(fn, args)
    return a(a, b), codegen


def _fma_of(ty):
    """a * b + c rounded once (llvm.fma; vfmadd on AVX2 machines)."""
    @intrinsic
    def fma(typingctx, a, b, c):
        def codegen(context, builder, signature, args):
            return builder.fma(*args)
        return ty(ty, ty, ty), codegen
    return fma


_fma = _fma_of(types.float64)
_fma32 = _fma_of(types.float32)


_MAGIC = 6755399441055744.0         # 1.5 * 2**52: x + MAGIC holds round(x) in its low bits
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_TWO_OVER_PI = 0.6366197723675814
_ONE_OVER_PI = 0.3183098861837907
_PIO2_1 = 1.57079632673412561417e+00
_PIO2_1T = 6.07710050650619224932e-11
# pi/2 = _PIO2_1 + _PIO2_2 + _PIO2_3 + _PIO2_3T to 2^-160 (fdlibm's pio2_1, pio2_2, pio2_3,
# pio2_3t: 33-bit pieces whose last bits are zero, 31, 32 and 28 significant bits), so
# k times each of the first three is exact for |k| <= 2^21
_PIO2_2 = 6.07710050630396597660e-11
_PIO2_3 = 2.02226624871116645580e-21
_PIO2_3T = 8.47842766036889956997e-32

# Beyond these |x| the fast sin/cos reductions lose accuracy, and libm takes over (see
# the module docstring): float32's two-part reduction meets 0.51 ulp for every float32
# up to 2^23 (checked exhaustively; from 2^23 + 24 on it does not); float64's is exact for
# |k| <= 2^21, i.e. |x| < (2^21 + 0.5) pi/2 (random arguments still pass up to 2^23, the
# hardest ones are not guaranteed there; past 2^23 it fails by many ulps).
SINCOS_LIMIT32 = 8388608.0
SINCOS_LIMIT64 = 3294199.0

# Polynomial coefficients: Chebyshev fits (mpmath.chebyfit at 50 digits, then rounded to
# double) of
#   (e^r - 1 - r) / r^2 on |r| <= 1.0001 ln2/2, degree 10 (so e^r to degree 12),
#   (sin r - r) / r^3 and (cos r - 1 + r^2/2) / r^4 as functions of z = r^2 on
#   0 <= z <= (1.001 pi/4)^2, degrees 6 and 5 (sin r to degree 15, cos r to degree 14);
# their relative errors after rounding are 2^-53 (exp, sin) and 2^-54 (cos), which the
# small size of the terms they make (<= 0.1 of the result) scales down further.
_E2, _E3, _E4, _E5, _E6 = (0.5, 0.1666666666666667, 0.04166666666666667,
                           0.008333333333326136, 0.0013888888888883748)
_E7, _E8, _E9, _E10, _E11, _E12 = (0.00019841269874820627, 2.4801587325547743e-05,
                                   2.7557255400206422e-06, 2.75572736431103e-07,
                                   2.5105217004720745e-08, 2.0914686968086876e-09)
_S3, _S5, _S7, _S9 = (-0.16666666666666666, 0.008333333333333331,
                      -0.00019841269841265017, 2.755731921930192e-06)
_S11, _S13, _S15 = -2.5052106219521895e-08, 1.6058529572267877e-10, -7.586576588171073e-13
_C4, _C6, _C8, _C10 = (0.041666666666666664, -0.0013888888888887382, 2.480158729874307e-05,
                       -2.7557317260008837e-07)
_C12, _C14 = 2.0876143827993133e-09, -1.1382456778061306e-11
# For float32 sin/cos: (sin r - r) / r^3 as a function of z = r^2 on 0 <= z <= (1.0001
# pi/2)^2, degree 4 (sin r to degree 11), relative error 3e-11.
_H3, _H5, _H7 = -0.16666666663878466, 0.008333332768305049, -0.00019841086452506194
_H9, _H11 = 2.753645532390914e-06, -2.407999973210464e-08


_F32 = np.float32
_L2E32, _LN2_HI32, _LN2_LO32 = _F32(1.4426950408889634), _F32(0.693145751953125), \
    _F32(1.428606765330187e-06)      # ln2 = hi + lo; hi has 16 bits, so k * hi is exact
_X32 = tuple(_F32(1 / math.factorial(i)) for i in range(8))


@jit
def _exp32(x):
    """In float32 arithmetic, eight lanes per AVX2 instruction (twice the float64 route's
    four): fma reduction by ln2, the degree-7 Taylor polynomial in Horner form with a
    last fma 1 + r*q, and 2^k in two factors from the bits of k (float32 -> int32 does
    vectorise). At most 0.93 ulp; PyTorch's bound is 1."""
    x = min(max(x, _F32(-104.0)), _F32(89.0)) if x == x else x
    kf = np.rint(x * _L2E32)
    r = _fma32(-kf, _LN2_LO32, _fma32(-kf, _LN2_HI32, x))        # |r| <= ln2/2
    q = _fma32(_fma32(_fma32(_fma32(_fma32(_fma32(_X32[7], r, _X32[6]), r, _X32[5]), r,
                                    _X32[4]), r, _X32[3]), r, _X32[2]), r, _X32[1])
    k = np.int32(kf)
    k1 = k >> 1
    return (_fma32(q, r, _F32(1.0)) * _i32_as_f32((k1 + 127) << 23)
            * _i32_as_f32((k - k1 + 127) << 23))


@jit
def _expm1_64(y):
    """e^y - 1 for a float64 y in [-40, 89] (callers clamp), to about 1e-11 relative:
    exact enough for a float32 result, not for a float64 one. e^r - 1 = r + r^2 p(r)
    on the reduced argument, without the cancellation of e^y then - 1 near 0."""
    kf = np.rint(y * _LOG2E)
    r = _fma(-kf, _LN2_LO, _fma(-kf, _LN2_HI, y))
    # Taylor to degree 9, Horner in fmas (half the instructions of separate multiplies
    # and adds)
    p = _fma(_fma(_fma(_fma(_fma(_fma(_fma(1 / 362880, r, 1 / 40320), r, 1 / 5040), r,
                                 1 / 720), r, 1 / 120), r, 1 / 24), r, 1 / 6), r, 0.5)
    q = _fma(r * r, p, r)
    k = _f64_as_i64(kf + _MAGIC) - _f64_as_i64(_MAGIC)
    s = _i64_as_f64((k + 1023) << 52)
    return q if kf == 0.0 else _fma(s, q, s - 1.0)             # 2^k (q + 1) - 1


@jit
def _expm1_32(x):
    xd = np.float64(x)
    m = _expm1_64(min(max(xd, -40.0), 89.0) if xd == xd else xd)
    return np.float32(m if xd != 0.0 else xd)              # -0. stays -0.


@jit
def _tanh32(x):
    xd = np.float64(x)
    y = min(2.0 * abs(xd), 40.0) if xd == xd else xd      # tanh(20) is 1 in float32
    m = _expm1_64(y)
    return np.float32(np.copysign(m / (m + 2.0), xd))       # -0. stays -0.


@jit
def _sin_half_pi(r):
    """sin r for |r| <= pi/2, in float64, for a float32 result."""
    z = r * r
    return r * (1.0 + z * (_H3 + z * (_H5 + z * (_H7 + z * (_H9 + z * _H11)))))   # -0. stays


@jit
def _parity(jf):
    return jf - 2.0 * np.floor(jf * 0.5)


@jit
def _sin32(x):
    """sin x = (-1)^j sin(x - j pi): one polynomial, no quadrant select between two."""
    xd = np.float64(x)
    jf = np.rint(xd * _ONE_OVER_PI)
    m = 2.0 * jf
    r = (xd - m * _PIO2_1) - m * _PIO2_1T if jf != 0.0 else xd     # -0. stays -0.
    s = _sin_half_pi(r)
    return np.float32(-s if _parity(jf) != 0.0 else s)


@jit
def _cos32(x):
    """cos x = (-1)^(j+1) sin(x - (j + 1/2) pi): the reduction by an odd multiple of pi/2
    keeps the zeros of cos where r is near 0, as accurate as sin's."""
    xd = np.float64(x)
    jf = np.rint(xd * _ONE_OVER_PI - 0.5)
    m = 2.0 * jf + 1.0
    s = _sin_half_pi((xd - m * _PIO2_1) - m * _PIO2_1T)
    return np.float32(s if _parity(jf) != 0.0 else -s)


# ---- float64 ------------------------------------------------------------------------
# jit_inline (inline="always"): LLVM would not inline the larger of these into a loop by
# itself, and a call in the loop body stops vectorisation.


@jit_inline
def _pow2(kf):
    """2^k for an integral float k in [-1022, 1023], from its bits."""
    return _i64_as_f64((_f64_as_i64(kf + _MAGIC) + 1023) << 52)


@jit_inline
def _exp64(x):
    xc = _select(x == x, min(max(x, -750.0), 710.0), x)   # e^-750 is 0, e^710 inf
    kf = np.rint(xc * _LOG2E)
    hi = _fma(-kf, _LN2_HI, xc)               # exact: kf * _LN2_HI has 43 bits
    r = _fma(-kf, _LN2_LO, hi)                # |r| <= ln2/2
    e = _fma(-kf, _LN2_LO, hi - r)            # the rounding error of r: e^(r+e) ~ e^r + e
    q = _fma(r, _fma(r, _fma(r, _fma(r, _fma(r, _fma(r, _fma(r, _fma(r, _fma(r, _fma(
        r, _E12, _E11), _E10), _E9), _E8), _E7), _E6), _E5), _E4), _E3), _E2)
    t = 1.0 + r
    p = t + (((1.0 - t) + r) + _fma(r * r, q, e))     # (1 + r) exactly as t + its error
    k1 = np.rint(kf * 0.5)                    # 2^k = 2^k1 * 2^(k - k1), both normal
    return p * _pow2(k1) * _pow2(kf - k1)


@jit_inline
def _two_sum(a, b):
    """(s, e): s = fl(a + b) and e its rounding error, exactly."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


@jit_inline
def _reduce_pio2_64(x):
    """x = k*pi/2 + r + r_lo with |r| <= pi/4 (a little more for the rounding of k), valid
    for |k| <= 2^21: (r, r_lo, k as a float). The products k * _PIO2_1.._3 are exact,
    and the difference is kept as a double-double, so even the doubles closest to a
    multiple of pi/2 (|r| down to 2^-60.5, at x = 45.55) keep full relative accuracy."""
    kf = np.rint(x * _TWO_OVER_PI)
    a = _fma(-kf, _PIO2_1, x)                  # exact (Sterbenz)
    s, e1 = _two_sum(a, -(kf * _PIO2_2))
    s2, e2 = _two_sum(s, -(kf * _PIO2_3))
    lo = _fma(-kf, _PIO2_3T, e1 + e2)
    r = s2 + lo
    r_lo = lo - (r - s2)
    r = _select(kf != 0.0, r, x)               # -0. stays -0.
    return r, r_lo, kf


@jit_inline
def _sin_cos_poly64(r, r_lo):
    """(sin(r + r_lo), cos(r + r_lo)) for |r| <~ pi/4, |r_lo| <~ 2^-53 |r|."""
    z = r * r
    zl = _fma(r, r, -z)                        # r^2 = z + zl exactly
    rz = r * z
    rzl = _fma(r, z, -rz) + r * zl             # r^3 ~ rz + rzl
    ps = _fma(z, _fma(z, _fma(z, _fma(z, _fma(z, _fma(z, _S15, _S13), _S11), _S9), _S7),
                       _S5), _S3)
    # sin(r + y) ~ sin r + y (1 - r^2/2)
    s = r + _fma(rz, ps, _fma(rzl, _S3, r_lo * (1.0 - 0.5 * z)))
    s = _select(r != 0.0, s, r)                # -0. + 0. would be 0.: sin(-0.) is -0.
    pc = _fma(z, _fma(z, _fma(z, _fma(z, _fma(z, _C14, _C12), _C10), _C8), _C6), _C4)
    # cos(r + y) ~ cos r - r y; 1 - z/2 summed exactly as w + its error
    hz = 0.5 * z
    w = 1.0 - hz
    c = w + ((((1.0 - w) - hz) - 0.5 * zl) + _fma(z * z, pc, -(r * r_lo)))
    return s, c


@jit_inline
def _by_quadrant(kf, shift, s, c):
    """sin(x) for x = (k + shift) pi/2 + r, from s = sin r and c = cos r: c when k + shift
    is odd, else s, negated when (k + shift) mod 4 is 2 or 3. The bits of k come from
    kf + _MAGIC (no float->int conversion); NaN stays NaN."""
    k = _f64_as_i64(kf + _MAGIC) + shift
    v = _select((k & 1) != 0, c, s)
    return _i64_as_f64(_f64_as_i64(v) ^ ((k & 2) << 62))


@jit_inline
def _sin64(x):
    r, r_lo, kf = _reduce_pio2_64(x)
    s, c = _sin_cos_poly64(r, r_lo)
    return _by_quadrant(kf, 0, s, c)


@jit_inline
def _cos64(x):
    r, r_lo, kf = _reduce_pio2_64(x)
    s, c = _sin_cos_poly64(r, r_lo)
    return _by_quadrant(kf, 1, s, c)          # cos x = sin(x + pi/2)


# erf for float32, in float64, from numpy Chebyshev fits to math.erf converted to powers:
# erf(x) / x as a polynomial in z = x^2 on |x| <= 0.9 (degree 7, relative error 7e-12),
# erf(x) itself as one in t = (|x| - 2.45) / 1.55 on 0.9 <= |x| <= 4 (degree 18, absolute
# error 4e-11; erf(4) is 1 in float32). No exp: erfc(x) e^(x^2) with an exp takes twice
# as long.
_ERF_A = (1.1283791670888825, -0.3761263879771243, 0.11283788916731262,
          -0.026865896047801117, 0.005222628168790788, -0.0008512076697363479,
          0.00011508715500367175, -1.0492389879028104e-05)
_ERF_B = (0.9994694198728131, 0.004324481894570263, -0.016422218751996606,
          0.038112429236249426, -0.05921456043411835, 0.06247677929001313,
          -0.041147761931996464, 0.008911915313582586, 0.012718617034759737,
          -0.014916980794709144, 0.005914410311988324, 0.00183304715356936,
          -0.0033539509264353786, 0.001258410132214132, 0.0004394392516572399,
          -0.0005239954175386404, 7.337611890223373e-05, 6.97992990615823e-05,
          -2.26720566478284e-05)


@jit_inline
def _erf_small(z):
    """erf(x) / x, z = x^2."""
    a = _ERF_A
    return _fma(_fma(_fma(_fma(_fma(_fma(_fma(a[7], z, a[6]), z, a[5]), z, a[4]), z, a[3]),
                          z, a[2]), z, a[1]), z, a[0])


@jit_inline
def _erf_big(t):
    """erf(x), t = (|x| - 2.45) / 1.55 (Horner in three parts: no loop, which Numba's
    inliner mishandles here)."""
    b = _ERF_B
    p = _fma(_fma(_fma(_fma(_fma(_fma(b[18], t, b[17]), t, b[16]), t, b[15]), t, b[14]), t,
                  b[13]), t, b[12])
    p = _fma(_fma(_fma(_fma(_fma(_fma(p, t, b[11]), t, b[10]), t, b[9]), t, b[8]), t, b[7]),
             t, b[6])
    return _fma(_fma(_fma(_fma(_fma(_fma(p, t, b[5]), t, b[4]), t, b[3]), t, b[2]), t, b[1]),
                t, b[0])


@jit
def _erf32(x):
    """Both pieces for every element, then a select: no branch, so the loop vectorises."""
    xd = np.float64(x)
    ax = _select(abs(xd) < 4.0, abs(xd), 4.0)           # (NaN: 4, replaced below)
    small = xd * _erf_small(xd * xd)                    # -0. stays -0.
    big = np.copysign(_erf_big((ax - 2.45) * (1 / 1.55)), xd)
    r = _select(abs(xd) < 0.9, small, big)
    return np.float32(_select(xd == xd, r, xd))


# log1p: fdlibm's scheme. 1 + x = u = 2^k m with m in [sqrt(2)/2, sqrt(2)) from the bits of u,
# c = the rounding error of u over u (log(u + e) ~ log u + e/u), f = m - 1, s = f / (2 + f),
# log m = 2 atanh s = f - f^2/2 + s (f^2/2 + R(s^2)), here with R's Taylor coefficients
# 2/3, 2/5, ..., 2/23 (|s| <= 0.172, so the first omitted term is 2^-61 of the result).
_LG = tuple(2.0 / (2 * i + 1) for i in range(1, 12))
_SQRT_HALF_BITS = 0x3fe6a09e667f3bcd
_MAGIC_BITS = 0x4338000000000000            # the bits of _MAGIC: + k and back gives k


@jit_inline
def _log_series(z):
    """R(z) / z: the Taylor coefficients 2/3 .. 2/23 of 2 atanh(s) / s - 2."""
    return _fma(_fma(_fma(_fma(_fma(_fma(_fma(_fma(_fma(_fma(_LG[10], z, _LG[9]), z,
        _LG[8]), z, _LG[7]), z, _LG[6]), z, _LG[5]), z, _LG[4]), z, _LG[3]), z, _LG[2]), z,
        _LG[1]), z, _LG[0])


@jit_inline
def _log1p64(x):
    u = 1.0 + x
    ix = _f64_as_i64(u) - _SQRT_HALF_BITS
    m = _i64_as_f64((ix & 0x000fffffffffffff) + _SQRT_HALF_BITS)
    kf = _i64_as_f64((ix >> 52) + _MAGIC_BITS) - _MAGIC       # k, without a float conversion
    # u - x is exact for u >= 2, u - 1 below (Sterbenz)
    c = _select(u >= 2.0, 1.0 - (u - x), x - (u - 1.0)) / u
    f = m - 1.0
    hfsq = 0.5 * f * f
    s = f / (2.0 + f)
    z = s * s
    r = z * _log_series(z)
    y = kf * _LN2_HI - ((hfsq - (s * (hfsq + r) + (kf * _LN2_LO + c))) - f)
    # -1 -> -inf, below -1 or NaN -> NaN, inf -> inf, -0. -> -0.
    y = _select(x > -1.0, y, _select(x == -1.0, -np.inf, np.nan))
    return _select((x == np.inf) | (x == 0.0), x, y)


@jit
def _log1p32(x):
    return np.float32(_log1p64(np.float64(x)))


# ---- what formulas call -------------------------------------------------------------
def exp(x):
    """The exponential, vectorisable (compiled code only)."""
    raise NotImplementedError("tapegrad.ops._vmath.exp is for compiled kernels")


def sin(x):
    """sin for any argument, choosing libm per element (not vectorised); kernels call
    sin_ instead."""
    raise NotImplementedError("tapegrad.ops._vmath.sin is for compiled kernels")


def cos(x):
    raise NotImplementedError("tapegrad.ops._vmath.cos is for compiled kernels")


def sin_(big, x):
    """sin(x): libm's when big (some argument of the loop is past SINCOS_LIMIT), the
    vectorisable one otherwise."""
    raise NotImplementedError("tapegrad.ops._vmath.sin_ is for compiled kernels")


def cos_(big, x):
    raise NotImplementedError("tapegrad.ops._vmath.cos_ is for compiled kernels")


def tanh(x):
    raise NotImplementedError("tapegrad.ops._vmath.tanh is for compiled kernels")


def expm1(x):
    """e^x - 1 without cancellation near 0: vectorisable for float32, libm's for float64
    (compiled code only)."""
    raise NotImplementedError("tapegrad.ops._vmath.expm1 is for compiled kernels")


def erf(x):
    """The error function: vectorisable for float32, libm's for float64 (compiled code
    only)."""
    raise NotImplementedError("tapegrad.ops._vmath.erf is for compiled kernels")


def log1p(x):
    """log(1 + x) without cancellation near 0, vectorisable (compiled code only)."""
    raise NotImplementedError("tapegrad.ops._vmath.log1p is for compiled kernels")


def sincos_huge(x):
    """Whether some finite |x[i]| exceeds SINCOS_LIMIT of x's dtype (a 1-d array); NaN and
    inf do not count (the fast versions already give NaN for them)."""
    raise NotImplementedError("tapegrad.ops._vmath.sincos_huge is for compiled kernels")


@overload(exp, inline="always", jit_options=OVERLOAD_OPTIONS)
def _exp_by_dtype(x):
    if x == types.float32:
        def impl(x):
            return _exp32(x)
    else:
        def impl(x):
            return _exp64(x)
    return impl


def _sin_cos_impl(fast32, fast64, libm, x, flag):
    """Implementation of sin/cos (flag False: the argument alone decides whether libm is
    needed, per element) and of sin_/cos_ (flag True: the loop-invariant big decides).
    Written with if/return: Numba's inliner mishandles a conditional expression here."""
    if x == types.float32:
        if flag:
            def impl(big, x):
                if big:
                    return np.float32(libm(np.float64(x)))
                return fast32(x)
        else:
            def impl(x):
                if abs(x) > SINCOS_LIMIT32:
                    return np.float32(libm(np.float64(x)))
                return fast32(x)
    elif flag:
        def impl(big, x):
            if big:
                return libm(x)
            return fast64(x)
    else:
        def impl(x):
            if abs(x) > SINCOS_LIMIT64:
                return libm(x)
            return fast64(x)
    return impl


@overload(sin, inline="always", jit_options=OVERLOAD_OPTIONS)
def _sin_any(x):
    return _sin_cos_impl(_sin32, _sin64, np.sin, x, False)


@overload(cos, inline="always", jit_options=OVERLOAD_OPTIONS)
def _cos_any(x):
    return _sin_cos_impl(_cos32, _cos64, np.cos, x, False)


@overload(sin_, inline="always", jit_options=OVERLOAD_OPTIONS)
def _sin_big(big, x):
    return _sin_cos_impl(_sin32, _sin64, np.sin, x, True)


@overload(cos_, inline="always", jit_options=OVERLOAD_OPTIONS)
def _cos_big(big, x):
    return _sin_cos_impl(_cos32, _cos64, np.cos, x, True)


# the float32 scan counts in float32, so it runs 8 lanes wide (Numba would widen an int32
# count to int64); reassoc lets the count vectorise. The count stops growing at 2^24
# but never returns to 0. NaN compares false and inf is excluded, so neither counts.
@overload(sincos_huge, jit_options=dict(OVERLOAD_OPTIONS, fastmath={"reassoc", "nsz"}))
def _sincos_huge(x):
    if x.dtype == types.float32:
        lim32, inf32 = np.float32(SINCOS_LIMIT32), np.float32(np.inf)

        def impl(x):
            n = np.float32(0)
            for i in range(x.size):
                v = abs(x[i])
                n += np.float32((v > lim32) & (v != inf32))
            return n != 0
    else:
        def impl(x):
            n = 0
            for i in range(x.size):
                v = abs(x[i])
                n += (v > SINCOS_LIMIT64) & (v != np.inf)       # no branch: vectorises
            return n != 0
    return impl


@overload(tanh, inline="always", jit_options=OVERLOAD_OPTIONS)
def _tanh_by_dtype(x):
    if x == types.float32:
        def impl(x):
            return _tanh32(x)
    else:
        def impl(x):
            return np.tanh(x)
    return impl


@overload(expm1, inline="always", jit_options=OVERLOAD_OPTIONS)
def _expm1_by_dtype(x):
    if x == types.float32:
        def impl(x):
            return _expm1_32(x)
    else:
        def impl(x):
            return np.expm1(x)
    return impl


@jit_reduction
def vsum(X, zero):
    """The sum of a row buffer (one row's share of a broadcast input's gradient, in the
    row-broadcast loops), reassociated so that it vectorises."""
    s = zero
    for j in range(X.shape[0]):
        s += X[j]
    return s


@jit(fastmath={"reassoc", "nsz"})
def vsqdist(X, Y):
    """sum((X - Y) ** 2) in float64, reassociated so that it vectorises (mse_loss: a
    running float64 sum is a scalar chain)."""
    s = 0.0
    for j in range(X.shape[0]):
        d = np.float64(X[j]) - np.float64(Y[j])
        s += d * d
    return s


@jit(fastmath={"reassoc", "nsz"})
def vsqdev(X, m):
    """sum((X - m) ** 2) in float64, reassociated so that it vectorises."""
    s = 0.0
    for j in range(X.shape[0]):
        d = np.float64(X[j]) - m
        s += d * d
    return s


@jit_reduction
def vdot(X, Y, zero):
    """sum(X * Y), reassociated so that it vectorises."""
    s = zero
    for j in range(X.shape[0]):
        s += X[j] * Y[j]
    return s


@overload(erf, inline="always", jit_options=OVERLOAD_OPTIONS)
def _erf_by_dtype(x):
    if x == types.float32:
        def impl(x):
            return _erf32(x)
    else:
        def impl(x):
            return math.erf(x)
    return impl


@overload(log1p, inline="always", jit_options=OVERLOAD_OPTIONS)
def _log1p_by_dtype(x):
    if x == types.float32:
        def impl(x):
            return _log1p32(x)
    else:
        def impl(x):
            return _log1p64(x)
    return impl
