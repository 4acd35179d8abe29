"""Shared builders of the OpInfo entries (registry.OpInfo, declared with registry.samples()
next to each op in its family module): the inputs of a sample (float tensors, class
indices, masks), the value domains their values are drawn from, and the helper programs a
sample's call may use to reach an op that no single expression records (an assignment,
an autograd.Function, a view whose base changed in place).

Only the registry-driven test (tests/ops/test_every_op.py) reads these; no kernel does.
(Not to be confused with the engine's `opinfo` table, which registry.fill_opinfo fills.)
"""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import numpy as np


# ---------------------------------------------------------------- value domains
class Domain:
    """Where a float input's values come from: draw(rng, shape) gives float64 values.
    Domains keep samples away from poles, branch cuts and kinks, where a finite
    difference straddles a jump of the value or of its slope."""
    __slots__ = ("text", "draw")

    def __init__(self, text, draw):
        self.text = text
        self.draw = draw

    def __repr__(self):
        return self.text


def uniform(lo, hi):
    return Domain(f"[{lo}, {hi}]", lambda rng, shape: rng.uniform(lo, hi, shape))


def signed(lo, hi):
    """Magnitudes in [lo, hi], either sign: away from 0."""
    def draw(rng, shape):
        return rng.uniform(lo, hi, shape) * rng.choice((-1.0, 1.0), shape)
    return Domain(f"±[{lo}, {hi}]", draw)


def away(*points, lo=-2.0, hi=2.0, gap=0.15):
    """[lo, hi] at least gap from each of points (the kinks of clamp, hardtanh, ...)."""
    def draw(rng, shape):
        v = rng.uniform(lo, hi, shape)
        for _ in range(1000):
            bad = np.zeros(v.shape, bool)
            for p in points:
                bad |= np.abs(v - p) < gap
            if not bad.any():
                return v
            v[bad] = rng.uniform(lo, hi, int(bad.sum()))
        raise ValueError("away(): no values found")
    return Domain(f"[{lo}, {hi}] away from {points}", draw)


def between_multiples(step, kmin=-3, kmax=3):
    """step * (k + u), k an integer in [kmin, kmax), u in [0.2, 0.8]: at least a fifth of
    step away from every multiple of step (floor, round, fmod, ... jump there)."""
    def draw(rng, shape):
        return step * (rng.integers(kmin, kmax, shape) + rng.uniform(0.2, 0.8, shape))
    return Domain(f"between multiples of {step}", draw)


def spaced(lo, hi):
    """Distinct values, a shuffled even spacing of [lo, hi] with a little jitter: no ties
    for max, min and their gradients, no two values closer than half the spacing."""
    def draw(rng, shape):
        n = int(np.prod(shape, dtype=np.int64))
        grid = np.linspace(lo, hi, max(n, 2))[:n]
        step = (hi - lo) / max(n - 1, 1)
        return rng.permutation(grid + rng.uniform(-step / 4, step / 4, n)).reshape(shape)
    return Domain(f"distinct in [{lo}, {hi}]", draw)


REAL = uniform(-2.0, 2.0)
POS = uniform(0.5, 2.0)             # log, sqrt, rsqrt, fractional powers
NONZERO = signed(0.3, 2.0)          # abs, relu, sign, ...: kinks (or poles) at 0
UNIT = uniform(-0.9, 0.9)           # asin, acos, atanh: |x| < 1
ABOVE1 = uniform(1.2, 3.0)          # acosh: x > 1
PROB = uniform(0.1, 0.9)            # probabilities (binary_cross_entropy)
NEAR_ONE = uniform(0.95, 1.05)      # a tensor divisor: x / y stays between integers
OFF_GRID = between_multiples(0.5)   # floor, ceil, round, trunc, frac: away from k / 2
DISTINCT = spaced(-2.0, 2.0)        # max, min: no ties


# ---------------------------------------------------------------- inputs
class Arg:
    """An input of a sample: a tensor of shape, of kind "float" (the sample's dtype, values
    from domain), "index" (int64 in [0, high)) or "mask" (bool); or fixed values (kind
    from their dtype). grad: whether it requires grad (floats only), which makes it one
    of the sample's differentiable inputs."""
    __slots__ = ("shape", "kind", "domain", "high", "grad", "values")

    def __init__(self, shape, kind="float", domain=REAL, high=None, grad=True, values=None):
        self.shape = tuple(shape)
        self.kind = kind
        self.domain = domain
        self.high = high
        self.grad = grad and kind == "float"
        self.values = values

    def make(self, rng):
        """The values as NumPy: float64 for a float input (cast to the sample's dtype by
        the test), int64 or bool otherwise."""
        if self.values is not None:
            return np.array(self.values)
        if self.kind == "float":
            return np.asarray(self.domain.draw(rng, self.shape), np.float64)
        if self.kind == "index":
            return rng.integers(0, self.high, self.shape).astype(np.int64)
        n = int(np.prod(self.shape, dtype=np.int64))
        return (rng.permutation(n) < n // 2).reshape(self.shape)

    def __repr__(self):
        what = {"float": f"{self.domain}", "index": f"indices < {self.high}",
                "mask": "mask"}[self.kind]
        return f"{self.kind}{list(self.shape)} {what}" + (" grad" if self.grad else "")


def T(*shape, domain=REAL, grad=True):
    """A float tensor of the sample's dtype."""
    return Arg(shape, "float", domain, grad=grad)


XY = {"x": T(3, 4), "y": T(3, 4)}  # the operands of a binary op (**XY)


def Index(*shape, high):
    """An int64 tensor of class indices or positions, in [0, high)."""
    return Arg(shape, "index", high=high)


def Mask(*shape):
    """A bool tensor, half of it True (rounded down) wherever the Trues fall: every draw
    selects as many elements, so x[mask] has one shape for a replay's draws too."""
    return Arg(shape, "mask")


def Fixed(values, kind="index"):
    """Given values (an int64 index tensor by default; "float" for a float tensor of the
    sample's dtype, requiring grad)."""
    return Arg(np.shape(values), kind, values=values)


# ---------------------------------------------------------------- helper programs
def put(t, key, value):
    """t[key] = value, then t: an assignment as an expression (IndexPutBackward0 for an
    index tensor key, CopySlices for a basic one)."""
    t[key] = value
    return t


def view_after_write(x):
    """A view of a copy of x, taken before the copy changes in place: the view's history
    is re-derived from its base's (AsStridedBackward0), in PyTorch as in tapegrad."""
    base = x.clone()
    view = base[1]
    base.mul_(2.0)
    return view


_FUNCTIONS = {}


def MulAdd(L):
    """An autograd.Function of library L: x * y + x, with its hand-written backward."""
    if L not in _FUNCTIONS:
        class MulAdd(L.autograd.Function):
            @staticmethod
            def forward(ctx, x, y):
                ctx.save_for_backward(x, y)
                return x * y + x

            @staticmethod
            def backward(ctx, g):
                x, y = ctx.saved_tensors
                return g * (y + 1), g * x
        _FUNCTIONS[L] = MulAdd
    return _FUNCTIONS[L]


HELPERS = {"put": put, "view_after_write": view_after_write, "MulAdd": MulAdd}
