"""PyTorch's in-place rules that a differential fuzz found missing or extra:
- an output of split/chunk/unbind goes stale once its base (or anything sharing its
  version counter) is written: using it where a gradient could flow is refused;
- fill_/zero_ may write an expanded tensor (its elements share memory), other in-place
  ops may not;
- prod and gather save what PyTorch saves, so a later write into it is refused at
  backward.
Each is checked in tapegrad with exact messages and values, and against PyTorch."""
import numpy as np
import pytest

import tapegrad as tg

MULTI = ("Output {k} of {name} is a view and its base or another view of its base has been "
         "modified inplace. This view is the output of a function that returns multiple "
         "views. Such functions do not allow the output views to be modified inplace. You "
         "should replace the inplace operation by an out-of-place one.")
VERSION = "one of the variables needed for gradient computation has been modified by an inplace"


def outcome(fn):
    try:
        r = fn()
        return ("ok", r.tolist() if hasattr(r, "tolist") else r)
    except RuntimeError as e:
        return ("RuntimeError", str(e))


# ------------------------------------------------------------------ multi-view outputs
def test_split_outputs_go_stale_when_their_base_is_written():
    a = tg.arange(4., requires_grad=True)
    b = a * 1
    p, q = b.split(2)
    b.add_(1)
    msg = MULTI.format(k=1, name="Split")
    for use in (lambda: q.grad_fn, lambda: q * 2, lambda: q[0], lambda: q.retain_grad(),
                lambda: q.is_leaf):
        with pytest.raises(RuntimeError) as ei:
            use()
        assert str(ei.value) == msg
    assert q.requires_grad
    assert repr(q) == "tensor([3., 4.], grad_fn=<Invalid>)"
    with tg.no_grad():
        assert (q * 2).tolist() == [6., 8.]
    assert q.detach().tolist() == [3., 4.]
    b.sum().backward()                          # the base's own history is intact
    assert a.grad.tolist() == [1., 1., 1., 1.]


@pytest.mark.parametrize("how", ["unbind", "chunk", "split_with_sizes"])
@pytest.mark.parametrize("write", ["base", "no_grad", "detach", "sibling_view"])
def test_multi_view_outputs_go_stale_on_any_write(how, write):
    a = tg.arange(4., requires_grad=True)
    b = a * 1
    outs = {"unbind": lambda: b.unbind(), "chunk": lambda: b.chunk(2),
            "split_with_sizes": lambda: b.split([1, 3])}[how]()
    if write == "base":
        b.mul_(2)
    elif write == "no_grad":
        with tg.no_grad():
            b.add_(1)
    elif write == "detach":
        b.detach().add_(1)
    else:
        b[0:1].mul_(2)
    name = {"unbind": "Unbind", "chunk": "Split", "split_with_sizes": "SplitWithSizes"}[how]
    with pytest.raises(RuntimeError) as ei:
        outs[-1] * 2
    assert str(ei.value) == MULTI.format(k=len(outs) - 1, name=name)


def test_stale_multi_view_outputs_are_refused_as_roots_and_inputs_and_pass_it_on():
    a = tg.arange(4., requires_grad=True)
    y = a * 1
    s3, s4 = y.chunk(2)
    x = s4.view(2)                              # a view of one follows its rules
    w = s4[1:]
    with pytest.raises(RuntimeError) as ei:
        w.add_(1)
    assert str(ei.value) == MULTI.format(k=0, name="Slice").replace(
        "its base or another view of its base has been modified", "is being modified")
    s4.retain_grad()
    y.mul_(2)
    s4.retain_grad()                            # already retained: a no-op, as in PyTorch
    msg = MULTI.format(k=1, name="Split")
    for use in (lambda: s4.backward(tg.ones(2)), lambda: s4.sum(),
                lambda: tg.autograd.grad(y.sum(), [s4])):
        with pytest.raises(RuntimeError) as ei:
            use()
        assert str(ei.value) == msg
    with pytest.raises(RuntimeError) as ei:
        x.grad_fn
    assert str(ei.value) == MULTI.format(k=0, name="View")
    with tg.no_grad():
        z = s3[0:1]                             # made under no_grad: that rule instead
    y.add_(1)
    with pytest.raises(RuntimeError, match="A view was created in no_grad mode"):
        z.grad_fn


def test_views_of_multi_view_outputs_match_torch():
    torch = pytest.importorskip("torch")

    def prog(L):
        a = L.arange(4., requires_grad=True)
        b = a * 1
        u, v = b.split(2)
        x, w = v.view(2), v[1:]
        out = [outcome(lambda: w.add_(1))]
        v.retain_grad()
        b.mul_(2)
        out += [outcome(lambda: v.retain_grad()), outcome(lambda: x.grad_fn and None),
                outcome(lambda: w.grad_fn and None), outcome(lambda: v.backward(L.ones(2))),
                outcome(lambda: L.autograd.grad(b.sum(), [v])),
                outcome(lambda: b.unbind()[2].unsqueeze(0)[0:1].add_(1))]
        return out
    assert prog(tg) == prog(torch)


def test_multi_view_outputs_without_a_write_stay_usable():
    a = tg.arange(4., dtype=tg.float64, requires_grad=True)
    p, q = (a * 1).split(2)
    c = a * 3
    c.add_(1)                                   # another tensor's write: no effect
    (p * 2 + q * 3).sum().backward()
    assert a.grad.tolist() == [2., 2., 3., 3.]


def _multi_view_program(L):
    out = []
    for how in ("split", "unbind", "chunk"):
        for write in ("base", "no_grad", "detach"):
            a = L.arange(4., requires_grad=True)
            b = a * 1
            outs = getattr(b, how)(2) if how != "unbind" else b.unbind()
            if write == "base":
                b.add_(1)
            elif write == "no_grad":
                with L.no_grad():
                    b.add_(1)
            else:
                b.detach().add_(1)
            v = outs[1]
            out += [outcome(lambda: v.grad_fn and None), outcome(lambda: v * 2),
                    outcome(lambda: v.detach()), repr(v).replace("tapegrad", "torch"),
                    v.requires_grad, outcome(lambda: b.sum().backward())]
    return out


def test_multi_view_outputs_match_torch():
    torch = pytest.importorskip("torch")
    assert _multi_view_program(tg) == _multi_view_program(torch)


# ------------------------------------------------------------------ fill_ / zero_
def test_fill_and_zero_write_an_expanded_tensor():
    z = tg.zeros(1).expand(3)
    z.fill_(2.)
    assert z.tolist() == [2., 2., 2.]
    z.zero_()
    assert z.tolist() == [0., 0., 0.]
    x = tg.tensor([3.], requires_grad=True)
    with tg.no_grad():
        x.expand(2, 2).fill_(7.)
    assert x.tolist() == [7.]
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor "
                                           "refers to a single memory location"):
        z.add_(1)
    # with a history, PyTorch takes the write and refuses its backward (CopySlices writes
    # the gradient through the expanded view): tapegrad refuses the write itself
    with pytest.raises(RuntimeError, match="more than one element"):
        (x * 1).expand(3).fill_(5.)
    with pytest.raises(RuntimeError, match="more than one element"):
        (x * 1).expand(2).mul_(2)


def test_fill_on_expanded_matches_torch():
    torch = pytest.importorskip("torch")

    def prog(L):
        z = L.zeros(1, 2).expand(3, 2)
        z.fill_(2.)
        a = z.tolist()
        z.zero_()
        x = L.tensor([3.], requires_grad=True)
        with L.no_grad():
            x.expand(2, 2).fill_(7.)
        return a, z.tolist(), x.tolist(), outcome(lambda: L.zeros(1).expand(2).add_(1))
    assert prog(tg) == prog(torch)


# ------------------------------------------------------------------ saved tensors
def test_prod_and_gather_refuse_a_later_write_into_what_they_save():
    x = tg.tensor([1., -2., 3.], requires_grad=True)
    p = x.prod()
    p.add_(1)
    with pytest.raises(RuntimeError, match=VERSION):
        p.backward()
    q = x.reshape(1, 3).prod(1)
    q.mul_(2)
    with pytest.raises(RuntimeError, match=VERSION):
        q.sum().backward()
    y = x * 1
    g = y.gather(0, tg.tensor([0, 2]))
    y.add_(1)
    with pytest.raises(RuntimeError, match=VERSION):
        g.sum().backward()
    x.grad = None
    x.prod().backward()                         # unmodified: PyTorch's gradient
    assert np.allclose(x.grad.numpy(), [-6., 3., -2.])


def test_saved_tensor_refusals_match_torch():
    torch = pytest.importorskip("torch")

    def prog(L):
        out = []
        for k in range(3):
            x = L.tensor([1., -2., 3.], requires_grad=True)
            y = x * 1
            r = [y.prod(), y.reshape(1, 3).prod(1), y.gather(0, L.tensor([0, 2]))][k]
            (y if k == 2 else r).add_(1)
            res = outcome(lambda: r.sum().backward())
            out.append((res[0], (res[1] or "")[:len(VERSION)]))
        return out
    assert prog(tg) == prog(torch)
    assert all(r == ("RuntimeError", VERSION) for r in prog(tg))


INDEXING = {
    "gather": (lambda L, x, i: x.gather(1, i), lambda L: L.tensor([[0], [1]]), "Long", "[2, 1]"),
    "index_select": (lambda L, x, i: x.index_select(0, i), lambda L: L.tensor([1, 0]), "Long",
                     "[2]"),
    "x[idx]": (lambda L, x, i: x[i], lambda L: L.tensor([1, 0]), "Long", "[2]"),
    "x[idx, idx]": (lambda L, x, i: x[i, i], lambda L: L.tensor([1, 0]), "Long", "[2]"),
    "x[idx, j]": (lambda L, x, i: x[i, L.tensor([0, 1])], lambda L: L.tensor([1, 0]), "Long",
                  "[2]"),
    "x[j, idx]": (lambda L, x, i: x[L.tensor([0, 1]), i], lambda L: L.tensor([1, 0]), "Long",
                  "[2]"),
    "x[j, idx] 2-d": (lambda L, x, i: x[L.tensor([[0], [1]]), i],
                      lambda L: L.tensor([[1, 0], [0, 1]]), "Long", "[2, 2]"),
    "x[idx 2-d]": (lambda L, x, i: x[i], lambda L: L.tensor([[1, 0]]), "Long", "[1, 2]"),
    "masked_select": (lambda L, x, m: x.masked_select(m),
                      lambda L: L.tensor([[True, False], [False, True]]), "Bool", "[2, 2]"),
    "x[mask]": (lambda L, x, m: x[m], lambda L: L.tensor([[True, False], [False, True]]),
                "Bool", "[2, 2]"),
    "masked_fill": (lambda L, x, m: x.masked_fill(m, 0.5),
                    lambda L: L.tensor([[True, False], [False, True]]), "Bool", "[2, 2]"),
    "masked_fill broadcast": (lambda L, x, m: x.masked_fill(m, 0.5),
                              lambda L: L.tensor([[True], [False]]), "Bool", "[2, 1]"),
    "masked_fill_": (lambda L, x, m: (x * 1).masked_fill_(m, 0.5),
                     lambda L: L.tensor([[True, False], [False, True]]), "Bool", "[2, 2]"),
}


@pytest.mark.parametrize("name", sorted(INDEXING))
def test_an_index_written_after_the_op_is_refused_at_backward(name):
    """gather, index_select, x[idx], masked_select and masked_fill save the index or
    mask tensor, as PyTorch does: writing into it before the backward is refused with the
    version message (the kernels read positions or a 0/1 copy Python made, so the
    gradient would still be right; PyTorch refuses, so tapegrad does). Their
    next_functions hold the input only.
    With several index tensors, the first two are version-checked (the second through
    the saved positions, which count versions with its counter)."""
    f, make, kind, shape = INDEXING[name]
    x = tg.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    i = make(tg)
    y = f(tg, x, i)
    assert len(y.grad_fn.next_functions) == 1
    if i.dtype is tg.bool:
        i[0, 0] = False
    else:
        i.add_(0)
    with pytest.raises(RuntimeError) as e:
        y.sum().backward()
    assert str(e.value).startswith(f"{VERSION} operation: [tapegrad.{kind}Tensor {shape}] is "
                                   "at version 1; expected version 0 instead.")


@pytest.mark.parametrize("name", sorted(INDEXING))
def test_index_refusals_match_pytorch(name):
    torch = pytest.importorskip("torch")
    f, make, kind, _ = INDEXING[name]
    got = []
    for L in (tg, torch):
        x = L.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        i = make(L)
        y = f(L, x, i)
        if i.dtype == L.bool:
            i[0, 0] = False
        else:
            i.add_(0)
        got.append(outcome(lambda: y.sum().backward())[0])
    assert got[0] == got[1]
