"""Helpers shared by the test modules: the repository's root, float64 leaves and seeded
values, NumPy views of results, PyTorch's messages that many tests expect, the engine's
live counts, and running a program in tapegrad and PyTorch alike (L is either library).
Import them as `from tests.helpers import leaf, ...`; the compile tests' own helpers are
in tests/replay/helpers.py."""
import gc
import os
import warnings

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad.testing import gradcheck

# the checkout's root: the folder holding tapegrad/, tests/, scenarios/ and benchmarks/
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

F64 = tg.float64
DTYPES = [pytest.param(tg.float32, id="f32"), pytest.param(tg.float64, id="f64")]
INPLACE_MSG = ("one of the variables needed for gradient computation has been modified "
               "by an inplace operation")
SECOND_MSG = "Trying to backward through the graph a second time"

E = tg._engine.state.engine()


# ------------------------------------------------------------------ making inputs
def rng(seed=0):
    return np.random.default_rng(seed)


def values(seed, *shape, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, size=shape)


def make_tensor(arr, dtype=F64, requires_grad=False):
    return tg.tensor(np.asarray(arr, dtype=dtype.np), dtype=dtype, requires_grad=requires_grad)


def leaf(arr, dtype=F64):
    return make_tensor(arr, dtype, requires_grad=True)


def nc_leaf(arr):
    """A non-contiguous float64 leaf (an F-ordered NumPy array, shared via from_numpy)."""
    arr = np.asfortranarray(np.asarray(arr, np.float64))
    return tg.from_numpy(arr).requires_grad_()


def torch_leaf(torch, arr):
    return torch.tensor(np.asarray(arr, np.float64), requires_grad=True)


# ------------------------------------------------------------------ reading results
def numpy_of(t):
    """A tensor's values as NumPy (sharing its memory where the dtype allows)."""
    return t.detach().numpy()


def vals(t):
    """A tensor's values as a float64 NumPy array (works on tensors requiring grad)."""
    return np.asarray(t.detach().numpy(), dtype=np.float64)


def close(t, expected, rtol=1e-6, atol=1e-6):
    np.testing.assert_allclose(vals(t), np.asarray(expected, dtype=np.float64),
                               rtol=rtol, atol=atol)


def assert_gradcheck(fn, *inputs, **kw):
    assert gradcheck(fn, inputs, **kw) is True


def run_both(prog):
    """prog(L) for tapegrad and torch; returns (tapegrad result, torch result)."""
    torch = pytest.importorskip("torch")
    return prog(tg), prog(torch)


# ------------------------------------------------------------------ engine state
def engine_stats():
    """The engine's live counts after collecting garbage and flushing releases (wrappers
    are released in batches)."""
    gc.collect()
    E.flush()
    return E.stats()


# ------------------------------------------------------------------ comparing with PyTorch
def dtype_name(dt):
    """'float32' for tapegrad.float32 and torch.float32 alike."""
    return str(dt).rsplit(".", 1)[-1]


def as_tensor(L, a, float_dtype="float64", requires_grad=False):
    """A tapegrad or torch (L) tensor of NumPy array a; float arrays become float_dtype."""
    a = np.asarray(a)
    name = float_dtype if a.dtype.kind == "f" else {"i": "int64", "b": "bool"}[a.dtype.kind]
    return L.tensor(a.astype(name), dtype=getattr(L, name), requires_grad=requires_grad)


def functional(L):
    """tapegrad.nn.functional or torch.nn.functional."""
    return F if L is tg else L.nn.functional


def assert_close(ours, theirs, rtol=1e-5):
    """float32 agreement: relative, with an absolute floor scaled to the values' size."""
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    assert ours.shape == theirs.shape
    finite = np.abs(theirs[np.isfinite(theirs)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=1e-6 * scale, equal_nan=True)


def raised(prog, L):
    """(exception type, message) that prog(L) raises, or (None, None)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prog(L)
    except Exception as e:      # noqa: BLE001
        return type(e), str(e)
    return None, None


def assert_same_error(prog):
    """prog raises in both libraries, with the same type and PyTorch's message."""
    torch = pytest.importorskip("torch")
    t1, m1 = raised(prog, tg)
    t2, m2 = raised(prog, torch)
    assert t2 is not None, "PyTorch does not raise"
    assert (_kind(t1), m1.replace("tapegrad", "torch") if m1 else m1) == (_kind(t2), m2)


def _kind(cls):
    """An exception class as the two libraries can share it: a built-in one itself; one
    of PyTorch's own (torch.linalg.LinAlgError, ...) by its name and built-in bases,
    which tapegrad's counterpart has too."""
    if cls is None or cls.__module__ == "builtins":
        return cls
    return cls.__name__, tuple(c for c in cls.__mro__ if c.__module__ == "builtins")


def assert_float32_composite_matches_torch(f, value_atol=0.0):
    """f(L, x, W, b), a float32 scalar built from library L's ops on seeded inputs, has
    PyTorch's value and leaf gradients (to float32 round-off)."""
    torch = pytest.importorskip("torch")
    r = rng(21)
    x = r.standard_normal((4, 3)).astype(np.float32)
    W = (r.standard_normal((5, 3)) * 0.5).astype(np.float32)
    b = r.standard_normal(5).astype(np.float32)
    ours = [tg.tensor(v, requires_grad=True) for v in (x, W, b)]
    theirs = [torch.tensor(v, requires_grad=True) for v in (x, W, b)]
    out_o, out_t = f(tg, *ours), f(torch, *theirs)
    assert out_o.dtype is tg.float32 and out_o.shape == ()
    np.testing.assert_allclose(out_o.item(), out_t.item(), rtol=1e-5, atol=value_atol)
    out_o.backward()
    out_t.backward()
    for o, t in zip(ours, theirs):
        assert o.grad.dtype is tg.float32 and o.grad.shape == tuple(t.grad.shape)
        g = t.grad.numpy()
        np.testing.assert_allclose(o.grad.numpy(), g, rtol=1e-5,
                                   atol=1e-5 * max(1.0, float(np.abs(g).max())))
