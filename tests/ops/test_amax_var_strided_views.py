"""amax/amin (their gradient is split evenly among ties, unlike max(dim)); var/std of
equal values (exactly 0) and with correction >= N (PyTorch's inf/NaN gradients);
view/reshape of strided tensors whose layout allows a view (PyTorch's computeStride);
cat keeps a skipped empty 1-D input in the graph. Exact values, finite differences, and
the same programs against PyTorch."""
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import gradcheck
from tests.helpers import leaf


def both(fn):
    torch = pytest.importorskip("torch")
    return fn(tg), fn(torch)


def same(a, b):
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return (a == b or np.isnan(a) and np.isnan(b)
                or np.isclose(a, b, rtol=1e-12, atol=1e-15))   # (PyTorch: round-off)
    return a == b


def outcome(fn):
    try:
        return fn()
    except (RuntimeError, IndexError, TypeError) as e:
        return type(e).__name__, str(e)


# ------------------------------------------------------------------ amax / amin
def test_amax_amin_values_and_tied_gradients():
    x = leaf([[1., 3., 3.], [2., 5., 5.]])
    y = x.amax(1)
    assert y.tolist() == [3., 5.] and type(y.grad_fn).__name__ == "AmaxBackward0"
    (y * tg.tensor([2., 4.], dtype=tg.float64)).sum().backward()
    assert x.grad.tolist() == [[0., 1., 1.], [0., 2., 2.]]      # split among the ties
    x.grad = None
    y = tg.amin(x, dim=0, keepdim=True)
    assert y.tolist() == [[1., 3., 3.]] and y.shape == (1, 3)
    assert type(y.grad_fn).__name__ == "AminBackward0"
    y.sum().backward()
    assert x.grad.tolist() == [[1., 1., 1.], [0., 0., 0.]]
    x.grad = None
    x.amax().backward()                                          # dim=(): everything
    assert x.grad.tolist() == [[0., 0., 0.], [0., .5, .5]]


def test_amax_nan_line_gives_nan_gradient_and_strided_input():
    x = leaf([[1., 3.], [np.nan, 5.]])
    y = x.amax(1)
    assert y[0].item() == 3. and np.isnan(y[1].item())
    y.sum().backward()
    g = x.grad.numpy()
    assert g[0].tolist() == [0., 1.] and np.isnan(g[1]).all()
    z = leaf(np.arange(12.).reshape(3, 4))
    z.t()[::2].amin((0, 1)).backward()
    expected = np.zeros((3, 4))
    expected[0, 0] = 1.
    assert z.grad.numpy().tolist() == expected.tolist()


def test_amax_finite_differences():
    rng = np.random.default_rng(3)
    x = leaf(rng.standard_normal((3, 4, 2)))
    assert gradcheck(lambda t: t.amax((0, 2)), (x,))
    assert gradcheck(lambda t: t.amin(-1, keepdim=True), (x,))


def test_amax_errors_and_integer_input():
    assert tg.tensor([[1, 5], [7, 2]]).amax(1).tolist() == [5, 7]
    assert tg.tensor([[1, 5], [7, 2]]).amax(1).dtype == tg.int64
    with pytest.raises(RuntimeError, match=r"amax\(\): Expected reduction dim to be "
                                           r"specified for input.numel\(\) == 0"):
        tg.zeros(0, 3).amax()
    with pytest.raises(IndexError, match=r"amin\(\): Expected reduction dim 0 to have "
                                         "non-zero size"):
        tg.zeros(0, 3).amin(0)
    assert tg.zeros(0, 3).amax(1).shape == (0,)
    with pytest.raises(RuntimeError, match="dim 0 appears multiple times"):
        tg.zeros(2, 3).amax((0, 0))
    with pytest.raises(TypeError, match="must be tuple of ints, not float"):
        tg.zeros(2, 3).amax(0.5)


def _amax_program(L):
    out = []
    for dim in (None, 0, 1, -1, (0, 1), [1]):
        for keep in (False, True):
            for name in ("amax", "amin"):
                x = L.tensor([[1., 3., 3.], [2., float("nan") if dim == 0 else 5., 5.]],
                             dtype=L.float64, requires_grad=True)
                f = getattr(x, name)
                y = f() if dim is None else f(dim, keepdim=keep)
                (y * 7).sum().backward()
                out.append((y.tolist(), x.grad.tolist(), type(y.grad_fn).__name__))
    for f in (lambda: L.zeros(0, 3).amax(), lambda: L.zeros(0, 3).amax(0),
              lambda: L.zeros(2, 3).amax(2), lambda: L.tensor(3.).amax(0).tolist()):
        out.append(outcome(f))
    return out


def test_amax_amin_match_torch():
    a, b = both(_amax_program)
    assert same(a, b), (a, b)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("perm", [(0, 1, 2), (2, 0, 1), (1, 2, 0)])
def test_amax_amin_on_long_lines_and_permuted_views_match_torch(dtype, perm):
    """amax/amin walk the input's memory in order a row at a time (a row into one
    element: maxnum/minnum with a NaN check; rows side by side: elementwise): every dim
    set of permuted views with lines of 33 and 40, ties and a NaN, against PyTorch's
    values and gradients (split among ties, NaN along a NaN line)."""
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(41)
    a = r.integers(-4, 5, (6, 33, 40)).astype(dtype)
    a[2, 5, 7] = np.nan
    for name in ("amax", "amin"):
        for dims in (0, 1, 2, (0, 1), (1, 2), (0, 2), (0, 1, 2)):
            out = []
            for L in (tg, torch):
                x = L.tensor(a, requires_grad=True)
                y = getattr(x.permute(*perm), name)(dims)
                (y * L.tensor(np.cos(np.arange(y.numel())).reshape(tuple(y.shape))
                              .astype(dtype))).sum().backward()
                out.append((y.detach().numpy(), x.grad.numpy()))
            for got, want in zip(*out):
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ var / std
@pytest.mark.parametrize("n", [3, 7, 10, 33])
@pytest.mark.parametrize("dtype", [tg.float32, tg.float64])
def test_var_std_of_equal_values_are_exactly_zero(n, dtype):
    for dim in (None, 1):
        x = leaf(np.full((2, n), 0.1), dtype)
        v = x.var() if dim is None else x.var(dim)
        v.sum().backward()
        assert (v.detach().numpy() == 0).all()
        assert (x.grad.numpy() == 0).all()
        x.grad = None
        s = x.std() if dim is None else x.std(dim)
        s.sum().backward()
        assert (s.detach().numpy() == 0).all() and (x.grad.numpy() == 0).all()


def test_var_with_correction_at_least_n_follows_pytorch():
    warnings.simplefilter("ignore")
    x = leaf([1., 2., 4.])
    x.var(correction=3).backward()                  # no dim: 2/0 * (x - mean) -> inf
    assert x.grad.tolist() == [np.inf] * 3
    y = leaf([[1., 2., 4.], [3., 3., 3.]])
    y.var(1, correction=3).sum().backward()         # with a dim: the formula's own signs
    g = y.grad.numpy()
    assert g[0].tolist() == [-np.inf, -np.inf, np.inf] and np.isnan(g[1]).all()
    y.grad = None
    y.var(1, correction=4).sum().backward()         # dof -1: finite
    mean = 7. / 3
    np.testing.assert_allclose(y.grad.numpy()[0], -2. * (np.array([1., 2., 4.]) - mean))
    z = leaf([3., 3., 3.])
    z.var(correction=3).backward()                  # x == mean: inf * 0
    assert np.isnan(z.grad.numpy()).all()


def _var_program(L):
    warnings.simplefilter("ignore")
    out = []
    for c in (0, 1, 2, 3, 4):
        for dim in (None, 1):
            for is_std in (False, True):
                x = L.tensor([[1., 2., 4.], [3., 3., 3.]], dtype=L.float64, requires_grad=True)
                f = x.std if is_std else x.var
                y = f(correction=c) if dim is None else f(dim, correction=c)
                y.sum().backward()
                out.append((y.tolist(), x.grad.tolist()))
    for n in (3, 7):
        x = L.tensor([[0.1] * n] * 2, dtype=L.float64, requires_grad=True)
        v = x.var(1)
        v.sum().backward()
        out.append((v.tolist(), x.grad.tolist()))
    return out


def test_var_std_match_torch():
    a, b = both(_var_program)
    assert same(a, b), (a, b)


# ------------------------------------------------------------------ view / reshape
def test_view_of_a_strided_tensor_where_the_layout_allows_it():
    x = tg.arange(12.).reshape(3, 4)
    s = x[:, ::2]                                   # strides (4, 2)
    v = s.view(6)                                   # evenly spaced: a view
    assert v.stride() == (2,) and v.tolist() == [0., 2., 4., 6., 8., 10.]
    assert s.view(3, 1, 2).stride() == (4, 4, 2)
    assert tg.tensor([1.]).expand(4).view(2, 2).stride() == (0, 0)
    assert x.t().view(4, 3).stride() == (1, 4)
    with pytest.raises(RuntimeError, match="view size is not compatible with input tensor's "
                                           "size and stride"):
        x.t().view(12)
    v[0] = 100.                                     # it shares memory
    assert x[0, 0].item() == 100.
    r = s.reshape(2, 3)                             # reshape is a view where one exists
    r[0, 0] = -1.
    assert x[0, 0].item() == -1.
    c = x.t().reshape(12)                           # and a copy where none does
    c[0] = 5.
    assert x[0, 0].item() == -1.


def test_strided_view_gradients():
    x = leaf(np.arange(12.).reshape(3, 4))
    v = x[:, ::2].view(6)
    assert type(v.grad_fn).__name__ == "ViewBackward0"
    r = x[:, 1::2].reshape(3, 2, 1)
    assert type(r.grad_fn).__name__ == "ReshapeAliasBackward0"
    (v * tg.arange(6., dtype=tg.float64)).sum().backward()
    (r * 10).sum().backward()
    assert x.grad.tolist() == [[0., 10., 1., 10.], [2., 10., 3., 10.], [4., 10., 5., 10.]]
    y = leaf(np.random.default_rng(0).standard_normal((4, 6)))
    assert gradcheck(lambda t: (t.t()[::2].view(3, 2, 2) ** 2), (y,))


def _view_program(L):
    x = L.arange(12., dtype=L.float64).reshape(3, 4).requires_grad_()
    s = x[:, ::2]
    out = []
    for shp in ((3, 2, 1), (3, 1, 2), (6,), (2, 3), (1, 6), (6, 1)):
        out.append(outcome(lambda: (s.view(*shp).stride(), type(s.view(*shp).grad_fn).__name__)))
        r = s.reshape(*shp)
        out.append((r.stride(), type(r.grad_fn).__name__))
    t = x.t()
    for shp in ((4, 3), (12,), (2, 2, 3), (4, 1, 3)):
        out.append(outcome(lambda: t.view(*shp).stride()))
        out.append(type(t.reshape(*shp).grad_fn).__name__)
    e = L.tensor([1.]).expand(4)
    z = L.zeros(0, 3)[:, ::2]
    out += [e.view(2, 2).stride(), z.view(2, 0).stride(), z.view(0, 2).stride(),
            L.tensor(5.).view(1, 1).stride()]
    w = x.t()[1:].reshape(3, 3)
    (w * L.arange(9., dtype=L.float64).reshape(3, 3)).sum().backward()
    out.append(x.grad.tolist())
    return out


def test_views_match_torch():
    a, b = both(_view_program)
    assert same(a, b), (a, b)


# ------------------------------------------------------------------ cat
def test_cat_keeps_a_skipped_empty_input_in_the_graph():
    a = leaf([1., 2.])
    y = tg.cat([a[:0], tg.ones(2, 3, dtype=tg.float64)])
    assert y.shape == (2, 3) and y.requires_grad
    y.sum().backward()
    assert a.grad.tolist() == [0., 0.]
    b = tg.cat([tg.zeros(0), tg.ones(2, 3)])        # nothing requires grad: plain cat
    assert b.shape == (2, 3) and not b.requires_grad


def test_cat_with_empty_inputs_matches_torch():
    def prog(L):
        a = L.tensor([1., 2.], requires_grad=True)
        y = L.cat([a[:0], L.ones(2, 3), a[1:1]])
        y.sum().backward()
        return list(y.shape), y.requires_grad, a.grad.tolist()
    a, b = both(prog)
    assert same(a, b), (a, b)


def test_view_and_reshape_without_sizes_raise_as_pytorch():
    x = tg.ones(1)
    with pytest.raises(TypeError, match=r"view\(\) received an invalid combination of "
                                        r"arguments - got \(\)"):
        x.view()
    with pytest.raises(TypeError, match=r'reshape\(\) missing 1 required positional '
                                        r'arguments: "shape"'):
        x.reshape()
    assert x.view(()).shape == () and x.reshape([]).shape == ()
