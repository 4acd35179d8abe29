"""The demo's models (LeNet-5, a character LSTM, a causal character transformer) train for
200 steps on tapegrad and on PyTorch from the same initial weights and the same batches,
and the loss curves agree to float rounding (float64: to 1e-9 relative at every step),
eagerly and with the step under tapegrad.compile. Default initialisation after the same
seed is PyTorch's bit for bit."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad._demo import data, models

torch = pytest.importorskip("torch")
STEPS = 200


def _digits():
    X, Y = data.digits(256, seed=0)
    return models.batches(X.astype(np.float64), Y, 16, seed=0)


def _text(context):
    vocab, tokens = data.char_dataset(data.text(120))
    return len(vocab), models.sequence_batches(tokens, context, 8, seed=0)


def _setup(kind):
    if kind == "lenet":
        return (lambda lib: models.lenet(lib), _digits,
                lambda lib, m: lib.optim.SGD(m.parameters(), lr=0.05, momentum=0.9))
    if kind == "lstm":
        vocab, _ = _text(16)
        return (lambda lib: models.char_lstm(lib, vocab, embed=16, hidden=32),
                lambda: _text(16)[1], lambda lib, m: lib.optim.Adam(m.parameters(), lr=3e-3))
    vocab, _ = _text(16)
    return (lambda lib: models.char_transformer(lib, vocab, context=16, d_model=32, heads=4),
            lambda: _text(16)[1], lambda lib, m: lib.optim.AdamW(m.parameters(), lr=3e-3))


def _curve(lib, model, stream, make_opt, compiled=False):
    step = models.classifier_step(lib, model, make_opt(lib, model))
    if compiled:
        step = lib.compile(step)
    it = stream()
    out = []
    for _ in range(STEPS):
        x, y = next(it)
        out.append(step(lib.tensor(x), lib.tensor(y)).item())
    return np.array(out)


@pytest.fixture
def float64():
    tg.set_default_dtype(tg.float64)
    torch.set_default_dtype(torch.float64)
    yield
    tg.set_default_dtype(tg.float32)
    torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("kind", ["lenet", "lstm", "transformer"])
def test_training_follows_pytorchs_loss_curve(kind, compiled, float64):
    build, stream, make_opt = _setup(kind)
    tg.manual_seed(0)
    model = build(tg)
    tmodel = build(torch)
    models.copy_weights(model, tmodel, torch)
    ours = _curve(tg, model, stream, make_opt, compiled)
    theirs = _curve(torch, tmodel, stream, make_opt)
    assert theirs[-1] < 0.8 * theirs[0]         # (it learns: the comparison is not vacuous)
    np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", ["lenet", "lstm", "transformer"])
def test_default_initialisation_is_pytorchs_after_the_same_seed(kind):
    build, _, _ = _setup(kind)
    tg.manual_seed(0)
    ours = build(tg).state_dict()
    torch.manual_seed(0)
    theirs = build(torch).state_dict()
    assert list(ours) == list(theirs)
    for k in ours:
        assert np.array_equal(ours[k].numpy(), theirs[k].numpy()), k
