"""tapegrad.linalg: torch.linalg's functions, and the legacy top-level spellings
(LEGACY: cholesky, logdet, inverse, ...).

The decompositions and solvers are op-table entries (ops/decomp.py, LAPACK by symbol);
an entry with several results writes them packed in one tensor, split here into views.
The rest is composed from table ops, as PyTorch composes it.
"""
import collections

from ..ops.registry import BY_NAME
from ..ops.decomp import _LinAlgError as LinAlgError
from .._engine.state import GRAD_MODE
from .tensor import Tensor, run, _wrap, not_tensor

__all__ = ["cholesky", "cholesky_ex", "eigh", "eigvalsh", "solve", "inv", "inv_ex", "det",
           "slogdet", "solve_triangular", "matrix_power", "multi_dot", "vector_norm",
           "matrix_norm", "norm", "cross", "LinAlgError"]

_eigh = collections.namedtuple("torch_return_types_linalg_eigh", ("eigenvalues", "eigenvectors"))
_eigh.__name__ = _eigh.__qualname__ = "linalg_eigh"
_slogdet = collections.namedtuple("linalg_slogdet", ("sign", "logabsdet"))
_chol_ex = collections.namedtuple("linalg_cholesky_ex", ("L", "info"))
_inv_ex = collections.namedtuple("linalg_inv_ex", ("inverse", "info"))


def _t(fn, value, name="input", position=1):
    """PyTorch's TypeError for a non-tensor argument (fn: the binding's name)."""
    if not isinstance(value, Tensor):
        raise not_tensor(fn, value, name, position)


def _square(fn, A, name="A", position=1):
    """PyTorch's checks of a (batch of) square float matrices."""
    _t(f"linalg_{fn}", A)
    if A.ndim < 2:
        raise RuntimeError(f"linalg.{fn}: The input tensor {name} must have at least 2 "
                           f"dimensions.")
    if A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"linalg.{fn}: {name} must be batches of square matrices, but they "
                           f"are {A.shape[-2]} by {A.shape[-1]} matrices")
    if not A.dtype.is_floating_point:
        raise RuntimeError(f"linalg.{fn}: Expected a floating point or complex tensor as "
                           f"input. Got {_type(A)}")
    return A.contiguous()


def _type(t):
    from .promotion import _type_name
    return _type_name(t.dtype)


def _bool(fn, value, name):
    if not isinstance(value, bool):
        raise TypeError(f"linalg_{fn}(): argument '{name}' must be bool, not "
                        f"{type(value).__name__}")
    return value


def _no_out(fn, out):
    if out is not None:
        raise NotImplementedError(f"tapegrad: linalg.{fn}(out=...) is not supported")


def cholesky(A, *, upper=False, out=None):
    """The Cholesky factor L (lower; upper=True: L^H) of a (batch of) symmetric
    positive-definite matrices, reading the lower triangle."""
    _no_out("cholesky", out)
    A = _square("cholesky", A)
    op = BY_NAME["linalg_cholesky"]
    return _wrap(run(op, A._i, iargs=op.pack(upper=int(_bool("cholesky", upper, "upper")))))


def cholesky_ex(A, *, upper=False, check_errors=False, out=None):
    """(L, info): cholesky without raising for a matrix that is not positive-definite
    unless check_errors (info: the order of the failing leading minor, 0 on success)."""
    _no_out("cholesky_ex", out)
    try:
        L = cholesky(A, upper=upper)
    except LinAlgError as e:
        if check_errors:
            raise
        if A.ndim > 2:
            raise NotImplementedError("tapegrad: cholesky_ex of a batch with a matrix that is "
                                      "not positive-definite (check_errors=False)") from None
        import re
        order = int(re.search(r"order (\d+)", str(e)).group(1))
        from .creation import full
        return _chol_ex(full(A.shape, float("nan"), dtype=A.dtype), full((), order,
                                                                            dtype=_int32()))
    from .creation import zeros
    return _chol_ex(L, zeros(A.shape[:-2], dtype=_int32()))


def _int32():
    from . import dtype as D
    return D.int64          # (PyTorch's info is int32, which tapegrad tensors do not have)


def eigh(A, UPLO="L", *, out=None):
    """(eigenvalues ascending, eigenvectors as columns) of a (batch of) symmetric
    matrices, reading the UPLO triangle."""
    _no_out("eigh", out)
    A = _square("eigh", A)
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    op = BY_NAME["linalg_eigh"]
    P = _wrap(run(op, A._i, iargs=op.pack(upper=int(UPLO == "U"))))
    return _eigh(P[..., 0, :], P[..., 1:, :])


def eigvalsh(A, UPLO="L", *, out=None):
    """The eigenvalues (ascending) of a (batch of) symmetric matrices."""
    return eigh(A, UPLO, out=out)[0]


def _solve(fn, A, B, inverse):
    op = BY_NAME["linalg_solve"]
    return _wrap(run(op, A._i, B._i, iargs=op.pack(inverse=int(inverse))))


def solve(A, B, *, left=True, out=None):
    """X with A X = B (left=False: X A = B), for a (batch of) square A; B a (batch of)
    matrices or a vector."""
    _no_out("solve", out)
    A = _square("solve", A)
    _t("linalg_solve", B, "B", 2)
    if A.dtype != B.dtype:
        raise RuntimeError(f"linalg.solve: Expected A and B to have the same dtype, but found "
                           f"A of type {_type(A)} and B of type {_type(B)} instead")
    if not left:
        return solve(A.mT, B.mT).mT
    n = A.shape[-1]
    vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))
    Bm = B.unsqueeze(-1) if vector else B
    if Bm.shape[-2] != n:
        raise RuntimeError(f"linalg.solve: Incompatible shapes of A and B for the equation "
                           f"AX = B ({A.shape[-2]}x{n} and {Bm.shape[-2]}x{Bm.shape[-1]})")
    import numpy as np
    batch = tuple(np.broadcast_shapes(tuple(A.shape[:-2]), tuple(Bm.shape[:-2])))
    A2 = A.expand(*batch, n, n).contiguous()
    B2 = Bm.expand(*batch, n, Bm.shape[-1]).contiguous()
    X = _solve("solve", A2, B2, False)
    return X.squeeze(-1) if vector else X


def inv(A, *, out=None):
    """The inverse of a (batch of) square matrices (a solve against the identity)."""
    _no_out("inv", out)
    A = _square("inv", A)
    return _solve("inv", A, A, True)          # (the kernel solves for the identity)


def inv_ex(A, *, check_errors=False, out=None):
    """(inverse, info) (only for invertible input here: info 0)."""
    from .creation import zeros
    return _inv_ex(inv(A, out=out), zeros(A.shape[:-2], dtype=_int32()))


def slogdet(A, *, out=None):
    """(sign, log|det|) of a (batch of) square matrices (sign 0, -inf for a singular one)."""
    _no_out("slogdet", out)
    A = _square("slogdet", A)
    P = _wrap(run(BY_NAME["linalg_slogdet"], A._i))
    return _slogdet(P[..., 0].detach(), P[..., 1])


def det(A, *, out=None):
    """The determinant: sign * exp(log|det|) (its gradient is not defined at a singular
    matrix here)."""
    _no_out("det", out)
    s, la = slogdet(_square("det", A))
    return s * la.exp()


def logdet(A):
    """log det A: NaN for a negative determinant, -inf for a singular matrix."""
    _t("logdet", A)
    s, la = slogdet(_square("logdet", A))
    return la + s.clamp(max=0.0).sqrt()         # (sqrt(-1): NaN for a negative det)


def solve_triangular(A, B, *, upper, left=True, unitriangular=False, out=None):
    """X with A X = B (left=False: X A = B) for a (batch of) triangular A."""
    _no_out("solve_triangular", out)
    A = _square("solve_triangular", A)
    if not isinstance(B, Tensor):
        raise not_tensor("linalg_solve_triangular", B, "B", 2)
    if A.dtype != B.dtype:
        raise RuntimeError(f"linalg.solve_triangular: Expected A and B to have the same dtype, "
                           f"but found A of type {_type(A)} and B of type {_type(B)} instead")
    if not left:
        return solve_triangular(A.mT, B.mT, upper=not upper, unitriangular=unitriangular).mT
    n = A.shape[-1]
    if B.ndim < 2 or B.shape[-2] != n:
        raise RuntimeError(f"linalg.solve_triangular: Incompatible shapes of A and B for the "
                           f"equation AX = B ({A.shape[-2]}x{n} and "
                           f"{B.shape[-2] if B.ndim > 1 else B.shape[-1]}x"
                           f"{B.shape[-1] if B.ndim > 1 else 1})")
    import numpy as np
    batch = tuple(np.broadcast_shapes(tuple(A.shape[:-2]), tuple(B.shape[:-2])))
    A2 = A.expand(*batch, n, n).contiguous()
    B2 = B.expand(*batch, n, B.shape[-1]).contiguous()
    op = BY_NAME["linalg_solve_triangular"]
    return _wrap(run(op, A2._i, B2._i, iargs=op.pack(upper=int(bool(upper)),
                                                     unitriangular=int(bool(unitriangular)))))


def cholesky_solve(B, L, upper=False, *, out=None):
    """X with A X = B, given A's Cholesky factor L (upper: U with A = U^H U)."""
    _no_out("cholesky_solve", out)
    _t("cholesky_solve", B)
    _t("cholesky_solve", L, "input2", 2)
    if upper:
        Y = solve_triangular(L.mT, B, upper=False)
        return solve_triangular(L, Y, upper=True)
    Y = solve_triangular(L, B, upper=False)
    return solve_triangular(L.mT, Y, upper=True)


def triangular_solve(b, A, upper=True, transpose=False, unitriangular=False, *, out=None):
    """(solution, cloned_coefficient): the legacy torch.triangular_solve."""
    _no_out("triangular_solve", out)
    _t("triangular_solve", b)
    _t("triangular_solve", A, "A", 2)
    M = A.mT if transpose else A
    X = solve_triangular(M, b, upper=upper != transpose, unitriangular=unitriangular)
    return collections.namedtuple("triangular_solve", ("solution", "cloned_coefficient"))(
        X, A.clone())


def matrix_power(A, n, *, out=None):
    """A^n by repeated squaring (n < 0: of the inverse)."""
    _no_out("matrix_power", out)
    _t("linalg_matrix_power", A)
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError(f"matrix_power(): argument 'n' (position 2) must be int, not "
                        f"{type(n).__name__}")
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"linalg.matrix_power: A must be batches of square matrices, but "
                           f"they are {A.shape[-2] if A.ndim > 1 else A.shape[-1]} by "
                           f"{A.shape[-1]} matrices")
    if n == 0:
        from .utilities import eye
        return eye(A.shape[-1], dtype=A.dtype).expand(*A.shape).clone()
    if n < 0:
        A, n = inv(A), -n
    result, base = None, A
    while n:
        if n & 1:
            result = base if result is None else result @ base
        n >>= 1
        if n:
            base = base @ base
    return result


def multi_dot(tensors, *, out=None):
    """The product of a list of matrices (the first and last may be vectors), left to
    right."""
    _no_out("multi_dot", out)
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"expected Tensor as element {i} in argument 0, but got "
                            f"{type(t).__name__}")
    if len(tensors) < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {len(tensors)}")
    ts = list(tensors)
    first_vec, last_vec = ts[0].ndim == 1, ts[-1].ndim == 1
    if first_vec:
        ts[0] = ts[0].unsqueeze(0)
    if last_vec:
        ts[-1] = ts[-1].unsqueeze(-1)
    r = ts[0]
    for t in ts[1:]:
        r = r @ t
    if first_vec:
        r = r.squeeze(0)
    if last_vec:
        r = r.squeeze(-1)
    return r


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):
    """(sum |x|^ord)^(1/ord) over dim (all by default); ord inf, -inf, 0 too."""
    _no_out("vector_norm", out)
    _t("linalg_vector_norm", x)
    if dtype is not None:
        x = x.to(dtype)
    a = x.abs()
    dims = tuple(range(x.ndim)) if dim is None else dim
    if ord == float("inf"):
        return a.amax(dims, keepdim=keepdim)
    if ord == float("-inf"):
        return a.amin(dims, keepdim=keepdim)
    if ord == 0:
        return (a != 0).to(a.dtype).sum(dims, keepdim=keepdim)
    if ord == 2:
        return (x * x).sum(dims, keepdim=keepdim).sqrt()
    if ord == 1:
        return a.sum(dims, keepdim=keepdim)
    return (a ** ord).sum(dims, keepdim=keepdim) ** (1.0 / ord)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None, out=None):
    """The Frobenius norm, ord 1, -1, inf, -inf (max/min absolute column/row sums), or
    2, -2, 'nuc' (largest, smallest, summed singular values)."""
    _no_out("matrix_norm", out)
    _t("linalg_matrix_norm", A)
    if dtype is not None:
        A = A.to(dtype)
    d0, d1 = dim
    if ord == "fro":
        return vector_norm(A, 2, dim, keepdim)
    if ord in (1, -1, float("inf"), float("-inf")):
        rows = ord in (float("inf"), float("-inf"))
        s = A.abs().sum(d1 if rows else d0, keepdim=True)
        r = s.amax((d0, d1), keepdim=True) if ord > 0 else s.amin((d0, d1), keepdim=True)
        return r if keepdim else r.squeeze(max(d0 % A.ndim, d1 % A.ndim)).squeeze(
            min(d0 % A.ndim, d1 % A.ndim))
    if ord in (2, -2, "nuc"):     # from the singular values (their gradient is the SVD's)
        n = A.ndim
        lo, hi = sorted((d0 % n, d1 % n))
        S = svdvals(A.movedim((lo, hi), (-2, -1)))
        r = S.sum(-1) if ord == "nuc" else (S.amax(-1) if ord == 2 else S.amin(-1))
        return r.unsqueeze(lo).unsqueeze(hi) if keepdim else r
    raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")


def norm(input, ord=None, dim=None, keepdim=False, *, out=None, dtype=None):
    """vector_norm for a vector or any dim (ord None: 2), matrix_norm for two dims."""
    _t("linalg_norm", input)
    if isinstance(dim, int):
        dim = (dim,)
    if ord is None:
        return vector_norm(input, 2, dim, keepdim, dtype=dtype, out=out)
    if dim is not None and len(dim) == 2 or (dim is None and input.ndim == 2):
        return matrix_norm(input, ord, dim or (-2, -1), keepdim, dtype=dtype, out=out)
    return vector_norm(input, ord, dim, keepdim, dtype=dtype, out=out)


def cross(input, other, *, dim=-1, out=None):
    """The cross product of 3-vectors along dim."""
    _no_out("cross", out)
    _t("linalg_cross", input)
    _t("linalg_cross", other, "other", 2)
    if input.shape[dim] != 3 or other.shape[dim] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got "
                           f"{input.shape[dim]} and {other.shape[dim]}")
    a = [input.select(dim, i) for i in range(3)]
    b = [other.select(dim, i) for i in range(3)]
    from .indexing import stack
    return stack([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2],
                  a[0] * b[1] - a[1] * b[0]], dim)


def _legacy_cholesky(input, upper=False, *, out=None):
    """torch.cholesky (deprecated in PyTorch): linalg.cholesky."""
    _t("cholesky", input)
    return cholesky(input, upper=upper, out=out)


def inverse(input, *, out=None):
    """torch.inverse: linalg.inv."""
    _t("inverse", input)
    return inv(input, out=out)


def _legacy_slogdet(input):
    """torch.slogdet: linalg.slogdet."""
    _t("slogdet", input)
    return slogdet(input)


def _legacy_det(input):
    """torch.det: linalg.det."""
    _t("det", input)
    return det(input)


def _legacy_matrix_power(input, n):
    """torch.matrix_power: linalg.matrix_power."""
    _t("matrix_power", input)
    return matrix_power(input, n)


_legacy_cholesky.__name__ = "cholesky"
_legacy_slogdet.__name__ = "slogdet"
_legacy_det.__name__ = "det"
_legacy_matrix_power.__name__ = "matrix_power"

# the top-level spellings torch keeps outside torch.linalg
LEGACY = {"cholesky": _legacy_cholesky, "inverse": inverse, "det": _legacy_det,
          "logdet": logdet, "slogdet": _legacy_slogdet, "cholesky_solve": cholesky_solve,
          "triangular_solve": triangular_solve, "matrix_power": _legacy_matrix_power}


_svd = collections.namedtuple("linalg_svd", ("U", "S", "Vh"))


def _matrix(fn, A):
    _t(f"linalg_{fn}", A, "A" if fn == "qr" else "input")
    if A.ndim < 2:
        raise RuntimeError(f"linalg.{fn}: The input tensor A must have at least 2 dimensions.")
    if not A.dtype.is_floating_point:
        raise RuntimeError(f"linalg.{fn}: Expected a floating point or complex tensor as "
                           f"input. Got {_type(A)}")
    return A.contiguous()


def svd(A, full_matrices=True, *, driver=None, out=None):
    """(U, S, Vh) with A = U diag(S) Vh, S descending (full_matrices: U and Vh square)."""
    _no_out("svd", out)
    if driver is not None:
        raise RuntimeError("torch.linalg.svd: keyword argument `driver=` is only supported "
                           "on CUDA inputs with cuSOLVER backend.")
    A = _matrix("svd", A)
    m, n = A.shape[-2], A.shape[-1]
    k = min(m, n)
    ku, kv = (m, n) if full_matrices else (k, k)
    op = BY_NAME["linalg_svd"]
    P = _wrap(run(op, A._i, iargs=op.pack(full_matrices=int(bool(full_matrices)))))
    batch = tuple(A.shape[:-2])
    U = P[..., :m * ku].reshape(*batch, m, ku)
    S = P[..., m * ku:m * ku + k]
    Vh = P[..., m * ku + k:].reshape(*batch, kv, n)
    return _svd(U, S, Vh)


def svdvals(A, *, driver=None, out=None):
    """The singular values, descending."""
    _no_out("svdvals", out)
    if driver is not None:
        raise RuntimeError("torch.linalg.svd: keyword argument `driver=` is only supported "
                           "on CUDA inputs with cuSOLVER backend.")
    return svd(_matrix("svdvals", A), full_matrices=False).S


def pinv(A, *, atol=None, rtol=None, hermitian=False, out=None):
    """The pseudo-inverse, from the SVD (from eigh with hermitian=True, reading the lower
    triangle), dropping singular values (eigenvalues' magnitudes) at most
    max(atol, rtol * largest); rtol defaults to eps * max(m, n) without atol. Its gradient
    is PyTorch's closed form for the pseudo-inverse, not the SVD's: that one divides by
    the dropped singular values, so it is finite for rank-deficient input."""
    _no_out("pinv", out)
    A = _matrix("pinv", A)
    import numpy as np
    if rtol is None:
        rtol = 0.0 if atol is not None and atol > 0 else \
            float(np.finfo(np.float32 if A.dtype.itemsize == 4 else np.float64).eps) * max(
                A.shape[-2], A.shape[-1])
    A0 = A.detach()
    if hermitian:
        if A.shape[-1] != A.shape[-2]:
            raise RuntimeError(f"linalg.eigh: A must be batches of square matrices, but "
                               f"they are {A.shape[-2]} by {A.shape[-1]} matrices")
        S, U = eigh(A0)
        mag = S.abs()
        tol = (mag.amax(-1, keepdim=True) * rtol).clamp(min=atol if atol is not None else 0.0)
        keep = (mag > tol).to(S.dtype)
        P0 = (U * (keep / (S + (1 - keep))).unsqueeze(-2)) @ U.mT
    else:
        U, S, Vh = svd(A0, full_matrices=False)
        tol = (S[..., :1] * rtol).clamp(min=atol if atol is not None else 0.0)
        keep = (S > tol).to(S.dtype)
        P0 = (Vh.mT * (keep / (S + (1 - keep))).unsqueeze(-2)) @ U.mT
    if not (A.requires_grad and GRAD_MODE.on):
        return P0
    # zero in value, and linear in A with the pseudo-inverse's derivative
    # dP = -P dA P + P P^T dA^T (I - A P) + (I - P A) dA^T P^T P (Golub and Pereyra)
    AP, PA = A0 @ P0, P0 @ A0
    At = A.mT
    f = -(P0 @ A @ P0) + (P0 @ P0.mT) @ (At - At @ AP) + (At - PA @ At) @ (P0.mT @ P0)
    return P0 + (f - f.detach())


def _legacy_pinverse(input, rcond=1e-15):
    """torch.pinverse: linalg.pinv with rtol=rcond."""
    _t("pinverse", input)
    return pinv(input, rtol=rcond)


_legacy_pinverse.__name__ = "pinverse"
LEGACY["pinverse"] = _legacy_pinverse
__all__ += ["svd", "svdvals", "pinv"]


_qr = collections.namedtuple("linalg_qr", ("Q", "R"))


def qr(A, mode="reduced", *, out=None):
    """(Q, R) with A = Q R, Q orthonormal columns, R upper triangular (mode 'reduced',
    'complete', or 'r': R only, Q empty)."""
    _no_out("qr", out)
    A = _matrix("qr", A)
    modes = {"reduced": 0, "complete": 1, "r": 2}
    if mode not in modes:
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of "
                           f"'reduced' (default), 'r', or 'complete'")
    m, n = A.shape[-2], A.shape[-1]
    k = min(m, n)
    kq, kr = (k, k) if mode == "reduced" else ((m, m) if mode == "complete" else (0, k))
    op = BY_NAME["linalg_qr"]
    P = _wrap(run(op, A._i, iargs=op.pack(mode=modes[mode])))
    batch = tuple(A.shape[:-2])
    R = P[..., m * kq:].reshape(*batch, kr, n)
    if mode == "r":
        from .creation import zeros
        return _qr(zeros(0, dtype=A.dtype), R.detach())
    return _qr(P[..., :m * kq].reshape(*batch, m, kq), R)


__all__ += ["qr"]


_lstsq = collections.namedtuple("linalg_lstsq", ("solution", "residuals", "rank",
                                                 "singular_values"))


def lstsq(A, B, rcond=None, *, driver=None):
    """The least-squares solution of A X = B, as PyTorch's CPU drivers give it: the
    minimiser of |A X - B| of least norm. Full-rank A goes through its QR; a
    rank-deficient A (singular values at most rcond * S_max, rcond default eps * max(m, n))
    through its pseudo-inverse, as 'gelsy', 'gelsd' and 'gelss' do ('gels' assumes full
    rank, as LAPACK's does). The rank comes with every driver but 'gels', singular values
    with 'gelsd'/'gelss', residuals for tall A except with 'gelsy' (the default) and, for
    'gelsd'/'gelss', only when every matrix has full rank."""
    _t("linalg_lstsq", A)
    _t("linalg_lstsq", B, "b", 2)
    A = _matrix("lstsq", A)
    if driver not in (None, "gelsy", "gelsd", "gelss", "gels"):
        raise RuntimeError(f"torch.linalg.lstsq: parameter `driver` should be one of "
                           f"(gels, gelsy, gelsd, gelss)")
    if A.dtype != B.dtype:
        raise RuntimeError(f"torch.linalg.lstsq: Expected input and other to have the same "
                           f"dtype, but got input's dtype {A.dtype} and other's dtype "
                           f"{B.dtype}")
    from .creation import zeros
    from . import dtype as D
    import numpy as np
    vector = B.ndim == A.ndim - 1
    Bm = B.unsqueeze(-1) if vector else B
    m, n = A.shape[-2], A.shape[-1]
    full = True
    rank = zeros(0, dtype=D.int64)
    S = None
    if driver != "gels":
        S = svdvals(A).detach()
        if rcond is None or rcond < 0:      # (LAPACK: a negative rcond is machine precision)
            rcond = float(np.finfo(np.float32 if A.dtype.itemsize == 4 else np.float64).eps) \
                * max(m, n)
        if min(m, n):
            rank = (S > S[..., :1] * rcond).sum(-1)
            full = bool((rank == min(m, n)).all())
        else:
            rank = zeros(A.shape[:-2], dtype=D.int64)
    if not full:
        X = pinv(A, rtol=rcond) @ Bm
    elif m >= n:
        Q, R = qr(A)
        X = solve_triangular(R, Q.mT @ Bm, upper=True)
    else:
        Q, R = qr(A.mT)
        X = Q @ solve_triangular(R.mT, Bm, upper=False)
    res = zeros(0, dtype=A.dtype)
    if m > n and driver not in (None, "gelsy") and full:
        res = ((A @ X - Bm) ** 2).sum(-2)
    sv = S if driver in ("gelsd", "gelss") else zeros(0, dtype=A.dtype)
    return _lstsq(X.squeeze(-1) if vector else X, res, rank, sv)


def _int64():
    from . import dtype as D
    return D.int64


def matrix_exp(A):
    """exp(A) by scaling and squaring of a degree-18 Taylor polynomial (composed of
    products, so its gradient is the products')."""
    A = _square("matrix_exp", A)
    import math
    import numpy as np
    norm1 = float(np.abs(A.detach().numpy()).sum(-2).max()) if A.numel() else 0.0
    s = max(0, int(math.ceil(math.log2(norm1))) + 1) if norm1 > 0.5 else 0
    X = A / (2.0 ** s)
    term = X
    result = X + 0.0
    n = A.shape[-1]
    from .utilities import eye
    result = result + eye(n, dtype=A.dtype)
    for k in range(2, 19):
        term = (term @ X) / k
        result = result + term
    for _ in range(s):
        result = result @ result
    return result


__all__ += ["lstsq", "matrix_exp", "cholesky_solve"]
