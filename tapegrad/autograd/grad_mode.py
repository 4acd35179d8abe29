"""Grad-mode switches: context managers and decorators over the engine's flag."""
import functools

from .._engine.state import GRAD_MODE


class _Mode:
    enabled = True

    def __init__(self):
        self.prev = []

    def __enter__(self):
        self.prev.append(GRAD_MODE.on)
        GRAD_MODE.on = 1 if self.enabled else 0

    def __exit__(self, *exc):
        GRAD_MODE.on = self.prev.pop()
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)
        return wrapper


class _BareDecorator(_Mode):
    """no_grad() and enable_grad(), which PyTorch also takes as bare decorators
    (@no_grad, without the call): given the decorated function, the constructor returns
    its wrapper."""

    def __new__(cls, orig_func=None):
        if orig_func is None:
            return super().__new__(cls)
        if not callable(orig_func):
            raise TypeError(f"{cls.__name__}() takes no arguments, or the function it "
                            f"decorates; got {type(orig_func).__name__}")
        return cls()(orig_func)


class no_grad(_BareDecorator):
    """Nothing is recorded inside; results do not require grad."""
    enabled = False


class enable_grad(_BareDecorator):
    """Context manager and decorator: record ops again inside a no_grad block."""
    enabled = True


class inference_mode(_Mode):
    """Like no_grad (tapegrad has no separate inference tensors); inference_mode(False)
    leaves grad mode as it is."""
    enabled = False

    def __new__(cls, mode=True):
        if isinstance(mode, bool):
            return super().__new__(cls)
        return cls()(mode)      # (the bare decorator @inference_mode, as PyTorch takes it)

    def __init__(self, mode=True):
        super().__init__()
        self.mode = bool(mode)
        self.enabled = not mode

    def __enter__(self):
        self.prev.append(GRAD_MODE.on)
        if self.mode:
            GRAD_MODE.on = 0

    def __call__(self, fn):
        mode = self.mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with inference_mode(mode):
                return fn(*args, **kwargs)
        return wrapper


class set_grad_enabled(_Mode):
    """Turn recording on or off: as a context manager, a decorator or a plain call."""
    def __init__(self, mode):
        super().__init__()
        self.enabled = bool(mode)
        self.prev.append(GRAD_MODE.on)
        GRAD_MODE.on = 1 if self.enabled else 0     # also works as a plain call

    def __enter__(self):
        pass

    def __call__(self, fn):
        GRAD_MODE.on = self.prev.pop()
        enabled = self.enabled

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(enabled):
                return fn(*args, **kwargs)
        return wrapper


def is_grad_enabled():
    """Whether ops are being recorded for autograd right now."""
    return bool(GRAD_MODE.on)
