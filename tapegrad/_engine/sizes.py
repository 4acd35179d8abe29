"""Sizes checked as PyTorch checks them, in Python, before a kernel or the engine's tables
see them: kernels compute in int64, so a size whose product overflows would wrap there,
and a tensor would claim more elements than its memory holds.

PyTorch's checks, with its messages:
- a new tensor's sizes must be >= 0 ("Trying to create tensor with negative dimension");
- its storage: the product of its sizes (each partial product in 64 unsigned bits, so a
  later 0 does not undo an overflow) times the item size must fit in int64 ("Storage
  size calculation overflowed");
- its contiguous strides (products of the later sizes, a 0 counting as 1) must fit in
  int64 ("Stride calculation overflowed");
- a view's element count (the same product, without the item size) must fit in int64
  ("numel: integer multiplication overflow"; a negative size counts as a huge one).
An allocation that passes them but exceeds the machine's memory and swap is refused with
a MemoryError before any memory is touched (the engine's stor_new holds the same limit,
for the results that kernels size).

Pure Python (no compiled code): editing it recompiles nothing.
"""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import os

from . import layout as L

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
_U64 = 1 << 64


def _machine_bytes():
    """Physical memory plus swap, the most one allocation can ever be filled with (what
    Linux's default overcommit heuristic allows one mapping); int64's maximum where the
    system does not tell."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return INT64_MAX
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("SwapTotal:"):
                    total += int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    return total if 0 < total <= INT64_MAX else INT64_MAX


_LIMIT = [_machine_bytes()]
_MACHINE = [True]       # whether _LIMIT is the machine's (for the MemoryError's words)


def alloc_limit():
    """The largest allocation tapegrad tries, in bytes."""
    return _LIMIT[0]


def set_limit(nbytes=None):
    """Set the limit alloc_limit() reads (None: the machine's memory and swap); returns
    the previous one. state.set_alloc_limit also gives it to the engine's allocator."""
    old = _LIMIT[0]
    machine = nbytes is None
    if machine:
        nbytes = _machine_bytes()
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or not 0 <= nbytes <= INT64_MAX:
        raise ValueError(f"set_alloc_limit: expected a byte count in [0, 2**63), got {nbytes!r}")
    _LIMIT[0] = nbytes
    _MACHINE[0] = machine
    return old


# ---------------------------------------------------------------- PyTorch's rules
def _product(sizes):
    """The product of sizes as PyTorch's overflow check takes it: each partial product
    in 64 unsigned bits (a negative size reads as 2**64 + size). Returns (product mod
    2**64, whether a partial product overflowed)."""
    p, over = 1, False
    for s in sizes:
        p *= s % _U64
        if p >= _U64:
            over = True
            p %= _U64
    return p, over


def storage_overflows(shape, itemsize):
    p, over = _product(shape)
    return over or p * itemsize > INT64_MAX


def strides_overflow(shape):
    st = 1
    for s in reversed(shape[1:]):
        st *= s if s > 1 else 1
        if st > INT64_MAX:
            return True
    return False


def numel_overflows(shape):
    p, over = _product(shape)
    return over or p > INT64_MAX


def contiguous_strides(shape):
    st, out = 1, []
    for s in reversed(shape):
        out.append(st)
        st *= s if s > 1 else 1
    return out[::-1]


# ---------------------------------------------------------------- the errors
def negative_dimension_error(shape):
    first = next(s for s in shape if s < 0)
    return RuntimeError(f"Trying to create tensor with negative dimension {first}: "
                        f"{list(shape)}")


def storage_error(shape, strides=False):
    """PyTorch's message; with strides, as its *_like and copies word it (the result's
    contiguous strides)."""
    msg = f"Storage size calculation overflowed with sizes={list(shape)}"
    if strides:
        msg += f" and strides={contiguous_strides(shape)}"
    return RuntimeError(msg)


def stride_error():
    return RuntimeError("Stride calculation overflowed")


def numel_error():
    return RuntimeError("numel: integer multiplication overflow")


def _human(nbytes):
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if nbytes < 1024 or unit == "EiB":
            return f"{nbytes:.1f} {unit}" if unit != "bytes" else f"{nbytes} bytes"
        nbytes /= 1024
    return ""       # (unreachable)


def memory_error(nbytes):
    """PyTorch's words ("can't allocate memory: you tried to allocate N bytes") as a
    MemoryError, saying why when tapegrad's limit refused it."""
    msg = f"tapegrad: can't allocate memory: you tried to allocate {nbytes} bytes"
    if nbytes > _LIMIT[0]:
        limit = ("this machine's memory and swap" if _MACHINE[0] else
                 "the limit set by set_alloc_limit")
        msg += f" ({_human(nbytes)}), more than {limit} ({_human(_LIMIT[0])})"
    return MemoryError(msg)


def engine_error(code, err, asked):
    """The exception for an engine status about sizes: E_OVERFLOW (err = ndim, shape at
    1..8, item size at 9, 0 for a view) or E_NOMEM (asked: the bytes refused, -1 when the
    count overflowed)."""
    if code == L.E_NOMEM:
        if asked < 0:
            return RuntimeError("Storage size calculation overflowed")
        return memory_error(asked)
    nd = int(err[0])
    shape = [int(s) for s in err[1:1 + nd]]
    isz = int(err[9])
    if isz == 0:
        return numel_error()
    if strides_overflow(shape) and not storage_overflows(shape, isz):
        return stride_error()
    return storage_error(shape)


# ---------------------------------------------------------------- checks
def check_int64(value, fn, pos, name="size"):
    """A size argument PyTorch can unpack: an int64 (larger Python ints are its TypeError)."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise TypeError(f"{fn}(): argument '{name}' failed to unpack the object at pos {pos} "
                        f"with error \"Overflow when unpacking long long\"")
    return value


def check_new(shape, itemsize, strides=False):
    """shape (sizes >= 0, checked by the caller) as the shape of a new contiguous tensor
    of itemsize-byte elements: PyTorch's storage and stride errors, then a MemoryError for
    what is more than the machine has. strides: word the storage error as PyTorch's
    *_like functions do."""
    n = 1
    for s in shape:
        n *= s
    nbytes = n * itemsize
    if 0 < nbytes <= _LIMIT[0]:
        return nbytes       # (no size is 0: every partial product and stride is <= n)
    if storage_overflows(shape, itemsize):
        raise storage_error(shape, strides)
    if strides_overflow(shape):
        raise stride_error()
    if nbytes > _LIMIT[0]:
        raise memory_error(nbytes)
    return nbytes


def check_view(shape, contiguous=False):
    """shape as the shape of a view: its element count must fit in int64; a view with
    contiguous strides (view, reshape) also needs those to fit."""
    if numel_overflows(shape):
        raise numel_error()
    if contiguous and strides_overflow(shape):
        raise stride_error()
