"""NAdam, RAdam, Adamax, Adadelta, Rprop and ASGD: PyTorch's signatures, checks, param
group keys and state, each step one compiled call per group (_kernels_more.py)."""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
from .._engine.cache import kernel_cache
from .optimizer import Optimizer, _check, _implementation, _capturable

with kernel_cache():
    from . import _kernels_more as K


def _lr_check(lr):
    from .._front.tensor import Tensor
    if isinstance(lr, Tensor) and lr.numel() != 1:
        raise ValueError("Tensor lr must be 1-element")
    _check(lr >= 0, f"Invalid learning rate: {lr}")


def _adam_checks(lr, betas, eps, weight_decay):
    _lr_check(lr)
    _check(eps >= 0, f"Invalid epsilon value: {eps}")
    _check(0 <= betas[0] < 1, f"Invalid beta parameter at index 0: {betas[0]}")
    _check(0 <= betas[1] < 1, f"Invalid beta parameter at index 1: {betas[1]}")
    _check(weight_decay >= 0, f"Invalid weight_decay value: {weight_decay}")


class NAdam(Optimizer):
    """NAdam: Adam with Nesterov momentum (momentum_decay, and decoupled_weight_decay as
    in PyTorch)."""
    kernel = K.nadam_native
    hyper = ("lr", "beta1", "beta2", "eps", "weight_decay", "momentum_decay",
             "decoupled_weight_decay", "maximize")
    buffers = ("exp_avg", "exp_avg_sq", "mu_product")
    scalars = ("mu_product",)
    state_order = ("step", "mu_product", "exp_avg", "exp_avg_sq")
    has_step = True
    capturable_message = _capturable("params, mu_products and state_steps")

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 momentum_decay=4e-3, decoupled_weight_decay=False, *, foreach=None,
                 maximize=False, capturable=False, differentiable=False):
        _adam_checks(lr, betas, eps, weight_decay)
        _check(momentum_decay >= 0, f"Invalid momentum_decay value: {momentum_decay}")
        _implementation(foreach, None, differentiable)
        super().__init__(params, dict(
            lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
            momentum_decay=momentum_decay, decoupled_weight_decay=decoupled_weight_decay,
            maximize=maximize, foreach=foreach, capturable=capturable,
            differentiable=differentiable))

    def _hyper(self, group):
        b1, b2 = group["betas"]
        return [group["lr"], b1, b2, group["eps"], group["weight_decay"],
                group["momentum_decay"], group["decoupled_weight_decay"], group["maximize"]]


class RAdam(Optimizer):
    """RAdam: Adam with the variance of the adaptive learning rate rectified
    (decoupled_weight_decay as in PyTorch)."""
    kernel = K.radam_native
    hyper = ("lr", "beta1", "beta2", "eps", "weight_decay", "decoupled_weight_decay",
             "maximize")
    buffers = ("exp_avg", "exp_avg_sq")
    has_step = True
    capturable_message = _capturable()

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False,
                 capturable=False, differentiable=False):
        _adam_checks(lr, betas, eps, weight_decay)
        _implementation(foreach, None, differentiable)
        super().__init__(params, dict(
            lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize,
            foreach=foreach, capturable=capturable,
            decoupled_weight_decay=decoupled_weight_decay, differentiable=differentiable))

    def _hyper(self, group):
        b1, b2 = group["betas"]
        return [group["lr"], b1, b2, group["eps"], group["weight_decay"],
                group["decoupled_weight_decay"], group["maximize"]]


class Adamax(Optimizer):
    """Adamax: Adam with the infinity norm."""
    kernel = K.adamax_native
    hyper = ("lr", "beta1", "beta2", "eps", "weight_decay", "maximize")
    buffers = ("exp_avg", "exp_inf")
    has_step = True
    capturable_message = _capturable()

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 foreach=None, *, maximize=False, differentiable=False, capturable=False):
        _adam_checks(lr, betas, eps, weight_decay)
        _implementation(foreach, None, differentiable)
        super().__init__(params, dict(
            lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=foreach,
            maximize=maximize, differentiable=differentiable, capturable=capturable))

    def _hyper(self, group):
        b1, b2 = group["betas"]
        return [group["lr"], b1, b2, group["eps"], group["weight_decay"], group["maximize"]]


class Adadelta(Optimizer):
    """Adadelta (rho, eps and weight_decay as in PyTorch)."""
    kernel = K.adadelta_native
    hyper = ("lr", "rho", "eps", "weight_decay", "maximize")
    buffers = ("square_avg", "acc_delta")
    has_step = True
    capturable_message = _capturable(xla=False)

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *,
                 capturable=False, maximize=False, differentiable=False):
        _lr_check(lr)
        _check(0 <= rho <= 1, f"Invalid rho value: {rho}")
        _check(eps >= 0, f"Invalid epsilon value: {eps}")
        _check(weight_decay >= 0, f"Invalid weight_decay value: {weight_decay}")
        _implementation(foreach, None, differentiable)
        super().__init__(params, dict(
            lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize,
            capturable=capturable, foreach=foreach, differentiable=differentiable))


class Rprop(Optimizer):
    """Rprop, resilient backpropagation: per-element step sizes grown by etaplus while the
    gradient keeps its sign, shrunk by etaminus when it flips (clamped to step_sizes)."""
    kernel = K.rprop_native
    hyper = ("etaminus", "etaplus", "step_size_min", "step_size_max", "maximize")
    buffers = ("prev", "step_size")
    has_step = True
    capturable_message = _capturable()

    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *,
                 capturable=False, foreach=None, maximize=False, differentiable=False):
        _lr_check(lr)
        _check(0.0 < etas[0] < 1.0 < etas[1], f"Invalid eta values: {etas[0]}, {etas[1]}")
        _implementation(foreach, None, differentiable)
        super().__init__(params, dict(
            lr=lr, etas=etas, step_sizes=step_sizes, foreach=foreach, maximize=maximize,
            differentiable=differentiable, capturable=capturable))

    def _hyper(self, group):
        (em, ep), (lo, hi) = group["etas"], group["step_sizes"]
        return [em, ep, lo, hi, group["maximize"]]

    def _new_buffer(self, name, p, group):
        if name == "step_size":             # (the group's lr when the state is created)
            from .._front import creation
            return creation.full(tuple(p.shape), float(group["lr"]), dtype=p.dtype)
        return super()._new_buffer(name, p, group)


class ASGD(Optimizer):
    """Averaged stochastic gradient descent (lambd, alpha, t0 and weight_decay as in
    PyTorch; the average is kept in state["ax"])."""
    kernel = K.asgd_native
    hyper = ("lr", "lambd", "alpha", "t0", "weight_decay", "maximize")
    buffers = ("ax", "eta", "mu")
    scalars = ("eta", "mu")
    state_order = ("step", "eta", "mu", "ax")
    has_step = True
    capturable_message = _capturable("params, mus, etas, and state_steps")

    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0,
                 foreach=None, maximize=False, differentiable=False, capturable=False):
        _lr_check(lr)
        _check(weight_decay >= 0, f"Invalid weight_decay value: {weight_decay}")
        _implementation(foreach, None, differentiable)
        super().__init__(params, dict(
            lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
            foreach=foreach, maximize=maximize, differentiable=differentiable,
            capturable=capturable))

    def _scalar_start(self, name, group):
        return float(group["lr"]) if name == "eta" else 1.0

    def _hyper(self, group):
        from .._front.dtype import get_default_dtype, float32
        return [group[n] for n in self.hyper] + [get_default_dtype() is float32]
