"""exp, sin, cos and tanh that vectorise, for float32 loops.

Numba here has no SVML, so np.exp/np.sin on float32 become one libm call per element;
PyTorch's (SLEEF) are vectorised and 2-4x faster on large arrays. These evaluate in
float64 with pure arithmetic (Cody-Waite range reduction, a polynomial, 2^k built from
its bits rather than by a float->int conversion AVX2 cannot vectorise) and round once to
float32: at most 0.51 ulp from the exact result (tests/test_vmath.py checks it on millions
of points), against PyTorch's 1 ulp. float64 arguments keep NumPy's libm versions.

tanh is sign(x) * m / (m + 2) with m = expm1(2|x|), and expm1 is e^r - 1 evaluated as a
polynomial in r without the cancellation of e^r then - 1 (so small x keep full accuracy).

Formulas in the op table call exp(a), sin(a), cos(a), tanh(a); the generated kernels import
these.
"""
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core.extending import intrinsic, overload


@intrinsic
def _f64_as_i64(typingctx, x):
    sig = types.int64(types.float64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return sig, codegen


@intrinsic
def _i64_as_f64(typingctx, x):
    sig = types.float64(types.int64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return sig, codegen


_MAGIC = 6755399441055744.0         # 1.5 * 2**52: x + MAGIC holds round(x) in its low bits
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_TWO_OVER_PI = 0.6366197723675814
_PIO2_1 = 1.57079632673412561417e+00
_PIO2_1T = 6.07710050650619224932e-11


@njit(cache=True, error_model="numpy")
def _exp32(x):
    xd = np.float64(x)
    xd = min(max(xd, -200.0), 200.0) if xd == xd else xd     # 2^k stays a normal double
    kf = np.rint(xd * _LOG2E)
    r = (xd - kf * _LN2_HI) - kf * _LN2_LO                     # |r| <= ln2/2
    p = 1.0 + r * (1.0 + r * (0.5 + r * (1 / 6 + r * (1 / 24 + r * (1 / 120 + r * (
        1 / 720 + r * (1 / 5040 + r * (1 / 40320))))))))
    k = _f64_as_i64(kf + _MAGIC) - _f64_as_i64(_MAGIC)
    return np.float32(p * _i64_as_f64((k + 1023) << 52))


@njit(cache=True, error_model="numpy")
def _tanh32(x):
    xd = np.float64(x)
    y = min(2.0 * abs(xd), 40.0) if xd == xd else xd      # tanh(20) is 1 in float32
    kf = np.rint(y * _LOG2E)
    r = (y - kf * _LN2_HI) - kf * _LN2_LO
    q = r * (1.0 + r * (0.5 + r * (1 / 6 + r * (1 / 24 + r * (1 / 120 + r * (1 / 720 + r * (
        1 / 5040 + r * (1 / 40320 + r * (1 / 362880)))))))))        # e^r - 1
    k = _f64_as_i64(kf + _MAGIC) - _f64_as_i64(_MAGIC)
    m = q if kf == 0.0 else _i64_as_f64((k + 1023) << 52) * (q + 1.0) - 1.0
    return np.float32(np.copysign(m / (m + 2.0), xd))       # -0. stays -0.


@njit(cache=True, error_model="numpy")
def _reduce_pio2(x):
    """x = k*pi/2 + r with |r| <= pi/4: (r, k mod 4 as a float)."""
    xd = np.float64(x)
    kf = np.rint(xd * _TWO_OVER_PI)
    r = (xd - kf * _PIO2_1) - kf * _PIO2_1T if kf != 0.0 else xd     # -0. stays -0.
    return r, kf - 4.0 * np.floor(kf * 0.25)


@njit(cache=True, error_model="numpy")
def _sin_cos_poly(r):
    r2 = r * r
    s = r * (1.0 + r2 * (-1 / 6 + r2 * (1 / 120 + r2 * (-1 / 5040 + r2 * (
        1 / 362880 + r2 * (-1 / 39916800))))))      # r * (...) keeps sin(-0.) == -0.
    c = 1.0 + r2 * (-0.5 + r2 * (1 / 24 + r2 * (-1 / 720 + r2 * (1 / 40320 + r2 * (
        -1 / 3628800 + r2 * (1 / 479001600))))))
    return s, c


@njit(cache=True, error_model="numpy")
def _sin32(x):
    r, q = _reduce_pio2(x)
    s, c = _sin_cos_poly(r)
    return np.float32(s if q == 0.0 else (c if q == 1.0 else (-s if q == 2.0 else -c)))


@njit(cache=True, error_model="numpy")
def _cos32(x):
    r, q = _reduce_pio2(x)
    s, c = _sin_cos_poly(r)
    return np.float32(c if q == 0.0 else (-s if q == 1.0 else (-c if q == 2.0 else s)))


def exp(x):
    """The exponential: vectorisable for float32, NumPy's for float64 (compiled code only)."""
    raise NotImplementedError("tapegrad.ops._vmath.exp is for compiled kernels")


def sin(x):
    raise NotImplementedError("tapegrad.ops._vmath.sin is for compiled kernels")


def cos(x):
    raise NotImplementedError("tapegrad.ops._vmath.cos is for compiled kernels")


def tanh(x):
    raise NotImplementedError("tapegrad.ops._vmath.tanh is for compiled kernels")


@overload(exp)
def _exp_by_dtype(x):
    if x == types.float32:
        def impl(x):
            return _exp32(x)
    else:
        def impl(x):
            return np.exp(x)
    return impl


@overload(sin)
def _sin_by_dtype(x):
    if x == types.float32:
        def impl(x):
            return _sin32(x)
    else:
        def impl(x):
            return np.sin(x)
    return impl


@overload(cos)
def _cos_by_dtype(x):
    if x == types.float32:
        def impl(x):
            return _cos32(x)
    else:
        def impl(x):
            return np.cos(x)
    return impl


@overload(tanh)
def _tanh_by_dtype(x):
    if x == types.float32:
        def impl(x):
            return _tanh32(x)
    else:
        def impl(x):
            return np.tanh(x)
    return impl
