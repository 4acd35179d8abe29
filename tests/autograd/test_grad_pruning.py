"""autograd.grad runs only the part of the graph that leads to its inputs, as PyTorch's
engine does: rows off every path to an input are not run, so their hooks do not fire,
their saved tensors are not version-checked and not released; a row whose output is an
input but whose own inputs lead nowhere is captured without running its backward. It
also fills the .grad of retain_grad() tensors it runs through, as PyTorch does.

Every program runs in tapegrad with exact expected values; the torch block runs each in
both libraries and compares every observation."""
import numpy as np
import pytest

import tapegrad as tg
from tests.helpers import E

SECOND = "Trying to backward through the graph a second time"


def vals(t):
    return None if t is None else np.asarray(t.detach().numpy(), dtype=np.float64).tolist()


def outcome(fn):
    try:
        return ("ok", fn())
    except RuntimeError as e:
        return ("RuntimeError", str(e)[:40])


# each program: fn(lib) -> a list of observations (values as lists, messages, hook logs)
def unrelated_version_error(L):
    a = L.tensor([1., 2.], dtype=L.float64, requires_grad=True)
    b = L.tensor([3., 4.], dtype=L.float64, requires_grad=True)
    c = b * 1
    u = c * c               # saves c ...
    c.add_(1)               # ... which then changes: only a backward through u may fail
    z = (a * 2).sum() + u.sum()
    got = outcome(lambda: vals(L.autograd.grad(z, [a], retain_graph=True)[0]))
    return [got, outcome(lambda: z.backward())]


def hooks_off_the_path(L):
    log = []
    a = L.tensor([1., 2.], dtype=L.float64, requires_grad=True)
    b = L.tensor([3., 4.], dtype=L.float64, requires_grad=True)
    hb = b * 3
    hb.register_hook(lambda g: log.append(("hb", vals(g))))
    b.register_hook(lambda g: log.append(("b", vals(g))))
    y = a.exp()
    y.register_hook(lambda g: log.append(("y", vals(g))))
    z = (y * y).sum() + hb.sum()
    gy = vals(L.autograd.grad(z, [y])[0])
    return [gy, log]


def history_of_a_captured_tensor_survives(L):
    a = L.tensor([1., 2.], dtype=L.float64, requires_grad=True)
    y = a.exp()             # saves its output; not run by grad(z, [y]), so not released
    z = (y * y).sum()
    gy = vals(L.autograd.grad(z, [y])[0])
    y.sum().backward()
    return [gy, vals(a.grad), outcome(lambda: vals(L.autograd.grad(z, [y])[0]))]


def captured_history_with_a_version_error(L):
    a = L.tensor([1., 2.], dtype=L.float64, requires_grad=True)
    c = a * 1
    d = c * c
    c.add_(1)               # d's own backward would fail; grad(., [d]) never runs it
    return [outcome(lambda: vals(L.autograd.grad((d * 2).sum(), [d])[0]))]


def functions_are_not_called_off_the_path(L):
    calls = []

    class Double(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            calls.append(vals(g))
            return g * 2

    a = L.tensor([1., 2.], dtype=L.float64, requires_grad=True)
    b = L.tensor([5., 7.], dtype=L.float64, requires_grad=True)
    y = Double.apply(a)
    w = Double.apply(b)
    z = (y * y).sum() + w.sum()
    gy = vals(L.autograd.grad(z, [y], retain_graph=True)[0])
    ga = vals(L.autograd.grad(z, [a])[0])
    return [gy, ga, calls]


def retain_grad_is_filled(L):
    a = L.tensor([1., 2.], dtype=L.float64, requires_grad=True)
    m = a * 3
    m.retain_grad()
    k = m * 2
    k.retain_grad()
    n = (k * k).sum()
    ga = vals(L.autograd.grad(n, [a], retain_graph=True)[0])
    obs = [ga, vals(m.grad), vals(k.grad)]
    gk = vals(L.autograd.grad(n, [k], retain_graph=True)[0])     # k's row is not run
    obs += [gk, vals(m.grad), vals(k.grad)]
    gm = vals(L.autograd.grad(n, [m])[0])                        # captured and retained
    return obs + [gm, vals(m.grad), vals(k.grad), vals(a.grad)]


def unused_branch_of_a_shared_node(L):
    # x feeds both a path to the input and a path that leads nowhere asked for
    x = L.tensor([0.5, 1.5], dtype=L.float64, requires_grad=True)
    w = L.tensor([2., 3.], dtype=L.float64, requires_grad=True)
    h = x.sin()
    z = (h * w).sum() + (h.exp() * 0).sum() + w.prod()
    gw = vals(L.autograd.grad(z, [w], retain_graph=True)[0])
    gh, gx = L.autograd.grad(z, [h, x])
    return [gw, vals(gh), vals(gx), vals(x.grad), vals(w.grad)]


def nothing_reaches_the_inputs(L):
    a = L.tensor([1., 2.], dtype=L.float64, requires_grad=True)
    b = L.tensor([3.], dtype=L.float64, requires_grad=True)
    z = (a.exp() * 2).sum()
    g = L.autograd.grad(z, [b], allow_unused=True)[0]
    z.backward()            # the unrun graph was not released
    return [g is None, vals(a.grad)]


def pruning_does_not_carry_over(L):
    # a row pruned by one call takes part in the next: its consumer counts stay whole
    a = L.tensor([1., 2.], dtype=L.float64, requires_grad=True)
    b = L.tensor([3., 4.], dtype=L.float64, requires_grad=True)
    y = a * 2
    z = b * y
    gb = vals(L.autograd.grad(z.sum(), [b], retain_graph=True)[0])
    z.sum().backward(retain_graph=True)
    ga = vals(L.autograd.grad(z.sum(), [a])[0])
    return [gb, vals(a.grad), vals(b.grad), ga]


def function_run_earlier_is_pruned_later(L):
    calls = []

    class ExpF(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            calls.append("ExpF")
            y, = ctx.saved_tensors
            return g * y

    a = L.tensor([1., 2.], dtype=L.float64, requires_grad=True)
    b = L.tensor([3., 4.], dtype=L.float64, requires_grad=True)
    t = ExpF.apply(b ** 2 - a)
    v = a[:]                                    # on no path from t
    ga = vals(L.autograd.grad(t.sum(), [a], retain_graph=True)[0])
    gv = L.autograd.grad(t.sum(), [v], allow_unused=True)[0]
    return [ga, gv is None, calls]


PROGRAMS = {
    "pruning_does_not_carry_over": (pruning_does_not_carry_over, [
        [2.0, 4.0], [6.0, 8.0], [2.0, 4.0], [6.0, 8.0]]),
    "function_run_earlier_is_pruned_later": (function_run_earlier_is_pruned_later, [
        [-np.exp(8.), -np.exp(14.)], True, ["ExpF"]]),
    "unrelated_version_error": (unrelated_version_error, [
        ("ok", [2.0, 2.0]),
        ("RuntimeError", "one of the variables needed for gradient computation"[:40])]),
    "hooks_off_the_path": (hooks_off_the_path, [
        [2 * np.exp(1.), 2 * np.exp(2.)],
        [("y", [2 * np.exp(1.), 2 * np.exp(2.)])]]),
    "history_of_a_captured_tensor_survives": (history_of_a_captured_tensor_survives, [
        [2 * np.exp(1.), 2 * np.exp(2.)], [np.exp(1.), np.exp(2.)],
        ("RuntimeError", SECOND[:40])]),
    "captured_history_with_a_version_error": (captured_history_with_a_version_error, [
        ("ok", [2.0, 2.0])]),
    "functions_are_not_called_off_the_path": (functions_are_not_called_off_the_path, [
        [4.0, 8.0], [8.0, 16.0], [[4.0, 8.0]]]),
    "retain_grad_is_filled": (retain_grad_is_filled, [
        [72.0, 144.0], [24.0, 48.0], [12.0, 24.0],
        [12.0, 24.0], [24.0, 48.0], [24.0, 48.0],
        [24.0, 48.0], [48.0, 96.0], [36.0, 72.0], None]),
    "unused_branch_of_a_shared_node": (unused_branch_of_a_shared_node, [
        [np.sin(0.5) + 3., np.sin(1.5) + 2.], [2., 3.], [2 * np.cos(0.5), 3 * np.cos(1.5)],
        None, None]),
    "nothing_reaches_the_inputs": (nothing_reaches_the_inputs, [
        True, [2 * np.exp(1.), 2 * np.exp(2.)]]),
}


def _same(a, b):
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return b is not None and a is not None and np.isclose(a, b, rtol=1e-12, atol=0)
    return a == b


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program(name):
    fn, expected = PROGRAMS[name]
    got = fn(tg)
    assert _same(got, expected), (got, expected)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_matches_torch(name):
    torch = pytest.importorskip("torch")
    fn = PROGRAMS[name][0]
    got, ref = fn(tg), fn(torch)
    assert _same(got, ref), (got, ref)


def test_pruned_rows_keep_no_buffers_and_leak_nothing():
    """A pruned branch gets no gradient buffer (a kernel of a kept row writes nothing
    into it), and a loop of such calls keeps the engine's counts flat."""
    import gc
    x = tg.randn(6, requires_grad=True)
    w = tg.randn(6, requires_grad=True)

    def stats():
        gc.collect()
        E.flush()
        return E.stats()

    base = None
    for step in range(300):
        h = (x * 2).exp()
        z = (h * w).sum() + (h.sin() * x).sum()
        (gw,) = tg.autograd.grad(z, [w], retain_graph=True)
        np.testing.assert_allclose(vals(gw), vals(h), rtol=1e-6)
        z.backward()        # everything asked for before is intact; .grad of both fills
        x.grad = w.grad = None
        del h, z, gw
        if step == 20:
            base = stats()
    assert stats() == base
    L = tg._engine.layout
    keep = (x * w).exp().sum()          # a few live rows to look at
    tg.autograd.grad(keep, [x], retain_graph=True)
    live = E.tape[E.tape[:, L.R_STATE] & L.RS_LIVE != 0]
    assert len(live) and not (live[:, L.R_STATE] & (L.RS_MARK | L.RS_NORUN)).any()
    assert (live[:, L.R_DEPS] == 0).all()
