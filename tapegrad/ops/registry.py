"""The op table: every op is one OpDef, and everything else follows from it.

An entry names the op, its grad_fn (``MulBackward0``), its kernels and what its
backward needs. For elementwise ops the kernels are *formulas* (like PyTorch's
derivatives.yaml): which inputs are saved (and so version-checked) is read off the
gradient formulas, and the forward/backward kernels are generated from them. Other
families point at hand-written kernels in their module. Kernels are compiled on first
use, per op, and cached on disk.
"""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import importlib
import re
import types

from .._engine import layout as L
from .._engine.cache import kernel_cache
from .._engine.lowlevel import KERNEL_SIG, cfunc

OPS = []          # index = opcode
BY_NAME = {}
_SHARED = {}      # (module, fwd, bwd, slot key) -> compiled pair: entries that differ
                  # only in name


class OpDef:
    __slots__ = ("name", "grad_fn", "kind", "forward", "grads", "saves_if", "saved_out",
                 "diff", "module", "fwd_fn", "bwd_fn", "opcode", "_kernels", "nin",
                 "scalar_slot", "method", "spec", "ntan", "saved_by", "per_dtype", "edges",
                 "multi_view", "overlap_ok")

    def __init__(self, name, grad_fn, kind, *, forward=None, grads=None, saves_if=None,
                 saved_out=0, diff=None, module=None, fwd_fn=None, bwd_fn=None, nin=None,
                 per_dtype=False):
        """saves_if[k]: the values ("a", "b", "out") the gradient of input k reads, so
        they are saved (and version-checked) only when input k requires grad, as in
        PyTorch; read off the formulas for elementwise ops. saved_out: which output "out"
        means. per_dtype: hand-written kernels compiled once per slot, with the module
        global KERNEL_DTYPE fixed to the slot's dtype (see _per_dtype)."""
        self.name = name
        self.grad_fn = grad_fn
        self.kind = kind            # "unary", "binary" (formula ops), "custom" or "python"
        self.forward = forward
        self.grads = grads
        self.module = module
        self.fwd_fn = fwd_fn
        self.bwd_fn = bwd_fn
        self._kernels = None
        self.scalar_slot = False
        self.method = True          # a plain Tensor method x.name() (no arguments)
        self.saved_out = saved_out
        self.spec = None            # a fused op's members (replay/fuse.py)
        self.ntan = 0               # a fused op's tangent count (layout.O_TANGENT)
        self.saved_by = {}          # saved input k (-1: out) -> the grad_fn an error names
        self.per_dtype = per_dtype
        self.edges = None           # inputs next_functions lists (None: all of them)
        self.multi_view = False     # outputs are views of input 0 (layout.OF_MULTIVIEW)
        # in place, a formula that never reads a writes elements independently of each
        # other, so memory shared between elements is no hazard (layout.OF_OVERLAP_OK)
        self.overlap_ok = kind in ("unary", "binary") and "a" not in _names(forward)
        if kind in ("unary", "binary"):
            self.nin = 1 if kind == "unary" else 2
            self.saves_if = {k: _names(gf) & {"a", "b", "out"}
                             for k, gf in enumerate(grads) if gf is not None}
            self.diff = tuple(self.saves_if)
        else:
            self.nin = nin
            self.saves_if = {k: set(v) for k, v in (saves_if or {}).items()}
            self.diff = tuple(diff or ())

    def saves_mask(self, k):
        names = self.saves_if.get(k, ())
        return sum(L.SAVE_OUT if x == "out" else 1 << "abc".index(x) for x in names)

    def diff_mask(self):
        return sum(1 << i for i in self.diff)

    @property
    def has_row_loops(self):
        """Whether the op has row-broadcast loops (kernel slots 2/3, _engine.core.call_ew):
        binary elementwise ops do."""
        return self.kind == "binary"

    def kernels(self, slot):
        """(forward, backward) C functions for kernel slot 0 (float32) or 1 (float64),
        compiled on first use. Elementwise loops are per dtype, so a float32 program never
        compiles float64 loops; hand-written kernels serve both slots. Slots 2/3: a binary
        op's row-broadcast loops for those dtypes (_engine.core.call_ew), None for other
        ops."""
        if self._kernels is None:
            self._kernels = {}
        if slot >= 2 and not self.has_row_loops:
            return None
        generated = self.kind in ("unary", "binary", "fused")
        key = slot if generated or self.per_dtype else 0
        if key not in self._kernels:
            if generated:
                from . import _codegen
                mod = _codegen.load(self)
                ty = ("f32", "f64", "r_f32", "r_f64")[slot]
                fwd_py, bwd_py = getattr(mod, "fwd_" + ty), getattr(mod, "bwd_" + ty)
            else:
                shared = _SHARED.get((self.module, self.fwd_fn, self.bwd_fn, key))
                if shared is not None:      # another entry with the same kernels
                    self._kernels[key] = shared
                    return shared
                mod = importlib.import_module(self.module)
                fwd_py, bwd_py = getattr(mod, self.fwd_fn), getattr(mod, self.bwd_fn)
                if self.per_dtype:
                    fwd_py, bwd_py = _per_dtype(fwd_py, slot), _per_dtype(bwd_py, slot)
            with kernel_cache():
                opts = dict(cache=True, error_model="numpy")
                self._kernels[key] = (cfunc(KERNEL_SIG, **opts)(fwd_py),
                                      cfunc(KERNEL_SIG, **opts)(bwd_py))
            if self.kind == "custom":
                _SHARED[(self.module, self.fwd_fn, self.bwd_fn, key)] = self._kernels[key]
        return self._kernels[key]


def _per_dtype(fn, slot):
    """A copy of kernel fn whose global KERNEL_DTYPE is slot's dtype. Numba reads globals
    as constants and prunes a branch on a constant condition, so `if KERNEL_DTYPE == F32:`
    compiles one dtype's path (and its callees) only: a float32 program never compiles
    float64 GEMM calls. Its own name keeps the two copies apart in the on-disk cache."""
    ns = dict(fn.__globals__, KERNEL_DTYPE=(L.F32, L.F64)[slot])
    name = f"{fn.__name__}_{('f32', 'f64')[slot]}"
    copy = types.FunctionType(fn.__code__, ns, name, fn.__defaults__, fn.__closure__)
    copy.__qualname__ = name
    return copy


_IDENT = re.compile(r"[A-Za-z_]\w*")


def _names(formula):
    return set(_IDENT.findall(formula))


def register(op):
    op.opcode = len(OPS)
    OPS.append(op)
    BY_NAME[op.name] = op
    return op


def fill_opinfo(opinfo, ops=None):
    for op in OPS if ops is None else ops:
        for k in range(L.MAXIN):
            opinfo[op.opcode, L.O_SAVES_IF + k] = op.saves_mask(k)
        opinfo[op.opcode, L.O_DIFF] = op.diff_mask()
        opinfo[op.opcode, L.O_SAVED_OUT] = op.saved_out
        opinfo[op.opcode, L.O_KIND] = (
            L.KIND_EW if op.kind in ("unary", "binary", "fused") else
            L.KIND_PY if op.kind == "python" else L.KIND_CUSTOM)
        opinfo[op.opcode, L.O_TANGENT] = op.ntan
        opinfo[op.opcode, L.O_FLAGS] = ((L.OF_MULTIVIEW if op.multi_view else 0)
                                        | (L.OF_OVERLAP_OK if op.overlap_ok else 0))
