"""gradcheck and gradgradcheck (PyTorch's torch.autograd.gradcheck): tapegrad's
gradients, and gradients of gradients, against central finite differences (float64)."""
import numpy as np

from .._front.tensor import Tensor


def numerical_grad(fn, inputs, eps=1e-6):
    """d(sum(fn(*inputs) * v))/d(inputs) by central differences, v fixed random weights."""
    from .._front.creation import tensor
    from . import no_grad
    rng = np.random.default_rng(1234)
    with no_grad():
        out = fn(*inputs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        weights = [rng.standard_normal(o.shape) for o in outs]

        def scalar():
            res = fn(*inputs)
            res = res if isinstance(res, (tuple, list)) else (res,)
            return sum(float((r.detach().numpy().astype(np.float64) * w).sum())
                       for r, w in zip(res, weights))

        grads = []
        for x in inputs:
            if not isinstance(x, Tensor) or not x.requires_grad:
                grads.append(None)
                continue
            arr = x.detach().numpy()       # shares memory: perturb in place
            g = np.zeros(arr.shape)
            for idx in np.ndindex(arr.shape):
                old = arr[idx]
                arr[idx] = old + eps
                fp = scalar()
                arr[idx] = old - eps
                fm = scalar()
                arr[idx] = old
                g[idx] = (fp - fm) / (2 * eps)
            grads.append(g)
    return grads, [tensor(w, dtype=o.dtype) for w, o in zip(weights, outs)]


def _refuse(api, **flags):
    for flag, (value, default) in flags.items():
        if value != default:
            raise NotImplementedError(f"tapegrad: {api}({flag}={value!r}) is not supported")


def gradcheck(func, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True,
              nondet_tol=0.0, check_undefined_grad=True, check_grad_dtypes=False,
              check_batched_grad=False, check_batched_forward_grad=False,
              check_forward_ad=False, check_backward_ad=True, fast_mode=False, masked=None):
    """True if the analytical gradients of func at inputs (float64 tensors) match central
    finite differences; otherwise raises AssertionError naming the input and the worst
    element (or returns False when raise_exception=False). PyTorch's signature: tapegrad
    is deterministic (nondet_tol changes nothing) and has no undefined gradients; the
    checks it cannot run yet (forward mode, batched gradients, masked) are refused when
    asked for."""
    from . import grad
    _refuse("gradcheck", check_batched_grad=(check_batched_grad, False),
            check_batched_forward_grad=(check_batched_forward_grad, False),
            check_forward_ad=(check_forward_ad, False), masked=(masked, None))
    fn = func
    if not check_backward_ad:
        return True
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    for x in inputs:
        if isinstance(x, Tensor) and x.requires_grad and x.dtype.name != "float64":
            raise ValueError("gradcheck expects float64 inputs (finite differences in float32 "
                             "are too noisy to check anything)")
    numeric, weights = numerical_grad(fn, inputs, eps)
    out = fn(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    wanted = [x for x in inputs if isinstance(x, Tensor) and x.requires_grad]
    live = [(o, w) for o, w in zip(outs, weights) if o.requires_grad]
    analytic = grad([o for o, _ in live], wanted, grad_outputs=[w for _, w in live],
                    allow_unused=True) if live else [None] * len(wanted)
    it = iter(analytic)
    for k, (x, num) in enumerate(zip(inputs, numeric)):
        if num is None:
            continue
        a = next(it)
        if check_grad_dtypes and a is not None and a.dtype is not x.dtype:
            msg = f"Gradient has dtype mismatch: input {k} is {x.dtype}, gradient {a.dtype}"
            if raise_exception:
                raise AssertionError(msg)
            return False
        a = np.zeros(num.shape) if a is None else a.detach().numpy().astype(np.float64)
        if not np.allclose(a, num, atol=atol, rtol=rtol):
            worst = np.unravel_index(np.argmax(np.abs(a - num)), num.shape) if num.size else ()
            msg = (f"gradcheck: input {k}: analytical and numerical gradients differ; worst at "
                   f"index {worst}: analytical {a[worst]!r} vs numerical {num[worst]!r}")
            if raise_exception:
                raise AssertionError(msg)
            return False
    return True


def gradgradcheck(func, inputs, grad_outputs=None, *, eps=1e-6, atol=1e-5, rtol=1e-3,
                  gen_non_contig_grad_outputs=False, raise_exception=True, nondet_tol=0.0,
                  check_undefined_grad=True, check_grad_dtypes=False,
                  check_batched_grad=False, check_fwd_over_rev=False,
                  check_rev_over_rev=True, fast_mode=False, masked=False):
    """PyTorch's gradgradcheck: the gradients of func's gradient (create_graph=True, with
    grad_outputs, random float64 ones requiring grad when not given) checked against
    finite differences, with respect to the inputs and grad_outputs. (tapegrad is
    deterministic, so nondet_tol changes nothing; the checks tapegrad cannot run yet
    (forward-over-reverse, batched gradients) are refused when asked for.)"""
    from .._front.creation import tensor
    from . import grad, enable_grad
    _refuse("gradgradcheck", check_fwd_over_rev=(check_fwd_over_rev, False),
            check_batched_grad=(check_batched_grad, False), masked=(masked, False),
            gen_non_contig_grad_outputs=(gen_non_contig_grad_outputs, False))
    if not check_rev_over_rev:
        return True
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    outs = func(*inputs)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    if grad_outputs is None:
        rng = np.random.default_rng(4321)
        grad_outputs = tuple(tensor(rng.standard_normal(tuple(o.shape)), dtype=o.dtype,
                                    requires_grad=True)
                             for o in outs if o.requires_grad)
    else:
        grad_outputs = tuple(grad_outputs) if isinstance(grad_outputs, (tuple, list)) \
            else (grad_outputs,)
    n = len(inputs)

    def first_gradient(*args):
        xs, gos = args[:n], args[n:]
        with enable_grad():     # (finite differences evaluate it under no_grad)
            res = func(*xs)
            res = res if isinstance(res, (tuple, list)) else (res,)
            diff = [r for r in res if r.requires_grad]
            wanted = [x for x in xs if isinstance(x, Tensor) and x.requires_grad]
            got = grad(diff, wanted, list(gos), create_graph=True, allow_unused=True)
        return tuple(g for g in got if g is not None)
    return gradcheck(first_gradient, inputs + grad_outputs, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception, check_grad_dtypes=check_grad_dtypes)
