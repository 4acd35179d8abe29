"""Models built after the same seed hold PyTorch's parameters bit for bit; a training
step with dropout draws PyTorch's masks and gives its loss (to float rounding), eager and
compiled alike."""
import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn

torch = pytest.importorskip("torch")


def _build(M, kind):
    n = M.nn
    if kind == "mlp":
        return n.Sequential(n.Linear(10, 32), n.Tanh(), n.LayerNorm(32), n.Linear(32, 3))
    if kind == "mlp_float64":
        return n.Sequential(n.Linear(6, 9, dtype=M.float64), n.Linear(9, 1, dtype=M.float64))
    if kind == "embedding":
        return n.Sequential(n.Embedding(20, 8, padding_idx=0), n.Linear(8, 4, bias=False))
    if kind == "cells":
        return n.ModuleList([n.RNNCell(3, 5), n.LSTMCell(5, 4), n.GRUCell(4, 6)])
    return n.Sequential(n.Linear(4, 4), n.GroupNorm(2, 4), n.BatchNorm1d(4), n.PReLU())


@pytest.mark.parametrize("seed", [0, 1, 77])
@pytest.mark.parametrize("kind", ["mlp", "mlp_float64", "embedding", "cells", "norms"])
def test_parameters_are_pytorchs(seed, kind):
    torch.manual_seed(seed)
    want = [(name, p.detach().numpy()) for name, p in _build(torch, kind).named_parameters()]
    tg.manual_seed(seed)
    got = [(name, p.detach().numpy()) for name, p in _build(tg, kind).named_parameters()]
    assert [n for n, _ in got] == [n for n, _ in want]
    for (name, a), (_, b) in zip(got, want):
        np.testing.assert_array_equal(a, b, strict=True, err_msg=name)
    np.testing.assert_array_equal(tg.rand(3).numpy(), torch.rand(3).numpy())


def _step_model(M):
    n = M.nn
    return n.Sequential(n.Linear(10, 32), n.ReLU(), n.Dropout(0.3), n.Linear(32, 3))


def _torch_losses(steps):
    torch.manual_seed(3)
    model = _step_model(torch)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 10)
    y = torch.randint(0, 3, (16,))
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().numpy() for p in model.parameters()]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_training_with_dropout_gives_pytorchs_losses(compiled):
    steps = 4
    want, want_params = _torch_losses(steps)
    tg.manual_seed(3)
    model = _step_model(tg)
    opt = tg.optim.SGD(model.parameters(), lr=0.1)
    x = tg.randn(16, 10)
    y = tg.randint(0, 3, (16,))

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    if compiled:
        step = tg.compile(step)
    got = [step(x, y).item() for _ in range(steps)]
    np.testing.assert_allclose(got, want, rtol=2e-6)
    for a, b in zip(model.parameters(), want_params):
        np.testing.assert_allclose(a.detach().numpy(), b, rtol=1e-5, atol=1e-6)
    assert len(set(got)) == steps        # each step drew its own mask


def test_dropout_mask_positions_and_scale():
    torch.manual_seed(9)
    want = torch.nn.functional.dropout(torch.ones(40, 30), 0.15).numpy()
    tg.manual_seed(9)
    got = F.dropout(tg.ones(40, 30), 0.15).numpy()
    np.testing.assert_array_equal(got, want, strict=True)
    layer = nn.Dropout(0.15)
    tg.manual_seed(9)
    np.testing.assert_array_equal(layer(tg.ones(40, 30)).numpy(), want)
    layer.eval()
    assert tg.equal(layer(tg.ones(4)), tg.ones(4))
    # p = 1 multiplies by zero and draws nothing, as PyTorch does
    torch.manual_seed(1)
    tg.manual_seed(1)
    assert not F.dropout(tg.ones(5), 1.0).numpy().any()
    np.testing.assert_array_equal(tg.rand(3).numpy(), torch.rand(3).numpy())
