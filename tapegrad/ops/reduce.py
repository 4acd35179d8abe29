"""Reductions: sum, mean, max, min, amax, amin (over everything, or over dims with
keepdim).

Row int attributes: [0] bit mask of reduced dims, [1] keepdim, [2] 1 for mean (sum)
or for min (max). Partial sums accumulate in float64, like PyTorch's float32 sums
accumulate in wider precision.
"""
import numpy as np

from .._engine.layout import (K_OK, MAXD, F32, F64, I64, M_DTYPE, M_NDIM, M_SHAPE, M_STRIDE,
                              M_NUMEL, R_IATTR, R_ODTYPE, R_IN, IN_SAVED, R_NOUT,
                              R_OSAVED, E_DTYPE, C_NOUTS)
from .._engine.lowlevel import jit, jit_reduction, ctx_of, meta_of, tape_of, outs_of, f32_at, f64_at, i64_at
from .._engine.core import (data_addr, make_output, meta_contiguous, input_id, set_outputs1,
                            row_grad_addr, edge_grad_addr, input_shape, out_numel)
from .._engine.core import span, contiguous_strides, transposed_tiles
from .opinfo import DISTINCT, Domain, T
from .signature import Reduction
from .registry import OpDef, Sample, register, samples
from ._vmath import vsum, maxnum, minnum, pick

_M = __name__
# np.iinfo inside a kernel makes its cache entry import numba.np.arraymath (and SciPy) on
# every warm start; a global is frozen into the kernel as a constant instead.
_STRIDE0_LAST = int(np.iinfo(np.int64).max)


@jit
def _reduced_layout(M, a, mask, keep):
    """Input shape/strides, the output shape, and the output's strides seen from the input's
    index space (0 along reduced dims)."""
    nd = M[a, M_NDIM]
    shape = M[a, M_SHAPE:M_SHAPE + nd].copy()
    ast = M[a, M_STRIDE:M_STRIDE + nd].copy()
    oshape = np.empty(MAXD, np.int64)
    ost = np.zeros(nd, np.int64)
    ond = 0
    for d in range(nd):
        if (mask >> d) & 1:
            if keep:
                oshape[ond] = 1
                ond += 1
        else:
            oshape[ond] = shape[d]
            ond += 1
    s = 1
    for d in range(nd - 1, -1, -1):
        if not (mask >> d) & 1:
            ost[d] = s
            s *= shape[d]
    return shape, ast, oshape[:ond], ost


@jit
def _reduction_input(C, row):
    """Input, dtype, reduced-dim mask and layouts of a reduction row (see _reduced_layout);
    the dtype is -1 when the input is not a float tensor."""
    M = meta_of(C)
    T = tape_of(C)
    a = input_id(C, row, 0)
    dt = M[a, M_DTYPE]
    if dt != F32 and dt != F64:
        dt = -1
    mask = T[row, R_IATTR]
    shape, ast, oshape, ost = _reduced_layout(M, a, mask, T[row, R_IATTR + 1])
    return a, dt, mask, shape, ast, oshape, ost


@jit
def _step(idx, shape, sx, sy, px, py, d):
    """Advance a row-major multi-index over shape's dims ..d by one; returns the new
    offsets with strides sx and sy."""
    while d >= 0:
        idx[d] += 1
        px += sx[d]
        py += sy[d]
        if idx[d] < shape[d]:
            break
        px -= sx[d] * shape[d]
        py -= sy[d] * shape[d]
        idx[d] = 0
        d -= 1
    return px, py


@jit
def _coalesce(shape, sx, sy, W):
    """The same walk over fewer dims, written into W's rows 0-2 (shape, sx, sy); returns
    the dim count. Neighbours d, d+1 merge where both stride sets step over d+1 exactly (a
    contiguous sum's backward becomes one flat loop); size-1 dims go."""
    k = 0
    for d in range(shape.shape[0]):
        if shape[d] == 1:
            continue
        if k > 0 and W[1, k - 1] == sx[d] * shape[d] and W[2, k - 1] == sy[d] * shape[d]:
            W[0, k - 1] *= shape[d]
            W[1, k - 1] = sx[d]
            W[2, k - 1] = sy[d]
        else:
            W[0, k] = shape[d]
            W[1, k] = sx[d]
            W[2, k] = sy[d]
            k += 1
    if k == 0:                      # every dim is 1: one element
        W[0, 0] = 1
        W[1, 0] = 0
        W[2, 0] = 0
        k = 1
    return k


@jit
def _add_row(D, pd, sd, S, ps, ss, inner, scale):
    """D[pd + j * sd] += S[ps + j * ss] * scale for j < inner, with unit-stride versions
    for a contiguous row of D (slices: with pd + j, Numba's negative-index wrap keeps
    LLVM from vectorising)."""
    if sd == 1 and ss == 1:
        dst = D[pd:pd + inner]
        src = S[ps:ps + inner]
        for j in range(inner):
            dst[j] += src[j] * scale
    elif sd == 1 and ss == 0:
        v = S[ps] * scale
        dst = D[pd:pd + inner]
        for j in range(inner):
            dst[j] += v
    elif sd == 0 and ss == 1:       # a row summed into one element: reassociated
        D[pd] += vsum(S[ps:ps + inner], 0.0) * scale
    else:
        for j in range(inner):
            D[pd + j * sd] += S[ps + j * ss] * scale


@jit
def _memory_order(sx):
    """The dims in the order that walks X's memory forwards: strides descending, stride-0
    dims outermost, as PyTorch's TensorIterator reorders them (stable: a row-major X keeps
    its order). Summing a transposed view row-major goes down its columns, over ten
    times slower than PyTorch."""
    nd = sx.shape[0]
    perm = np.arange(nd)
    for i in range(1, nd):
        p = perm[i]
        kp = abs(sx[p]) if sx[p] != 0 else _STRIDE0_LAST
        j = i
        while j > 0:
            q = perm[j - 1]
            kq = abs(sx[q]) if sx[q] != 0 else _STRIDE0_LAST
            if kq >= kp:
                break
            perm[j] = q
            j -= 1
        perm[j] = p
    return perm


@jit
def _walk_plan(shape, sx, sy):
    """(W, nd): the dims of a walk over X (strides sx) and Y (sy) in X's memory order,
    merged where they can be: W's rows 0-3 hold shape, sx, sy and a zeroed index."""
    W = np.zeros((4, max(shape.shape[0], 1)), np.int64)
    perm = _memory_order(sx)
    return W, _coalesce(shape[perm], sx[perm], sy[perm], W)


@jit
def _odometer(shape, sx, sy, X, Y, accumulate_into_y, scale):
    """Walk an index space: Y[py] += X[px] * scale (accumulate) or, for broadcasting a
    gradient back, X[px] += Y[py] * scale. The inner loop has unit-stride versions
    (vectorised) for the layouts sums and broadcasts make."""
    n = 1
    for d in range(shape.shape[0]):
        n *= shape[d]
    if n == 0:
        return
    W, nd = _walk_plan(shape, sx, sy)
    shape, sx, sy, idx = W[0, :nd], W[1, :nd], W[2, :nd], W[3, :nd]
    inner = shape[nd - 1]
    ix = sx[nd - 1]
    iy = sy[nd - 1]
    if (nd == 2 and ix == 1 and sy[0] == 1 and iy > 1 and sx[0] > 1 and shape[0] >= 16
            and inner >= 16):       # a transposition (the backward of x.t(), ...): tiles
        if accumulate_into_y:       # Y[i + j * iy] += X[i * sx0 + j]: rows j of Y
            transposed_tiles(Y, iy, X, sx[0], inner, shape[0], scale, True)
        else:                       # X[i * sx0 + j] += Y[i + j * iy]
            transposed_tiles(X, sx[0], Y, iy, shape[0], inner, scale, True)
        return
    px = 0
    py = 0
    done = 0
    while done < n:
        if accumulate_into_y:
            _add_row(Y, py, iy, X, px, ix, inner, scale)
        else:
            _add_row(X, px, ix, Y, py, iy, inner, scale)
        done += inner
        px, py = _step(idx, shape, sx, sy, px, py, nd - 2)


@jit
def input_grad(C, row):
    """(address, shape) of the gradient buffer of input 0 of row; address 0 when no
    gradient is wanted."""
    ga = edge_grad_addr(C, row, 0)
    ishape = np.empty(MAXD, np.int64)
    nd = input_shape(C, row, 0, ishape) if ga != 0 else 0
    return ga, ishape[:nd].copy()


@jit
def scatter_grad(C, row, ga, n_ga, space, sx, sy, scale):
    """GA += G * scale, walking the index space `space` with strides sx in GA and sy in
    the row's incoming gradient G: the backward of every op that only moves, broadcasts
    or sums elements (views, expand, unbind, sum, mean)."""
    T = tape_of(C)
    g = row_grad_addr(C, row, 0)
    n = out_numel(T, row) * T[row, R_NOUT]
    if T[row, R_ODTYPE] == F32:
        _odometer(space, sx, sy, f32_at(ga, n_ga), f32_at(g, n), False, np.float32(scale))
    else:
        _odometer(space, sx, sy, f64_at(ga, n_ga), f64_at(g, n), False, scale)


@jit
def numel(shape):
    n = 1
    for d in range(shape.shape[0]):
        n *= shape[d]
    return n


@jit_reduction
def _sum_contiguous(A, n):
    acc = 0.0
    for i in range(n):
        acc += A[i]
    return acc


@jit
def is_contiguous_layout(shape, strides):
    """Whether strides lay shape out row-major without gaps (size-1 dims aside)."""
    s = 1
    for d in range(shape.shape[0] - 1, -1, -1):
        if shape[d] != 1 and strides[d] != s:
            return False
        s *= shape[d]
    return True


@jit
def _sum_into(A, shape, ast, acc, ost, scale, O):
    n = 1
    full = True
    for d in range(shape.shape[0]):
        n *= shape[d]
        full = full and ost[d] == 0
    contiguous = is_contiguous_layout(shape, ast)
    nd = shape.shape[0]
    k = nd                          # reduced dims are exactly dims k.. (trailing)?
    while k > 0 and ost[k - 1] == 0:
        k -= 1
    trailing = True
    for d in range(k):
        if ost[d] == 0 and shape[d] != 1:
            trailing = False
    if full and contiguous:         # x.sum(): one vectorised pass
        acc[0] = _sum_contiguous(A, n)
    elif contiguous and trailing and acc.shape[0] > 0:
        m = n // acc.shape[0]       # x.sum(-1) and friends: one vectorised pass per row
        for o in range(acc.shape[0]):
            acc[o] = _sum_contiguous(A[o * m:(o + 1) * m], m)
    else:
        _odometer(shape, ast, ost, A, acc, True, 1.0)
    for i in range(O.shape[0]):
        O[i] = acc[i] * scale


@jit
def _reduction_output(C, row):
    """_reduction_input and the (contiguous) output; out < 0 is the status to return."""
    a, dt, mask, shape, ast, oshape, ost = _reduction_input(C, row)
    out = make_output(C, dt, oshape.shape[0], oshape) if dt >= 0 else E_DTYPE
    return a, dt, mask, shape, ast, ost, out


def sum_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    a, dt, mask, shape, ast, ost, out = _reduction_output(C, row)
    if out < 0:
        return out
    n = M[out, M_NUMEL]
    count = 1
    for d in range(shape.shape[0]):
        if (mask >> d) & 1:
            count *= shape[d]
    scale = 1.0 / count if T[row, R_IATTR + 2] and count > 0 else (np.nan if T[row, R_IATTR + 2] else 1.0)
    acc = np.zeros(n, np.float64)
    if dt == F32:
        _sum_into(f32_at(data_addr(C, a), span(M, a)), shape, ast, acc, ost, scale,
                  f32_at(data_addr(C, out), n))
    else:
        _sum_into(f64_at(data_addr(C, a), span(M, a)), shape, ast, acc, ost, scale,
                  f64_at(data_addr(C, out), n))
    return set_outputs1(C, out)


def sum_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    ga, shape = input_grad(C, row)
    if ga == 0:
        return K_OK
    nd = shape.shape[0]
    mask = T[row, R_IATTR]
    count = 1
    ost = np.zeros(nd, np.int64)          # the (keepdim) output seen from the input
    s = 1
    for d in range(nd - 1, -1, -1):
        if (mask >> d) & 1:
            count *= shape[d]
        else:
            ost[d] = s
            s *= shape[d]
    scale = 1.0 / count if T[row, R_IATTR + 2] else 1.0
    scatter_grad(C, row, ga, numel(shape), shape, contiguous_strides(nd, shape), ost, scale)
    return K_OK


# ------------------------------------------------------------------ nansum
@jit
def _nansum_into(A, shape, ast, ost, O):
    """O = the sums over the reduced dims (ost 0) of A's elements that are not NaN,
    accumulated in float64 in memory order."""
    nd = shape.shape[0]
    acc = np.zeros(O.shape[0], np.float64)
    idx = np.zeros(max(nd, 1), np.int64)
    px = 0
    py = 0
    for _ in range(numel(shape)):
        v = A[px]
        if v == v:
            acc[py] += v
        px, py = _step(idx, shape, ast, ost, px, py, nd - 1)
    for i in range(O.shape[0]):
        O[i] = acc[i]


@jit
def _nansum_grad(A, shape, ast, ost, G, GA):
    """GA (contiguous) += G broadcast back over the reduced dims, 0 where A is NaN."""
    nd = shape.shape[0]
    idx = np.zeros(max(nd, 1), np.int64)
    px = 0
    py = 0
    for k in range(numel(shape)):
        if A[px] == A[px]:
            GA[k] += G[py]
        px, py = _step(idx, shape, ast, ost, px, py, nd - 1)


def nansum_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    a, dt, mask, shape, ast, ost, out = _reduction_output(C, row)
    if out < 0:
        return out
    n = M[out, M_NUMEL]
    if dt == F32:
        _nansum_into(f32_at(data_addr(C, a), span(M, a)), shape, ast, ost,
                     f32_at(data_addr(C, out), n))
    else:
        _nansum_into(f64_at(data_addr(C, a), span(M, a)), shape, ast, ost,
                     f64_at(data_addr(C, out), n))
    return set_outputs1(C, out)


def nansum_bwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    ga = edge_grad_addr(C, row, 0)
    if ga == 0:
        return K_OK
    sa = T[row, R_IN + IN_SAVED]
    shape, ast, oshape, ost = _reduced_layout(M, sa, T[row, R_IATTR], T[row, R_IATTR + 1])
    n = M[sa, M_NUMEL]
    no = out_numel(T, row)
    g = row_grad_addr(C, row, 0)
    if T[row, R_ODTYPE] == F32:
        _nansum_grad(f32_at(data_addr(C, sa), span(M, sa)), shape, ast, ost, f32_at(g, no),
                     f32_at(ga, n))
    else:
        _nansum_grad(f64_at(data_addr(C, sa), span(M, sa)), shape, ast, ost, f64_at(g, no),
                     f64_at(ga, n))
    return K_OK


# ------------------------------------------------------------------ max / min
@jit
def _better(v, best, is_min):
    if v != v:
        return best == best         # NaN wins (propagates), the first one is kept
    if is_min:
        return v < best
    return v > best


@jit
def _extreme_all(A, shape, ast, is_min):
    nd = shape.shape[0]
    n = 1
    for d in range(nd):
        n *= shape[d]
    idx = np.zeros(max(nd, 1), np.int64)
    best = A[0]
    for k in range(n):
        p = 0
        for d in range(nd):
            p += idx[d] * ast[d]
        v = A[p]
        if k == 0 or _better(v, best, is_min):
            best = v
        d = nd - 1
        while d >= 0:
            idx[d] += 1
            if idx[d] < shape[d]:
                break
            idx[d] = 0
            d -= 1
    return best


def extreme_all_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    a = input_id(C, row, 0)
    dt = M[a, M_DTYPE]
    if dt != F32 and dt != F64:
        return E_DTYPE
    nd = M[a, M_NDIM]
    shape = M[a, M_SHAPE:M_SHAPE + nd].copy()
    ast = M[a, M_STRIDE:M_STRIDE + nd].copy()
    out = make_output(C, dt, 0, shape[:0])
    if out < 0:
        return out
    is_min = T[row, R_IATTR + 2] != 0
    if dt == F32:
        f32_at(data_addr(C, out), 1)[0] = _extreme_all(f32_at(data_addr(C, a), span(M, a)),
                                                       shape, ast, is_min)
    else:
        f64_at(data_addr(C, out), 1)[0] = _extreme_all(f64_at(data_addr(C, a), span(M, a)),
                                                       shape, ast, is_min)
    return set_outputs1(C, out)


@jit
def _distribute(A, shape, ast, best, g, GA):
    """Gradient of an all-reduce max/min: split evenly among the elements equal to it."""
    nd = shape.shape[0]
    n = GA.shape[0]
    count = 0
    idx = np.zeros(max(nd, 1), np.int64)
    hits = np.zeros(n, np.bool_)
    for k in range(n):
        p = 0
        for d in range(nd):
            p += idx[d] * ast[d]
        v = A[p]
        if v == best or (v != v and best != best):
            hits[k] = True
            count += 1
        d = nd - 1
        while d >= 0:
            idx[d] += 1
            if idx[d] < shape[d]:
                break
            idx[d] = 0
            d -= 1
    if count == 0:
        return
    share = g / count
    for k in range(n):
        if hits[k]:
            GA[k] += share


def extreme_all_bwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    ga = edge_grad_addr(C, row, 0)
    if ga == 0:
        return K_OK
    sa = T[row, R_IN + IN_SAVED]
    so = T[row, R_OSAVED]
    nd = M[sa, M_NDIM]
    shape = M[sa, M_SHAPE:M_SHAPE + nd].copy()
    ast = M[sa, M_STRIDE:M_STRIDE + nd].copy()
    n = M[sa, M_NUMEL]
    g = row_grad_addr(C, row, 0)
    if T[row, R_ODTYPE] == F32:
        _distribute(f32_at(data_addr(C, sa), span(M, sa)), shape, ast,
                    f32_at(data_addr(C, so), 1)[0], f32_at(g, 1)[0], f32_at(ga, n))
    else:
        _distribute(f64_at(data_addr(C, sa), span(M, sa)), shape, ast,
                    f64_at(data_addr(C, so), 1)[0], f64_at(g, 1)[0], f64_at(ga, n))
    return K_OK


# ------------------------------------------------------------------ amax / amin
# The walk of sums (_memory_order, _coalesce, rows) with a NaN-propagating max or min per
# row: element by element with a multi-index step each, forward and backward took over
# twenty times PyTorch's time.
@jit
def _combine(a, b, is_min):
    """max (min) of a running value a and b; NaN sticks, as in PyTorch."""
    return pick(b != b or (b < a if is_min else b > a), b, a)


@jit
def _extreme_row(Y, py, iy, X, px, ix, inner, is_min):
    """Y[py + j * iy] = combine(Y[...], X[px + j * ix]) for j < inner."""
    if iy == 0 and ix == 1:
        R = X[px:px + inner]
        m = R[0]
        nan = False
        if is_min:
            for j in range(inner):
                m = minnum(m, R[j])
                nan |= R[j] != R[j]
        else:
            for j in range(inner):
                m = maxnum(m, R[j])
                nan |= R[j] != R[j]
        Y[py] = np.nan if nan else _combine(Y[py], m, is_min)
    elif iy == 1 and ix == 1:
        D = Y[py:py + inner]
        S = X[px:px + inner]
        for j in range(inner):
            D[j] = _combine(D[j], S[j], is_min)
    else:
        for j in range(inner):
            Y[py + j * iy] = _combine(Y[py + j * iy], X[px + j * ix], is_min)


@jit
def _hits_row(A, pa, ia, O, po, io, inner, G, GA, count, second):
    """First pass: count[po + j * io] += A[...] == O[...]; second: GA[pa + j * ia] +=
    G[...] / count[...] * (A[...] == O[...]) (GA shares A's layout): PyTorch's gradient,
    split evenly among the elements equal to the result, and NaN along a line whose
    result is NaN (no element equals it: g / 0 * 0)."""
    if io == 0 and ia == 1:
        R = A[pa:pa + inner]
        o = O[po]
        if not second:
            c = 0
            for j in range(inner):
                c += R[j] == o
            count[po] += c
        else:
            Gr = GA[pa:pa + inner]
            v = G[po] / count[po]
            for j in range(inner):
                Gr[j] += v * pick(R[j] == o, 1.0, 0.0)
    else:
        for j in range(inner):
            q = po + j * io
            p = pa + j * ia
            if not second:
                count[q] += A[p] == O[q]
            else:
                GA[p] += G[q] / count[q] * pick(A[p] == O[q], 1.0, 0.0)


@jit
def _extreme_walk(shape, sx, sy, X, Y, is_min, G, GA, count, mode):
    """Walk X (strides sx) against the reduced Y (sy) in X's memory order, a row at a
    time: mode 0 reduces X into Y; 1 counts X's elements equal to Y's; 2 adds G / count to
    GA (laid out as X) where they are equal."""
    n = numel(shape)
    if n == 0:
        return
    W, nd = _walk_plan(shape, sx, sy)
    shape, sx, sy, idx = W[0, :nd], W[1, :nd], W[2, :nd], W[3, :nd]
    inner = shape[nd - 1]
    px = 0
    py = 0
    done = 0
    while done < n:
        if mode == 0:
            _extreme_row(Y, py, sy[nd - 1], X, px, sx[nd - 1], inner, is_min)
        else:
            _hits_row(X, px, sx[nd - 1], Y, py, sy[nd - 1], inner, G, GA, count, mode == 2)
        done += inner
        px, py = _step(idx, shape, sx, sy, px, py, nd - 2)


def amax_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    a, dt, mask, shape, ast, ost, out = _reduction_output(C, row)
    if out < 0:
        return out
    n = M[out, M_NUMEL]
    is_min = T[row, R_IATTR + 2] != 0
    start = np.inf if is_min else -np.inf
    if dt == F32:
        O = f32_at(data_addr(C, out), n)
        O[:] = start
        _extreme_walk(shape, ast, ost, f32_at(data_addr(C, a), span(M, a)), O, is_min,
                      O[:0], O[:0], np.empty(0), 0)
    else:
        O64 = f64_at(data_addr(C, out), n)
        O64[:] = start
        _extreme_walk(shape, ast, ost, f64_at(data_addr(C, a), span(M, a)), O64, is_min,
                      O64[:0], O64[:0], np.empty(0), 0)
    return set_outputs1(C, out)


@jit
def _amax_grad(A, shape, ast, ost, O, G, GA):
    """GA (contiguous) += the gradient of amax/amin (see _hits_row): by rows in memory
    order when A is contiguous (it shares GA's layout), else element by element."""
    nd = shape.shape[0]
    count = np.zeros(O.shape[0], np.float64)
    n = numel(shape)
    if is_contiguous_layout(shape, ast):
        _extreme_walk(shape, ast, ost, A, O, False, G, GA, count, 1)
        _extreme_walk(shape, ast, ost, A, O, False, G, GA, count, 2)
        return
    idx = np.zeros(max(nd, 1), np.int64)
    px = 0
    py = 0
    for _ in range(n):
        if A[px] == O[py]:
            count[py] += 1.0
        px, py = _step(idx, shape, ast, ost, px, py, nd - 1)
    px = 0
    py = 0
    for k in range(n):
        hit = 1.0 if A[px] == O[py] else 0.0
        GA[k] += G[py] / count[py] * hit
        px, py = _step(idx, shape, ast, ost, px, py, nd - 1)


def amax_bwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    ga = edge_grad_addr(C, row, 0)
    if ga == 0:
        return K_OK
    sa = T[row, R_IN + IN_SAVED]
    so = T[row, R_OSAVED]
    shape, ast, oshape, ost = _reduced_layout(M, sa, T[row, R_IATTR], T[row, R_IATTR + 1])
    n = M[sa, M_NUMEL]
    no = M[so, M_NUMEL]
    g = row_grad_addr(C, row, 0)
    if T[row, R_ODTYPE] == F32:
        _amax_grad(f32_at(data_addr(C, sa), span(M, sa)), shape, ast, ost,
                   f32_at(data_addr(C, so), no), f32_at(g, no), f32_at(ga, n))
    else:
        _amax_grad(f64_at(data_addr(C, sa), span(M, sa)), shape, ast, ost,
                   f64_at(data_addr(C, so), no), f64_at(g, no), f64_at(ga, n))
    return K_OK


@jit
def _advance_skipping(idx, shape, skip):
    """Step a row-major multi-index over every dim except skip."""
    d = shape.shape[0] - 1
    while d >= 0:
        if d == skip:
            d -= 1
            continue
        idx[d] += 1
        if idx[d] < shape[d]:
            return
        idx[d] = 0
        d -= 1


@jit
def _reduced_dim(mask, nd):
    """The single reduced dim of a max/min(dim) row; -1 for a 0-d input."""
    for d in range(nd):
        if (mask >> d) & 1:
            return d
    return -1


@jit
def _extreme_dim(A, shape, ast, dim, V, I, is_min):
    """Values and first indices of the max/min along dim; outputs are contiguous over the
    other dims (keepdim or not, the element order is the same)."""
    nd = shape.shape[0]
    if dim < 0:                 # a 0-d input: its only element, index 0
        V[0] = A[0]
        I[0] = 0
        return
    m = shape[dim]
    sd = ast[dim]
    nout = V.shape[0]
    idx = np.zeros(max(nd, 1), np.int64)
    for o in range(nout):
        p = 0
        for d in range(nd):
            p += idx[d] * ast[d]
        best = A[p]
        bi = 0
        for j in range(1, m):
            v = A[p + j * sd]
            if _better(v, best, is_min):
                best = v
                bi = j
        V[o] = best
        I[o] = bi
        _advance_skipping(idx, shape, dim)


def extreme_dim_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    a, dt, mask, shape, ast, oshape, ost = _reduction_input(C, row)
    if dt < 0:
        return E_DTYPE
    dim = _reduced_dim(mask, shape.shape[0])
    ond = oshape.shape[0]
    vals = make_output(C, dt, ond, oshape)
    if vals < 0:
        return vals
    inds = meta_contiguous(C, I64, ond, oshape, False)
    if inds < 0:
        return inds
    n = M[vals, M_NUMEL]
    is_min = T[row, R_IATTR + 2] != 0
    I = i64_at(data_addr(C, inds), n)
    if dt == F32:
        _extreme_dim(f32_at(data_addr(C, a), span(M, a)), shape, ast, dim,
                     f32_at(data_addr(C, vals), n), I, is_min)
    else:
        _extreme_dim(f64_at(data_addr(C, a), span(M, a)), shape, ast, dim,
                     f64_at(data_addr(C, vals), n), I, is_min)
    outs = outs_of(C)
    outs[0] = vals
    outs[1] = inds
    C[C_NOUTS] = 2
    return K_OK


@jit
def _scatter_dim(G, I, shape, dim, GA):
    nd = shape.shape[0]
    if dim < 0:
        GA[0] += G[0]
        return
    cs = contiguous_strides(nd, shape)
    sd = cs[dim]
    idx = np.zeros(max(nd, 1), np.int64)
    for o in range(G.shape[0]):
        p = 0
        for d in range(nd):
            p += idx[d] * cs[d]
        GA[p + I[o] * sd] += G[o]
        _advance_skipping(idx, shape, dim)


def extreme_dim_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    ga, shape = input_grad(C, row)
    if ga == 0:
        return K_OK
    nd = shape.shape[0]
    dim = _reduced_dim(T[row, R_IATTR], nd)
    n_in = 1
    for d in range(nd):
        n_in *= shape[d]
    n = out_numel(T, row)
    inds = T[row, R_OSAVED]
    I = i64_at(data_addr(C, inds), n)
    g = row_grad_addr(C, row, 0)
    if T[row, R_ODTYPE] == F32:
        _scatter_dim(f32_at(g, n), I, shape, dim, f32_at(ga, n_in))
    else:
        _scatter_dim(f64_at(g, n), I, shape, dim, f64_at(ga, n_in))
    return K_OK


# the integer attributes of a reduction row, as its kernels read them (R_IATTR + k): the
# mask of reduced dims, keepdim, and what the shared kernels compute (sum or mean, the
# largest or the smallest)
_SUM_ATTRS = ("dims", "keepdim", "mean")
_EXTREME_ATTRS = ("dims", "keepdim", "which")


def _reduction(name, grad_fn, fwd, bwd, **kw):
    return register(OpDef(name, grad_fn, "custom", module=_M, fwd_fn=fwd, bwd_fn=bwd, nin=1,
                          diff=(0,), **kw))


_reduction("sum", "SumBackward0", "sum_fwd", "sum_bwd", attrs=_SUM_ATTRS)
samples("sum", "x.sum()", "L.sum(x)", Sample("x.sum()", x=T(2, 3, 4)), "x.t().sum()")
_reduction("sum_dim", "SumBackward1", "sum_fwd", "sum_bwd", attrs=_SUM_ATTRS)
samples("sum_dim", "x.sum(0)", "L.sum(x, dim=1, keepdim=True)", "x.sum(-1)", "x.sum((0, 1))",
        Sample("x.sum((0, 2))", x=T(2, 3, 4)), "x.t().sum(1)",
        errors=["x.sum(2)", "x.sum((0, 0))", "x.sum(dim=-3)"])
_reduction("mean", "MeanBackward0", "sum_fwd", "sum_bwd", attrs=_SUM_ATTRS)
samples("mean", "x.mean()", "L.mean(x)", Sample("x.mean()", x=T(2, 3, 4)))
_reduction("mean_dim", "MeanBackward1", "sum_fwd", "sum_bwd", attrs=_SUM_ATTRS)
samples("mean_dim", "x.mean(0)", "L.mean(x, dim=1, keepdim=True)", "x.mean((0, 1))",
        Sample("x.mean((0, 2))", x=T(2, 3, 4)), errors=["x.mean(2)"])
_reduction("max", "MaxBackward1", "extreme_all_fwd", "extreme_all_bwd", attrs=_EXTREME_ATTRS,
           saves_if={0: ("a", "out")})
samples("max", "x.max()", "L.max(x)", Sample("x.max()", x=T(2, 3, 4, domain=DISTINCT)),
        x=T(3, 4, domain=DISTINCT))
_reduction("min", "MinBackward1", "extreme_all_fwd", "extreme_all_bwd", attrs=_EXTREME_ATTRS,
           saves_if={0: ("a", "out")})
samples("min", "x.min()", "L.min(x)", x=T(3, 4, domain=DISTINCT))
_reduction("max_dim", "MaxBackward0", "extreme_dim_fwd", "extreme_dim_bwd", attrs=_EXTREME_ATTRS,
           saves_if={0: ("out",)}, saved_out=1)          # the indices
samples("max_dim", "x.max(1)", "L.max(x, dim=0, keepdim=True)", "x.max(-1)",
        Sample("x.max(1)", x=T(2, 3, 4, domain=DISTINCT)),
        errors=["x.max(2)"], x=T(3, 4, domain=DISTINCT))
_reduction("min_dim", "MinBackward0", "extreme_dim_fwd", "extreme_dim_bwd", attrs=_EXTREME_ATTRS,
           saves_if={0: ("out",)}, saved_out=1)
samples("min_dim", "x.min(1)", "L.min(x, dim=0, keepdim=True)", errors=["x.min(-3)"],
        x=T(3, 4, domain=DISTINCT))
WITH_NAN = Domain("[-2, 2] with every third value NaN", lambda rng, shape: np.where(
    np.arange(int(np.prod(shape))).reshape(shape) % 3 == 1, np.nan, rng.uniform(-2, 2, shape)))
def _nansum_cast(x, dtype):
    """nansum's dtype=: NaN counts as 0 before a cast to an integer or bool dtype, as in
    PyTorch (a float one keeps NaN, which the kernel skips)."""
    return x.to(dtype) if dtype.is_floating_point else x.masked_fill(x != x, 0).to(dtype)


_reduction("nansum", "NansumBackward0", "nansum_fwd", "nansum_bwd",
           attrs=("dims", "keepdim"), saves_if={0: ("a",)},
           front=Reduction(dim=None, dtype=True, numpy="sum", numpy_dtype="int64",
                           convert=_nansum_cast,
                           doc="The sum over dim (all dims by default), NaN counted as 0 (its "
                               "gradient is 0 too)."))
samples("nansum", "x.nansum()", "L.nansum(x, 1)", "x.nansum((0, 1), keepdim=True)",
        "L.nansum(x, dim=-1, dtype=L.float64)", "x.t().nansum(0)",
        Sample("x.nansum(1)", x=T(3, 4, domain=WITH_NAN)),
        errors=["x.nansum(2)", "x.nansum((0, 0))", "L.nansum(x, 1, 1)"])
_EXTREMES = dict(attrs=_EXTREME_ATTRS, saves_if={0: ("a", "out")})
_reduction("amax", "AmaxBackward0", "amax_fwd", "amax_bwd", **_EXTREMES,
           front=Reduction(attrs=dict(which=0), numpy="max", identity=False,
                           doc="The largest value over dim (all dims by default); the "
                               "gradient is shared evenly among equal maxima."))
samples("amax", "x.amax(1)", "L.amax(x, (0, 1))", "x.amax(0, keepdim=True)", "x.amax()",
        Sample("L.amax(x, (0, 2))", x=T(2, 3, 4, domain=DISTINCT)),
        errors=["x.amax(2)", "x.amax((1, 1))"], x=T(3, 4, domain=DISTINCT))
_reduction("amin", "AminBackward0", "amax_fwd", "amax_bwd", **_EXTREMES,
           front=Reduction(attrs=dict(which=1), numpy="min", identity=False,
                           doc="The smallest value over dim (all dims by default); the "
                               "gradient is shared evenly among equal minima."))
samples("amin", "x.amin(1)", "L.amin(x, (0, 1))", "x.amin(-1, keepdim=True)",
        x=T(3, 4, domain=DISTINCT))
