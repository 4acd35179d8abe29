"""nn.Module: registration of parameters, buffers and sub-modules, state dicts, modes."""
import collections
import collections.abc
import itertools

from .._front.tensor import Tensor, STRUCTURE, zero_grads
from .parameter import Parameter

_IncompatibleKeys = collections.namedtuple("IncompatibleKeys",
                                           ["missing_keys", "unexpected_keys"])


class Module:
    """Base class of layers, as in PyTorch: assign Parameters, Modules and (with
    register_buffer) Tensors as attributes and they are found by parameters(),
    state_dict(), train()/eval(), to(dtype)."""

    def __init__(self):
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", {})

    # ------------------------------------------------------------ registration
    def _check_init(self):
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameters or modules before "
                                 "Module.__init__() call")

    def __setattr__(self, name, value):
        d = self.__dict__
        if isinstance(value, (Tensor, Module)) or name == "training" or name in d.get(
                "_parameters", ()) or name in d.get("_buffers", ()) or name in d.get(
                "_modules", ()):
            STRUCTURE[0] += 1       # what compiled replays guard on may have changed
        if isinstance(value, Parameter):
            self._check_init()
            self._forget(name, "_parameters")
            d["_parameters"][name] = value
        elif isinstance(value, Module):
            self._check_init()
            self._forget(name, "_modules")
            d["_modules"][name] = value
        elif "_parameters" in d and name in d["_parameters"]:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter "
                                f"'{name}' (tapegrad.nn.Parameter or None expected)")
            d["_parameters"][name] = None
        elif "_buffers" in d and name in d["_buffers"]:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                "(tapegrad.Tensor or None expected)")
            d["_buffers"][name] = value
        elif "_modules" in d and name in d["_modules"]:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module "
                                f"'{name}' (tapegrad.nn.Module or None expected)")
            d["_modules"][name] = None
        else:
            object.__setattr__(self, name, value)

    def _forget(self, name, keep=None):
        """Remove name from every table but keep (where a new value replaces the old one
        in its place, so the order of parameters and state dict keys stays PyTorch's)."""
        for table in ("_parameters", "_buffers", "_modules"):
            if table != keep:
                self.__dict__[table].pop(name, None)
        self.__dict__.pop(name, None)

    def __getattr__(self, name):
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            if table in d and name in d[table]:
                return d[table][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for table in ("_parameters", "_buffers", "_modules"):
            if name in self.__dict__.get(table, ()):
                del self.__dict__[table][name]
                return
        object.__delattr__(self, name)

    def register_parameter(self, name, param):
        """Add a parameter (or None) under name."""
        self._check_init()
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter "
                            f"'{name}' (tapegrad.nn.Parameter or None required)")
        self._forget(name, "_parameters")
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        """Add a buffer (a tensor saved in state_dict unless persistent=False, moved by
        to(), never trained) under name."""
        self._check_init()
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer "
                            f"'{name}' (tapegrad.Tensor or None required)")
        self._forget(name, "_buffers")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent.discard(name)
        else:
            self._non_persistent.add(name)

    def add_module(self, name, module):
        """Add a child module under name."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._check_init()
        self._forget(name, "_modules")
        self._modules[name] = module

    register_module = add_module

    # ------------------------------------------------------------ traversal
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        """Iterate over (name, module) for this module and all its descendants."""
        memo = set() if memo is None else memo
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(memo, f"{prefix}.{name}" if prefix else name,
                                           remove_duplicate)

    def modules(self):
        """Iterate over this module and all its descendants."""
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        """Iterate over (name, module) for the direct children."""
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self):
        """Iterate over the direct child modules."""
        for _, m in self.named_children():
            yield m

    def _named(self, table, prefix, recurse, remove_duplicate=True):
        seen = set()
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mp, m in mods:
            for name, v in m.__dict__[table].items():
                if v is None or (remove_duplicate and id(v) in seen):
                    continue
                seen.add(id(v))
                yield (f"{mp}.{name}" if mp else name), v

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        """Iterate over (dotted name, parameter), recursively unless recurse=False."""
        return self._named("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        """Iterate over the parameters, recursively unless recurse=False (what an optimizer
        takes)."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        """Iterate over (dotted name, buffer), recursively unless recurse=False."""
        return self._named("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        """Iterate over the buffers, recursively unless recurse=False."""
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # ------------------------------------------------------------ state
    def state_dict(self, destination=None, prefix="", keep_vars=False):
        """An ordered dict of the parameters and persistent buffers by dotted name (detached
        unless keep_vars=True)."""
        out = collections.OrderedDict() if destination is None else destination
        for name, p in self._parameters.items():
            if p is not None:
                out[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent:
                out[prefix + name] = b if keep_vars else b.detach()
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(out, prefix + name + ".", keep_vars)
        return out

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copy values from a state_dict into the parameters and buffers; strict=True
        requires the keys to match. Returns (missing_keys, unexpected_keys)."""
        if not isinstance(state_dict, collections.abc.Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors = []
        for k, target in own.items():
            if k not in state_dict:
                continue
            src = state_dict[k]
            if not isinstance(src, Tensor):
                errors.append(f'While copying the parameter named "{k}", expected Tensor '
                              f"or Parameter, got {type(src).__name__}.")
            elif tuple(src.shape) != tuple(target.shape):
                errors.append(f"size mismatch for {k}: copying a param with shape "
                              f"tapegrad.Size({list(src.shape)}) from checkpoint, the shape in "
                              f"current model is tapegrad.Size({list(target.shape)}).")
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: " +
                              ", ".join(f'"{k}"' for k in unexpected) + ". ")
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: " +
                              ", ".join(f'"{k}"' for k in missing) + ". ")
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                               + "\n\t".join(errors))
        for k, target in own.items():
            if k in state_dict:
                if assign:
                    self._assign(k, target, state_dict[k])
                else:
                    _copy_into(target, state_dict[k])
        return _IncompatibleKeys(missing, unexpected)

    def _assign(self, key, target, src):
        """load_state_dict(assign=True), as in PyTorch: the module holds the state dict's
        tensor itself (a parameter keeps the module's requires_grad)."""
        *path, name = key.split(".")
        m = self
        for part in path:
            m = m._modules[part]
        if name in m._parameters:
            if isinstance(src, Parameter):
                src.requires_grad_(target.requires_grad)
            else:
                src = Parameter(src, requires_grad=target.requires_grad)
        setattr(m, name, src)

    # ------------------------------------------------------------ modes and helpers
    def train(self, mode=True):
        """Set training mode (mode=True) on this module and its descendants; returns self."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        STRUCTURE[0] += 1
        return self

    def eval(self):
        """Set evaluation mode (train(False)); returns self."""
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        """Set requires_grad on every parameter; returns self."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        """Reset the gradients of every parameter (to None by default)."""
        zero_grads(self.parameters(), set_to_none)
        return self

    def apply(self, fn):
        """Call fn on every descendant and then on this module; returns self."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def to(self, *args, device=None, dtype=None, non_blocking=False):
        """Convert floating point parameters and buffers in place (the Parameter objects
        stay the same, as in PyTorch, so optimizers keep working). *args: PyTorch's
        Module.to is overloaded on its first argument, to(device, dtype, non_blocking),
        to(dtype, non_blocking) or to(tensor, non_blocking)."""
        from .._front.creation import check_device
        from .._front.promotion import _to_arguments
        dtype, device, _, _ = _to_arguments(args, dtype, device, non_blocking, False, flags=1)
        check_device(device, "to")
        if dtype is None:
            return self
        if not dtype.is_floating_point:
            raise TypeError(f"nn.Module.to only accepts floating point dtypes, but got desired "
                            f"dtype={dtype}")
        for m in self.modules():
            for table in ("_parameters", "_buffers"):
                for name, t in m.__dict__[table].items():
                    if t is not None and t.dtype.is_floating_point and t.dtype is not dtype:
                        t.data = t.data.to(dtype)
        return self

    def cpu(self):
        """Move the parameters and buffers to the CPU, where tapegrad keeps every tensor
        already; returns self."""
        return self

    def cuda(self, device=None):
        """Move the parameters and buffers to a CUDA device, in PyTorch. tapegrad runs on
        the CPU only: this raises what PyTorch's CPU-only build raises (use
        `.to(device)` with device = "cuda" if tapegrad.cuda.is_available() else "cpu")."""
        from .._front.device import refuse_cuda
        refuse_cuda(device)

    def float(self):
        """Cast the floating point parameters and buffers to float32; returns self."""
        from .._front import dtype as D
        return self.to(D.float32)

    def double(self):
        """Cast the floating point parameters and buffers to float64; returns self."""
        from .._front import dtype as D
        return self.to(D.float64)

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *input):
        """The computation the module performs: override it; call the module (module(x)),
        not forward, to run it."""
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required '
                                  '"forward" function')

    def extra_repr(self):
        """The module's own settings shown in its repr (override to add some)."""
        return ""

    def __repr__(self):
        lines = []
        extra = self.extra_repr()
        if extra:
            lines = extra.split("\n")
        for name, m in self._modules.items():
            body = repr(m).replace("\n", "\n  ")
            lines.append(f"({name}): {body}")
        head = type(self).__name__ + "("
        if not lines:
            return head + ")"
        if len(lines) == 1 and not self._modules:
            return head + lines[0] + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"

    def __dir__(self):
        return list(itertools.chain(super().__dir__(), self._parameters, self._buffers,
                                    self._modules))


def _copy_into(target, src):
    """target's values := src's, in place (a version bump, no history), as PyTorch's
    load_state_dict does under no_grad."""
    from .._front.promotion import to, bump_version
    from .._front.tensor import _numpy_view
    _numpy_view(target)[...] = _numpy_view(to(src, target.dtype))
    bump_version(target)
