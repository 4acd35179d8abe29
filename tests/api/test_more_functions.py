"""The composite functions of _front/assembly.py and _front/statistics.py, the memory
attributes of _front/storage.py, autograd.Variable and set_printoptions, against PyTorch:
values and dtypes, float64 gradients (PyTorch's, from the same inputs), errors by type
and message, and repr strings under every print option."""
import warnings

import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)


def _a(*shape):
    return RNG.standard_normal(shape)


A34, B45, C3, D23, E53 = _a(3, 4), _a(4, 5), _a(3), _a(2, 3), _a(5, 3)
X3 = _a(2, 3, 4)
Y3 = _a(4, 5, 6)
V3 = _a(4, 3)
W3 = _a(4, 3)
I6 = np.array([0, -1, 5, 2])
P1 = _a(3, 4)
P2 = _a(30, 4)
BD = (_a(2, 3), _a(1), np.array(0.7), _a(2, 2))


# (label, function of (lib, tensors) -> result, the float inputs, the other arguments)
CASES = [
    ("hstack", lambda L, t: L.hstack([t[0], t[1]]), (C3, np.array([1.5, 2.5]))),
    ("hstack2d", lambda L, t: L.hstack((t[0], t[1])), (A34, _a(3, 2))),
    ("hstack0d", lambda L, t: L.hstack([t[0], t[1]]), (np.array(2.0), C3)),
    ("vstack", lambda L, t: L.vstack([t[0], t[1]]), (C3, _a(2, 3))),
    ("row_stack", lambda L, t: L.row_stack([t[0], t[1]]), (C3, C3)),
    ("dstack", lambda L, t: L.dstack([t[0], t[1]]), (D23, D23)),
    ("dstack1d", lambda L, t: L.dstack([t[0], t[1]]), (C3, C3)),
    ("column_stack", lambda L, t: L.column_stack([t[0], t[1], t[2]]), (C3, _a(3, 2),
                                                                        _a(3, 1))),
    ("atleast_3d", lambda L, t: L.atleast_3d(t[0], t[1])[1], (C3, D23)),
    ("take", lambda L, t: L.take(t[0], L.tensor(I6)), (D23,)),
    ("take2d", lambda L, t: L.take(t[0], L.tensor([[1, 2], [0, -6]])), (D23,)),
    ("dist", lambda L, t: L.dist(t[0], t[1]), (A34, _a(4))),
    ("dist1", lambda L, t: L.dist(t[0], t[1], 1), (A34, _a(3, 4))),
    ("dist3", lambda L, t: t[0].dist(t[1], 3.5), (A34, _a(3, 4))),
    ("distinf", lambda L, t: L.dist(t[0], t[1], float("inf")), (A34, _a(3, 4))),
    ("dist0", lambda L, t: L.dist(t[0], t[1], 0), (A34, _a(3, 4))),
    ("cdist2", lambda L, t: L.cdist(t[0], t[1]), (P1, _a(5, 4))),
    ("cdist2mm", lambda L, t: L.cdist(t[0], t[1]), (P1, P2)),
    ("cdist2mm_forced", lambda L, t: L.cdist(t[0], t[1], compute_mode="use_mm_for_euclid_dist"),
     (P1, _a(5, 4))),
    ("cdist2nomm", lambda L, t: L.cdist(t[0], t[1],
                                        compute_mode="donot_use_mm_for_euclid_dist"), (P1, P2)),
    ("cdist1", lambda L, t: L.cdist(t[0], t[1], 1), (P1, _a(5, 4))),
    ("cdist3", lambda L, t: L.cdist(t[0], t[1], 3.0), (P1, _a(5, 4))),
    ("cdistinf", lambda L, t: L.cdist(t[0], t[1], float("inf")), (P1, _a(5, 4))),
    ("cdist_same", lambda L, t: L.cdist(t[0], t[0], compute_mode="donot_use_mm_for_euclid_dist"),
     (P1,)),
    ("cdist_half", lambda L, t: L.cdist(t[0], t[1], 0.5), (P1, _a(5, 4))),
    ("cdist_inf_ties", lambda L, t: L.cdist(t[0], t[1], float("inf")),
     (np.array([[1.0, 1.0, 0.5], [0.0, 2.0, -2.0]]), np.array([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0]]))),
    ("dist_inf_ties", lambda L, t: L.dist(t[0], t[1], float("inf")),
     (np.array([[1.0, 1.0, 0.5], [0.0, 2.0, -2.0]]), np.array([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0]]))),
    ("cdist_batch", lambda L, t: L.cdist(t[0], t[1]), (_a(2, 1, 3, 4), _a(3, 5, 4))),
    ("baddbmm", lambda L, t: L.baddbmm(t[0], t[1], t[2]), (_a(3), _a(2, 3, 4), _a(2, 4, 3))),
    ("baddbmm_ab", lambda L, t: t[0].baddbmm(t[1], t[2], beta=0.5, alpha=-2.0),
     (_a(2, 3, 3), _a(2, 3, 4), _a(2, 4, 3))),
    ("baddbmm_beta0", lambda L, t: L.baddbmm(t[0], t[1], t[2], beta=0),
     (_a(1), _a(2, 3, 4), _a(2, 4, 3))),
    ("tensordot2", lambda L, t: L.tensordot(t[0], t[1]), (X3, _a(3, 4, 5))),
    ("tensordot0", lambda L, t: L.tensordot(t[0], t[1], 0), (C3, _a(2))),
    ("tensordot_lists", lambda L, t: L.tensordot(t[0], t[1], ([1, 2], [0, 1])), (_a(3, 4, 5),
                                                                                 _a(4, 5, 6))),
    ("tensordot_tensor", lambda L, t: L.tensordot(t[0], t[1], L.tensor([[0], [2]])),
     (X3, _a(5, 6, 2))),
    ("tensordot_bcast", lambda L, t: L.tensordot(t[0], t[1], ([1], [0])), (_a(2, 1), _a(3, 4))),
    ("kron", lambda L, t: L.kron(t[0], t[1]), (D23, _a(2, 2))),
    ("kron_mixed", lambda L, t: t[0].kron(t[1]), (C3, _a(2, 2))),
    ("cross", lambda L, t: L.cross(t[0], t[1], dim=1), (V3, W3)),
    ("cross_bcast", lambda L, t: L.cross(t[0], t[1], -1), (V3, _a(1, 3))),
    ("cross_method", lambda L, t: t[0].cross(t[1], 0), (V3.T.copy(), W3.T.copy())),
    ("diag_embed", lambda L, t: L.diag_embed(t[0]), (D23,)),
    ("diag_embed_off", lambda L, t: L.diag_embed(t[0], 1, 0, 2), (D23,)),
    ("diag_embed_neg", lambda L, t: t[0].diag_embed(-2, 2, 0), (D23,)),
    ("meshgrid_ij", lambda L, t: L.meshgrid(t[0], t[1], indexing="ij")[1], (C3, _a(2))),
    ("meshgrid_xy", lambda L, t: L.meshgrid([t[0], t[1], t[2]], indexing="xy")[0],
     (C3, _a(2), _a(4))),
    ("broadcast_tensors", lambda L, t: L.broadcast_tensors(t[0], t[1])[0], (_a(2, 1), C3)),
    ("broadcast_to", lambda L, t: L.broadcast_to(t[0], (2, 4, 3)), (_a(4, 1),)),
    ("broadcast_to_m", lambda L, t: t[0].broadcast_to(2, -1, 3), (_a(4, 1),)),
    ("rot90", lambda L, t: L.rot90(t[0]), (X3,)),
    ("rot90_k2", lambda L, t: L.rot90(t[0], 2, [1, 2]), (X3,)),
    ("rot90_k3", lambda L, t: t[0].rot90(-1, (2, 0)), (X3,)),
    ("rot90_k0", lambda L, t: L.rot90(t[0], 4), (D23,)),
    ("cov", lambda L, t: L.cov(t[0]), (E53,)),
    ("cov1d", lambda L, t: L.cov(t[0]), (_a(6),)),
    ("cov_corr", lambda L, t: L.cov(t[0], correction=0), (E53,)),
    ("cov_fw", lambda L, t: L.cov(t[0], fweights=L.tensor([1, 2, 0])), (E53,)),
    ("cov_aw", lambda L, t: t[0].cov(aweights=t[1]), (E53, np.array([0.5, 1.0, 2.0]))),
    ("cov_both", lambda L, t: L.cov(t[0], correction=2, fweights=L.tensor([3, 1, 2]),
                                    aweights=t[1]), (E53, np.array([0.5, 1.0, 2.0]))),
    ("corrcoef", lambda L, t: L.corrcoef(t[0]), (E53,)),
    ("corrcoef_m", lambda L, t: t[0].corrcoef(), (_a(2, 7),)),
    ("block_diag", lambda L, t: L.block_diag(*t), BD),
    ("cartesian_prod", lambda L, t: L.cartesian_prod(t[0], t[1]), (C3, _a(2))),
    ("combinations", lambda L, t: L.combinations(t[0]), (_a(4),)),
    ("combinations3r", lambda L, t: L.combinations(t[0], 3, True), (_a(4),)),
    ("combinations1", lambda L, t: L.combinations(t[0], r=1), (_a(4),)),
    ("vander", lambda L, t: L.vander(t[0]), (C3,)),
    ("vander_inc", lambda L, t: L.vander(t[0], N=5, increasing=True), (C3,)),
]


def _run(lib, fn, inputs, dtype, grad):
    if lib is tg:
        ts = [tg.tensor(x, dtype=getattr(tg, dtype), requires_grad=grad) for x in inputs]
    else:
        ts = [torch.tensor(x, dtype=getattr(torch, dtype), requires_grad=grad) for x in inputs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ts, fn(lib, ts)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("label, fn, inputs", CASES, ids=[c[0] for c in CASES])
def test_values_and_dtypes_match_pytorch(label, fn, inputs, dtype):
    _, got = _run(tg, fn, inputs, dtype, False)
    _, want = _run(torch, fn, inputs, dtype, False)
    assert got.dtype.name == str(want.dtype).split(".")[1]
    assert tuple(got.shape) == tuple(want.shape)
    tol = 2e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=tol, atol=tol)


def _finite_differences(fn, inputs, seed, eps=1e-6):
    """d/dx sum(seed * fn(x)) of each float64 input, by central differences."""
    out = []
    for k, x in enumerate(inputs):
        g = np.zeros_like(x, dtype=np.float64)
        for idx in np.ndindex(x.shape):
            for sgn in (1, -1):
                xs = [np.array(v, dtype=np.float64) for v in inputs]
                xs[k][idx] += sgn * eps
                _, y = _run(tg, fn, xs, "float64", False)
                g[idx] += sgn * float((y.numpy() * seed).sum()) / (2 * eps)
        out.append(g)
    return out


@pytest.mark.parametrize("label, fn, inputs", CASES, ids=[c[0] for c in CASES])
def test_float64_gradients_match_pytorch(label, fn, inputs):
    ts, got = _run(tg, fn, inputs, "float64", True)
    tts, want = _run(torch, fn, inputs, "float64", True)
    seed = np.cos(np.arange(max(want.numel(), 1), dtype=np.float64)).reshape(want.shape)
    assert got.requires_grad == want.requires_grad
    if not want.requires_grad:
        return
    (got * tg.tensor(seed)).sum().backward()
    try:
        (want * torch.tensor(seed)).sum().backward()
        expected = [np.zeros(np.shape(x)) if t.grad is None else t.grad.numpy()
                    for x, t in zip(inputs, tts)]
    except RuntimeError:
        # PyTorch's own backward fails here (vander's in-place cumprod; the p=0 norm):
        # central differences instead
        expected = _finite_differences(fn, inputs, seed)
    for x, t, e in zip(inputs, ts, expected):
        g = np.zeros(np.shape(x)) if t.grad is None else t.grad.numpy()
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6)


def test_gradients_match_finite_differences():
    x = tg.tensor(_a(3, 4), requires_grad=True)
    y = tg.tensor(_a(6, 4), requires_grad=True)

    def f(a, b):
        return (tg.cdist(a, b, 3.0).sum() + tg.cdist(a, b, compute_mode="use_mm_for_euclid_dist")
                .pow(2).sum() + tg.cov(tg.vstack([a, b])).sum() + tg.dist(a[0], b[1]))
    f(x, y).backward()
    eps = 1e-6
    for t in (x, y):
        base = t.detach().numpy().copy()
        num = np.zeros_like(base)
        for idx in np.ndindex(base.shape):
            for sgn in (1, -1):
                pert = base.copy()
                pert[idx] += sgn * eps
                args = [tg.tensor(pert) if u is t else u.detach() for u in (x, y)]
                num[idx] += sgn * f(*args).item() / (2 * eps)
        np.testing.assert_allclose(t.grad.numpy(), num, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- integer and bool inputs
INT_CASES = [
    ("hstack", lambda L: L.hstack([L.tensor([1, 2]), L.tensor([3.0])])),
    ("take", lambda L: L.take(L.tensor([[1, 2], [3, 4]]), L.tensor([3, -4]))),
    ("kron", lambda L: L.kron(L.tensor([1, 2]), L.tensor([[True], [False]]))),
    ("kron_bool", lambda L: L.kron(L.tensor([True, False]), L.tensor([True, True]))),
    ("tensordot", lambda L: L.tensordot(L.tensor([[1, 2], [3, 4]]), L.tensor([5, 6]), 1)),
    ("baddbmm", lambda L: L.baddbmm(L.tensor([1]), L.ones(2, 3, 4, dtype=L.int64),
                                    L.ones(2, 4, 3, dtype=L.int64), alpha=2, beta=3)),
    ("cross", lambda L: L.cross(L.tensor([1, 2, 3]), L.tensor([4, 5, 6]), 0)),
    ("vander_int", lambda L: L.vander(L.tensor([1, 2, 3]))),
    ("vander_bool", lambda L: L.vander(L.tensor([True, False]), 3)),
    ("cov_int", lambda L: L.cov(L.tensor([[1, 2, 4], [3, 1, 0]]))),
    ("corrcoef_int", lambda L: L.corrcoef(L.tensor([1, 2, 4]))),
    ("block_diag", lambda L: L.block_diag(L.tensor([1, 2]), L.tensor([[1.5]]))),
    ("block_diag_bool", lambda L: L.block_diag(L.tensor([True]), L.tensor([True, False]))),
    ("block_diag_none", lambda L: L.block_diag()),
    ("combinations_int", lambda L: L.combinations(L.tensor([3, 1, 2]), 2, True)),
    ("combinations_r0", lambda L: L.combinations(L.tensor([3, 1, 2]), 0)),
    ("combinations_big_r", lambda L: L.combinations(L.tensor([3., 1.]), 3)),
    ("cartesian_one", lambda L: L.cartesian_prod(L.tensor([3, 1]))),
    ("diag_embed_bool", lambda L: L.diag_embed(L.tensor([True, False]), 1)),
    ("meshgrid_0d", lambda L: L.meshgrid(L.tensor(1), L.tensor([1, 2]), indexing="xy")[0]),
    ("rot90_int", lambda L: L.rot90(L.tensor([[1, 2], [3, 4]]), 1, [1, 0])),
    ("dist_mixed", lambda L: L.dist(L.ones(3), L.ones(3, dtype=L.float64) * 2)),
    ("cdist_empty", lambda L: L.cdist(L.ones(0, 4), L.ones(3, 4))),
    ("cdist_zero_cols", lambda L: L.cdist(L.ones(2, 0), L.ones(3, 0))),
    ("broadcast_shapes", lambda L: L.tensor(list(L.broadcast_shapes((2, 1), (3,), 1)))),
    ("broadcast_shapes_none", lambda L: L.tensor(list(L.broadcast_shapes(None, [1, 4], 1)))),
    ("broadcast_shapes_empty", lambda L: L.tensor(list(L.broadcast_shapes()))),
]


@pytest.mark.parametrize("label, fn", INT_CASES, ids=[c[0] for c in INT_CASES])
def test_integer_bool_and_edge_inputs_match_pytorch(label, fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got, want = fn(tg), fn(torch)
    assert got.dtype.name == str(want.dtype).split(".")[1]
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


# ---------------------------------------------------------------- logspace
LOGSPACE = [(0, 2, 5, 10.0), (-3.5, 7.25, 11, 10.0), (0, 2, 5, 2.0), (1, 0, 4, 3.0),
            (0.1, 0.9, 101, 10.0), (2, 2, 1, 10.0), (0, 1, 0, 10.0), (-1, 3, 7, 0.5),
            (0, 10, 33, 1.7)]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("start, end, steps, base", LOGSPACE)
def test_logspace_is_pytorchs_bit_for_bit(start, end, steps, base, dtype):
    got = tg.logspace(start, end, steps, base, dtype=getattr(tg, dtype))
    want = torch.logspace(start, end, steps, base, dtype=getattr(torch, dtype))
    assert got.dtype.name == dtype and got.shape == tuple(want.shape)
    assert got.numpy().tobytes() == want.numpy().tobytes()


def test_logspace_arguments():
    assert tg.logspace(tg.tensor(0.0), tg.tensor(2.0), 3).tolist() == [1.0, 10.0, 100.0]
    x = tg.logspace(0, 1, 3, requires_grad=True)
    assert x.requires_grad and x.is_leaf
    out = tg.empty(2, dtype=tg.float64)
    assert tg.logspace(0, 1, 3, out=out) is out and out.tolist() == torch.logspace(
        0, 1, 3, dtype=torch.float64).tolist()


# ---------------------------------------------------------------- errors
ERRORS = [
    lambda L: L.take(L.ones(2, 3), L.tensor([6])),
    lambda L: L.take(L.ones(2, 3), L.tensor([-7])),
    lambda L: L.take(L.ones(2, 3), L.tensor([1.0])),
    lambda L: L.take(L.ones(0), L.tensor([0])),
    lambda L: L.take(L.ones(2), [1]),
    lambda L: L.hstack([]),
    lambda L: L.vstack([]),
    lambda L: L.dstack([]),
    lambda L: L.column_stack([]),
    lambda L: L.hstack(L.ones(2, 3)),
    lambda L: L.hstack([L.ones(2), 1]),
    lambda L: L.hstack([L.ones(2, 3), L.ones(3, 3)]),
    lambda L: L.dist(L.ones(3, dtype=L.int64), L.ones(3, dtype=L.int64)),
    lambda L: L.dist(L.ones(2, 3), L.ones(4)),
    lambda L: L.dist(L.ones(3), 1.0),
    lambda L: L.baddbmm(L.ones(3), L.ones(2, 3, 4), L.ones(3, 4, 3)),
    lambda L: L.baddbmm(L.ones(3), L.ones(3, 4), L.ones(3, 4, 3)),
    lambda L: L.baddbmm(L.ones(4), L.ones(2, 3, 4), L.ones(2, 4, 3)),
    lambda L: L.baddbmm(L.ones(1), L.ones(2, 3, 4, dtype=L.float64), L.ones(2, 4, 3)),
    lambda L: L.tensordot(L.ones(3, 4), L.ones(4, 5), -1),
    lambda L: L.tensordot(L.ones(3, 4), L.ones(4, 5), 3),
    lambda L: L.tensordot(L.ones(3, 4), L.ones(4, 5), 2.0),
    lambda L: L.tensordot(L.ones(3, 4), L.ones(4, 5), ([0], [0])),
    lambda L: L.tensordot(L.ones(3, 4), L.ones(4, 5), ([0, 1], [0])),
    lambda L: L.tensordot(L.ones(3, 4), L.ones(4, 5, dtype=L.float64), 1),
    lambda L: L.tensordot(L.ones(3, 4), L.ones(4, 5), ([1, 1], [0, 0])),
    lambda L: L.tensordot(L.ones(3, 4), L.ones(4, 5), ([5], [0])),
    lambda L: L.tensordot(L.ones(3, 4), L.ones(4, 5), (1, 0)),
    lambda L: L.kron([1.0], L.ones(2)),
    lambda L: L.cross(L.ones(2, 4), L.ones(2, 4)),
    lambda L: L.cross(L.ones(2, 3), L.ones(2, 3), dim=0),
    lambda L: L.cross(L.ones(4, 1, 3), L.ones(2, 3)),
    lambda L: L.cross(L.ones(3), L.ones(3, dtype=L.float64)),
    lambda L: L.cross(L.ones(3, dtype=L.bool), L.ones(3, dtype=L.bool)),
    lambda L: L.diag_embed(L.ones(2, 3), 0, 1, 1),
    lambda L: L.diag_embed(L.ones(2, 3), 0, 3, 1),
    lambda L: L.diag_embed(L.tensor(1.0)),
    lambda L: L.meshgrid(L.ones(2), L.ones(3), indexing="ab"),
    lambda L: L.meshgrid(indexing="ij"),
    lambda L: L.meshgrid(L.ones(2), L.ones(3, dtype=L.int64), indexing="ij"),
    lambda L: L.meshgrid(1, indexing="ij"),
    lambda L: L.broadcast_tensors(L.ones(2, 1), L.ones(3), L.ones(4)),
    lambda L: L.broadcast_tensors([L.ones(2)]),
    lambda L: L.broadcast_to(L.ones(3), (2, 4)),
    lambda L: L.broadcast_shapes((2, 1), (3,), (4,)),
    lambda L: L.broadcast_shapes((2, 1), 2.5),
    lambda L: L.broadcast_shapes((1, -2)),
    lambda L: L.broadcast_to(L.ones(3), 3),
    lambda L: L.broadcast_to(L.ones(2, 3), (3,)),
    lambda L: L.rot90(L.ones(2, 3), 1, [0, 0]),
    lambda L: L.rot90(L.ones(3)),
    lambda L: L.rot90(L.ones(2, 3), 1, [0, 1, 1]),
    lambda L: L.rot90(L.ones(2, 3), 1, [0, 2]),
    lambda L: L.rot90(L.ones(2, 3), 1.0),
    lambda L: L.cov(L.ones(2, 2, 2)),
    lambda L: L.cov(L.ones(3, dtype=L.bool)),
    lambda L: L.cov(L.ones(2, 5), correction=0.5),
    lambda L: L.cov(L.ones(2, 5), fweights=L.ones(5)),
    lambda L: L.cov(L.ones(2, 5), fweights=L.tensor([1, -2, 3, 1, 1])),
    lambda L: L.cov(L.ones(2, 5), fweights=L.ones(1, 5, dtype=L.int64)),
    lambda L: L.cov(L.ones(2, 5), fweights=L.ones(4, dtype=L.int64)),
    lambda L: L.cov(L.ones(2, 5), aweights=L.tensor([1, 2, 3, 1, 1])),
    lambda L: L.cov(L.ones(2, 5), aweights=L.tensor([1.0, -2, 3, 1, 1])),
    lambda L: L.cov(L.ones(2, 5), aweights=L.ones(4)),
    lambda L: L.cov(L.ones(2, 5), aweights=L.zeros(5)),
    lambda L: L.corrcoef(L.ones(2, 2, 2)),
    lambda L: L.block_diag(L.ones(2, 2, 2)),
    lambda L: L.block_diag([L.ones(2)]),
    lambda L: L.cartesian_prod(L.ones(2, 2)),
    lambda L: L.cartesian_prod(),
    lambda L: L.cartesian_prod(L.ones(2), L.ones(2, dtype=L.int64)),
    lambda L: L.combinations(L.ones(4), -1),
    lambda L: L.combinations(L.ones(2, 2)),
    lambda L: L.combinations(L.ones(3), 2.0),
    lambda L: L.vander(L.ones(3), N=-1),
    lambda L: L.vander(L.ones(2, 2)),
    lambda L: L.vander(L.ones(3), 2.0),
    lambda L: L.logspace(0, 2, -1),
    lambda L: L.logspace(0, 2, 3, dtype=L.bool),
    lambda L: L.logspace(L.tensor([0.0]), L.tensor(2.0), 3),
    lambda L: L.logspace(0, 2, 3, dtype=L.int64, requires_grad=True),
    lambda L: L.cdist(L.ones(4), L.ones(5, 4)),
    lambda L: L.cdist(L.ones(3, 4), L.ones(4)),
    lambda L: L.cdist(L.ones(3, 4), L.ones(5, 3)),
    lambda L: L.cdist(L.ones(3, 4, dtype=L.int64), L.ones(5, 4, dtype=L.int64)),
    lambda L: L.cdist(L.ones(3, 4), L.ones(5, 4, dtype=L.int64)),
    lambda L: L.cdist(L.ones(3, 4), L.ones(5, 4, dtype=L.float64)),
    lambda L: L.cdist(L.ones(3, 4), L.ones(5, 4), -1),
    lambda L: L.cdist(L.ones(3, 4), L.ones(5, 4), float("nan")),
    lambda L: L.cdist(L.ones(3, 4), L.ones(5, 4), compute_mode="foo"),
    lambda L: L.cdist(L.ones(3, 4), L.ones(5, 4), "fro"),
    lambda L: L.cdist(L.ones(2, 3, 4), L.ones(3, 5, 4)),
    lambda L: L.autograd.Variable([1.0]),
    lambda L: L.autograd.Variable(L.ones(2, dtype=L.int64), requires_grad=True),
    lambda L: L.ones(2, requires_grad=True).apply_(lambda v: v),
    lambda L: L.ones(2).map_(L.ones(2, dtype=L.float64), lambda a, b: a),
    lambda L: L.ones(3).map_(L.ones(2), lambda a, b: a),
    lambda L: L.ones(3).map_(L.ones(2, 3), lambda a, b: a),
    lambda L: L.ones(2).pin_memory(),
]


@pytest.mark.parametrize("k", range(len(ERRORS)))
def test_errors_are_pytorchs(k):
    call = ERRORS[k]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception) as theirs:
            call(torch)
        with pytest.raises(Exception) as ours:
            call(tg)
    assert type(ours.value) is type(theirs.value)
    assert str(ours.value).replace("tapegrad.", "torch.") == str(theirs.value)


def test_meshgrid_2d_input_is_refused():
    with pytest.raises(RuntimeError, match="Expected 0D or 1D tensor in the tensor list"):
        tg.meshgrid(tg.ones(2, 2), tg.ones(3), indexing="ij")


# ---------------------------------------------------------------- warnings
def _warnings_of(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [str(w.message).split(" (Triggered internally")[0] for w in caught]


@pytest.mark.parametrize("call", [
    lambda L: L.cov(L.tensor(2.0)),
    lambda L: L.cov(L.ones(2, 5), correction=5),
    lambda L: L.autograd.Variable(L.ones(2), volatile=True),
])
def test_warnings_are_pytorchs(call):
    ours = _warnings_of(lambda: call(tg))
    theirs = _warnings_of(lambda: call(torch))
    assert ours == theirs and ours


# PyTorch warns about these once per process (TORCH_WARN_ONCE), whatever the filters
@pytest.mark.parametrize("key, call, text", [
    ("meshgrid", lambda: tg.meshgrid(tg.ones(2), tg.ones(3)),
     "torch.meshgrid: in an upcoming release, it will be required to pass the indexing "
     "argument."),
    ("cross", lambda: tg.cross(tg.ones(2, 3), tg.ones(2, 3)),
     "Using torch.cross without specifying the dim arg is deprecated.\nPlease either pass "
     "the dim explicitly or simply use torch.linalg.cross.\nThe default value of dim will "
     "change to agree with that of linalg.cross in a future release."),
    ("cross", lambda: tg.ones(2, 3).cross(tg.ones(2, 3)),
     "Using torch.cross without specifying the dim arg is deprecated.\nPlease either pass "
     "the dim explicitly or simply use torch.linalg.cross.\nThe default value of dim will "
     "change to agree with that of linalg.cross in a future release."),
])
def test_once_per_process_warnings(key, call, text):
    from tapegrad._front import assembly
    assembly._WARNED.discard(key)
    assert _warnings_of(call) == [text]
    assert _warnings_of(call) == []


# ---------------------------------------------------------------- memory attributes
def test_data_ptr_storage_offset_and_storage_are_consistent_across_views():
    x = tg.arange(12.0).reshape(3, 4)
    v = x[1:, 1:]
    assert v.storage_offset() == 5 and x.storage_offset() == 0
    assert v.data_ptr() - x.data_ptr() == 5 * 4
    s = v.untyped_storage()
    assert s.data_ptr() == x.data_ptr() == x.untyped_storage().data_ptr()
    assert s.nbytes() == s.size() == len(s) == 48
    assert x.t().data_ptr() == x.data_ptr()
    assert x.clone().data_ptr() != x.data_ptr()
    assert tg.empty(0).data_ptr() == 0
    assert not x.is_pinned() and not x.is_shared()
    with pytest.raises(RuntimeError, match="shared memory"):
        x.share_memory_()


def test_apply_and_map_are_pytorchs():
    for L in (tg, torch):
        a = L.arange(6.0).reshape(2, 3)
        assert a.apply_(lambda v: v * 2 + 1) is a
        b = L.ones(3, dtype=L.int64).apply_(lambda v: v + 0.7)
        c = L.tensor([True, False]).apply_(lambda v: not v)
        d = L.ones(2, 3).map_(L.arange(3.0), lambda p, q: p - q)
        if L is tg:
            ours = [a.tolist(), b.tolist(), c.tolist(), d.tolist()]
        else:
            assert ours == [a.tolist(), b.tolist(), c.tolist(), d.tolist()]
    x = tg.ones(2)
    version = x._version
    x.apply_(lambda v: v)
    assert x._version > version


def test_variable_is_the_legacy_wrapper():
    t = tg.ones(2)
    v = tg.autograd.Variable(t, requires_grad=True)
    assert isinstance(v, tg.Tensor) and v.requires_grad and v.is_leaf and v is not t
    v.data[0] = 5.0                 # (shares t's memory, as PyTorch's does)
    assert t[0].item() == 5.0
    assert isinstance(tg.ones(1), tg.autograd.Variable)
    assert tg.autograd.Variable().shape == (0,)
    w = tg.ones(2, requires_grad=True) * 2
    assert tg.autograd.Variable(w).grad_fn is None


# ---------------------------------------------------------------- printing
PRINTED = [np.array(0.5), np.array([1e-5, 1.0, -2.5]), np.array([1.0, 2.0, -3.0]),
           RNG.standard_normal((3, 4)), RNG.standard_normal((40, 30)),
           RNG.standard_normal(2000) * 1e5, np.array([np.nan, np.inf, -np.inf, 1.5]),
           np.array([123456789.0, 1.0]), np.arange(1200.0).reshape(30, 40),
           RNG.standard_normal((2, 3, 4)), np.array([0.0, 0.0]), np.array([1e-10, -1e10]),
           RNG.standard_normal((5, 300)), np.zeros((0, 3)), np.zeros(0), np.array(3.0),
           RNG.integers(-1000, 1000, (4, 50)), RNG.integers(-5, 5, 3000),
           np.array([True, False]), RNG.standard_normal((3, 3, 3, 40))]
OPTIONS = [{}, dict(precision=2), dict(precision=8), dict(threshold=5),
           dict(edgeitems=1, threshold=10), dict(linewidth=40), dict(profile="short"),
           dict(profile="full"), dict(sci_mode=True), dict(sci_mode=False),
           dict(edgeitems=0, threshold=3), dict(precision=0),
           dict(linewidth=200, precision=6), dict(profile="full", precision=2, linewidth=60)]


@pytest.fixture
def restore_printoptions():
    yield
    tg.set_printoptions(profile="default")
    torch.set_printoptions(profile="default")


@pytest.mark.parametrize("options", OPTIONS, ids=[str(o) for o in OPTIONS])
def test_printing_matches_pytorch_under_each_option(options, restore_printoptions):
    tg.set_printoptions(**options)
    torch.set_printoptions(**options)
    for values in PRINTED:
        dtypes = ["float32", "float64"] if values.dtype.kind == "f" else [None]
        for dt in dtypes:
            ours = tg.tensor(values, dtype=getattr(tg, dt) if dt else None)
            theirs = torch.tensor(values, dtype=getattr(torch, dt) if dt else None)
            pairs = [(ours, theirs)]
            if dt:
                pairs.append((ours.requires_grad_(), theirs.requires_grad_()))
                pairs.append((ours * 2, theirs * 2))
            for a, b in pairs:
                assert repr(a).replace("tapegrad.", "torch.") == repr(b), (options, values)


def test_printoptions_sci_mode_resets_and_get_printoptions(restore_printoptions):
    from tapegrad._front.format import get_printoptions
    tg.set_printoptions(sci_mode=True, precision=3)
    tg.set_printoptions(linewidth=70)       # (sci_mode goes back to None, as in PyTorch)
    assert get_printoptions() == dict(precision=3, threshold=1000, edgeitems=3,
                                      linewidth=70, sci_mode=None)
    assert repr(tg.tensor([1.5])) == "tensor([1.500])"


# ---------------------------------------------------------------- compiled
def test_a_compiled_step_with_the_composites_equals_eager():
    w = tg.tensor(_a(3, 4), requires_grad=True)
    b = tg.tensor(_a(5, 4))

    ones = tg.ones(2, 1)

    def step(w, b):
        loss = (tg.cdist(w, b).sum() + tg.kron(w, ones).pow(2).mean()
                + tg.hstack([w, w]).sum() + tg.rot90(w).abs().sum()
                + tg.cross(w[:, :3], b[:3, :3], dim=1).sum()
                + tg.tensordot(w, b, ([1], [1])).sum() + tg.diag_embed(w).sum()
                + tg.cov(w).sum() + tg.corrcoef(b).sum() + tg.vander(w[0], 3).sum()
                + tg.cdist(w, b, compute_mode="use_mm_for_euclid_dist").sum()
                + tg.baddbmm(b[:3, :1], w[None], b.t()[None]).sum()
                + tg.block_diag(w, b).sum() + tg.dist(w, b[0], 3)
                + tg.meshgrid(w[0], b[0], indexing="xy")[1].sum())
        loss.backward()
        g = w.grad.clone()
        w.grad = None
        return loss.detach(), g

    eager = step(w, b)
    compiled = tg.compile(step, fuse=False)
    warnings.simplefilter("error", tg.CompileWarning)     # (no graph break, no fallback)
    for _ in range(2):
        got = compiled(w, b)
        for x, y in zip(got, eager):
            assert x.numpy().tobytes() == y.numpy().tobytes()


@pytest.mark.parametrize("options", [dict(precision=3.5), dict(threshold="a"),
                                     dict(sci_mode=1), dict(linewidth=-1),
                                     dict(edgeitems=None, profile=3)])
def test_printoptions_printing_could_not_use_are_refused(options, restore_printoptions):
    # (PyTorch takes them and fails, or prints nonsense, at the next print)
    before = repr(tg.tensor([1.5]))
    with pytest.raises(TypeError, match="set_printoptions"):
        tg.set_printoptions(**options)
    assert repr(tg.tensor([1.5])) == before


@pytest.mark.parametrize("spec", ["", ".4f", ">8", ".2e", "g"])
def test_format_specs_are_pytorchs(spec):
    for make in (lambda L: L.tensor(1.23456), lambda L: L.tensor(3),
                 lambda L: L.tensor(0.5, requires_grad=True) * 3, lambda L: L.ones(2),
                 lambda L: L.tensor(True), lambda L: L.nn.Parameter(L.tensor(1.5))):
        outcomes = []
        for L in (tg, torch):
            try:
                outcomes.append(format(make(L), spec).replace("tapegrad.", "torch."))
            except TypeError as exc:
                outcomes.append(("TypeError", str(exc)))
        assert outcomes[0] == outcomes[1], (spec, outcomes)
