"""The unary math ops beyond the basic set, one op-table line each (ops/elementwise.py):
log1p expm1 exp2 log2 log10 rsqrt trunc frac tan asin acos atan sinh cosh asinh acosh
atanh. Values against NumPy, gradients against finite differences (float64), and values,
gradients, grad_fn names, special values and the in-place variants against PyTorch."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import gradcheck

# name: (NumPy reference, inputs inside the domain)
OPS = {
    "log1p": (np.log1p, "gt-1"), "expm1": (np.expm1, "any"), "exp2": (np.exp2, "any"),
    "log2": (np.log2, "pos"), "log10": (np.log10, "pos"),
    "rsqrt": (lambda a: 1 / np.sqrt(a), "pos"), "trunc": (np.trunc, "any"),
    "frac": (lambda a: a - np.trunc(a), "any"), "tan": (np.tan, "small"),
    "asin": (np.arcsin, "unit"), "acos": (np.arccos, "unit"), "atan": (np.arctan, "any"),
    "sinh": (np.sinh, "any"), "cosh": (np.cosh, "any"), "asinh": (np.arcsinh, "any"),
    "acosh": (np.arccosh, "gt1"), "atanh": (np.arctanh, "unit"),
}
SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, 1e-8, -1e-8, 30.0, np.inf, -np.inf, np.nan]


def inputs(domain, shape, seed):
    r = np.random.default_rng(seed)
    u = r.uniform(0.1, 0.9, shape) * r.choice([-1.0, 1.0], shape)
    return {"any": 3 * u, "pos": np.abs(3 * u) + 0.05, "gt-1": np.abs(u) - 0.5,
            "gt1": np.abs(3 * u) + 1.1, "unit": u, "small": 1.2 * u}[domain]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(OPS))
def test_values_match_numpy(name, dtype):
    ref, domain = OPS[name]
    a = inputs(domain, (4, 5), 1).astype(dtype)
    got = getattr(tg.tensor(a), name)().numpy()
    assert got.dtype == dtype
    want = ref(a.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=4e-7 if dtype == np.float32 else 1e-14)
    # the module-level spelling and a strided view
    np.testing.assert_array_equal(getattr(tg, name)(tg.tensor(a).t()).numpy(), got.T)


@pytest.mark.parametrize("name", list(OPS))
def test_gradients_match_finite_differences(name):
    if name == "trunc":     # zero almost everywhere
        x = tg.tensor(inputs("any", (5,), 2), requires_grad=True)
        x.trunc().sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.zeros(5))
        return
    x = tg.tensor(inputs(OPS[name][1], (2, 3), 3), requires_grad=True)
    assert gradcheck(lambda t: getattr(t, name)(), (x,))
    assert gradcheck(lambda t: getattr(t * 1.0, name + "_")(), (x,))


@pytest.mark.parametrize("name", list(OPS))
def test_matches_torch(name):
    """Values (special ones included), gradients and grad_fn names, out of place and in
    place, float32 and float64."""
    torch = pytest.importorskip("torch")
    for dtype in (np.float32, np.float64):
        tol = 4e-7 if dtype == np.float32 else 1e-14
        a = inputs(OPS[name][1], (6,), 4).astype(dtype)
        w = np.arange(1.0, 7.0).astype(dtype)
        x, xt = tg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
        y, yt = getattr(x, name)(), getattr(xt, name)()
        assert y.grad_fn.name() == yt.grad_fn.name()
        (y * tg.tensor(w)).sum().backward()
        (yt * torch.tensor(w)).sum().backward()
        np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), rtol=tol)
        np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=4 * tol)
        yi, yti = tg.tensor(a) * 1.0, torch.tensor(a) * 1.0
        assert getattr(yi, name + "_")() is yi
        getattr(yti, name + "_")()
        np.testing.assert_array_equal(yi.numpy(), y.detach().numpy())
        s = np.array(SPECIAL, dtype)
        with np.errstate(all="ignore"):
            got = getattr(tg.tensor(s), name)().numpy()
        want = getattr(torch.tensor(s), name)().numpy()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        np.testing.assert_allclose(got[ok], want[ok], rtol=tol, atol=0)
        np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]))


def test_integer_inputs_compute_in_float32_and_refuse_in_place():
    x = tg.tensor([1, 2, 4])
    y = x.log2()
    assert y.dtype is tg.float32 and y.tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired "
                                           "output type Long"):
        x.log2_()
