"""Layers and loss modules, PyTorch's constructors, defaults and reprs."""
import collections
import collections.abc
import math
import operator

from .. import _creation
from .. import _dtype as D
from ..autograd import no_grad
from . import functional as F
from . import init
from ..tensor import Tensor
from .module import Module
from .parameter import Parameter


def _empty(*shape, dtype=None):
    return _creation.empty(*shape, dtype=dtype or D.float32)


# ---------------------------------------------------------------- containers
class Sequential(Module):
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
        self.add_module(str(len(self)), module)
        return self


class ModuleList(Module):
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
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def insert(self, index, module):
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
        return self._key_store().keys()


class ModuleDict(_Keyed, Module):
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
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def update(self, modules):
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
        self._size += 1
        self[self._size - 1] = value
        return self

    def extend(self, values):
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
        return ParameterDict(collections.OrderedDict((k, self[k]) for k in self._keys))

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def clear(self):
        for k in self._keys.copy():
            del self[k]

    def pop(self, key):
        v = self[key]
        del self[key]
        return v

    def popitem(self):
        k, _ = self._keys.popitem()         # (KeyError when empty, as dict's)
        self._keys[k] = None
        return k, self.pop(k)

    def get(self, key, default=None):
        return self[key] if key in self else default

    def fromkeys(self, keys, default=None):
        return ParameterDict((k, default) for k in keys)

    def items(self):
        return ((k, self[k]) for k in self._keys)

    def values(self):
        return (self[k] for k in self._keys)

    def update(self, parameters):
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
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    def __init__(self, in_features, out_features, bias=True, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(_empty(out_features, in_features, dtype=dtype))
        if bias:
            self.bias = Parameter(_empty(out_features, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Flatten(Module):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


def _activation(name, fn, repr_fields=(), inplace=False, repr_inplace=True):
    """inplace: the module takes PyTorch's inplace= (after its other fields) and fn reads
    it as m.inplace; the repr shows it when set, as PyTorch's (unless repr_inplace=False:
    Hardswish and Hardsigmoid never show it)."""
    fields = repr_fields + ((("inplace", False),) if inplace else ())

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        for (field, default), a in zip(fields, args + (None,) * len(fields)):
            object.__setattr__(self, field, kwargs.get(field, default if a is None else a))

    def forward(self, input):
        return fn(self, input)

    def extra_repr(self):
        shown = [f for f, _ in repr_fields] + (["inplace"] if repr_inplace and getattr(
            self, "inplace", False) else [])
        return ", ".join(f"{f}={getattr(self, f)!r}" if isinstance(getattr(self, f), str)
                         else f"{f}={getattr(self, f)}" for f in shown)
    return type(name, (Module,), {"__init__": __init__, "forward": forward,
                                  "extra_repr": extra_repr})


ReLU = _activation("ReLU", lambda m, x: F.relu(x, m.inplace), inplace=True)
Tanh = _activation("Tanh", lambda m, x: x.tanh())
Sigmoid = _activation("Sigmoid", lambda m, x: x.sigmoid())
GELU = _activation("GELU", lambda m, x: F.gelu(x, approximate=m.approximate),
                   (("approximate", "none"),))
LeakyReLU = _activation("LeakyReLU", lambda m, x: F.leaky_relu(x, m.negative_slope,
                                                               m.inplace),
                        (("negative_slope", 0.01),), inplace=True)
Hardtanh = _activation("Hardtanh", lambda m, x: F.hardtanh(x, m.min_val, m.max_val,
                                                          m.inplace),
                       (("min_val", -1.0), ("max_val", 1.0)), inplace=True)
ReLU6 = _activation("ReLU6", lambda m, x: F.relu6(x, m.inplace), inplace=True)
LogSigmoid = _activation("LogSigmoid", lambda m, x: F.logsigmoid(x))
Softsign = _activation("Softsign", lambda m, x: F.softsign(x))
Softplus = _activation("Softplus", lambda m, x: F.softplus(x, m.beta, m.threshold),
                       (("beta", 1.0), ("threshold", 20.0)))
Softmax = _activation("Softmax", lambda m, x: F.softmax(x, m.dim), (("dim", None),))
LogSoftmax = _activation("LogSoftmax", lambda m, x: F.log_softmax(x, m.dim), (("dim", None),))
SiLU = _activation("SiLU", lambda m, x: F.silu(x, m.inplace), inplace=True)
ELU = _activation("ELU", lambda m, x: F.elu(x, m.alpha, m.inplace), (("alpha", 1.0),),
                  inplace=True)
Mish = _activation("Mish", lambda m, x: F.mish(x, m.inplace), inplace=True)
Hardswish = _activation("Hardswish", lambda m, x: F.hardswish(x, m.inplace), inplace=True,
                        repr_inplace=False)
Hardsigmoid = _activation("Hardsigmoid", lambda m, x: F.hardsigmoid(x, m.inplace),
                          inplace=True, repr_inplace=False)
SELU = _activation("SELU", lambda m, x: F.selu(x, m.inplace), inplace=True)
CELU = _activation("CELU", lambda m, x: F.celu(x, m.alpha, m.inplace), (("alpha", 1.0),),
                   inplace=True)
GLU = _activation("GLU", lambda m, x: F.glu(x, m.dim), (("dim", -1),))
Tanhshrink = _activation("Tanhshrink", lambda m, x: F.tanhshrink(x))
Softmin = _activation("Softmin", lambda m, x: F.softmin(x, m.dim), (("dim", None),))


class Threshold(Module):
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
    _fn = staticmethod(F.softshrink)


class Hardshrink(_Shrink):
    _fn = staticmethod(F.hardshrink)


class PReLU(Module):
    """max(0, x) + weight * min(0, x), one learnt slope or one per channel (dim 1)."""

    def __init__(self, num_parameters=1, init=0.25, dtype=None):
        super().__init__()
        self.num_parameters, self.init = num_parameters, init
        self.weight = Parameter(_empty(num_parameters, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self):
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
    def __init__(self, dim=1, eps=1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    def __init__(self, p=2.0, eps=1e-6, keepdim=False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class Dropout(Module):
    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input):
        return F.dropout(input, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Embedding(Module):
    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, dtype=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError("Padding_idx must be within num_embeddings")
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        self.weight = Parameter(_empty(num_embeddings, embedding_dim, dtype=dtype))
        init.normal_(self.weight)
        if padding_idx is not None:
            with no_grad():
                from ..tensor import _numpy_view
                _numpy_view(self.weight)[padding_idx] = 0

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        return s + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
                 dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(_creation.ones(*self.normalized_shape,
                                                   dtype=dtype or D.float32))
            if bias:
                self.bias = Parameter(_creation.zeros(*self.normalized_shape,
                                                      dtype=dtype or D.float32))
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
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, dtype=None):
        super().__init__()
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
        if self.elementwise_affine:
            init.ones_(self.weight)

    def forward(self, input):
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class GroupNorm(Module):
    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, dtype=None, *,
                 bias=True):
        super().__init__()
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
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, "
                f"affine={self.affine}, bias={self.bias is not None}")


class BatchNorm1d(Module):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, dtype=None):
        super().__init__()
        dt = dtype or D.float32
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = Parameter(_creation.ones(num_features, dtype=dt))
            self.bias = Parameter(_creation.zeros(num_features, dtype=dt))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", _creation.zeros(num_features, dtype=dt))
            self.register_buffer("running_var", _creation.ones(num_features, dtype=dt))
            self.register_buffer("num_batches_tracked", _creation.tensor(0))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def forward(self, input):
        if input.ndim not in (2, 3):
            raise ValueError(f"expected 2D or 3D input (got {input.ndim}D input)")
        use_batch = self.training or not self.track_running_stats
        momentum = self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if momentum is None:
                momentum = 1.0 / float(self.num_batches_tracked.item())
        return F.batch_norm(input, self.running_mean, self.running_var, self.weight,
                            self.bias, use_batch, momentum or 0.0, self.eps)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


# ---------------------------------------------------------------- recurrent cells
class _RNNCellBase(Module):
    """weight_ih (chunks * hidden, input), weight_hh (chunks * hidden, hidden), bias_ih and
    bias_hh (chunks * hidden), all uniform(-1 / sqrt(hidden), 1 / sqrt(hidden)), as in
    PyTorch; forward takes (batch, input) or one unbatched (input,) sample."""
    _chunks = 1

    def __init__(self, input_size, hidden_size, bias=True, dtype=None):
        super().__init__()
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
            from .._indexing import _constant
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

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", dtype=None):
        super().__init__(input_size, hidden_size, bias, dtype)
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
def _loss(name, fn, fields=()):
    def __init__(self, *args, reduction="mean", **kwargs):
        Module.__init__(self)
        object.__setattr__(self, "reduction", reduction)
        for (field, default), a in zip(fields, args + (None,) * len(fields)):
            v = kwargs.get(field, default if a is None else a)
            if isinstance(v, Parameter) or hasattr(v, "_i"):
                self.register_buffer(field, v)
            else:
                object.__setattr__(self, field, v)

    def forward(self, input, target):
        kw = {f: getattr(self, f) for f, _ in fields}
        return fn(input, target, reduction=self.reduction, **kw)
    return type(name, (Module,), {"__init__": __init__, "forward": forward})


MSELoss = _loss("MSELoss", F.mse_loss)
L1Loss = _loss("L1Loss", F.l1_loss)
HuberLoss = _loss("HuberLoss", F.huber_loss, (("delta", 1.0),))
SmoothL1Loss = _loss("SmoothL1Loss", F.smooth_l1_loss, (("beta", 1.0),))
BCELoss = _loss("BCELoss", F.binary_cross_entropy, (("weight", None),))
BCEWithLogitsLoss = _loss("BCEWithLogitsLoss", F.binary_cross_entropy_with_logits,
                          (("weight", None), ("pos_weight", None)))
NLLLoss = _loss("NLLLoss", F.nll_loss, (("weight", None), ("ignore_index", -100)))
CrossEntropyLoss = _loss("CrossEntropyLoss", F.cross_entropy,
                         (("weight", None), ("ignore_index", -100), ("label_smoothing", 0.0)))
SoftMarginLoss = _loss("SoftMarginLoss", F.soft_margin_loss)


class KLDivLoss(Module):
    def __init__(self, size_average=None, reduce=None, reduction="mean", log_target=False):
        super().__init__()
        F._reduction("mean", size_average, reduce)     # (raises: use reduction=)
        self.reduction, self.log_target = reduction, log_target

    def forward(self, input, target):
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class PoissonNLLLoss(Module):
    def __init__(self, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                 reduction="mean"):
        super().__init__()
        F._reduction("mean", size_average, reduce)
        self.log_input, self.full, self.eps, self.reduction = log_input, full, eps, reduction

    def forward(self, log_input, target):
        return F.poisson_nll_loss(log_input, target, log_input=self.log_input, full=self.full,
                                  eps=self.eps, reduction=self.reduction)


class GaussianNLLLoss(Module):
    def __init__(self, *, full=False, eps=1e-6, reduction="mean"):
        super().__init__()
        self.full, self.eps, self.reduction = full, eps, reduction

    def forward(self, input, target, var):
        return F.gaussian_nll_loss(input, target, var, full=self.full, eps=self.eps,
                                   reduction=self.reduction)


class _PairLoss(Module):
    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__()
        F._reduction("mean", size_average, reduce)
        self.margin, self.reduction = margin, reduction

    def forward(self, input1, input2, target):
        return self._fn(input1, input2, target, margin=self.margin, reduction=self.reduction)


class CosineEmbeddingLoss(_PairLoss):
    _fn = staticmethod(F.cosine_embedding_loss)


class MarginRankingLoss(_PairLoss):
    _fn = staticmethod(F.margin_ranking_loss)
