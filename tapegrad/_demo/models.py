"""The demo's models and their training step, written once in PyTorch's spelling for
either library (``lib`` is tapegrad or torch): the demo, the benchmarks and the scenario
tests build both sides of a comparison from this code."""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)


def mlp(lib, hidden=32, classes=3):
    """2 -> hidden -> hidden -> classes with tanh: the spirals classifier."""
    nn = lib.nn
    return nn.Sequential(nn.Linear(2, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, classes))


def lenet(lib, classes=10):
    """LeNet-5 for 1 x 28 x 28 images: two 5x5 convolutions with ReLU and 2x2 max pooling,
    then 256 -> 120 -> 84 -> classes."""
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(16 * 4 * 4, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                         nn.Linear(84, classes))


def cnn3(lib, classes=10, channels=(32, 64, 128)):
    """Three blocks of 3x3 convolution (padding 1), batch norm, ReLU and 2x2 max pooling
    for 3 x 32 x 32 images, then a linear classifier."""
    nn = lib.nn
    layers, c_in = [], 3
    for c in channels:
        layers += [nn.Conv2d(c_in, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(),
                   nn.MaxPool2d(2)]
        c_in = c
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(c_in * 4 * 4, classes))


def char_lstm(lib, vocab, embed=64, hidden=128, layers=2):
    """A character language model: embedding, a multi-layer LSTM, a linear read-out."""
    nn = lib.nn

    class CharLSTM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, embed)
            self.lstm = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True)
            self.head = nn.Linear(hidden, vocab)

        def forward(self, idx):
            out, _ = self.lstm(self.embed(idx))
            return self.head(out)
    return CharLSTM()


def char_transformer(lib, vocab, context=32, d_model=64, heads=4, layers=2, dropout=0.0):
    """A causal character transformer: token and position embeddings, pre-norm encoder
    layers under a causal mask, a final layer norm and a linear read-out."""
    nn = lib.nn

    class CharTransformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, d_model)
            self.pos = nn.Embedding(context, d_model)
            layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout,
                                               batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, vocab)
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(
                context), persistent=False)
            # (positions as a buffer, not an arange in forward: tapegrad.compile replays
            # tensors made outside the step, and would run a step making one eagerly)
            self.register_buffer("positions", lib.arange(context), persistent=False)

        def forward(self, idx):
            t = idx.shape[1]
            x = self.tok(idx) + self.pos(self.positions[:t])
            x = self.blocks(x, mask=self.mask[:t, :t], is_causal=True)
            return self.head(self.norm(x))
    return CharTransformer()


def copy_weights(src, dst, lib):
    """Give dst (a model of library lib) src's weights (the same starting point)."""
    dst.load_state_dict({k: lib.tensor(v.detach().numpy()) for k, v in src.state_dict().items()})


def classifier_step(lib, model, opt):
    """One training step on (inputs, labels): zero_grad, cross entropy, backward, step;
    returns the loss. Sequence models' logits (B, T, V) are flattened to (B*T, V)."""
    loss_fn = lib.nn.CrossEntropyLoss()

    def step(x, y):
        opt.zero_grad()
        logits = model(x)
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss
    return step


def batches(X, Y, batch, seed=0):
    """An endless stream of (x, y) NumPy batches drawn with a seeded generator (the same
    batches for both libraries)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    while True:
        ix = rng.integers(0, len(X), batch)
        yield X[ix], Y[ix]


def sequence_batches(tokens, context, batch, seed=0):
    """An endless stream of (inputs, next-character targets) (batch, context) int64 pairs
    cut at seeded random offsets from a token array."""
    import numpy as np
    rng = np.random.default_rng(seed)
    while True:
        at = rng.integers(0, len(tokens) - context - 1, batch)
        ix = at[:, None] + np.arange(context)[None]
        yield tokens[ix], tokens[ix + 1]
