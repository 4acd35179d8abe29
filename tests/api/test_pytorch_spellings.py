"""PyTorch spellings training scripts use: Tensor.cpu,
new_zeros/new_ones/new_full/new_empty/new_tensor, copy_, uniform_, normal_, add/sub with
alpha, repeat; F.silu, elu, normalize, cosine_similarity, kl_div, pad; nn.SiLU, ELU,
ParameterList. Values and gradients against finite differences (float64) and PyTorch."""
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn
from tapegrad.nn import functional as F
from tapegrad.testing import gradcheck
from tests.helpers import F64, leaf, numpy_of, torch_leaf, values


def assert_matches_torch(tg_fn, torch_fn, *arrays, atol=1e-10):
    """tg_fn and torch_fn on float64 leaves holding arrays: equal values, and equal
    gradients of sum(out * w) for fixed random weights w."""
    torch = pytest.importorskip("torch")
    tg_in = [leaf(a) for a in arrays]
    th_in = [torch_leaf(torch, a) for a in arrays]
    out, ref = tg_fn(*tg_in), torch_fn(*th_in)
    np.testing.assert_allclose(numpy_of(out), ref.detach().numpy(), rtol=1e-10, atol=atol)
    w = np.random.default_rng(7).standard_normal(ref.shape)
    (out * tg.tensor(w, dtype=F64)).sum().backward()
    (ref * torch.tensor(w)).sum().backward()
    for a, b in zip(tg_in, th_in):
        expected = np.zeros(b.shape) if b.grad is None else b.grad.numpy()
        got = np.zeros(a.shape) if a.grad is None else numpy_of(a.grad)
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=atol)


# ------------------------------------------------------------------ cpu, new_*
def test_cpu_returns_the_tensor_itself():
    x = tg.ones(2, requires_grad=True)
    assert x.cpu() is x


@pytest.mark.parametrize("name, fill", [("new_zeros", 0.0), ("new_ones", 1.0),
                                        ("new_empty", None)])
def test_new_filled_keep_dtype_and_never_require_grad(name, fill):
    src = tg.ones(2, dtype=F64, requires_grad=True)
    for args in ((2, 3), ((2, 3),), ([2, 3],)):
        t = getattr(src, name)(*args)
        assert t.shape == (2, 3) and t.dtype is F64
        assert not t.requires_grad and t.is_leaf and t.grad_fn is None
        if fill is not None:
            assert (numpy_of(t) == fill).all()
    assert getattr(src, name)(()).shape == ()
    assert getattr(src, name)(2, dtype=tg.int64).dtype is tg.int64
    made = getattr(src, name)(2, requires_grad=True)
    assert made.requires_grad and made.is_leaf
    with pytest.raises(RuntimeError, match="floating point"):
        getattr(src, name)(2, dtype=tg.int64, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"negative dimension -1: \[-1\]"):
        getattr(src, name)(-1)
    with pytest.raises(TypeError, match=name):
        getattr(src, name)(2.5)
    with pytest.raises(RuntimeError, match="not compiled with CUDA enabled: tapegrad runs on "
                                           "the CPU only"):
        getattr(src, name)(2, device="cuda")


def test_new_full_and_new_tensor():
    src = tg.ones(2, dtype=F64, requires_grad=True)
    f = src.new_full((2,), 7)
    assert f.dtype is F64 and f.tolist() == [7.0, 7.0] and not f.requires_grad
    assert tg.ones(1, dtype=tg.int64).new_full([2], 7.5).tolist() == [7, 7]
    with pytest.raises(TypeError, match=r"new_full\(\): argument 'size' .* not int"):
        src.new_full(2, 7)
    t = src.new_tensor([1, 2])
    assert t.dtype is F64 and t.tolist() == [1.0, 2.0] and not t.requires_grad
    assert src.new_tensor([1, 2], dtype=tg.int64).dtype is tg.int64
    assert tg.ones(1, dtype=tg.int64).new_tensor([1.5, 2.7]).tolist() == [1, 2]
    with pytest.warns(UserWarning, match="sourceTensor.detach"):
        copied = src.new_tensor(src)
    assert copied.is_leaf and not copied.requires_grad and tg.equal(copied, src)
    with pytest.warns(UserWarning):
        assert src.new_tensor(src, requires_grad=True).requires_grad


def test_new_factories_match_torch_dtypes():
    torch = pytest.importorskip("torch")
    for dtype, tdtype in ((tg.float32, torch.float32), (F64, torch.float64),
                          (tg.int64, torch.int64)):
        src, ref = tg.ones(1, dtype=dtype), torch.ones(1, dtype=tdtype)
        for name, args in (("new_zeros", (2,)), ("new_ones", (2,)), ("new_empty", (2,)),
                           ("new_full", ((2,), 3)), ("new_tensor", ([1, 2],))):
            assert str(getattr(src, name)(*args).dtype).split(".")[1] == \
                str(getattr(ref, name)(*args).dtype).split(".")[1], (dtype, name)


# ------------------------------------------------------------------ copy_
def test_copy_broadcasts_converts_and_bumps_the_version_once():
    x = tg.zeros(2, 3)
    v = x._version
    assert x.copy_(tg.tensor([1.0, 2.0, 3.0], dtype=F64)) is x
    assert x._version == v + 1 and x.dtype is tg.float32
    assert x.tolist() == [[1.0, 2.0, 3.0]] * 2
    i = tg.zeros(3, dtype=tg.int64).copy_(tg.tensor([1.7, -1.7, 2.5]))
    assert i.tolist() == [1, -1, 2]                         # truncated, as PyTorch
    b = tg.zeros(3, dtype=tg.bool).copy_(tg.tensor([0.0, 0.3, -2.0]))
    assert b.tolist() == [False, True, True]
    assert tg.zeros(2, dtype=F64).copy_(0.1).tolist() == [0.1, 0.1]     # a Python scalar
    t = tg.zeros(2, 3).t()                                  # a non-contiguous target
    t.copy_(tg.arange(6.0).reshape(3, 2))
    assert t.tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    sq = tg.arange(4.0).reshape(2, 2)
    sq.copy_(sq.t())                                        # reads what it overwrites
    assert sq.tolist() == [[0.0, 2.0], [1.0, 3.0]]
    m = tg.tensor([-0.0, 1.0])
    assert np.signbit(numpy_of(tg.zeros(2).copy_(m))[0])          # -0.0 copied, not added


def test_copy_errors():
    x = tg.zeros(2, 3)
    with pytest.raises(RuntimeError, match=r"size of tensor a \(3\) must match the size of "
                                           r"tensor b \(4\) at non-singleton dimension 1"):
        x.copy_(tg.ones(4))
    with pytest.raises(RuntimeError, match=r"output with shape \[2, 3\] doesn't match the "
                                           r"broadcast shape \[1, 2, 3\]"):
        x.copy_(tg.ones(1, 2, 3))
    with pytest.raises(TypeError, match=r"copy_\(\): argument 'src' .* not list"):
        x.copy_([1.0])
    p = tg.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used "
                                           "in an in-place operation"):
        p.copy_(tg.ones(3))
    assert p._version == 0
    with tg.no_grad():                                      # how scripts set weights
        p.copy_(tg.arange(3.0))
    assert p.is_leaf and p.requires_grad and p._version == 1
    assert numpy_of(p).tolist() == [0.0, 1.0, 2.0]


def test_copy_gradient_reaches_src_not_the_old_values():
    def fn(old, src):
        y = old * 1.0
        return y.copy_(src) * 2.0
    assert gradcheck(fn, (leaf(values(0, 2, 3)), leaf(values(1, 3))))
    y = tg.zeros(3)
    s = tg.ones(1, requires_grad=True)
    y.copy_(s)
    assert y.requires_grad and not y.is_leaf
    y.sum().backward()
    assert s.grad.tolist() == [3.0]
    s32 = tg.tensor([1.0, 2.0], requires_grad=True)       # through the dtype conversion
    f = tg.zeros(2, dtype=F64).copy_(s32)
    (f * tg.tensor([3.0, 4.0], dtype=F64)).sum().backward()
    assert s32.grad.dtype is tg.float32 and s32.grad.tolist() == [3.0, 4.0]


def test_copy_matches_torch():
    def copy_into_product(x, s):
        return (x * 2).copy_(s) * x
    assert_matches_torch(copy_into_product, copy_into_product, values(2, 2, 3), values(3, 1, 3))


# ------------------------------------------------------------------ uniform_ / normal_
def test_uniform_and_normal_draw_what_nn_init_draws():
    for dtype in (tg.float32, F64):
        tg.manual_seed(3)
        a = tg.empty(40, 30, dtype=dtype).uniform_(-1, 2)
        tg.manual_seed(3)
        assert tg.equal(a, nn.init.uniform_(tg.empty(40, 30, dtype=dtype), -1, 2))
        assert -1 <= numpy_of(a).min() and numpy_of(a).max() < 2
        tg.manual_seed(4)
        n = tg.empty(40, 30, dtype=dtype).normal_(1.0, 2.0)
        tg.manual_seed(4)
        assert tg.equal(n, nn.init.normal_(tg.empty(40, 30, dtype=dtype), 1.0, 2.0))
        assert abs(numpy_of(n).mean() - 1.0) < 0.15 and abs(numpy_of(n).std() - 2.0) < 0.15
    x = tg.zeros(3)
    x.uniform_(**{"from": 5, "to": 6})                      # PyTorch's keyword names
    assert ((numpy_of(x) >= 5) & (numpy_of(x) < 6)).all() and x._version == 1
    assert x.normal_() is x and x._version == 2


def test_uniform_and_normal_errors():
    x = tg.zeros(3)
    with pytest.raises(RuntimeError, match=r"uniform_ expects to return a \[from, to\) range, "
                                           r"but found from=1 > to=0"):
        x.uniform_(1, 0)
    with pytest.raises(RuntimeError, match="normal expects std >= 0.0, but found std -1"):
        x.normal_(0, -1)
    with pytest.raises(RuntimeError, match="^from is out of bounds for float$"):
        x.uniform_(float("-inf"), 0)
    with pytest.raises(TypeError, match=r"uniform_\(\) got an unexpected keyword argument 'a'"):
        x.uniform_(a=0, b=1)                                # (as in PyTorch: from=, to=)
    with pytest.raises(NotImplementedError, match="check_uniform_bounds.* not implemented for "
                                                  "'Long'"):
        tg.zeros(3, dtype=tg.int64).uniform_()
    with pytest.raises(NotImplementedError, match="normal_kernel_cpu.* not implemented for "
                                                  "'Long'"):
        tg.zeros(3, dtype=tg.int64).normal_()
    p = tg.zeros(3, requires_grad=True)
    for fill in (p.uniform_, p.normal_):
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
            fill()
    with tg.no_grad():
        p.uniform_()
    assert p._version == 1 and p.is_leaf


def test_random_fill_of_a_non_leaf_gives_its_old_values_zero_gradient():
    p = tg.ones(3, requires_grad=True)
    q = p * 2
    q.normal_()
    assert q.requires_grad and q._version == 1
    q.sum().backward()
    assert p.grad.tolist() == [0.0, 0.0, 0.0]               # as PyTorch's NormalBackward0


# ------------------------------------------------------------------ add / sub with alpha
def test_add_sub_alpha_values_and_gradients():
    a, b = leaf(values(4, 2, 3)), leaf(values(5, 3))
    assert gradcheck(lambda a, b: a.add(b, alpha=3), (a, b))
    assert gradcheck(lambda a, b: tg.sub(a, b, alpha=-0.5), (a, b))
    assert gradcheck(lambda a, b: (a * 1.0).add_(b, alpha=2.5), (a, b))
    assert gradcheck(lambda a, b: (a * 1.0).sub_(b, alpha=2), (a, b))
    x = tg.ones(2)
    assert x.add(tg.ones(2), alpha=2).tolist() == [3.0, 3.0]
    assert x.add(3, alpha=2).tolist() == [7.0, 7.0]
    assert tg.add(x, 3, alpha=2).tolist() == [7.0, 7.0]
    assert tg.add(2, x).tolist() == [3.0, 3.0]
    assert tg.sub(2, x, alpha=3).tolist() == [-1.0, -1.0]
    assert x.sub(tg.ones(2), alpha=2).tolist() == [-1.0, -1.0]
    ints = tg.ones(2, dtype=tg.int64)
    assert ints.add(ints, alpha=2).tolist() == [3, 3]
    r = ints.add(tg.ones(2), alpha=0.5)
    assert r.dtype is tg.float32 and r.tolist() == [1.5, 1.5]
    bools = tg.tensor([True, False])
    assert bools.add(tg.tensor([False, False]), alpha=True).tolist() == [True, False]
    y = tg.ones(2)
    assert y.add_(tg.ones(2, dtype=F64), alpha=2) is y and y._version == 1
    assert y.tolist() == [3.0, 3.0] and y.dtype is tg.float32


def test_add_sub_alpha_errors():
    ints = tg.ones(2, dtype=tg.int64)
    with pytest.raises(RuntimeError, match="For integral input tensors, argument alpha must "
                                           "not be a floating point number."):
        ints.add(ints, alpha=0.5)
    with pytest.raises(RuntimeError, match="Boolean alpha only supported for Boolean results."):
        tg.ones(2).add(tg.ones(2), alpha=True)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired "
                                           "output type Long"):
        ints.add_(tg.ones(2), alpha=2)
    with pytest.raises(TypeError, match=r"add\(\): argument 'other' \(position 2\) must be "
                                        r"Tensor, not NoneType"):
        tg.ones(2).add(None)
    with pytest.raises(TypeError, match="positional argument"):
        tg.ones(2).add(tg.ones(2), 2)                     # alpha is keyword-only
    p = tg.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        p.sub_(tg.ones(2), alpha=2)


def test_add_sub_alpha_match_torch():
    assert_matches_torch(lambda a, b: a.add(b, alpha=-1.5) * a.sub(b, alpha=0.25),
                         lambda a, b: a.add(b, alpha=-1.5) * a.sub(b, alpha=0.25),
                         values(6, 3, 2), values(7, 2))


# ------------------------------------------------------------------ repeat
def test_repeat_values_copies_and_errors():
    x = tg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    for sizes in ((2, 1, 2), (1, 1), (3, 1), (1, 2), (0, 2), (2, 1, 1, 3)):
        r = x.repeat(*sizes)
        np.testing.assert_array_equal(numpy_of(r), np.tile(numpy_of(x), sizes))
    assert x.repeat((2, 2)).shape == x.repeat([2, 2]).shape == (4, 6)
    assert tg.tensor([1, 2]).repeat(2, 2).tolist() == [[1, 2, 1, 2], [1, 2, 1, 2]]
    assert tg.tensor(3.0).repeat(2).tolist() == [3.0, 3.0]
    same = x.repeat(1, 1)
    same[0, 0] = 9.0                                        # a copy, never a view
    assert x[0, 0].item() == 1.0
    with pytest.raises(RuntimeError, match="Number of dimensions of repeat dims can not be "
                                           "smaller than number of dimensions of tensor"):
        x.repeat(2)
    with pytest.raises(RuntimeError, match=r"negative dimension -2: \[-2, 6\]"):
        x.repeat(-1, 2)
    with pytest.raises(TypeError, match="repeat"):
        x.repeat()
    with pytest.raises(TypeError, match=r"repeat\(\): argument 'repeats' must be tuple of "
                                        r"ints, but found element of type float"):
        x.repeat(2.0, 1)


def test_repeat_gradient():
    assert gradcheck(lambda x: x.repeat(2, 1, 3), (leaf(values(8, 2, 3)),))
    assert gradcheck(lambda x: x.t().repeat(2, 2), (leaf(values(9, 2, 3)),))
    assert_matches_torch(lambda x: x.repeat(3, 2, 1), lambda x: x.repeat(3, 2, 1),
                         values(10, 2, 3))


# ------------------------------------------------------------------ silu, elu
def test_silu_elu_gradients():
    x = leaf(values(11, 3, 4))
    assert gradcheck(F.silu, (x,))
    assert gradcheck(lambda x: F.elu(x, 0.7), (x,))
    big = leaf([-3.0, 800.0])                               # exp(800) would be inf
    F.elu(big).sum().backward()
    assert np.isfinite(numpy_of(big.grad)).all() and big.grad.tolist()[1] == 1.0


def test_silu_elu_match_torch():
    torch = pytest.importorskip("torch")
    pts = np.array([-3.0, -1.0, 0.0, 0.5, 2.0, 40.0])      # 0 included: elu's one-sided slope
    assert_matches_torch(F.silu, torch.nn.functional.silu, pts)
    for alpha in (1.0, 0.5, -1.0):
        assert_matches_torch(lambda x: F.elu(x, alpha), lambda x: torch.nn.functional.elu(
            x, alpha), pts)
    assert repr(nn.SiLU()) == repr(torch.nn.SiLU())
    assert repr(nn.ELU()) == repr(torch.nn.ELU())
    assert repr(nn.ELU(0.5)) == repr(torch.nn.ELU(0.5))
    x = tg.tensor(pts)
    np.testing.assert_allclose(numpy_of(nn.ELU(alpha=0.5)(x)), torch.nn.ELU(alpha=0.5)(
        torch.tensor(pts)).numpy(), rtol=1e-12)
    np.testing.assert_allclose(numpy_of(nn.SiLU()(x)), torch.nn.SiLU()(torch.tensor(pts)).numpy(),
                               rtol=1e-12)


def test_silu_elu_are_ops_like_torchs():
    """One op each (grad_fn named as PyTorch's), in place when asked (a leaf that requires
    grad refuses, as in PyTorch), and float32 elu near 0 is exact (expm1, not exp - 1)."""
    torch = pytest.importorskip("torch")
    x = leaf(values(14, 3, 4))
    assert F.silu(x).grad_fn.name() == "SiluBackward0"
    assert F.elu(x, 0.5).grad_fn.name() == "EluBackward0"
    assert nn.ELU()(x).grad_fn.name() == "EluBackward0"
    for fn, tfn in ((F.silu, torch.nn.functional.silu),
                    (lambda t, **kw: F.elu(t, 0.3, **kw),
                     lambda t, **kw: torch.nn.functional.elu(t, 0.3, **kw))):
        a = values(15, 5)
        y = tg.tensor(a) * 1.0
        r = fn(y, inplace=True)
        assert r is y
        np.testing.assert_allclose(numpy_of(y), tfn(torch.tensor(a)).numpy(), rtol=1e-12)
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
            fn(leaf(a), inplace=True)
    small = np.array([-1e-4, -3e-6, -1e-9], np.float32)
    np.testing.assert_array_equal(numpy_of(F.elu(tg.tensor(small))),
                                  torch.nn.functional.elu(torch.tensor(small)).numpy())


def test_silu_elu_errors():
    with pytest.raises(NotImplementedError, match="\"silu_cpu\" not implemented for 'Long'"):
        F.silu(tg.tensor([1, 2]))
    with pytest.raises(NotImplementedError, match="\"elu_cpu\" not implemented for 'Long'"):
        nn.ELU()(tg.tensor([1, 2]))
    with pytest.raises(TypeError, match=r"elu\(\): argument 'input' .* not list"):
        F.elu([1.0])


# ------------------------------------------------------------------ normalize, cosine
def test_normalize_matches_torch():
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    x = values(12, 3, 4)
    for kw in ({}, {"p": 1.0, "dim": 0}, {"p": 3.0, "dim": -1}, {"dim": 1, "eps": 0.5}):
        assert_matches_torch(lambda t: F.normalize(t, **kw), lambda t: tf.normalize(t, **kw), x)
    x[1] = 0.0                                              # a zero row: divided by eps
    assert_matches_torch(F.normalize, tf.normalize, x, atol=1e-3)
    assert gradcheck(lambda t: F.normalize(t, dim=0), (leaf(values(13, 3, 2)),))


def test_normalize_errors():
    with pytest.raises(RuntimeError, match=r"normalize\(\): expected a floating point input"):
        F.normalize(tg.tensor([[1, 2]]))
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of "
                                         r"\[-1, 0\], but got 1\)"):
        F.normalize(tg.tensor([3.0, 4.0]))


def test_cosine_similarity_matches_torch():
    torch = pytest.importorskip("torch")
    cs = torch.nn.functional.cosine_similarity
    a, b = values(14, 3, 4), values(15, 3, 4)
    assert_matches_torch(F.cosine_similarity, cs, a, b)
    assert_matches_torch(lambda x, y: F.cosine_similarity(x, y, dim=0),
                         lambda x, y: cs(x, y, dim=0), a, b)
    assert_matches_torch(lambda x, y: F.cosine_similarity(x, y, dim=-1),
                         lambda x, y: cs(x, y, dim=-1), a, values(16, 4))     # broadcast
    a[0] = 0.0                        # a zero vector: PyTorch clamps its norm out of autograd
    assert_matches_torch(F.cosine_similarity, cs, a, b, atol=1e-6)
    assert gradcheck(lambda x, y: F.cosine_similarity(x, y, dim=1),
                     (leaf(values(17, 2, 3)), leaf(values(18, 2, 3))))
    mixed = F.cosine_similarity(tg.tensor([[1, 2]]), tg.tensor([[1.0, 2.0]], dtype=F64))
    assert mixed.dtype is F64 and abs(mixed.item() - 1.0) < 1e-12


def test_cosine_similarity_errors():
    with pytest.raises(RuntimeError, match=r"cosine_similarity\(\): expected common dtype to "
                                           "be floating point, yet common dtype is Long"):
        F.cosine_similarity(tg.tensor([[1, 2]]), tg.tensor([[1, 2]]))
    with pytest.raises(RuntimeError, match=r"size of tensor a \(3\) must match the size of "
                                           r"tensor b \(4\)"):
        F.cosine_similarity(tg.ones(2, 3), tg.ones(2, 4))
    with pytest.raises(IndexError, match="Dimension out of range"):
        F.cosine_similarity(tg.ones(2, 3), tg.ones(2, 3), dim=2)


# ------------------------------------------------------------------ kl_div
def _log_probs(seed, shape):
    z = values(seed, *shape)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def test_kl_div_matches_torch():
    torch = pytest.importorskip("torch")
    kl = torch.nn.functional.kl_div
    inp = _log_probs(19, (3, 4))
    tgt = np.exp(_log_probs(20, (3, 4)))
    for reduction in ("none", "sum", "batchmean", "mean"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert_matches_torch(lambda x, t: F.kl_div(x, t, reduction=reduction),
                                 lambda x, t: kl(x, t, reduction=reduction), inp, tgt)
            assert_matches_torch(
                lambda x, t: F.kl_div(x, t, reduction=reduction, log_target=True),
                lambda x, t: kl(x, t, reduction=reduction, log_target=True), inp, np.log(tgt))
    assert gradcheck(lambda x, t: F.kl_div(x, t, reduction="batchmean"),
                     (leaf(inp), leaf(tgt)))
    # a zero target adds nothing; its own gradient is nan in PyTorch and here
    tgt[1, 2] = 0.0
    x, t = leaf(inp), leaf(tgt)
    loss = F.kl_div(x, t, reduction="sum")
    ref_t = torch_leaf(torch, tgt)
    ref = kl(torch.tensor(inp), ref_t, reduction="sum")
    assert abs(loss.item() - ref.item()) < 1e-12
    loss.backward()
    ref.backward()
    np.testing.assert_array_equal(np.isnan(numpy_of(t.grad)), np.isnan(ref_t.grad.numpy()))
    assert np.isnan(numpy_of(t.grad)[1, 2])


def test_kl_div_reductions_and_errors():
    inp, tgt = tg.tensor(_log_probs(21, (2, 3))), tg.tensor(np.exp(_log_probs(22, (2, 3))))
    total = F.kl_div(inp, tgt, reduction="sum")
    assert abs(F.kl_div(inp, tgt, reduction="batchmean").item() - total.item() / 2) < 1e-6
    with pytest.warns(UserWarning, match="'batchmean' divides only by the batch size"):
        mean = F.kl_div(inp, tgt)
    assert abs(mean.item() - total.item() / 6) < 1e-6
    scalar = F.kl_div(inp[0, 0], tgt[0, 0], reduction="batchmean")      # 0-d: the sum
    assert abs(scalar.item() - F.kl_div(inp[0, 0], tgt[0, 0], reduction="sum").item()) < 1e-7
    assert np.isnan(numpy_of(F.kl_div(inp, -tgt, reduction="none"))).all()
    with pytest.raises(ValueError, match="bad is not a valid value for reduction"):
        F.kl_div(inp, tgt, reduction="bad")
    with pytest.raises(RuntimeError, match="kl_div: Integral inputs not supported."):
        F.kl_div(inp, tg.tensor([[1, 0, 0], [0, 1, 0]]), reduction="sum")
    with pytest.raises(RuntimeError, match=r"size of tensor a \(3\) must match the size of "
                                           r"tensor b \(4\)"):
        F.kl_div(tg.ones(4), tgt, reduction="sum")


# ------------------------------------------------------------------ pad
PADS = [(1, 2), (1, 0, 0, 1), (2, -1), (-1, -1, 1, 0), (0, 0, 2, 2), (-3, 1)]


def test_pad_matches_torch():
    torch = pytest.importorskip("torch")
    x = values(23, 2, 3)
    for p in PADS:
        for value in (None, 2.5):
            assert_matches_torch(lambda t: F.pad(t, p, value=value),
                                 lambda t: torch.nn.functional.pad(t, p, value=value), x)
    ints = torch.nn.functional.pad(torch.tensor([1, 2]), (1, 1), value=2.7)
    assert F.pad(tg.tensor([1, 2]), (1, 1), value=2.7).tolist() == ints.tolist()
    assert F.pad(tg.tensor([True]), [1, 1]).tolist() == [False, True, False]
    assert gradcheck(lambda t: F.pad(t, (1, -1, 0, 2), "constant", 3.0),
                     (leaf(values(24, 2, 3)),))
    x = tg.ones(2)
    assert F.pad(x, ()) is not x and F.pad(x, (0, 0)).tolist() == [1.0, 1.0]


def test_pad_errors():
    x = tg.ones(2, 3)
    with pytest.raises(RuntimeError, match="Padding length must be divisible by 2"):
        F.pad(x, (1,))
    with pytest.raises(RuntimeError, match="Padding length should be less than or equal to two "
                                           "times the input dimension but got padding length 6"):
        F.pad(x, (1, 1, 1, 1, 1, 1))
    with pytest.raises(RuntimeError, match=r"narrow\(\): length must be non-negative."):
        F.pad(x, (-2, -2))                  # (PyTorch's words: it crops by narrowing)
    with pytest.raises(NotImplementedError, match="Unrecognised padding mode bogus"):
        F.pad(x, (1, 1), mode="bogus")
    with pytest.raises(TypeError, match=r"pad\(\): argument 'pad' .* found element of type "
                                        "float at pos 0"):
        F.pad(x, (1.5, 1))
    with pytest.raises(TypeError, match=r"pad\(\): argument 'pad' .* not int"):
        F.pad(x, 1)


# ------------------------------------------------------------------ ParameterList
class _Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(tg.ones(1))
        self.ps = nn.ParameterList([nn.Parameter(tg.ones(2)), tg.zeros(3)])


def test_parameter_list_registers_its_parameters():
    m = _Holder()
    assert list(m.state_dict()) == ["w", "ps.0", "ps.1"]
    assert [n for n, _ in m.named_parameters()] == ["w", "ps.0", "ps.1"]
    ps = m.ps
    assert type(ps[1]) is nn.Parameter and ps[1].requires_grad     # a Tensor is wrapped
    assert ps[-1] is ps[1] and len(ps) == 2 and list(ps) == [ps[0], ps[1]]
    ps.append(tg.full((2,), 5.0))
    assert list(m.state_dict()) == ["w", "ps.0", "ps.1", "ps.2"]
    ps[0] = tg.zeros(4)
    assert ps[0].shape == (4,) and list(m.state_dict())[1] == "ps.0"
    sliced = ps[1:]
    assert isinstance(sliced, nn.ParameterList) and list(sliced.state_dict()) == ["0", "1"]
    assert sliced[0] is ps[1]
    ps += [tg.ones(1)]
    assert len(ps) == 4


def test_parameter_list_trains_and_round_trips_its_state():
    m = _Holder()
    opt = tg.optim.SGD(m.parameters(), lr=0.5)
    loss = (m.ps[0] * 2).sum() + m.ps[1].sum() + m.w.sum()
    loss.backward()
    opt.step()
    assert m.ps[0].tolist() == [0.0, 0.0] and m.ps[1].tolist() == [-0.5] * 3
    other = _Holder()
    other.load_state_dict(m.state_dict())
    assert other.ps[1].tolist() == [-0.5] * 3


def test_parameter_list_errors_and_repr_match_torch():
    torch = pytest.importorskip("torch")
    ps = nn.ParameterList([nn.Parameter(tg.ones(2, 3)), tg.zeros(3)])
    ref = torch.nn.ParameterList([torch.nn.Parameter(torch.ones(2, 3)), torch.zeros(3)])
    assert repr(ps) == repr(ref).replace("torch.", "tapegrad.")
    assert repr(ps[:1]) == repr(ref[:1]).replace("torch.", "tapegrad.")
    assert repr(nn.ParameterList()) == repr(torch.nn.ParameterList())
    ps.append(3)
    ref.append(3)
    assert repr(ps) == repr(ref).replace("torch.", "tapegrad.")
    assert list(ps.state_dict()) == list(ref.state_dict()) == ["0", "1"]
    with pytest.raises(IndexError, match="index 5 is out of range"):
        ps[5]
    with pytest.raises(TypeError):
        ps["a"]
    with pytest.raises(RuntimeError, match="ParameterList should not be called."):
        ps()
    with pytest.raises(TypeError, match="ParameterList.extend should be called with an "
                                        "iterable, but got Tensor"):
        ps.extend(tg.ones(2))


# ------------------------------------------------------------------ in-place unary ops
INPLACE_UNARY = ["neg", "reciprocal", "exp", "log", "sin", "cos", "tanh", "sigmoid", "relu",
                 "sqrt", "abs", "sign", "floor", "ceil", "round", "erf"]


@pytest.mark.parametrize("name", INPLACE_UNARY)
def test_inplace_unary_method_matches_torch(name):
    """x.name_() on a non-leaf: returns x, bumps its version once, names its grad_fn as
    PyTorch does, and gives PyTorch's values and gradients (reading the input the op
    overwrote, where the formula needs it)."""
    torch = pytest.importorskip("torch")
    a = np.array([0.3, 1.7, 2.5, 0.9])
    w = np.array([1.0, -2.0, 3.0, 0.5])
    x, xt = leaf(a), torch_leaf(torch, a)
    y, yt = x * 1.0, xt * 1.0
    assert getattr(y, name + "_")() is y and getattr(yt, name + "_")() is yt
    assert y.grad_fn.name() == yt.grad_fn.name() == f"{name.capitalize()}Backward0"
    assert y._version == yt._version == 1
    np.testing.assert_allclose(numpy_of(y), yt.detach().numpy(), rtol=1e-14)
    (y * tg.tensor(w)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(numpy_of(x.grad), xt.grad.numpy(), rtol=1e-13)


def test_inplace_unary_gradients_match_finite_differences():
    for name in ("sin", "sqrt", "sigmoid", "abs", "reciprocal"):
        assert gradcheck(lambda t: getattr(t * 1.0, name + "_")(),
                         (leaf(values(16, 5) + 3.0),))


def test_inplace_unary_dtype_rules_and_leaf_error():
    """Integer tensors keep their dtype where the op allows it (abs_, neg_, floor_,
    sign_) and refuse otherwise; a leaf that requires grad refuses, as in PyTorch."""
    x = tg.tensor([-2, 3])
    assert x.abs_() is x and x.tolist() == [2, 3] and x.dtype is tg.int64
    assert x.neg_().tolist() == [-2, -3] and x.floor_().tolist() == [-2, -3]
    assert x.sign_().tolist() == [-1, -1]
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired "
                                           "output type Long"):
        tg.tensor([1, 2]).exp_()
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used "
                                           "in an in-place operation"):
        leaf([1.0]).exp_()
    with pytest.raises(TypeError, match=r"exp_\(\) takes no arguments \(1 given\)"):
        tg.tensor([1.0]).exp_(2.0)
    with tg.no_grad():
        p = leaf([0.25])
        p.sqrt_()
    assert p.tolist() == [0.5]


def test_inplace_activation_modules_match_torch():
    torch = pytest.importorskip("torch")
    pairs = [(nn.ReLU(inplace=True), torch.nn.ReLU(inplace=True)),
             (nn.LeakyReLU(0.2, inplace=True), torch.nn.LeakyReLU(0.2, inplace=True)),
             (nn.SiLU(True), torch.nn.SiLU(True)), (nn.ELU(0.5, True), torch.nn.ELU(0.5, True)),
             (nn.ReLU(), torch.nn.ReLU()), (nn.ELU(), torch.nn.ELU())]
    a = values(17, 6)
    for m, mt in pairs:
        assert repr(m) == repr(mt)
        y, yt = tg.tensor(a) * 1.0, torch.tensor(a) * 1.0
        r, rt = m(y), mt(yt)
        assert (r is y) == (rt is yt) == m.inplace
        np.testing.assert_allclose(numpy_of(r), rt.numpy(), rtol=1e-14)
    x = tg.tensor(a) * 1.0
    assert F.relu(x, inplace=True) is x and numpy_of(x).min() == 0.0


def test_inplace_relu_in_a_compiled_training_step_matches_eager():
    res = []
    for compiled in (False, True):
        tg.manual_seed(3)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(inplace=True), nn.Linear(8, 2),
                              nn.ELU(inplace=True))
        opt = tg.optim.SGD(model.parameters(), lr=0.1)

        def step(x):
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            return loss
        f = tg.compile(step) if compiled else step
        rng = np.random.default_rng(18)
        with warnings.catch_warnings():
            warnings.simplefilter("error", tg.CompileWarning)
            res.append([numpy_of(f(tg.tensor(rng.standard_normal((5, 4)).astype(np.float32))))
                        .item()
                        for _ in range(6)])
        if compiled:
            assert f.stats == {"recordings": 1, "replays": 5}
    assert res[0] == res[1]


# ------------------------------------------------------------------ hardtanh & co, bmm, addmm
ACTS = {"hardtanh": (lambda F_: (lambda t: F_.hardtanh(t, -2.0, 3.0))),
        "relu6": (lambda F_: F_.relu6), "logsigmoid": (lambda F_: F_.logsigmoid),
        "softsign": (lambda F_: F_.softsign)}


@pytest.mark.parametrize("name", list(ACTS))
def test_more_activations_match_torch(name):
    """Values, gradients (the kinks included: hardtanh passes the gradient strictly inside
    its interval, as PyTorch) and grad_fn names, both dtypes; modules' reprs."""
    torch = pytest.importorskip("torch")
    pts = np.array([-7.0, -2.0, -1.0, -0.5, 0.0, 1.0, 3.0, 6.0, 7.0, -40.0, 40.0])
    f, tf = ACTS[name](F), ACTS[name](torch.nn.functional)
    for dt in (np.float64, np.float32):
        x, xt = tg.tensor(pts.astype(dt), requires_grad=True), \
            torch.tensor(pts.astype(dt), requires_grad=True)
        y, yt = f(x), tf(xt)
        assert y.grad_fn.name() == yt.grad_fn.name()
        y.sum().backward()
        yt.sum().backward()
        tol = 1e-14 if dt == np.float64 else 3e-7
        np.testing.assert_allclose(numpy_of(y), yt.detach().numpy(), rtol=tol, atol=tol)
        np.testing.assert_allclose(numpy_of(x.grad), xt.grad.numpy(), rtol=tol, atol=tol)
    for m, mt in ((nn.Hardtanh(), torch.nn.Hardtanh()),
                  (nn.Hardtanh(-2.0, 3.0, True), torch.nn.Hardtanh(-2.0, 3.0, True)),
                  (nn.ReLU6(True), torch.nn.ReLU6(True)), (nn.LogSigmoid(), torch.nn.LogSigmoid()),
                  (nn.Softsign(), torch.nn.Softsign())):
        assert repr(m) == repr(mt)
        np.testing.assert_allclose(numpy_of(m(tg.tensor(pts) * 1.0)),
                                   mt(torch.tensor(pts) * 1.0).numpy(), rtol=1e-14)


def test_more_activations_finite_differences_and_errors():
    x = leaf(values(19, 6) * 2)
    assert gradcheck(lambda t: F.hardtanh(t, -1.5, 1.5), (x,))
    assert gradcheck(F.logsigmoid, (x,))
    assert gradcheck(F.softsign, (x,))
    y = tg.tensor([-1.0, 7.0]) * 1.0
    assert F.relu6(y, inplace=True) is y and y.tolist() == [0.0, 6.0]
    with pytest.raises(ValueError, match="min_val cannot be greater than max_val"):
        F.hardtanh(x, 2.0, 1.0)


def test_bmm_addmm_view_as_match_torch():
    torch = pytest.importorskip("torch")
    a, b = values(20, 3, 2, 4), values(21, 3, 4, 5)
    assert_matches_torch(tg.bmm, torch.bmm, a, b)
    assert tg.bmm(leaf(a), leaf(b)).grad_fn.name() == "BmmBackward0"
    i, m1, m2 = values(22, 2, 5), values(23, 2, 3), values(24, 3, 5)
    for kw in ({}, {"beta": 0.5, "alpha": 2.0}):
        assert_matches_torch(lambda *t: tg.addmm(*t, **kw), lambda *t: torch.addmm(*t, **kw),
                             i, m1, m2)
    nan = np.full((2, 5), np.nan)
    np.testing.assert_array_equal(numpy_of(tg.addmm(tg.tensor(nan), tg.tensor(m1), tg.tensor(m2),
                                               beta=0)), m1 @ m2)
    with pytest.raises(RuntimeError, match="batch1 must be a 3D tensor"):
        tg.bmm(tg.zeros(2, 3), tg.zeros(2, 3, 3))
    with pytest.raises(RuntimeError, match=r"Expected size for first two dimensions of batch2 "
                                           r"tensor to be: \[2, 4\] but got: \[3, 4\]\."):
        tg.bmm(tg.zeros(2, 3, 4), tg.zeros(3, 4, 3))
    x = tg.zeros(2, 3)
    assert x.view_as(tg.zeros(3, 2)).shape == (3, 2)
    assert x.reshape_as(tg.zeros(6)).shape == (6,)


def _returns_itself(L):
    """Which calls return the tensor itself in PyTorch (no view, no node), and .type()."""
    a = L.ones(2, 3, requires_grad=True)
    b = L.ones(4, requires_grad=True)
    same = [a.flatten(1) is a, a.flatten(-1, -1) is a, L.flatten(b) is b, b.flatten() is b,
            a.flatten() is a, a.float() is a, a.type(L.float32) is a,
            a.type("torch.FloatTensor") is a]
    cast = a.type(L.float64)
    names = [cast.dtype is L.float64, cast.grad_fn.name(), a.type("torch.LongTensor").dtype is
             L.int64, a.flatten().grad_fn.name(), tuple(L.tensor(2.0).flatten().shape)]
    errors = []
    for bad in ("foo", "torch.Foo", "numpy.FloatTensor"):
        with pytest.raises(ValueError) as e:
            a.type(bad)
        errors.append(str(e.value))
    b.flatten().sum().backward()                    # b itself: its gradient accumulates
    return same, names, errors, b.grad.tolist()


def test_flatten_of_one_dim_and_a_cast_to_the_same_dtype_return_the_tensor_itself():
    same, names, errors, grad = _returns_itself(tg)
    assert same == [True] * 4 + [False] + [True] * 3
    assert names == [True, "ToCopyBackward0", True, "ViewBackward0", (1,)]
    assert errors == ["invalid type: 'foo'", "invalid type: 'torch.Foo'",
                      "invalid type: 'numpy.FloatTensor'"]
    assert grad == [1.0] * 4
    assert tg.ones(2).type() == "tapegrad.FloatTensor"


def test_returning_the_tensor_itself_matches_torch():
    torch = pytest.importorskip("torch")
    assert _returns_itself(tg) == _returns_itself(torch)


def _signed_zeros_hooks_and_casts(L):
    """Found by a differential fuzz against PyTorch: signs of zero, atan2's gradient at
    the origin, leaf hooks under autograd.grad, a gradient of another dtype, and the
    error for mixed dtypes in mm."""
    import math

    def sgn(t):
        return [math.copysign(1.0, v) for v in t.tolist()]
    z = L.tensor([-0.0, 0.0, float("nan"), -2.0, 3.0], dtype=L.float64)
    seen = {"abs": sgn(z.abs()[:2]), "relu": sgn(z.relu()[:2]), "sign": z.sign().tolist(),
            "sign0": sgn(z.sign()[:3]), "cat": sgn(L.cat([z[:2], z[:1]])),
            "stack": sgn(L.stack([z[:2]]).reshape(2))}
    a = L.tensor([0.0, 1.0, 0.0], dtype=L.float64, requires_grad=True)
    b = L.tensor([0.0, 1.0, -0.0], dtype=L.float64, requires_grad=True)
    L.atan2(a, b).sum().backward()
    seen["atan2"] = (a.grad.tolist(), b.grad.tolist())    # (values: the signs of 0 differ)
    x = L.tensor([1.0, 2.0], requires_grad=True)
    y = L.tensor([3.0, 4.0], requires_grad=True)
    calls = []
    x.register_hook(lambda g: calls.append("x") or g * 10)
    y.register_hook(lambda g: calls.append("y"))
    seen["grad_hooks"] = ([g.tolist() for g in L.autograd.grad((x * y).sum(), [x])],
                          [g.tolist() for g in L.autograd.grad((x * y).sum(), [x, y])],
                          calls, x.grad, y.grad)
    w = L.tensor([1.0, 2.0], requires_grad=True)
    w.double().backward(L.tensor([1, 2]))          # an int64 gradient for a float64 output
    w.backward(L.tensor([0.5, 0.5], dtype=L.float64))
    seen["cast"] = (w.grad.tolist(), w.grad.dtype is L.float32)
    try:
        L.ones(2, 3, dtype=L.float64) @ L.ones(3, 2)
    except RuntimeError as e:
        seen["mm"] = str(e)
    return seen


def test_signed_zeros_atan2_origin_leaf_hooks_in_grad_and_gradient_casts():
    seen = _signed_zeros_hooks_and_casts(tg)
    assert seen["abs"] == [1.0, 1.0] and seen["relu"] == [-1.0, 1.0]
    assert seen["sign"][:2] == [0.0, 0.0] and seen["sign0"] == [1.0, 1.0, 1.0]
    assert seen["cat"] == [-1.0, 1.0, -1.0] and seen["stack"] == [-1.0, 1.0]
    assert seen["atan2"] == ([0.0, 0.5, 0.0], [0.0, -0.5, 0.0])      # not NaN at the origin
    assert seen["grad_hooks"] == ([[30.0, 40.0]], [[30.0, 40.0], [1.0, 2.0]],
                                  ["x", "x", "y"], None, None)
    assert seen["cast"] == ([1.5, 2.5], True)
    assert seen["mm"] == "expected m1 and m2 to have the same dtype, but got: double != float"


def test_signed_zeros_hooks_and_casts_match_torch():
    torch = pytest.importorskip("torch")
    ours, theirs = _signed_zeros_hooks_and_casts(tg), _signed_zeros_hooks_and_casts(torch)
    for key in theirs:
        assert ours[key] == theirs[key], key


def test_relu_passes_the_gradient_of_nan_as_pytorch():
    x = leaf([np.nan, 1.0, -1.0, 0.0, -0.0])
    x.relu().sum().backward()
    assert x.grad.tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]
    y = leaf([np.nan, 2.0, -3.0])
    (y * 1).relu_().sum().backward()
    assert y.grad.tolist() == [1.0, 1.0, 0.0]
    torch = pytest.importorskip("torch")
    t = torch.tensor([np.nan, 1.0, -1.0, 0.0, -0.0], dtype=torch.float64, requires_grad=True)
    t.relu().sum().backward()
    assert t.grad.tolist() == x.grad.tolist()
