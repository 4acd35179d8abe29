"""The fronts the op table declares (tapegrad/ops/signature.py): for every op whose
OpDef carries a Pointwise or Reduction declaration, the functions and methods PyTorch has
for it, with PyTorch's signatures, checks and messages, registered like every other
front's (methods.py). An op with such a declaration needs no code here or anywhere else
in the front.

Arguments are bound by _Binder, which refuses a missing, repeated or unknown argument with
Python's own TypeError and remembers which were given by keyword: PyTorch's messages name
an argument's position only when it was given by position (its C bindings do; its Python
wrappers such as nn.functional.leaky_relu always do, Binder(positions="always")).
inspect.signature, help() and the type stub show PyTorch's signature.
"""
import inspect
import numbers

import numpy as np

from . import methods
from .dtype import type_name, as_dtype
from .functions import _dims_mask
from .promotion import from_array, to
from .tensor import Tensor, run, _wrap, _numpy_view, not_tensor, type_label
from .._engine import layout as L
from .._engine.state import GRAD_MODE
from ..ops.registry import OPS
from ..ops.signature import Pointwise, Reduction, REQUIRED

_MISSING = object()


class _Binder:
    """Binds (args, kwargs) to parameters (name, default) after the tensor input, as
    Python binds them, and words argument errors as PyTorch does. first: the position
    PyTorch's messages give the first parameter (2 in a function, 1 in a method, which
    does not count self)."""

    def __init__(self, fn, params, first, positions="given", keyword_only=()):
        self.fn, self.params, self.first = fn, tuple(params), first
        self.positions, self.keyword_only = positions, tuple(keyword_only)
        self._take = _taker(fn, self.params, self.keyword_only)

    def bind(self, args, kwargs):
        """(values by name, names given by keyword)."""
        return self._take(None, *args, **kwargs), kwargs.keys()

    def where(self, name, by_keyword):
        """' (position k)' for name's messages, or '' where PyTorch gives none."""
        if name in by_keyword and self.positions != "always":
            return ""
        k = [p for p, _ in self.params].index(name)
        return f" (position {self.first + k})"

    def signature(self, first_name, extra=()):
        P = inspect.Parameter
        ps = [P(first_name, P.POSITIONAL_OR_KEYWORD)]
        ps += [P(p, P.POSITIONAL_OR_KEYWORD, **({} if d is REQUIRED else {"default": d}))
               for p, d in self.params]
        ps += [P(p, P.KEYWORD_ONLY, default=d) for p, d in self.keyword_only]
        return inspect.Signature(ps + list(extra))


def _taker(fn, params, keyword_only):
    """take(input, *args, **kwargs) -> the parameters' values by name: a def named fn with
    the parameters and their defaults, so Python binds the arguments (fast, as it runs on
    every call) and words a missing, repeated or unknown one itself."""
    ns, parts = {}, ["input"]
    for k, (p, d) in enumerate(params):
        parts.append(p if d is REQUIRED else f"{p}=_d{k}")
        ns[f"_d{k}"] = d
    if keyword_only:
        parts.append("*")
        for k, (p, d) in enumerate(keyword_only):
            parts.append(f"{p}=_k{k}")
            ns[f"_k{k}"] = d
    names = [p for p, _ in params] + [p for p, _ in keyword_only]
    src = (f"def {fn}({', '.join(parts)}):\n"
           f"    return {{{', '.join(f'{p!r}: {p}' for p in names)}}}\n")
    exec(compile(src, f"<arguments of {fn}>", "exec"), ns)  # noqa: S102
    return ns[fn]


def _bound(apply, b):
    """call(input, *args, **kwargs): apply to input and the arguments b binds."""
    def call(input, *args, **kwargs):
        values, by_keyword = b.bind(args, kwargs)
        return apply(input, values, by_keyword, b)
    return call


def _named(fn, name, qualname, doc, signature):
    fn.__name__, fn.__qualname__, fn.__doc__ = name, qualname, doc
    fn.__signature__ = signature
    return fn


# ---------------------------------------------------------------- elementwise
def _pointwise(op, spec):
    name = op.name
    params = [(p.name, p.default) for p in spec.params]

    def apply(input, values, by_keyword, inplace, binder):
        if not isinstance(input, Tensor):
            raise not_tensor(name, input)
        if not input.dtype.is_floating_point:
            raise NotImplementedError(f"\"{spec.kernel}\" not implemented for "
                                      f"'{type_name(input.dtype)}'")
        scalars = [0.0, 0.0]
        for k, p in enumerate(spec.params):
            v = values[p.name]
            if v is None and p.allows_none:
                scalars[k] = float(p.none)
            elif v.__class__ is float or v.__class__ is int or isinstance(v, numbers.Real):
                scalars[k] = float(v)
            else:
                raise TypeError(f"{name}(): argument '{p.name}'"
                                f"{binder.where(p.name, by_keyword)} must be Number, not "
                                f"{type_label(v)}")
        if spec.check is not None:
            spec.check(values)
        flags = GRAD_MODE.on | (L.OPF_INPLACE if inplace else 0)
        r = run(op, input._i, s=scalars[0], s2=scalars[1] if len(params) > 1 else None,
                flags=flags)
        return input if inplace else _wrap(r)

    def front(fn_name, first, inplace, positions="given", inplace_arg=False):
        """The function (first=2) or method (first=1) fn_name."""
        keyword_only = ()
        b = _Binder(fn_name, params + ([("inplace", False)] if inplace_arg else []), first,
                    positions, keyword_only)

        def call(input, *args, **kwargs):
            values, by_keyword = b.bind(args, kwargs)
            return apply(input, values, by_keyword, inplace or values.get("inplace", False),
                         b)
        return call, b

    doc = spec.doc
    if spec.function:
        fn, b = front(name, 2, False)
        methods.function(name, _named(fn, name, name, doc, b.signature("input")))
    if spec.method:
        m, b = front(name, 1, False)
        methods.method(name, _named(m, name, f"Tensor.{name}", doc, b.signature("self")))
    if spec.inplace:
        ip, b = front(name + "_", 1, True)
        methods.method(name + "_", _named(ip, name + "_", f"Tensor.{name}_",
                                          f"In-place {name}: {doc}", b.signature("self")))
    if spec.functional:
        f, b = front(name, 2, False, spec.positions, spec.functional_inplace)
        methods.functional(name, _named(f, name, name, doc, b.signature("input")))


# ---------------------------------------------------------------- reductions
def _reduction(op, spec):
    name = op.name
    keyword_only = (("dtype", None),) if spec.dtype else ()

    def apply(input, values, by_keyword, binder):
        if not isinstance(input, Tensor):
            raise not_tensor(name, input)
        dim, keepdim = values["dim"], values["keepdim"]
        if not (dim is None or isinstance(dim, (tuple, list)) or dim.__class__ is int
                or isinstance(dim, np.integer)):
            raise TypeError(f"{name}(): argument 'dim'{binder.where('dim', by_keyword)} "
                            f"must be tuple of ints, not {type_label(dim)}")
        if not isinstance(keepdim, (bool, np.bool_)):
            raise TypeError(f"{name}(): argument 'keepdim'"
                            f"{binder.where('keepdim', by_keyword)} must be bool, not "
                            f"{type_label(keepdim)}")
        if values.get("dtype") is not None:
            dtype = as_dtype(values["dtype"], name)
            input = to(input, dtype) if spec.convert is None else spec.convert(input, dtype)
        nd = input.ndim
        mask = _dims_mask(dim, nd, name)
        reduced = [d for d in range(nd) if mask >> d & 1]
        if not spec.identity and input.numel() == 0:
            if len(reduced) == nd:
                raise RuntimeError(f"{name}(): Expected reduction dim to be specified for "
                                   "input.numel() == 0. Specify the reduction dim with the "
                                   "'dim' argument.")
            for d in reduced:
                if input.shape[d] == 0:
                    raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero "
                                     "size.")
        if not input.dtype.is_floating_point:
            if spec.numpy is None:
                raise RuntimeError(f"{name}(): not implemented for "
                                   f"'{type_name(input.dtype)}' tensors")
            result = getattr(np, spec.numpy)(_numpy_view(input), axis=tuple(reduced),
                                             keepdims=bool(keepdim))
            if values.get("dtype") is not None:       # (a bool sum in bool: any)
                result = np.asarray(result).astype(input.dtype.np)
            elif spec.numpy_dtype is not None:
                result = result.astype(spec.numpy_dtype)
            return from_array(np.asarray(result))
        attrs = dict(spec.attrs, dims=mask, keepdim=bool(keepdim))
        return _wrap(run(op, input._i, iargs=op.pack(**attrs)))

    params = [("dim", spec.dim), ("keepdim", False)]
    for fn_name, first, kind in ((name, 2, "function"), (name, 1, "method")):
        if not getattr(spec, kind):
            continue
        b = _Binder(fn_name, params, first, keyword_only=keyword_only)
        call = _bound(apply, b)
        qual = name if kind == "function" else f"Tensor.{name}"
        sig = b.signature("input" if kind == "function" else "self")
        (methods.function if kind == "function" else methods.method)(
            name, _named(call, name, qual, spec.doc, sig))


for _op in OPS:
    if isinstance(_op.front, Pointwise):
        _pointwise(_op, _op.front)
    elif isinstance(_op.front, Reduction):
        _reduction(_op, _op.front)
del _op
