"""tapegrad.nn (Parameter, Module, layers, losses, init) and tapegrad.save / tapegrad.load.

Layers and losses are run side by side with their torch.nn counterparts (when PyTorch is
installed): the same parameters are copied into both, and forward values, input gradients
and parameter gradients are compared.
"""
import collections
import io
import json
import math
import os

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn
from tapegrad.serialization import CheckpointError
from tests.helpers import close, vals

RNG_SEED = 1234


def rand(*shape, low=-2.0, high=2.0, seed=0):
    """Reproducible float32 NumPy values."""
    return np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32)


def torch_lib():
    """PyTorch, or skip the calling test when it is not installed."""
    return pytest.importorskip("torch")


def copy_state(src, dst):
    """Load tapegrad module src's state dict (parameters and buffers) into torch module dst."""
    torch = torch_lib()
    dst.load_state_dict({k: torch.tensor(v.detach().numpy())
                         for k, v in src.state_dict().items()})


def randomize(module, seed=RNG_SEED):
    """Give every floating parameter non-trivial values (LayerNorm starts at ones/zeros)."""
    tg.manual_seed(seed)
    for p in module.parameters():
        nn.init.uniform_(p, -1.5, 1.5)
    return module


def run_module(L, module, arrays, grads=None, upstream_seed=7):
    """Forward module on tensors made from arrays (those flagged in grads, by default the
    floating ones, require grad), backward with a fixed random upstream gradient; returns
    (output, input grads, {param name: grad})."""
    grads = [a.dtype.kind == "f" for a in arrays] if grads is None else grads
    xs = [L.tensor(a).requires_grad_(g) for a, g in zip(arrays, grads)]
    out = module(*xs)
    if out.ndim == 0:
        out.backward()
    else:
        (out * L.tensor(rand(*out.shape, seed=upstream_seed)).to(out.dtype)).sum().backward()
    in_grads = [x.grad for x in xs if x.requires_grad]
    p_grads = {n: p.grad for n, p in module.named_parameters()}
    return out, in_grads, p_grads


def compare_with_torch(ours, theirs, arrays, grads=None, rtol=1e-5, atol=1e-6):
    """Copy ours' state into theirs, run both, compare output and every gradient."""
    copy_state(ours, theirs)
    out, gin, gp = run_module(tg, ours, arrays, grads)
    tout, tgin, tgp = run_module(torch_lib(), theirs, arrays, grads)
    assert tuple(out.shape) == tuple(tout.shape)
    np.testing.assert_allclose(vals(out), tout.detach().double().numpy(), rtol=rtol, atol=atol)
    assert len(gin) == len(tgin)
    for a, b in zip(gin, tgin):
        np.testing.assert_allclose(vals(a), b.double().numpy(), rtol=rtol, atol=atol)
    assert set(gp) == set(tgp)
    for name in gp:
        if tgp[name] is None:
            assert gp[name] is None, name
        else:
            np.testing.assert_allclose(vals(gp[name]), tgp[name].double().numpy(),
                                       rtol=rtol, atol=atol, err_msg=name)
    return out


def names(pairs):
    """The names of (name, object) pairs."""
    return [n for n, _ in pairs]


def same(objects, expected):
    """Whether an iterable yields exactly the expected objects (identity), in order."""
    objects = list(objects)
    return len(objects) == len(expected) and all(a is b for a, b in zip(objects, expected))


def mlp(L, seed):
    """A small seeded Linear-Tanh-Linear network of library L."""
    L.manual_seed(seed)
    return L.nn.Sequential(L.nn.Linear(3, 4), L.nn.Tanh(), L.nn.Linear(4, 2))


def fresh(*shape):
    """An uninitialised Parameter to initialise."""
    return nn.Parameter(tg.empty(*shape))


def probs(*shape, seed):
    """Probabilities away from 0 and 1 (inputs and targets of BCELoss)."""
    return rand(*shape, low=0.05, high=0.95, seed=seed)


def pair():
    """A prediction and a regression target."""
    return [rand(5, 3), rand(5, 3, seed=2)]


def labels(n, c, seed, ignore=None):
    """n class indices below c; every third one set to ignore, if given."""
    t = np.random.default_rng(seed).integers(0, c, n).astype(np.int64)
    if ignore is not None:
        t[::3] = ignore
    return t


def roundtrip(obj, tmp_path, name="ckpt.npz"):
    """obj after tapegrad.save and tapegrad.load through a file."""
    path = tmp_path / name
    tg.save(obj, path)
    return tg.load(path)


# =========================================================================== Parameter
def test_parameter_is_a_leaf_requiring_grad():
    p = nn.Parameter(tg.tensor([1.0, 2.0]))
    assert isinstance(p, nn.Parameter) and isinstance(p, tg.Tensor)
    assert p.is_leaf and p.requires_grad and p.grad_fn is None
    (p ** 2).sum().backward()
    close(p.grad, [2.0, 4.0])
    frozen = nn.Parameter(tg.tensor([1.0]), requires_grad=False)
    assert isinstance(frozen, nn.Parameter) and not frozen.requires_grad


def test_parameters_combine_with_each_other_like_tensors():
    """Arithmetic between two Parameters (weight decay p * p, tied weights p - q, ...)."""
    p = nn.Parameter(tg.tensor([1.0, 2.0]))
    q = nn.Parameter(tg.tensor([4.0, 8.0]))
    x = tg.tensor([10.0, 10.0])
    close(p * p, [1.0, 4.0])
    close(p + q, [5.0, 10.0])
    close(q - p, [3.0, 6.0])
    close(q / p, [4.0, 4.0])
    close(x / p, [10.0, 5.0])
    close(p ** p, [1.0, 4.0])
    close(p.mul(q), [4.0, 16.0])
    close(tg.add(p, q), [5.0, 10.0])
    close(tg.maximum(p, q), [4.0, 8.0])
    (p * q).sum().backward()
    close(p.grad, [4.0, 8.0])
    close(q.grad, [1.0, 2.0])


def test_in_place_ops_accept_a_parameter_operand():
    p = nn.Parameter(tg.tensor([1.0, 2.0]))
    q = nn.Parameter(tg.tensor([4.0, 8.0]))
    x = tg.tensor([10.0, 10.0])
    assert x.add_(p) is x
    close(x, [11.0, 12.0])
    with tg.no_grad():
        p.sub_(q)
        p.mul_(q)
    close(p, [-12.0, -48.0])


def test_parameter_of_an_op_result_starts_a_new_graph():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    p = nn.Parameter(x * 2)
    assert p.is_leaf and p.grad_fn is None and p.requires_grad
    close(p, [2.0, 4.0])
    (p * 3).sum().backward()
    close(p.grad, [3.0, 3.0])
    assert x.grad is None


def test_parameter_shares_storage_with_the_wrapped_tensor():
    x = tg.tensor([1.0, 2.0, 3.0])
    p = nn.Parameter(x)
    with tg.no_grad():
        p.mul_(2.0)
    close(x, [2.0, 4.0, 6.0])
    x.add_(1.0)
    close(p, [3.0, 5.0, 7.0])


def test_parameter_repr():
    p = nn.Parameter(tg.tensor([2.0, 4.0]))
    assert repr(p).startswith("Parameter containing:\n")
    torch = torch_lib()
    assert repr(p) == repr(torch.nn.Parameter(torch.tensor([2.0, 4.0])))


# =========================================================================== registration
def make_net(L):
    """A module with a direct parameter, a sub-module registered under two names, a
    nested Sequential, a persistent and a non-persistent buffer and a plain attribute."""
    class Net(L.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = L.nn.Parameter(L.ones(3))
            self.enc = L.nn.Linear(2, 3)
            self.body = L.nn.Sequential(L.nn.Linear(3, 3), L.nn.ReLU())
            self.alias = self.enc                      # same module under two names
            self.register_buffer("steps", L.zeros(1))
            self.register_buffer("cache", L.zeros(2), persistent=False)
            self.note = "not registered"

        def forward(self, x):
            return self.body(self.enc(x)) * self.scale
    return Net()


def test_parameters_buffers_and_children_are_registered():
    m = make_net(tg)
    assert names(m.named_parameters()) == ["scale", "enc.weight", "enc.bias",
                                           "body.0.weight", "body.0.bias"]
    assert same(m.parameters(), [m.scale, m.enc.weight, m.enc.bias, m.body[0].weight,
                                 m.body[0].bias])
    assert names(m.named_children()) == ["enc", "body"]      # the alias is listed once
    assert same(m.children(), [m.enc, m.body])
    assert names(m.named_modules()) == ["", "enc", "body", "body.0", "body.1"]
    assert same(m.modules(), [m, m.enc, m.body, m.body[0], m.body[1]])
    assert names(m.named_buffers()) == ["steps", "cache"]
    assert same(m.buffers(), [m.steps, m.cache])
    assert names(m.named_parameters(prefix="net")) == ["net.scale", "net.enc.weight",
                                                       "net.enc.bias", "net.body.0.weight",
                                                       "net.body.0.bias"]
    assert names(m.named_parameters(recurse=False)) == ["scale"]
    assert m.note == "not registered"
    assert "note" not in dict(m.named_parameters())


def test_registration_matches_torch():
    torch = torch_lib()
    ours, theirs = make_net(tg), make_net(torch)
    for fn in ("named_parameters", "named_children", "named_modules", "named_buffers"):
        assert names(getattr(ours, fn)()) == names(getattr(theirs, fn)()), fn
    assert list(ours.state_dict()) == list(theirs.state_dict())


def test_shared_parameter_is_listed_once():
    m = nn.Module()
    m.a = nn.Linear(2, 2)
    m.b = nn.Linear(2, 2)
    m.b.weight = m.a.weight                       # tied weights
    assert names(m.named_parameters()) == ["a.weight", "a.bias", "b.bias"]
    assert same(m.parameters(), [m.a.weight, m.a.bias, m.b.bias])
    assert sorted(m.state_dict()) == ["a.bias", "a.weight", "b.bias", "b.weight"]
    assert m.b.weight is m.a.weight


def test_non_persistent_buffer_is_not_in_state_dict():
    m = make_net(tg)
    sd = m.state_dict()
    assert "steps" in sd and "cache" not in sd
    assert list(sd) == ["scale", "steps", "enc.weight", "enc.bias", "body.0.weight",
                        "body.0.bias", "alias.weight", "alias.bias"]
    assert isinstance(sd, collections.OrderedDict)
    assert not sd["scale"].requires_grad              # detached unless keep_vars
    assert m.state_dict(keep_vars=True)["scale"] is m.scale


def test_reassigning_a_registered_name_keeps_its_position():
    """PyTorch replaces the entry in place: state_dict keys and reprs keep their order."""
    m = nn.Linear(2, 2)
    m.weight = nn.Parameter(tg.zeros(2, 2))
    assert list(m.state_dict()) == ["weight", "bias"]
    tied = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    tied[1].weight = tied[0].weight
    assert list(tied.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias"]
    seq = nn.Module()
    seq.x, seq.y = nn.ReLU(), nn.Tanh()
    seq.x = nn.Sigmoid()
    assert names(seq.named_children()) == ["x", "y"]
    assert repr(seq) == "Module(\n  (x): Sigmoid()\n  (y): Tanh()\n)"
    seq.register_buffer("u", tg.zeros(1))
    seq.register_buffer("v", tg.zeros(1))
    seq.register_buffer("u", tg.ones(1))
    assert list(seq.state_dict()) == ["u", "v"]


def test_assigning_a_tensor_to_a_buffer_name_keeps_it_a_buffer():
    m = make_net(tg)
    m.steps = tg.tensor([5.0])
    assert names(m.named_buffers()) == ["steps", "cache"]
    close(m.state_dict()["steps"], [5.0])
    m.extra = nn.Parameter(tg.zeros(1))
    assert "extra" in dict(m.named_parameters())
    del m.extra
    assert "extra" not in dict(m.named_parameters())


def test_assigning_a_plain_tensor_to_a_parameter_name_raises_type_error():
    m = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="as parameter 'weight'"):
        m.weight = tg.zeros(2, 2)
    assert isinstance(m.weight, nn.Parameter)
    m.bias = None                                     # None is allowed, as in PyTorch
    assert m.bias is None and names(m.named_parameters()) == ["weight"]
    with pytest.raises(TypeError):
        m.register_parameter("w2", tg.zeros(1))


def test_unknown_attribute_raises_attribute_error():
    m = make_net(tg)
    with pytest.raises(AttributeError) as ei:
        m.nope  # noqa: B018
    assert str(ei.value) == "'Net' object has no attribute 'nope'"
    assert not hasattr(m, "nope")


def test_assigning_a_parameter_before_init_raises():
    class Early(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(tg.zeros(1))
            super().__init__()
    with pytest.raises(AttributeError,
                       match=r"cannot assign parameters or modules before Module.__init__"):
        Early()


# =========================================================================== state dicts
def test_state_dict_round_trip_between_models():
    a, b = mlp(tg, 1), mlp(tg, 2)
    assert not np.allclose(vals(a[0].weight), vals(b[0].weight))
    params_before = list(b.parameters())
    result = b.load_state_dict(a.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb
        np.testing.assert_array_equal(vals(va), vals(vb))
    assert same(b.parameters(), params_before)         # loaded in place
    x = tg.tensor(rand(5, 3))
    np.testing.assert_array_equal(vals(a(x)), vals(b(x)))
    # the copy is a copy: changing a later does not change b
    with tg.no_grad():
        a[0].weight.mul_(0.0)
    assert np.abs(vals(b[0].weight)).sum() > 0


def test_load_state_dict_copies_buffers_and_converts_dtype():
    a, b = nn.BatchNorm1d(3), nn.BatchNorm1d(3)
    a.train()
    a(tg.tensor(rand(6, 3)))
    sd = a.state_dict()
    sd["weight"] = tg.tensor([1.0, 2.0, 3.0], dtype=tg.float64)
    b.load_state_dict(sd)
    close(b.running_mean, vals(a.running_mean))
    assert b.num_batches_tracked.item() == 1
    assert b.weight.dtype == tg.float32
    close(b.weight, [1.0, 2.0, 3.0])


def strict_errors(L):
    """The messages (None: no error) of three bad loads: missing + unexpected keys + a size
    mismatch; only the key errors; the same as the first with strict=False."""
    m = L.nn.Sequential(L.nn.Linear(2, 3), L.nn.ReLU(), L.nn.Linear(3, 1))
    sd = dict(m.state_dict())
    del sd["2.bias"]
    sd["extra"] = L.zeros(1)
    bad = dict(sd)
    bad["0.weight"] = L.zeros(4, 2)
    out = []
    for state, strict in ((bad, True), (sd, True), (bad, False)):
        try:
            m.load_state_dict(state, strict=strict)
            out.append(None)
        except RuntimeError as e:
            out.append(str(e))
    return out


def test_strict_load_errors():
    full, keys_only, size_only = strict_errors(tg)
    assert full == (
        'Error(s) in loading state_dict for Sequential:\n'
        '\tMissing key(s) in state_dict: "2.bias". \n'
        '\tUnexpected key(s) in state_dict: "extra". \n'
        '\tsize mismatch for 0.weight: copying a param with shape tapegrad.Size([4, 2]) '
        'from checkpoint, the shape in current model is tapegrad.Size([3, 2]).')
    assert keys_only.startswith("Error(s) in loading state_dict for Sequential:\n")
    assert "size mismatch" not in keys_only
    assert size_only == ('Error(s) in loading state_dict for Sequential:\n'
                         '\tsize mismatch for 0.weight: copying a param with shape '
                         'tapegrad.Size([4, 2]) from checkpoint, the shape in current model is '
                         'tapegrad.Size([3, 2]).')


def test_strict_load_errors_match_torch():
    ours, theirs = strict_errors(tg), strict_errors(torch_lib())
    assert [o.replace("tapegrad", "torch") for o in ours] == theirs


def test_non_strict_load_reports_keys_and_loads_the_rest():
    a, b = mlp(tg, 1), mlp(tg, 2)
    sd = a.state_dict()
    del sd["2.bias"]
    sd["head.weight"] = tg.zeros(1)
    old_bias = vals(b[2].bias)
    missing, unexpected = b.load_state_dict(sd, strict=False)
    assert missing == ["2.bias"] and unexpected == ["head.weight"]
    for k in ("0.weight", "0.bias", "2.weight"):
        np.testing.assert_array_equal(vals(b.state_dict()[k]), vals(a.state_dict()[k]))
    np.testing.assert_array_equal(vals(b[2].bias), old_bias)


def test_state_dict_tensors_share_storage_with_the_model():
    m = nn.Linear(2, 2)
    before = vals(m.bias)
    m.state_dict()["bias"].add_(100.0)
    close(m.bias, before + 100.0)


def test_load_state_dict_is_not_recorded_by_autograd():
    a, b = mlp(tg, 1), mlp(tg, 2)
    b.load_state_dict(a.state_dict())
    for p in b.parameters():
        assert p.is_leaf and p.requires_grad and p.grad_fn is None
    b(tg.tensor(rand(2, 3))).sum().backward()
    assert all(p.grad is not None for p in b.parameters())


# =========================================================================== modes & helpers
def test_train_and_eval_are_recursive():
    m = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Dropout(0.5), nn.ReLU()))
    assert all(mod.training for mod in m.modules())
    assert m.eval() is m
    assert not any(mod.training for mod in m.modules())
    m.train()
    assert all(mod.training for mod in m.modules())
    m[1].train(False)
    assert m.training and m[0].training
    assert not m[1].training and not m[1][0].training
    with pytest.raises(ValueError):
        m.train("yes")


def test_requires_grad_false_freezes_parameters():
    tg.manual_seed(3)
    m = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    assert m[0].requires_grad_(False) is m[0]
    assert [p.requires_grad for p in m.parameters()] == [False, False, True, True]
    before = [vals(p) for p in m.parameters()]
    loss = (m(tg.tensor(rand(5, 3))) ** 2).mean()
    loss.backward()
    assert m[0].weight.grad is None and m[0].bias.grad is None
    assert m[2].weight.grad is not None and m[2].bias.grad is not None
    with tg.no_grad():
        for p in m.parameters():
            if p.grad is not None:
                p.sub_(0.1 * p.grad)
    after = [vals(p) for p in m.parameters()]
    np.testing.assert_array_equal(after[0], before[0])
    np.testing.assert_array_equal(after[1], before[1])
    assert not np.array_equal(after[2], before[2])
    np.testing.assert_allclose(after[3], before[3] - 0.1 * vals(m[2].bias.grad), rtol=1e-6)
    m.requires_grad_()
    assert all(p.requires_grad for p in m.parameters())


def test_zero_grad():
    m = mlp(tg, 0)
    m(tg.tensor(rand(2, 3))).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    m.zero_grad(set_to_none=False)
    for p in m.parameters():
        assert p.grad is not None and tuple(p.grad.shape) == tuple(p.shape)
        assert not vals(p.grad).any()
    m(tg.tensor(rand(2, 3))).sum().backward()
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())


def test_apply_visits_every_module_children_first():
    m = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU(), nn.Linear(2, 1)))
    seen = []
    assert m.apply(lambda mod: seen.append(type(mod).__name__)) is m
    assert seen == ["Linear", "ReLU", "Linear", "Sequential", "Sequential"]
    torch = torch_lib()
    tm = torch.nn.Sequential(torch.nn.Linear(2, 2),
                             torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(2, 1)))
    tseen = []
    tm.apply(lambda mod: tseen.append(type(mod).__name__))
    assert seen == tseen


def test_apply_can_initialise_weights():
    m = mlp(tg, 0)
    m.apply(lambda mod: nn.init.constant_(mod.weight, 0.5) if isinstance(mod, nn.Linear)
            else None)
    close(m[0].weight, np.full((4, 3), 0.5))
    close(m[2].weight, np.full((2, 4), 0.5))


@pytest.mark.parametrize("convert", [lambda m: m.to(tg.float64), lambda m: m.double(),
                                     lambda m: m.to(dtype=tg.float64)],
                         ids=["to", "double", "to_kw"])
def test_to_float64_converts_parameters_in_place(convert):
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
    m(tg.tensor(rand(5, 3))).sum().backward()             # float32 grads exist before
    grads = [vals(p.grad) for p in m.parameters()]
    m[1].requires_grad_(False)
    before = list(m.parameters())
    values = [vals(p) for p in before]
    assert convert(m) is m
    after = list(m.parameters())
    assert all(a is b for a, b in zip(before, after))
    for p, v, g in zip(after, values, grads):
        assert isinstance(p, nn.Parameter) and p.dtype == tg.float64 and p.is_leaf
        np.testing.assert_array_equal(vals(p), v)
        assert p.grad.dtype == tg.float64              # PyTorch converts .grad as well
        np.testing.assert_array_equal(vals(p.grad), g)
    assert [p.requires_grad for p in after] == [True, True, False, False, True, True]
    m.zero_grad()
    assert m[1].running_mean.dtype == tg.float64
    assert m[1].num_batches_tracked.dtype == tg.int64
    x = tg.tensor(rand(5, 3).astype(np.float64))
    y = m(x)
    assert y.dtype == tg.float64
    y.sum().backward()
    assert all(p.grad.dtype == tg.float64 for p in m.parameters() if p.requires_grad)
    m.float()
    assert all(p.dtype == tg.float32 for p in m.parameters())


def test_repr_of_sequential():
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Dropout(0.2),
                      nn.Linear(4, 1, bias=False))
    expected = ("Sequential(\n"
                "  (0): Linear(in_features=3, out_features=4, bias=True)\n"
                "  (1): ReLU()\n"
                "  (2): Dropout(p=0.2, inplace=False)\n"
                "  (3): Linear(in_features=4, out_features=1, bias=False)\n"
                ")")
    assert repr(m) == expected
    torch = torch_lib()
    tm = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                             torch.nn.Linear(4, 1, bias=False))
    assert repr(tm) == expected


@pytest.mark.parametrize("make", [
    lambda L: L.nn.Sequential(L.nn.Linear(2, 2), L.nn.Sequential(L.nn.Tanh(), L.nn.Identity())),
    lambda L: L.nn.GELU(approximate="tanh"),
    lambda L: L.nn.LeakyReLU(0.2),
    lambda L: L.nn.Softplus(beta=2.0, threshold=10.0),
    lambda L: L.nn.Softmax(dim=1),
    lambda L: L.nn.LogSoftmax(dim=-1),
    lambda L: L.nn.Flatten(0, 2),
    lambda L: L.nn.Embedding(10, 3, padding_idx=0),
    lambda L: L.nn.ModuleDict({"a": L.nn.Sigmoid(), "b": L.nn.Linear(1, 2)}),
    lambda L: L.nn.MSELoss(),
], ids=["nested", "gelu", "leaky", "softplus", "softmax", "logsoftmax", "flatten",
        "embedding", "moduledict", "mse"])
def test_layer_reprs_match_torch(make):
    torch = torch_lib()
    assert repr(make(tg)) == repr(make(torch))


# =========================================================================== layers vs torch
LAYERS = {
    "linear": (lambda L: L.nn.Linear(4, 3), [(5, 4)]),
    "linear_no_bias": (lambda L: L.nn.Linear(4, 3, bias=False), [(2, 6, 4)]),
    "sequential": (lambda L: L.nn.Sequential(L.nn.Linear(4, 5), L.nn.Tanh(),
                                             L.nn.Linear(5, 2), L.nn.Sigmoid()), [(6, 4)]),
    "relu": (lambda L: L.nn.ReLU(), [(3, 5)]),
    "tanh": (lambda L: L.nn.Tanh(), [(3, 5)]),
    "sigmoid": (lambda L: L.nn.Sigmoid(), [(3, 5)]),
    "gelu": (lambda L: L.nn.GELU(), [(3, 5)]),
    "gelu_tanh": (lambda L: L.nn.GELU(approximate="tanh"), [(3, 5)]),
    "leaky_relu": (lambda L: L.nn.LeakyReLU(), [(3, 5)]),
    "leaky_relu_02": (lambda L: L.nn.LeakyReLU(negative_slope=0.2), [(3, 5)]),
    "softmax": (lambda L: L.nn.Softmax(dim=1), [(3, 5)]),
    "softmax_dim0": (lambda L: L.nn.Softmax(dim=0), [(3, 5)]),
    "log_softmax": (lambda L: L.nn.LogSoftmax(dim=-1), [(2, 3, 5)]),
    "softplus": (lambda L: L.nn.Softplus(), [(3, 5)]),
    "softplus_beta": (lambda L: L.nn.Softplus(beta=3.0, threshold=2.0), [(4, 5)]),
    "identity": (lambda L: L.nn.Identity(), [(3, 5)]),
    "flatten": (lambda L: L.nn.Flatten(), [(2, 3, 4, 2)]),
    "flatten_dims": (lambda L: L.nn.Flatten(0, 1), [(2, 3, 4)]),
    "layer_norm": (lambda L: L.nn.LayerNorm(5), [(4, 5)]),
    "layer_norm_2d": (lambda L: L.nn.LayerNorm((3, 4), eps=1e-3), [(2, 3, 4)]),
    "layer_norm_no_affine": (lambda L: L.nn.LayerNorm(6, elementwise_affine=False), [(3, 6)]),
    "batch_norm_2d_input": (lambda L: L.nn.BatchNorm1d(4), [(8, 4)]),
    "batch_norm_3d_input": (lambda L: L.nn.BatchNorm1d(3, eps=1e-3), [(4, 3, 5)]),
    "layer_norm_no_bias": (lambda L: L.nn.LayerNorm(5, bias=False), [(4, 5)]),
    "batch_norm_no_affine_no_stats_eval": (
        lambda L: L.nn.BatchNorm1d(4, affine=False, track_running_stats=False).eval(),
        [(6, 4)]),
}


@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_matches_torch(name):
    torch = torch_lib()
    make, shapes = LAYERS[name]
    ours = randomize(make(tg))
    arrays = [rand(*s, seed=i + 1) for i, s in enumerate(shapes)]
    compare_with_torch(ours, make(torch), arrays)


def test_linear_uses_the_weight_layout_of_torch():
    m = nn.Linear(2, 3)
    assert tuple(m.weight.shape) == (3, 2) and tuple(m.bias.shape) == (3,)
    assert nn.Linear(2, 3, dtype=tg.float64).weight.dtype == tg.float64
    m.load_state_dict({"weight": tg.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]),
                       "bias": tg.tensor([0.5, -0.5, 0.0])})
    close(m(tg.tensor([[2.0, 3.0]])), [[2.5, 2.5, 5.0]])


def test_module_list_and_module_dict_match_torch():
    torch = torch_lib()

    def build(L):
        class Net(L.nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = L.nn.ModuleList([L.nn.Linear(4, 4) for _ in range(2)])
                self.blocks.append(L.nn.Tanh())
                self.heads = L.nn.ModuleDict({"mean": L.nn.Linear(4, 2),
                                              "logvar": L.nn.Linear(4, 2)})

            def forward(self, x):
                for b in self.blocks:
                    x = b(x)
                return self.heads["mean"](x) * self.heads["logvar"](x).exp()
        return Net()

    ours, theirs = randomize(build(tg)), build(torch)
    assert names(ours.named_parameters()) == names(theirs.named_parameters())
    assert len(ours.blocks) == 3 and list(ours.heads) == ["mean", "logvar"]
    assert ours.blocks[-1] is list(ours.blocks)[2]
    assert "mean" in ours.heads and "std" not in ours.heads
    compare_with_torch(ours, theirs, [rand(3, 4)])


def test_module_list_and_module_dict_editing_matches_torch():
    torch = torch_lib()

    def edit(L):
        ml = L.nn.ModuleList([L.nn.ReLU(), L.nn.Tanh()])
        ml.append(L.nn.Sigmoid())
        ml.extend([L.nn.Identity()])
        ml.insert(1, L.nn.Linear(1, 1))
        ml[-2] = L.nn.Softplus()
        md = L.nn.ModuleDict({"b": L.nn.ReLU(), "a": L.nn.Tanh()})
        md.update([("c", L.nn.Sigmoid())])
        md["a"] = L.nn.Identity()
        del md["b"]
        return ([type(m).__name__ for m in ml], names(ml.named_children()),
                [type(m).__name__ for m in ml[1:3]], list(md.keys()),
                [type(m).__name__ for m in md.values()], names(ml.named_parameters()))
    assert edit(tg) == edit(torch)


def test_module_list_item_assignment_replaces_in_place():
    first, second, new = nn.ReLU(), nn.Tanh(), nn.Sigmoid()
    ml = nn.ModuleList([first, second])
    ml[0] = new
    assert ml[0] is new and ml[1] is second
    assert same(ml, [new, second])
    x = tg.tensor([-1.0, 2.0])
    for m in ml:
        x = m(x)
    close(x, np.tanh(1 / (1 + np.exp([1.0, -2.0]))))


def test_sequential_indexing_and_slicing():
    m = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert len(m) == 3 and same(m, [m[0], m[1], m[2]]) and m[-1] is m[2]
    tail = m[1:]
    assert isinstance(tail, nn.Sequential) and names(tail.named_children()) == ["1", "2"]
    assert tail[1] is m[2]
    od = nn.Sequential(collections.OrderedDict([("fc", nn.Linear(2, 2)), ("act", nn.ReLU())]))
    assert names(od.named_children()) == ["fc", "act"] and od.fc is od[0]


# ---------------------------------------------------------------- embedding
def test_embedding_matches_torch():
    torch = torch_lib()
    ours, theirs = nn.Embedding(10, 3), torch.nn.Embedding(10, 3)
    idx = np.array([[1, 4, 4], [9, 0, 1]], dtype=np.int64)
    out = compare_with_torch(ours, theirs, [idx])
    assert tuple(out.shape) == (2, 3, 3)
    close(ours.weight.grad[2], [0.0, 0.0, 0.0])       # an unused row gets zero gradient


def test_embedding_default_init_is_standard_normal():
    tg.manual_seed(0)
    w = vals(nn.Embedding(1000, 50).weight)
    assert abs(w.mean()) < 0.02 and abs(w.std() - 1.0) < 0.02


def test_embedding_padding_idx_row_is_zero_and_gets_no_gradient():
    """PyTorch: the padding_idx row starts at zero and never receives a gradient."""
    e = nn.Embedding(5, 2, padding_idx=1)
    close(e.weight[1], [0.0, 0.0])
    e(tg.tensor([1, 1, 2])).sum().backward()
    close(e.weight.grad, [[0, 0], [0, 0], [1, 1], [0, 0], [0, 0]])


def test_embedding_rejects_float_indices():
    with pytest.raises(RuntimeError, match="Long"):
        nn.Embedding(5, 2)(tg.tensor([1.0]))


# ---------------------------------------------------------------- batch norm
@pytest.mark.parametrize("shape", [(8, 4), (5, 4, 3)], ids=["2d", "3d"])
@pytest.mark.parametrize("momentum", [0.1, 0.3, None])
def test_batch_norm_running_stats_match_torch(shape, momentum):
    """Three training steps (outputs and input grads), the running statistics, then
    eval mode, which normalises with the running statistics."""
    torch = torch_lib()
    ours = randomize(nn.BatchNorm1d(4, momentum=momentum))
    theirs = torch.nn.BatchNorm1d(4, momentum=momentum)
    copy_state(ours, theirs)
    for step in range(3):                 # parameter grads accumulate over the steps
        x = rand(*shape, low=-1, high=3, seed=10 + step) * (step + 1)
        out, (gx,), gp = run_module(tg, ours, [x])
        tout, (tgx,), tgp = run_module(torch, theirs, [x])
        np.testing.assert_allclose(vals(out), tout.detach().numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(vals(gx), tgx.numpy(), rtol=1e-5, atol=1e-5)
        for name in ("weight", "bias"):
            np.testing.assert_allclose(vals(gp[name]), tgp[name].numpy(), rtol=1e-5,
                                       atol=1e-5)
    assert ours.num_batches_tracked.item() == 3 == theirs.num_batches_tracked.item()
    assert ours.num_batches_tracked.dtype == tg.int64
    for name in ("running_mean", "running_var"):
        np.testing.assert_allclose(vals(getattr(ours, name)),
                                   getattr(theirs, name).numpy(), rtol=1e-5, atol=1e-6)
    ours.eval()
    theirs.eval()
    x = rand(*shape, seed=99)
    compare_with_torch(ours, theirs, [x])
    assert ours.num_batches_tracked.item() == 3       # eval does not count batches


def test_batch_norm_cumulative_average_by_hand():
    bn = nn.BatchNorm1d(1, momentum=None, affine=False)
    batches = [[1.0, 3.0], [2.0, 6.0], [0.0, 0.0]]
    for b in batches:
        bn(tg.tensor(b).reshape(2, 1))
    means = [np.mean(b) for b in batches]
    variances = [np.var(b, ddof=1) for b in batches]
    close(bn.running_mean, [np.mean(means)])
    close(bn.running_var, [np.mean(variances)])          # the initial 1 is forgotten
    assert bn.num_batches_tracked.item() == 3


def test_batch_norm_eval_output_by_hand():
    bn = nn.BatchNorm1d(2, eps=0.0).eval()
    bn.load_state_dict({"running_mean": tg.tensor([1.0, -1.0]),
                        "running_var": tg.tensor([4.0, 0.25]),
                        "weight": tg.tensor([2.0, 1.0]), "bias": tg.tensor([0.0, 10.0]),
                        "num_batches_tracked": tg.tensor(0)})
    close(bn(tg.tensor([[3.0, 0.0], [1.0, -1.5]])), [[2.0, 12.0], [0.0, 9.0]])


def test_batch_norm_training_needs_more_than_one_value():
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        nn.BatchNorm1d(3)(tg.ones(1, 3))


# ---------------------------------------------------------------- losses
CLASS_W = np.array([0.2, 1.0, 2.5, 0.7], dtype=np.float32)

LOSSES = {
    "mse": (lambda L: L.nn.MSELoss(), pair),
    "mse_sum": (lambda L: L.nn.MSELoss(reduction="sum"), pair),
    "mse_none": (lambda L: L.nn.MSELoss(reduction="none"), pair),
    "l1": (lambda L: L.nn.L1Loss(), pair),
    "huber": (lambda L: L.nn.HuberLoss(), pair),
    "huber_delta": (lambda L: L.nn.HuberLoss(delta=0.5), pair),
    "smooth_l1": (lambda L: L.nn.SmoothL1Loss(), pair),
    "smooth_l1_beta": (lambda L: L.nn.SmoothL1Loss(beta=0.3), pair),
    "bce": (lambda L: L.nn.BCELoss(), lambda: [probs(4, 3, seed=1), probs(4, 3, seed=2)]),
    "bce_weight": (lambda L: L.nn.BCELoss(weight=L.tensor([0.5, 1.0, 2.0])),
                   lambda: [probs(4, 3, seed=1), probs(4, 3, seed=2)]),
    "bce_logits": (lambda L: L.nn.BCEWithLogitsLoss(),
                   lambda: [rand(4, 3, low=-6, high=6), probs(4, 3, seed=2)]),
    "bce_logits_pos_weight": (
        lambda L: L.nn.BCEWithLogitsLoss(pos_weight=L.tensor([0.5, 1.0, 3.0])),
        lambda: [rand(4, 3, low=-6, high=6), probs(4, 3, seed=2)]),
    "bce_logits_both_weights": (
        lambda L: L.nn.BCEWithLogitsLoss(weight=L.tensor([2.0, 1.0, 0.5]),
                                         pos_weight=L.tensor([0.5, 1.0, 3.0])),
        lambda: [rand(4, 3, low=-6, high=6), probs(4, 3, seed=2)]),
    "nll": (lambda L: L.nn.NLLLoss(), lambda: [rand(6, 4), labels(6, 4, 3)]),
    "nll_weight_ignore": (lambda L: L.nn.NLLLoss(weight=L.tensor(CLASS_W), ignore_index=2),
                          lambda: [rand(6, 4), labels(6, 4, 3, ignore=2)]),
    "cross_entropy": (lambda L: L.nn.CrossEntropyLoss(), lambda: [rand(6, 4), labels(6, 4, 5)]),
    "cross_entropy_sum": (lambda L: L.nn.CrossEntropyLoss(reduction="sum"),
                          lambda: [rand(6, 4), labels(6, 4, 5)]),
    "cross_entropy_none": (lambda L: L.nn.CrossEntropyLoss(reduction="none"),
                           lambda: [rand(6, 4), labels(6, 4, 5)]),
    "cross_entropy_weight": (lambda L: L.nn.CrossEntropyLoss(weight=L.tensor(CLASS_W)),
                             lambda: [rand(6, 4), labels(6, 4, 5)]),
    "cross_entropy_ignore": (lambda L: L.nn.CrossEntropyLoss(ignore_index=-1),
                             lambda: [rand(6, 4), labels(6, 4, 5, ignore=-1)]),
    "cross_entropy_smoothing": (lambda L: L.nn.CrossEntropyLoss(label_smoothing=0.2),
                                lambda: [rand(6, 4), labels(6, 4, 5)]),
    "cross_entropy_all_options": (
        lambda L: L.nn.CrossEntropyLoss(weight=L.tensor(CLASS_W), ignore_index=1,
                                        label_smoothing=0.1),
        lambda: [rand(7, 4), labels(7, 4, 6, ignore=1)]),
    "cross_entropy_spatial": (lambda L: L.nn.CrossEntropyLoss(weight=L.tensor(CLASS_W),
                                                              label_smoothing=0.1),
                              lambda: [rand(2, 4, 3), labels(6, 4, 7).reshape(2, 3)]),
    "cross_entropy_probs": (lambda L: L.nn.CrossEntropyLoss(label_smoothing=0.1),
                            lambda: [rand(3, 4), probs(3, 4, seed=4)]),
}


@pytest.mark.parametrize("name", list(LOSSES))
def test_loss_matches_torch(name):
    """Values and the prediction's gradient (the target is data, as in training)."""
    make, inputs = LOSSES[name]
    compare_with_torch(make(tg), make(torch_lib()), inputs(), grads=[True, False])


def test_loss_weight_is_a_buffer():
    torch = torch_lib()
    for L in (tg, torch):
        loss = L.nn.CrossEntropyLoss(weight=L.tensor(CLASS_W))
        assert list(loss.state_dict()) == ["weight"]
        assert list(loss.parameters()) == []


def test_cross_entropy_by_hand():
    x = tg.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    loss = nn.CrossEntropyLoss()(x, tg.tensor([2]))
    p = np.exp([1.0, 2.0, 3.0]) / np.exp([1.0, 2.0, 3.0]).sum()
    close(loss, -np.log(p[2]))
    loss.backward()
    close(x.grad, [p - np.array([0.0, 0.0, 1.0])])


# =========================================================================== dropout
def test_dropout_is_identity_in_eval_mode():
    d = nn.Dropout(0.5).eval()
    x = tg.tensor(rand(100))
    np.testing.assert_array_equal(vals(d(x)), vals(x))
    np.testing.assert_array_equal(vals(nn.functional.dropout(x, 0.5, training=False)), vals(x))


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.8])
def test_dropout_training_zeroes_about_p_and_scales_the_rest(p):
    tg.manual_seed(5)
    x = tg.ones(10_000, requires_grad=True)
    y = nn.Dropout(p)(x)
    out = vals(y)
    dropped = out == 0
    assert abs(dropped.mean() - p) < 0.02
    np.testing.assert_allclose(out[~dropped], 1.0 / (1.0 - p), rtol=1e-6)
    y.sum().backward()
    np.testing.assert_allclose(vals(x.grad), (~dropped) / (1.0 - p), rtol=1e-6)


def test_dropout_gradient_uses_the_mask_on_non_constant_input():
    tg.manual_seed(11)
    x = tg.tensor(rand(2000) + 3.0, requires_grad=True)     # no zeros in the input
    y = nn.functional.dropout(x, 0.4)
    mask = vals(y) != 0
    np.testing.assert_allclose(vals(y)[mask], vals(x)[mask] / 0.6, rtol=1e-6)
    (y * tg.tensor(np.arange(2000, dtype=np.float32))).sum().backward()
    np.testing.assert_allclose(vals(x.grad), mask * np.arange(2000) / 0.6, rtol=1e-6)


def test_dropout_is_reproducible_with_manual_seed():
    x = tg.ones(500)
    d = nn.Dropout(0.5)
    tg.manual_seed(42)
    a, b = vals(d(x)), vals(d(x))
    tg.manual_seed(42)
    c = vals(d(x))
    np.testing.assert_array_equal(a, c)
    assert not np.array_equal(a, b)


def test_dropout_extreme_probabilities():
    x = tg.tensor(rand(50))
    np.testing.assert_array_equal(vals(nn.Dropout(0.0)(x)), vals(x))
    assert not vals(nn.Dropout(1.0)(x)).any()


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_dropout_probability_outside_unit_interval_raises(p):
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1"):
        nn.Dropout(p)
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1"):
        nn.functional.dropout(tg.ones(3), p)


# =========================================================================== initialisation
def test_linear_default_init_bounds_and_distribution():
    tg.manual_seed(0)
    m = nn.Linear(256, 256)
    bound = 1 / math.sqrt(256)
    w, b = vals(m.weight), vals(m.bias)
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    assert w.max() > 0.99 * bound and w.min() < -0.99 * bound
    assert abs(w.mean()) < 0.01 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.01 * bound
    hist, _ = np.histogram(w, bins=10, range=(-bound, bound))
    np.testing.assert_allclose(hist / w.size, 0.1, atol=0.01)
    assert np.abs(b).max() > 0.5 * bound and len(np.unique(b)) == 256


def test_linear_init_bound_depends_on_fan_in():
    tg.manual_seed(0)
    m = nn.Linear(16, 400)
    bound = 1 / math.sqrt(16)
    w = vals(m.weight)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound


def test_manual_seed_makes_models_identical():
    a, b = mlp(tg, 123), mlp(tg, 123)
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        np.testing.assert_array_equal(vals(va), vals(vb))
    c = mlp(tg, 124)
    assert not np.array_equal(vals(a[0].weight), vals(c[0].weight))


def test_init_uniform_and_normal_statistics():
    tg.manual_seed(0)
    u = nn.init.uniform_(fresh(200, 300), -2.0, 3.0)
    uv = vals(u)
    assert uv.min() >= -2.0 and uv.max() <= 3.0
    assert abs(uv.mean() - 0.5) < 0.02 and abs(uv.std() - 5 / math.sqrt(12)) < 0.02
    d = vals(nn.init.uniform_(fresh(1000)))
    assert d.min() >= 0.0 and d.max() <= 1.0
    n = vals(nn.init.normal_(fresh(200, 300), mean=1.0, std=2.0))
    assert abs(n.mean() - 1.0) < 0.03 and abs(n.std() - 2.0) < 0.03


def test_init_constants_and_in_place_semantics():
    p = fresh(3, 4)
    assert nn.init.zeros_(p) is p
    np.testing.assert_array_equal(vals(p), np.zeros((3, 4)))
    nn.init.ones_(p)
    np.testing.assert_array_equal(vals(p), np.ones((3, 4)))
    nn.init.constant_(p, -0.25)
    np.testing.assert_array_equal(vals(p), np.full((3, 4), -0.25))
    assert p.is_leaf and p.requires_grad and p.grad_fn is None
    assert p._version >= 3


def test_init_kaiming_and_xavier_uniform_bounds():
    tg.manual_seed(1)
    fan_out, fan_in = 300, 200
    k = vals(nn.init.kaiming_uniform_(fresh(fan_out, fan_in), nonlinearity="relu"))
    bound = math.sqrt(6.0 / fan_in)
    assert np.abs(k).max() <= bound and np.abs(k).max() > 0.99 * bound
    assert abs(k.std() - bound / math.sqrt(3)) < 0.01 * bound
    ko = vals(nn.init.kaiming_uniform_(fresh(fan_out, fan_in), mode="fan_out",
                                       nonlinearity="relu"))
    assert np.abs(ko).max() <= math.sqrt(6.0 / fan_out)
    x = vals(nn.init.xavier_uniform_(fresh(fan_out, fan_in), gain=2.0))
    bound = 2.0 * math.sqrt(6.0 / (fan_in + fan_out))
    assert np.abs(x).max() <= bound and np.abs(x).max() > 0.99 * bound
    assert abs(x.std() - bound / math.sqrt(3)) < 0.01 * bound
    c = vals(nn.init.kaiming_uniform_(fresh(8, 2, 3, 3)))     # fan_in = 2 * 3 * 3
    assert np.abs(c).max() <= math.sqrt(3.0) * math.sqrt(2.0) / math.sqrt(18)


def test_init_fans_need_two_dimensions():
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        nn.init.xavier_uniform_(fresh(5))


def test_calculate_gain_matches_torch():
    torch = torch_lib()
    for args in (("linear",), ("sigmoid",), ("tanh",), ("relu",), ("leaky_relu",),
                 ("leaky_relu", 0.2), ("selu",)):
        assert nn.init.calculate_gain(*args) == pytest.approx(
            torch.nn.init.calculate_gain(*args))


# =========================================================================== checkpoints
@pytest.mark.parametrize("dtype,values", [
    (tg.float32, [[1.5, -2.25], [3.0, 1e-30]]),
    (tg.float64, [0.1, -1e300, 2.0 ** -1074]),
    (tg.int64, [2 ** 62, -7, 0]),
    (tg.bool, [True, False, True]),
])
def test_save_load_tensor(tmp_path, dtype, values):
    t = tg.tensor(values, dtype=dtype)
    back = roundtrip(t, tmp_path)
    assert isinstance(back, tg.Tensor) and back.dtype == dtype
    assert tuple(back.shape) == tuple(t.shape)
    np.testing.assert_array_equal(back.numpy(), t.numpy())
    assert not back.requires_grad


def test_save_load_odd_shapes_and_views(tmp_path):
    base = tg.tensor(rand(3, 4))
    obj = {"scalar": tg.tensor(2.5), "empty": tg.zeros(0, 3), "transposed": base.t(),
           "slice": base[:, 1]}
    back = roundtrip(obj, tmp_path)
    for k, v in obj.items():
        assert tuple(back[k].shape) == tuple(v.shape), k
        np.testing.assert_array_equal(back[k].numpy(), v.numpy())


def test_save_load_state_dict(tmp_path):
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    m(tg.tensor(rand(5, 3)))
    sd = m.state_dict()
    back = roundtrip(sd, tmp_path)
    assert type(back) is collections.OrderedDict
    assert list(back) == list(sd)
    for k in sd:
        assert back[k].dtype == sd[k].dtype
        assert tuple(back[k].shape) == tuple(sd[k].shape), k
        np.testing.assert_array_equal(back[k].numpy(), sd[k].numpy())
    other = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    other.load_state_dict(back)
    x = tg.tensor(rand(2, 3, seed=8))
    m.eval()
    other.eval()
    np.testing.assert_array_equal(vals(m(x)), vals(other(x)))


def test_save_load_nested_containers(tmp_path):
    obj = {"epoch": 3, "lr": 0.1, "name": "run-α", "none": None, "flag": True,
           "pair": (1, 2.5), 7: "seven", "nested": [1, [2, (3, "x")], {"k": None}],
           "big": 2 ** 80, "neg": -1e-310, "inf": float("inf"), "empty": ([], (), {})}
    back = roundtrip(obj, tmp_path)
    assert back == obj
    assert type(back) is dict and list(back) == list(obj)
    assert type(back["pair"]) is tuple and type(back["nested"][1][1]) is tuple
    assert type(back["flag"]) is bool and type(back["epoch"]) is int
    assert type(back["lr"]) is float and 7 in back
    assert type(back["empty"][1]) is tuple


def test_save_load_optimizer_like_state(tmp_path):
    """A training checkpoint: model, per-parameter state keyed by int, step counters."""
    m = mlp(tg, 0)
    obj = {"model": m.state_dict(),
           "optim": {"state": {0: {"step": 10, "exp_avg": tg.ones(4, 3)}},
                     "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "params": [0, 1]}]},
           "dtype": tg.float64}
    back = roundtrip(obj, tmp_path)
    assert back["optim"]["param_groups"][0]["betas"] == (0.9, 0.999)
    assert back["optim"]["state"][0]["step"] == 10
    np.testing.assert_array_equal(back["optim"]["state"][0]["exp_avg"].numpy(), np.ones((4, 3)))
    assert back["dtype"] == tg.float64


def test_save_load_preserves_requires_grad_and_parameters(tmp_path):
    obj = {"leaf": tg.tensor([1.0, 2.0], requires_grad=True),
           "param": nn.Parameter(tg.tensor([3.0])),
           "frozen": nn.Parameter(tg.tensor([4.0]), requires_grad=False),
           "plain": tg.tensor([5.0])}
    back = roundtrip(obj, tmp_path)
    assert back["leaf"].requires_grad and back["leaf"].is_leaf
    assert not isinstance(back["leaf"], nn.Parameter)
    assert isinstance(back["param"], nn.Parameter) and back["param"].requires_grad
    assert isinstance(back["frozen"], nn.Parameter) and not back["frozen"].requires_grad
    assert not back["plain"].requires_grad and not isinstance(back["plain"], nn.Parameter)
    (back["leaf"] * 2).sum().backward()
    close(back["leaf"].grad, [2.0, 2.0])
    kept = nn.Linear(2, 2).state_dict(keep_vars=True)
    back = roundtrip(kept, tmp_path, "kv.npz")
    assert all(isinstance(v, nn.Parameter) for v in back.values())


def test_save_load_through_file_objects():
    buf = io.BytesIO()
    tg.save({"w": tg.tensor([1.0, 2.0])}, buf)
    buf.seek(0)
    close(tg.load(buf)["w"], [1.0, 2.0])


def test_save_leaves_no_temporary_files(tmp_path):
    tg.save({"a": tg.ones(3)}, tmp_path / "model.ckpt")
    tg.save({"a": tg.zeros(3)}, str(tmp_path / "model.ckpt"))      # overwrite
    assert os.listdir(tmp_path) == ["model.ckpt"]
    close(tg.load(tmp_path / "model.ckpt")["a"], [0.0, 0.0, 0.0])


def test_save_writes_a_temporary_file_then_renames(tmp_path, monkeypatch):
    renames = []
    real_replace = os.replace

    def spy(src, dst):
        renames.append((os.fspath(src), os.fspath(dst), os.path.exists(dst)))
        return real_replace(src, dst)
    monkeypatch.setattr(os, "replace", spy)
    target = tmp_path / "model.ckpt"
    tg.save(tg.ones(2), target)
    tg.save(tg.zeros(2), target)
    assert len(renames) == 2
    for src, dst, _ in renames:
        assert os.path.dirname(os.path.abspath(src)) == str(tmp_path)
        assert os.path.abspath(dst) == str(target) and src != dst
    assert [existed for *_, existed in renames] == [False, True]


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_checkpoint_gets_the_permissions_of_an_ordinary_file(tmp_path):
    """The temporary file must not leave its private 0600 mode on the checkpoint:
    torch.save (a plain open()) honours the umask, typically giving 0644."""
    (tmp_path / "plain").write_bytes(b"")
    tg.save(tg.ones(2), tmp_path / "model.ckpt")
    mode = os.stat(tmp_path / "model.ckpt").st_mode & 0o777
    assert oct(mode) == oct(os.stat(tmp_path / "plain").st_mode & 0o777)


def test_failed_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    target = tmp_path / "model.ckpt"
    tg.save({"a": tg.ones(3)}, target)
    good = target.read_bytes()

    def crash(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr(np, "savez", crash)
    with pytest.raises(OSError, match="disk full"):
        tg.save({"a": tg.zeros(3)}, target)
    assert target.read_bytes() == good
    assert os.listdir(tmp_path) == ["model.ckpt"]


def test_truncated_checkpoint_raises_checkpoint_error(tmp_path):
    good = tmp_path / "good.ckpt"
    tg.save(mlp(tg, 0).state_dict(), good)
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(good.read_bytes()[:100])
    with pytest.raises(CheckpointError) as ei:
        tg.load(bad)
    assert str(bad) in str(ei.value)
    assert isinstance(ei.value, RuntimeError)


def test_checkpoint_with_pickled_objects_is_refused(tmp_path):
    path = tmp_path / "evil.npz"
    header = json.dumps({"format": "tapegrad-checkpoint", "version": 1,
                         "root": {"t": "none"}})
    np.savez(path, __tapegrad__=np.array(header),
             t0=np.array([{"code": "os.system"}], dtype=object))
    with pytest.raises(CheckpointError, match="pickle") as ei:
        tg.load(path)
    assert str(path) in str(ei.value)


def test_plain_npz_without_header_is_refused(tmp_path):
    path = tmp_path / "plain.npz"
    np.savez(path, weight=np.ones(3, dtype=np.float32))
    with pytest.raises(CheckpointError, match="header") as ei:
        tg.load(path)
    assert str(path) in str(ei.value)


def test_not_an_archive_is_refused(tmp_path):
    path = tmp_path / "text.ckpt"
    path.write_text("hello")
    with pytest.raises(CheckpointError):
        tg.load(path)
    with pytest.raises(FileNotFoundError):
        tg.load(tmp_path / "missing.ckpt")


@pytest.mark.parametrize("obj", [lambda x: x, {1, 2}, {"ok": [object()]}, b"bytes"],
                         ids=["lambda", "set", "nested_object", "bytes"])
def test_saving_an_unsupported_object_raises_type_error(tmp_path, obj):
    with pytest.raises(TypeError, match="cannot save"):
        tg.save(obj, tmp_path / "x.ckpt")
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------- F.linear as one row
def _linear_inputs(dtype, rng, batch=5):
    x = tg.tensor(rng.standard_normal((batch, 3)).astype(dtype), requires_grad=True)
    w = tg.tensor(rng.standard_normal((4, 3)).astype(dtype), requires_grad=True)
    b = tg.tensor(rng.standard_normal(4).astype(dtype), requires_grad=True)
    return x, w, b


def test_linear_with_bias_is_one_addmm_row_with_exact_gradients():
    rng = np.random.default_rng(11)
    x, w, b = _linear_inputs(np.float64, rng)
    y = nn.functional.linear(x, w, b)
    assert y.grad_fn.name() == "AddmmBackward0"
    # PyTorch's input order: bias, input, weight
    nxt = y.grad_fn.next_functions
    assert [n.variable is t for (n, _), t in zip(nxt, (b, x, w))] == [True, True, True]
    g = rng.standard_normal((5, 4))
    y.backward(tg.tensor(g))
    xn, wn = x.detach().numpy(), w.detach().numpy()
    np.testing.assert_allclose(y.detach().numpy(), xn @ wn.T + b.detach().numpy(), rtol=1e-14)
    np.testing.assert_allclose(x.grad.numpy(), g @ wn, rtol=1e-14)
    np.testing.assert_allclose(w.grad.numpy(), g.T @ xn, rtol=1e-14)
    np.testing.assert_allclose(b.grad.numpy(), g.sum(0), rtol=1e-14)
    assert tg.testing.gradcheck(nn.functional.linear, (x, w, b))


def test_linear_gradients_only_where_wanted_and_accumulate():
    rng = np.random.default_rng(12)
    x, w, b = _linear_inputs(np.float32, rng)
    x = x.detach()                         # an input that wants no gradient
    for _ in range(2):
        nn.functional.linear(x, w, b).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * np.ones((4, 5)) @ x.numpy(), rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), np.full(4, 10.0), rtol=1e-6)
    assert x.grad is None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("wants", ["b", "x", "w", "xb", "wb"])
def test_linear_with_only_some_inputs_wanting_gradients(wants, dtype):
    """The inputs that want no gradient are not kept by the row: the backward takes the
    inner size from the row (with only the bias wanting one, it read an unkept tensor's
    shape from the tape)."""
    rng = np.random.default_rng(14)
    x, w, b = _linear_inputs(dtype, rng)
    x, w, b = (t.detach().requires_grad_(name in wants) for t, name in zip((x, w, b), "xwb"))
    g = rng.standard_normal((5, 4)).astype(dtype)
    for _ in range(3):
        for t in (x, w, b):
            t.grad = None
        nn.functional.linear(x, w, b).backward(tg.tensor(g))
        xn, wn = x.detach().numpy(), w.detach().numpy()
        tol = dict(rtol=1e-5 if dtype == np.float32 else 1e-14)
        for name, t, expected in (("x", x, g @ wn), ("w", w, g.T @ xn), ("b", b, g.sum(0))):
            if name in wants:
                np.testing.assert_allclose(t.grad.numpy(), expected, **tol)
            else:
                assert t.grad is None


@pytest.mark.parametrize("case", ["transposed_input", "batched_3d", "vector", "no_bias"])
def test_linear_other_layouts_are_composed_and_exact(case):
    rng = np.random.default_rng(13)
    w = tg.tensor(rng.standard_normal((4, 3)), requires_grad=True)
    b = tg.tensor(rng.standard_normal(4), requires_grad=True)
    shape = {"transposed_input": (3, 5), "batched_3d": (2, 5, 3), "vector": (3,),
             "no_bias": (5, 3)}[case]
    xn = rng.standard_normal(shape)
    x = tg.tensor(xn, requires_grad=True)
    xin = x.t() if case == "transposed_input" else x
    y = nn.functional.linear(xin, w, None if case == "no_bias" else b)
    if case != "no_bias":
        assert y.grad_fn.name() == "AddBackward0"
    xr = xn.T if case == "transposed_input" else xn
    ref = xr @ w.detach().numpy().T + (0 if case == "no_bias" else b.detach().numpy())
    np.testing.assert_allclose(y.detach().numpy(), ref, rtol=1e-14)
    args = (x, w) if case == "no_bias" else (x, w, b)
    fn = ((lambda x, w, *r: nn.functional.linear(x.t(), w, *r)) if case == "transposed_input"
          else nn.functional.linear)
    assert tg.testing.gradcheck(fn, args)


def test_linear_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(14)
    for dt in (np.float32, np.float64):
        x, w, b = _linear_inputs(dt, rng, batch=7)
        tx, tw, tb = (torch.tensor(t.detach().numpy(), requires_grad=True) for t in (x, w, b))
        y = nn.functional.linear(x, w, b)
        ty = torch.nn.functional.linear(tx, tw, tb)
        assert y.grad_fn.name() == ty.grad_fn.name()
        g = rng.standard_normal((7, 4)).astype(dt)
        y.backward(tg.tensor(g))
        ty.backward(torch.tensor(g))
        tol = 1e-5 if dt == np.float32 else 1e-12
        for a, c in ((y, ty), (x.grad, tx.grad), (w.grad, tw.grad), (b.grad, tb.grad)):
            np.testing.assert_allclose(a.detach().numpy(), c.detach().numpy(), rtol=tol,
                                       atol=tol)


def test_linear_saved_weight_modified_in_place_raises():
    rng = np.random.default_rng(15)
    x, w, b = _linear_inputs(np.float64, rng)
    y = nn.functional.linear(x, w, b)
    with tg.no_grad():
        w.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
