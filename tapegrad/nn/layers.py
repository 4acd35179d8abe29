"""Layers and loss modules, PyTorch's constructors, defaults and reprs."""
import collections
import collections.abc
import math
import operator
import warnings

from .._front import creation as _creation
from .._front import dtype as D
from ..autograd import no_grad
from . import functional as F
from . import init
from .._front.tensor import Tensor
from .module import Module
from .parameter import Parameter


def _factory(device, dtype, fn):
    """A layer's dtype (the default dtype unless given; float, int or bool taken for a
    dtype, as in PyTorch), after checking device (tapegrad runs on the CPU)."""
    from .._front.promotion import as_dtype
    _creation.check_device(device, fn)
    return D.default_float() if dtype is None else as_dtype(dtype, fn)


def _empty(*shape, dtype=None):
    return _creation.empty(*shape, dtype=dtype or D.default_float())


# ---------------------------------------------------------------- containers
class Sequential(Module):
    """Modules called in order, each on the previous one's output; built from modules or an
    OrderedDict of them."""
    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], collections.OrderedDict):
            for name, m in args[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(args):
                self.add_module(str(i), m)

    def forward(self, input):
        for m in self._modules.values():
            input = m(input)
        return input

    def __getitem__(self, idx):
        mods = list(self._modules.values())
        if isinstance(idx, slice):
            return Sequential(collections.OrderedDict(list(self._modules.items())[idx]))
        return mods[idx]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        """Add a module at the end; returns self."""
        self.add_module(str(len(self)), module)
        return self


class ModuleList(Module):
    """Modules held in a list and registered as children (indexable, iterable; no forward of
    its own)."""
    def __init__(self, modules=None):
        super().__init__()
        for m in modules or ():
            self.append(m)

    def __getitem__(self, idx):
        mods = list(self._modules.values())
        return ModuleList(mods[idx]) if isinstance(idx, slice) else mods[idx]

    def __setitem__(self, idx, module):
        key = list(self._modules)[idx]
        self.add_module(key, module)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        """Add a module at the end; returns self."""
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        """Add the modules of an iterable at the end; returns self."""
        for m in modules:
            self.append(m)
        return self

    def insert(self, index, module):
        """Insert a module before index."""
        mods = list(self._modules.values())
        mods.insert(index, module)
        self._modules.clear()
        for m in mods:
            self.append(m)


def _held_repr(pairs, type_name):
    """The lines ParameterList and ParameterDict print for their (key, value) pairs."""
    lines = []
    for k, p in pairs:
        if isinstance(p, Tensor):
            kind = "Parameter" if isinstance(p, Parameter) else "Tensor"
            size = "x".join(str(n) for n in p.shape)
            lines.append(f"  ({k}): {kind} containing: [{type_name(p)} of size {size}]")
        else:
            lines.append(f"  ({k}): Object of type: {type(p).__name__}")
    return "\n".join(lines)


class _Keyed:
    """The key side of the mapping protocol for a container whose keys, in order, are
    those of self._key_store() (ModuleDict: its modules; ParameterDict: its key list)."""

    def __len__(self):
        return len(self._key_store())

    def __iter__(self):
        return iter(self._key_store())

    def __contains__(self, key):
        return key in self._key_store()

    def keys(self):
        """The keys, in insertion order."""
        return self._key_store().keys()


class ModuleDict(_Keyed, Module):
    """Modules held by string keys and registered as children (a mapping; no forward of its
    own)."""
    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def _key_store(self):
        return self._modules

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __delitem__(self, key):
        del self._modules[key]

    def values(self):
        """The modules, in insertion order."""
        return self._modules.values()

    def items(self):
        """(key, module) pairs, in insertion order."""
        return self._modules.items()

    def update(self, modules):
        """Add or replace modules from a mapping or (key, module) pairs."""
        items = modules.items() if hasattr(modules, "items") else modules
        for k, m in items:
            self[k] = m


class ParameterList(Module):
    """Parameters held in a list, registered under "0", "1", ... (so parameters(),
    state_dict() and optimizers see them); a Tensor appended becomes a Parameter, other
    objects are kept as plain attributes, as in PyTorch."""

    def __init__(self, values=None):
        super().__init__()
        self._size = 0
        if values is not None:
            self.extend(values)

    def _key(self, idx):
        idx = operator.index(idx)
        if not -len(self) <= idx < len(self):
            raise IndexError(f"index {idx} is out of range")
        return str(idx % len(self))

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return ParameterList([self[i] for i in range(*idx.indices(len(self)))])
        return getattr(self, self._key(idx))

    def __setitem__(self, idx, param):
        if isinstance(param, Tensor) and not isinstance(param, Parameter):
            param = Parameter(param)
        setattr(self, self._key(idx), param)

    def __len__(self):
        return self._size

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __iadd__(self, parameters):
        return self.extend(parameters)

    def append(self, value):
        """Add a parameter (a tensor is made a Parameter) at the end; returns self."""
        self._size += 1
        self[self._size - 1] = value
        return self

    def extend(self, values):
        """Add the parameters of an iterable at the end; returns self."""
        if not isinstance(values, collections.abc.Iterable) or isinstance(values, Tensor):
            raise TypeError("ParameterList.extend should be called with an iterable, but got "
                            + type(values).__name__)
        for v in values:
            self.append(v)
        return self

    def __call__(self, *args, **kwargs):
        raise RuntimeError("ParameterList should not be called.")

    def extra_repr(self):     # (PyTorch names the dtype here, the tensor type in a dict)
        return _held_repr(enumerate(self), lambda p: p.dtype)


class ParameterDict(_Keyed, Module):
    """Parameters held by string keys, registered under those keys (so parameters(),
    state_dict() and optimizers see them); a Tensor stored becomes a Parameter, other
    objects are kept as plain attributes. As in PyTorch, a plain dict given to the
    constructor or to update() is taken in sorted key order, an OrderedDict, a
    ParameterDict or a sequence of pairs in its own order."""

    def __init__(self, parameters=None):
        super().__init__()
        self._keys = {}
        if parameters is not None:
            self.update(parameters)

    @staticmethod
    def _attr(key):
        if not isinstance(key, str):
            raise TypeError("Index given to ParameterDict cannot be used as a key as it is not "
                            f"a string (type is '{type(key).__name__}'). Open an issue on github "
                            "if you need non-string keys.")
        return key

    def __getitem__(self, key):
        return getattr(self, self._attr(key))

    def __setitem__(self, key, value):
        attr = self._attr(key)
        self._keys[key] = None
        if isinstance(value, Tensor) and not isinstance(value, Parameter):
            value = Parameter(value)
        setattr(self, attr, value)

    def __delitem__(self, key):
        del self._keys[key]
        delattr(self, self._attr(key))

    def _key_store(self):
        return self._keys

    def __reversed__(self):
        return reversed(self._keys)

    def copy(self):
        """A new ParameterDict holding the same parameters."""
        return ParameterDict(collections.OrderedDict((k, self[k]) for k in self._keys))

    def setdefault(self, key, default=None):
        """The parameter at key, first setting it to default if key is missing."""
        if key not in self:
            self[key] = default
        return self[key]

    def clear(self):
        """Remove every parameter."""
        for k in self._keys.copy():
            del self[k]

    def pop(self, key):
        """Remove the parameter at key and return it."""
        v = self[key]
        del self[key]
        return v

    def popitem(self):
        """Remove and return the last inserted (key, parameter) pair."""
        k, _ = self._keys.popitem()         # (KeyError when empty, as dict's)
        self._keys[k] = None
        return k, self.pop(k)

    def get(self, key, default=None):
        """The parameter at key, or default if key is missing."""
        return self[key] if key in self else default

    def fromkeys(self, keys, default=None):
        """A new ParameterDict with each key set to default."""
        return ParameterDict((k, default) for k in keys)

    def items(self):
        """(key, parameter) pairs, in insertion order."""
        return ((k, self[k]) for k in self._keys)

    def values(self):
        """The parameters, in insertion order."""
        return (self[k] for k in self._keys)

    def update(self, parameters):
        """Add or replace parameters from a mapping or (key, value) pairs."""
        if not isinstance(parameters, collections.abc.Iterable):
            raise TypeError("ParametersDict.update should be called with an iterable of "
                            "key/value pairs, but got " + type(parameters).__name__)
        if isinstance(parameters, (collections.OrderedDict, ParameterDict)):
            for k, v in parameters.items():
                self[k] = v
        elif isinstance(parameters, collections.abc.Mapping):
            for k, v in sorted(parameters.items()):
                self[k] = v
        else:
            for j, pair in enumerate(parameters):
                if not isinstance(pair, collections.abc.Iterable):
                    raise TypeError(f"ParameterDict update sequence element #{j} should be "
                                    f"Iterable; is{type(pair).__name__}")
                if len(pair) != 2:
                    raise ValueError(f"ParameterDict update sequence element #{j} has length "
                                     f"{len(pair)}; 2 is required")
                self[pair[0]] = pair[1]

    def __or__(self, other):
        out = self.copy()
        out.update(other)
        return out

    def __ror__(self, other):
        out = other.copy()
        out.update(self)
        return out

    def __ior__(self, other):
        self.update(other)
        return self

    def __call__(self, *args, **kwargs):
        raise RuntimeError("ParameterDict should not be called.")

    def extra_repr(self):
        return _held_repr(self.items(), lambda p: p.type())


# ---------------------------------------------------------------- layers
class Identity(Module):
    """Returns its input unchanged (constructor arguments are ignored)."""
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """y = x @ weight.T + bias, with weight (out_features, in_features) and bias
    (out_features) initialised as PyTorch does."""
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        dtype = _factory(device, dtype, "Linear")
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(_empty(out_features, in_features, dtype=dtype))
        if bias:
            self.bias = Parameter(_empty(out_features, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        """Re-initialise weight and bias as the constructor does."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Bilinear(Module):
    """y = x1^T A x2 + b per output feature, weight A (out_features, in1_features,
    in2_features) and bias (out_features) uniform in +-1 / sqrt(in1_features), as in
    PyTorch."""
    def __init__(self, in1_features, in2_features, out_features, bias=True, device=None,
                 dtype=None):
        super().__init__()
        dtype = _factory(device, dtype, "Bilinear")
        self.in1_features, self.in2_features = in1_features, in2_features
        self.out_features = out_features
        self.weight = Parameter(_empty(out_features, in1_features, in2_features, dtype=dtype))
        if bias:
            self.bias = Parameter(_empty(out_features, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        """Re-initialise weight and bias as the constructor does."""
        if self.in1_features <= 0:
            raise ValueError(f"in1_features must be > 0, but got (in1_features="
                             f"{self.in1_features})")
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self):
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class Flatten(Module):
    """Flatten dims start_dim..end_dim into one (default: all but the batch dim)."""
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class _Activation(Module):
    """An activation module, each with PyTorch's constructor signature; the repr shows
    the _shown fields, and inplace when set (unless _repr_inplace is False: Hardswish and
    Hardsigmoid never show it), as PyTorch's."""
    _shown = ()
    _repr_inplace = True

    def extra_repr(self):
        shown = list(self._shown) + (["inplace"] if self._repr_inplace and getattr(
            self, "inplace", False) else [])
        return ", ".join(f"{f}={getattr(self, f)!r}" if isinstance(getattr(self, f), str)
                         else f"{f}={getattr(self, f)}" for f in shown)


class _InplaceActivation(_Activation):
    """An activation whose only argument is inplace: forward is _fn(input, inplace)."""

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return type(self)._fn(input, self.inplace)


class _PlainActivation(_Activation):
    """An activation without arguments: forward is _fn(input)."""

    def __init__(self):
        super().__init__()

    def forward(self, input):
        return type(self)._fn(input)


class ReLU(_InplaceActivation):
    """max(x, 0), elementwise."""
    _fn = staticmethod(F.relu)


class ReLU6(_InplaceActivation):
    """min(max(x, 0), 6), elementwise."""
    _fn = staticmethod(F.relu6)


class SiLU(_InplaceActivation):
    """x * sigmoid(x), elementwise."""
    _fn = staticmethod(F.silu)


class Mish(_InplaceActivation):
    """x * tanh(softplus(x)), elementwise."""
    _fn = staticmethod(F.mish)


class SELU(_InplaceActivation):
    """Scaled ELU with PyTorch's fixed alpha and scale, elementwise."""
    _fn = staticmethod(F.selu)


class Hardswish(_InplaceActivation):
    """x * relu6(x + 3) / 6, elementwise."""
    _fn = staticmethod(F.hardswish)
    _repr_inplace = False


class Hardsigmoid(_InplaceActivation):
    """relu6(x + 3) / 6, elementwise."""
    _fn = staticmethod(F.hardsigmoid)
    _repr_inplace = False


class Tanh(_PlainActivation):
    """Hyperbolic tangent, elementwise."""
    _fn = staticmethod(F.tanh)


class Sigmoid(_PlainActivation):
    """1 / (1 + exp(-x)), elementwise."""
    _fn = staticmethod(F.sigmoid)


class LogSigmoid(_PlainActivation):
    """log(sigmoid(x)), elementwise, computed stably."""
    _fn = staticmethod(F.logsigmoid)


class Softsign(_PlainActivation):
    """x / (1 + |x|), elementwise."""
    _fn = staticmethod(F.softsign)


class Tanhshrink(_PlainActivation):
    """x - tanh(x), elementwise."""
    _fn = staticmethod(F.tanhshrink)


class GELU(_Activation):
    """GELU activation; approximate='tanh' uses the tanh approximation."""
    _shown = ("approximate",)

    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)


class LeakyReLU(_Activation):
    """x where x > 0, negative_slope * x elsewhere."""
    _shown = ("negative_slope",)

    def __init__(self, negative_slope=0.01, inplace=False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, input):
        return F.leaky_relu(input, self.negative_slope, self.inplace)


class Hardtanh(_Activation):
    """Clamp to [min_val, max_val] (default [-1, 1])."""
    _shown = ("min_val", "max_val")

    def __init__(self, min_val=-1.0, max_val=1.0, inplace=False, min_value=None,
                 max_value=None):
        super().__init__()
        # min_value and max_value: PyTorch's deprecated names, with its warnings
        if min_value is not None:
            warnings.warn("keyword argument `min_value` is deprecated and renamed to "
                          "`min_val`", FutureWarning, stacklevel=2)
            min_val = min_value
        if max_value is not None:
            warnings.warn("keyword argument `max_value` is deprecated and renamed to "
                          "`max_val`", FutureWarning, stacklevel=2)
            max_val = max_value
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace
        if self.max_val <= self.min_val:
            raise AssertionError(f"max_val ({self.max_val}) must be greater than min_val "
                                 f"({self.min_val})")

    def forward(self, input):
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)


class Softplus(_Activation):
    """log(1 + exp(beta * x)) / beta; linear where beta * x > threshold."""
    _shown = ("beta", "threshold")

    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)


class _SoftmaxLike(_Activation):
    """Softmax, LogSoftmax, Softmin: forward is _fn(input, dim), an implicit dim warned
    about at the caller of the module (PyTorch's _stacklevel=5)."""
    _shown = ("dim",)

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return type(self)._fn(input, self.dim, _stacklevel=5)


class Softmax(_SoftmaxLike):
    """Softmax over dim."""
    _fn = staticmethod(F.softmax)


class LogSoftmax(_SoftmaxLike):
    """log(softmax(x)) over dim, computed stably."""
    _fn = staticmethod(F.log_softmax)


class Softmin(_SoftmaxLike):
    """softmax(-x) over dim."""
    _fn = staticmethod(F.softmin)


class ELU(_Activation):
    """x where x > 0, alpha * (exp(x) - 1) elsewhere."""
    _shown = ("alpha",)

    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input):
        return type(self)._fn(input, self.alpha, self.inplace)

    _fn = staticmethod(F.elu)


class CELU(ELU):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)), elementwise."""
    _fn = staticmethod(F.celu)


class GLU(_Activation):
    """Gated linear unit: the first half of dim times sigmoid of the second half."""
    _shown = ("dim",)

    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.glu(input, self.dim)


class Threshold(Module):
    """x where x > threshold, value elsewhere."""
    def __init__(self, threshold, value, inplace=False):
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, input):
        return F.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self):
        return (f"threshold={self.threshold}, value={self.value}"
                + (", inplace=True" if self.inplace else ""))


class _Shrink(Module):
    def __init__(self, lambd=0.5):
        super().__init__()
        self.lambd = lambd

    def forward(self, input):
        return self._fn(input, self.lambd)

    def extra_repr(self):
        return str(self.lambd)


class Softshrink(_Shrink):
    """x - lambd where x > lambd, x + lambd where x < -lambd, 0 elsewhere."""
    _fn = staticmethod(F.softshrink)


class Hardshrink(_Shrink):
    """x where |x| > lambd, 0 elsewhere."""
    _fn = staticmethod(F.hardshrink)


class PReLU(Module):
    """max(0, x) + weight * min(0, x), one learnt slope or one per channel (dim 1)."""

    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        super().__init__()
        dtype = _factory(device, dtype, "PReLU")
        self.num_parameters, self.init = num_parameters, init
        self.weight = Parameter(_empty(num_parameters, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self):
        """Set every slope back to init."""
        init.constant_(self.weight, self.init)

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self):
        return f"num_parameters={self.num_parameters}"


class Unflatten(Module):
    """Splits dim into unflattened_size (one entry may be -1), as Tensor.unflatten."""

    def __init__(self, dim, unflattened_size):
        super().__init__()
        if isinstance(unflattened_size, (tuple, list)):
            for k, n in enumerate(unflattened_size):
                if not isinstance(n, int):
                    raise TypeError(f"unflattened_size must be tuple of ints, but found element "
                                    f"of type {type(n).__name__} at pos {k}")
        else:
            raise TypeError(f"unflattened_size must be a tuple of ints, but found type "
                            f"{type(unflattened_size).__name__}")
        self.dim, self.unflattened_size = dim, unflattened_size

    def forward(self, input):
        return input.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class CosineSimilarity(Module):
    """Cosine similarity of x1 and x2 along dim."""
    def __init__(self, dim=1, eps=1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    """p-norm distance between the rows of x1 and x2 (eps added to the difference)."""
    def __init__(self, p=2.0, eps=1e-6, keepdim=False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class Dropout(Module):
    """In training, zero each element with probability p and scale the rest by 1 / (1 - p);
    the identity in eval mode. The masks are PyTorch's after the same manual_seed."""
    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input):
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Embedding(Module):
    """A lookup table: each index of the input selects a row of weight (num_embeddings,
    embedding_dim)."""
    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None,
                 norm_type=2.0, scale_grad_by_freq=False, sparse=False, _weight=None,
                 _freeze=False, device=None, dtype=None):
        super().__init__()
        dtype = _factory(device, dtype, "Embedding")
        F._embedding_options(max_norm, scale_grad_by_freq, sparse)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError("Padding_idx must be within num_embeddings")
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        if _weight is not None:         # (PyTorch's from_pretrained path: the given values)
            if list(_weight.shape) != [num_embeddings, embedding_dim]:
                raise AssertionError("Shape of weight does not match num_embeddings and "
                                     "embedding_dim")
            self.weight = Parameter(_weight, requires_grad=not _freeze)
            return
        self.weight = Parameter(_empty(num_embeddings, embedding_dim, dtype=dtype),
                                requires_grad=not _freeze)
        init.normal_(self.weight)
        if padding_idx is not None:
            with no_grad():
                from .._front.tensor import _numpy_view
                _numpy_view(self.weight)[padding_idx] = 0

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        return s + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")


class LayerNorm(Module):
    """Normalise over the last dims (normalized_shape) to zero mean and unit variance, then
    scale and shift by learnt weight and bias."""
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
                 device=None, dtype=None):
        super().__init__()
        dtype = _factory(device, dtype, "LayerNorm")
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(_creation.ones(*self.normalized_shape,
                                                   dtype=dtype))
            if bias:
                self.bias = Parameter(_creation.zeros(*self.normalized_shape,
                                                      dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class RMSNorm(Module):
    """Divide by the root mean square over the last dims (normalized_shape), then scale by a
    learnt weight."""
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None,
                 dtype=None):
        super().__init__()
        dtype = _factory(device, dtype, "RMSNorm")
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(_empty(*self.normalized_shape, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self):
        """Set weight back to ones."""
        if self.elementwise_affine:
            init.ones_(self.weight)

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class GroupNorm(Module):
    """Normalise each group of channels (dim 1) per sample, then scale and shift per
    channel."""
    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None,
                 dtype=None, *, bias=True):
        super().__init__()
        dtype = _factory(device, dtype, "GroupNorm")
        if num_channels % num_groups != 0:
            raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups "
                             f"({num_groups})")
        self.num_groups, self.num_channels = num_groups, num_channels
        self.eps, self.affine = eps, affine
        if affine:
            self.weight = Parameter(_empty(num_channels, dtype=dtype))
            if bias:
                self.bias = Parameter(_empty(num_channels, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        """Set weight back to ones and bias to zeros."""
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, "
                f"affine={self.affine}, bias={self.bias is not None}")


# BatchNorm1d lives with the other normalisations (nn/normalization.py)
from .normalization import BatchNorm1d  # noqa: E402,F401


# ---------------------------------------------------------------- recurrent cells
class _RNNCellBase(Module):
    """weight_ih (chunks * hidden, input), weight_hh (chunks * hidden, hidden), bias_ih and
    bias_hh (chunks * hidden), all uniform(-1 / sqrt(hidden), 1 / sqrt(hidden)), as in
    PyTorch; forward takes (batch, input) or one unbatched (input,) sample."""
    _chunks = 1

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__()
        dtype = _factory(device, dtype, type(self).__name__)
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        n = self._chunks * hidden_size
        self.weight_ih = Parameter(_empty(n, input_size, dtype=dtype))
        self.weight_hh = Parameter(_empty(n, hidden_size, dtype=dtype))
        if bias:
            self.bias_ih = Parameter(_empty(n, dtype=dtype))
            self.bias_hh = Parameter(_empty(n, dtype=dtype))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self):
        """Re-initialise every weight and bias from U(-1/sqrt(hidden_size),
        1/sqrt(hidden_size))."""
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def _batched(self, input, hx, names):
        """input as (batch, input_size) and the hidden states (zeros when hx is None) as
        (batch, hidden_size), with PyTorch's checks; and whether input was batched."""
        cls = type(self).__name__
        if input.ndim not in (1, 2):
            raise ValueError(f"{cls}: Expected input to be 1D or 2D, got {input.ndim}D instead")
        for h, name in zip(hx or (), names):
            if h.ndim not in (1, 2):
                raise ValueError(f"{cls}: Expected {name} to be 1D or 2D, got {h.ndim}D "
                                 "instead")
        batched = input.ndim == 2
        if not batched:
            input = input.unsqueeze(0)
        if hx is None:      # (a constant to a compiled replay, as zeros are)
            from .._front.indexing import _constant
            shape = (input.shape[0], self.hidden_size)
            hx = [_constant(lambda: _creation.zeros(*shape, dtype=input.dtype))] * len(names)
        elif not batched:
            hx = [h.unsqueeze(0) for h in hx]
        if input.shape[1] != self.weight_ih.shape[1]:
            raise RuntimeError(f"input has inconsistent input_size: got {input.shape[1]} "
                               f"expected {self.weight_ih.shape[1]}")
        for k, h in enumerate(hx):
            if input.shape[0] != h.shape[0]:
                raise RuntimeError(f"Input batch size {input.shape[0]} doesn't match hidden{k} "
                                   f"batch size {h.shape[0]}")
            if h.shape[1] != self.hidden_size:
                raise RuntimeError(f"hidden{k} has inconsistent hidden_size: got {h.shape[1]}, "
                                   f"expected {self.hidden_size}")
        return input, list(hx), batched

    def _gates(self, input, h):
        return (F.linear(input, self.weight_ih, self.bias_ih),
                F.linear(h, self.weight_hh, self.bias_hh))


class RNNCell(_RNNCellBase):
    """h' = tanh(W_ih x + b_ih + W_hh h + b_hh) (or relu)."""

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None,
                 dtype=None):
        super().__init__(input_size, hidden_size, bias, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        input, (h,), batched = self._batched(input, None if hx is None else (hx,), ("hidden",))
        if self.nonlinearity not in ("tanh", "relu"):
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        gi, gh = self._gates(input, h)
        out = (gi + gh).tanh() if self.nonlinearity == "tanh" else (gi + gh).relu()
        return out if batched else out.squeeze(0)


class LSTMCell(_RNNCellBase):
    """Gates i, f, g, o (in that order along the rows of the weights): c' = f * c + i * g,
    h' = o * tanh(c'); returns (h', c')."""
    _chunks = 4

    def forward(self, input, hx=None):
        input, (h, c), batched = self._batched(input, hx, ("hx[0]", "hx[1]"))
        gi, gh = self._gates(input, h)
        i, f, g, o = (gh + gi).chunk(4, 1)
        c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        h = o.sigmoid() * c.tanh()
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(_RNNCellBase):
    """Gates r, z, n (in that order): r = sigmoid(.), z = sigmoid(.),
    n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1 - z) * n + z * h."""
    _chunks = 3

    def forward(self, input, hx=None):
        input, (h,), batched = self._batched(input, None if hx is None else (hx,), ("hidden",))
        gi, gh = self._gates(input, h)
        ir, iz, in_ = gi.chunk(3, 1)
        hr, hz, hn = gh.chunk(3, 1)
        r = (hr + ir).sigmoid()
        z = (hz + iz).sigmoid()
        n = (in_ + hn * r).tanh()
        out = (h - n) * z + n
        return out if batched else out.squeeze(0)


# ---------------------------------------------------------------- losses
class _Loss(Module):
    """A loss module: reduction, or the one PyTorch's deprecated size_average and reduce
    stand for (resolved here, with PyTorch's warning, as PyTorch's modules do). An
    unknown reduction is refused when the loss is computed, as in PyTorch."""

    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__()
        self.reduction = F._legacy_reduction(reduction, size_average, reduce)


class _WeightedLoss(_Loss):
    """A loss with a class/element weight, held as a buffer (it follows to(dtype) and
    state_dict), as PyTorch's."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean"):
        Module.__init__(self)       # (not _Loss's: the warning's stacklevel counts frames)
        self.reduction = F._legacy_reduction(reduction, size_average, reduce)
        self.register_buffer("weight", weight)


class MSELoss(_Loss):
    """Mean squared error (squared L2) between input and target."""
    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)

    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    """Mean absolute error between input and target."""
    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)

    def forward(self, input, target):
        return F.l1_loss(input, target, reduction=self.reduction)


class SoftMarginLoss(_Loss):
    """log(1 + exp(-target * input)) for targets of -1 and 1."""
    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)

    def forward(self, input, target):
        return F.soft_margin_loss(input, target, reduction=self.reduction)


class HuberLoss(_Loss):
    """Squared error below delta, delta-scaled absolute error above it."""
    def __init__(self, reduction="mean", delta=1.0):
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input, target):
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class SmoothL1Loss(_Loss):
    """Squared error / beta below beta, absolute error above it."""
    def __init__(self, size_average=None, reduce=None, reduction="mean", beta=1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input, target):
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class BCELoss(_WeightedLoss):
    """Binary cross entropy between probabilities (input) and targets."""
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(weight, size_average, reduce, reduction)

    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, weight=self.weight,
                                      reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Binary cross entropy on logits: sigmoid and BCE in one stable step; pos_weight as in
    PyTorch."""
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean",
                 pos_weight=None):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, self.weight,
                                                  pos_weight=self.pos_weight,
                                                  reduction=self.reduction)


class NLLLoss(_WeightedLoss):
    """Negative log likelihood of class indices, given log-probabilities."""
    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None,
                 reduction="mean"):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index,
                          reduction=self.reduction)


class CrossEntropyLoss(_WeightedLoss):
    """log_softmax followed by NLLLoss on class indices, or cross entropy against class
    probabilities; label_smoothing as in PyTorch."""
    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None,
                 reduction="mean", label_smoothing=0.0):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, weight=self.weight,
                               ignore_index=self.ignore_index, reduction=self.reduction,
                               label_smoothing=self.label_smoothing)


class KLDivLoss(_Loss):
    """Kullback-Leibler divergence; input holds log-probabilities (and target too when
    log_target=True)."""
    def __init__(self, size_average=None, reduce=None, reduction="mean", log_target=False):
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input, target):
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class PoissonNLLLoss(_Loss):
    """Negative log likelihood of a Poisson target given its rate (or log-rate when
    log_input=True)."""
    def __init__(self, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                 reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, log_input, target):
        return F.poisson_nll_loss(log_input, target, log_input=self.log_input, full=self.full,
                                  eps=self.eps, reduction=self.reduction)


class GaussianNLLLoss(_Loss):
    """Negative log likelihood of a Gaussian target given mean (input) and variance (var)."""
    def __init__(self, *, full=False, eps=1e-6, reduction="mean"):
        super().__init__(reduction=reduction)
        self.full, self.eps = full, eps

    def forward(self, input, target, var):
        return F.gaussian_nll_loss(input, target, var, full=self.full, eps=self.eps,
                                   reduction=self.reduction)


class _PairLoss(_Loss):
    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        return type(self)._fn(input1, input2, target, margin=self.margin,
                              reduction=self.reduction)


class CosineEmbeddingLoss(_PairLoss):
    """1 - cos(x1, x2) for target 1, max(0, cos(x1, x2) - margin) for target -1."""
    _fn = staticmethod(F.cosine_embedding_loss)


class MarginRankingLoss(_PairLoss):
    """max(0, -target * (x1 - x2) + margin)."""
    _fn = staticmethod(F.margin_ranking_loss)
