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


class ModuleDict(Module):
    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __delitem__(self, key):
        del self._modules[key]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def keys(self):
        return self._modules.keys()

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

    def extra_repr(self):
        lines = []
        for k, p in enumerate(self):
            if isinstance(p, Tensor):
                kind = "Parameter" if isinstance(p, Parameter) else "Tensor"
                size = "x".join(str(n) for n in p.shape)
                lines.append(f"  ({k}): {kind} containing: [{p.dtype} of size {size}]")
            else:
                lines.append(f"  ({k}): Object of type: {type(p).__name__}")
        return "\n".join(lines)


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


def _activation(name, fn, repr_fields=(), inplace=False):
    """inplace: the module takes PyTorch's inplace= (after its other fields) and fn reads
    it as m.inplace; the repr shows it when set, as PyTorch's."""
    fields = repr_fields + ((("inplace", False),) if inplace else ())

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        for (field, default), a in zip(fields, args + (None,) * len(fields)):
            object.__setattr__(self, field, kwargs.get(field, default if a is None else a))

    def forward(self, input):
        return fn(self, input)

    def extra_repr(self):
        shown = [f for f, _ in repr_fields] + (["inplace"] if getattr(self, "inplace", False)
                                               else [])
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
