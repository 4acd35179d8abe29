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
    # broadcasting and the module-level spelling: the same kernel, so the same bits as the
    # full-size operand (not NumPy's: its SIMD atan2 on AVX-512 machines is 1 ulp off
    # libm's), and a Python scalar divisor
    row = tg.tensor(b[0])
    full = getattr(tg.tensor(a), name)(tg.tensor(np.broadcast_to(b[0], a.shape).copy()))
    np.testing.assert_array_equal(getattr(tg, name)(tg.tensor(a), row).numpy(), full.numpy())
    np.testing.assert_allclose(full.numpy(), REF[name](a.astype(np.float64), b[0]),
                               rtol=4e-7 if dtype == np.float32 else 1e-14, atol=1e-12)
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


# ---- pow with a Python scalar exponent: PyTorch's special cases -----------------------
# forward: 2 -> a*a, 3 -> a*a*a, 0.5 -> sqrt, -0.5 -> 1/sqrt, -1 -> 1/a, -2 -> 1/(a*a)
# (PowKernel.cpp), 0 and 1 fill and copy; backward g * (b * a ** (b - 1)) with the inner
# power special-cased again. 4 and 1.5 are special in the backward only, the rest general.
POW_EXPONENTS = [0, 1, 2, 3, 0.5, -0.5, -1, -2, 4, 1.5, 2.5, -1.5, 0.3, 2.0, -1.0]
# where PyTorch's arithmetic is ours exactly (its sqrt, an MKL one, is not always
# correctly rounded: x ** 0.5 forward and x ** 1.5 backward are compared to within 1 ulp)
POW_EXACT_FWD = {0, 1, 2, 3, -0.5, -1, -2}
POW_EXACT_GRAD = {0, 1, 2, 3, 4, 0.5, -1}


def pow_operand(dtype):
    big = 1e30 if dtype == np.float32 else 1e200
    tiny = np.finfo(dtype).smallest_subnormal
    x = np.concatenate([RNG.uniform(-3, 3, 2000), RNG.uniform(-1e-3, 1e-3, 200),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0, -2.0, 0.5,
                         big, -big, 1 / big, -1 / big, tiny, -tiny, np.finfo(dtype).max]])
    return x.astype(dtype)


def assert_pow_close(got, want, dtype, ulps):
    """Equal NaN positions, infinities and zero signs; finite values within ulps of want's
    spacing (0: bitwise equal)."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    got, want = got[ok], want[ok]
    if ulps == 0:
        np.testing.assert_array_equal(got, want)
    else:
        fin = np.isfinite(want)
        np.testing.assert_array_equal(got[~fin], want[~fin])
        err = np.abs(got[fin].astype(np.float64) - want[fin])
        assert (err <= ulps * np.spacing(np.abs(want[fin])).astype(np.float64)).all()
    return got, want


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("p", POW_EXPONENTS)
def test_pow_scalar_exponent_matches_torch(p, dtype):
    torch = pytest.importorskip("torch")
    a = pow_operand(dtype)
    w = RNG.uniform(-2, 2, a.size).astype(dtype)
    x, xt = tg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    # a float32 kernel takes the exponent in float32 (PyTorch's takes 0.3 as a double: 13
    # ulps apart at 1e30 ** 0.3), so PyTorch gets the same exponent value
    with np.errstate(all="ignore"):
        y, yt = x ** p, xt ** (type(p)(dtype(p)))
        y.backward(tg.tensor(w))
        yt.backward(torch.tensor(w))
    assert y.grad_fn.name() == yt.grad_fn.name() == "PowBackward0"
    exact = p in POW_EXACT_FWD
    got, want = assert_pow_close(y.detach().numpy(), yt.detach().numpy(), dtype,
                                 0 if exact else 2)
    if exact:                                           # -0. too
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    if p == 0.5:            # IEEE sqrt: sqrt(-0.) is -0., sqrt(-inf) NaN, as PyTorch's
        got = y.detach().numpy()
        with np.errstate(invalid="ignore"):
            root = np.sqrt(a)
        np.testing.assert_array_equal(got, root)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(root))
    # (zero gradients are compared without their sign: a gradient buffer's first writer
    # adds to +0., so -0. comes out as +0.)
    assert_pow_close(x.grad.numpy(), xt.grad.numpy(), dtype,
                     0 if p in POW_EXACT_GRAD else 4)


@pytest.mark.parametrize("p", POW_EXPONENTS)
def test_pow_scalar_exponent_gradients_match_finite_differences(p):
    a = RNG.uniform(0.3, 2.0, (2, 3))
    if p == int(p):                 # integral exponents: negative bases too
        a *= RNG.choice([-1.0, 1.0], (2, 3))
    x = tg.tensor(a, requires_grad=True)
    assert gradcheck(lambda t: t ** p, (x,))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pow_special_exponents_on_every_loop(dtype):
    """The flat loop for a scalar exponent has one copy per special exponent (_codegen);
    in place and on a strided view (the odometer's loop, the tests inside) the values and
    gradients are the same, and a 0-d exponent tensor (pow_tensor) agrees."""
    a = RNG.uniform(-3, 3, (40, 30)).astype(dtype)
    a[0, :4] = [0.0, -0.0, np.inf, np.nan]
    for p in POW_EXPONENTS:
        with np.errstate(all="ignore"):
            x = tg.tensor(a, requires_grad=True)
            y = x ** p
            y.backward(tg.ones(y.shape, dtype=y.dtype))
            want, gwant = y.detach().numpy(), x.grad.numpy()
            v = tg.tensor(a.T.copy(), requires_grad=True)
            yv = v.t() ** p                             # strided
            yv.backward(tg.ones(yv.shape, dtype=yv.dtype))
            z = tg.tensor(a) * 1.0
            z **= p                                     # in place
            e = x.detach() ** tg.tensor(p, dtype=x.dtype)   # 0-d exponent tensor
        np.testing.assert_array_equal(yv.detach().numpy(), want)
        np.testing.assert_array_equal(v.grad.numpy().T, gwant)
        np.testing.assert_array_equal(z.numpy(), want)
        # (pow_tensor is libm's pow, as PyTorch's tensor-exponent pow: pow(-inf, 0.5) is
        # inf there, sqrt(-inf) NaN here; row 0 holds the special values)
        np.testing.assert_allclose(e.numpy()[1:], want[1:], rtol=4 * np.finfo(dtype).eps)
