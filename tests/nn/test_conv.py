"""Convolutions (issue 40): nn.Conv1d/Conv2d/ConvTranspose1d/ConvTranspose2d, nn.Fold and
nn.Unfold, and their nn.functional spellings, against PyTorch: default initialisation bit for
bit after the same seed, values and float64 gradients from the same weights, the argument
variants (stride, padding as ints, tuples, 'same' and 'valid', dilation, groups, bias,
output_padding, output_size, unbatched input, padding modes), every refusal by type and
message, and a compiled training step equal to eager. The ops themselves are also checked
from their OpInfo in tests/ops/test_every_op.py."""
import re
import warnings

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn as nn
import tapegrad.nn.functional as F
from tapegrad.testing import gradcheck
from tests.replay.helpers import arr, assert_models_same, assert_same, compile_, no_break

torch = pytest.importorskip("torch")
TF = torch.nn.functional

RNG = np.random.default_rng(40)


def _pair(shape, dtype="float64", grad=True, scale=1.0):
    """The same random values as a tapegrad and a PyTorch tensor."""
    a = RNG.standard_normal(shape) * scale
    return (tg.tensor(a, dtype=getattr(tg, dtype), requires_grad=grad),
            torch.tensor(a, dtype=getattr(torch, dtype), requires_grad=grad))


def _close(ours, theirs, tol=1e-12):
    o = ours.detach().numpy() if isinstance(ours, tg.Tensor) else np.asarray(ours)
    t = theirs.detach().numpy()
    assert o.shape == t.shape
    scale = max(float(np.abs(t).max()) if t.size else 1.0, 1.0)
    np.testing.assert_allclose(o, t, rtol=tol, atol=tol * scale)


def _run_both(fn_tg, fn_t, shapes, dtype="float64", tol=1e-12):
    """fn on the same inputs in both libraries: values, then the gradients of a random
    weighted sum of the result."""
    pairs = [_pair(s, dtype) for s in shapes]
    out = fn_tg(*[p[0] for p in pairs])
    ref = fn_t(*[p[1] for p in pairs])
    _close(out, ref, tol)
    g = RNG.standard_normal(tuple(ref.shape))
    (out * tg.tensor(g, dtype=out.dtype)).sum().backward()
    (ref * torch.tensor(g, dtype=ref.dtype)).sum().backward()
    for a, b in pairs:
        _close(a.grad, b.grad, tol)
    return out, ref


# ------------------------------------------------------------------ functional variants
CONV2D = [
    dict(), dict(stride=2), dict(stride=(2, 1), padding=(1, 2)), dict(padding=1, dilation=2),
    dict(dilation=(1, 2), stride=(1, 3)), dict(padding="same"), dict(padding="valid"),
    dict(padding="same", dilation=(2, 1)), dict(groups=2), dict(groups=4, padding=1),
]


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("kw", CONV2D, ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d_matches_pytorch(kw, bias):
    groups = kw.get("groups", 1)
    shapes = [(3, 4, 7, 6), (8, 4 // groups, 3, 2)] + ([(8,)] if bias else [])
    out, ref = _run_both(lambda *a: F.conv2d(*a[:2], *a[2:], **kw),
                         lambda *a: TF.conv2d(*a[:2], *a[2:], **kw), shapes)
    assert type(out.grad_fn).__name__ == ref.grad_fn.name() == "ConvolutionBackward0"


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1), dict(dilation=3),
                                dict(padding="same", dilation=2), dict(groups=2, bias=True),
                                dict(padding="same")], ids=str)
def test_conv1d_matches_pytorch(kw):
    kw = dict(kw)
    bias = kw.pop("bias", False)
    groups = kw.get("groups", 1)
    shapes = [(2, 4, 11), (6, 4 // groups, 4)] + ([(6,)] if bias else [])
    _run_both(lambda *a: F.conv1d(*a, **kw), lambda *a: TF.conv1d(*a, **kw), shapes)


@pytest.mark.parametrize("kw", [dict(), dict(stride=2), dict(stride=(2, 3), padding=(1, 0)),
                                dict(stride=2, output_padding=1),
                                dict(stride=(3, 2), output_padding=(2, 0), dilation=(1, 2)),
                                dict(dilation=2, output_padding=1), dict(groups=2),
                                dict(padding=2)], ids=str)
def test_conv_transpose2d_matches_pytorch(kw):
    groups = kw.get("groups", 1)
    shapes = [(2, 4, 5, 4), (4, 6 // groups, 3, 2), (6,)]
    out, ref = _run_both(lambda *a: F.conv_transpose2d(*a, **kw),
                         lambda *a: TF.conv_transpose2d(*a, **kw), shapes)
    assert type(out.grad_fn).__name__ == ref.grad_fn.name() == "ConvolutionBackward0"


@pytest.mark.parametrize("kw", [dict(), dict(stride=3, padding=1, output_padding=2),
                                dict(groups=2, dilation=2)], ids=str)
def test_conv_transpose1d_matches_pytorch(kw):
    groups = kw.get("groups", 1)
    _run_both(lambda x, w: F.conv_transpose1d(x, w, **kw),
              lambda x, w: TF.conv_transpose1d(x, w, **kw), [(2, 4, 7), (4, 6 // groups, 3)])


@pytest.mark.parametrize("fn", ["conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d"])
def test_unbatched_input_is_squeezed_back(fn):
    d = 1 if fn.endswith("1d") else 2
    x_shape = (4,) + (6,) * d
    w_shape = ((4, 3) if "transpose" in fn else (3, 4)) + (3,) * d
    out, ref = _run_both(lambda x, w, b: getattr(F, fn)(x, w, b),
                         lambda x, w, b: getattr(TF, fn)(x, w, b), [x_shape, w_shape, (3,)])
    assert type(out.grad_fn).__name__ == ref.grad_fn.name() == "SqueezeBackward1"


@pytest.mark.parametrize("fn, x_shape, w_shape, kw", [
    ("conv2d", (5, 8, 32, 30), (6, 4, 3, 3), {"groups": 2}),
    ("conv2d", (5, 8, 32, 30), (6, 8, 1, 1), {}),           # a 1x1 convolution: no im2col
    ("conv2d", (5, 8, 32, 30), (6, 4, 1, 1), {"groups": 2, "stride": 2}),
    ("conv_transpose2d", (5, 8, 32, 30), (8, 3, 3, 3), {"groups": 2, "stride": 2,
                                                          "padding": 1}),
    # images whose im2col exceeds CHUNK: cut into bands of output rows
    ("conv2d", (2, 16, 40, 40), (6, 8, 3, 3), {"groups": 2, "padding": 1}),
    ("conv2d", (2, 16, 47, 40), (6, 16, 3, 3), {"stride": (2, 1), "dilation": 2}),
    ("conv_transpose2d", (2, 16, 40, 40), (16, 3, 3, 3), {"groups": 2, "padding": 1}),
    # long signals: one row cut into pieces of columns
    ("conv1d", (2, 4, 30001), (6, 4, 3), {"padding": 1}),
    ("conv1d", (1, 32, 20000), (6, 32, 3), {"stride": 3, "dilation": 2, "padding": 2}),
    ("conv_transpose1d", (2, 8, 12000), (8, 16, 3), {"stride": 2, "padding": 1}),
])
def test_images_split_into_pieces(fn, x_shape, w_shape, kw):
    """Samples go through the GEMM in pieces (ops/conv.py CHUNK): several small images, the
    last piece short, or bands of rows of a large one, with groups."""
    c_out = w_shape[1] * kw.get("groups", 1) if "transpose" in fn else w_shape[0]
    _run_both(lambda x, w, b: getattr(F, fn)(x, w, b, **kw),
              lambda x, w, b: getattr(TF, fn)(x, w, b, **kw), [x_shape, w_shape, (c_out,)])


def test_non_contiguous_operands():
    x, tx = _pair((2, 3, 8, 7))
    w, tw = _pair((5, 3, 2, 3))
    out = F.conv2d(x.transpose(2, 3), w.transpose(2, 3), stride=(2, 1))
    ref = TF.conv2d(tx.transpose(2, 3), tw.transpose(2, 3), stride=(2, 1))
    _close(out, ref)
    out.sum().backward()
    ref.sum().backward()
    _close(x.grad, tx.grad)
    _close(w.grad, tw.grad)
    xs, txs = x[:, ::2], tx[:, ::2]           # a strided channel slice
    _close(F.conv_transpose2d(xs, w[:2].detach()), TF.conv_transpose2d(txs, tw[:2].detach()))


def test_float32_values():
    x, tx = _pair((4, 6, 12, 12), "float32")
    w, tw = _pair((16, 6, 5, 5), "float32", scale=0.2)
    _close(F.conv2d(x, w, padding=2), TF.conv2d(tx, tw, padding=2), 1e-5)
    _close(F.conv_transpose2d(x, w.transpose(0, 1), stride=2),
           TF.conv_transpose2d(tx, tw.transpose(0, 1), stride=2), 1e-5)


def test_only_some_operands_require_grad():
    x, tx = _pair((2, 3, 6, 6), grad=False)
    w, tw = _pair((4, 3, 3, 3))
    b, tb = _pair((4,), grad=False)
    F.conv2d(x, w, b).sum().backward()
    TF.conv2d(tx, tw, tb).sum().backward()
    _close(w.grad, tw.grad)
    assert x.grad is None and b.grad is None
    w2, tw2 = _pair((4, 3, 3, 3), grad=False)
    x2, tx2 = _pair((2, 3, 6, 6))
    F.conv2d(x2, w2).sum().backward()
    TF.conv2d(tx2, tw2).sum().backward()
    _close(x2.grad, tx2.grad)
    with tg.no_grad():
        assert F.conv2d(x2, w2).grad_fn is None


@pytest.mark.parametrize("fn", ["conv2d", "conv_transpose2d", "conv1d"])
@pytest.mark.parametrize("wanted", ["x", "w", "b", "xb", "wb"])
def test_each_subset_of_inputs_wanting_a_gradient(fn, wanted):
    """The backward reads only what the row kept: a bias alone needs neither operand."""
    d = 1 if fn.endswith("1d") else 2
    shapes = [(2, 4) + (6,) * d, (4, 4) + (3,) * d, (4,)]
    pairs = [_pair(s, grad=name in wanted) for s, name in zip(shapes, "xwb")]
    out = getattr(F, fn)(*[p[0] for p in pairs], stride=2)
    ref = getattr(TF, fn)(*[p[1] for p in pairs], stride=2)
    g = RNG.standard_normal(tuple(ref.shape))
    (out * tg.tensor(g)).sum().backward()
    (ref * torch.tensor(g)).sum().backward()
    for (a, b), name in zip(pairs, "xwb"):
        if name in wanted:
            _close(a.grad, b.grad)
        else:
            assert a.grad is None


def test_gradients_against_finite_differences():
    x = tg.randn(2, 4, 5, 5, dtype=tg.float64, requires_grad=True)
    w = tg.randn(6, 2, 3, 2, dtype=tg.float64, requires_grad=True)
    b = tg.randn(6, dtype=tg.float64, requires_grad=True)
    assert gradcheck(lambda x, w, b: F.conv2d(x, w, b, (2, 1), 1, (1, 2), 2), (x, w, b))
    wt = tg.randn(4, 3, 3, 2, dtype=tg.float64, requires_grad=True)
    bt = tg.randn(6, dtype=tg.float64, requires_grad=True)
    assert gradcheck(lambda x, w, b: F.conv_transpose2d(x, w, b, 2, 1, 1, 2), (x, wt, bt))
    assert gradcheck(lambda x: F.fold(F.unfold(x, 2, padding=1), (5, 5), 2, padding=1), (x,))


def test_empty_batch_and_channels():
    for ours, theirs in ((F.conv2d(tg.zeros(0, 4, 6, 6), tg.zeros(3, 4, 3, 3)),
                          TF.conv2d(torch.zeros(0, 4, 6, 6), torch.zeros(3, 4, 3, 3))),
                         (F.conv2d(tg.zeros(2, 0, 6, 6), tg.zeros(3, 0, 3, 3)),
                          TF.conv2d(torch.zeros(2, 0, 6, 6), torch.zeros(3, 0, 3, 3))),
                         (F.unfold(tg.zeros(0, 2, 4, 4), 2),
                          TF.unfold(torch.zeros(0, 2, 4, 4), 2))):
        assert tuple(ours.shape) == tuple(theirs.shape)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    w = tg.randn(3, 4, 3, 3, requires_grad=True)
    F.conv2d(tg.zeros(0, 4, 6, 6), w).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.zeros((3, 4, 3, 3), np.float32))


@pytest.mark.parametrize("args", [(2,), ((2, 3), 1, 1, 2), ((3, 2), (2, 1), (0, 1), (1, 2))],
                         ids=str)
def test_unfold_and_fold(args):
    x, tx = _pair((2, 3, 7, 6))
    u, tu = F.unfold(x, *args), TF.unfold(tx, *args)
    _close(u, tu)
    assert type(u.grad_fn).__name__ == "Im2ColBackward0"
    f, tf = F.fold(u, (7, 6), *args), TF.fold(tu, (7, 6), *args)
    _close(f, tf)
    assert type(f.grad_fn).__name__ == "Col2ImBackward0"
    g = RNG.standard_normal(tuple(tf.shape))
    (f * tg.tensor(g)).sum().backward()
    (tf * torch.tensor(g)).sum().backward()
    _close(x.grad, tx.grad)
    # unbatched
    _close(F.unfold(x[0], *args), TF.unfold(tx[0], *args))
    _close(F.fold(u[0], (7, 6), *args), TF.fold(tu[0], (7, 6), *args))


# ------------------------------------------------------------------ modules
MODULES = [
    ("Conv1d", (3, 6, 3), {}),
    ("Conv1d", (4, 6, 4), dict(stride=2, padding=1, dilation=2, groups=2, bias=False)),
    ("Conv2d", (3, 6, 5), {}),
    ("Conv2d", (4, 8, (3, 2)), dict(stride=(2, 1), padding=1, groups=4)),
    ("Conv2d", (4, 8, 3), dict(padding="same", dilation=2)),
    ("Conv2d", (2, 4, 3), dict(padding="valid", bias=False, dtype=tg.float64)),
    ("ConvTranspose1d", (4, 6, 3), dict(stride=2, output_padding=1)),
    ("ConvTranspose2d", (4, 6, 3), {}),
    ("ConvTranspose2d", (4, 6, (3, 2)), dict(stride=2, padding=1, output_padding=1, groups=2,
                                             dilation=(1, 2), bias=False)),
]


def _torch_kw(kw):
    kw = dict(kw)
    if "dtype" in kw:
        kw["dtype"] = getattr(torch, kw["dtype"].name)
    return kw


@pytest.mark.parametrize("name, args, kw", MODULES, ids=lambda v: str(v))
def test_default_initialisation_is_pytorchs_bit_for_bit(name, args, kw):
    tg.manual_seed(0)
    ours = getattr(nn, name)(*args, **kw)
    torch.manual_seed(0)
    theirs = getattr(torch.nn, name)(*args, **_torch_kw(kw))
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    for (n, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert p.dtype.name == str(q.dtype).removeprefix("torch.")
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy(), err_msg=n)
    assert repr(ours) == repr(theirs)
    # reset_parameters draws again, as PyTorch's does
    tg.manual_seed(1)
    torch.manual_seed(1)
    ours.reset_parameters()
    theirs.reset_parameters()
    np.testing.assert_array_equal(ours.weight.detach().numpy(), theirs.weight.detach().numpy())


def test_lenet_layers_initialise_as_pytorch():
    tg.manual_seed(0)
    ours = [nn.Conv2d(3, 6, 5), nn.Conv2d(6, 16, 5), nn.Linear(400, 120)]
    torch.manual_seed(0)
    theirs = [torch.nn.Conv2d(3, 6, 5), torch.nn.Conv2d(6, 16, 5), torch.nn.Linear(400, 120)]
    for m, t in zip(ours, theirs):
        np.testing.assert_array_equal(m.weight.detach().numpy(), t.weight.detach().numpy())
        np.testing.assert_array_equal(m.bias.detach().numpy(), t.bias.detach().numpy())


def _copy_into(ours, theirs):
    for p, q in zip(ours.parameters(), theirs.parameters()):
        with tg.no_grad():
            p.copy_(tg.tensor(q.detach().numpy()))


@pytest.mark.parametrize("name, args, kw", MODULES, ids=lambda v: str(v))
@pytest.mark.parametrize("batched", [True, False])
def test_module_forward_and_gradients(name, args, kw, batched):
    kw = {k: v for k, v in kw.items() if k != "dtype"}
    ours = getattr(nn, name)(*args, **kw).to(tg.float64)
    theirs = getattr(torch.nn, name)(*args, **kw).double()
    _copy_into(ours, theirs)
    d = 1 if name.endswith("1d") else 2
    shape = ((2,) if batched else ()) + (args[0],) + (9,) * d
    x, tx = _pair(shape)
    out, ref = ours(x), theirs(tx)
    _close(out, ref)
    g = RNG.standard_normal(tuple(ref.shape))
    (out * tg.tensor(g)).sum().backward()
    (ref * torch.tensor(g)).sum().backward()
    _close(x.grad, tx.grad)
    for (n, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
        _close(p.grad, q.grad)


@pytest.mark.parametrize("batched", [True, False])
def test_conv_transpose_output_size(batched):
    ours, theirs = nn.ConvTranspose2d(3, 2, 3, stride=3, padding=1), \
        torch.nn.ConvTranspose2d(3, 2, 3, stride=3, padding=1)
    _copy_into(ours, theirs)
    x, tx = _pair(((2,) if batched else ()) + (3, 4, 5), "float32")
    for size in ([10, 13], [12, 14], ([2, 2, 11, 14] if batched else [2, 11, 14])):
        _close(ours(x, output_size=size), theirs(tx, output_size=size), 1e-6)
    for size in ([9, 13], [10, 16], [1, 2, 3, 4, 5]):
        with pytest.raises(ValueError) as ours_err:
            ours(x, output_size=size)
        with pytest.raises(ValueError) as theirs_err:
            theirs(tx, output_size=size)
        assert str(ours_err.value) == str(theirs_err.value).replace("torch.Size", "tapegrad.Size")
    m1, t1 = nn.ConvTranspose1d(3, 2, 3, stride=2), torch.nn.ConvTranspose1d(3, 2, 3, stride=2)
    _copy_into(m1, t1)
    x1, tx1 = _pair((2, 3, 5), "float32")
    _close(m1(x1, [12]), t1(tx1, [12]), 1e-6)


def test_fold_and_unfold_modules():
    ours, theirs = nn.Unfold((2, 3), padding=1, stride=2), torch.nn.Unfold((2, 3), padding=1,
                                                                          stride=2)
    x, tx = _pair((2, 3, 6, 7))
    u, tu = ours(x), theirs(tx)
    _close(u, tu)
    assert repr(ours) == repr(theirs)
    f, tf = nn.Fold((6, 7), (2, 3), padding=1, stride=2), torch.nn.Fold((6, 7), (2, 3),
                                                                          padding=1, stride=2)
    _close(f(u), tf(tu))
    assert repr(f) == repr(tf)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("d", [1, 2])
def test_padding_modes(mode, d):
    cls = "Conv1d" if d == 1 else "Conv2d"
    for kw in (dict(padding=2), dict(padding="same", dilation=2), dict(padding=(1, 2)[:d])):
        ours = getattr(nn, cls)(3, 4, 3, padding_mode=mode, **kw).double()
        theirs = getattr(torch.nn, cls)(3, 4, 3, padding_mode=mode, **kw).double()
        _copy_into(ours, theirs)
        assert repr(ours) == repr(theirs)
        x, tx = _pair((2, 3) + (7,) * d)
        out, ref = ours(x), theirs(tx)
        _close(out, ref)
        out.sum().backward()
        ref.sum().backward()
        _close(x.grad, tx.grad)
        _close(ours.weight.grad, theirs.weight.grad)


# ------------------------------------------------------------------ refusals
def _same_error(call, by_keyword=False):
    """call(L, F) raises the same exception type and message in both libraries.
    by_keyword: PyTorch names the position of an argument given by position only, and a
    Python function cannot tell how it was given, so tapegrad always names it."""
    with pytest.raises(Exception) as theirs:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            call(torch, TF)
    with pytest.raises(Exception) as ours:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            call(tg, F)
    assert type(ours.value) is type(theirs.value), (ours.value, theirs.value)
    mine, want = str(ours.value), str(theirs.value)
    if by_keyword:
        mine = re.sub(r" \(position \d+\)", "", mine)
    # a set in a message lists its items in an order Python does not fix between processes
    assert _sets_sorted(mine) == _sets_sorted(want)


def _sets_sorted(message):
    return re.sub(r"\{([^{}]*)\}", lambda m: "{" + ", ".join(sorted(m.group(1).split(", ")))
                  + "}", message)


def _x(L, *shape, dtype=None):
    return L.ones(*shape, dtype=dtype)


ERRORS = {
    "groups_indivisible": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 4, 3, 3), groups=3),
    "channels": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 3, 3, 3)),
    "channels_grouped": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 1, 3, 3), groups=2),
    "out_channels_groups": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 5, 2, 3, 3),
                                                 groups=2),
    "groups_too_many": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 2, 1, 3, 3), groups=4),
    "kernel_too_big": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 4, 9, 9)),
    "kernel_too_big_dilated": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 4, 3, 3),
                                                    padding=1, dilation=5),
    "kernel_too_big_1d": lambda L, F: F.conv1d(_x(L, 2, 4, 3), _x(L, 6, 4, 5)),
    "rank_2": lambda L, F: F.conv2d(_x(L, 4, 8), _x(L, 6, 4, 3, 3)),
    "rank_5": lambda L, F: F.conv2d(_x(L, 1, 2, 4, 8, 8), _x(L, 6, 4, 3, 3)),
    "rank_1d": lambda L, F: F.conv1d(_x(L, 2, 4, 8, 8), _x(L, 6, 4, 3)),
    "weight_rank": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 4, 3)),
    "weight_rank_2": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 4)),
    "weight_4d_for_1d": lambda L, F: F.conv1d(_x(L, 2, 4, 10), _x(L, 6, 4, 3, 3)),
    "bias_size": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 4, 3, 3), _x(L, 5)),
    "bias_rank": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 4, 3, 3), _x(L, 6, 1)),
    "dtype_weight": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 4, 3, 3, dtype=L.float64)),
    "dtype_input": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8, dtype=L.float64), _x(L, 6, 4, 3, 3)),
    "dtype_bias": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 4, 3, 3),
                                        _x(L, 6, dtype=L.float64)),
    "dtype_after_shape": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 3, 3, 3,
                                                                      dtype=L.float64)),
    "bool": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8, dtype=L.bool), _x(L, 6, 4, 3, 3,
                                                                       dtype=L.bool)),
    "same_strided": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 4, 3, 3), padding="same",
                                          stride=2),
    "same_stride_length": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 4, 3, 3),
                                                padding="same", stride=(1, 1, 1)),
    "same_rank": lambda L, F: F.conv2d(_x(L, 8, 8), _x(L, 6, 4, 3, 3), padding="same"),
    "bad_padding_string": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 4, 3, 3),
                                                padding="full"),
    "stride_0": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 4, 3, 3), stride=0),
    "stride_negative": lambda L, F: F.conv1d(_x(L, 2, 4, 8), _x(L, 6, 4, 3), stride=-1),
    "padding_negative": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 4, 3, 3), padding=-1),
    "dilation_0": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 4, 3, 3), dilation=0),
    "dilation_negative": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 4, 3, 3),
                                               dilation=-1),
    "groups_0": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 4, 3, 3), groups=0),
    "groups_negative": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 4, 3, 3), groups=-2),
    "stride_3_values": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 4, 3, 3),
                                             stride=(1, 1, 1)),
    "padding_3_values": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 4, 3, 3),
                                              padding=(1, 1, 1)),
    "stride_float": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 4, 3, 3), stride=1.5),
    "stride_list_of_float": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 4, 3, 3),
                                                  stride=[2.0, 1]),
    "groups_float": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), _x(L, 6, 4, 3, 3), groups=1.0),
    "groups_bool": lambda L, F: F.conv1d(_x(L, 2, 4, 8), _x(L, 6, 4, 3), groups=True),
    "input_list": lambda L, F: F.conv2d([1.0], _x(L, 6, 4, 3, 3)),
    "weight_int": lambda L, F: F.conv2d(_x(L, 2, 4, 8, 8), 3),
    "t_channels": lambda L, F: F.conv_transpose2d(_x(L, 2, 4, 8, 8), _x(L, 5, 3, 3, 3)),
    "t_groups": lambda L, F: F.conv_transpose2d(_x(L, 2, 4, 8, 8), _x(L, 4, 3, 3, 3), groups=3),
    "t_groups_too_many": lambda L, F: F.conv_transpose2d(_x(L, 2, 4, 8, 8), _x(L, 4, 3, 3, 3),
                                                         groups=8),
    "t_bias": lambda L, F: F.conv_transpose2d(_x(L, 2, 4, 8, 8), _x(L, 4, 3, 3, 3), _x(L, 4)),
    "t_output_padding": lambda L, F: F.conv_transpose2d(_x(L, 2, 4, 8, 8), _x(L, 4, 3, 3, 3),
                                                        output_padding=1),
    "t_output_padding_strided": lambda L, F: F.conv_transpose2d(
        _x(L, 2, 4, 8, 8), _x(L, 4, 3, 3, 3), stride=2, output_padding=2),
    "t_output_padding_1d": lambda L, F: F.conv_transpose1d(_x(L, 2, 4, 8), _x(L, 4, 3, 3),
                                                           stride=2, output_padding=(1, 2)),
    "t_output_padding_negative": lambda L, F: F.conv_transpose2d(
        _x(L, 2, 4, 8, 8), _x(L, 4, 3, 3, 3), output_padding=-1),
    "t_stride_float": lambda L, F: F.conv_transpose2d(_x(L, 2, 4, 8, 8), _x(L, 4, 3, 3, 3),
                                                      None, 1.5),
    "t_groups_float": lambda L, F: F.conv_transpose2d(_x(L, 2, 4, 8, 8), _x(L, 4, 3, 3, 3),
                                                      None, 1, 0, 0, 1.0),
    "t_dilation_list": lambda L, F: F.conv_transpose1d(_x(L, 2, 4, 8), _x(L, 4, 3, 3), None, 1,
                                                       0, 0, 1, [1.0]),
    "t_input": lambda L, F: F.conv_transpose2d(1, _x(L, 4, 3, 3, 3)),
    "t_weight": lambda L, F: F.conv_transpose2d(_x(L, 2, 4, 8, 8), None),
    "t_bias_type": lambda L, F: F.conv_transpose2d(_x(L, 2, 4, 8, 8), _x(L, 4, 3, 3, 3), 3),
    "t_rank": lambda L, F: F.conv_transpose2d(_x(L, 4, 8), _x(L, 4, 3, 3, 3)),
    "t_dtype": lambda L, F: F.conv_transpose2d(_x(L, 2, 4, 8, 8), _x(L, 4, 3, 3, 3,
                                                                    dtype=L.float64)),
    "t_dtype_reversed": lambda L, F: F.conv_transpose2d(_x(L, 2, 4, 8, 8, dtype=L.float64),
                                                        _x(L, 4, 3, 3, 3)),
    "t_dtype_bias": lambda L, F: F.conv_transpose2d(_x(L, 2, 4, 8, 8), _x(L, 4, 3, 3, 3),
                                                    _x(L, 3, dtype=L.float64)),
    "t_keyword": lambda L, F: F.conv_transpose2d(_x(L, 2, 4, 8, 8), _x(L, 4, 3, 3, 3), foo=1),
    "unfold_kernel_too_big": lambda L, F: F.unfold(_x(L, 2, 4, 8, 8), 9),
    "unfold_kernel_0": lambda L, F: F.unfold(_x(L, 2, 4, 8, 8), 0),
    "unfold_rank_2": lambda L, F: F.unfold(_x(L, 8, 8), 2),
    "unfold_rank_5": lambda L, F: F.unfold(_x(L, 1, 2, 3, 4, 5), 2),
    "unfold_empty_channels": lambda L, F: F.unfold(_x(L, 2, 0, 8, 8), 2),
    "unfold_stride_0": lambda L, F: F.unfold(_x(L, 2, 4, 8, 8), 2, stride=0),
    "unfold_dilation_0": lambda L, F: F.unfold(_x(L, 2, 4, 8, 8), 2, dilation=0),
    "unfold_padding_negative": lambda L, F: F.unfold(_x(L, 2, 4, 8, 8), 2, padding=-1),
    "unfold_kernel_3_values": lambda L, F: F.unfold(_x(L, 2, 4, 8, 8), (2, 2, 2)),
    "unfold_dilation_3_values": lambda L, F: F.unfold(_x(L, 2, 4, 8, 8), 2, (1, 2, 3)),
    "unfold_kernel_float": lambda L, F: F.unfold(_x(L, 2, 4, 8, 8), 2.0),
    "unfold_kernel_str": lambda L, F: F.unfold(_x(L, 2, 4, 8, 8), "2"),
    "unfold_int": lambda L, F: F.unfold(_x(L, 2, 4, 8, 8, dtype=L.int64), 2),
    "unfold_input": lambda L, F: F.unfold(3, 2),
    "unfold_keyword": lambda L, F: F.unfold(_x(L, 2, 4, 8, 8), 2, foo=1),
    "fold_divisible": lambda L, F: F.fold(_x(L, 2, 12, 12), (4, 5), 3),
    "fold_blocks": lambda L, F: F.fold(_x(L, 2, 12, 12), (4, 6), 2),
    "fold_too_small": lambda L, F: F.fold(_x(L, 2, 12, 12), (1, 1), 2),
    "fold_rank_1": lambda L, F: F.fold(_x(L, 12), (4, 5), 2),
    "fold_rank_4": lambda L, F: F.fold(_x(L, 1, 2, 12, 12), (4, 5), 2),
    "fold_kernel_0": lambda L, F: F.fold(_x(L, 2, 12, 12), (4, 5), 0),
    "fold_output_size_3": lambda L, F: F.fold(_x(L, 2, 12, 12), (4, 5, 6), 2),
    "fold_stride_0": lambda L, F: F.fold(_x(L, 2, 12, 12), (4, 5), 2, stride=0),
    "fold_stride_float": lambda L, F: F.fold(_x(L, 2, 12, 12), (4, 5), 2, stride=1.0),
    "fold_int": lambda L, F: F.fold(_x(L, 2, 12, 12, dtype=L.int64), (4, 5), 2),
}


@pytest.mark.parametrize("name", ERRORS)
def test_refusals_are_pytorchs(name):
    _same_error(ERRORS[name])


BY_KEYWORD = {
    "t_padding_string": lambda L, F: F.conv_transpose2d(_x(L, 2, 4, 8, 8), _x(L, 4, 3, 3, 3),
                                                        padding="same"),
    "t_stride_float": lambda L, F: F.conv_transpose2d(_x(L, 2, 4, 8, 8), _x(L, 4, 3, 3, 3),
                                                      stride=1.5),
    "t_dilation_none": lambda L, F: F.conv_transpose1d(_x(L, 2, 4, 8), _x(L, 4, 3, 3),
                                                       dilation=None),
}


@pytest.mark.parametrize("name", BY_KEYWORD)
def test_refusals_of_keyword_arguments(name):
    _same_error(BY_KEYWORD[name], by_keyword=True)


def test_an_unknown_keyword_is_a_type_error():
    # (PyTorch's builtin lists the arguments it got; a Python function says which is unknown)
    with pytest.raises(TypeError, match="unexpected keyword argument 'foo'"):
        F.conv2d(tg.ones(2, 4, 8, 8), tg.ones(6, 4, 3, 3), foo=1)


MODULE_ERRORS = {
    "groups_0": lambda L: L.nn.Conv2d(4, 4, 3, groups=0),
    "in_channels_groups": lambda L: L.nn.Conv2d(4, 4, 3, groups=3),
    "out_channels_groups": lambda L: L.nn.Conv1d(4, 6, 3, groups=4),
    "padding_string": lambda L: L.nn.Conv2d(4, 4, 3, padding="full"),
    "same_strided": lambda L: L.nn.Conv2d(4, 4, 3, padding="same", stride=2),
    "padding_mode": lambda L: L.nn.Conv2d(4, 4, 3, padding_mode="mirror"),
    "transposed_padding_mode": lambda L: L.nn.ConvTranspose2d(4, 4, 3,
                                                              padding_mode="reflect"),
    "keyword": lambda L: L.nn.Conv2d(4, 4, 3, strides=2),
    "transposed_keyword": lambda L: L.nn.ConvTranspose1d(4, 4, 3, padding_mode="zeros",
                                                         outputpadding=1),
    "unfold_keyword": lambda L: L.nn.Unfold(3, foo=1),
    "forward_input_rank": lambda L: L.nn.Conv2d(4, 4, 3)(L.ones(4, 4)),
}


@pytest.mark.parametrize("name", MODULE_ERRORS)
def test_module_refusals_are_pytorchs(name):
    _same_error(lambda L, F: MODULE_ERRORS[name](L))


def test_padding_same_warns_once_for_an_odd_total():
    x = tg.ones(1, 2, 6, 6)
    w = tg.ones(3, 2, 4, 4)
    from tapegrad.nn._functional import conv as C
    C._SAME_WARNED[0] = False
    with pytest.warns(UserWarning, match="padding='same' with even kernel lengths"):
        out = F.conv2d(x, w, padding="same")
    assert tuple(out.shape) == (1, 3, 6, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F.conv2d(x, w, padding="same")


def test_a_failed_check_changes_nothing_and_later_calls_work():
    w = tg.ones(6, 4, 3, 3, requires_grad=True)
    with pytest.raises(RuntimeError):
        F.conv2d(tg.ones(2, 3, 8, 8), w)
    F.conv2d(tg.ones(2, 4, 8, 8), w).sum().backward()
    assert float(w.grad.sum()) == 6 * 4 * 9 * 2 * 36


# ------------------------------------------------------------------ compiled training
class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 4, 3, padding=1)
        self.c2 = nn.Conv2d(4, 6, 3, stride=2, groups=2)
        self.t = nn.ConvTranspose2d(6, 3, 2, stride=2)
        self.c3 = nn.Conv1d(3, 2, 3, padding="same")
        self.fc = nn.Linear(2 * 36, 5)

    def forward(self, x):
        h = F.relu(self.c1(x))
        h = F.relu(self.c2(h))
        h = self.t(h)                                   # (N, 3, 6, 6)
        h = F.fold(F.unfold(h, 2), (6, 6), 2)           # (a sum of overlapping blocks)
        h = self.c3(h.flatten(2))                       # (N, 2, 36)
        return self.fc(h.flatten(1))


def test_compiled_training_step_equals_eager():
    tg.manual_seed(3)
    me = _Net()
    tg.manual_seed(3)
    mc = _Net()
    assert_models_same(me, mc)
    oe = tg.optim.SGD(me.parameters(), lr=0.05, momentum=0.9)
    oc = tg.optim.SGD(mc.parameters(), lr=0.05, momentum=0.9)

    def make(model, opt):
        def step(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss
        return step

    se, sc = make(me, oe), compile_(make(mc, oc))
    rng = np.random.default_rng(5)
    data = [(tg.tensor(rng.standard_normal((4, 1, 7, 7)).astype(np.float32)),
             tg.tensor(rng.integers(0, 5, 4))) for _ in range(6)]
    le = [arr(se(x, y)) for x, y in data]
    with no_break():
        lc = [arr(sc(x, y)) for x, y in data]
    assert sc.stats == {"recordings": 1, "replays": 5}
    assert_same(le, lc, "losses")
    assert_models_same(me, mc)
    assert not np.array_equal(arr(mc.c1.weight), arr(_Net().c1.weight))
