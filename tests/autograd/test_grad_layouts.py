"""Gradients that only move, broadcast or sum elements (sum, mean, expand, views, row
gathers) over many layouts: the walk that carries them merges dims and has unit-stride
loops, so every layout it can meet is checked against NumPy here, exactly where the
arithmetic is the same (a copy, one scale) and to round-off where a sum's order may
differ."""
import numpy as np
import pytest

import tapegrad as tg

RNG = np.random.default_rng(11)


def _layout(base, kind):
    """A view of the tapegrad tensor `base` with a given layout, and the same view of its
    NumPy values."""
    a = base.detach().numpy()
    if kind == "contiguous":
        return base, a
    if kind == "transposed":
        return base.transpose(0, -1), a.swapaxes(0, -1)
    if kind == "sliced":
        return base[:, 1:], a[:, 1:]
    if kind == "stepped":
        return base[::2], a[::2]
    raise AssertionError(kind)


SHAPES = [(4, 5), (3, 1, 6), (2, 3, 4), (1, 7), (5, 1), (2, 1, 3, 1)]
KINDS = ["contiguous", "transposed", "sliced", "stepped"]


def _dims_cases(nd):
    return [None] + [d for d in range(nd)] + ([(0, nd - 1)] if nd > 1 else [])


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mean", [False, True])
def test_sum_and_mean_backward_over_layouts(shape, kind, mean):
    x = tg.tensor(RNG.standard_normal(shape), requires_grad=True)
    v, a = _layout(x, kind)
    if 0 in v.shape:
        pytest.skip("empty view")
    for dims in _dims_cases(v.ndim):
        for keep in (False, True):
            x.grad = None
            f = v.mean if mean else v.sum
            y = f() if dims is None else f(dims, keepdim=keep)
            g = RNG.standard_normal(tuple(y.shape))
            y.backward(tg.tensor(g))
            # expected: g broadcast back over the reduced dims (times 1/count for mean),
            # written into the base's layout
            axes = tuple(range(a.ndim)) if dims is None else (
                (dims,) if isinstance(dims, int) else dims)
            count = int(np.prod([a.shape[d] for d in axes]))
            gk = g if (dims is None or keep) else np.expand_dims(g, axes)
            gk = gk * (1.0 / count) if mean else gk
            want = np.zeros(shape)
            _layout_np(want, kind)[...] = np.broadcast_to(gk, a.shape)
            np.testing.assert_array_equal(x.grad.numpy(), want,
                                          err_msg=f"{kind} {shape} dims={dims} keep={keep}")
            # the forward over the same layout
            got = y.detach().numpy()
            ref = a.mean(axis=axes, keepdims=keep or dims is None) if mean else \
                a.sum(axis=axes, keepdims=keep or dims is None)
            np.testing.assert_allclose(got, ref.reshape(got.shape), rtol=1e-13, atol=1e-14)


def _layout_np(a, kind):
    return {"contiguous": a, "transposed": a.swapaxes(0, -1), "sliced": a[:, 1:],
            "stepped": a[::2]}[kind]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gradient_accumulates_into_an_existing_grad(dtype):
    x = tg.tensor(np.ones((3, 8), dtype), requires_grad=True)
    x.sum().backward()
    (x * 1).sum(0).backward(tg.tensor(np.arange(8, dtype=dtype)))
    x.sum(1, keepdim=True).backward(tg.tensor(np.full((3, 1), 0.5, dtype)))
    want = 1 + np.arange(8, dtype=dtype)[None, :] + 0.5
    np.testing.assert_array_equal(x.grad.numpy(), np.broadcast_to(want, (3, 8)))
    assert x.grad.dtype == tg.float32 if dtype == np.float32 else tg.float64


@pytest.mark.parametrize("shape,to", [((3, 1, 4), (3, 5, 4)), ((1, 6), (7, 6)),
                                      ((4, 1), (4, 9)), ((), (2, 3)), ((1, 1), (3, 3)),
                                      ((2, 1, 1), (2, 3, 5))])
def test_expand_backward_sums_the_broadcast_dims(shape, to):
    x = tg.tensor(RNG.standard_normal(shape), requires_grad=True)
    g = RNG.standard_normal(to)
    x.expand(*to).backward(tg.tensor(g))
    lead = len(to) - len(shape)
    s = g.sum(axis=tuple(range(lead))) if lead else g
    axes = tuple(d for d in range(len(shape)) if shape[d] == 1 and to[lead + d] != 1)
    want = s.sum(axis=axes, keepdims=True) if axes else s
    np.testing.assert_allclose(x.grad.numpy(), want.reshape(shape), rtol=1e-13)


def test_zero_dim_and_single_element_sums():
    x = tg.tensor(2.5, requires_grad=True)
    (x.sum() * 3).backward()
    assert x.grad.item() == 3.0
    y = tg.tensor(np.full((1, 1, 1), 2.0), requires_grad=True)
    y.mean().backward()
    assert y.grad.numpy().tolist() == [[[1.0]]]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_sum_backward_is_the_upstream_gradient_everywhere(dtype):
    # a long contiguous walk: one merged dim, the vectorised loop
    x = tg.tensor(np.zeros((64, 1000), dtype), requires_grad=True)
    (x.sum() * 1.5).backward()
    assert np.all(x.grad.numpy() == 1.5)
    x.grad = None
    x.t().sum(0).backward(tg.tensor(np.arange(64, dtype=dtype)))
    np.testing.assert_array_equal(x.grad.numpy(),
                                  np.broadcast_to(np.arange(64, dtype=dtype)[:, None],
                                                  (64, 1000)))


def test_row_gather_backward_adds_repeated_rows():
    E = tg.tensor(RNG.standard_normal((6, 5)), requires_grad=True)
    idx = np.array([0, 3, 3, 5, 0, 0])
    g = RNG.standard_normal((6, 5))
    E[tg.tensor(idx)].backward(tg.tensor(g))
    want = np.zeros((6, 5))
    np.add.at(want, idx, g)
    np.testing.assert_allclose(E.grad.numpy(), want, rtol=1e-15)


def test_sum_over_the_leading_dim_of_a_broadcast_bias_matches_torch():
    torch = pytest.importorskip("torch")
    h = RNG.standard_normal((32, 128)).astype(np.float32)
    b = RNG.standard_normal(128).astype(np.float32)
    g = RNG.standard_normal((32, 128)).astype(np.float32)
    tb = tg.tensor(b, requires_grad=True)
    (tg.tensor(h) + tb).backward(tg.tensor(g))
    pb = torch.tensor(b, requires_grad=True)
    (torch.tensor(h) + pb).backward(torch.tensor(g))
    np.testing.assert_allclose(tb.grad.numpy(), pb.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("perm", [(1, 0, 2), (2, 0, 1), (2, 1, 0), (0, 2, 1)])
def test_sums_of_permuted_views_walk_memory_in_order(dtype, perm):
    """A sum over a permuted view walks the input's memory in order (its dims sorted by
    stride, as PyTorch's TensorIterator does), rows that reduce to one element summed
    reassociated: every dim set of every permutation gives NumPy's float64 sum, to the
    dtype's round-off, forward and backward."""
    a = RNG.standard_normal((6, 33, 20)).astype(dtype)
    x = tg.tensor(a, requires_grad=True)
    v, av = x.permute(*perm), a.astype(np.float64).transpose(perm)
    tol = 3e-6 if dtype == "float32" else 1e-13
    for dims in [0, 1, 2, (0, 1), (1, 2), (0, 2), None]:
        axes = tuple(range(3)) if dims is None else dims
        y = v.sum() if dims is None else v.sum(dims)
        np.testing.assert_allclose(y.detach().numpy(), av.sum(axis=axes), rtol=tol,
                                   atol=tol * 30)
        x.grad = None
        y.sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.ones_like(a))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(16, 16), (40, 70), (97, 33)])
def test_transposed_matrices_move_in_tiles_exactly(dtype, shape):
    """A transposed matrix of at least 16 x 16 moves in 32 x 32 tiles (core.transposed_
    tiles): the gradient of x.t() scattered into x (fresh, then added to an existing
    .grad, with a scale from mean), a reshape copy of x.t(), and cat of transposed parts
    (written into the output) and its backward; exact against NumPy, sizes off the tile
    grid included."""
    a = RNG.standard_normal(shape).astype(dtype)
    w = RNG.standard_normal(shape[::-1]).astype(dtype)
    x = tg.tensor(a, requires_grad=True)
    (x.t() * tg.tensor(w)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), w.T)
    (x.t() * tg.tensor(w)).sum().backward()             # added to the existing .grad
    np.testing.assert_array_equal(x.grad.numpy(), w.T + w.T)
    x.grad = None
    x.t().mean().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(shape, 1 / a.size, dtype))
    np.testing.assert_array_equal(x.t().reshape(-1).detach().numpy(), a.T.reshape(-1))
    b = RNG.standard_normal(shape).astype(dtype)
    y = tg.tensor(b, requires_grad=True)
    c = tg.cat([x.t(), y.t()], 0)
    np.testing.assert_array_equal(c.detach().numpy(), np.concatenate([a.T, b.T], 0))
    x.grad = None
    g = RNG.standard_normal(c.shape).astype(dtype)
    (c * tg.tensor(g)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), g[:shape[1]].T)
    np.testing.assert_array_equal(y.grad.numpy(), g[shape[1]:].T)
