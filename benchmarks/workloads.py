"""Workload definitions shared by compare.py and the asv suite (no side effects on import)."""

LR = 0.01
CHAIN_OPS = 10_000          # scalar chain: 5 ops per cycle (mul, add, tanh, pow 2, scale)
CHAIN_CYCLES = CHAIN_OPS // 5
CHAIN_MUL, CHAIN_ADD, CHAIN_SCALE = 0.9, 0.1, 1.73    # a stable fixed point near 1.08 with
CHAIN_X0 = 1.5              # slope ~0.92: bounded values and a gradient (~1e-73) that
                            # stays a normal float64, so the check compares real numbers


def scalar_chain(y, cycles=CHAIN_CYCLES):
    """The scalar-chain workload: works on tapegrad, torch and jax values alike."""
    for _ in range(cycles):
        y = y * CHAIN_MUL
        y = y + CHAIN_ADD
        y = y.tanh()
        y = y ** 2
        y = y * CHAIN_SCALE
    return y
