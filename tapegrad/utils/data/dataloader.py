"""DataLoader, PyTorch's torch.utils.data.DataLoader: its arguments and their checks, its
draws (the iterator's base seed, then the sampler's), single-process iteration and worker
processes. A TensorDataset with the default collate is gathered a batch at a time, in one
compiled call (_gather.py)."""
import math
import multiprocessing
import os
import queue
import warnings

import numpy as np

from ..._engine.cache import kernel_cache
from ..._engine.state import RECORDING, native_entry
from ..._front.creation import _adopt, empty, from_numpy
from ..._front.dtype import int64
from ..._front.tensor import E, _wrap
from .collate import default_collate, default_convert
from .dataset import IterableDataset, TensorDataset
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler
from .worker import ExceptionWrapper, _IterableDatasetStopIteration, _worker_loop

with kernel_cache():
    from . import _gather as K

# how often (seconds) the main process checks its workers while it waits for a batch
_POLL = 1.0


class _InfiniteConstantSampler(Sampler):
    """None forever: the sampler of an IterableDataset (its samples pick themselves)."""

    def __iter__(self):
        while True:
            yield None


def _gather(tensors, views, index):
    """One indexing op per tensor: the rows at index (an int64 array), as stacking the
    samples would give them. views: the tensors' NumPy views (None where a tensor
    requires grad: its gather is recorded, as the stack of its samples would be)."""
    out = []
    for t, v in zip(tensors, views):
        if v is None or t.requires_grad:
            out.append(t[from_numpy(index)])
        else:
            rows = np.take(v, index, axis=0)        # a fresh C-contiguous array
            step = rows.itemsize
            out.append(_adopt(rows, t.dtype, rows.shape, [s // step for s in rows.strides],
                              0))
    return out


def _gatherable(dataset, collate_fn):
    """Whether a batch of dataset can be gathered by _gather: a TensorDataset as shipped,
    collated by the default collate."""
    cls = type(dataset)
    return (isinstance(dataset, TensorDataset) and collate_fn is default_collate
            and cls.__getitem__ is TensorDataset.__getitem__
            and getattr(cls, "__getitems__", None) is None)


class _MapFetcher:
    """Fetches a batch (or, without automatic batching, one sample) of a map-style
    dataset and collates it."""

    def __init__(self, dataset, auto_collation, collate_fn, drop_last):
        self.dataset = dataset
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn
        self.fast = auto_collation and _gatherable(dataset, collate_fn)
        self._numpy = None
        self._tab = None            # the compiled gather's table (see gather_span)
        self._index = None          # the index array last gathered from, and its address
        self._index_addr = 0

    def _views(self):
        """The dataset tensors' NumPy views, taken once per fetcher (an epoch)."""
        if self._numpy is None:
            self._numpy = [None if t.requires_grad else t.numpy()
                           for t in self.dataset.tensors]
        return self._numpy

    def gather_span(self, index, start, n):
        """The batch index[start:start + n] of a gatherable dataset (index: a C-contiguous
        int64 array, n > 0): one compiled call makes every tensor of the batch. Tensors
        that require grad, or whose rows are strided, and indices out of range take the
        general path (__call__)."""
        tensors = self.dataset.tensors
        tab = self._tab
        if tab is None or tab[0] is not tensors:
            arr = np.zeros(len(tensors) * _TW, np.int64)
            tab = self._tab = (tensors, len(tensors), memoryview(arr), arr.ctypes.data, arr)
        tv = tab[2]
        j = 0
        for t in tensors:           # (ids are read each batch: `x.data = y` changes them)
            tv[j] = t._i
            j += _TW
        if index is not self._index:
            self._index, self._index_addr = index, index.ctypes.data
        gather = _GATHER[0]
        if gather is None:
            gather = _GATHER[0] = native_entry(K.gather_batch, K.GATHER_SIG)
        # (one compiled call, under the GIL: like the engine's one-call ops, it needs the
        # lock only to grow the tables)
        st = gather(E.caddr, tab[3], tab[1], self._index_addr + 8 * start, n)
        if st:
            with E.lock:
                while st < 0 and E.handle(st):      # (E_NOMEM raises in handle)
                    st = gather(E.caddr, tab[3], tab[1], self._index_addr + 8 * start, n)
                if st < 0:
                    return self(index[start:start + n], True)
                E.flush()                           # (st == K.FLUSH)
        out = list(map(_wrap, tv[1::_TW]))
        if RECORDING[0] is not None:
            for t in out:
                RECORDING[0].created(t._i)
        return out

    def __call__(self, index, general=False):
        if not self.auto_collation:
            return self.collate_fn(self.dataset[index])
        if self.fast:
            arr = index if isinstance(index, np.ndarray) else np.asarray(index)
            if arr.ndim == 1 and len(arr) and (arr.dtype.kind == "i" or (
                    arr.dtype.kind == "u" and arr.dtype.itemsize < 8)):
                arr = np.ascontiguousarray(arr, dtype=np.int64)
                if not general:
                    return self.gather_span(arr, 0, len(arr))
                try:
                    return _gather(self.dataset.tensors, self._views(), arr)
                except IndexError:
                    pass        # out of range: the per-sample path raises tapegrad's error
        if isinstance(index, np.ndarray):
            index = index.tolist()
        getitems = getattr(self.dataset, "__getitems__", None)
        if getitems:
            data = getitems(index)
        else:
            data = [self.dataset[i] for i in index]
        return self.collate_fn(data)


_GATHER = [None]        # the compiled gather's entry point, loaded on first use
_TW = K.TW


class _IterableFetcher:
    """Fetches batch_size samples (or one) from an iterator over the dataset."""

    def __init__(self, dataset, auto_collation, collate_fn, drop_last):
        self.dataset_iter = iter(dataset)
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn
        self.drop_last = drop_last
        self.ended = False

    def __call__(self, index):
        if self.ended:
            raise StopIteration
        if self.auto_collation:
            data = []
            for _ in index:
                try:
                    data.append(next(self.dataset_iter))
                except StopIteration:
                    self.ended = True
                    break
            if len(data) == 0 or (self.drop_last and len(data) < len(index)):
                raise StopIteration
        else:
            data = next(self.dataset_iter)
        return self.collate_fn(data)


class _FetcherFactory:
    """Makes a dataset's fetcher (picklable, for spawned workers)."""

    def __init__(self, iterable, auto_collation, collate_fn, drop_last):
        self.iterable = iterable
        self.args = (auto_collation, collate_fn, drop_last)

    def __call__(self, dataset):
        cls = _IterableFetcher if self.iterable else _MapFetcher
        return cls(dataset, *self.args)


class DataLoader:
    """Batches of a dataset, PyTorch's DataLoader: a sampler (sequential, shuffled with
    shuffle=True, or given) grouped by a BatchSampler of batch_size, each batch fetched
    and put together by collate_fn (default_collate). num_workers > 0 fetches in worker
    processes, seeded as PyTorch seeds them; pin_memory is accepted and does nothing on
    the CPU. With the same generator seed the batches are PyTorch's."""

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False,
                 timeout=0, worker_init_fn=None, multiprocessing_context=None,
                 generator=None, *, prefetch_factor=None, persistent_workers=False,
                 pin_memory_device="", in_order=True):
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; "
                             "use num_workers=0 to disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in "
                             "multiprocessing.let num_workers > 0 to enable "
                             "multiprocessing, otherwise set prefetch_factor to None.")
        elif num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        elif prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.in_order = in_order
        if isinstance(dataset, IterableDataset):
            self._iterable = True
            if shuffle not in {False, None}:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified "
                                 f"shuffle option, but got shuffle={shuffle}")
            if sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified "
                                 f"sampler option, but got sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified "
                                 f"batch_sampler option, but got batch_sampler="
                                 f"{batch_sampler}")
        else:
            shuffle = bool(shuffle)
            self._iterable = False
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with "
                                 "batch_size, shuffle, sampler, and drop_last")
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is "
                             "mutually exclusive with drop_last")
        if sampler is None:
            if self._iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn
        self.persistent_workers = persistent_workers
        self.__initialized = True
        self._iterator = None

    @property
    def multiprocessing_context(self):
        """The multiprocessing context the workers start from (None: the default)."""
        return self.__multiprocessing_context

    @multiprocessing_context.setter
    def multiprocessing_context(self, context):
        if context is not None:
            if self.num_workers > 0:
                if isinstance(context, str):
                    methods = multiprocessing.get_all_start_methods()
                    if context not in methods:
                        raise ValueError(f"multiprocessing_context option should specify a "
                                         f"valid start method in {methods!r}, but got "
                                         f"multiprocessing_context={context!r}")
                    context = multiprocessing.get_context(context)
                if not isinstance(context, multiprocessing.context.BaseContext):
                    raise TypeError(f"multiprocessing_context option should be a valid "
                                    f"context object or a string specifying the start "
                                    f"method, but got multiprocessing_context={context}")
            else:
                raise ValueError(f"multiprocessing_context can only be used with "
                                 f"multi-process loading (num_workers > 0), but got "
                                 f"num_workers={self.num_workers}")
        self.__multiprocessing_context = context

    def __setattr__(self, attr, val):
        if self.__dict__.get("_DataLoader__initialized") and attr in (
                "batch_size", "batch_sampler", "sampler", "drop_last", "dataset",
                "persistent_workers"):
            raise ValueError(f"{attr} attribute should not be set after "
                             f"{self.__class__.__name__} is initialized")
        super().__setattr__(attr, val)

    @property
    def _auto_collation(self):
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto_collation else self.sampler

    def _get_iterator(self):
        if self.num_workers == 0:
            return _SingleProcessDataLoaderIter(self)
        return _MultiProcessingDataLoaderIter(self)

    def __iter__(self):
        if self.persistent_workers and self.num_workers > 0:
            if self._iterator is None:
                self._iterator = self._get_iterator()
            else:
                self._iterator._reset(self)
            return self._iterator
        return self._get_iterator()

    def __len__(self):
        if self._iterable:
            length = len(self.dataset)
            if self.batch_size is not None:
                length = (length // self.batch_size if self.drop_last
                          else math.ceil(length / self.batch_size))
            return length
        return len(self._index_sampler)


class _BaseDataLoaderIter:
    """What iterating a DataLoader gives: the batches of one epoch."""

    def __init__(self, loader):
        self._dataset = loader.dataset
        self._iterable = loader._iterable
        self._auto_collation = loader._auto_collation
        self._drop_last = loader.drop_last
        self._index_sampler = loader._index_sampler
        self._num_workers = loader.num_workers
        if loader.pin_memory:
            warnings.warn("'pin_memory' argument is set as true but no accelerator is "
                          "found, then device pinned memory won't be used.", stacklevel=3)
        self._timeout = loader.timeout
        self._collate_fn = loader.collate_fn
        self._sampler_iter = self._index_iter()
        self._base_seed = empty((), dtype=int64).random_(generator=loader.generator).item()
        self._persistent_workers = loader.persistent_workers
        self._num_yielded = 0

    def _index_iter(self):
        """The batches of indices: int64 arrays when the batch sampler is tapegrad's and
        the fetcher gathers (the same indices, drawn at the same moments)."""
        sampler = self._index_sampler
        if (self._auto_collation and type(sampler) is BatchSampler
                and _gatherable(self._dataset, self._collate_fn)):
            arrays = sampler._arrays()
            if arrays is not None:
                return arrays
        return iter(sampler)

    def __iter__(self):
        return self

    def _next_index(self):
        return next(self._sampler_iter)

    def __next__(self):
        data = self._next_data()
        self._num_yielded += 1
        return data

    def __len__(self):
        return len(self._index_sampler)

    def __getstate__(self):
        raise NotImplementedError("{} cannot be pickled", self.__class__.__name__)


class _SingleProcessDataLoaderIter(_BaseDataLoaderIter):
    """Batches fetched in this process."""

    def __init__(self, loader):
        super().__init__(loader)
        self._fetcher = _FetcherFactory(self._iterable, self._auto_collation,
                                        self._collate_fn, self._drop_last)(self._dataset)

    def _index_iter(self):
        """The batches as (array, start, count) spans when the fetcher gathers them
        (_spanned), else as the base class gives them."""
        sampler = self._index_sampler
        self._spanned = False
        if (self._auto_collation and type(sampler) is BatchSampler
                and _gatherable(self._dataset, self._collate_fn)):
            spans = sampler._spans()
            if spans is not None:
                self._spanned = True
                return spans
        return super()._index_iter()

    def _next_data(self):
        if self._spanned:
            index, start, n = next(self._sampler_iter)
            return self._fetcher.gather_span(index, start, n)
        index = self._next_index()
        return self._fetcher(index)


class _MultiProcessingDataLoaderIter(_BaseDataLoaderIter):
    """Batches fetched by worker processes: each worker gets its tasks on its own queue
    (round robin, prefetch_factor of them ahead per worker) and puts its results on one
    shared queue; batches come out in the sampler's order."""

    def __init__(self, loader):
        super().__init__(loader)
        self._prefetch_factor = loader.prefetch_factor
        self._in_order = loader.in_order
        ctx = loader.multiprocessing_context or multiprocessing
        factory = _FetcherFactory(self._iterable, self._auto_collation, self._collate_fn,
                                  self._drop_last)
        self._data_queue = ctx.Queue()
        self._index_queues, self._workers = [], []
        for i in range(self._num_workers):
            iq = ctx.Queue()
            w = ctx.Process(target=_worker_loop, daemon=True,
                            args=(factory, self._dataset, iq, self._data_queue,
                                  self._base_seed, loader.worker_init_fn, i,
                                  self._num_workers, os.getpid()))
            w.start()
            self._index_queues.append(iq)
            self._workers.append(w)
        self._shutdown = False
        self._epoch = 0
        self._reset(loader, first_iter=True)

    def _reset(self, loader, first_iter=False):
        self._sampler_iter = self._index_iter()
        self._num_yielded = 0
        self._epoch += 1
        self._send_idx = 0          # the next task's number
        self._rcvd_idx = 0          # the next batch to hand out
        self._task_info = {}        # task number -> worker (pending) or the batch
        self._active = [True] * self._num_workers
        self._worker_cycle = 0
        self._exhausted = False
        if not first_iter:
            for iq in self._index_queues:
                iq.put("resume")
        for _ in range(self._prefetch_factor * self._num_workers):
            self._try_put_index()

    def _try_put_index(self):
        if self._exhausted or not any(self._active):
            return
        try:
            index = self._next_index()
        except StopIteration:
            self._exhausted = True
            return
        for _ in range(self._num_workers):
            w = self._worker_cycle % self._num_workers
            self._worker_cycle += 1
            if self._active[w]:
                break
        self._index_queues[w].put((self._epoch, self._send_idx, index))
        self._task_info[self._send_idx] = (w,)
        self._send_idx += 1

    def _get_result(self):
        """The next (epoch, idx, data) from the workers, watching for dead workers and
        the timeout."""
        waited = 0.0
        while True:
            poll = _POLL if not self._timeout else min(_POLL, self._timeout - waited)
            try:
                return self._data_queue.get(timeout=max(poll, 0.01))
            except queue.Empty:
                waited += poll
                dead = [w.pid for w in self._workers if not w.is_alive()]
                if dead:
                    self._shutdown_workers()
                    pids = ", ".join(str(p) for p in dead)
                    raise RuntimeError(f"DataLoader worker (pid(s) {pids}) exited "
                                       "unexpectedly") from None
                if self._timeout and waited >= self._timeout:
                    raise RuntimeError(f"DataLoader timed out after {self._timeout} "
                                       "seconds") from None

    def _next_data(self):
        while True:
            while self._rcvd_idx < self._send_idx:
                info = self._task_info.get(self._rcvd_idx)
                if info is None:            # a task of a worker that has run out
                    self._rcvd_idx += 1
                    continue
                if len(info) == 2:          # arrived already
                    del self._task_info[self._rcvd_idx]
                    self._rcvd_idx += 1
                    return self._process(info[1])
                break
            if self._rcvd_idx >= self._send_idx:
                if not self._persistent_workers:
                    self._shutdown_workers()
                raise StopIteration
            epoch, idx, data = self._get_result()
            if epoch != self._epoch:
                continue                    # left over from an epoch cut short
            if isinstance(data, _IterableDatasetStopIteration):
                w = data.worker_id
                self._active[w] = False
                for k in [k for k, v in self._task_info.items() if v == (w,)]:
                    del self._task_info[k]
                self._try_put_index()
                continue
            if idx in self._task_info:
                self._task_info[idx] = (self._task_info[idx][0], data)

    def _process(self, data):
        self._try_put_index()
        if isinstance(data, ExceptionWrapper):
            data.reraise()
        return data

    def _shutdown_workers(self):
        if self._shutdown:
            return
        self._shutdown = True
        for iq in self._index_queues:
            try:
                iq.put(None)
            except (OSError, ValueError):
                pass
        for w in self._workers:
            w.join(timeout=5.0)
            if w.is_alive():
                w.terminate()
        for q in self._index_queues + [self._data_queue]:
            q.cancel_join_thread()
            q.close()

    def __del__(self):
        try:
            self._shutdown_workers()
        except Exception:
            pass
