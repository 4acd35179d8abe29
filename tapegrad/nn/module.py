"""nn.Module: registration of parameters, buffers and sub-modules, state dicts, modes,
and PyTorch's hooks (forward, forward pre, full backward and backward pre, state dict and
load, and the global ones of register_module_forward_hook & co)."""
import collections
import collections.abc
import itertools
import typing
import warnings
import weakref

from .._front.tensor import Tensor, STRUCTURE, zero_grads
from .._engine.state import note_break as _note_break
from .parameter import Parameter

class _IncompatibleKeys(collections.namedtuple("IncompatibleKeys",
                                               ["missing_keys", "unexpected_keys"])):
    """load_state_dict's result, printed as PyTorch prints it; a class of this module
    under its own name, so it pickles (a worker may return it)."""
    __slots__ = ()

    def __repr__(self):
        if self.missing_keys or self.unexpected_keys:
            return super().__repr__()
        return "<All keys matched successfully>"

    __str__ = __repr__


_EXTRA_STATE_KEY_SUFFIX = "_extra_state"

# the global hooks every module runs (register_module_forward_hook & co)
_global_backward_pre_hooks = collections.OrderedDict()
_global_backward_hooks = collections.OrderedDict()
_global_is_full_backward_hook = None
_global_forward_pre_hooks = collections.OrderedDict()
_global_forward_hooks = collections.OrderedDict()
_global_forward_hooks_always_called = collections.OrderedDict()
_global_forward_hooks_with_kwargs = collections.OrderedDict()
_global_buffer_registration_hooks = collections.OrderedDict()
_global_module_registration_hooks = collections.OrderedDict()
_global_parameter_registration_hooks = collections.OrderedDict()

_LOCAL_CALL_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                     "_backward_pre_hooks")


def _handle(table, hook, *extra, prepend=False, on_change=None):
    """Add hook to table (an OrderedDict keyed by the handle's id); the handle's remove()
    (or leaving its with block) takes it out of table and of the extra tables (the
    with_kwargs / always_call flags)."""
    from ..autograd.function import RemovableHandle
    table_ref = weakref.ref(table)
    extra_refs = [weakref.ref(d) for d in extra]

    def remove():
        t = table_ref()
        if t is not None:
            t.pop(handle.id, None)
        for r in extra_refs:
            d = r()
            if d is not None:
                d.pop(handle.id, None)
        if on_change is not None:
            on_change()
    handle = RemovableHandle(remove)
    table[handle.id] = hook
    if prepend:
        table.move_to_end(handle.id, last=False)
    if on_change is not None:
        on_change()
    return handle


def _global_changed():
    """Module calls take the hooks path only while some hook exists: the class flag says
    whether a global one does (an instance's own flag, whether it has its own)."""
    Module._hooked = bool(_global_backward_pre_hooks or _global_backward_hooks
                          or _global_forward_pre_hooks or _global_forward_hooks)


def register_module_forward_pre_hook(hook):
    """Register a forward pre-hook run by every module, before its own:
    hook(module, args) -> None or new args. Returns a handle with remove()."""
    return _handle(_global_forward_pre_hooks, hook, on_change=_global_changed)


def register_module_forward_hook(hook, *, with_kwargs=False, always_call=False):
    """Register a forward hook run by every module, before its own:
    hook(module, args, output) (or hook(module, args, kwargs, output) with
    with_kwargs=True) -> None or a new output; always_call=True runs it even when
    forward raises. Returns a handle with remove()."""
    h = _handle(_global_forward_hooks, hook, _global_forward_hooks_always_called,
                _global_forward_hooks_with_kwargs, on_change=_global_changed)
    if with_kwargs:
        _global_forward_hooks_with_kwargs[h.id] = True
    if always_call:
        _global_forward_hooks_always_called[h.id] = True
    return h


def register_module_full_backward_pre_hook(hook):
    """Register a backward pre-hook run by every module: hook(module, grad_output) ->
    None or new grad_output. Returns a handle with remove()."""
    return _handle(_global_backward_pre_hooks, hook, on_change=_global_changed)


def register_module_full_backward_hook(hook):
    """Register a full backward hook run by every module: hook(module, grad_input,
    grad_output) -> None or new grad_input. Returns a handle with remove()."""
    global _global_is_full_backward_hook
    if _global_is_full_backward_hook is False:
        raise RuntimeError("Cannot use both regular backward hooks and full backward hooks as "
                           "a global Module hook. Please use only one of them.")
    _global_is_full_backward_hook = True
    return _handle(_global_backward_hooks, hook, on_change=_global_changed)


def register_module_backward_hook(hook):
    """PyTorch's deprecated non-full backward hook: refused (its grad_input is that of
    the last autograd node of a forward, a detail of PyTorch's graph tapegrad does not
    reproduce); use register_module_full_backward_hook."""
    raise NotImplementedError(
        _NON_FULL.replace("register_backward_hook", "register_module_backward_hook")
        .replace("register_full_backward_hook", "register_module_full_backward_hook"))


def register_module_buffer_registration_hook(hook):
    """Register a hook run whenever a buffer is registered on any module:
    hook(module, name, buffer) -> None or a replacement buffer."""
    return _handle(_global_buffer_registration_hooks, hook)


def register_module_module_registration_hook(hook):
    """Register a hook run whenever a submodule is registered on any module:
    hook(module, name, submodule) -> None or a replacement submodule."""
    return _handle(_global_module_registration_hooks, hook)


def register_module_parameter_registration_hook(hook):
    """Register a hook run whenever a parameter is registered on any module:
    hook(module, name, param) -> None or a replacement parameter."""
    return _handle(_global_parameter_registration_hooks, hook)


_NON_FULL = ("register_backward_hook (PyTorch's deprecated non-full module backward hook) is "
             "not supported: its grad_input is that of the last autograd node of the "
             "module's forward, a detail of PyTorch's graph tapegrad does not reproduce. Use "
             "register_full_backward_hook, whose grad_input is the gradient with respect to "
             "the module's inputs.")


def _registration(table, module, name, value):
    for hook in tuple(table.values()):
        out = hook(module, name, value)
        if out is not None:
            value = out
    return value


class Module:
    """Base class of layers, as in PyTorch: assign Parameters, Modules and (with
    register_buffer) Tensors as attributes and they are found by parameters(),
    state_dict(), train()/eval(), to(dtype)."""

    _version = 1            # saved in state dicts' metadata, as PyTorch's
    _hooked = False         # (the class's: a global hook exists; an instance's: its own)
    call_super_init = False
    dump_patches = False
    T_destination = typing.TypeVar("T_destination", bound=typing.Dict[str, typing.Any])

    def __init__(self):
        setup = object.__setattr__
        setup(self, "training", True)
        setup(self, "_parameters", {})
        setup(self, "_buffers", {})
        setup(self, "_non_persistent", set())
        setup(self, "_modules", {})
        for name in ("_forward_hooks", "_forward_hooks_with_kwargs",
                     "_forward_hooks_always_called", "_forward_pre_hooks",
                     "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks",
                     "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
                     "_load_state_dict_post_hooks"):
            setup(self, name, collections.OrderedDict())
        setup(self, "_is_full_backward_hook", None)

    @property
    def _non_persistent_buffers_set(self):
        """PyTorch's name of the set of non-persistent buffer names."""
        return self._non_persistent

    def _hook_tables(self):
        """This module's hook tables, created on first use for a module whose __init__
        predates them (unpickled from an older tapegrad)."""
        d = self.__dict__
        if "_forward_hooks" not in d:
            for name in ("_forward_hooks", "_forward_hooks_with_kwargs",
                         "_forward_hooks_always_called", "_forward_pre_hooks",
                         "_forward_pre_hooks_with_kwargs", "_backward_hooks",
                         "_backward_pre_hooks", "_state_dict_hooks", "_state_dict_pre_hooks",
                         "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks"):
                d.setdefault(name, collections.OrderedDict())
            d.setdefault("_is_full_backward_hook", None)
        return d

    def _local_changed(self):
        d = self.__dict__
        if any(d.get(n) for n in _LOCAL_CALL_HOOKS):
            d["_hooked"] = True
        else:
            d.pop("_hooked", None)

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
            if _global_parameter_registration_hooks:
                value = _registration(_global_parameter_registration_hooks, self, name, value)
            self._forget(name, "_parameters")
            d["_parameters"][name] = value
        elif isinstance(value, Module):
            self._check_init()
            if _global_module_registration_hooks:
                value = _registration(_global_module_registration_hooks, self, name, value)
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
            if _global_buffer_registration_hooks:
                value = _registration(_global_buffer_registration_hooks, self, name, value)
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
        if _global_parameter_registration_hooks:
            param = _registration(_global_parameter_registration_hooks, self, name, param)
        self._forget(name, "_parameters")
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        """Add a buffer (a tensor saved in state_dict unless persistent=False, moved by
        to(), never trained) under name."""
        self._check_init()
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer "
                            f"'{name}' (tapegrad.Tensor or None required)")
        if _global_buffer_registration_hooks:
            tensor = _registration(_global_buffer_registration_hooks, self, name, tensor)
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
        if _global_module_registration_hooks:
            module = _registration(_global_module_registration_hooks, self, name, module)
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

    # ------------------------------------------------------------ submodules by name
    def get_submodule(self, target):
        """The submodule at dotted path target ("" is this module)."""
        if target == "":
            return self
        mod = self
        for item in target.split("."):
            if not hasattr(mod, item):
                raise AttributeError(mod._get_name() + " has no attribute `" + item + "`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError("`" + item + "` is not an nn.Module")
        return mod

    def set_submodule(self, target, module, strict=False):
        """Replace (or, unless strict, add) the submodule at dotted path target."""
        if target == "":
            raise ValueError("Cannot set the submodule without a target name!")
        atoms = target.split(".")
        if not isinstance(module, Module):
            raise ValueError("`module` is not an nn.Module, found " + str(type(module)))
        parent = self if len(atoms) == 1 else self.get_submodule(".".join(atoms[:-1]))
        if strict and not hasattr(parent, atoms[-1]):
            raise AttributeError(parent._get_name() + " has no attribute `" + atoms[-1] + "`")
        if hasattr(parent, atoms[-1]):
            if not isinstance(getattr(parent, atoms[-1]), Module):
                raise AttributeError("`" + atoms[-1] + "` is not an nn.Module")
        setattr(parent, atoms[-1], module)

    def get_parameter(self, target):
        """The parameter at dotted path target (e.g. "0.weight")."""
        path, _, name = target.rpartition(".")
        mod = self.get_submodule(path)
        if not hasattr(mod, name):
            raise AttributeError(mod._get_name() + " has no attribute `" + name + "`")
        param = getattr(mod, name)
        if not isinstance(param, Parameter):
            raise AttributeError("`" + name + "` is not an nn.Parameter")
        return param

    def get_buffer(self, target):
        """The buffer at dotted path target (e.g. "bn.running_mean")."""
        path, _, name = target.rpartition(".")
        mod = self.get_submodule(path)
        if not hasattr(mod, name):
            raise AttributeError(mod._get_name() + " has no attribute `" + name + "`")
        buffer = getattr(mod, name)
        if name not in mod._buffers:
            raise AttributeError("`" + name + "` is not a buffer")
        return buffer

    def get_extra_state(self):
        """Override (with set_extra_state) to save any picklable state in the state dict,
        under the key "<prefix>_extra_state"; the base class has none."""
        raise RuntimeError(
            "Reached a code path in Module.get_extra_state() that should never be called. "
            "Please file an issue at https://github.com/pytorch/pytorch/issues/new?template="
            "bug-report.yml to report this bug.")

    def set_extra_state(self, state):
        """Override (with get_extra_state) to restore what get_extra_state() saved."""
        raise RuntimeError(
            "Reached a code path in Module.set_extra_state() that should never be called. "
            "Please file an issue at https://github.com/pytorch/pytorch/issues/new?template="
            "bug-report.yml to report this bug.")

    def _get_name(self):
        return type(self).__name__

    # ------------------------------------------------------------ state
    def _register_state_dict_hook(self, hook):
        """hook(module, state_dict, prefix, local_metadata) after this module's
        state_dict(); a returned dict replaces it."""
        if getattr(hook, "_from_public_api", False):
            raise RuntimeError("Cannot register the same function as the state dict post hook "
                               "that was previously registered via "
                               "register_state_dict_post_hook")
        return _handle(self._hook_tables()["_state_dict_hooks"], hook)

    def register_state_dict_post_hook(self, hook):
        """Call hook(module, state_dict, prefix, local_metadata) after this module's
        state_dict() (it may edit the dict in place; it must return None)."""
        hook._from_public_api = True
        return _handle(self._hook_tables()["_state_dict_hooks"], hook)

    def register_state_dict_pre_hook(self, hook):
        """Call hook(module, prefix, keep_vars) before this module's state_dict()."""
        return _handle(self._hook_tables()["_state_dict_pre_hooks"], hook)

    def _register_load_state_dict_pre_hook(self, hook, with_module=False):
        """hook(state_dict, prefix, local_metadata, strict, missing_keys,
        unexpected_keys, error_msgs) before this module loads (module first if
        with_module)."""
        return _handle(self._hook_tables()["_load_state_dict_pre_hooks"],
                       _WrappedHook(hook, self if with_module else None))

    def register_load_state_dict_pre_hook(self, hook):
        """Call hook(module, state_dict, prefix, local_metadata, strict, missing_keys,
        unexpected_keys, error_msgs) before this module loads its part of a state dict."""
        return self._register_load_state_dict_pre_hook(hook, with_module=True)

    def register_load_state_dict_post_hook(self, hook):
        """Call hook(module, incompatible_keys) after load_state_dict() loaded this module
        (it may edit incompatible_keys in place; it must return None)."""
        return _handle(self._hook_tables()["_load_state_dict_post_hooks"], hook)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        """This module's own parameters, persistent buffers and extra state into
        destination (override to save more)."""
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent:
                destination[prefix + name] = b if keep_vars else b.detach()
        if type(self).get_extra_state is not Module.get_extra_state:
            destination[prefix + _EXTRA_STATE_KEY_SUFFIX] = self.get_extra_state()

    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        """An ordered dict of the parameters, persistent buffers (detached unless
        keep_vars=True) and extra states by dotted name, with PyTorch's _metadata."""
        if args:
            if len(args) > 3:
                raise TypeError(f"state_dict() takes at most 3 positional arguments "
                                f"({len(args)} given)")
            warnings.warn(
                "Positional args are being deprecated, use kwargs instead. Refer to "
                "https://pytorch.org/docs/main/generated/torch.nn.Module.html"
                "#torch.nn.Module.state_dict for details.", FutureWarning, stacklevel=2)
            if destination is None:
                destination = args[0]
            if len(args) > 1 and prefix == "":
                prefix = args[1]
            if len(args) > 2 and keep_vars is False:
                keep_vars = args[2]
        if destination is None:
            destination = collections.OrderedDict()
            destination._metadata = collections.OrderedDict()
        local_metadata = dict(version=self._version)
        if hasattr(destination, "_metadata"):
            destination._metadata[prefix[:-1]] = local_metadata
        tables = self._hook_tables()
        for hook in tuple(tables["_state_dict_pre_hooks"].values()):
            hook(self, prefix, keep_vars)
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(destination=destination, prefix=prefix + name + ".",
                             keep_vars=keep_vars)
        for hook in tuple(tables["_state_dict_hooks"].values()):
            result = hook(self, destination, prefix, local_metadata)
            if not getattr(hook, "_from_public_api", False):
                if result is not None:
                    destination = result
            elif result is not None:
                raise RuntimeError("state_dict post-hook must return None")
        return destination

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        """Load this module's own entries of state_dict (keys prefix + name), collecting
        missing and unexpected keys and errors (override to convert old formats)."""
        for hook in tuple(self._hook_tables()["_load_state_dict_pre_hooks"].values()):
            hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                 error_msgs)
        local_state = {k: v for k, v in itertools.chain(
            self._parameters.items(),
            ((k, b) for k, b in self._buffers.items() if k not in self._non_persistent))
            if v is not None}
        assign = local_metadata.get("assign_to_params_buffers", False)
        for name, param in local_state.items():
            key = prefix + name
            if key not in state_dict:
                if strict:
                    missing_keys.append(key)
                continue
            src = state_dict[key]
            if not isinstance(src, Tensor):
                error_msgs.append(f'While copying the parameter named "{key}", expected '
                                  "tapegrad.Tensor or Tensor-like object from checkpoint but "
                                  f"received {type(src)}")
                continue
            if param.ndim == 0 and src.ndim == 1 and src.shape[0] == 1:
                src = src[0]
            if tuple(src.shape) != tuple(param.shape):
                error_msgs.append(f"size mismatch for {key}: copying a param with shape "
                                  f"{src.shape} from checkpoint, the shape in current model "
                                  f"is {param.shape}.")
                continue
            try:
                if assign:
                    self._assign(name, param, src)
                else:
                    _copy_into(param, src)
            except Exception as ex:
                error_msgs.append(f'While copying the parameter named "{key}", whose '
                                  f"dimensions in the model are {param.shape} and whose "
                                  f"dimensions in the checkpoint are {src.shape}, an exception "
                                  f"occurred : {ex.args}.")
        extra_key = prefix + _EXTRA_STATE_KEY_SUFFIX
        if type(self).set_extra_state is not Module.set_extra_state:
            if extra_key in state_dict:
                self.set_extra_state(state_dict[extra_key])
            elif strict:
                missing_keys.append(extra_key)
        elif strict and extra_key in state_dict:
            unexpected_keys.append(extra_key)
        if strict:
            for key in state_dict:
                if key.startswith(prefix) and key != extra_key:
                    head = key[len(prefix):].split(".", 1)
                    if len(head) > 1:
                        if head[0] not in self._modules:
                            unexpected_keys.append(key)
                    elif head[0] not in local_state:
                        unexpected_keys.append(key)

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copy values from a state_dict into the parameters and buffers (assign=True:
        hold the state dict's tensors instead); strict=True requires the keys to match.
        Returns (missing_keys, unexpected_keys)."""
        if not isinstance(state_dict, collections.abc.Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing, unexpected, errors = [], [], []
        metadata = getattr(state_dict, "_metadata", None)
        state_dict = collections.OrderedDict(state_dict)
        if metadata is not None:
            state_dict._metadata = metadata

        def load(module, local_state_dict, prefix=""):
            local_metadata = {} if metadata is None else dict(metadata.get(prefix[:-1], {}))
            if assign:
                local_metadata["assign_to_params_buffers"] = assign
            module._load_from_state_dict(local_state_dict, prefix, local_metadata, True,
                                         missing, unexpected, errors)
            for name, child in module._modules.items():
                if child is not None:
                    child_prefix = prefix + name + "."
                    load(child, {k: v for k, v in local_state_dict.items()
                                 if k.startswith(child_prefix)}, child_prefix)
            incompatible = _IncompatibleKeys(missing, unexpected)
            for hook in tuple(module._hook_tables()["_load_state_dict_post_hooks"].values()):
                if hook(module, incompatible) is not None:
                    raise AssertionError(
                        "Hooks registered with ``register_load_state_dict_post_hook`` are not "
                        "expected to return new values, if incompatible_keys need to be "
                        "modified, it should be done inplace.")

        load(self, state_dict)
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
        return _IncompatibleKeys(missing, unexpected)

    def _assign(self, name, target, src):
        """load_state_dict(assign=True), as in PyTorch: the module holds the state dict's
        tensor itself (a parameter keeps the module's requires_grad)."""
        if name in self._parameters:
            if isinstance(src, Parameter):
                src.requires_grad_(target.requires_grad)
            else:
                src = Parameter(src, requires_grad=target.requires_grad)
        setattr(self, name, src)

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

    def _tensors(self):
        for m in self.modules():
            for table in ("_parameters", "_buffers"):
                for t in m.__dict__[table].values():
                    if t is not None:
                        yield t

    def _refuse_device(self, name):
        from .._front.device import unavailable, as_device
        if any(True for _ in self._tensors()):      # (nothing to move: PyTorch's no-op)
            raise unavailable(as_device(name, name))
        return self

    def ipu(self, device=None):
        """Move to an IPU, in PyTorch; tapegrad runs on the CPU only and raises what
        PyTorch's build without IPU support raises (for a module with tensors)."""
        return self._refuse_device("ipu")

    def xpu(self, device=None):
        """Move to an XPU, in PyTorch; tapegrad runs on the CPU only and raises what
        PyTorch's build without XPU support raises (for a module with tensors)."""
        return self._refuse_device("xpu")

    def mtia(self, device=None):
        """Move to an MTIA device, in PyTorch; tapegrad runs on the CPU only and raises
        what PyTorch's build without MTIA support raises (for a module with tensors)."""
        return self._refuse_device("mtia")

    def _cast_all(self, fn):
        """Replace every parameter's and buffer's data with fn(data) (the tensor objects
        stay, so optimizers keep working); returns self."""
        for t in self._tensors():
            new = fn(t.data)
            if new.dtype is not t.dtype:
                t.data = new
        STRUCTURE[0] += 1
        return self

    def type(self, dst_type):
        """Cast every parameter and buffer (floating or not, as PyTorch's) to dst_type (a
        dtype or a tensor type name); returns self."""
        return self._cast_all(lambda t: t.type(dst_type))

    def half(self):
        """Cast the floating point parameters and buffers to float16 (which tapegrad does
        not have: a module with floating point tensors raises Tensor.half()'s error)."""
        return self._cast_all(lambda t: t.half() if t.dtype.is_floating_point else t)

    def bfloat16(self):
        """Cast the floating point parameters and buffers to bfloat16 (which tapegrad
        does not have: a module with floating point tensors raises Tensor.bfloat16()'s
        error)."""
        return self._cast_all(lambda t: t.bfloat16() if t.dtype.is_floating_point else t)

    def to_empty(self, *, device, recurse=True):
        """Give every parameter and buffer new, uninitialised memory of its shape and
        dtype on device (the CPU: tapegrad has no other); returns self."""
        from .._front import creation
        creation.check_device(device, "to_empty")
        mods = self.modules() if recurse else [self]
        for m in mods:
            for table in ("_parameters", "_buffers"):
                for t in m.__dict__[table].values():
                    if t is not None:
                        t.data = creation.empty(*t.shape, dtype=t.dtype)
        STRUCTURE[0] += 1
        return self

    def share_memory(self):
        """Move the parameters and buffers to shared memory (Tensor.share_memory_);
        returns self."""
        for t in self._tensors():
            share = getattr(t, "share_memory_", None)
            if share is None:
                raise NotImplementedError(
                    "Module.share_memory(): tapegrad tensors live in the memory of one "
                    "process and cannot be moved to memory shared with other processes "
                    "(torch.multiprocessing); share them by saving and loading a state dict")
            share()
        return self

    def compile(self, *args, **kwargs):
        """torch.compile for this module's calls, in PyTorch: an optimisation whose
        options choose how, not what, to compute, so tapegrad accepts it and runs the
        module as before (compile the whole training step with tapegrad.compile)."""
        import inspect
        try:                        # (torch.compile's own signature checks the arguments)
            inspect.signature(_torch_compile_signature).bind(None, *args, **kwargs)
        except TypeError as e:
            raise TypeError(f"compile(): {e}") from None

    # ------------------------------------------------------------ hooks
    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """Call hook(module, args) before each forward (hook(module, args, kwargs) with
        with_kwargs=True); it may return new args (new (args, kwargs)). prepend=True runs
        it before the hooks already registered. Returns a handle with remove()."""
        t = self._hook_tables()
        h = _handle(t["_forward_pre_hooks"], hook, t["_forward_pre_hooks_with_kwargs"],
                    prepend=prepend, on_change=self._local_changed)
        if with_kwargs:
            t["_forward_pre_hooks_with_kwargs"][h.id] = True
        return h

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False,
                              always_call=False):
        """Call hook(module, args, output) after each forward (hook(module, args, kwargs,
        output) with with_kwargs=True); a returned value replaces the output.
        always_call=True also runs it when forward raises; prepend=True runs it before the
        hooks already registered. Returns a handle with remove()."""
        t = self._hook_tables()
        h = _handle(t["_forward_hooks"], hook, t["_forward_hooks_with_kwargs"],
                    t["_forward_hooks_always_called"], prepend=prepend,
                    on_change=self._local_changed)
        if with_kwargs:
            t["_forward_hooks_with_kwargs"][h.id] = True
        if always_call:
            t["_forward_hooks_always_called"][h.id] = True
        return h

    def register_full_backward_pre_hook(self, hook, prepend=False):
        """Call hook(module, grad_output) when the gradients with respect to the module's
        outputs are computed (grad_output: a tuple, one entry per output, None for a
        non-tensor); a returned tuple replaces grad_output. Returns a handle."""
        return _handle(self._hook_tables()["_backward_pre_hooks"], hook, prepend=prepend,
                       on_change=self._local_changed)

    def register_full_backward_hook(self, hook, prepend=False):
        """Call hook(module, grad_input, grad_output) when the gradients with respect to
        the module's positional inputs are computed (tuples; None for an input that is
        not a tensor requiring grad); a returned tuple replaces grad_input. Returns a
        handle with remove()."""
        t = self._hook_tables()
        if t["_is_full_backward_hook"] is False:
            raise RuntimeError("Cannot use both regular backward hooks and full backward "
                               "hooks on a single Module. Please use only one of them.")
        t["_is_full_backward_hook"] = True
        return _handle(t["_backward_hooks"], hook, prepend=prepend,
                       on_change=self._local_changed)

    def register_backward_hook(self, hook):
        """PyTorch's deprecated non-full backward hook: refused (its grad_input is that of
        the last autograd node of forward, a detail of PyTorch's graph tapegrad does not
        reproduce); use register_full_backward_hook."""
        raise NotImplementedError(_NON_FULL)

    def __call__(self, *args, **kwargs):
        if self._hooked:            # (no hooks, local or global: nothing else to do)
            return self._call_impl(*args, **kwargs)
        return self.forward(*args, **kwargs)

    def _call_impl(self, *args, **kwargs):
        """A call with hooks: PyTorch's order (global, then own forward pre-hooks; the
        backward hooks' input wrapping; forward; forward hooks; the output wrapping)."""
        t = self._hook_tables()
        fwd_hooks, fwd_pre = t["_forward_hooks"], t["_forward_pre_hooks"]
        bwd_hooks, bwd_pre = t["_backward_hooks"], t["_backward_pre_hooks"]
        if not (bwd_hooks or bwd_pre or fwd_hooks or fwd_pre or _global_backward_pre_hooks
                or _global_backward_hooks or _global_forward_hooks
                or _global_forward_pre_hooks):
            return self.forward(*args, **kwargs)
        _note_break("module hooks (Python that a replay would not run)")
        result = None
        called = set()
        try:
            full_bwd, pre_bwd = [], []
            if bwd_pre or _global_backward_pre_hooks:
                pre_bwd = list(_global_backward_pre_hooks.values()) + list(bwd_pre.values())
            if bwd_hooks or _global_backward_hooks:
                if _global_is_full_backward_hook is True:
                    full_bwd += list(_global_backward_hooks.values())
                if t["_is_full_backward_hook"] is True:
                    full_bwd += list(bwd_hooks.values())
            if _global_forward_pre_hooks or fwd_pre:
                with_kw = t["_forward_pre_hooks_with_kwargs"]
                for hook_id, hook in (*_global_forward_pre_hooks.items(), *fwd_pre.items()):
                    if hook_id in with_kw:
                        r = hook(self, args, kwargs)
                        if r is not None:
                            if isinstance(r, tuple) and len(r) == 2:
                                args, kwargs = r
                            else:
                                raise RuntimeError("forward pre-hook must return None or a "
                                                   f"tuple of (new_args, new_kwargs), but got "
                                                   f"{r}.")
                    else:
                        r = hook(self, args)
                        if r is not None:
                            args = r if isinstance(r, tuple) else (r,)
            bw = None
            if full_bwd or pre_bwd:
                bw = _BackwardHook(self, full_bwd, pre_bwd)
                args = bw.setup_input_hook(args)
            result = self.forward(*args, **kwargs)
            if _global_forward_hooks or fwd_hooks:
                always, with_kw = t["_forward_hooks_always_called"], t["_forward_hooks_with_kwargs"]
                for hook_id, hook in (*_global_forward_hooks.items(), *fwd_hooks.items()):
                    if hook_id in always or hook_id in _global_forward_hooks_always_called:
                        called.add(hook_id)
                    if hook_id in with_kw or hook_id in _global_forward_hooks_with_kwargs:
                        r = hook(self, args, kwargs, result)
                    else:
                        r = hook(self, args, result)
                    if r is not None:
                        result = r
            if bw is not None:
                if not isinstance(result, (Tensor, tuple)):
                    warnings.warn("For backward hooks to be called, module output should be a "
                                  "Tensor or a tuple of Tensors but received "
                                  f"{type(result)}", stacklevel=2)
                result = bw.setup_output_hook(result)
            return result
        except Exception:
            self._always_called_hooks(called, args, kwargs, result)
            raise

    def _always_called_hooks(self, called, args, kwargs, result):
        """After forward raised: the always_call forward hooks that have not run, each
        exception of theirs turned into a warning (the original error propagates)."""
        t = self._hook_tables()
        for hook_id, hook in _global_forward_hooks.items():
            if hook_id in _global_forward_hooks_always_called and hook_id not in called:
                try:
                    r = hook(self, args, result)
                    if r is not None:
                        result = r
                except Exception as e:
                    warnings.warn("global module forward hook with ``always_call=True`` raised "
                                  "an exception that was silenced as another error was raised "
                                  f"in forward: {str(e)}", stacklevel=3)
        for hook_id, hook in t["_forward_hooks"].items():
            if hook_id in t["_forward_hooks_always_called"] and hook_id not in called:
                try:
                    if hook_id in t["_forward_hooks_with_kwargs"]:
                        r = hook(self, args, kwargs, result)
                    else:
                        r = hook(self, args, result)
                    if r is not None:
                        result = r
                except Exception as e:
                    warnings.warn("module forward hook with ``always_call=True`` raised an "
                                  "exception that was silenced as another error was raised in "
                                  f"forward: {str(e)}", stacklevel=3)

    def __setstate__(self, state):
        """Unpickling: hook tables an older pickle lacks start empty."""
        self.__dict__.update(state)
        self._hook_tables()

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


def _torch_compile_signature(model, *, fullgraph=False, dynamic=None, backend="inductor",
                             mode=None, options=None, disable=False):
    """torch.compile's signature (Module.compile checks its arguments against it)."""


class _WrappedHook:
    """A load_state_dict pre-hook, called with the module first when registered through
    register_load_state_dict_pre_hook (the module held weakly, as PyTorch's)."""

    def __init__(self, hook, module=None):
        self.hook = hook
        self.with_module = module is not None
        if self.with_module:
            self.module = weakref.ref(module)

    def __call__(self, *args, **kwargs):
        if self.with_module:
            module = self.module()
            if module is None:
                raise RuntimeError("You are trying to call the hook of a dead Module!")
            return self.hook(module, *args, **kwargs)
        return self.hook(*args, **kwargs)

    def __getstate__(self):
        state = {"hook": self.hook, "with_module": self.with_module}
        if self.with_module:
            state["module"] = self.module()
        return state

    def __setstate__(self, state):
        self.hook, self.with_module = state["hook"], state["with_module"]
        if self.with_module:
            if state["module"] is None:
                raise RuntimeError("You are trying to revive the hook of a dead Module!")
            self.module = weakref.ref(state["module"])


def _hook_function():
    """The identity autograd.Function whose backward runs a module's backward hooks (one
    class, made on first use: nn may not import autograd at import time in every
    order)."""
    global _HookFn
    if _HookFn is None:
        from ..autograd.function import Function

        class BackwardHookFunction(Function):
            """Identity; its backward hands the gradient to the _BackwardHook."""

            @staticmethod
            def forward(ctx, x, hook, side):
                """x itself (the input or output tensors, flattened into one)."""
                ctx.hook, ctx.side = hook, side
                return x

            @staticmethod
            def backward(ctx, g):
                """The gradient, as the hooks leave it."""
                return ctx.hook.backward(ctx.side, g), None, None
        _HookFn = BackwardHookFunction
    return _HookFn


_HookFn = None


class _BackwardHook:
    """PyTorch's BackwardHook on tapegrad's autograd: the module's tensor inputs and
    outputs (those requiring grad) pass through an identity autograd.Function whose
    backward sees their gradients all at once (several tensors go through it as one flat
    concatenation, split again after it). The outputs' backward runs the backward
    pre-hooks and keeps grad_output; the inputs' backward runs the full backward hooks
    with grad_input and that grad_output."""

    def __init__(self, module, user_hooks, user_pre_hooks):
        self.module = module
        self.user_hooks, self.user_pre_hooks = user_hooks, user_pre_hooks
        self.grad_outputs = None
        self.n_inputs = self.n_outputs = -1
        self.input_tensors_index = self.output_tensors_index = None
        self.parts = {}         # side -> (positions, shapes) of the tensors passed through

    def _wrap(self, args, side):
        from ..autograd.grad_mode import is_grad_enabled
        idx = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        if not (any(args[i].requires_grad for i in idx) and is_grad_enabled()):
            return args, None
        pos = [i for i in idx if args[i].requires_grad]
        ts = [args[i] for i in pos]
        if len({t.dtype for t in ts}) > 1:
            raise NotImplementedError(
                f"module backward hooks on {type(self.module).__name__}: its {side}puts "
                "that require grad have different dtypes "
                f"({', '.join(str(t.dtype) for t in ts)}), which tapegrad's hooks cannot pass "
                "through one autograd node; give them one dtype")
        self.parts[side] = (pos, [tuple(t.shape) for t in ts])
        fn = _hook_function()
        if len(ts) == 1:
            news = [fn.apply(ts[0], self, side)]
        else:
            from .._front.indexing import cat
            flat = fn.apply(cat([t.reshape(-1) for t in ts]), self, side)
            news, start = [], 0
            for t in ts:
                n = t.numel()
                news.append(flat[start:start + n].view(tuple(t.shape)))
                start += n
        out = list(args)
        for i, v in zip(pos, news):
            out[i] = v
        return (tuple(out) if type(args) is tuple else type(args)(*out)), idx

    def _split(self, side, g):
        pos, shapes = self.parts[side]
        if len(pos) == 1:
            return {pos[0]: g.clone()}
        pieces, start = {}, 0
        for i, s in zip(pos, shapes):
            n = 1
            for d in s:
                n *= d
            pieces[i] = g[start:start + n].reshape(s).clone()
            start += n
        return pieces

    def _join(self, side, grads, like):
        """The flat gradient of the tensors passed through from a tuple of per-position
        gradients (None: zeros); None when all are None."""
        pos, shapes = self.parts[side]
        got = [grads[i] for i in pos]
        if all(g is None for g in got):
            return None
        from .._front import creation
        got = [creation.zeros(*s, dtype=like.dtype) if g is None else g
               for g, s in zip(got, shapes)]
        if len(pos) == 1:
            return got[0]
        from .._front.indexing import cat
        return cat([g.reshape(-1) for g in got])

    def setup_input_hook(self, args):
        """args with the tensors requiring grad passed through the inputs' node."""
        res, idx = self._wrap(args, "in")
        self.n_inputs = len(args)
        self.input_tensors_index = idx
        return res

    def setup_output_hook(self, result):
        """result (a tensor or a tuple) with its tensors requiring grad passed through
        the outputs' node."""
        single = not isinstance(result, tuple)
        args = (result,) if single else result
        res, idx = self._wrap(args, "out")
        self.n_outputs = len(args)
        self.output_tensors_index = idx
        return res[0] if single else res

    def backward(self, side, g):
        """The node's backward: the hooks on the gradients, as PyTorch runs them."""
        if side == "out":
            return self._outputs_backward(g)
        return self._inputs_backward(g)

    def _outputs_backward(self, g):
        pieces = self._split("out", g)
        self.grad_outputs = tuple(pieces.get(i) for i in range(self.n_outputs))
        for hook in self.user_pre_hooks:
            new = hook(self.module, self.grad_outputs)
            if new is None:
                continue
            if len(new) != len(self.grad_outputs):
                raise RuntimeError("Backward pre hook returned an invalid number of "
                                   f"grad_output, got {len(new)}, but expected "
                                   f"{len(self.grad_outputs)}")
            self.grad_outputs = new
        local = self.grad_outputs
        if self.input_tensors_index is None:
            warnings.warn("Full backward hook is firing when gradients are computed with "
                          "respect to module outputs since no inputs require gradients. See "
                          "https://docs.pytorch.org/docs/main/generated/torch.nn.Module.html"
                          "#torch.nn.Module.register_full_backward_hook for more details.",
                          stacklevel=2)
            grad_inputs = (None,) * self.n_inputs
            for hook in self.user_hooks:
                res = hook(self.module, grad_inputs, self.grad_outputs)
                if res is not None and not (isinstance(res, tuple)
                                            and all(r is None for r in res)):
                    raise RuntimeError("Backward hook for Modules where no input requires "
                                       "gradient should always return None or None for all "
                                       "gradients.")
            self.grad_outputs = None
        return self._join("out", local, g)

    def _inputs_backward(self, g):
        if self.grad_outputs is None:
            return g
        pieces = self._split("in", g)
        res = tuple(pieces.get(i) for i in range(self.n_inputs))
        for hook in self.user_hooks:
            out = hook(self.module, res, self.grad_outputs)
            if out is None:
                continue
            if len(out) != len(res):
                raise RuntimeError("Backward hook returned an invalid number of grad_input, "
                                   f"got {len(out)}, but expected {len(res)}")
            res = out
        self.grad_outputs = None
        return self._join("in", res, g)


def _copy_into(target, src):
    """target's values := src's, in place (a version bump, no history), as PyTorch's
    load_state_dict does under no_grad."""
    from .._front.promotion import to, bump_version
    from .._front.tensor import _numpy_view
    _numpy_view(target)[...] = _numpy_view(to(src, target.dtype))
    bump_version(target)
