"""What runs in a DataLoader worker process: its seeding (PyTorch's: seed = base_seed +
worker_id for random, tapegrad and, through PyTorch's hash, NumPy), get_worker_info, and
the loop that fetches the batches the main process asks for."""
import queue
import random
import traceback
from dataclasses import dataclass

import numpy as np

from ..._engine.state import set_num_threads
from ..._front.generator import manual_seed

# how often (seconds) a worker looks whether its parent is still alive
_POLL = 1.0


@dataclass
class WorkerInfo:
    """Information about the current DataLoader worker process: id (0 to
    num_workers - 1), num_workers, seed (base_seed + id) and dataset (this process's
    copy)."""
    id: int
    num_workers: int
    seed: int
    dataset: object


_worker_info = None


def get_worker_info():
    """In a DataLoader worker process, its WorkerInfo; in the main process, None."""
    return _worker_info


class _IterableDatasetStopIteration:
    """A worker's note that its copy of an IterableDataset has run out."""

    def __init__(self, worker_id):
        self.worker_id = worker_id


class ExceptionWrapper:
    """An exception raised in a worker, carried to the main process (its type and its
    traceback as text) to be raised there again."""

    def __init__(self, exc, where):
        self.exc_type = type(exc)
        self.exc_msg = "".join(traceback.format_exception(exc))
        self.where = where

    def reraise(self):
        """Raise the exception again, in the main process, with the worker's traceback
        in the message (PyTorch's ExceptionWrapper.reraise)."""
        msg = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.exc_msg}"
        if self.exc_type is KeyError:
            msg = KeyError(msg)     # KeyError shows its message with repr
        try:
            exception = self.exc_type(msg)
        except Exception:
            raise RuntimeError(msg) from None
        raise exception


def _generate_state(base_seed, worker_id):
    """NumPy's seed in a worker, PyTorch's: four 32-bit words hashed from the worker id
    and the base seed (after NumPy's SeedSequence)."""
    init_a, mult_a, init_b, mult_b = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
    mix_l, mix_r, xshift, mask = 0xCA01F9DD, 0x4973F715, 16, 0xFFFFFFFF
    entropy = [worker_id, base_seed & mask, base_seed >> 32, 0]
    pool = [0] * 4
    const_a = init_a

    def hash_(value):
        nonlocal const_a
        value = (value ^ const_a) & mask
        const_a = (const_a * mult_a) & mask
        value = (value * const_a) & mask
        return (value ^ (value >> xshift)) & mask

    def mix(x, y):
        r = ((mix_l * x) & mask) - ((mix_r * y) & mask) & mask
        r &= mask
        return (r ^ (r >> xshift)) & mask

    for i in range(4):
        pool[i] = hash_(entropy[i])
    for i_src in range(4):
        for i_dst in range(4):
            if i_src != i_dst:
                pool[i_dst] = mix(pool[i_dst], hash_(pool[i_src]))
    const_b, state = init_b, []
    for i_dst in range(4):
        v = (pool[i_dst] ^ const_b) & mask
        const_b = (const_b * mult_b) & mask
        v = (v * const_b) & mask
        state.append((v ^ (v >> xshift)) & mask)
    return state


def _worker_loop(make_fetcher, dataset, index_queue, data_queue, base_seed, init_fn,
                 worker_id, num_workers, parent_pid):
    """A worker's life: seed, run worker_init_fn, then fetch (epoch, idx, indices) tasks
    until None arrives or the parent is gone; "resume" restarts the fetcher (a new epoch
    of persistent workers)."""
    import os
    global _worker_info
    set_num_threads(1)
    seed = base_seed + worker_id
    random.seed(seed)
    manual_seed(seed)
    np.random.seed(_generate_state(base_seed, worker_id))
    _worker_info = WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed,
                              dataset=dataset)
    init_error, fetcher = None, None
    try:
        if init_fn is not None:
            init_fn(worker_id)
        fetcher = make_fetcher(dataset)
    except Exception as e:
        init_error = ExceptionWrapper(e, f"in DataLoader worker process {worker_id}")
    ended = False
    while True:
        try:
            task = index_queue.get(timeout=_POLL)
        except queue.Empty:
            if os.getppid() != parent_pid:
                return
            continue
        if task is None:
            return
        if task == "resume":
            ended = False
            if init_error is None:
                fetcher = make_fetcher(dataset)
            continue
        epoch, idx, index = task
        if ended:
            continue
        if init_error is not None:
            data, init_error = init_error, None
        else:
            try:
                data = fetcher(index)
            except StopIteration:
                data, ended = _IterableDatasetStopIteration(worker_id), True
            except Exception as e:
                data = ExceptionWrapper(e, f"in DataLoader worker process {worker_id}")
        data_queue.put((epoch, idx, data))
