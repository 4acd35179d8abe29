"""Compiled kernels are cached on disk: a second process loads every kernel it uses from
the cache and compiles nothing (the warm start the README promises)."""
import json
import os
import subprocess
import sys

import numpy as np
from tests.helpers import REPO_ROOT


PROGRAM = r"""
import json
import tapegrad as tg
from tapegrad._engine import core
from tapegrad._engine.state import engine

x = tg.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
w = tg.tensor([[0.5], [-1.0]], dtype=tg.float32, requires_grad=True)
loss = ((x @ w).tanh() * 2 + x.sum(1, keepdim=True)).mean()
loss.backward()
entries = [core.op_entry, core.sweep]
report = {
    "file": tg.__file__,
    "grad": x.grad.tolist(),
    "entry_misses": sum(sum(d.stats.cache_misses.values()) for d in entries),
    "entry_hits": sum(sum(d.stats.cache_hits.values()) for d in entries),
    "kernels": len(engine()._kernels),
    "kernel_hits": sum(f.cache_hits + b.cache_hits for f, b in engine()._kernels.values()),
}
print(json.dumps(report))
"""


def _run(root=REPO_ROOT):
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                         env=env, cwd=root, timeout=600, check=True)   # (cwd: sys.path[0])
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_loads_every_kernel_from_the_cache():
    first = _run()                  # compiles whatever the cache does not hold yet
    second = _run()
    assert second["grad"] == first["grad"]
    assert second["entry_misses"] == 0 and second["entry_hits"] == 2
    # every kernel the program used (forward and backward C functions) came from disk
    assert second["kernels"] >= 6
    assert second["kernel_hits"] == 2 * second["kernels"]


def test_a_copy_of_the_package_elsewhere_loads_every_kernel_from_the_cache(tmp_path):
    """Numba's own locators file entries under the source directory's absolute path, so
    a second clone (CI's checkout, another environment) compiled everything again; the
    keyed directories file them by the place in the package instead."""
    import shutil
    first = _run()
    copy = tmp_path / "elsewhere"
    shutil.copytree(os.path.join(REPO_ROOT, "tapegrad"), copy / "tapegrad",
                    ignore=shutil.ignore_patterns("__pycache__"))
    second = _run(str(copy))
    assert os.path.realpath(second["file"]) == os.path.realpath(copy / "tapegrad" /
                                                                 "__init__.py")
    assert second["grad"] == first["grad"]
    assert second["entry_misses"] == 0 and second["entry_hits"] == 2
    assert second["kernels"] >= 6 and second["kernel_hits"] == 2 * second["kernels"]


def test_helper_without_wrappers_refuses_a_python_call():
    """Helpers are compiled without Python wrappers (less to compile); called from
    Python they would jump to address 0, so they raise, and only jit_entry functions
    hand out an entry point."""
    import pytest
    from tapegrad._engine import core
    from tapegrad._engine.lowlevel import has_entry
    from tapegrad._engine.state import _entry, engine
    engine().compile_core()
    with pytest.raises(TypeError, match="numel_of is compiled for calls from compiled code"):
        core.numel_of(0, 0)
    with pytest.raises(TypeError, match="numel_of has no Python entry point"):
        _entry(core.numel_of, "int64(int64, int64)")
    assert not has_entry(core.numel_of) and has_entry(core.op_entry)
    import tapegrad as tg
    x = tg.ones(2, 3)
    contiguous = _entry(core.contiguous_id, "int64(int64, int64)")   # is_contiguous's entry
    assert contiguous(engine().caddr, x._i) == 1 and x.is_contiguous()
    assert contiguous(engine().caddr, x.t()._i) == 0 and not x.t().is_contiguous()
    assert x.t().contiguous().sum().item() == 6.0      # helpers run inside the kernels


def test_every_compiled_function_caches_in_the_keyed_directory():
    """Numba revalidates an in-tree cache (__pycache__ next to the source) against the
    source file's own timestamp only, so a function inlining helpers from other files
    could load stale code; and an installed package's directory may be read-only. Every
    tapegrad dispatcher must cache under the keyed directories (the replay executor did
    not: fuse.py imported it outside kernel_cache)."""
    import tapegrad  # noqa: F401
    from numba.core.registry import CPUDispatcher
    from tapegrad._engine.cache import CACHE_DIR
    from tapegrad.replay import _run
    seen = []
    for name, mod in list(sys.modules.items()):
        if not name.startswith("tapegrad") or mod is None:
            continue
        for obj in vars(mod).values():
            if isinstance(obj, CPUDispatcher) and obj._cache is not None \
                    and hasattr(obj._cache, "_cache_path"):
                seen.append((name, obj.py_func.__name__, obj._cache._cache_path))
    assert any(n == "run" and m == _run.__name__ for m, n, _ in seen)
    root = os.path.realpath(CACHE_DIR)
    wrong = [(m, n, p) for m, n, p in seen if not os.path.realpath(p).startswith(root)]
    assert not wrong, wrong[:5]
    assert len(seen) > 100


PER_DTYPE = r"""
import json
from numba import cfunc
from tapegrad.ops import linear
from tapegrad.ops.registry import _per_dtype
from tapegrad._engine.lowlevel import KERNEL_SIG
before = (len(linear._mat32.signatures), len(linear._mat64.signatures))
cfunc(KERNEL_SIG, error_model="numpy")(_per_dtype(linear.linear_fwd, 0))   # not cached
after = (len(linear._mat32.signatures), len(linear._mat64.signatures))
print(json.dumps([before, after]))
"""


def test_a_per_dtype_kernel_compiles_one_dtype_only():
    """linear's kernels are compiled per slot with KERNEL_DTYPE a constant: the float32
    copy types the float32 helpers and never the float64 ones (Numba prunes the branch)."""
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", PER_DTYPE], capture_output=True, text=True,
                         env=env, timeout=600, check=True)
    before, after = json.loads(out.stdout.strip().splitlines()[-1])
    assert before == [0, 0]
    assert after[0] >= 1 and after[1] == 0


LINK_ONLY = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from tapegrad._engine.cache import kernel_cache
with kernel_cache():
    import linkmod
out = {"first": linkmod.first(20), "hits": sum(linkmod.first.stats.cache_hits.values())}
if sys.argv[2] == "second":     # a caller compiled now, linking a helper from the cache
    out["second"] = linkmod.second(20)
    out["second_hits"] = sum(linkmod.second.stats.cache_hits.values())
out["helper_hits"] = sum(linkmod.twice.stats.cache_hits.values())
h = linkmod.twice.overloads[linkmod.twice.signatures[0]].library \
    if linkmod.twice.signatures else None
out["helper_library"] = type(h).__name__ if h is not None else None
out["entry_library"] = type(linkmod.first.overloads[linkmod.first.signatures[0]].library).__name__
print(json.dumps(out))
"""

LINK_MODULE = '''
import numpy as np
from tapegrad._engine.lowlevel import jit, jit_entry


@jit
def twice(x):
    s = 0.0
    for i in range(x):
        s += 2.0 * i
    return s


@jit
def deeper(x):
    return twice(x) + np.sqrt(float(x))


@jit_entry
def first(x):
    return deeper(x)


@jit_entry
def second(x):
    return twice(x) - 1.0
'''


def test_helpers_compile_to_ir_only_and_link_from_the_cache(tmp_path):
    """Helpers keep IR for their callers and make no machine code of their own
    (lowlevel._LinkOnlyLibrary). The entry points linking them compute the right values
    when compiled, when loaded from the cache, and when a new caller links a helper the
    cache holds (its IR comes from the cached bitcode)."""
    import pytest
    from tapegrad._engine.lowlevel import _NO_WRAPPERS
    if "pipeline_class" not in _NO_WRAPPERS:
        pytest.skip("this Numba lacks the internals _LinkOnlyLibrary overrides")
    (tmp_path / "linkmod.py").write_text(LINK_MODULE)
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TAPEGRAD_CACHE_DIR=str(tmp_path / "cache"))

    def run(mode):
        out = subprocess.run([sys.executable, "-c", LINK_ONLY, str(tmp_path), mode],
                             capture_output=True, text=True, env=env, timeout=600)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])
    expect = sum(2.0 * i for i in range(20))
    cold = run("first")
    assert cold["first"] == expect + 20 ** 0.5 and cold["hits"] == 0
    assert cold["helper_library"] == "_LinkOnlyLibrary"
    assert cold["entry_library"] == "JITCodeLibrary"
    warm = run("second")
    assert warm["first"] == cold["first"] and warm["hits"] == 1
    assert warm["second"] == expect - 1.0 and warm["second_hits"] == 0
    assert warm["helper_hits"] == 1         # second linked twice's IR from the cache
    again = run("second")
    assert again["second"] == warm["second"] and again["second_hits"] == 1


def test_a_helper_has_no_native_address():
    """A helper's machine code is never made, so it has no address to hand out."""
    import pytest
    from tapegrad._engine import core
    from tapegrad._engine.lowlevel import native_address
    with pytest.raises(TypeError, match=r"numel_of is a helper \(lowlevel.jit\), whose machine "
                       "code is never made"):
        native_address(core.numel_of, "int64(int64, int64)")


OVERLOADS = r"""
import json, sys
import numpy as np
import tapegrad as tg
from numba.core.registry import cpu_target
from tapegrad._engine import blas
from tapegrad.ops import _vmath

a = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], np.float32)
w = np.array([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]], np.float32)
x = tg.tensor(a, requires_grad=True)
tg.nn.functional.linear(x.exp(), tg.tensor(w)).sum().backward()
libraries = set()
for fn in (_vmath.exp, blas.gemm):
    for template in cpu_target.typing_context.resolve_value_type(fn).templates:
        for disp, _ in template._impl_cache.values():
            libraries |= {type(cres.library).__name__ for cres in disp.overloads.values()}
print(json.dumps({"grad": x.grad.tolist(), "libraries": sorted(libraries),
                  "exp32_library": type(next(iter(
                      _vmath._exp32.overloads.values())).library).__name__}))
"""


def test_overloads_and_math_helpers_compile_as_helpers(tmp_path):
    """Numba compiles an @overload's implementation for each argument types, even one it
    inlines, with both wrappers and its own machine code by default, none of which runs:
    tapegrad's overloads (gemm, the vectorised math) pass lowlevel.OVERLOAD_OPTIONS and
    the math functions under them are lowlevel.jit helpers, so they compile to IR only.
    The kernels linking them still compute the right gradient (d/dx sum(exp(x) @ w.T) =
    exp(x) * column sums of w)."""
    import pytest
    from tapegrad._engine.lowlevel import _NO_WRAPPERS
    if "pipeline_class" not in _NO_WRAPPERS:
        pytest.skip("this Numba lacks the internals _LinkOnlyLibrary overrides")
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TAPEGRAD_CACHE_DIR=str(tmp_path / "cache"))       # empty: everything compiles
    out = subprocess.run([sys.executable, "-c", OVERLOADS], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["libraries"] == ["_LinkOnlyLibrary"]
    assert report["exp32_library"] == "_LinkOnlyLibrary"
    a = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], np.float32)
    expect = np.exp(a) * np.array([1.0, 1.0, -0.5], np.float32)
    np.testing.assert_allclose(report["grad"], expect, rtol=2e-6)


def test_every_overload_in_tapegrad_compiles_as_a_helper():
    """The runtime check above covers two overloads; this one sees that none is declared
    without the helper options."""
    import re
    missing = []
    for folder, _, files in os.walk(os.path.join(REPO_ROOT, "tapegrad")):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(folder, name)) as f:
                    for n, line in enumerate(f, 1):
                        if re.match(r"\s*@overload\(", line) and "OVERLOAD_OPTIONS" not in line:
                            missing.append(f"{name}:{n}: {line.strip()}")
    assert missing == []


def test_an_edit_changes_the_cache_key_of_that_file_and_its_importers_only(tmp_path,
                                                                          monkeypatch):
    """Each kernel file's entries are keyed by its source and the tapegrad modules it
    imports: editing one op's module recompiles its kernels and its importers' alone; a
    module marked NO_KERNELS (pure Python) changes no key; the engine's layout changes
    every key that reads it."""
    import shutil
    from tapegrad._engine import cache
    copy = tmp_path / "tapegrad"
    shutil.copytree(cache._REAL_PKG, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(cache, "_REAL_PKG", str(copy))
    files = ["_engine/sweep.py", "_engine/blas.py", "ops/reduce.py", "ops/along.py",
             "ops/loss.py", "ops/linear.py", "optim/_kernels.py"]

    def keys():
        for memo in (cache._source, cache._imports, cache.source_key):
            memo.cache_clear()
        return {f: cache.source_key(str(copy / f)) for f in files}

    def edit(rel):
        with open(copy / rel, "a") as f:
            f.write("\n# an edit\n")

    try:
        before = keys()
        edit("ops/along.py")
        after = keys()
        # (loss.py imports along.py; linear.py imports linalg.py, which imports along.py)
        assert {f for f in files if after[f] != before[f]} == {"ops/along.py", "ops/loss.py",
                                                                "ops/linear.py"}
        edit("_engine/state.py")                    # marked NO_KERNELS
        assert keys() == after
        edit("_engine/layout.py")
        assert all(keys()[f] != after[f] for f in files)
    finally:
        for memo in (cache._source, cache._imports, cache.source_key):
            memo.cache_clear()


# ------------------------------------------------------------------ cold start
COLD_START = r"""
import json
import tapegrad as tg
from tapegrad._engine.layout import NKSLOT
from tapegrad._engine.state import engine
from tapegrad.ops.registry import OPS

x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
y = tg.tensor([4.0, 5.0, 6.0], requires_grad=True)
(x * y).sum().backward()
loaded = sorted({OPS[i // NKSLOT].name for i in engine()._kernels})
print(json.dumps({"ops": loaded, "grad": x.grad.tolist()}))
"""


def test_cold_start_loads_only_the_kernels_it_uses():
    """A fresh interpreter (sharing the parent's TAPEGRAD_CACHE_DIR, if any) that runs
    (x * y).sum().backward() loads the kernels of mul and sum and nothing else."""
    proc = subprocess.run([sys.executable, "-c", COLD_START], cwd=REPO_ROOT, env=dict(os.environ),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["grad"] == [4.0, 5.0, 6.0]
    assert set(report["ops"]) == {"mul", "sum"}
    assert not {"cross_entropy", "nll_loss", "softmax", "log_softmax", "gather"} & \
        set(report["ops"])


def test_a_generated_kernels_key_does_not_depend_on_where_the_package_is(tmp_path):
    """A generated module's key hashes its files in the package's order: the same key
    from a clone whose path sorts before the cache directory's and from one whose path
    sorts after it (by absolute paths, a second clone found the first one's generated
    kernels unusable)."""
    import shutil
    from tapegrad._engine import cache
    import tapegrad as tg
    x = tg.ones(2, requires_grad=True)
    (x.tanh() * 2).sum().backward()         # (a generated module exists)
    name = sorted(os.listdir(cache.GENERATED_DIR))[0]
    source = os.path.join(cache.GENERATED_DIR, name)
    program = ("import os, shutil; from tapegrad._engine import cache; "
               "os.makedirs(cache.GENERATED_DIR, exist_ok=True); "
               f"p = shutil.copy({source!r}, cache.GENERATED_DIR); "
               "print(cache.source_key(p))")
    keys = []
    for where in ("a", "zz"):           # around the cache directory, m_cache
        root = tmp_path / where
        shutil.copytree(os.path.join(REPO_ROOT, "tapegrad"), root / "tapegrad",
                        ignore=shutil.ignore_patterns("__pycache__"))
        env = dict(os.environ, PYTHONPATH=str(root),
                   TAPEGRAD_CACHE_DIR=str(tmp_path / "m_cache"))
        out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                             env=env, cwd=str(root), timeout=600, check=True)
        keys.append(out.stdout.strip().splitlines()[-1])
    assert keys[0] == keys[1], keys
