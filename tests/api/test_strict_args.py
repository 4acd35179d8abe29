"""Arguments are never swallowed (issue 35, items 2 and 4): every public callable refuses
what it does not know with a TypeError, PyTorch's legacy size_average/reduce arguments
give PyTorch's reduction and warning, and bad values PyTorch refuses are refused here
too (with PyTorch's exception type), instead of being ignored or crashing with an
AttributeError."""
import inspect
import random
import string
import warnings

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn as nn
import tapegrad.nn.functional as F


def _t(values, dtype=None):
    return tg.tensor(values, dtype=dtype or tg.float32)


LOGITS = [[0.2, -1.0, 0.5], [1.5, 0.3, -0.7], [0.0, 0.1, 0.2], [-0.4, 2.0, 1.0]]
CLASSES = [2, 0, 1, 1]
PRED = [[0.5, -1.5, 2.0], [0.25, 3.0, -0.5]]
GOAL = [[1.0, -1.0, 0.0], [0.0, 2.5, 1.0]]
PROBS = [[0.2, 0.7, 0.9], [0.4, 0.1, 0.6]]
BITS = [[0.0, 1.0, 1.0], [1.0, 0.0, 1.0]]
LEGACY = "size_average and reduce args will be deprecated, please use reduction='{}' instead."


def _legacy_cases():
    """(size_average, reduce, the reduction PyTorch resolves them to)."""
    return [(False, None, "sum"), (None, False, "none"), (True, False, "none"),
            (False, True, "sum"), (True, True, "mean"), (True, None, "mean"),
            (False, False, "none")]


# (name, inputs as lists, F function, module class, module kwargs, whether the F function
# takes size_average/reduce: HuberLoss and GaussianNLLLoss do not, in PyTorch either)
LOSSES = [
    ("mse_loss", (PRED, GOAL), "MSELoss", {}),
    ("l1_loss", (PRED, GOAL), "L1Loss", {}),
    ("smooth_l1_loss", (PRED, GOAL), "SmoothL1Loss", {"beta": 0.5}),
    ("binary_cross_entropy", (PROBS, BITS), "BCELoss", {}),
    ("binary_cross_entropy_with_logits", (PRED, BITS), "BCEWithLogitsLoss", {}),
    ("soft_margin_loss", (PRED, [[1.0, -1.0, 1.0], [-1.0, 1.0, 1.0]]), "SoftMarginLoss", {}),
    ("poisson_nll_loss", (PRED, [[1.0, 0.0, 2.0], [3.0, 1.0, 0.0]]), "PoissonNLLLoss", {}),
    ("kl_div", (PRED, PROBS), "KLDivLoss", {}),
]


def _class_inputs(lib):
    return lib.tensor(LOGITS), lib.tensor(CLASSES)


# ------------------------------------------------------------------ legacy reduction
@pytest.mark.parametrize("size_average, reduce, resolved", _legacy_cases())
@pytest.mark.parametrize("name, inputs, module, kwargs", LOSSES)
def test_legacy_reduction_of_functions_and_modules(name, inputs, module, kwargs,
                                                   size_average, reduce, resolved):
    torch = pytest.importorskip("torch")
    fn, tfn = getattr(F, name), getattr(torch.nn.functional, name)
    a, b = (_t(v) for v in inputs)
    ta, tb = (torch.tensor(v) for v in inputs)
    legacy = dict(size_average=size_average, reduce=reduce)
    with pytest.warns(UserWarning, match=LEGACY.format(resolved).replace("(", r"\(")):
        got = fn(a, b, **legacy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = tfn(ta, tb, **legacy)
        by_name = fn(a, b, reduction=resolved)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got.numpy(), by_name.numpy(), rtol=0, atol=0)
    # the module resolves them at construction, with the warning pointing at the caller
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = getattr(nn, module)(**legacy, **kwargs)
        tm = getattr(torch.nn, module)(**legacy, **kwargs)
    assert m.reduction == tm.reduction == resolved
    ours = [w for w in caught if "size_average" in str(w.message)
            and w.filename.endswith("test_strict_args.py")]
    assert len(ours) >= 1 and str(ours[0].message) == LEGACY.format(resolved)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.testing.assert_allclose(m(a, b).numpy(), tm(ta, tb).numpy(), rtol=1e-6, atol=1e-7)


def test_mse_loss_size_average_false_is_the_sum():
    torch = pytest.importorskip("torch")
    x, y = _t(PRED), _t(GOAL)
    with pytest.warns(UserWarning, match=r"please use reduction='sum' instead\."):
        got = nn.MSELoss(size_average=False)(x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = torch.nn.MSELoss(size_average=False)(torch.tensor(PRED), torch.tensor(GOAL))
    assert got.shape == () and got.item() == pytest.approx(want.item(), rel=1e-6)
    assert got.item() == pytest.approx(float(((np.array(PRED) - GOAL) ** 2).sum()), rel=1e-6)


@pytest.mark.parametrize("cls", ["CrossEntropyLoss", "NLLLoss"])
def test_class_losses_reduce_false_give_per_sample_losses(cls):
    torch = pytest.importorskip("torch")
    (x, t), (tx, tt) = _class_inputs(tg), _class_inputs(torch)
    if cls == "NLLLoss":
        x, tx = x.log_softmax(1), tx.log_softmax(1)
    weight = [1.0, 2.0, 0.5]
    with pytest.warns(UserWarning, match=r"please use reduction='none' instead\."):
        m = getattr(nn, cls)(_t(weight), reduce=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tm = getattr(torch.nn, cls)(torch.tensor(weight), reduce=False)
    got, want = m(x, t), tm(tx, tt)
    assert got.shape == (4,)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-6)
    # the functional spelling, PyTorch's positional order:
    # (input, target, weight, size_average, ignore_index, reduce, reduction[, smoothing])
    fn = getattr(F, cls == "NLLLoss" and "nll_loss" or "cross_entropy")
    tfn = getattr(torch.nn.functional, cls == "NLLLoss" and "nll_loss" or "cross_entropy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for args in ((None, False, 1, None, "mean"), (None, None, 1, False, "mean"),
                     (None, None, 0, None, "sum")):
            np.testing.assert_allclose(fn(x, t, *args).numpy(),
                                       tfn(tx, tt, *args).detach().numpy(), rtol=1e-6)


def test_cross_entropy_positional_label_smoothing_matches_torch():
    torch = pytest.importorskip("torch")
    (x, t), (tx, tt) = _class_inputs(tg), _class_inputs(torch)
    got = F.cross_entropy(x, t, _t([1.0, 2.0, 0.5]), None, 1, None, "sum", 0.2)
    want = torch.nn.functional.cross_entropy(tx, tt, torch.tensor([1.0, 2.0, 0.5]), None, 1,
                                             None, "sum", 0.2)
    assert got.item() == pytest.approx(want.item(), rel=1e-6)
    with pytest.raises(TypeError):      # one positional argument too many, as in PyTorch
        F.cross_entropy(x, t, None, None, -100, None, "mean", 0.0, 3)
    with pytest.raises(TypeError):
        torch.nn.functional.cross_entropy(tx, tt, None, None, -100, None, "mean", 0.0, 3)


def test_kl_div_legacy_arguments_skip_the_mean_warning():
    torch = pytest.importorskip("torch")
    a, b = _t(PRED), _t(PROBS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = F.kl_div(a, b, size_average=True)
    assert [str(w.message) for w in caught] == [LEGACY.format("mean")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = torch.nn.functional.kl_div(torch.tensor(PRED), torch.tensor(PROBS),
                                          size_average=True)
    assert got.item() == pytest.approx(want.item(), rel=1e-6)


ALL_LOSS_MODULES = ["MSELoss", "L1Loss", "HuberLoss", "SmoothL1Loss", "BCELoss",
                    "BCEWithLogitsLoss", "NLLLoss", "CrossEntropyLoss", "KLDivLoss",
                    "SoftMarginLoss", "PoissonNLLLoss", "GaussianNLLLoss",
                    "CosineEmbeddingLoss", "MarginRankingLoss"]


@pytest.mark.parametrize("cls", ALL_LOSS_MODULES)
def test_loss_modules_refuse_misspelt_and_unknown_keywords(cls):
    for kw in ({"reductoin": "sum"}, {"size_avg": False}, {"weights": None}, {"foo": 1}):
        with pytest.raises(TypeError, match=r"__init__\(\) got an unexpected keyword argument "
                                            f"'{next(iter(kw))}'"):
            getattr(nn, cls)(**kw)


@pytest.mark.parametrize("name", ["mse_loss", "l1_loss", "huber_loss", "smooth_l1_loss",
                                  "binary_cross_entropy", "soft_margin_loss", "cross_entropy",
                                  "nll_loss", "kl_div", "poisson_nll_loss"])
def test_loss_functions_refuse_misspelt_reduction(name):
    x, y = ((_t(LOGITS), tg.tensor(CLASSES)) if name in ("cross_entropy", "nll_loss")
            else (_t(PROBS), _t(BITS)))
    with pytest.raises(TypeError, match="unexpected keyword argument 'reductoin'"):
        getattr(F, name)(x, y, reductoin="sum")


@pytest.mark.parametrize("name", ["mse_loss", "l1_loss", "huber_loss", "smooth_l1_loss",
                                  "cross_entropy", "soft_margin_loss", "poisson_nll_loss",
                                  "margin_ranking_loss"])
def test_invalid_reduction_is_pytorchs_value_error(name):
    torch = pytest.importorskip("torch")
    if name in ("cross_entropy",):
        args, targs = _class_inputs(tg), _class_inputs(torch)
    elif name == "margin_ranking_loss":
        args = (_t([1.0, 2.0]), _t([0.5, 3.0]), _t([1.0, -1.0]))
        targs = tuple(torch.tensor(a.tolist()) for a in args)
    else:
        args, targs = (_t(PROBS), _t(BITS)), (torch.tensor(PROBS), torch.tensor(BITS))
    # (None too, but not for poisson_nll_loss: PyTorch's message adds None to a string)
    for bad in ("summ", "Mean") + ((None,) if name != "poisson_nll_loss" else ()):
        with pytest.raises(ValueError) as ours:
            getattr(F, name)(*args, reduction=bad)
        with pytest.raises(ValueError) as theirs:
            getattr(torch.nn.functional, name)(*targs, reduction=bad)
        assert str(ours.value) == str(theirs.value) == f"{bad} is not a valid value for reduction"
    # a module keeps the name and refuses it when computing, as PyTorch's
    m = nn.MSELoss(reduction="summ")
    with pytest.raises(ValueError, match="summ is not a valid value for reduction"):
        m(_t(PROBS), _t(BITS))


def test_elementwise_mean_is_a_deprecated_mean():
    torch = pytest.importorskip("torch")
    with pytest.warns(UserWarning, match="reduction='elementwise_mean' is deprecated"):
        got = F.mse_loss(_t(PRED), _t(GOAL), reduction="elementwise_mean")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = torch.nn.functional.mse_loss(torch.tensor(PRED), torch.tensor(GOAL),
                                            reduction="elementwise_mean")
    assert got.item() == pytest.approx(want.item(), rel=1e-6)


@pytest.mark.parametrize("name", ["mse_loss", "l1_loss", "huber_loss"])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_regression_loss_weights_are_applied_as_pytorch_does(name, reduction):
    """weight= used to be accepted and ignored by mse_loss and huber_loss."""
    torch = pytest.importorskip("torch")
    w = [[1.0, 2.0, 0.0], [3.0, 0.5, 1.0]]
    x = tg.tensor(PRED, requires_grad=True)
    tx = torch.tensor(PRED, requires_grad=True)
    wt, twt = tg.tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
    got = getattr(F, name)(x, _t(GOAL), reduction=reduction, weight=wt)
    want = getattr(torch.nn.functional, name)(tx, torch.tensor(GOAL), reduction=reduction,
                                              weight=twt)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
    got.sum().backward()
    want.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(wt.grad.numpy(), twt.grad.numpy(), rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="Weights and input must have the same size."):
        getattr(F, name)(x, _t(GOAL), weight=_t([1.0, 2.0, 3.0]))


# ------------------------------------------------------------------ bad values (item 4)
def test_requires_grad_takes_a_bool_only():
    torch = pytest.importorskip("torch")
    for bad in (3, 1, None, "yes", np.True_, 1.0):
        with pytest.raises(TypeError) as ours:
            tg.ones(2).requires_grad_(bad)
        with pytest.raises(TypeError) as theirs:
            torch.ones(2).requires_grad_(bad)
        assert str(ours.value).replace("tapegrad", "torch") == str(theirs.value)
        t = tg.ones(2)
        with pytest.raises(RuntimeError, match="requires_grad must be a bool"):
            t.requires_grad = bad
        assert not t.requires_grad
    assert tg.ones(2).requires_grad_(True).requires_grad
    assert tg.ones(2).requires_grad_(requires_grad=True).requires_grad


def test_backward_gradient_must_be_a_tensor():
    torch = pytest.importorskip("torch")
    for bad, message in ((1.0, "'float' object is not iterable"),
                         ([1.0], "gradients can be either Tensors or None, but got float"),
                         (("a",), "gradients can be either Tensors or None, but got str")):
        x, tx = tg.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
        y, ty = (x * 2).sum(), (tx * 2).sum()
        with pytest.raises(TypeError) as ours:
            y.backward(gradient=bad)
        with pytest.raises(TypeError) as theirs:
            ty.backward(gradient=bad)
        assert str(ours.value) == str(theirs.value) == message
        with pytest.raises(TypeError):
            tg.autograd.backward([y], grad_tensors=bad)
        assert x.grad is None
    x = tg.ones(2, requires_grad=True)
    (x * 2).sum().backward(gradient=tg.tensor(3.0))
    assert x.grad.tolist() == [6.0, 6.0]


def test_deprecated_backward_and_grad_arguments():
    x = tg.ones(2, requires_grad=True)
    with pytest.warns(FutureWarning, match="`grad_variables` is deprecated"):
        tg.autograd.backward([(x * 3).sum()], grad_variables=[tg.tensor(2.0)])
    assert x.grad.tolist() == [6.0, 6.0]
    with pytest.raises(RuntimeError, match="both passed to `backward\\(\\)`"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tg.autograd.backward([(x * 3).sum()], [tg.tensor(1.0)], grad_variables=[tg.tensor(1.0)])
    with pytest.warns(FutureWarning, match="only_inputs argument is deprecated"):
        (g,) = tg.autograd.grad((x * 5).sum(), [x], only_inputs=False)
    assert g.tolist() == [5.0, 5.0]
    with pytest.raises(NotImplementedError, match="is_grads_batched"):
        tg.autograd.grad((x * 5).sum(), [x], is_grads_batched=True)


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_refuse_dim_none(name):
    torch = pytest.importorskip("torch")
    x, tx = _t(LOGITS), torch.tensor(LOGITS)
    for call in (lambda L, t: getattr(t, name)(dim=None), lambda L, t: getattr(t, name)(None),
                 lambda L, t: getattr(L, name)(t, None),
                 lambda L, t: getattr(t, name)(keepdim=True)):
        with pytest.raises(TypeError):
            call(tg, x)
        with pytest.raises(TypeError):
            call(torch, tx)
    assert getattr(x, name)().item() == pytest.approx(getattr(tx, name)().item())
    np.testing.assert_allclose(getattr(x, name)(1, True).values.numpy(),
                               getattr(tx, name)(1, True).values.numpy())


def test_dim_none_refused_where_pytorch_refuses_it():
    torch = pytest.importorskip("torch")
    x, tx = _t(LOGITS), torch.tensor(LOGITS)
    for call in (lambda t: t.prod(dim=None), lambda t: t.prod(None), lambda t: t.cumsum(None),
                 lambda t: t.logsumexp(None), lambda t: t.softmax(None)):
        with pytest.raises(TypeError):
            call(tx)
        with pytest.raises(TypeError):
            call(x)
    for call in (lambda t: t.sum(dim=None), lambda t: t.mean(None), lambda t: t.argmax(None)):
        assert call(x).item() == pytest.approx(call(tx).item())


# Non-tensors where a tensor is expected: PyTorch's TypeError, never an AttributeError
# ("'NoneType' object has no attribute '_i'" from tapegrad.argmax(None), ...).
def _public_functions(module):
    return sorted(n for n in dir(module) if not n.startswith("_")
                  and callable(getattr(module, n)) and not inspect.isclass(getattr(module, n))
                  and not inspect.ismodule(getattr(module, n)))


# Taking no tensor first, or not ours to fix here: the factories (tensor, zeros, ...) and
# is_tensor take any object; *_like and split, squeeze, unsqueeze, select, nonzero, where,
# narrow, gather, index_select, chunk, masked_*, cat, stack live in _creation.py and
# _indexing.py (their owners fold the same check in).
_NO_TENSOR_FIRST = {"arange", "as_tensor", "empty", "eye", "from_numpy", "full", "linspace",
                    "manual_seed", "ones", "rand", "randint", "randn", "tensor", "zeros",
                    "is_tensor", "compile", "save", "load", "set_num_threads",
                    "get_num_threads", "is_grad_enabled", "no_grad", "enable_grad",
                    "inference_mode", "set_grad_enabled", "promote_types", "einsum",
                    "result_type", "cat", "concat", "concatenate", "stack",
                    "set_printoptions", "logspace", "broadcast_shapes"}
_OWNED_ELSEWHERE = {"empty_like", "zeros_like", "ones_like", "full_like", "rand_like",
                    "randn_like", "split", "squeeze", "unsqueeze", "select", "nonzero",
                    "where", "narrow", "gather", "index_select", "chunk", "masked_fill",
                    "masked_select"}


@pytest.mark.parametrize("name", [n for n in _public_functions(tg)
                                  if n not in _NO_TENSOR_FIRST | _OWNED_ELSEWHERE])
def test_a_non_tensor_input_is_a_type_error(name):
    fn = getattr(tg, name)
    x = _t(LOGITS)
    for bad in (None, "abc", 3.5):
        for args in ((bad,), (bad, x), (bad, 0), (bad, x, x), (bad, 0, 1)):
            try:
                fn(*args)
            except (TypeError, ValueError, RuntimeError, IndexError, NotImplementedError):
                pass            # (refused: the point is that it is not an AttributeError)
            except AttributeError as exc:
                pytest.fail(f"{name}{args!r}: AttributeError {exc}")


def test_the_issue_examples_are_pytorchs_type_errors():
    torch = pytest.importorskip("torch")
    x, tx = _t(LOGITS), torch.tensor(LOGITS)
    for call in (lambda L, t: L.argmax(None), lambda L, t: L.exp(None),
                 lambda L, t: L.atan2(None, t), lambda L, t: L.mul(None, t),
                 lambda L, t: t.mul(None), lambda L, t: t.pow("a"), lambda L, t: t.eq(None),
                 lambda L, t: t.maximum(None), lambda L, t: t.type_as(None),
                 lambda L, t: t.view_as(None), lambda L, t: t.expand_as(3),
                 lambda L, t: L.dot(None, t[0]), lambda L, t: t.mm(None),
                 lambda L, t: L.logical_xor(None, t), lambda L, t: t.add_(None),
                 lambda L, t: t.fmod(None), lambda L, t: L.nn.functional.relu(None)):
        with pytest.raises(TypeError) as ours:
            call(tg, x)
        with pytest.raises(TypeError):
            call(torch, tx)
        assert "object has no attribute" not in str(ours.value)
    # the operators still return NotImplemented, so Python decides (x == None is False)
    assert (x == None) is False and (x != None) is True  # noqa: E711
    with pytest.raises(TypeError):
        x * "a"
    with pytest.raises(TypeError, match="takes no arguments"):
        x.clone().zero_(3)
    with pytest.raises(TypeError):
        x.clone().mul_()


# dtype arguments: PyTorch's outcome for each (the same result dtype, or the same
# exception type). tapegrad.tensor/zeros/arange/... take dtype too: they are creation.py's
# (its owner makes them take float/int/bool as PyTorch does), left out here.
_DTYPE_CALLS = [
    "x.to({d})", "x.to(dtype={d})", "x.to('cpu', {d})", "x.sum(dtype={d})",
    "x.sum(0, dtype={d})", "x.mean(dtype={d})", "x.prod(dtype={d})", "x.prod(0, dtype={d})",
    "x.cumsum(0, dtype={d})", "x.softmax(0, dtype={d})", "x.softmax(0, {d})",
    "x.log_softmax(0, {d})", "L.softmax(x, 0, {d})", "F.softmax(x, 0, dtype={d})",
    "F.log_softmax(x, 0, dtype={d})", "F.softmin(x, 0, dtype={d})", "x.norm(dtype={d})",
    "L.norm(x, 2, 0, False, None, {d})", "x.nansum(dtype={d})", "x.nanmean(dtype={d})",
    "x.type({d})", "L.promote_types({d}, L.float32)", "i.sum(dtype={d})",
    "i.cumsum(0, dtype={d})", "i.softmax(0, dtype={d})", "i.mean(dtype={d})",
    "i.prod(dtype={d})", "i.to({d})", "b.sum(dtype={d})"]
_DTYPES = ["L.float32", "L.float64", "L.int64", "L.bool", "float", "int", "bool", "'float32'",
           "np.float32", "np.dtype('float64')", "3", "x"]


def _outcome(L, Fn, expr):
    x = L.tensor([[1.0, -2.0], [0.5, 4.0]])
    i = L.tensor([[1, 2], [0, 4]])
    b = i > 0
    env = {"L": L, "F": Fn, "np": np, "x": x, "i": i, "b": b}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = eval(expr, env)
    except (TypeError, ValueError, RuntimeError, NotImplementedError) as exc:
        return type(exc).__name__
    return "ok " + str(getattr(r, "dtype", r)).rpartition(".")[2]


@pytest.mark.parametrize("call", _DTYPE_CALLS)
def test_dtype_arguments_as_pytorch(call):
    torch = pytest.importorskip("torch")
    for d in _DTYPES:
        expr = call.format(d=d)
        assert _outcome(tg, F, expr) == _outcome(torch, torch.nn.functional, expr), expr


def test_dtype_results_of_bool_reductions():
    torch = pytest.importorskip("torch")
    for expr in ("x.sum(dtype=L.bool)", "x.sum(0, dtype=L.bool)", "x.prod(dtype=L.bool)",
                 "x.prod(1, dtype=L.bool)", "x.nansum(0, dtype=L.bool)",
                 "x.nan_to_num().to(int)", "x.nan_to_num().sum(dtype=int)"):
        def value(L):
            x = L.tensor([[0.5, float("nan"), 0.0], [0.0, 0.0, 2.0]])
            return eval(expr, {"L": L, "x": x}).tolist()
        assert value(tg) == value(torch), expr


def test_to_parses_pytorchs_forms_only():
    torch = pytest.importorskip("torch")
    for expr in ("x.to('cpu', 'float32')", "x.to(x, L.float64)", "x.to(L.float64, L.float32)",
                 "x.to(L.float64, dtype=L.float32)", "x.to(L.float64, False, True, 1)",
                 "x.to(L.float64, 'x')", "x.to(x, dtype=L.float64)", "x.to(L.float64, foo=1)",
                 "x.to(memory=1)"):
        for L in (tg, torch):
            with pytest.raises(TypeError):
                eval(expr, {"L": L, "x": L.ones(2)})
    x = tg.ones(2)
    assert x.to(tg.float64, False, True).dtype is tg.float64
    assert x.to("cpu", float).dtype is tg.float64
    assert x.to(None, tg.float64).dtype is tg.float64
    assert x.to(device="cpu", dtype=int).dtype is tg.int64
    assert x.to(tg.ones(1, dtype=tg.float64)).dtype is tg.float64
    y = x.to(tg.float32, copy=True)
    assert y is not x and x.to(tg.float32) is x


# ------------------------------------------------------------------ modules
def test_activation_modules_take_pytorchs_arguments():
    torch = pytest.importorskip("torch")
    x, tx = _t(LOGITS), torch.tensor(LOGITS)
    for cls, args in (("LeakyReLU", (0.2,)), ("ELU", (0.5,)), ("CELU", (2.0,)),
                      ("Hardtanh", (-0.5, 0.25)), ("Softplus", (2.0, 1.0)),
                      ("GELU", ("tanh",)), ("Softmax", (0,)), ("LogSoftmax", (1,)),
                      ("Softmin", (1,)), ("GLU", (0,)), ("ReLU", (False,))):
        m, tm = getattr(nn, cls)(*args), getattr(torch.nn, cls)(*args)
        assert repr(m) == repr(tm)
        x2, tx2 = (x[:4], tx[:4]) if cls == "GLU" else (x, tx)
        np.testing.assert_allclose(m(x2).numpy(), tm(tx2).numpy(), rtol=1e-5, atol=1e-7)
        with pytest.raises(TypeError):     # (more positionals than any of them takes)
            getattr(nn, cls)(*args, *[0] * 6)
    with pytest.warns(FutureWarning, match="`min_value` is deprecated and renamed to `min_val`"):
        m = nn.Hardtanh(min_value=-2.0)
    assert repr(m) == "Hardtanh(min_val=-2.0, max_val=1.0)"
    with pytest.raises(AssertionError, match=r"max_val \(1.0\) must be greater than min_val"):
        nn.Hardtanh(1.0, 1.0)
    with pytest.raises(TypeError):
        nn.Tanh(True)           # (PyTorch's Module.__init__ refuses arguments too)
    with pytest.raises(TypeError):
        torch.nn.Tanh(True)


def test_softmax_module_warns_at_the_callers_line():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nn.Softmax()(_t(LOGITS))
        F.softmax(_t(LOGITS))
    assert [w.filename for w in caught] == [__file__, __file__]


def test_layers_take_device_in_pytorchs_position():
    torch = pytest.importorskip("torch")
    for cls, args in (("Linear", (2, 3, True, "cpu", tg.float64)),
                      ("LayerNorm", (3, 1e-5, True, True, None, tg.float64)),
                      ("RMSNorm", (3, None, True, None, tg.float64)),
                      ("GroupNorm", (1, 2, 1e-5, True, "cpu", tg.float64)),
                      ("BatchNorm1d", (3, 1e-5, 0.1, True, True, None, tg.float64)),
                      ("BatchNorm2d", (3, 1e-5, 0.1, True, True, None, tg.float64)),
                      ("BatchNorm3d", (3, 1e-5, 0.1, True, True, None, tg.float64)),
                      ("InstanceNorm1d", (3, 1e-5, 0.1, True, True, None, tg.float64)),
                      ("InstanceNorm2d", (3, 1e-5, 0.1, True, True, None, tg.float64)),
                      ("Bilinear", (2, 3, 4, True, None, tg.float64)),
                      ("EmbeddingBag", (4, 2, None, 2.0, False, "mean", False, None, False,
                                        None, None, tg.float64)),
                      ("PReLU", (1, 0.25, None, tg.float64)),
                      ("RNNCell", (2, 3, True, "tanh", None, tg.float64)),
                      ("LSTMCell", (2, 3, True, None, tg.float64)),
                      ("GRUCell", (2, 3, True, None, tg.float64)),
                      ("MultiheadAttention", (4, 2, 0.0, True, True, False, 3, 5, False,
                                              "cpu", tg.float64)),
                      ("TransformerEncoderLayer", (4, 2, 8, 0.1, "gelu", 1e-5, False, True,
                                                   True, "cpu", tg.float64))):
        m = getattr(nn, cls)(*args)
        assert all(p.dtype is tg.float64 for p in m.parameters()), cls
        with pytest.raises(RuntimeError, match="CPU only"):
            getattr(nn, cls)(*args[:len(args) - 2], "cuda", None)
        with pytest.raises(TypeError):
            getattr(nn, cls)(*args, 1)
        # the same positions as PyTorch's
        names = list(inspect.signature(getattr(nn, cls)).parameters)
        assert names == list(inspect.signature(getattr(torch.nn, cls)).parameters), cls
    assert nn.Linear(2, 3, dtype=float).weight.dtype is tg.float64
    m, tm = nn.BatchNorm1d(3, bias=False), torch.nn.BatchNorm1d(3, bias=False)
    assert repr(m) == repr(tm) and m.bias is None
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in tm.named_parameters()]


def test_embedding_options_are_refused_or_honoured():
    for kw in ({"max_norm": 1.0}, {"scale_grad_by_freq": True}, {"sparse": True}):
        with pytest.raises(NotImplementedError):
            nn.Embedding(4, 2, **kw)
        with pytest.raises(NotImplementedError):
            F.embedding(tg.tensor([0, 1]), tg.ones(4, 2), **kw)
    w = tg.arange(8.0).reshape(4, 2)
    m = nn.Embedding(4, 2, _weight=w, _freeze=True)
    assert not m.weight.requires_grad and m(tg.tensor([3])).tolist() == [[6.0, 7.0]]
    assert nn.Embedding(4, 2, norm_type=1.0).weight.shape == (4, 2)


def test_dropout_inplace_is_applied():
    tg.manual_seed(3)
    x = tg.ones(200)
    y = F.dropout(x, 0.5, True, True)
    assert y is x and 0 < int((x == 0).sum()) < 200
    assert set(x.tolist()) <= {0.0, 2.0}
    z = tg.ones(200)
    m = nn.Dropout(0.5, inplace=True)
    assert m(z) is z and int((z == 0).sum()) > 0
    assert F.dropout(z, 0.5, False, True) is z


def test_module_to_and_load_state_dict():
    m = nn.Linear(2, 3)
    assert m.to(tg.float64).weight.dtype is tg.float64
    assert m.to("cpu", float).weight.dtype is tg.float64
    assert m.to(tg.ones(1, dtype=tg.float32)).weight.dtype is tg.float32
    for bad in (lambda: m.to(tg.float64, dtyp=tg.float32), lambda: m.to("cpu", "x"),
                lambda: m.to(tg.float64, False, True), lambda: m.to(dtype="float64")):
        with pytest.raises(TypeError):
            bad()
    with pytest.raises(RuntimeError, match="CPU only"):
        m.to("cuda")
    w = tg.full((3, 2), 2.0)
    m.load_state_dict({"weight": w, "bias": tg.zeros(3)}, assign=True)
    assert isinstance(m.weight, nn.Parameter) and m.weight.requires_grad
    w.add_(1.0)                 # assign=True: the module holds the given tensor's memory
    assert m.weight.sum().item() == 18.0
    with pytest.raises(TypeError):
        m.load_state_dict({}, True, False, 1)


def test_no_grad_decorators_with_and_without_call():
    x = tg.ones(2, requires_grad=True)

    @tg.no_grad
    def bare(t):
        return t * 2

    @tg.no_grad()
    def called(t):
        return t * 2

    @tg.inference_mode
    def inference(t):
        return t * 2
    for f in (bare, called, inference):
        r = f(x)
        assert isinstance(r, tg.Tensor) and not r.requires_grad
    for bad in (lambda: tg.no_grad(1, 2), lambda: tg.no_grad(foo=1), lambda: tg.no_grad(3),
                lambda: tg.enable_grad(True), lambda: tg.set_grad_enabled(True, 1)):
        with pytest.raises(TypeError):
            bad()
    with pytest.raises(TypeError):      # (the wrapper forwards to the function, which refuses)
        bare(x, foo=1)


# ------------------------------------------------------------------ optimizers
OPTIMIZERS = ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "NAdam", "RAdam", "Adamax",
              "Adadelta", "Rprop", "ASGD"]


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_optimizers_have_pytorchs_signature_and_group_keys(name):
    torch = pytest.importorskip("torch")
    ours, theirs = getattr(tg.optim, name), getattr(torch.optim, name)
    assert _signature(ours.__init__) == _signature(theirs.__init__)
    p, tp = [nn.Parameter(tg.ones(2))], [torch.nn.Parameter(torch.ones(2))]
    assert sorted(ours(p, lr=0.1).param_groups[0]) == sorted(theirs(tp, lr=0.1).param_groups[0])
    with pytest.raises(TypeError, match="unexpected keyword argument 'momentun'"):
        ours(p, lr=0.1, momentun=0.9)
    with pytest.raises(NotImplementedError, match="differentiable"):
        ours(p, lr=0.1, differentiable=True)
    ours(p, lr=0.1, foreach=True)
    if "fused" in inspect.signature(ours).parameters:
        with pytest.raises(RuntimeError, match="`fused` and `foreach` cannot be `True`"):
            ours(p, lr=0.1, fused=True, foreach=True)


@pytest.mark.parametrize("name", ["LRScheduler", "StepLR", "LambdaLR", "CosineAnnealingLR",
                                  "MultiStepLR", "ExponentialLR", "LinearLR", "ConstantLR",
                                  "PolynomialLR", "SequentialLR", "ChainedScheduler",
                                  "CosineAnnealingWarmRestarts", "CyclicLR", "MultiplicativeLR",
                                  "OneCycleLR", "ReduceLROnPlateau"])
def test_lr_schedulers_have_pytorchs_signature(name):
    torch = pytest.importorskip("torch")
    ours = getattr(tg.optim.lr_scheduler, name)
    assert _signature(ours.__init__) == _signature(getattr(torch.optim.lr_scheduler,
                                                           name).__init__)
    if name == "StepLR":
        opt = tg.optim.SGD([nn.Parameter(tg.ones(1))], lr=0.1)
        with pytest.raises(TypeError, match="unexpected keyword argument 'step'"):
            ours(opt, step=2)
        with pytest.raises(TypeError):
            ours(opt, 2, 0.1, -1, True)


def test_adam_decoupled_weight_decay_is_adamw():
    a, b = nn.Parameter(tg.tensor([1.0, -2.0])), nn.Parameter(tg.tensor([1.0, -2.0]))
    oa = tg.optim.Adam([a], lr=0.1, weight_decay=0.5, decoupled_weight_decay=True)
    ob = tg.optim.AdamW([b], lr=0.1, weight_decay=0.5)
    for _ in range(3):
        for p, o in ((a, oa), (b, ob)):
            o.zero_grad()
            (p * p).sum().backward()
            o.step()
    assert a.tolist() == b.tolist()
    assert ob.param_groups[0]["decoupled_weight_decay"] is True


def test_init_takes_generators():
    w = tg.empty(3, 4)
    for fn in (tg.nn.init.uniform_, tg.nn.init.normal_, tg.nn.init.xavier_uniform_,
               tg.nn.init.xavier_normal_, tg.nn.init.kaiming_uniform_,
               tg.nn.init.kaiming_normal_, tg.nn.init.trunc_normal_):
        assert fn(w, generator=None) is w
        a = fn(w, generator=tg.Generator().manual_seed(3)).clone()
        assert tg.equal(fn(w, generator=tg.Generator().manual_seed(3)), a)
        with pytest.raises(TypeError, match="generator"):
            fn(w, generator=object())
        with pytest.raises(TypeError):
            fn(w, generater=None)


# ------------------------------------------------------------------ the API walk
def _signature(fn):
    """(name, kind, default) of each parameter; None where inspect cannot tell
    (builtins)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    return [(p.name, p.kind, repr(p.default)) for p in sig.parameters.values()]


# Callables taking *args or **kwargs, each with the reason it is right.
ALLOWED = {
    "nn.Identity.__init__": "PyTorch's Identity takes and ignores any arguments",
    "nn.Sequential.__init__": "Sequential(*modules), as PyTorch's; each must be a Module",
    "nn.Module.__call__": "forwards to forward(), whose own signature refuses",
    "nn.Module.forward": "PyTorch's base forward(*input): raises, no forward defined",
    "nn.RNN.__init__": "PyTorch's (*args, **kwargs), passed to RNNBase.__init__'s signature",
    "nn.LSTM.__init__": "PyTorch's (*args, **kwargs), passed to RNNBase.__init__'s signature",
    "nn.GRU.__init__": "PyTorch's (*args, **kwargs), passed to RNNBase.__init__'s signature",
    "nn.ParameterList.__call__": "raises whatever it is given: not callable, as PyTorch's",
    "nn.ParameterDict.__call__": "raises whatever it is given: not callable, as PyTorch's",
    "nn.Module.to": "PyTorch's Module.to is overloaded on its first argument; parsed",
    "Tensor.to": "PyTorch's Tensor.to is overloaded on its first argument; parsed",
    "Tensor.view": "x.view(2, 3) or x.view((2, 3)), as in PyTorch",
    "Tensor.reshape": "x.reshape(2, 3) or x.reshape((2, 3))",
    "Tensor.permute": "x.permute(1, 0) or x.permute((1, 0))",
    "Tensor.expand": "x.expand(2, 3) or x.expand((2, 3))",
    "Tensor.repeat": "x.repeat(2, 1) or x.repeat((2, 1))",
    "Tensor.tile": "x.tile(2, 1) or x.tile((2, 1))",
    "Tensor.sum_to_size": "x.sum_to_size(1, 3) or x.sum_to_size((1, 3))",
    "Tensor.hsplit": "x.hsplit(2), x.hsplit([1, 3]) or x.hsplit(1, 3)",
    "Tensor.vsplit": "x.vsplit(2), x.vsplit([1, 3]) or x.vsplit(1, 3)",
    "Tensor.new_zeros": "*size, as PyTorch's",
    "Tensor.new_ones": "*size, as PyTorch's",
    "Tensor.new_empty": "*size, as PyTorch's",
    "Tensor.uniform_": "PyTorch's keywords from= and to= are Python keywords (**bounds, "
                       "whose other keys are refused)",
    "Tensor.random_": "random_(), random_(to) or random_(from, to), whose from= is a Python "
                      "keyword (**bounds, whose other keys are refused)",
    "tapegrad.zeros": "*size, as PyTorch's",
    "tapegrad.ones": "*size, as PyTorch's",
    "tapegrad.empty": "*size, as PyTorch's",
    "tapegrad.rand": "*size, as PyTorch's",
    "tapegrad.randn": "*size, as PyTorch's",
    "tapegrad.einsum": "einsum(equation, *operands), as PyTorch's",
    "tapegrad.atleast_1d": "*tensors, as PyTorch's; each must be a Tensor",
    "tapegrad.atleast_2d": "*tensors, as PyTorch's; each must be a Tensor",
    "tapegrad.atleast_3d": "*tensors, as PyTorch's; each must be a Tensor",
    "tapegrad.block_diag": "*tensors, as PyTorch's; each must be a Tensor",
    "tapegrad.broadcast_shapes": "*shapes, as PyTorch's; each an int or a sequence of ints",
    "tapegrad.broadcast_tensors": "*tensors, as PyTorch's; each must be a Tensor",
    "tapegrad.cartesian_prod": "*tensors, as PyTorch's; each must be a Tensor",
    "tapegrad.meshgrid": "meshgrid(*tensors, indexing=None), as PyTorch's",
    "Tensor.broadcast_to": "x.broadcast_to(2, 3) or x.broadcast_to((2, 3)), as PyTorch's",
    "tapegrad.randint": "PyTorch's randint(high, size) and randint(low, high, size); parsed",
    "tapegrad.randint_like": "PyTorch's randint_like(input, high) and (input, low, high); "
                             "parsed",
    "autograd.Function.forward": "user-defined (the base raises), as PyTorch's",
    "autograd.Function.backward": "user-defined (the base raises), as PyTorch's",
    "autograd.Function.apply": "forwards to the user's forward",
    "autograd.FunctionCtx.save_for_backward": "*tensors, as PyTorch's",
    "autograd.FunctionCtx.mark_non_differentiable": "*tensors, as PyTorch's",
    "autograd.FunctionCtx.mark_dirty": "*tensors, as PyTorch's",
}
# Also forwarding (not reached by the walk, tested below): tapegrad.compile's returned
# callable (to the user's function) and the grad-mode decorators' wrappers (to the
# decorated function).


def _inherited_from_object(cls):
    """A class whose construction object/tuple checks (no Python __init__ of its own)."""
    return cls.__init__ in (object.__init__, tuple.__init__)


def _walk():
    """(label, callable) of every public callable the issue names."""
    out = []
    mods = {"tapegrad": tg, "F": F, "nn.init": tg.nn.init, "nn.utils": tg.nn.utils,
            "autograd": tg.autograd, "optim": tg.optim,
            "optim.lr_scheduler": tg.optim.lr_scheduler, "distributed": tg.distributed}
    for prefix, mod in mods.items():
        for name in dir(mod):
            obj = getattr(mod, name)
            if name.startswith("_") or inspect.ismodule(obj) or not callable(obj):
                continue
            if inspect.isclass(obj):
                if issubclass(obj, (BaseException, nn.Module, tg.Tensor)) or obj is tg.dtype:
                    continue            # (modules below; Tensor's methods below)
                if not _inherited_from_object(obj):
                    out.append((f"{prefix}.{name}.__init__", obj.__init__))
                for meth in dir(obj):
                    if not meth.startswith("_") and callable(getattr(obj, meth)) and \
                            not isinstance(inspect.getattr_static(obj, meth), property):
                        out.append((f"{prefix}.{name}.{meth}", getattr(obj, meth)))
            else:
                out.append((f"{prefix}.{name}", obj))
    for name in dir(tg.Tensor):
        if not name.startswith("_") and callable(getattr(tg.Tensor, name)) and \
                not isinstance(inspect.getattr_static(tg.Tensor, name), property):
            out.append((f"Tensor.{name}", getattr(tg.Tensor, name)))
    for name in dir(nn):
        cls = getattr(nn, name)
        if inspect.isclass(cls) and issubclass(cls, nn.Module):
            for meth in ("__init__", "forward", "__call__", "to"):
                out.append((f"nn.{name}.{meth}", getattr(cls, meth)))
    return out


def _allowed(label, fn):
    """The allowlist entry covering label: its own, or that of the callable it is
    (nn.Linear.to is nn.Module.to; tapegrad.reshape is Tensor.reshape, ...)."""
    if label in ALLOWED:
        return True
    for key in ALLOWED:
        owner, _, attr = key.rpartition(".")
        if attr == label.rpartition(".")[2] and owner.startswith("nn.Module") and \
                getattr(nn.Module, attr, None) is fn:
            return True
        if key.startswith("Tensor.") and getattr(tg.Tensor, attr, None) is fn and \
                attr == label.rpartition(".")[2]:
            return True
        if key.startswith("autograd.") and inspect.unwrap(fn) is inspect.unwrap(
                getattr(getattr(tg.autograd, owner.split(".")[1]), attr, None)):
            return True
    return False


def test_the_walk_finds_the_public_api():
    labels = {label for label, _ in _walk()}
    for expected in ("tapegrad.sum", "F.mse_loss", "F.cross_entropy", "Tensor.max",
                     "nn.MSELoss.__init__", "nn.ReLU.__init__", "nn.Linear.forward",
                     "optim.SGD.__init__", "optim.lr_scheduler.StepLR.__init__",
                     "nn.init.uniform_", "nn.utils.clip_grad_norm_", "autograd.grad",
                     "optim.Adam.step", "Tensor.backward"):
        assert expected in labels
    assert len(labels) > 500


def test_no_public_callable_swallows_arguments():
    offenders = []
    for label, fn in _walk():
        sig = _signature(fn)
        if sig is None:
            continue                # (a builtin: checks its own arguments)
        kinds = {kind for _, kind, _ in sig}
        if kinds & {inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL} and \
                not _allowed(label, fn):
            offenders.append(f"{label}{inspect.signature(fn)}")
    assert not offenders, "\n".join(offenders)


# Parameters named with a leading underscore are private, yet take a surplus argument
# (clamp(x, 0, 1, True) used to clamp in place). PyTorch's own (_stacklevel,
# Embedding's _weight and _freeze) are allowed. Left out, for their owners: the factories
# of _creation.py (empty/zeros/ones/rand/randn/full: _zero, _fn, _like) and _indexing.py's
# masked_fill (_inplace) and where (_op).
_PRIVATE_PARAMS_ELSEWHERE = {"tapegrad.empty", "tapegrad.zeros", "tapegrad.ones",
                             "tapegrad.rand", "tapegrad.randn", "tapegrad.full",
                             "tapegrad.masked_fill", "Tensor.masked_fill", "tapegrad.where"}


def test_no_private_parameters_in_public_signatures():
    torch = pytest.importorskip("torch")
    offenders = []
    for label, fn in _walk():
        sig = _signature(fn)
        if sig is None or label in _PRIVATE_PARAMS_ELSEWHERE:
            continue
        private = [n for n, _, _ in sig if n.startswith("_")]
        if private:
            ref = _torch_equivalent(torch, label)
            theirs = _signature(ref) if ref is not None else None
            if not theirs or not set(private) <= {n for n, _, _ in theirs}:
                offenders.append(f"{label}: {private}")
    assert not offenders, "\n".join(offenders)


def _torch_equivalent(torch, label):
    prefix, _, rest = label.partition(".")
    roots = {"tapegrad": torch, "F": torch.nn.functional, "Tensor": torch.Tensor,
             "nn": torch.nn, "optim": torch.optim, "autograd": torch.autograd,
             "distributed": torch.distributed}
    obj = roots.get(prefix)
    for part in rest.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


LOSS_FUNCTIONS = ["mse_loss", "l1_loss", "huber_loss", "smooth_l1_loss",
                  "binary_cross_entropy", "binary_cross_entropy_with_logits", "nll_loss",
                  "cross_entropy", "kl_div", "soft_margin_loss", "poisson_nll_loss",
                  "gaussian_nll_loss", "cosine_embedding_loss", "margin_ranking_loss"]
ACTIVATIONS = ["ReLU", "Tanh", "Sigmoid", "GELU", "LeakyReLU", "Softplus", "Softmax",
               "LogSoftmax", "SiLU", "ELU", "Hardtanh", "ReLU6", "LogSigmoid", "Softsign",
               "Mish", "Hardswish", "Hardsigmoid", "SELU", "CELU", "GLU", "Threshold",
               "Softshrink", "Hardshrink", "Tanhshrink", "Softmin", "PReLU"]
ACTIVATION_FUNCTIONS = ["relu", "leaky_relu", "hardtanh", "elu", "celu", "selu", "glu",
                        "threshold", "mish", "hardswish", "hardsigmoid", "silu", "relu6",
                        "softsign", "tanhshrink", "sigmoid", "tanh", "softmax", "log_softmax",
                        "softmin", "dropout", "layer_norm", "group_norm", "rms_norm",
                        "batch_norm", "embedding", "normalize", "pad", "instance_norm",
                        "local_response_norm", "dropout1d", "dropout2d", "dropout3d",
                        "alpha_dropout", "feature_alpha_dropout", "embedding_bag",
                        "multi_head_attention_forward"]


def _module_init(cls):
    """A module class's __init__ signature; PyTorch's Module.__init__(*args, **kwargs)
    (which refuses any argument) counts as no arguments."""
    sig = _signature(cls.__init__)
    if sig and [k for _, k, _ in sig[1:]] == [inspect.Parameter.VAR_POSITIONAL,
                                               inspect.Parameter.VAR_KEYWORD]:
        return sig[:1]
    return sig


POOLING_MODULES = ["MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d", "AdaptiveAvgPool1d",
                   "AdaptiveAvgPool2d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "Upsample",
                   "UpsamplingNearest2d", "UpsamplingBilinear2d", "PixelShuffle",
                   "PixelUnshuffle", "ZeroPad1d", "ZeroPad2d", "ConstantPad1d", "ConstantPad2d",
                   "ReflectionPad1d", "ReflectionPad2d", "ReplicationPad1d", "ReplicationPad2d",
                   "CircularPad1d", "CircularPad2d", "ZeroPad3d", "ConstantPad3d",
                   "ReflectionPad3d", "ReplicationPad3d", "CircularPad3d", "LPPool1d", "LPPool2d"]
POOLING_FUNCTIONS = ["max_pool1d_with_indices", "max_pool2d_with_indices", "adaptive_avg_pool2d",
                     "adaptive_max_pool1d_with_indices", "adaptive_max_pool2d_with_indices",
                     "interpolate", "upsample", "upsample_nearest", "upsample_bilinear",
                     "lp_pool1d", "lp_pool2d"]
CONV_MODULES = ["Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d", "Fold", "Unfold"]
CONV_FUNCTIONS = ["unfold", "fold"]     # (conv1d, conv2d, ...: PyTorch's are builtins)


@pytest.mark.parametrize("name", ALL_LOSS_MODULES + ACTIVATIONS + POOLING_MODULES
                         + CONV_MODULES)
def test_loss_and_activation_modules_match_pytorchs_signatures(name):
    torch = pytest.importorskip("torch")
    ours, theirs = getattr(nn, name), getattr(torch.nn, name)
    assert _module_init(ours) == _module_init(theirs)
    assert _signature(ours.forward) == _signature(theirs.forward)


@pytest.mark.parametrize("name", LOSS_FUNCTIONS + ACTIVATION_FUNCTIONS + POOLING_FUNCTIONS
                         + CONV_FUNCTIONS)
def test_functional_signatures_match_pytorchs(name):
    torch = pytest.importorskip("torch")
    theirs = _signature(getattr(torch.nn.functional, name))
    if theirs is None:
        pytest.skip("PyTorch's is a builtin")
    assert _signature(getattr(F, name)) == theirs


def test_varargs_callables_validate_what_they_take():
    x = tg.ones(2, 4)
    for bad in (lambda: x.view(2, "a"), lambda: x.reshape(2, None), lambda: x.permute(1, None),
                lambda: x.expand(2, 1.5), lambda: x.repeat(1, 1.5), lambda: x.tile(1, None),
                lambda: x.sum_to_size(1, None), lambda: x.hsplit(), lambda: x.vsplit(),
                lambda: x.tile(), lambda: x.permute(), lambda: x.expand(),
                lambda: tg.zeros(2, None), lambda: x.new_zeros(2, None),
                lambda: tg.einsum("ij->ji", x, 3), lambda: tg.einsum(3, x),
                lambda: tg.randint(0, 3, (2,), 5), lambda: tg.reshape(x, 4, 2),
                lambda: tg.permute(x, 1, 0), lambda: x.uniform_(0, 1, foo=2),
                lambda: nn.Sequential(1), lambda: nn.Module().forward(1, a=2),
                lambda: tg.result_type(x, 1, 2)):
        with pytest.raises(TypeError):
            bad()
    with pytest.raises(NotImplementedError):
        nn.Module().forward(1)
    assert isinstance(nn.Identity(3, foo=1), nn.Identity)     # (as PyTorch's)
    assert x.uniform_(**{"from": 2.0, "to": 3.0}).min().item() >= 2.0


def test_forwarding_callables_refuse_what_the_function_refuses():
    def f(x, scale=2.0):
        return x * scale
    compiled = tg.compile(f)
    assert compiled(tg.ones(2), scale=3.0).tolist() == [3.0, 3.0]
    with pytest.raises(TypeError, match="unexpected keyword argument 'scal'"):
        compiled(tg.ones(2), scal=3.0)
    with pytest.raises(TypeError):
        tg.no_grad()(f)(tg.ones(2), 1.0, 2.0)

    class Twice(nn.Module):
        def forward(self, input):
            return input * 2
    with pytest.raises(TypeError):
        Twice()(tg.ones(2), foo=1)


# ------------------------------------------------------------------ seeded misspellings
def _calls(L, Fn):
    """(label, call(*args, **kwargs), its keyword names, the full positional tail (None:
    *args, no surplus check)) for a list of common calls, in library L (tapegrad or
    PyTorch)."""
    x = L.tensor(PRED)
    y = L.tensor(GOAL)
    logits, classes = L.tensor(LOGITS), L.tensor(CLASSES)
    p = [L.nn.Parameter(L.ones(2))]
    return [
        ("mse_loss", lambda *a, **k: Fn.mse_loss(x, y, *a, **k),
         ["size_average", "reduce", "reduction", "weight"], (None, None, "mean", None)),
        ("cross_entropy", lambda *a, **k: Fn.cross_entropy(logits, classes, *a, **k),
         ["weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing"],
         (None, None, -100, None, "mean", 0.0)),
        ("huber_loss", lambda *a, **k: Fn.huber_loss(x, y, *a, **k),
         ["reduction", "delta", "weight"], ("mean", 1.0, None)),
        ("MSELoss", lambda *a, **k: L.nn.MSELoss(*a, **k),
         ["size_average", "reduce", "reduction"], (None, None, "mean")),
        ("CrossEntropyLoss", lambda *a, **k: L.nn.CrossEntropyLoss(*a, **k),
         ["weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing"],
         (None, None, -100, None, "mean", 0.0)),
        ("BCEWithLogitsLoss", lambda *a, **k: L.nn.BCEWithLogitsLoss(*a, **k),
         ["weight", "size_average", "reduce", "reduction", "pos_weight"],
         (None, None, None, "mean", None)),
        ("ReLU", lambda *a, **k: L.nn.ReLU(*a, **k), ["inplace"], (False,)),
        ("LeakyReLU", lambda *a, **k: L.nn.LeakyReLU(*a, **k), ["negative_slope", "inplace"],
         (0.01, False)),
        ("GELU", lambda *a, **k: L.nn.GELU(*a, **k), ["approximate"], ("none",)),
        ("Softmax", lambda *a, **k: L.nn.Softmax(*a, **k), ["dim"], (1,)),
        ("Linear", lambda *a, **k: L.nn.Linear(2, 3, *a, **k), ["bias", "device", "dtype"],
         (True, None, None)),
        ("LayerNorm", lambda *a, **k: L.nn.LayerNorm(3, *a, **k),
         ["eps", "elementwise_affine", "bias", "device", "dtype"],
         (1e-5, True, True, None, None)),
        ("Embedding", lambda *a, **k: L.nn.Embedding(4, 2, *a, **k),
         ["padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse", "device",
          "dtype"], (None, None, 2.0, False, False, None, False, None, None)),
        ("SGD", lambda *a, **k: L.optim.SGD(p, 0.1, *a, **k),
         ["momentum", "dampening", "weight_decay", "nesterov", "maximize", "foreach"],
         (0.0, 0.0, 0.0, False)),
        ("Adam", lambda *a, **k: L.optim.Adam(p, 0.1, *a, **k),
         ["betas", "eps", "weight_decay", "amsgrad", "maximize", "foreach"],
         ((0.9, 0.999), 1e-8, 0.0, False)),
        ("RMSprop", lambda *a, **k: L.optim.RMSprop(p, 0.1, *a, **k),
         ["alpha", "eps", "weight_decay", "momentum", "centered", "maximize"],
         (0.99, 1e-8, 0.0, 0.0, False, False, None, False, False)),
        ("StepLR", lambda *a, **k: L.optim.lr_scheduler.StepLR(L.optim.SGD(p, 0.1), 2, *a,
                                                                **k),
         ["gamma", "last_epoch"], (0.1, -1)),
        ("zeros", lambda *a, **k: L.zeros(2, 3, **k), ["dtype", "requires_grad"], None),
        ("ones", lambda *a, **k: L.ones(2, **k), ["dtype", "requires_grad"], None),
        ("randn", lambda *a, **k: L.randn(2, **k), ["dtype", "requires_grad"], None),
        ("tensor", lambda *a, **k: L.tensor([1.0], *a, **k), ["dtype", "requires_grad"],
         None),
        ("sum", lambda *a, **k: x.sum(*a, **k), ["dim", "keepdim", "dtype"], (0, False)),
        ("mean", lambda *a, **k: L.mean(x, *a, **k), ["dim", "keepdim", "dtype"], (0, False)),
        ("max", lambda *a, **k: x.max(*a, **k), ["dim", "keepdim"], (0, False)),
        ("softmax", lambda *a, **k: x.softmax(*a, **k), ["dim", "dtype"], (0, None)),
        ("F.softmax", lambda *a, **k: Fn.softmax(x, *a, **k),
         ["dim", "_stacklevel", "dtype"], (0, 3, None)),
        ("clamp", lambda *a, **k: x.clamp(*a, **k), ["min", "max"], (0.0, 1.0)),
        ("norm", lambda *a, **k: x.norm(*a, **k), ["p", "dim", "keepdim", "dtype"],
         (2, 0, False, None)),
        ("to", lambda *a, **k: x.to(L.float64, **k), ["dtype", "non_blocking", "copy"],
         None),
        ("backward", lambda *a, **k: (x.detach().requires_grad_() * 2).sum().backward(
            *a, **k), ["gradient", "retain_graph", "create_graph", "inputs"],
         (None, None, False, None)),
        ("clip_grad_norm_", lambda *a, **k: L.nn.utils.clip_grad_norm_(p, 1.0, *a, **k),
         ["norm_type", "error_if_nonfinite", "foreach"], (2.0, False, None)),
        ("kaiming_uniform_", lambda *a, **k: L.nn.init.kaiming_uniform_(
            L.empty(3, 2), *a, **k), ["a", "mode", "nonlinearity", "generator"],
         (0, "fan_in", "leaky_relu", None)),
    ]


def _misspell(rng, name, taken):
    letters = string.ascii_lowercase
    while True:
        k = rng.randrange(len(name))
        how = rng.randrange(5)
        if how == 0 and len(name) > 1 and k < len(name) - 1:    # swap two letters
            s = name[:k] + name[k + 1] + name[k] + name[k + 2:]
        elif how == 1 and len(name) > 2:                      # drop one
            s = name[:k] + name[k + 1:]
        elif how == 2:                                        # double one
            s = name[:k] + name[k] + name[k:]
        elif how == 3:                                        # replace one
            s = name[:k] + rng.choice(letters) + name[k + 1:]
        else:                                                 # made up
            s = "".join(rng.choice(letters) for _ in range(rng.randrange(3, 9)))
        if s.isidentifier() and s not in taken and not s.startswith("__"):
            return s


@pytest.mark.parametrize("seed", range(4))
def test_misspelt_and_surplus_arguments_are_type_errors(seed):
    torch = pytest.importorskip("torch")
    rng = random.Random(seed)
    ours = _calls(tg, F)
    theirs = {label: rest for label, *rest in _calls(torch, torch.nn.functional)}
    for label, call, names, tail in ours:
        taken = set(names) | set(inspect.signature(call).parameters)
        wrong = _misspell(rng, rng.choice(names), taken | {"out", "input", "self", "layout",
                                                           "device", "pin_memory", "generator",
                                                           "memory_format", "names", "dim",
                                                           "differentiable", "fused"})
        with pytest.raises(TypeError, match=f"'{wrong}'|{wrong}"):
            call(**{wrong: 1})
        with pytest.raises(TypeError):          # (PyTorch refuses it too)
            theirs[label][0](**{wrong: 1})
        if tail is not None:
            call(*tail)                         # the full positional form is fine
            with pytest.raises(TypeError):
                call(*tail, 0)
            with pytest.raises(TypeError):
                theirs[label][0](*theirs[label][2], 0)
