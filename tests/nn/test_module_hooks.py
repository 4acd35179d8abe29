"""nn.Module's hooks and plumbing against PyTorch: the same program runs in both libraries
(L is tapegrad or torch) and logs what its hooks see; the logs must be equal. Forward
pre-hooks and hooks (order, prepend, with_kwargs, replaced arguments and outputs,
always_call, removal and handles as context managers), the global hooks, full backward
hooks and backward pre-hooks (grad_input / grad_output tuples, replacement, several
inputs and outputs of different shapes, inputs that need no gradient), state-dict hooks
and extra state, submodule access by name, and the methods refused on purpose."""
import importlib
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn

torch = pytest.importorskip("torch")
LIBS = [pytest.param(tg, id="tapegrad"), pytest.param(torch, id="torch")]


def arr(t):
    return None if t is None else np.array(t.detach().numpy(), dtype=np.float64).round(9).tolist()


def module_mod(L):
    """Where the global module hooks live (torch.nn.modules.module; tapegrad.nn.module)."""
    return importlib.import_module("torch.nn.modules.module" if L is torch
                                   else "tapegrad.nn.module")


def both(program):
    """program(L, log) in both libraries; their logs must be equal."""
    logs = []
    for L in (tg, torch):
        log = []
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            program(L, log)
        log.append(("warnings", [str(x.message)[:70] for x in w]))
        logs.append(log)
    assert logs[0] == logs[1]
    return logs[0]


def linear(L, n_in=3, n_out=2, scale=1.0):
    m = L.nn.Linear(n_in, n_out).double()
    with L.no_grad():
        m.weight.copy_(L.tensor(np.arange(n_in * n_out, dtype=np.float64).reshape(n_out, n_in)
                                * scale / 7 - 0.3))
        m.bias.fill_(0.25)
    return m


def two_headed(L):
    class Two(L.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = linear(L)
            self.b = linear(L, scale=-1.0)

        def forward(self, x, y, flag=None, scale=1.0):
            return self.a(x) * scale, flag, self.b(y).sum(1)
    return Two()


# ------------------------------------------------------------------ forward hooks
def test_forward_hooks_order_replacement_kwargs_and_removal():
    def program(L, log):
        m = linear(L)
        x = L.tensor(np.ones((2, 3)))
        h1 = m.register_forward_pre_hook(lambda mod, args: log.append(("pre1", len(args))))
        h2 = m.register_forward_pre_hook(lambda mod, args: log.append("pre0"), prepend=True)
        h3 = m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
        h4 = m.register_forward_hook(lambda mod, args, out: log.append(("fwd", arr(args[0]),
                                                                        arr(out))))
        h5 = m.register_forward_hook(lambda mod, args, out: out + 1)
        h6 = m.register_forward_hook(lambda mod, args, out: log.append(("first", arr(out))),
                                     prepend=True)
        log.append(("out", arr(m(x))))
        for h in (h1, h2, h3):
            h.remove()
        h3.remove()                                     # (twice: nothing)
        with h5:
            log.append(("out2", arr(m(x))))
        log.append(("out3", arr(m(x))))
        h4.remove()
        h6.remove()
        log.append(("out4", arr(m(x))))
        # a pre-hook returning a single value: it becomes the args tuple
        m.register_forward_pre_hook(lambda mod, args: args[0] + 1)
        log.append(("single", arr(m(x))))
    both(program)


def test_forward_hooks_with_kwargs():
    def program(L, log):
        m = two_headed(L)
        x, y = L.tensor(np.ones((2, 3))), L.tensor(np.full((2, 3), 0.5))
        m.register_forward_pre_hook(lambda mod, a, kw: (a, dict(kw, scale=3.0)),
                                    with_kwargs=True)
        m.register_forward_pre_hook(lambda mod, a, kw: log.append(("kw", sorted(kw))),
                                    with_kwargs=True)
        m.register_forward_hook(lambda mod, a, kw, out: log.append(("post", kw, out[1])),
                                with_kwargs=True)
        m.register_forward_hook(lambda mod, a, kw, out: (out[0], "replaced", out[2]),
                                with_kwargs=True)
        a, flag, b = m(x, y, flag="f")
        log.append((arr(a), flag, arr(b)))
        bad = linear(L)
        bad.register_forward_pre_hook(lambda mod, a, kw: 5, with_kwargs=True)
        try:
            bad(x)
        except RuntimeError as e:
            log.append(str(e))
    both(program)


def test_always_call_hooks_run_when_forward_raises():
    def program(L, log):
        class Fails(L.nn.Module):
            def forward(self, x):
                raise ValueError("boom")
        m = Fails()
        m.register_forward_hook(lambda mod, a, out: log.append(("always", out)),
                                always_call=True)
        m.register_forward_hook(lambda mod, a, out: log.append("never"))

        def raising(mod, a, out):
            raise KeyError("in hook")
        m.register_forward_hook(raising, always_call=True)
        try:
            m(1)
        except ValueError as e:
            log.append(("raised", str(e)))
    log = both(program)
    assert ("always", None) in log and "never" not in log


def test_global_hooks():
    def program(L, log):
        mm = module_mod(L)
        m = L.nn.Sequential(linear(L), L.nn.Tanh())
        x = L.tensor(np.ones((1, 3)))
        hs = [mm.register_module_forward_pre_hook(
                  lambda mod, a: log.append(("gpre", type(mod).__name__))),
              mm.register_module_forward_hook(
                  lambda mod, a, out: log.append(("gpost", type(mod).__name__))),
              mm.register_module_forward_hook(
                  lambda mod, a, kw, out: log.append(("gkw", kw)), with_kwargs=True)]
        m[0].register_forward_hook(lambda mod, a, out: log.append("own"))
        m(x)
        for h in hs:
            h.remove()
        log.append("removed")
        m(x)
        regs = [mm.register_module_parameter_registration_hook(
                    lambda mod, name, p: log.append(("param", name))),
                mm.register_module_buffer_registration_hook(
                    lambda mod, name, b: log.append(("buffer", name))),
                mm.register_module_module_registration_hook(
                    lambda mod, name, s: log.append(("module", name)))]
        L.nn.BatchNorm1d(2)
        n = L.nn.Module()
        n.sub = L.nn.Tanh()
        n.w = L.nn.Parameter(L.ones(1))
        n.register_buffer("b", L.ones(1))
        for h in regs:
            h.remove()
    both(program)


def test_module_calls_without_hooks_skip_the_hooks_path(monkeypatch):
    m = nn.Linear(2, 2)
    calls = []
    original = nn.Module._call_impl
    monkeypatch.setattr(nn.Module, "_call_impl",
                        lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    x = tg.ones(1, 2)
    m(x)
    assert calls == []
    h = m.register_forward_hook(lambda *a: None)
    m(x)
    assert calls == [1]
    h.remove()
    m(x)
    assert calls == [1]
    g = tg.nn.module.register_module_forward_pre_hook(lambda *a: None)
    m(x)
    assert calls == [1, 1]
    g.remove()
    m(x)
    assert calls == [1, 1] and not nn.Module._hooked


# ------------------------------------------------------------------ backward hooks
def test_full_backward_hooks_on_several_inputs_and_outputs():
    def program(L, log):
        m = two_headed(L)

        def pre(mod, go):
            log.append(("pre", [arr(g) for g in go]))
            return (go[0] * 2, None, go[2])

        def full(mod, gi, go):
            log.append(("full", [arr(g) for g in gi], [arr(g) for g in go]))
            return (gi[0] * 3, gi[1], None)
        m.register_full_backward_pre_hook(pre)
        m.register_full_backward_hook(full)
        m.register_full_backward_hook(lambda mod, gi, go: log.append(("second", arr(gi[0]))))
        x = L.tensor(np.full((2, 3), 0.3), requires_grad=True)
        y = L.tensor(np.arange(6.0).reshape(2, 3) / 5, requires_grad=True)
        a, flag, b = m(x, y, "flag")
        (a.sum() + (b * b).sum()).backward()
        log.append(("grads", arr(x.grad), arr(y.grad), arr(m.a.weight.grad)))
    both(program)


def test_full_backward_hook_on_one_tensor_and_without_input_gradients():
    def program(L, log):
        m = linear(L)
        m.register_full_backward_hook(
            lambda mod, gi, go: log.append(("full", [arr(g) for g in gi],
                                            [arr(g) for g in go])))
        x = L.tensor(np.ones((4, 3)), requires_grad=True)
        (m(x) ** 2).sum().backward()
        log.append(("x", arr(x.grad)))
        (m(L.tensor(np.ones((4, 3)))) ** 2).sum().backward()     # (no input needs a grad)
        log.append(("w", arr(m.weight.grad)))
        bad = linear(L)
        bad.register_full_backward_hook(lambda mod, gi, go: (gi[0], gi[0]))
        try:
            bad(x).sum().backward()
        except RuntimeError as e:
            log.append(str(e))
        with L.no_grad():                                       # (no graph: no hook)
            m(x)
    both(program)


def test_backward_hook_handles_and_order():
    def program(L, log):
        m = L.nn.Sequential(linear(L), L.nn.Tanh(), linear(L, 2, 2))
        hs = []
        for i, sub in enumerate(m):
            hs.append(sub.register_full_backward_hook(
                lambda mod, gi, go, i=i: log.append(("full", i, arr(go[0])))))
            hs.append(sub.register_full_backward_pre_hook(
                lambda mod, go, i=i: log.append(("pre", i))))
        x = L.tensor(np.ones((1, 3)), requires_grad=True)
        m(x).sum().backward()
        for h in hs[:3]:
            h.remove()
        m(x).sum().backward()
        log.append(("grad", arr(x.grad)))
    both(program)


def test_non_full_backward_hooks_are_refused():
    m = nn.Linear(2, 2)
    with pytest.raises(NotImplementedError, match="register_full_backward_hook"):
        m.register_backward_hook(lambda *a: None)
    with pytest.raises(NotImplementedError, match="register_module_full_backward_hook"):
        tg.nn.module.register_module_backward_hook(lambda *a: None)


# ------------------------------------------------------------------ state dicts
def test_state_dict_hooks_and_extra_state():
    def program(L, log):
        class WithExtra(L.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = linear(L)
                self.count = 3

            def get_extra_state(self):
                return {"count": self.count}

            def set_extra_state(self, state):
                self.count = state["count"]
        m = L.nn.Sequential(WithExtra(), L.nn.Tanh())
        m.register_state_dict_pre_hook(lambda mod, prefix, keep: log.append(("pre", prefix,
                                                                            keep)))
        m[0].register_state_dict_pre_hook(lambda mod, prefix, keep: log.append(("pre0",
                                                                               prefix)))

        def post(mod, sd, prefix, meta):
            log.append(("post", prefix, sorted(sd), meta))
            sd[prefix + "added"] = 1
        m[0].register_state_dict_post_hook(post)
        sd = m.state_dict()
        log.append(("keys", list(sd), sorted(sd._metadata.items())))
        sd.pop("0.added")

        def replace(mod, sd, prefix, meta):
            return {"replaced": 1}
        h = m._register_state_dict_hook(replace)
        log.append(("replaced", dict(m.state_dict())))
        h.remove()
        bad = L.nn.Linear(1, 1)
        bad.register_state_dict_post_hook(lambda *a: {})
        try:
            bad.state_dict()
        except RuntimeError as e:
            log.append(str(e))
        # loading: the extra state comes back, hooks see the keys
        other = L.nn.Sequential(WithExtra(), L.nn.Tanh())
        other[0].count = 0
        other[0].register_load_state_dict_pre_hook(
            lambda mod, sd, prefix, meta, strict, missing, unexpected, errors:
            log.append(("lpre", prefix, sorted(sd), meta)))

        def lpost(mod, keys):
            log.append(("lpost", list(keys.missing_keys), list(keys.unexpected_keys)))
            keys.unexpected_keys.clear()
        other.register_load_state_dict_post_hook(lpost)
        sd["extra"] = L.ones(1)
        log.append(("load", tuple(other.load_state_dict(sd))))
        log.append(("count", other[0].count, arr(other[0].lin.weight)))
        del sd["0._extra_state"]
        try:
            other.load_state_dict(sd)
        except RuntimeError as e:
            log.append(str(e))
    both(program)


def test_load_state_dict_errors_keep_pytorchs_text():
    def program(L, log):
        m = L.nn.Sequential(linear(L), L.nn.Tanh(), linear(L, 2, 1))
        sd = dict(m.state_dict())
        sd["0.weight"] = "not a tensor"
        sd["2.bias"] = L.zeros(3)
        sd["1.unexpected"] = L.zeros(1)
        try:
            m.load_state_dict(sd)
        except RuntimeError as e:
            log.append(str(e).replace("torch", "tapegrad").replace("<class 'str'>", "str"))
        scalar = L.nn.Module()
        scalar.register_buffer("s", L.tensor(1.0))
        scalar.load_state_dict({"s": L.tensor([5.0])})          # (a 1-element 1-d source)
        log.append(arr(scalar.s))
    both(program)


# ------------------------------------------------------------------ access by name
def test_get_and_set_submodule_parameter_buffer():
    def program(L, log):
        m = L.nn.Sequential(L.nn.Linear(2, 2), L.nn.Sequential(L.nn.BatchNorm1d(2)))
        log.append(type(m.get_submodule("1.0")).__name__)
        log.append(m.get_submodule("") is m)
        log.append(list(m.get_parameter("0.bias").shape))
        log.append(arr(m.get_buffer("1.0.running_var")))
        m.set_submodule("1.0", L.nn.Tanh())
        m.set_submodule("1.new", L.nn.ReLU())
        log.append(str(m))
        for bad in (lambda: m.get_submodule("0.weight"), lambda: m.get_submodule("2"),
                    lambda: m.get_parameter("0.nothing"), lambda: m.get_buffer("0.weight"),
                    lambda: m.get_parameter("1"), lambda: m.set_submodule("", L.nn.ReLU()),
                    lambda: m.set_submodule("1.x", 3),
                    lambda: m.set_submodule("1.y", L.nn.ReLU(), strict=True),
                    lambda: m.set_submodule("0.weight", L.nn.ReLU()),
                    lambda: L.nn.Module().get_extra_state()):
            try:
                bad()
            except (AttributeError, ValueError, RuntimeError) as e:
                log.append((type(e).__name__, str(e).replace("torch", "tapegrad")
                            .replace("tapegrad.nn.modules.activation.", "")
                            .replace("tapegrad.nn.layers.", "")))
    both(program)


# ------------------------------------------------------------------ the rest of the API
def test_every_public_name_of_pytorchs_module_exists():
    theirs = {n for n in dir(torch.nn.Module) if not n.startswith("_")}
    ours = {n for n in dir(nn.Module) if not n.startswith("_")}
    assert theirs <= ours, sorted(theirs - ours)


def test_device_and_dtype_methods():
    m = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    assert m.cpu() is m
    assert m.type(tg.float64) is m and m[0].weight.dtype is tg.float64
    assert m[1].num_batches_tracked.dtype is tg.float64     # (every tensor, as PyTorch)
    m2 = nn.Linear(2, 2)
    p = m2.weight
    assert m2.type("torch.DoubleTensor") is m2 and m2.weight is p and p.dtype is tg.float64
    with pytest.raises(TypeError, match="float16"):
        nn.Linear(1, 1).half()
    assert nn.ReLU().half() is not None                     # (nothing to cast)
    for name in ("ipu", "xpu", "mtia"):
        with pytest.raises(RuntimeError, match="CPU only"):
            getattr(nn.Linear(1, 1), name)()
        assert getattr(nn.ReLU(), name)() is not None
    with pytest.raises((RuntimeError, NotImplementedError), match="shared memory"):
        nn.Linear(1, 1).share_memory()
    assert nn.ReLU().share_memory() is not None
    e = nn.Linear(2, 3).to_empty(device="cpu")
    assert list(e.weight.shape) == [3, 2] and e.weight.requires_grad
    m3 = nn.Linear(2, 2)
    assert m3.compile() is None and m3.compile(fullgraph=True, mode="max-autotune") is None
    with pytest.raises(TypeError, match="fullgrap"):
        m3.compile(fullgrap=True)
    with pytest.warns(FutureWarning, match="Positional args are being deprecated"):
        assert list(m3.state_dict(None, "p.")) == ["p.weight", "p.bias"]


def test_hooks_inside_compile_run_eagerly_and_match():
    """A step whose model has a forward hook: tapegrad.compile cannot replay the hook's
    Python, so it says so (a graph break) and the results are eager's."""
    results = []
    for compiled in (False, True):
        tg.manual_seed(0)
        m = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
        seen = []
        m[1].register_forward_hook(lambda mod, a, out: seen.append(float(out.sum())))
        opt = tg.optim.SGD(m.parameters(), lr=0.1)
        x = tg.randn(5, 3)

        def step():
            opt.zero_grad()
            loss = m(x).pow(2).mean()
            loss.backward()
            opt.step()
            return loss
        f = tg.compile(step, fuse=False) if compiled else step
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            losses = [float(f()) for _ in range(4)]
        results.append((losses, seen))
    assert results[0] == results[1] and len(results[0][1]) == 4
