"""Everything a worker needs travels by pickle and cloudpickle, as in PyTorch.

Tensors: one table of cases, each built the same way with torch and with tapegrad; what
comes back from a round trip (type, dtype, shape, strides, storage offset and size,
requires_grad, leaf, gradient, values) must be what PyTorch gives. Training objects: a
model, its optimizer and its scheduler pickled together, after a few steps, continue
bitwise as the originals do, here, in a fresh interpreter and in a 'spawn' worker.
"""
import copy
import inspect
import os
import pickle
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tapegrad as tg

cloudpickle = pytest.importorskip("cloudpickle")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _torch():
    return pytest.importorskip("torch")


# ---------------------------------------------------------------- tensors
def _nonleaf(T):
    x = T.ones(2, 3, requires_grad=True)
    return x * 2


def _nonleaf_no_grad(T):
    x = T.ones(3, requires_grad=True)
    with T.no_grad():
        return x * 2


def _with_grad(T):
    x = T.ones(3, requires_grad=True)
    (x * x).sum().backward()
    return x


TENSOR_CASES = {
    "float32": lambda T: T.linspace(-1, 1, 6).reshape(2, 3),
    "float64": lambda T: T.linspace(-1, 1, 6, dtype=T.float64).reshape(3, 2),
    "int64": lambda T: T.arange(6).reshape(2, 3) - 3,
    "bool": lambda T: T.tensor([[True, False, True]]),
    "0-d": lambda T: T.tensor(2.5),
    "0-d int": lambda T: T.tensor(-7),
    "empty": lambda T: T.empty(0, 3),
    "transposed": lambda T: T.arange(12.).reshape(3, 4).t(),
    "slice with offset": lambda T: T.arange(6.)[1:],
    "strided slice": lambda T: T.arange(10.)[1::3],
    "expanded": lambda T: T.arange(4.).expand(3, 4),
    "column of a matrix": lambda T: T.arange(12, dtype=T.float64).reshape(3, 4)[:, 2],
    "leaf requiring grad": lambda T: T.ones(2, requires_grad=True),
    "non-leaf requiring grad": _nonleaf,
    "non-leaf made without grad": _nonleaf_no_grad,
    "detached": lambda T: _nonleaf(T).detach(),
    "leaf with .grad": _with_grad,
    "Parameter": lambda T: T.nn.Parameter(T.ones(2, 2)),
    "Parameter without grad": lambda T: T.nn.Parameter(T.arange(3.), requires_grad=False),
    "Parameter subclass": lambda T: _param_subclass(T)(T.ones(3)),
}


def _param_subclass(T):
    """A subclass of T.nn.Parameter, importable from this module (pickle looks it up)."""
    name = "_Param_" + T.__name__
    cls = globals().get(name)
    if cls is None:
        cls = type(name, (T.nn.Parameter,), {"__slots__": ()} if T is tg else {})
        cls.__module__, cls.__qualname__ = __name__, name
        globals()[name] = cls
    return cls


def _describe(T, t):
    """What a round trip keeps, in terms both libraries share."""
    return (type(t).__name__.replace(T.__name__, ""), str(t.dtype).rpartition(".")[2],
            tuple(t.shape), t.stride(), t.storage_offset(), t.requires_grad, t.is_leaf,
            t.grad is None if t.is_leaf else None, t.detach().tolist())


@pytest.mark.parametrize("name", list(TENSOR_CASES))
@pytest.mark.parametrize("pickler", ["pickle", "cloudpickle"])
def test_tensor_round_trip_is_pytorchs(name, pickler):
    torch = _torch()
    dumps = pickle.dumps if pickler == "pickle" else cloudpickle.dumps
    got = {}
    for T in (torch, tg):
        t = TENSOR_CASES[name](T)
        back = pickle.loads(dumps(t))
        got[T.__name__] = (_describe(T, t), _describe(T, back))
        # the whole storage travels (tapegrad rounds small ones up: compare with the original)
        assert back.untyped_storage().nbytes() == t.untyped_storage().nbytes()
        # its own memory: writing the copy leaves the original alone
        if back.numel() and not back.requires_grad:
            before = t.detach().tolist()
            back[(0,) * back.ndim] = 1 if back.dtype != T.bool else False
            assert t.detach().tolist() == before
    assert got["tapegrad"] == got["torch"]


def test_tensors_pickled_together_pytorch_keeps_no_view_relation():
    # PyTorch's pickle (not torch.save) gives each tensor its own copy of the storage:
    # a view pickled along with its base is no longer a view of the copy of the base
    torch = _torch()
    for T in (torch, tg):
        base = T.arange(6.)
        a, b, c = pickle.loads(pickle.dumps([base, base[1:], base]))
        b[0] = 100.
        assert a.tolist() == [0., 1., 2., 3., 4., 5.], T
        assert c is a, T                 # the same tensor twice is one tensor
        assert (b.storage_offset(), b.untyped_storage().nbytes()) == (1, 24), T


def test_tensor_hooks_stay_behind_with_pytorchs_warning():
    torch = _torch()
    got = {}
    for T in (torch, tg):
        x = T.ones(2, requires_grad=True)
        x.register_hook(lambda g: g * 3)
        y = x * 2
        y.register_hook(lambda g: g)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            x2, y2 = pickle.loads(pickle.dumps([x, y]))
        # (PyTorch goes on to advise torch.utils.hooks.unserializable_hook)
        msgs = [re.match(r"backward hook <function .*<lambda> at 0x[0-9a-f]+> on tensor will "
                         r"not be serialized\.", str(m.message)) is not None for m in w]
        (x2 * 1.).sum().backward()
        got[T.__name__] = (msgs, [m.category for m in w], x2.grad.tolist(),
                           y2.is_leaf, y2.requires_grad)
    assert got["tapegrad"] == got["torch"] == ([True] * 2, [UserWarning] * 2, [1.0, 1.0],
                                               True, True)


def test_protocol_5_out_of_band_buffers():
    # (Dask sends buffers apart from the pickle): a read-only buffer is copied, never
    # written; a writable one is the tensor's memory, no copy
    t = tg.arange(6, dtype=tg.float64).reshape(2, 3).t()
    bufs = []
    blob = pickle.dumps(t, protocol=5, buffer_callback=bufs.append)
    assert len(bufs) == 1
    frozen = bytes(bufs[0].raw())
    u = pickle.loads(blob, buffers=[frozen])
    u.add_(1)
    assert frozen == bytes(bufs[0].raw()) and u.tolist() == (t + 1).tolist()
    writable = bytearray(bufs[0].raw())
    v = pickle.loads(blob, buffers=[writable])
    v.add_(1)
    assert np.frombuffer(writable, np.float64).tolist() == [1., 2., 3., 4., 5., 6.]
    assert v.stride() == (1, 3)


def test_unpickling_checks_the_layout_against_the_bytes():
    from tapegrad._front.creation import _unpickle
    with pytest.raises(RuntimeError, match="reaches beyond its 8 bytes of storage"):
        _unpickle(tg.Tensor, np.zeros(8, np.uint8), False, ("float32", (3,), (1,), 0))
    with pytest.raises(RuntimeError, match="reaches beyond"):
        _unpickle(tg.Tensor, np.zeros(8, np.uint8), False, ("float32", (-1,), (1,), 0))
    with pytest.raises(RuntimeError, match="overflow"):
        _unpickle(tg.Tensor, np.zeros(8, np.uint8), False,
                  ("float32", (2 ** 62, 2 ** 62), (0, 0), 0))
    for bad in (("complex64", (1,), (1,), 0), ("float32", (1,) * 40, (1,) * 40, 0),
                ("float32", (1, 1), (1,), 0)):
        with pytest.raises(RuntimeError, match="bad layout"):
            _unpickle(tg.Tensor, np.zeros(8, np.uint8), False, bad)
    # the layout a pickle of an earlier version lacks: its values alone
    old = _unpickle(tg.Tensor, np.arange(3.), True)
    assert old.tolist() == [0., 1., 2.] and old.requires_grad and old.is_leaf


def test_dtype_device_size_and_state_dict():
    torch = _torch()
    for T in (torch, tg):
        objs = [T.float32, T.float64, T.int64, T.bool, T.device("cpu"), T.Size([2, 3])]
        assert pickle.loads(pickle.dumps(objs)) == objs
        T.manual_seed(0)
        sd = T.nn.Linear(3, 2).state_dict()
        back = pickle.loads(pickle.dumps(sd))
        assert list(back) == ["weight", "bias"] and type(back) is type(sd)
        assert all(bool((back[k] == sd[k]).all()) and not back[k].requires_grad for k in sd)


# ---------------------------------------------------------------- training objects
def _mlp(T):
    return T.nn.Sequential(T.nn.Linear(4, 8), T.nn.ReLU(), T.nn.Linear(8, 3))


class _ConvNet(tg.nn.Module):
    """A conv, batch norm (buffers) and a linear head (defined with tapegrad's nn, since
    the class must be importable from the receiving side)."""

    def __init__(self):
        super().__init__()
        self.conv = tg.nn.Conv2d(1, 2, 3)
        self.bn = tg.nn.BatchNorm2d(2)
        self.head = tg.nn.Linear(8, 3)

    def forward(self, x):
        return self.head(tg.relu(self.bn(self.conv(x.reshape(-1, 1, 4, 4)))).flatten(1))


class _LSTMNet(tg.nn.Module):
    """An LSTM over the features as a sequence, and a linear head."""

    def __init__(self):
        super().__init__()
        self.lstm = tg.nn.LSTM(4, 5, batch_first=True)
        self.head = tg.nn.Linear(5, 3)

    def forward(self, x):
        out, _ = self.lstm(x.reshape(-1, 4, 4))
        return self.head(out[:, -1])


class _TransformerNet(tg.nn.Module):
    """A transformer encoder layer (no dropout: the steps must be repeatable)."""

    def __init__(self):
        super().__init__()
        self.layer = tg.nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, batch_first=True)
        self.head = tg.nn.Linear(4, 3)

    def forward(self, x):
        return self.head(self.layer(x.reshape(-1, 4, 4)).mean(1))


def _lambda_factor(k):
    return lambda epoch: 0.5 ** (epoch // k)      # a closure: only cloudpickle sends it


TRAINING_CASES = {
    # name: (model, features per sample, optimizer, scheduler)
    "MLP, SGD momentum, StepLR": (
        lambda: _mlp(tg), 4,
        lambda ps: tg.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
        lambda o: tg.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)),
    "conv + batch norm, Adam, CosineAnnealingLR": (
        _ConvNet, 16,
        lambda ps: tg.optim.Adam(ps, lr=0.01, amsgrad=True),
        lambda o: tg.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5)),
    "LSTM, AdamW, OneCycleLR": (
        _LSTMNet, 16,
        lambda ps: tg.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
        lambda o: tg.optim.lr_scheduler.OneCycleLR(o, max_lr=0.05, total_steps=10)),
    "transformer layer, SGD, LambdaLR (closure)": (
        _TransformerNet, 16,
        lambda ps: tg.optim.SGD(ps, lr=0.05, momentum=0.5, weight_decay=1e-3),
        lambda o: tg.optim.lr_scheduler.LambdaLR(o, _lambda_factor(2))),
}


def _batch(n_features, k):
    g = tg.Generator().manual_seed(100 + k)
    return tg.randn(6, n_features, generator=g), tg.randint(0, 3, (6,), generator=g)


def _train(model, opt, sched, n_features, start, steps):
    """steps optimizer and scheduler steps; the losses."""
    losses = []
    for k in range(start, start + steps):
        x, y = _batch(n_features, k)
        opt.zero_grad()
        loss = tg.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


def _snapshot(model, opt, sched):
    """Everything that must continue bitwise: parameters, buffers, optimizer state, lr."""
    arrays = [t.detach().numpy().copy() for t in model.parameters()]
    arrays += [t.numpy().copy() for t in model.buffers()]
    for st in opt.state_dict()["state"].values():
        arrays += [v.numpy().copy() if isinstance(v, tg.Tensor) else np.array(v)
                   for _, v in sorted(st.items())]
    return arrays, [g["lr"] for g in opt.param_groups], sched.state_dict()["last_epoch"]


def _same(a, b):
    (xa, la, ea), (xb, lb, eb) = a, b
    assert la == lb and ea == eb
    assert len(xa) == len(xb)
    for u, v in zip(xa, xb):
        assert u.dtype == v.dtype and u.shape == v.shape
        assert u.tobytes() == v.tobytes()           # bitwise


def _trained(name):
    make_model, nf, make_opt, make_sched = TRAINING_CASES[name]
    tg.manual_seed(0)
    model = make_model()
    opt = make_opt(model.parameters())
    sched = make_sched(opt)
    _train(model, opt, sched, nf, 0, 3)
    return model, opt, sched, nf


def _continue(model, opt, sched, nf, start, steps):
    """Train on, and return the losses and the snapshot (a worker runs it)."""
    losses = _train(model, opt, sched, nf, start, steps)
    return losses, _snapshot(model, opt, sched)


@pytest.mark.parametrize("name", list(TRAINING_CASES))
def test_model_optimizer_scheduler_continue_bitwise(name):
    model, opt, sched, nf = _trained(name)
    model2, opt2, sched2 = cloudpickle.loads(cloudpickle.dumps((model, opt, sched)))
    # pickled together, the copies refer to one another, as in PyTorch
    params2 = list(model2.parameters())
    assert len(opt2.param_groups[0]["params"]) == len(params2) == len(opt2.state)
    assert all(a is b for a, b in zip(opt2.param_groups[0]["params"], params2))
    assert all(any(p is q for q in params2) for p in opt2.state)
    assert sched2.optimizer is opt2
    assert all(p.grad is None for p in params2)        # gradients stay behind
    assert all(type(p) is tg.nn.Parameter for p in params2)
    assert not any(p is q for p in params2 for q in model.parameters())
    _same(_snapshot(model, opt, sched), _snapshot(model2, opt2, sched2))
    want = _continue(model, opt, sched, nf, 3, 3)
    got = _continue(model2, opt2, sched2, nf, 3, 3)
    assert got[0] == want[0]
    _same(got[1], want[1])


def test_what_a_module_keeps_is_pytorchs():
    torch = _torch()
    got = {}
    for T in (torch, tg):
        T.manual_seed(0)
        m = _mlp(T)
        m.register_forward_hook(_identity_hook)
        m[0].register_forward_pre_hook(_pre_hook)
        m[2].register_full_backward_hook(_backward_hook)
        m.eval()
        m[2].train()
        m[0].weight.grad = T.ones(8, 4)
        opt = T.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        m2, opt2 = pickle.loads(pickle.dumps((m, opt)))
        got[T.__name__] = (
            [mod.training for mod in m2.modules()],
            [type(p).__name__ for p in m2.parameters()],
            [p.requires_grad for p in m2.parameters()],
            [p.grad is None for p in m2.parameters()],
            [list(mod._forward_hooks.values()) for mod in m2.modules()],
            [list(mod._forward_pre_hooks.values()) for mod in m2.modules()],
            [list(mod._backward_hooks.values()) for mod in m2.modules()],
            opt2.param_groups[0]["params"][0] is m2[0].weight,
            repr(m2))
    assert got["tapegrad"] == got["torch"]


def test_load_state_dict_result_pickles_and_prints_as_pytorchs():
    torch = _torch()
    got = {}
    for T in (torch, tg):
        m = T.nn.Linear(2, 2)
        ok = m.load_state_dict(T.nn.Linear(2, 2).state_dict())
        partial = m.load_state_dict({"weight": T.ones(2, 2), "extra": T.ones(1)}, strict=False)
        back = pickle.loads(pickle.dumps((ok, partial)))
        got[T.__name__] = [repr(r) for r in back] + [str(ok), back[1].missing_keys]
    assert got["tapegrad"] == got["torch"] == [
        "<All keys matched successfully>",
        "_IncompatibleKeys(missing_keys=['bias'], unexpected_keys=['extra'])",
        "<All keys matched successfully>", ["bias"]]


def _identity_hook(module, args, out):
    return None


def _pre_hook(module, args):
    return None


def _backward_hook(module, grad_in, grad_out):
    return None


def test_optimizer_alone_and_deepcopy_keep_state():
    model, opt, sched, nf = _trained("MLP, SGD momentum, StepLR")
    for opt2 in (pickle.loads(pickle.dumps(opt)), copy.deepcopy(opt)):
        sd, sd2 = opt.state_dict(), opt2.state_dict()
        assert sd["param_groups"] == sd2["param_groups"]
        for k in sd["state"]:
            assert sd["state"][k]["momentum_buffer"].tolist() == \
                sd2["state"][k]["momentum_buffer"].tolist()
        # its own parameters (copies), not the model's
        assert not any(p is q for p in opt2.param_groups[0]["params"]
                       for q in model.parameters())


def test_lambda_scheduler_needs_cloudpickle_as_in_pytorch():
    torch = _torch()
    for T in (torch, tg):
        opt = T.optim.SGD([T.nn.Parameter(T.ones(1))], lr=1.0)
        sched = T.optim.lr_scheduler.LambdaLR(opt, lambda e: 0.9 ** e)
        with pytest.raises((pickle.PicklingError, AttributeError), match="lambda"):
            pickle.dumps(sched)
        opt.step()
        sched.step()
        opt2, sched2 = cloudpickle.loads(cloudpickle.dumps((opt, sched)))
        opt2.step()
        sched2.step()
        assert opt2.param_groups[0]["lr"] == pytest.approx(0.81, rel=1e-15)


OPTIMIZERS = {
    "SGD": lambda O, ps: O.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1),
    "Adam": lambda O, ps: O.Adam(ps, lr=0.1),
    "AdamW amsgrad": lambda O, ps: O.AdamW(ps, lr=0.1, amsgrad=True),
    "RMSprop": lambda O, ps: O.RMSprop(ps, lr=0.01, momentum=0.5, centered=True),
    "Adagrad": lambda O, ps: O.Adagrad(ps, lr=0.1, lr_decay=0.01),
    "Adadelta": lambda O, ps: O.Adadelta(ps),
    "Adamax": lambda O, ps: O.Adamax(ps),
    "NAdam": lambda O, ps: O.NAdam(ps),
    "RAdam": lambda O, ps: O.RAdam(ps),
    "ASGD": lambda O, ps: O.ASGD(ps, t0=1),
    "Rprop": lambda O, ps: O.Rprop(ps),
    "LBFGS": lambda O, ps: O.LBFGS(ps, lr=0.5, max_iter=3, history_size=3),
}


def _optimizer_steps(T, p, opt, steps):
    target = T.linspace(-1, 1, 5, dtype=T.float64)

    def closure():
        opt.zero_grad()
        loss = ((p - target) ** 4).sum()
        loss.backward()
        return loss
    for _ in range(steps):
        opt.step(closure)
    return p.detach().tolist()


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_every_optimizer_continues_bitwise_and_as_pytorchs(name):
    torch = _torch()
    got = {}
    for T in (torch, tg):
        p = T.nn.Parameter(T.zeros(5, dtype=T.float64))
        opt = OPTIMIZERS[name](T.optim, [p])
        _optimizer_steps(T, p, opt, 2)
        p2, opt2 = pickle.loads(pickle.dumps((p, opt)))
        assert opt2.param_groups[0]["params"][0] is p2 and p2 is not p
        want = _optimizer_steps(T, p, opt, 2)
        if T is torch and name == "LBFGS":
            # PyTorch's LBFGS pickles without its parameter list and cannot step again
            # (tapegrad's keeps it and continues)
            with pytest.raises(AttributeError, match="_params"):
                _optimizer_steps(T, p2, opt2, 2)
        else:
            assert _optimizer_steps(T, p2, opt2, 2) == want         # bitwise
        got[T.__name__] = want
    np.testing.assert_allclose(got["tapegrad"], got["torch"], rtol=1e-12, atol=1e-14)


SCHEDULERS = {
    "LambdaLR": lambda S, o: S.LambdaLR(o, abs),
    "MultiplicativeLR": lambda S, o: S.MultiplicativeLR(o, abs),
    "StepLR": lambda S, o: S.StepLR(o, 2),
    "MultiStepLR": lambda S, o: S.MultiStepLR(o, [1, 3]),
    "ConstantLR": lambda S, o: S.ConstantLR(o),
    "LinearLR": lambda S, o: S.LinearLR(o),
    "ExponentialLR": lambda S, o: S.ExponentialLR(o, 0.9),
    "PolynomialLR": lambda S, o: S.PolynomialLR(o, 6),
    "CosineAnnealingLR": lambda S, o: S.CosineAnnealingLR(o, 4),
    "CosineAnnealingWarmRestarts": lambda S, o: S.CosineAnnealingWarmRestarts(o, 2),
    "CyclicLR": lambda S, o: S.CyclicLR(o, 0.01, 0.1, step_size_up=2),
    "CyclicLR exp_range": lambda S, o: S.CyclicLR(o, 0.01, 0.1, step_size_up=2,
                                                  mode="exp_range", gamma=0.9),
    "OneCycleLR": lambda S, o: S.OneCycleLR(o, 0.1, total_steps=10),
    "ReduceLROnPlateau": lambda S, o: S.ReduceLROnPlateau(o, patience=0),
    "SequentialLR": lambda S, o: S.SequentialLR(o, [S.ConstantLR(o), S.ExponentialLR(o, 0.9)],
                                                [2]),
    "ChainedScheduler": lambda S, o: S.ChainedScheduler([S.ConstantLR(o),
                                                         S.ExponentialLR(o, 0.9)]),
}


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_every_scheduler_continues_as_pytorchs(name):
    torch = _torch()
    got = {}
    for T in (torch, tg):
        opt = T.optim.SGD([T.nn.Parameter(T.ones(2))], lr=0.1, momentum=0.9)
        sched = SCHEDULERS[name](T.optim.lr_scheduler, opt)

        def step(o, s):
            o.step()
            s.step(1.0) if name == "ReduceLROnPlateau" else s.step()
            return o.param_groups[0]["lr"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")         # (chained schedulers' step-order note)
            for _ in range(2):
                step(opt, sched)
            opt2, sched2 = pickle.loads(pickle.dumps((opt, sched)))
            want = [step(opt, sched) for _ in range(3)]
            assert [step(opt2, sched2) for _ in range(3)] == want
        got[T.__name__] = want
    assert got["tapegrad"] == got["torch"]


# ---------------------------------------------------------------- random generators
def test_generator_continues_its_stream_as_pytorchs():
    torch = _torch()
    got = {}
    for T in (torch, tg):
        g = T.Generator().manual_seed(3)
        T.rand(5, generator=g)
        T.randn(3, generator=g)                 # leaves a cached normal sample behind
        g2 = pickle.loads(pickle.dumps(g))
        assert g2 is not g
        a = T.randn(1, generator=g2).tolist() + T.rand(4, generator=g2).tolist()
        b = T.randn(1, generator=g).tolist() + T.rand(4, generator=g).tolist()
        assert a == b
        got[T.__name__] = (a, g2.initial_seed())
    assert got["tapegrad"] == got["torch"]


def test_default_generator_state_travels_by_get_rng_state():
    tg.manual_seed(7)
    tg.rand(3)
    state = pickle.loads(pickle.dumps(tg.get_rng_state()))
    want = tg.rand(4).tolist()
    tg.manual_seed(1)
    tg.set_rng_state(state)
    assert tg.rand(4).tolist() == want


# ---------------------------------------------------------------- tapegrad.compile
@tg.compile
def _compiled_double(x):
    return x * 2


def _compiled_train_step(model, opt):
    def step(x, y):
        opt.zero_grad()
        loss = tg.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return tg.compile(step, fuse=False)


def test_compiled_function_at_module_level_travels_by_reference():
    assert pickle.loads(pickle.dumps(_compiled_double)) is _compiled_double
    assert cloudpickle.loads(cloudpickle.dumps(_compiled_double)) is _compiled_double


def test_compiled_closure_records_afresh_and_continues_bitwise():
    tg.manual_seed(0)
    model = _mlp(tg)
    opt = tg.optim.Adam(model.parameters(), lr=0.01)
    step = _compiled_train_step(model, opt)
    for k in range(3):
        step(*_batch(4, k))
    assert step.stats == {"recordings": 1, "replays": 2} and step.plans
    with pytest.raises((pickle.PicklingError, AttributeError)):
        pickle.dumps(step)                      # a closure: cloudpickle's job
    step2 = cloudpickle.loads(cloudpickle.dumps(step))
    assert type(step2) is type(step) and step2.stats == {"recordings": 0, "replays": 0}
    assert step2.plans == {} and step2.eager is None and step2.fuse is False
    cells = inspect.getclosurevars(step2.fn).nonlocals
    model2, opt2 = cells["model"], cells["opt"]
    assert model2 is not model
    assert opt2.param_groups[0]["params"][0] is next(model2.parameters())
    for k in range(3, 6):
        a, b = step(*_batch(4, k)), step2(*_batch(4, k))
        assert a.item() == b.item()
    assert step2.stats == {"recordings": 1, "replays": 2}
    for p, q in zip(model.parameters(), model2.parameters()):
        assert p.detach().numpy().tobytes() == q.detach().numpy().tobytes()


def test_compiled_state_holds_no_engine_ids():
    tg.manual_seed(0)
    model = _mlp(tg)
    step = _compiled_train_step(model, tg.optim.SGD(model.parameters(), lr=0.1))
    step(*_batch(4, 0))
    step(*_batch(4, 1))
    _assert_no_engine_state(step)


# ---------------------------------------------------------------- data
def test_dataloader_with_tensor_dataset_and_seeded_sampler():
    ds = tg.utils.data.TensorDataset(tg.arange(10.), tg.arange(10))
    loader = tg.utils.data.DataLoader(ds, batch_size=3, shuffle=True,
                                      generator=tg.Generator().manual_seed(5))
    next(iter(loader))
    loader2 = pickle.loads(pickle.dumps(loader))
    assert loader2.dataset is not ds
    want = [[t.tolist() for t in b] for b in loader]
    assert [[t.tolist() for t in b] for b in loader2] == want
    _assert_no_engine_state(loader)
    with pytest.raises(NotImplementedError):           # iterators do not, as in PyTorch
        pickle.dumps(iter(loader))
    # a worker process gets the dataset by pickle and sends the batches back by pickle
    spawned = tg.utils.data.DataLoader(ds, batch_size=4, num_workers=1,
                                       multiprocessing_context="spawn")
    assert [[t.tolist() for t in b] for b in spawned] == [
        [t.tolist() for t in b] for b in tg.utils.data.DataLoader(ds, batch_size=4)]


# ---------------------------------------------------------------- what never travels
class _Spy(cloudpickle.Pickler):
    """A (cloud)pickler that lists every object it pickles."""

    def __init__(self, f):
        super().__init__(f, protocol=5)
        self.seen = []

    def persistent_id(self, obj):
        self.seen.append(obj)
        return None


def _assert_no_engine_state(obj):
    """Nothing pickling visits is a raw address or an engine handle: no Python int
    as large as an address, no engine, kernel, plan or ctypes object."""
    import io
    spy = _Spy(io.BytesIO())
    spy.dump(obj)
    for o in spy.seen:
        if isinstance(o, int) and not isinstance(o, bool):
            assert abs(o) < 1 << 40, f"an int like an address: {o}"
        mod = type(o).__module__ or ""
        assert not mod.startswith(("numba", "ctypes", "tapegrad._engine", "tapegrad.replay.plan",
                                   "tapegrad.replay.recorder")), type(o)


@pytest.mark.parametrize("name", list(TRAINING_CASES))
def test_training_objects_hold_no_engine_ids(name):
    model, opt, sched, nf = _trained(name)
    # the optimizer's kept kernel arguments (raw addresses) and a generator's address
    # exist, and stay behind
    g = tg.Generator().manual_seed(1)
    for raw in (opt._tables, dict(g.__dict__)):
        with pytest.raises(AssertionError, match="an int like an address"):
            _assert_no_engine_state(raw)
    _assert_no_engine_state((model, opt, sched, g))


# ---------------------------------------------------------------- other processes
_CHILD = """
import pickle, sys
fn, args = pickle.load(open(sys.argv[1], "rb"))
pickle.dump(fn(*args), open(sys.argv[2], "wb"))
"""


def _worker_continue(model, opt, sched, nf, state, step_fn):
    """What the other process runs: train on, draw from the default generator after
    setting its state, and run a compiled closure (recorded there)."""
    losses, snap = _continue(model, opt, sched, nf, 3, 3)
    tg.set_rng_state(state)
    draws = tg.rand(4).tolist()
    x = tg.arange(3.)
    return losses, snap, draws, [step_fn(x).tolist() for _ in range(3)], step_fn.stats


def _scaler(k):
    return tg.compile(lambda x: x * k + 1)


def _parent_side(name):
    model, opt, sched, nf = _trained(name)
    tg.manual_seed(11)
    state = tg.get_rng_state()
    payload = (model, opt, sched, nf, state, _scaler(3.0))
    blob = cloudpickle.dumps((_worker_continue, payload))
    want = _worker_continue(*payload)
    return blob, want


def _check_worker(got, want):
    assert got[0] == want[0]
    _same(got[1], want[1])
    assert got[2] == want[2] and got[3] == want[3] == [[1., 4., 7.]] * 3
    assert got[4] == {"recordings": 1, "replays": 2}


def test_fresh_interpreter_continues_bitwise(tmp_path):
    blob, want = _parent_side("conv + batch norm, Adam, CosineAnnealingLR")
    src, dst = tmp_path / "in.pkl", tmp_path / "out.pkl"
    src.write_bytes(blob)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", _CHILD, str(src), str(dst)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    _check_worker(pickle.loads(dst.read_bytes()), want)


_MAIN_SCRIPT = """
import pickle, cloudpickle, tapegrad as tg
@tg.compile
def tri(x):
    return x * 3
tri(tg.ones(2))
try:
    pickle.dumps(tri)
except pickle.PicklingError:
    print("plain pickle refuses")
copy = cloudpickle.loads(cloudpickle.dumps(tri))
print(copy is not tri, dict(copy.stats), copy(tg.ones(2)).tolist(), copy.stats)
"""


def test_compiled_in_main_script_travels_by_cloudpickle(tmp_path):
    script = tmp_path / "main.py"
    script.write_text(_MAIN_SCRIPT)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "plain pickle refuses",
        "True {'recordings': 0, 'replays': 0} [3.0, 3.0] {'recordings': 1, 'replays': 0}"]


def _spawned(blob):
    fn, args = cloudpickle.loads(blob)
    return fn(*args)


def test_spawn_worker_continues_bitwise():
    import multiprocessing
    blob, want = _parent_side("LSTM, AdamW, OneCycleLR")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        # multiprocessing's own pickle carries the tensors back
        got = pool.apply(_spawned, (blob,))
        model, opt, sched, nf = _trained("MLP, SGD momentum, StepLR")
        back = pool.apply(_continue, (model, opt, sched, nf, 3, 2))
    _check_worker(got, want)
    want2 = _continue(model, opt, sched, nf, 3, 2)
    assert back[0] == want2[0]
    _same(back[1], want2[1])
