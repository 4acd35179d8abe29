"""Samplers as PyTorch's torch.utils.data.sampler defines them, drawing what PyTorch draws
from the same generators at the same moments, so a seed gives PyTorch's indices.

The samplers tapegrad ships also hand out their indices as NumPy arrays, one per draw
(`_chunks`), each drawn exactly when PyTorch's per-index iteration would draw it; the
BatchSampler cuts batches from those arrays (as spans of them, which the DataLoader reads in
place), and the DataLoader gathers a TensorDataset batch in one compiled call instead of
one __getitem__ per sample."""
import itertools

import numpy as np

from ..._front.creation import empty
from ..._front.dtype import float64, int64
from ..._front.generator import Generator
from ..._front.sampling import multinomial, randint, randperm
from ..._front.utilities import as_tensor


class Sampler:
    """The base of samplers: __iter__ yields indices (or lists of them, for a batch
    sampler); __len__, if defined, says how many."""

    def __init__(self, data_source=None):
        pass

    def _chunkable(self):
        return True

    def __iter__(self):
        raise NotImplementedError

    def __class_getitem__(cls, item):
        return cls      # Sampler[int] and the like, as in PyTorch's generic annotations


def _array_chunks(sampler):
    """The sampler's indices as a stream of int64 arrays, when it is one of tapegrad's
    and iterates as shipped (a subclass overriding __iter__ is iterated as it says);
    else None."""
    own = getattr(type(sampler), "_shipped_iter", None)
    if own is None or type(sampler).__iter__ is not own or not sampler._chunkable():
        return None
    return sampler._chunks()


def _iterate(chunks):
    for chunk in chunks:
        yield from chunk.tolist()


class SequentialSampler(Sampler):
    """The indices 0, 1, ..., len(data_source) - 1 in order."""

    def __init__(self, data_source):
        self.data_source = data_source

    def _chunks(self):
        yield np.arange(len(self.data_source), dtype=np.int64)

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)

    _shipped_iter = __iter__


class RandomSampler(Sampler):
    """Random indices into data_source: a permutation (num_samples beyond its length
    take further permutations), or with replacement num_samples uniform draws. Without a
    generator each iteration seeds a fresh Generator from the default one, as PyTorch
    does; the draws are randperm(n) and randint(n, (32,)) as in PyTorch."""

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(self.replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got "
                            f"replacement={self.replacement}")
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got "
                             f"num_samples={self.num_samples}")

    @property
    def num_samples(self):
        """How many indices an iteration yields (default: the length of data_source)."""
        if self._num_samples is None:
            return len(self.data_source)
        return self._num_samples

    def _chunks(self):
        n = len(self.data_source)
        if self.generator is None:
            seed = int(empty((), dtype=int64).random_().item())
            generator = Generator()
            generator.manual_seed(seed)
        else:
            generator = self.generator
        if self.replacement:
            for _ in range(self.num_samples // 32):
                yield randint(high=n, size=(32,), dtype=int64, generator=generator).numpy()
            yield randint(high=n, size=(self.num_samples % 32,), dtype=int64,
                          generator=generator).numpy()
        else:
            for _ in range(self.num_samples // n):
                yield randperm(n, generator=generator).numpy()
            yield randperm(n, generator=generator).numpy()[:self.num_samples % n]

    def __iter__(self):
        return _iterate(self._chunks())

    def __len__(self):
        return self.num_samples

    _shipped_iter = __iter__


class SubsetRandomSampler(Sampler):
    """The given indices in a random order: randperm(len(indices), generator)."""

    def __init__(self, indices, generator=None):
        self.indices = indices
        self.generator = generator

    def _chunkable(self):
        # only Python ints: PyTorch yields the elements themselves, an array gives ints
        ind = self.indices
        return isinstance(ind, range) or (isinstance(ind, (list, tuple))
                                          and all(type(v) is int for v in ind))

    def _chunks(self):
        order = randperm(len(self.indices), generator=self.generator).numpy()
        yield np.asarray(self.indices, dtype=np.int64).reshape(-1)[order]

    def __iter__(self):
        for i in randperm(len(self.indices), generator=self.generator).tolist():
            yield self.indices[i]

    _shipped_iter = __iter__

    def __len__(self):
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """num_samples indices into weights drawn with probabilities proportional to them
    (with replacement by default): one multinomial draw per iteration, PyTorch's."""

    def __init__(self, weights, num_samples, replacement=True, generator=None):
        if (not isinstance(num_samples, int) or isinstance(num_samples, bool)
                or num_samples <= 0):
            raise ValueError(f"num_samples should be a positive integer value, but got "
                             f"num_samples={num_samples}")
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement should be a boolean value, but got "
                             f"replacement={replacement}")
        weights_tensor = as_tensor(weights, dtype=float64)
        if len(weights_tensor.shape) != 1:
            raise ValueError(f"weights should be a 1d sequence but given weights have shape "
                             f"{tuple(weights_tensor.shape)}")
        self.weights = weights_tensor
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator

    def _chunks(self):
        yield multinomial(self.weights, self.num_samples, self.replacement,
                          generator=self.generator).numpy()

    def __iter__(self):
        return _iterate(self._chunks())

    def __len__(self):
        return self.num_samples

    _shipped_iter = __iter__


class BatchSampler(Sampler):
    """Lists of batch_size indices from sampler (any iterable of indices); the last,
    shorter one dropped if drop_last."""

    def __init__(self, sampler, batch_size, drop_last):
        if (not isinstance(batch_size, int) or isinstance(batch_size, bool)
                or batch_size <= 0):
            raise ValueError(f"batch_size should be a positive integer value, but got "
                             f"batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got "
                             f"drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def _arrays(self):
        """The batches as int64 arrays (None when the sampler has no array stream).
        A chunk is drawn only when a batch needs an index the chunks so far lack, the
        moment PyTorch's per-index iteration draws it."""
        spans = self._spans()
        if spans is None:
            return None
        return (a[start:start + n] for a, start, n in spans)

    def _spans(self):
        """The batches as (array, start, count): array[start:start + count], array a
        C-contiguous int64 array that many batches share (the DataLoader's gather reads
        it in place); None when the sampler has no array stream. Drawn as _arrays."""
        chunks = _array_chunks(self.sampler)
        if chunks is None:
            return None
        return self._cut(chunks)

    def _cut(self, chunks):
        bs = self.batch_size
        current, pos = np.empty(0, np.int64), 0
        while True:
            if len(current) - pos >= bs:
                yield current, pos, bs
                pos += bs
                continue
            parts, have = [current[pos:]], len(current) - pos
            done = False
            while have < bs:
                nxt = next(chunks, None)
                if nxt is None:
                    done = True
                    break
                nxt = np.asarray(nxt, dtype=np.int64)
                parts.append(nxt)
                have += len(nxt)
            current = np.concatenate(parts) if len(parts) > 1 else parts[0]
            current, pos = np.ascontiguousarray(current), 0
            if done:
                if len(current) and not self.drop_last:
                    yield current, 0, len(current)
                return

    def __iter__(self):
        arrays = self._arrays()
        if arrays is not None:
            for batch in arrays:
                yield batch.tolist()
            return
        sampler_iter = iter(self.sampler)
        if self.drop_last:
            for batch in zip(*[sampler_iter] * self.batch_size):
                yield [*batch]
        else:
            batch = [*itertools.islice(sampler_iter, self.batch_size)]
            while batch:
                yield batch
                batch = [*itertools.islice(sampler_iter, self.batch_size)]

    def __len__(self):
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size
