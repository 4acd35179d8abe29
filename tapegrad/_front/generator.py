"""tapegrad.Generator: PyTorch's CPU generator (ATen's CPUGeneratorImpl), an mt19937
engine whose state (624 words, its position, the seed and the cached Box-Muller sample)
lives in a NumPy array the kernels of _engine/mt19937.py read and write by address.

torch.Generator() starts from the seed 67280421310721; the default generator is seeded
from the operating system at start-up, as PyTorch's is; manual_seed makes either
repeatable. get_state() gives PyTorch's byte layout (CPUGeneratorImplState, 5056 bytes)
as an int64 tensor of byte values (tapegrad tensors have no uint8 dtype); set_state()
takes it back, as torch.set_rng_state takes PyTorch's ByteTensor.
"""
import numbers
import os

import numpy as np

from . import dtype as D
from . import device as _device
from .._engine import mt19937 as MT
from .._engine.state import note_break
from .creation import tensor
from .tensor import Tensor

_U64 = 1 << 64
_MT_INIT = 1812433253

# CPUGeneratorImplState's layout in memory (its legacy part, then the float sample)
_STATE_DTYPE = np.dtype({
    "names": ["seed", "left", "seeded", "next", "words", "normal_x", "normal_y",
              "normal_rho", "normal_is_valid", "float_normal", "float_normal_is_valid"],
    "formats": ["=u8", "=i4", "=i4", "=u8", ("=u8", MT.NWORDS), "=f8", "=f8", "=f8", "=i4",
                "=f4", "u1"],
    "offsets": [0, 8, 12, 16, 24, 5016, 5024, 5032, 5040, 5048, 5052],
    "itemsize": 5056})
STATE_BYTES = _STATE_DTYPE.itemsize


def _seed_words(seed):
    """The engine's 624 words after mt19937(seed) (only the low 32 bits count)."""
    w = [seed & 0xffffffff]
    for j in range(1, MT.NWORDS):
        x = w[-1]
        w.append((_MT_INIT * (x ^ (x >> 30)) + j) & 0xffffffff)
    return np.array(w, np.uint32)


def _seed_value(seed):
    """A seed as PyTorch's Generator.manual_seed takes it: an int from -2**63 to
    2**64 - 1, negative ones read as unsigned."""
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, numbers.Integral):
        raise RuntimeError(f"manual_seed expected a long, but got {type(seed).__name__}")
    seed = int(seed)
    if not -(1 << 63) <= seed < _U64:
        raise ValueError("Overflow when unpacking long long")
    return seed % _U64


def _nondeterministic_seed():
    """64 bits from the operating system, as PyTorch's getNonDeterministicRandom."""
    return int.from_bytes(os.urandom(8), "little")


class Generator:
    """PyTorch's torch.Generator on the CPU: an mt19937 stream, seeded with
    67280421310721 until manual_seed or seed says otherwise. Pass it as generator= to
    the random functions and methods to draw from it instead of the default generator."""

    def __init__(self, device="cpu"):
        dev = _device.check_device(device, "Generator")
        self.device = _device.CPU if dev is None else dev
        # (an array, never replaced: kernels and compiled replays hold its address)
        self._state = np.zeros(MT.STATE_LEN, np.int64)
        self._addr = self._state.ctypes.data
        self._set_seed(MT.DEFAULT_SEED)

    def _set_seed(self, seed):
        _no_replay("seeded")
        s = self._state
        s[:MT.NWORDS // 2] = _seed_words(seed).view(np.int64)
        s[MT.W_LEFT] = 1
        s[MT.W_NEXT] = 0
        s[MT.W_SEED] = np.uint64(seed).view(np.int64)
        s[MT.W_SEEDED] = 1
        s[MT.W_DVALID] = s[MT.W_FVALID] = 0
        s[MT.W_DNORM] = s[MT.W_FNORM] = 0

    def manual_seed(self, seed):
        """Seed the stream (an int from -2**63 to 2**64 - 1; negative seeds wrap to
        2**64 + seed, as in PyTorch); forgets the cached normal sample. Returns self."""
        self._set_seed(_seed_value(seed))
        return self

    def seed(self):
        """Seed the stream from the operating system's randomness; returns the seed."""
        seed = _nondeterministic_seed()
        self._set_seed(seed)
        return seed

    def initial_seed(self):
        """The seed the stream was last seeded with."""
        return int(self._state[MT.W_SEED:MT.W_SEED + 1].view(np.uint64)[0])

    def get_state(self):
        """The state as PyTorch lays it out (torch.Generator.get_state): 5056 bytes, here
        an int64 tensor of byte values (0..255)."""
        s = self._state
        rec = np.zeros((), _STATE_DTYPE)
        rec["seed"] = s[MT.W_SEED:MT.W_SEED + 1].view(np.uint64)[0]
        rec["left"] = s[MT.W_LEFT]
        rec["seeded"] = s[MT.W_SEEDED]
        rec["next"] = s[MT.W_NEXT]
        rec["words"] = s[:MT.NWORDS // 2].view(np.uint32)
        if s[MT.W_DVALID]:
            rec["normal_is_valid"] = 1
            rec["normal_y"] = s[MT.W_DNORM:MT.W_DNORM + 1].view(np.float64)[0]
        if s[MT.W_FVALID]:
            rec["float_normal_is_valid"] = 1
            rec["float_normal"] = s[MT.W_FNORM:MT.W_FNORM + 1].view(np.float64)[0]
        return tensor(np.frombuffer(rec.tobytes(), np.uint8).astype(np.int64))

    def set_state(self, new_state):
        """Restore a state get_state returned (PyTorch's checks: the size, a valid engine
        position). Returns self."""
        rec = _parse_state(new_state)
        _no_replay("given a state")
        s = self._state
        s[:MT.NWORDS // 2] = rec["words"].astype(np.uint32).view(np.int64)
        s[MT.W_SEED] = np.uint64(rec["seed"]).view(np.int64)
        s[MT.W_LEFT] = rec["left"]
        s[MT.W_SEEDED] = rec["seeded"]
        s[MT.W_NEXT] = int(rec["next"]) & 0xffffffff
        s[MT.W_DVALID] = int(rec["normal_is_valid"] != 0)
        s[MT.W_DNORM] = np.float64(rec["normal_y"] if rec["normal_is_valid"] else 0.0).view(
            np.int64)
        s[MT.W_FVALID] = int(rec["float_normal_is_valid"] != 0)
        s[MT.W_FNORM] = np.float64(rec["float_normal"] if rec["float_normal_is_valid"]
                                   else 0.0).view(np.int64)
        return self

    def clone_state(self):
        """A new Generator in this one's state."""
        g = Generator()
        g._state[:] = self._state
        return g

    def get_offset(self):
        """PyTorch's CPU generators have no offset: its RuntimeError."""
        raise RuntimeError("CPU Generator does not use offset")

    def set_offset(self, offset):
        """PyTorch's CPU generators have no offset: its RuntimeError."""
        raise RuntimeError("CPU Generator does not use offset")

    def __getstate__(self):
        return {"device": "cpu", "state": self._state.copy()}

    def __setstate__(self, d):
        self.device = _device.CPU
        self._state = np.array(d["state"], np.int64)
        self._addr = self._state.ctypes.data

    def __repr__(self):
        return f"<tapegrad.Generator object at {id(self):#x}>"


def _no_replay(what):
    """A generator changed inside a step tapegrad.compile records: a graph break (a
    replay would not change it again, and its dropout would draw other numbers)."""
    note_break(f"a random generator is {what} inside the compiled function")


def _parse_state(new_state):
    """The fields of a state tensor, checked as PyTorch checks a ByteTensor state."""
    if not isinstance(new_state, Tensor):
        raise TypeError(f"expected a tapegrad.ByteTensor (the int64 tensor of bytes "
                        f"get_state returns), but got {type(new_state).__name__}")
    if new_state.dtype is not D.int64:
        raise TypeError("RNG state must be a tapegrad.ByteTensor (the int64 tensor of "
                        "bytes get_state returns)")
    if new_state.numel() != STATE_BYTES:
        raise RuntimeError(f"Expected a CPUGeneratorImplState of size {STATE_BYTES} but found "
                           f"the input RNG state size to be {new_state.numel()}")
    values = np.array(new_state.detach().numpy(), np.int64).reshape(-1)
    if values.min() < 0 or values.max() > 255:
        raise RuntimeError("RNG state must hold byte values (0 to 255)")
    rec = np.frombuffer(values.astype(np.uint8).tobytes(), _STATE_DTYPE)[0]
    left, nxt = int(rec["left"]), int(rec["next"]) & 0xffffffff
    if not (rec["seeded"] != 0 and 0 < left <= MT.NWORDS and nxt <= MT.NWORDS):
        raise RuntimeError("Invalid mt19937 state")
    return rec


def generator_arg(generator, fn):
    """The Generator a random function draws from: generator=, or the default one."""
    if generator is None:
        return default_generator
    if not isinstance(generator, Generator):
        raise TypeError(f"{fn}(): argument 'generator' must be tapegrad.Generator, not "
                        f"{type(generator).__name__}")
    return generator


default_generator = Generator()
default_generator.seed()


def manual_seed(seed):
    """Seed the default generator (torch.manual_seed): seed is converted with int() first,
    so 1.5 and "3" are taken, as in PyTorch. Returns the default generator."""
    return default_generator.manual_seed(int(seed))


def seed():
    """Seed the default generator from the operating system; returns the seed."""
    return default_generator.seed()


def initial_seed():
    """The seed the default generator was last seeded with."""
    return default_generator.initial_seed()


def get_rng_state():
    """The default generator's state (Generator.get_state)."""
    return default_generator.get_state()


def set_rng_state(new_state):
    """Restore the default generator's state from get_rng_state()."""
    default_generator.set_state(new_state)
