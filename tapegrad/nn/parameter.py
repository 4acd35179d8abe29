"""nn.Parameter: a leaf tensor that requires grad and that Modules register."""
from .._front.tensor import Tensor, _wrap, E
from .._engine import core


class Parameter(Tensor):
    """Parameter(data, requires_grad=True): a new leaf over data's storage (so it shares
    memory and version counter with data, as in PyTorch); wrapping the result of an op
    starts a new graph: gradients never reach the op's inputs."""
    __slots__ = ()

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            from .._front.creation import empty
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter(): expected a Tensor, got {type(data).__name__}")
        t = _wrap(E.call(core.detach, data._i))
        t.__class__ = cls
        if requires_grad:
            t.requires_grad_(True)
        return t

    def __init__(self, data=None, requires_grad=True):
        pass

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    __str__ = __repr__

    def __deepcopy__(self, memo):
        """As PyTorch's: a Parameter over a copy of the values, requiring grad as this
        one; the gradient is not copied."""
        new = memo.get(id(self))
        if new is None:
            new = memo[id(self)] = type(self)(self.detach().clone(), self.requires_grad)
        return new
