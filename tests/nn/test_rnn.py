"""nn.RNN / nn.LSTM / nn.GRU and nn.utils.rnn against PyTorch: initialisation bit for bit,
state dicts both ways, values and float64 gradients from the same weights over the
argument variants, packed sequences, dropout's draws, errors, and a compiled training
step equal to eager."""
import numpy as np
import pytest

import tapegrad as tg
from tests.helpers import assert_same_error
from tests.replay.helpers import compile_, no_break

torch = pytest.importorskip("torch")


def _lib_dtype(L, name):
    return getattr(L, name)


def _pair(cls, *args, dtype="float64", **kw):
    """The same module in both libraries, tapegrad's with torch's weights."""
    torch.manual_seed(0)
    tm = getattr(torch.nn, cls)(*args, **kw).to(getattr(torch, dtype))
    gm = getattr(tg.nn, cls)(*args, **kw).to(getattr(tg, dtype))
    gm.load_state_dict({k: tg.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    return tm, gm


def _flat(out):
    if hasattr(out, "batch_sizes"):       # a PackedSequence: its data
        return [out.data]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    return [out]


def _run_both(tm, gm, make, dtype, tol):
    """make(L, requires_grad) -> inputs tuple for the module; compares results and the
    gradients of a fixed weighting of every output with respect to inputs and weights."""
    rng_vals = {}
    outs = []
    for L, m in ((torch, tm), (tg, gm)):
        ins = make(L, dtype, rng_vals)
        res = _flat(m(*ins))
        ws = [np.random.default_rng(7 + k).standard_normal(tuple(o.shape))
              for k, o in enumerate(res)]
        loss = sum((o * L.tensor(w, dtype=o.dtype)).sum() for o, w in zip(res, ws))
        loss.backward()
        grads = [p.grad.numpy().copy() for _, p in sorted(m.named_parameters())]
        grads += [t.grad.numpy().copy() for t in _leaves(ins) if t.grad is not None]
        outs.append(([o.detach().numpy().copy() for o in res], grads))
    (ot, gt), (og, gg) = outs
    assert len(ot) == len(og) and len(gt) == len(gg)
    for a, b in zip(og, ot):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    for a, b in zip(gg, gt):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, np.abs(b).max()))


def _leaves(ins):
    for t in ins:
        if isinstance(t, (tuple, list)):
            yield from _leaves(t)
        elif hasattr(t, "requires_grad") and t.requires_grad:
            yield t


def _tensor(L, name, rng_vals, shape, dtype, grad=True):
    if name not in rng_vals:
        rng_vals[name] = np.random.default_rng(len(rng_vals) + 1).uniform(-1, 1, shape)
    return L.tensor(rng_vals[name], dtype=getattr(L, dtype), requires_grad=grad)


# ---------------------------------------------------------------- initialisation, state dicts
@pytest.mark.parametrize("cls, args, kw", [
    ("LSTM", (10, 20, 2), {}),
    ("LSTM", (10, 20, 2), {"proj_size": 5, "bidirectional": True, "bias": False}),
    ("GRU", (7, 9, 3), {"bidirectional": True}),
    ("RNN", (4, 6), {"nonlinearity": "relu", "num_layers": 2}),
])
def test_default_init_is_torch_bit_for_bit(cls, args, kw):
    torch.manual_seed(0)
    tm = getattr(torch.nn, cls)(*args, **kw)
    tg.manual_seed(0)
    gm = getattr(tg.nn, cls)(*args, **kw)
    tn = list(tm.named_parameters())
    gn = list(gm.named_parameters())
    assert [n for n, _ in gn] == [n for n, _ in tn]
    for (_, a), (_, b) in zip(gn, tn):
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    assert [[tuple(p.shape) for p in ws] for ws in gm.all_weights] == \
        [[tuple(p.shape) for p in ws] for ws in tm.all_weights]
    assert repr(gm) == repr(tm)


def test_state_dicts_load_both_ways():
    torch.manual_seed(1)
    tm = torch.nn.LSTM(5, 8, 2, proj_size=3, bidirectional=True)
    gm = tg.nn.LSTM(5, 8, 2, proj_size=3, bidirectional=True)
    gm.load_state_dict({k: tg.tensor(v.numpy()) for k, v in tm.state_dict().items()})
    back = torch.nn.LSTM(5, 8, 2, proj_size=3, bidirectional=True)
    back.load_state_dict({k: torch.tensor(v.numpy()) for k, v in gm.state_dict().items()})
    assert list(gm.state_dict()) == list(tm.state_dict())
    for k, v in tm.state_dict().items():
        np.testing.assert_array_equal(back.state_dict()[k].numpy(), v.numpy())
        np.testing.assert_array_equal(gm.state_dict()[k].numpy(), v.numpy())
    gm.flatten_parameters()         # (a no-op, as on PyTorch's CPU)


# ---------------------------------------------------------------- values and gradients
_VARIANTS = [
    ("LSTM", (3, 4), {}, False, False),
    ("LSTM", (3, 4, 2), {"bidirectional": True, "batch_first": True}, True, False),
    ("LSTM", (3, 5), {"proj_size": 2, "bias": False}, True, False),
    ("LSTM", (3, 5, 2), {"proj_size": 2, "bidirectional": True}, True, False),
    ("LSTM", (3, 4), {}, True, True),
    ("GRU", (3, 4, 2), {"batch_first": True}, True, False),
    ("GRU", (3, 4), {"bidirectional": True, "bias": False}, False, True),
    ("RNN", (3, 4, 2), {"nonlinearity": "tanh"}, True, False),
    ("RNN", (3, 4), {"nonlinearity": "relu", "bidirectional": True}, True, True),
]


@pytest.mark.parametrize("dtype, tol", [("float64", 1e-12), ("float32", 2e-5)])
@pytest.mark.parametrize("cls, args, kw, with_h0, unbatched", _VARIANTS)
def test_modules_match_torch(cls, args, kw, with_h0, unbatched, dtype, tol):
    tm, gm = _pair(cls, *args, dtype=dtype, **kw)
    ndir = 2 if kw.get("bidirectional") else 1
    nl = args[2] if len(args) > 2 else 1
    P = kw.get("proj_size") or args[1]
    T_, B = 5, 3

    def make(L, dt, vals):
        shape = (T_, args[0]) if unbatched else ((B, T_, args[0]) if kw.get("batch_first")
                                                 else (T_, B, args[0]))
        x = _tensor(L, "x", vals, shape, dt)
        if not with_h0:
            return (x,)
        hs = (nl * ndir, P) if unbatched else (nl * ndir, B, P)
        h = _tensor(L, "h", vals, hs, dt)
        if cls != "LSTM":
            return (x, h)
        cs = (nl * ndir, args[1]) if unbatched else (nl * ndir, B, args[1])
        return (x, (h, _tensor(L, "c", vals, cs, dt)))
    _run_both(tm, gm, make, dtype, tol)


@pytest.mark.parametrize("cls", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("sort", [True, False])
def test_packed_sequences_match_torch(cls, sort):
    tm, gm = _pair(cls, 3, 4, 2, bidirectional=True)
    lengths = [5, 3, 3, 1] if sort else [3, 5, 1, 3]

    def make(L, dt, vals):
        x = _tensor(L, "x", vals, (5, 4, 3), dt)
        packed = L.nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=sort)
        h = _tensor(L, "h", vals, (4, 4, 4), dt)
        return (packed, (h, _tensor(L, "c", vals, (4, 4, 4), dt)) if cls == "LSTM" else h)
    _run_both(tm, gm, make, "float64", 1e-12)
    # steps past a sequence's length leave its state alone: h_n of a length-1 sequence is
    # its first step's output
    for L, m in ((torch, tm), (tg, gm)):
        x = L.tensor(np.ones((5, 4, 3)))
        out, hid = m(L.nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=sort))
        padded, lens = L.nn.utils.rnn.pad_packed_sequence(out, total_length=6)
        assert tuple(padded.shape) == (6, 4, 8) and lens.tolist() == lengths
        if L is torch:
            want = (padded.detach().numpy(), (hid[0] if cls == "LSTM" else hid).detach().numpy())
        else:
            np.testing.assert_allclose(padded.detach().numpy(), want[0], rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose((hid[0] if cls == "LSTM" else hid).detach().numpy(),
                                       want[1], rtol=1e-12, atol=1e-12)


def test_dropout_between_layers_draws_torchs_masks():
    for cls in ("LSTM", "GRU"):
        tm, gm = _pair(cls, 3, 4, 3, dropout=0.5, bidirectional=True)
        x = np.random.default_rng(0).standard_normal((6, 2, 3))
        torch.manual_seed(5)
        ot = tm(torch.tensor(x))[0].detach().numpy()
        tg.manual_seed(5)
        og = gm(tg.tensor(x))[0].detach().numpy()
        np.testing.assert_allclose(og, ot, rtol=1e-12, atol=1e-12)
        assert torch.rand(1).item() == tg.rand(1).item()    # the streams moved alike
        gm.eval()
        tm.eval()
        np.testing.assert_allclose(gm(tg.tensor(x))[0].detach().numpy(),
                                   tm(torch.tensor(x))[0].detach().numpy(), atol=1e-12)


# ---------------------------------------------------------------- nn.utils.rnn
def test_padding_and_packing_utilities_match_torch():
    rng = np.random.default_rng(3)
    seqs = [rng.standard_normal((n, 2)) for n in (2, 4, 3)]
    res = {}
    for L in (torch, tg):
        U = L.nn.utils.rnn
        ts = [L.tensor(s, requires_grad=True) for s in seqs]
        a = U.pad_sequence(ts, batch_first=True, padding_value=-1.0)
        b = U.pad_sequence(ts, padding_side="left")
        p = U.pack_sequence(ts, enforce_sorted=False)
        pd, lens = U.pad_packed_sequence(p, batch_first=True, padding_value=9.0)
        back = U.unpack_sequence(p)
        un = U.unpad_sequence(a, L.tensor([2, 4, 3]), batch_first=True)
        (a.sum() * 2 + (b * b).sum() + (p.data ** 3).sum()).backward()
        res[L] = ([a, b, p.data, p.batch_sizes, p.sorted_indices, p.unsorted_indices, pd,
                   lens] + back + un, [t.grad for t in ts])
    for x, y in zip(*(r[0] for r in res.values())):
        np.testing.assert_allclose(y.detach().numpy(), x.detach().numpy(), rtol=1e-12)
    for x, y in zip(*(r[1] for r in res.values())):
        np.testing.assert_allclose(y.numpy(), x.numpy(), rtol=1e-12)
    assert tg.nn.utils.rnn.PackedSequence is not None
    import tapegrad.nn.utils.rnn as U
    assert U.pack_padded_sequence is tg.nn.utils.rnn.pack_padded_sequence


# ---------------------------------------------------------------- errors
def _err(make):
    assert_same_error(make)


def _x(L, *shape, dtype="float32"):
    return L.zeros(*shape, dtype=getattr(L, dtype))


@pytest.mark.parametrize("prog", [
    lambda L: L.nn.LSTM(3, 4)(_x(L, 5, 2, 3, 1)),
    lambda L: L.nn.LSTM(3, 4)(_x(L, 5, 2, 2)),
    lambda L: L.nn.GRU(3, 4)(_x(L, 5, 2, 3, 1)),
    lambda L: L.nn.RNN(3, 20, 2)(_x(L, 5, 3, 3), _x(L, 1, 3, 20)),
    lambda L: L.nn.LSTM(3, 4)(_x(L, 5, 2, 3), (_x(L, 1, 2, 4), _x(L, 1, 3, 4))),
    lambda L: L.nn.LSTM(3, 4)(_x(L, 5, 2, 3), (_x(L, 2, 4), _x(L, 2, 4))),
    lambda L: L.nn.LSTM(3, 4, proj_size=2)(_x(L, 5, 2, 3), (_x(L, 1, 2, 4), _x(L, 1, 2, 4))),
    lambda L: L.nn.GRU(3, 4)(_x(L, 5, 3), _x(L, 1, 1, 4)),
    lambda L: L.nn.GRU(3, 4)(_x(L, 5, 2, 3), _x(L, 2, 4)),
    lambda L: L.nn.LSTM(3, 4)(_x(L, 5, 2, 3, dtype="float64")),
    lambda L: L.nn.LSTM(3, 4)(_x(L, 5, 2, 3), (_x(L, 1, 2, 4, dtype="float64"), _x(L, 1, 2, 4))),
    lambda L: L.nn.GRU(3, 4)(_x(L, 5, 2, 3), _x(L, 1, 2, 4, dtype="float64")),
    lambda L: L.nn.RNN(3, 4).double()(_x(L, 5, 2, 3, dtype="float64"), _x(L, 1, 2, 4)),
    lambda L: L.nn.GRU(3, 4)(_x(L, 0, 2, 3)),
    lambda L: L.nn.LSTM(3, 4, proj_size=4),
    lambda L: L.nn.LSTM(3, 4, proj_size=-1),
    lambda L: L.nn.GRU(3, 4, dropout=1.5),
    lambda L: L.nn.GRU(3, 4, dropout=True),
    lambda L: L.nn.GRU(3, 4, proj_size=1),
    lambda L: L.nn.RNN(3, 4, nonlinearity="sigmoid"),
    lambda L: L.nn.RNN(3, 0),
    lambda L: L.nn.RNN(3, 4, 0),
    lambda L: L.nn.LSTM(3, 4, bias=1),
    lambda L: L.nn.LSTM(3.0, 4),
    lambda L: L.nn.utils.rnn.pack_padded_sequence(_x(L, 5, 3, 2), [2, 3, 1]),
    lambda L: L.nn.utils.rnn.pack_padded_sequence(_x(L, 5, 3, 2), [2, 0, 1],
                                                  enforce_sorted=False),
    lambda L: L.nn.utils.rnn.pack_padded_sequence(_x(L, 5, 3, 2), [3, 2]),
    lambda L: L.nn.utils.rnn.pad_packed_sequence(
        L.nn.utils.rnn.pack_padded_sequence(_x(L, 5, 3, 2), [3, 2, 1]), total_length=2),
    lambda L: L.nn.utils.rnn.pad_sequence([_x(L, 2, 3), _x(L, 3, 4)]),
    lambda L: L.nn.utils.rnn.pad_sequence([_x(L, 2, 3)], padding_side="middle"),
    lambda L: L.nn.utils.rnn.pad_sequence([]),
])
def test_errors_are_torchs(prog):
    _err(prog)


def test_dropout_warning_for_one_layer():
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        tg.nn.LSTM(3, 4, dropout=0.2)


# ---------------------------------------------------------------- compiled
def test_compiled_lstm_training_step_equals_eager():
    V, T_, B = 11, 6, 3

    def setup():
        tg.manual_seed(0)
        emb = tg.nn.Embedding(V, 5)
        lstm = tg.nn.LSTM(5, 8, 2)
        fc = tg.nn.Linear(8, V)
        params = list(emb.parameters()) + list(lstm.parameters()) + list(fc.parameters())
        opt = tg.optim.Adam(params, lr=1e-2)

        def step(x, y):
            opt.zero_grad()
            out, (h, c) = lstm(emb(x))
            loss = tg.nn.functional.cross_entropy(fc(out.reshape(-1, 8)), y) + (h * c).mean()
            loss.backward()
            opt.step()
            return loss
        return step, params

    rng = np.random.default_rng(0)
    data = [(tg.tensor(rng.integers(0, V, (T_, B))), tg.tensor(rng.integers(0, V, T_ * B)))
            for _ in range(4)]
    eager, pe = setup()
    le = [eager(x, y).item() for x, y in data]
    comp, pc = setup()
    cstep = compile_(comp)
    with no_break():
        lc = [cstep(x, y).item() for x, y in data]
    assert lc == le
    for a, b in zip(pc, pe):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


def test_no_grad_and_second_backward():
    m = tg.nn.GRU(3, 4)
    x = tg.randn(4, 2, 3)
    with tg.no_grad():
        out, h = m(x)
    assert not out.requires_grad
    out, h = m(x)
    h.sum().backward(retain_graph=False)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        h.sum().backward()


def test_one_row_per_layer_whatever_the_length():
    m = tg.nn.LSTM(3, 4, 3, bidirectional=True)
    sizes = []
    for steps in (2, 50):
        out, (h, c) = m(tg.randn(steps, 2, 3, requires_grad=True))
        seen, todo, names, kept = set(), [out.grad_fn, h.grad_fn, c.grad_fn], [], []
        while todo:
            n = todo.pop()
            if n is None or id(n) in seen:
                continue
            kept.append(n)          # (node wrappers are made on demand: keep their ids)
            seen.add(id(n))
            names.append(n.name())
            todo.extend(f for f, _ in n.next_functions)
        assert names.count("LstmBackward0") >= 3
        sizes.append(len(names))
    assert sizes[0] == sizes[1]         # (the same graph for 2 and 50 steps)
