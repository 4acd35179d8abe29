"""Learning-rate schedulers: PyTorch's formulas (including CosineAnnealingLR's recursive
form, so values match step by step). They write group["lr"], which the next
optimizer.step() reads."""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import math

from .._engine.state import note_break as _note_break


class LRScheduler:
    """Base class of the learning-rate schedulers: step() sets each group's lr from
    get_lr()."""
    def __init__(self, optimizer, last_epoch=-1):
        from .optimizer import Optimizer
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for g in optimizer.param_groups:
                g.setdefault("initial_lr", g["lr"])
        else:
            for i, g in enumerate(optimizer.param_groups):
                if "initial_lr" not in g:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] "
                                   "when resuming an optimizer")
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._step_count = 0
        self.step()

    def get_lr(self):
        """The learning rates for the current epoch (override it)."""
        raise NotImplementedError

    def get_last_lr(self):
        """The learning rates the last step() set, one per group."""
        return self._last_lr

    def step(self, epoch=None):
        """Advance one epoch (or to epoch) and set each group's lr."""
        _note_break("an lr scheduler's step (step the scheduler outside the compiled "
                   "function: a replay reads the learning rate at every call)")
        self._step_count += 1
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            values = (self._closed_form() if hasattr(self, "_closed_form") else self.get_lr())
        for g, lr in zip(self.optimizer.param_groups, values):
            g["lr"] = lr
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self):
        """The scheduler's state, without the optimizer."""
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}

    def load_state_dict(self, state_dict):
        """Restore the state from state_dict()."""
        self.__dict__.update(state_dict)


class StepLR(LRScheduler):
    """Multiply the learning rate by gamma every step_size epochs."""
    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        """The learning rates for the current epoch."""
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return [g["lr"] for g in self.optimizer.param_groups]
        return [g["lr"] * self.gamma for g in self.optimizer.param_groups]

    def _closed_form(self):
        return [b * self.gamma ** (self.last_epoch // self.step_size) for b in self.base_lrs]


class LambdaLR(LRScheduler):
    """Set the learning rate to initial_lr * lr_lambda(epoch) (one function or one per
    group)."""
    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        n = len(optimizer.param_groups)
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != n:
                raise ValueError(f"Expected {n} lr_lambdas, but got {len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * n
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        """The learning rates for the current epoch."""
        return [b * f(self.last_epoch) for f, b in zip(self.lr_lambdas, self.base_lrs)]


class CosineAnnealingLR(LRScheduler):
    """Anneal the learning rate from initial_lr to eta_min along a cosine over T_max epochs."""
    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        """The learning rates for the current epoch."""
        groups = self.optimizer.param_groups
        t, T, m = self.last_epoch, self.T_max, self.eta_min
        if t == 0:
            return [g["lr"] for g in groups]
        if self._step_count == 1 and t > 0:
            return self._closed_form()
        if (t - 1 - T) % (2 * T) == 0:
            return [g["lr"] + (b - m) * (1 - math.cos(math.pi / T)) / 2
                    for b, g in zip(self.base_lrs, groups)]
        return [(1 + math.cos(math.pi * t / T)) / (1 + math.cos(math.pi * (t - 1) / T))
                * (g["lr"] - m) + m for g in groups]

    def _closed_form(self):
        return [self.eta_min + (b - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch
                                                                  / self.T_max)) / 2
                for b in self.base_lrs]
