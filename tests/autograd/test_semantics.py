"""PyTorch autograd semantics: what is recorded, what is saved, how gradients flow
and accumulate, and the errors PyTorch raises for misuse of the graph.

Where PyTorch is installed the same program is also run through torch and the results
(values, exception types, messages) are compared.
"""
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tests.helpers import INPLACE_MSG, SECOND_MSG, close, run_both, vals

# every test here must leave grad mode as it found it
pytestmark = pytest.mark.usefixtures("grad_mode_is_restored")


def error_of(fn, lib):
    try:
        fn(lib)
    except Exception as e:          # noqa: BLE001  (we compare what was raised)
        return type(e), str(e)
    return None, None


def same_message(ours, theirs):
    return ours.replace("tapegrad", "torch") == theirs


# --------------------------------------------------------------------------- rebinding
def test_rebinding_a_name_does_not_change_the_recorded_graph():
    x = tg.tensor(1.0, requires_grad=True)
    w = tg.tensor(2.0, requires_grad=True)
    w_old = w
    y = w * x
    w = tg.tensor(4.0)          # the graph keeps the old w
    z = y ** 2
    z.backward()
    assert x.grad.item() == 8.0          # dz/dx = 2*y*w_old = 2*2*2
    assert w_old.grad.item() == 4.0      # dz/dw = 2*y*x
    assert w.grad is None and not w.requires_grad


def test_rebinding_matches_torch():
    def prog(L):
        x = L.tensor(1.0, requires_grad=True)
        w = L.tensor(2.0, requires_grad=True)
        y = w * x
        w = L.tensor(4.0)
        z = y ** 2
        z.backward()
        return x.grad.item()
    ours, theirs = run_both(prog)
    assert ours == theirs == 8.0


def test_reassigning_the_same_name_equals_fresh_names():
    def grads(rebind):
        a = tg.tensor([1.0, -2.0, 3.0], requires_grad=True)
        b = tg.tensor([0.5, 4.0, -1.0], requires_grad=True)
        c = tg.tensor([2.0, 2.0, -3.0], requires_grad=True)
        if rebind:
            x = a * b
            x = x * c
            out = x
        else:
            x1 = a * b
            x2 = x1 * c
            out = x2
        out.sum().backward()
        return vals(a.grad), vals(b.grad), vals(c.grad)

    g1, g2 = grads(True), grads(False)
    for u, v in zip(g1, g2):
        np.testing.assert_array_equal(u, v)
    np.testing.assert_allclose(g1[0], [1.0, 8.0, 3.0])     # b*c
    np.testing.assert_allclose(g1[1], [2.0, -4.0, -9.0])   # a*c
    np.testing.assert_allclose(g1[2], [0.5, -8.0, -3.0])   # a*b


# --------------------------------------------------------------------------- non-leaf .grad
def test_non_leaf_grad_is_none_with_a_user_warning():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    (y * y).sum().backward()
    with pytest.warns(UserWarning, match="is not a leaf Tensor is being accessed"):
        g = y.grad
    assert g is None
    assert not y.retains_grad
    close(x.grad, [8.0, 16.0])


def test_leaf_grad_access_does_not_warn():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert x.grad is None
        (x * 3).sum().backward()
        close(x.grad, [3.0, 3.0])


def test_retain_grad_keeps_a_non_leaf_gradient():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.retain_grad()
    assert y.retains_grad
    (y * y + y).sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # no warning once retain_grad() was called
        g = y.grad
    close(g, [5.0, 9.0])                    # 2y + 1
    close(x.grad, [10.0, 18.0])
    assert not x.retains_grad               # leaves never "retain"
    x.retain_grad()                         # a no-op on a leaf, as in PyTorch
    assert not x.retains_grad


def test_retain_grad_matches_torch():
    def prog(L):
        x = L.tensor([1.0, 2.0, -1.5], requires_grad=True)
        y = x * x
        y.retain_grad()
        z = (y * y + y.exp()).sum()
        z.backward()
        return vals(y.grad), vals(x.grad)
    (gy, gx), (ty, tx) = run_both(prog)
    np.testing.assert_allclose(gy, ty, rtol=1e-6)
    np.testing.assert_allclose(gx, tx, rtol=1e-6)


def test_retain_grad_on_tensor_without_grad_raises():
    with pytest.raises(RuntimeError,
                       match="can't retain_grad on Tensor that has requires_grad=False"):
        tg.tensor([1.0]).retain_grad()


# --------------------------------------------------------------------------- in-place on leaves
def test_inplace_on_leaf_requiring_grad_raises():
    w = tg.tensor(2.0, requires_grad=True)
    for fn in (lambda: w.fill_(4.0), lambda: w.add_(1.0), lambda: w.mul_(2.0),
               lambda: w.zero_(), lambda: w.sub_(1.0), lambda: w.div_(2.0)):
        with pytest.raises(RuntimeError) as ei:
            fn()
        assert str(ei.value) == ("a leaf Variable that requires grad is being used in an "
                                 "in-place operation.")
    assert w.item() == 2.0 and w._version == 0


def test_augmented_assignment_on_leaf_requiring_grad_raises():
    w = tg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used"):
        w += 1
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used"):
        w *= tg.tensor([2.0, 2.0])
    close(w, [1.0, 2.0])


def test_inplace_on_leaf_under_no_grad_is_allowed_and_bumps_version():
    w = tg.tensor(2.0, requires_grad=True)
    assert w._version == 0
    with tg.no_grad():
        w.fill_(4.0)
    assert w.item() == 4.0
    assert w._version == 1
    assert w.requires_grad and w.is_leaf and w.grad_fn is None
    with tg.no_grad():
        w.mul_(0.5)
        w += 1.0
    assert w.item() == 3.0
    assert w._version == 3
    (w * w).backward()
    assert w.grad.item() == 6.0


def test_inplace_on_view_of_leaf_raises():
    w = tg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError) as ei:
        w.view(1, 2).mul_(2)
    assert str(ei.value) == ("a view of a leaf Variable that requires grad is being used in an "
                             "in-place operation.")
    with pytest.raises(RuntimeError, match="a view of a leaf Variable"):
        w.view(2).add_(1.0)
    close(w, [1.0, 2.0])


@pytest.mark.parametrize("write, written, factor", [
    (lambda v, x: v.__setitem__(Ellipsis, x * 2.0), [2.0, 4.0], 2.0),
    (lambda v, x: v.add_(x), [2.0, 3.0], 1.0),
    (lambda v, x: v.mul_(x), [1.0, 2.0], 1.0),
    (lambda v, x: v.copy_(x), [1.0, 2.0], 1.0),
])
def test_recording_into_a_view_of_a_tensor_without_grad_gives_the_base_a_history(
        write, written, factor):
    """PyTorch's CopySlices: the write lands in the base, which gains a history, and the
    gradient through the base reaches the written value (it used to be refused)."""
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    w = [1.0, 10.0, 100.0, 1000.0]
    for pos, view in (([1, 2], lambda b: b[1:3]), ([1, 3], lambda b: b.view(2, 2)[:, 1])):
        base = tg.ones(4)
        v = view(base)
        write(v, x)
        expect = [1.0] * 4
        for p, value in zip(pos, written):
            expect[p] = value
        assert base.tolist() == expect and v.tolist() == written
        assert base.requires_grad and base.grad_fn.name() == "torch::autograd::CopySlices"
        assert v.grad_fn.name() == "AsStridedBackward0" and base._version == 1
        (base * tg.tensor(w)).sum().backward()
        assert x.grad.tolist() == [factor * w[p] for p in pos]
        x.grad = None
    base = tg.ones(4)
    with tg.no_grad():                          # nothing recorded: allowed
        base[1:3].add_(x)
    base[2:].mul_(3.0)                          # nothing that requires grad: allowed
    assert base.tolist() == [1.0, 2.0, 9.0, 3.0] and base.grad_fn is None
    d = base.detach()                           # not a view for autograd, as in PyTorch
    d.add_(tg.ones(4, requires_grad=True))
    assert d.grad_fn.name() == "AddBackward0"


def test_inplace_leaf_errors_match_torch():
    progs = [
        lambda L: L.tensor(2.0, requires_grad=True).fill_(4.0),
        lambda L: L.tensor([1.0, 2.0], requires_grad=True).view(1, 2).mul_(2),
    ]
    torch = pytest.importorskip("torch")
    for p in progs:
        t1, m1 = error_of(p, tg)
        t2, m2 = error_of(p, torch)
        assert t1 is t2 is RuntimeError
        assert same_message(m1, m2)


# --------------------------------------------------------------------------- version counter
def test_modified_saved_output_raises_on_backward():
    a = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = a.exp()
    y.add_(1)
    assert y._version == 1
    assert y.grad_fn.name() == "AddBackward0"
    with pytest.raises(RuntimeError) as ei:
        y.sum().backward()
    msg = str(ei.value)
    assert INPLACE_MSG in msg
    assert "is at version 1; expected version 0 instead" in msg
    assert "output 0 of Exp" in msg
    assert "[tapegrad.FloatTensor [3]]" in msg
    assert a.grad is None           # nothing was accumulated


def test_version_error_counts_every_modification():
    a = tg.tensor([1.0, 2.0], requires_grad=True)
    y = a.sigmoid()
    y.add_(1)
    y.mul_(2)
    with pytest.raises(RuntimeError, match="is at version 2; expected version 0 instead"):
        y.sum().backward()


def test_modified_saved_input_raises_on_backward():
    a = tg.tensor([1.0, 2.0], requires_grad=True)
    k = tg.tensor([3.0, 4.0])
    y = a * k           # d/da needs k: k is saved
    k.add_(1)
    with pytest.raises(RuntimeError) as ei:
        y.sum().backward()
    msg = str(ei.value)
    assert INPLACE_MSG in msg
    assert "[tapegrad.FloatTensor [2]] is at version 1; expected version 0 instead" in msg


def test_leaf_modified_under_no_grad_before_backward_raises():
    w = tg.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    y = (w * w).sum()
    with tg.no_grad():
        w.sub_(0.1)
    with pytest.raises(RuntimeError, match="is at version 1; expected version 0 instead"):
        y.backward()


@pytest.mark.parametrize("case", ["exp_output", "mul_operand", "two_changes", "leaf_no_grad"])
def test_version_error_messages_match_torch(case):
    def prog(L):
        a = L.tensor([1.0, 2.0, 3.0], requires_grad=True)
        if case == "exp_output":
            y = a.exp()
            y.add_(1)
        elif case == "mul_operand":
            k = L.tensor([3.0, 4.0, 5.0])
            y = a * k
            k.mul_(2)
        elif case == "two_changes":
            y = a.tanh()
            y.mul_(2)
            y.sub_(1)
        else:
            y = a * a
            with L.no_grad():
                a.add_(1)
        y.sum().backward()
    torch = pytest.importorskip("torch")
    t1, m1 = error_of(prog, tg)
    t2, m2 = error_of(prog, torch)
    assert t1 is t2 is RuntimeError
    # the hint after the message is tapegrad's own (PyTorch points at anomaly mode)
    assert same_message(m1.split(" Hint:")[0], m2.split(" Hint:")[0])


def test_operands_of_add_and_sub_are_not_saved():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    k = tg.tensor([3.0, 4.0])
    h = x * 3
    y = h - x + k           # sub and add need no operand values
    h.add_(1)               # a non-leaf operand changed before backward
    k.mul_(2)               # a leaf operand changed before backward
    assert h._version == 1 and k._version == 1
    y.sum().backward()
    close(x.grad, [2.0, 2.0])          # 3 - 1
    assert h.grad_fn.name() == "AddBackward0"


def test_operand_of_sum_and_view_is_not_saved():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x.sum() + x.view(2, 1).sum()
    with tg.no_grad():
        x.mul_(10)
    y.backward()
    close(x.grad, [2.0, 2.0])


def test_operands_of_add_sub_match_torch():
    def prog(L):
        x = L.tensor([1.0, 2.0], requires_grad=True)
        k = L.tensor([3.0, 4.0])
        h = x * 3
        y = (h - x + k) * 2
        h.add_(1)
        k.mul_(2)
        y.sum().backward()
        return vals(x.grad)
    ours, theirs = run_both(prog)
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("op", ["mul", "div", "mv"])
def test_operand_not_needed_by_any_gradient_is_not_saved(op):
    x = tg.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    k = tg.tensor([[3.0, 4.0], [5.0, 6.0]])
    v = tg.tensor([1.0, 2.0])
    y = {"mul": lambda: x * k, "div": lambda: x / k, "mv": lambda: x @ v}[op]()
    with tg.no_grad():
        x.mul_(2)           # x's own value is needed only for d/dk (or d/dv): not saved
    y.sum().backward()
    expected = {"mul": [[3.0, 4.0], [5.0, 6.0]],
                "div": [[1 / 3, 1 / 4], [1 / 5, 1 / 6]],
                "mv": [[1.0, 2.0], [1.0, 2.0]]}[op]
    close(x.grad, expected)


def test_tape_is_usable_after_a_version_error():
    a = tg.tensor([1.0, 2.0], requires_grad=True)
    y = a.exp()
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    # a fresh graph over the same leaf
    z = (a * a).sum()
    z.backward()
    close(a.grad, [2.0, 4.0])
    # and a fresh graph over fresh leaves
    b = tg.tensor([0.5, -1.0], requires_grad=True)
    (b.exp() * 3).sum().backward()
    close(b.grad, 3 * np.exp([0.5, -1.0]), rtol=1e-6)


# --------------------------------------------------------------------------- grad_fn structure
GRAD_FN_NAMES = [
    ("x * 2", "MulBackward0"),
    ("x * x", "MulBackward0"),
    ("x + 1", "AddBackward0"),
    ("x + x", "AddBackward0"),
    ("x - 1", "SubBackward0"),
    ("1 - x", "RsubBackward1"),
    ("x / 2", "DivBackward0"),
    ("x / x", "DivBackward0"),
    ("2 / x", "MulBackward0"),
    ("x ** 2", "PowBackward0"),
    ("x ** x", "PowBackward1"),
    ("2 ** x", "PowBackward2"),
    ("-x", "NegBackward0"),
    ("x.exp()", "ExpBackward0"),
    ("x.log()", "LogBackward0"),
    ("x.sin()", "SinBackward0"),
    ("x.cos()", "CosBackward0"),
    ("x.tanh()", "TanhBackward0"),
    ("x.sigmoid()", "SigmoidBackward0"),
    ("x.relu()", "ReluBackward0"),
    ("x.sqrt()", "SqrtBackward0"),
    ("x.abs()", "AbsBackward0"),
    ("x.sum()", "SumBackward0"),
    ("x.sum(0)", "SumBackward1"),
    ("x.mean()", "MeanBackward0"),
    ("x.mean(1)", "MeanBackward1"),
    ("x.max()", "MaxBackward1"),
    ("x.max(0).values", "MaxBackward0"),
    ("x.min()", "MinBackward1"),
    ("x @ x", "MmBackward0"),
    ("x @ x.sum(0)", "MvBackward0"),
    ("x.sum(0) @ x.sum(1)", "DotBackward0"),
    ("x.reshape(4)", "ViewBackward0"),
    ("x.view(4)", "ViewBackward0"),
    ("x.T.reshape(4)", "UnsafeViewBackward0"),
    ("x.transpose(0, 1)", "TransposeBackward0"),
    ("x.T", "PermuteBackward0"),
    ("x.t()", "TBackward0"),
    ("x.unbind(0)[1]", "UnbindBackward0"),
]


@pytest.mark.parametrize("expr,name", GRAD_FN_NAMES, ids=[e for e, _ in GRAD_FN_NAMES])
def test_grad_fn_names(expr, name):
    x = tg.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    y = eval(expr)
    assert y.grad_fn is not None
    assert y.grad_fn.name() == name
    assert f"grad_fn=<{name}>" in repr(y)
    assert not y.is_leaf and y.requires_grad


@pytest.mark.parametrize("expr,name", GRAD_FN_NAMES, ids=[e for e, _ in GRAD_FN_NAMES])
def test_grad_fn_names_match_torch(expr, name):
    torch = pytest.importorskip("torch")
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)  # noqa: F841
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert eval(expr).grad_fn.name() == name


def test_inplace_ops_rename_grad_fn():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x.exp()
    assert y.grad_fn.name() == "ExpBackward0"
    y.mul_(2)
    assert y.grad_fn.name() == "MulBackward0"
    y += 1
    assert y.grad_fn.name() == "AddBackward0"
    nf = y.grad_fn.next_functions
    assert nf[0][0].name() == "MulBackward0"
    assert nf[0][0].next_functions[0][0].name() == "ExpBackward0"


def test_next_functions_of_mul_by_scalar():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    nf = y.grad_fn.next_functions
    assert isinstance(nf, tuple) and len(nf) == 2
    (acc, i0), (none, i1) = nf
    assert type(acc).__name__ == "AccumulateGrad"
    assert acc.variable is x
    assert i0 == 0
    assert none is None and i1 == 0
    assert acc.next_functions == ()


def test_next_functions_structure_matches_torch():
    def shape(L):
        x = L.tensor([1.0, 2.0], requires_grad=True)
        k = L.tensor([1.0, 2.0])
        out = []
        for y in (x * 2, x + 1, x / 2, 1 - x, x ** 2, x.exp(), x * k, x * x, (x * 2).sum(),
                  (x.exp() + x).sum(), x.unbind()[1] * 3):
            out.append(tuple((None if n is None else n.name(), i)
                             for n, i in y.grad_fn.next_functions))
        return out
    ours, theirs = run_both(shape)
    assert ours == theirs
    acc = "torch::autograd::AccumulateGrad"
    assert ours[0] == ((acc, 0), (None, 0))
    assert ours[4] == ((acc, 0),)
    assert ours[10] == (("UnbindBackward0", 1), (None, 0))


def test_next_functions_link_nodes():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    w = tg.tensor([3.0, 4.0], requires_grad=True)
    y = x * w
    s = y.sum()
    assert s.grad_fn.name() == "SumBackward0"
    (mul, idx), = s.grad_fn.next_functions
    assert mul is y.grad_fn
    assert idx == 0
    assert y.grad_fn is y.grad_fn                 # one node object per row
    (ax, _), (aw, _) = mul.next_functions
    assert ax.variable is x and aw.variable is w
    ax2 = (x + 1).grad_fn.next_functions[0][0]
    assert ax2 is ax                             # one AccumulateGrad per leaf


def test_unbind_outputs_share_one_node_with_output_indices():
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    u = x.unbind()
    assert len(u) == 3
    assert u[0].grad_fn is u[2].grad_fn
    assert u[0].grad_fn.name() == "UnbindBackward0"
    z = u[2] * 2
    node, idx = z.grad_fn.next_functions[0]
    assert node is u[0].grad_fn
    assert idx == 2
    (acc, _), = node.next_functions
    assert acc.variable is x
    (u[0] + z).backward()
    close(x.grad, [1.0, 0.0, 2.0])


# --------------------------------------------------------------------------- accumulation
def test_leaf_used_twice_gets_the_sum():
    x = tg.tensor([1.0, -2.0, 0.5], requires_grad=True)
    (x * x).sum().backward()
    close(x.grad, [2.0, -4.0, 1.0])
    x2 = tg.tensor([1.0, -2.0, 0.5], requires_grad=True)
    (x2.exp() + x2.sin()).sum().backward()
    close(x2.grad, np.exp([1.0, -2.0, 0.5]) + np.cos([1.0, -2.0, 0.5]), rtol=1e-6)


def test_leaf_used_through_broadcast_gets_summed_gradient():
    b = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    m = tg.ones(4, 3)
    (m * b + b).sum().backward()
    close(b.grad, [8.0, 8.0, 8.0])         # 4 rows of m*b plus 4 broadcast rows of b


def test_non_leaf_used_twice_accumulates_before_its_row_runs():
    xs = np.array([0.5, 1.0, -1.5])
    x = tg.tensor(xs, dtype=tg.float64, requires_grad=True)
    y = x * x
    z = y * y + y.exp()
    z.sum().backward()
    ys = xs * xs
    close(x.grad, (2 * ys + np.exp(ys)) * 2 * xs, rtol=1e-12)


def test_non_leaf_used_many_times_matches_torch():
    def prog(L):
        x = L.tensor([0.5, 1.0, -1.5], dtype=L.float64, requires_grad=True)
        y = x * x
        a = y.sin()
        z = y * a + a * a + y.exp() - y / (a + 2)
        z.sum().backward()
        return vals(x.grad)
    ours, theirs = run_both(prog)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def test_grad_accumulates_across_backward_calls_until_cleared():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    (x * 3).sum().backward()
    close(x.grad, [3.0, 3.0])
    (x * x).sum().backward()
    close(x.grad, [5.0, 7.0])
    g = x.grad
    x.grad.zero_()
    (x * 3).sum().backward()
    close(x.grad, [3.0, 3.0])
    assert x.grad is g                      # accumulated in place
    x.grad = None
    assert x.grad is None
    (x * 4).sum().backward()
    close(x.grad, [4.0, 4.0])
    close(g, [3.0, 3.0])                    # the old grad tensor is left alone


def test_assigned_grad_is_accumulated_into():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    g = tg.tensor([10.0, 20.0])
    x.grad = g
    (x * 3).sum().backward()
    close(x.grad, [13.0, 23.0])
    assert x.grad is g
    close(g, [13.0, 23.0])


# --------------------------------------------------------------------------- requires_grad
def test_requires_grad_on_result_computed_without_grad_makes_a_leaf():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    with tg.no_grad():
        c = x * 2
    assert not c.requires_grad and c.is_leaf and c.grad_fn is None
    c.requires_grad = True
    assert c.requires_grad and c.is_leaf and c.grad_fn is None
    (c * c).sum().backward()
    close(c.grad, [4.0, 8.0])
    assert x.grad is None


def test_requires_grad_setter_on_non_leaf_raises():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError) as ei:
        y.requires_grad = True
    assert str(ei.value) == "you can only change requires_grad flags of leaf variables."
    with pytest.raises(RuntimeError) as ei:
        y.requires_grad = False
    assert str(ei.value) == (
        "you can only change requires_grad flags of leaf variables. If you want to use a "
        "computed variable in a subgraph that doesn't require differentiation use "
        "var_no_grad = var.detach().")
    assert y.requires_grad


def test_requires_grad_setter_messages_match_torch():
    torch = pytest.importorskip("torch")
    for flag in (True, False):
        def prog(L):
            y = L.tensor([1.0, 2.0], requires_grad=True) * 2
            y.requires_grad = flag
        t1, m1 = error_of(prog, tg)
        t2, m2 = error_of(prog, torch)
        assert t1 is t2 is RuntimeError
        assert m1 == m2


def test_requires_grad_underscore_on_leaves():
    a = tg.tensor([1.0, 2.0])
    assert not a.requires_grad
    assert a.requires_grad_() is a
    assert a.requires_grad and a.is_leaf
    assert a.requires_grad_(False) is a
    assert not a.requires_grad
    a.requires_grad_(True)
    (a * 5).sum().backward()
    close(a.grad, [5.0, 5.0])


def test_requires_grad_false_on_non_leaf_via_method_raises():
    y = tg.tensor([1.0, 2.0], requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="you can only change requires_grad flags of leaf"):
        y.requires_grad_(False)


def test_requires_grad_underscore_true_on_non_leaf_is_a_no_op():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    assert y.requires_grad_() is y
    assert y.requires_grad and y.grad_fn.name() == "MulBackward0"


@pytest.mark.parametrize("dtype", [tg.int64, tg.bool])
def test_integer_and_bool_tensors_cannot_require_grad(dtype):
    msg = "only Tensors of floating point dtype can require gradients"
    data = [1, 2] if dtype is tg.int64 else [True, False]
    # PyTorch's constructor words it differently from requires_grad_()
    with pytest.raises(RuntimeError, match="Only Tensors of floating point and complex dtype "
                                           "can require gradients"):
        tg.tensor(data, requires_grad=True)
    t = tg.tensor(data)
    assert t.dtype is dtype
    with pytest.raises(RuntimeError, match=msg):
        t.requires_grad_()
    with pytest.raises(RuntimeError, match="only Tensors of floating point and complex dtype "
                                           "can require gradients"):
        t.requires_grad = True          # PyTorch's setter words it like the constructor
    with pytest.raises(RuntimeError, match="Only Tensors of floating point and complex dtype "
                                           "can require gradients"):
        tg.zeros(2, dtype=dtype, requires_grad=True)      # a constructor, as tensor()
    assert not t.requires_grad
    t.requires_grad = False                     # turning it off is fine
    assert not t.requires_grad


def test_integer_requires_grad_message_matches_torch_for_requires_grad_():
    def prog(L):
        L.tensor([1, 2]).requires_grad_()
    torch = pytest.importorskip("torch")
    t1, m1 = error_of(prog, tg)
    t2, m2 = error_of(prog, torch)
    assert t1 is t2 is RuntimeError
    assert m1 == m2


def test_float64_leaves_require_grad():
    x = tg.tensor([1.0, 2.0], dtype=tg.float64, requires_grad=True)
    (x * x).sum().backward()
    assert x.grad.dtype is tg.float64
    close(x.grad, [2.0, 4.0], rtol=0)


# --------------------------------------------------------------------------- backward()
def test_backward_on_non_scalar_needs_a_gradient():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError) as ei:
        y.backward()
    assert str(ei.value) == "grad can be implicitly created only for scalar outputs"
    assert x.grad is None


def test_backward_on_one_element_tensor_is_implicit():
    x = tg.tensor([1.5], requires_grad=True)
    (x * 3).backward()
    close(x.grad, [3.0])


def test_backward_with_gradient_equals_weighted_sum():
    xs = np.array([[1.0, -2.0, 0.5], [0.25, 3.0, -1.0]])
    v = tg.tensor([[1.0, 2.0, 3.0], [-1.0, 0.5, 4.0]], dtype=tg.float64)
    x1 = tg.tensor(xs, requires_grad=True)
    x2 = tg.tensor(xs, requires_grad=True)
    y1 = x1.sin() * x1
    y1.backward(gradient=v)
    y2 = x2.sin() * x2
    (y2 * v).sum().backward()
    np.testing.assert_allclose(vals(x1.grad), vals(x2.grad), rtol=1e-12)
    np.testing.assert_allclose(vals(x1.grad), (np.cos(xs) * xs + np.sin(xs)) * vals(v),
                               rtol=1e-12)


def test_backward_gradient_shape_mismatch():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError) as ei:
        y.backward(gradient=tg.ones(3))
    assert str(ei.value) == ("Mismatch in shape: grad_output[0] has a shape of "
                             "tapegrad.Size([3]) and output[0] has a shape of "
                             "tapegrad.Size([2]).")
    assert x.grad is None
    y.backward(gradient=tg.ones(2))          # the graph is intact
    close(x.grad, [2.0, 2.0])


def test_backward_argument_errors_match_torch():
    progs = [
        lambda L: (L.tensor([1.0, 2.0], requires_grad=True) * 2).backward(),
        lambda L: (L.tensor([1.0, 2.0], requires_grad=True) * 2).backward(
            gradient=L.ones(3)),
        lambda L: (L.tensor([1.0, 2.0], requires_grad=True) * 2).backward(
            gradient=L.ones(2, 1)),
        lambda L: (L.tensor([1.0, 2.0], requires_grad=True) * 2).sum().backward(
            gradient=L.ones(1)),
        lambda L: L.tensor([1.0, 2.0]).sum().backward(),
    ]
    torch = pytest.importorskip("torch")
    for p in progs:
        t1, m1 = error_of(p, tg)
        t2, m2 = error_of(p, torch)
        assert t1 is t2 is RuntimeError
        assert same_message(m1, m2), (m1, m2)


def test_backward_on_tensor_without_grad_raises():
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad and "
                                           "does not have a grad_fn"):
        (tg.tensor([1.0, 2.0]) * 2).sum().backward()


# --------------------------------------------------------------------------- retain_graph
def test_second_backward_raises_without_retain_graph():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    s = (x * x).sum()
    s.backward()
    with pytest.raises(RuntimeError) as ei:
        s.backward()
    msg = str(ei.value)
    assert msg.startswith(SECOND_MSG)
    assert "Specify retain_graph=True" in msg
    close(x.grad, [2.0, 4.0])           # unchanged by the failed call


def test_retain_graph_allows_a_second_backward():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    s = (x.exp() * x).sum()
    s.backward(retain_graph=True)
    g1 = vals(x.grad).copy()
    s.backward(retain_graph=True)
    np.testing.assert_allclose(vals(x.grad), 2 * g1, rtol=1e-6)
    s.backward()                         # the last one frees
    np.testing.assert_allclose(vals(x.grad), 3 * g1, rtol=1e-6)
    with pytest.raises(RuntimeError, match=SECOND_MSG):
        s.backward()


def test_second_backward_through_a_shared_prefix_raises():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x.exp()
    y.sum().backward()
    with pytest.raises(RuntimeError, match=SECOND_MSG):
        (y * 2).sum().backward()


def test_graph_that_saved_nothing_can_be_backpropagated_twice():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    s = (x + x - 1).sum()            # add, sub and sum save no tensors
    s.backward()
    s.backward()
    close(x.grad, [4.0, 4.0])
    y = tg.tensor([3.0, 4.0], requires_grad=True)
    t = (-y).reshape(2, 1).T.mean()
    t.backward()
    t.backward()
    close(y.grad, [-1.0, -1.0])


SECOND_CASES = ["x + 1", "x - 1", "x + x", "-x", "2 - x", "x * 2", "x / 2", "x.sum()",
                "x.mean()", "x.reshape(2, 1)", "x.view(2, 1)", "x.T", "x.unbind()[0]",
                "x.exp()", "x * x", "x.abs()", "x.relu()", "x ** 2"]


@pytest.mark.parametrize("expr", SECOND_CASES)
def test_second_backward_behaviour_matches_torch(expr):
    """Whether a second backward raises depends on what the nodes saved; this follows
    PyTorch (note: in PyTorch 2.x ``x * 2`` saves the scalar, so it raises)."""
    def prog(L):
        x = L.tensor([1.0, 2.0], requires_grad=True)  # noqa: F841
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            s = eval(expr)
        s = s.sum() if s.ndim else s
        s.backward()
        try:
            s.backward()
        except RuntimeError as e:
            assert SECOND_MSG in str(e)
            return "raised"
        return vals(x.grad).tolist()
    ours, theirs = run_both(prog)
    assert ours == theirs


# --------------------------------------------------------------------------- detach / numpy
def test_detach_shares_data_and_version():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    d = x.detach()
    assert d.grad_fn is None and not d.requires_grad and d.is_leaf
    assert d._version == x._version == 0
    d.add_(1)
    close(x, [2.0, 3.0])
    assert x._version == 1 and d._version == 1
    with tg.no_grad():
        x.mul_(2)
    close(d, [4.0, 6.0])
    assert d._version == 2


def test_detach_of_non_leaf_and_version_check():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x.exp()
    d = y.detach()
    assert d.grad_fn is None and not d.requires_grad
    d.zero_()                           # changes y's storage: exp's saved output
    close(y, [0.0, 0.0])
    with pytest.raises(RuntimeError, match="is at version 1; expected version 0 instead"):
        y.sum().backward()


def test_detach_stops_gradient_flow():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x.detach() * x
    y.sum().backward()
    close(x.grad, [1.0, 2.0])
    x2 = tg.tensor([1.0, 2.0], requires_grad=True)
    z = (x2 * 3).detach()
    with pytest.raises(RuntimeError, match="does not require grad"):
        z.sum().backward()


def test_numpy_on_tensor_requiring_grad_raises():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError) as ei:
        x.numpy()
    assert str(ei.value) == ("Can't call numpy() on Tensor that requires grad. Use "
                             "tensor.detach().numpy() instead.")
    with pytest.raises(RuntimeError, match="Can't call numpy"):
        (x * 2).numpy()
    a = x.detach().numpy()
    np.testing.assert_array_equal(a, [1.0, 2.0])
    assert a.dtype == np.float32


def test_numpy_shares_memory():
    t = tg.tensor([1.0, 2.0, 3.0])
    a = t.numpy()
    a[0] = 10.0
    assert t.tolist() == [10.0, 2.0, 3.0]
    t.mul_(2)
    np.testing.assert_array_equal(a, [20.0, 4.0, 6.0])


def test_numpy_stays_valid_after_tensor_is_deleted():
    import gc
    t = tg.tensor([1.5, 2.5, 3.5], dtype=tg.float64)
    a = t.numpy()
    del t
    gc.collect()
    tg._engine.state.engine().flush()
    junk = [tg.full((3,), 99.0, dtype=tg.float64) for _ in range(50)]   # reuse freed memory
    np.testing.assert_array_equal(a, [1.5, 2.5, 3.5])
    a[1] = 7.0
    np.testing.assert_array_equal(a, [1.5, 7.0, 3.5])
    assert all(j.tolist() == [99.0, 99.0, 99.0] for j in junk)


def test_item_and_tolist():
    assert tg.tensor(2.5).item() == 2.5
    assert isinstance(tg.tensor(2.5).item(), float)
    assert tg.tensor([3]).item() == 3 and isinstance(tg.tensor([3]).item(), int)
    assert tg.tensor(True).item() is True
    x = tg.tensor([[1.5]], requires_grad=True)
    assert x.item() == 1.5                      # item() is fine on tensors requiring grad
    assert (x * 2).tolist() == [[3.0]]
    assert tg.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert tg.tensor(2.0).tolist() == 2.0
    with pytest.raises(RuntimeError, match="a Tensor with 2 elements cannot be converted to "
                                           "Scalar"):
        tg.tensor([1.0, 2.0]).item()


def test_from_numpy_shares_memory_both_ways():
    a = np.array([1.0, 2.0, 3.0])
    t = tg.from_numpy(a)
    assert t.dtype is tg.float64 and t.shape == (3,)
    a[0] = 10.0
    assert t.tolist() == [10.0, 2.0, 3.0]
    t.add_(1)
    np.testing.assert_array_equal(a, [11.0, 3.0, 4.0])
    assert t._version == 1
    b = np.arange(6, dtype=np.int64).reshape(2, 3)
    u = tg.from_numpy(b)
    assert u.dtype is tg.int64 and u.shape == (2, 3)
    b[1, 2] = 50
    assert u.tolist() == [[0, 1, 2], [3, 4, 50]]
    f = np.zeros((2, 2), np.float32)
    v = tg.from_numpy(f)
    v.fill_(3.0)
    np.testing.assert_array_equal(f, np.full((2, 2), 3.0, np.float32))


def test_from_numpy_leaf_can_require_grad():
    a = np.array([1.0, 2.0])
    t = tg.from_numpy(a).requires_grad_()
    (t * t).sum().backward()
    close(t.grad, [2.0, 4.0], rtol=0)


def test_data_does_not_share_the_version_counter():
    w = tg.tensor(2.0, requires_grad=True)
    x = tg.tensor(3.0)
    y = w * x
    w.data.mul_(2)
    assert w._version == 0
    y.backward()
    assert w.grad.item() == 3.0


# --------------------------------------------------------------------------- grad modes
def _recorded(t):
    return t.requires_grad, t.grad_fn


def test_no_grad_context_records_nothing():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    with tg.no_grad():
        assert not tg.is_grad_enabled()
        outs = [x * 2, x + x, x.exp(), x.sum(), x.view(2, 1), x.unbind()[0], x @ x, -x]
    assert tg.is_grad_enabled()
    for k, y in enumerate(outs):
        # the views (view, unbind) require grad through their base, as in PyTorch
        assert _recorded(y) == (k in (4, 5), None)
        assert y.is_leaf
    close(outs[0], [2.0, 4.0])
    assert (x * 2).requires_grad


def test_no_grad_restores_mode_after_an_exception():
    with pytest.raises(ValueError):
        with tg.no_grad():
            raise ValueError("boom")
    assert tg.is_grad_enabled()


def test_enable_grad_inside_no_grad_records():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    with tg.no_grad():
        with tg.enable_grad():
            assert tg.is_grad_enabled()
            y = x * 2
        assert not tg.is_grad_enabled()
        z = x * 2
    assert y.grad_fn.name() == "MulBackward0" and y.requires_grad
    assert _recorded(z) == (False, None)
    y.sum().backward()
    close(x.grad, [2.0, 2.0])


def test_set_grad_enabled_as_context_and_function():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    with tg.set_grad_enabled(False):
        assert not tg.is_grad_enabled()
        a = x * 2
    assert tg.is_grad_enabled()
    with tg.set_grad_enabled(True):
        b = x * 2
    assert _recorded(a) == (False, None)
    assert b.requires_grad
    try:
        tg.set_grad_enabled(False)
        assert not tg.is_grad_enabled()
        c = x * 2
    finally:
        tg.set_grad_enabled(True)
    assert tg.is_grad_enabled()
    assert _recorded(c) == (False, None)
    with tg.no_grad():
        with tg.set_grad_enabled(True):
            d = x * 2
    assert d.requires_grad


def test_grad_mode_decorators():
    x = tg.tensor([1.0, 2.0], requires_grad=True)

    @tg.no_grad()
    def f(a):
        """doc of f"""
        assert not tg.is_grad_enabled()
        return a * 2

    @tg.enable_grad()
    def g(a):
        return a * 2

    @tg.set_grad_enabled(False)
    def h(a):
        return a * 2

    assert tg.is_grad_enabled()
    assert f.__name__ == "f" and f.__doc__ == "doc of f"
    assert _recorded(f(x)) == (False, None)
    assert tg.is_grad_enabled()
    with tg.no_grad():
        y = g(x)
        assert not tg.is_grad_enabled()
    assert y.grad_fn.name() == "MulBackward0"
    assert _recorded(h(x)) == (False, None)
    assert tg.is_grad_enabled()
    close(f(x), [2.0, 4.0])


def test_grad_modes_match_torch():
    def prog(L):
        x = L.tensor([1.0, 2.0], requires_grad=True)
        out = []
        with L.no_grad():
            out.append((x * 2).requires_grad)
            with L.enable_grad():
                out.append((x * 2).requires_grad)
        with L.set_grad_enabled(False):
            out.append((x * 2).requires_grad)
        out.append(L.no_grad()(lambda: (x * 2).requires_grad)())
        out.append(L.is_grad_enabled())
        return out
    ours, theirs = run_both(prog)
    assert ours == theirs == [False, True, False, False, True]


def test_inference_mode_context_records_nothing():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    with tg.inference_mode():
        assert not tg.is_grad_enabled()
        y = x * 2
    assert _recorded(y) == (False, None)
    close(y, [2.0, 4.0])


def test_inference_mode_decorator_records_nothing():
    x = tg.tensor([1.0, 2.0], requires_grad=True)

    @tg.inference_mode()
    def f(a):
        return a.exp()
    assert _recorded(f(x)) == (False, None)


def test_inference_mode_restores_grad_mode():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    with tg.inference_mode():
        pass
    assert tg.is_grad_enabled()
    assert (x * 2).requires_grad


# --------------------------------------------------------------------------- autograd.grad
def test_autograd_grad_values_and_no_grad_side_effects():
    xs = np.array([0.5, -1.0, 2.0])
    x = tg.tensor(xs, dtype=tg.float64, requires_grad=True)
    w = tg.tensor([1.0, 2.0, 3.0], dtype=tg.float64, requires_grad=True)
    y = (x * w).sin().sum()
    gx, gw = tg.autograd.grad(y, [x, w])
    c = np.cos(xs * np.array([1.0, 2.0, 3.0]))
    close(gx, c * [1.0, 2.0, 3.0], rtol=1e-12)
    close(gw, c * xs, rtol=1e-12)
    assert x.grad is None and w.grad is None
    assert not gx.requires_grad and gx.grad_fn is None


def test_autograd_grad_leaves_existing_grad_untouched():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    (x * 3).sum().backward()
    (g,) = tg.autograd.grad((x * x).sum(), x)
    close(g, [2.0, 4.0])
    close(x.grad, [3.0, 3.0])


def test_autograd_grad_single_input_returns_a_tuple():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    r = tg.autograd.grad((x * x).sum(), x)
    assert isinstance(r, tuple) and len(r) == 1
    close(r[0], [2.0, 4.0])


def test_autograd_grad_outputs():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x * x
    (g,) = tg.autograd.grad(y, x, grad_outputs=tg.tensor([1.0, 10.0]))
    close(g, [2.0, 40.0])
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar "
                                           "outputs"):
        tg.autograd.grad(x * 2, x)


def test_autograd_grad_wrt_a_non_leaf():
    x = tg.tensor([0.5, 1.0], requires_grad=True)
    y = x * x
    z = y.exp().sum()
    gy, gx = tg.autograd.grad(z, [y, x])
    close(gy, np.exp([0.25, 1.0]), rtol=1e-6)
    close(gx, np.exp([0.25, 1.0]) * [1.0, 2.0], rtol=1e-6)
    assert x.grad is None


def test_autograd_grad_unused_input():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    u = tg.tensor([5.0], requires_grad=True)
    y = (x * x).sum()
    with pytest.raises(RuntimeError) as ei:
        tg.autograd.grad(y, [x, u], retain_graph=True)
    assert str(ei.value) == ("The differentiated Tensor at index 1 appears to not have been "
                             "used in the graph. Set allow_unused=True if this is the desired "
                             "behavior.")
    gx, gu = tg.autograd.grad(y, [x, u], allow_unused=True)
    close(gx, [2.0, 4.0])
    assert gu is None
    assert x.grad is None and u.grad is None


def test_autograd_grad_retain_graph():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    (g1,) = tg.autograd.grad(y, x, retain_graph=True)
    (g2,) = tg.autograd.grad(y, x)
    close(g1, [2.0, 4.0])
    close(g2, [2.0, 4.0])
    with pytest.raises(RuntimeError, match=SECOND_MSG):
        tg.autograd.grad(y, x)


def test_autograd_grad_input_not_requiring_grad():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="One of the differentiated Tensors does not "
                                           "require grad"):
        tg.autograd.grad((x * 2).sum(), tg.ones(2))


def test_autograd_grad_matches_torch():
    def prog(L):
        x = L.tensor([0.5, -1.0, 2.0], dtype=L.float64, requires_grad=True)
        w = L.tensor([[1.0, 2.0], [0.5, -1.0], [3.0, 0.25]], dtype=L.float64,
                     requires_grad=True)
        h = (x @ w).tanh()
        z = (h * h).sum() + (x.exp() / (1 + x * x)).sum()
        gx, gw = L.autograd.grad(z, [x, w])
        return vals(gx), vals(gw)
    (a, b), (c, d) = run_both(prog)
    np.testing.assert_allclose(a, c, rtol=1e-12)
    np.testing.assert_allclose(b, d, rtol=1e-12)


# --------------------------------------------------------------------------- deep graphs
N_DEEP = 100_000


def test_deep_chain_of_multiplications():
    x = tg.tensor(1.0, dtype=tg.float64, requires_grad=True)
    y = x
    for _ in range(N_DEEP):
        y = y * 1.0001
    y.backward()
    expected = 1.0001 ** N_DEEP
    assert y.item() == pytest.approx(expected, rel=1e-9)
    assert x.grad.item() == pytest.approx(expected, rel=1e-9)


def test_deep_chain_reusing_a_leaf():
    x = tg.tensor(1.0, requires_grad=True)
    y = x
    for _ in range(N_DEEP):
        y = y + x
    y.backward()
    assert x.grad.item() == N_DEEP + 1
    assert y.item() == N_DEEP + 1


def test_deep_chain_with_autograd_grad_and_a_non_leaf():
    x = tg.tensor([1.0, 2.0], dtype=tg.float64, requires_grad=True)
    h = x * 1.0
    y = h
    for _ in range(N_DEEP // 2):
        y = y - h * 0.00001
    (g,) = tg.autograd.grad(y.sum(), h)
    assert g.tolist() == pytest.approx([1 - 0.5] * 2, rel=1e-9)
    assert x.grad is None


@pytest.mark.parametrize("dtype", [tg.float32, tg.float64])
def test_inplace_op_whose_gradient_needs_self_as_it_was(dtype):
    """y.mul_(w) / y.div_(w) with w requiring grad: w's gradient reads y before the write,
    so the op saves a copy of it (made by a kernel compiled on first need, then retried)."""
    x = tg.tensor([1.0, 2.0, -3.0], dtype=dtype, requires_grad=True)
    w = tg.tensor([4.0, 5.0, 0.5], dtype=dtype, requires_grad=True)
    y = x * 1
    y.mul_(w)               # y = x*w, dw = x (y as it was)
    y.div_(w * w)           # y = x/w, d(w*w) = -y_before / (w*w)^2 = -x*w / w^4
    assert y.grad_fn.name() == "DivBackward0"
    y.sum().backward()
    xv, wv = np.array([1.0, 2.0, -3.0]), np.array([4.0, 5.0, 0.5])
    np.testing.assert_allclose(y.detach().numpy(), xv / wv, rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), 1 / wv, rtol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), -xv / wv ** 2, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fresh_gradient_buffers_are_written_not_added(dtype):
    """The first elementwise writer of a new gradient buffer gets it unzeroed and writes
    every element (no memset); freed memory full of NaN must never reach a gradient.
    Covered: a leaf read twice by one op (x * x: written, then added), an intermediate
    read by two ops, a broadcast input (not dense: zeroed and added) and an existing
    .grad (added)."""
    n = 40_000
    rng = np.random.default_rng(11)
    x0 = rng.standard_normal(n).astype(dtype)
    w0 = np.array([0.7], dtype)
    for step in range(3):
        for _ in range(4):          # freed blocks of the gradients' size, full of NaN
            junk = tg.tensor(np.full(n, np.nan, dtype)) * 1.0
            del junk
        x = tg.tensor(x0, requires_grad=True)
        w = tg.tensor(w0, requires_grad=True)
        t = x.exp()
        y = t * t + t + x * x + tg.sin(x) * w
        y.sum().backward()
        e = np.exp(x0.astype(np.float64))
        gx = 2 * e * e + e + 2 * x0 + np.cos(x0) * w0[0]
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(x.grad.numpy(), gx, rtol=tol, atol=tol * abs(gx).max())
        np.testing.assert_allclose(w.grad.numpy(), [np.sin(x0.astype(np.float64)).sum()],
                                   rtol=tol * 100)
        before = x.grad.numpy().copy()
        (x * 3.0).sum().backward()                  # into the existing .grad: added
        np.testing.assert_array_equal(x.grad.numpy(), (before + dtype(3.0)).astype(dtype))
