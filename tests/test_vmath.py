"""float32 exp/sin/cos/tanh run vectorised polynomial kernels (tapegrad/ops/_vmath.py): check
their error against the exact (float64) result in units in the last place, on millions
of points, and their special values."""
import numpy as np
import pytest

import tapegrad as tg

RNG = np.random.default_rng(2026)


def _max_ulp(got, exact):
    """Largest |got - exact| in float32 ulps of the exact value (finite results only)."""
    with np.errstate(over="ignore"):          # values past float32's range become inf
        ref = exact.astype(np.float32)
    ok = np.isfinite(ref)
    spacing = np.spacing(np.abs(ref[ok])).astype(np.float64)
    return float((np.abs(got[ok].astype(np.float64) - exact[ok]) / spacing).max())


CASES = {
    "exp": (np.exp, np.concatenate([RNG.uniform(-104, 89, 1_000_000),       # incl. subnormal
                                    RNG.uniform(-1, 1, 200_000)])),
    "sin": (np.sin, np.concatenate([RNG.uniform(-10, 10, 400_000),
                                    RNG.uniform(-1e5, 1e5, 400_000)])),
    "cos": (np.cos, np.concatenate([RNG.uniform(-10, 10, 400_000),
                                    RNG.uniform(-1e5, 1e5, 400_000)])),
    "tanh": (np.tanh, np.concatenate([RNG.uniform(-12, 12, 600_000),
                                      RNG.uniform(-1e-3, 1e-3, 200_000),
                                      RNG.uniform(-1e-30, 1e-30, 10_000)])),
}


@pytest.mark.parametrize("name", list(CASES))
def test_float32_error_is_within_one_ulp(name):
    fn, xs = CASES[name]
    x = xs.astype(np.float32)
    got = getattr(tg.tensor(x), name)().numpy()
    # PyTorch's (SLEEF u10) bound is 1 ulp; these measure about 0.51
    assert _max_ulp(got, fn(x.astype(np.float64))) <= 0.52


SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 88.72, 88.73, -103.9, -104.0,
                    -200.0, 200.0, 1e-30, -1e-30, 1.5707964, 3.1415927, 1e5, -1e5],
                   np.float32)


@pytest.mark.parametrize("name", ["exp", "sin", "cos", "tanh"])
def test_float32_special_values(name):
    got = getattr(tg.tensor(SPECIAL), name)().numpy()
    with np.errstate(all="ignore"):
        want = getattr(np, name)(SPECIAL.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1.2e-7, atol=0)
    np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]))   # -0.0 too


def test_float32_and_float64_gradients_agree():
    x = np.random.default_rng(7).uniform(-3, 3, 1000)
    outs = []
    for dt in (tg.float32, tg.float64):
        t = tg.tensor(x, dtype=dt, requires_grad=True)
        (t.sin() * t.exp() + t.cos() + t.tanh()).sum().backward()
        outs.append(t.grad.numpy().astype(np.float64))
    # terms reach exp(3) ~ 20, whose float32 ulp is 2e-6: absolute agreement to a few ulps
    np.testing.assert_allclose(outs[0], outs[1], rtol=2e-6, atol=8e-6)
