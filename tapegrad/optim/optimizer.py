"""Optimizers with PyTorch's API (param groups, state, state dicts); each step() is one
compiled call per param group (tapegrad/optim/_kernels.py), not a loop of tensor ops."""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import collections
import copy
import functools
import itertools

import numpy as np

from .._front import creation as _creation
from .._front.dtype import float32 as _F32
from .._engine.cache import kernel_cache
from .._engine.lowlevel import native_address
from .._engine.state import RECORDING, native_entry, note_break as _note_break
from .._front.tensor import Tensor, _CADDR, STRUCTURE, zero_grads

with kernel_cache():
    from . import _kernels as K

_REQUIRED = object()

# register_optimizer_step_pre_hook / _post_hook: hooks every optimizer runs
_global_optimizer_pre_hooks = collections.OrderedDict()
_global_optimizer_post_hooks = collections.OrderedDict()


def _handle(table, hook, prepend=False):
    """Add hook to table (an OrderedDict by handle id); returns the handle, which removes
    it (remove(), or leaving a with block)."""
    from ..autograd.function import RemovableHandle
    handle = RemovableHandle(lambda: table.pop(handle.id, None))
    table[handle.id] = hook
    if prepend:
        table.move_to_end(handle.id, last=False)
    return handle


def register_optimizer_step_pre_hook(hook):
    """Register a hook every optimizer calls before its step: hook(optimizer, args,
    kwargs) -> None or (new_args, new_kwargs). Returns a handle with remove()."""
    return _handle(_global_optimizer_pre_hooks, hook)


def register_optimizer_step_post_hook(hook):
    """Register a hook every optimizer calls after its step: hook(optimizer, args,
    kwargs). Returns a handle with remove()."""
    return _handle(_global_optimizer_post_hooks, hook)


def _hooked_step(func):
    """step() with the step pre and post hooks around it (PyTorch wraps the step of each
    optimizer class the same way, on its first construction)."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        self = args[0]
        pre, post = self._optimizer_step_pre_hooks, self._optimizer_step_post_hooks
        if not (pre or post or _global_optimizer_pre_hooks or _global_optimizer_post_hooks):
            return func(*args, **kwargs)
        _note_break("optimizer step hooks (Python)")
        for hook in itertools.chain(tuple(_global_optimizer_pre_hooks.values()),
                                    tuple(pre.values())):
            result = hook(self, args, kwargs)
            if result is not None:
                if isinstance(result, tuple) and len(result) == 2:
                    args, kwargs = result
                else:
                    raise RuntimeError(f"{func} must return None or a tuple of (new_args, "
                                       f"new_kwargs), but got {result}.")
        out = func(*args, **kwargs)
        for hook in itertools.chain(tuple(post.values()),
                                    tuple(_global_optimizer_post_hooks.values())):
            hook(self, args, kwargs)
        return out
    wrapper.hooked = True
    return wrapper


def _bumps(name):
    method = getattr(dict, name)

    def changed(self, *args, **kwargs):
        STRUCTURE[0] += 1
        return method(self, *args, **kwargs)
    changed.__name__ = name
    return changed


class _State(dict):
    """An optimizer's state (and each parameter's entry in it): every write bumps
    STRUCTURE, so the cached parameter tables of step() and a compiled replay's guards
    see state edited by hand (a replaced buffer, a dropped entry)."""
    __setitem__ = _bumps("__setitem__")
    __delitem__ = _bumps("__delitem__")
    pop = _bumps("pop")
    popitem = _bumps("popitem")
    clear = _bumps("clear")
    update = _bumps("update")
    setdefault = _bumps("setdefault")
    __ior__ = _bumps("__ior__")


class _OptimizerState(_State):
    """The outer state dict: an entry set by hand becomes a _State too."""

    def __setitem__(self, key, value):
        _State.__setitem__(self, key, _State(value) if type(value) is dict else value)

    def update(self, *args, **kwargs):
        for k, v in dict(*args, **kwargs).items():
            self[k] = v

    def __ior__(self, other):
        self.update(other)
        return self

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]


def _hyper_array(values):
    """The hyper-parameter array an update kernel reads (K.NHYPER float64s)."""
    h = np.zeros(K.NHYPER, np.float64)
    h[:len(values)] = values
    return h


class Optimizer:
    """Base class of the optimizers: param_groups, state, zero_grad, step and state_dict as
    in PyTorch; a step is one compiled kernel call per group."""
    # subclasses: defaults' names in the order the kernel takes them; the state buffers
    # (names, whether each exists for a group), whether a step counter is kept
    kernel = None
    hyper = ()
    buffers = ()
    has_step = False
    scalars = ()            # buffers that are 0-d tensors (float32, as PyTorch's)
    state_order = None      # the order PyTorch creates the state's keys in, if not ours
    capturable_message = None   # PyTorch's error at a capturable step on the CPU

    def __init__(self, params, defaults):
        self._optimizer_step_pre_hooks = collections.OrderedDict()
        self._optimizer_step_post_hooks = collections.OrderedDict()
        self._optimizer_state_dict_pre_hooks = collections.OrderedDict()
        self._optimizer_state_dict_post_hooks = collections.OrderedDict()
        self._optimizer_load_state_dict_pre_hooks = collections.OrderedDict()
        self._optimizer_load_state_dict_post_hooks = collections.OrderedDict()
        cls = type(self)
        if not getattr(cls.step, "hooked", False):
            cls.step = _hooked_step(cls.step)
        self.defaults = defaults
        self.state = {}
        self.param_groups = []
        self._tables = {}          # group index -> (key, kernel arguments, ids table, held)
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            "Tensors or dicts, but got " + type(params).__name__)
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def add_param_group(self, param_group):
        """Add a group of parameters with its own hyper-parameters (defaults fill the rest)."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        group = param_group         # (the caller's dict itself, as PyTorch keeps it)
        ps = group["params"]
        if isinstance(ps, (set, frozenset)):
            raise TypeError("optimizer parameters need to be organized in ordered collections, "
                            "but the ordering of tensors in sets will change between runs. "
                            "Please use a list instead.")
        ps = [ps] if isinstance(ps, Tensor) else list(ps)
        names = [p[0] for p in ps if isinstance(p, tuple)]      # (named_parameters())
        group["params"] = [p[1] if isinstance(p, tuple) else p for p in ps]
        if names:
            if len(names) != len(ps):
                raise ValueError("all optimizer params should be with/without names. Some "
                                 "param names are missing")
            group["param_names"] = names
        for p in group["params"]:
            if not isinstance(p, Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is "
                                + type(p).__name__)
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():
            if default is _REQUIRED and name not in group:
                raise ValueError(f"parameter group didn't specify a value of required "
                                 f"optimization parameter {name}")
            group.setdefault(name, default)
        if len({id(p) for p in group["params"]}) != len(group["params"]):
            import warnings
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in "
                          "future, this will cause an error; see "
                          "github.com/pytorch/pytorch/issues/40967 for more information",
                          stacklevel=3)
        for g in self.param_groups:
            if ("param_names" in group) != ("param_names" in g):
                which = "with names" if "param_names" in group else "without names"
                raise ValueError("all optimizer param groups should be with/without names. "
                                 f"cannot add param group {which} to the optimizer")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in group["params"]):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)
        STRUCTURE[0] += 1

    def __getstate__(self):
        """copy.deepcopy and pickle: the kernel arguments kept between steps hold raw
        addresses of these parameters' memory, so a copy starts without them (and
        without the step wrapper a scheduler put on this instance, which points at it)."""
        d = dict(self.__dict__, _tables={})
        d.pop("step", None)
        d.pop("_opt_called", None)
        return d

    def __setstate__(self, state):
        """Unpickling: hooks tables an older pickle lacks start empty."""
        self.__dict__.update(state)
        for name in ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks",
                     "_optimizer_state_dict_pre_hooks", "_optimizer_state_dict_post_hooks",
                     "_optimizer_load_state_dict_pre_hooks",
                     "_optimizer_load_state_dict_post_hooks"):
            self.__dict__.setdefault(name, collections.OrderedDict())
        self.__dict__.setdefault("_tables", {})

    # ------------------------------------------------------------ hooks
    def register_step_pre_hook(self, hook):
        """Call hook(optimizer, args, kwargs) before each step(); it may return
        (new_args, new_kwargs). Returns a handle with remove()."""
        return _handle(self._optimizer_step_pre_hooks, hook)

    def register_step_post_hook(self, hook):
        """Call hook(optimizer, args, kwargs) after each step(). Returns a handle with
        remove()."""
        return _handle(self._optimizer_step_post_hooks, hook)

    def register_state_dict_pre_hook(self, hook, prepend=False):
        """Call hook(optimizer) before state_dict() builds its dict (first, with
        prepend=True). Returns a handle with remove()."""
        return _handle(self._optimizer_state_dict_pre_hooks, hook, prepend)

    def register_state_dict_post_hook(self, hook, prepend=False):
        """Call hook(optimizer, state_dict) after state_dict() built it; a returned dict
        replaces it. Returns a handle with remove()."""
        return _handle(self._optimizer_state_dict_post_hooks, hook, prepend)

    def register_load_state_dict_pre_hook(self, hook, prepend=False):
        """Call hook(optimizer, state_dict) before load_state_dict() (on a shallow copy of
        the dict); a returned dict is loaded instead. Returns a handle with remove()."""
        return _handle(self._optimizer_load_state_dict_pre_hooks, hook, prepend)

    def register_load_state_dict_post_hook(self, hook, prepend=False):
        """Call hook(optimizer) after load_state_dict(). Returns a handle with remove()."""
        return _handle(self._optimizer_load_state_dict_post_hooks, hook, prepend)

    @property
    def state(self):
        """Per-parameter state (momentum buffers, step counts, ...), keyed by parameter."""
        return self._state

    @state.setter
    def state(self, value):
        self._state = _OptimizerState({p: _State(st) for p, st in value.items()})
        STRUCTURE[0] += 1

    # ------------------------------------------------------------ stepping
    def zero_grad(self, set_to_none=True):
        """Reset the gradients of every parameter (to None by default)."""
        zero_grads((p for g in self.param_groups for p in g["params"]), set_to_none)

    def _buffer_on(self, name, group):
        return True

    def step(self, closure=None):
        """Update every parameter from its gradient; closure, if given, recomputes the loss
        first and its value is returned."""
        loss = None
        if closure is not None:
            from ..autograd import enable_grad
            with enable_grad():
                loss = closure()
        for gi in range(len(self.param_groups)):
            self.step_group(gi)
        return loss

    def step_group(self, gi):
        """Update the parameters of param group gi that have a gradient."""
        group = self.param_groups[gi]
        if group.get("capturable") and self.capturable_message and any(
                p._has_grad() for p in group["params"]):
            raise AssertionError(self.capturable_message)
        values = [float(v) for v in self._hyper(group)]
        t = self._tables.get(gi)
        if t is None or t[0] != (STRUCTURE[0], values, tuple(map(id, group["params"]))):
            t = self._table(gi, group, values)
        step = native_entry(K.step_if_current, K.STEP_IF_CURRENT_SIG)
        r = step(*t[1])
        if r == K.E_STALE:          # a gradient appeared or went: state may need creating
            t = self._table(gi, group, values)
            r = step(*t[1])
        if r == K.E_LAYOUT:
            raise RuntimeError(f"{type(self).__name__}.step(): parameters and their "
                               "gradients must be contiguous tensors")
        if r < 0:
            raise RuntimeError(f"{type(self).__name__}.step(): a state buffer is missing "
                               "(the optimizer's state was edited by hand?)")
        if RECORDING[0] is not None and t[2] is not None:
            RECORDING[0].optimizer_step(self, gi, t[2])

    def _table(self, gi, group, values):
        """The kernel's arguments for group gi, kept between steps: building them was most
        of a small step's Python. They are rebuilt when the structure (state, the
        parameters' ids), the hyper-parameters (they switch buffers on) or the parameter
        list changed, and when the kernel finds that which parameters have a gradient
        changed (E_STALE)."""
        params = group["params"]
        before = STRUCTURE[0]     # (creating state bumps it: the next step rebuilds,
        ids = self._id_table(group)   # and its table no longer flags the state as new)
        inside = set() if ids is None else set(ids[:, K.P_ID].tolist())
        left = np.array([p._i for p in params if p._i not in inside] + [0], np.int64)
        table = np.zeros((0, K.NCOL), np.int64) if ids is None else ids
        h = _hyper_array(values)
        kernel = native_address(self.kernel, K.NATIVE_SIG)
        # the arrays, and the tensors whose ids they hold, stay alive with them: an edit
        # the key missed could give stale values, never freed memory
        held = (table, h, left, list(params),
                [v for p in params for v in self.state.get(p, {}).values()
                 if isinstance(v, Tensor)])
        t = self._tables[gi] = ((before, values, tuple(map(id, params))),
                                (kernel, _CADDR, table.ctypes.data, len(table), h.ctypes.data,
                                 left.ctypes.data, len(left) - 1), ids, held)
        return t

    def hyper_values(self, group):
        """The group's hyper-parameters as the kernel reads them (read at every step, so
        a scheduler's change takes effect)."""
        return _hyper_array([float(v) for v in self._hyper(group)])

    def _hyper(self, group):
        return [group[n] for n in self.hyper]

    def _id_table(self, group):
        """The kernel's table for the parameters of the group that have a gradient
        (creating state on first use), or None."""
        rows = []
        for p in group["params"]:
            if not p._has_grad():
                continue
            st = self.state.get(p)
            created = st is None
            if created:
                st = _State(self._init_state(p, group))
                if st:                  # (plain SGD keeps no state, as PyTorch)
                    self.state[p] = st
                    STRUCTURE[0] += 1
            row = [p._i, -1, -1, -1, -1, int(created)]
            for k, name in enumerate(self.buffers):
                b = st.get(name)
                if b is None and self._buffer_on(name, group):
                    # an option switched on after the first step: its buffer starts now
                    b = st[name] = self._new_buffer(name, p, group)
                    row[K.NEW] = 1
                    self.state[p] = st
                    STRUCTURE[0] += 1
                if b is not None:
                    row[1 + k] = b._i
            if self.has_step:
                row[K.STEP] = st["step"]._i
            rows.append(row)
        return np.array(rows, np.int64).reshape(-1, K.NCOL) if rows else None

    def _init_state(self, p, group):
        st = {}
        if self.has_step:
            st["step"] = _creation.tensor(0.0, dtype=_F32)    # (what the kernels read)
        for name in self.buffers:
            if self._buffer_on(name, group):
                st[name] = self._new_buffer(name, p, group)
        if self.state_order:
            st = {k: st[k] for k in self.state_order if k in st}
        return st

    def _new_buffer(self, name, p, group):
        if name in self.scalars:
            from .._front.dtype import get_default_dtype, float64
            dt = float64 if get_default_dtype() is float64 else _F32
            return _creation.tensor(float(self._scalar_start(name, group)), dtype=dt)
        return _creation.zeros(*p.shape, dtype=p.dtype)

    def _scalar_start(self, name, group):
        return 1.0

    # ------------------------------------------------------------ state dicts
    def state_dict(self):
        """The state and param_groups, with parameters replaced by their indices, as
        PyTorch's."""
        for hook in tuple(self._optimizer_state_dict_pre_hooks.values()):
            hook(self)
        index = {}
        groups = []
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            ids = []
            for p in g["params"]:
                index.setdefault(id(p), len(index))
                ids.append(index[id(p)])
            packed["params"] = ids
            groups.append(packed)
        state = {index[id(p)]: {k: _copied(v) for k, v in st.items()}
                 for p, st in self.state.items() if id(p) in index}
        out = {"state": state, "param_groups": groups}
        for hook in tuple(self._optimizer_state_dict_post_hooks.values()):
            result = hook(self, out)
            if result is not None:
                out = result
        return out

    def load_state_dict(self, state_dict):
        """Restore state and hyper-parameters from state_dict() (tapegrad's or PyTorch's,
        its tensors converted)."""
        state_dict = state_dict.copy()
        for hook in tuple(self._optimizer_load_state_dict_pre_hooks.values()):
            result = hook(self, state_dict)
            if result is not None:
                state_dict = result
        self._load(state_dict)
        for hook in tuple(self._optimizer_load_state_dict_post_hooks.values()):
            hook(self)

    def _load(self, state_dict):
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for mine, theirs in zip(self.param_groups, groups):
            if len(mine["params"]) != len(theirs["params"]):
                raise ValueError("loaded state dict contains a parameter group that doesn't "
                                 "match the size of optimizer's group")
        self.state = {}
        STRUCTURE[0] += 1
        for mine, theirs in zip(self.param_groups, groups):
            for p, idx in zip(mine["params"], theirs["params"]):
                saved = state_dict["state"].get(idx, state_dict["state"].get(str(idx)))
                if saved is None:
                    continue
                st = _State()
                for k, v in saved.items():
                    if k == "step" and self.has_step:   # a float32 0-d tensor, as saved
                        v = _creation.tensor(float(v.item() if isinstance(v, Tensor) else v),
                                             dtype=_F32)
                    elif k in self.scalars:         # (cast to the parameter's dtype, as
                        v = _creation.tensor(       # PyTorch's load does)
                            float(v.item() if isinstance(v, Tensor) else v), dtype=p.dtype)
                    else:
                        v = _cast(p, v)
                        if k in self.buffers and isinstance(v, Tensor) and \
                                tuple(v.shape) != tuple(p.shape):
                            raise ValueError(f"state {k!r} has shape {list(v.shape)}, the "
                                             f"parameter has {list(p.shape)}")
                    st[k] = v
                self.state[p] = st
            # the saved group replaces ours (keys ours has and it lacks go, as in
            # PyTorch), keeping our parameters and, unless it has its own, their names
            new = {k: (mine["params"] if k == "params" else copy.deepcopy(v))
                   for k, v in theirs.items()}
            if "param_names" in mine and "param_names" not in new:
                new["param_names"] = mine["param_names"]
            mine.clear()
            mine.update(new)
            for k, v in self.defaults.items():      # (options an older state dict lacks:
                if v is not _REQUIRED:              # their defaults, as PyTorch's
                    mine.setdefault(k, v)           # __setstate__ fills them)

    def __repr__(self):
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(g):
                if k != "params":
                    lines.append(f"    {k}: {g[k]}")
        lines.append(")")
        return "\n".join(lines)


def _copied(v):
    """A state value as state_dict() hands it out: tensors detached copies (in lists
    too, as LBFGS keeps them)."""
    if isinstance(v, Tensor):
        return v.detach().clone()
    if isinstance(v, (list, tuple)):
        return type(v)(_copied(x) for x in v)
    return v


def _cast(p, v):
    """A loaded state value: tensors copied in the parameter's dtype (when floating),
    also inside lists and dicts, as PyTorch's load_state_dict casts them."""
    if isinstance(v, Tensor):
        v = v.detach()
        if p.dtype.is_floating_point:
            v = v.to(p.dtype)
        return v.clone()
    if isinstance(v, dict):
        return {k: _cast(p, x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(_cast(p, x) for x in v)
    return v


def _capturable(what="params and state_steps", xla=True):
    return (f"If capturable=True, {what} must be on supported devices: "
            f"{['cuda', 'xpu', 'hpu', 'privateuseone'] + (['xla'] if xla else [])}.")


def _check(cond, msg):
    if not cond:
        raise ValueError(msg)


def _implementation(foreach=None, fused=None, differentiable=False, **more):
    """PyTorch's implementation switches, kept in the defaults as PyTorch keeps them (so
    param groups and state dicts have its keys). Every step here is one compiled kernel
    per group, so foreach, fused and capturable choose nothing, with PyTorch's checks;
    differentiable=True (a step autograd records) is refused, not ignored."""
    if fused and foreach:
        raise RuntimeError("`fused` and `foreach` cannot be `True` together.")
    if fused and differentiable:
        raise RuntimeError("`fused` does not support `differentiable`")
    if differentiable:
        raise NotImplementedError("differentiable=True is not supported: tapegrad's optimizer "
                                  "steps are compiled kernels that autograd does not record")
    return dict(foreach=foreach, fused=fused, differentiable=differentiable, **more)


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, dampening, Nesterov and weight
    decay."""
    kernel = K.sgd_native
    hyper = ("lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize")
    buffers = ("momentum_buffer",)

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False,
                 *, maximize=False, foreach=None, differentiable=False, fused=None):
        _check(lr >= 0, f"Invalid learning rate: {lr}")
        _check(momentum >= 0, f"Invalid momentum value: {momentum}")
        _check(weight_decay >= 0, f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize,
                                      **_implementation(foreach, fused, differentiable)))

    def _buffer_on(self, name, group):
        return group["momentum"] != 0


class Adam(Optimizer):
    """Adam (amsgrad, maximize and weight_decay as in PyTorch)."""
    kernel = K.adam_native
    hyper = ("lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad", "maximize", "decoupled")
    buffers = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")
    has_step = True
    capturable_message = _capturable()

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=None, decoupled_weight_decay=False):
        _check(lr >= 0, f"Invalid learning rate: {lr}")
        _check(eps >= 0, f"Invalid epsilon value: {eps}")
        _check(0 <= betas[0] < 1, f"Invalid beta parameter at index 0: {betas[0]}")
        _check(0 <= betas[1] < 1, f"Invalid beta parameter at index 1: {betas[1]}")
        _check(weight_decay >= 0, f"Invalid weight_decay value: {weight_decay}")
        super().__init__(params, dict(
            lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
            maximize=maximize, **_implementation(foreach, fused, differentiable,
                                                 capturable=capturable),
            decoupled_weight_decay=decoupled_weight_decay))

    def _hyper(self, group):
        b1, b2 = group["betas"]
        return [group["lr"], b1, b2, group["eps"], group["weight_decay"], group["amsgrad"],
                group["maximize"], group["decoupled_weight_decay"]]

    def _buffer_on(self, name, group):
        return name != "max_exp_avg_sq" or group["amsgrad"]


class AdamW(Adam):
    """Adam with decoupled weight decay (PyTorch's AdamW: Adam's
    decoupled_weight_decay=True, which its param groups show)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach,
                         maximize=maximize, capturable=capturable,
                         differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)


class RMSprop(Optimizer):
    """RMSprop (momentum, centered and weight_decay as in PyTorch)."""
    kernel = K.rmsprop_native
    hyper = ("lr", "alpha", "eps", "weight_decay", "momentum", "centered", "maximize")
    buffers = ("square_avg", "grad_avg", "momentum_buffer")
    state_order = ("step", "square_avg", "momentum_buffer", "grad_avg")
    has_step = True
    capturable_message = _capturable()

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
                 centered=False, capturable=False, foreach=None, maximize=False,
                 differentiable=False):
        _check(lr >= 0, f"Invalid learning rate: {lr}")
        _check(eps >= 0, f"Invalid epsilon value: {eps}")
        _check(momentum >= 0, f"Invalid momentum value: {momentum}")
        _check(weight_decay >= 0, f"Invalid weight_decay value: {weight_decay}")
        _check(alpha >= 0, f"Invalid alpha value: {alpha}")
        _implementation(foreach, None, differentiable)       # (PyTorch's RMSprop: no fused)
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                      momentum=momentum, centered=centered,
                                      capturable=capturable, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable))

    def _buffer_on(self, name, group):
        if name == "grad_avg":
            return group["centered"]
        if name == "momentum_buffer":
            return group["momentum"] > 0
        return True


class Adagrad(Optimizer):
    """Adagrad (lr_decay, weight_decay and initial_accumulator_value as in PyTorch)."""
    kernel = K.adagrad_native
    hyper = ("lr", "lr_decay", "weight_decay", "eps", "maximize")
    buffers = ("sum",)
    has_step = True

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0,
                 eps=1e-10, foreach=None, *, maximize=False, differentiable=False, fused=None):
        _check(lr >= 0, f"Invalid learning rate: {lr}")
        _check(lr_decay >= 0, f"Invalid lr_decay value: {lr_decay}")
        _check(weight_decay >= 0, f"Invalid weight_decay value: {weight_decay}")
        _check(initial_accumulator_value >= 0,
               f"Invalid initial_accumulator_value value: {initial_accumulator_value}")
        _check(eps >= 0, f"Invalid epsilon value: {eps}")
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value,
                                      eps=eps, maximize=maximize,
                                      **_implementation(foreach, fused, differentiable)))

    def _new_buffer(self, name, p, group):
        # the constructor's value, whatever a group says: PyTorch's Adagrad fills every
        # sum from its initial_accumulator_value argument
        return _creation.full(tuple(p.shape), float(self.defaults["initial_accumulator_value"]),
                              dtype=p.dtype)
