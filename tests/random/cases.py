"""The random draws the golden file records: each case runs the same code on a module M
(torch, or tapegrad) after M.manual_seed(seed) and gives one tensor. The script
scripts/make_random_golden.py runs them with PyTorch (once per CPU build, see
tapegrad._front.sampling.cpu_path); tests/random/test_golden.py runs them with tapegrad
and compares bit for bit, without PyTorch."""
import hashlib
import warnings

import numpy as np

BIG = 40        # cases with more values than this are recorded by a hash of their bytes


def _linear(M):
    m = M.nn.Linear(5, 7)
    return M.cat([m.weight.detach().reshape(-1), m.bias.detach()])


def _lstm(M):
    m = M.nn.LSTMCell(3, 4)
    return M.cat([p.detach().reshape(-1) for p in m.parameters()])


def _embedding(M):
    return M.nn.Embedding(6, 3, padding_idx=1).weight.detach()


def _init(name, **kw):
    def run(M):
        t = M.empty(9, 7)
        getattr(M.nn.init, name)(t, **kw)
        return t
    return run


def _seq(*fns):
    """Several draws in a row, concatenated (the stream carries over between them)."""
    def run(M):
        return M.cat([f(M).reshape(-1).double() for f in fns])
    return run


# (name, seed, fn(M) -> tensor)
CASES = [
    ("rand_f32_1", 0, lambda M: M.rand(1)),
    ("rand_f32_33", 1, lambda M: M.rand(3, 11)),
    ("rand_f64_17", 2, lambda M: M.rand(17, dtype=M.float64)),
    ("rand_f32_5000", 3, lambda M: M.rand(5000)),
    ("randn_f32_5", 0, lambda M: M.randn(5)),
    ("randn_f32_16", 1, lambda M: M.randn(16)),
    ("randn_f32_17", 2, lambda M: M.randn(17)),
    ("randn_f32_33", 3, lambda M: M.randn(3, 11)),
    ("randn_f32_100003", 4, lambda M: M.randn(100003)),
    ("randn_f64_7", 5, lambda M: M.randn(7, dtype=M.float64)),
    ("randn_f64_40", 6, lambda M: M.randn(40, dtype=M.float64)),
    ("randn_cached_sample", 7, _seq(lambda M: M.randn(3), lambda M: M.randn(1),
                                    lambda M: M.randn(20))),
    ("normal__f32_9", 8, lambda M: M.empty(9).normal_(0.25, 3.5)),
    ("normal__f32_40", 9, lambda M: M.empty(40).normal_(-1.5, 0.75)),
    ("normal__f64_40", 10, lambda M: M.empty(40, dtype=M.float64).normal_(-1.5, 0.75)),
    ("normal__transposed", 11, lambda M: M.empty(6, 4).t().normal_(0.5, 2.0)),
    ("uniform__f32", 12, lambda M: M.empty(40).uniform_(-0.37, 0.81)),
    ("uniform__f64", 13, lambda M: M.empty(40, dtype=M.float64).uniform_(-0.37, 0.81)),
    ("uniform__strided", 14, lambda M: M.zeros(5, 9)[:, ::2].uniform_(-2.0, 3.0)),
    ("rand_like_transposed", 15, lambda M: M.rand_like(M.empty(7, 3).t())),
    ("randn_like_transposed", 16, lambda M: M.randn_like(M.empty(9, 4).t())),
    ("randint_small", 17, lambda M: M.randint(-5, 37, (40,))),
    ("randint_wide", 18, lambda M: M.randint(0, 2 ** 40, (20,))),
    ("randint_full", 19, lambda M: M.randint(-2 ** 63, 2 ** 63 - 1, (20,))),
    ("randint_f32", 20, lambda M: M.randint(3, 90, (20,), dtype=M.float32)),
    ("randint_like", 21, lambda M: M.randint_like(M.empty(4, 5), 2, 9)),
    ("randperm_10", 22, lambda M: M.randperm(10)),
    ("randperm_1000", 23, lambda M: M.randperm(1000)),
    ("randperm_f64", 24, lambda M: M.randperm(30, dtype=M.float64)),
    ("random__i64", 25, lambda M: M.empty(10, dtype=M.int64).random_()),
    ("random__f32", 26, lambda M: M.empty(10).random_()),
    ("random__f64_to", 27, lambda M: M.empty(10, dtype=M.float64).random_(1000)),
    ("random__from_none", 28, lambda M: M.empty(10, dtype=M.int64).random_(7, None)),
    ("random__bool", 29, lambda M: M.empty(10, dtype=M.bool).random_()),
    ("bernoulli__scalar", 30, lambda M: M.empty(40).bernoulli_(0.3)),
    ("bernoulli__int64", 31, lambda M: M.empty(20, dtype=M.int64).bernoulli_(0.6)),
    ("bernoulli_p_f32", 32, lambda M: M.bernoulli(M.linspace(0, 1, 40))),
    ("bernoulli_p_f64", 33, lambda M: M.bernoulli(M.linspace(0, 1, 40, dtype=M.float64))),
    ("bernoulli__broadcast", 34, lambda M: M.zeros(4, 3).bernoulli_(M.tensor([0.2, 0.5, 0.9]))),
    ("exponential_", 35, lambda M: M.empty(20).exponential_(2.5)),
    ("geometric__i64", 36, lambda M: M.empty(20, dtype=M.int64).geometric_(0.2)),
    ("cauchy__f64", 37, lambda M: M.empty(20, dtype=M.float64).cauchy_(0.5, 2.0)),
    ("cauchy__f32", 38, lambda M: M.empty(20).cauchy_(-0.5, 0.25)),
    ("log_normal__f64", 39, lambda M: M.empty(20, dtype=M.float64).log_normal_(0.2, 0.5)),
    ("normal_tensor_mean", 40, lambda M: M.normal(M.arange(20.0), 2.0)),
    ("normal_tensor_std", 41, lambda M: M.normal(1.5, M.arange(20.0))),
    ("normal_tensors", 42, lambda M: M.normal(M.arange(4.0).reshape(4, 1), M.ones(5))),
    ("multinomial_one", 43, lambda M: M.multinomial(M.tensor([0.1, 0.5, 0.2, 0.2]), 1)),
    ("multinomial_no_replacement", 44,
     lambda M: M.multinomial(M.tensor([0.1, 0.5, 0.2, 0.2, 3.0]), 4)),
    ("multinomial_replacement", 45,
     lambda M: M.multinomial(M.tensor([[0.1, 0.5, 0.2, 0.2], [1.0, 0.0, 2.0, 1.0]]), 12,
                             True)),
    ("poisson", 46, lambda M: M.poisson(M.tensor([0.0, 0.5, 3.0, 9.9, 10.0, 25.0, 1e3, 1e6]))),
    ("dropout_f32", 47, lambda M: M.nn.functional.dropout(M.ones(50), 0.15)),
    ("dropout_f64", 48, lambda M: M.nn.functional.dropout(M.ones(7, 5, dtype=M.float64), 0.5)),
    ("generator", 49, lambda M: M.randn(20, generator=M.Generator().manual_seed(123))),
    ("linear", 50, _linear),
    ("lstm_cell", 51, _lstm),
    ("embedding", 52, _embedding),
    ("kaiming_normal_", 53, _init("kaiming_normal_", nonlinearity="relu")),
    ("xavier_uniform_", 54, _init("xavier_uniform_", gain=1.5)),
    ("trunc_normal_", 55, _init("trunc_normal_", std=0.02)),
    ("rng_state", 56, lambda M: (M.randn(3), M.get_rng_state())[1]),
]


def record(t):
    """A case's result as JSON-able data: dtype, shape, and the values (bit-exact once
    converted to the dtype) or, past BIG values, the SHA-256 of the little-endian bytes
    and the first values."""
    a = np.ascontiguousarray(t.detach().numpy())
    name = {"float32": "float32", "float64": "float64", "int64": "int64", "bool": "bool",
            "uint8": "int64"}[a.dtype.name]
    if a.dtype == np.uint8:
        a = a.astype(np.int64)
    out = {"dtype": name, "shape": list(a.shape)}
    flat = a.reshape(-1)
    if flat.size > BIG:
        out["sha256"] = hashlib.sha256(flat.astype(flat.dtype.newbyteorder("<")).tobytes()
                                       ).hexdigest()
        flat = flat[:8]
    out["values"] = _numbers(flat)
    return out


def _numbers(a):
    """Values for JSON: a float32 by its shortest decimal form (which converts back to
    the same float32), anything else as Python holds it."""
    if a.dtype == np.float32:
        return [float(np.format_float_positional(v, unique=True, trim="-")) for v in a]
    return [v.item() for v in a]


def run(M, name, seed, fn):
    """One case on module M: its record, and three rand() values drawn after it (the
    state the case leaves)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        M.manual_seed(seed)
        rec = record(fn(M))
        rec["after"] = _numbers(M.rand(3).numpy())
    return rec
