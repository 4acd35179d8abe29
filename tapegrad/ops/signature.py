"""How users call an op, declared on its OpDef next to its kernels: PyTorch's signature
(names, parameters, defaults) and the checks its front makes. The front
(tapegrad/_front/generated.py) builds the functions and methods from these declarations,
so an op whose front fits one of them is defined in its family's module alone.

Two shapes of front are declared this way:

- ``Pointwise``: an elementwise op with scalar parameters (the kernel's ``s`` and ``s2``),
  as ``tapegrad.name(input, p1, p2)``, ``x.name(p1, p2)``, ``x.name_(p1, p2)`` and
  ``nn.functional.name(input, p1, p2, inplace=False)``;
- ``Reduction``: a reduction over ``dim`` (an int, a tuple of ints or all dims) with
  ``keepdim``, as ``tapegrad.name(input, dim, keepdim)`` and ``x.name(dim, keepdim)``;
  its integer attributes are named (``OpDef.attrs``), so the front packs them by name.
"""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)

REQUIRED = object()     # a parameter without a default


class Param:
    """One scalar parameter: its name, its default (REQUIRED: none), and the value the
    kernel gets for None where None is allowed (none=...; absent: None is refused)."""
    __slots__ = ("name", "default", "none")
    _REFUSE = object()

    def __init__(self, name, default=REQUIRED, none=_REFUSE):
        self.name, self.default, self.none = name, default, none

    @property
    def allows_none(self):
        return self.none is not Param._REFUSE


class Pointwise:
    """The front of an elementwise op with scalar parameters (at most two: the kernel's s
    and s2, in order). function/method/inplace/functional: whether tapegrad.<name>,
    x.<name>(), x.<name>_() and nn.functional.<name>(...) exist; functional_inplace:
    whether the latter takes PyTorch's inplace=False, and positions whether its messages
    name an argument's position always ("always": PyTorch's Python wrappers, such as
    F.leaky_relu) or only for one given by position ("given": its C bindings). kernel:
    PyTorch's kernel name in its error for an integer tensor. check(values): raises for
    parameter values PyTorch refuses (values: the parameters by name). doc: the
    docstring."""
    __slots__ = ("params", "function", "method", "inplace", "functional",
                 "functional_inplace", "positions", "kernel", "check", "doc")

    def __init__(self, *params, function=True, method=True, inplace=True, functional=False,
                 functional_inplace=True, positions="given", kernel, check=None, doc):
        if len(params) > 2:
            raise ValueError("an elementwise op takes at most two scalar parameters")
        self.params = tuple(p if isinstance(p, Param) else Param(*p) for p in params)
        self.function, self.method, self.inplace = function, method, inplace
        self.functional, self.functional_inplace = functional, functional_inplace
        self.positions = positions
        self.kernel, self.check, self.doc = kernel, check, doc


class Reduction:
    """The front of a reduction: name(input, dim=<dim>, keepdim=False[, *, dtype=None]).
    dim: its default (() or None: every dim). dtype: whether it takes dtype=, converting
    the input first (convert(input, dtype): how, where not by input.to(dtype)). The op's
    attrs name its integer attributes; "dims" (the mask of reduced dims) and "keepdim" are
    the front's, the others are constants given here (attrs=dict(which=1)). numpy: the
    NumPy function an integer tensor is reduced with (no gradient; numpy_dtype: its
    result's dtype), or None to refuse it as PyTorch does. identity: whether reducing
    nothing has a value (a sum's 0); without one (max, amax), an empty reduction is
    PyTorch's error. function/method: whether tapegrad.<name> and x.<name>() exist."""
    __slots__ = ("attrs", "dim", "dtype", "convert", "numpy", "numpy_dtype", "identity",
                 "function", "method", "doc")

    def __init__(self, *, attrs=None, dim=(), dtype=False, convert=None, numpy=None,
                 numpy_dtype=None, identity=True, function=True, method=True, doc):
        self.attrs = dict(attrs or {})
        self.dim, self.dtype, self.convert = dim, dtype, convert
        self.numpy, self.numpy_dtype, self.identity = numpy, numpy_dtype, identity
        self.function, self.method, self.doc = function, method, doc
