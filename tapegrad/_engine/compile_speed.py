"""Shortcuts through Numba's own overhead, each giving the same result: five in compiling,
one in loading a cached function (``light_load_overload``, below).

A cold start is Numba typing and lowering a few hundred functions, and a sampling
profile of the engine core's compile (py-spy, op_entry and sweep) put a third of it in
work that repeats an answer Numba already has:

- Every array subscript is typed by trying each registered ``getitem`` (or
  ``setitem``) template in turn: dict, unicode, char sequence, list, tuple, typed list,
  ... each failing with a formatted error message before the array template matches.
  op_entry alone collected 40,670 such failures. ``BaseFunction.get_call_type`` keeps no
  memory of a resolution, so it repeats the search for every subscript of every
  function. ``_memoize_call_types`` remembers each successful one.
- Each ``@overload`` template looks its implementation up in a cache keyed by the
  compile's flags, a ``TargetConfig`` whose hash and equality build a dict of its ~50
  options through property getters: 8.5% of the samples. ``_fast_target_config`` gives
  the same hash and equality without the dicts.
- Formatting each failure's message wraps and unwraps stdout with colorama
  (``ColorShell``), which on POSIX leaves the message unchanged: 1.9% of the samples.
- With those three in place, two smaller costs show: every LLVM call broadcasts two
  events to every enclosing compile's timer (6% of op_entry's samples;
  ``_light_llvm_lock_events``), and every pipeline recomputes its passes' dependencies
  (2.7%; ``_memoize_pass_dependencies``). With both shortcuts their share is 2.5%.

Together they take about a fifth off the engine core's cold compile. They change no
compiled code (the machine code of op_entry,
sweep and mul's and tanh's kernels, dumped with and without them, differs only in
Numba's symbol-name counters), and they apply to tapegrad's own compiles alone:
``shortcuts()`` installs them while it holds Numba's compiler lock (so no other
thread's compile runs meanwhile) and puts Numba's own functions back when it is left,
and only tapegrad's dispatcher and cfunc classes (``lowlevel``) enter it. The light
cache load is a method of tapegrad's cache class (``cache.KernelCache``). A user's own
``@njit`` functions compile, cache and load exactly as without tapegrad.
TAPEGRAD_NUMBA_SHORTCUTS=0 compiles tapegrad's kernels with Numba unchanged too. Each
checks that the Numba internals it relies on exist (numba 0.68's names) and stays out
where not.
"""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import contextlib
import os

from numba.core import (caching, compiler_machinery, cpu, entrypoints, errors, event,
                        targetconfig)
from numba.core.compiler_lock import global_compiler_lock
from numba.core.runtime import rtsys
from numba.core.types import functions as numba_functions

ENABLED = os.environ.get("TAPEGRAD_NUMBA_SHORTCUTS", "1") != "0"
# (holder, name or index, tapegrad's value, Numba's value): what shortcuts() swaps in
_PATCHES = []


def _patch(holder, key, ours):
    numbas = holder[key] if isinstance(holder, list) else getattr(holder, key)
    _PATCHES.append((holder, key, ours, numbas))


def _put(holder, key, value):
    if isinstance(holder, list):
        holder[key] = value
    else:
        setattr(holder, key, value)


_DEPTH = [0]


@contextlib.contextmanager
def shortcuts():
    """Numba with the shortcuts, for one of tapegrad's own compiles (nested ones
    included): entered under Numba's compiler lock, which every Numba compile takes, so
    no other thread compiles meanwhile; on leaving the outermost, Numba's own functions
    are back in place."""
    with global_compiler_lock:
        if _DEPTH[0] == 0:
            for holder, key, ours, _ in _PATCHES:
                _put(holder, key, ours)
        _DEPTH[0] += 1
        try:
            yield
        finally:
            _DEPTH[0] -= 1
            if _DEPTH[0] == 0:
                for holder, key, _, numbas in reversed(_PATCHES):
                    _put(holder, key, numbas)


def _fast_target_config():
    """TargetConfig's __hash__ is hash(tuple(sorted(self.values()))): the sorted option
    names, the same for every instance of a class. Its __eq__ compares values(), every
    option's value or default; two configs with equal explicit values are equal without
    building either dict."""
    T = targetconfig.TargetConfig
    if not (hasattr(T, "options") and "_values" in getattr(T, "__slots__", ())):
        return

    def defaults(cls):
        if "_tg_defaults" not in cls.__dict__:
            cls._tg_defaults = tuple((name, opt.default) for name, opt in cls.options.items())
            cls._tg_hash = hash(tuple(sorted(cls.options)))
        return cls._tg_defaults

    def values(self):
        set_values = self._values
        return {name: set_values.get(name, default) for name, default in defaults(type(self))}

    def __eq__(self, other):
        if not isinstance(other, T):
            return NotImplemented
        if type(self) is type(other) and self._values == other._values:
            return True
        return values(self) == values(other)

    def __hash__(self):
        defaults(type(self))
        return type(self)._tg_hash

    _patch(T, "values", values)
    _patch(T, "__eq__", __eq__)
    _patch(T, "__hash__", __hash__)


def _memoize_call_types():
    """A function type's resolution depends only on the typing context, the argument
    types and the compile's flags (which select an @overload's implementation): the
    same inputs meet the same templates in the same order. A remembered success also
    restores the implementation key Numba records beside it, which lowering reads and
    a resolution under other flags may have replaced. Failures are not remembered: they
    raise, with Numba's message. The memo grows as Numba's own typing caches do: one
    entry per distinct call typed."""
    F = numba_functions.BaseFunction
    if not (hasattr(F, "get_call_type") and hasattr(targetconfig.TargetConfig, "copy")):
        return
    resolve = F.get_call_type
    memo = {}

    def get_call_type(self, context, args, kws):
        impl_keys = getattr(self, "_impl_keys", None)
        if impl_keys is None:
            return resolve(self, context, args, kws)
        flags = targetconfig.ConfigStack.top_or_none()
        try:
            key = (self, context, tuple(args), tuple(kws.items()), flags)
            sig, impl_key = memo[key]
        except KeyError:
            sig = resolve(self, context, args, kws)
            if sig is not None and sig.args in impl_keys:
                # a copy: the key must not change if the compile's flags are edited later
                frozen = None if flags is None else flags.copy()
                memo[key[:4] + (frozen,)] = sig, impl_keys[sig.args]
            return sig
        except TypeError:                       # an unhashable argument type
            return resolve(self, context, args, kws)
        impl_keys[sig.args] = impl_key
        return sig

    _patch(F, "get_call_type", get_call_type)


def _quiet_color_shell():
    """errors.ColorShell calls colorama.init() and deinit() around each highlighted
    message it builds in a buffer: on POSIX that only swaps sys.stdout meanwhile."""
    if os.name == "posix" and hasattr(errors, "ColorShell"):
        class ColorShell:
            def __enter__(self):
                pass

            def __exit__(self, *exc):
                pass
        _patch(errors, "ColorShell", ColorShell)


def light_load_overload(cache, full_load):
    """Loading a cached function begins with target_context.refresh(), which imports and
    installs every registry of Numba's CPU target: numba.np.arraymath (which imports
    SciPy to check for a BLAS), npyimpl, linalg, random, polynomial, the typed containers,
    cffi, ... A sampling profile (py-spy) of a warm start (import tapegrad, one tiny
    backward) put 41% of it in that SciPy import alone. A loaded function needs none of
    those tables: it is machine code, linked against symbols, and the only symbols the
    imports add are the NRT's (rtsys.initialize, refresh's first step), the hash secrets
    numba.cpython.hashing installs and any extension's (its entry point). So a cache load
    of one of tapegrad's kernels does just those three (cache.KernelCache calls this);
    every compile still refreshes in full first (CompilerBase.__init__), as does a
    lowering lookup that misses (BaseContext.get_function). Returns the load, or
    full_load where the Numba internals it needs are missing."""
    C = caching.Cache
    if not (ENABLED and hasattr(C, "_load_overload")
            and hasattr(C, "_guard_against_spurious_io_errors")
            and hasattr(rtsys, "initialize") and hasattr(entrypoints, "init_all")):
        return full_load

    def load_overload(sig, target_context):
        if type(target_context) is not cpu.CPUContext:
            return full_load(sig, target_context)
        rtsys.initialize(target_context)
        import numba.cpython.hashing  # noqa: F401  (its symbols)
        entrypoints.init_all()
        with cache._guard_against_spurious_io_errors():
            return cache._load_overload(sig, target_context)
    return load_overload


def _memoize_pass_dependencies():
    """Numba builds every compile's pipeline afresh and finalizing it computes which
    passes each pass depends on (PassManager.dependency_analysis, a recursive walk over
    the passes' declared requirements): 2.7% of the op entry's compile. The answer
    depends only on the list of passes; it is remembered per list, and each pipeline
    gets its own copy."""
    P = compiler_machinery.PassManager
    if not hasattr(P, "dependency_analysis"):
        return
    analyse = P.dependency_analysis
    memo = {}

    def dependency_analysis(self):
        try:
            key = tuple(pass_class for pass_class, _ in self.passes)
            found = memo.get(key)
        except TypeError:                       # an unhashable pass entry
            return analyse(self)
        if found is None:
            found = memo[key] = analyse(self)
        return {pass_class: set(deps) for pass_class, deps in found.items()}

    dependency_analysis.numbas = analyse
    _patch(P, "dependency_analysis", dependency_analysis)


_LLVM_LOCK = "numba:llvm_lock"


class _LockClock:
    """The running total of the time spent inside llvmlite's lock while a timer is
    installed, and how many outermost lock holdings ended meanwhile."""
    depth = 0
    timers = 0
    timing = False
    start = 0.0
    total = 0.0
    count = 0


def _light_llvm_lock_events():
    """llvmlite takes a lock around every LLVM C-API call, and Numba's callbacks on it
    broadcast a "numba:llvm_lock" start and end event, each a new Event object. Every
    compile, the nested compiles of its callees and overloads included, installs a
    TimingListener on those events (event.install_timer) to record its LLVM time in its
    metadata, so each call notified every enclosing compile's listener: 6% of the op
    entry's compile. The same durations come from one running total of the time held:
    a timer reads it when installed and when removed, and reports only if a holding
    ended meanwhile, as TimingListener does. Listeners registered any other way still
    get every event."""
    from llvmlite.binding import ffi
    cblist = getattr(getattr(getattr(ffi, "lib", None), "_lock", None), "_cblist", None)
    if not (isinstance(cblist, list) and hasattr(event, "TimingListener")
            and hasattr(event, "_registered") and hasattr(event, "timer")):
        return
    numbas = [i for i, (acquire, _) in enumerate(cblist)
              if getattr(acquire, "__qualname__", "").startswith("_initialize_llvm_lock_event")]
    if len(numbas) != 1:
        return
    clock = _LockClock()
    listeners = event._registered[_LLVM_LOCK]
    timer = event.timer

    def acquired():
        if clock.depth == 0:
            clock.timing = clock.timers > 0
            if clock.timing:
                clock.start = timer()
        clock.depth += 1
        if listeners:
            event.start_event(_LLVM_LOCK)

    def released():
        if listeners:
            event.end_event(_LLVM_LOCK)
        clock.depth -= 1
        if clock.depth == 0 and clock.timing:
            clock.total += timer() - clock.start
            clock.count += 1

    install_timer = event.install_timer

    @contextlib.contextmanager
    def timed(kind, callback):
        if kind != _LLVM_LOCK:
            with install_timer(kind, callback) as listener:
                yield listener
            return
        listener = event.TimingListener()
        total, count = clock.total, clock.count
        clock.timers += 1
        try:
            yield listener
        finally:
            clock.timers -= 1
        if clock.count > count:
            listener._duration = clock.total - total
            callback(listener.duration)

    _patch(cblist, numbas[0], (acquired, released))
    _patch(event, "install_timer", timed)


if ENABLED:
    _fast_target_config()
    _memoize_call_types()
    _quiet_color_shell()
    _memoize_pass_dependencies()
    _light_llvm_lock_events()
