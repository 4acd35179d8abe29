"""DistributedSampler: PyTorch's shard order for the same arguments (its permutation
comes from a Generator seeded with seed + epoch, whose stream tapegrad reproduces),
padding and drop_last, set_epoch, errors; in a DataLoader. No MPI needed when
num_replicas and rank are given."""
import pytest

import tapegrad as tg
from tapegrad.utils.data import DataLoader, DistributedSampler, TensorDataset
from tapegrad.utils.data.distributed import DistributedSampler as FromModule


def test_exported_where_pytorch_has_it():
    assert FromModule is DistributedSampler
    assert tg.utils.data.distributed.DistributedSampler is DistributedSampler


@pytest.mark.parametrize("n", [0, 1, 5, 10, 11, 37])
@pytest.mark.parametrize("replicas", [1, 2, 3, 4, 16])
@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("drop_last", [True, False])
def test_indices_equal_pytorchs(n, replicas, shuffle, drop_last):
    pytest.importorskip("torch")
    from torch.utils.data.distributed import DistributedSampler as TorchSampler
    for rank in range(replicas):
        ours = DistributedSampler(range(n), replicas, rank, shuffle, 3, drop_last)
        theirs = TorchSampler(range(n), replicas, rank, shuffle, 3, drop_last)
        for epoch in (0, 1, 7):
            ours.set_epoch(epoch)
            theirs.set_epoch(epoch)
            got = list(ours)
            assert got == list(theirs) and len(ours) == len(theirs)
            assert all(type(i) is int for i in got)
        assert (ours.num_samples, ours.total_size) == (theirs.num_samples, theirs.total_size)


def test_shards_cover_the_dataset_and_epochs_differ():
    shards = [list(DistributedSampler(range(10), 3, r, seed=1)) for r in range(3)]
    flat = sorted(sum(shards, []))
    assert len(flat) == 12 and set(flat) == set(range(10))      # 2 padded
    a = DistributedSampler(range(10), 3, 0, seed=1)
    first = list(a)
    a.set_epoch(1)
    assert list(a) != first
    a.set_epoch(0)
    assert list(a) == first


def test_does_not_touch_the_global_generator():
    tg.manual_seed(5)
    want = tg.rand(3)
    tg.manual_seed(5)
    list(DistributedSampler(range(10), 2, 0))
    assert tg.equal(tg.rand(3), want)


@pytest.mark.parametrize("kwargs, kind, message", [
    ({"num_replicas": 2, "rank": 2}, ValueError,
     r"^Invalid rank 2, rank should be in the interval \[0, 1\]$"),
    ({"num_replicas": 2, "rank": -1}, ValueError,
     r"^Invalid rank -1, rank should be in the interval \[0, 1\]$"),
    ({"num_replicas": 0, "rank": 0}, ValueError, "num_replicas must be positive"),
    ({"num_replicas": 2.0, "rank": 0}, TypeError, "num_replicas must be an int"),
])
def test_errors(kwargs, kind, message):
    with pytest.raises(kind, match=message):
        DistributedSampler(range(4), **kwargs)


def test_invalid_rank_message_is_pytorchs():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError) as theirs:
        torch.utils.data.DistributedSampler(range(4), 2, 2)
    with pytest.raises(ValueError) as ours:
        DistributedSampler(range(4), 2, 2)
    assert str(ours.value) == str(theirs.value)


def test_in_a_dataloader_gives_pytorchs_batches():
    torch = pytest.importorskip("torch")
    x = tg.arange(22.).reshape(11, 2)
    tx = torch.arange(22.).reshape(11, 2)
    for rank in range(2):
        s = DistributedSampler(TensorDataset(x), 2, rank, seed=4)
        ts = torch.utils.data.DistributedSampler(torch.utils.data.TensorDataset(tx), 2, rank,
                                                 seed=4)
        s.set_epoch(2)
        ts.set_epoch(2)
        ours = [b[0].tolist() for b in DataLoader(TensorDataset(x), batch_size=4, sampler=s)]
        theirs = [b[0].tolist() for b in torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(tx), batch_size=4, sampler=ts)]
        assert ours == theirs


def test_signature_is_pytorchs():
    import inspect
    torch = pytest.importorskip("torch")

    def params(fn):
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]
    assert params(DistributedSampler.__init__) == params(
        torch.utils.data.DistributedSampler.__init__)
    assert params(DistributedSampler.set_epoch) == params(
        torch.utils.data.DistributedSampler.set_epoch)
