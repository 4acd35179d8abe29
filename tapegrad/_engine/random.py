"""Counter-based random draws: element i of a draw is a hash of (seed, i), so a kernel
regenerates fresh numbers from one seed without carrying generator state. Eager dropout
and a compiled replay's dropout both fill their masks here, from a seed drawn from
tapegrad's generator, so the two agree number for number."""
import numpy as np

from .lowlevel import jit, jit_entry, f32_at, f64_at

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@jit
def _uniform(seed, i):
    """splitmix64 of the i-th counter, as a double in [0, 1) (53 bits)."""
    z = np.uint64(seed) + np.uint64(i + 1) * _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    z = z ^ (z >> np.uint64(31))
    return float(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@jit_entry
def fill_dropout(addr, n, is64, seed, p, scale):
    """Each element: scale with probability 1 - p, else 0."""
    if is64:
        A = f64_at(addr, n)
        for i in range(n):
            A[i] = scale if _uniform(seed, i) >= p else 0.0
    else:
        B = f32_at(addr, n)
        s32 = np.float32(scale)
        for i in range(n):
            B[i] = s32 if _uniform(seed, i) >= p else np.float32(0.0)
    return 0


FILL_SIG = "int64(int64, int64, int64, int64, float64, float64)"
