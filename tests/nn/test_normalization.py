"""Batch, instance, group and local response normalisation, the channel-wise and alpha
dropouts, Bilinear and EmbeddingBag against PyTorch: values and float64 gradients from
the same weights, default initialisation bit for bit after the same manual_seed, dropout
masks bit for bit after the same seed, running statistics, state_dict layout, errors by
type and message, and a compiled training step equal to eager."""
import warnings

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn as nn
import tapegrad.nn.functional as F
from tests.replay.helpers import assert_models_same, assert_same, compile_, no_break

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _pair(a, grad=True):
    return (tg.tensor(a, requires_grad=grad), torch.tensor(a, requires_grad=grad))


def _check(fn, tfn, arrays, dtype=np.float64, grad=True, rtol=None):
    """fn(*tapegrad tensors) against tfn(*torch tensors): values, and (float64) the
    gradients of every input for a random cotangent."""
    rng = np.random.default_rng(5)
    pairs = [_pair(np.asarray(a, dtype), grad) for a in arrays]
    y = fn(*[p[0] for p in pairs])
    ty = tfn(*[p[1] for p in pairs])
    tol = rtol or (1e-5 if dtype == np.float32 else 1e-10)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=tol, atol=tol)
    assert y.dtype.name == str(ty.dtype).split(".")[1]
    if not grad:
        return y
    g = rng.standard_normal(ty.shape).astype(dtype)
    (y * tg.tensor(g)).sum().backward()
    (ty * torch.tensor(g)).sum().backward()
    for (a, ta) in pairs:
        np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=tol, atol=tol)
    return y


def _raises(exc, msg, fn, tfn=None):
    """fn raises exc with msg; tfn (PyTorch's spelling) raises the same type and message."""
    with pytest.raises(exc) as got:
        fn()
    assert str(got.value) == msg
    if tfn is not None:
        with pytest.raises(exc) as want:
            tfn()
        assert str(want.value).replace("torch.", "tapegrad.") == msg


RNG = np.random.default_rng(0)


# ------------------------------------------------------------------ batch_norm
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(5, 3), (4, 3, 5), (3, 3, 2, 4), (2, 3, 2, 2, 2)])
def test_batch_norm_training_and_eval_match_torch(shape, dtype):
    x = RNG.standard_normal(shape)
    w, b = RNG.standard_normal(3), RNG.standard_normal(3)
    y = _check(lambda x, w, b: F.batch_norm(x, None, None, w, b, True, 0.1, 1e-3),
               lambda x, w, b: TF.batch_norm(x, None, None, w, b, True, 0.1, 1e-3),
               (x, w, b), dtype)
    assert y.grad_fn.name() == "NativeBatchNormBackward0"
    rm, rv = RNG.standard_normal(3), RNG.uniform(0.5, 2.0, 3)
    y = _check(lambda x, w, b: F.batch_norm(x, tg.tensor(rm.astype(dtype)),
                                            tg.tensor(rv.astype(dtype)), w, b),
               lambda x, w, b: TF.batch_norm(x, torch.tensor(rm.astype(dtype)),
                                             torch.tensor(rv.astype(dtype)), w, b),
               (x, w, b), dtype)
    assert y.grad_fn.name() == "NativeBatchNormBackward0"
    _check(lambda x: F.batch_norm(x, None, None, training=True),
           lambda x: TF.batch_norm(x, None, None, training=True), (x,), dtype)


def test_batch_norm_transposed_input_and_no_weight():
    x = RNG.standard_normal((4, 3, 5))
    b = RNG.standard_normal(3)
    _check(lambda x, b: F.batch_norm(x.transpose(0, 2).transpose(0, 2), None, None, None, b,
                                     True),
           lambda x, b: TF.batch_norm(x, None, None, None, b, True), (x, b))
    _check(lambda x, b: F.batch_norm(x.permute(2, 1, 0), None, None, None, b, True),
           lambda x, b: TF.batch_norm(x.permute(2, 1, 0), None, None, None, b, True), (x, b))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("momentum", [0.1, 0.5, None])
@pytest.mark.parametrize("cls,shape", [("BatchNorm1d", (6, 4)), ("BatchNorm1d", (3, 4, 5)),
                                       ("BatchNorm2d", (3, 4, 2, 3)),
                                       ("BatchNorm3d", (2, 4, 2, 2, 3))])
def test_batch_norm_modules_running_stats_and_eval(cls, shape, momentum, dtype):
    tdt = tg.float64 if dtype == np.float64 else tg.float32
    m = getattr(nn, cls)(4, momentum=momentum, dtype=tdt)
    tm = getattr(torch.nn, cls)(4, momentum=momentum,
                                dtype=torch.float64 if dtype == np.float64 else torch.float32)
    w, b = RNG.standard_normal(4).astype(dtype), RNG.standard_normal(4).astype(dtype)
    with tg.no_grad():
        m.weight.copy_(tg.tensor(w))
        m.bias.copy_(tg.tensor(b))
    with torch.no_grad():
        tm.weight.copy_(torch.tensor(w))
        tm.bias.copy_(torch.tensor(b))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for _ in range(3):
        x = RNG.standard_normal(shape).astype(dtype)
        np.testing.assert_allclose(m(tg.tensor(x)).detach().numpy(),
                                   tm(torch.tensor(x)).detach().numpy(), rtol=tol, atol=tol)
    sd, tsd = m.state_dict(), tm.state_dict()
    assert list(sd) == list(tsd) == ["weight", "bias", "running_mean", "running_var",
                                     "num_batches_tracked"]
    for k in sd:
        np.testing.assert_allclose(sd[k].numpy(), tsd[k].numpy(), rtol=tol, atol=tol)
    assert sd["num_batches_tracked"].dtype is tg.int64 and int(sd["num_batches_tracked"]) == 3
    m.eval()
    tm.eval()
    x = RNG.standard_normal(shape).astype(dtype)
    np.testing.assert_allclose(m(tg.tensor(x)).detach().numpy(),
                               tm(torch.tensor(x)).detach().numpy(), rtol=tol, atol=tol)
    assert repr(m) == repr(tm)


def test_batch_norm_without_affine_or_tracking():
    x = RNG.standard_normal((5, 3, 4))
    for kw in (dict(affine=False), dict(track_running_stats=False),
               dict(affine=False, track_running_stats=False), dict(bias=False)):
        m, tm = nn.BatchNorm1d(3, **kw).double(), torch.nn.BatchNorm1d(3, **kw).double()
        assert [n for n, _ in m.named_parameters()] == [n for n, _ in tm.named_parameters()]
        assert list(m.state_dict()) == list(tm.state_dict())
        assert repr(m) == repr(tm)
        for mode in ("train", "eval"):
            getattr(m, mode)()
            getattr(tm, mode)()
            xa, xt = _pair(x)
            y, ty = m(xa), tm(xt)
            np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), atol=1e-12)
            y.sum().backward()
            ty.sum().backward()
            np.testing.assert_allclose(xa.grad.numpy(), xt.grad.numpy(), atol=1e-12)
        if m.running_mean is not None:
            np.testing.assert_allclose(m.running_var.numpy(), tm.running_var.numpy())


def test_batch_norm_reset_and_load_state_dict():
    m = nn.BatchNorm2d(3)
    m(tg.randn(4, 3, 2, 2))
    assert int(m.num_batches_tracked) == 1 and not np.allclose(m.running_var.numpy(), 1)
    m.reset_running_stats()
    assert int(m.num_batches_tracked) == 0 and np.all(m.running_var.numpy() == 1)
    tm = torch.nn.BatchNorm2d(3)
    tm(torch.randn(4, 3, 2, 2))
    m.load_state_dict({k: tg.tensor(v.numpy()) for k, v in tm.state_dict().items()})
    np.testing.assert_array_equal(m.running_mean.numpy(), tm.running_mean.numpy())
    assert int(m.num_batches_tracked) == 1


def test_batch_norm_errors():
    x = tg.randn(4, 3)
    tx = torch.randn(4, 3)
    for args, msg in ((( None, None, tg.ones(4), None, True), "weight should contain 3 elements not 4"),
                      ((None, None, None, tg.ones(4), True), "bias should contain 3 elements not 4"),
                      ((tg.zeros(4), tg.ones(3), None, None, True),
                       "running_mean should contain 3 elements not 4"),
                      ((None, None, None, None, False),
                       "running_mean must be defined in evaluation mode"),
                      ((tg.zeros(3), None, None, None, False),
                       "running_var must be defined in evaluation mode")):
        targs = tuple(torch.tensor(a.numpy()) if isinstance(a, tg.Tensor) else a for a in args)
        _raises(RuntimeError, msg, lambda: F.batch_norm(x, *args),
                lambda: TF.batch_norm(tx, *targs))
    _raises(ValueError, "running_mean and running_var must either both be None or neither be "
            "None", lambda: F.batch_norm(x, tg.zeros(3), None, training=True),
            lambda: TF.batch_norm(tx, torch.zeros(3), None, training=True))
    _raises(ValueError, "Expected more than 1 value per channel when training, got input size "
            "tapegrad.Size([1, 3])", lambda: F.batch_norm(tg.ones(1, 3), None, None, training=True),
            lambda: TF.batch_norm(torch.ones(1, 3), None, None, training=True))
    _raises(ValueError, "batch_norm eps must be positive during training, but got 0",
            lambda: F.batch_norm(x, None, None, training=True, eps=0),
            lambda: TF.batch_norm(tx, None, None, training=True, eps=0))
    _raises(NotImplementedError, "\"batch_norm\" not implemented for 'Long'",
            lambda: F.batch_norm(x.long(), None, None, training=True),
            lambda: TF.batch_norm(tx.long(), None, None, training=True))
    _raises(RuntimeError, "mixed dtype (CPU): all inputs must share same datatype.",
            lambda: F.batch_norm(x.double(), None, None, tg.ones(3), training=True),
            lambda: TF.batch_norm(tx.double(), None, None, torch.ones(3), training=True))
    _raises(ValueError, "expected 4D input (got 3D input)", lambda: nn.BatchNorm2d(3)(
        tg.ones(2, 3, 4)), lambda: torch.nn.BatchNorm2d(3)(torch.ones(2, 3, 4)))
    with pytest.raises(TypeError):
        F.batch_norm(x, None, None, training=True, cudnn_enabled=True)
    _raises(TypeError, "batch_norm(): argument 'momentum' (position 7) must be float, not "
            "NoneType", lambda: F.batch_norm(x, None, None, training=True, momentum=None),
            lambda: TF.batch_norm(tx, None, None, training=True, momentum=None))
    _raises(TypeError, "batch_norm(): argument 'training' (position 6) must be bool, not str",
            lambda: F.batch_norm(x, None, None, training="yes"),
            lambda: TF.batch_norm(tx, None, None, training="yes"))
    _raises(TypeError, "instance_norm(): argument 'use_input_stats' (position 6) must be bool, "
            "not str", lambda: F.instance_norm(tg.ones(2, 3, 4), use_input_stats="a"),
            lambda: TF.instance_norm(torch.ones(2, 3, 4), use_input_stats="a"))
    _raises(ZeroDivisionError, "integer division or modulo by zero",
            lambda: F.group_norm(tg.ones(2, 4, 3), 0),
            lambda: TF.group_norm(torch.ones(2, 4, 3), 0))
    _raises(RuntimeError, "Expected num groups to be greater than 0, got -2",
            lambda: F.group_norm(tg.ones(2, 4, 3), -2),
            lambda: TF.group_norm(torch.ones(2, 4, 3), -2))
    for shape, msg in (((2, 3, 4), "kH: 0 kW: 1"), ((2, 3, 4, 5), "kT: 0 kH: 1 kW: 1")):
        _raises(RuntimeError, "kernel size should be greater than zero, but got " + msg,
                lambda: F.local_response_norm(tg.ones(*shape), 0),
                lambda: TF.local_response_norm(torch.ones(*shape), 0))


# ------------------------------------------------------------------ instance_norm
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(2, 3, 5), (3, 3, 2, 4)])
def test_instance_norm_matches_torch(shape, dtype):
    x = RNG.standard_normal(shape)
    w, b = RNG.standard_normal(3), RNG.standard_normal(3)
    y = _check(lambda x, w, b: F.instance_norm(x, weight=w, bias=b, eps=1e-3),
               lambda x, w, b: TF.instance_norm(x, weight=w, bias=b, eps=1e-3), (x, w, b), dtype)
    assert y.grad_fn.name() == "ViewBackward0"
    assert y.grad_fn.next_functions[0][0].name() == "NativeBatchNormBackward0"
    rm, rv = RNG.standard_normal(3), RNG.uniform(0.5, 2, 3)
    _check(lambda x, w, b: F.instance_norm(x, tg.tensor(rm.astype(dtype)),
                                           tg.tensor(rv.astype(dtype)), w, b, False),
           lambda x, w, b: TF.instance_norm(x, torch.tensor(rm.astype(dtype)),
                                            torch.tensor(rv.astype(dtype)), w, b, False),
           (x, w, b), dtype)


@pytest.mark.parametrize("cls,shape", [("InstanceNorm1d", (2, 3, 5)), ("InstanceNorm1d", (3, 5)),
                                       ("InstanceNorm2d", (2, 3, 2, 4)),
                                       ("InstanceNorm2d", (3, 2, 4)),
                                       ("InstanceNorm3d", (2, 3, 2, 2, 2))])
@pytest.mark.parametrize("kw", [{}, dict(affine=True), dict(track_running_stats=True),
                                dict(affine=True, track_running_stats=True, momentum=None)])
def test_instance_norm_modules(cls, shape, kw):
    m, tm = getattr(nn, cls)(3, **kw).double(), getattr(torch.nn, cls)(3, **kw).double()
    assert repr(m) == repr(tm) and list(m.state_dict()) == list(tm.state_dict())
    for _ in range(2):
        xa, xt = _pair(RNG.standard_normal(shape))
        y, ty = m(xa), tm(xt)
        np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), atol=1e-12)
        y.sum().backward()
        ty.sum().backward()
        np.testing.assert_allclose(xa.grad.numpy(), xt.grad.numpy(), atol=1e-12)
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(m.state_dict()[k].numpy(), v.numpy(), atol=1e-12)
    m.eval()
    tm.eval()
    x = RNG.standard_normal(shape)
    np.testing.assert_allclose(m(tg.tensor(x)).detach().numpy(),
                               tm(torch.tensor(x)).detach().numpy(),
                               atol=1e-12)


def test_instance_norm_errors_and_warning():
    _raises(ValueError, "Expected more than 1 spatial element when training, got input size "
            "tapegrad.Size([2, 3, 1])", lambda: F.instance_norm(tg.ones(2, 3, 1)),
            lambda: TF.instance_norm(torch.ones(2, 3, 1)))
    _raises(RuntimeError, "weight should contain 6 elements not 4",
            lambda: F.instance_norm(tg.ones(2, 3, 4), weight=tg.ones(2)),
            lambda: TF.instance_norm(torch.ones(2, 3, 4), weight=torch.ones(2)))
    _raises(RuntimeError, "Expected running_mean and running_var to be defined when "
            "use_input_stats is false",
            lambda: F.instance_norm(tg.ones(2, 3, 4), use_input_stats=False),
            lambda: TF.instance_norm(torch.ones(2, 3, 4), use_input_stats=False))
    _raises(ValueError, "expected 2D or 3D input (got 4D input)",
            lambda: nn.InstanceNorm1d(3)(tg.ones(2, 3, 4, 5)),
            lambda: torch.nn.InstanceNorm1d(3)(torch.ones(2, 3, 4, 5)))
    _raises(ValueError, "expected input's size at dim=1 to match num_features (4), but got: 3.",
            lambda: nn.InstanceNorm1d(4, affine=True)(tg.ones(2, 3, 4)),
            lambda: torch.nn.InstanceNorm1d(4, affine=True)(torch.ones(2, 3, 4)))
    with pytest.warns(UserWarning, match="input's size at dim=1 does not match num_features"):
        nn.InstanceNorm1d(4)(tg.randn(2, 3, 4))


# ------------------------------------------------------------------ group_norm
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_group_norm_4d_matches_torch(dtype):
    x = RNG.standard_normal((3, 6, 2, 3))
    w, b = RNG.standard_normal(6), RNG.standard_normal(6)
    for g in (1, 2, 3, 6):
        y = _check(lambda x, w, b: F.group_norm(x, g, w, b),
                   lambda x, w, b: TF.group_norm(x, g, w, b), (x, w, b), dtype)
        assert y.grad_fn.name() == "NativeGroupNormBackward0"
    # (values only: PyTorch's backward of a bias without a weight fails, "tensor does not
    # have a device")
    _check(lambda x, b: F.group_norm(x, 2, None, b), lambda x, b: TF.group_norm(x, 2, None, b),
           (x, b), dtype, grad=False)
    _check(lambda x, w: F.group_norm(x, 3, w), lambda x, w: TF.group_norm(x, 3, w), (x, w), dtype)


def test_group_norm_module_4d_and_gradcheck():
    m, tm = nn.GroupNorm(2, 4).double(), torch.nn.GroupNorm(2, 4).double()
    xa, xt = _pair(RNG.standard_normal((2, 4, 3, 3)))
    np.testing.assert_allclose(m(xa).detach().numpy(), tm(xt).detach().numpy(), atol=1e-12)
    w, b = tg.randn(4, dtype=tg.float64, requires_grad=True), tg.randn(4, dtype=tg.float64,
                                                                      requires_grad=True)
    assert tg.testing.gradcheck(lambda x, w, b: F.group_norm(x, 2, w, b),
                                 (tg.randn(2, 4, 2, 3, dtype=tg.float64, requires_grad=True),
                                  w, b))


# ------------------------------------------------------------------ local_response_norm
@pytest.mark.parametrize("shape", [(2, 5, 4), (2, 5, 3, 2), (1, 4, 2, 2, 2)])
@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_local_response_norm_matches_torch(shape, size):
    x = RNG.standard_normal(shape)
    _check(lambda x: F.local_response_norm(x, size, 1e-2, 0.6, 2.0),
           lambda x: TF.local_response_norm(x, size, 1e-2, 0.6, 2.0), (x,))
    _check(lambda x: nn.LocalResponseNorm(size)(x),
           lambda x: torch.nn.LocalResponseNorm(size)(x), (x,), np.float32)
    assert repr(nn.LocalResponseNorm(size)) == repr(torch.nn.LocalResponseNorm(size))
    _raises(ValueError, "Expected 3D or higher dimensionality                          input "
            "(got 2 dimensions)", lambda: F.local_response_norm(tg.ones(2, 3), 2),
            lambda: TF.local_response_norm(torch.ones(2, 3), 2))


# ------------------------------------------------------------------ dropouts
DROPOUTS = [("dropout1d", "Dropout1d", (4, 6, 5)), ("dropout1d", "Dropout1d", (6, 5)),
            ("dropout2d", "Dropout2d", (3, 6, 2, 3)), ("dropout3d", "Dropout3d", (2, 4, 2, 2, 3)),
            ("dropout3d", "Dropout3d", (4, 2, 2, 3)), ("alpha_dropout", "AlphaDropout", (5, 7)),
            ("feature_alpha_dropout", "FeatureAlphaDropout", (3, 6, 4))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fn,cls,shape", DROPOUTS)
def test_dropout_masks_are_pytorchs(fn, cls, shape, dtype):
    x = RNG.standard_normal(shape).astype(dtype)
    for p in (0.2, 0.5):
        tg.manual_seed(11)
        torch.manual_seed(11)
        ours = [getattr(F, fn)(tg.tensor(x), p, True) for _ in range(2)]
        theirs = [getattr(TF, fn)(torch.tensor(x), p, True) for _ in range(2)]
        for a, b in zip(ours, theirs):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        assert not np.array_equal(ours[0].numpy(), ours[1].numpy())
        m, tm = getattr(nn, cls)(p), getattr(torch.nn, cls)(p)
        assert repr(m) == repr(tm)
        tg.manual_seed(3)
        torch.manual_seed(3)
        np.testing.assert_array_equal(m(tg.tensor(x)).numpy(), tm(torch.tensor(x)).numpy())
        m.eval()
        xt = tg.tensor(x)
        assert m(xt) is xt
    # in place, and the gradient is the mask's
    tg.manual_seed(5)
    torch.manual_seed(5)
    xa, xt = _pair(x)
    y, ty = getattr(F, fn)(xa * 1.0, 0.4, True, True), getattr(TF, fn)(xt * 1.0, 0.4, True, True)
    np.testing.assert_array_equal(y.detach().numpy(), ty.detach().numpy())
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_allclose(xa.grad.numpy(), xt.grad.numpy(), rtol=1e-6)


def test_dropout_edge_cases_and_errors():
    x = tg.randn(2, 3, 4)
    for fn in ("dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert getattr(F, fn)(x, 0.0, True) is x
            assert np.all(getattr(F, fn)(x, 1.0, True).numpy() == 0)
            _raises(ValueError, "dropout probability has to be between 0 and 1, but got 1.5",
                    lambda: getattr(F, fn)(x, 1.5, True))
        with pytest.raises(ValueError, match="dropout probability"):
            getattr(nn, {"dropout1d": "Dropout1d", "dropout2d": "Dropout2d",
                         "dropout3d": "Dropout3d", "alpha_dropout": "AlphaDropout",
                         "feature_alpha_dropout": "FeatureAlphaDropout"}[fn])(-0.1)
    assert F.alpha_dropout(x, 0.5) is x                 # training defaults to False
    _raises(RuntimeError, "dropout1d: Expected 2D or 3D input, but received a 1D input. Note "
            "that dropout1d exists to provide channel-wise dropout on inputs with 1 spatial "
            "dimension, a channel dimension, and an optional batch dimension (i.e. 2D or 3D "
            "inputs).", lambda: F.dropout1d(tg.ones(3)), lambda: TF.dropout1d(torch.ones(3)))
    _raises(RuntimeError, "Feature dropout requires at least 2 dimensions in the input",
            lambda: F.feature_alpha_dropout(tg.ones(3), 0.5, True),
            lambda: TF.feature_alpha_dropout(torch.ones(3), 0.5, True))
    _raises(RuntimeError, "result type Float can't be cast to the desired output type Long",
            lambda: F.alpha_dropout(tg.ones(2, 3).long(), 0.5, True),
            lambda: TF.alpha_dropout(torch.ones(2, 3).long(), 0.5, True))
    with pytest.warns(UserWarning, match="dropout2d: Received a 3D input to dropout2d"):
        F.dropout2d(x)
    with pytest.warns(UserWarning, match="dropout2d: Received a 2-D input to dropout2d"):
        F.dropout2d(tg.ones(2, 3))


# ------------------------------------------------------------------ bilinear
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bilinear_matches_torch(dtype):
    w, b = RNG.standard_normal((5, 3, 4)), RNG.standard_normal(5)
    for s1, s2 in (((2, 3), (2, 4)), ((3,), (4,)), ((2, 2, 3), (2, 2, 4))):
        x1, x2 = RNG.standard_normal(s1), RNG.standard_normal(s2)
        _check(F.bilinear, TF.bilinear, (x1, x2, w, b), dtype)
        _check(F.bilinear, TF.bilinear, (x1, x2, w), dtype)


def test_bilinear_module_init_and_errors():
    tg.manual_seed(0)
    torch.manual_seed(0)
    m, tm = nn.Bilinear(3, 4, 5), torch.nn.Bilinear(3, 4, 5)
    for k, v in tm.state_dict().items():
        np.testing.assert_array_equal(m.state_dict()[k].numpy(), v.numpy())
    assert repr(m) == repr(tm) and nn.Bilinear(3, 4, 5, bias=False).bias is None
    x1, x2 = RNG.standard_normal((2, 3)).astype(np.float32), RNG.standard_normal((2, 4)).astype(
        np.float32)
    np.testing.assert_allclose(m(tg.tensor(x1), tg.tensor(x2)).detach().numpy(),
                               tm(torch.tensor(x1), torch.tensor(x2)).detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    w = tg.ones(5, 3, 4)
    tw = torch.ones(5, 3, 4)
    for a, b, msg in (((2, 3), (2, 5), "bilinear(): input2 size does not match weight size: got 5 "
                       "but expected 4"),
                      ((2, 2), (2, 4), "bilinear(): input1 size does not match weight size: got 2 "
                       "but expected 3"),
                      ((2, 3), (3, 4), "bilinear(): input batch dimensions do not match at dim 0: "
                       "got 2 and 3"),
                      ((2, 3), (2, 1, 4), "bilinear(): input dimensions do not match: got 2 and 3")):
        _raises(RuntimeError, msg, lambda: F.bilinear(tg.ones(*a), tg.ones(*b), w),
                lambda: TF.bilinear(torch.ones(*a), torch.ones(*b), tw))
    _raises(RuntimeError, "bilinear(): bias size does not match weight size: got 4 but "
            "expected 5", lambda: F.bilinear(tg.ones(2, 3), tg.ones(2, 4), w, tg.ones(4)),
            lambda: TF.bilinear(torch.ones(2, 3), torch.ones(2, 4), tw, torch.ones(4)))
    _raises(ValueError, "in1_features must be > 0, but got (in1_features=0)",
            lambda: nn.Bilinear(0, 2, 3), lambda: torch.nn.Bilinear(0, 2, 3))


# ------------------------------------------------------------------ embedding_bag
BAG_CASES = [dict(mode="sum"), dict(mode="mean"), dict(mode="max"),
             dict(mode="sum", padding_idx=4), dict(mode="mean", padding_idx=4),
             dict(mode="max", padding_idx=-6)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kw", BAG_CASES)
def test_embedding_bag_matches_torch(kw, dtype):
    w = RNG.standard_normal((10, 3))
    for inp, off in (([1, 2, 4, 5, 4, 3], [0, 3, 3]), ([1, 2, 4, 5, 4, 3], [0, 1, 5]),
                     ([[1, 2, 4], [4, 4, 3]], None), ([[4, 4], [4, 4]], None)):
        def ours(w):
            return F.embedding_bag(tg.tensor(inp), w, None if off is None else tg.tensor(off),
                                   **kw)

        def theirs(w):
            return TF.embedding_bag(torch.tensor(inp), w,
                                    None if off is None else torch.tensor(off), **kw)
        y = _check(ours, theirs, (w,), dtype)
        assert y.grad_fn.name() == "EmbeddingBagBackward0"
    if kw.get("padding_idx") is None:
        _check(lambda w: F.embedding_bag(tg.tensor([1, 2, 4, 5]), w, tg.tensor([0, 1, 4]),
                                         include_last_offset=True, **kw),
               lambda w: TF.embedding_bag(torch.tensor([1, 2, 4, 5]), w, torch.tensor([0, 1, 4]),
                                          include_last_offset=True, **kw), (w,), dtype)


def test_embedding_bag_per_sample_weights():
    w, ps = RNG.standard_normal((10, 3)), RNG.standard_normal(6)
    _check(lambda w, p: F.embedding_bag(tg.tensor([1, 2, 4, 5, 4, 3]), w, tg.tensor([0, 2]),
                                        mode="sum", per_sample_weights=p),
           lambda w, p: TF.embedding_bag(torch.tensor([1, 2, 4, 5, 4, 3]), w,
                                         torch.tensor([0, 2]), mode="sum", per_sample_weights=p),
           (w, ps))
    _check(lambda w, p: F.embedding_bag(tg.tensor([[1, 2, 4], [5, 4, 3]]), w, mode="sum",
                                        per_sample_weights=p),
           lambda w, p: TF.embedding_bag(torch.tensor([[1, 2, 4], [5, 4, 3]]), w, mode="sum",
                                         per_sample_weights=p), (w, ps.reshape(2, 3)))


def test_embedding_bag_module_and_errors():
    for kw in ({}, dict(padding_idx=2), dict(mode="max"), dict(padding_idx=-1, mode="sum")):
        tg.manual_seed(0)
        torch.manual_seed(0)
        m, tm = nn.EmbeddingBag(10, 3, **kw), torch.nn.EmbeddingBag(10, 3, **kw)
        np.testing.assert_array_equal(m.weight.detach().numpy(), tm.weight.detach().numpy())
        assert repr(m) == repr(tm) and m.padding_idx == tm.padding_idx
        np.testing.assert_allclose(m(tg.tensor([[1, 2], [3, 9]])).detach().numpy(),
                                   tm(torch.tensor([[1, 2], [3, 9]])).detach().numpy(), rtol=1e-6)
    e = nn.EmbeddingBag.from_pretrained(tg.ones(4, 2))
    assert not e.weight.requires_grad and e(tg.tensor([[0, 1]])).tolist() == [[1.0, 1.0]]
    w, tw = tg.ones(10, 3), torch.ones(10, 3)
    i, ti = tg.tensor([1, 2]), torch.tensor([1, 2])
    cases = [
        (ValueError, "offsets has to be a 1D Tensor but got None", (i, w), {}),
        (ValueError, "mode has to be one of sum, mean or max", (i, w, tg.tensor([0])),
         dict(mode="foo")),
        (NotImplementedError, "embedding_bag: per_sample_weights was not None. "
         "per_sample_weights is only supported for mode='sum' (got mode='mean'). Please open a "
         "feature request on GitHub.", (i, w, tg.tensor([0])),
         dict(per_sample_weights=tg.ones(2))),
        (RuntimeError, "padding_idx must be within the number of embeddings, -10 through 9, but "
         "got 10", (i, w, tg.tensor([0])), dict(padding_idx=10)),
        (RuntimeError, "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to "
         "start from position 0. However, got 1\n[ tapegrad.LongTensor{} ]", (i, w, tg.tensor([1])),
         {}),
        (RuntimeError, "offsets[-1] can not be greater than input's length 2 but got offsets[-1] "
         "of 3", (i, w, tg.tensor([0, 3])), {}),
        (ValueError, "weight has to be a 2D Tensor, but got Tensor of dimension 1",
         (i, tg.ones(3), tg.tensor([0])), {}),
    ]
    for exc, msg, args, kw in cases:
        targs = tuple(torch.tensor(a.numpy()) for a in args)
        tkw = {k: torch.tensor(v.numpy()) if isinstance(v, tg.Tensor) else v
               for k, v in kw.items()}
        _raises(exc, msg, lambda: F.embedding_bag(*args, **kw),
                lambda: TF.embedding_bag(*targs, **tkw))
    for args, targs, kw in (((tg.tensor([[1, 20]]), w), (torch.tensor([[1, 20]]), tw), {}),
                            ((tg.tensor([1, -1]), w, tg.tensor([0])),
                             (torch.tensor([1, -1]), tw, torch.tensor([0])), {}),
                            ((tg.tensor([1, 20]), w, tg.tensor([0])),
                             (torch.tensor([1, 20]), tw, torch.tensor([0])), dict(mode="max")),
                            ((tg.tensor([1, 20]), w.double(), tg.tensor([0])),
                             (torch.tensor([1, 20]), tw.double(), torch.tensor([0])), {})):
        with pytest.raises(RuntimeError) as want:
            TF.embedding_bag(*targs, **kw)
        _raises(RuntimeError, str(want.value), lambda: F.embedding_bag(*args, **kw))
    with pytest.raises(ValueError, match="if input is 2D, then offsets has to be None"):
        F.embedding_bag(tg.tensor([[1, 2]]), w, tg.tensor([0]))
    with pytest.raises(RuntimeError, match="'indices' to have one of the following scalar types"):
        F.embedding_bag(tg.tensor([1.0, 2.0]), w, tg.tensor([0]))
    with pytest.raises(NotImplementedError):
        nn.EmbeddingBag(4, 2, max_norm=1.0)
    del tw, ti


# ------------------------------------------------------------------ compiled steps
def _cnn(seed):
    tg.manual_seed(seed)
    return nn.Sequential(nn.BatchNorm2d(3), nn.Dropout2d(0.3), nn.InstanceNorm2d(3, affine=True),
                         nn.GroupNorm(1, 3), nn.LocalResponseNorm(2), nn.Flatten(),
                         nn.AlphaDropout(0.2), nn.Linear(3 * 4 * 4, 2))


def test_compiled_training_step_equals_eager():
    rng = np.random.default_rng(3)
    data = [(tg.tensor(rng.standard_normal((4, 3, 4, 4)).astype(np.float32)),
             tg.tensor(rng.integers(0, 2, 4))) for _ in range(5)]
    runs = []
    for compiled in (False, True):
        m = _cnn(1)
        opt = tg.optim.SGD(m.parameters(), lr=0.1)

        def step(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            return loss
        tg.manual_seed(9)
        if compiled:
            c = compile_(step, fuse=False)
            with no_break():
                losses = [c(x, y) for x, y in data]
        else:
            losses = [step(x, y) for x, y in data]
        runs.append((losses, m))
    assert_same(runs[0][0], runs[1][0], "losses")
    assert_models_same(runs[0][1], runs[1][1])
    assert int(runs[1][1][0].num_batches_tracked) == 5


def test_compiled_bilinear_and_embedding_bag_step():
    rng = np.random.default_rng(4)
    # (2-D input, and 1-D input with offsets that change from step to step)
    data = [(tg.tensor(rng.integers(0, 10, (4, 3))), tg.tensor(rng.integers(0, 10, 9)),
             tg.tensor(np.sort(rng.integers(1, 10, 4)) * np.array([0, 1, 1, 1])),
             tg.tensor(rng.standard_normal((4, 2)), dtype=tg.float32))
            for _ in range(4)]
    runs = []
    for compiled in (False, True):
        tg.manual_seed(2)
        bag, bil = nn.EmbeddingBag(10, 3, mode="max"), nn.Bilinear(3, 2, 2)
        bag1 = nn.EmbeddingBag(10, 3, padding_idx=1)
        params = list(bag.parameters()) + list(bil.parameters()) + list(bag1.parameters())
        opt = tg.optim.SGD(params, lr=0.1)

        def step(i, j, o, x):
            opt.zero_grad()
            loss = (bil(bag(i), x) + bil(bag1(j, o), x)).pow(2).mean()
            loss.backward()
            opt.step()
            return loss
        if compiled:
            c = compile_(step, fuse=False)
            with no_break():
                losses = [c(*d) for d in data]
        else:
            losses = [step(*d) for d in data]
        runs.append((losses, [p.detach().numpy().copy() for p in params]))
    assert_same(runs[0][0], runs[1][0], "losses")
    for a, b in zip(runs[0][1], runs[1][1]):
        np.testing.assert_array_equal(a, b)
