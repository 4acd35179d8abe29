"""gradcheck: compare tapegrad's gradients with central finite differences (float64)."""
import numpy as np

from ._front.tensor import Tensor


def numerical_grad(fn, inputs, eps=1e-6):
    """d(sum(fn(*inputs) * v))/d(inputs) by central differences, v fixed random weights."""
    from ._front.creation import tensor
    from .autograd import no_grad
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


def gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True):
    """True if the analytical gradients of fn at inputs (float64 tensors) match central
    finite differences; otherwise raises AssertionError naming the input and the worst
    element (or returns False when raise_exception=False)."""
    from .autograd import grad
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    for x in inputs:
        if isinstance(x, Tensor) and x.requires_grad and x.dtype.name != "float64":
            raise ValueError("gradcheck expects float64 inputs (finite differences in float32 "
                             "are too noisy to check anything)")
    numeric, weights = numerical_grad(fn, inputs, eps)
    out = fn(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    wanted = [x for x in inputs if isinstance(x, Tensor) and x.requires_grad]
    analytic = grad(list(outs), wanted, grad_outputs=weights, allow_unused=True)
    it = iter(analytic)
    for k, (x, num) in enumerate(zip(inputs, numeric)):
        if num is None:
            continue
        a = next(it)
        a = np.zeros(num.shape) if a is None else a.numpy().astype(np.float64)
        if not np.allclose(a, num, atol=atol, rtol=rtol):
            worst = np.unravel_index(np.argmax(np.abs(a - num)), num.shape) if num.size else ()
            msg = (f"gradcheck: input {k}: analytical and numerical gradients differ; worst at "
                   f"index {worst}: analytical {a[worst]!r} vs numerical {num[worst]!r}")
            if raise_exception:
                raise AssertionError(msg)
            return False
    return True
