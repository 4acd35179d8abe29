"""autograd.Function and tensor hooks: the places where the compiled sweep pauses for
Python (E_CALLBACK), plus autograd.grad's allow_unused.

Gradients are checked against central finite differences (float64) and, where PyTorch
is installed, the same programs run through torch and the results (values, what hooks
saw, exception types and messages) are compared.
"""
import functools
import gc
import types
import weakref

import numpy as np
import pytest

import tapegrad as tg
from tests.helpers import E, INPLACE_MSG, SECOND_MSG, engine_stats, run_both

# every test here must leave grad mode as it found it
pytestmark = pytest.mark.usefixtures("grad_mode_is_restored")


# --------------------------------------------------------------------------- helpers
def arr(t):
    """A tensor's values as a new float64 NumPy array (None stays None)."""
    return None if t is None else np.array(t.detach().numpy(), dtype=np.float64)


def leaf(L, values, requires_grad=True):
    """A float64 leaf of library L (tapegrad or torch)."""
    return L.tensor(values, dtype=L.float64, requires_grad=requires_grad)


def assert_same(ours, theirs, path="result"):
    """Nested lists/tuples of arrays, numbers, bools, strings and None agree."""
    if isinstance(theirs, (list, tuple)):
        assert isinstance(ours, (list, tuple)) and len(ours) == len(theirs), (path, ours, theirs)
        for k, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, f"{path}[{k}]")
    elif theirs is None or isinstance(theirs, (bool, str)):
        assert ours == theirs, (path, ours, theirs)
    else:
        assert ours is not None, (path, theirs)
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-12, err_msg=path)


def compare(prog):
    """Run prog on both libraries and require the same results."""
    ours, theirs = run_both(prog)
    assert_same(ours, theirs)
    return ours


def error_of(prog, L):
    try:
        prog(L)
    except Exception as e:          # noqa: BLE001  (we compare what was raised)
        return type(e), str(e).replace("tapegrad", "torch")
    return None, None


def assert_flat(snap):
    """Counts at step 2000 are those at step 200 (small margins)."""
    s200, s2000 = snap[200], snap[2000]
    for k in ("tensors", "storages", "rows"):
        assert s2000[k] <= s200[k] + 2, (k, s200, s2000)
    assert s2000["bytes"] <= s200["bytes"] + 1024, (s200, s2000)


class Boom(Exception):
    pass


class Token:
    """A weakly referenceable object to see whether something was released."""


@functools.cache
def fns(L):
    """The Functions used below, defined on library L."""
    class Exp(L.autograd.Function):
        """exp(x), saving its output."""
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y

    class Mul(L.autograd.Function):
        """x * y * scale, scale a Python number."""
        @staticmethod
        def forward(ctx, x, y, scale):
            ctx.save_for_backward(x, y)
            ctx.scale = scale
            return x * y * scale

        @staticmethod
        def backward(ctx, g):
            x, y = ctx.saved_tensors
            gx = g * y * ctx.scale if ctx.needs_input_grad[0] else None
            gy = g * x * ctx.scale if ctx.needs_input_grad[1] else None
            return gx, gy, None

    class SinCos(L.autograd.Function):
        """(sin x, cos x): two same-shaped outputs."""
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sin(), x.cos()

        @staticmethod
        def backward(ctx, g_sin, g_cos):
            (x,) = ctx.saved_tensors
            return g_sin * x.cos() - g_cos * x.sin()

    class Double(L.autograd.Function):
        """2x, saving no tensors."""
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    class Tagged(L.autograd.Function):
        """2x, keeping a Python object on ctx; backward raises it if it is an exception."""
        @staticmethod
        def forward(ctx, x, tag):
            ctx.tag = tag
            return x * 2

        @staticmethod
        def backward(ctx, g):
            if isinstance(ctx.tag, BaseException):
                raise ctx.tag
            return g * 2, None

    return types.SimpleNamespace(Exp=Exp, Mul=Mul, SinCos=SinCos, Double=Double,
                                 Tagged=Tagged)


# --------------------------------------------------------------------------- Function: values
# f(F, x, y) -> tensor or tuple of tensors, F the namespace of Functions
CASES = {
    "exp_saving_output": lambda F, x, y: F.Exp.apply(x),
    "product_with_number_arg": lambda F, x, y: F.Mul.apply(x, y, -1.5),
    "two_outputs": lambda F, x, y: F.SinCos.apply(x * y),
    "used_twice": lambda F, x, y: F.Mul.apply(F.Exp.apply(x), F.Exp.apply(x * y), 0.5),
    "inside_a_graph": lambda F, x, y: (F.Mul.apply(x.sin() + y, y.tanh(), 2.0) * x).exp(),
    "non_leaf_input": lambda F, x, y: F.SinCos.apply(F.Exp.apply(x * y - 1.0))[1],
}
X0, Y0 = [0.3, -0.8, 1.1], [1.2, 0.4, -0.6]


@pytest.mark.parametrize("case", list(CASES))
def test_function_gradients_match_finite_differences(case):
    F = fns(tg)
    x, y = leaf(tg, X0), leaf(tg, Y0)
    assert tg.testing.gradcheck(lambda a, b: CASES[case](F, a, b), (x, y))


@pytest.mark.parametrize("case", list(CASES))
def test_function_gradients_match_torch(case):
    def prog(L):
        x, y = leaf(L, X0), leaf(L, Y0)
        out = CASES[case](fns(L), x, y)
        outs = out if isinstance(out, tuple) else (out,)
        sum(((o * (k + 1)).sum() for k, o in enumerate(outs))).backward()
        return [arr(o) for o in outs], arr(x.grad), arr(y.grad)
    compare(prog)


def test_grad_fn_name_and_next_functions():
    F = fns(tg)
    a, b = leaf(tg, [1.0, 2.0]), leaf(tg, [3.0, -1.0])
    h = a * 2
    y = F.Mul.apply(h, b, 3.0)
    node = y.grad_fn
    assert node.name() == type(node).__name__ == "MulBackward"
    assert repr(node).startswith("<MulBackward object at ")
    (n0, i0), (n1, i1) = node.next_functions
    assert n0 is h.grad_fn and i0 == 0
    assert isinstance(n1, tg.autograd.AccumulateGrad) and n1.variable is b and i1 == 0
    s, c = F.SinCos.apply(y)
    assert s.grad_fn is c.grad_fn and s.grad_fn.name() == "SinCosBackward"
    assert s.grad_fn.next_functions[0][0] is node


def test_grad_fn_name_survives_backward():
    """The node keeps its name after backward freed its saved tensors."""
    def prog(L):
        x = leaf(L, [1.0, 2.0])
        y = fns(L).Exp.apply(x)
        node = y.grad_fn
        before = node.name()
        y.sum().backward()
        return before, node.name()
    assert compare(prog) == ("ExpBackward", "ExpBackward")


def test_next_functions_list_every_tensor_input():
    """A tensor input that doesn't require grad still has an entry: (None, 0)."""
    def prog(L):
        a, c = leaf(L, [1.0, 2.0]), leaf(L, [3.0, 4.0], requires_grad=False)
        y = fns(L).Mul.apply(c, a * 2, 3.0)
        return [None if n is None else n.name() for n, _ in y.grad_fn.next_functions]
    assert compare(prog) == [None, "MulBackward0"]


def test_forward_runs_with_grad_disabled():
    seen = {}

    class Probe(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x * 2
            seen.update(fwd_enabled=tg.is_grad_enabled(), fwd_grad_fn=y.grad_fn,
                        fwd_requires_grad=y.requires_grad)
            return y

        @staticmethod
        def backward(ctx, g):
            seen["bwd_enabled"] = tg.is_grad_enabled()
            return g * 2

    x = leaf(tg, [1.0, 2.0])
    y = Probe.apply(x * 1.0)
    assert tg.is_grad_enabled()
    assert seen == {"fwd_enabled": False, "fwd_grad_fn": None, "fwd_requires_grad": False}
    assert y.requires_grad and y.grad_fn.name() == "ProbeBackward"
    y.sum().backward()
    assert seen["bwd_enabled"] is False
    np.testing.assert_array_equal(arr(x.grad), [2.0, 2.0])


def test_needs_input_grad():
    def prog(L):
        got = []

        class Probe(L.autograd.Function):
            @staticmethod
            def forward(ctx, x, y, scale):
                got.append(tuple(ctx.needs_input_grad))
                return x * y * scale

            @staticmethod
            def backward(ctx, g):
                got.append(tuple(ctx.needs_input_grad))
                return g, None, None

        x, y = leaf(L, [1.0, 2.0]), leaf(L, [3.0, 4.0], requires_grad=False)
        Probe.apply(x, y, 2.0).sum().backward()
        Probe.apply(y, x, 2.0)
        return got
    assert compare(prog) == [(True, False, False), (True, False, False),
                             (False, True, False)]


def test_mark_non_differentiable():
    class WithMask(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            mask = (x > 0).to(x.dtype)
            ctx.mark_non_differentiable(mask)
            return x * 2, mask

        @staticmethod
        def backward(ctx, g, *rest):
            return g * 2

    x = leaf(tg, [1.0, -2.0])
    y, mask = WithMask.apply(x)
    assert y.requires_grad and y.grad_fn is not None
    assert not mask.requires_grad and mask.grad_fn is None
    np.testing.assert_array_equal(arr(mask), [1.0, 0.0])
    (y * mask).sum().backward()
    np.testing.assert_array_equal(arr(x.grad), [2.0, 0.0])


def test_backward_gets_a_gradient_per_output():
    """As in PyTorch, backward receives one gradient per output, non-differentiable
    outputs included (zeros) and non-tensor outputs (None)."""
    def prog(L):
        got = []

        class WithMask(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                mask = (x > 0).to(x.dtype)
                ctx.mark_non_differentiable(mask)
                return x * 2, mask, 7

            @staticmethod
            def backward(ctx, g, g_mask, g_seven):
                got.extend([arr(g), arr(g_mask), g_seven])
                return g * 2

        x = leaf(L, [1.0, -2.0])
        y, mask, seven = WithMask.apply(x)
        y.sum().backward()
        return got, arr(x.grad)
    compare(prog)


def test_returning_none_for_an_input_gradient():
    def prog(L):
        class FirstOnly(L.autograd.Function):
            @staticmethod
            def forward(ctx, x, y):
                return x * y

            @staticmethod
            def backward(ctx, g):
                return g * 3, None

        x, y = leaf(L, [1.0, 2.0]), leaf(L, [5.0, 6.0])
        FirstOnly.apply(x, y).sum().backward()
        return arr(x.grad), arr(y.grad)
    ours = compare(prog)
    assert ours[1] is None
    np.testing.assert_array_equal(ours[0], [3.0, 3.0])


def test_apply_under_no_grad_records_nothing():
    F = fns(tg)
    x = leaf(tg, [0.0, 1.0])
    rows = E.stats()["rows"]
    with tg.no_grad():
        y = F.Exp.apply(x)
        a, b = F.SinCos.apply(x)
    assert E.stats()["rows"] == rows
    for t in (y, a, b):
        assert not t.requires_grad and t.grad_fn is None
    np.testing.assert_allclose(arr(y), np.exp([0.0, 1.0]))


# --------------------------------------------------------------------------- saved tensors
@pytest.mark.parametrize("saved", ["output", "non_leaf_input"])
def test_inplace_change_of_a_saved_tensor_raises(saved):
    def prog(L):
        x = leaf(L, [0.5, 1.0])
        if saved == "output":           # Exp saves its output
            y = fns(L).Exp.apply(x)
            y.mul_(2)
        else:                           # Mul saves its inputs
            h = x * 1.0
            y = fns(L).Mul.apply(h, x, 2.0)
            h.add_(1)
        y.sum().backward()
    (t1, m1), (t2, m2) = error_of(prog, tg), error_of(prog, pytest.importorskip("torch"))
    assert t1 is t2 is RuntimeError
    assert m1.startswith(INPLACE_MSG) and m2.startswith(INPLACE_MSG)


def test_second_backward_without_retain_graph_raises():
    x = leaf(tg, [0.5, 1.0])
    s = fns(tg).Exp.apply(x).sum()
    s.backward()
    with pytest.raises(RuntimeError, match=SECOND_MSG):
        s.backward()
    np.testing.assert_allclose(arr(x.grad), np.exp([0.5, 1.0]))      # the first one only


def test_saved_tensors_after_backward_raise():
    ctxs = []

    class Keep(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            ctxs.append(ctx)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            ctx.saved_tensors
            return g * 2

    Keep.apply(leaf(tg, [1.0])).sum().backward()
    with pytest.raises(RuntimeError, match=SECOND_MSG):
        ctxs[0].saved_tensors


def test_retain_graph_twice_accumulates():
    def prog(L):
        x, y = leaf(L, [0.0, 1.0]), leaf(L, [2.0, -1.0])
        s = fns(L).Mul.apply(fns(L).Exp.apply(x), y, 1.5).sum()
        grads = []
        for _ in range(2):
            s.backward(retain_graph=True)
            grads.append((arr(x.grad), arr(y.grad)))
        return grads
    (g1x, g1y), (g2x, g2y) = compare(prog)
    np.testing.assert_allclose(g1x, 1.5 * np.exp([0.0, 1.0]) * [2.0, -1.0])
    np.testing.assert_allclose(g2x, 2 * g1x)
    np.testing.assert_allclose(g2y, 2 * g1y)


def test_function_without_saved_tensors_can_backward_twice():
    """Nothing was freed, so PyTorch allows a second backward (and accumulates)."""
    def prog(L):
        x = leaf(L, [1.0, 2.0])
        s = fns(L).Double.apply(x).sum()
        s.backward()
        s.backward()
        return arr(x.grad)
    np.testing.assert_array_equal(compare(prog), [4.0, 4.0])


# --------------------------------------------------------------------------- errors
def test_wrong_number_of_gradients():
    def prog(L):
        class F(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g, g

        F.apply(leaf(L, [1.0, 2.0])).sum().backward()
    ours, theirs = error_of(prog, tg), error_of(prog, pytest.importorskip("torch"))
    assert ours == theirs == (RuntimeError, "function FBackward returned an incorrect "
                                            "number of gradients (expected 1, got 2)")


def _gradient_of_shape(shape):
    def prog(L):
        class G(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return L.ones(*shape, dtype=L.float64)

        x = leaf(L, [1.0, 2.0])
        G.apply(x).sum().backward()
        return arr(x.grad)
    return prog


def test_wrong_gradient_shape():
    prog = _gradient_of_shape((1,))
    ours, theirs = error_of(prog, tg), error_of(prog, pytest.importorskip("torch"))
    assert ours == theirs == (RuntimeError, "Function GBackward returned an invalid gradient "
                                            "at index 0 - got [1] but expected shape "
                                            "compatible with [2]")


def test_broadcastable_gradient_is_summed_to_the_input_shape():
    """PyTorch accepts a gradient the input's shape expands to, and sums it down."""
    np.testing.assert_array_equal(compare(_gradient_of_shape((3, 2))), [3.0, 3.0])


def _fresh_graph_gives_correct_gradients():
    """A new graph with a Function, a tensor hook and plain ops after a failed sweep."""
    z = leaf(tg, [0.3, -0.7])
    y = fns(tg).Exp.apply(z * 2)
    y.register_hook(lambda g: g * 3)
    (y.sin() + z * z).sum().backward()
    zz = np.array([0.3, -0.7])
    e = np.exp(2 * zz)
    np.testing.assert_allclose(arr(z.grad), 3 * np.cos(e) * e * 2 + 2 * zz, rtol=1e-12)


@pytest.mark.parametrize("where", ["function_backward", "tensor_hook", "leaf_hook"])
def test_exception_propagates_unchanged_and_engine_stays_usable(where):
    err = Boom("boom")

    def fail(g):
        raise err

    x = leaf(tg, [0.5, 1.5])
    if where == "function_backward":
        y = fns(tg).Tagged.apply(x * 1.0, err)
    elif where == "tensor_hook":
        y = x * 2
        y.register_hook(fail)
    else:
        x.register_hook(fail)
        y = x * 2
    with pytest.raises(Boom) as ei:
        (y * y).sum().backward()
    assert ei.value is err
    _fresh_graph_gives_correct_gradients()


def test_exception_in_a_leaf_hook_leaves_no_stale_gradient_behind():
    """After a leaf hook raised, the next backward's gradients are that backward's."""
    def prog(L):
        a, b = leaf(L, [1.0, 2.0]), leaf(L, [3.0, 4.0])
        ha = a.register_hook(lambda g: 1 / 0)
        b.register_hook(lambda g: None)
        with pytest.raises(ZeroDivisionError):
            (a * b).sum().backward()
        ha.remove()
        a.grad = b.grad = None
        (a * b).sum().backward()
        return arr(a.grad), arr(b.grad)
    compare(prog)


# --------------------------------------------------------------------------- hooks on non-leaves
def test_hook_sees_the_gradient_and_its_replacement_flows_on():
    def prog(L):
        x = leaf(L, [1.0, -2.0, 0.5])
        y = x * x
        seen = []

        def hook(g):
            seen.append(arr(g))
            return g * 10

        y.register_hook(hook)
        (y * 3 + y.exp()).sum().backward()
        return seen, arr(x.grad)
    (seen, gx) = compare(prog)
    xx = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(seen[0], 3 + np.exp(xx * xx))
    np.testing.assert_allclose(gx, 10 * (3 + np.exp(xx * xx)) * 2 * xx)


def test_hooks_run_in_order_and_retain_grad_sees_the_result():
    """retain_grad() called first still sees the hooked gradient (PyTorch runs the
    retains_grad hook last)."""
    def prog(L):
        x = leaf(L, [1.0, 2.0])
        y = x * 3
        y.retain_grad()
        seen = []
        y.register_hook(lambda g: (seen.append(("first", arr(g))), g + 1)[1])
        y.register_hook(lambda g: (seen.append(("second", arr(g))), g * 2)[1])
        y.register_hook(lambda g: seen.append(("third", arr(g))))
        (y * y).sum().backward()
        return seen, arr(y.grad), arr(x.grad)
    seen, gy, gx = compare(prog)
    assert [s[0] for s in seen] == ["first", "second", "third"]
    np.testing.assert_allclose(gy, [14.0, 26.0])        # (2y + 1) * 2
    np.testing.assert_allclose(gx, [42.0, 78.0])


def test_removed_hook_no_longer_runs():
    def prog(L):
        x = leaf(L, [1.0, 2.0])
        y = x * 3
        calls = []
        h1 = y.register_hook(lambda g: (calls.append("h1"), g * 100)[1])
        y.register_hook(lambda g: calls.append("h2"))
        h1.remove()
        h1.remove()                     # a second remove() is harmless
        (y * y).sum().backward()
        return calls, arr(x.grad)
    calls, gx = compare(prog)
    assert calls == ["h2"]
    np.testing.assert_allclose(gx, [18.0, 36.0])


def test_hook_on_a_tensor_used_twice_sees_the_summed_gradient():
    def prog(L):
        x = leaf(L, [0.5, -1.0])
        y = x * 2
        seen = []
        y.register_hook(lambda g: (seen.append(arr(g)), g * 0.5)[1])
        (y * y + y.sin()).sum().backward()
        return seen, arr(x.grad)
    seen, _ = compare(prog)
    assert len(seen) == 1
    yy = 2 * np.array([0.5, -1.0])
    np.testing.assert_allclose(seen[0], 2 * yy + np.cos(yy))


def test_hook_argument_is_not_overwritten_by_its_replacement():
    """A hook that keeps its gradient argument (no copy) and returns a replacement still
    holds the original gradient afterwards."""
    def prog(L):
        x = leaf(L, [1.0, 2.0])
        y = x * 3
        kept = []
        y.register_hook(lambda g: (kept.append(g), g * 10)[1])
        (y * y).sum().backward()
        return arr(kept[0]), arr(x.grad)
    kept, gx = compare(prog)
    np.testing.assert_allclose(kept, [6.0, 12.0])
    np.testing.assert_allclose(gx, [180.0, 360.0])


def test_hooks_on_function_outputs():
    def prog(L):
        x = leaf(L, [0.5, 1.0])
        y = fns(L).Exp.apply(x * 2)
        s, c = fns(L).SinCos.apply(y)
        seen = []
        c.register_hook(lambda g: (seen.append(("c", arr(g))), g * 3)[1])
        y.register_hook(lambda g: seen.append(("y", arr(g))))
        (s * 2 + c * c).sum().backward()
        return seen, arr(x.grad)
    seen, _ = compare(prog)
    assert [s[0] for s in seen] == ["c", "y"]


def test_hooks_run_on_every_retained_backward():
    def prog(L):
        x = leaf(L, [1.0, 2.0])
        y = x * 3
        seen = []
        y.register_hook(lambda g: seen.append(("y", arr(g))))
        x.register_hook(lambda g: seen.append(("x", arr(g))))
        s = (y * y).sum()
        s.backward(retain_graph=True)
        s.backward()
        return seen, arr(x.grad)
    seen, gx = compare(prog)
    assert [s[0] for s in seen] == ["y", "x", "y", "x"]
    np.testing.assert_allclose(gx, [36.0, 72.0])


def test_hook_on_an_intermediate_runs_under_autograd_grad():
    def prog(L):
        x = leaf(L, [1.0, 2.0])
        y = fns(L).Exp.apply(x)
        seen = []
        y.register_hook(lambda g: (seen.append(arr(g)), g * 2)[1])
        (gx,) = L.autograd.grad((y * y).sum(), x)
        return seen, arr(gx), arr(x.grad)
    seen, gx, xgrad = compare(prog)
    assert len(seen) == 1 and xgrad is None
    np.testing.assert_allclose(gx, 4 * np.exp(2 * np.array([1.0, 2.0])))


def test_register_hook_on_a_tensor_without_grad_raises():
    def prog(L):
        L.tensor([1.0, 2.0]).register_hook(lambda g: g)
    ours, theirs = error_of(prog, tg), error_of(prog, pytest.importorskip("torch"))
    assert ours == theirs == (RuntimeError, "cannot register a hook on a tensor that "
                                            "doesn't require gradient")


# --------------------------------------------------------------------------- hooks on leaves
def test_leaf_hook_sees_each_backward_and_its_replacement_is_accumulated():
    def prog(L):
        x = leaf(L, [1.0, -2.0, 0.5])
        seen = []

        def hook(g):
            seen.append(arr(g))
            return g * 2

        h = x.register_hook(hook)
        grads = []
        (x * x).sum().backward()
        grads.append(arr(x.grad))
        (x * 3).sum().backward()
        grads.append(arr(x.grad))
        h.remove()
        x.exp().sum().backward()
        grads.append(arr(x.grad))
        return seen, grads
    seen, grads = compare(prog)
    xx = np.array([1.0, -2.0, 0.5])
    assert len(seen) == 2
    np.testing.assert_allclose(seen[0], 2 * xx)        # this backward's, not .grad
    np.testing.assert_allclose(seen[1], [3.0, 3.0, 3.0])
    np.testing.assert_allclose(grads[2], 4 * xx + 6 + np.exp(xx))


def test_leaf_hook_argument_is_not_aliased_with_grad():
    """A gradient a leaf hook kept (no copy) is not changed by later accumulation."""
    def prog(L):
        x = leaf(L, [1.0, 2.0])
        kept = []
        x.register_hook(kept.append)
        (x * 2).sum().backward()
        (x * 3).sum().backward()
        return [arr(k) for k in kept], arr(x.grad)
    kept, gx = compare(prog)
    np.testing.assert_allclose(kept[0], [2.0, 2.0])
    np.testing.assert_allclose(gx, [5.0, 5.0])


def test_leaf_hook_replacement_tensor_is_not_modified():
    """The tensor a leaf hook returns is copied into .grad, not adopted as .grad."""
    def prog(L):
        x = leaf(L, [1.0, 2.0])
        replacement = L.tensor([5.0, 7.0], dtype=L.float64)
        h = x.register_hook(lambda g: replacement)
        (x * 2).sum().backward()
        h.remove()
        (x * 3).sum().backward()
        return arr(replacement), arr(x.grad)
    rep, gx = compare(prog)
    np.testing.assert_allclose(rep, [5.0, 7.0])
    np.testing.assert_allclose(gx, [8.0, 10.0])


def test_leaf_hook_survives_data_assignment():
    """Tensor.data = ... (what Module.to(dtype) uses) keeps the tensor's hooks."""
    def prog(L):
        x = leaf(L, [1.0, 2.0])
        seen = []
        x.register_hook(lambda g: (seen.append(arr(g)), g * 2)[1])
        x.data = L.tensor([3.0, 4.0], dtype=L.float64)
        (x * x).sum().backward()
        return seen, arr(x.grad)
    seen, gx = compare(prog)
    np.testing.assert_allclose(gx, [12.0, 16.0])


# --------------------------------------------------------------------------- autograd.grad
def test_grad_of_an_unused_input_raises():
    def prog(L):
        x, y = leaf(L, [1.0]), leaf(L, [2.0])
        L.autograd.grad((x * 2).sum(), [x, y])
    ours, theirs = error_of(prog, tg), error_of(prog, pytest.importorskip("torch"))
    assert ours == theirs == (RuntimeError, "The differentiated Tensor at index 1 appears "
                                            "to not have been used in the graph. Set "
                                            "allow_unused=True if this is the desired "
                                            "behavior.")


def test_grad_allow_unused_returns_none():
    x, y = leaf(tg, [1.0, 3.0]), leaf(tg, [2.0])
    gx, gy = tg.autograd.grad((x * x).sum(), [x, y], allow_unused=True)
    assert gy is None
    np.testing.assert_array_equal(arr(gx), [2.0, 6.0])
    assert x.grad is None and y.grad is None


def test_grad_through_a_function():
    def prog(L):
        F = fns(L)
        x, y = leaf(L, [0.2, -0.4]), leaf(L, [1.5, 2.5])
        out = F.Mul.apply(F.Exp.apply(x), y, 2.0).sum()
        gx, gy = L.autograd.grad(out, [x, y])
        return arr(gx), arr(gy), arr(x.grad), arr(y.grad)
    gx, gy, xgrad, ygrad = compare(prog)
    np.testing.assert_allclose(gx, 2 * np.exp([0.2, -0.4]) * [1.5, 2.5])
    assert xgrad is None and ygrad is None


# --------------------------------------------------------------------------- memory
def test_loop_with_a_function_and_hooks_keeps_counts_flat():
    x = leaf(tg, np.linspace(-1, 1, 8))
    x.register_hook(lambda g: g * 0.5)
    F = fns(tg)
    snap = {}
    for step in range(1, 2001):
        y = F.Exp.apply(x * 0.5)
        y.register_hook(lambda g: g * 2)
        (y * y).sum().backward()
        del y
        if step in (200, 2000):
            snap[step] = engine_stats()
    assert_flat(snap)
    xx = np.linspace(-1, 1, 8)
    np.testing.assert_allclose(arr(x.grad), 2000 * 0.5 * 2 * 2 * np.exp(xx) * 0.5)


def test_loop_dropping_function_graphs_keeps_counts_flat():
    """Graphs dropped without backward (e.g. a validation loss) release their saved
    tensors."""
    x = leaf(tg, np.linspace(-1, 1, 8))
    F = fns(tg)
    snap = {}
    for step in range(1, 2001):
        loss = (F.Exp.apply(x * 0.5) * x).sum()
        del loss
        if step in (200, 2000):
            snap[step] = engine_stats()
    assert_flat(snap)


@pytest.mark.parametrize("backward", [True, False], ids=["after_backward", "no_backward"])
@pytest.mark.parametrize("holder", ["tensor_hook", "leaf_hook", "function_ctx"])
def test_graph_releases_hooks_and_ctx_when_it_dies(holder, backward):
    """What a hook or a Function's ctx holds is released with the graph (or the leaf)."""
    def prog(L):
        token = Token()
        ref = weakref.ref(token)
        x = leaf(L, [1.0, 2.0])
        if holder == "tensor_hook":
            y = x * 2
            y.register_hook(lambda g, token=token: g)
            out = (y * y).sum()
            del y                   # (a live y keeps its hooks, in PyTorch too)
        elif holder == "leaf_hook":
            x.register_hook(lambda g, token=token: g)
            out = (x * x).sum()
        else:
            out = fns(L).Tagged.apply(x * 1.0, token).sum()
        if backward:
            out.backward()
        del token, out, x
        gc.collect()
        return ref() is None
    assert run_both(prog) == (True, True)
