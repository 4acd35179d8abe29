"""Bad arguments to the random functions get PyTorch's exception type and message (the
list below was read off PyTorch 2.13; where PyTorch is installed each case is also run
there), and never reach a kernel: no crash, no hang, and no draw before the refusal."""
import math
import warnings

import numpy as np
import pytest

import tapegrad as tg

# (id, call(M), exception type, message start); M is tapegrad or torch
CASES = [
    ("rand_negative", lambda M: M.rand(-1), RuntimeError,
     "Trying to create tensor with negative dimension -1: [-1]"),
    ("rand_overflow", lambda M: M.rand(2 ** 62, 2 ** 62), RuntimeError,
     "Storage size calculation overflowed"),
    ("rand_int_dtype", lambda M: M.rand(2, dtype=M.int64), NotImplementedError,
     "\"check_uniform_bounds\" not implemented for 'Long'"),
    ("randn_int_dtype", lambda M: M.randn(2, dtype=M.int64), NotImplementedError,
     "\"normal_kernel_cpu\" not implemented for 'Long'"),
    ("rand_like_int", lambda M: M.rand_like(M.ones(2, dtype=M.int64)), NotImplementedError,
     "\"check_uniform_bounds\" not implemented for 'Long'"),
    ("randint_empty_range", lambda M: M.randint(5, 3, (2,)), RuntimeError,
     "random_ expects 'from' to be less than 'to', but got from=5 >= to=3"),
    ("randint_overflow", lambda M: M.randint(0, 2 ** 63, (2,)), ValueError,
     "Overflow when unpacking long long"),
    ("randint_bool_range", lambda M: M.randint(0, 10, (2,), dtype=M.bool), RuntimeError,
     "to - 1 is out of bounds for bool"),
    ("randint_size_not_tuple", lambda M: M.randint(5, size=3), TypeError, "randint"),
    ("randint_requires_grad", lambda M: M.randint(0, 9, (2,), requires_grad=True),
     RuntimeError, "Only Tensors of floating point and complex dtype can require gradients"),
    ("randperm_negative", lambda M: M.randperm(-1), RuntimeError,
     "Trying to create tensor with negative dimension -1: [-1]"),
    ("randperm_bool", lambda M: M.randperm(5, dtype=M.bool), NotImplementedError,
     "\"randperm\" not implemented for 'Bool'"),
    ("randperm_float_too_long", lambda M: M.randperm(2 ** 24 + 2, dtype=M.float32),
     RuntimeError, "n cannot be greater than 2^24+1 for Float type."),
    ("randperm_overflow", lambda M: M.randperm(2 ** 62), RuntimeError,
     "Storage size calculation overflowed"),
    ("randperm_float_n", lambda M: M.randperm(5.0), TypeError, "randperm()"),
    ("multinomial_zero_samples", lambda M: M.multinomial(M.tensor([0.2, 0.8]), 0),
     RuntimeError, "cannot sample n_sample <= 0 samples"),
    ("multinomial_negative_samples", lambda M: M.multinomial(M.tensor([0.2, 0.8]), -1),
     RuntimeError, "cannot sample n_sample <= 0 samples"),
    ("multinomial_too_few", lambda M: M.multinomial(M.tensor([0.2, 0.8]), 3), RuntimeError,
     "cannot sample n_sample > prob_dist.size(-1) samples without replacement"),
    ("multinomial_negative", lambda M: M.multinomial(M.tensor([-0.1, 1.0]), 1), RuntimeError,
     "probability tensor contains either `inf`, `nan` or element < 0"),
    ("multinomial_nan", lambda M: M.multinomial(M.tensor([math.nan, 1.0]), 1), RuntimeError,
     "probability tensor contains either `inf`, `nan` or element < 0"),
    ("multinomial_inf", lambda M: M.multinomial(M.tensor([math.inf, 1.0]), 1), RuntimeError,
     "probability tensor contains either `inf`, `nan` or element < 0"),
    ("multinomial_zeros", lambda M: M.multinomial(M.zeros(3), 1), RuntimeError,
     "invalid multinomial distribution (sum of probabilities <= 0)"),
    ("multinomial_rep_negative", lambda M: M.multinomial(M.tensor([-0.1, 1.0]), 2, True),
     RuntimeError, "invalid multinomial distribution (encountering probability entry < 0)"),
    ("multinomial_rep_nan", lambda M: M.multinomial(M.tensor([math.nan, 1.0]), 2, True),
     RuntimeError, "invalid multinomial distribution (encountering probability entry < 0)"),
    ("multinomial_rep_inf", lambda M: M.multinomial(M.tensor([math.inf, 1.0]), 2, True),
     RuntimeError, "invalid multinomial distribution (encountering probability entry = "
     "infinity or NaN)"),
    ("multinomial_rep_zero_row",
     lambda M: M.multinomial(M.tensor([[1.0, 1.0], [0.0, 0.0]]), 2, True), RuntimeError,
     "invalid multinomial distribution (sum of probabilities <= 0)"),
    ("multinomial_no_categories", lambda M: M.multinomial(M.ones(0), 1, True), RuntimeError,
     "aminmax(): cannot compute aminmax over an empty dimension"),
    ("multinomial_0d", lambda M: M.multinomial(M.tensor(1.0), 1), RuntimeError,
     "prob_dist must be 1 or 2 dim"),
    ("multinomial_3d", lambda M: M.multinomial(M.ones(2, 2, 2), 1), RuntimeError,
     "prob_dist must be 1 or 2 dim"),
    ("multinomial_int", lambda M: M.multinomial(M.tensor([1, 2]), 1), RuntimeError,
     "multinomial only supports floating-point dtypes for input, got: Long"),
    ("multinomial_categories", lambda M: M.multinomial(M.ones(2 ** 24 + 1), 1), RuntimeError,
     "number of categories cannot exceed 2^24"),
    ("bernoulli_p_out_of_range", lambda M: M.bernoulli(M.zeros(2), p=2.0), RuntimeError,
     "bernoulli_ expects p to be in [0, 1], but got p=2"),
    ("bernoulli_tensor_p_out_of_range", lambda M: M.bernoulli(M.tensor([0.2, 1.5])),
     RuntimeError, "Expected p_in >= 0 && p_in <= 1 to be true, but got false."),
    ("bernoulli_tensor_p_nan", lambda M: M.bernoulli(M.tensor([math.nan, 0.2])),
     RuntimeError, "Expected p_in >= 0 && p_in <= 1 to be true, but got false."),
    ("bernoulli_int_p", lambda M: M.bernoulli(M.tensor([1, 0])), NotImplementedError,
     "\"bernoulli_tensor_cpu_p_\" not implemented for 'Long'"),
    ("bernoulli__negative", lambda M: M.zeros(2).bernoulli_(-0.1), RuntimeError,
     "bernoulli_ expects p to be in [0, 1], but got p=-0.1"),
    ("poisson_negative", lambda M: M.poisson(M.tensor([1.0, -1.0])), RuntimeError,
     "invalid Poisson rate, expected rate to be non-negative"),
    ("poisson_nan", lambda M: M.poisson(M.tensor([math.nan])), RuntimeError,
     "invalid Poisson rate, expected rate to be non-negative"),
    ("poisson_int", lambda M: M.poisson(M.tensor([1, 2])), NotImplementedError,
     "\"poisson_cpu\" not implemented for 'Long'"),
    ("normal_negative_std", lambda M: M.normal(0.0, -1.0, (2,)), RuntimeError,
     "normal expects std >= 0.0, but found std -1"),
    ("normal_negative_std_tensor", lambda M: M.normal(M.zeros(3), -M.ones(3)), RuntimeError,
     "normal expects all elements of std >= 0.0"),
    ("normal_shapes", lambda M: M.normal(M.zeros(2), M.ones(3)), RuntimeError,
     "The size of tensor a (2) must match the size of tensor b (3) at non-singleton "
     "dimension 0"),
    ("normal_int_mean", lambda M: M.normal(M.zeros(3, dtype=M.int64), 1.0),
     NotImplementedError, "\"normal_kernel_cpu\" not implemented for 'Long'"),
    ("normal_no_size", lambda M: M.normal(0.0, 1.0), TypeError, "normal()"),
    ("uniform__reversed", lambda M: M.zeros(2).uniform_(1, 0), RuntimeError,
     "uniform_ expects to return a [from, to) range, but found from=1 > to=0"),
    ("uniform__inf", lambda M: M.zeros(2).uniform_(0, math.inf), RuntimeError,
     "to is out of bounds for float"),
    ("uniform__nan", lambda M: M.zeros(2, dtype=M.float64).uniform_(math.nan, 1),
     RuntimeError, "from is out of bounds for double"),
    ("uniform__span", lambda M: M.zeros(2).uniform_(-3e38, 3e38), RuntimeError,
     "uniform_ expects to-from <= std::numeric_limits<Float>::max(), but found to=3e+38 "
     "and from=-3e+38 which result in to-from to exceed the limit"),
    ("uniform__keyword", lambda M: M.zeros(2).uniform_(a=1), TypeError,
     "uniform_() got an unexpected keyword argument 'a'"),
    ("normal__negative_std", lambda M: M.zeros(2).normal_(0, -1), RuntimeError,
     "normal expects std >= 0.0, but found std -1"),
    ("normal__nan_std", lambda M: M.zeros(2).normal_(0, math.nan), RuntimeError,
     "normal expects std >= 0.0, but found std nan"),
    ("exponential__zero", lambda M: M.zeros(2).exponential_(0), RuntimeError,
     "exponential_ expects lambda > 0.0, but found lambda=0"),
    ("exponential__int", lambda M: M.zeros(2, dtype=M.int64).exponential_(), RuntimeError,
     "Exponential distribution is a continuous probability distribution. dtype must be a "
     "floating point but you specified Long"),
    ("geometric__one", lambda M: M.zeros(2).geometric_(1), RuntimeError,
     "geometric_ expects p to be in (0, 1), but got p=1"),
    ("geometric__bool", lambda M: M.zeros(2, dtype=M.bool).geometric_(0.5),
     NotImplementedError, "\"geometric_cpu\" not implemented for 'Bool'"),
    ("cauchy__sigma", lambda M: M.zeros(2).cauchy_(0, 0), RuntimeError,
     "cauchy_ expects sigma > 0.0, but found sigma=0"),
    ("cauchy__int", lambda M: M.zeros(2, dtype=M.int64).cauchy_(), RuntimeError,
     "Cauchy distribution is a continuous probability distribution. dtype must be a "
     "floating point but you specified long int"),
    ("log_normal__std", lambda M: M.zeros(2).log_normal_(0, 0), RuntimeError,
     "log_normal_ expects std > 0.0, but found std=0"),
    ("log_normal__int", lambda M: M.zeros(2, dtype=M.int64).log_normal_(), NotImplementedError,
     "\"log_normal_cpu\" not implemented for 'Long'"),
    ("random__empty_range", lambda M: M.zeros(2).random_(5, 3), RuntimeError,
     "random_ expects 'from' to be less than 'to', but got from=5 >= to=3"),
    ("random__zero", lambda M: M.zeros(2).random_(0), RuntimeError,
     "random_ expects 'from' to be less than 'to', but got from=0 >= to=0"),
    ("random__bool_from", lambda M: M.zeros(2, dtype=M.bool).random_(-1, 2), RuntimeError,
     "from is out of bounds for bool"),
    ("random__overflow", lambda M: M.zeros(2, dtype=M.int64).random_(0, 2 ** 63), ValueError,
     "Overflow when unpacking long long"),
    ("random__float_arg", lambda M: M.zeros(2).random_(1.5), TypeError, "random_()"),
    ("random__from_only", lambda M: M.zeros(2).random_(**{"from": 2}), TypeError,
     "random_()"),
    ("leaf_in_place", lambda M: M.zeros(2, requires_grad=True).uniform_(), RuntimeError,
     "a leaf Variable that requires grad is being used in an in-place operation."),
    ("expanded_in_place", lambda M: M.zeros(1, 3).expand(2, 3).normal_(), RuntimeError,
     "unsupported operation: more than one element of the written-to tensor refers to a "
     "single memory location. Please clone() the tensor before performing the operation."),
    ("dropout_p", lambda M: M.nn.functional.dropout(M.ones(3), 1.5), ValueError,
     "dropout probability has to be between 0 and 1, but got 1.5"),
    ("dropout_int", lambda M: M.nn.functional.dropout(M.ones(3, dtype=M.int64), 0.5),
     RuntimeError, "result type Float can't be cast to the desired output type Long"),
]


def _raises(M, call, exc, msg):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(exc) as info:
            call(M)
    assert str(info.value).startswith(msg), str(info.value)


# PyTorch refuses these at a value after the first (each value is checked as it is
# reached): the draws before it are made (test_partial_draws_before_a_bad_row...)
_DRAWS_FIRST = {"bernoulli_tensor_p_out_of_range", "multinomial_rep_zero_row",
                "poisson_negative"}


@pytest.mark.parametrize("name,call,exc,msg", CASES, ids=[c[0] for c in CASES])
def test_tapegrad(name, call, exc, msg):
    """The error, and no draw before it (the default stream is where it was)."""
    tg.manual_seed(0)
    _raises(tg, call, exc, msg)
    if name not in _DRAWS_FIRST:
        assert tg.equal(tg.rand(3), tg.rand(3, generator=tg.Generator().manual_seed(0)))


@pytest.mark.parametrize("call,exc,msg", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_pytorch_agrees(call, exc, msg):
    torch = pytest.importorskip("torch")
    _raises(torch, call, exc, msg)


def test_partial_draws_before_a_bad_row_match_pytorch():
    """PyTorch checks multinomial's rows, bernoulli's probabilities and poisson's rates
    as it reaches them: the draws before the bad one are made, the stream moves on."""
    torch = pytest.importorskip("torch")
    cases = [lambda M: M.multinomial(M.tensor([[1.0, 2.0], [3.0, 1.0], [-1.0, 1.0]]), 5,
                                     True),
             lambda M: M.bernoulli(M.tensor([0.5, 0.2, 0.3, 2.0])),
             lambda M: M.poisson(M.tensor([1.0, 20.0, -1.0]))]
    for call in cases:
        for M in (tg, torch):
            M.manual_seed(5)
            with pytest.raises(RuntimeError):
                call(M)
        np.testing.assert_array_equal(tg.rand(6).numpy(), torch.rand(6).numpy())


def test_huge_poisson_rates_end():
    """A rate past int64 gives PyTorch's INT64_MIN, never a hang."""
    out = tg.poisson(tg.tensor([math.inf, 1e30], dtype=tg.float64))
    assert out.tolist() == [-2.0 ** 63] * 2
