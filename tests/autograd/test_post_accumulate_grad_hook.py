"""Tensor.register_post_accumulate_grad_hook against PyTorch: hooks run after backward()
accumulated the leaf's .grad, get the tensor itself, may change .grad in place, must
return None; autograd.grad does not run them; errors as PyTorch's."""
import gc
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.autograd.function import POST_BACKWARD

torch = pytest.importorskip("torch")


def _pair(values, lib):
    return lib.tensor(np.asarray(values, np.float64), requires_grad=True)


def test_hooks_run_after_accumulation_in_registration_order():
    vals = [0.5, -1.0, 2.0]
    logs = {}
    for lib in (tg, torch):
        w = _pair(vals, lib)
        log = logs[lib.__name__] = []
        w.grad = lib.ones(3, dtype=lib.float64)         # accumulated into, then the hook
        h1 = w.register_post_accumulate_grad_hook(
            lambda p, w=w, log=log: log.append(("h1", p is w, p.grad.detach().numpy().tolist())))
        w.register_post_accumulate_grad_hook(lambda p, log=log: log.append(("h2",)))
        w.register_hook(lambda g, log=log: log.append(("pre",)))
        (w * w).sum().backward()
        h1.remove()
        (w * 3).sum().backward()
    assert logs["tapegrad"] == logs["torch"]
    assert logs["tapegrad"][1] == ("h1", True, [2.0, -1.0, 5.0])


def test_a_hook_may_change_grad_in_place_and_step_in_backward():
    # the optimizer-in-backward pattern: update the parameter, drop its gradient
    res = {}
    for lib in (tg, torch):
        w = _pair([1.0, 2.0], lib)
        b = _pair([0.5], lib)

        def hook(p, lib=lib):
            with lib.no_grad():
                p.grad.mul_(10)
                p.add_(p.grad, alpha=-0.01)
            p.grad = None
        for t in (w, b):
            t.register_post_accumulate_grad_hook(hook)
        for _ in range(3):
            ((w * b).sum() ** 2).backward()
        res[lib.__name__] = (w.detach().numpy().copy(), b.detach().numpy().copy(),
                             w.grad is None)
    np.testing.assert_allclose(res["tapegrad"][0], res["torch"][0], rtol=1e-14)
    np.testing.assert_allclose(res["tapegrad"][1], res["torch"][1], rtol=1e-14)
    assert res["tapegrad"][2] is res["torch"][2] is True


def test_not_run_by_autograd_grad_nor_for_unreached_leaves():
    calls = []
    w, z = tg.ones(2, requires_grad=True), tg.ones(2, requires_grad=True)
    w.register_post_accumulate_grad_hook(lambda p: calls.append("w"))
    z.register_post_accumulate_grad_hook(lambda p: calls.append("z"))
    tg.autograd.grad((w * 2).sum(), w)
    assert calls == []
    (w * 2).sum().backward()
    assert calls == ["w"]


def test_errors_are_pytorchs():
    for lib in (tg, torch):
        w = lib.ones(2, requires_grad=True)
        with pytest.raises(RuntimeError, match="^post accumulate grad hooks cannot be "
                                               "registered on non-leaf tensors$"):
            (w * 2).register_post_accumulate_grad_hook(lambda p: None)
        with pytest.raises(RuntimeError, match="^cannot register a hook on a tensor that "
                                               "doesn't require gradient$"):
            lib.ones(2).register_post_accumulate_grad_hook(lambda p: None)
        x = lib.ones(2, requires_grad=True)
        h = x.register_post_accumulate_grad_hook(lambda p: 5)
        with pytest.raises(TypeError, match="^expected Variable, but hook returned 'int'$"):
            (x * 1).sum().backward()
        h.remove()
        x.register_post_accumulate_grad_hook(lambda p: p.grad)
        with pytest.raises(RuntimeError, match="^Tensor post accumulate grad hooks should "
                                               "return None.$"):
            (x * 1).sum().backward()


def test_removing_every_hook_leaves_backward_with_nothing_to_call():
    gc.collect()                    # (dead tensors' hooks from other tests are dropped at
    (tg.ones(1, requires_grad=True) * 2).sum().backward()    # the next backward)
    before = list(POST_BACKWARD)
    w = tg.ones(2, requires_grad=True)
    h = w.register_post_accumulate_grad_hook(lambda p: None)
    assert len(POST_BACKWARD) == len(before) + 1
    h.remove()
    assert POST_BACKWARD == before


def test_a_compiled_step_with_such_hooks_runs_eagerly_with_a_warning():
    w = tg.ones(3, requires_grad=True)
    seen = []
    w.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.sum().item()))

    def step(x):
        w.grad = None
        (w * x).sum().backward()
        return w.grad
    f = tg.compile(step)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for k in range(3):
            f(tg.full((3,), float(k + 1)))
    assert any(issubclass(r.category, tg.CompileWarning) and "post-accumulate" in
               str(r.message) for r in rec)
    assert seen == [3.0, 6.0, 9.0]
