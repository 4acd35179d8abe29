"""sort, argsort, topk, flip, tril, triu, square (tapegrad/_ordering.py): values and
indices against NumPy and PyTorch (NaN sorting as the largest, stable ties, int64
extremes), gradients against finite differences and PyTorch, PyTorch's errors, and a
graph break inside tapegrad.compile (the order is read in Python)."""
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import gradcheck
from tests.helpers import leaf

RNG = np.random.default_rng(80)
A = np.array([[3.0, np.nan, 1.0, 3.0, -2.0], [0.5, 0.5, np.inf, -np.inf, 2.0]])


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sort_values_and_stable_indices(descending, dim):
    v, i = tg.tensor(A).sort(dim, descending=descending)
    # NumPy's stable order, NaN the largest value (A has no NaN and inf in one line)
    key = np.where(np.isnan(A), -np.inf, -A) if descending else A
    rank = np.argsort(key, axis=dim, kind="stable")
    np.testing.assert_array_equal(i.numpy(), rank)
    np.testing.assert_array_equal(v.numpy(), np.take_along_axis(A, rank, dim))
    assert tg.argsort(tg.tensor(A), dim, descending=descending).tolist() == rank.tolist()


def test_sort_matches_torch_including_ints():
    torch = pytest.importorskip("torch")
    ai = np.array([[3, np.iinfo(np.int64).min, 1, 3, np.iinfo(np.int64).max]])
    for a in (A, ai, RNG.standard_normal((3, 4, 5))):
        for d in (0, -1):
            for desc in (False, True):
                v, i = tg.tensor(a).sort(d, descending=desc)
                vt, it = torch.sort(torch.tensor(a), dim=d, descending=desc, stable=True)
                np.testing.assert_array_equal(v.numpy(), vt.numpy())
                np.testing.assert_array_equal(i.numpy(), it.numpy())


def test_topk_matches_torch():
    torch = pytest.importorskip("torch")
    a = RNG.standard_normal((4, 6))      # no ties: the indices are determined
    for largest in (True, False):
        for k in (0, 1, 3, 6):
            v, i = tg.tensor(a).topk(k, 1, largest=largest)
            vt, it = torch.tensor(a).topk(k, 1, largest=largest)
            np.testing.assert_array_equal(v.numpy(), vt.numpy())
            np.testing.assert_array_equal(i.numpy(), it.numpy())
    v, _ = tg.tensor(A).topk(3, 1)
    vt, _ = torch.tensor(A).topk(3, 1)
    np.testing.assert_array_equal(v.numpy(), vt.numpy())      # NaN first, then 3, 3
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        tg.tensor(a).topk(7, 1)
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        torch.tensor(a).topk(7, 1)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_topk_of_long_lines_is_the_sorts_first_k(dtype):
    """topk of a line at least 4k long partitions instead of sorting the whole line: its
    indices are exactly the first k of the stable sort (ties at the k-th value to the
    lowest indices, NaN as the largest value, -0. equal to 0.) along every dim, and its
    values PyTorch's (whose tie order is unspecified)."""
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(31)
    a = r.integers(-3, 4, (5, 40, 3)).astype(dtype)
    if dtype != "int64":
        a[r.random(a.shape) < 0.15] = np.nan
        a[r.random(a.shape) < 0.15] = -0.0
    for d, n in ((1, 40), (0, 5)):
        for largest in (True, False):
            desc = largest
            for k in range(1, n // 4 + 1):
                v, i = tg.tensor(a).topk(k, d, largest=largest)
                _, order = tg.tensor(a).sort(d, descending=desc, stable=True)
                want = np.take(order.numpy(), np.arange(k), axis=d)
                np.testing.assert_array_equal(i.numpy(), want)
                vt, _ = torch.tensor(a).topk(k, d, largest=largest)
                np.testing.assert_array_equal(v.numpy(), vt.numpy())


def test_gradients_flow_to_the_selected_elements():
    x0 = RNG.standard_normal((3, 5))
    assert gradcheck(lambda t: t.sort(1, descending=True).values * tg.tensor(np.arange(5.0)),
                     (leaf(x0),))
    assert gradcheck(lambda t: t.topk(2, 0).values, (leaf(x0),))
    assert gradcheck(lambda t: t.flip([0, 1]) * tg.tensor(np.arange(15.0).reshape(3, 5)),
                     (leaf(x0),))
    assert gradcheck(lambda t: t.tril(1) + t.triu(-1) * 2.0, (leaf(x0),))
    x = leaf(x0)
    x.topk(2, 1).values.sum().backward()
    want = np.zeros_like(x0)
    np.put_along_axis(want, np.argsort(-x0, 1)[:, :2], 1.0, 1)
    np.testing.assert_array_equal(x.grad.numpy(), want)


def test_flip_tril_triu_match_torch():
    torch = pytest.importorskip("torch")
    a = RNG.standard_normal((2, 3, 4))
    a[0, 0, 3] = np.inf
    a[1, 2, 0] = np.nan
    for dims in (0, [1], (0, 2), [-1, 0, 1]):
        np.testing.assert_array_equal(tg.tensor(a).flip(dims).numpy(),
                                      torch.tensor(a).flip(dims).numpy())
    for diag in (-2, -1, 0, 1, 3):
        np.testing.assert_array_equal(tg.tensor(a).tril(diag).numpy(),
                                      torch.tensor(a).tril(diag).numpy())
        np.testing.assert_array_equal(tg.triu(tg.tensor(a), diag).numpy(),
                                      torch.triu(torch.tensor(a), diag).numpy())
    assert tg.tensor([[1, 2], [3, 4]]).tril().tolist() == [[1, 0], [3, 4]]
    x = leaf([2.0, -3.0])
    y = tg.square(x)
    assert y.grad_fn.name() == torch.square(torch.tensor([2.0], requires_grad=True)) \
        .grad_fn.name() == "PowBackward0"
    y.sum().backward()
    assert x.grad.tolist() == [4.0, -6.0]


def test_errors_and_zero_dim():
    with pytest.raises(RuntimeError, match="tril: input tensor must have at least 2 dimensions"):
        tg.tensor([1.0, 2.0]).tril()
    with pytest.raises(RuntimeError, match="dim 0 appears multiple times in the list of dims"):
        tg.tensor([[1.0]]).flip([0, -2])
    with pytest.raises(IndexError, match="Dimension out of range"):
        tg.tensor([1.0]).sort(2)
    with pytest.raises(TypeError, match="sort\\(\\): argument 'input'"):
        tg.sort([1.0])
    v, i = tg.tensor(5.0).sort()
    assert v.item() == 5.0 and i.item() == 0 and i.dtype is tg.int64


def test_sort_inside_compile_is_a_graph_break_with_right_values():
    x = tg.tensor(RNG.standard_normal(6), requires_grad=True)

    def f(x):
        y = (x.sort().values * tg.tensor(np.arange(6.0))).sum()
        y.backward()
        return y
    c = tg.compile(f)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = [c(x).item() for _ in range(3)]
    assert any(issubclass(m.category, tg.CompileWarning) for m in w)
    want = float((np.sort(x.detach().numpy()) * np.arange(6.0)).sum())
    assert got == [pytest.approx(want, rel=1e-15)] * 3


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_flip_is_one_row_like_pytorchs_over_layouts_and_dtypes(dtype):
    """flip is one FlipBackward0 row (a copy read through negative strides, rows of 8
    reversed at once): values against PyTorch for strided and offset inputs, rows longer
    and shorter than 8, empty dims, 0-d, ints and bools; gradients bitwise PyTorch's,
    written into a fresh buffer or added to an existing one."""
    torch = pytest.importorskip("torch")
    cases = [((5,), (0,)), ((3, 19), (1,)), ((3, 19), (0, 1)), ((2, 3, 17), (0, 2)),
             ((2, 3, 4), ()), ((3, 0, 2), (1,)), ((4, 9), (-1,))]
    for shape, dims in cases:
        a = RNG.standard_normal(shape).astype(dtype)
        w = RNG.standard_normal(shape).astype(dtype)
        x, xt = tg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
        y, yt = x.flip(dims), xt.flip(dims)
        assert y.grad_fn.name() == yt.grad_fn.name() == "FlipBackward0"
        np.testing.assert_array_equal(y.detach().numpy(), yt.detach().numpy())
        for _ in range(2):              # the second backward adds to the first's .grad
            (x.flip(dims) * tg.tensor(w)).sum().backward()
            (xt.flip(dims) * torch.tensor(w)).sum().backward()
            np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())
    base = RNG.standard_normal((6, 21)).astype(dtype)
    views = [lambda t: t.t(), lambda t: t[1:5, 2:19], lambda t: t[:, ::3], lambda t: t[2]]
    for view in views:
        for dims in ((0,), (-1,), (0, -1)):
            x = tg.tensor(base, requires_grad=True)
            xt = torch.tensor(base, requires_grad=True)
            v, vt = view(x), view(xt)
            if v.ndim == 1 and dims != (0,):
                continue
            y, yt = v.flip(dims), vt.flip(dims)
            np.testing.assert_array_equal(y.detach().numpy(), yt.detach().numpy())
            (y * y).sum().backward()
            (yt * yt).sum().backward()
            np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())
    s = leaf(np.float64(3.0))
    assert s.flip(0).item() == 3.0 and s.flip(()).grad_fn.name() == "FlipBackward0"
    ints = np.arange(30).reshape(3, 10)
    assert tg.tensor(ints).flip((0, 1)).tolist() == ints[::-1, ::-1].tolist()
    assert tg.tensor([True, False, False]).flip(0).tolist() == [False, False, True]


def test_flip_of_a_tensor_modified_after_it_keeps_its_values():
    """flip copies (as PyTorch's does): writing into the input afterwards changes
    neither the result nor the gradient (flip saves nothing)."""
    x = leaf(np.arange(4.0))
    y = x.flip(0)
    with tg.no_grad():
        x.mul_(10)
    assert y.tolist() == [3.0, 2.0, 1.0, 0.0]
    (y * tg.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    assert x.grad.tolist() == [4.0, 3.0, 2.0, 1.0]
