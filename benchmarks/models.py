"""The small networks of tapegrad's users as benchmarks.compare workloads: LeNet-5, a
3-block CNN, a character LSTM and a character transformer, one training step each
(forward, cross entropy, backward, optimizer step), eager and under tapegrad.compile,
against PyTorch eager. The models are the demo's (tapegrad/_demo/models.py), built in
each library from the same initial weights; the batch is fixed."""
if __package__:
    from .compare import Workload, Impl, _np
else:                                   # run as a plain script
    from compare import Workload, Impl, _np


class _BiasTolerance(dict):
    """Values compared at the default tolerance, biases at 5%: a bias starts at zero, and
    Adam's first steps move it by +-lr whatever the size of its (float32-rounded) gradient,
    so near-zero gradients may step either way in either library."""

    def get(self, name, default=None):
        return 0.05 if "bias" in name else default


class ModelStep(Workload):
    """One training step of a demo model; compiled: tapegrad runs it under
    tapegrad.compile (PyTorch eagerly)."""
    rows = (("main", "", "µs/step", 1),)
    compiled = False
    tol = _BiasTolerance()

    def build(self, lib):
        raise NotImplementedError

    def batch(self):
        raise NotImplementedError

    def optimizer(self, lib, model):
        return lib.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def eager(self, M):
        from tapegrad._demo import models
        tg = self.L.tg
        tg.manual_seed(0)
        reference = self.build(tg)
        if M is tg:
            model = reference
        else:
            model = self.build(M)
            models.copy_weights(reference, model, M)
        step = models.classifier_step(M, model, self.optimizer(M, model))
        if self.compiled and M is tg:
            step = M.compile(step)
        x, y = (M.tensor(a) for a in self.batch())

        def loop(n):
            for _ in range(n):
                step(x, y)

        def values():
            step(x, y)                  # (a compiled step's first call records)
            rec = {"loss": _np(step(x, y))}
            for name, p in model.named_parameters():
                rec[name] = _np(p)
            return rec
        return Impl(values, loop)


class LeNetStep(ModelStep):
    key, title = "lenet_step", "LeNet-5 training step, batch 64, 1x28x28, SGD, float32"

    def build(self, lib):
        from tapegrad._demo import models
        return models.lenet(lib)

    def batch(self):
        from tapegrad._demo import data
        return data.digits(64, seed=3)


class ReplayLeNet(LeNetStep):
    key, title = ("replay_lenet", "replayed LeNet-5 training step (tapegrad.compile), batch "
                  "64, 1x28x28, SGD, float32")
    compiled = True


class CNN3Step(ModelStep):
    key, title = ("cnn3_step", "3-block CNN (32/64/128 channels, batch norm) training step, "
                  "batch 64, 3x32x32, SGD, float32")

    def build(self, lib):
        from tapegrad._demo import models
        return models.cnn3(lib)

    def batch(self):
        import numpy as np
        rng = np.random.default_rng(4)
        return (rng.standard_normal((64, 3, 32, 32)).astype(np.float32),
                rng.integers(0, 10, 64))


class _CharStep(ModelStep):
    vocab, context, batch_size = 65, None, 32

    def batch(self):
        import numpy as np
        rng = np.random.default_rng(5)
        tokens = rng.integers(0, self.vocab, (self.batch_size, self.context + 1))
        return tokens[:, :-1], tokens[:, 1:]


class LSTMStep(_CharStep):
    key, title = ("lstm_step", "character LSTM training step (2 layers, hidden 128, sequence "
                  "64, batch 32), Adam, float32")
    context = 64

    def build(self, lib):
        from tapegrad._demo import models
        return models.char_lstm(lib, self.vocab, embed=64, hidden=128, layers=2)

    def optimizer(self, lib, model):
        return lib.optim.Adam(model.parameters(), lr=1e-3)


class ReplayLSTM(LSTMStep):
    key, title = ("replay_lstm", "replayed character LSTM training step (tapegrad.compile), "
                  "2 layers, hidden 128, sequence 64, batch 32, float32")
    compiled = True


class TransformerStep(_CharStep):
    key, title = ("transformer_step", "character transformer training step (2 layers, "
                  "d_model 64, 4 heads, context 32, batch 32), AdamW, float32")
    context = 32

    def build(self, lib):
        from tapegrad._demo import models
        return models.char_transformer(lib, self.vocab, context=self.context)

    def optimizer(self, lib, model):
        return lib.optim.AdamW(model.parameters(), lr=1e-3)


class ReplayTransformer(TransformerStep):
    key, title = ("replay_transformer", "replayed character transformer training step "
                  "(tapegrad.compile), 2 layers, d_model 64, context 32, batch 32, float32")
    compiled = True


def model_workloads(L):
    return [LeNetStep(L), ReplayLeNet(L), CNN3Step(L), LSTMStep(L), ReplayLSTM(L),
            TransformerStep(L), ReplayTransformer(L)]

