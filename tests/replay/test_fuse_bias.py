"""`x @ W + b` (and its relu) as one row in compiled replays (replay/fuse.py fuse_bias,
ops/linear.py mm_bias).

The fused row runs matmul's own product, then the bias add and relu with the eager ops'
arithmetic in their order, and its backward masks and sums the gradient as relu's and
add's backward do: replayed values and gradients are BITWISE the eager ones. Operands it
does not cover make the executor run the replaced ops instead.
"""
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import optim
import tapegrad.nn.functional as F

RNG = np.random.default_rng(11)


def fused(cf):
    return [g for runner, _, _ in cf.plans.values() for g in runner.pg.fused]


def arr(t):
    return np.array(t.detach().numpy())


def same(a, b):
    """Bitwise: values, NaNs and the signs of zeros."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(np.signbit(a), np.signbit(b))


class strict(warnings.catch_warnings):
    def __enter__(self):
        super().__enter__()
        warnings.simplefilter("error", tg.CompileWarning)


def mlp_params(dtype, din=24, hidden=40, classes=7):
    return [(a / np.sqrt(a.shape[0]) if a.ndim == 2 else 0.1 * a).astype(dtype) for a in (
        RNG.standard_normal((din, hidden)), RNG.standard_normal(hidden),
        RNG.standard_normal((hidden, classes)), RNG.standard_normal(classes))]


def train_both(make_step, init, batches):
    """Runs make_step(params, opt) eagerly and compiled over the batches from the same
    initial values; returns ((losses, params) eager, (losses, params) compiled, cf)."""
    out = []
    for compiled in (False, True):
        params = [tg.tensor(p.copy(), requires_grad=True) for p in init]
        opt = optim.SGD(params, lr=0.1, momentum=0.9)
        step = make_step(params, opt)
        cf = tg.compile(step) if compiled else step
        with strict():
            losses = [arr(cf(x, y)) for x, y in batches]
        out.append((losses, [arr(p) for p in params]))
    return out[0], out[1], cf


def batches(n, dtype, batch=16, din=24, classes=7):
    return [(tg.tensor(RNG.standard_normal((batch, din)).astype(dtype)),
             tg.tensor(RNG.integers(0, classes, batch))) for _ in range(n)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("bias_first", [False, True])
@pytest.mark.parametrize("zero_grad", [True, False])
def test_mlp_layers_are_one_row_each_and_bitwise_eager(dtype, relu, bias_first, zero_grad):
    def make_step(params, opt):
        def step(x, y):
            W1, b1, W2, b2 = params
            if zero_grad:           # (without: gradients accumulate into the old .grad)
                opt.zero_grad()
            h = b1 + x @ W1 if bias_first else x @ W1 + b1
            if relu:
                h = h.relu()
            loss = F.cross_entropy(h @ W2 + b2, y)
            loss.backward()
            opt.step()
            return loss
        return step
    (le, pe), (lc, pc), cf = train_both(make_step, mlp_params(dtype), batches(6, dtype))
    for a, b in zip(le + pe, lc + pc):
        same(a, b)
    first = ("mm", "add", "relu") if relu else ("mm", "add")
    assert fused(cf) == [first, ("mm", "add")]
    assert cf.stats == {"recordings": 1, "replays": 5}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layouts_and_special_values_bitwise(dtype):
    """A transposed weight (x @ W.t(), PyTorch's layout), a strided bias, the input's
    gradient, and NaN, infinities and -0. in the bias."""
    x0 = RNG.standard_normal((9, 5)).astype(dtype)
    w0 = RNG.standard_normal((6, 5)).astype(dtype)
    b0 = RNG.standard_normal(12).astype(dtype)
    b0[[0, 2, 4, 6]] = [np.nan, np.inf, -np.inf, -0.0]
    g0 = RNG.standard_normal((9, 6)).astype(dtype)

    def run(compiled):
        x = tg.tensor(x0, requires_grad=True)
        W = tg.tensor(w0, requires_grad=True)
        B = tg.tensor(b0, requires_grad=True)
        g = tg.tensor(g0)

        def f(x):
            h = (x @ W.t() + B[::2]).relu()
            (h * g).sum().backward()
            return h
        cf = tg.compile(f) if compiled else f
        with strict():
            for _ in range(3):
                x.grad = W.grad = B.grad = None
                h = cf(x)
        return [arr(h), arr(x.grad), arr(W.grad), arr(B.grad)], cf
    (e, _), (c, cf) = run(False), run(True)
    for a, b in zip(e, c):
        same(a, b)
    assert fused(cf) == [("mm", "add", "relu")]     # (a returned result can end a row)


def test_the_add_reading_a_returned_or_shared_product_is_not_fused():
    W = tg.tensor(RNG.standard_normal((4, 3)).astype(np.float32), requires_grad=True)
    b = tg.tensor(RNG.standard_normal(3).astype(np.float32), requires_grad=True)
    x = tg.tensor(RNG.standard_normal((5, 4)).astype(np.float32))

    def returned(x):
        p = x @ W
        return p, p + b

    def shared(x):
        p = x @ W
        return (p + b) * p

    def plain(x):
        return (x @ W + b) * 2
    for fn, want in ((returned, []), (shared, []), (plain, [("mm", "add")])):
        cf = tg.compile(fn)
        with strict():
            for _ in range(2):
                got = cf(x)
        ref = fn(x)
        for a, r in zip(got if isinstance(got, tuple) else [got],
                        ref if isinstance(ref, tuple) else [ref]):
            same(arr(a), arr(r))
        assert [g for g in fused(cf) if "mm" in g] == want, fn.__name__


def test_operands_it_does_not_cover_run_the_replaced_ops():
    """A bias of shape (1, m): the fused row answers E_FALLBACK before making anything,
    and the executor runs mm, add and relu, with eager's values. Assigning b.data (a new
    id behind the same object) records again, and a vector bias fuses again."""
    W = tg.tensor(RNG.standard_normal((4, 3)).astype(np.float32), requires_grad=True)
    b = tg.tensor(RNG.standard_normal(3).astype(np.float32), requires_grad=True)
    x = tg.tensor(RNG.standard_normal((5, 4)).astype(np.float32))

    def f(x):
        W.grad = b.grad = None
        y = (x @ W + b).relu()
        y.sum().backward()
        return y * 1
    cf = tg.compile(f)
    vec = arr(b)
    for n, shape in enumerate(((3,), (1, 3), (3,))):
        b.data = tg.tensor(vec.reshape(shape) * (n + 1))
        with strict():
            for _ in range(3):
                yc = arr(cf(x))
        gc_ = (arr(W.grad), arr(b.grad))
        ye = arr(f(x))
        same(yc, ye)
        same(gc_[0], arr(W.grad))
        same(gc_[1], arr(b.grad))
        assert arr(b.grad).shape == shape
        assert cf.stats == {"recordings": n + 1, "replays": 2 * (n + 1)}
    assert fused(cf) == [("mm", "add", "relu")] * 3     # (one plan per bias)


def test_a_product_that_is_not_two_matrices_falls_back_with_eager_errors():
    """A 3-D input recorded with a vector weight cannot fuse at run time (not two
    matrices): the replaced ops run, with their values and their errors."""
    W = tg.tensor(RNG.standard_normal((4, 3)).astype(np.float32), requires_grad=True)
    b = tg.tensor(RNG.standard_normal(3).astype(np.float32), requires_grad=True)

    def f(x):
        return x @ W + b
    cf = tg.compile(f)
    x3 = tg.tensor(RNG.standard_normal((2, 5, 4)).astype(np.float32))
    with strict():
        for _ in range(3):
            same(arr(cf(x3)), arr(f(x3)))
    assert fused(cf) == [("matmul", "add")]
    W.data = tg.tensor(RNG.standard_normal((5, 3)).astype(np.float32))
    with pytest.raises(RuntimeError) as want:
        f(x3)
    with pytest.raises(RuntimeError) as got:
        cf(x3)
    assert str(got.value) == str(want.value)


def test_a_sum_of_two_products_is_not_a_bias():
    """x @ W1 + x @ W2 (then relu): neither product is a bias, and neither is fused away
    from under the other; values and gradients stay the eager ones."""
    W1 = tg.tensor(RNG.standard_normal((4, 3)).astype(np.float32), requires_grad=True)
    W2 = tg.tensor(RNG.standard_normal((4, 3)).astype(np.float32), requires_grad=True)
    x = tg.tensor(RNG.standard_normal((5, 4)).astype(np.float32))

    def f(x):
        W1.grad = W2.grad = None
        y = (x @ W1 + x @ W2).relu()
        (y * y).sum().backward()
        return y * 1
    cf = tg.compile(f)
    with strict():
        for _ in range(3):
            yc = arr(cf(x))
    gc_ = arr(W1.grad), arr(W2.grad)
    same(yc, arr(f(x)))
    same(gc_[0], arr(W1.grad))
    same(gc_[1], arr(W2.grad))
    assert [g for g in fused(cf) if "mm" in g] == []
