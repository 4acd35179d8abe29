"""The op table: every op is one OpDef in its family's module (registry.py has the
table and the OpDef class). Importing this package loads every family, so the table is
complete, and gives the engine its view of it: the per-op facts its compiled code reads
(layout.O_*) and how to load an op's kernels."""
from .._engine.cache import kernel_cache
from .._engine import layout as L
from .._engine.state import engine
from . import registry

with kernel_cache():        # (the families' kernels are cached under their own keys)
    from . import elementwise, reduce, linalg, shape, along, index, loss, function, compare
    from . import linear, conv, pool, norm, recurrent, attention
    from . import special
    from . import decomp

__all__ = ["registry", "elementwise", "reduce", "linalg", "shape", "along", "index", "loss",
           "function", "compare", "linear", "conv", "pool", "norm", "recurrent", "attention",
           "special", "decomp"]


def _load_kernels(opcode, slot):
    return registry.OPS[opcode].kernels(slot)


_E = engine()
_E.kernel_loader = _load_kernels
_E.has_row_kernels = lambda opcode: registry.OPS[opcode].has_row_loops
registry.fill_opinfo(_E.opinfo)
_E.ctx[L.C_AS_STRIDED] = registry.BY_NAME["as_strided"].opcode
