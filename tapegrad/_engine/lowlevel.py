"""The few primitives Numba lacks: raw addresses as arrays, indirect calls, malloc.

Kernels reach every table and buffer through an address held in the ctx array, so a
table can grow (Python reallocates it and updates ctx) without recompiling anything, and
per-op kernels compiled on first use are called through a table of addresses.
"""
from llvmlite import ir, binding as llvm
from numba import njit, types, carray
from numba.core import cgutils, codegen as numba_codegen, compiler as numba_compiler, sigutils
from numba.core.ccallback import CFunc
from numba.core.extending import intrinsic
from numba.core.registry import CPUDispatcher

from .cache import KernelCache
from .compile_speed import shortcuts

from .layout import NCTX, MW, SW, RW, C_META, C_META_CAP, C_STOR, C_STOR_CAP, \
    C_TAPE, C_TAPE_CAP, C_FATTR, C_IARGS, C_OPINFO, OIW, C_FWD, C_BWD, C_OUTS, NKSLOT, \
    C_OUTS_CAP, C_ERR, C_WORK, C_WORK_CAP, C_IARGS_CAP, C_DESC, DW, MAXOPS


def _ptr_intrinsic(nbtype):
    @intrinsic
    def ptr(typingctx, addr):
        sig = types.CPointer(nbtype)(types.int64)

        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], context.get_value_type(signature.return_type))
        return sig, codegen
    return ptr


ptr_i64 = _ptr_intrinsic(types.int64)
ptr_f32 = _ptr_intrinsic(types.float32)
ptr_f64 = _ptr_intrinsic(types.float64)
ptr_u8 = _ptr_intrinsic(types.uint8)


@intrinsic
def call_kernel(typingctx, fn, caddr, row):
    """Call the C function at address fn as int64 fn(int64 caddr, int64 row)."""
    sig = types.int64(types.int64, types.int64, types.int64)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        fnty = ir.FunctionType(i64, [i64, i64])
        f = builder.inttoptr(args[0], fnty.as_pointer())
        return builder.call(f, [args[1], args[2]])
    return sig, codegen


c_malloc = types.ExternalFunction("malloc", types.int64(types.intp))
c_calloc = types.ExternalFunction("calloc", types.int64(types.intp, types.intp))
c_free = types.ExternalFunction("free", types.void(types.int64))

KERNEL_SIG = "int64(int64, int64)"


def _unliteral(dispatcher):
    """Calls from compiled code are typed with non-literal argument types. Numba would
    otherwise compile a helper once per constant it is called with (`decref(C, KIND_ROW,
    r)` and `decref(C, KIND_STOR, s)` were two copies of decref and of everything under
    it): the copies were about a third of the engine core's cold compile."""
    typed = dispatcher.get_call_template

    def get_call_template(args, kws):
        return typed(tuple(types.unliteral(a) for a in args),
                     {k: types.unliteral(v) for k, v in kws.items()})
    dispatcher.get_call_template = get_call_template
    return dispatcher


class _Dispatcher(CPUDispatcher):
    """Every tapegrad kernel's dispatcher: cached in tapegrad's keyed directories
    (cache.KernelCache), compiled with compile_speed's shortcuts. (Numba's own
    dispatchers, a user's, are left as they are.)"""

    def enable_caching(self):
        self._cache = KernelCache(self.py_func)

    def compile(self, sig):
        with shortcuts():
            return super().compile(sig)


def _ours(dispatcher, cls=_Dispatcher, unliteral=True):
    """A dispatcher njit made (without cache=True), as one of tapegrad's, cached."""
    dispatcher.__class__ = cls
    dispatcher.enable_caching()
    return _unliteral(dispatcher) if unliteral else dispatcher


class _CFunc(CFunc):
    """A tapegrad kernel compiled as a C callback (cfunc, below)."""

    def enable_caching(self):
        self._cache = KernelCache(self._pyfunc)

    def compile(self):
        with shortcuts():
            return super().compile()


def cfunc(sig, *, cache=False, **options):
    """numba.cfunc for tapegrad's kernels: cached in tapegrad's keyed directories and
    compiled with its shortcuts (see _Dispatcher)."""
    def compile_it(fn):
        f = _CFunc(fn, sigutils.normalize_signature(sig), locals={}, options=options)
        if cache:
            f.enable_caching()
        f.compile()
        return f
    return compile_it


class _HelperDispatcher(_Dispatcher):
    """A helper compiled without Python or C wrappers has no entry point: a call from
    Python would jump to address 0, so it raises instead."""

    def __call__(self, *args, **kws):
        raise TypeError(
            f"tapegrad: {self.py_func.__name__} is compiled for calls from compiled code "
            "only (lowlevel.jit); declare it with lowlevel.jit_entry to call it from Python")


class _LinkOnlyLibrary(numba_codegen.JITCodeLibrary):
    """A helper's code library: IR for its callers to link in, and nothing else.

    Numba optimises every compiled function's module and turns it into machine code;
    then each caller links its callees' IR in (linkonce_odr copies, which LLVM inlines
    or keeps), optimises the whole again and makes machine code again, so a helper five
    calls deep was optimised and compiled six times. A helper's own machine code is
    never run (no wrappers: nothing calls its symbol), and its module-level optimising
    (inlining its callees) is done again by every caller. So a helper's library keeps
    only its per-function-optimised IR; the module passes run once, in the entry point
    or kernel at the top, over everything it links. Its module never reaches the
    execution engine; only its environment pointer (a common global Numba writes the
    helper's Env address into) does, as a module of its own, whose object code the
    cache stores beside the IR. This takes about a fifth off the CPU time of the demo's
    cold compile (skipping only the machine code saves half as much), and leaves the
    kernels' speed unchanged (benchmarks.compare's MLP steps and scalar chains)."""

    def _optimize_final_module(self):
        pass

    def _finalize_final_module(self):
        self._finalize_dynamic_globals()
        self._verify_declare_only_symbols()
        self._env_object = self._codegen._tm.emit_object(self._env_module())
        self._codegen._add_module(self._env_module())
        self._finalized = True

    def _env_module(self):
        mod = self._codegen._create_empty_module(self.name + ".env")
        for gv in self._final_module.global_variables:
            if gv.name.startswith("_ZN08NumbaEnv"):
                g = ir.GlobalVariable(mod, cgutils.voidptr_t, name=gv.name)
                g.linkage = "common"
                g.initializer = cgutils.get_null_value(g.type.pointee)
        return llvm.parse_assembly(str(mod))

    def serialize_using_object_code(self):
        """(Numba's loader adds the object code as its empty module's, and takes the
        IR from the second field, as for any cached function.)"""
        self._ensure_finalized()
        return (self.name, "object",
                (self._env_object, self._get_module_for_linking().as_bitcode()))


class _HelperCompiler(numba_compiler.Compiler):
    def compile_extra(self, func):
        if self.state.library is None:
            self.state.library = _LinkOnlyLibrary(self.state.targetctx.codegen(),
                                                  func.__qualname__)
        return super().compile_extra(func)


# Numba gives every compiled function a Python wrapper and a C wrapper (about a sixth
# of the engine core's cold compile); only the functions Python calls need them
_NO_WRAPPERS = dict(no_cpython_wrapper=True, no_cfunc_wrapper=True)
# _LinkOnlyLibrary overrides Numba internals (numba 0.68's names; older releases spelled
# one of them _finalize_dyanmic_globals): where they differ, helpers compile as before
if all(hasattr(numba_codegen.JITCodeLibrary, name) for name in (
        "_finalize_dynamic_globals", "_verify_declare_only_symbols", "_optimize_final_module",
        "_get_module_for_linking", "serialize_using_object_code")) \
        and hasattr(numba_codegen.JITCPUCodegen, "_create_empty_module") \
        and hasattr(numba_codegen.JITCPUCodegen, "_add_module"):
    _NO_WRAPPERS["pipeline_class"] = _HelperCompiler




# How an @overload implementation compiles (its jit_options): as a helper. Numba compiles
# one for each argument types, even one it inlines (to type the call), and by default
# with both wrappers and its own optimised machine code, none of which is ever run.
OVERLOAD_OPTIONS = dict(error_model="numpy", **_NO_WRAPPERS)


def jit(fn=None, *, fastmath=False):
    """How every tapegrad kernel helper is compiled: cached on disk, and with NumPy's
    error model, so x/0 gives inf or nan as in PyTorch instead of raising inside
    compiled code (where an exception would be lost); one compilation per argument
    types, constants included (_unliteral); callable from compiled code only (no
    wrappers: see jit_entry). `@jit(fastmath=...)` passes Numba's fastmath flags."""
    if fn is None:
        return lambda f: jit(f, fastmath=fastmath)
    extra = dict(fastmath=fastmath) if fastmath else {}
    return _ours(njit(**OVERLOAD_OPTIONS, **extra)(fn), _HelperDispatcher)


class _NativeDispatcher(_HelperDispatcher):
    """A helper that compiled code calls by address (native_address)."""


def jit_native(fn):
    """jit for a helper called by its address (native_address, compiled on first need,
    like clone_entry): no wrappers, but its own machine code."""
    return _ours(njit(error_model="numpy", no_cpython_wrapper=True,
                      no_cfunc_wrapper=True)(fn), _NativeDispatcher)


def jit_entry(fn):
    """jit for the functions Python calls (directly or through state._entry)."""
    return _ours(njit(error_model="numpy")(fn))


def jit_inline(fn):
    """For a small float64 function that Numba inlines into its callers' IR
    (inline="always"), cached as tapegrad's."""
    return _ours(njit(error_model="numpy", inline="always")(fn), unliteral=False)


def has_entry(dispatcher):
    return not isinstance(dispatcher, _HelperDispatcher)


REDUCTION_FASTMATH = {"reassoc", "contract", "nsz", "arcp"}


def jit_reduction(fn):
    """For loops that sum: lets LLVM reorder the additions, so they vectorise. Never
    full fastmath (it would break isnan)."""
    return jit(fn, fastmath=REDUCTION_FASTMATH)


@jit
def ctx_of(caddr):
    return carray(ptr_i64(caddr), (NCTX,))


@jit
def meta_of(C):
    return carray(ptr_i64(C[C_META]), (C[C_META_CAP], MW))


@jit
def stor_of(C):
    return carray(ptr_i64(C[C_STOR]), (C[C_STOR_CAP], SW))


@jit
def tape_of(C):
    return carray(ptr_i64(C[C_TAPE]), (C[C_TAPE_CAP], RW))


@jit
def fattr_of(C):
    return carray(ptr_f64(C[C_FATTR]), (C[C_TAPE_CAP],))


@jit
def iargs_of(C):
    return carray(ptr_i64(C[C_IARGS]), (C[C_IARGS_CAP],))


@jit
def outs_of(C):
    return carray(ptr_i64(C[C_OUTS]), (C[C_OUTS_CAP],))


@jit
def err_of(C):
    return carray(ptr_i64(C[C_ERR]), (16,))


@jit
def work_of(C):
    return carray(ptr_i64(C[C_WORK]), (C[C_WORK_CAP],))


@jit
def opinfo_of(C):
    return carray(ptr_i64(C[C_OPINFO]), (MAXOPS, OIW))


@jit
def fwd_table(C):
    return carray(ptr_i64(C[C_FWD]), (MAXOPS * NKSLOT,))


@jit
def bwd_table(C):
    return carray(ptr_i64(C[C_BWD]), (MAXOPS * NKSLOT,))


@jit
def desc_of(C):
    return carray(ptr_i64(C[C_DESC]), (DW,))


@jit
def f32_at(addr, n):
    return carray(ptr_f32(addr), (n,))


@jit
def f64_at(addr, n):
    return carray(ptr_f64(addr), (n,))


@jit
def i64_at(addr, n):
    return carray(ptr_i64(addr), (n,))


@jit
def u8_at(addr, n):
    return carray(ptr_u8(addr), (n,))


def native_address(dispatcher, sig):
    """Address of the machine code Numba compiled for dispatcher at sig, in Numba's own
    calling convention: compiled code can call it through `native_caller` without
    linking (and so re-optimising) a second copy of it."""
    if not has_entry(dispatcher) and not isinstance(dispatcher, _NativeDispatcher):
        raise TypeError(f"tapegrad: {dispatcher.py_func.__name__} is a helper (lowlevel.jit), "
                        "whose machine code is never made; declare it with "
                        "lowlevel.jit_native to take its address")
    dispatcher.compile(sig)
    cres = dispatcher.overloads[dispatcher.signatures[-1]]
    return cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)


def _native_codegen(argtys):
    def codegen(context, builder, signature, llargs):
        fnty = context.call_conv.get_function_type(types.int64, argtys)
        fp = builder.inttoptr(llargs[0], fnty.as_pointer())
        _, res = context.call_conv.call_function(builder, fp, types.int64, argtys,
                                                 list(llargs[1:]))
        return res
    return codegen


_OP_ARGS = (types.int64, types.int64, types.int64, types.int64, types.float64, types.int64)
_SWEEP_ARGS = (types.int64, types.int64, types.int64, types.int64, types.boolean)
_I4_ARGS = (types.int64,) * 4
_I2_ARGS = (types.int64,) * 2
_NEW_ARGS = (types.int64, types.int64, types.int64, types.boolean)
_FILL_ARGS = (types.int64,) * 4 + (types.float64,) * 2


@intrinsic
def call_native_op(typingctx, fn, caddr, op, a, b, s, flags):
    """Call op_entry (by its native_address) from compiled code."""
    return types.int64(types.int64, *_OP_ARGS), _native_codegen(_OP_ARGS)


@intrinsic
def call_native_sweep(typingctx, fn, caddr, nroots, ncap, mode, retain):
    """Call sweep (by its native_address) from compiled code."""
    return types.int64(types.int64, *_SWEEP_ARGS), _native_codegen(_SWEEP_ARGS)


@intrinsic
def call_native_i4(typingctx, fn, x0, x1, x2, x3):
    """Call a compiled int64 f(int64, int64, int64, int64) by its native_address."""
    return types.int64(types.int64, *_I4_ARGS), _native_codegen(_I4_ARGS)


@intrinsic
def call_native_i2(typingctx, fn, x0, x1):
    """Call a compiled int64 f(int64, int64) by its native_address."""
    return types.int64(types.int64, *_I2_ARGS), _native_codegen(_I2_ARGS)


@intrinsic
def call_native_new(typingctx, fn, caddr, dt, nd, zero):
    """Call core.new_tensor by its native_address."""
    return types.int64(types.int64, *_NEW_ARGS), _native_codegen(_NEW_ARGS)


@intrinsic
def call_native_fill(typingctx, fn, addr, n, is64, seed, p, scale):
    """Call mt19937.fill_dropout by its native_address."""
    return types.int64(types.int64, *_FILL_ARGS), _native_codegen(_FILL_ARGS)
