"""tapegrad's draws next to PyTorch's in the same process: several seeds, shapes and
dtypes, sizes on both sides of PyTorch's switches (normal's 16-value blocks, randint's
2**28 span, multinomial with and without replacement), every value bit for bit and the
stream left behind equal."""
import warnings

import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")

SEEDS = [0, 1, 2024]
SIZES = [1, 5, 15, 16, 17, 31, 100, 4099]


def _np(t):
    return np.asarray(t.detach().numpy())


def _check(fn, seed):
    """fn(M) under M.manual_seed(seed) in both libraries: same dtype, shape and bits,
    and the next draws equal too."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(seed)
        want = _np(fn(torch))
        tg.manual_seed(seed)
        got = _np(fn(tg))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want, strict=True)
    np.testing.assert_array_equal(_np(tg.rand(4)), _np(torch.rand(4)))


def _dt(M, name):
    return getattr(M, name)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_rand_randn(seed, n, dtype):
    _check(lambda M: M.rand(n, dtype=_dt(M, dtype)), seed)
    _check(lambda M: M.randn(n, dtype=_dt(M, dtype)), seed)
    _check(lambda M: M.empty(n, dtype=_dt(M, dtype)).normal_(0.5, 1.25), seed)
    _check(lambda M: M.empty(n, dtype=_dt(M, dtype)).uniform_(-0.3, 0.7), seed)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", [(3, 7), (2, 3, 4), (0, 5), ()])
def test_shapes_and_views(seed, shape):
    _check(lambda M: M.rand(shape), seed)
    _check(lambda M: M.randn(*shape) if shape else M.randn(shape), seed)
    _check(lambda M: M.empty(8, 5).t().normal_(), seed)            # not contiguous
    _check(lambda M: M.zeros(6, 10)[:, 1::3].uniform_(), seed)      # strided
    _check(lambda M: M.rand_like(M.empty(5, 4).t()), seed)          # layout kept
    _check(lambda M: M.randn_like(M.empty(9, 4).t(), dtype=M.float64), seed)


_RANGES = [(0, 10), (-7, 2 ** 20), (0, 2 ** 28), (-5, 2 ** 40)]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("low,high,dtype", [
    *[(lo, hi, dt) for lo, hi in _RANGES for dt in ("int64", "float32", "float64")],
    (-2 ** 63, 2 ** 63 - 1, "int64"), (0, 2, "bool")])
def test_randint(seed, low, high, dtype):
    _check(lambda M: M.randint(low, high, (23,), dtype=_dt(M, dtype)), seed)
    _check(lambda M: M.randint_like(M.empty(3, 4, dtype=_dt(M, dtype)), low, high), seed)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", [0, 1, 2, 100, 5000])
@pytest.mark.parametrize("dtype", ["int64", "float64"])
def test_randperm(seed, n, dtype):
    _check(lambda M: M.randperm(n, dtype=_dt(M, dtype)), seed)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", ["int64", "float32", "float64", "bool"])
def test_random_(seed, dtype):
    _check(lambda M: M.empty(12, dtype=_dt(M, dtype)).random_(), seed)
    if dtype != "bool":
        _check(lambda M: M.empty(12, dtype=_dt(M, dtype)).random_(100), seed)
        _check(lambda M: M.empty(12, dtype=_dt(M, dtype)).random_(-3, None), seed)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_distributions(seed, dtype):
    def e(M):
        return M.empty(25, dtype=_dt(M, dtype))
    _check(lambda M: e(M).bernoulli_(0.35), seed)
    _check(lambda M: M.bernoulli(M.rand(25, dtype=_dt(M, dtype))), seed)
    _check(lambda M: e(M).exponential_(1.5), seed)
    _check(lambda M: e(M).geometric_(0.3), seed)
    _check(lambda M: e(M).cauchy_(0.5, 2.0), seed)
    _check(lambda M: e(M).log_normal_(0.1, 0.4), seed)
    _check(lambda M: M.poisson(M.rand(25, dtype=_dt(M, dtype)) * 30), seed)
    _check(lambda M: M.normal(M.arange(25.0, dtype=_dt(M, dtype)), 0.5), seed)
    _check(lambda M: M.normal(0.5, M.arange(25.0, dtype=_dt(M, dtype))), seed)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("samples,replacement", [(1, False), (3, False), (1, True),
                                                 (40, True)])
def test_multinomial(seed, samples, replacement):
    _check(lambda M: M.multinomial(M.tensor([0.1, 2.0, 0.5, 0.7, 1.2]), samples,
                                   replacement), seed)
    _check(lambda M: M.multinomial(M.rand(4, 7, dtype=M.float64), samples, replacement),
           seed)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dropout_masks(seed, p, dtype):
    _check(lambda M: M.nn.functional.dropout(M.ones(13, 9, dtype=_dt(M, dtype)), p), seed)


_LAYOUTS = {"transposed": lambda t: t.transpose(0, 2),
            "permuted": lambda t: t.permute(1, 2, 0),
            "strided transposed": lambda t: t[:, ::2].transpose(1, 2),
            "sliced and permuted": lambda t: t[..., 1:4].permute(2, 0, 1)}


@pytest.mark.parametrize("layout", list(_LAYOUTS))
@pytest.mark.parametrize("draw", ["dropout", "rand_like"])
def test_masks_and_like_draws_follow_the_inputs_memory_order(layout, draw):
    """PyTorch's noise tensor is empty_like(input): the input's layout (dense strides in
    its order when it has gaps), filled in memory order."""
    key = _LAYOUTS[layout]

    def fn(M):
        x = key(M.arange(60.0).reshape(3, 4, 5))
        return M.nn.functional.dropout(x, 0.4) if draw == "dropout" else M.rand_like(x)
    _check(fn, 0)


def test_generators_are_independent_of_the_default_stream():
    def draw(M):
        g = M.Generator().manual_seed(7)
        a = M.randn(20, generator=g)
        M.rand(3)
        return M.cat([a, M.rand(5, generator=g), M.randperm(6, generator=g).float()])
    _check(draw, 3)


def test_rng_state_bytes_are_pytorchs():
    torch.manual_seed(11)
    tg.manual_seed(11)
    torch.randn(3)
    tg.randn(3)                 # (a Box-Muller sample is cached)
    np.testing.assert_array_equal(_np(tg.get_rng_state()),
                                  _np(torch.get_rng_state()).astype(np.int64))
    # and PyTorch's state, loaded into tapegrad, continues PyTorch's stream
    tg.set_rng_state(tg.tensor(_np(torch.get_rng_state()).astype(np.int64)))
    np.testing.assert_array_equal(_np(tg.randn(5)), _np(torch.randn(5)))
