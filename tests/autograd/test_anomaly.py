"""Anomaly mode (tapegrad.autograd.detect_anomaly / set_detect_anomaly): PyTorch's
switches, its warning on entering, and a NaN-producing backward that raises PyTorch's
RuntimeError naming the row's grad_fn and input, after PyTorch's warning with the forward
line that recorded the row."""
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import autograd


@pytest.fixture(autouse=True)
def _off():
    yield
    autograd.set_detect_anomaly(False)


def _nan_graph(lib):
    x = lib.tensor([0.0, 1.0, 2.0], requires_grad=True)
    w = lib.tensor([1.0, float("nan"), 3.0])
    y = x.exp()
    z = y * w                                   # NAN_LINE
    return x, z.sum()


def _line(marker):
    with open(__file__) as f:
        for i, line in enumerate(f, 1):
            if marker in line and "def _line" not in line and "marker" not in line:
                return i
    raise AssertionError(marker)


def test_switches_as_pytorch():
    assert autograd.is_anomaly_enabled() is False
    assert autograd.is_anomaly_check_nan_enabled() is True
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled. This mode will "
                      "increase the runtime and should only be enabled for debugging."):
        d = autograd.detect_anomaly(check_nan=False)
    with d:
        assert autograd.is_anomaly_enabled() is True
        assert autograd.is_anomaly_check_nan_enabled() is False
    assert autograd.is_anomaly_enabled() is False
    assert autograd.is_anomaly_check_nan_enabled() is True
    autograd.set_detect_anomaly(True)
    assert autograd.is_anomaly_enabled()
    with autograd.set_detect_anomaly(False):
        assert not autograd.is_anomaly_enabled()
    assert autograd.is_anomaly_enabled()
    autograd.set_detect_anomaly(False)
    with pytest.raises(TypeError, match="must be bool"):
        autograd.set_detect_anomaly(1)


def test_not_a_decorator_as_in_torch():
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert callable(autograd.detect_anomaly()) == callable(torch.autograd.detect_anomaly())


@pytest.mark.parametrize("check", ["backward", "autograd.grad"])
def test_nan_names_op_and_forward_line(check):
    with pytest.warns(UserWarning) as rec:
        with autograd.detect_anomaly():
            x, loss = _nan_graph(tg)
            with pytest.raises(RuntimeError) as ei:
                if check == "backward":
                    loss.backward()
                else:
                    autograd.grad(loss, [x])
    assert str(ei.value) == "Function 'MulBackward0' returned nan values in its 0th output."
    msgs = [str(w.message) for w in rec if "Error detected" in str(w.message)]
    assert len(msgs) == 1
    msg = msgs[0]
    assert msg.startswith("Error detected in MulBackward0. Traceback of forward call that "
                          "caused the error:\n")
    # the innermost frame is the user's line, not tapegrad's dispatch
    last = msg.rstrip("\n").splitlines()[-2:]
    assert last[0].strip() == f'File "{__file__}", line {_line("# NAN_LINE")}, in _nan_graph'
    assert last[1].strip().startswith("z = y * w")


def test_same_as_torch():
    torch = pytest.importorskip("torch")
    got = {}
    for name, lib in (("tg", tg), ("torch", torch)):
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            with lib.autograd.detect_anomaly():
                _, loss = _nan_graph(lib)
                with pytest.raises(RuntimeError) as ei:
                    loss.backward()
        w = [str(r.message) for r in rec if "Error detected" in str(r.message)]
        got[name] = (str(ei.value), w[0].split("\n")[0], w[0].split("\n")[2].strip())
    assert got["tg"] == got["torch"]


def test_nan_in_second_input_and_no_check():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    a = tg.tensor([0.0, 1.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with autograd.detect_anomaly():
            y = x / a       # d/da = -x/a^2: -inf, not NaN; d/dx = 1/a: inf
            z = (y * 0.0).sum()     # grad 0 * ... fine; then DivBackward0 gets 0 -> 0*inf=NaN
            with pytest.raises(RuntimeError, match=r"Function 'DivBackward0' returned nan "
                               r"values in its 0th output\."):
                z.backward()
        with autograd.detect_anomaly(check_nan=False):
            x2 = tg.tensor([1.0, 2.0], requires_grad=True)
            ((x2 / tg.tensor([0.0, 1.0])) * 0.0).sum().backward()     # no check: no error
            assert np.isnan(x2.grad.numpy()[0])
    # off: the same graph runs through
    x3 = tg.tensor([1.0, 2.0], requires_grad=True)
    ((x3 / tg.tensor([0.0, 1.0])) * 0.0).sum().backward()
    assert np.isnan(x3.grad.numpy()[0])


def test_forward_outside_has_no_stack():
    x, loss = _nan_graph(tg)
    with pytest.warns(UserWarning) as rec:
        with autograd.detect_anomaly():
            with pytest.raises(RuntimeError, match="MulBackward0"):
                loss.backward()
    msgs = [str(w.message) for w in rec if "Error detected" in str(w.message)]
    assert msgs == ["Error detected in MulBackward0. No forward pass information available. "
                    "Enable detect anomaly during forward pass for more information."]


def test_preexisting_nan_grad_is_not_this_rows():
    # a leaf .grad already NaN from an earlier backward: the row that adds to it did not
    # produce NaN (PyTorch checks the function's output, not the accumulated .grad)
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    x.grad = tg.tensor([float("nan"), 0.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with autograd.detect_anomaly():
            (x * 2.0).sum().backward()
    assert np.isnan(x.grad.numpy()[0]) and x.grad.numpy()[1] == 2.0


def test_version_error_prints_forward_line():
    a = tg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.warns(UserWarning) as rec:
        with autograd.detect_anomaly():
            b = a.exp()
            c = b * b                           # SAVED_LINE
            b.add_(1.0)
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                c.sum().backward()
    msgs = [str(w.message) for w in rec if "Error detected" in str(w.message)]
    assert len(msgs) == 1 and msgs[0].startswith("Error detected in MulBackward0.")
    assert f"line {_line('# SAVED_LINE')}" in msgs[0]


def test_no_nan_runs_as_usual_and_off_costs_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with autograd.detect_anomaly():
            x = tg.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
            (x.sin() * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.cos(x.detach().numpy()) * x.detach().numpy()
                               + np.sin(x.detach().numpy()), rtol=1e-6)
    from tapegrad._engine.state import engine
    from tapegrad.autograd import anomaly_mode
    E = engine()
    assert E.op is not anomaly_mode._op_with_trace      # the plain entry once off
    assert not anomaly_mode._TRACES


def test_compiled_step_checks_too():
    w = tg.tensor([1.0, 2.0], requires_grad=True)

    def step(x):
        loss = (w * x).sum()
        loss.backward()
        return loss

    cf = tg.compile(step)
    x = tg.tensor([1.0, 1.0])
    for _ in range(3):
        cf(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with autograd.detect_anomaly():
            with pytest.raises(RuntimeError, match=r"Function 'MulBackward0' returned nan "
                               r"values in its 0th output\."):
                cf(tg.tensor([float("nan"), 1.0]))


class _NanBackward(tg.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * float("nan")


def test_function_backward_nan_is_named_after_its_class():
    torch = pytest.importorskip("torch")

    class TNan(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * float("nan")

    msgs = []
    for lib, fn in ((tg, _NanBackward), (torch, TNan)):
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            with lib.autograd.detect_anomaly():
                x = lib.ones(2, requires_grad=True)
                y = fn.apply(x)                 # FUNCTION_LINE
                with pytest.raises(RuntimeError) as ei:
                    y.sum().backward()
        w = [str(r.message) for r in rec if "Error detected" in str(r.message)]
        assert len(w) == 1 and f"line {_line('# FUNCTION_LINE')}" in w[0]
        msgs.append(str(ei.value).replace("TNan", "_NanBackward"))
    assert msgs[0] == msgs[1] == ("Function '_NanBackwardBackward' returned nan values in its "
                                  "0th output.")
