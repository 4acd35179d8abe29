"""More of torch.nn: F.mish, hardswish, hardsigmoid, selu, celu, glu, threshold, softshrink,
hardshrink, tanhshrink, softmin, prelu, rms_norm, group_norm, pairwise_distance and the
cosine embedding, margin ranking, soft margin, Gaussian and Poisson NLL losses; the modules
over them, KLDivLoss, Unflatten, ParameterDict and the RNN, LSTM and GRU cells. Values and
gradients against PyTorch (float64, parameters copied across) and finite differences;
reprs, state dict keys and argument errors as PyTorch's."""
import collections
import math
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn
from tapegrad.nn import functional as F
from tapegrad.testing import gradcheck
from tests.helpers import F64, leaf, numpy_of, torch_leaf, values

# the kinks of the activations below (+-3, +-0.5, 0), large values, and points between
PTS = np.array([-40.0, -4.0, -3.0, -1.7, -1.0, -0.5, -0.2, 0.0, 0.2, 0.5, 1.0, 2.5, 3.0, 4.0,
                40.0])


def assert_matches_torch(tg_fn, torch_fn, *arrays, rtol=1e-10, atol=1e-12):
    """tg_fn and torch_fn on float64 leaves holding arrays: equal values and equal
    gradients of sum(out * w) for fixed random weights w (outputs may be tuples)."""
    torch = pytest.importorskip("torch")
    tg_in = [leaf(a) for a in arrays]
    th_in = [torch_leaf(torch, a) for a in arrays]
    outs, refs = tg_fn(*tg_in), torch_fn(*th_in)
    if not isinstance(refs, tuple):
        outs, refs = (outs,), (refs,)
    tg_loss, th_loss = 0, 0
    for k, (out, ref) in enumerate(zip(outs, refs)):
        assert tuple(out.shape) == tuple(ref.shape)
        np.testing.assert_allclose(numpy_of(out), ref.detach().numpy(), rtol=rtol, atol=atol)
        w = np.random.default_rng(7 + k).standard_normal(ref.shape)
        tg_loss = tg_loss + (out * tg.tensor(w, dtype=F64)).sum()
        th_loss = th_loss + (ref * torch.tensor(w)).sum()
    tg_loss.backward()
    th_loss.backward()
    for a, b in zip(tg_in, th_in):
        expected = np.zeros(b.shape) if b.grad is None else b.grad.numpy()
        got = np.zeros(a.shape) if a.grad is None else numpy_of(a.grad)
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


def to_torch(ours, theirs):
    """Copy tapegrad module ours' state (parameters, buffers) into torch module theirs."""
    torch = pytest.importorskip("torch")
    theirs.load_state_dict({k: torch.tensor(numpy_of(v)) for k, v in ours.state_dict().items()})
    return theirs


def assert_modules_match(ours, theirs, *arrays, rtol=1e-10, atol=1e-12):
    """Modules on float64 leaves (the same parameters copied into theirs, both float64):
    outputs, input gradients and parameter gradients equal."""
    torch = pytest.importorskip("torch")
    ours.double()
    to_torch(ours, theirs.double())
    assert_matches_torch(ours, theirs, *arrays, rtol=rtol, atol=atol)
    got = dict(ours.named_parameters())
    for name, p in theirs.named_parameters():
        assert got[name].grad is not None, name
        np.testing.assert_allclose(numpy_of(got[name].grad), p.grad.numpy(), rtol=rtol, atol=atol,
                                   err_msg=name)
    assert list(got) == [n for n, _ in theirs.named_parameters()]
    del torch


def randomize(module, seed=3, low=-1.5, high=1.5):
    tg.manual_seed(seed)
    for p in module.parameters():
        nn.init.uniform_(p, low, high)
    return module


# ------------------------------------------------------------------ activations
ACTS = {
    "mish": (lambda f: f.mish),
    "hardswish": (lambda f: f.hardswish),
    "hardsigmoid": (lambda f: f.hardsigmoid),
    "selu": (lambda f: f.selu),
    "celu": (lambda f: f.celu),
    "celu_0.5": (lambda f: lambda x: f.celu(x, 0.5)),
    "celu_-2": (lambda f: lambda x: f.celu(x, -2.0)),
    "threshold": (lambda f: lambda x: f.threshold(x, 0.5, -2.0)),
    "softshrink": (lambda f: f.softshrink),
    "softshrink_0": (lambda f: lambda x: f.softshrink(x, 0.0)),
    "softshrink_3": (lambda f: lambda x: f.softshrink(x, 3)),
    "hardshrink": (lambda f: f.hardshrink),
    "hardshrink_3": (lambda f: lambda x: f.hardshrink(x, lambd=3.0)),
    "hardshrink_neg": (lambda f: lambda x: f.hardshrink(x, -1.0)),
    "tanhshrink": (lambda f: f.tanhshrink),
    "softmin": (lambda f: lambda x: f.softmin(x, dim=0)),
}


@pytest.mark.parametrize("name", list(ACTS))
def test_activations_match_torch(name):
    """Values and gradients (the kinks included) in float64, values in float32."""
    torch = pytest.importorskip("torch")
    f, tf = ACTS[name](F), ACTS[name](torch.nn.functional)
    pts = PTS[1:-1] if name == "softmin" else PTS
    # PyTorch's hardsigmoid gradient is its float32 1/6 even in float64
    tol = 1e-7 if name == "hardsigmoid" else 1e-12
    assert_matches_torch(f, tf, pts, rtol=max(tol, 1e-10), atol=tol)
    x32 = pts.astype(np.float32)
    y = f(tg.tensor(x32))
    assert y.dtype is tg.float32
    np.testing.assert_allclose(numpy_of(y), tf(torch.tensor(x32)).numpy(), rtol=1e-6, atol=1e-7)


def test_activations_finite_differences():
    x = leaf(values(1, 3, 4, low=-4.0, high=4.0))
    for fn in (F.mish, F.hardswish, F.hardsigmoid, F.selu, lambda t: F.celu(t, 0.7),
               lambda t: F.threshold(t, 0.3, 2.0), F.softshrink, F.hardshrink, F.tanhshrink,
               lambda t: F.softmin(t, 1), F.glu, lambda t: F.glu(t[:2], 0)):
        assert gradcheck(fn, (x,))


def test_activation_exact_values():
    x = tg.tensor([-4.0, -3.0, -1.5, 0.0, 1.5, 3.0, 4.0], dtype=F64)
    assert F.hardswish(x).tolist() == [0.0, 0.0, -0.375, 0.0, 1.125, 3.0, 4.0]
    assert F.hardsigmoid(x).tolist() == [0.0, 0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    assert F.threshold(x, 1.5, 9.0).tolist() == [9.0] * 5 + [3.0, 4.0]
    assert F.softshrink(x, 1.5).tolist() == [-2.5, -1.5, 0.0, 0.0, 0.0, 1.5, 2.5]
    assert F.hardshrink(x, 1.5).tolist() == [-4.0, -3.0, 0.0, 0.0, 0.0, 3.0, 4.0]
    assert F.selu(tg.tensor([0.0, 2.0], dtype=F64)).tolist() == [0.0, 2 * 1.0507009873554805]
    assert F.celu(tg.tensor([-2.0, 2.0], dtype=F64), 2.0).tolist() == [
        2.0 * math.expm1(-1.0), 2.0]
    np.testing.assert_allclose(numpy_of(F.mish(tg.tensor([1.0], dtype=F64))),
                               [math.tanh(math.log1p(math.e))], rtol=1e-15)
    nan = F.threshold(tg.tensor([float("nan")]), 0.0, 1.0)
    assert math.isnan(nan.item())                   # NaN is not <= threshold: kept
    assert math.isnan(F.hardshrink(tg.tensor([float("nan")])).item())
    # integer tensors: threshold and value are truncated to the tensor's type
    r = F.threshold(tg.tensor([-2, -3, 1, 2, 3]), -2.5, 10.7)
    assert r.dtype is tg.int64 and r.tolist() == [10, 10, 1, 2, 3]


def test_glu_matches_torch():
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    x = values(2, 3, 4, 6)
    assert_matches_torch(F.glu, tf.glu, x)
    assert_matches_torch(lambda t: F.glu(t, 1), lambda t: tf.glu(t, 1), x)
    assert_matches_torch(lambda t: F.glu(t, -3), lambda t: tf.glu(t, -3), x[:2])
    assert_matches_torch(F.glu, tf.glu, values(3, 4))


def test_softmin_matches_torch():
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    x = values(4, 3, 5)
    for d in (0, 1, -1):
        assert_matches_torch(lambda t: F.softmin(t, d), lambda t: tf.softmin(t, d), x)
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmin"):
        implicit = F.softmin(tg.tensor(x))
    np.testing.assert_allclose(numpy_of(implicit), numpy_of(F.softmin(tg.tensor(x), 1)),
                               rtol=1e-15)
    y = F.softmin(tg.tensor(x, dtype=tg.float32), 1, dtype=F64)
    assert y.dtype is F64
    np.testing.assert_allclose(numpy_of(y), tf.softmin(torch.tensor(x, dtype=torch.float32), 1,
                                                  dtype=torch.float64).numpy(), rtol=1e-12)


INPLACE = {"mish": (lambda f: f.mish), "hardswish": (lambda f: f.hardswish),
           "hardsigmoid": (lambda f: f.hardsigmoid), "selu": (lambda f: f.selu),
           "celu": (lambda f: lambda x, inplace=False: f.celu(x, 0.5, inplace)),
           "threshold": (lambda f: lambda x, inplace=False: f.threshold(x, 0.2, -1.0,
                                                                        inplace))}


@pytest.mark.parametrize("name", list(INPLACE))
def test_inplace_activations_match_torch(name):
    """inplace=True writes into (and returns) the input; the gradient reaches the tensor the
    input was computed from; a leaf requiring grad refuses, as in PyTorch."""
    torch = pytest.importorskip("torch")
    f, tf = INPLACE[name](F), INPLACE[name](torch.nn.functional)
    x, xt = leaf(PTS), torch_leaf(torch, PTS)
    y, yt = x * 1.5, xt * 1.5
    r, rt = f(y, inplace=True), tf(yt, inplace=True)
    assert r is y and rt is yt
    np.testing.assert_allclose(numpy_of(y), yt.detach().numpy(), rtol=1e-12, atol=1e-15)
    w = np.random.default_rng(5).standard_normal(PTS.shape)
    (r * tg.tensor(w)).sum().backward()
    (rt * torch.tensor(w)).sum().backward()
    tol = 1e-7 if name == "hardsigmoid" else 1e-12         # (PyTorch's float32 1/6)
    np.testing.assert_allclose(numpy_of(x.grad), xt.grad.numpy(), rtol=max(tol, 1e-10), atol=tol)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        f(leaf(PTS), inplace=True)
    z = tg.tensor(PTS)
    assert f(z, inplace=True) is z
    np.testing.assert_allclose(numpy_of(z), tf(torch.tensor(PTS)).numpy(), rtol=1e-12, atol=1e-15)


def test_activation_errors():
    ints = tg.tensor([1, 2, 4, 6])
    for fn, kernel in ((F.mish, "mish_cpu"), (F.hardswish, "hardswish_cpu"),
                       (F.hardsigmoid, "hardsigmoid_cpu"), (F.selu, "elu_cpu"),
                       (F.celu, "elu_cpu"), (F.glu, "glu_cpu"),
                       (F.softshrink, "softshrink_check"), (F.hardshrink, "hardshrink_cpu")):
        with pytest.raises(NotImplementedError, match=f"\"{kernel}\" not implemented for "
                                                      "'Long'"):
            fn(ints)
    x = tg.ones(3, 5)
    with pytest.raises(RuntimeError, match="Halving dimension must be even, but dimension 1 is "
                                           "size 5"):
        F.glu(x)
    with pytest.raises(RuntimeError, match="glu does not support scalars because halving size "
                                           "must be even"):
        F.glu(tg.tensor(1.0))
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of "
                                         r"\[-2, 1\], but got 2\)"):
        F.glu(x, 2)
    with pytest.raises(RuntimeError, match=r"lambda must be in range \[0, 3.40282e\+38\] for "
                                           "input dtype Float, but found -1"):
        F.softshrink(x, -1)
    with pytest.raises(RuntimeError, match=r"lambda must be in range \[0, 1.79769e\+308\] for "
                                           "input dtype Double, but found -0.5"):
        F.softshrink(x.double(), -0.5)
    with pytest.raises(RuntimeError, match="ZeroDivisionError: alpha cannot be 0 for CELU"):
        F.celu(x, 0.0)
    with pytest.raises(TypeError, match=r"mish\(\): argument 'input' \(position 1\) must be "
                                        "Tensor, not list"):
        F.mish([1.0])
    with pytest.raises(TypeError, match=r"threshold\(\): argument 'input'"):
        F.threshold(1.0, 0.0, 0.0)


ACT_MODULES = [
    ("Mish", (), {}), ("Mish", (True,), {}), ("Hardswish", (), {}),
    ("Hardswish", (True,), {}), ("Hardsigmoid", (), {}), ("Hardsigmoid", (), {"inplace": True}),
    ("SELU", (), {}), ("SELU", (True,), {}), ("CELU", (), {}), ("CELU", (0.5, True), {}),
    ("CELU", (2,), {}), ("GLU", (), {}), ("GLU", (0,), {}), ("Threshold", (0.1, 20), {}),
    ("Threshold", (0.5, -1.0, True), {}), ("Threshold", (1,), {"value": 2.5}),
    ("Softshrink", (), {}), ("Softshrink", (1,), {}), ("Hardshrink", (), {}),
    ("Hardshrink", (), {"lambd": 0.3}), ("Tanhshrink", (), {}), ("Softmin", (), {}),
    ("Softmin", (1,), {}), ("Softmin", (), {"dim": 0})]


def test_activation_modules_match_torch():
    """Reprs equal PyTorch's; outputs equal PyTorch's (in place when asked)."""
    torch = pytest.importorskip("torch")
    a = values(6, 4, 6) * 2
    for name, args, kwargs in ACT_MODULES:
        m, mt = getattr(nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)
        assert repr(m) == repr(mt)
        assert list(m.state_dict()) == list(mt.state_dict()) == []
        y, yt = tg.tensor(a) * 1.0, torch.tensor(a) * 1.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")             # Softmin() picks its dim
            r, rt = m(y), mt(yt)
        assert (r is y) == (rt is yt)
        np.testing.assert_allclose(numpy_of(r), rt.numpy(), rtol=1e-12, atol=1e-15,
                                   err_msg=repr(m))


# ------------------------------------------------------------------ PReLU
def test_prelu_matches_torch():
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    x = values(7, 2, 3, 4)
    assert_matches_torch(F.prelu, tf.prelu, x, [0.1, -0.2, 0.3])
    assert_matches_torch(F.prelu, tf.prelu, x, [0.25])
    assert_matches_torch(F.prelu, tf.prelu, PTS, [0.25])            # 1-D: one channel
    assert_matches_torch(F.prelu, tf.prelu, np.array(-2.0), [0.5])  # 0-d
    assert_matches_torch(F.prelu, tf.prelu, values(8, 3, 2), [0.1, 0.2])
    assert_matches_torch(F.prelu, tf.prelu, x, np.array(0.3))       # 0-d weight
    assert gradcheck(F.prelu, (leaf(x), leaf([0.1, -0.2, 0.3])))


def test_prelu_module_matches_torch():
    torch = pytest.importorskip("torch")
    for args, shape in (((), (2, 3, 4)), ((3,), (2, 3, 4)), ((3, 0.1), (5, 3)), ((), (6,))):
        m, mt = nn.PReLU(*args), torch.nn.PReLU(*args)
        assert repr(m) == repr(mt)
        assert list(m.state_dict()) == list(mt.state_dict()) == ["weight"]
        assert m.weight.shape == tuple(mt.weight.shape)
        np.testing.assert_array_equal(numpy_of(m.weight), mt.weight.detach().numpy())
        assert m.num_parameters == mt.num_parameters and m.init == mt.init
        assert_modules_match(randomize(m), mt, values(9, *shape))
    assert nn.PReLU(dtype=F64).weight.dtype is F64


def test_prelu_errors():
    x = tg.ones(2, 3)
    with pytest.raises(RuntimeError, match="Mismatch of parameter numbers and input channel "
                                           "size. Found parameter numbers = 2 and channel size "
                                           "= 3."):
        F.prelu(x, tg.ones(2))
    with pytest.raises(RuntimeError, match="Found parameter numbers = 3 and channel size = 1"):
        nn.PReLU(3)(tg.ones(3))
    with pytest.raises(RuntimeError, match=r"prelu: Expected `weight` to be a scalar or 1D "
                                           "tensor, but got: ndim = 2"):
        F.prelu(x, tg.ones(1, 3))
    with pytest.raises(RuntimeError, match="prelu: Type promoting not supported. Got Double "
                                           "and Float"):
        nn.PReLU()(x.double())
    with pytest.raises(NotImplementedError, match="\"prelu_cpu\" not implemented for 'Long'"):
        F.prelu(tg.tensor([1, 2]), tg.tensor([1]))


# ------------------------------------------------------------------ LayerNorm
def test_layer_norm_is_one_node_matching_torch():
    """layer_norm is one row, NativeLayerNormBackward0, with PyTorch's values, gradients
    (every combination of weight and bias, strided inputs, normalized shapes of one and two
    dims, lines long enough for the vectorised loops), next_functions (None for an absent
    weight or bias) and the in-place check on the saved input."""
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    x = values(20, 5, 3, 40)
    for ns in ((40,), (3, 40)):
        w, b = values(21, *ns), values(22, *ns)
        assert_matches_torch(lambda t, w, b: F.layer_norm(t, ns, w, b, 1e-3),
                             lambda t, w, b: tf.layer_norm(t, ns, w, b, 1e-3), x, w, b)
        assert_matches_torch(lambda t, w: F.layer_norm(t, ns, w), lambda t, w:
                             tf.layer_norm(t, ns, w), x, w)
        assert_matches_torch(lambda t, b: F.layer_norm(t, ns, None, b), lambda t, b:
                             tf.layer_norm(t, ns, None, b), x, b)
        assert_matches_torch(lambda t: F.layer_norm(t, ns), lambda t: tf.layer_norm(t, ns), x)
    assert_matches_torch(lambda t, w: F.layer_norm(t.transpose(0, 2), (5,), w),
                         lambda t, w: tf.layer_norm(t.transpose(0, 2), (5,), w), x, values(23, 5))
    for L in (tg, torch):
        xt, bt = L.tensor(x, requires_grad=True), L.tensor(values(24, 40), requires_grad=True)
        y = L.nn.functional.layer_norm(xt * 1.0, (40,), None, bt)
        assert y.grad_fn.name() == "NativeLayerNormBackward0"
        assert [f is None for f, _ in y.grad_fn.next_functions] == [False, True, False]
        z = xt * 1.0
        y = L.nn.functional.layer_norm(z, (40,))
        with L.no_grad():
            z.add_(1.0)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()
    x32 = x.astype(np.float32)
    np.testing.assert_allclose(numpy_of(F.layer_norm(tg.tensor(x32), (40,))),
                               tf.layer_norm(torch.tensor(x32), (40,)).numpy(), rtol=2e-6,
                               atol=2e-6)
    assert gradcheck(lambda t, w, b: F.layer_norm(t, (3, 4), w, b),
                     (leaf(values(25, 2, 3, 4)), leaf(values(26, 3, 4)), leaf(values(27, 3, 4))))
    with pytest.raises(RuntimeError, match=r"Expected weight to be of same shape as "
                                           r"normalized_shape, but got weight of shape \[3\] "
                                           r"and normalized_shape = \[40\]"):
        F.layer_norm(tg.tensor(x), (40,), tg.ones(3, dtype=tg.float64))


# ------------------------------------------------------------------ RMSNorm, GroupNorm
def test_rms_norm_matches_torch():
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    x = values(10, 2, 3, 4)
    assert_matches_torch(lambda t: F.rms_norm(t, (4,)), lambda t: tf.rms_norm(t, (4,)), x)
    assert_matches_torch(lambda t, w: F.rms_norm(t, [3, 4], w, eps=0.1),
                         lambda t, w: tf.rms_norm(t, [3, 4], w, eps=0.1), x, values(11, 3, 4))
    # (an int normalized_shape is taken, as LayerNorm's; PyTorch's function wants a tuple)
    assert_matches_torch(lambda t, w: F.rms_norm(t, 4, w), lambda t, w: tf.rms_norm(t, [4], w),
                         values(12, 4), values(13, 4))
    small = np.full((2, 4), 1e-9)         # the default eps (machine epsilon) shows here
    assert_matches_torch(lambda t: F.rms_norm(t, (4,)), lambda t: tf.rms_norm(t, (4,)), small)
    x32 = x.astype(np.float32)
    np.testing.assert_allclose(numpy_of(F.rms_norm(tg.tensor(x32), (4,))),
                               tf.rms_norm(torch.tensor(x32), (4,)).numpy(), rtol=1e-6)
    assert gradcheck(lambda t, w: F.rms_norm(t, (3, 4), w), (leaf(x), leaf(values(14, 3, 4))))


def test_rms_norm_module_matches_torch():
    torch = pytest.importorskip("torch")
    for args, kwargs in (((4,), {}), (([3, 4],), {"eps": 1e-3}),
                         ((4,), {"elementwise_affine": False})):
        m, mt = nn.RMSNorm(*args, **kwargs), torch.nn.RMSNorm(*args, **kwargs)
        assert repr(m) == repr(mt)
        assert list(m.state_dict()) == list(mt.state_dict())
        if m.weight is not None:
            np.testing.assert_array_equal(numpy_of(m.weight), mt.weight.detach().numpy())
            randomize(m)
        assert_modules_match(m, mt, values(15, 2, 3, 4))
    assert nn.RMSNorm(3, dtype=F64).weight.dtype is F64


def test_rms_norm_errors():
    x = tg.ones(3, 4)
    with pytest.raises(RuntimeError, match=r"Given normalized_shape=\[3\], expected input with "
                                           r"shape \[\*3\], but got input of size\[3, 4\]"):
        F.rms_norm(x, (3,))
    with pytest.raises(RuntimeError, match=r"Given normalized_shape=\[2, 3\], expected input "
                                           r"with shape \[\*2, 3\]"):
        nn.RMSNorm([2, 3])(x)
    with pytest.raises(RuntimeError, match=r"Expected weight to be of same shape as "
                                           r"normalized_shape, but got weight of shape \[3\] "
                                           r"and normalized_shape = \[4\]"):
        F.rms_norm(x, (4,), tg.ones(3))
    with pytest.raises(RuntimeError, match="Expected normalized_shape to be at least "
                                           "1-dimensional"):
        F.rms_norm(x, ())
    with pytest.raises(NotImplementedError, match="\"rms_norm\" not implemented for 'Long'"):
        F.rms_norm(tg.tensor([[1, 2]]), (2,))


def test_group_norm_matches_torch():
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    x = values(16, 2, 6, 3, 2)
    for g in (1, 2, 3, 6):
        assert_matches_torch(lambda t, w, b: F.group_norm(t, g, w, b, eps=1e-3),
                             lambda t, w, b: tf.group_norm(t, g, w, b, eps=1e-3),
                             x, values(17, 6), values(18, 6), rtol=1e-9)
    assert_matches_torch(lambda t: F.group_norm(t, 2), lambda t: tf.group_norm(t, 2),
                         values(19, 3, 4), rtol=1e-9)
    assert_matches_torch(lambda t: F.group_norm(t, 2), lambda t: tf.group_norm(t, 2),
                         values(20, 2, 4, 5), rtol=1e-9)
    assert gradcheck(lambda t, w, b: F.group_norm(t, 3, w, b),
                     (leaf(values(21, 2, 6, 2)), leaf(values(22, 6)), leaf(values(23, 6))))


def test_group_norm_module_matches_torch():
    torch = pytest.importorskip("torch")
    for args, kwargs in (((2, 4), {}), ((4, 4), {"eps": 0.1}), ((2, 4), {"affine": False}),
                         ((1, 4), {"bias": False})):
        m, mt = nn.GroupNorm(*args, **kwargs), torch.nn.GroupNorm(*args, **kwargs)
        assert repr(m) == repr(mt)
        assert list(m.state_dict()) == list(mt.state_dict())
        for p, q in zip(m.parameters(), mt.parameters()):
            np.testing.assert_array_equal(numpy_of(p), q.detach().numpy())     # ones, zeros
        assert_modules_match(randomize(m), mt, values(24, 3, 4, 5), rtol=1e-9)


def test_group_norm_errors():
    with pytest.raises(ValueError, match=r"num_channels \(4\) must be divisible by num_groups "
                                         r"\(3\)"):
        nn.GroupNorm(3, 4)
    with pytest.raises(RuntimeError, match="Expected at least 2 dimensions for input tensor but "
                                           "received 1"):
        F.group_norm(tg.ones(4), 2)
    with pytest.raises(RuntimeError, match=r"Expected number of channels in input to be "
                                           r"divisible by num_groups, but got input of shape "
                                           r"\[2, 5\] and num_groups=2"):
        F.group_norm(tg.ones(2, 5), 2)
    with pytest.raises(ValueError, match=r"Expected more than 1 value per channel when "
                                         r"training, got input size \[1, 4\]"):
        nn.GroupNorm(4, 4)(tg.ones(1, 4))
    with pytest.raises(RuntimeError, match=r"Expected weight to be a vector of size equal to "
                                           r"the number of channels in input, but got weight of "
                                           r"shape \[2, 2\] and input of shape \[2, 4, 3\]"):
        F.group_norm(tg.ones(2, 4, 3), 2, tg.ones(2, 2))
    with pytest.raises(RuntimeError, match=r"Expected bias to be a vector .* bias of shape "
                                           r"\[3\]"):
        F.group_norm(tg.ones(2, 4, 3), 2, tg.ones(4), tg.ones(3))
    with pytest.raises(NotImplementedError, match="\"GroupNormKernelImpl\" not implemented for "
                                                  "'Long'"):
        F.group_norm(tg.ones(2, 4, 3).long(), 2)


# ------------------------------------------------------------------ distances
def test_pairwise_distance_matches_torch():
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    a, b = values(25, 4, 5), values(26, 4, 5)
    for p in (1.0, 2.0, 3, 0.5, math.inf):
        for keepdim in (False, True):
            assert_matches_torch(lambda x, y: F.pairwise_distance(x, y, p, keepdim=keepdim),
                                 lambda x, y: tf.pairwise_distance(x, y, p, keepdim=keepdim),
                                 a, b)
    assert_matches_torch(lambda x, y: F.pairwise_distance(x, y, eps=0.1),
                         lambda x, y: tf.pairwise_distance(x, y, eps=0.1), a, values(27, 5))
    assert_matches_torch(F.pairwise_distance, tf.pairwise_distance, a[0], b[0])     # 1-D
    assert_matches_torch(F.pairwise_distance, tf.pairwise_distance, a[:, None], b)  # broadcast
    same = a.copy()                               # x1 - x2 + eps: no zero-norm singularity
    assert_matches_torch(F.pairwise_distance, tf.pairwise_distance, a, same)
    ints = F.pairwise_distance(tg.tensor([[1, 2]]), tg.tensor([[1, 5]]))
    assert ints.dtype is tg.float32
    assert abs(ints.item() - tf.pairwise_distance(torch.tensor([[1, 2]]),
                                                  torch.tensor([[1, 5]])).item()) < 1e-6
    assert gradcheck(lambda x, y: F.pairwise_distance(x, y, 3), (leaf(a), leaf(b)))
    with pytest.raises(RuntimeError, match=r"The size of tensor a \(3\) must match the size of "
                                           r"tensor b \(4\) at non-singleton dimension 1"):
        F.pairwise_distance(tg.ones(2, 3), tg.ones(2, 4))


def test_distance_modules_match_torch():
    torch = pytest.importorskip("torch")
    a, b = values(28, 4, 5), values(29, 4, 5)
    for args in ((), (1, 1e-3, True)):
        m, mt = nn.PairwiseDistance(*args), torch.nn.PairwiseDistance(*args)
        assert repr(m) == repr(mt) == "PairwiseDistance()"
        assert (m.norm, m.eps, m.keepdim) == (mt.norm, mt.eps, mt.keepdim)
        assert_modules_match(m, mt, a, b)
    for args in ((), (0, 0.5)):
        m, mt = nn.CosineSimilarity(*args), torch.nn.CosineSimilarity(*args)
        assert repr(m) == repr(mt) == "CosineSimilarity()"
        assert (m.dim, m.eps) == (mt.dim, mt.eps)
        assert_modules_match(m, mt, a, b)


# ------------------------------------------------------------------ losses
REDUCTIONS = ("mean", "sum", "none")


def test_cosine_embedding_loss_matches_torch():
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    a, b = values(30, 5, 4), values(31, 5, 4)
    target = np.array([1.0, -1.0, 1.0, -1.0, 0.0])            # 0: contributes nothing
    for reduction in REDUCTIONS:
        for margin in (0.0, 0.3, -0.5):
            assert_matches_torch(
                lambda x, y: F.cosine_embedding_loss(x, y, tg.tensor(target), margin,
                                                     reduction=reduction),
                lambda x, y: tf.cosine_embedding_loss(x, y, torch.tensor(target), margin,
                                                      reduction=reduction), a, b)
    for t in (1.0, -1.0):                                     # one pair, a 0-d target
        assert_matches_torch(
            lambda x, y: F.cosine_embedding_loss(x, y, tg.tensor(t), reduction="none"),
            lambda x, y: tf.cosine_embedding_loss(x, y, torch.tensor(t), reduction="none"),
            a[0], b[0])
    long_target = F.cosine_embedding_loss(tg.tensor(a), tg.tensor(b), tg.tensor([1, -1] * 2
                                                                                + [1]))
    ref = tf.cosine_embedding_loss(torch.tensor(a), torch.tensor(b),
                                   torch.tensor([1, -1] * 2 + [1]))
    assert abs(long_target.item() - ref.item()) < 1e-12
    assert gradcheck(lambda x, y: F.cosine_embedding_loss(x, y, tg.tensor(target), 0.2),
                     (leaf(a), leaf(b)))


def test_margin_ranking_and_soft_margin_losses_match_torch():
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    a, b = values(32, 6), values(33, 6)
    target = np.array([1.0, -1.0, 1.0, 1.0, -1.0, -1.0])
    b[0] = a[0] + 0.5           # -1 * (a - b) + margin = 0 at margin 0.5: the kink
    for reduction in REDUCTIONS:
        for margin in (0.0, 0.5):
            assert_matches_torch(
                lambda x, y, t: F.margin_ranking_loss(x, y, t, margin, reduction=reduction),
                lambda x, y, t: tf.margin_ranking_loss(x, y, t, margin, reduction=reduction),
                a, b, target)
        x, t = values(34, 3, 4), np.sign(values(35, 3, 4))
        assert_matches_torch(
            lambda u: F.soft_margin_loss(u, tg.tensor(t), reduction=reduction),
            lambda u: tf.soft_margin_loss(u, torch.tensor(t), reduction=reduction), x)
    assert_matches_torch(lambda x, y, t: F.margin_ranking_loss(x, y, t, reduction="none"),
                         lambda x, y, t: tf.margin_ranking_loss(x, y, t, reduction="none"),
                         values(36, 3, 1), values(37, 1, 4), np.sign(values(38, 3, 4)))
    t = np.sign(values(40, 4))                               # the target broadcasts
    assert_matches_torch(lambda u: F.soft_margin_loss(u, tg.tensor(t)),
                         lambda u: tf.soft_margin_loss(u, torch.tensor(t)), values(39, 3, 4))
    assert gradcheck(lambda u: F.soft_margin_loss(u, tg.tensor(t)), (leaf(x),))


def test_gaussian_nll_loss_matches_torch():
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    x, y = values(41, 4, 3), values(42, 4, 3)
    var = values(43, 4, 3, low=0.1, high=2.0)
    var[0, 0] = 1e-9                                    # clamped to eps (no gradient there)
    for reduction in REDUCTIONS:
        for full in (False, True):
            assert_matches_torch(
                lambda a, b, v: F.gaussian_nll_loss(a, b, v, full, reduction=reduction),
                lambda a, b, v: tf.gaussian_nll_loss(a, b, v, full, reduction=reduction),
                x, y, var)
    for v in (var[:, 0], var[:, :1], var[:1]):          # homoscedastic shapes
        assert_matches_torch(lambda a, b, w: F.gaussian_nll_loss(a, b, w, eps=1e-3),
                             lambda a, b, w: tf.gaussian_nll_loss(a, b, w, eps=1e-3),
                             x, y, v)
    assert_matches_torch(lambda a, b: F.gaussian_nll_loss(a, b, 0.5, reduction="sum"),
                         lambda a, b: tf.gaussian_nll_loss(a, b, 0.5, reduction="sum"), x, y)
    assert_matches_torch(lambda a, b, v: F.gaussian_nll_loss(a, b, v),
                         lambda a, b, v: tf.gaussian_nll_loss(a, b, v), x, y[:, :1], var)
    assert gradcheck(lambda a, b, v: F.gaussian_nll_loss(a, b, v, full=True),
                     (leaf(x), leaf(y), leaf(values(44, 4, 3, low=0.5, high=2.0))))


def test_poisson_nll_loss_matches_torch():
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    x = values(45, 3, 4)
    target = np.floor(values(46, 3, 4, low=0.0, high=5.0))       # counts, 0 and 1 included
    for reduction in REDUCTIONS:
        for full in (False, True):
            assert_matches_torch(
                lambda a, t: F.poisson_nll_loss(a, t, full=full, reduction=reduction),
                lambda a, t: tf.poisson_nll_loss(a, t, full=full, reduction=reduction),
                x, target)
            assert_matches_torch(
                lambda a: F.poisson_nll_loss(a, tg.tensor(target), False, full, eps=1e-3,
                                             reduction=reduction),
                lambda a: tf.poisson_nll_loss(a, torch.tensor(target), False, full, eps=1e-3,
                                              reduction=reduction), np.abs(x))
    assert gradcheck(lambda a: F.poisson_nll_loss(a, tg.tensor(target), full=True), (leaf(x),))


def test_loss_modules_match_torch():
    torch = pytest.importorskip("torch")
    a, b = values(47, 5, 4), values(48, 5, 4)
    sign = np.sign(values(49, 5))
    cases = [
        ("CosineEmbeddingLoss", (0.2,), {}, (a, b, sign)),
        ("CosineEmbeddingLoss", (), {"reduction": "sum"}, (a, b, sign)),
        ("MarginRankingLoss", (), {"margin": 0.1, "reduction": "none"}, (a[:, 0], b[:, 0], sign)),
        ("GaussianNLLLoss", (), {"full": True, "eps": 1e-3}, (a, b, np.abs(a))),
        ("PoissonNLLLoss", (), {}, (a, np.abs(b))),
        ("PoissonNLLLoss", (False, True), {"eps": 1e-3, "reduction": "sum"},
         (np.abs(a), np.round(np.abs(b) * 2))),
        ("KLDivLoss", (), {"reduction": "batchmean"}, (a, np.abs(b))),
        ("KLDivLoss", (), {"reduction": "sum", "log_target": True}, (a, b)),
    ]
    for name, args, kwargs, arrays in cases:
        m, mt = getattr(nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)
        assert repr(m) == repr(mt) == name + "()"
        assert_modules_match(m, mt, *arrays)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                 # KLDivLoss' 'mean' warns
        assert_modules_match(nn.KLDivLoss(), torch.nn.KLDivLoss(), a, np.abs(b))
    assert nn.KLDivLoss(None, None, "sum", True).log_target
    m, mt = nn.SoftMarginLoss(reduction="sum"), torch.nn.SoftMarginLoss(reduction="sum")
    assert repr(m) == repr(mt) == "SoftMarginLoss()"
    assert_matches_torch(lambda u: m(u, tg.tensor(np.sign(b))),
                         lambda u: mt(u, torch.tensor(np.sign(b))), a)


def test_loss_errors():
    x = tg.ones(3, 4)
    with pytest.raises(RuntimeError, match="0D or 1D target tensor expected, multi-target not "
                                           "supported"):
        F.cosine_embedding_loss(x, x, tg.ones(3, 1))
    with pytest.raises(RuntimeError, match=r"1D target tensor expects 2D input tensors, but "
                                           r"found inputs with sizes \[4\] and \[4\]."):
        F.cosine_embedding_loss(tg.ones(4), tg.ones(4), tg.ones(3))
    with pytest.raises(RuntimeError, match=r"0D target tensor expects 1D input tensors, but "
                                           r"found inputs with sizes \[3, 4\] and \[3, 4\]."):
        F.cosine_embedding_loss(x, x, tg.tensor(1.0))
    for fn, args in ((F.cosine_embedding_loss, (x, x, tg.ones(3))),
                     (F.margin_ranking_loss, (x, x, x)), (F.soft_margin_loss, (x, x)),
                     (F.poisson_nll_loss, (x, x))):
        with pytest.raises(ValueError, match="bad is not a valid value for reduction"):
            fn(*args, reduction="bad")
        # PyTorch's deprecated size_average/reduce choose the reduction (tested against
        # PyTorch in tests/api/test_strict_args.py)
        with pytest.warns(UserWarning, match="please use reduction='sum' instead"):
            assert fn(*args, size_average=False).item() == fn(*args, reduction="sum").item()
    with pytest.raises(ValueError, match="bad is not valid"):
        F.gaussian_nll_loss(x, x, x, reduction="bad")
    with pytest.raises(RuntimeError, match=r"margin_ranking_loss : All input tensors should "
                                           r"have same dimension but got sizes: input1: "
                                           r"tapegrad.Size\(\[3\]\), input2: "
                                           r"tapegrad.Size\(\[3\]\), target: "
                                           r"tapegrad.Size\(\[3, 1\]\)"):
        F.margin_ranking_loss(tg.ones(3), tg.ones(3), tg.ones(3, 1))
    with pytest.raises(RuntimeError, match=r"output with shape \[3, 1\] doesn't match the "
                                           r"broadcast shape \[3, 3\]"):
        F.soft_margin_loss(tg.ones(3, 1), tg.ones(3))
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired "
                                           "output type Long"):
        F.soft_margin_loss(tg.tensor([1, 2]), tg.tensor([1, 1]))
    with pytest.raises(RuntimeError, match="The function 'soft_margin_loss' is not "
                                           "differentiable with respect to argument 'target'"):
        F.soft_margin_loss(x, leaf(np.ones((3, 4)), tg.float32))
    with tg.no_grad():
        F.soft_margin_loss(x, leaf(np.ones((3, 4)), tg.float32))
    with pytest.raises(ValueError, match="var has negative entry/entries"):
        F.gaussian_nll_loss(x, x, -x)
    with pytest.raises(ValueError, match="var has negative entry/entries"):
        F.gaussian_nll_loss(x, x, -1.0)
    with pytest.raises(ValueError, match="var is of incorrect size"):
        F.gaussian_nll_loss(tg.ones(3, 2), tg.ones(3, 2), tg.ones(2))
    with pytest.raises(ValueError, match="var is of incorrect size"):
        F.gaussian_nll_loss(tg.ones(3, 2, 4), tg.ones(3, 2, 4), tg.ones(3, 1, 1))
    with pytest.warns(UserWarning, match="please use reduction='sum' instead"):
        assert nn.KLDivLoss(size_average=False).reduction == "sum"


# ------------------------------------------------------------------ Unflatten
def test_unflatten_matches_torch():
    torch = pytest.importorskip("torch")
    x = values(50, 2, 6, 4)
    for dim, sizes in ((1, (2, 3)), (-2, [3, 2]), (1, (-1, 2)), (0, (1, 2)), (2, (2, 1, 2)),
                       (1, (6,)), (1, tg.Size([2, 3]))):
        m = nn.Unflatten(dim, sizes)
        mt = torch.nn.Unflatten(dim, torch.Size(sizes) if isinstance(sizes, tg.Size)
                                else sizes)
        assert repr(m) == repr(mt).replace("torch.", "tapegrad.")
        assert_modules_match(m, mt, x)


def test_unflatten_errors():
    x = tg.ones(2, 6)
    with pytest.raises(TypeError, match="unflattened_size must be tuple of ints, but found "
                                        "element of type float at pos 1"):
        nn.Unflatten(1, (2, 3.0))
    with pytest.raises(TypeError, match="unflattened_size must be a tuple of ints, but found "
                                        "type int"):
        nn.Unflatten(1, 6)
    with pytest.raises(RuntimeError, match=r"unflatten: Provided sizes \[2, 2\] don't multiply "
                                           r"up to the size of dim 1 \(6\) in the input tensor"):
        nn.Unflatten(1, (2, 2))(x)
    with pytest.raises(RuntimeError, match=r"unflatten: Provided sizes \[4, -1\] don't "
                                           r"multiply up to the size of dim 1 \(6\)"):
        nn.Unflatten(1, (4, -1))(x)
    with pytest.raises(RuntimeError, match="unflatten: sizes must be non-empty"):
        nn.Unflatten(1, ())(x)
    with pytest.raises(RuntimeError, match="only one dimension can be inferred"):
        nn.Unflatten(1, (-1, -1))(x)
    with pytest.raises(IndexError, match="Dimension out of range"):
        nn.Unflatten(2, (2, 3))(x)


# ------------------------------------------------------------------ ParameterDict
def test_parameter_dict_registers_its_parameters():
    d = nn.ParameterDict({"b": tg.ones(2), "a": nn.Parameter(tg.zeros(3)), "n": 3})
    assert list(d) == ["a", "b", "n"]                   # a plain dict: sorted, as PyTorch
    assert [n for n, _ in d.named_parameters()] == ["a", "b"]
    assert list(d.state_dict()) == ["a", "b"]
    assert isinstance(d["b"], nn.Parameter) and d["b"].requires_grad and d["n"] == 3
    assert d.a is d["a"] and "a" in d and "z" not in d and len(d) == 3
    d["c"] = tg.full((2,), 2.0)
    d.update([("z", tg.ones(1)), ("c", tg.ones(2))])    # pairs: in order; c keeps its place
    assert list(d.keys()) == ["a", "b", "n", "c", "z"]
    assert list(d.state_dict()) == ["a", "b", "c", "z"]
    assert d["c"].tolist() == [1.0, 1.0]
    assert d.get("missing") is None and d.get("missing", 5) == 5
    assert d.setdefault("a") is d["a"]
    assert d.pop("n") == 3 and "n" not in d
    k, v = d.popitem()
    assert k == "z" and v.shape == (1,) and list(d) == ["a", "b", "c"]
    del d["b"]
    assert list(d) == ["a", "c"] and [n for n, _ in d.named_parameters()] == ["a", "c"]
    assert list(reversed(d)) == ["c", "a"]
    assert [n for n, _ in d.items()] == ["a", "c"] and list(d.values())[0] is d["a"]
    e = d.copy()
    assert list(e) == ["a", "c"] and e["a"] is d["a"]
    merged = d | nn.ParameterDict(collections.OrderedDict(y=tg.ones(1), x=tg.ones(1)))
    assert list(merged) == ["a", "c", "y", "x"]
    d |= {"q": tg.ones(1)}
    assert list(d) == ["a", "c", "q"]
    assert list(d.fromkeys(["u", "v"], tg.ones(1))) == ["u", "v"]
    d.clear()
    assert len(d) == 0 and list(d.parameters()) == []


def test_parameter_dict_in_a_model_trains_and_round_trips_its_state():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.p = nn.ParameterDict({"scale": tg.full((3,), 2.0), "shift": tg.zeros(3)})

        def forward(self, x):
            return x * self.p["scale"] + self.p["shift"]
    m = Model()
    assert list(m.state_dict()) == ["p.scale", "p.shift"]
    opt = tg.optim.SGD(m.parameters(), lr=0.5)
    m(tg.ones(3)).sum().backward()
    opt.step()
    assert m.p["scale"].tolist() == [1.5] * 3 and m.p["shift"].tolist() == [-0.5] * 3
    other = Model()
    other.load_state_dict(m.state_dict())
    assert other.p["scale"].tolist() == [1.5] * 3


def test_parameter_dict_matches_torch():
    torch = pytest.importorskip("torch")

    def build(L):
        return L.nn.ParameterDict({"w": L.nn.Parameter(L.ones(2, 3)), "b": L.zeros(2),
                                   "c": 3, "d": L.ones(1, dtype=L.float64)})
    ours, theirs = build(tg), build(torch)
    assert repr(ours) == repr(theirs).replace("torch.", "tapegrad.")
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert list(ours) == list(theirs)
    assert repr(nn.ParameterDict()) == repr(torch.nn.ParameterDict())
    one = nn.Sequential(nn.ParameterDict({"a": nn.Parameter(tg.ones(2))}))
    ref = torch.nn.Sequential(torch.nn.ParameterDict({"a": torch.nn.Parameter(torch.ones(2))}))
    assert repr(one) == repr(ref).replace("torch.", "tapegrad.")


def test_parameter_list_repr_matches_torch():
    torch = pytest.importorskip("torch")

    def build(L):
        return L.nn.ParameterList([L.nn.Parameter(L.ones(2, 3)), L.zeros(4, dtype=L.float64),
                                   "x"])
    assert repr(build(tg)) == repr(build(torch)).replace("torch.", "tapegrad.")


def test_parameter_dict_errors():
    d = nn.ParameterDict()
    with pytest.raises(TypeError, match="Index given to ParameterDict cannot be used as a key as "
                                        r"it is not a string \(type is 'int'\)"):
        d[1] = tg.ones(1)
    with pytest.raises(TypeError, match="ParametersDict.update should be called with an "
                                        "iterable of key/value pairs, but got int"):
        nn.ParameterDict(3)
    with pytest.raises(TypeError, match="ParameterDict update sequence element #0 should be "
                                        "Iterable; isint"):
        nn.ParameterDict([3])
    with pytest.raises(ValueError, match="ParameterDict update sequence element #0 has length "
                                         "3; 2 is required"):
        nn.ParameterDict([("a", 1, 2)])
    with pytest.raises(RuntimeError, match="ParameterDict should not be called."):
        d(1)
    with pytest.raises(AttributeError, match="'ParameterDict' object has no attribute 'a'"):
        d["a"]
    with pytest.raises(KeyError):
        d.popitem()
    assert len(d) == 0


# ------------------------------------------------------------------ recurrent cells
CELLS = [("RNNCell", (3, 4), {}), ("RNNCell", (3, 4, False, "relu"), {}),
         ("LSTMCell", (3, 4), {}), ("LSTMCell", (3, 4), {"bias": False}),
         ("GRUCell", (3, 4), {}), ("GRUCell", (3, 4, False), {})]


@pytest.mark.parametrize("name,args,kwargs", CELLS)
def test_cells_match_torch(name, args, kwargs):
    """Parameters (names, shapes, order, reprs) as PyTorch's; outputs and every gradient
    (input, hidden states, parameters) equal, batched and unbatched, hx given or zeros."""
    torch = pytest.importorskip("torch")
    m, mt = getattr(nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)
    assert repr(m) == repr(mt)
    assert list(m.state_dict()) == list(mt.state_dict())
    assert [tuple(p.shape) for p in m.parameters()] == [tuple(p.shape) for p in mt.parameters()]
    lstm = name == "LSTMCell"
    x, h, c = values(51, 2, 3), values(52, 2, 4), values(53, 2, 4)
    for batch in (slice(None), 0):                          # batched, then one sample
        xs, hs, cs = x[batch], h[batch], c[batch]
        m.zero_grad()
        mt.zero_grad()
        assert_modules_match(m, mt, xs)                               # hx = zeros
        m.zero_grad()
        mt.zero_grad()
        if lstm:
            assert_modules_match(_Pair(m), _Pair(mt), xs, hs, cs)
        else:
            assert_modules_match(m, mt, xs, hs)
    out = m(tg.tensor(x))
    assert (out[0] if lstm else out).shape == (2, 4)


class _Pair:
    """An LSTM cell called as f(x, h, c) (hx a tuple), with the cell's parameters."""

    def __init__(self, cell):
        self.cell = cell

    def __call__(self, x, h, c):
        return self.cell(x, (h, c))

    def __getattr__(self, name):
        return getattr(self.cell, name)


def test_cells_finite_differences_and_init():
    tg.manual_seed(0)
    for cell in (nn.RNNCell(3, 2).double(), nn.GRUCell(3, 2).double(),
                 nn.LSTMCell(3, 2).double()):
        x, h = leaf(values(54, 2, 3)), leaf(values(55, 2, 2))
        w = cell.weight_hh
        if isinstance(cell, nn.LSTMCell):
            assert gradcheck(lambda a, b, _w, c=cell: c(a, (b, b * 0.5)), (x, h, w))
        else:
            assert gradcheck(lambda a, b, _w, c=cell: c(a, b), (x, h, w))
    for hidden in (4, 25):
        bound = 1 / math.sqrt(hidden)
        cell = nn.LSTMCell(6, hidden)
        for p in cell.parameters():
            a = numpy_of(p)
            assert a.min() >= -bound and a.max() <= bound and a.std() > bound / 3
        tg.manual_seed(9)
        first = numpy_of(nn.GRUCell(6, hidden).weight_ih).copy()
        tg.manual_seed(9)
        np.testing.assert_array_equal(numpy_of(nn.GRUCell(6, hidden).weight_ih), first)
    assert nn.RNNCell(2, 3, dtype=F64).weight_ih.dtype is F64
    assert nn.RNNCell(2, 3, bias=False).bias_ih is None


def test_cell_errors():
    rnn = nn.RNNCell(3, 4)
    with pytest.raises(ValueError, match="RNNCell: Expected input to be 1D or 2D, got 3D "
                                         "instead"):
        rnn(tg.ones(2, 2, 3))
    with pytest.raises(ValueError, match="RNNCell: Expected hidden to be 1D or 2D, got 3D "
                                         "instead"):
        rnn(tg.ones(2, 3), tg.ones(1, 2, 4))
    with pytest.raises(ValueError, match=r"LSTMCell: Expected hx\[1\] to be 1D or 2D, got 3D "
                                         "instead"):
        nn.LSTMCell(3, 4)(tg.ones(2, 3), (tg.ones(2, 4), tg.ones(1, 2, 4)))
    with pytest.raises(ValueError, match="GRUCell: Expected input to be 1D or 2D"):
        nn.GRUCell(3, 4)(tg.ones(1, 1, 3))
    with pytest.raises(RuntimeError, match="input has inconsistent input_size: got 5 expected "
                                           "3"):
        rnn(tg.ones(2, 5))
    with pytest.raises(RuntimeError, match="Input batch size 2 doesn't match hidden0 batch "
                                           "size 3"):
        rnn(tg.ones(2, 3), tg.ones(3, 4))
    with pytest.raises(RuntimeError, match="hidden0 has inconsistent hidden_size: got 5, "
                                           "expected 4"):
        nn.GRUCell(3, 4)(tg.ones(2, 3), tg.ones(2, 5))
    with pytest.raises(RuntimeError, match="hidden1 has inconsistent hidden_size: got 5, "
                                           "expected 4"):
        nn.LSTMCell(3, 4)(tg.ones(2, 3), (tg.ones(2, 4), tg.ones(2, 5)))
    with pytest.raises(RuntimeError, match="hidden0 has inconsistent hidden_size: got 1, "
                                           "expected 4"):
        rnn(tg.ones(3), tg.ones(1, 4))                 # unbatched input, batched hx
    with pytest.raises(RuntimeError, match="Unknown nonlinearity: sigmoid"):
        nn.RNNCell(3, 4, nonlinearity="sigmoid")(tg.ones(3))


# ------------------------------------------------------------------ compiled replay
def test_new_layers_in_a_compiled_training_step_match_eager():
    """The compositions record and replay: a step through the new layers and losses gives
    the eager losses, with no graph break."""
    res = []
    for compiled in (False, True):
        tg.manual_seed(4)
        rnn = nn.RNNCell(4, 6, nonlinearity="relu")
        cell = nn.GRUCell(4, 6)
        lstm = nn.LSTMCell(6, 6)
        head = nn.Sequential(nn.RMSNorm(6), nn.PReLU(6), nn.Mish(), nn.Linear(6, 4),
                             nn.Hardswish(), nn.Unflatten(1, (2, 2)), nn.GroupNorm(2, 2),
                             nn.Flatten(), nn.CELU(0.5), nn.Softshrink(0.1), nn.GLU(),
                             nn.Threshold(-0.3, -0.2), nn.Hardshrink(0.05), nn.Tanhshrink())
        params = [*rnn.parameters(), *cell.parameters(), *lstm.parameters(),
                  *head.parameters()]
        opt = tg.optim.SGD(params, lr=0.05)

        def step(x, y):
            opt.zero_grad()
            h = cell(x, rnn(x))
            h, c = lstm(h, (h, h))
            out = head(h + F.selu(c))
            loss = (F.gaussian_nll_loss(out, y, F.hardsigmoid(out) + 0.1)
                    + F.margin_ranking_loss(out[:, 0], out[:, 1], y[:, 0].sign(), 0.1)
                    + F.pairwise_distance(out, y).mean() + F.softmin(out, 1).sum()
                    + F.cosine_embedding_loss(out, y, y[:, 0].sign(), 0.1)
                    + F.poisson_nll_loss(out, y.abs() * 2, full=True)
                    + F.gaussian_nll_loss(out, y, 0.5, full=True)
                    + F.soft_margin_loss(out, y.sign())
                    + nn.KLDivLoss(reduction="batchmean")(out.log_softmax(1), y.softmax(1)))
            loss.backward()
            opt.step()
            return loss
        f = tg.compile(step) if compiled else step
        rng = np.random.default_rng(56)
        with warnings.catch_warnings():
            warnings.simplefilter("error", tg.CompileWarning)
            res.append([f(tg.tensor(rng.standard_normal((5, 4)).astype(np.float32)),
                          tg.tensor(rng.standard_normal((5, 2)).astype(np.float32))).item()
                        for _ in range(4)])
        if compiled:
            assert f.stats == {"recordings": 1, "replays": 3}
    np.testing.assert_allclose(res[0], res[1], rtol=1e-6)
