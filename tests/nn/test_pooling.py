"""Pooling, resizing and padding (nn/_functional/pooling.py, nn/pooling.py, ops/pool.py):
values and float64 gradients against PyTorch's over argument variants, the modules' reprs
and signatures, PyTorch's errors, NaN and tie handling of max pooling, and a compiled
training step equal to eager. (tests/ops/test_every_op.py checks each op's OpInfo.)"""
import inspect
import warnings

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn as nn
import tapegrad.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _pair(shape, seed=0, dtype="float64", values=None):
    a = np.random.default_rng(seed).standard_normal(shape) if values is None else values
    return (tg.tensor(a, dtype=getattr(tg, dtype), requires_grad=True),
            torch.tensor(a, dtype=getattr(torch, dtype), requires_grad=True))


def _check(call, shape, dtype="float64", values=None, rtol=None):
    x, tx = _pair(shape, dtype=dtype, values=values)
    y, ty = call(F, x), call(TF, tx)
    if isinstance(ty, tuple):
        assert np.array_equal(y[1].numpy(), ty[1].numpy())
        y, ty = y[0], ty[0]
    assert tuple(y.shape) == tuple(ty.shape)
    assert type(y.grad_fn).__name__ == type(ty.grad_fn).__name__
    tol = rtol or (1e-12 if dtype == "float64" else 1e-6)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=tol, atol=tol)
    w = np.random.default_rng(1).standard_normal(tuple(ty.shape))
    (y * tg.tensor(w, dtype=y.dtype)).sum().backward()
    (ty * torch.tensor(w, dtype=ty.dtype)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=tol * 10, atol=tol * 10)


CALLS = [
    (lambda F, x: F.max_pool2d(x, 3, 2, 1, 2, True, True), (2, 3, 9, 8)),
    (lambda F, x: F.max_pool2d(x, (2, 3), (1, 2), (1, 1)), (3, 6, 7)),
    (lambda F, x: F.max_pool1d(x, 3, 2, 1, ceil_mode=True, return_indices=True), (2, 3, 8)),
    (lambda F, x: F.max_pool2d(x.transpose(-1, -2), 2), (2, 3, 6, 6)),
    (lambda F, x: F.avg_pool2d(x, 3, 2, 1, True, False), (2, 3, 7, 8)),
    (lambda F, x: F.avg_pool2d(x, 2, 1, 1, False, True, 3), (3, 5, 6)),
    (lambda F, x: F.avg_pool1d(x, 3, 2, 1, True, False), (2, 3, 8)),
    (lambda F, x: F.adaptive_avg_pool2d(x, (3, 4)), (2, 3, 7, 9)),
    (lambda F, x: F.adaptive_avg_pool2d(x, 1), (2, 3, 7, 9)),
    (lambda F, x: F.adaptive_avg_pool1d(x, 4), (2, 3, 7)),
    (lambda F, x: F.adaptive_max_pool2d(x, (3, 4), True), (2, 3, 7, 9)),
    (lambda F, x: F.adaptive_max_pool1d(x, 4, True), (2, 3, 7)),
    (lambda F, x: F.interpolate(x, scale_factor=1.7), (2, 3, 4, 5)),
    (lambda F, x: F.interpolate(x, scale_factor=1.7, mode="nearest-exact"), (2, 3, 4, 5)),
    (lambda F, x: F.interpolate(x, size=9), (2, 3, 4)),
    (lambda F, x: F.interpolate(x, size=9, mode="linear"), (2, 3, 4)),
    (lambda F, x: F.interpolate(x, scale_factor=2.5, mode="linear", align_corners=True),
     (2, 3, 4)),
    (lambda F, x: F.interpolate(x, size=(7, 3), mode="bilinear"), (2, 3, 4, 5)),
    (lambda F, x: F.interpolate(x, size=(7, 9), mode="bilinear", align_corners=True),
     (2, 3, 4, 5)),
    (lambda F, x: F.interpolate(x, scale_factor=(1.3, 2.6), mode="bilinear"), (2, 3, 4, 5)),
    (lambda F, x: F.interpolate(x, scale_factor=0.5, mode="area"), (2, 3, 4, 6)),
    (lambda F, x: F.pixel_shuffle(x, 3), (9, 2, 2)),
    (lambda F, x: F.pixel_unshuffle(x, 2), (2, 3, 4, 6)),
    (lambda F, x: F.pad(x, (1, 2, -1, 3), value=0.5), (2, 3, 4, 5)),
    (lambda F, x: F.pad(x, (3, 2, 1, 3), mode="reflect"), (2, 3, 4, 5)),
    (lambda F, x: F.pad(x, (-1, 2), mode="reflect"), (2, 3, 5)),
    (lambda F, x: F.pad(x, (1, 1, 2, 1, 1, 2), mode="reflect"), (2, 3, 4, 5)),
    (lambda F, x: F.pad(x, (3, 7), mode="replicate"), (2, 3, 5)),
    (lambda F, x: F.pad(x, (3, 2, 1, 3), mode="circular"), (2, 3, 4, 5)),
    (lambda F, x: F.pad(x, (-1, 2), mode="circular"), (2, 3, 5)),
    (lambda F, x: F.lp_pool2d(x, 2, 2), (2, 3, 4, 6)),
    (lambda F, x: F.avg_pool2d(x, (3, 2), (3, 1), (1, 1), True, False, -2), (2, 3, 10, 11)),
    (lambda F, x: F.max_pool2d(x, 3, 3, 1, 2, True), (2, 3, 10, 11)),
    (lambda F, x: F.adaptive_avg_pool2d(x, (7, 9)), (2, 3, 4, 5)),
    (lambda F, x: F.adaptive_max_pool2d(x, (7, 9)), (2, 3, 4, 5)),
    (lambda F, x: F.interpolate(x, scale_factor=0.5, mode="bilinear"), (2, 3, 8, 10)),
    (lambda F, x: F.interpolate(x, size=(3, 1), mode="bilinear", align_corners=True),
     (2, 3, 8, 10)),
    (lambda F, x: F.interpolate(x, scale_factor=0.37), (2, 3, 8, 10)),
    (lambda F, x: F.interpolate(x, size=1, mode="linear"), (2, 3, 8)),
    (lambda F, x: F.pad(x, (1, 2, 0, 1, 2, 0), mode="circular"), (2, 3, 4, 5, 6)),
    (lambda F, x: F.lp_pool1d(x, 3.0, 3, 2, True), (2, 3, 7)),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("k", range(len(CALLS)))
def test_values_and_gradients_match_pytorch(k, dtype):
    call, shape = CALLS[k]
    _check(call, shape, dtype, rtol=5e-6 if dtype == "float32" and "bilinear" in
           inspect.getsource(call) else None)


def test_max_pool_picks_pytorchs_index_with_ties_and_nan():
    v = np.array([[[[1, np.nan, 3, 3], [np.nan, 2, 3, 3], [-np.inf, -np.inf, 1, 1],
                    [-np.inf, -np.inf, 1, 1]]]])
    x, tx = _pair(v.shape, values=v)
    y, i = F.max_pool2d(x, 2, return_indices=True)
    ty, ti = TF.max_pool2d(tx, 2, return_indices=True)
    assert i.tolist() == ti.tolist()
    np.testing.assert_array_equal(y.detach().numpy(), ty.detach().numpy())
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


MODULES = ["MaxPool1d(3)", "MaxPool2d(3, 2, 1, 2, True, True)", "AvgPool1d(3)",
           "AvgPool2d(3, divisor_override=2)", "AdaptiveAvgPool1d(3)",
           "AdaptiveAvgPool2d((3, None))", "AdaptiveMaxPool1d(3)", "AdaptiveMaxPool2d(3, True)",
           "Upsample(scale_factor=2)", "Upsample(size=3, mode='bilinear')",
           "UpsamplingNearest2d(scale_factor=2)", "UpsamplingBilinear2d(size=4)",
           "PixelShuffle(2)", "PixelUnshuffle(2)", "ZeroPad1d(2)", "ZeroPad2d((1, 2, 3, 4))",
           "ConstantPad1d(2, 3.5)", "ConstantPad2d(1, 2.0)", "ReflectionPad1d(2)",
           "ReflectionPad2d(1)", "ReplicationPad1d(2)", "ReplicationPad2d(2)",
           "CircularPad1d(1)", "CircularPad2d(1)", "ZeroPad3d(1)",
           "ConstantPad3d((1, 0, 2, 1, 0, 1), 0.5)",
           "ReflectionPad3d(1)", "ReplicationPad3d((0, 1, 1, 2, 2, 0))", "CircularPad3d(1)",
           "LPPool1d(2, 3)", "LPPool2d(3, 2, 1)", "LPPool2d(float('inf'), 2)"]


@pytest.mark.parametrize("spec", MODULES)
def test_modules_match_pytorchs_repr_signature_and_values(spec):
    m, tm = eval("nn." + spec), eval("torch.nn." + spec)
    assert repr(m) == repr(tm)
    name = spec.split("(")[0]
    assert (list(inspect.signature(getattr(nn, name)).parameters)
            == list(inspect.signature(getattr(torch.nn, name)).parameters))
    shape = (2, 4, 6) if "1d" in name else (2, 3, 4, 6, 6) if "3d" in name else (2, 4, 6, 6)
    x, tx = _pair(shape)
    y, ty = m(x), tm(tx)
    if isinstance(ty, tuple):
        y, ty = y[0], ty[0]
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)


ERRORS = [
    "F.max_pool2d(x, 7)", "F.max_pool2d(x, 3, padding=2)", "F.max_pool2d(x, 0)",
    "F.max_pool2d(x, 2, dilation=0)", "F.max_pool2d(x, (2, 2, 2))", "F.max_pool2d(x, 'a')",
    "F.max_pool2d(x, 2, padding=-1)", "F.max_pool2d(x[0, 0, 0], 2)",
    "F.max_pool2d(x, 2, 2, 0, 1, 'a')", "F.max_pool2d(x, 2, stride=-1)",
    "F.max_pool1d(x[0], 7)", "F.max_pool1d(x[0], 3, padding=2)", "F.max_pool1d(x[0], 0)",
    "F.max_pool1d(x, 2)", "F.max_pool1d(x[0], (2, 2))", "F.avg_pool2d(x, 7)",
    "F.avg_pool2d(x, 2, divisor_override=0)", "F.avg_pool2d(x[0, 0, 0], 2)",
    "F.avg_pool2d(x, 2, foo=1)", "F.avg_pool1d(x, 2)", "F.avg_pool1d(x[0], (2, 2))",
    "F.adaptive_avg_pool2d(x, (2, 2, 2))", "F.adaptive_avg_pool2d(x, -1)",
    "F.adaptive_avg_pool2d(x[0, 0, 0], 2)", "F.adaptive_max_pool2d(x[0, 0, 0], 2)",
    "F.adaptive_max_pool1d(x, 2)", "F.interpolate(x, scale_factor=2, mode='linear')",
    "F.interpolate(x, scale_factor=2, mode='foo')", "F.interpolate(x)",
    "F.interpolate(x, size=4, scale_factor=2)", "F.interpolate(x, size=(4, 4, 4))",
    "F.interpolate(x, size=0)", "F.interpolate(x, size=4, align_corners=True)",
    "F.interpolate(x, size=4, recompute_scale_factor=True)", "F.interpolate(x[0, 0], size=4)",
    "F.pixel_shuffle(x, 4)", "F.pixel_shuffle(x[0, 0], 2)", "F.pixel_unshuffle(x, 4)",
    "F.pixel_shuffle(x, 2.0)", "F.pad(x, (1,))", "F.pad(x, (1, 1) * 5)",
    "F.pad(x, (1, 1), mode='foo')", "F.pad(x, (1, 1), mode='reflect')",
    "F.pad(x, (1, 1, 1, 1), mode='reflect', value=1.0)", "F.pad(x, (6, 1, 1, 1), mode='reflect')",
    "F.pad(x, (-7, 1), value=1.0)", "F.pad(x, (7, 1, 1, 1), mode='circular')",
    "F.pad(x[0], (-8, 1), mode='replicate')", "F.pad(x, (1.5, 1))", "F.pad(x, 1)",
    "F.pad(x, (1, 1), value='a')"]


@pytest.mark.parametrize("call", ERRORS)
def test_errors_are_pytorchs(call):
    def outcome(L, Fn):
        x = L.ones(2, 3, 6, 6)
        try:
            eval(call, {"F": Fn, "x": x})
        except Exception as exc:       # noqa: BLE001  (the type is what is compared)
            return type(exc).__name__, str(exc)
        return None
    ours, theirs = outcome(tg, F), outcome(torch, TF)
    assert theirs is not None and ours == theirs


def test_a_compiled_training_step_equals_eager():
    def make():
        tg.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 8), nn.ReflectionPad2d(1), nn.MaxPool2d(2),
                             nn.Upsample(scale_factor=2, mode="bilinear"), nn.CircularPad2d(1),
                             nn.AvgPool2d(3, 2, 1), nn.ReplicationPad2d((0, 1, 1, 0)),
                             nn.AdaptiveMaxPool2d((3, 2)), nn.ZeroPad2d(1),
                             nn.AdaptiveAvgPool2d((2, 3)), nn.Flatten(), nn.Linear(12, 3))
    x = tg.tensor(np.random.default_rng(0).standard_normal((2, 2, 8, 8)), dtype=tg.float32)

    def run(compiled):
        model = make()
        opt = tg.optim.SGD(model.parameters(), lr=0.1)

        def step(x):
            opt.zero_grad()
            loss = (model(x) ** 2).mean()
            loss.backward()
            opt.step()
            return loss
        fn = tg.compile(step, fuse=False) if compiled else step
        return [fn(x).item() for _ in range(3)], [p.detach().numpy().copy()
                                                  for p in model.parameters()]
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # (no graph break: the compiled step replays)
        (l1, p1), (l2, p2) = run(False), run(True)
    assert l1 == l2
    for a, b in zip(p1, p2):
        np.testing.assert_array_equal(a, b)


def test_padding_of_integer_and_bool_tensors_and_huge_arguments():
    got = F.pad(tg.tensor([[True, False]]), (0, 1)).tolist()
    assert got == TF.pad(torch.tensor([[True, False]]), (0, 1)).tolist()
    got = F.pad(tg.tensor([[1, 2]]), (1, 0), value=7).tolist()
    assert got == TF.pad(torch.tensor([[1, 2]]), (1, 0), value=7).tolist()
    with pytest.raises(RuntimeError, match="value cannot be converted to type int without "
                                           "overflow"):
        F.max_pool2d(tg.ones(1, 1, 5, 5), 3, 2 ** 40, 1, ceil_mode=True)
    with pytest.raises(RuntimeError, match="value cannot be converted to type int without "
                                           "overflow"):
        TF.max_pool2d(torch.ones(1, 1, 5, 5), 3, 2 ** 40, 1, ceil_mode=True)


def test_a_huge_padding_within_the_rules_finds_its_first_tap_at_once():
    # (PyTorch steps to the first in-range tap one dilation at a time)
    x, _ = _pair((1, 1, 3, 3))
    k = 2 ** 29
    y = F.max_pool2d(x, (1, k), (1, k), (0, k // 2), ceil_mode=True)
    assert y.shape == (1, 1, 3, 1)
    np.testing.assert_array_equal(y.detach().numpy()[..., 0], x.detach().numpy().max(-1))


def _chain(t):
    """The names of a graph's nodes, breadth first, with each node's next functions."""
    out, seen, todo = [], [], [t.grad_fn]
    while todo:
        node = todo.pop(0)
        if node is None or any(node is s for s in seen):
            continue
        seen.append(node)       # (held: tapegrad makes nodes on demand, ids are reused)
        nexts = [n for n, _ in node.next_functions]
        out.append((type(node).__name__, [type(n).__name__ for n in nexts]))
        todo.extend(nexts)
    return out


@pytest.mark.parametrize("pads", [(1, 1, 1, 1), (1, 0, 2, 0), (-1, 1, 0, 0), (1, 2, 3, 1)])
def test_circular_padding_records_pytorchs_slice_copies(pads):
    # PyTorch's copies of the tensor into itself read a SliceBackward0 view; tapegrad's
    # assignment copies an overlapping source first (CloneBackward0): only those differ
    x, tx = _pair((2, 3, 5, 6))
    ours = [n for n in _chain(F.pad(x, pads, mode="circular")) if n[0] == "CopySlices"]
    theirs = [n for n in _chain(TF.pad(tx, pads, mode="circular")) if n[0] == "CopySlices"]
    assert [(a, b[0]) for a, b in ours] == [(a, b[0]) for a, b in theirs]


@pytest.mark.parametrize("call", ["F.max_pool1d(x[0], 2)", "F.avg_pool1d(x[0], 2)",
                                  "F.adaptive_max_pool1d(x[0], 2)", "F.max_pool2d(x[0], 2)",
                                  "F.adaptive_avg_pool2d(x, 1)"])
def test_one_d_pooling_is_pytorchs_unsqueezed_two_d_graph(call):
    x, tx = _pair((2, 3, 4, 6))
    assert _chain(eval(call, {"F": F, "x": x})) == _chain(eval(call, {"F": TF, "x": tx}))


INTEGER_CALLS = [
    "F.max_pool2d(x, 2)", "F.max_pool2d(x, 3, 2, 1, return_indices=True)",
    "F.max_pool1d(x[0], 2)", "F.max_pool1d(x[0], 3, 2, 1, return_indices=True)",
    "F.avg_pool2d(b, 2)", "F.max_pool2d(b, 2)", "F.max_pool1d(b[0], 2)",
    "F.pixel_shuffle(x.repeat(1, 4, 1, 1), 2)", "F.pixel_unshuffle(x, 2)",
    "F.pixel_shuffle(b.repeat(1, 4, 1, 1), 2)", "F.pad(x, (1, 2, 3, 1), mode='reflect')",
    "F.pad(x, (1, 2, 3, 1), mode='replicate')", "F.pad(x[0], (2, 1), mode='reflect')",
    "F.pad(b, (1, 1, 1, 1), mode='reflect')", "F.pad(b, (1, 1, 1, 1), mode='circular')",
    "F.pad(x, (1, 1, 1, 1), mode='circular')", "F.adaptive_avg_pool2d(x, 2)",
    "F.adaptive_avg_pool2d(x, 1)", "F.adaptive_max_pool2d(b, 2)",
    "F.interpolate(x, scale_factor=2)", "F.interpolate(x, scale_factor=2, mode='bilinear')",
    "F.interpolate(x[0], scale_factor=2, mode='linear')", "F.interpolate(x[0], scale_factor=2)",
    "F.interpolate(x, scale_factor=2, mode='nearest-exact')"]


@pytest.mark.parametrize("call", INTEGER_CALLS)
def test_integer_and_bool_inputs_as_pytorch(call):
    def outcome(L, Fn):
        x = L.tensor((np.arange(2 * 3 * 6 * 6).reshape(2, 3, 6, 6) * 37 % 11) - 5)
        try:
            r = eval(call, {"F": Fn, "x": x, "b": x > 0})
        except Exception as exc:       # noqa: BLE001  (the type is what is compared)
            return type(exc).__name__, str(exc)
        outs = r if isinstance(r, tuple) else (r,)
        return [(str(t.dtype).rpartition(".")[2], t.tolist()) for t in outs]
    assert outcome(tg, F) == outcome(torch, TF)


@pytest.mark.parametrize("call", [
    "max_pool1d(x[0], 2)", "max_pool1d(x[0], 3, 2, 1, 1, True)", "max_pool2d(x, 2)",
    "max_pool2d(x, (2, 3), (), 1)", "max_pool1d_with_indices(x[0], 2)",
    "avg_pool1d(x[0], 3, 2, 1, True, False)", "adaptive_avg_pool1d(x[0], 4)",
    "adaptive_max_pool1d(x[0], 4)", "pixel_shuffle(x, 1)", "pixel_unshuffle(x, 2)",
    "constant_pad_nd(x, (1, 2, 0, 1), 0.5)", "constant_pad_nd(x, (1,))"])
def test_top_level_spellings_as_pytorchs(call):
    from tapegrad.nn._functional.pooling import TOP_LEVEL

    def outcome(ns, L):
        x = L.tensor(np.random.default_rng(0).standard_normal((2, 4, 6, 6)))
        try:
            r = eval(call, {**ns, "x": x})
        except Exception as exc:       # noqa: BLE001  (the type is what is compared)
            return type(exc).__name__, str(exc)
        return [np.asarray(t.tolist()) for t in (r if isinstance(r, tuple) else (r,))]
    ours = outcome(TOP_LEVEL, tg)
    theirs = outcome({k: getattr(torch, k) for k in TOP_LEVEL}, torch)
    if isinstance(theirs, tuple):
        assert ours == theirs
    else:
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a, b, rtol=1e-12)
