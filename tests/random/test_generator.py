"""tapegrad.Generator and tapegrad.random: seeds as PyTorch takes them, the state's byte
layout and its round trip, fork_rng, pickling; the mt19937 engine against the
reference values of the standard (no PyTorch needed)."""
import copy
import pickle

import numpy as np
import pytest

import tapegrad as tg
from tapegrad._engine import mt19937 as MT
from tapegrad._front import sampling


def _raw_words(gen, n):
    """The engine's next 2 * n outputs: random_(-2**63, None) keeps all 64 bits of each
    pair (the first output high)."""
    v = tg.empty(n, dtype=tg.int64).random_(-2 ** 63, None, generator=gen).numpy()
    u = v.view(np.uint64)
    return np.stack([u >> np.uint64(32), u & np.uint64(0xffffffff)], 1).reshape(-1)


def test_engine_is_the_standard_mt19937():
    # seed 5489: the first output, and the 10000th (which C++ requires of std::mt19937)
    words = _raw_words(tg.Generator().manual_seed(5489), 5000)
    assert words[0] == 3499211612 and words[9999] == 4123659995


def test_generator_starts_from_pytorchs_seed():
    g = tg.Generator()
    assert g.initial_seed() == 67280421310721 == MT.DEFAULT_SEED
    assert str(g.device) == "cpu"
    a = tg.rand(4, generator=g)
    b = tg.rand(4, generator=tg.Generator())
    assert tg.equal(a, b)


def test_seeds():
    g = tg.Generator()
    assert g.manual_seed(3) is g and g.initial_seed() == 3
    assert g.manual_seed(-1).initial_seed() == 2 ** 64 - 1
    assert g.manual_seed(-2 ** 63).initial_seed() == 2 ** 63
    assert g.manual_seed(2 ** 64 - 1).initial_seed() == 2 ** 64 - 1
    # only the low 32 bits start the engine, as in PyTorch
    a = tg.rand(5, generator=g.manual_seed(2 ** 32 + 9))
    assert tg.equal(a, tg.rand(5, generator=g.manual_seed(9)))
    assert tg.manual_seed(7) is tg.default_generator and tg.initial_seed() == 7
    assert tg.manual_seed(1.9).initial_seed() == 1          # (int() first, as torch)
    assert tg.manual_seed("12").initial_seed() == 12
    assert tg.manual_seed(tg.tensor(5)).initial_seed() == 5
    s = tg.seed()
    assert 0 <= s < 2 ** 64 and tg.initial_seed() == s
    s2 = g.seed()
    assert g.initial_seed() == s2


@pytest.mark.parametrize("bad,exc,msg", [
    (2 ** 64, ValueError, "Overflow when unpacking long long"),
    (-2 ** 63 - 1, ValueError, "Overflow when unpacking long long"),
    (1.5, RuntimeError, "manual_seed expected a long, but got float"),
    (True, RuntimeError, "manual_seed expected a long, but got bool"),
    ("3", RuntimeError, "manual_seed expected a long, but got str"),
])
def test_bad_seeds(bad, exc, msg):
    with pytest.raises(exc, match=msg):
        tg.Generator().manual_seed(bad)


def test_module_manual_seed_errors():
    with pytest.raises(ValueError, match="Overflow when unpacking long long"):
        tg.manual_seed(2 ** 64)
    with pytest.raises(TypeError, match="int"):
        tg.manual_seed(None)


def test_state_round_trip_and_layout():
    g = tg.Generator().manual_seed(21)
    tg.randn(3, generator=g)        # 8 outputs (two Box-Muller pairs), one sample cached
    state = g.get_state()
    assert state.dtype is tg.int64 and tuple(state.shape) == (5056,)
    raw = state.numpy().astype(np.uint8).tobytes()
    assert int.from_bytes(raw[0:8], "little") == 21             # the seed
    assert int.from_bytes(raw[8:12], "little") == 624 - 8 + 1   # left
    assert int.from_bytes(raw[16:24], "little") == 8            # next
    assert int.from_bytes(raw[5040:5044], "little") == 1        # a normal sample cached
    x = tg.randn(7, generator=g)
    g.set_state(state)
    assert tg.equal(tg.randn(7, generator=g), x)
    h = tg.Generator().set_state(state)
    assert tg.equal(tg.randn(7, generator=h), x)


def test_default_generator_state_and_fork_rng():
    tg.manual_seed(4)
    s = tg.get_rng_state()
    a = tg.randn(20)
    tg.set_rng_state(s)
    assert tg.equal(tg.randn(20), a)
    tg.manual_seed(4)
    with tg.random.fork_rng():
        tg.randn(100)
    assert tg.equal(tg.randn(20), a)
    with pytest.raises(KeyError):
        with tg.random.fork_rng():
            tg.rand(3)
            raise KeyError("inside")
    tg.manual_seed(4)
    with tg.random.fork_rng(enabled=False):
        tg.rand(1)
    assert not tg.equal(tg.randn(20), a)
    assert tg.random.initial_seed() == 4 and tg.random.manual_seed is tg.manual_seed


@pytest.mark.parametrize("state,exc,msg", [
    (lambda: tg.zeros(10, dtype=tg.int64), RuntimeError,
     "Expected a CPUGeneratorImplState of size 5056 but found the input RNG state size "
     "to be 10"),
    (lambda: tg.zeros(5056, dtype=tg.int64), RuntimeError, "Invalid mt19937 state"),
    (lambda: tg.zeros(5056), TypeError, "RNG state must be a tapegrad.ByteTensor"),
    (lambda: [0] * 5056, TypeError, "expected a tapegrad.ByteTensor"),
    (lambda: tg.full((5056,), 300), RuntimeError, "byte values"),
])
def test_bad_states(state, exc, msg):
    with pytest.raises(exc, match=msg):
        tg.Generator().set_state(state())


def test_copy_pickle_clone():
    g = tg.Generator().manual_seed(8)
    tg.rand(3, generator=g)
    for h in (copy.deepcopy(g), pickle.loads(pickle.dumps(g)), g.clone_state()):
        assert tg.equal(tg.randn(20, generator=h), tg.randn(20, generator=g.clone_state()))
    with pytest.raises(RuntimeError, match="CPU Generator does not use offset"):
        g.get_offset()


def test_generator_devices_and_arguments():
    assert str(tg.Generator(device="cpu").device) == "cpu"
    with pytest.raises(RuntimeError, match="cuda"):
        tg.Generator("cuda")
    with pytest.raises(TypeError):
        tg.Generator(foo=1)
    with pytest.raises(TypeError, match="argument 'generator' must be tapegrad.Generator"):
        tg.rand(2, generator=1)


def test_randperm_past_pytorchs_32_bit_range():
    """PyTorch switches randperm to the inside-out shuffle with 64-bit draws from
    n = (2**32 - 1) // 20; the kernel's switch is an argument, so the long path is
    checked on a short permutation against the algorithm written out in Python."""
    n = 300
    words = _raw_words(tg.Generator().manual_seed(2), n)
    r = list(range(n))
    for i in range(n):
        z = int((int(words[2 * i]) << 32 | int(words[2 * i + 1])) % (i + 1))
        r[i] = r[z]
        r[z] = i
    out = np.empty(n, np.int64)
    g = tg.Generator().manual_seed(2)
    sampling._kernel("randperm")(g._addr, out.ctypes.data, n, 0)
    assert out.tolist() == r
    assert sorted(r) == list(range(n))


def test_the_two_cpu_builds():
    """cpu_path switches between PyTorch's builds; uniform draws do not depend on it,
    fused multiply-adds and float32 blocks of 16 do."""
    saved = list(sampling._PATH)
    try:
        draws = {}
        for path in ("default", "avx2"):
            sampling.cpu_path(path)
            tg.manual_seed(0)
            draws[path] = (tg.rand(50), tg.randn(50), tg.empty(50).uniform_(-0.3, 0.3))
        assert tg.equal(draws["default"][0], draws["avx2"][0])
        assert not tg.equal(draws["default"][1], draws["avx2"][1])
        assert not tg.equal(draws["default"][2], draws["avx2"][2])
        # (avx_mathfun's sin and cos lose relative precision near their zeros: the two
        # builds' normals agree to about 1e-6 absolute, not to an ulp)
        a, b = draws["default"][1].numpy(), draws["avx2"][1].numpy()
        assert np.abs(a - b).max() < 1e-5
        with pytest.raises(ValueError):
            sampling.cpu_path("sse")
    finally:
        sampling._PATH[:] = saved
