"""PyTorch's CPU random streams: its mt19937 engine (ATen's CPUGeneratorImpl) and the
distributions its CPU kernels draw with it, number for number.

A generator's state is an int64 array that the Python Generator owns; kernels take its
address. Its first 312 words hold the engine's 624 32-bit words, then come the engine's
`left` and `next` counters, the seed, and the Box-Muller sample PyTorch caches (`W_*`).

Two things PyTorch's numbers depend on besides the stream, which the callers pass:
- `contract`: whether `a * b + c` is one fused multiply-add. PyTorch's AVX2 and AVX-512
  builds of its distribution kernels let the compiler fuse them (uniform's
  `x * (to - from) + from`, normal's `x * std + mean`); its default build cannot.
- `vec`: float32 normal_ in blocks of 16 uses, in those builds, the Cephes-style log and
  sincos of avx_mathfun.h (written out below operation for operation, fused where the
  compiler fuses them) instead of the C library's logf/cosf/sinf.
Everything else calls the C library's functions PyTorch calls (bound under tapegrad's own
symbol names, so no vector math library can stand in for them).
"""
import ctypes
import ctypes.util
import math
import os
import platform

import numpy as np
from llvmlite import binding as ll
from numba import types, carray
from numba.core.extending import intrinsic

from .lowlevel import jit, jit_entry, _ptr_intrinsic, i64_at, f64_at, f32_at

ptr_u32 = _ptr_intrinsic(types.uint32)

NWORDS = 624
STATE_LEN = 320                     # int64 words of a generator's state array
W_LEFT, W_NEXT, W_SEED, W_SEEDED, W_DVALID, W_DNORM, W_FVALID, W_FNORM = range(312, 320)
DEFAULT_SEED = 67280421310721       # what torch.Generator() starts from
SMALL_RANDPERM = (2 ** 32 - 1) // 20  # randperm below it: PyTorch's 32-bit swaps

# dist kinds (the draws PyTorch makes one double at a time)
EXPONENTIAL, GEOMETRIC, CAUCHY, LOG_NORMAL, BERNOULLI = range(5)
# integers kinds (random_ and randint)
FROM_TO, FULL_RANGE, DTYPE_RANGE = range(3)
# normal flags
N_FILL16, N_VEC, N_CONTRACT = 1, 2, 4

_CHUNK = 2048                       # engine words made per pass of a bulk fill


def host_path():
    """(contract, vec) as PyTorch's CPU dispatch picks them here: on x86, its AVX2 or
    AVX-512 kernels when the CPU has AVX2 and FMA, unless ATEN_CPU_CAPABILITY=default
    (read as PyTorch reads it); on 64-bit ARM the compilers fuse multiply-adds in every
    build (FMA is baseline there) and the 16-block normal has no vector form."""
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64", "x86", "i386", "i686"):
        if os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower() == "default":
            return False, False
        feats = ll.get_host_cpu_features()
        fast = bool(feats.get("avx2")) and bool(feats.get("fma"))
        return fast, fast
    if machine in ("arm64", "aarch64"):
        return True, False
    return False, False


# ---------------------------------------------------------------- the C library
def _bind_libm():
    """Register the C library's functions under tapegrad_<name>."""
    path = ctypes.util.find_library("m")
    lib = ctypes.CDLL(path) if path else ctypes.CDLL(None)
    for name in ("logf", "cosf", "sinf", "log", "cos", "sin", "log1p", "tan", "exp",
                 "lgamma"):
        ll.add_symbol("tapegrad_" + name, ctypes.cast(getattr(lib, name),
                                                      ctypes.c_void_p).value)


_bind_libm()
_F1 = types.float32(types.float32)
_D1 = types.float64(types.float64)
c_logf = types.ExternalFunction("tapegrad_logf", _F1)
c_cosf = types.ExternalFunction("tapegrad_cosf", _F1)
c_sinf = types.ExternalFunction("tapegrad_sinf", _F1)
c_log = types.ExternalFunction("tapegrad_log", _D1)
c_cos = types.ExternalFunction("tapegrad_cos", _D1)
c_sin = types.ExternalFunction("tapegrad_sin", _D1)
c_log1p = types.ExternalFunction("tapegrad_log1p", _D1)
c_tan = types.ExternalFunction("tapegrad_tan", _D1)
c_exp = types.ExternalFunction("tapegrad_exp", _D1)
c_lgamma = types.ExternalFunction("tapegrad_lgamma", _D1)


@intrinsic
def fma(typingctx, a, b, c):
    """a * b + c rounded once (LLVM's llvm.fma: the instruction, or the C library's fma)."""
    sig = a(a, a, a)

    def codegen(context, builder, signature, args):
        return builder.fma(*args)
    return sig, codegen


@intrinsic
def f32_bits(typingctx, x):
    """The bits of a float32 as an int32."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int32))
    return types.int32(types.float32), codegen


@intrinsic
def bits_f32(typingctx, i):
    """The float32 with the bits of an int32."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float32))
    return types.float32(types.int32), codegen


# ---------------------------------------------------------------- the engine
_U1, _U11, _U7, _U15, _U18 = (np.uint32(k) for k in (1, 11, 7, 15, 18))
_U0 = np.uint32(0)
_UMASK = np.uint32(0x80000000)
_LMASK = np.uint32(0x7fffffff)
_MATRIX_A = np.uint32(0x9908b0df)
_TEMPER_B = np.uint32(0x9d2c5680)
_TEMPER_C = np.uint32(0xefc60000)
_M24 = np.uint32((1 << 24) - 1)
_M53 = np.uint64((1 << 53) - 1)
_U32 = np.uint64(32)
_INV24 = np.float32(1.0 / (1 << 24))
_INV53 = 1.0 / (1 << 53)


@jit
def words_of(g):
    return carray(ptr_u32(g), (NWORDS,))


@jit
def _twist(W):
    """The engine's next 624 words (Cokus's form of the recurrence, as ATen writes it)."""
    for i in range(NWORDS - 397):
        y = (W[i] & _UMASK) | (W[i + 1] & _LMASK)
        W[i] = W[i + 397] ^ (y >> _U1) ^ ((_U0 - (W[i + 1] & _U1)) & _MATRIX_A)
    for i in range(NWORDS - 397, NWORDS - 1):
        y = (W[i] & _UMASK) | (W[i + 1] & _LMASK)
        W[i] = W[i - (NWORDS - 397)] ^ (y >> _U1) ^ ((_U0 - (W[i + 1] & _U1)) & _MATRIX_A)
    y = (W[NWORDS - 1] & _UMASK) | (W[0] & _LMASK)
    W[NWORDS - 1] = W[396] ^ (y >> _U1) ^ ((_U0 - (W[0] & _U1)) & _MATRIX_A)


@jit
def _temper(y):
    y ^= y >> _U11
    y ^= (y << _U7) & _TEMPER_B
    y ^= (y << _U15) & _TEMPER_C
    y ^= y >> _U18
    return y


@jit
def next32(S, W):
    """One 32-bit output (ATen's random()). S: the state words, W: the engine's words."""
    left = S[W_LEFT] - 1
    if left == 0:
        _twist(W)
        left = NWORDS
        S[W_NEXT] = 0
    S[W_LEFT] = left
    k = S[W_NEXT]
    S[W_NEXT] = k + 1
    return _temper(W[k])


@jit
def next64(S, W):
    """Two outputs as one 64-bit number, the first high (ATen's random64())."""
    hi = np.uint64(next32(S, W))
    return (hi << _U32) | np.uint64(next32(S, W))


@jit
def uniform64(S, W):
    """A double in [0, 1): 53 bits of random64(), as uniform_real_distribution<double>."""
    return np.float64(next64(S, W) & _M53) * _INV53


@jit
def uniform32(S, W):
    """A float in [0, 1): 24 bits of random(), as uniform_real_distribution<float>."""
    return np.float32(next32(S, W) & _M24) * _INV24


@jit
def fill_words(S, W, buf, m):
    """buf[:m] := the next m outputs, tempered in runs the compiler vectorises."""
    left = S[W_LEFT]
    nxt = S[W_NEXT]
    o = 0
    while o < m:
        if left == 1:               # (the next output refreshes the words first)
            _twist(W)
            left = NWORDS + 1
            nxt = 0
        k = min(left - 1, m - o)
        for i in range(k):
            buf[o + i] = _temper(W[nxt + i])
        o += k
        nxt += k
        left -= k
    S[W_LEFT] = left
    S[W_NEXT] = nxt


# ---------------------------------------------------------------- uniform_
@jit
def _uniform_fill32(S, W, out, n, lo, hi, contract):
    buf = np.empty(_CHUNK, np.uint32)
    flo = np.float32(lo)
    fhi = np.float32(hi)
    span = fhi - flo
    i = 0
    while i < n:
        m = min(_CHUNK, n - i)
        fill_words(S, W, buf, m)
        if contract:
            for j in range(m):
                v = fma(np.float32(buf[j] & _M24) * _INV24, span, flo)
                out[i + j] = flo if v == fhi else v
        else:
            for j in range(m):
                v = np.float32(buf[j] & _M24) * _INV24 * span + flo
                out[i + j] = flo if v == fhi else v
        i += m


@jit
def _uniform_fill64(S, W, out, n, lo, hi, contract):
    buf = np.empty(_CHUNK, np.uint32)
    span = hi - lo
    i = 0
    while i < n:
        m = min(_CHUNK // 2, n - i)
        fill_words(S, W, buf, 2 * m)
        if contract:
            for j in range(m):
                r = (np.uint64(buf[2 * j]) << _U32) | np.uint64(buf[2 * j + 1])
                v = fma(np.float64(r & _M53) * _INV53, span, lo)
                out[i + j] = lo if v == hi else v
        else:
            for j in range(m):
                r = (np.uint64(buf[2 * j]) << _U32) | np.uint64(buf[2 * j + 1])
                v = np.float64(r & _M53) * _INV53 * span + lo
                out[i + j] = lo if v == hi else v
        i += m


@jit_entry
def uniform(g, addr, n, is64, lo, hi, contract):
    """uniform_(lo, hi) of n contiguous float32 (is64: float64) values at addr, in
    order, as PyTorch's CPU kernel: from and to in the dtype, x * (to - from) + from,
    a result equal to to replaced by from."""
    S = i64_at(g, STATE_LEN)
    W = words_of(g)
    if is64:
        _uniform_fill64(S, W, f64_at(addr, n), n, lo, hi, contract)
    else:
        _uniform_fill32(S, W, f32_at(addr, n), n, lo, hi, contract)
    return 0


UNIFORM_SIG = "int64(int64, int64, int64, int64, float64, float64, int64)"


# ---------------------------------------------------------------- normal_
_F1_0 = np.float32(1.0)
_F0_5 = np.float32(0.5)
_FM2 = np.float32(-2.0)
_TWO_PI = 2.0 * math.pi
_TWO_PI32 = np.float32(2.0 * math.pi)
_SQRTHF = np.float32(0.707106781186547524)
_LOG_P = [np.float32(c) for c in (
    7.0376836292E-2, -1.1514610310E-1, 1.1676998740E-1, -1.2420140846E-1,
    1.4249322787E-1, -1.6668057665E-1, 2.0000714765E-1, -2.4999993993E-1,
    3.3333331174E-1)]
_LP0, _LP1, _LP2, _LP3, _LP4, _LP5, _LP6, _LP7, _LP8 = _LOG_P
_LOG_Q1 = np.float32(-2.12194440e-4)
_LOG_Q2 = np.float32(0.693359375)
_DP1 = np.float32(-0.78515625)
_DP2 = np.float32(-2.4187564849853515625e-4)
_DP3 = np.float32(-3.77489497744594108e-8)
_SIN_P0 = np.float32(-1.9515295891E-4)
_SIN_P1 = np.float32(8.3321608736E-3)
_SIN_P2 = np.float32(-1.6666654611E-1)
_COS_P0 = np.float32(2.443315711809948E-005)
_COS_P1 = np.float32(-1.388731625493765E-003)
_COS_P2 = np.float32(4.166664568298827E-002)
_FOPI = np.float32(1.27323954473516)
_MANT_MASK = np.int32(~0x7f800000)
_HALF_BITS = np.int32(0x3f000000)


@jit
def _cephes_log(x):
    """avx_mathfun's log256_ps on one lane, for x >= the smallest normal float."""
    b = f32_bits(x)
    e = np.float32((b >> np.int32(23)) - np.int32(0x7f)) + _F1_0
    x = bits_f32((b & _MANT_MASK) | _HALF_BITS)
    small = np.int32(x < _SQRTHF)
    x = (x - _F1_0) + bits_f32(f32_bits(x) & -small)
    e = e - np.float32(small)
    z = x * x
    y = fma(_LP0, x, _LP1)
    y = fma(y, x, _LP2)
    y = fma(y, x, _LP3)
    y = fma(y, x, _LP4)
    y = fma(y, x, _LP5)
    y = fma(y, x, _LP6)
    y = fma(y, x, _LP7)
    y = fma(y, x, _LP8)
    y = y * x
    y = fma(y, z, e * _LOG_Q1)
    y = fma(z, -_F0_5, y)
    x = x + y
    return fma(e, _LOG_Q2, x)


@jit
def _cephes_sincos(x):
    """avx_mathfun's sincos256_ps on one lane, for x >= 0: (sin x, cos x)."""
    j = np.int32(x * _FOPI)
    j = (j + np.int32(1)) & np.int32(~1)
    y = np.float32(j)
    sign_sin = (j & np.int32(4)) << np.int32(29)
    swap = -((j >> np.int32(1)) & np.int32(1))   # all ones where (j & 2) != 0
    sign_cos = (~(j - np.int32(2)) & np.int32(4)) << np.int32(29)
    x = fma(y, _DP1, x)
    x = fma(y, _DP2, x)
    x = fma(y, _DP3, x)
    z = x * x
    yc = fma(_COS_P0, z, _COS_P1)
    yc = fma(yc, z, _COS_P2)
    yc = yc * z
    yc = fma(yc, z, -(z * _F0_5))
    yc = yc + _F1_0
    ys = fma(_SIN_P0, z, _SIN_P1)
    ys = fma(ys, z, _SIN_P2)
    ys = ys * z
    ys = fma(ys, x, x)
    s2 = bits_f32(f32_bits(ys) & ~swap)      # (sin is the cosine polynomial's where
    s1 = bits_f32(f32_bits(yc) & swap)       # swap is set, and cos the sine's)
    s = s1 + s2
    c = (yc - s1) + (ys - s2)
    return bits_f32(f32_bits(s) ^ sign_sin), bits_f32(f32_bits(c) ^ sign_cos)


_VEC_BLOCKS = 128


@jit
def _normal16_vec(D, o, nblocks, mean, std):
    """avx2 NormalFill16 on nblocks blocks of 16 from D[o]: in each block the first 8
    values give the radii (from 1 - u), the last 8 the angles. The blocks' halves are
    gathered into two runs so that one long loop does the math (it vectorises; eight
    iterations per block did not)."""
    R = np.empty(8 * _VEC_BLOCKS, np.float32)
    T = np.empty(8 * _VEC_BLOCKS, np.float32)
    b = 0
    while b < nblocks:
        nb = min(_VEC_BLOCKS, nblocks - b)
        for q in range(nb):
            base = o + 16 * (b + q)
            for j in range(8):
                R[8 * q + j] = D[base + j]
                T[8 * q + j] = D[base + 8 + j]
        for k in range(8 * nb):
            radius = np.sqrt(_FM2 * _cephes_log(_F1_0 - R[k]))
            s, c = _cephes_sincos(_TWO_PI32 * T[k])
            R[k] = fma(radius * c, std, mean)
            T[k] = fma(radius * s, std, mean)
        for q in range(nb):
            base = o + 16 * (b + q)
            for j in range(8):
                D[base + j] = R[8 * q + j]
                D[base + 8 + j] = T[8 * q + j]
        b += nb


@jit
def _normal16_default32(D, o, mean, std):
    for j in range(8):
        u1 = _F1_0 - D[o + j]
        u2 = D[o + j + 8]
        radius = np.sqrt(_FM2 * c_logf(u1))
        theta = np.float32(_TWO_PI * np.float64(u2))
        D[o + j] = fma(radius * c_cosf(theta), std, mean)
        D[o + j + 8] = fma(radius * c_sinf(theta), std, mean)


@jit
def _normal16_64(D, o, mean, std):
    for j in range(8):
        u1 = 1.0 - D[o + j]
        u2 = D[o + j + 8]
        radius = math.sqrt(-2.0 * c_log(u1))
        theta = _TWO_PI * u2
        D[o + j] = fma(radius * c_cos(theta), std, mean)
        D[o + j + 8] = fma(radius * c_sin(theta), std, mean)


@jit
def _normal_fill32(S, W, D, n, mean, std, vec):
    _uniform_fill32(S, W, D, n, 0.0, 1.0, False)
    fm = np.float32(mean)
    fs = np.float32(std)
    if vec:
        _normal16_vec(D, 0, n // 16, fm, fs)
    else:
        for i in range(0, n - 15, 16):
            _normal16_default32(D, i, fm, fs)
    if n % 16:
        for j in range(16):
            D[n - 16 + j] = uniform32(S, W)
        if vec:
            _normal16_vec(D, n - 16, 1, fm, fs)
        else:
            _normal16_default32(D, n - 16, fm, fs)


@jit
def _normal_fill64(S, W, D, n, mean, std):
    _uniform_fill64(S, W, D, n, 0.0, 1.0, False)
    for i in range(0, n - 15, 16):
        _normal16_64(D, i, mean, std)
    if n % 16:
        for j in range(16):
            D[n - 16 + j] = uniform64(S, W)
        _normal16_64(D, n - 16, mean, std)


@jit
def box_muller(S, F, W):
    """A standard normal as normal_distribution<double> draws it: the cached second
    sample if there is one, else two uniforms, one sample returned and one cached."""
    if S[W_DVALID]:
        S[W_DVALID] = 0
        return F[W_DNORM]
    u1 = uniform64(S, W)
    u2 = uniform64(S, W)
    r = math.sqrt(-2.0 * c_log1p(-u2))
    theta = _TWO_PI * u1
    F[W_DNORM] = r * c_sin(theta)
    S[W_DVALID] = 1
    return r * c_cos(theta)


@jit
def _affine(x, std, mean, contract):
    return fma(x, std, mean) if contract else x * std + mean


@jit_entry
def normal(g, addr, n, is64, mean, std, flags):
    """normal_(mean, std) of n float32 (is64: float64) values at addr, in order.
    N_FILL16 (PyTorch's path for a contiguous tensor of at least 16): uniforms first,
    then Box-Muller on blocks of 16, the last block redrawn when 16 does not divide n;
    else one normal_distribution<double> draw per value. N_VEC, N_CONTRACT: see the
    module's docstring."""
    S = i64_at(g, STATE_LEN)
    F = f64_at(g, STATE_LEN)
    W = words_of(g)
    contract = (flags & N_CONTRACT) != 0
    if flags & N_FILL16:
        if is64:
            _normal_fill64(S, W, f64_at(addr, n), n, mean, std)
        else:
            _normal_fill32(S, W, f32_at(addr, n), n, mean, std, (flags & N_VEC) != 0)
    elif is64:
        D = f64_at(addr, n)
        for i in range(n):
            D[i] = _affine(box_muller(S, F, W), std, mean, contract)
    else:
        E = f32_at(addr, n)
        for i in range(n):
            E[i] = np.float32(_affine(box_muller(S, F, W), std, mean, contract))
    return 0


NORMAL_SIG = UNIFORM_SIG


# ---------------------------------------------------------------- random_, randint
@jit_entry
def integers(g, addr, n, kind, span, base, code):
    """random_ of n int64 values at addr (the caller converts them to the dtype): FROM_TO
    base + r % span (r: 64 bits when span >= 2**28, else 32; span as unsigned), FULL_RANGE
    all 64 bits, DTYPE_RANGE the range of dtype code (layout.F32 ...) as random_() draws
    it."""
    S = i64_at(g, STATE_LEN)
    W = words_of(g)
    out = i64_at(addr, n)
    buf = np.empty(_CHUNK, np.uint32)
    rng = np.uint64(span)
    ubase = np.uint64(base)
    wide = kind == FULL_RANGE or (kind == FROM_TO and rng >= np.uint64(1 << 28)) or (
        kind == DTYPE_RANGE and (code == 1 or code == 2))
    if kind == DTYPE_RANGE:
        rng = (np.uint64((1 << 24) + 1) if code == 0 else np.uint64((1 << 53) + 1)
               if code == 1 else np.uint64(1 << 63) if code == 2 else np.uint64(2))
        ubase = np.uint64(0)
    i = 0
    while i < n:
        if wide:
            m = min(_CHUNK // 2, n - i)
            fill_words(S, W, buf, 2 * m)
            if kind == FULL_RANGE:
                for j in range(m):
                    r = (np.uint64(buf[2 * j]) << _U32) | np.uint64(buf[2 * j + 1])
                    out[i + j] = np.int64(r)
            else:
                for j in range(m):
                    r = (np.uint64(buf[2 * j]) << _U32) | np.uint64(buf[2 * j + 1])
                    out[i + j] = np.int64(r % rng + ubase)
        else:
            m = min(_CHUNK, n - i)
            fill_words(S, W, buf, m)
            if rng <= np.uint64(0xffffffff):    # (the same remainder, in 32 bits)
                r32 = np.uint32(rng)
                b32 = np.uint64(ubase)
                for j in range(m):
                    out[i + j] = np.int64(np.uint64(buf[j] % r32) + b32)
            else:
                for j in range(m):
                    out[i + j] = np.int64(np.uint64(buf[j]) % rng + ubase)
        i += m
    return 0


INTEGERS_SIG = "int64(int64, int64, int64, int64, int64, int64, int64)"


# ---------------------------------------------------------------- the double-at-a-time draws
@jit
def _f64_to_i64(x):
    """(int64_t) x as x86 converts it: NaN and values out of range give INT64_MIN."""
    if x >= -9.2233720368547758e18 and x < 9.2233720368547758e18:
        return np.int64(x)
    return np.int64(-9223372036854775807 - 1)


@jit_entry
def dist(g, addr, n, kind, a, b, contract):
    """n draws of one of PyTorch's serial distributions, as doubles at addr (the caller
    converts them to the dtype): EXPONENTIAL(lambd=a), GEOMETRIC(p=a), CAUCHY(median=a,
    sigma=b), LOG_NORMAL(mean=a, std=b), BERNOULLI(p=a)."""
    S = i64_at(g, STATE_LEN)
    F = f64_at(g, STATE_LEN)
    W = words_of(g)
    out = f64_at(addr, n)
    if kind == EXPONENTIAL:
        scale = -1.0 / a
        for i in range(n):
            out[i] = scale * c_log1p(-uniform64(S, W))
    elif kind == GEOMETRIC:
        denom = c_log1p(-a)
        for i in range(n):
            out[i] = np.ceil(c_log(uniform64(S, W)) / denom)
    elif kind == CAUCHY:
        for i in range(n):
            t = c_tan(math.pi * (uniform64(S, W) - 0.5))
            out[i] = fma(b, t, a) if contract else a + b * t
    elif kind == LOG_NORMAL:
        for i in range(n):
            out[i] = c_exp(_affine(box_muller(S, F, W), b, a, contract))
    else:
        for i in range(n):
            out[i] = 1.0 if uniform64(S, W) < a else 0.0
    return 0


DIST_SIG = "int64(int64, int64, int64, int64, float64, float64, int64)"


@jit_entry
def bernoulli_p(g, addr, n, paddr, p64):
    """bernoulli_ with a probability per value (contiguous, float32 or, p64, float64), as
    doubles 0/1 at addr: bernoulli_distribution<float> (a float uniform) for float32 p,
    <double> for float64 p. The caller checked every p is in [0, 1]."""
    S = i64_at(g, STATE_LEN)
    W = words_of(g)
    out = f64_at(addr, n)
    if p64:
        P = f64_at(paddr, n)
        for i in range(n):
            out[i] = 1.0 if uniform64(S, W) < P[i] else 0.0
    else:
        Q = f32_at(paddr, n)
        for i in range(n):
            out[i] = 1.0 if uniform32(S, W) < Q[i] else 0.0
    return 0


BERNOULLI_P_SIG = "int64(int64, int64, int64, int64, int64)"


@jit_entry
def randperm(g, addr, n, small):
    """randperm(n) as int64 at addr: below `small` (SMALL_RANDPERM in PyTorch) swaps with
    32-bit draws, else the inside-out shuffle with 64-bit draws."""
    S = i64_at(g, STATE_LEN)
    W = words_of(g)
    r = i64_at(addr, n)
    if n < small:
        for i in range(n):
            r[i] = i
        for i in range(n - 1):
            z = np.int64(np.uint64(next32(S, W)) % np.uint64(n - i))
            t = r[i]
            r[i] = r[z + i]
            r[z + i] = t
    else:
        for i in range(n):
            z = np.int64(next64(S, W) % np.uint64(i + 1))
            r[i] = r[z]
            r[z] = i
    return 0


RANDPERM_SIG = "int64(int64, int64, int64, int64)"


@jit
def _multinomial_rows(S, W, P, cum, out, ndist, ncat, nsample):
    for i in range(ndist):
        total = P[0] - P[0]
        for j in range(ncat):
            total += P[i * ncat + j]
            cum[j] = total
        for j in range(ncat):
            cum[j] /= total
        for k in range(nsample):
            u = uniform64(S, W)
            cum[ncat - 1] = 1
            lo = 0
            hi = ncat
            while hi - lo > 0:
                mid = lo + (hi - lo) // 2
                if cum[mid] < u:
                    lo = mid + 1
                else:
                    hi = mid
            out[i * nsample + k] = lo


@jit_entry
def multinomial(g, paddr, p64, ndist, ncat, nsample, oaddr):
    """multinomial with replacement: ndist contiguous rows of ncat probabilities (float32
    or, p64, float64), nsample int64 indices per row at oaddr. Each row's cumulative sums
    are normalised in its dtype and searched for a double uniform. The caller checked
    every row (non-negative, finite, positive sum)."""
    S = i64_at(g, STATE_LEN)
    W = words_of(g)
    out = i64_at(oaddr, ndist * nsample)
    if p64:
        _multinomial_rows(S, W, f64_at(paddr, ndist * ncat), np.empty(ncat, np.float64),
                          out, ndist, ncat, nsample)
    else:
        _multinomial_rows(S, W, f32_at(paddr, ndist * ncat), np.empty(ncat, np.float32),
                          out, ndist, ncat, nsample)
    return 0


MULTINOMIAL_SIG = "int64(int64, int64, int64, int64, int64, int64, int64)"


@jit
def _poisson(S, W, lam):
    """ATen's sample_poisson: Hoermann's transformed rejection for lam >= 10, else
    multiplying uniforms."""
    if lam >= 10:
        slam = math.sqrt(lam)
        loglam = c_log(lam)
        b = 0.931 + 2.53 * slam
        a = -0.059 + 0.02483 * b
        invalpha = 1.1239 + 1.1328 / (b - 3.4)
        vr = 0.9277 - 3.6224 / (b - 2)
        while True:
            U = uniform64(S, W) - 0.5
            V = uniform64(S, W)
            us = 0.5 - abs(U)
            k = _f64_to_i64(np.floor((2 * a / us + b) * U + lam + 0.43))
            if us >= 0.07 and V <= vr:
                return k
            if k < 0 or (us < 0.013 and V > us):
                continue
            if (c_log(V) + c_log(invalpha) - c_log(a / (us * us) + b)) <= (
                    -lam + k * loglam - c_lgamma(np.float64(k) + 1)):
                return k
    if lam == 0:
        return np.int64(0)
    enlam = c_exp(-lam)
    x = np.int64(0)
    prod = 1.0
    while True:
        prod *= uniform64(S, W)
        if prod > enlam:
            x += 1
        else:
            return x


@jit_entry
def poisson(g, addr, n, laddr, l64):
    """n Poisson draws as int64 at addr, rates from n contiguous float32 (l64: float64)
    values at laddr, each read as a double. The caller checked every rate is >= 0."""
    S = i64_at(g, STATE_LEN)
    W = words_of(g)
    out = i64_at(addr, n)
    if l64:
        L = f64_at(laddr, n)
        for i in range(n):
            out[i] = _poisson(S, W, L[i])
    else:
        M = f32_at(laddr, n)
        for i in range(n):
            out[i] = _poisson(S, W, np.float64(M[i]))
    return 0


POISSON_SIG = "int64(int64, int64, int64, int64, int64)"


# ---------------------------------------------------------------- dropout
@jit_entry
def fill_dropout(addr, n, is64, g, keep, scale):
    """A dropout mask as PyTorch's CPU dropout makes it: bernoulli_(keep) (a double uniform
    per element, in order) then divided by keep, so each element is scale (the caller's
    1 / keep in the dtype) or 0. g: the generator state's address; a compiled replay
    calls this by its native address."""
    S = i64_at(g, STATE_LEN)
    W = words_of(g)
    buf = np.empty(_CHUNK, np.uint32)
    i = 0
    while i < n:
        m = min(_CHUNK // 2, n - i)
        fill_words(S, W, buf, 2 * m)
        if is64:
            A = f64_at(addr + 8 * i, m)
            for j in range(m):
                r = (np.uint64(buf[2 * j]) << _U32) | np.uint64(buf[2 * j + 1])
                A[j] = scale if np.float64(r & _M53) * _INV53 < keep else 0.0
        else:
            B = f32_at(addr + 4 * i, m)
            s32 = np.float32(scale)
            for j in range(m):
                r = (np.uint64(buf[2 * j]) << _U32) | np.uint64(buf[2 * j + 1])
                B[j] = s32 if np.float64(r & _M53) * _INV53 < keep else np.float32(0.0)
        i += m
    return 0


FILL_SIG = "int64(int64, int64, int64, int64, float64, float64)"
