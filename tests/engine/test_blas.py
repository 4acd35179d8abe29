"""Matrix products go to the BLAS NumPy ships (tapegrad/_engine/blas.py), or, without it,
to SciPy's Fortran BLAS through a trampoline. Both must give NumPy's products for every
operand layout the kernels hand over (C-ordered, transposed, strided, vectors, empty)."""
import ctypes
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from numba import njit

from tapegrad._engine import blas
from tests.helpers import REPO_ROOT



@njit(cache=False)
def _run(A, B, O, beta):
    blas.gemm(A, B, O, beta)


def _operands(dtype):
    r = np.random.default_rng(3)
    A = r.standard_normal((6, 4)).astype(dtype)
    B = r.standard_normal((4, 5)).astype(dtype)
    wide = r.standard_normal((6, 8)).astype(dtype)
    return [
        ("C @ C", A, B),
        ("A.T @ C", np.ascontiguousarray(A.T).T, B),                 # F-ordered left
        ("C @ B.T", A, np.ascontiguousarray(B.T).T),                 # F-ordered right
        ("strided", wide[:, ::2], B),                                # no unit stride: copied
        ("row", A[2:3], B),
        ("column", A, B[:, 1:2]),
        ("outer", A[:, :1], B[:1]),
    ]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_gemm_matches_numpy_for_every_layout(dtype, beta):
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
    for name, A, B in _operands(dtype):
        O0 = np.full((A.shape[0], B.shape[1]), 0.5, dtype)
        O = O0.copy()
        _run(A, B, O, beta)
        want = A.astype(np.float64) @ B.astype(np.float64) + beta * O0
        np.testing.assert_allclose(O, want, err_msg=name, **tol)


@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_gemm_empty_inner_dim_gives_beta_times_out(beta):
    A = np.zeros((3, 0))
    B = np.zeros((0, 2))
    O = np.full((3, 2), 7.0)
    _run(A, B, O, beta)
    np.testing.assert_array_equal(O, np.full((3, 2), 7.0 * beta))


def test_bound_to_numpys_bundled_openblas_when_numpy_ships_one():
    if os.environ.get("TAPEGRAD_BLAS") == "scipy" or blas._numpy_cblas() is None:
        pytest.skip("this NumPy ships no ILP64 OpenBLAS (the SciPy path is tested below)")
    assert blas.SOURCE == "numpy"
    assert "openblas" in os.path.basename(blas.LIBRARY._name)


def test_avx512_machines_get_openblas_avx512_kernels_and_numpy_keeps_its_own():
    from tapegrad._engine import blas_library as BL
    if blas.SOURCE != "numpy":
        pytest.skip("the products run on SciPy's BLAS here")
    numpys = BL.corename(ctypes.CDLL(BL.bundled_libraries()[0]))
    ours = BL.corename(blas.LIBRARY)
    if BL._AVX512 <= BL._cpu_flags() and numpys not in ("SkylakeX", "Cooperlake",
                                                           "SapphireRapids"):
        assert ours == "SkylakeX" and blas.LIBRARY._name != BL.bundled_libraries()[0]
    else:
        assert ours == numpys
    # (NumPy's products still run on its own instance, with the kernels it chose)
    a = np.random.default_rng(0).standard_normal((64, 64))
    np.testing.assert_allclose(a @ a.T, np.einsum("ij,kj->ik", a, a), rtol=1e-12)


_FALLBACK = r"""
import json, numpy as np, tapegrad as tg
from tapegrad._engine import blas
r = np.random.default_rng(5)
out = {"source": blas.SOURCE, "errors": []}
for dt, tol in (("float32", 1e-5), ("float64", 1e-12)):
    a = r.standard_normal((7, 3)).astype(dt)
    b = r.standard_normal((3, 4)).astype(dt)
    A, B = a.astype(np.float64), b.astype(np.float64)
    cases = {"mm": (a, b), "transposed": (a, b), "vm": (a[0], b),
             "batched": (np.stack([a, 2 * a]), b)}
    for name, (x, y) in cases.items():
        if name == "transposed":        # leaves holding a.T and b.T, multiplied as views
            X = tg.tensor(np.ascontiguousarray(x.T), requires_grad=True)
            Y = tg.tensor(np.ascontiguousarray(y.T), requires_grad=True)
            Z = X.t() @ Y.t()
        else:
            X = tg.tensor(x, requires_grad=True)
            Y = tg.tensor(y, requires_grad=True)
            Z = X @ Y
        Z.sum().backward()
        xs, ys = x.astype(np.float64), y.astype(np.float64)
        z = xs @ ys
        g = np.ones_like(z)
        gx = g @ ys.T
        gy = np.outer(xs, g) if name == "vm" else xs.reshape(-1, 3).T @ g.reshape(-1, 4)
        if name == "transposed":
            gx, gy = gx.T, gy.T
        for what, got, want in (("out", Z.detach().numpy(), z), ("gx", X.grad.numpy(), gx),
                                ("gy", Y.grad.numpy(), gy)):
            if got.shape != want.shape or not np.allclose(got, want, rtol=tol, atol=tol):
                out["errors"].append([dt, name, what])
    lin = tg.nn.Linear(3, 2).to(getattr(tg, dt))
    X = tg.tensor(a, requires_grad=True)
    lin(X).sum().backward()
    w = lin.weight.detach().numpy().astype(np.float64)
    if not np.allclose(X.grad.numpy(), np.ones((7, 2)) @ w, rtol=tol, atol=tol):
        out["errors"].append([dt, "linear", "gx"])
    if not np.allclose(lin.weight.grad.numpy(), np.ones((2, 7)) @ A, rtol=tol, atol=tol):
        out["errors"].append([dt, "linear", "gw"])
print(json.dumps(out))
"""


def test_scipy_fallback_gives_numpys_products():
    env = dict(os.environ, TAPEGRAD_BLAS="scipy")
    r = subprocess.run([sys.executable, "-c", _FALLBACK], capture_output=True, text=True,
                       cwd=REPO_ROOT, env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got == {"source": "scipy", "errors": []}
