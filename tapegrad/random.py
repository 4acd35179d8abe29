"""tapegrad.random, as PyTorch's torch.random: the default generator's seed and state, and
fork_rng."""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import contextlib

from ._front.generator import (default_generator, manual_seed, seed, initial_seed,
                               get_rng_state, set_rng_state)

__all__ = ["set_rng_state", "get_rng_state", "manual_seed", "seed", "initial_seed",
           "fork_rng"]


@contextlib.contextmanager
def fork_rng(devices=None, enabled=True, _caller="fork_rng", _devices_kw="devices",
             device_type=None):
    """Run the block with the default generator's state saved, and restore it on the way
    out (an exception included), as PyTorch's fork_rng does for the CPU generator.
    tapegrad has no accelerators, so devices and device_type name none; enabled=False
    forks nothing."""
    if device_type == "meta" or not enabled:
        yield
        return
    state = default_generator.get_state()
    try:
        yield
    finally:
        default_generator.set_state(state)
