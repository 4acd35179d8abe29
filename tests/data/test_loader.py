"""tapegrad.utils.data against PyTorch's torch.utils.data: the same batches (indices and
values) for the same seeds, the same generator states afterwards, the same collated types
and the same errors; the TensorDataset fast path equal to the per-sample path; workers."""
import collections
import warnings

import numpy as np
import pytest
import tapegrad as tg
from tapegrad.utils import data as G

torch = pytest.importorskip("torch")
T = torch.utils.data


def _np(x):
    return x.detach().numpy() if hasattr(x, "detach") else np.asarray(x)


def _same_batch(a, b):
    if isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _same_batch(x, y)
        return
    assert str(a.dtype).split(".")[-1] == str(b.dtype).split(".")[-1]
    assert tuple(a.shape) == tuple(b.shape)
    np.testing.assert_array_equal(_np(a), _np(b))


def _data(n=53):
    x = np.random.default_rng(0).standard_normal((n, 3, 2)).astype(np.float32)
    return x, np.arange(n) * 7 % 11


@pytest.mark.parametrize("seed", [0, 5, 999])
@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
def test_shuffled_batches_and_rng_state_are_pytorchs(seed, explicit, drop_last):
    x, y = _data()
    torch.manual_seed(seed)
    tg.manual_seed(seed)
    kt = {"generator": torch.Generator().manual_seed(seed + 1)} if explicit else {}
    kg = {"generator": tg.Generator().manual_seed(seed + 1)} if explicit else {}
    lt = T.DataLoader(T.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
                      batch_size=8, shuffle=True, drop_last=drop_last, **kt)
    lg = G.DataLoader(G.TensorDataset(tg.from_numpy(x), tg.from_numpy(y)),
                      batch_size=8, shuffle=True, drop_last=drop_last, **kg)
    assert len(lt) == len(lg)
    for _ in range(3):
        bt, bg = list(lt), list(lg)
        assert len(bt) == len(bg)
        for a, b in zip(bg, bt):
            _same_batch(a, b)
    assert torch.get_rng_state().tolist() == tg.get_rng_state().tolist()
    if explicit:
        assert kt["generator"].get_state().tolist() == kg["generator"].get_state().tolist()


def test_draws_interleaved_with_the_loop_are_pytorchs():
    """Draws from the default generator between batches (dropout, say) see the state
    PyTorch's would."""
    out = {}
    for M, D in ((torch, T), (tg, G)):
        M.manual_seed(3)
        seen = []
        for (b,) in D.DataLoader(D.TensorDataset(M.arange(20)), batch_size=6, shuffle=True):
            seen.append((b.tolist(), M.rand(2).tolist()))
        out[M.__name__] = seen
    assert out["torch"] == out["tapegrad"]


@pytest.mark.parametrize("shuffle", [False, True])
def test_fast_path_equals_the_per_sample_path(shuffle):
    x, y = _data(30)
    tensors = (tg.from_numpy(x), tg.from_numpy(y), tg.from_numpy(y > 4),
               tg.from_numpy(x[:, 0, 0].astype(np.float64)))

    class PerSample(G.TensorDataset):
        def __getitem__(self, i):
            return super().__getitem__(i)

    tg.manual_seed(1)
    fast = list(G.DataLoader(G.TensorDataset(*tensors), batch_size=7, shuffle=shuffle))
    tg.manual_seed(1)
    slow = list(G.DataLoader(PerSample(*tensors), batch_size=7, shuffle=shuffle))
    assert len(fast) == len(slow) == 5
    for a, b in zip(fast, slow):
        _same_batch(a, b)


def test_fast_path_with_a_custom_batch_sampler_and_requires_grad():
    w = tg.arange(12.0).reshape(6, 2).requires_grad_()
    ds = G.TensorDataset(w, tg.arange(6))
    (xb, yb), = list(G.DataLoader(ds, batch_sampler=[[5, 0, 3]]))
    assert yb.tolist() == [5, 0, 3] and xb.requires_grad
    xb.sum().backward()
    assert w.grad.sum().item() == 6.0
    with pytest.raises(IndexError):
        list(G.DataLoader(G.TensorDataset(tg.arange(3)), batch_sampler=[[7]]))


def _pair(x, y, **kw):
    """The same loader in PyTorch and tapegrad, over the same arrays (shared memory)."""
    lt = T.DataLoader(T.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
                      generator=torch.Generator().manual_seed(7), **kw)
    lg = G.DataLoader(G.TensorDataset(tg.from_numpy(x), tg.from_numpy(y)),
                      generator=tg.Generator().manual_seed(7), **kw)
    return lt, lg


def test_gathered_batches_are_independent_tensors():
    """Each batch owns its memory, as PyTorch's stacked batches do: writing into one
    changes neither the others nor the dataset, a batch kept past later ones keeps its
    values, and a batch is an ordinary leaf one can backpropagate through."""
    x, y = _data(40)
    x0 = x.copy()
    lt, lg = _pair(x, y, batch_size=8, shuffle=True)
    want = [(a.numpy().copy(), b.numpy().copy()) for a, b in lt]
    got = list(lg)
    assert len(got) == len(want) == 5
    for xb, yb in got:
        assert xb.is_contiguous() and xb.is_leaf and not xb.requires_grad
        assert xb.grad_fn is None and xb.dtype == tg.float32 and yb.dtype == tg.int64
    got[0][0].mul_(0.0)
    got[1][1].add_(100)
    got[2][0].requires_grad_()
    (got[2][0] * 3.0).sum().backward()
    np.testing.assert_array_equal(got[2][0].grad.numpy(), np.full((8, 3, 2), 3.0, np.float32))
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(got[0][0].numpy(), np.zeros((8, 3, 2), np.float32))
    np.testing.assert_array_equal(got[1][1].numpy(), want[1][1] + 100)
    for k in range(2, 5):
        np.testing.assert_array_equal(got[k][0].detach().numpy(), want[k][0])
        np.testing.assert_array_equal(got[k][1].numpy(), want[k][1])


def test_dropped_batches_reuse_memory_without_mixing():
    """A loop that drops each batch (its memory goes to the next) sees PyTorch's values
    in every batch, over several epochs, and leaves no tensor behind."""
    from tapegrad._engine.state import engine
    x = np.random.default_rng(1).standard_normal((300, 17)).astype(np.float32)
    y = np.arange(300) * 3
    lt, lg = _pair(x, y, batch_size=16, shuffle=True)
    before = engine().stats()
    for _ in range(3):
        for (xt, yt), (xg, yg) in zip(lt, lg):
            _same_batch([xg, yg], [xt, yt])
            xg.add_(1.0)            # (a write into a buffer the next batch may reuse)
    del xg, yg
    engine().flush()                # (released ids are freed at the next compiled call)
    after = engine().stats()
    assert after["storages"] == before["storages"] and after["bytes"] == before["bytes"]


def test_the_dataset_is_read_at_each_batch():
    """A write into the dataset between batches (through its NumPy array or in place)
    shows in the next batch, as in PyTorch's loader (nothing is gathered ahead), and
    `tensor.data = ...` swaps the rows later batches come from."""
    x = np.zeros((12, 2), np.float32)
    y = np.arange(12)
    lt, lg = _pair(x, y, batch_size=3, shuffle=True)
    out = {}
    for M, loader in (("torch", lt), ("tapegrad", lg)):
        x[:] = 0.0
        seen = []
        for k, (xb, yb) in enumerate(loader):
            seen.append(_np(xb).tolist())
            x[:] = k + 1.0
            if k == 2:
                t = loader.dataset.tensors[0]
                t.data = t.data * 0.0 - 5.0     # (a new tensor: later batches read it)
        out[M] = seen
        loader.dataset.tensors[0].data = (torch if M == "torch" else tg).from_numpy(x)
    assert out["tapegrad"] == out["torch"]


def test_a_gather_that_needs_the_tables_to_grow():
    """Batches of many tensors kept alive: the gather finds the engine's tables full,
    they grow and it is retried (nothing made twice, nothing lost)."""
    from tapegrad._engine.state import engine
    cols = [tg.arange(6) * 10 + c for c in range(150)]
    kept = list(G.DataLoader(G.TensorDataset(*cols), batch_size=2, shuffle=True,
                             generator=tg.Generator().manual_seed(1)))
    kept += list(G.DataLoader(G.TensorDataset(*cols), batch_size=2, shuffle=True,
                              generator=tg.Generator().manual_seed(1)))
    order = [b.tolist() for b, in G.DataLoader(G.TensorDataset(tg.arange(6)), batch_size=2,
                                                shuffle=True,
                                                generator=tg.Generator().manual_seed(1))]
    assert len(kept) == 6 and engine().meta.shape[0] > 6 * 150
    for b, idx in zip(kept, order * 2):
        assert [t.tolist() for t in b] == [[i * 10 + c for i in idx] for c in range(150)]


@pytest.mark.parametrize("layout", ["rows strided", "columns strided", "expanded",
                                    "bool and float64"])
def test_gathered_layouts_are_pytorchs(layout):
    base = np.random.default_rng(2).standard_normal((30, 6, 4)).astype(np.float32)
    make = {
        "rows strided": lambda M: M.from_numpy(base)[::2, 1:5],
        "columns strided": lambda M: M.from_numpy(base)[:15, :, ::2].transpose(1, 2),
        "expanded": lambda M: M.from_numpy(base[:1, 0]).expand(15, 4),
        "bool and float64": lambda M: M.from_numpy(base[:15, 0, 0] > 0),
    }[layout]
    out = {}
    for M, D in ((torch, T), (tg, G)):
        extra = M.from_numpy(base[:15, 1].astype(np.float64))
        ds = D.TensorDataset(make(M), extra)
        loader = D.DataLoader(ds, batch_size=4, shuffle=True,
                              generator=M.Generator().manual_seed(3))
        out[M.__name__] = list(loader) + list(D.DataLoader(ds, batch_sampler=[[-1, 0, -15]]))
    for a, b in zip(out["tapegrad"], out["torch"]):
        _same_batch(a, b)


def test_samplers_are_pytorchs():
    for seed in (0, 11):
        pairs = [
            (T.RandomSampler(range(9), replacement=True, num_samples=75,
                             generator=torch.Generator().manual_seed(seed)),
             G.RandomSampler(range(9), replacement=True, num_samples=75,
                             generator=tg.Generator().manual_seed(seed))),
            (T.RandomSampler(range(9), num_samples=20,
                             generator=torch.Generator().manual_seed(seed)),
             G.RandomSampler(range(9), num_samples=20,
                             generator=tg.Generator().manual_seed(seed))),
            (T.SubsetRandomSampler([4, 2, 8, 1], torch.Generator().manual_seed(seed)),
             G.SubsetRandomSampler([4, 2, 8, 1], tg.Generator().manual_seed(seed))),
            (T.WeightedRandomSampler([1, 2.5, 0, 4], 9,
                                     generator=torch.Generator().manual_seed(seed)),
             G.WeightedRandomSampler([1, 2.5, 0, 4], 9,
                                     generator=tg.Generator().manual_seed(seed))),
            (T.BatchSampler(T.SequentialSampler(range(10)), 3, True),
             G.BatchSampler(G.SequentialSampler(range(10)), 3, True)),
            (T.BatchSampler(range(10), 4, False), G.BatchSampler(range(10), 4, False)),
        ]
        for t, g in pairs:
            assert list(t) == list(g) and len(t) == len(g)


def test_random_split_is_pytorchs():
    for lengths in ([3, 4, 4], [0.5, 0.5], [0.25, 0.25, 0.25, 0.25], [0.1, 0.9]):
        torch.manual_seed(4)
        tg.manual_seed(4)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            st = T.random_split(range(11), lengths)
            sg = G.random_split(range(11), lengths)
        assert [s.indices for s in st] == [s.indices for s in sg]
        assert [list(s) for s in st] == [list(s) for s in sg]
    with pytest.warns(UserWarning, match="Length of split at index 2 is 0"):
        G.random_split(range(5), [0.5, 0.5, 0.0])


Point = collections.namedtuple("Point", "x y")


@pytest.mark.parametrize("batch", [
    [1, 2, 3], [1.5, 2.0], [True, False], ["a", "b"], [b"a", b"b"],
    [(1, 2.0), (3, 4.0)], [[1, 2], [3, 4]], [{"a": 1, "b": [1.0]}, {"a": 2, "b": [2.0]}],
    [Point(1, 2.0), Point(3, 4.0)], [np.array([1, 2], np.float32)] * 2,
    [np.float32(1.5), np.float32(2)], [np.int64(3), np.int64(4)], [np.float64(1)],
])
def test_default_collate_is_pytorchs(batch):
    def lift(M, b):
        return [M.tensor([1.0, 2.0])] * 2 if b is None else b
    got, want = G.default_collate(lift(tg, batch)), T.default_collate(lift(torch, batch))
    _collated_equal(got, want)


def _collated_equal(got, want):
    if isinstance(want, torch.Tensor):
        assert isinstance(got, tg.Tensor)
        _same_batch(got, want)
    elif isinstance(want, dict):
        assert type(got) is type(want) and list(got) == list(want)
        for k in want:
            _collated_equal(got[k], want[k])
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want)
        for a, b in zip(got, want):
            _collated_equal(a, b)
    else:
        assert got == want


def test_tensor_collate_and_default_convert():
    _same_batch(G.default_collate([tg.ones(2, 2), tg.zeros(2, 2)]),
                T.default_collate([torch.ones(2, 2), torch.zeros(2, 2)]))
    _collated_equal(G.default_convert({"a": np.arange(3), "b": (np.zeros(1), 2)}),
                    T.default_convert({"a": np.arange(3), "b": (np.zeros(1), 2)}))


def _error(fn):
    try:
        fn()
    except Exception as e:      # noqa: BLE001
        return type(e).__name__, str(e)
    return None


def _both(make):
    return _error(lambda: make(torch, T)), _error(lambda: make(tg, G))


ERRORS = {
    "unknown keyword": lambda M, D: D.DataLoader(range(3), shufle=True),
    "negative workers": lambda M, D: D.DataLoader(range(3), num_workers=-1),
    "batch_size 0": lambda M, D: D.DataLoader(range(3), batch_size=0),
    "batch_size float": lambda M, D: D.DataLoader(range(3), batch_size=2.0),
    "shuffle with sampler": lambda M, D: D.DataLoader(range(3), sampler=[0], shuffle=True),
    "batch_sampler exclusive": lambda M, D: D.DataLoader(range(3), batch_sampler=[[0]],
                                                         drop_last=True),
    "batch_size None drop_last": lambda M, D: D.DataLoader(range(3), batch_size=None,
                                                           drop_last=True),
    "timeout": lambda M, D: D.DataLoader(range(3), timeout=-1),
    "prefetch": lambda M, D: D.DataLoader(range(3), prefetch_factor=2),
    "persistent": lambda M, D: D.DataLoader(range(3), persistent_workers=True),
    "context": lambda M, D: D.DataLoader(range(3), multiprocessing_context="spawn"),
    "empty shuffled": lambda M, D: D.DataLoader(D.TensorDataset(M.zeros(0, 2)), shuffle=True),
    "empty": lambda M, D: (len(D.DataLoader(D.TensorDataset(M.zeros(0, 2)))),
                           list(D.DataLoader(D.TensorDataset(M.zeros(0, 2))))),
    "split lengths": lambda M, D: D.random_split(range(5), [2, 2]),
    "split fractions": lambda M, D: D.random_split(range(5), [0.5, 0.4]),
    "split bad fraction": lambda M, D: D.random_split(range(5), [1.5, -0.5]),
    "tensor sizes": lambda M, D: D.TensorDataset(M.zeros(2), M.zeros(3)),
    "num_samples": lambda M, D: D.RandomSampler(range(3), num_samples=-1),
    "replacement": lambda M, D: D.RandomSampler(range(3), replacement=1),
    "weighted num_samples": lambda M, D: D.WeightedRandomSampler([1.0], 0),
    "weighted shape": lambda M, D: D.WeightedRandomSampler([[1.0]], 1),
    "weighted negative": lambda M, D: list(D.WeightedRandomSampler([1.0, -1.0], 2)),
    "weighted nan": lambda M, D: list(D.WeightedRandomSampler([1.0, float("nan")], 2)),
    "weighted zero": lambda M, D: list(D.WeightedRandomSampler([0.0, 0.0], 2)),
    "weighted too many": lambda M, D: list(D.WeightedRandomSampler([1.0], 2, False)),
    "drop_last type": lambda M, D: D.BatchSampler(range(3), 2, 1),
    "collate sizes": lambda M, D: D.default_collate([M.zeros(2), M.zeros(3)]),
    "collate type": lambda M, D: D.default_collate([object()]),
    "collate lists": lambda M, D: D.default_collate([[1, 2], [1]]),
    "collate strings": lambda M, D: D.default_collate([np.array(["a"])]),
    "odd collate_fn": lambda M, D: list(D.DataLoader(range(5), batch_size=2,
                                                      collate_fn=lambda b: "x")),
    "set after init": lambda M, D: setattr(D.DataLoader(range(3)), "batch_size", 2),
    "concat empty": lambda M, D: D.ConcatDataset([]),
    "iterable shuffle": lambda M, D: D.DataLoader(
        type("S", (D.IterableDataset,), {"__iter__": lambda self: iter(())})(), shuffle=True),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_are_pytorchs(name):
    want, got = _both(ERRORS[name])
    if name == "unknown keyword":
        want = (want[0], want[1].replace("DataLoader.__init__()", "__init__()"))
        got = (got[0], got[1].replace("DataLoader.__init__()", "__init__()"))
    assert got == want


def test_no_batching_pin_memory_and_datasets():
    with pytest.warns(UserWarning, match="pin_memory"):
        assert [b.tolist() for b in G.DataLoader(range(3), pin_memory=True)] == [[0], [1], [2]]
    assert list(G.DataLoader(range(4), batch_size=None)) == [0, 1, 2, 3]
    c = G.TensorDataset(tg.arange(3)) + G.TensorDataset(tg.arange(3, 5))
    assert len(c) == 5 and c[-1][0].item() == 4 and c[3][0].item() == 3
    s = G.Subset(G.TensorDataset(tg.arange(10)), [9, 2])
    assert [b[0].tolist() for b in G.DataLoader(s, batch_size=2)] == [[9, 2]]
    st = G.StackDataset(a=range(3), b=range(10, 13))
    assert [b["b"].tolist() for b in G.DataLoader(st, batch_size=3)] == [[10, 11, 12]]


class _Stream(G.IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = G.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, self.n, step))

    def __len__(self):
        return self.n


def _seed_of_worker(worker_id):
    info = G.get_worker_info()
    assert info.id == worker_id and info.num_workers == 2


def test_workers_give_the_batches_and_seeds_pytorch_gives():
    tg.manual_seed(8)
    torch.manual_seed(8)
    x = np.arange(40.0, dtype=np.float32)
    lg = G.DataLoader(G.TensorDataset(tg.from_numpy(x)), batch_size=6, shuffle=True,
                      num_workers=2, worker_init_fn=_seed_of_worker, persistent_workers=True)
    lt = T.DataLoader(T.TensorDataset(torch.from_numpy(x)), batch_size=6, shuffle=True,
                      num_workers=2, persistent_workers=True)
    for _ in range(2):
        assert [b[0].tolist() for b in lg] == [b[0].tolist() for b in lt]
    assert torch.get_rng_state().tolist() == tg.get_rng_state().tolist()
    assert G.get_worker_info() is None
    assert sorted(b.tolist() for b in G.DataLoader(_Stream(7), batch_size=2, num_workers=2)) \
        == [[0, 2], [1, 3], [4, 6], [5]]


def _fail(worker_id):
    raise KeyError("boom")


def test_worker_errors_reach_the_main_process():
    with pytest.raises(KeyError, match="boom"):
        list(G.DataLoader(range(4), num_workers=2, worker_init_fn=_fail))


def test_worker_seed_hash_is_pytorchs():
    from tapegrad.utils.data.worker import _generate_state
    from torch.utils.data._utils.worker import _generate_state as want
    for base, wid in ((0, 0), (123456789012345, 3), ((1 << 63) - 5, 1)):
        assert _generate_state(base, wid) == want(base, wid)
