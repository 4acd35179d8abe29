"""tapegrad.linalg (ops/decomp.py, _front/linalg_ops.py) against PyTorch: batched inputs,
named-tuple results, the legacy top-level spellings, errors, and a Gaussian-process
marginal likelihood's gradient."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")


def _pair(a, grad=True):
    return tg.tensor(a, requires_grad=grad), torch.tensor(a, requires_grad=grad)


def _spd(rng, *shape):
    x = rng.standard_normal(shape)
    return x @ np.swapaxes(x, -1, -2) + shape[-1] * np.eye(shape[-1])


def _check(fn, *arrays, rtol=1e-10):
    """fn(L, *tensors) in both libraries: values, then float64 gradients of a random
    weighted sum."""
    ta = [tg.tensor(a, requires_grad=True) for a in arrays]
    pa = [torch.tensor(a, requires_grad=True) for a in arrays]
    rt, rp = fn(tg, *ta), fn(torch, *pa)
    np.testing.assert_allclose(rt.detach().numpy(), rp.detach().numpy(), rtol=rtol, atol=1e-12)
    w = np.random.default_rng(1).standard_normal(tuple(rp.shape))
    (rt * tg.tensor(w)).sum().backward()
    (rp * torch.tensor(w)).sum().backward()
    for a, b in zip(ta, pa):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=rtol, atol=1e-10)


def test_import_spellings():
    import tapegrad.linalg as tl
    assert tl is tg.linalg
    for name in ("inverse", "det", "logdet", "slogdet", "cholesky", "cholesky_solve",
                 "triangular_solve", "matrix_power"):
        assert callable(getattr(tg, name)), name


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_batched(upper):
    rng = np.random.default_rng(0)
    _check(lambda L, a: L.linalg.cholesky(a, upper=upper), _spd(rng, 2, 3, 4, 4))


def test_eigh_batched_named_tuple():
    rng = np.random.default_rng(0)
    a = _spd(rng, 3, 4, 4)
    r = tg.linalg.eigh(tg.tensor(a))
    assert r._fields == ("eigenvalues", "eigenvectors")
    _check(lambda L, x: L.linalg.eigh(x + x.mT).eigenvalues, a)
    # eigenvectors up to sign: a sign-invariant function of them
    _check(lambda L, x: L.linalg.eigh(x + x.mT, UPLO="U").eigenvectors ** 2, a)


def test_solve_batched_broadcast_and_vector():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 3)) + 3 * np.eye(3)
    _check(lambda L, x, y: L.linalg.solve(x, y), a, rng.standard_normal((3, 2)))
    _check(lambda L, x, y: L.linalg.solve(x, y), a, rng.standard_normal((2, 3)))
    _check(lambda L, x, y: L.linalg.solve(x, y, left=False), a, rng.standard_normal((2, 4, 3)))
    _check(lambda L, x: L.linalg.inv(x), a)
    _check(lambda L, x: L.inverse(x), a)


def test_determinants():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 4, 4))
    r = tg.linalg.slogdet(tg.tensor(a))
    assert r._fields == ("sign", "logabsdet")
    np.testing.assert_array_equal(r.sign.numpy(), torch.linalg.slogdet(torch.tensor(a)).sign)
    _check(lambda L, x: L.linalg.slogdet(x).logabsdet, a)
    _check(lambda L, x: L.linalg.det(x), a)
    _check(lambda L, x: L.det(x), a)
    _check(lambda L, x: L.logdet(x @ x.mT), a)
    _check(lambda L, x: L.slogdet(x)[1], a)


def test_triangular_and_cholesky_solve():
    rng = np.random.default_rng(0)
    s = _spd(rng, 2, 3, 3)
    b = rng.standard_normal((2, 3, 2))
    _check(lambda L, x, y: L.cholesky_solve(y, L.linalg.cholesky(x)), s, b)
    _check(lambda L, x, y: L.cholesky_solve(y, L.linalg.cholesky(x, upper=True), upper=True),
           s, b)
    _check(lambda L, x, y: L.triangular_solve(y, L.linalg.cholesky(x), upper=False)[0], s, b)
    _check(lambda L, x, y: L.linalg.solve_triangular(x.triu() + 3 * L.eye(3, dtype=x.dtype), y,
                                                     upper=True, unitriangular=True), s, b)


def test_compositions():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 3))
    _check(lambda L, x: L.linalg.matrix_power(x, 3), a)
    _check(lambda L, x: L.matrix_power(x + 3 * L.eye(3, dtype=x.dtype), -2), a)
    _check(lambda L, x: L.linalg.multi_dot([x[0], x, x, x[:, 1]]), a)
    _check(lambda L, x: L.linalg.cross(x, x.flip(0)), a)
    _check(lambda L, x: L.linalg.vector_norm(x, 3, dim=1), a)
    _check(lambda L, x: L.linalg.vector_norm(x), a)
    _check(lambda L, x: L.linalg.matrix_norm(x), a)
    _check(lambda L, x: L.linalg.matrix_norm(x, 1), a)
    _check(lambda L, x: L.linalg.matrix_norm(x, float("inf"), keepdim=True), a)
    _check(lambda L, x: L.linalg.norm(x), a)


def test_gaussian_process_marginal_likelihood():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((8, 2))
    y = rng.standard_normal((8, 1))

    def nll(L, x, yy, log_ls, log_noise):
        d = ((x.unsqueeze(1) - x.unsqueeze(0)) ** 2).sum(-1)
        K = (-0.5 * d / log_ls.exp() ** 2).exp() + log_noise.exp() * L.eye(8, dtype=x.dtype)
        C = L.linalg.cholesky(K)
        alpha = L.cholesky_solve(yy, C)
        return 0.5 * (yy * alpha).sum() + 0.5 * L.logdet(K)

    p = np.array(0.3), np.array(-1.0)
    ta = [tg.tensor(v, requires_grad=True) for v in p]
    pa = [torch.tensor(v, requires_grad=True) for v in p]
    lt = nll(tg, tg.tensor(X), tg.tensor(y), *ta)
    lp = nll(torch, torch.tensor(X), torch.tensor(y), *pa)
    np.testing.assert_allclose(lt.item(), lp.item(), rtol=1e-12)
    lt.backward()
    lp.backward()
    for a, b in zip(ta, pa):
        np.testing.assert_allclose(a.grad.item(), b.grad.item(), rtol=1e-10)


def _error(fn):
    try:
        fn()
    except Exception as e:      # noqa: BLE001  (compared by type name and message)
        return type(e).__name__, str(e).replace("tapegrad", "torch")
    return None


@pytest.mark.parametrize("call", [
    "L.linalg.cholesky(L.zeros(2, 3, 3, dtype=L.float64))",
    "L.linalg.cholesky(L.tensor([[1.0, 2.0], [2.0, 1.0]]))",
    "L.linalg.cholesky(L.ones(3))",
    "L.linalg.cholesky(L.ones(3, 4))",
    "L.linalg.cholesky(L.ones(3, 3, dtype=L.long))",
    "L.linalg.inv(L.zeros(3, 3))",
    "L.linalg.inv(L.zeros(2, 3, 3))",
    "L.linalg.inv(L.ones(2, 3))",
    "L.linalg.solve(L.zeros(2, 3, 3), L.ones(2, 3, 1))",
    "L.linalg.solve(L.eye(3), L.ones(4))",
    "L.linalg.solve(L.eye(3), L.ones(3, 2, dtype=L.float64))",
    "L.linalg.eigh(L.ones(2, 3))",
    "L.linalg.eigh(L.eye(3), UPLO='X')",
    "L.linalg.slogdet(L.ones(2, 3))",
    "L.linalg.det(L.ones(2, 3))",
])
def test_errors(call):
    got = _error(lambda: eval(call, {"L": tg}))
    want = _error(lambda: eval(call, {"L": torch}))
    assert got == want


def test_singular_slogdet_value():
    r = tg.linalg.slogdet(tg.zeros(3, 3, dtype=tg.float64))
    assert r.sign.item() == 0.0 and r.logabsdet.item() == -np.inf


def test_compiled_step_equals_eager():
    rng = np.random.default_rng(0)
    a = _spd(rng, 4, 4)
    b = rng.standard_normal((4, 2))

    def step(x, y):
        C = tg.linalg.cholesky(x)
        loss = tg.cholesky_solve(y, C).sum() + tg.linalg.eigvalsh(x).sum()
        loss.backward()
        return loss

    xe = tg.tensor(a, requires_grad=True)
    le = step(xe, tg.tensor(b))
    f = tg.compile(step)
    outs = []
    for _ in range(2):
        xc = tg.tensor(a, requires_grad=True)
        outs.append((f(xc, tg.tensor(b)).item(), xc.grad.numpy().copy()))
    for lc, gc in outs:
        assert lc == le.item()
        np.testing.assert_array_equal(gc, xe.grad.numpy())


def test_svd_qr_named_tuples_and_batches():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 4, 3))
    r = tg.linalg.svd(tg.tensor(a))
    assert r._fields == ("U", "S", "Vh")
    p = torch.linalg.svd(torch.tensor(a))
    assert [tuple(t.shape) for t in r] == [tuple(t.shape) for t in p]
    _check(lambda L, x: L.linalg.svdvals(x), a)
    _check(lambda L, x: L.linalg.svd(x, full_matrices=False).U.abs(), a)
    _check(lambda L, x: L.linalg.svd(x.mT, full_matrices=False).Vh.abs(), a)
    q = tg.linalg.qr(tg.tensor(a))
    assert q._fields == ("Q", "R")
    for mode in ("reduced", "complete", "r"):
        t = tg.linalg.qr(tg.tensor(a), mode=mode)
        p = torch.linalg.qr(torch.tensor(a), mode=mode)
        for x, y in zip(t, p):
            assert tuple(x.shape) == tuple(y.shape)
            np.testing.assert_allclose(np.abs(x.numpy()), np.abs(y.numpy()), atol=1e-12)
    _check(lambda L, x: L.linalg.qr(x).Q, a)      # (LAPACK's signs, as PyTorch's)
    _check(lambda L, x: L.linalg.qr(x.mT).R.abs(), a)


def test_pinv_lstsq_matrix_exp():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 4, 3))
    b = rng.standard_normal((2, 4, 2))
    _check(lambda L, x: L.linalg.pinv(x), a)
    _check(lambda L, x: L.pinverse(x.mT), a)
    _check(lambda L, x, y: L.linalg.lstsq(x, y).solution, a, b)
    _check(lambda L, x, y: L.linalg.lstsq(x.mT, y[..., :3, :]).solution, a, b)
    _check(lambda L, x: L.linalg.matrix_exp(x[..., :3, :]), a)
    r = tg.linalg.lstsq(tg.tensor(a), tg.tensor(b), driver="gelsd")
    p = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b), driver="gelsd")
    for x, y in zip(r, p):
        np.testing.assert_allclose(x.numpy(), y.numpy(), atol=1e-12)


def test_cholesky_ex():
    rng = np.random.default_rng(0)
    s = _spd(rng, 2, 3, 3)
    r = tg.linalg.cholesky_ex(tg.tensor(s))
    p = torch.linalg.cholesky_ex(torch.tensor(s))
    np.testing.assert_allclose(r.L.numpy(), p.L.numpy(), rtol=1e-12)
    np.testing.assert_array_equal(r.info.numpy(), p.info.numpy())
    assert tg.linalg.cholesky_ex(tg.tensor(-np.eye(3))).info.item() == 1


@pytest.mark.parametrize("driver", [None, "gelsy", "gelsd", "gelss", "gels"])
@pytest.mark.parametrize("shape", [(2, 5, 3), (2, 3, 5), (4, 4)])
def test_lstsq_rank_deficient_and_every_driver(shape, driver):
    """A rank-deficient matrix (a zero column, or a zero row when wide) gets the
    least-norm solution and its rank, beside a full-rank one in the same batch; residuals
    and singular values only where PyTorch gives them. ('gels' assumes full rank, as
    LAPACK's: full-rank inputs only.) PyTorch 2.13's 'gelsy' (its CPU default) finds a
    varying rank for one and the same rank-deficient input from call to call (0, 1 or 2
    for a 5 x 3 matrix with a zero column), so solutions and ranks are compared with its
    deterministic 'gelsd', which agrees with 'gelsy''s usual answer."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape)
    b = rng.standard_normal(shape[:-1] + (2,))
    if driver != "gels":
        if shape[-2] >= shape[-1]:
            a[..., :, -1] = 0
        else:
            a[..., -1, :] = 0
        if len(shape) == 3:
            a[1] = rng.standard_normal(shape[1:])
    ref = "gelsd" if driver in (None, "gelsy") else driver
    r = tg.linalg.lstsq(tg.tensor(a), tg.tensor(b), driver=driver)
    p = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b), driver=driver)
    q = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b), driver=ref)
    for x, y, z in zip(r, p, q):
        assert tuple(x.shape) == tuple(y.shape) and x.dtype == getattr(tg, str(y.dtype)[6:])
        if y.numel():
            np.testing.assert_allclose(x.numpy(), z.numpy(), atol=1e-10)
    _check(lambda L, x, y: L.linalg.lstsq(x, y, driver=driver if L is tg else ref).solution,
           a, b, rtol=1e-8)


@pytest.mark.parametrize("ord", [2, -2, "nuc"])
def test_matrix_norm_from_singular_values(ord):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 4))
    _check(lambda L, x: L.linalg.matrix_norm(x, ord), a)
    _check(lambda L, x: L.linalg.matrix_norm(x, ord, dim=(2, 0), keepdim=True), a)
    _check(lambda L, x: L.linalg.norm(x[0], ord), a)


def test_matrix_norm_bad_order():
    for ord in (3, "foo"):
        with pytest.raises(RuntimeError, match=f"linalg.matrix_norm: Order {ord} not supported."):
            tg.linalg.matrix_norm(tg.ones(2, 2), ord)


def test_pinv_rank_deficient_and_hermitian():
    """The pseudo-inverse's own gradient (not the SVD's) stays finite with a zero
    singular value; hermitian=True goes through eigh, reading the lower triangle."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 4, 3))
    a[0, :, 2] = 0
    _check(lambda L, x: L.linalg.pinv(x), a)
    _check(lambda L, x: L.linalg.pinv(x.mT, rtol=0.3), a)
    _check(lambda L, x: L.linalg.pinv(x, atol=0.5), a)
    s = rng.standard_normal((2, 4, 4))
    s = s + np.swapaxes(s, -1, -2)
    s[0, :, 3] = s[0, 3, :] = 0
    _check(lambda L, x: L.linalg.pinv(x, hermitian=True), s)
    _check(lambda L, x: L.linalg.pinv(x.tril(), hermitian=True, rtol=0.2), s)
    with pytest.raises(RuntimeError, match="must be batches of square matrices"):
        tg.linalg.pinv(tg.ones(2, 3), hermitian=True)
