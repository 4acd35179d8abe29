"""Indexing ops: gathering elements by position (x[idx], x[mask], index_select, gather,
masked_select), writing them (x[key] = v), and where.

The front turns every indexing expression into *positions*: an int64 tensor, shaped like
the result, of row-major offsets into the indexed tensor, bounds-checked in Python (with
NumPy's indexing rules, which PyTorch shares). So one kernel pair serves every form, and
no kernel ever sees an unchecked index.
"""
import numpy as np

from .._engine.layout import (K_OK, F32, F64, E_DTYPE, E_VALUE, MAXD, M_DTYPE, M_NDIM, M_SHAPE,
                              M_STRIDE, M_NUMEL, R_IATTR, R_IN, IW, IN_SAVED, R_ODTYPE, R_ONDIM,
                              R_OSHAPE)
from .._engine.lowlevel import jit, ctx_of, meta_of, tape_of, iargs_of, err_of, f32_at, \
    f64_at, i64_at, u8_at
from .._engine.core import (data_addr, make_output, meta_contiguous, input_id, set_outputs1,
                            span, row_grad_addr, edge_grad_addr, input_shape, out_numel,
                            aligned_strides, aligned_contiguous_strides, is_contiguous)
from .opinfo import Fixed, Index, Mask, T
from .registry import OpDef, Sample, register, samples

_M = __name__
FV = 16     # forward-only iargs: output ndim and shape (where)


@jit
def offsets(shape, strides):
    """Element offsets of a strided layout, in row-major order."""
    nd = shape.shape[0]
    n = 1
    for d in range(nd):
        n *= shape[d]
    out = np.empty(n, np.int64)
    idx = np.zeros(max(nd, 1), np.int64)
    p = 0
    for k in range(n):
        out[k] = p
        d = nd - 1
        while d >= 0:
            idx[d] += 1
            p += strides[d]
            if idx[d] < shape[d]:
                break
            p -= strides[d] * shape[d]
            idx[d] = 0
            d -= 1
    return out


@jit
def _physical(M, t, pos):
    """Storage offsets (from t's first element) of row-major positions pos in t."""
    if is_contiguous(M, t):
        return pos
    nd = M[t, M_NDIM]
    out = np.empty(pos.shape[0], np.int64)
    for k in range(pos.shape[0]):
        r = pos[k]
        p = 0
        for d in range(nd - 1, -1, -1):
            n = M[t, M_SHAPE + d]
            p += (r % n) * M[t, M_STRIDE + d]
            r //= n
        out[k] = p
    return out


@jit
def _take(X, phys, O):
    for j in range(O.shape[0]):
        O[j] = X[phys[j]]


@jit
def _untake(G, pos, GA):
    for j in range(pos.shape[0]):
        GA[pos[j]] += G[j]


def take_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    a = input_id(C, row, 0)
    p = input_id(C, row, 1)
    dt = M[a, M_DTYPE]
    if dt != F32 and dt != F64:
        return E_DTYPE
    nd = M[p, M_NDIM]
    out = meta_contiguous(C, dt, nd, M[p, M_SHAPE:M_SHAPE + nd].copy(), False)
    if out < 0:
        return out
    n = M[p, M_NUMEL]
    phys = _physical(M, a, i64_at(data_addr(C, p), n))
    if dt == F32:
        _take(f32_at(data_addr(C, a), span(M, a)), phys, f32_at(data_addr(C, out), n))
    else:
        _take(f64_at(data_addr(C, a), span(M, a)), phys, f64_at(data_addr(C, out), n))
    return set_outputs1(C, out)


def take_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    ga = edge_grad_addr(C, row, 0)
    if ga == 0:
        return K_OK
    ishape = np.empty(MAXD, np.int64)
    nd = input_shape(C, row, 0, ishape)
    nin = 1
    for d in range(nd):
        nin *= ishape[d]
    n = out_numel(T, row)
    pos = i64_at(data_addr(C, T[row, R_IN + IW + IN_SAVED]), n)
    g = row_grad_addr(C, row, 0)
    if T[row, R_ODTYPE] == F32:
        _untake(f32_at(g, n), pos, f32_at(ga, nin))
    else:
        _untake(f64_at(g, n), pos, f64_at(ga, nin))
    return K_OK


# ---------------------------------------------------------------- x[idx]: whole rows
# input 1 is the index tensor itself (int64, contiguous; the kernel checks its values, so
# Python never reads them: a compiled replay can repeat it); the output is
# idx.shape + x.shape[1:], whose ndim and shape are forward-only iargs FV. The positions
# never exist: each index picks one row (negative ones count from the end).
@jit
def _first_bad_row(idx, rows):
    """Index of the first value outside [-rows, rows), or -1."""
    for i in range(idx.shape[0]):
        if idx[i] < -rows or idx[i] >= rows:
            return i
    return -1


@jit
def _take_rows(X, xoff, idx, rows, inner_off, O):
    k = inner_off.shape[0]
    for i in range(idx.shape[0]):
        v = idx[i]
        base = xoff * (v + rows if v < 0 else v)
        for j in range(k):
            O[i * k + j] = X[base + inner_off[j]]


@jit
def _untake_rows(G, idx, rows, k, GA):
    for i in range(idx.shape[0]):
        v = idx[i]
        base = (v + rows if v < 0 else v) * k
        dst = GA[base:base + k]
        src = G[i * k:(i + 1) * k]
        for j in range(k):
            dst[j] += src[j]


def take_rows_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    ia = iargs_of(C)
    a = input_id(C, row, 0)
    p = input_id(C, row, 1)
    dt = M[a, M_DTYPE]
    if dt != F32 and dt != F64:
        return E_DTYPE
    m = M[p, M_NUMEL]
    idx = i64_at(data_addr(C, p), m)
    rows = M[a, M_SHAPE]
    bad = _first_bad_row(idx, rows)
    if bad >= 0:                    # (checked before anything is made: nothing to undo)
        err_of(C)[1] = idx[bad]
        err_of(C)[2] = rows
        return E_VALUE
    nd = ia[FV]
    out = meta_contiguous(C, dt, nd, ia[FV + 1:FV + 1 + nd].copy(), False)
    if out < 0:
        return out
    M = meta_of(C)
    na = M[a, M_NDIM]
    inner_off = offsets(M[a, M_SHAPE + 1:M_SHAPE + na].copy(),
                        M[a, M_STRIDE + 1:M_STRIDE + na].copy())
    n = m * inner_off.shape[0]
    if dt == F32:
        _take_rows(f32_at(data_addr(C, a), span(M, a)), M[a, M_STRIDE], idx, rows, inner_off,
                   f32_at(data_addr(C, out), n))
    else:
        _take_rows(f64_at(data_addr(C, a), span(M, a)), M[a, M_STRIDE], idx, rows, inner_off,
                   f64_at(data_addr(C, out), n))
    return set_outputs1(C, out)


def take_rows_bwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    ga = edge_grad_addr(C, row, 0)
    if ga == 0:
        return K_OK
    ishape = np.empty(MAXD, np.int64)
    nd = input_shape(C, row, 0, ishape)
    nin = 1
    for d in range(nd):
        nin *= ishape[d]
    k = nin // ishape[0] if ishape[0] > 0 else 0
    sp = T[row, R_IN + IW + IN_SAVED]
    m = M[sp, M_NUMEL]
    idx = i64_at(data_addr(C, sp), m)
    g = row_grad_addr(C, row, 0)
    if T[row, R_ODTYPE] == F32:
        _untake_rows(f32_at(g, m * k), idx, ishape[0], k, f32_at(ga, nin))
    else:
        _untake_rows(f64_at(g, m * k), idx, ishape[0], k, f64_at(ga, nin))
    return K_OK


# ---------------------------------------------------------------- x[key] = v
# in place on input 0; input 1 the positions, input 2 the values (shaped like the
# positions, any layout); attrs [0]: 1 to accumulate (index_put_(accumulate=True))
@jit
def _put(X, phys, V, vphys, acc, dense):
    """X[phys[j]] = (or +=) the j-th value: V[j] when V is contiguous (dense), else
    V[vphys[j]]."""
    for j in range(phys.shape[0]):
        vj = V[j] if dense else V[vphys[j]]
        if acc:
            X[phys[j]] += vj
        else:
            X[phys[j]] = vj


def index_put_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    x = input_id(C, row, 0)
    p = input_id(C, row, 1)
    v = input_id(C, row, 2)
    dt = M[x, M_DTYPE]
    if (dt != F32 and dt != F64) or M[v, M_DTYPE] != dt:
        return E_DTYPE
    nd = M[x, M_NDIM]
    out = make_output(C, dt, nd, M[x, M_SHAPE:M_SHAPE + nd].copy())
    if out < 0:
        return out
    n = M[p, M_NUMEL]
    phys = _physical(M, x, i64_at(data_addr(C, p), n))
    nv = M[v, M_NDIM]
    # (contiguous values are read in order: no table of their offsets)
    dense = is_contiguous(M, v) and M[v, M_NUMEL] == n
    vphys = np.empty(0, np.int64) if dense else offsets(M[v, M_SHAPE:M_SHAPE + nv].copy(),
                                                        M[v, M_STRIDE:M_STRIDE + nv].copy())
    acc = T[row, R_IATTR] != 0
    if dt == F32:
        _put(f32_at(data_addr(C, x), span(M, x)), phys, f32_at(data_addr(C, v), span(M, v)),
             vphys, acc, dense)
    else:
        _put(f64_at(data_addr(C, x), span(M, x)), phys, f64_at(data_addr(C, v), span(M, v)),
             vphys, acc, dense)
    return set_outputs1(C, out)


@jit
def _put_grads(G, pos, GX, GV, want_x, want_v, acc):
    if want_x:
        if acc:
            for i in range(G.shape[0]):
                GX[i] += G[i]
        else:
            keep = np.ones(G.shape[0], np.bool_)
            for j in range(pos.shape[0]):
                keep[pos[j]] = False
            for i in range(G.shape[0]):
                if keep[i]:
                    GX[i] += G[i]
    if want_v:
        for j in range(pos.shape[0]):
            GV[j] += G[pos[j]]


def index_put_bwd(caddr, row):
    C = ctx_of(caddr)
    T = tape_of(C)
    M = meta_of(C)
    gx = edge_grad_addr(C, row, 0)
    gv = edge_grad_addr(C, row, 2)
    if gx == 0 and gv == 0:
        return K_OK
    n = out_numel(T, row)
    sp = T[row, R_IN + IW + IN_SAVED]
    m = M[sp, M_NUMEL]
    pos = i64_at(data_addr(C, sp), m)
    g = row_grad_addr(C, row, 0)
    acc = T[row, R_IATTR] != 0
    if T[row, R_ODTYPE] == F32:
        _put_grads(f32_at(g, n), pos, f32_at(gx, n if gx else 0), f32_at(gv, m if gv else 0),
                   gx != 0, gv != 0, acc)
    else:
        _put_grads(f64_at(g, n), pos, f64_at(gx, n if gx else 0), f64_at(gv, m if gv else 0),
                   gx != 0, gv != 0, acc)
    return K_OK


# ---------------------------------------------------------------- where
# inputs: x, y (same float dtype), the condition (bool) third; all broadcast
@jit
def _where(Cd, oc, X, ox, Y, oy, O):
    for j in range(O.shape[0]):
        O[j] = X[ox[j]] if Cd[oc[j]] else Y[oy[j]]


@jit
def _where_grad(Cd, oc, G, GX, ogx, GY, ogy, want_x, want_y):
    for j in range(G.shape[0]):
        if Cd[oc[j]]:
            if want_x:
                GX[ogx[j]] += G[j]
        elif want_y:
            GY[ogy[j]] += G[j]


@jit
def _aligned_offsets(M, t, nd, shape):
    st = np.zeros(MAXD, np.int64)
    aligned_strides(M, t, nd, shape, st)
    return offsets(shape, st[:nd].copy())


def where_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    ia = iargs_of(C)
    x = input_id(C, row, 0)
    y = input_id(C, row, 1)
    c = input_id(C, row, 2)
    dt = M[x, M_DTYPE]
    if (dt != F32 and dt != F64) or M[y, M_DTYPE] != dt:
        return E_DTYPE
    nd = ia[FV]
    shape = ia[FV + 1:FV + 1 + nd].copy()
    out = meta_contiguous(C, dt, nd, shape, False)
    if out < 0:
        return out
    n = M[out, M_NUMEL]
    oc = _aligned_offsets(M, c, nd, shape)
    ox = _aligned_offsets(M, x, nd, shape)
    oy = _aligned_offsets(M, y, nd, shape)
    Cd = u8_at(data_addr(C, c), span(M, c))
    if dt == F32:
        _where(Cd, oc, f32_at(data_addr(C, x), span(M, x)), ox,
               f32_at(data_addr(C, y), span(M, y)), oy, f32_at(data_addr(C, out), n))
    else:
        _where(Cd, oc, f64_at(data_addr(C, x), span(M, x)), ox,
               f64_at(data_addr(C, y), span(M, y)), oy, f64_at(data_addr(C, out), n))
    return set_outputs1(C, out)


@jit
def _grad_offsets(C, row, k, nd, shape):
    ishape = np.empty(MAXD, np.int64)
    ni = input_shape(C, row, k, ishape)
    st = np.zeros(MAXD, np.int64)
    aligned_contiguous_strides(ni, ishape, nd, shape, st)
    m = 1
    for d in range(ni):
        m *= ishape[d]
    return offsets(shape, st[:nd].copy()), m


def where_bwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    gx = edge_grad_addr(C, row, 0)
    gy = edge_grad_addr(C, row, 1)
    if gx == 0 and gy == 0:
        return K_OK
    nd = T[row, R_ONDIM]
    shape = T[row, R_OSHAPE:R_OSHAPE + nd].copy()
    n = out_numel(T, row)
    c = T[row, R_IN + 2 * IW + IN_SAVED]
    oc = _aligned_offsets(M, c, nd, shape)
    Cd = u8_at(data_addr(C, c), span(M, c))
    ogx = ogy = np.zeros(0, np.int64)   # (an input that wants no gradient is not kept:
    mx = my = 0                         # its shape is not on the tape to read)
    if gx != 0:
        ogx, mx = _grad_offsets(C, row, 0, nd, shape)
    if gy != 0:
        ogy, my = _grad_offsets(C, row, 1, nd, shape)
    g = row_grad_addr(C, row, 0)
    if T[row, R_ODTYPE] == F32:
        _where_grad(Cd, oc, f32_at(g, n), f32_at(gx, mx if gx else 0), ogx,
                    f32_at(gy, my if gy else 0), ogy, gx != 0, gy != 0)
    else:
        _where_grad(Cd, oc, f64_at(g, n), f64_at(gx, mx if gx else 0), ogx,
                    f64_at(gy, my if gy else 0), ogy, gx != 0, gy != 0)
    return K_OK


def _row_out_of_bounds(e):
    """PyTorch's words for a row index past the end."""
    if e.code != E_VALUE:
        return None
    return IndexError(f"index {int(e.err[1])} is out of bounds for dimension 0 with size "
                      f"{int(e.err[2])}")


def _index_op(name, grad_fn, fwd, bwd, nin, diff, saves_if, edges=None, errors=None,
              attrs=()):
    op = OpDef(name, grad_fn, "custom", module=_M, fwd_fn=fwd, bwd_fn=bwd, nin=nin, diff=diff,
               saves_if=saves_if, errors=errors, attrs=attrs)
    op.edges = edges
    return register(op)


for _name, _grad_fn in (("index", "IndexBackward0"), ("index_select", "IndexSelectBackward0"),
                        ("gather", "GatherBackward0"), ("masked_select", "MaskedSelectBackward0")):
    # input 2: the user's index or mask tensor (when there is one), saved as PyTorch saves
    # it, only to be version-checked (the kernels read the positions, input 1); gather
    # saves its input too, as PyTorch does; next_functions: the input's alone, as PyTorch's
    _index_op(_name, _grad_fn, "take_fwd", "take_bwd", 3, (0,),
              {0: ("a", "b", "c") if _name == "gather" else ("b", "c")}, edges=(0,))
_READS = "the front computes the positions from the index values in Python (NumPy)"
samples("index", "x[[0, 2]]", "x[m]", "x[i, j]", "x[:, j]", "x[k.t()]", "x[[0, 1], [2, 2]]",
        errors=["x[[0, 3]]", Sample("x[m]", m=Mask(3, 5))], replay=_READS, x=T(3, 4),
        i=Index(2, high=3), j=Index(2, high=4), k=Index(2, 2, high=3), m=Mask(3, 4))
samples("index_select", "x.index_select(1, j)", "L.index_select(x, 0, i)",
        errors=[Sample("x.index_select(0, i)", i=Fixed([0, 3])), "x.index_select(2, i)"],
        replay=_READS, x=T(3, 4), i=Index(5, high=3), j=Index(3, high=4))
samples("gather", "x.gather(1, g)", "L.gather(x, 0, h)", "x.gather(-1, g)",
        errors=[Sample("x.gather(1, g)", g=Fixed([0, 1])), Sample("x.gather(1, g)",
                                                                  g=Fixed([[0], [4], [1]]))],
        replay=_READS, x=T(3, 4), g=Index(3, 2, high=4), h=Index(2, 4, high=3))
samples("masked_select", "x.masked_select(m)", "L.masked_select(x, m)",
        Sample("x.masked_select(m)", m=Mask(4)),
        errors=[Sample("x.masked_select(m)", m=Mask(5), xfail={"error": (
            "tapegrad raises NumPy's ValueError ('shape mismatch: objects cannot be "
            "broadcast ...'), PyTorch RuntimeError('The size of tensor a (5) must match ...')")})],
        replay=_READS, x=T(3, 4), m=Mask(3, 4))
_index_op("index_rows", "IndexBackward0", "take_rows_fwd", "take_rows_bwd", 2, (0,),
          {0: ("b",)}, edges=(0,), errors=_row_out_of_bounds)
samples("index_rows", "x[i]", Sample("x[i]", i=Index(2, 2, high=3)), "x.t()[j]",
        errors=[Sample("x[i]", i=Fixed([0, 3]))], x=T(3, 4), i=Index(5, high=3),
        j=Index(2, high=4))
# (next_functions: self and the values, as PyTorch's; the positions are tapegrad's)
_index_op("index_put", "IndexPutBackward0", "index_put_fwd", "index_put_bwd", 3, (0, 2),
          {0: ("b",), 2: ("b",)}, edges=(0, 2), attrs=("accumulate",))
samples("index_put", "put(x.clone(), i, v)", "put(x.clone(), i, w)", "put(x.clone(), m, 0.5)",
        "x.clone().index_put_((j,), u, accumulate=True)", "put(x.clone(), (i, i), w[0])",
        errors=[Sample("put(x.clone(), i, w)", w=T(5))], replay=_READS,
        x=T(3, 4), i=Fixed([2, 0]), j=Fixed([2, 0, 2]), v=T(2, 4), w=T(4), u=T(3, 4),
        m=Mask(3, 4))
# a write through a view (x[1:3] = v, x[0].mul_(w)) is a write into its base, as PyTorch
# records it (CopySlices); x[index_tensor] = v stays IndexPutBackward0
_index_op("copy_slices", "torch::autograd::CopySlices", "index_put_fwd", "index_put_bwd", 3,
          (0, 2), {0: ("b",), 2: ("b",)}, edges=(0, 2), attrs=("accumulate",))
samples("copy_slices", "put(x.clone(), 1, w)", "put(x.clone(), slice(0, 2), w)",
        "put(x.clone(), (slice(None), 1), u)", "put(x.clone(), (1, 2), 0.5)",
        "x.clone()[0].mul_(w)",
        errors=[Sample("put(x.clone(), 1, w)", w=T(3), xfail={"error": (
            "message: tapegrad 'shape mismatch: value tensor of shape [3] cannot be broadcast "
            "to indexing result of shape [4]', PyTorch (a copy_ into the view) 'The expanded "
            "size of the tensor (4) must match the existing size (3) at non-singleton "
            "dimension 0.  Target sizes: [4].  Tensor sizes: [3]'")})],
        x=T(3, 4), w=T(4), u=T(3))
_index_op("where", "WhereBackward0", "where_fwd", "where_bwd", 3, (0, 1),
          {0: ("c",), 1: ("c",)})
samples("where", "L.where(m, x, y)", "x.where(m, y)", Sample("L.where(m, x, y)", y=T(4)),
        Sample("L.where(m, x, y)", m=Mask(4)), Sample("L.where(m, x, 0.5)", replay=(
            "the front makes the scalar a tensor (tapegrad.tensor) inside the call")),
        errors=[Sample("L.where(m, x, y)", m=Mask(5), xfail={"error": (
            "message: tapegrad 'where: shapes [5], [3, 4] and [3, 4] cannot be broadcast "
            "together', PyTorch 'The size of tensor a (5) must match the size of tensor b "
            "(4) at non-singleton dimension 1'")})],
        x=T(3, 4), y=T(3, 4), m=Mask(3, 4))
# masked_fill with a 0-d value that requires grad: where(mask, value, x)
_index_op("masked_fill_tensor", "MaskedFillBackward1", "where_fwd", "where_bwd", 3, (0, 1),
          {0: ("c",), 1: ("c",)})
samples("masked_fill_tensor", "x.masked_fill(m, v)", "L.masked_fill(x, m, v)",
        Sample("x.masked_fill(m, v)", m=Mask(4)),
        errors=[Sample("x.masked_fill(m, v)", v=T(2))],
        replay="the front reads the mask with NumPy (_bool_mask) before the where row",
        x=T(3, 4), v=T(), m=Mask(3, 4))
