"""tapegrad.autograd: backward(), grad(), grad-mode switches, graph nodes."""
import re as _re
import warnings as _warnings

from .._engine import layout as L
from .._engine.state import engine as _engine
from ..ops.registry import OPS
from .grad_mode import no_grad, enable_grad, inference_mode, set_grad_enabled, is_grad_enabled
from .._front.nodes import Node, AccumulateGrad
from .function import (Function, FunctionCtx, drive as _drive, register_hook as _register_hook,
                       _LEAF_HOOKS, _apply_hooks, POST_BACKWARD as _POST_BACKWARD,
                       post_backward as _post_backward,
                       register_post_accumulate_grad_hook as _register_post_acc,
                       FREED_GRAPH as _FREED_GRAPH)
from .._engine import sizes as _sizes
from .._front import methods as _methods
from .._front.creation import zeros_like as _zeros_like
from .._front.dtype import BY_CODE as _BY_CODE
from .._front.tensor import Tensor as _Tensor, _wrap, _check_not_stale
from .._engine.state import note_break as _note_break
from .anomaly_mode import (detect_anomaly, set_detect_anomaly, is_anomaly_enabled,
                           is_anomaly_check_nan_enabled, E_ANOMALY as _E_ANOMALY)
from . import anomaly_mode as _anomaly

__all__ = ["backward", "grad", "no_grad", "enable_grad", "inference_mode",
           "set_grad_enabled", "is_grad_enabled", "Node", "AccumulateGrad", "Function",
           "FunctionCtx", "Variable", "detect_anomaly", "set_detect_anomaly",
           "is_anomaly_enabled", "is_anomaly_check_nan_enabled"]


class _VariableMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, _Tensor)         # (every tensor is a Variable, as in PyTorch)


class Variable(metaclass=_VariableMeta):
    """PyTorch's legacy wrapper: Variable(t, requires_grad=False) returns a new tensor
    sharing t's memory, without its history, requiring grad as asked (volatile: removed,
    with PyTorch's warning); isinstance(x, Variable) holds for every tensor."""

    def __new__(cls, data=None, requires_grad=False, volatile=False):
        if volatile:
            _warnings.warn("volatile was removed and now has no effect. Use `with "
                           "torch.no_grad():` instead.", UserWarning, stacklevel=2)
        if data is None:
            data = _empty0()
        if not isinstance(data, _Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got "
                            f"{type(data).__name__}")
        if not isinstance(requires_grad, bool):
            raise TypeError(f"Variable(): argument 'requires_grad' must be bool, not "
                            f"{type(requires_grad).__name__}")
        out = data.detach()
        if requires_grad and not out.dtype.is_floating_point:
            raise RuntimeError("Only Tensors of floating point and complex dtype can require "
                               "gradients")
        return out.requires_grad_(requires_grad)


def _empty0():
    from .._front.creation import empty
    return empty(0)


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _describe(t):
    m = _engine().meta[t]
    shape = m[L.M_SHAPE:L.M_SHAPE + m[L.M_NDIM]].tolist()
    desc = f"[tapegrad.{_BY_CODE[m[L.M_DTYPE]].tensor_type} {shape}]"
    if m[L.M_SRCOP] >= 0:
        name = OPS[int(m[L.M_SRCOP])].grad_fn
        base = _re.sub(r"Backward\d+$", "", name)      # (PyTorch's: RsubBackward1 is Rsub)
        desc += f", which is output {int(m[L.M_SRCIDX])} of {base},"
    return desc


def _sweep_error(code, err):
    E = _engine()
    if code == _E_ANOMALY:
        return _anomaly.nan_error(err)
    if code in (L.E_FREED, L.E_VERSION):     # (a row's error: anomaly mode names its forward)
        _anomaly.warn_row(int(err[0]), stacklevel=4)
    if code == L.E_FREED:
        return RuntimeError(_FREED_GRAPH)
    if code == L.E_VERSION:
        saved, now, expected = (int(x) for x in err[1:4])
        if is_anomaly_enabled():    # (PyTorch's hints: the warning above names the row)
            hint = ("the backtrace further above shows the operation that failed to compute "
                    "its gradient. The variable in question was changed in there or anywhere "
                    "later. Good luck!")
        else:
            hint = ("enable anomaly detection to find the operation that failed to compute "
                    "its gradient, with tapegrad.autograd.set_detect_anomaly(True, "
                    "check_nan=False).")
        return RuntimeError(
            "one of the variables needed for gradient computation has been modified by an "
            f"inplace operation: {_describe(saved)} is at version {now}; expected version "
            f"{expected} instead. Hint: {hint}")
    if code in (L.E_NOMEM, L.E_OVERFLOW):        # a gradient buffer could not be made
        return _sizes.engine_error(code, err, int(E.ctx[L.C_NOMEM_BYTES]))
    return RuntimeError(f"backward failed with engine status {code}")


def _run_sweep(roots, seeds, captures, mode, retain):
    E = _engine()
    n, m = len(roots), len(captures)
    with E.lock:
        E.reserve_args(2 * n + m)
        while True:
            E.iargs[:n] = roots
            E.iargs[n:2 * n] = seeds
            E.iargs[2 * n:2 * n + m] = captures
            r = E.sweep(E.caddr, n, m, mode, retain)
            if r == L.E_CALLBACK or (r >= 0 and _LEAF_HOOKS):
                r = _drive(r, retain)
            if r >= 0:
                return E.outs[:m].tolist()
            if r in (L.E_NEED_KERNEL, L.E_GROW_STOR, L.E_GROW_META):
                E.handle(r)
                continue
            raise _sweep_error(r, E.err.copy())


def _gradients(grads, n):
    """grad_tensors / grad_outputs as PyTorch reads them: None, a tensor, or an iterable
    (a number is Python's TypeError for iterating it, as in PyTorch)."""
    if grads is None:
        return [None] * n
    if isinstance(grads, _Tensor):
        return [grads]
    return list(grads)


def _roots_and_seeds(tensors, grad_tensors, what):
    roots, seeds, keep = [], [], []
    grad_tensors = _gradients(grad_tensors, len(tensors))
    if len(grad_tensors) != len(tensors):
        raise RuntimeError(f"got {len(grad_tensors)} tensors and {len(tensors)} gradients")
    for i, (t, g) in enumerate(zip(tensors, grad_tensors)):
        if not isinstance(t, _Tensor):
            raise TypeError(f"{what}: expected a Tensor, got {type(t).__name__}")
        _check_not_stale(t._i)
        if not _engine().meta[t._i, L.M_FLAGS] & L.FL_REQ:   # (no edge: not t.requires_grad,
            # which also holds for a view whose gradient would go nowhere; PyTorch refuses it)
            raise RuntimeError(f"element {i} of tensors does not require grad and does not "
                               "have a grad_fn")
        if g is not None and not isinstance(g, _Tensor):
            raise TypeError(f"gradients can be either Tensors or None, but got "
                            f"{type(g).__name__}")
        if g is None:
            if t.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            seeds.append(-1)
        else:
            if g.shape != t.shape:
                raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of "
                                   f"{g.shape!r} and output[{i}] has a shape of {t.shape!r}.")
            g = g.detach().to(t.dtype).contiguous()     # (cast, as PyTorch does)
            keep.append(g)
            seeds.append(g._i)
        roots.append(t._i)
    return roots, seeds, keep


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False,
             grad_variables=None, inputs=None):
    """Accumulate d(tensors)/d(leaf) into every leaf's .grad (and retained grads);
    grad_variables is PyTorch's deprecated name of grad_tensors."""
    if grad_variables is not None:
        _warnings.warn("`grad_variables` is deprecated. Use `grad_tensors` instead.",
                       FutureWarning, stacklevel=2)
        if grad_tensors is not None:
            raise RuntimeError("`grad_tensors` and `grad_variables` (deprecated) arguments both "
                               "passed to `backward()`. Please only use `grad_tensors`.")
        grad_tensors = grad_variables
    if inputs is not None:
        raise NotImplementedError("backward(inputs=...) is not supported yet; use "
                                  "tapegrad.autograd.grad")
    tensors = _as_list(tensors)
    roots, seeds, keep = _roots_and_seeds(tensors, grad_tensors, "backward")
    if create_graph:            # the gradient recorded as rows (higher_order.py)
        from . import higher_order
        _note_break("backward(create_graph=True) (a gradient walked in Python)")
        higher_order.backward(tensors, _gradients(grad_tensors, len(tensors)))
    else:
        _run_sweep(roots, seeds, [], L.MODE_BACKWARD, bool(retain_graph))
        if _POST_BACKWARD:      # (they read the sweep's rows: not after create_graph's walk)
            _post_backward()
    del keep


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """The gradients of outputs with respect to inputs, without touching any .grad;
    only_inputs is PyTorch's deprecated, ignored flag."""
    if is_grads_batched:
        raise NotImplementedError("is_grads_batched=True (batched vector-Jacobian products) "
                                  "is not supported by tapegrad")
    if not only_inputs:
        _warnings.warn("only_inputs argument is deprecated and is ignored now (defaults to "
                       "True). To accumulate gradient for other parts of the graph, please "
                       "use tapegrad.autograd.backward.", FutureWarning, stacklevel=2)
    _note_break("autograd.grad (its results are new tensors for Python)")
    outputs = _as_list(outputs)
    inputs = _as_list(inputs)
    for t in inputs:
        if not isinstance(t, _Tensor):
            raise TypeError(f"grad: inputs must be Tensors, got {type(t).__name__}")
        if not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
        _check_not_stale(t._i)
    roots, seeds, keep = _roots_and_seeds(outputs, grad_outputs, "grad")
    if create_graph:            # the gradient recorded as rows (higher_order.py)
        from . import higher_order
        return higher_order.grad(outputs, _gradients(grad_outputs, len(outputs)), inputs,
                                 allow_unused, materialize_grads)
    E = _engine()
    uniq = list(dict.fromkeys(t._i for t in inputs))
    for i in uniq:
        E.meta[i, L.M_FLAGS] |= L.FL_CAPTURE
    try:
        got = _run_sweep(roots, seeds, uniq, L.MODE_GRAD, bool(retain_graph))
    finally:
        for i in uniq:
            E.meta[i, L.M_FLAGS] &= ~L.FL_CAPTURE
            gt = int(E.meta[i, L.M_GTMP])
            if gt >= 0:             # left over from a failed sweep
                E.meta[i, L.M_GTMP] = -1
    by_id = {i: (_wrap(g) if g >= 0 else None) for i, g in zip(uniq, got)}
    for i in uniq:          # a leaf's hooks see (and may replace) its gradient, as in PyTorch
        hooks = _LEAF_HOOKS.get(i)
        if hooks and by_id[i] is not None and E.meta[i, L.M_FLAGS] & L.FL_HOOK:
            with no_grad():
                by_id[i] = _apply_hooks(hooks, by_id[i]).detach()
    result = []
    for k, t in enumerate(inputs):
        g = by_id[t._i]
        if g is None:
            if materialize_grads:
                g = _zeros_like(t)
            elif not allow_unused:
                raise RuntimeError(f"The differentiated Tensor at index {k} appears to not "
                                   "have been used in the graph. Set allow_unused=True if this "
                                   "is the desired behavior.")
        result.append(g)
    del keep
    return tuple(result)


E = _engine()
_MW, _M_NUMEL, _M_FLAGS, _FL_REQ = L.MW, L.M_NUMEL, L.M_FLAGS, L.FL_REQ


def _tensor_backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """Compute the gradients of this tensor with respect to the graph leaves and add
    them to their .grad, as tapegrad.autograd.backward."""
    if gradient is None and inputs is None and not create_graph:
        # the common case, a scalar loss: straight into the compiled sweep; anything
        # that needs attention (a kernel to load, a table to grow, an error) takes the
        # general path, which starts over (a failed sweep changes nothing)
        i = self._i
        mv = E.meta_mv
        if mv[i * _MW + _M_NUMEL] == 1 and mv[i * _MW + _M_FLAGS] & _FL_REQ:
            with E.lock:
                ia = E.iargs_mv
                ia[0] = i
                ia[1] = -1
                r = E.sweep(E.caddr, 1, 0, L.MODE_BACKWARD, bool(retain_graph))
                if r >= 0 and not _LEAF_HOOKS:
                    if _POST_BACKWARD:
                        _post_backward()
                    return
                if r >= 0 or r == L.E_CALLBACK or r in (L.E_NOMEM, L.E_OVERFLOW, _E_ANOMALY):
                    # (an allocation refused mid-sweep: starting over would find the
                    # rows already run, and report a second backward)
                    if r >= 0 or r == L.E_CALLBACK:
                        r = _drive(r, bool(retain_graph))
                    if r >= 0:
                        if _POST_BACKWARD:
                            _post_backward()
                        return
                    raise _sweep_error(r, E.err.copy())
    backward([self], gradient, retain_graph, create_graph, inputs=inputs)


_tensor_backward.__name__, _tensor_backward.__qualname__ = "backward", "Tensor.backward"
_methods.methods(backward=_tensor_backward, register_hook=_register_hook,
                 register_post_accumulate_grad_hook=_register_post_acc)

from . import functional  # noqa: E402  (reads grad above: imported last)
from .gradcheck import gradcheck, gradgradcheck  # noqa: E402  (reads grad above)
