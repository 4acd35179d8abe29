"""Binary ops atan2, hypot, fmod, remainder (also `%`), logaddexp: one op-table line each
(fmod/remainder two, as PyTorch names the tensor-divisor and scalar-divisor nodes apart).
Values against NumPy, gradients against finite differences, and values (special ones
included), gradients, grad_fn names, integer inputs and in-place variants against
PyTorch."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import gradcheck

RNG = np.random.default_rng(90)
REF = {"atan2": np.arctan2, "hypot": np.hypot, "fmod": np.fmod, "remainder": np.remainder,
       "logaddexp": np.logaddexp}


def operands(shape=(3, 4)):
    """Away from the divisor's multiples (fmod/remainder jump there) and from zero."""
    a = RNG.uniform(0.2, 0.8, shape) * RNG.choice([-5.0, 5.0], shape) + 0.1
    b = RNG.uniform(0.7, 1.3, shape) * RNG.choice([-1.0, 1.0], shape)
    return a, b


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(REF))
def test_values_match_numpy(name, dtype):
    a, b = (x.astype(dtype) for x in operands())
    got = getattr(tg.tensor(a), name)(tg.tensor(b)).numpy()
    assert got.dtype == dtype
    np.testing.assert_allclose(got, REF[name](a.astype(np.float64), b.astype(np.float64)),
                               rtol=4e-7 if dtype == np.float32 else 1e-14, atol=1e-12)
    # broadcasting, the module-level spelling, a Python scalar divisor
    row = tg.tensor(b[0])
    np.testing.assert_array_equal(getattr(tg, name)(tg.tensor(a), row).numpy(),
                                  REF[name](a, b[0]).astype(dtype))
    if name in ("fmod", "remainder"):
        np.testing.assert_allclose(getattr(tg.tensor(a), name)(-1.25).numpy(),
                                   REF[name](a, dtype(-1.25)), rtol=1e-6)


@pytest.mark.parametrize("name", list(REF))
def test_gradients_match_finite_differences(name):
    a, b = operands((2, 3))
    x, y = tg.tensor(a, requires_grad=True), tg.tensor(b, requires_grad=True)
    assert gradcheck(lambda s, t: getattr(s, name)(t), (x, y))
    if name in ("fmod", "remainder"):
        assert gradcheck(lambda s: getattr(s, name)(0.75), (x,))


@pytest.mark.parametrize("name", list(REF))
def test_matches_torch(name):
    torch = pytest.importorskip("torch")
    for dtype in (np.float32, np.float64):
        tol = 4e-7 if dtype == np.float32 else 1e-14
        a, b = (v.astype(dtype) for v in operands((5,)))
        w = np.arange(1.0, 6.0).astype(dtype)
        x, y = tg.tensor(a, requires_grad=True), tg.tensor(b, requires_grad=True)
        xt, yt = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
        z, zt = getattr(x, name)(y), getattr(xt, name)(yt)
        assert z.grad_fn.name() == zt.grad_fn.name()
        (z * tg.tensor(w)).sum().backward()
        (zt * torch.tensor(w)).sum().backward()
        np.testing.assert_allclose(z.detach().numpy(), zt.detach().numpy(), rtol=tol, atol=tol)
        np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=4 * tol, atol=tol)
        np.testing.assert_allclose(y.grad.numpy(), yt.grad.numpy(), rtol=4 * tol, atol=tol)
        if name in ("fmod", "remainder"):
            assert getattr(x, name)(2.0).grad_fn.name() == getattr(xt, name)(2.0).grad_fn.name()
        s = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 5.0, np.inf], dtype)
        t = np.array([0.0, 1.0, np.inf, np.inf, 1.0, -np.inf, np.inf, -3.0, -np.inf], dtype)
        with np.errstate(all="ignore"):
            got = getattr(tg.tensor(s), name)(tg.tensor(t)).numpy()
        want = getattr(torch.tensor(s), name)(torch.tensor(t)).numpy()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        np.testing.assert_allclose(got[ok], want[ok], rtol=tol, atol=0)
        np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]))


def test_integers_in_place_and_the_operator_match_torch():
    torch = pytest.importorskip("torch")
    a, b = [5, -7, 8, -9], [3, 3, -3, -4]
    for name in ("fmod", "remainder"):
        assert getattr(tg.tensor(a), name)(tg.tensor(b)).tolist() == \
            getattr(torch.tensor(a), name)(torch.tensor(b)).tolist()
        assert getattr(tg.tensor(a), name)(3).tolist() == getattr(torch.tensor(a), name)(3) \
            .tolist()
    assert (tg.tensor(a) % tg.tensor(b)).tolist() == (torch.tensor(a) % torch.tensor(b)).tolist()
    assert (tg.tensor([5.5, -7.0]) % 2).tolist() == [1.5, 1.0]
    at = tg.atan2(tg.tensor([1, 2]), tg.tensor([1, 1]))
    assert at.dtype is tg.float32
    np.testing.assert_array_equal(at.numpy(), torch.atan2(torch.tensor([1, 2]),
                                                          torch.tensor([1, 1])).numpy())
    x0, y0 = operands((4,))
    for name in ("atan2", "hypot", "fmod", "remainder"):
        x, xt = tg.tensor(x0) * 1.0, torch.tensor(x0) * 1.0
        assert getattr(x, name + "_")(tg.tensor(y0)) is x
        getattr(xt, name + "_")(torch.tensor(y0))
        np.testing.assert_allclose(x.numpy(), xt.numpy(), rtol=1e-14)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        tg.tensor([1.0], requires_grad=True).fmod_(2.0)
