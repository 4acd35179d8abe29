"""nn.utils: gradient clipping; nn.utils.rnn (packing and padding sequences)."""
import numpy as np

from ..._front.tensor import Tensor as _Tensor, _numpy_view


def _grads(parameters):
    if isinstance(parameters, _Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                    foreach=None):
    """Scale the gradients in place so that their joint norm is at most max_norm; returns
    the norm before clipping (a 0-d tensor), as PyTorch does."""
    from ..._front.promotion import from_array, bump_version
    from ..._front.dtype import default_float
    grads = _grads(parameters)
    norm_type = float(norm_type)
    if not grads:
        return from_array(np.array(0.0, default_float().np))
    dt = np.result_type(*[g.dtype.np for g in grads])     # (float64 if any is)
    arrays = [_numpy_view(g) for g in grads]
    if norm_type == np.inf:
        norms = [np.abs(a).max() if a.size else dt.type(0) for a in arrays]
        total = max(norms)
    else:
        norms = [np.linalg.norm(a.ravel(), norm_type) for a in arrays]
        total = np.linalg.norm(np.array(norms, dt), norm_type)
    total = dt.type(total)
    if error_if_nonfinite and not np.isfinite(total):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from "
                           "`parameters` is non-finite, so it cannot be clipped. To disable "
                           "this error and scale the gradients by the non-finite norm anyway, "
                           "set `error_if_nonfinite=False`")
    coef = dt.type(min(dt.type(max_norm) / (total + dt.type(1e-6)), dt.type(1.0)))
    for g, a in zip(grads, arrays):
        a *= a.dtype.type(coef)
        bump_version(g)
    return from_array(np.array(total, dt))


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp every gradient in place to [-clip_value, clip_value]."""
    from ..._front.promotion import bump_version
    for g in _grads(parameters):
        np.clip(_numpy_view(g), -clip_value, clip_value, out=_numpy_view(g))
        bump_version(g)


from . import rnn  # noqa: F401  (tapegrad.nn.utils.rnn, as torch.nn.utils.rnn)
