"""Tensor's arithmetic: the operators and named methods of the binary and unary
elementwise ops (x + y, x.mul_(2), x.exp(), ...), each a direct engine call on the
common path; mixed dtypes and integer tensors go through PyTorch's promotion
(promotion.py). Every unary op of the table with ``method`` set gets its method and its
in-place twin here."""
import numbers

import numpy as np

from . import dtype as D
from . import methods
from . import promotion
from .tensor import (Tensor, E, run, not_tensor, _CADDR, _new, _is_scalar, _SCALARS, _SOLO,
                     _INPLACE_SOLO)
from .._engine import layout as L
from .._engine.state import GRAD_MODE
from ..ops.registry import BY_NAME, OPS


def _binary_method(op, named=False):
    """Method for a binary op. The operator spelling (named=False) returns NotImplemented
    for an operand it does not take, so Python tries the reflected operator; the named
    method (x.mul(None)) raises PyTorch's TypeError instead."""
    code = op.opcode
    scalars = _SCALARS if op.name not in ("sub", "rsub") else (float, int)

    def method(self, other):
        try:        # (a module-level spelling, tapegrad.mul(None, x): PyTorch's TypeError)
            a = self._i
        except AttributeError:
            raise not_tensor(op.name, self) from None
        if other.__class__ is Tensor or isinstance(other, Tensor):     # (or a Parameter)
            b = other._i
            r = E.op(_CADDR, code, a, b, 0.0, GRAD_MODE.on | _SOLO)
        elif other.__class__ in scalars or (_is_scalar(other) and not (
                scalars is not _SCALARS and isinstance(other, (bool, np.bool_)))):
            r = E.op(_CADDR, code, a, -1, float(other), GRAD_MODE.on | _SOLO)
            b = -1
        else:
            if isinstance(other, (bool, np.bool_)):     # x - True: PyTorch refuses
                return promotion.binary(method, op.name, self, other)
            if named:
                raise not_tensor(op.name, other, "other")
            return NotImplemented
        if r < 0:
            if _mixed(a, b):
                return promotion.binary(method, op.name, self, other)
            r = run(op, a, b, 0.0 if b >= 0 else float(other))
        t = _new(Tensor)
        t._i = r
        return t
    method.__name__ = op.name
    return method


def _mixed(a, b):
    """Whether an op on ids a and b (b < 0: a scalar) needs PyTorch's type promotion:
    kernels take one float dtype."""
    m = E.meta
    dt = m[a, L.M_DTYPE]
    return (dt != L.F32 and dt != L.F64) or (b >= 0 and m[b, L.M_DTYPE] != dt)


def _inplace_method(op, name, out_of_place=None, named=False, nullary=False):
    """x.op_(other), and for a unary op (given its out-of-place method, which an integer
    tensor's promotion goes through) or a nullary one (zero_) x.op_(); the engine keeps
    what the backward reads of the overwritten input, as for every in-place op. As for
    _binary_method, the operator spelling (x *= y) returns NotImplemented for an operand
    it does not take, the named method (named=True) raises PyTorch's TypeError."""
    code = op.opcode
    unary = out_of_place is not None or nullary

    def method(self, other=None):
        if unary:
            if other is not None:
                raise TypeError(f"{name}() takes no arguments (1 given)")
            b, s = -1, 0.0
        elif other.__class__ is Tensor or isinstance(other, Tensor):
            b, s = other._i, 0.0
        elif other.__class__ in _SCALARS or _is_scalar(other):
            b, s = -1, float(other)
        elif named:
            raise not_tensor(name, other, "other")
        else:
            return NotImplemented
        r = E.op(_CADDR, code, self._i, b, s, GRAD_MODE.on | _INPLACE_SOLO)
        if r < 0:
            if _mixed(self._i, b) and (not unary or out_of_place is not None):
                if other is None:
                    return promotion.unary_inplace(out_of_place, op.name, self)
                return promotion.inplace(method, op.name, self, other)
            run(op, self._i, b, s, GRAD_MODE.on | 2)
        return self
    method.__name__ = name
    return method


def _unary_method(op):
    code = op.opcode

    def method(self):
        try:        # (a module-level spelling, tapegrad.exp(3): PyTorch's TypeError)
            a = self._i
        except AttributeError:
            raise not_tensor(op.name, self) from None
        r = E.op(_CADDR, code, a, -1, 0.0, GRAD_MODE.on | _SOLO)
        if r < 0:
            if _mixed(a, -1):
                return promotion.unary(method, op.name, self)
            r = run(op, a)
        t = _new(Tensor)
        t._i = r
        return t
    method.__name__ = op.name
    return method


def _by_operand(tensor_method, scalar_method, name):
    """pow, fmod, remainder: the op for a tensor operand or the one for a Python scalar
    (PyTorch names their nodes apart: PowBackward1 / PowBackward0). Named or operator
    spelling as the two methods given are."""
    def method(self, other):
        if isinstance(other, Tensor):
            return tensor_method(self, other)
        return scalar_method(self, other)
    method.__name__ = name
    return method


def _rtruediv(self, other):
    if not _is_scalar(other):
        return NotImplemented
    if not self.dtype.is_floating_point:
        self = self.to(D.default_float())
    return self.reciprocal() * other         # PyTorch's own decomposition


def _with_alpha(method, name):
    """add/sub (and add_/sub_) with PyTorch's alpha= keyword: self op alpha * other. The
    operators (+, -, +=, -=) keep the plain method."""
    def with_alpha(self, other, *, alpha=1):
        if alpha.__class__ is int and alpha == 1 and isinstance(other, Tensor) and \
                isinstance(self, Tensor):       # the common call: every check below passes
            return method(self, other)
        if not isinstance(self, Tensor) and not (_is_scalar(self) and isinstance(other, Tensor)):
            raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not "
                            f"{type(self).__name__}")
        if not (isinstance(other, Tensor) or _is_scalar(other)):
            raise TypeError(f"{name}(): argument 'other' (position 2) must be Tensor, not "
                            f"{type(other).__name__}")
        if not _is_scalar(alpha):
            raise TypeError(f"{name}(): argument 'alpha' must be Number, not "
                            f"{type(alpha).__name__}")
        if alpha != 1 or isinstance(alpha, (bool, np.bool_)):
            other = _scaled(self, other, alpha)
        if not isinstance(self, Tensor):        # tapegrad.add(2, x), as torch.add allows
            return other + self if name == "add" else other.__rsub__(self)
        return method(self, other)
    with_alpha.__name__ = with_alpha.__qualname__ = name
    return with_alpha


def _scaled(self, other, alpha):
    """alpha * other, after PyTorch's checks of alpha against the result's dtype."""
    rt = promotion.result_type(self, other)
    if isinstance(alpha, (bool, np.bool_)):
        if rt is not D.bool_:
            raise RuntimeError("Boolean alpha only supported for Boolean results.")
    elif not rt.is_floating_point and not isinstance(alpha, numbers.Integral):
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating "
                           "point number.")
    if rt is D.bool_:           # bool arithmetic is logical: alpha only switches other off
        return other & bool(alpha)
    return other * alpha


def _fill_(self, value):
    if isinstance(value, Tensor):
        value = value.item()
    return _FILL(self, float(value))


def _arithmetic_methods():
    """Tensor's arithmetic methods by name, as PyTorch spells them."""
    T = {}
    for name in ("add", "sub", "mul", "div"):
        op = BY_NAME[name]
        dunder = "truediv" if name == "div" else name
        m, ip = _binary_method(op), _inplace_method(op, name + "_")
        T[f"__{dunder}__"], T[f"__i{dunder}__"] = m, ip
        if name in ("add", "sub"):      # (alpha= checks the operand itself)
            T[name], T[name + "_"] = _with_alpha(m, name), _with_alpha(ip, name + "_")
        else:
            T[name] = _binary_method(op, named=True)
            T[name + "_"] = _inplace_method(op, name + "_", named=True)
    T["__radd__"], T["__rmul__"] = T["__add__"], T["__mul__"]
    T["__rsub__"] = _binary_method(BY_NAME["rsub"])
    T["__rtruediv__"] = _rtruediv
    T["true_divide"], T["true_divide_"] = T["div"], T["div_"]
    T["__rpow__"] = _binary_method(BY_NAME["rpow"])
    for named in (False, True):        # (the operators, then the named methods)
        pow_ = _by_operand(_binary_method(BY_NAME["pow_tensor"], named),
                           _binary_method(BY_NAME["pow"], named), "pow")
        ipow = _by_operand(_inplace_method(BY_NAME["pow_tensor"], "pow_", named=named),
                           _inplace_method(BY_NAME["pow"], "pow_", named=named), "pow_")
        if named:
            T["pow"], T["pow_"] = pow_, ipow
        else:
            T["__pow__"], T["__ipow__"] = pow_, ipow
    for name in ("atan2", "hypot", "logaddexp"):
        T[name] = _binary_method(BY_NAME[name], named=True)
    T["atan2_"] = _inplace_method(BY_NAME["atan2"], "atan2_", named=True)
    T["hypot_"] = _inplace_method(BY_NAME["hypot"], "hypot_", named=True)  # (no logaddexp_)
    T["arctan2"], T["arctan2_"] = T["atan2"], T["atan2_"]
    for name in ("fmod", "remainder"):
        T[name] = _by_operand(_binary_method(BY_NAME[name + "_tensor"], True),
                              _binary_method(BY_NAME[name], True), name)
        T[name + "_"] = _by_operand(
            _inplace_method(BY_NAME[name + "_tensor"], name + "_", named=True),
            _inplace_method(BY_NAME[name], name + "_", named=True), name + "_")
    T["__mod__"] = _by_operand(_binary_method(BY_NAME["remainder_tensor"]),
                               _binary_method(BY_NAME["remainder"]), "remainder")
    T["fill_"] = _fill_
    T["zero_"] = _inplace_method(BY_NAME["zero_"], "zero_", nullary=True)
    for op in OPS:
        if op.kind == "unary" and op.method and not op.name.endswith("_"):
            T[op.name] = _unary_method(op)
            if op.name != "clone":
                T[op.name + "_"] = _inplace_method(op, op.name + "_", T[op.name])
    T["__neg__"], T["__abs__"] = T["neg"], T["abs"]
    return T


_FILL = _inplace_method(BY_NAME["fill_"], "fill_")
methods.methods(**_arithmetic_methods())
