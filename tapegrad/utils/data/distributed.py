"""DistributedSampler, as PyTorch's torch.utils.data.distributed: each of num_replicas
processes reads its own shard of the dataset, in PyTorch's order (the same indices as
PyTorch's for the same arguments: randperm from a Generator seeded with seed + epoch)."""
import math

import numpy as np

from ... import distributed as dist
from ..._front.generator import Generator
from ..._front.sampling import randperm
from .sampler import Sampler, _iterate

__all__ = ["DistributedSampler"]


class DistributedSampler(Sampler):
    """The indices of rank `rank`'s shard among `num_replicas` (by default the default
    process group's rank and world size): every num_replicas-th index of a permutation
    (shuffle, seeded with seed + epoch: call set_epoch(epoch) each epoch) or of 0..n-1,
    padded by repeating its start to a multiple of num_replicas (or with drop_last, cut
    down to one). Given num_replicas and rank it needs no process group (nor MPI)."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False):
        if num_replicas is None:
            num_replicas = dist.get_world_size()
        if rank is None:
            rank = dist.get_rank()
        for name, v in (("num_replicas", num_replicas), ("rank", rank), ("seed", seed)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
                raise TypeError(f"DistributedSampler: {name} must be an int, got "
                                f"{type(v).__name__}")
        if num_replicas <= 0:
            raise ValueError(f"DistributedSampler: num_replicas must be positive, got "
                             f"{num_replicas}")
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = int(num_replicas)
        self.rank = int(rank)
        self.epoch = 0
        self.drop_last = drop_last
        n = len(dataset)
        if self.drop_last and n % self.num_replicas != 0:
            self.num_samples = math.ceil((n - self.num_replicas) / self.num_replicas)
        else:
            self.num_samples = math.ceil(n / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def _chunks(self):
        """This rank's indices: an iterator over one int64 array (drawn now, as PyTorch's
        __iter__ draws them)."""
        n = len(self.dataset)
        if self.shuffle:
            g = Generator()
            g.manual_seed(self.seed + self.epoch)
            indices = np.asarray(randperm(n, generator=g).numpy(), dtype=np.int64)
        else:
            indices = np.arange(n, dtype=np.int64)
        if not self.drop_last:
            pad = self.total_size - n
            if pad > 0:
                indices = np.concatenate([indices, np.resize(indices, pad)])
        else:
            indices = indices[:self.total_size]
        if len(indices) != self.total_size:
            raise AssertionError(f"Number of indices ({len(indices)}) does not match "
                                 f"total_size ({self.total_size})")
        mine = indices[self.rank:self.total_size:self.num_replicas]
        return iter([np.ascontiguousarray(mine)])

    def __iter__(self):
        return _iterate(self._chunks())

    _shipped_iter = __iter__

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        """The epoch whose permutation the next iteration draws (seed + epoch): call it
        at the start of every epoch, with the same value on every rank."""
        self.epoch = epoch
