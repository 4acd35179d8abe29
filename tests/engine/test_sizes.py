"""Impossible sizes never reach a kernel: a size, stride or byte count that overflows
int64 raises PyTorch's RuntimeError, an allocation that fits but cannot be had raises
MemoryError before memory is touched, and no tensor claims more elements than its memory
holds (issue 35, item 3).

The sweep runs its cases in child processes, so that a crash (a segfault from a wrapped
size) fails the test naming the case instead of ending the pytest run. Every allocation
that succeeds here is small: the children lower tapegrad's allocation limit to 1 MiB, so a
size that does not overflow but is large is refused (MemoryError) without touching memory.
"""
import io
import json
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest
from re import escape as re_escape

import tapegrad as tg
from tapegrad._engine import sizes, state
from tests.helpers import REPO_ROOT

I64_MAX = 2 ** 63 - 1
I64_MIN = -2 ** 63


# ---------------------------------------------------------------- comparing with PyTorch
def _outcome(fn):
    try:
        fn()
    except Exception as exc:           # noqa: BLE001  (the type is what is compared)
        return type(exc), str(exc)
    return None, None


def _same_error(ours, theirs, exc_type):
    """Our call raises exc_type with PyTorch's message (PyTorch's own type is checked too
    when torch is installed)."""
    t, msg = _outcome(ours)
    assert t is exc_type, (t, msg)
    torch = pytest.importorskip("torch")
    tt, tmsg = _outcome(lambda: theirs(torch))
    assert tt is exc_type, (tt, tmsg)
    assert msg == tmsg or msg.endswith("(): " + tmsg)      # (or naming the function)


STORAGE = "Storage size calculation overflowed with sizes="


@pytest.mark.parametrize("ours, theirs", [
    (lambda: tg.zeros(1 << 62), lambda t: t.zeros(1 << 62)),
    (lambda: tg.zeros(2 ** 31, 2 ** 31, 2 ** 31), lambda t: t.zeros(2 ** 31, 2 ** 31, 2 ** 31)),
    (lambda: tg.zeros(2 ** 32, 2 ** 32), lambda t: t.zeros(2 ** 32, 2 ** 32)),
    (lambda: tg.zeros(1 << 61), lambda t: t.zeros(1 << 61)),    # (2**63 bytes)
    (lambda: tg.zeros(1 << 60, dtype=tg.float64), lambda t: t.zeros(1 << 60, dtype=t.float64)),
    (lambda: tg.zeros(2 ** 62, 4, 0), lambda t: t.zeros(2 ** 62, 4, 0)),   # (a later 0 does
    (lambda: tg.zeros(2 ** 63 - 1, 2 ** 63 - 1, 0),                        # not undo it)
     lambda t: t.zeros(2 ** 63 - 1, 2 ** 63 - 1, 0)),
    (lambda: tg.empty(1 << 62), lambda t: t.empty(1 << 62)),
    (lambda: tg.ones(2 ** 31, 2 ** 30), lambda t: t.ones(2 ** 31, 2 ** 30)),
    (lambda: tg.full((1 << 62,), 1.0), lambda t: t.full((1 << 62,), 1.0)),
    (lambda: tg.rand(1 << 62), lambda t: t.rand(1 << 62)),
    (lambda: tg.randn(2 ** 31, 2 ** 31, 2 ** 31), lambda t: t.randn(2 ** 31, 2 ** 31, 2 ** 31)),
    (lambda: tg.randint(0, 5, (1 << 62,)), lambda t: t.randint(0, 5, (1 << 62,))),
    (lambda: tg.arange(1 << 62), lambda t: t.arange(1 << 62)),
    (lambda: tg.arange(0.0, 2.0 ** 61), lambda t: t.arange(0.0, 2.0 ** 61)),
    (lambda: tg.linspace(0, 1, 1 << 62), lambda t: t.linspace(0, 1, 1 << 62)),
    (lambda: tg.eye(1 << 31), lambda t: t.eye(1 << 31)),
    (lambda: tg.eye(2 ** 31, 2 ** 30), lambda t: t.eye(2 ** 31, 2 ** 30)),
    (lambda: tg.zeros(3).new_zeros(1 << 62), lambda t: t.zeros(3).new_zeros(1 << 62)),
    (lambda: tg.zeros(3).new_empty(2 ** 31, 2 ** 31, 2 ** 31),
     lambda t: t.zeros(3).new_empty(2 ** 31, 2 ** 31, 2 ** 31)),
    (lambda: tg.zeros(3).new_full((1 << 62,), 1.0), lambda t: t.zeros(3).new_full((1 << 62,), 1.0)),
    (lambda: tg.zeros(1).repeat(2 ** 62), lambda t: t.zeros(1).repeat(2 ** 62)),
    (lambda: tg.zeros(1).repeat(2 ** 31, 2 ** 31, 2 ** 31),
     lambda t: t.zeros(1).repeat(2 ** 31, 2 ** 31, 2 ** 31)),
    (lambda: tg.zeros(1).repeat(2 ** 62, 2 ** 62, 0),
     lambda t: t.zeros(1).repeat(2 ** 62, 2 ** 62, 0)),
    (lambda: tg.zeros(1).tile((2 ** 31, 2 ** 31)), lambda t: t.zeros(1).tile((2 ** 31, 2 ** 31))),
    # results that kernels size: a broadcast, a matmul, a reduction of expanded views
    (lambda: tg.zeros(1, 1).expand(2 ** 40, 1) + tg.zeros(1, 1).expand(1, 2 ** 40),
     lambda t: t.zeros(1, 1).expand(2 ** 40, 1) + t.zeros(1, 1).expand(1, 2 ** 40)),
    (lambda: tg.zeros(1, 1).expand(2 ** 31, 2 ** 31) * 2,
     lambda t: t.zeros(1, 1).expand(2 ** 31, 2 ** 31) * 2),
    (lambda: tg.zeros(1, 1).expand(2 ** 40, 1) @ tg.zeros(1, 1).expand(1, 2 ** 40),
     lambda t: t.zeros(1, 1).expand(2 ** 40, 1) @ t.zeros(1, 1).expand(1, 2 ** 40)),
    (lambda: tg.zeros(1, 1, 1).expand(2 ** 31, 2 ** 31, 1).sum(2),
     lambda t: t.zeros(1, 1, 1).expand(2 ** 31, 2 ** 31, 1).sum(2)),
    (lambda: tg.zeros(1, 1).expand(2 ** 31, 2 ** 31).contiguous(),
     lambda t: t.zeros(1, 1).expand(2 ** 31, 2 ** 31).contiguous()),
    # *_like word it with the strides
    (lambda: tg.zeros_like(tg.zeros(1, 1).expand(2 ** 31, 2 ** 31)),
     lambda t: t.zeros_like(t.zeros(1, 1).expand(2 ** 31, 2 ** 31))),
    (lambda: tg.ones_like(tg.zeros(1).expand(2 ** 62)),
     lambda t: t.ones_like(t.zeros(1).expand(2 ** 62))),
    (lambda: tg.rand_like(tg.zeros(1, 1).expand(2 ** 31, 2 ** 31)),
     lambda t: t.rand_like(t.zeros(1, 1).expand(2 ** 31, 2 ** 31))),
    (lambda: tg.full_like(tg.zeros(1, 1).expand(2 ** 31, 2 ** 31), 1.0),
     lambda t: t.full_like(t.zeros(1, 1).expand(2 ** 31, 2 ** 31), 1.0)),
])
def test_storage_overflow_is_pytorchs_runtime_error(ours, theirs):
    _same_error(ours, theirs, RuntimeError)
    assert STORAGE in _outcome(ours)[1]


@pytest.mark.parametrize("ours, theirs", [
    (lambda: tg.empty(-1), lambda t: t.empty(-1)),
    (lambda: tg.empty(2, -1), lambda t: t.empty(2, -1)),
    (lambda: tg.empty(0, -3), lambda t: t.empty(0, -3)),
    (lambda: tg.zeros(-1), lambda t: t.zeros(-1)),
    (lambda: tg.zeros(-1, 2 ** 62, 2 ** 62), lambda t: t.zeros(-1, 2 ** 62, 2 ** 62)),
    (lambda: tg.ones(-1), lambda t: t.ones(-1)),
    (lambda: tg.full((-1,), 1.0), lambda t: t.full((-1,), 1.0)),
    (lambda: tg.rand(-1), lambda t: t.rand(-1)),
    (lambda: tg.randn(3, -1), lambda t: t.randn(3, -1)),
    (lambda: tg.randint(0, 5, (-1,)), lambda t: t.randint(0, 5, (-1,))),
    (lambda: tg.zeros(3).new_zeros(-1), lambda t: t.zeros(3).new_zeros(-1)),
    (lambda: tg.zeros(3).new_full((-1,), 1.0), lambda t: t.zeros(3).new_full((-1,), 1.0)),
    (lambda: tg.zeros(2).repeat(2, -3), lambda t: t.zeros(2).repeat(2, -3)),
    (lambda: tg.eye(-1), lambda t: t.eye(-1)),
    (lambda: tg.eye(3, -1), lambda t: t.eye(3, -1)),
    (lambda: tg.arange(-1), lambda t: t.arange(-1)),
    (lambda: tg.arange(5, 0), lambda t: t.arange(5, 0)),
    (lambda: tg.arange(1e19), lambda t: t.arange(1e19)),
    (lambda: tg.arange(0, 1, 1e-20), lambda t: t.arange(0, 1, 1e-20)),
    (lambda: tg.arange(-2 ** 62, 2 ** 62), lambda t: t.arange(-2 ** 62, 2 ** 62)),
    (lambda: tg.arange(float("inf")), lambda t: t.arange(float("inf"))),
])
def test_negative_and_invalid_sizes_are_pytorchs_runtime_errors(ours, theirs):
    _same_error(ours, theirs, RuntimeError)


@pytest.mark.parametrize("ours, theirs", [
    (lambda: tg.empty(0, 2 ** 62, 2 ** 62), lambda t: t.empty(0, 2 ** 62, 2 ** 62)),
    (lambda: tg.ones(0, 2 ** 62, 2 ** 62), lambda t: t.ones(0, 2 ** 62, 2 ** 62)),
    (lambda: tg.rand(0, 2 ** 40, 2 ** 23), lambda t: t.rand(0, 2 ** 40, 2 ** 23)),
    (lambda: tg.zeros(1).repeat(0, 2 ** 62, 2 ** 62),
     lambda t: t.zeros(1).repeat(0, 2 ** 62, 2 ** 62)),
    (lambda: tg.zeros(0).view(0, 2 ** 62, 2), lambda t: t.zeros(0).view(0, 2 ** 62, 2)),
])
def test_stride_overflow(ours, theirs):
    _same_error(ours, theirs, RuntimeError)
    assert _outcome(ours)[1] == "Stride calculation overflowed"


@pytest.mark.parametrize("ours, theirs", [
    (lambda: tg.zeros(1, 1).expand(2 ** 62, 2 ** 62),
     lambda t: t.zeros(1, 1).expand(2 ** 62, 2 ** 62)),
    (lambda: tg.zeros(1, 1, 1).expand(2 ** 31, 2 ** 31, 2 ** 31),
     lambda t: t.zeros(1, 1, 1).expand(2 ** 31, 2 ** 31, 2 ** 31)),
    (lambda: tg.zeros(1, 1).expand(2 ** 63 - 1, 2), lambda t: t.zeros(1, 1).expand(2 ** 63 - 1, 2)),
    (lambda: tg.zeros(1, 1, 1).expand(2 ** 62, 2 ** 62, 0),
     lambda t: t.zeros(1, 1, 1).expand(2 ** 62, 2 ** 62, 0)),
    (lambda: tg.zeros(1).expand(-2), lambda t: t.zeros(1).expand(-2)),
    (lambda: tg.zeros(1).expand(2, -2), lambda t: t.zeros(1).expand(2, -2)),
    (lambda: tg.zeros(3, 1).expand(-1, 2 ** 62), lambda t: t.zeros(3, 1).expand(-1, 2 ** 62)),
    (lambda: tg.zeros(1, 1).expand(2 ** 62, 2), lambda t: t.zeros(1, 1).expand(2 ** 62, 2)),
    (lambda: tg.zeros(0).view(2 ** 62, 2 ** 62, 0), lambda t: t.zeros(0).view(2 ** 62, 2 ** 62, 0)),
    (lambda: tg.zeros(0).reshape(2 ** 62, 2 ** 62, 0),
     lambda t: t.zeros(0).reshape(2 ** 62, 2 ** 62, 0)),
    (lambda: tg.zeros(0).unflatten(0, (2 ** 62, 2 ** 62, 0)),
     lambda t: t.zeros(0).unflatten(0, (2 ** 62, 2 ** 62, 0))),
    (lambda: tg.zeros(1, 1).expand(2 ** 40, 2 ** 40).flatten(),
     lambda t: t.zeros(1, 1).expand(2 ** 40, 2 ** 40).flatten()),
])
def test_view_element_count_overflow(ours, theirs):
    _same_error(ours, theirs, RuntimeError)
    assert _outcome(ours)[1] == "numel: integer multiplication overflow"


@pytest.mark.parametrize("call", [
    lambda: tg.zeros(1 << 63), lambda: tg.empty(2, 1 << 63), lambda: tg.ones(-(1 << 63) - 1),
    lambda: tg.full((1 << 64,), 1.0), lambda: tg.zeros(3).new_zeros(1 << 63),
    lambda: tg.zeros(1).expand(1 << 63), lambda: tg.zeros(3).view(1 << 63),
    lambda: tg.zeros(3).reshape(1 << 63), lambda: tg.zeros(1).repeat(1 << 63),
])
def test_sizes_beyond_int64_are_type_errors(call):
    """PyTorch cannot unpack them ("Overflow when unpacking long long")."""
    with pytest.raises(TypeError, match="Overflow when unpacking long long"):
        call()


def test_view_sizes_pytorch_allows():
    """A view's element count may reach int64's maximum, and any size goes with a 0."""
    x = tg.zeros(1).expand(2 ** 63 - 1)
    assert x.shape == (2 ** 63 - 1,) and x.numel() == 2 ** 63 - 1
    assert tg.zeros(0, 1, 1).expand(0, 2 ** 62, 2 ** 62).shape == (0, 2 ** 62, 2 ** 62)
    assert tg.zeros(0).view(0, 2 ** 62).shape == (0, 2 ** 62)
    assert tg.zeros(0, 2 ** 62).shape == (0, 2 ** 62)
    assert tg.zeros(2 ** 62, 3, 0).shape == (2 ** 62, 3, 0)  # (2**64 - 1 holds the products)
    assert tg.zeros(0, 2 ** 40, 2 ** 22).shape == (0, 2 ** 40, 2 ** 22)
    assert tg.eye(2 ** 62, 0).shape == (2 ** 62, 0)
    assert tg.zeros(0).repeat(2 ** 62, 2 ** 62).shape == (2 ** 62, 0)
    # an index into a legitimately huge view reads its one element
    assert tg.zeros(1).expand(2 ** 62)[123456789].shape == ()


def test_index_out_of_range_is_an_index_error():
    with pytest.raises(IndexError, match="index 123456789 is out of bounds for dimension 0 "
                                         "with size 3"):
        tg.zeros(3)[123456789]
    with pytest.raises(IndexError):
        tg.zeros(3, 4)[1, -123456789]


def test_stack_overflow():
    """The stacked shape is named (PyTorch names the flat one it makes on the way, and
    its count wraps for 2**62: "negative dimension -9223372036854775808")."""
    for n in (2 ** 61, 2 ** 62):
        with pytest.raises(RuntimeError, match=re_escape(f"{STORAGE}[2, {n}]")):
            tg.stack([tg.zeros(1).expand(n)] * 2)
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="Storage size calculation overflowed"):
        torch.stack([torch.zeros(1).expand(2 ** 61)] * 2)


def test_repeat_copies():
    """Repeating size-1 dims is a reshape of an expand, which is a view: repeat copies."""
    x = tg.zeros(1)
    r = x.repeat(3)
    assert r.stride() == (1,) and r.shape == (3,)
    r.add_(1)
    assert x.item() == 0.0
    np.testing.assert_array_equal(tg.arange(2.0).repeat(2, 1).numpy(), [[0, 1], [0, 1]])


# ---------------------------------------------------------------- allocations that fail
def test_memory_error_under_the_limit():
    """A size that does not overflow but is more than the limit: MemoryError before any
    memory is touched, from Python's checks and from the engine's allocator alike."""
    old = state.set_alloc_limit(1 << 20)
    try:
        stats = tg._engine.state.engine().stats()
        for call in (lambda: tg.zeros(1 << 20), lambda: tg.empty(300, 1000),
                     lambda: tg.ones(1 << 20), lambda: tg.rand(1 << 20),
                     lambda: tg.randint(0, 3, (1 << 18,)), lambda: tg.eye(1024),
                     lambda: tg.linspace(0, 1, 1 << 20), lambda: tg.arange(1 << 18),
                     lambda: tg.zeros(1).repeat(1 << 19),
                     lambda: tg.zeros_like(tg.zeros(1).expand(1 << 19)),
                     # results the kernels size
                     lambda: tg.zeros(1).expand(1 << 19).exp(),
                     lambda: tg.zeros(1).expand(1 << 19).clone(),
                     lambda: tg.zeros(1, 1).expand(512, 1) + tg.zeros(1, 1).expand(1, 1024),
                     lambda: tg.zeros(1, 1).expand(512, 1) @ tg.zeros(1, 1).expand(1, 1024),
                     lambda: tg.zeros(1, 1).expand(512, 1024).contiguous(),
                     lambda: tg.cat([tg.zeros(1).expand(1 << 18)] * 2)):
            with pytest.raises(MemoryError, match=r"can't allocate memory: you tried to "
                                                  r"allocate \d+ bytes .*set_alloc_limit"):
                call()
        assert tg.zeros(1 << 10).shape == (1 << 10,)
        assert tg._engine.state.engine().stats()["bytes"] <= stats["bytes"] + (1 << 20)
    finally:
        state.set_alloc_limit(old)
    assert sizes.alloc_limit() == old


def test_backward_refuses_gradient_buffers_it_cannot_hold():
    """A gradient buffer for a huge expanded view: the sweep refuses it before any row
    runs (the graph stays usable), instead of writing through a wrapped size."""
    w = tg.zeros(1, requires_grad=True)
    y = w.expand(2 ** 62)[5] * 2
    with pytest.raises(RuntimeError, match="Storage size calculation overflowed"):
        y.backward()
    assert w.grad is None
    old = state.set_alloc_limit(1 << 20)
    try:
        z = w.expand(1 << 19).sum()
        with pytest.raises(MemoryError, match="you tried to allocate 2097152 bytes"):
            z.backward(retain_graph=True)
        with pytest.raises(MemoryError, match="you tried to allocate 2097152 bytes"):
            tg.autograd.grad(z, [w], retain_graph=True)
    finally:
        state.set_alloc_limit(old)
    z.backward()            # (nothing was freed by the refused sweeps)
    assert w.grad.item() == float(1 << 19)


def test_engine_checks_what_python_would_not():
    """The engine's own checks, past Python's: a new tensor's shape, a view's count."""
    from tapegrad._engine import core, layout as L
    from tapegrad.ops.registry import BY_NAME
    from tapegrad._front.tensor import E, run
    with E.lock:
        E.iargs[:3] = [2 ** 31, 2 ** 31, 2 ** 31]
        with pytest.raises(RuntimeError, match=STORAGE + r"\[2147483648, 2147483648, 2147483648\]"):
            E.call(core.new_tensor, L.F32, 3, False)
        E.iargs[:3] = [0, 2 ** 62, 2 ** 62]
        with pytest.raises(RuntimeError, match="Stride calculation overflowed"):
            E.call(core.new_tensor, L.F32, 3, False)
        E.iargs[:1] = [2 ** 45]
        with pytest.raises(MemoryError):
            E.call(core.new_tensor, L.F32, 1, True)
    x = tg.zeros(1, 1)
    with pytest.raises(RuntimeError, match="numel: integer multiplication overflow"):
        run(BY_NAME["expand"], x._i, iargs=[2, 2 ** 62, 2 ** 62])
    with pytest.raises(RuntimeError, match="numel: integer multiplication overflow"):
        run(BY_NAME["expand"], x._i, iargs=[2, -2, 1])


def test_set_alloc_limit_checks_its_argument():
    for bad in (-1, 2 ** 63, 1.5, True):
        with pytest.raises(ValueError):
            state.set_alloc_limit(bad)


# ---------------------------------------------------------------- NumPy arrays
def test_from_numpy_refuses_what_pytorch_refuses():
    torch = pytest.importorskip("torch")
    neg = np.arange(4.0)[::-1]
    swapped = np.arange(4.0).astype(">f8")
    odd = np.lib.stride_tricks.as_strided(np.zeros(4, np.float32), shape=(2,), strides=(6,))
    for arr in (neg, swapped, odd):
        t, msg = _outcome(lambda: tg.from_numpy(arr))
        tt, tmsg = _outcome(lambda: torch.from_numpy(arr))
        assert t is ValueError and tt is ValueError and msg == tmsg
        t, msg = _outcome(lambda: tg.as_tensor(arr))
        tt, tmsg = _outcome(lambda: torch.as_tensor(arr))
        if tt is None:
            assert t is None
        else:
            assert t is tt and tmsg in msg
    # a copy takes any of them
    np.testing.assert_array_equal(tg.tensor(neg).numpy(), neg)
    np.testing.assert_array_equal(tg.tensor(swapped).numpy(), swapped)


def test_from_numpy_refuses_views_outside_their_memory():
    """An as_strided view reaching past its base: every read could crash, so no tensor
    takes it; views inside their memory (windows, broadcasts, memmaps) are taken."""
    from numpy.lib.stride_tricks import as_strided, sliding_window_view
    x = np.arange(4.0)
    for shape, strides, base in (((5,), (8,), x), ((2 ** 40,), (8,), x), ((3,), (2 ** 62,), x),
                                 ((3,), (8,), x[2:])):
        with pytest.raises(ValueError, match="reaches outside its memory"):
            tg.from_numpy(as_strided(base, shape=shape, strides=strides))
        with pytest.raises(ValueError, match="reaches outside its memory"):
            tg.as_tensor(as_strided(base, shape=shape, strides=strides))
    np.testing.assert_array_equal(tg.from_numpy(sliding_window_view(x, 3)).numpy(),
                                  sliding_window_view(x, 3))
    inside = as_strided(x[1:], shape=(3,), strides=(8,))
    np.testing.assert_array_equal(tg.from_numpy(inside).numpy(), [1, 2, 3])
    np.testing.assert_array_equal(tg.from_numpy(np.frombuffer(bytearray(16), np.float64)).numpy(),
                                  [0, 0])


def test_from_numpy_misaligned_data_works():
    """PyTorch takes an array whose data is not aligned to its item size; so do we, and
    the kernels read it correctly."""
    buf = np.zeros(8 * 16 + 1, np.uint8)
    a = buf[1:].view(np.float64).reshape(4, 4)
    a[...] = np.arange(16.0).reshape(4, 4)
    assert not a.flags.aligned
    t = tg.from_numpy(a).requires_grad_(True)
    y = (t.exp() * t).sum() + (t @ t).sum() + t[1:, ::2].sum()
    y.backward()
    expect = (np.exp(a) * a).sum() + (a @ a).sum() + a[1:, ::2].sum()
    np.testing.assert_allclose(float(y), expect, rtol=1e-12)
    assert t.grad.shape == (4, 4)
    tg.from_numpy(a).mul_(2)
    assert a[3, 3] == 30.0


def test_huge_numpy_views():
    """A broadcast view (stride 0) of any size NumPy allows is a legitimate view; copying
    it allocates what it claims, which is refused; a deep copy copies its memory only."""
    import copy
    a = np.lib.stride_tricks.as_strided(np.zeros(1), shape=(2 ** 59,), strides=(0,))
    t = tg.from_numpy(a)
    assert t.shape == (2 ** 59,) and t[123456789].item() == 0.0
    with pytest.raises(MemoryError):
        tg.tensor(a)
    with pytest.raises(MemoryError):
        t.clone()
    with pytest.raises(MemoryError):
        tg.as_tensor(a, dtype=tg.float32)
    b = np.broadcast_to(np.arange(3.0), (1000, 3))
    c = copy.deepcopy(tg.from_numpy(b))
    np.testing.assert_array_equal(c.numpy(), b)
    s = np.arange(20.0)[::4]
    np.testing.assert_array_equal(copy.deepcopy(tg.from_numpy(s)).numpy(), s)


# ---------------------------------------------------------------- checkpoints
def _crafted(tmp_path, shape, data, descr="<f4"):
    good = tmp_path / "good.pt"
    tg.save({"w": tg.ones(3)}, good)
    bad = tmp_path / "bad.pt"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        for info in src.infolist():
            if info.filename == "t0.npy":
                header = io.BytesIO()
                np.lib.format.write_array_header_1_0(
                    header, {"descr": descr, "fortran_order": False, "shape": shape})
                dst.writestr(info.filename, header.getvalue() + data)
            else:
                dst.writestr(info, src.read(info))
    return bad


@pytest.mark.parametrize("shape, data", [
    ((2 ** 62,), b"\0" * 12), ((2 ** 31, 2 ** 31, 2 ** 31), b"\0" * 12),
    ((2 ** 40,), b"\0" * 12), ((-1,), b"\0" * 12), ((4,), b"\0" * 12),
    ((0, 2 ** 62, 2 ** 62), b""), ((0, 2 ** 40, 2 ** 24), b""), ((1,) * 9, b"\0" * 4),
    ((2 ** 62, 2 ** 62, 0), b""),
])
def test_checkpoint_with_bogus_shape(tmp_path, shape, data):
    """A crafted archive whose header claims a shape its bytes do not hold, or one no
    tensor can have: an error naming the file, before anything is allocated."""
    bad = _crafted(tmp_path, shape, data)
    with pytest.raises(tg.serialization.CheckpointError, match="bad.pt is not a valid"):
        tg.load(bad)


def test_checkpoint_with_consistent_header_loads(tmp_path):
    bad = _crafted(tmp_path, (3,), np.arange(3, dtype=np.float32).tobytes())
    np.testing.assert_array_equal(tg.load(bad)["w"].numpy(), [0, 1, 2])


# ---------------------------------------------------------------- the sweep
# What each case should do, from PyTorch's rules (computed here, not by tapegrad): the
# partial products of the sizes in 64 unsigned bits, the byte count and the contiguous
# strides in int64, the element count of a view in int64; then the allocation limit.
LIMIT = 1 << 20
SIZES = [
    [2 ** 31], [2 ** 31 - 1], [2 ** 32], [2 ** 32 + 1], [2 ** 62], [2 ** 63 - 1], [2 ** 63],
    [-1], [-2], [0], [5], [2 ** 31, 2 ** 31], [2 ** 32, 2 ** 32], [2 ** 31, 2 ** 32],
    [2 ** 62, 2], [2 ** 62, 4], [0, 2 ** 62], [2 ** 62, 0], [-1, 5], [5, -1], [2 ** 40, 2 ** 24],
    [2 ** 31] * 3, [2 ** 62, 2 ** 62, 0], [0, 2 ** 62, 2 ** 62], [2 ** 62, 3, 0],
    [0, 2 ** 40, 2 ** 23], [0, 2 ** 40, 2 ** 22], [2 ** 21] * 3, [2 ** 63 - 1, 2, 0],
    [3, 4], [2 ** 16, 2 ** 16], [1, 2 ** 63 - 1], [2 ** 32, 2 ** 31, 2],
]
ITEMSIZE = {"float32": 4, "float64": 8, "int64": 8, "bool": 1}


def _product(shape):
    p, over = 1, False
    for s in shape:
        p *= s % 2 ** 64
        if p >= 2 ** 64:
            over, p = True, p % 2 ** 64
    return p, over


def _strides_overflow(shape):
    st = 1
    for s in reversed(shape[1:]):
        st *= max(s, 1)
        if st > I64_MAX:
            return True
    return False


def _new(shape, isz):
    """A new contiguous tensor of this shape."""
    if any(not I64_MIN <= s <= I64_MAX for s in shape):
        return "TypeError"
    if any(s < 0 for s in shape):
        return "RuntimeError"
    p, over = _product(shape)
    if over or p * isz > I64_MAX or _strides_overflow(shape):
        return "RuntimeError"
    return "MemoryError" if p * isz > LIMIT else "ok"


def _view(shape):
    """A view of this shape (a negative size overflows the count)."""
    if any(not I64_MIN <= s <= I64_MAX for s in shape):
        return "TypeError"
    p, over = _product(shape)
    if over or p > I64_MAX:
        return "RuntimeError"
    return "ok"


def _view_of_empty(shape):
    """x.view(shape) of a tensor of 0 elements: (outcome, resolved shape)."""
    if any(not I64_MIN <= s <= I64_MAX for s in shape):
        return "TypeError", None
    if shape.count(-1) == 1 and all(s >= 0 for s in shape if s != -1):
        if _numel([s for s in shape if s != -1]) == 0:
            return "RuntimeError", None         # (-1 could be anything)
        shape = [0 if s == -1 else s for s in shape]
    if any(s < 0 for s in shape) or _numel(shape) != 0 or _view(shape) != "ok" \
            or _strides_overflow(shape):
        return "RuntimeError", None
    return "ok", shape


def _numpy_makes(shape):
    try:
        np.lib.stride_tricks.as_strided(np.zeros(1), shape=shape, strides=(0,) * len(shape))
    except (ValueError, OverflowError):
        return False
    return True


def _then_new(first, shape, isz):
    return first if first != "ok" else _new(shape, isz)


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _cases():
    """(name, kind, shape, dtype, expected outcome, expected shape or None)."""
    out = []

    def add(kind, shape, dt, expect, result=None):
        name = f"{kind}{shape}:{dt}"
        if result is None and expect == "ok":
            result = shape
        out.append((name, kind, shape, dt, expect, result))

    for shape in SIZES:
        isz = 4
        for kind in ("empty", "zeros", "ones", "full", "rand", "randn", "randint",
                     "new_zeros", "new_empty", "new_ones", "new_full", "repeat", "tile"):
            dts = ("float32", "float64", "int64", "bool") if kind in ("empty", "zeros") else \
                ("float32",)
            for dt in dts:
                add(kind, shape, dt, _new(shape, ITEMSIZE[dt]))
        if len(shape) == 1:
            n = shape[0]
            add("arange", shape, "float32", "RuntimeError" if not 0 <= n <= I64_MAX else
                _new(shape, isz))
            add("linspace", shape, "float32", "ValueError" if n > I64_MAX else
                "RuntimeError" if n < 0 else _new(shape, isz))
        if len(shape) in (1, 2):
            if any(s > I64_MAX for s in shape):
                e = "ValueError"
            elif any(s < 0 for s in shape):
                e = "RuntimeError"
            else:
                e = _new(shape * 2 if len(shape) == 1 else shape, isz)
            add("eye", shape, "float32", e, (shape * 2 if len(shape) == 1 else shape)
                if e == "ok" else None)
        # views: an expand of ones (sizes < -1 overflow the count; -1 keeps the size 1)
        ex = _view([1 if s == -1 else s for s in shape])
        if any(s < -1 for s in shape) and ex == "ok":
            ex = "RuntimeError"
        ex_shape = [1 if s == -1 else s for s in shape]
        add("expand", shape, "float32", ex, ex_shape if ex == "ok" else None)
        v, resolved = _view_of_empty(shape)
        add("view0", shape, "float32", v, resolved)
        add("reshape0", shape, "float32", v, resolved)
        # what an expanded view makes
        for kind in ("clone", "exp", "zeros_like", "mul_scalar", "stack2"):
            shp = [2] + ex_shape if kind == "stack2" else ex_shape
            add(kind, shape, "float32", _then_new(ex, shp, isz), shp)
        if len(shape) == 2 and all(s >= 0 for s in shape):
            a, b = _view([shape[0], 1]), _view([1, shape[1]])
            first = a if a != "ok" else b
            add("add_bcast", shape, "float32", _then_new(first, shape, isz))
            if 0 not in shape:  # (mm of an empty result with a huge operand: not yet)
                add("matmul", shape, "float32", _then_new(first, shape, isz))
        if len(shape) >= 2 and ex == "ok":
            e = _new(ex_shape[:-1], isz)
            if e != "ok" or _numel(ex_shape) <= 1 << 16:    # (not a sum of 2**62 elements)
                add("sum_last", shape, "float32", e, ex_shape[:-1])
        if len(shape) == 1 and ex == "ok" and 2 * ex_shape[0] <= I64_MAX:
            add("cat2", shape, "float32", _new([2 * ex_shape[0]], isz), [2 * ex_shape[0]])
        if all(0 <= s <= I64_MAX for s in shape) and _numpy_makes(shape):
            # NumPy's own broadcast view of that size
            add("from_numpy", shape, "float64", "ok")
            add("tensor_np", shape, "float64", _new(shape, 8))
    out.append(("index_small", "index_small", [3], "float32", "IndexError", None))
    out.append(("index_big", "index_big", [2 ** 62], "float32", "ok", []))
    out.append(("index_neg", "index_neg", [2 ** 62], "float32", "IndexError", None))
    out.append(("engine_new", "engine_new", [2 ** 31] * 3, "float32", "RuntimeError", None))
    out.append(("engine_new2", "engine_new", [2 ** 62, 4], "float32", "RuntimeError", None))
    out.append(("engine_new3", "engine_new", [2 ** 45], "float32", "MemoryError", None))
    out.append(("engine_expand", "engine_expand", [2 ** 62, 2 ** 62], "float32", "RuntimeError",
                None))
    out.append(("engine_expand2", "engine_expand", [-3, 1], "float32", "RuntimeError", None))
    return out


CHILD = textwrap.dedent('''
    import json, sys
    import numpy as np
    import tapegrad as tg
    from tapegrad._engine import state

    limit = int(sys.argv[1])
    if limit >= 0:
        state.set_alloc_limit(limit)
    cases = json.loads(sys.stdin.read())

    def ones_view(shape, dt):
        return tg.zeros([1] * len(shape), dtype=dt).expand(shape)

    def engine_new(shape, dt):
        from tapegrad._engine import core
        from tapegrad._front.tensor import E, _wrap
        with E.lock:
            E.iargs[:len(shape)] = shape
            return _wrap(E.call(core.new_tensor, 0, len(shape), True))

    def engine_expand(shape, dt):
        from tapegrad.ops.registry import BY_NAME
        from tapegrad._front.tensor import run, _wrap
        x = tg.zeros([1] * len(shape))
        return _wrap(run(BY_NAME["expand"], x._i, iargs=[len(shape)] + list(shape)))

    def np_view(shape):
        return np.lib.stride_tricks.as_strided(np.zeros(1), shape=shape,
                                               strides=(0,) * len(shape))

    RUN = {
        "empty": lambda s, dt: tg.empty(*s, dtype=dt),
        "zeros": lambda s, dt: tg.zeros(*s, dtype=dt),
        "ones": lambda s, dt: tg.ones(*s, dtype=dt),
        "full": lambda s, dt: tg.full(s, 1, dtype=dt),
        "rand": lambda s, dt: tg.rand(*s, dtype=dt),
        "randn": lambda s, dt: tg.randn(*s, dtype=dt),
        "randint": lambda s, dt: tg.randint(0, 2, s, dtype=dt),
        "new_zeros": lambda s, dt: tg.zeros(1, dtype=dt).new_zeros(s),
        "new_empty": lambda s, dt: tg.zeros(1, dtype=dt).new_empty(s),
        "new_ones": lambda s, dt: tg.zeros(1, dtype=dt).new_ones(s),
        "new_full": lambda s, dt: tg.zeros(1, dtype=dt).new_full(s, 1),
        "repeat": lambda s, dt: tg.zeros([1] * len(s), dtype=dt).repeat(s),
        "tile": lambda s, dt: tg.zeros([1] * len(s), dtype=dt).tile(s),
        "arange": lambda s, dt: tg.arange(s[0], dtype=dt),
        "linspace": lambda s, dt: tg.linspace(0, 1, s[0], dtype=dt),
        "eye": lambda s, dt: tg.eye(*s, dtype=dt),
        "expand": ones_view,
        "view0": lambda s, dt: tg.zeros(0, dtype=dt).view(s),
        "reshape0": lambda s, dt: tg.zeros(0, dtype=dt).reshape(s),
        "clone": lambda s, dt: ones_view(s, dt).clone(),
        "exp": lambda s, dt: ones_view(s, dt).exp(),
        "zeros_like": lambda s, dt: tg.zeros_like(ones_view(s, dt)),
        "mul_scalar": lambda s, dt: ones_view(s, dt) * 2,
        "stack2": lambda s, dt: tg.stack([ones_view(s, dt)] * 2),
        "add_bcast": lambda s, dt: ones_view([s[0], 1], dt) + ones_view([1, s[1]], dt),
        "matmul": lambda s, dt: ones_view([s[0], 1], dt) @ ones_view([1, s[1]], dt),
        "sum_last": lambda s, dt: ones_view(s, dt).sum(-1),
        "cat2": lambda s, dt: tg.cat([ones_view(s, dt)] * 2),
        "from_numpy": lambda s, dt: tg.from_numpy(np_view(s)),
        "tensor_np": lambda s, dt: tg.tensor(np_view(s)),
        "index_small": lambda s, dt: tg.zeros(3)[123456789],
        "index_big": lambda s, dt: tg.zeros(1).expand(2 ** 62)[123456789],
        "index_neg": lambda s, dt: tg.zeros(1).expand(2 ** 62)[-2 ** 62 - 1],
        "engine_new": engine_new,
        "engine_expand": engine_expand,
    }
    print("ready", flush=True)
    for name, kind, shape, dt in cases:
        try:
            r = RUN[kind](shape, getattr(tg, dt if dt != "bool" else "bool"))
        except Exception as exc:
            print(json.dumps([name, type(exc).__name__, str(exc)[:300]]), flush=True)
        else:
            print(json.dumps([name, "ok", list(r.shape)]), flush=True)
''')


def _run_children(cases, limit):
    """Run the cases in child processes; a crash fails the case after the last one the
    child finished, and a new child goes on with the rest. Returns {name: (outcome,
    detail)}."""
    results = {}
    todo = list(cases)
    children = 0
    while todo:
        children += 1
        assert children <= 10, "too many crashes"
        proc = subprocess.run([sys.executable, "-c", CHILD, str(limit)],
                              input=json.dumps([c[:4] for c in todo]), capture_output=True,
                              text=True, timeout=900, cwd=REPO_ROOT)
        lines = proc.stdout.splitlines()
        assert lines and lines[0] == "ready", proc.stderr[-2000:]
        done = 0
        for line in lines[1:]:
            name, outcome, detail = json.loads(line)
            assert name == todo[done][0]
            results[name] = (outcome, detail)
            done += 1
        if proc.returncode != 0:
            if done < len(todo):
                results[todo[done][0]] = (f"crash (exit code {proc.returncode})",
                                          proc.stderr[-500:])
                done += 1
            else:
                pytest.fail(f"the child exited with {proc.returncode} after its last case: "
                            f"{proc.stderr[-2000:]}")
        todo = todo[done:]
    return results


def test_sweep_in_child_processes():
    cases = _cases()
    assert len(cases) > 400
    results = _run_children(cases, LIMIT)
    wrong = []
    for name, kind, shape, dt, expect, result in cases:
        outcome, detail = results[name]
        if outcome != expect or (outcome == "ok" and detail != list(result)):
            wrong.append(f"{name}: expected {expect} {result if expect == 'ok' else ''}, "
                         f"got {outcome}: {detail}")
    assert not wrong, "\n".join(wrong)


def test_huge_allocations_fail_before_touching_memory():
    """With the machine's limit, and with none at all (malloc refuses 2**47 bytes: more
    than a 47-bit address space), never with the pages touched: the child's peak memory
    grows little over what the same calls on small sizes took."""
    code = textwrap.dedent('''
        import resource, sys
        import tapegrad as tg
        from tapegrad._engine import state
        if sys.argv[1] == "none":
            state.set_alloc_limit(2 ** 63 - 1)
        # each path once on a small size first: compiling its kernels (on a cold cache)
        # takes memory of its own, which is not what this measures
        tg.zeros(1), tg.empty(1), tg.ones(1), tg.rand(1), tg.eye(2), tg.zeros(1).repeat(2)
        tg.zeros(1).expand(2).exp(), tg.stack([tg.zeros(1).expand(2)] * 2)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for name, call in [("zeros", lambda: tg.zeros(1 << 45)),
                           ("empty", lambda: tg.empty(1 << 45)),
                           ("ones", lambda: tg.ones(1 << 45)),
                           ("rand", lambda: tg.rand(1 << 45)),
                           ("eye", lambda: tg.eye(1 << 23)),
                           ("repeat", lambda: tg.zeros(1).repeat(1 << 45)),
                           ("exp", lambda: tg.zeros(1).expand(1 << 45).exp()),
                           ("stack", lambda: tg.stack([tg.zeros(1).expand(1 << 44)] * 2))]:
            try:
                call()
                print(name, "ok")
            except MemoryError:
                print(name, "MemoryError")
            except Exception as exc:
                print(name, type(exc).__name__, exc)
            sys.stdout.flush()
        print("maxrss", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
    ''')
    for mode in ("machine", "none"):
        proc = subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True,
                              timeout=900)
        assert proc.returncode == 0, (mode, proc.stdout, proc.stderr[-2000:])
        lines = proc.stdout.splitlines()
        assert len(lines) == 9, (mode, proc.stdout)
        for line in lines[:-1]:
            assert line.endswith(" MemoryError"), (mode, line)
        assert int(lines[-1].split()[1]) < 256 * 1024, (mode, lines[-1])     # KiB


def test_cat_and_stack_sizes_beyond_int64():
    # (PyTorch's own messages here come from a wrapped count: "negative dimension -2**63")
    big = tg.zeros(1).expand(2 ** 62)
    with pytest.raises(RuntimeError, match="Storage size calculation overflowed"):
        tg.cat([big] * 2)
    with pytest.raises(RuntimeError, match="Storage size calculation overflowed"):
        tg.stack([big] * 2)
    with pytest.raises(RuntimeError, match="Storage size calculation overflowed"):
        tg.cat([tg.zeros(1, dtype=tg.int64).expand(2 ** 61)] * 2)
