"""PyTorch's non-differentiable utilities: equal, allclose, isclose, isnan, isinf,
isfinite, all, any, count_nonzero, is_floating_point, is_tensor, numel, as_tensor, eye,
linspace, randint."""
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tests.helpers import numpy_of

INF, NAN = float("inf"), float("nan")


def _assert_result(t, values, dtype):
    """A fresh non-differentiable tensor of dtype holding exactly values."""
    assert isinstance(t, tg.Tensor)
    assert t.dtype is dtype
    assert not t.requires_grad and t.grad_fn is None
    values = np.asarray(values)
    assert t.shape == values.shape
    np.testing.assert_array_equal(numpy_of(t), values)


# ------------------------------------------------------------------ equal
def test_equal_values_shapes_and_dtypes():
    a = tg.tensor([[1.0, 2.0], [3.0, -0.0]])
    assert tg.equal(a, tg.tensor([[1.0, 2.0], [3.0, 0.0]])) is True
    assert a.equal(a.clone()) is True
    assert tg.equal(a, tg.tensor([[1.0, 2.0], [3.0, 1.0]])) is False
    assert tg.equal(a, a.reshape(4)) is False                  # same values, other shape
    assert tg.equal(tg.tensor([2.0]), tg.tensor(2.0)) is False
    assert tg.equal(tg.tensor([NAN]), tg.tensor([NAN])) is False
    assert tg.equal(tg.tensor([1, 2]), tg.tensor([1.0, 2.0])) is True
    assert tg.equal(tg.tensor([True, False]), tg.tensor([1, 0])) is True
    # compared after promotion: an int64 and a float32 tensor meet in float32
    assert tg.equal(tg.tensor([16777217]), tg.tensor([16777216.0])) is True
    assert tg.equal(tg.zeros(0, 3), tg.zeros(0, 3)) is True


def test_equal_rejects_non_tensors():
    with pytest.raises(TypeError, match=r"equal\(\): argument 'other' .*must be Tensor, not list"):
        tg.equal(tg.tensor([1.0]), [1.0])
    with pytest.raises(TypeError, match=r"equal\(\): argument 'input' must be Tensor, not float"):
        tg.equal(1.0, tg.tensor([1.0]))


def test_equal_matches_torch():
    torch = pytest.importorskip("torch")
    cases = [([1.0, 2.0], [1.0, 2.0]), ([1.0, NAN], [1.0, NAN]), ([[1, 2]], [1, 2]),
             ([16777217], [16777216.0]), ([True], [1]), (0.0, -0.0), ([1.5], [1.5, 1.5])]
    for x, y in cases:
        assert tg.equal(tg.tensor(x), tg.tensor(y)) is torch.equal(torch.tensor(x),
                                                                   torch.tensor(y)), (x, y)


# ------------------------------------------------------------------ isclose / allclose
def test_isclose_values_against_the_formula():
    a = tg.tensor([1.0, 1.0, 1.0, INF, INF, NAN, 0.0, 100.0])
    # (1.00001 would not be close: in float32 it differs from 1 by 1.0014e-05)
    b = tg.tensor([1.0, 1.000005, 1.001, INF, -INF, NAN, 1e-9, 100.001])
    _assert_result(tg.isclose(a, b), [True, True, False, True, False, False, True, True],
                   tg.bool)
    _assert_result(a.isclose(b, equal_nan=True),
                   [True, True, False, True, False, True, True, True], tg.bool)
    # zero tolerances: plain equality
    _assert_result(tg.isclose(a, b, rtol=0, atol=0),
                   [True, False, False, True, False, False, False, False], tg.bool)
    _assert_result(tg.isclose(a, b, rtol=0.01, atol=0.0),
                   [True, True, True, True, False, False, False, True], tg.bool)


def test_isclose_broadcasts_and_integer_operands():
    r = tg.isclose(tg.zeros(2, 1), tg.tensor([0.0, 1e-9, 1.0]))
    _assert_result(r, [[True, True, False]] * 2, tg.bool)
    i = tg.tensor([10, 20, 30])
    _assert_result(tg.isclose(i, tg.tensor([10, 21, 33]), atol=1), [True, True, False], tg.bool)
    # the tolerance is relative to other: |10 - 11| > 0.05 * 11
    _assert_result(tg.isclose(i, tg.tensor([11, 20, 31]), rtol=0.05), [False, True, True],
                   tg.bool)
    # large int64 values are compared in float32, as in PyTorch
    _assert_result(tg.isclose(tg.tensor([2 ** 40]), tg.tensor([2 ** 40 + 3]), rtol=0, atol=2),
                   [True], tg.bool)
    bools = tg.tensor([True, False])
    _assert_result(tg.isclose(bools, tg.tensor([True, True])), [True, False], tg.bool)


def test_allclose_returns_python_bool():
    a = tg.tensor([1.0, 2.0, NAN])
    assert tg.allclose(a, a) is False
    assert tg.allclose(a, a, equal_nan=True) is True
    assert a.allclose(a + 1e-6, equal_nan=True) is True
    assert tg.allclose(a, a + 1e-3, equal_nan=True) is False
    assert tg.allclose(tg.tensor([[1.0, 1.0]]), tg.tensor([1.0])) is True     # broadcast
    assert tg.allclose(tg.tensor([1, 2]), tg.tensor([1, 2])) is True
    assert tg.allclose(tg.zeros(0), tg.zeros(0)) is True


def test_isclose_does_not_require_grad():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    r = tg.isclose(x, x * 1.0)
    assert r.dtype is tg.bool and not r.requires_grad and r.is_leaf


@pytest.mark.parametrize("fn", [tg.isclose, tg.allclose])
def test_isclose_allclose_errors(fn):
    name = fn.__name__
    f = tg.tensor([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match=rf"{name}\(\): Float did not match Double"):
        fn(f, f.double())
    with pytest.raises(RuntimeError, match=rf"{name}\(\): Long did not match Float"):
        fn(f.long(), f)
    with pytest.raises(RuntimeError, match=rf"{name}\(\): The size of tensor a \(3\) must "
                                           r"match the size of tensor b \(2\) at "
                                           r"non-singleton dimension 0"):
        fn(f, tg.tensor([1.0, 2.0]))
    with pytest.raises(RuntimeError, match=rf"{name}\(\): rtol must be greater than or equal "
                                           r"to zero, but got -1"):
        fn(f, f, rtol=-1)
    with pytest.raises(RuntimeError, match=rf"{name}\(\): atol must be greater"):
        fn(f, f, atol=-0.5)
    with pytest.raises(TypeError, match=rf"{name}\(\): argument 'rtol' must be float, not str"):
        fn(f, f, rtol="a")
    with pytest.raises(TypeError, match=rf"{name}\(\): argument 'equal_nan' must be bool"):
        fn(f, f, equal_nan=1)
    with pytest.raises(TypeError, match=rf"{name}\(\): argument 'other' .*not float"):
        fn(f, 1.0)
    with pytest.raises(TypeError, match=rf"{name}\(\): argument 'input' must be Tensor"):
        fn([1.0], f)


def test_isclose_matches_torch_bitwise():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    for npd in (np.float32, np.float64):
        for _ in range(20):
            x = rng.normal(0, 1, 64).astype(npd)
            y = (x + rng.normal(0, 1, 64) * 10.0 ** rng.integers(-9, 0, 64)).astype(npd)
            x[rng.random(64) < 0.1] = np.nan
            y[rng.random(64) < 0.1] = np.inf
            rtol, atol = float(10.0 ** rng.integers(-8, -1)), float(10.0 ** rng.integers(-9, -1))
            for equal_nan in (False, True):
                want = torch.isclose(torch.from_numpy(x), torch.from_numpy(y), rtol=rtol,
                                     atol=atol, equal_nan=equal_nan).numpy()
                got = tg.isclose(tg.from_numpy(x), tg.from_numpy(y), rtol=rtol, atol=atol,
                                 equal_nan=equal_nan)
                _assert_result(got, want, tg.bool)
                assert tg.allclose(tg.from_numpy(x), tg.from_numpy(y), rtol=rtol, atol=atol,
                                   equal_nan=equal_nan) is bool(want.all())
    xi = rng.integers(-2 ** 40, 2 ** 40, 200)
    yi = xi + rng.integers(-5000, 5000, 200)
    for rtol, atol in ((1e-9, 0.0), (0.0, 1000.0), (1e-12, 2500.0)):
        want = torch.isclose(torch.from_numpy(xi), torch.from_numpy(yi), rtol=rtol,
                             atol=atol).numpy()
        _assert_result(tg.isclose(tg.from_numpy(xi), tg.from_numpy(yi), rtol=rtol, atol=atol),
                       want, tg.bool)


# ------------------------------------------------------------------ isnan / isinf / isfinite
def test_float_tests_values():
    vals = [1.0, NAN, INF, -INF, 0.0, -2.5]
    for dt in (tg.float32, tg.float64):
        x = tg.tensor(vals, dtype=dt, requires_grad=True)
        arr = np.array(vals)
        _assert_result(tg.isnan(x), np.isnan(arr), tg.bool)
        _assert_result(x.isinf(), np.isinf(arr), tg.bool)
        _assert_result(tg.isfinite(x), np.isfinite(arr), tg.bool)
    _assert_result(tg.tensor(NAN).isnan(), True, tg.bool)
    _assert_result(tg.isfinite(tg.zeros(0, 2)), np.zeros((0, 2), bool), tg.bool)


@pytest.mark.parametrize("dt", [tg.int64, tg.bool])
def test_float_tests_on_int_and_bool(dt):
    x = tg.tensor([[1, 0, -3]], dtype=dt)
    _assert_result(tg.isnan(x), [[False] * 3], tg.bool)
    _assert_result(tg.isinf(x), [[False] * 3], tg.bool)
    _assert_result(x.isfinite(), [[True] * 3], tg.bool)


@pytest.mark.parametrize("fn", [tg.isnan, tg.isinf, tg.isfinite])
def test_float_tests_reject_non_tensors(fn):
    with pytest.raises(TypeError, match=rf"{fn.__name__}\(\): argument 'input' must be "
                                        r"Tensor, not float"):
        fn(1.0)


def test_float_tests_match_torch():
    torch = pytest.importorskip("torch")
    vals = [1.0, NAN, INF, -INF, 0.0]
    for name in ("isnan", "isinf", "isfinite"):
        for x in (vals, [1, 2], [True]):
            want = getattr(torch, name)(torch.tensor(x)).numpy()
            _assert_result(getattr(tg, name)(tg.tensor(x)), want, tg.bool)


# ------------------------------------------------------------------ all / any / count_nonzero
X = np.array([[1.0, 0.0, 3.0], [0.0, 0.0, NAN]])


@pytest.mark.parametrize("dt", [tg.float32, tg.float64, tg.int64, tg.bool])
def test_all_any_values(dt):
    arr = X if dt.is_floating_point else np.nan_to_num(X, nan=2.0).astype(dt.np)
    x = tg.tensor(arr, dtype=dt)
    for name, ref in (("all", np.all), ("any", np.any)):
        fn = getattr(tg, name)
        _assert_result(fn(x), ref(arr), tg.bool)
        _assert_result(getattr(x, name)(), ref(arr), tg.bool)
        for dim in (0, 1, -1, (0, 1), [1], (-1, 0)):
            axis = tuple(dim) if isinstance(dim, list) else dim
            _assert_result(fn(x, dim), ref(arr, axis=axis), tg.bool)
            _assert_result(fn(x, dim=dim, keepdim=True), ref(arr, axis=axis, keepdims=True),
                           tg.bool)
        _assert_result(fn(x, keepdim=True), ref(arr, keepdims=True), tg.bool)
        # an empty dim list reduces nothing (PyTorch 2.x)
        _assert_result(fn(x, ()), arr.astype(bool), tg.bool)


def test_all_any_edge_cases():
    _assert_result(tg.all(tg.zeros(0)), True, tg.bool)
    _assert_result(tg.any(tg.zeros(0)), False, tg.bool)
    _assert_result(tg.all(tg.zeros(0, 3), 0), [True] * 3, tg.bool)
    _assert_result(tg.all(tg.tensor([NAN])), True, tg.bool)        # NaN is nonzero
    _assert_result(tg.any(tg.tensor(3.0), 0), True, tg.bool)
    r = tg.tensor([1.0, 2.0], requires_grad=True).all()
    assert not r.requires_grad and bool(r) is True


@pytest.mark.parametrize("fn", [tg.all, tg.any, tg.count_nonzero])
def test_reduction_dim_errors(fn):
    name = fn.__name__
    x = tg.zeros(2, 3)
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range "
                                         r"of \[-2, 1\], but got 2\)"):
        fn(x, 2)
    with pytest.raises(RuntimeError, match="dim 0 appears multiple times in the list of dims"):
        fn(x, (0, 0))
    with pytest.raises(TypeError, match=rf"{name}\(\): dim must be an int, got float"):
        fn(x, 1.5)
    with pytest.raises(TypeError, match=rf"{name}\(\): dim must be an int, got bool"):
        fn(x, True)
    with pytest.raises(TypeError, match=rf"{name}\(\): argument 'input' must be Tensor, "
                                        r"not list"):
        fn([1, 2])


def test_count_nonzero_values():
    x = tg.tensor(X)
    _assert_result(tg.count_nonzero(x), 3, tg.int64)
    _assert_result(x.count_nonzero(0), [1, 0, 2], tg.int64)
    _assert_result(tg.count_nonzero(x, dim=-1), [2, 1], tg.int64)
    _assert_result(tg.count_nonzero(x, (0, 1)), 3, tg.int64)
    _assert_result(tg.count_nonzero(x, ()), 3, tg.int64)       # unlike all/any: every dim
    _assert_result(tg.count_nonzero(x.bool(), [1]), [2, 1], tg.int64)
    _assert_result(tg.count_nonzero(tg.tensor(5.0), 0), 1, tg.int64)
    _assert_result(tg.count_nonzero(tg.zeros(0, 2), 0), [0, 0], tg.int64)


def test_reductions_match_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    arr = rng.integers(0, 3, (3, 4, 2)).astype(np.float32)
    arr[0, 0, 0] = np.nan
    for dims in (None, 0, 1, -1, (0, 2), (), [2, 0]):
        for dtype in (torch.float32, torch.int64, torch.bool):
            t = torch.from_numpy(arr).nan_to_num(2.0).to(dtype) if dtype != torch.float32 \
                else torch.from_numpy(arr)
            g = tg.from_numpy(t.numpy().copy())
            for name in ("all", "any"):
                kw = {} if dims is None else {"dim": dims}
                for keepdim in (False, True):
                    want = getattr(torch, name)(t, keepdim=keepdim, **kw).numpy()
                    _assert_result(getattr(tg, name)(g, keepdim=keepdim, **kw), want, tg.bool)
            want = torch.count_nonzero(t, dims).numpy()
            _assert_result(tg.count_nonzero(g, dims), want, tg.int64)


# ------------------------------------------------------------------ is_floating_point, ...
def test_type_tests():
    f, i = tg.tensor([1.0]), tg.tensor([1])
    assert tg.is_floating_point(f) is True and f.double().is_floating_point() is True
    assert tg.is_floating_point(i) is False and i.bool().is_floating_point() is False
    assert tg.is_tensor(f) is True and tg.is_tensor(tg.nn.Parameter(f)) is True
    assert tg.is_tensor(np.zeros(2)) is False and tg.is_tensor(1.0) is False
    assert tg.numel(tg.zeros(2, 3)) == 6 and tg.numel(tg.tensor(2.0)) == 1
    assert tg.numel(tg.zeros(0, 3)) == 0
    with pytest.raises(TypeError, match=r"is_floating_point\(\): argument 'input' must be "
                                        r"Tensor, not float"):
        tg.is_floating_point(1.0)
    with pytest.raises(TypeError, match=r"numel\(\): argument 'input' must be Tensor, not "
                                        r"list"):
        tg.numel([1, 2])


# ------------------------------------------------------------------ as_tensor
@pytest.mark.parametrize("npd", [np.float32, np.float64, np.int64, np.bool_])
def test_as_tensor_shares_numpy_memory(npd):
    arr = np.arange(6).reshape(2, 3).astype(npd)
    t = tg.as_tensor(arr)
    assert t.dtype.np == arr.dtype and t.shape == (2, 3) and not t.requires_grad
    arr[0, 0] = 1
    assert t[0, 0].item() == 1                  # writes show through both ways
    t[1, 2] = 0
    assert arr[1, 2] == 0
    same = tg.as_tensor(arr, dtype=t.dtype)         # the dtype it has already: still shared
    arr[0, 1] = 0
    assert same[0, 1].item() == 0


def test_as_tensor_shares_strided_views_and_copies_on_conversion():
    arr = np.arange(12.0).reshape(3, 4)
    view = tg.as_tensor(arr[:, ::2])
    assert view.stride() == (4, 2)
    arr[2, 2] = -1.0
    assert view[2, 1].item() == -1.0
    tr = tg.as_tensor(arr.T)
    assert tr.stride() == (1, 4)
    conv = tg.as_tensor(arr, dtype=tg.float32)
    assert conv.dtype is tg.float32
    arr[0, 0] = 99.0
    assert conv[0, 0].item() == 0.0             # a conversion is a copy
    np.testing.assert_array_equal(numpy_of(conv)[1:], arr[1:].astype(np.float32))
    i32 = np.arange(3, dtype=np.int32)
    _assert_result(tg.as_tensor(i32, dtype=tg.int64), [0, 1, 2], tg.int64)
    _assert_result(tg.as_tensor(np.arange(3, dtype=np.float16)), [0.0, 1.0, 2.0], tg.float32)


def test_as_tensor_of_a_tensor():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    assert tg.as_tensor(x) is x
    assert tg.as_tensor(x, dtype=tg.float32) is x
    y = tg.as_tensor(x, dtype=tg.float64)
    assert y.dtype is tg.float64 and y.requires_grad      # .to(dtype), as in PyTorch
    assert y.grad_fn.name() == "ToCopyBackward0"
    i = tg.as_tensor(x.detach(), dtype=tg.int64)
    _assert_result(i, [1, 2], tg.int64)


def test_as_tensor_python_data_dtypes():
    _assert_result(tg.as_tensor([1, 2]), [1, 2], tg.int64)
    _assert_result(tg.as_tensor([1.0, 2.0]), [1.0, 2.0], tg.float32)
    _assert_result(tg.as_tensor(3), 3, tg.int64)
    _assert_result(tg.as_tensor(True), True, tg.bool)
    _assert_result(tg.as_tensor([[1, 2]], dtype=tg.float64), [[1.0, 2.0]], tg.float64)
    _assert_result(tg.as_tensor(np.float64(2.5)), 2.5, tg.float64)   # NumPy scalars keep dtype
    _assert_result(tg.as_tensor(np.array(2, np.int64)), 2, tg.int64)


def test_as_tensor_errors():
    arr = np.arange(6.0).reshape(2, 3)
    with pytest.raises(ValueError, match=r"as_tensor\(\): At least one stride in the given "
                                         r"numpy array is negative"):
        tg.as_tensor(arr[:, ::-1])
    with pytest.raises(ValueError, match=r"as_tensor\(\): given numpy array has byte order "
                                         r"different from the native byte order"):
        tg.as_tensor(arr.astype(arr.dtype.newbyteorder("S")))
    with pytest.raises(TypeError, match=r"as_tensor\(\): can't convert np.ndarray of type "
                                        r"numpy.int32"):
        tg.as_tensor(np.zeros(2, np.int32))
    with pytest.raises(TypeError, match=r"as_tensor\(\): invalid data type 'str'"):
        tg.as_tensor("ab")
    with pytest.raises(RuntimeError, match=r"as_tensor\(\): could not infer dtype of NoneType"):
        tg.as_tensor(None)
    with pytest.raises(ValueError, match=r"as_tensor\(\): .*inhomogeneous"):
        tg.as_tensor([[1, 2], [3]])
    with pytest.raises(TypeError, match=r"as_tensor\(\): argument 'dtype' must be "
                                        r"tapegrad.dtype, not str"):
        tg.as_tensor(arr, dtype="float32")
    assert tg.as_tensor(arr, dtype=float).dtype is tg.float64      # Python's float, as PyTorch


def test_as_tensor_matches_torch():
    torch = pytest.importorskip("torch")
    names = {torch.float32: tg.float32, torch.float64: tg.float64, torch.int64: tg.int64,
             torch.bool: tg.bool}
    for data in ([1, 2], [1.0, 2], [[True], [False]], 3, 2.5, np.float64(1.5),
                 np.arange(4.0), np.ones(2, np.float32), np.array([True])):
        want = torch.as_tensor(data)
        _assert_result(tg.as_tensor(data), want.numpy(), names[want.dtype])
    arr = np.arange(3.0)
    assert (torch.as_tensor(arr).data_ptr() == arr.ctypes.data) and \
        tg.as_tensor(arr).numpy().ctypes.data == arr.ctypes.data


# ------------------------------------------------------------------ eye
def test_eye_values_dtypes_and_grad():
    _assert_result(tg.eye(3), np.eye(3, dtype=np.float32), tg.float32)
    _assert_result(tg.eye(2, 4, dtype=tg.int64), np.eye(2, 4, dtype=np.int64), tg.int64)
    _assert_result(tg.eye(3, 2, dtype=tg.bool), np.eye(3, 2, dtype=bool), tg.bool)
    _assert_result(tg.eye(n=2, m=3, dtype=tg.float64), np.eye(2, 3), tg.float64)
    _assert_result(tg.eye(0), np.zeros((0, 0), np.float32), tg.float32)
    _assert_result(tg.eye(2, 0), np.zeros((2, 0), np.float32), tg.float32)
    _assert_result(tg.eye(tg.tensor(2)), np.eye(2, dtype=np.float32), tg.float32)
    e = tg.eye(2, requires_grad=True)
    assert e.requires_grad and e.is_leaf and e.grad_fn is None
    (e * 3.0).sum().backward()
    np.testing.assert_array_equal(numpy_of(e.grad), np.full((2, 2), 3.0, np.float32))


def test_eye_errors():
    with pytest.raises(RuntimeError, match=r"eye\(\): n must be greater or equal to 0, got -1"):
        tg.eye(-1)
    with pytest.raises(RuntimeError, match=r"eye\(\): m must be greater or equal to 0, got -2"):
        tg.eye(2, -2)
    with pytest.raises(TypeError, match=r"eye\(\): argument 'n' must be int, not float"):
        tg.eye(2.0)
    with pytest.raises(TypeError, match=r"eye\(\): argument 'n' must be int, not bool"):
        tg.eye(True)
    with pytest.raises(TypeError, match=r"eye\(\): argument 'm' must be int, not str"):
        tg.eye(2, "3")
    with pytest.raises(RuntimeError, match=r"eye\(\): Only Tensors of floating point"):
        tg.eye(2, dtype=tg.int64, requires_grad=True)
    with pytest.raises(TypeError, match=r"eye\(\): argument 'dtype' must be tapegrad.dtype"):
        tg.eye(2, dtype="float32")


def test_eye_matches_torch():
    torch = pytest.importorskip("torch")
    for args in ((3,), (2, 5), (4, 1), (0,), (1, 0)):
        _assert_result(tg.eye(*args), torch.eye(*args).numpy(), tg.float32)


# ------------------------------------------------------------------ linspace
def test_linspace_values_and_dtypes():
    _assert_result(tg.linspace(0, 1, 5), np.linspace(0, 1, 5, dtype=np.float32), tg.float32)
    _assert_result(tg.linspace(-2.0, 2.0, 9, dtype=tg.float64), np.linspace(-2, 2, 9),
                   tg.float64)
    _assert_result(tg.linspace(3, -3, 7, dtype=tg.float64), np.arange(3.0, -4.0, -1.0),
                   tg.float64)
    _assert_result(tg.linspace(0, 1, 1), [0.0], tg.float32)
    _assert_result(tg.linspace(0, 1, 0), np.zeros(0, np.float32), tg.float32)
    _assert_result(tg.linspace(tg.tensor(0.0), tg.tensor(1.0), 3), [0.0, 0.5, 1.0], tg.float32)
    # integer dtypes: the float64 values truncated toward zero
    _assert_result(tg.linspace(0, 10, 4, dtype=tg.int64), [0, 3, 6, 10], tg.int64)
    _assert_result(tg.linspace(-3, 3, 5, dtype=tg.int64), [-3, -1, 0, 1, 3], tg.int64)
    # the second half counts down from end, so both ends are exact
    x = tg.linspace(0.1, 0.7, 7, dtype=tg.float64)
    assert numpy_of(x)[0] == 0.1 and numpy_of(x)[-1] == 0.7
    r = tg.linspace(0, 1, 3, requires_grad=True)
    assert r.requires_grad and r.is_leaf and r.grad_fn is None
    assert not tg.linspace(0, 1, 3).requires_grad


def test_linspace_errors():
    with pytest.raises(RuntimeError, match=r"linspace\(\): number of steps must be "
                                           r"non-negative"):
        tg.linspace(0, 1, -1)
    with pytest.raises(TypeError, match=r"linspace\(\): argument 'steps' must be int, not "
                                        r"float"):
        tg.linspace(0, 1, 2.0)
    with pytest.raises(TypeError, match=r"linspace\(\): argument 'steps' must be int, not bool"):
        tg.linspace(0, 1, True)
    with pytest.raises(TypeError, match=r"linspace\(\): argument 'start' must be a real "
                                        r"number"):
        tg.linspace("a", 1, 3)
    with pytest.raises(RuntimeError, match=r"linspace\(\): linspace only supports "
                                           r"0-dimensional start and end tensors, but got end "
                                           r"with 1 dimension"):
        tg.linspace(0, tg.tensor([1.0]), 3)
    with pytest.raises(NotImplementedError, match=r"linspace\(\): \"linspace_cpu\" not "
                                                  r"implemented for 'Bool'"):
        tg.linspace(0, 1, 3, dtype=tg.bool)
    with pytest.raises(RuntimeError, match=r"linspace\(\): Only Tensors of floating point"):
        tg.linspace(0, 1, 3, dtype=tg.int64, requires_grad=True)


def test_linspace_matches_torch_bitwise():
    """PyTorch's kernel rounds start + step * i once (a fused multiply-add): the values
    match it bit for bit, not only to round-off."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    pairs = ((torch.float32, tg.float32), (torch.float64, tg.float64), (torch.int64, tg.int64))
    for tdt, gdt in pairs:
        for _ in range(60):
            steps = int(rng.integers(0, 120))
            start, end = (float(v) for v in rng.normal(0, 10.0 ** rng.integers(0, 6), 2))
            want = torch.linspace(start, end, steps, dtype=tdt).numpy()
            _assert_result(tg.linspace(start, end, steps, dtype=gdt), want, gdt)
    for args in ((0, INF, 3), (-1, 1, 2), (5, 5, 4), (2.7, -1.2, 5)):
        for tdt, gdt in pairs[:2]:
            _assert_result(tg.linspace(*args, dtype=gdt),
                           torch.linspace(*args, dtype=tdt).numpy(), gdt)


# ------------------------------------------------------------------ randint
def test_randint_overloads_dtype_and_range():
    r = tg.randint(10, (1000,))
    assert r.dtype is tg.int64 and r.shape == (1000,) and not r.requires_grad
    a = numpy_of(r)
    assert a.min() >= 0 and a.max() <= 9 and len(np.unique(a)) == 10
    a = numpy_of(tg.randint(-5, -2, (2, 300)))
    assert a.shape == (2, 300) and a.min() == -5 and a.max() == -3
    assert tg.randint(low=2, high=3, size=(4,)).tolist() == [2, 2, 2, 2]
    assert tg.randint(2, high=3, size=[2]).tolist() == [2, 2]
    assert tg.randint(size=(3,), high=1).tolist() == [0, 0, 0]
    assert tg.randint(1, tg.Size([2, 2])).tolist() == [[0, 0], [0, 0]]
    s = tg.randint(5, ())
    assert s.shape == () and 0 <= s.item() < 5
    assert tg.randint(0, 10, (0, 3)).shape == (0, 3)
    f = tg.randint(3, 7, (50,), dtype=tg.float64)
    assert f.dtype is tg.float64 and set(numpy_of(f)) <= {3.0, 4.0, 5.0, 6.0}
    b = tg.randint(0, 2, (200,), dtype=tg.bool)
    assert b.dtype is tg.bool and set(numpy_of(b)) == {False, True}
    big = numpy_of(tg.randint(-2 ** 63, 2 ** 63 - 1, (8,)))
    assert big.dtype == np.int64


def test_randint_is_reproducible_under_manual_seed():
    tg.manual_seed(7)
    a = numpy_of(tg.randint(0, 1000, (50,)))
    b = numpy_of(tg.randint(0, 1000, (50,)))
    tg.manual_seed(7)
    np.testing.assert_array_equal(numpy_of(tg.randint(0, 1000, (50,))), a)
    np.testing.assert_array_equal(numpy_of(tg.randint(1000, (50,))), b)
    assert not np.array_equal(a, b)
    tg.manual_seed(8)
    assert not np.array_equal(numpy_of(tg.randint(0, 1000, (50,))), a)


def test_randint_draws_from_tapegrads_generator_only():
    np.random.seed(3)
    state = np.random.get_state()[1].copy()
    tg.manual_seed(0)
    first = numpy_of(tg.randint(100, (20,)))
    assert np.array_equal(np.random.get_state()[1], state)      # NumPy's global state unused
    tg.manual_seed(0)
    tg.rand(3)                  # the same stream as rand: it moves on
    assert not np.array_equal(numpy_of(tg.randint(100, (20,))), first)


def test_randint_errors():
    """PyTorch's messages (its randint is random_(low, high) on a new tensor)."""
    with pytest.raises(RuntimeError, match=r"random_ expects 'from' to be less than 'to', "
                                           r"but got from=5 >= to=5"):
        tg.randint(5, 5, (3,))
    with pytest.raises(RuntimeError, match=r"from=0 >= to=-3"):
        tg.randint(-3, (3,))
    with pytest.raises(TypeError, match=r"randint\(\): argument 'size' \(position 2\) must be "
                                        r"tuple of ints, not int"):
        tg.randint(10, 3)
    with pytest.raises(TypeError, match=r"randint\(\) received an invalid combination of "
                                        r"arguments - got \(int, int, int\)"):
        tg.randint(0, 10, 3)
    with pytest.raises(TypeError, match=r"randint\(\): argument 'size' \(position 2\) must be "
                                        r"tuple of ints, but found element of type float at "
                                        r"pos 0"):
        tg.randint(10, (3.0,))
    with pytest.raises(TypeError, match=r"found element of type bool at pos 0"):
        tg.randint(10, (True,))
    with pytest.raises(RuntimeError, match=r"negative dimension -1: \[2, -1\]"):
        tg.randint(10, (2, -1))
    with pytest.raises(TypeError, match=r"randint\(\) received an invalid combination of "
                                        r"arguments - got \(float, int, tuple\)"):
        tg.randint(0.5, 10, (3,))
    with pytest.raises(TypeError, match=r"randint\(\): argument 'high' \(position 1\) must be "
                                        r"int, not bool"):
        tg.randint(True, (3,))
    with pytest.raises(TypeError, match=r"randint\(\) received an invalid combination"):
        tg.randint(10)
    with pytest.raises(TypeError, match=r"randint\(\) received an invalid combination"):
        tg.randint(low=1, size=(2,))
    with pytest.raises(TypeError, match=r"randint\(\) received an invalid combination of "
                                        r"arguments - got \(int, int, tuple, int\)"):
        tg.randint(1, 2, (3,), 4)
    with pytest.raises(TypeError, match=r"randint\(\) received an invalid combination of "
                                        r"arguments - got \(int, tuple, high=int\)"):
        tg.randint(10, (3,), high=5)
    with pytest.raises(ValueError, match=r"Overflow when unpacking long long"):
        tg.randint(0, 2 ** 63, (3,))
    with pytest.raises(RuntimeError, match=r"to - 1 is out of bounds for bool"):
        tg.randint(0, 3, (3,), dtype=tg.bool)
    with pytest.warns(UserWarning, match=r"to - 1 is out of bounds \[-\(2\^24\), 2\^24\]. Due "
                                         r"to precision limitations float can support"):
        tg.randint(0, 2 ** 25, (2,), dtype=tg.float32)


def test_randint_result_types_match_torch():
    torch = pytest.importorskip("torch")
    for args, kw in (((10, (3,)), {}), ((2, 9, (2, 2)), {}), ((5, ()), {}),
                     ((0, 2, (4,)), {"dtype": "bool"}), ((0, 4, (4,)), {"dtype": "float64"})):
        want = torch.randint(*args, **{k: getattr(torch, v) for k, v in kw.items()})
        got = tg.randint(*args, **{k: getattr(tg, v) for k, v in kw.items()})
        assert got.shape == tuple(want.shape) and got.dtype.name == str(want.dtype)[6:]
        lo, hi = (0, args[0]) if len(args) == 2 else args[:2]
        assert numpy_of(got).size == 0 or lo <= numpy_of(got).min() and numpy_of(got).max() < hi


# ------------------------------------------------------------------ compile, methods
@pytest.mark.parametrize("read", [tg.isnan, tg.count_nonzero, lambda y: y.any(),
                                  lambda y: tg.allclose(y, y), lambda y: tg.equal(y, y)],
                         ids=["isnan", "count_nonzero", "any", "allclose", "equal"])
def test_reading_values_inside_compile_is_a_graph_break(read):
    w = tg.tensor([0.5, -1.0, 2.0], requires_grad=True)

    def step(x):
        y = (x * w).tanh()
        return y.sum(), read(y.detach())

    c = tg.compile(step)
    x = tg.tensor([1.0, 2.0, 3.0])
    with pytest.warns(tg.CompileWarning, match="Python reads or writes a tensor's values"):
        loss, flag = c(x)
    want_loss, want_flag = step(x)
    assert loss.item() == want_loss.item()
    got = flag if isinstance(flag, bool) else flag.tolist()
    assert got == (want_flag if isinstance(want_flag, bool) else want_flag.tolist())


def test_type_tests_inside_compile_do_not_break():
    w = tg.tensor([0.5, -1.0, 2.0], requires_grad=True)

    def step(x):
        y = (x * w).tanh()
        return y.sum(), tg.is_floating_point(y), tg.numel(y), tg.is_tensor(y)

    c = tg.compile(step)
    with warnings.catch_warnings():
        warnings.simplefilter("error", tg.CompileWarning)
        for _ in range(3):
            out = c(tg.tensor([1.0, 2.0, 3.0]))
    assert out[1:] == (True, 3, True)
    assert c.stats == {"recordings": 1, "replays": 2}


def test_tensor_methods_are_the_functions():
    for name in ("equal", "allclose", "isclose", "isnan", "isinf", "isfinite", "all", "any",
                 "count_nonzero", "is_floating_point"):
        assert getattr(tg.Tensor, name) is getattr(tg, name), name
    for name in ("is_tensor", "as_tensor", "eye", "linspace", "randint"):
        assert callable(getattr(tg, name)) and not hasattr(tg.Tensor, name), name
