"""Helpers shared by test modules: float64 leaves and seeded random values."""
import numpy as np

import tapegrad as tg


def leaf(arr, dtype=tg.float64):
    return tg.tensor(np.asarray(arr, dtype=dtype.np), dtype=dtype, requires_grad=True)


def values(seed, *shape, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, size=shape)


def _np(t):
    return t.detach().numpy()
