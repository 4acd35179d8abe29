"""tapegrad.autograd.functional: vjp, jvp, jacobian, hessian, vhp and hvp of a Python
function, with PyTorch's signatures, results (a Tensor or tuples of them, as the inputs and
outputs are given), strict-mode checks and messages.

Everything here is reverse mode, as PyTorch's own implementation of these functions is:
jvp and hvp use the double-backward trick (a backward through the backward, with respect to
its grad_outputs), which needs the function's ops to have a recorded double backward
(tapegrad.autograd.higher_order; an op without one raises NotImplementedError naming it).
tapegrad has no vmap and no forward-mode AD: `vectorize=True` and
`strategy="forward-mode"` (PyTorch requires vectorize with it) give the same numbers by one
reverse sweep per output element; the combinations PyTorch refuses are refused with its
errors.
"""
from .._front.tensor import Tensor
from .._front.creation import zeros_like
from .grad_mode import enable_grad, set_grad_enabled, is_grad_enabled
from .higher_order import tg
from . import grad as _grad

__all__ = ["vjp", "jvp", "jacobian", "hessian", "vhp", "hvp"]


# ---------------------------------------------------------------- PyTorch's helpers
def _as_tuple(inp, arg_name, fn_name):
    """(whether inp was a tuple, inp as a tuple of Tensors); anything else is a TypeError."""
    is_tuple = isinstance(inp, tuple)
    tup = inp if is_tuple else (inp,)
    for i, el in enumerate(tup):
        if not isinstance(el, Tensor):
            where = f"the value at index {i}" if is_tuple else f"the given {arg_name}"
            raise TypeError(f"The {arg_name} given to {fn_name} must be either a Tensor or a "
                            f"tuple of Tensors but {where} has type {type(el)}.")
    return is_tuple, tup


def _tuple_postprocess(res, to_unpack):
    """Undo _as_tuple: to_unpack is one flag, or (outputs' flag, inputs' flag) for nested."""
    if isinstance(to_unpack, tuple):
        if not to_unpack[1]:
            res = tuple(el[0] for el in res)
        to_unpack = to_unpack[0]
    return res if to_unpack else res[0]


def _preprocess(inputs, create_graph, need_graph):
    """New tensor objects for the function (so that the inputs given here can be told from
    the same tensors captured by the function): with create_graph, a view keeps the
    caller's history; otherwise a detached copy."""
    return tuple(t.view_as(t) if create_graph and t.requires_grad
                 else t.detach().requires_grad_(need_graph) for t in inputs)


def _postprocess(res, create_graph):
    if isinstance(res, Tensor):
        return res if create_graph else res.detach()
    return tuple(_postprocess(r, create_graph) for r in res)


def _validate_v(v, other, is_other_tuple):
    if len(other) != len(v):
        if is_other_tuple:
            raise RuntimeError(f"v is a tuple of invalid length: should be {len(other)} but "
                               f"got {len(v)}.")
        raise RuntimeError("The given v should contain a single Tensor.")
    for i, (a, b) in enumerate(zip(v, other)):
        if a.size() != b.size():
            prefix = f"Entry {i} in " if is_other_tuple else ""
            raise RuntimeError(f"{prefix}v has invalid size: should be {b.size()} but got "
                               f"{a.size()}.")


def _input_v(v, inputs, is_inputs_tuple, create_graph, fn_name):
    """v for a product on the inputs' side (jvp, vhp, hvp)."""
    if v is None:
        if len(inputs) != 1 or inputs[0].nelement() != 1:
            raise RuntimeError("The vector v can only be None if the input to the "
                               "user-provided function is a single Tensor with a single "
                               "element.")
        return None
    v = _preprocess(_as_tuple(v, "v", fn_name)[1], create_graph, False)
    _validate_v(v, inputs, is_inputs_tuple)
    return v


_NOT_DIFFERENTIABLE = {
    "hessian": "The hessian of the user-provided function with respect to input {i} is "
               "independent of the input. This is not allowed in strict mode. You should "
               "ensure that your function is thrice differentiable and that the hessian "
               "depends on the inputs.",
    "jacobian": "While computing the hessian, found that the jacobian of the user-provided "
                "function with respect to input {i} is independent of the input. This is not "
                "allowed in strict mode. You should ensure that your function is twice "
                "differentiable and that the jacobian depends on the inputs (this would be "
                "violated by a linear function for example).",
    "grad_inputs": "The gradient with respect to input {i} is independent of the inputs of "
                   "the user-provided function. This is not allowed in strict mode.",
    "outputs": "Output {i} of the user-provided function does not require gradients. The "
               "outputs must be computed in a differentiable manner from the input when "
               "running in strict mode.",
}


def _check_requires_grad(tensors, kind, strict):
    if not strict:
        return
    for i, t in enumerate(tensors):
        if t is None:
            raise RuntimeError(f"The output of the user-provided function is independent of "
                               f"input {i}. This is not allowed in strict mode.")
        if not t.requires_grad:
            raise RuntimeError(_NOT_DIFFERENTIABLE[kind].format(i=i))


def _autograd_grad(outputs, inputs, grad_outputs=None, create_graph=False,
                   retain_graph=None):
    """autograd.grad over the outputs that have a graph (None for the others, or all None
    when none has), allowing unused inputs."""
    if grad_outputs is None:
        grad_outputs = (None,) * len(outputs)
    pairs = [(o, g) for o, g in zip(outputs, grad_outputs)
             if o is not None and o.requires_grad]
    if not pairs:
        return (None,) * len(inputs)
    return _grad([o for o, _ in pairs], inputs, [g for _, g in pairs], allow_unused=True,
                 create_graph=create_graph, retain_graph=retain_graph)


_INDEPENDENT = {
    "back": "The output of the user-provided function is independent of input {i}. This is "
            "not allowed in strict mode.",
    "back_trick": "The gradient with respect to the input is independent of entry {i} in the "
                  "grad_outputs when using the double backward trick to compute forward mode "
                  "gradients. This is not allowed in strict mode.",
    "double_back": "The jacobian of the user-provided function is independent of input {i}. "
                   "This is not allowed in strict mode.",
    "double_back_trick": "The hessian of the user-provided function is independent of entry "
                         "{i} in the grad_jacobian. This is not allowed in strict mode as it "
                         "prevents from using the double backward trick to replace forward "
                         "mode AD.",
}


def _fill_in_zeros(grads, refs, strict, create_graph, stage):
    """Zeros for the missing gradients (strict: an error saying which)."""
    res = []
    for i, g in enumerate(grads):
        if g is None:
            if strict:
                raise RuntimeError(_INDEPENDENT[stage].format(i=i))
            g = zeros_like(refs[i])
        elif strict and create_graph and not g.requires_grad:
            what = "hessian" if "double" in stage else "jacobian"
            raise RuntimeError(f"The {what} of the user-provided function is independent of "
                               f"input {i}. This is not allowed in strict mode when "
                               "create_graph=True.")
        res.append(g)
    return tuple(res)


def _outputs(func, inputs, fn_name, strict):
    is_tuple, outputs = _as_tuple(func(*inputs), "outputs of the user-provided function",
                                  fn_name)
    _check_requires_grad(outputs, "outputs", strict)
    return is_tuple, outputs


def _scalar_outputs(func, inputs, fn_name, strict):
    """The single one-element output that vhp, hvp and hessian differentiate twice."""
    is_tuple, outputs = _outputs(func, inputs, fn_name, strict)
    if is_tuple:
        raise RuntimeError(f"The function given to {fn_name} should return a single Tensor")
    if outputs[0].nelement() != 1:
        raise RuntimeError(f"The Tensor returned by the function given to {fn_name} should "
                           "contain a single element")
    return is_tuple, outputs


def _finish(outputs, is_outputs_tuple, res, is_res_tuple, create_graph):
    return (_tuple_postprocess(_postprocess(outputs, create_graph), is_outputs_tuple),
            _tuple_postprocess(_postprocess(res, create_graph), is_res_tuple))


# ---------------------------------------------------------------- products
def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(*inputs), v^T J): the vector-Jacobian product of func at inputs, shaped like
    the inputs (a Tensor or a tuple, as inputs is given). v is shaped like func's outputs;
    it may be None when func returns a single one-element Tensor. With create_graph both
    results are differentiable; with strict an input that no output depends on is an error
    (otherwise its product is zeros)."""
    with enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "vjp")
        inputs = _preprocess(inputs, create_graph, True)
        is_outputs_tuple, outputs = _outputs(func, inputs, "vjp", strict)
        if v is not None:
            v = _preprocess(_as_tuple(v, "v", "vjp")[1], create_graph, False)
            _validate_v(v, outputs, is_outputs_tuple)
        elif len(outputs) != 1 or outputs[0].nelement() != 1:
            raise RuntimeError("The vector v can only be None if the user-provided function "
                               "returns a single Tensor with a single element.")
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        res = _fill_in_zeros(_autograd_grad(outputs, inputs, v, create_graph), inputs,
                             strict, create_graph, "back")
    return _finish(outputs, is_outputs_tuple, res, is_inputs_tuple, create_graph)


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(*inputs), J v): the Jacobian-vector product of func at inputs, shaped like
    func's outputs. v is shaped like the inputs (may be None for a single one-element
    input). Computed as PyTorch does, by the double-backward trick: the backward's
    dependence on its grad_outputs is differentiated, so func's ops need a double
    backward."""
    with enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jvp")
        inputs = _preprocess(inputs, create_graph, True)
        v = _input_v(v, inputs, is_inputs_tuple, create_graph, "jvp")
        is_outputs_tuple, outputs = _outputs(func, inputs, "jvp", strict)
        # the backward is linear in these, so their value (zero) does not matter
        grad_outputs = tuple(zeros_like(o, requires_grad=True) for o in outputs)
        grad_inputs = _autograd_grad(outputs, inputs, grad_outputs, create_graph=True)
        _check_requires_grad(grad_inputs, "grad_inputs", strict)
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        res = _fill_in_zeros(_autograd_grad(grad_inputs, grad_outputs, v, create_graph),
                             outputs, strict, create_graph, "back_trick")
    return _finish(outputs, is_outputs_tuple, res, is_outputs_tuple, create_graph)


def _first_gradient(func, inputs, v, create_graph, strict, api):
    """vhp's and hvp's common start (in grad mode): the checked inputs and v, func's
    scalar output and its gradient, recorded."""
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", api)
    inputs = _preprocess(inputs, create_graph, True)
    v = _input_v(v, inputs, is_inputs_tuple, create_graph, api)
    is_outputs_tuple, outputs = _scalar_outputs(func, inputs, api, strict)
    jac = _autograd_grad(outputs, inputs, create_graph=True)
    _check_requires_grad(jac, "jacobian", strict)
    return is_inputs_tuple, inputs, v, is_outputs_tuple, outputs, jac


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(*inputs), v^T H): the vector-Hessian product of the scalar function func at
    inputs (func returns a single one-element Tensor), shaped like the inputs."""
    with enable_grad():
        is_inputs_tuple, inputs, v, is_outputs_tuple, outputs, jac = _first_gradient(
            func, inputs, v, create_graph, strict, "vhp")
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        res = _fill_in_zeros(_autograd_grad(jac, inputs, v, create_graph), inputs, strict,
                             create_graph, "double_back")
    return _finish(outputs, is_outputs_tuple, res, is_inputs_tuple, create_graph)


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(*inputs), H v): the Hessian-vector product of the scalar function func at
    inputs, shaped like the inputs; by the double-backward trick, as PyTorch computes it
    (equal to vhp's for a twice continuously differentiable func, and slower)."""
    with enable_grad():
        is_inputs_tuple, inputs, v, is_outputs_tuple, outputs, jac = _first_gradient(
            func, inputs, v, create_graph, strict, "hvp")
        grad_jac = tuple(zeros_like(t, requires_grad=True) for t in inputs)
        double_back = _autograd_grad(jac, inputs, grad_jac, create_graph=True)
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        res = _fill_in_zeros(_autograd_grad(double_back, grad_jac, v, create_graph), inputs,
                             strict, create_graph, "double_back_trick")
    return _finish(outputs, is_outputs_tuple, res, is_inputs_tuple, create_graph)


# ---------------------------------------------------------------- Jacobians
_STRATEGY_HINT = ('Expected strategy to be either "forward-mode" or "reverse-mode". Hint: If '
                  'your function has more outputs than inputs, "forward-mode" tends to be more '
                  'performant. Otherwise, prefer to use "reverse-mode".')


def _jacobian(func, inputs, create_graph, strict, vectorize, strategy, forward_graph=None):
    """jacobian; forward_graph: whether the emulated forward mode's result keeps a graph
    (PyTorch's tangents have one when they depend on inputs that require grad; hessian's
    outer forward-mode Jacobian always has one)."""
    if strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError(_STRATEGY_HINT)
    forward = strategy == "forward-mode"
    if forward:
        if create_graph:
            raise NotImplementedError(
                "tapegrad.autograd.functional.jacobian: `create_graph=True` and "
                '`strategy="forward-mode"` are not supported together (yet). Please either '
                'set `create_graph=False` or `strategy="reverse-mode"`.')
        if strict:
            raise RuntimeError(
                "tapegrad.autograd.functional.jacobian: `strict=True` and "
                '`strategy="forward-mode"` are not supported together (yet). Please either '
                'set `strict=False` or `strategy="reverse-mode"`.')
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
        if not vectorize:
            raise NotImplementedError("Computing Jacobian using forward-AD or "
                                      "forward-over-reverse Hessian isonly implemented for "
                                      "`vectorize=True`.")
        create_graph = forward_graph if forward_graph is not None else \
            any(t.requires_grad for t in inputs)
    with enable_grad():
        if not forward:
            is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
        inputs = _preprocess(inputs, create_graph, True)
        if forward:         # (PyTorch's forward mode names no function in this message)
            is_outputs_tuple, outputs = _as_tuple(func(*inputs), "outputs", None)
        else:
            is_outputs_tuple, outputs = _outputs(func, inputs, "jacobian", strict)
        if vectorize and strict:
            raise RuntimeError("tapegrad.autograd.functional.jacobian: `strict=True` and "
                               "`vectorized=True` are not supported together. Please either "
                               "set `strict=False` or `vectorize=False`.")
        jac = []
        for i, out in enumerate(outputs):
            rows = [[] for _ in inputs]
            flat = out.reshape(-1)
            for j in range(out.nelement()):
                vj = _autograd_grad((flat[j],), inputs, retain_graph=True,
                                    create_graph=create_graph)
                for k, (g, inp) in enumerate(zip(vj, inputs)):
                    if g is None:
                        if strict:
                            raise RuntimeError(f"Output {i} of the user-provided function is "
                                               f"independent of input {k}. This is not "
                                               "allowed in strict mode.")
                        g = zeros_like(inp)
                    elif strict and create_graph and not g.requires_grad:
                        # (PyTorch's message names the output's index here)
                        raise RuntimeError(f"The jacobian of the user-provided function is "
                                           f"independent of input {i}. This is not allowed "
                                           "in strict mode when create_graph=True.")
                    rows[k].append(g)
            blocks = [tg.stack(r, 0).view(tuple(out.shape) + tuple(inp.shape))
                      for r, inp in zip(rows, inputs)]
            if forward:     # (forward mode's Jacobian has the output's dtype)
                blocks = [b.to(out.dtype) for b in blocks]
            jac.append(blocks)
    jac = [_postprocess(tuple(b), create_graph) for b in jac]
    if forward:             # (PyTorch's forward mode nests lists, not tuples)
        jac = [list(b) for b in jac]
    else:
        jac = tuple(jac)
    return _tuple_postprocess(jac, (is_outputs_tuple, is_inputs_tuple))


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False,
             strategy="reverse-mode"):
    """The Jacobian of func at inputs: a Tensor of shape output.shape + input.shape for a
    single input and output, a tuple over the inputs or outputs when one of them is a
    tuple, and a tuple (over outputs) of tuples (over inputs) when both are. Each block has
    its input's dtype (the output's with strategy="forward-mode", as PyTorch).

    Computed by reverse mode, one backward per output element, as PyTorch's default.
    tapegrad has no vmap or forward-mode AD: vectorize=True and strategy="forward-mode"
    (which PyTorch allows only with vectorize=True, and without create_graph or strict)
    return the same numbers, computed the same way."""
    return _jacobian(func, inputs, create_graph, strict, vectorize, strategy)


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False,
            outer_jacobian_strategy="reverse-mode"):
    """The Hessian of the scalar function func (a single one-element Tensor) at inputs: a
    Tensor of shape input.shape + input.shape for a single input, else a tuple of tuples
    where [i][j] is the block of inputs i and j. The Jacobian of the (recorded) Jacobian,
    as PyTorch; vectorize and outer_jacobian_strategy="forward-mode" as in jacobian."""
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "hessian")
    if outer_jacobian_strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError('Expected strategy to be either "forward-mode" or '
                             '"reverse-mode".')

    def gradient(*inp):
        def scalar(*x):
            return _scalar_outputs(func, x, "hessian", strict)[1][0].squeeze()
        jac = jacobian(scalar, inp, create_graph=True)
        _check_requires_grad(jac, "jacobian", strict)
        return jac
    res = _jacobian(gradient, inputs, create_graph, strict, vectorize,
                    outer_jacobian_strategy, forward_graph=True)
    return _tuple_postprocess(res, (is_inputs_tuple, is_inputs_tuple))
