"""Elementwise kernels on more than one core: the engine splits a large contiguous loop
into index ranges and runs all but the first on POSIX threads it starts for the call.

A generated elementwise entry takes (desc, part): part 0 is the whole index space, else
the address of [lo, hi]. Only flat (all-contiguous) loops are split, so the parts write
disjoint memory and each element sees exactly the operations it would in one loop: the
result is bitwise the same for any thread count. The calling thread holds the GIL
throughout; the others run only compiled loops that cannot raise (NumPy's error model, no
allocation), so they never need it.

Threads are started per call rather than kept in a pool: only loops of at least
C_PAR_MIN elements per thread are split, where the start-up cost is noise.
"""
import numpy as np
from numba import types

from .layout import K_OK, D_N, D_ADDR, D_SPAN
from .lowlevel import jit, cfunc, i64_at, f32_at, f64_at, call_kernel

_pthread_create = types.ExternalFunction(
    "pthread_create", types.int32(types.int64, types.int64, types.int64, types.int64))
_pthread_join = types.ExternalFunction("pthread_join", types.int32(types.int64, types.int64))

BW = 8           # one part's block: kernel, desc, lo, hi, status, pthread id
WORKER_SIG = types.int64(types.int64)


def ew_worker_py(arg):
    """A started thread's body: run the kernel on its part, keep the status."""
    B = i64_at(arg, BW)
    B[4] = call_kernel(B[0], B[1], arg + 16)
    return 0


@jit
def split_call(worker, fn, daddr, n, nthreads, per_min):
    """Run elementwise kernel fn over n elements in up to nthreads parts, each at least
    per_min long. If a thread cannot be started its part runs here; statuses combine."""
    parts = min(nthreads, max(1, n // per_min))
    if parts <= 1 or worker == 0:
        return call_kernel(fn, daddr, 0)
    chunk = ((n + parts - 1) // parts + 63) // 64 * 64      # whole cache lines per part
    blk = np.zeros((parts, BW), np.int64)
    base = blk.ctypes.data
    for p in range(parts):
        blk[p, 0] = fn
        blk[p, 1] = daddr
        blk[p, 2] = min(n, p * chunk)
        blk[p, 3] = min(n, (p + 1) * chunk)
        blk[p, 4] = K_OK
    started = 0
    for p in range(1, parts):
        addr = base + p * BW * 8
        if _pthread_create(addr + 40, 0, worker, addr) != 0:
            break
        started = p
    st = call_kernel(fn, daddr, base + 16)
    for p in range(started + 1, parts):           # threads that could not start
        blk[p, 4] = call_kernel(fn, daddr, base + p * BW * 8 + 16)
    for p in range(1, started + 1):
        _pthread_join(blk[p, 5], 0)
    for p in range(1, parts):
        if st == K_OK and blk[p, 4] != K_OK:
            st = blk[p, 4]
    return st


@jit
def part_range(D, part):
    """(first element, count) of the part of descriptor D's index space that an
    elementwise entry called with part runs."""
    if part == 0:
        return 0, D[D_N]
    R = i64_at(part, 2)
    return R[0], R[1] - R[0]


@jit
def operand_f32(D, k, lo, n):
    """Operand k's elements for a part: that range of a full-length operand, else all of a
    shorter one (the Python scalar, an absent operand, any operand of an unsplit loop)."""
    if D[D_SPAN + k] == D[D_N]:
        return f32_at(D[D_ADDR + k] + 4 * lo, n)
    return f32_at(D[D_ADDR + k], D[D_SPAN + k])


@jit
def operand_f64(D, k, lo, n):
    if D[D_SPAN + k] == D[D_N]:
        return f64_at(D[D_ADDR + k] + 8 * lo, n)
    return f64_at(D[D_ADDR + k], D[D_SPAN + k])


_WORKER = []


def worker_address():
    """The thread body's C address (compiled on first use)."""
    if not _WORKER:
        from .cache import kernel_cache
        with kernel_cache():
            _WORKER.append(cfunc(WORKER_SIG, cache=True, error_model="numpy")(ew_worker_py))
    return _WORKER[0].address
