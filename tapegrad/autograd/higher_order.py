"""Gradients that are themselves recorded: backward and autograd.grad with create_graph=True.

The compiled sweep computes gradients with kernels, off the tape. With create_graph the
sweep walks the same rows in reverse but computes each row's vector-Jacobian product with
tensor ops, in grad mode, so the gradient becomes rows of the tape like any other
computation: it has grad_fns, version checks, and can be differentiated again, to any
order. The inputs a row's product reads are its saved values, re-attached to the graph
(an alias of the saved memory whose history is the input's: its producing row and output
index), so a second backward reaches through them to the first forward.

Each row's product is read off its op's definition: the elementwise ops' gradient
formulas (the same strings their backward kernels are compiled from) are evaluated with
tensor ops; the other ops have their product written here in tensor ops (VJPS). An op
with neither raises, naming it: a gradient is never silently short.
"""
import ast
import functools
import math
import struct
import sys
import warnings

from .._engine import layout as L
from .._engine import core
from .._engine.state import engine, GRAD_MODE
from .._front.tensor import Tensor, _wrap, _wrap_leaf, _check_not_stale
from .._front.indexing import _contiguous_strides
from .._front.nodes import FUNCTION_ROWS, ROW_HOOKS
from .function import FREED_GRAPH
from .._front.tensor import LEAF_HOOKS
from ..ops.registry import OPS

__all__ = ["backward", "grad"]


# ---------------------------------------------------------------- a row, seen from Python
class _Row:
    """What a row's vector-Jacobian product reads: inputs and output as tensors attached
    to the graph, attributes by name, shapes."""

    def __init__(self, r):
        E = engine()
        self.r = r
        self.T = E.tape[r].tolist()         # (one read: Python indexes a list faster)
        self.op = OPS[self.T[L.R_OP]]
        self.nin = self.T[L.R_NIN]

    def edge(self, k):
        base = L.R_IN + k * L.IW
        return self.T[base + L.IN_ROW], self.T[base + L.IN_OIDX], self.T[base + L.IN_T]

    wanted = None           # autograd.grad: (rows leading to an input, leaf ids, row outputs)

    def needs(self, k):
        """Whether input k takes a gradient: it has a producing row or is a leaf, and (for
        autograd.grad) leads to one of the inputs asked for."""
        pr, oidx, t = self.edge(k)
        if self.wanted is None:
            return pr >= 0 or t >= 0
        useful, leaves, outputs = self.wanted
        return pr in useful or (pr, oidx) in outputs if pr >= 0 else t in leaves

    def _saved(self, sv, ver, what):
        E = engine()
        if sv < 0:
            raise RuntimeError(f"tapegrad: create_graph: {self.op.grad_fn} did not save "
                               f"{what}, which its double backward reads")
        now = int(E.stor[E.meta[sv, L.M_VSID], L.S_VERSION])
        if now != ver:
            from . import _describe
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by "
                f"an inplace operation: {_describe(sv)} is at version {now}; expected "
                f"version {ver} instead. Hint: the backward of {self.op.grad_fn} reads it.")
        return sv

    def input(self, k):
        """Input k as the forward saw it, attached to the graph."""
        base = L.R_IN + k * L.IW
        pr, oidx, t = self.edge(k)
        sv = int(self.T[base + L.IN_SAVED])
        if t >= 0 and pr < 0:
            if sv >= 0:
                self._saved(sv, int(self.T[base + L.IN_VER]), f"input {k}")
            return _wrap_leaf(t)
        sv = self._saved(sv, int(self.T[base + L.IN_VER]), f"input {k}")
        if pr < 0:                  # a constant (no history): outside the graph
            E = engine()
            with E.lock:
                return _wrap(E.call(core.detach, sv))
        return _attached(sv, pr, oidx)

    def output(self):
        """The (saved) output, attached to the graph as this row's output."""
        sv = self._saved(int(self.T[L.R_OSAVED]), int(self.T[L.R_OVER]), "its result")
        return _attached(sv, self.r, self.op.saved_out)

    def in_shape(self, k):
        E = engine()
        pr, oidx, t = self.edge(k)
        sv = int(self.T[L.R_IN + k * L.IW + L.IN_SAVED])
        src = sv if sv >= 0 else (t if pr < 0 else -1)
        if src >= 0:
            nd = int(E.meta[src, L.M_NDIM])
            return tuple(E.meta[src, L.M_SHAPE:L.M_SHAPE + nd].tolist())
        nd = int(E.tape[pr, L.R_ONDIM])
        return tuple(E.tape[pr, L.R_OSHAPE:L.R_OSHAPE + nd].tolist())

    def out_shape(self):
        nd = int(self.T[L.R_ONDIM])
        return tuple(self.T[L.R_OSHAPE:L.R_OSHAPE + nd])

    def attr(self, name):
        for n, first, width in self.op._layout:
            if n == name:
                stop = first + width if width else L.NIATTR
                v = self.T[L.R_IATTR + first:L.R_IATTR + stop]
                return v[0] if width == 1 else v
        raise KeyError(name)

    @property
    def scalar(self):
        return float(engine().fattr[self.r])

    @property
    def scalar2(self):
        return struct.unpack("d", struct.pack("q", int(self.T[L.R_S2])))[0]


def _attached(sv, row, oidx):
    """A new tensor over saved alias sv's memory whose history is (row, oidx)."""
    E = engine()
    with E.lock:
        a = E.call(core.detach, sv)
        m = E.meta[a]
        m[L.M_ROW] = row
        m[L.M_OIDX] = oidx
        m[L.M_FLAGS] |= L.FL_REQ
        E.entry(core.incref_row)(E.caddr, row)
    return _wrap(a)


# ---------------------------------------------------------------- elementwise formulas
class _Tensorize(ast.NodeTransformer):
    """The kernels' scalar formula as tensor code: `x if c else y` becomes where(c, x, y)
    (a Python condition still picks one side), `and`/`or` elementwise."""

    def visit_IfExp(self, node):
        self.generic_visit(node)
        return ast.Call(ast.Name("_where", ast.Load()), [node.test, node.body, node.orelse], [])

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        fn = "_and" if isinstance(node.op, ast.And) else "_or"
        out = node.values[0]
        for v in node.values[1:]:
            out = ast.Call(ast.Name(fn, ast.Load()), [out, v], [])
        return out


_FORMULAS = {}


def _formula(text):
    code = _FORMULAS.get(text)
    if code is None:
        tree = ast.fix_missing_locations(_Tensorize().visit(ast.parse(text, mode="eval")))
        code = _FORMULAS[text] = compile(tree, f"<gradient formula {text}>", "eval")
    return code


class _Functions:
    """tapegrad's public functions by attribute, read from the assembled package when a
    gradient is built (this module loads before the package has them all)."""

    def __getattr__(self, name):
        return getattr(sys.modules["tapegrad"], name)


tg = _Functions()


def _names():

    def where(g, c, x, y):
        if not isinstance(c, Tensor):
            return x if c else y
        if not isinstance(x, Tensor) and not isinstance(y, Tensor):
            x = tg.zeros_like(g) + x        # (the gradient's dtype and shape)
        return tg.where(c, x, y)

    def both(x, y):
        return (x & y) if isinstance(x, Tensor) or isinstance(y, Tensor) else (x and y)

    def either(x, y):
        return (x | y) if isinstance(x, Tensor) or isinstance(y, Tensor) else (x or y)
    ns = {"_where": where, "_and": both, "_or": either, "zero": 0.0, "one": 1.0,
          "two": 2.0, "half": 0.5}
    def either_kind(name):
        """The tensor function, or math's for a Python scalar operand (b = 2.0)."""
        tensor_fn = getattr(tg, name)
        scalar_fn = getattr(math, name, None) or (lambda v: float(tensor_fn(tg.tensor(v))))

        def fn(v):
            return tensor_fn(v) if isinstance(v, Tensor) else scalar_fn(v)
        return fn
    for f in ("cos", "cosh", "erf", "exp", "floor", "log", "sin", "sinh", "sqrt", "tanh",
              "trunc", "sigmoid", "abs", "sign"):
        ns[f] = either_kind(f)
    ns["math"] = math
    return ns


_NS = []


class _Operands(dict):
    """A formula's names: the operands a, b and out are read from the row only when the
    formula being evaluated uses them (a row saves only what its needed gradients read)."""

    def __init__(self, row, names):
        super().__init__(names)
        self.row = row

    def __missing__(self, name):
        row = self.row
        if name == "a":
            v = row.input(0)
        elif name == "b":
            v = row.scalar if row.nin == 1 else row.input(1)
        elif name == "out":
            v = row.output()
        else:
            raise KeyError(name)
        self[name] = v
        return v


def _elementwise_vjp(row, gout):
    if not _NS:
        _NS.append(_names())
    op = row.op
    g = gout[0]
    env = _Operands(row, _NS[0])
    env.update(g=g, s=row.scalar, s2=row.scalar2,
               _where=functools.partial(_NS[0]["_where"], g))
    grads = []
    for k in range(row.nin):
        text = op.grads[k] if k < len(op.grads) else None
        if text is None or not row.needs(k):
            grads.append(None)
            continue
        gk = eval(_formula(text), {}, env)              # noqa: S307 (the op table's own text)
        if not isinstance(gk, Tensor):                  # a constant (zero) gradient
            gk = tg.zeros_like(g) + gk
        grads.append(_sum_to(gk, row.in_shape(k)))
    return grads


def _sum_to(g, shape):
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    lead = g.ndim - len(shape)
    dims = tuple(range(lead)) + tuple(lead + d for d, n in enumerate(shape)
                                      if n == 1 and g.shape[lead + d] != 1)
    if dims:
        g = g.sum(dims, keepdim=True)
    return g.reshape(shape)


# ---------------------------------------------------------------- the other ops' products
def _reduced_dims(row, nd):
    dims = row.attr("dims")
    return tuple(range(nd)) if dims < 0 else tuple(d for d in range(nd) if dims >> d & 1)


def _vjp_sum(row, gout):
    g = gout[0]
    shape = row.in_shape(0)
    dims = _reduced_dims(row, len(shape))
    if not row.attr("keepdim"):
        for d in dims:
            g = g.unsqueeze(d)
    g = g.expand(shape)
    if row.op.name.startswith("mean"):
        n = 1
        for d in dims:
            n *= shape[d]
        g = g / n
    return [g]


def _vjp_mm(row, gout):
    g = gout[0]
    ga = g @ row.input(1).mT if row.needs(0) else None
    gb = row.input(0).mT @ g if row.needs(1) else None
    return [ga, gb]


def _vjp_matmul(row, gout):
    """Batched and broadcast products; a one-dimensional operand is a matrix with a unit
    dim, as matmul defines it."""
    g = gout[0]
    a_shape, b_shape = row.in_shape(0), row.in_shape(1)
    a = row.input(0) if row.needs(1) else None
    b = row.input(1) if row.needs(0) else None
    if len(a_shape) == 1:
        g = g.unsqueeze(-2)
        a = a.unsqueeze(0) if a is not None else None
    if len(b_shape) == 1:
        g = g.unsqueeze(-1)
        b = b.unsqueeze(-1) if b is not None else None
    ga = _sum_to((g @ b.mT).reshape(*g.shape[:-1], b.shape[-2]), a_shape) if b is not None \
        else None
    gb = _sum_to(a.mT @ g, b_shape) if a is not None else None
    return [ga, gb]


def _vjp_mv(row, gout):
    g = gout[0]
    ga = g.unsqueeze(-1) * row.input(1) if row.needs(0) else None
    gb = row.input(0).mT @ g if row.needs(1) else None
    return [ga, gb]


def _vjp_dot(row, gout):
    g = gout[0]
    return [g * row.input(1) if row.needs(0) else None,
            g * row.input(0) if row.needs(1) else None]


def _vjp_linear(row, gout):
    """linear(bias, x, W) (addmm's order): x @ W.T + bias."""
    g = gout[0]
    gb = _sum_to(g, row.in_shape(0)) if row.needs(0) else None
    gx = g @ row.input(2) if row.needs(1) else None
    gw = None
    if row.needs(2):
        x = row.input(1)
        gw = g.reshape(-1, g.shape[-1]).mT @ x.reshape(-1, x.shape[-1])
    return [gb, gx, gw]


def _vjp_view(row, gout):
    return [gout[0].reshape(row.in_shape(0))]


def _vjp_expand(row, gout):
    return [_sum_to(gout[0], row.in_shape(0))]


def _vjp_permute(row, gout):
    """permute, transpose and t: the row keeps the whole permutation."""
    nd = len(row.in_shape(0))
    perm = row.attr("dims")[:nd]
    inv = [0] * nd
    for i, p in enumerate(perm):
        inv[p] = i
    return [gout[0].permute(*inv)]


def _place(g, d, start, step, n):
    """g laid along dim d of a zero tensor of length n there, at start, start + step, ...
    (composed of cat, reshape and slices, whose own products are written here too)."""
    if step > 1 and g.shape[d] > 1:
        k = g.shape[d]
        zshape = list(g.shape)
        zshape.insert(d + 1, step - 1)
        g = tg.cat([g.unsqueeze(d + 1), tg.zeros(zshape, dtype=g.dtype)], d + 1)
        g = g.reshape(list(g.shape[:d]) + [k * step] + list(g.shape[d + 2:]))
        g = g.narrow(d, 0, (k - 1) * step + 1)
    pieces = []
    for length in (start, None, n - start - g.shape[d]):
        if length is None:
            pieces.append(g)
        elif length > 0:
            zshape = list(g.shape)
            zshape[d] = length
            pieces.append(tg.zeros(zshape, dtype=g.dtype))
    return tg.cat(pieces, d) if len(pieces) > 1 else g


def _vjp_reshape(row, gout):
    """Views reading a contiguous block of the input in order (unsqueeze, squeeze, alias,
    reshape views, a parameter viewed out of a flat buffer): the gradient is the block,
    placed at the view's offset in a zero flat input."""
    g = gout[0]
    shape = row.in_shape(0)
    out_shape = list(row.out_shape())
    strides = row.attr("grad_strides")[:len(out_shape)]
    cs = _contiguous_strides(out_shape)
    if any(n != 1 and s != c for n, s, c in zip(out_shape, strides, cs)):
        raise _unsupported(row, "a strided view of its input")
    n_in = 1
    for n in shape:
        n_in *= n
    if g.numel() == n_in:
        return [g.reshape(shape)]
    return [_place(g.reshape(-1), 0, row.attr("grad_offset"), 1, n_in).reshape(shape)]


def _vjp_select_slice(row, gout):
    """select and slice, read back from where the view sits in a contiguous input (its
    recorded offset and strides there)."""
    g = gout[0]
    shape = list(row.in_shape(0))
    cs = _contiguous_strides(shape)
    out_shape = list(row.out_shape())
    strides = row.attr("grad_strides")[:len(out_shape)]
    offset = row.attr("grad_offset")
    if row.op.name == "select":
        d = next(d for d in range(len(shape)) if cs[:d] + cs[d + 1:] == strides
                 and shape[:d] + shape[d + 1:] == out_shape)
        return [_place(g.unsqueeze(d), d, offset // cs[d], 1, shape[d])]
    dims = [d for d in range(len(shape)) if strides[d] != cs[d] or out_shape[d] != shape[d]]
    if not dims:
        return [g]
    d = dims[0]
    return [_place(g, d, offset // cs[d], strides[d] // cs[d], shape[d])]


def _vjp_to_copy(row, gout):
    from .._front.dtype import BY_CODE
    E = engine()
    pr, _, t = row.edge(0)
    code = int(E.tape[pr, L.R_ODTYPE]) if pr >= 0 else int(E.meta[t, L.M_DTYPE])
    return [gout[0].to(BY_CODE[code])]


def _vjp_softmax(row, gout):
    g, y = gout[0], row.output()
    d = row.attr("dim")
    if row.op.name == "softmax":
        return [y * (g - (g * y).sum(d, keepdim=True))]
    return [g - y.exp() * g.sum(d, keepdim=True)]


def _vjp_norm(row, gout):
    if row.scalar != 2.0:
        raise _unsupported(row, f"p={row.scalar:g}")
    g, x, y = gout[0], row.input(0), row.output()
    shape = row.in_shape(0)
    d = row.attr("dim")            # (one dim, or -1: all of them)
    dims = (d,) if d >= 0 else tuple(range(len(shape)))
    if not row.attr("keepdim"):
        for d in dims:
            g = g.unsqueeze(d)
            y = y.unsqueeze(d)
    return [x * tg.where(y == 0, tg.zeros_like(y), g / y)]


def _vjp_mse(row, gout):
    g = gout[0]
    a, b = row.input(0), row.input(1)
    red = row.attr("reduction")     # 0 none, 1 mean, 2 sum (PyTorch's enum)
    d = 2.0 * (a - b)
    if red == 1:
        d = d / a.numel()
    grad = d * g
    return [grad if row.needs(0) else None, -grad if row.needs(1) else None]


def _vjp_where(row, gout):
    g, c = gout[0], row.input(2)
    z = tg.zeros_like(g)
    return [_sum_to(tg.where(c, g, z), row.in_shape(0)) if row.needs(0) else None,
            _sum_to(tg.where(c, z, g), row.in_shape(1)) if row.needs(1) else None, None]


def _vjp_cat(row, gout):
    g = gout[0]
    d, stack = row.attr("dim"), row.attr("stack")
    if stack:
        return [g.select(d, k) for k in range(row.nin)]
    out, at = [], 0
    for n in row.attr("sizes")[:row.nin]:
        out.append(g.narrow(d, at, n))
        at += n
    return out


def _vjp_unbind(row, gout):
    d = row.attr("dim")
    shape = row.out_shape()
    parts = [g if g is not None else tg.zeros(shape, dtype=_dtype_of(gout))
             for g in gout[:row.in_shape(0)[d]]]
    return [tg.stack(parts, d)]


def _dtype_of(gout):
    return next(g for g in gout if g is not None).dtype


VJPS = {"sum": _vjp_sum, "sum_dim": _vjp_sum, "mean": _vjp_sum, "mean_dim": _vjp_sum,
        "mm": _vjp_mm, "matmul": _vjp_matmul, "mv": _vjp_mv, "dot": _vjp_dot,
        "linear": _vjp_linear, "view": _vjp_view, "reshape_copy": _vjp_view,
        "expand": _vjp_expand, "transpose": _vjp_permute, "t": _vjp_permute,
        "permute": _vjp_permute, "to_copy": _vjp_to_copy, "softmax": _vjp_softmax,
        "log_softmax": _vjp_softmax, "norm": _vjp_norm, "mse_loss": _vjp_mse,
        "where": _vjp_where, "cat": _vjp_cat, "stack": _vjp_cat}
for _name in ("unsqueeze", "squeeze", "squeeze_dim", "squeeze_dims", "alias", "view_strided",
              "reshape_alias"):
    VJPS[_name] = _vjp_reshape
VJPS["select"] = VJPS["slice"] = VJPS["split"] = VJPS["split_with_sizes"] = _vjp_select_slice
VJPS["unbind"] = _vjp_unbind


def _restore_along(row, t):
    """t, reduced along the row's dim (-1: every dim), with the reduced dims back as ones."""
    nd = len(row.in_shape(0))
    d = row.attr("dim")
    if d < 0:
        return t.reshape([1] * nd)
    return t if row.attr("keepdim") else t.unsqueeze(d)


def _vjp_logsumexp(row, gout):
    out = _restore_along(row, row.output())
    return [_restore_along(row, gout[0]) * (row.input(0) - out).exp()]


def _vjp_var_std(row, gout):
    """PyTorch's var_backward (2 (x - mean) / dof); std's divides by 2 std first, 0 where
    std is 0."""
    a, d = row.input(0), row.attr("dim")
    n = a.numel() if d < 0 else row.in_shape(0)[d]
    mean = a.mean() if d < 0 else a.mean(d, keepdim=True)
    g = _restore_along(row, gout[0])
    if row.attr("std"):
        out = _restore_along(row, row.output())
        g = tg.where(out == 0, tg.zeros_like(g * out), g / out)
        return [g * (a - mean) / (n - row.attr("correction"))]
    return [g * (2.0 / (n - row.attr("correction"))) * (a - mean)]


def _vjp_extreme(row, gout):
    """amax / amin and the full max / min: the gradient shared evenly among the inputs
    equal to the result; max / min along a dim: all of it to the input at the index."""
    g = gout[0]
    shape = row.in_shape(0)
    nd = len(shape)
    if not nd:
        return [g]
    name = row.op.name
    dims = tuple(range(nd)) if name in ("max", "min") else _reduced_dims(row, nd)
    keep = row.attr("keepdim") and name not in ("max", "min")
    out = row.output().detach()
    if not keep:
        for d in dims:
            g = g.unsqueeze(d)
            out = out.unsqueeze(d)
    if name in ("max_dim", "min_dim"):
        d = dims[0]
        at = tg.arange(shape[d]).reshape([shape[d] if k == d else 1 for k in range(nd)])
        return [tg.where(at == out, g, tg.zeros(shape, dtype=g.dtype))]
    mask = row.input(0) == out
    count = mask.sum(dims, keepdim=True).to(g.dtype)
    return [tg.where(mask, g / count, tg.zeros(shape, dtype=g.dtype))]


VJPS["logsumexp"] = _vjp_logsumexp
VJPS["var"] = VJPS["std"] = _vjp_var_std
for _name in ("amax", "amin", "max", "min", "max_dim", "min_dim"):
    VJPS[_name] = _vjp_extreme


def _saved_constant(row, k):
    """Input k's saved value outside the graph (a target, a class weight: no gradient)."""
    base = L.R_IN + k * L.IW
    sv = row._saved(int(row.T[base + L.IN_SAVED]), int(row.T[base + L.IN_VER]), f"input {k}")
    E = engine()
    with E.lock:
        a = E.call(core.detach, sv)
    return _wrap(a)


def _vjp_class_loss(row, gout):
    """nll_loss and cross_entropy on class indices: the loss is sum(C * log p) with
    constant coefficients C (targets, class weights, ignore_index, label smoothing, the
    mean's denominator), p the input (nll_loss) or the softmax of it over the classes."""
    import numpy as np
    g = gout[0]
    n, c, d = row.attr("rows"), row.attr("classes"), row.attr("inner")
    red, eps = row.attr("reduction"), row.scalar
    tgt = _saved_constant(row, 1).numpy().reshape(n, d)
    valid = tgt != row.attr("ignore_index")
    w = _saved_constant(row, 2).numpy().astype(np.float64) if row.attr("weighted") \
        else np.ones(c)
    at = np.where(valid, tgt, 0)
    wt = np.where(valid, w[at], 0.0)
    coef = np.zeros((n, c, d))
    np.put_along_axis(coef, at[:, None, :], -(1.0 - eps) * wt[:, None, :], axis=1)
    if eps:
        coef -= (eps / c) * w[None, :, None] * valid[:, None, :]
    if red == 1:
        coef /= wt.sum()
    coef = tg.tensor(coef, dtype=g.dtype)
    g = g.reshape(n, 1, d) if red == 0 else g
    if row.attr("kind") == 1:
        p = row.input(0).reshape(n, c, d).softmax(1)
        coef = coef - p * coef.sum(1, keepdim=True)
    return [(g * coef).reshape(row.in_shape(0)), None, None]


for _name in ("nll_loss", "nll_loss2d", "cross_entropy", "cross_entropy2d",
              "cross_entropy_plain"):
    VJPS[_name] = _vjp_class_loss


def _vjp_layer_norm(row, gout):
    """Over the last `width` elements of each row: x-hat = (x - mean) * rstd; the input's
    product is rstd * (gh - mean(gh) - x-hat * mean(gh * x-hat)), gh = g * weight."""
    n, width = row.attr("rows"), row.attr("width")
    g = gout[0].reshape(n, width)
    x = row.input(0).reshape(n, width)
    xc = x - x.mean(1, keepdim=True)
    rstd = ((xc * xc).mean(1, keepdim=True) + row.scalar).rsqrt()
    xhat = xc * rstd
    grads = [None] * row.nin
    if row.needs(0):
        w = None
        if row.nin > 1 and row.needs(1):
            w = row.input(1)
        elif row.nin > 1 and int(row.T[L.R_IN + L.IW + L.IN_SAVED]) >= 0:
            w = _saved_constant(row, 1)
        gh = g if w is None else g * w.reshape(1, width)
        gx = rstd * (gh - gh.mean(1, keepdim=True) - xhat * (gh * xhat).mean(1, keepdim=True))
        grads[0] = gx.reshape(row.in_shape(0))
    if row.nin > 1 and row.needs(1):
        grads[1] = (g * xhat).sum(0).reshape(row.in_shape(1))
    if row.nin > 2 and row.needs(2):
        grads[2] = g.sum(0).reshape(row.in_shape(2))
    return grads


def _vjp_flip(row, gout):
    mask = row.attr("dims")
    return [gout[0].flip([d for d in range(len(row.in_shape(0))) if mask >> d & 1])]


VJPS["layer_norm"] = _vjp_layer_norm
VJPS["flip"] = _vjp_flip


# ---------------------------------------------------------------- indexing: flat positions
# The front turns every read of a tensor at computed places (x[idx], index_select, gather,
# masked_select) into a read at flat positions, saved as input 1, and every write
# (x[idx] = v, index_put_, index_add, scatter_add) into a write there: each one's product
# is the other, so the pair differentiates to any order.
def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _vjp_take(row, gout):
    g = gout[0]
    shape = row.in_shape(0)
    pos = _saved_constant(row, 1).reshape(-1)
    flat = tg.zeros(_numel(shape), dtype=g.dtype).index_put_((pos,), g.reshape(-1),
                                                              accumulate=True)
    return [flat.reshape(shape)] + [None] * (row.nin - 1)


def _vjp_take_rows(row, gout):
    g = gout[0]
    shape = row.in_shape(0)
    rows = _saved_constant(row, 1).reshape(-1)
    g = g.reshape(rows.shape[0], *shape[1:])
    return [tg.zeros(shape, dtype=g.dtype).index_put_((rows,), g, accumulate=True), None]


def _vjp_index_put(row, gout):
    g = gout[0]
    pos = _saved_constant(row, 1)
    flat_pos = pos.reshape(-1)
    g_self = g_values = None
    if row.needs(0):
        g_self = g if row.attr("accumulate") else g.reshape(-1).clone().index_put_(
            (flat_pos,), tg.zeros((), dtype=g.dtype)).reshape(g.shape)
    if row.needs(2):
        g_values = _sum_to(g.reshape(-1)[flat_pos].reshape(pos.shape), row.in_shape(2))
    return [g_self, None, g_values]


for _name in ("index", "index_select", "gather", "masked_select"):
    VJPS[_name] = _vjp_take
VJPS["index_rows"] = _vjp_take_rows
VJPS["index_put"] = _vjp_index_put


def _vjp_cumsum(row, gout):
    d = row.attr("dim")
    return [gout[0].flip(d).cumsum(d).flip(d)]


def _vjp_nansum(row, gout):
    x = row.input(0)
    g = _vjp_sum(row, gout)[0]
    return [tg.where(x.isnan(), tg.zeros_like(g), g)]


def _vjp_masked_fill_tensor(row, gout):
    """x.masked_fill(mask, value) with a 0-d tensor value: (mask in input 2)."""
    g, mask = gout[0], _saved_constant(row, 2)
    z = tg.zeros_like(g)
    gx = tg.where(mask, z, g) if row.needs(1) else None
    gv = tg.where(mask, g, z).sum().reshape(row.in_shape(0)) if row.needs(0) else None
    return [gv, gx, None]


VJPS["cumsum"] = _vjp_cumsum
VJPS["nansum"] = _vjp_nansum
VJPS["masked_fill_tensor"] = _vjp_masked_fill_tensor


def _vjp_strided_positions(row, gout):
    """Any view at an offset and strides in a contiguous input (diagonal, as_strided):
    a read at the flat positions those give, whose product is a write there."""
    import numpy as np
    g = gout[0]
    shape = row.in_shape(0)
    out_shape = row.out_shape()
    strides = row.attr("grad_strides")[:len(out_shape)]
    pos = np.full(out_shape, row.attr("grad_offset"), np.int64)
    for d, (n, st) in enumerate(zip(out_shape, strides)):
        pos = pos + (np.arange(n, dtype=np.int64) * st).reshape(
            (1,) * d + (n,) + (1,) * (len(out_shape) - d - 1))
    flat = tg.zeros(_numel(shape), dtype=g.dtype).index_put_(
        (tg.tensor(pos.reshape(-1)),), g.reshape(-1), accumulate=True)
    return [flat.reshape(shape)]


def _vjp_pad(row, gout):
    """constant_pad_nd: the input's part of g (a negative pad cropped the input: zeros
    there)."""
    g = gout[0]
    shape = row.in_shape(0)
    before = row.attr("before")[:len(shape)]
    for d, (b, n) in enumerate(zip(before, shape)):
        lo_out, lo_in = max(b, 0), max(-b, 0)
        length = min(g.shape[d] - lo_out, n - lo_in)
        if (lo_out, lo_in, length) != (0, 0, n) or g.shape[d] != n:
            g = _place(g.narrow(d, lo_out, length), d, lo_in, 1, n)
    return [g]


def _vjp_roll(row, gout):
    return [gout[0].roll(-row.attr("shift"), row.attr("dim"))]


def _vjp_permute_copy(row, gout):
    nd = row.attr("nd")
    perm = row.attr("perm")[:nd]
    inv = [0] * nd
    for i, p in enumerate(perm):
        inv[p] = i
    return [gout[0].reshape([row.attr("shape")[p] for p in perm]).permute(*inv)
            .reshape(row.in_shape(0))]


def _vjp_safe_softmax(row, gout):
    g, y = gout[0], row.output()
    return [y * (g - (g * y).sum(-1, keepdim=True))]


def _pointwise_loss(row, gout, da, db):
    """A pointwise loss's products from its per-element derivatives, reduced as the row."""
    if row.nin > 2:
        raise _unsupported(row, "a weight")
    g = gout[0]
    red = row.attr("reduction")
    if red != 0:
        g = g / _numel(row.in_shape(0)) if red == 1 else g
    return [_sum_to(da * g, row.in_shape(0)) if row.needs(0) else None,
            _sum_to(db * g, row.in_shape(1)) if row.needs(1) else None]


def _vjp_huber_like(row, gout):
    a, b, s = row.input(0), row.input(1), row.scalar
    d = a - b
    if row.op.name == "huber_loss":
        dx = d.clamp(-s, s)
    elif s > 0:
        dx = tg.where(d.abs() < s, d / s, d.sign())
    else:
        dx = d.sign()
    return _pointwise_loss(row, gout, dx, -dx)


def _vjp_bce_logits(row, gout):
    if row.attr("kind") != 4:
        raise _unsupported(row, "pos_weight")
    a, b = row.input(0), row.input(1)
    return _pointwise_loss(row, gout, a.sigmoid() - b, -a)


VJPS.update({"diagonal": _vjp_strided_positions, "as_strided": _vjp_strided_positions,
             "constant_pad_nd": _vjp_pad, "roll": _vjp_roll,
             "permute_copy": _vjp_permute_copy, "safe_softmax": _vjp_safe_softmax,
             "huber_loss": _vjp_huber_like, "smooth_l1_loss": _vjp_huber_like,
             "binary_cross_entropy_with_logits": _vjp_bce_logits, "stack_parts": _vjp_cat})


def _unsupported(row, what=None):
    detail = f" with {what}" if what else ""
    return NotImplementedError(
        f"tapegrad: create_graph=True: the double backward of {row.op.grad_fn}{detail} is "
        f"not supported yet (the gradient graph would be incomplete)")


def _row_vjp(row, gout):
    if row.op.kind in ("unary", "binary"):
        return _elementwise_vjp(row, gout)
    if row.op.kind == "python":
        return _function_vjp(row, gout)
    fn = VJPS.get(row.op.name)
    if fn is None:
        raise _unsupported(row)
    return fn(row, gout)


def _function_vjp(row, gout):
    """An autograd.Function's backward, run in grad mode: written in differentiable ops,
    it is differentiable again (PyTorch's rule; once_differentiable refuses)."""
    rec = FUNCTION_ROWS.get(row.r)
    if rec is None or rec.ctx._freed:
        raise RuntimeError(FREED_GRAPH)
    cls, ctx = rec.cls, rec.ctx
    grads = []
    for o in rec.outputs:
        if o[0] == "row":
            g = gout[o[1]] if o[1] < len(gout) else None
            if g is None and ctx.materialize_grads:
                    g = tg.zeros(*row.out_shape())
            grads.append(g)
        else:
            grads.append(None)
    res = cls.backward(ctx, *grads)
    res = res if isinstance(res, tuple) else (res,)
    out = [None] * row.nin
    for i, k in rec.args:
        if k >= 0 and i < len(res) and res[i] is not None:
            out[k] = _sum_to(res[i], row.in_shape(k))
    return out


# ---------------------------------------------------------------- the walk
def _add(a, b):
    return b if a is None else (a if b is None else a + b)


def run(roots, seeds, leaf_targets=None, row_targets=None):
    """Propagate seeds from roots through their rows in reverse, recording. Returns
    (leaf id -> gradient, (row, oidx) -> gradient for row_targets)."""
    E = engine()
    pending, leaf_grads, captured = {}, {}, {}
    start = []
    for t, s in zip(roots, seeds):
        r = int(E.meta[t._i, L.M_ROW])
        if r < 0:
            leaf_grads[t._i] = _add(leaf_grads.get(t._i), s)
            continue
        oidx = int(E.meta[t._i, L.M_OIDX])
        slots = pending.setdefault(r, {})
        slots[oidx] = _add(slots.get(oidx), s)
        start.append(r)
    # the rows reachable from the roots, and how many of their consumers each waits for
    deps, seen, stack = {}, set(start), list(start)
    consumers, direct = {}, []
    tape = E.tape
    while stack:
        r = stack.pop()
        T = tape[r].tolist()
        if T[L.R_STATE] & L.RS_RELEASED:
            raise RuntimeError(FREED_GRAPH)
        for k in range(T[L.R_NIN]):
            base = L.R_IN + k * L.IW
            pr = T[base + L.IN_ROW]
            if pr >= 0:
                deps[pr] = deps.get(pr, 0) + 1
                consumers.setdefault(pr, []).append(r)
                if pr not in seen:
                    seen.add(pr)
                    stack.append(pr)
                if row_targets and (pr, T[base + L.IN_OIDX]) in row_targets:
                    direct.append(r)
            elif leaf_targets is not None and T[base + L.IN_T] in leaf_targets:
                direct.append(r)
    wanted = None
    if leaf_targets is not None:    # autograd.grad: only rows on a path to an input work
        useful, stack = set(direct), list(direct)
        while stack:
            for c in consumers.get(stack.pop(), ()):
                if c not in useful:
                    useful.add(c)
                    stack.append(c)
        wanted = (useful, leaf_targets, row_targets or set())
    ready = [r for r in dict.fromkeys(start) if deps.get(r, 0) == 0]
    while ready:
        r = ready.pop()
        slots = pending.pop(r, {})
        for oidx, hooks in (ROW_HOOKS.get(r) or {}).items():
            if slots.get(oidx) is not None:
                for h in hooks:
                    new = h(slots[oidx])
                    if new is not None:
                        slots[oidx] = new
        if row_targets:
            for oidx in range(max(slots, default=-1) + 1):
                if (r, oidx) in row_targets:
                    captured[(r, oidx)] = slots.get(oidx)
        row = _Row(r)
        row.wanted = wanted
        if any(g is not None for g in slots.values()) and (wanted is None or r in wanted[0]):
            nout = max(int(row.T[L.R_NOUT]), max(slots) + 1)
            gout = [slots.get(i) for i in range(nout)]
            if row.op.kind not in ("python",) and gout[0] is None and nout == 1:
                grads = [None] * row.nin
            else:
                grads = _row_vjp(row, gout)
            for k in range(row.nin):
                gk = grads[k] if k < len(grads) else None
                pr, oidx, t = row.edge(k)
                if gk is None:
                    continue
                if pr >= 0:
                    s = pending.setdefault(pr, {})
                    s[oidx] = _add(s.get(oidx), gk)
                elif t >= 0 and (leaf_targets is None or t in leaf_targets):
                    leaf_grads[t] = _add(leaf_grads.get(t), gk)
        for k in range(row.nin):
            pr = row.edge(k)[0]
            if pr >= 0:
                deps[pr] -= 1
                if deps[pr] == 0:
                    ready.append(pr)
    return leaf_grads, captured


def _seed(t, g):
    if g is None:
        if t.numel() != 1:
            raise RuntimeError("grad can be implicitly created only for scalar outputs")
        return tg.ones_like(t)
    return g.to(t.dtype)


def backward(roots, seeds):
    """backward(create_graph=True): each leaf's .grad becomes .grad + gradient, recorded."""
    warnings.warn(
        "Using backward() with create_graph=True will create a reference cycle between the "
        "parameter and its gradient which can cause a memory leak. We recommend using "
        "autograd.grad when creating the graph to avoid this. If you have to use this "
        "function, make sure to reset the .grad fields of your parameters to None after use "
        "to break the cycle and avoid the leak.", UserWarning, stacklevel=4)
    prev = GRAD_MODE.on
    GRAD_MODE.on = 1
    try:
        leaf_grads, _ = run(roots, [_seed(t, g) for t, g in zip(roots, seeds)])
        for i, g in leaf_grads.items():
            leaf = _wrap_leaf(i)
            if not leaf.requires_grad:
                continue
            for h in LEAF_HOOKS.get(i) or ():
                new = h(g)
                if new is not None:
                    g = new
            old = leaf.grad
            leaf.grad = (g if old is None else old + g).contiguous()
    finally:
        GRAD_MODE.on = prev


def grad(outputs, seeds, inputs, allow_unused, materialize_grads):
    """autograd.grad(create_graph=True)."""
    E = engine()
    leaves, rows = set(), set()
    for t in inputs:
        _check_not_stale(t._i)
        r = int(E.meta[t._i, L.M_ROW])
        if r < 0:
            leaves.add(t._i)
        else:
            rows.add((r, int(E.meta[t._i, L.M_OIDX])))
    prev = GRAD_MODE.on
    GRAD_MODE.on = 1
    try:
        leaf_grads, captured = run(outputs, [_seed(t, g) for t, g in zip(outputs, seeds)],
                                   leaves, rows)
        result = []
        for k, t in enumerate(inputs):
            r = int(E.meta[t._i, L.M_ROW])
            g = leaf_grads.get(t._i) if r < 0 else captured.get(
                (r, int(E.meta[t._i, L.M_OIDX])))
            if r < 0 and g is not None:
                for h in LEAF_HOOKS.get(t._i) or ():
                    new = h(g)
                    if new is not None:
                        g = new
            if g is None:
                if materialize_grads:
                    g = tg.zeros_like(t)
                elif not allow_unused:
                    raise RuntimeError(
                        f"The differentiated Tensor at index {k} appears to not have been used "
                        "in the graph. Set allow_unused=True if this is the desired behavior.")
            result.append(g)
        return tuple(result)
    finally:
        GRAD_MODE.on = prev
