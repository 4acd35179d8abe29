"""The shortcuts through Numba's compile-time overhead (tapegrad._engine.compile_speed)
give Numba's own answers, and apply to tapegrad's own compiles alone: a user's @njit
functions compile, cache and load as without tapegrad."""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import numba
from numba import njit, types
from numba.core import errors
from numba.core.compiler import Flags
from numba.extending import overload

import tapegrad  # noqa: F401
from tapegrad._engine.compile_speed import shortcuts


@pytest.fixture
def inside():
    """The shortcuts in place, as during one of tapegrad's compiles."""
    with shortcuts():
        yield


def _numba_values(flags):
    """TargetConfig.values as Numba writes it: every option through its property."""
    return {name: getattr(flags, name) for name in type(flags).options}


def _flag_cases():
    plain = Flags()
    explicit_default = Flags()
    explicit_default.nrt = Flags.options["nrt"].default
    nrt = Flags()
    nrt.nrt = True
    nrt_copy = nrt.copy()
    boundscheck = Flags()
    boundscheck.boundscheck = True
    both = nrt.copy()
    both.boundscheck = True
    return [plain, explicit_default, nrt, nrt_copy, boundscheck, both]


def test_flags_values_hash_and_equality_match_numbas_definitions(inside):
    cases = _flag_cases()
    for a in cases:
        assert a.values() == _numba_values(a)
        assert list(a.values()) == list(type(a).options)
        assert hash(a) == hash(tuple(sorted(_numba_values(a))))
        for b in cases:
            assert (a == b) == (_numba_values(a) == _numba_values(b))
    assert cases[0] == cases[1]             # an option set to its default equals unset
    assert cases[2] == cases[3] and cases[2] != cases[0] and cases[4] != cases[5]
    assert Flags().__eq__(object()) is NotImplemented


def _isnan_by_self_compare(x):
    pass


@overload(_isnan_by_self_compare)
def _isnan_by_self_compare_impl(x):
    def impl(x):
        return x != x          # fastmath's nnan folds this to False
    return impl


def test_an_overload_resolved_again_under_other_flags_keeps_each_callers_implementation(inside):
    """The overload inherits the caller's fastmath. A plain caller typed after a
    fastmath one resolves from the memo, and must get the plain implementation back."""
    @njit
    def plain_first(x):
        return _isnan_by_self_compare(x)

    @njit(fastmath=True)
    def fast(x):
        return _isnan_by_self_compare(x)

    @njit
    def plain_after(x):
        return _isnan_by_self_compare(x)

    assert plain_first(np.nan) is True
    assert fast(np.nan) is False
    assert plain_after(np.nan) is True
    assert plain_after(1.0) is False


def test_subscripts_type_as_before_and_failures_still_raise_numbas_error(inside):
    @njit
    def pick(a, i, j):
        a[i] = a[j] * 2.0
        return a[i], (1, 2.5)[1]

    a = np.arange(4.0)
    assert pick(a, 0, 3) == (6.0, 2.5) and a[0] == 6.0

    @njit
    def bad(x):
        return x["key"]

    for _ in range(2):                      # a failure is not remembered
        with pytest.raises(errors.TypingError, match="No implementation of function"):
            bad(np.arange(3.0))


def test_the_memo_returns_numbas_signature(inside):
    from numba.core.registry import cpu_target
    import operator
    ctx = cpu_target.typing_context
    fnty = ctx.resolve_value_type(operator.getitem)
    args = (types.float64[:], types.intp)
    first = ctx.resolve_function_type(fnty, args, {})
    again = ctx.resolve_function_type(fnty, args, {})
    assert first == again and first.return_type == types.float64


_NUMBAS_OWN = """
from numba.core import targetconfig, errors, caching, compiler_machinery as cm, event
from numba.core.types.functions import BaseFunction
from llvmlite.binding import ffi
shell = getattr(errors, 'ColorShell', None)
print(json.dumps([targetconfig.TargetConfig.__eq__.__module__,
                  BaseFunction.get_call_type.__module__,
                  shell.__module__ if shell else '-',
                  cm.PassManager.dependency_analysis.__module__,
                  event.install_timer.__module__,
                  [c.__qualname__ for c in caching.CompileResultCacheImpl._locator_classes],
                  [a.__module__ for a, _ in ffi.lib._lock._cblist],
                  caching.Cache.load_overload.__module__]))
"""


@pytest.mark.parametrize("setting", ["0", "1"])
def test_the_shortcuts_are_in_place_only_inside_tapegrads_compiles(setting):
    """After import and a compile, Numba's functions are its own; inside shortcuts()
    they are tapegrad's, unless TAPEGRAD_NUMBA_SHORTCUTS=0."""
    code = ("import json\nimport tapegrad as tg\n"
            "from tapegrad._engine.compile_speed import shortcuts\n"
            "x = tg.ones(3, requires_grad=True); (x * x).sum().backward()\n"
            "def report():\n" + "".join("    " + line + "\n"
                                        for line in _NUMBAS_OWN.strip().splitlines())
            + "report()\nwith shortcuts():\n    report()\nreport()\n")
    env = dict(os.environ, TAPEGRAD_NUMBA_SHORTCUTS=setting)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    after_import, inside, after = (json.loads(line) for line in out)
    numbas = ["numba.core.targetconfig", "numba.core.types.functions",
              "numba.core.errors" if importlib.util.find_spec("colorama") else "-",
              "numba.core.compiler_machinery", "numba.core.event"]
    assert after_import[:5] == numbas and after == after_import
    assert after_import[5][0].endswith("UserProvidedCacheLocator")   # Numba's list
    assert not any("Package" in name for name in after_import[5])
    assert "tapegrad" not in " ".join(after_import[6]) + after_import[7]
    ours = "tapegrad._engine.compile_speed"
    if setting == "0":
        assert inside == after_import
        return
    # each shortcut checks for the Numba internals it needs (numba 0.68's names) and stays
    # out where they differ: inside, what is not Numba's own is tapegrad's
    swapped = [i for i in (0, 1, 2, 3, 4) if inside[i] != after_import[i]]
    assert all(inside[i] == ours for i in swapped)
    if numba.__version__.startswith("0.68."):        # the version they were written for
        assert swapped == [0, 1, 2, 3, 4] if after_import[2] != "-" else [0, 1, 3, 4]
        assert ours in inside[6]


_USER_PROGRAM = """
import ctypes, json, os, sys
calls = []                            # who looks up glibc's mallopt, the only call that
_lookup = ctypes.CDLL.__getattr__     # changes malloc's settings at run time


def _watched(self, name):
    if name == "mallopt":
        calls.append(name)
    return _lookup(self, name)


ctypes.CDLL.__getattr__ = _watched
import numba
from numba.core import caching, targetconfig
from numba.core.types.functions import BaseFunction
if sys.argv[1] == "tapegrad":
    import tapegrad as tg
    x = tg.ones(3, requires_grad=True); (x * x).sum().backward()
import user_fn
value = user_fn.f(3.0)
print(json.dumps(dict(
    value=value, cache_dir=numba.config.CACHE_DIR,
    get_call_type=BaseFunction.get_call_type.__qualname__,
    hash=targetconfig.TargetConfig.__hash__.__qualname__,
    locators=[c.__qualname__ for c in caching.CompileResultCacheImpl._locator_classes],
    cache_class=type(user_fn.f._cache).__qualname__,
    cache_path=os.path.realpath(user_fn.f._cache._cache_path),
    hits=sum(user_fn.f.stats.cache_hits.values()),
    misses=sum(user_fn.f.stats.cache_misses.values()),
    mallopt=calls)))
"""


def test_a_users_njit_function_compiles_caches_and_loads_as_without_tapegrad(tmp_path):
    """The same program, with and without tapegrad imported (and a tapegrad backward run):
    the user's cached @njit function finds the same cache directory, locators and cache
    class, compiles once and loads the second time, with Numba's own typing functions in
    place; and nothing looks up glibc's mallopt (TAPEGRAD_MALLOPT=1 would)."""
    (tmp_path / "user_fn.py").write_text(
        "from numba import njit\n\n@njit(cache=True)\ndef f(x):\n    return x * x + 1.0\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path) + os.pathsep
               + os.environ.get("PYTHONPATH", ""))
    env.pop("NUMBA_CACHE_DIR", None)
    env.pop("TAPEGRAD_MALLOPT", None)
    runs = {}
    for who in ("numba", "tapegrad"):
        for attempt in ("compiles", "loads"):
            out = subprocess.run([sys.executable, "-c", _USER_PROGRAM, who], env=env,
                                 cwd=tmp_path, capture_output=True, text=True, check=True)
            runs[who, attempt] = json.loads(out.stdout)
        for p in (tmp_path / "__pycache__").glob("user_fn.f-*"):
            p.unlink()                  # the second program compiles afresh too
    for attempt in ("compiles", "loads"):
        assert runs["tapegrad", attempt] == runs["numba", attempt]
    assert runs["numba", "compiles"]["misses"] == 1 and runs["numba", "loads"]["hits"] == 1
    assert runs["numba", "loads"]["value"] == 10.0 and runs["numba", "loads"]["mallopt"] == []
    assert runs["numba", "loads"]["cache_class"] == "FunctionCache"
    env["TAPEGRAD_MALLOPT"] = "1"           # the watch sees the opt-in tuning
    out = subprocess.run([sys.executable, "-c", _USER_PROGRAM, "tapegrad"], env=env,
                         cwd=tmp_path, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["mallopt"] == ["mallopt"]


def test_each_pipeline_gets_numbas_pass_dependencies_in_its_own_copy(inside):
    from numba.core import compiler_machinery as cm
    from numba.core.compiler import DefaultPassBuilder, StateDict
    state = StateDict()
    state.flags = Flags()
    state.func_ir = None
    pipelines = [DefaultPassBuilder.define_nopython_pipeline(state),
                 DefaultPassBuilder.define_objectmode_pipeline(state),
                 DefaultPassBuilder.define_nopython_pipeline(state)]
    numbas = cm.PassManager.dependency_analysis.numbas
    for pm in pipelines:
        ours = pm.dependency_analysis()
        assert ours == numbas(pm) and len(ours) == len({p for p, _ in pm.passes})
        for deps in ours.values():
            deps.add("edited")                  # a pass editing its copy
    again = pipelines[0].dependency_analysis()
    assert again == numbas(pipelines[0]) and all("edited" not in d for d in again.values())


def test_compile_timers_and_llvm_lock_listeners_see_what_numba_reports(inside):
    """Each compile's metadata still times its LLVM work (within its compile-lock time),
    a listener registered on the lock's events still gets each start and its end, and
    a timer over an explicit LLVM call reports it."""
    import time
    import llvmlite.binding as llvm
    from numba.core import event

    @njit
    def poly(x):
        return 3.0 * x * x + 2.0 * x + 1.0

    recorder = event.RecordingListener()
    with event.install_listener("numba:llvm_lock", recorder):
        assert poly(2.0) == 17.0
    timers = poly.get_metadata(poly.signatures[0])["timers"]
    assert 0 < timers["llvm_lock"] <= timers["compiler_lock"]
    kinds = [ev.status for _, ev in recorder.buffer]
    starts = kinds.count(event.EventStatus.START)
    assert starts > 10 and starts == kinds.count(event.EventStatus.END)

    seen = []
    t0 = time.perf_counter()
    with event.install_timer("numba:llvm_lock", seen.append):
        llvm.parse_assembly("define i32 @f() {\n ret i32 1\n}")
    assert len(seen) == 1 and 0 < seen[0] <= time.perf_counter() - t0
    with event.install_timer("numba:llvm_lock", seen.append):
        pass                                    # no LLVM call: no report, as Numba's timer
    assert len(seen) == 1


# Imported only by a full refresh of Numba's CPU target (its load_additional_registries):
# absent, the cached functions were loaded without one.
_FULL_REFRESH_ONLY = "numba.np.polynomial.polynomial_core"

_USER_KERNELS = """
import numpy as np
from tapegrad._engine.lowlevel import jit_entry


@jit_entry
def mixed(a, b, word):
    seen = {}
    for i in range(a.shape[0]):
        seen[(i % 3, i % 2)] = a[i]             # tuple hashing
    total = 0.0
    for k, v in seen.items():
        total += v * (k[0] + 1)
    return total + np.dot(a, b) + np.sum(a), hash(word)   # BLAS ddot; str hashing
"""

_LOAD_THEN_COMPILE = """
import json, sys
import numpy as np
import tapegrad
import user_kernels
from numba import njit
a = np.arange(1.0, 8.0)
b = np.linspace(-1.0, 2.0, 7)
value, word_hash = user_kernels.mixed(a, b, "tapegrad")
loaded = user_kernels.mixed.stats.cache_hits
light = %r not in sys.modules

@njit
def fresh(x):                                   # compiles: Numba refreshes in full first
    return np.cumsum(x)[-1] + np.linalg.norm(x)

print(json.dumps(dict(value=value, hash_ok=word_hash == hash("tapegrad"),
                      loaded=sum(loaded.values()), light=light, fresh=fresh(a))))
""" % _FULL_REFRESH_ONLY


def test_a_cached_function_loads_without_the_registries_and_runs(tmp_path):
    """A kernel declared as tapegrad's (so cached by its KernelCache) with a dict of
    tuples, str hashing (the hash secrets' symbols), np.dot (BLAS through SciPy, found at
    run time) and np.sum: loaded in a fresh process through the light path, it gives the values it gave when compiled, and
    a function compiled afterwards still finds every implementation."""
    (tmp_path / "user_kernels.py").write_text(_USER_KERNELS)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    compile_first = ("import numpy as np, user_kernels; "
                     "print(user_kernels.mixed(np.arange(1.0, 8.0), "
                     "np.linspace(-1.0, 2.0, 7), 'tapegrad')[0])")
    subprocess.run([sys.executable, "-c", compile_first], env=env, check=True,
                   capture_output=True, cwd=tmp_path)
    out = subprocess.run([sys.executable, "-c", _LOAD_THEN_COMPILE], env=env, check=True,
                         capture_output=True, text=True, cwd=tmp_path).stdout
    got = json.loads(out)
    a, b = np.arange(1.0, 8.0), np.linspace(-1.0, 2.0, 7)
    last = {(i % 3, i % 2): a[i] for i in range(7)}
    expect = sum(v * (k[0] + 1) for k, v in last.items()) + a @ b + a.sum()
    assert got["loaded"] == 1 and got["light"] is True
    assert got["value"] == pytest.approx(expect, rel=1e-15) and got["hash_ok"] is True
    assert got["fresh"] == pytest.approx(a.sum() + np.linalg.norm(a), rel=1e-15)


def test_a_warm_training_step_imports_none_of_numbas_registries():
    """tapegrad's kernels use no overload whose cache entry imports numba.np.arraymath
    (np.iinfo, an array's .sum() do: arraymath then imports SciPy's linalg to look for a
    BLAS, 0.3-0.4 s of a warm start), and load without a full refresh."""
    code = ("import sys, numpy as np, tapegrad as tg\n"
            "from tapegrad import nn, optim\n"
            "x = tg.ones(3, requires_grad=True); (x * x).sum().backward()\n"
            "model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))\n"
            "opt = optim.Adam(model.parameters(), lr=1e-2)\n"
            "X = tg.tensor(np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4))\n"
            "F, t, out = nn.functional, tg.tensor(np.arange(5) %% 3), model(X)\n"
            "loss = (F.cross_entropy(out, t) + F.nll_loss(F.log_softmax(out, dim=1), t)\n"
            "        + F.mse_loss(out, tg.zeros(5, 3)))\n"
            "opt.zero_grad(); loss.backward(); opt.step()\n"
            "print(x.grad.tolist(), 'numba.np.arraymath' in sys.modules, "
            "%r in sys.modules)" % _FULL_REFRESH_ONLY)
    for _ in range(2):                      # the first run fills the cache if it must
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                             text=True).stdout.split()
    assert out == ["[2.0,", "2.0,", "2.0]", "False", "False"]
