"""Optimizers with PyTorch's API (param groups, state, state dicts); each step() is one
compiled call per param group (tapegrad/optim/_kernels.py), not a loop of tensor ops."""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import copy

import numpy as np

from .._front import creation as _creation
from .._front.dtype import float32 as _F32
from .._engine.cache import kernel_cache
from .._engine.lowlevel import native_address
from .._engine.state import RECORDING, native_entry
from .._front.tensor import Tensor, _CADDR, STRUCTURE, zero_grads

with kernel_cache():
    from . import _kernels as K

_REQUIRED = object()


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

    def __init__(self, params, defaults):
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
        group = dict(param_group)
        ps = group["params"]
        if isinstance(ps, (set, frozenset)):
            raise TypeError("optimizer parameters need to be organized in ordered collections, "
                            "but the ordering of tensors in sets will change between runs. "
                            "Please use a list instead.")
        group["params"] = [ps] if isinstance(ps, Tensor) else list(ps)
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
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in group["params"]):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)
        STRUCTURE[0] += 1

    def __getstate__(self):
        """copy.deepcopy and pickle: the kernel arguments kept between steps hold raw
        addresses of these parameters' memory, so a copy starts without them."""
        return dict(self.__dict__, _tables={})

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
        return st

    def _new_buffer(self, name, p, group):
        return _creation.zeros(*p.shape, dtype=p.dtype)

    # ------------------------------------------------------------ state dicts
    def state_dict(self):
        """The state and param_groups, with parameters replaced by their indices, as
        PyTorch's."""
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
        state = {index[id(p)]: {k: (v.detach().clone() if isinstance(v, Tensor) else v)
                                for k, v in st.items()}
                 for p, st in self.state.items() if id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Restore state and hyper-parameters from state_dict()."""
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
                    if k == "step":                 # a float32 0-d tensor, whatever was saved
                        v = _creation.tensor(float(v.item() if isinstance(v, Tensor) else v),
                                             dtype=_F32)
                    elif isinstance(v, Tensor):
                        v = v.detach().to(p.dtype).clone()
                        if tuple(v.shape) != tuple(p.shape):
                            raise ValueError(f"state {k!r} has shape {list(v.shape)}, the "
                                             f"parameter has {list(p.shape)}")
                    st[k] = v
                self.state[p] = st
            for k, v in theirs.items():
                if k != "params":
                    mine[k] = copy.deepcopy(v)

    def __repr__(self):
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(g):
                if k != "params":
                    lines.append(f"    {k}: {g[k]}")
        lines.append(")")
        return "\n".join(lines)


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
    has_step = True

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
        return _creation.full(tuple(p.shape), float(group["initial_accumulator_value"]),
                              dtype=p.dtype)
