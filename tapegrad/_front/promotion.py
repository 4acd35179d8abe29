"""Dtype rules (PyTorch's type promotion), conversions, and the ops that never carry a
gradient (comparisons, logical ops, integer arithmetic, argmax/argmin).

Kernels work on one float dtype at a time. An op whose operands differ in dtype fails its
fast path; the front then applies PyTorch's promotion here: float results convert the
operands (float32 <-> float64 is a recorded op, so gradients flow back through it) and run
the op again; integer and bool results cannot require grad, so NumPy computes them.
"""
import numbers

import numpy as np

from . import dtype as D
from . import methods
from .dtype import type_name as _type_name, is_dtype, as_dtype
from .._engine import layout as L
from .._engine import core
from .._engine.state import RECORDING
from .tensor import Tensor, E, run, _wrap, _numpy_view, _is_scalar, _dim, not_tensor
from ..ops.registry import BY_NAME
from .creation import from_numpy
from .device import check_device, device as Device
from .tensor import _CADDR

_BOOL, _INT, _FLOAT = 0, 1, 2


def _category(dt):
    return _FLOAT if dt.is_floating_point else (_INT if dt is D.int64 else _BOOL)


def promote_types(a, b):
    """The smallest dtype both convert to (bool < int64 < float32 < float64)."""
    if a is None:
        return b
    if b is None or a is b:
        return a
    order = (D.bool_, D.int64, D.float32, D.float64)
    return a if order.index(a) > order.index(b) else b


def _promote_types_api(type1, type2):
    """tapegrad.promote_types(type1, type2): PyTorch's names, dtypes checked (the internal
    promote_types also takes None, for "no dtype yet")."""
    return promote_types(as_dtype(type1, "promote_types", "type1"),
                         as_dtype(type2, "promote_types", "type2"))


_promote_types_api.__name__ = _promote_types_api.__qualname__ = "promote_types"


def _scalar_dtype(x):
    if isinstance(x, (bool, np.bool_)):
        return D.bool_
    if isinstance(x, numbers.Integral):
        return D.int64
    return D.default_float()    # PyTorch's default dtype


def _combine(higher, lower):
    """PyTorch's combine_categories: a lower-priority operand decides only when it is of
    a higher category."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher.is_floating_point:
        return higher
    if higher is D.bool_ or lower.is_floating_point or (lower is D.int64 and higher is D.bool_):
        return promote_types(higher, lower)
    return higher


def result_type(*operands):
    """torch.result_type: dimensioned tensors outrank 0-d tensors, which outrank Python
    scalars, unless the lower-ranked operand is of a higher category."""
    dim = zero = wrapped = None
    for x in operands:
        if isinstance(x, Tensor):
            if x.ndim:
                dim = promote_types(dim, x.dtype)
            else:
                zero = promote_types(zero, x.dtype)
        elif _is_scalar(x):
            wrapped = promote_types(wrapped, _scalar_dtype(x))
        else:
            raise TypeError(f"expected a Tensor or a number, got {type(x).__name__}")
    return _combine(dim, _combine(zero, wrapped))


def _result_type_api(tensor, other):
    """tapegrad.result_type(tensor, other), PyTorch's two operands (the internal
    result_type takes any number)."""
    return result_type(tensor, other)


_result_type_api.__name__ = _result_type_api.__qualname__ = "result_type"


# ---------------------------------------------------------------- conversions
def _dtype_of(arg):
    if is_dtype(arg):
        return as_dtype(arg, "to")
    if isinstance(arg, Tensor):
        return arg.dtype
    return None


def _to_arguments(args, dtype, device, non_blocking, copy, flags=2):
    """The (dtype, device, non_blocking, copy) of PyTorch's three to() forms: to(dtype,
    non_blocking=False, copy=False), to(device=None, dtype=None, non_blocking=False,
    copy=False), to(other, non_blocking=False, copy=False) (Module.to: flags=1, no copy);
    anything else is PyTorch's TypeError (to() received an invalid combination of
    arguments)."""
    given = ", ".join([type(a).__name__ for a in args] + [
        f"{k}={type(v).__name__}" for k, v in (("dtype", dtype), ("device", device))
        if v is not None])

    def invalid():
        return TypeError(f"to() received an invalid combination of arguments - got ({given}), "
                         "but expected one of: (tapegrad.dtype dtype, bool non_blocking, bool "
                         "copy), (device device, tapegrad.dtype dtype, bool non_blocking, bool "
                         "copy), (Tensor other, bool non_blocking, bool copy)")
    rest = list(args)
    if rest and (isinstance(rest[0], Tensor) or is_dtype(rest[0])):
        if dtype is not None or device is not None:
            raise invalid()
        first = rest.pop(0)
        dtype = first.dtype if isinstance(first, Tensor) else as_dtype(first, "to")
    elif rest:
        if device is not None:
            raise invalid()
        device = rest.pop(0)
        if rest and not isinstance(rest[0], bool) and rest[0] is not None:
            if dtype is not None or not is_dtype(rest[0]):
                raise invalid()
            dtype = rest.pop(0)
        elif rest and rest[0] is None:          # to(device, None): no dtype
            rest.pop(0)
    if len(rest) > flags or not all(isinstance(a, bool) for a in rest):
        raise invalid()
    if rest:
        non_blocking = rest.pop(0)
    if rest:
        copy = rest.pop(0)
    if device is not None and not isinstance(device, (str, bytes, int, Device)):
        raise invalid()
    return (None if dtype is None else as_dtype(dtype, "to")), device, non_blocking, copy


def to(self, *args, dtype=None, device=None, non_blocking=False, copy=False):
    """Tensor.to(dtype), to(other), to("cpu"), to(device, dtype), each with non_blocking
    and copy after (see _to_arguments); the dtype may be given as float, int or bool, as
    in PyTorch. *args because PyTorch's to() is overloaded on its first argument."""
    if (len(args) == 1 and type(args[0]) is D.dtype and args[0].code is not None
            and dtype is None and device is None):
        dtype = args[0]         # to(dtype), the spelling ops use inside: nothing to parse
    elif args or dtype is not None or device is not None:
        dtype, device, non_blocking, copy = _to_arguments(args, dtype, device, non_blocking,
                                                          copy)
    if device is not None and check_device(device, "to").index is not None:
        copy = True     # (cpu:0 is not the tensor's device, cpu: PyTorch copies)
    if dtype is None or dtype is self.dtype:
        return self.clone() if copy else self
    src = self.dtype
    if src.is_floating_point and dtype.is_floating_point:
        op = BY_NAME["to_copy"]
        return _wrap(run(op, self._i, iargs=op.pack(dtype=dtype.code, source=src.code)))
    # a cast to or from int/bool carries no gradient (as in PyTorch)
    return from_array(_numpy_view(self).astype(dtype.np))


def from_array(arr):
    """A new tensor holding a NumPy result: the fresh array is adopted, not copied."""
    arr = np.asarray(arr)
    if arr.dtype not in _ADOPTABLE:
        arr = arr.astype(D.from_numpy_dtype(arr.dtype).np)
    if not arr.flags.c_contiguous or not arr.flags.writeable or arr.base is not None:
        arr = arr.copy()            # (np.ascontiguousarray would make 0-d arrays 1-d)
    return from_numpy(arr)


_ADOPTABLE = {np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64),
              np.dtype(np.bool_)}


def _caster(dtype):
    def cast(self, memory_format=None):
        return to(self, dtype)
    cast.__name__ = dtype.name
    return cast


def _refused_caster(dtype, name):
    def cast(self, memory_format=None):
        raise D.unsupported(dtype, name)
    cast.__name__ = cast.__qualname__ = name
    cast.__doc__ = (f"This tensor as tapegrad.{dtype.name}, in PyTorch: refused with a "
                    f"TypeError, as tapegrad tensors are {D.SUPPORTED}.")
    return cast


# ---------------------------------------------------------------- binary ops
_NUMPY_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
                 "pow": np.power, "pow_tensor": np.power, "maximum": np.maximum,
                 "minimum": np.minimum, "fmod": np.fmod, "fmod_tensor": np.fmod,
                 "remainder": np.remainder, "remainder_tensor": np.remainder}
_REFLECTED = {"rsub": np.subtract, "rpow": np.power}


def _array(x):
    return _numpy_view(x) if isinstance(x, Tensor) else x


def binary(method, opname, a, b):
    """A binary op whose operands' dtypes differ or are not float: PyTorch's promotion."""
    if opname in ("sub", "rsub"):
        bools = [x for x in (a, b) if (x.dtype is D.bool_ if isinstance(x, Tensor)
                                       else isinstance(x, (bool, np.bool_)))]
        if len(bools) == 2:
            raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not "
                               "supported. Use the `^` or `logical_xor()` operator instead.")
        if bools:
            raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not "
                               "supported. If you are trying to invert a mask, use the `~` or "
                               "`logical_not()` operator instead.")
    rt = result_type(a, b)
    if opname in ("div", "atan2", "hypot", "logaddexp") and not rt.is_floating_point:
        rt = D.default_float()              # true division, float-only ops
    if rt.is_floating_point:
        a2 = to(a, rt)
        b2 = to(b, rt) if isinstance(b, Tensor) else b
        return method(a2, b2)
    if rt is D.bool_ and (opname.startswith("pow") or opname == "rpow"):
        if isinstance(b if opname == "rpow" else a, Tensor) and isinstance(
                a if opname == "rpow" else b, Tensor) or opname == "rpow":
            raise NotImplementedError("\"pow\" not implemented for 'Bool'")
        x, y = (_array(b), _array(a)) if opname == "rpow" else (_array(a), _array(b))
        return from_array(np.power(np.asarray(x, np.int64), np.asarray(y, np.int64))
                          .astype(np.bool_))
    if opname in _REFLECTED:
        res = _REFLECTED[opname](_array(b), _array(a))
    else:
        x, y = _array(a), _array(b)
        if opname.startswith("pow") and np.any(np.asarray(y) < 0):
            if not isinstance(b, Tensor):
                raise RuntimeError("Integers to negative integer powers are not allowed.")
            res = _int_pow(x, y)
        else:
            res = _NUMPY_BINARY[opname](x, y)
    return from_array(np.asarray(res, dtype=rt.np))


def _int_pow(x, y):
    """Integer powers with negative exponents, as PyTorch computes them: 1 and -1 keep
    their magnitude, everything else truncates to 0."""
    x, y = np.broadcast_arrays(np.asarray(x, np.int64), np.asarray(y, np.int64))
    neg = np.where(x == 1, 1, np.where(x == -1, np.where(y % 2 == 0, 1, -1), 0))
    return np.where(y < 0, neg, np.power(x, np.maximum(y, 0)))


def inplace(method, opname, a, b):
    """x op= y when dtypes differ: the result must fit x's dtype (PyTorch's rule)."""
    rt = result_type(a, b)
    if opname == "div" and not rt.is_floating_point:
        rt = D.default_float()
    if _category(rt) > _category(a.dtype):
        raise RuntimeError(f"result type {_type_name(rt)} can't be cast to the desired output "
                           f"type {_type_name(a.dtype)}")
    if a.dtype.is_floating_point:
        return method(a, to(b, a.dtype) if isinstance(b, Tensor) else b)
    rec = RECORDING[0]
    if (rec is not None and a.dtype is D.int64 and opname in ("add", "sub")
            and isinstance(b, int) and not isinstance(b, bool) and a.is_contiguous()):
        # (a counter such as BatchNorm's num_batches_tracked: one replayable event)
        rec.int_add(a._i, b if opname == "add" else -b)
        with rec.paused():
            return inplace(method, opname, a, b)
    out = _numpy_view(a)
    out[...] = _NUMPY_BINARY[opname](out, _array(b)).astype(a.dtype.np)
    bump_version(a)
    return a


def bump_version(t):
    """An in-place write made in Python: the engine's own bump (views made under no_grad
    over the memory become stale)."""
    E.entry(core.bump_version_id)(E.caddr, t._i)


_KEEP_INT = {"neg", "abs", "sign", "clone", "relu", "floor", "ceil", "round"}
_NUMPY_UNARY = {"neg": np.negative, "abs": np.abs, "clone": np.copy,
                "sign": lambda a: a.copy() if a.dtype == np.bool_ else np.sign(a),
                "relu": lambda a: np.maximum(a, 0), "floor": np.copy, "ceil": np.copy,
                "round": np.copy}


def unary(method, opname, a):
    """A float op on an int/bool tensor: int-preserving ops stay integer (NumPy computes
    them), the rest compute in the default float dtype, as in PyTorch."""
    if opname in _KEEP_INT:
        if a.dtype is D.bool_ and opname == "neg":
            raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported. "
                               "If you are trying to invert a mask, use the `~` or "
                               "`logical_not()` operator instead.")
        if a.dtype is D.bool_ and opname in ("abs", "relu"):
            raise NotImplementedError(f"\"{opname}_cpu\" not implemented for 'Bool'")
        return from_array(np.asarray(_NUMPY_UNARY[opname](_numpy_view(a)), dtype=a.dtype.np))
    return method(to(a, D.default_float()))


def unary_inplace(method, opname, a):
    """x.op_() on an int/bool tensor: the result must keep x's dtype (PyTorch's rule:
    abs_ and floor_ do, exp_ does not)."""
    r = unary(method, opname, a)
    if r.dtype is not a.dtype:
        raise RuntimeError(f"result type {_type_name(r.dtype)} can't be cast to the desired "
                           f"output type {_type_name(a.dtype)}")
    _numpy_view(a)[...] = _numpy_view(r)
    bump_version(a)
    return a


# ---------------------------------------------------------------- no-gradient ops
def _broadcast_check(a, b):
    if isinstance(b, Tensor):
        sa, sb = list(a.shape), list(b.shape)
        nd = max(len(sa), len(sb))
        for d in range(nd - 1, -1, -1):
            x = sa[d - (nd - len(sa))] if d - (nd - len(sa)) >= 0 else 1
            y = sb[d - (nd - len(sb))] if d - (nd - len(sb)) >= 0 else 1
            if x != y and x != 1 and y != 1:
                raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b "
                                   f"({y}) at non-singleton dimension {d}")


_KINDS = {"lt": 0, "le": 1, "gt": 2, "ge": 3, "eq": 4, "ne": 5}


def _compare(ufunc, name, named=False):
    """Float operands of one dtype (or a float tensor and a Python number): one compiled
    call; anything else: NumPy, with PyTorch's promotion. The operator spelling returns
    NotImplemented for an operand it does not take (x == None is False), the named method
    (named=True: x.eq(None)) raises PyTorch's TypeError."""
    kind = [_KINDS[name]]

    def method(self, other):
        if not isinstance(self, Tensor):
            raise not_tensor(name, self)
        if isinstance(other, Tensor):
            b, s = other._i, 0.0
        elif _is_scalar(other) and not isinstance(other, (bool, np.bool_)):
            b, s = -1, float(other)
        elif _is_scalar(other):
            b, s = None, 0.0
        elif named:
            raise not_tensor(name, other, "other", 2)
        else:
            return NotImplemented
        if b is not None and _fast_compare(self, other, b):
            r = _compare_op(self._i, b, s, kind)
            if r >= 0:
                return _wrap(r)
        _broadcast_check(self, other)
        return from_array(ufunc(_numpy_view(self), _array(other)))
    method.__name__ = name
    return method


def _fast_compare(a, other, b):
    m = E.meta
    dt = m[a._i, L.M_DTYPE]
    if dt != L.F32 and dt != L.F64:
        return False
    # a Python number is compared in the tensor's dtype, as PyTorch (and NumPy) do
    return b < 0 or m[b, L.M_DTYPE] == dt


_COMPARE = BY_NAME["compare"]
_KIND = _COMPARE.slot("kind")


def _compare_op(a, b, s, kind):
    with E.lock:
        E.iargs[_KIND] = kind[0]
        r = E.op(_CADDR, _COMPARE.opcode, a, b, s, 0)
        if r < 0 and r in (L.E_NEED_KERNEL, L.E_GROW_META, L.E_GROW_STOR, L.E_GROW_TAPE):
            return run(_COMPARE, a, b, s, flags=0, iargs=_COMPARE.pack(kind=kind[0]))
    return r


def _bitwise(name, named=False):
    """x & y, x | y, x ^ y (NotImplemented for an operand they do not take) and, named,
    bitwise_and/or/xor (PyTorch's TypeError instead)."""
    fn = getattr(np, f"bitwise_{name}")      # on bools: the logical op

    def method(self, other):
        if not (isinstance(other, Tensor) or _is_scalar(other)):
            if named:
                raise not_tensor(f"bitwise_{name}", other, "other", 2)
            return NotImplemented
        rt = result_type(self, other)
        if rt.is_floating_point:
            raise RuntimeError(f"\"bitwise_{name}_cpu\" not implemented for '{_type_name(rt)}'")
        return from_array(np.asarray(fn(_array(self), _array(other)), dtype=rt.np))
    method.__name__ = f"bitwise_{name}"
    return method


def _logical(name):
    fn = getattr(np, f"logical_{name}")

    def method(self, other):
        if not isinstance(self, Tensor):
            raise not_tensor(f"logical_{name}", self)
        if not isinstance(other, Tensor):
            raise not_tensor(f"logical_{name}", other, "other", 2)
        _broadcast_check(self, other)
        return from_array(fn(_array(self), _array(other)))
    method.__name__ = f"logical_{name}"
    return method


def _invert(self):
    if self.dtype.is_floating_point:
        raise TypeError("~ (bitwise_not) is only supported for integer and bool tensors")
    a = _numpy_view(self)
    return from_array(np.logical_not(a) if a.dtype == np.bool_ else np.invert(a))


def _arg_extreme(fn, name):
    def method(input, dim=None, keepdim=False):
        if not isinstance(input, Tensor):
            raise not_tensor(name, input)
        a = _numpy_view(input)
        if a.size == 0:
            raise IndexError(f"{name}(): Expected reduction dim to be specified for "
                             "input.numel() == 0.")
        if dim is None:
            r = np.asarray(fn(a.reshape(-1)), dtype=np.int64)
            return from_array(r.reshape((1,) * a.ndim) if keepdim else r)
        d = _dim(dim, input.ndim, name)
        if a.ndim == 0:
            return from_array(np.zeros((), np.int64))
        r = fn(a, axis=d)
        if keepdim:
            r = np.expand_dims(r, d)
        return from_array(np.asarray(r, dtype=np.int64))
    method.__name__ = name
    return method


def _nan_first(fn):
    """argmax/argmin that return the first NaN's index, as PyTorch does."""
    def f(a, axis=None):
        r = fn(a, axis=axis)
        if a.dtype.kind == "f":
            nan = np.isnan(a)
            if nan.any():
                first = np.argmax(nan, axis=axis)
                r = np.where(nan.any(axis=axis), first, r)
        return r
    return f


argmax = _arg_extreme(_nan_first(np.argmax), "argmax")
argmin = _arg_extreme(_nan_first(np.argmin), "argmin")


def logical_not(input):
    if not isinstance(input, Tensor):
        raise not_tensor("logical_not", input)
    return from_array(np.logical_not(_numpy_view(input)))


def type_as(self, other):
    if not isinstance(other, Tensor):
        raise not_tensor("type_as", other, "other")
    return to(self, other.dtype)


def _register():
    T = {"to": to, "type_as": type_as}
    for name, dt in (("float", D.float32), ("double", D.float64), ("long", D.int64),
                     ("bool", D.bool_)):
        T[name] = _caster(dt)
    for name, dt in (("half", D.float16), ("bfloat16", D.bfloat16), ("int", D.int32),
                     ("short", D.int16), ("char", D.int8), ("byte", D.uint8),
                     ("cfloat", D.complex64), ("cdouble", D.complex128)):
        T[name] = _refused_caster(dt, name)
    for name, uf in (("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
                     ("ge", np.greater_equal), ("eq", np.equal), ("ne", np.not_equal)):
        T[f"__{name}__"] = _compare(uf, name)
        T[name] = methods.function(name, _compare(uf, name, named=True))
    T.update(greater=T["gt"], less=T["lt"], greater_equal=T["ge"], less_equal=T["le"],
             not_equal=T["ne"])
    for name in ("and", "or", "xor"):
        T[f"__{name}__"] = T[f"__r{name}__"] = _bitwise(name)
        T[f"bitwise_{name}"] = _bitwise(name, named=True)
        T[f"logical_{name}"] = methods.function(f"logical_{name}", _logical(name))
    T["__invert__"] = T["bitwise_not"] = _invert
    T.update(logical_not=logical_not, argmax=argmax, argmin=argmin)
    methods.methods(**T)
    methods.functions(argmax=argmax, argmin=argmin, logical_not=logical_not,
                      result_type=_result_type_api, promote_types=_promote_types_api)


_register()
