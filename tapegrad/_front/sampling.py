"""Random sampling as PyTorch does it on the CPU: the same draws from the same generator
(tapegrad.Generator, PyTorch's mt19937) in the same order, so a seeded program prints
PyTorch's numbers: rand, randn, randint, randperm, the *_like factories, normal,
bernoulli, multinomial, poisson, and the in-place methods uniform_, normal_, random_,
bernoulli_, exponential_, geometric_, cauchy_ and log_normal_.

Arguments are checked here, with PyTorch's errors, before any kernel sees them; kernels
(_engine/mt19937.py) write values in the order PyTorch's TensorIterator visits the output
(memory order). A result whose PyTorch layout is not row-major (rand_like of a transposed
tensor) gets the same values at the same positions in a row-major tensor.

PyTorch's own numbers differ between its CPU builds: see cpu_path(). Draws are not
differentiable: PyTorch gives their inputs zero gradients (normal's mean, bernoulli's p),
tapegrad gives results that do not require grad.
"""
import numbers
import warnings

import numpy as np

from . import dtype as D
from . import methods
from . import out as _out
from .creation import _size, _from_array, _factory_out, _creation_grad_check, _new_options
from .dtype import as_dtype, type_name
from .generator import generator_arg, default_generator
from .tensor import Tensor, E, _array_of, _wrap, view_of_leaf
from .promotion import bump_version
from .._engine import layout as L
from .._engine import core
from .._engine import mt19937 as MT
from .._engine import sizes
from .._engine.state import native_entry, GRAD_MODE, RECORDING, note_break

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_SIGS = {"uniform": MT.UNIFORM_SIG, "normal": MT.NORMAL_SIG, "integers": MT.INTEGERS_SIG,
         "dist": MT.DIST_SIG, "bernoulli_p": MT.BERNOULLI_P_SIG, "randperm": MT.RANDPERM_SIG,
         "multinomial": MT.MULTINOMIAL_SIG, "poisson": MT.POISSON_SIG,
         "fill_dropout": MT.FILL_SIG}
_ENTRIES = {}


def _kernel(name):
    """The C entry of kernel `name` of _engine/mt19937.py (compiled on first use)."""
    k = _ENTRIES.get(name)
    if k is None:
        k = _ENTRIES[name] = native_entry(getattr(MT, name), _SIGS[name])
    return k


# ---------------------------------------------------------------- which PyTorch build
_PATH = list(MT.host_path())        # [contract, vec]


def cpu_path(name=None):
    """Which of PyTorch's CPU builds the draws follow, and (given name) set it:
    "avx2" (its AVX2/AVX-512 kernels: fused multiply-adds, and float32 normal_ in blocks
    of 16 with avx_mathfun's log and sincos) or "default" (ATEN_CPU_CAPABILITY=default:
    no fused multiply-adds, the C library's logf, cosf, sinf). At start-up: the build
    PyTorch picks on this machine ("fused" on 64-bit ARM: fused multiply-adds with the C
    library's functions). Uniform draws (rand, randint, randperm, bernoulli, dropout) are
    the same in every build."""
    if name is not None:
        if name not in ("avx2", "default"):
            raise ValueError(f"cpu_path: expected 'avx2' or 'default', got {name!r}")
        _PATH[:] = [name == "avx2"] * 2
    return "avx2" if _PATH[1] else ("default" if not _PATH[0] else "fused")


# ---------------------------------------------------------------- arguments
def _num(x):
    """A double as PyTorch's messages print it (C++ streams: 6 significant digits)."""
    return "%g" % x


def _real(value, name, fn):
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise TypeError(f"{fn}(): argument '{name}' must be float, not Tensor")
        value = value.item()
    if not isinstance(value, numbers.Real):
        raise TypeError(f"{fn}(): argument '{name}' must be float, not "
                        f"{type(value).__name__}")
    return float(value)


def _int(value, name, fn, position=None):
    """An int argument (a 0-d integer tensor counts); outside int64 is PyTorch's
    ValueError."""
    if isinstance(value, Tensor) and value.numel() == 1 and not value.dtype.is_floating_point:
        value = value.item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        where = f" (position {position})" if position else ""
        raise TypeError(f"{fn}(): argument '{name}'{where} must be int, not "
                        f"{type(value).__name__}")
    value = int(value)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError("Overflow when unpacking long long")
    return value


def _not_implemented(kernel, dt):
    return NotImplementedError(f"\"{kernel}\" not implemented for '{type_name(dt)}'")


def _float_only(dt, kernel):
    if not dt.is_floating_point:
        raise _not_implemented(kernel, dt)


def _sizes_arg(args, size, fn):
    """The size of a factory called as f(2, 3), f((2, 3)) or f(size=(2, 3))."""
    if size is not None:
        if args:
            raise TypeError(f"{fn}() got multiple values for argument 'size'")
        if not isinstance(size, (tuple, list, Tensor)) and not isinstance(
                size, numbers.Integral):
            raise TypeError(f"{fn}(): argument 'size' must be tuple of ints, not "
                            f"{type(size).__name__}")
        args = (size,)
    if not args:
        raise _combination(fn, (), {}, ("tuple of ints size, *, Generator generator, ...",))
    for a in args:
        if not isinstance(a, (tuple, list, Tensor, numbers.Integral)) or isinstance(a, bool):
            raise TypeError(f"{fn}(): argument 'size' (position 1) must be tuple of ints, "
                            f"not {type(a).__name__}")
    return _size(args, fn)


def _like_input(input, fn):
    if not isinstance(input, Tensor):
        raise TypeError(f"{fn}(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    return input


def _memory_format(memory_format, fn):
    if memory_format is not None and str(memory_format) not in (
            "torch.preserve_format", "tapegrad.preserve_format", "preserve_format"):
        raise TypeError(f"{fn}(): tapegrad makes row-major tensors; memory_format must be "
                        "None (preserve_format)")


# ---------------------------------------------------------------- writing draws
def _data_addr(t):
    mv, row = E.meta_mv, t._i * L.MW
    return int(E.stor[mv[row + L.M_SID], L.S_ADDR]) + mv[row + L.M_OFF] * t.dtype.itemsize


def _fresh(shape, dt, like=False):
    """A new row-major tensor of a shape already checked (_size): creation._new without
    reading the size again."""
    sizes.check_new(shape, dt.itemsize, like)
    with E.lock:
        E.iargs[:len(shape)] = shape
        t = _wrap(E.call(core.new_tensor, dt.code, len(shape), False))
    if RECORDING[0] is not None:
        RECORDING[0].created(t._i)
    return t


def _fill_new(t, draw):
    """Fill t, just made (row-major, its own dtype), with draw's values."""
    n = E.meta_mv[t._i * L.MW + L.M_NUMEL]
    if n:
        draw(_data_addr(t), n, True)


def _strides_of(t):
    m = E.meta[t._i].tolist()
    nd = m[L.M_NDIM]
    return tuple(m[L.M_SHAPE:L.M_SHAPE + nd]), tuple(m[L.M_STRIDE:L.M_STRIDE + nd])


def _iteration_order(shape, strides):
    """The dims, outermost first, in which PyTorch's TensorIterator walks an output of
    these strides (reorder_dimensions): smaller strides inner, ties broken by size, a
    zero stride leaving the order as it was."""
    nd = len(shape)
    perm = list(range(nd - 1, -1, -1))             # perm[0]: the innermost dim

    def swap(d0, d1):
        s0, s1 = strides[d0], strides[d1]
        if s0 == 0 or s1 == 0:
            return 0
        if s0 != s1:
            return 1 if s0 > s1 else -1
        return 1 if shape[d0] > shape[d1] else 0
    for i in range(1, nd):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    return perm[::-1]


def _row_major(shape, strides):
    """PyTorch's is_contiguous: row-major without gaps, size-1 dims ignored."""
    expect = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1:
            if s != expect:
                return False
            expect *= n
    return True


def _dense(shape, strides):
    """PyTorch's is_non_overlapping_and_dense."""
    dims = sorted((d for d in range(len(shape)) if shape[d] >= 2), key=lambda d: strides[d])
    expect = 1
    for d in dims:
        if strides[d] != expect:
            return False
        expect *= shape[d]
    return True


def _like_strides(input):
    """The strides PyTorch's empty_like(input) gives (preserve_format): input's when it is
    dense, else dense strides in the order of input's (infer_dense_strides, which sorts
    dims as TensorIterator does)."""
    shape, strides = _strides_of(input)
    if _dense(shape, strides):
        return strides
    dense = [0] * len(shape)
    step = 1
    for d in reversed(_iteration_order(shape, strides)):
        dense[d] = step
        step *= max(shape[d], 1)
    return tuple(dense)


def _scatter(dst, values, strides):
    """dst (an array of the tensor's shape) := values, given in the order PyTorch writes
    a tensor of these strides; converted as C++ converts (float to int truncates)."""
    perm = _iteration_order(dst.shape, strides)
    view = dst.transpose(perm)
    with np.errstate(invalid="ignore", over="ignore"):
        view[...] = values.reshape(view.shape)


def _write(t, native, draw, strides=None):
    """Fill t with draw(addr, n, row_major): n values of NumPy dtype native written at
    addr in the order PyTorch writes a tensor of t's shape and these strides (default
    t's own), converted to t's dtype."""
    n = t.numel()
    if n == 0:
        return
    shape, own = _strides_of(t)
    strides = own if strides is None else strides
    row_major = _row_major(shape, strides)
    if row_major and _row_major(shape, own) and native == t.dtype.np:
        draw(_data_addr(t), n, True)
        return
    tmp = np.empty(n, native)
    draw(tmp.ctypes.data, n, row_major)
    _scatter(_array_of(t), tmp, strides if not row_major else _contiguous(shape))


def _contiguous(shape):
    st, acc = [], 1
    for n in reversed(shape):
        st.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(st))


def _fill_(self, fn, native, draw):
    """An in-place draw into self, with PyTorch's in-place rules: refused on a leaf that
    requires grad (or a view of one) in grad mode; a tensor with history gets the
    values through copy_ (its old values get no gradient, as in PyTorch)."""
    if RECORDING[0] is not None:
        note_break(f"{fn}: an in-place random draw (a replay would not draw again)")
    if GRAD_MODE.on and self.requires_grad:
        if self.is_leaf:
            raise RuntimeError("a leaf Variable that requires grad is being used in an "
                               "in-place operation.")
        if view_of_leaf(self._i):
            raise RuntimeError("a view of a leaf Variable that requires grad is being used "
                               "in an in-place operation.")
        vals = _fresh(tuple(self.shape), self.dtype)
        _write(vals, native, draw, _strides_of(self)[1])
        return self.copy_(vals)
    shape, strides = _strides_of(self)
    if any(s == 0 and n > 1 for n, s in zip(shape, strides)):
        raise RuntimeError("unsupported operation: more than one element of the written-to "
                           "tensor refers to a single memory location. Please clone() the "
                           "tensor before performing the operation.")
    _write(self, native, draw)
    if self.numel():
        bump_version(self)
    return self


def _check_tensor(self, fn):
    if not isinstance(self, Tensor):
        raise TypeError(f"{fn}(): argument 'self' must be Tensor, not {type(self).__name__}")


# ---------------------------------------------------------------- the draws
def _uniform(gen, dt, lo, hi):
    k = _kernel("uniform")
    is64 = int(dt is D.float64)
    contract = int(_PATH[0])
    return lambda addr, n, row_major: k(gen._addr, addr, n, is64, lo, hi, contract)


def _normal(gen, dt, mean, std):
    k = _kernel("normal")
    is64 = int(dt is D.float64)
    path = (MT.N_CONTRACT if _PATH[0] else 0) | (MT.N_VEC if _PATH[1] else 0)

    def draw(addr, n, row_major):
        k(gen._addr, addr, n, is64, mean, std,
          path | (MT.N_FILL16 if row_major and n >= 16 else 0))
    return draw


def _integers(gen, kind, span=0, base=0, code=0):
    k = _kernel("integers")
    return lambda addr, n, row_major: k(gen._addr, addr, n, kind, span, base, code)


def _dist(gen, kind, a, b=0.0):
    k = _kernel("dist")
    contract = int(_PATH[0])
    return lambda addr, n, row_major: k(gen._addr, addr, n, kind, a, b, contract)


def _bounds_check(dt, lo, hi):
    """uniform_'s checks of from and to (PyTorch's uniform_impl_)."""
    info = np.finfo(dt.np)
    cname = "float" if dt is D.float32 else "double"
    if not float(info.min) <= lo <= float(info.max):
        raise RuntimeError(f"from is out of bounds for {cname}")
    if not float(info.min) <= hi <= float(info.max):
        raise RuntimeError(f"to is out of bounds for {cname}")
    if lo > hi:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found "
                           f"from={_num(lo)} > to={_num(hi)}")
    if not hi - lo <= float(info.max):
        raise RuntimeError(f"uniform_ expects to-from <= std::numeric_limits<{type_name(dt)}"
                           f">::max(), but found to={_num(hi)} and from={_num(lo)} which "
                           "result in to-from to exceed the limit")


def _make(args, size, fn, dtype, device, layout, pin_memory, requires_grad, out, fill,
          kernel):
    """A factory: size and options checked, a new tensor (or out=) filled by fill(t)."""
    _new_options(fn, device, layout, pin_memory)
    shape = _sizes_arg(args, size, fn)
    if out is not None:
        return _factory_out(out, fn, dtype, requires_grad,
                            lambda dt: _make_new(shape, dt, False, fn, fill, kernel))
    dt = D.default_float() if dtype is None else as_dtype(dtype, fn)
    return _make_new(shape, dt, requires_grad, fn, fill, kernel)


def _make_new(shape, dt, requires_grad, fn, fill, kernel):
    _float_only(dt, kernel)
    _creation_grad_check(dt, requires_grad)
    t = _fresh(shape, dt)
    fill(t)
    if requires_grad:
        t.requires_grad_(True)
    return t


# ---------------------------------------------------------------- factories
def rand(*args, size=None, generator=None, out=None, dtype=None, layout=None, device=None,
         requires_grad=False, pin_memory=False):
    """Uniform draws in [0, 1), PyTorch's: 24 bits of one 32-bit output per float32 value,
    53 bits of two outputs per float64 value."""
    gen = generator_arg(generator, "rand")
    return _make(args, size, "rand", dtype, device, layout, pin_memory, requires_grad, out,
                 lambda t: _fill_new(t, _uniform(gen, t.dtype, 0.0, 1.0)),
                 "check_uniform_bounds")


def randn(*args, size=None, generator=None, out=None, dtype=None, layout=None, device=None,
          requires_grad=False, pin_memory=False):
    """Standard normal draws, PyTorch's: Box-Muller on blocks of 16 uniforms when there
    are at least 16 values, else one normal_distribution<double> draw per value."""
    gen = generator_arg(generator, "randn")
    return _make(args, size, "randn", dtype, device, layout, pin_memory, requires_grad, out,
                 lambda t: _fill_new(t, _normal(gen, t.dtype, 0.0, 1.0)),
                 "normal_kernel_cpu")


def _like(fn, input, generator, dtype, layout, device, requires_grad, memory_format, kernel,
          draw_for):
    input = _like_input(input, fn)
    gen = generator_arg(generator, fn)
    _new_options(fn, device, layout, False)
    _memory_format(memory_format, fn)
    dt = input.dtype if dtype is None else as_dtype(dtype, fn)
    if kernel is not None:
        _float_only(dt, kernel)
    _creation_grad_check(dt, requires_grad)
    strides = _like_strides(input)
    t = _fresh(tuple(input.shape), dt, like=True)
    native, draw = draw_for(gen, dt)
    _write(t, native, draw, strides)
    if requires_grad:
        t.requires_grad_(True)
    return t


def rand_like(input, *, generator=None, dtype=None, layout=None, device=None,
              requires_grad=False, memory_format=None):
    """rand of input's shape and (by default) dtype, drawn in the order of input's layout
    as PyTorch's empty_like keeps it."""
    return _like("rand_like", input, generator, dtype, layout, device, requires_grad,
                 memory_format, "check_uniform_bounds",
                 lambda gen, dt: (dt.np, _uniform(gen, dt, 0.0, 1.0)))


def randn_like(input, *, generator=None, dtype=None, layout=None, device=None,
               requires_grad=False, memory_format=None):
    """randn of input's shape and (by default) dtype, drawn in the order of input's layout
    as PyTorch's empty_like keeps it (a layout that is not row-major draws one value at a
    time, as PyTorch does)."""
    return _like("randn_like", input, generator, dtype, layout, device, requires_grad,
                 memory_format, "normal_kernel_cpu",
                 lambda gen, dt: (dt.np, _normal(gen, dt, 0.0, 1.0)))


# ---------------------------------------------------------------- integers
_MISSING = object()
_DIGITS = {"float32": 24, "float64": 53}
_CNAME = {"float32": "float", "float64": "double", "int64": "long int", "bool": "bool"}


def _through(value, dt):
    """static_cast<int64_t>(static_cast<scalar_t>(value)) on x86 (out of range: INT64_MIN)."""
    f = float(np.array(value, np.int64).astype(dt.np))
    if not -(2.0 ** 63) <= f < 2.0 ** 63:
        return _INT64_MIN
    return int(f)


def _update_from(frm, dt):
    """PyTorch's update_from: from moved up to a value the float dtype holds."""
    up = _through(frm + 1, dt)
    if up < frm:
        n = abs(frm + 1).bit_length() - 1
        frm = up + (1 << (n - _DIGITS[dt.name] + 1))
    return frm


def _update_to(to, dt):
    """PyTorch's update_to: to moved down to a value the float dtype holds."""
    down = _through(to - 1, dt)
    if down >= to:
        n = abs(to - 1).bit_length() - 1
        to = down - (1 << (n - _DIGITS[dt.name] + 1))
    return to


def _check_in_range(frm, to_inc, dt):
    """PyTorch's check_from_to_in_range (and its precision warning for float dtypes)."""
    if dt.is_floating_point:
        digits = _DIGITS[dt.name]
        for value, name in ((frm, "from"), (to_inc, "to - 1")):
            if value < -(1 << digits) or value > (1 << digits):
                warnings.warn(f"{name} is out of bounds [-(2^{digits}), 2^{digits}]. Due to "
                              f"precision limitations {_CNAME[dt.name]} can support discrete "
                              "uniform distribution only within this range. This warning will "
                              "become an error in version 1.7 release, please fix the code in "
                              "advance", UserWarning, stacklevel=4)
        return
    lo, hi = (0, 1) if dt is D.bool_ else (_INT64_MIN, _INT64_MAX)
    if not lo <= frm <= hi:
        raise RuntimeError(f"from is out of bounds for {_CNAME[dt.name]}")
    if not lo <= to_inc <= hi:
        raise RuntimeError(f"to - 1 is out of bounds for {_CNAME[dt.name]}")


def _from_to(frm, to, dt):
    """(kind, span, base) of random_(from, to) on dtype dt, checked as PyTorch checks it
    (to None: up to the dtype's largest value)."""
    if to is not None:
        if not frm < to:
            raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got "
                               f"from={frm} >= to={to}")
        if dt.is_floating_point:
            frm, to = _update_from(frm, dt), _update_to(to, dt)
            if not frm < to:
                raise RuntimeError(f"random_ expects 'from' casted to dtype to be less than "
                                   f"'to' casted to dtype, but got from={frm} >= to={to}")
        _check_in_range(frm, to - 1, dt)
        return MT.FROM_TO, (to - frm) % (1 << 64), frm
    if frm == _INT64_MIN:
        return MT.FULL_RANGE, 0, 0
    if dt.is_floating_point:
        to_inc = 1 << _DIGITS[dt.name]
        frm = _update_from(frm, dt)
        if not frm < to_inc:
            raise RuntimeError(f"random_ expects 'from' casted to dtype to be less than or "
                               f"equal to 'to_inc' casted to dtype, but got from={frm} > "
                               f"to_inc={to_inc}")
    else:
        to_inc = 1 if dt is D.bool_ else _INT64_MAX
    _check_in_range(frm, to_inc, dt)
    return MT.FROM_TO, (to_inc - frm + 1) % (1 << 64), frm


def _span_arg(span):
    """An unsigned 64-bit span as the int64 with its bits."""
    return span - (1 << 64) if span >= 1 << 63 else span


def _integers_into(t, gen, kind, span, base, strides=None):
    """Fill t, just made, with random_'s integers (in the order of a layout of these
    strides; default row-major)."""
    draw = _integers(gen, kind, _span_arg(span), base, t.dtype.code)
    if strides is None and t.dtype is D.int64:
        _fill_new(t, draw)
    else:
        _write(t, np.int64, draw, strides)


def _type_label(v):
    return "Tensor" if isinstance(v, Tensor) else type(v).__name__


def _combination(fn, args, given, overloads):
    got = ", ".join([_type_label(a) for a in args]
                    + [f"{k}={_type_label(v)}" for k, v in given.items()])
    return TypeError(f"{fn}() received an invalid combination of arguments - got ({got}), "
                     "but expected one of:\n" + "".join(f" * ({o})\n" for o in overloads))


_RANDINT = ("int high, tuple of ints size, *, Generator generator, ...",
            "int low, int high, tuple of ints size, *, Generator generator, ...")
_RANDINT_LIKE = ("Tensor input, int high, *, Generator generator, ...",
                 "Tensor input, int low, int high, *, Generator generator, ...")


def _int_or_none(v):
    """v as an int when PyTorch takes it for one (a 0-d integer tensor counts)."""
    if isinstance(v, Tensor) and v.numel() == 1 and not v.dtype.is_floating_point:
        v = v.item()
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
        return None
    v = int(v)
    if not _INT64_MIN <= v <= _INT64_MAX:
        raise ValueError("Overflow when unpacking long long")
    return v


def _bind(fn, args, given, names, overloads, first=1):
    """PyTorch's binding of randint's overloads: the arguments by position and name;
    with two of them a wrong type names the argument, with three it is the invalid
    combination (several overloads take three)."""
    if len(args) + len(given) != len(names) or len(args) > len(names):
        raise _combination(fn, args, given, overloads)
    bound = dict(given)
    for name, value in zip(names, args):
        if name in bound:
            raise _combination(fn, args, given, overloads)
        bound[name] = value
    if set(bound) != set(names):
        raise _combination(fn, args, given, overloads)
    out = {}
    for pos, name in enumerate(names, first):
        v = bound[name]
        if name == "size":
            bad = None if isinstance(v, (tuple, list)) else type(v).__name__
            elem = None
            if bad is None:
                for i, e in enumerate(v):       # (their range: _size's check)
                    if isinstance(e, (bool, np.bool_)) or not isinstance(
                            e, (numbers.Integral, Tensor)):
                        elem = (type(e).__name__, i)
                        break
            if (bad or elem) and len(names) > 2:
                raise _combination(fn, args, given, overloads)
            if bad:
                raise TypeError(f"{fn}(): argument 'size' (position {pos}) must be tuple of "
                                f"ints, not {bad}")
            if elem:
                raise TypeError(f"{fn}(): argument 'size' (position {pos}) must be tuple of "
                                f"ints, but found element of type {elem[0]} at pos {elem[1]}")
            out[name] = v
            continue
        iv = _int_or_none(v)
        if iv is None:
            if len(names) > 2:
                raise _combination(fn, args, given, overloads)
            raise TypeError(f"{fn}(): argument '{name}' (position {pos}) must be int, not "
                            f"{_type_label(v)}")
        out[name] = iv
    return out


def randint(*args, low=_MISSING, high=_MISSING, size=_MISSING, generator=None, out=None,
            dtype=None, layout=None, device=None, requires_grad=False, pin_memory=False):
    """randint(high, size) or randint(low, high, size): integers in [low, high) (low
    defaults to 0), int64 unless dtype says otherwise, as PyTorch's random_(low, high)
    draws them: r % (high - low) + low, r 32 bits for a span below 2**28, else 64."""
    given = {k: v for k, v in (("low", low), ("high", high), ("size", size))
             if v is not _MISSING}
    names = ("low", "high", "size") if len(args) + len(given) == 3 else ("high", "size")
    bound = _bind("randint", args, given, names, _RANDINT)
    lo, hi, shape = bound.get("low", 0), bound["high"], bound["size"]
    gen = generator_arg(generator, "randint")
    _new_options("randint", device, layout, pin_memory)
    shape = _size((tuple(shape),), "randint")

    def make(dt):
        _creation_grad_check(dt, requires_grad and out is None)
        kind, span, base = _from_to(lo, hi, dt)
        t = _fresh(shape, dt)
        _integers_into(t, gen, kind, span, base)
        return t
    if out is not None:
        return _factory_out(out, "randint", dtype, requires_grad, make)
    t = make(D.int64 if dtype is None else as_dtype(dtype, "randint"))
    if requires_grad:
        t.requires_grad_(True)
    return t


def randint_like(input, *args, low=_MISSING, high=_MISSING, generator=None, dtype=None,
                 layout=None, device=None, requires_grad=False, memory_format=None):
    """randint of input's shape and (by default) dtype: randint_like(input, high) or
    randint_like(input, low, high)."""
    input = _like_input(input, "randint_like")
    given = {k: v for k, v in (("low", low), ("high", high)) if v is not _MISSING}
    names = ("low", "high") if len(args) + len(given) == 2 else ("high",)
    bound = _bind("randint_like", args, given, names, _RANDINT_LIKE, first=2)
    lo, hi = bound.get("low", 0), bound["high"]
    gen = generator_arg(generator, "randint_like")
    _new_options("randint_like", device, layout, False)
    _memory_format(memory_format, "randint_like")
    dt = input.dtype if dtype is None else as_dtype(dtype, "randint_like")
    _creation_grad_check(dt, requires_grad)
    kind, span, base = _from_to(lo, hi, dt)
    t = _fresh(tuple(input.shape), dt, like=True)
    _integers_into(t, gen, kind, span, base, _like_strides(input))
    if requires_grad:
        t.requires_grad_(True)
    return t


_RANDPERM_LIMIT = {"float32": (24, "Float"), "float64": (53, "Double")}


def randperm(n, *, generator=None, out=None, dtype=None, layout=None, device=None,
             requires_grad=False, pin_memory=False):
    """A random permutation of 0..n-1, PyTorch's: swaps with 32-bit draws below
    (2**32 - 1) // 20, the inside-out shuffle with 64-bit draws from there."""
    n = _int(n, "n", "randperm", 1)
    gen = generator_arg(generator, "randperm")
    _new_options("randperm", device, layout, pin_memory)

    def make(dt):
        _creation_grad_check(dt, requires_grad and out is None)
        if n < 0:
            raise sizes.negative_dimension_error([n])
        sizes.check_new((n,), dt.itemsize)
        if dt is D.bool_:
            raise _not_implemented("randperm", dt)
        limit = _RANDPERM_LIMIT.get(dt.name)
        if limit is not None and n > (1 << limit[0]) + 1:
            raise RuntimeError(f"n cannot be greater than 2^{limit[0]}+1 for {limit[1]} "
                               "type.")
        t = _fresh((n,), dt)
        k = _kernel("randperm")
        _write(t, np.int64, lambda addr, m, rm: k(gen._addr, addr, m, MT.SMALL_RANDPERM))
        return t
    if out is not None:
        return _factory_out(out, "randperm", dtype, requires_grad, make)
    t = make(D.int64 if dtype is None else as_dtype(dtype, "randperm"))
    if requires_grad:
        t.requires_grad_(True)
    return t


# ---------------------------------------------------------------- in-place methods
def uniform_(self, *args, generator=None, **bounds):
    """uniform_(from=0, to=1): PyTorch's uniform draws, x * (to - from) + from in the
    dtype (one rounding where PyTorch's build fuses it, see cpu_path)."""
    _check_tensor(self, "uniform_")
    if len(args) > 2:
        raise TypeError(f"uniform_() takes at most 2 positional arguments ({len(args)} given)")
    for key in bounds:
        if key not in ("from", "to"):
            raise TypeError(f"uniform_() got an unexpected keyword argument '{key}'")
    vals = dict(zip(("from", "to"), args))
    for key, value in bounds.items():
        if key in vals:
            raise TypeError(f"uniform_() got multiple values for argument '{key}'")
        vals[key] = value
    lo = _real(vals.get("from", 0.0), "from", "uniform_")
    hi = _real(vals.get("to", 1.0), "to", "uniform_")
    gen = generator_arg(generator, "uniform_")
    _float_only(self.dtype, "check_uniform_bounds")
    _bounds_check(self.dtype, lo, hi)
    return _fill_(self, "uniform_", self.dtype.np, _uniform(gen, self.dtype, lo, hi))


def normal_(self, mean=0.0, std=1.0, *, generator=None):
    """normal_(mean=0, std=1): PyTorch's normal draws (see randn) scaled and shifted."""
    _check_tensor(self, "normal_")
    mean = _real(mean, "mean", "normal_")
    std = _real(std, "std", "normal_")
    gen = generator_arg(generator, "normal_")
    if not std >= 0.0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {_num(std)}")
    if self.numel() == 0:
        return self
    _float_only(self.dtype, "normal_kernel_cpu")
    return _fill_(self, "normal_", self.dtype.np, _normal(gen, self.dtype, mean, std))


def random_(self, *args, generator=None, **bounds):
    """random_(), random_(to) or random_(from, to) (to may be None: up to the dtype's
    largest value), PyTorch's integer draws in the tensor's dtype."""
    _check_tensor(self, "random_")
    for key in bounds:
        if key not in ("from", "to"):
            raise TypeError(f"random_() got an unexpected keyword argument '{key}'")
    if len(args) > 2:
        raise TypeError(f"random_() takes at most 2 positional arguments ({len(args)} given)")
    gen = generator_arg(generator, "random_")
    names = ("from", "to") if len(args) + len(bounds) == 2 else ("to",)
    given = dict(bounds)
    for name, value in zip(names, args):
        if name in given:
            raise TypeError(f"random_() got multiple values for argument '{name}'")
        given[name] = value
    dt = self.dtype
    if not given:
        if self.numel() == 0:
            return self
        return _fill_(self, "random_", np.int64, _integers(gen, MT.DTYPE_RANGE, code=dt.code))
    if "to" not in given:
        raise TypeError("random_() received an invalid combination of arguments: expected "
                        "random_(), random_(to) or random_(from, to)")
    frm = _int(given.get("from", 0), "from", "random_")
    to = given["to"]
    to = None if to is None and "from" in given else _int(to, "to", "random_")
    kind, span, base = _from_to(frm, to, dt)
    if self.numel() == 0:
        return self
    return _fill_(self, "random_", np.int64, _integers(gen, kind, _span_arg(span), base))


def _p_tensor(self, p, fn):
    """bernoulli_'s probability tensor, broadcast to self and laid out in the order self
    is written, as a contiguous NumPy array of p's dtype."""
    if not p.dtype.is_floating_point:
        raise _not_implemented("bernoulli_tensor_cpu_p_", p.dtype)
    shape, strides = _strides_of(self)
    pv = p.detach().expand(*shape).numpy() if shape else p.detach().reshape(()).numpy()
    return np.ascontiguousarray(pv.transpose(_iteration_order(shape, strides))).reshape(-1)


def _bernoulli_p_(self, p, gen, fn):
    probs = _p_tensor(self, p, fn)
    bad = ~((probs >= 0) & (probs <= 1))
    k = _kernel("bernoulli_p")
    is64 = int(probs.dtype == np.float64)
    if bad.any():       # (PyTorch stops there, the draws before it made)
        first = int(np.argmax(bad))
        if first:
            k(gen._addr, np.empty(first).ctypes.data, first, probs.ctypes.data, is64)
        raise RuntimeError("Expected p_in >= 0 && p_in <= 1 to be true, but got false.  "
                           "(Could this error message be improved?  If so, please report an "
                           "enhancement request to PyTorch.)")
    return _fill_(self, fn, np.float64,
                  lambda addr, n, rm: k(gen._addr, addr, n, probs.ctypes.data, is64))


def bernoulli_(self, p=0.5, *, generator=None):
    """bernoulli_(p=0.5): 1 with probability p (a number, or a tensor broadcast to self:
    float32 probabilities draw a float uniform each, float64 ones a double), else 0."""
    _check_tensor(self, "bernoulli_")
    gen = generator_arg(generator, "bernoulli_")
    if isinstance(p, Tensor):
        if self.numel() == 0:
            return self
        return _bernoulli_p_(self, p, gen, "bernoulli_")
    p = _real(p, "p", "bernoulli_")
    if not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={_num(p)}")
    if self.numel() == 0:
        return self
    return _fill_(self, "bernoulli_", np.float64, _dist(gen, MT.BERNOULLI, p))


def exponential_(self, lambd=1.0, *, generator=None):
    """exponential_(lambd=1): -log1p(-u) / lambd per value (u a double uniform)."""
    _check_tensor(self, "exponential_")
    lambd = _real(lambd, "lambd", "exponential_")
    gen = generator_arg(generator, "exponential_")
    if not lambd > 0.0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={_num(lambd)}")
    if self.numel() == 0:
        return self
    if not self.dtype.is_floating_point:
        raise RuntimeError("Exponential distribution is a continuous probability "
                           "distribution. dtype must be a floating point but you specified "
                           f"{type_name(self.dtype)}")
    return _fill_(self, "exponential_", np.float64, _dist(gen, MT.EXPONENTIAL, lambd))


def geometric_(self, p, *, generator=None):
    """geometric_(p): ceil(log(u) / log1p(-p)) per value (u a double uniform)."""
    _check_tensor(self, "geometric_")
    p = _real(p, "p", "geometric_")
    gen = generator_arg(generator, "geometric_")
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={_num(p)}")
    if self.numel() == 0:
        return self
    if self.dtype is D.bool_:
        raise _not_implemented("geometric_cpu", self.dtype)
    return _fill_(self, "geometric_", np.float64, _dist(gen, MT.GEOMETRIC, p))


def cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    """cauchy_(median=0, sigma=1): median + sigma * tan(pi * (u - 1/2)) per value."""
    _check_tensor(self, "cauchy_")
    median = _real(median, "median", "cauchy_")
    sigma = _real(sigma, "sigma", "cauchy_")
    gen = generator_arg(generator, "cauchy_")
    if not sigma > 0.0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={_num(sigma)}")
    if not self.dtype.is_floating_point:
        raise RuntimeError("Cauchy distribution is a continuous probability distribution. "
                           f"dtype must be a floating point but you specified "
                           f"{_CNAME[self.dtype.name]}")
    if self.numel() == 0:
        return self
    return _fill_(self, "cauchy_", np.float64, _dist(gen, MT.CAUCHY, median, sigma))


def log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    """log_normal_(mean=1, std=2): exp of normal_distribution<double>(mean, std) draws."""
    _check_tensor(self, "log_normal_")
    mean = _real(mean, "mean", "log_normal_")
    std = _real(std, "std", "log_normal_")
    gen = generator_arg(generator, "log_normal_")
    if not std > 0.0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={_num(std)}")
    if self.numel() == 0:
        return self
    _float_only(self.dtype, "log_normal_cpu")
    return _fill_(self, "log_normal_", np.float64, _dist(gen, MT.LOG_NORMAL, mean, std))


# ---------------------------------------------------------------- functions
def _out_result(out, fn, result, inputs=()):
    """out= of a sampling function: result written into out (PyTorch's out rules)."""
    _out.check(fn, out, inputs)
    _out.cast_check(result.dtype, out)
    return _out.write(out, result)


def _values(t):
    return np.asarray(t.detach().numpy())


def normal(mean, std=1.0, size=None, *, generator=None, out=None, dtype=None, layout=None,
           device=None, requires_grad=False, pin_memory=False):
    """normal(mean, std, size) with numbers, or with a tensor mean and/or std (one draw
    per element of their broadcast shape, as PyTorch: normal_(0, std) then + mean, or
    normal_(0, 1) then * std + mean)."""
    gen = generator_arg(generator, "normal")
    tm, ts = isinstance(mean, Tensor), isinstance(std, Tensor)
    if not tm and not ts:
        if size is None:
            raise TypeError("normal() received an invalid combination of arguments: with a "
                            "float mean and std, size is required")
        mean = _real(mean, "mean", "normal")
        std = _real(std, "std", "normal")
        shape = _sizes_arg((), size, "normal")
        _new_options("normal", device, layout, pin_memory)

        def make(dt):
            _creation_grad_check(dt, requires_grad and out is None)
            t = _fresh(shape, dt)
            if not std >= 0.0:
                raise RuntimeError(f"normal expects std >= 0.0, but found std {_num(std)}")
            if t.numel():
                _float_only(dt, "normal_kernel_cpu")
            _write(t, dt.np, _normal(gen, dt, mean, std))
            return t
        if out is not None:
            return _factory_out(out, "normal", dtype, requires_grad, make)
        t = make(D.default_float() if dtype is None else as_dtype(dtype, "normal"))
        if requires_grad:
            t.requires_grad_(True)
        return t
    if size is not None or dtype is not None or layout is not None or device is not None \
            or requires_grad or pin_memory:
        raise TypeError("normal() received an invalid combination of arguments: size, "
                        "dtype, layout, device, requires_grad and pin_memory go with a float "
                        "mean and std only")
    if ts:
        sv = _values(std)
        if sv.size and not (sv.min() >= 0):
            raise RuntimeError("normal expects all elements of std >= 0.0")
    else:
        std = _real(std, "std", "normal")
        if not std >= 0.0:
            raise RuntimeError(f"normal expects std >= 0.0, but found std {_num(std)}")
    if tm and not ts:
        dt = mean.dtype
        _float_only(dt, "normal_kernel_cpu")
        vals = _normal_values(gen, tuple(mean.shape), dt, 0.0, std)
        result = _from_array(vals + _values(mean), dt, False)
    elif ts and not tm:
        dt = std.dtype
        mean = _real(mean, "mean", "normal")
        _float_only(dt, "normal_kernel_cpu")
        vals = _normal_values(gen, tuple(std.shape), dt, 0.0, 1.0)
        result = _from_array((vals * sv).astype(dt.np) + dt.np.type(mean), dt, False)
    else:
        dt = mean.dtype
        shape = _broadcast(mean, std)
        _float_only(dt, "normal_kernel_cpu")
        vals = _normal_values(gen, shape, dt, 0.0, 1.0)
        with np.errstate(all="ignore"):
            scaled = (vals * sv).astype(dt.np)
        result = _from_array(scaled + _values(mean).astype(dt.np), dt, False)
    if out is not None:
        return _out_result(out, "normal", result, (mean, std))
    return result


def _broadcast(a, b):
    sa, sb = tuple(a.shape), tuple(b.shape)
    nd = max(len(sa), len(sb))
    sa, sb = (1,) * (nd - len(sa)) + sa, (1,) * (nd - len(sb)) + sb
    for d in range(nd - 1, -1, -1):
        if sa[d] != sb[d] and sa[d] != 1 and sb[d] != 1:
            raise RuntimeError(f"The size of tensor a ({sa[d]}) must match the size of "
                               f"tensor b ({sb[d]}) at non-singleton dimension {d}")
    return tuple(max(x, y) for x, y in zip(sa, sb))


def _normal_values(gen, shape, dt, mean, std):
    """normal_(mean, std) of a new row-major tensor, as a NumPy array."""
    vals = np.empty(shape, dt.np)
    if vals.size:
        with np.errstate(all="ignore"):
            _normal(gen, dt, mean, std)(vals.ctypes.data, vals.size, True)
    return vals


def bernoulli(input, p=None, *, generator=None, out=None):
    """bernoulli(input): 1 with probability input (float32 probabilities draw a float
    uniform each, float64 a double); bernoulli(input, p): 1 with probability p, in
    input's dtype."""
    if not isinstance(input, Tensor):
        raise TypeError(f"bernoulli(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    gen = generator_arg(generator, "bernoulli")
    result = _fresh(tuple(input.shape), input.dtype)
    if p is None:
        bernoulli_(result, input, generator=gen)
    else:
        bernoulli_(result, p, generator=gen)
    if out is not None:
        return _out_result(out, "bernoulli", result, (input,))
    return result


_FLOAT32_MAX_CONSECUTIVE_INT = 1 << 24


def multinomial(input, num_samples, replacement=False, *, generator=None, out=None):
    """num_samples category indices per row of input (1-D or 2-D, non-negative weights),
    as PyTorch draws them: without replacement (or one sample) the largest p / q with q
    exponential draws (argmax, or topk); with replacement a binary search of each row's
    normalised cumulative sums for a double uniform per sample."""
    if not isinstance(input, Tensor):
        raise TypeError(f"multinomial(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    n_sample = _int(num_samples, "num_samples", "multinomial", 2)
    if not isinstance(replacement, (bool, np.bool_)):
        raise TypeError(f"multinomial(): argument 'replacement' (position 3) must be bool, "
                        f"not {type(replacement).__name__}")
    gen = generator_arg(generator, "multinomial")
    if not 0 < input.ndim <= 2:
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                           f"{type_name(input.dtype)}")
    if n_sample <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    ncat = input.shape[-1]
    if not (replacement or n_sample <= ncat):
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without "
                           "replacement")
    if ncat > _FLOAT32_MAX_CONSECUTIVE_INT:
        raise RuntimeError("number of categories cannot exceed 2^24")
    rows = 1 if input.ndim == 1 else input.shape[0]
    shape = (n_sample,) if input.ndim == 1 else (rows, n_sample)
    sizes.check_new(shape, 8)
    if rows * n_sample == 0:
        result = np.zeros(shape, np.int64)
    elif not replacement or n_sample == 1:
        result = _multinomial_exponential(input, n_sample, gen)
    else:
        result = _multinomial_cdf(input, rows, ncat, n_sample, gen)
    result = _from_array(result, D.int64, False)
    if out is not None:
        return _out_result(out, "multinomial", result, (input,))
    return result


def _multinomial_exponential(input, n_sample, gen):
    p = _values(input)
    if p.size == 0:
        raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the "
                           "operation has no identity.")
    if not (p.max() < np.inf and p.min() >= 0):
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    if (p.sum(-1, dtype=p.dtype) == 0).any():
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    q = np.empty(p.shape, p.dtype)
    _scatter_draws(q, _like_strides(input) or _contiguous(p.shape),
                   np.float64, _dist(gen, MT.EXPONENTIAL, 1.0))
    with np.errstate(all="ignore"):
        ratio = p / q
    if n_sample == 1:
        return np.argmax(ratio, axis=-1)[..., None]
    return np.argsort(-ratio, axis=-1, kind="stable")[..., :n_sample]


def _scatter_draws(dst, strides, native, draw):
    """dst := draws in the order PyTorch writes a tensor of these strides."""
    tmp = np.empty(dst.size, native)
    draw(tmp.ctypes.data, dst.size, _row_major(dst.shape, strides))
    _scatter(dst, tmp, strides)


def _multinomial_cdf(input, rows, ncat, n_sample, gen):
    p = np.ascontiguousarray(_values(input).reshape(rows, ncat))
    valid_rows = rows
    message = None
    for i in range(rows):           # (PyTorch checks each row as it reaches it)
        row = p[i]
        if not (row >= 0).all():
            message = "invalid multinomial distribution (encountering probability entry < 0)"
        elif not np.isfinite(row).all():
            message = ("invalid multinomial distribution (encountering probability entry = "
                       "infinity or NaN)")
        elif not (row > 0).any():
            message = "invalid multinomial distribution (sum of probabilities <= 0)"
        if message is not None:
            valid_rows = i
            break
    out = np.empty((rows, n_sample), np.int64)
    if valid_rows:
        _kernel("multinomial")(gen._addr, p.ctypes.data, int(p.dtype == np.float64),
                               valid_rows, ncat, n_sample, out.ctypes.data)
    if message is not None:
        raise RuntimeError(message)
    return out if input.ndim == 2 else out[0]


def poisson(input, generator=None):
    """Poisson draws with rates input (>= 0), PyTorch's: multiplied uniforms below 10,
    Hoermann's transformed rejection from 10, one rate at a time in row-major order."""
    if not isinstance(input, Tensor):
        raise TypeError(f"poisson(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    gen = generator_arg(generator, "poisson")
    _float_only(input.dtype, "poisson_cpu")
    rates = np.ascontiguousarray(_values(input)).reshape(-1)
    bad = ~(rates >= 0)
    k = _kernel("poisson")
    is64 = int(rates.dtype == np.float64)
    if bad.any():           # (PyTorch stops there, the draws before it made)
        first = int(np.argmax(bad))
        if first:
            k(gen._addr, np.empty(first, np.int64).ctypes.data, first, rates.ctypes.data,
              is64)
        raise RuntimeError("invalid Poisson rate, expected rate to be non-negative")
    counts = np.empty(rates.size, np.int64)
    if rates.size:
        k(gen._addr, counts.ctypes.data, rates.size, rates.ctypes.data, is64)
    return _from_array(counts.astype(input.dtype.np).reshape(tuple(input.shape)),
                       input.dtype, False)


def _bernoulli_method(self, p=None, *, generator=None):
    """bernoulli(p=None) of this tensor (tapegrad.bernoulli(self, p))."""
    return bernoulli(self, p, generator=generator)


def _multinomial_method(self, num_samples, replacement=False, *, generator=None):
    """multinomial of this tensor's rows (tapegrad.multinomial(self, ...))."""
    return multinomial(self, num_samples, replacement, generator=generator)


# ---------------------------------------------------------------- dropout
def dropout_mask(shape, dtype, p, like=None):
    """PyTorch's CPU dropout noise for an input of this shape and dtype: bernoulli_(1 - p)
    on a new tensor, divided by 1 - p, so each element is 1 / (1 - p) in the dtype or 0.
    Drawn from the default generator by the kernel a compiled replay calls, and logged for
    the replay when a step is recorded. like: the input, whose layout PyTorch's noise
    tensor keeps (empty_like), so a transposed input's mask is drawn in its memory order:
    drawn row-major in that order's shape, then permuted back."""
    if like is not None and not like.is_contiguous():     # (row-major: drawn in place)
        strides = _like_strides(like)
        if not _row_major(tuple(shape), strides):
            order = _iteration_order(tuple(shape), strides)
            drawn = dropout_mask([shape[d] for d in order], dtype, p)
            return drawn.permute(*np.argsort(order).tolist())
    keep = 1.0 - p
    scale = float(np.float32(1.0) / np.float32(keep)) if dtype is D.float32 else 1.0 / keep
    mask = _fresh(tuple(shape), dtype)
    n = mask.numel()
    if n:
        _kernel("fill_dropout")(_data_addr(mask), n, int(dtype is D.float64),
                                default_generator._addr, keep, scale)
    if RECORDING[0] is not None:
        RECORDING[0].dropout_mask(mask._i, keep, scale, tuple(shape), dtype.code)
    return mask


methods.functions(rand=rand, randn=randn, rand_like=rand_like, randn_like=randn_like,
                  randint=randint, randint_like=randint_like, randperm=randperm,
                  normal=normal, bernoulli=bernoulli, multinomial=multinomial,
                  poisson=poisson)
methods.methods(uniform_=uniform_, normal_=normal_, random_=random_, bernoulli_=bernoulli_,
                exponential_=exponential_, geometric_=geometric_, cauchy_=cauchy_,
                log_normal_=log_normal_, bernoulli=_bernoulli_method,
                multinomial=_multinomial_method)
