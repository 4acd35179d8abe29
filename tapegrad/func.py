"""tapegrad.func: PyTorch's function transforms (torch.func) over tapegrad's autograd.

`grad`, `grad_and_value`, `vjp`, `jacrev` and `functional_call` differentiate with the
reverse sweep; an input is tracked as a fresh leaf, or, when it already carries history
(an outer transform's input, a parameter), as an alias of it, so transforms nest: the
gradient is recorded (create_graph) exactly when something outside the transform can be
differentiated through it, and is a plain tensor otherwise. tapegrad has no forward mode
yet: `jvp` is the double vector-Jacobian product (PyTorch's autograd.functional.jvp
trick) and `jacfwd` computes the Jacobian by reverse mode: the same values, another cost.
`vmap` runs the function once per slice and stacks the results: PyTorch's values,
including per-sample gradients (vmap of grad), without batching rules, so without their
speed.
"""
import functools

from ._engine import layout as L
from ._engine.state import engine
from ._front.tensor import Tensor
from ._front.creation import zeros_like
from ._front.indexing import stack
from .autograd import grad as _autograd_grad
from .autograd.grad_mode import enable_grad, is_grad_enabled
from .nn.module import Module

__all__ = ["grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "hessian", "vmap",
           "functional_call"]


# ---------------------------------------------------------------- pytrees (tuples, lists, dicts)
def _flatten(tree):
    if isinstance(tree, (tuple, list)):
        leaves, specs = [], []
        for x in tree:
            lv, sp = _flatten(x)
            leaves += lv
            specs.append(sp)
        return leaves, (type(tree), specs)
    if isinstance(tree, dict):
        leaves, specs = [], []
        for k, x in tree.items():
            lv, sp = _flatten(x)
            leaves += lv
            specs.append((k, sp))
        return leaves, (dict, specs)
    return [tree], None


def _unflatten(spec, leaves):
    it = iter(leaves)

    def build(sp):
        if sp is None:
            return next(it)
        kind, parts = sp
        if kind is dict:
            return {k: build(s) for k, s in parts}
        return kind(build(s) for s in parts)
    return build(spec)


# ---------------------------------------------------------------- tracking inputs
def _check_tensor(x):
    if not isinstance(x, Tensor):
        raise ValueError(f"Thing passed to transform API must be Tensor, got {type(x)}")


def _track(t):
    """An input to differentiate with respect to: an alias keeping t's history when it has
    one (so an outer transform differentiates through), else a fresh leaf."""
    if t.requires_grad:
        return t.view_as(t)
    if not t.dtype.is_floating_point:
        raise RuntimeError("only Tensors of floating point dtype can require gradients")
    return t.detach().requires_grad_(True)


def _reaches_outside(tensors, inside):
    """Whether the graphs of tensors reach a leaf requiring grad other than the ids in
    inside: then something outside this transform differentiates through its result."""
    E = engine()
    M, T = E.meta, E.tape
    rows, seen = [], set()
    for t in tensors:
        if not isinstance(t, Tensor) or not t.requires_grad:
            continue
        r = int(M[t._i, L.M_ROW])
        if r < 0:
            if t._i not in inside:
                return True
        elif r not in seen:
            seen.add(r)
            rows.append(r)
    while rows:
        r = rows.pop()
        for k in range(int(T[r, L.R_NIN])):
            base = L.R_IN + k * L.IW
            pr, leaf = int(T[r, base + L.IN_ROW]), int(T[r, base + L.IN_T])
            if pr >= 0:
                if pr not in seen:
                    seen.add(pr)
                    rows.append(pr)
            elif leaf >= 0 and leaf not in inside:
                return True
    return False


def _argnums(argnums, n):
    nums = (argnums,) if isinstance(argnums, int) else argnums
    if not isinstance(nums, tuple) or not nums or not all(isinstance(a, int) for a in nums):
        raise RuntimeError(f"argnums must be int or Tuple[int, ...], got: {type(argnums)}")
    if len(set(nums)) != len(nums):
        raise RuntimeError(f"argnums elements must be unique, got {argnums}")
    for a in nums:
        if not -n <= a < n:
            raise RuntimeError(f"Got argnum={a}, but only {n} positional inputs")
    return tuple(a % n for a in nums)


class _Tracked:
    """The positional arguments with those at argnums replaced by tracked tensors."""

    def __init__(self, args, argnums):
        self.args = list(args)
        self.nums = _argnums(argnums, len(args))
        self.single = isinstance(argnums, int)
        self.specs, self.flat = [], []
        for n in self.nums:
            leaves, spec = _flatten(self.args[n])
            for x in leaves:
                _check_tensor(x)
            new = [_track(x) for x in leaves]
            self.args[n] = _unflatten(spec, new)
            self.specs.append((spec, len(new)))
            self.flat += new
        self.inside = {t._i for t in self.flat if t.grad_fn is None}

    def regroup(self, flat):
        """Per-input results in the arguments' structure (one, or a tuple per argnum)."""
        out, at = [], 0
        for spec, n in self.specs:
            out.append(_unflatten(spec, flat[at:at + n]))
            at += n
        return out[0] if self.single else tuple(out)


def _grads(outputs, inputs, cotangents, outer):
    got = _autograd_grad(outputs, inputs, cotangents, retain_graph=True, create_graph=outer,
                         allow_unused=True) if any(o.requires_grad for o in outputs) \
        else [None] * len(inputs)
    return [zeros_like(t) if g is None else g for g, t in zip(got, inputs)]


def _plain(tree, outer):
    leaves, spec = _flatten(tree)
    return _unflatten(spec, [x.detach() if isinstance(x, Tensor) and not outer else x
                             for x in leaves])


def _split_aux(out, has_aux, api):
    if not has_aux:
        return out, None
    if not (isinstance(out, tuple) and len(out) == 2):
        raise RuntimeError(f"{api}: output of function f should be a tuple: (output, aux) "
                           "if has_aux is True")
    return out


# ---------------------------------------------------------------- the transforms
def grad_and_value(func, argnums=0, has_aux=False):
    """A function returning (gradient of func's scalar output with respect to the
    arguments at argnums, that output); with has_aux, (gradient, (output, aux))."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        tr = _Tracked(args, argnums)
        with enable_grad():
            out, aux = _split_aux(func(*tr.args, **kwargs), has_aux,
                                  "grad_and_value(f)(*args)")
            if not isinstance(out, Tensor):
                raise RuntimeError(f"grad_and_value(f)(*args): Expected f(*args) to return a "
                                   f"Tensor, got {type(out)}")
            if out.ndim != 0:
                raise RuntimeError(f"grad_and_value(f)(*args): Expected f(*args) to return a "
                                   f"scalar Tensor, got tensor with {out.ndim} dims. Maybe you "
                                   "wanted to use the vjp or jacrev APIs instead?")
            outer = is_grad_enabled() and _reaches_outside([out], tr.inside)
            g = tr.regroup(_grads([out], tr.flat, None, outer))
        value = out if outer else out.detach()
        if has_aux:
            return g, (value, _plain(aux, outer))
        return g, value
    return wrapper


def grad(func, argnums=0, has_aux=False):
    """A function returning the gradient of func's scalar output with respect to the
    arguments at argnums (with has_aux, (gradient, aux))."""
    gv = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, value = gv(*args, **kwargs)
        return (g, value[1]) if has_aux else g
    return wrapper


def vjp(func, *primals, has_aux=False):
    """(func(*primals), vjp_fn): vjp_fn(cotangents) is the tuple of vector-Jacobian
    products, one per primal (with has_aux, (output, vjp_fn, aux))."""
    tr = _Tracked(primals, tuple(range(len(primals))))
    with enable_grad():
        out, aux = _split_aux(func(*tr.args), has_aux, "vjp(f, *primals)")
    outs, out_spec = _flatten(out)
    for o in outs:
        if not isinstance(o, Tensor):
            raise RuntimeError(f"vjp(f, *primals): Expected f(*primals) to return only "
                               f"tensors, got unsupported type {type(o)}")

    def vjp_fn(cotangents):
        """The vector-Jacobian products for cotangents shaped like func's output."""
        cots, spec = _flatten(cotangents)
        if len(cots) != len(outs):
            raise RuntimeError("Expected pytree structure of cotangents to be the same as "
                               "pytree structure of outputs to the function.")
        for c, o in zip(cots, outs):
            if tuple(c.shape) != tuple(o.shape):
                raise RuntimeError(f"Mismatch in shape: grad_output[0] has a shape of "
                                   f"{c.shape!r} and output[0] has a shape of {o.shape!r}.")
        with enable_grad():
            outer = is_grad_enabled() and _reaches_outside(outs + cots, tr.inside)
            flat = _grads(outs, tr.flat, cots, outer)
        res = tr.regroup(flat)
        return res if isinstance(res, tuple) else (res,)
    outer = _reaches_outside(outs, tr.inside)
    result = _plain(out, outer)
    return (result, vjp_fn, _plain(aux, outer)) if has_aux else (result, vjp_fn)


def jvp(func, primals, tangents, *, strict=False, has_aux=False):
    """(func(*primals), its Jacobian-vector product with tangents), by the double
    vector-Jacobian product (tapegrad has no forward mode yet): the values forward mode
    gives."""
    if strict:
        raise RuntimeError("jvp(f, primals, tangents): strict=True is not supported.")
    if not isinstance(primals, tuple) or not isinstance(tangents, tuple):
        raise RuntimeError("jvp(f, primals, tangents): Expected primals and tangents to be "
                           "tuples. E.g. it should be valid to call f(*primals).")
    p_flat, p_spec = _flatten(primals)
    t_flat, t_spec = _flatten(tangents)
    if len(p_flat) != len(t_flat):
        raise RuntimeError("jvp(f, primals, tangents): Expected primals and tangents to have "
                           "the same python structure.")
    for p, t in zip(p_flat, t_flat):
        _check_tensor(p)
        _check_tensor(t)
        if tuple(p.shape) != tuple(t.shape):
            raise RuntimeError(f"jvp(f, primals, tangents): Expected primals and tangents to "
                               f"have the same shape, got {tuple(p.shape)} and "
                               f"{tuple(t.shape)}.")
    tr = _Tracked(primals, tuple(range(len(primals))))
    with enable_grad():
        out, aux = _split_aux(func(*tr.args), has_aux, "jvp(f, primals, tangents)")
        outs, o_spec = _flatten(out)
        for o in outs:
            _check_tensor(o)
        us = [zeros_like(o).requires_grad_(True) for o in outs]
        gs = _autograd_grad(outs, tr.flat, us, create_graph=True, allow_unused=True)
        used = [(g, t) for g, t in zip(gs, t_flat) if g is not None]
        outer = is_grad_enabled() and _reaches_outside(outs + t_flat, tr.inside)
        if used:
            tans = _autograd_grad([g for g, _ in used], us, [t.to(g.dtype) for g, t in used],
                                  create_graph=outer, allow_unused=True)
        else:
            tans = [None] * len(us)
        tans = [zeros_like(o) if t is None else t for t, o in zip(tans, outs)]
    res = (_plain(out, outer), _unflatten(o_spec, [t if outer else t.detach() for t in tans]))
    return res + (_plain(aux, outer),) if has_aux else res


def jacrev(func, argnums=0, *, has_aux=False, chunk_size=None, _preallocate_and_copy=False):
    """A function returning the Jacobian of func's output(s) with respect to the arguments
    at argnums (one reverse sweep per output element; chunk_size changes nothing here)."""
    if chunk_size is not None and not (isinstance(chunk_size, int) and chunk_size > 0):
        raise ValueError("jacrev: `chunk_size` should be greater than 0.")

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        tr = _Tracked(args, argnums)
        with enable_grad():
            out, aux = _split_aux(func(*tr.args, **kwargs), has_aux, "jacrev(f, ...)(*args)")
            outs, o_spec = _flatten(out)
            for o in outs:
                if not isinstance(o, Tensor):
                    raise RuntimeError(f"jacrev(f, ...)(*args): Expected f to return only "
                                       f"tensors, got unsupported type {type(o)}")
            outer = is_grad_enabled() and _reaches_outside(outs, tr.inside)
            per_out = []
            for o in outs:
                rows = [_grads([e], tr.flat, None, outer) for e in o.reshape(-1).unbind(0)] \
                    if o.numel() else []
                jac = []
                for k, t in enumerate(tr.flat):
                    if rows:
                        j = stack([r[k] for r in rows], 0)
                    else:
                        j = zeros_like(t).reshape(0, *t.shape)
                    j = j.reshape(*o.shape, *t.shape)
                    jac.append(j if outer else j.detach())
                per_out.append(tr.regroup(jac))
        res = _unflatten(o_spec, per_out)
        return (res, _plain(aux, outer)) if has_aux else res
    return wrapper


def jacfwd(func, argnums=0, has_aux=False, *, randomness="error"):
    """The Jacobian, as jacrev computes it (tapegrad has no forward mode yet: the values
    forward mode gives, by reverse mode)."""
    if randomness not in ("error", "different", "same"):
        raise RuntimeError(f"Only allowed values for randomness are 'error', 'different', or "
                           f"'same'. Got {randomness}")
    return jacrev(func, argnums, has_aux=has_aux)


def hessian(func, argnums=0):
    """The Hessian of func's scalar output: the Jacobian of its gradient."""
    return jacfwd(jacrev(func, argnums), argnums)


# ---------------------------------------------------------------- vmap
def _rng_state():
    from ._front.generator import get_rng_state
    return get_rng_state()


def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    """func over a batch: called once per slice of the mapped inputs (along in_dims), its
    outputs stacked along out_dims. PyTorch's values; randomness 'error' refuses random
    draws inside, 'same' gives every slice the same draws, 'different' its own."""
    if randomness not in ("error", "different", "same"):
        raise RuntimeError(f"Only allowed values for randomness are 'error', 'different', or "
                           f"'same'. Got {randomness}")
    if chunk_size is not None and not (isinstance(chunk_size, int) and chunk_size > 0):
        raise ValueError(f"vmap: chunk_size should be None or greater than 0. (got "
                         f"{chunk_size})")
    name = getattr(func, "__name__", repr(func))

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if not args:
            raise ValueError(f"vmap({name})(<inputs>): got no inputs. Maybe you forgot to "
                             "add inputs, or you are trying to vmap over a function with no "
                             "inputs. The latter is unsupported.")
        dims = in_dims if isinstance(in_dims, tuple) else (in_dims,) * len(args)
        if len(dims) != len(args):
            raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): in_dims is not "
                             "compatible with the structure of `inputs`.")
        leaves, spec = _flatten(list(args))
        dim_leaves = []
        for a, d in zip(args, dims):
            n = len(_flatten(a)[0])
            if isinstance(d, (tuple, list, dict)):
                dl = _flatten(d)[0]
                if len(dl) != n:
                    raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): "
                                     "in_dims is not compatible with the structure of "
                                     "`inputs`.")
                dim_leaves += dl
            else:
                dim_leaves += [d] * n
        sizes = []
        for x, d in zip(leaves, dim_leaves):
            if d is None:
                continue
            if not isinstance(d, int):
                raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): in_dims "
                                 "must be an int, None or a structure of them")
            if not isinstance(x, Tensor):
                raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): Got "
                                 f"in_dim={d} for an input but the input is of type "
                                 f"{type(x)}. We cannot vmap over non-Tensor arguments, "
                                 "please use None as the respective in_dim")
            if not -x.ndim <= d < x.ndim:
                raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): Got "
                                 f"in_dim={d} for some input, but that input is a Tensor of "
                                 f"dimensionality {x.ndim} so expected in_dim to satisfy "
                                 f"-{x.ndim} <= in_dim < {x.ndim}.")
            sizes.append(x.shape[d])
        if not sizes:
            raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): at least one "
                             "input must be a Tensor mapped over a dimension (in_dims not "
                             "all None)")
        if len(set(sizes)) != 1:
            raise ValueError(f"vmap: Expected all tensors to have the same size in the mapped "
                             f"dimension, got sizes {sizes} for the mapped dimension")
        results, start = [], _rng_state()
        for b in range(sizes[0]):
            if randomness == "same":
                from ._front.generator import set_rng_state
                set_rng_state(start)
            before = _rng_state() if randomness == "error" else None
            sliced = [x if d is None else x.select(d, b) for x, d in zip(leaves, dim_leaves)]
            out = func(*_unflatten(spec, sliced), **kwargs)
            if before is not None and not bool((_rng_state() == before).all()):
                raise RuntimeError("vmap: called random operation while in randomness error "
                                   "mode. Please either use the 'same' or 'different' "
                                   "randomness flags on vmap or perform the randomness "
                                   "operation out of vmap")
            results.append(out)
        return _stack_outputs(results, out_dims, name)
    return wrapper


def _stack_outputs(results, out_dims, name):
    flat0, spec = _flatten(results[0])
    per = [_flatten(r)[0] for r in results]
    odims = _flatten(out_dims)[0] if isinstance(out_dims, (tuple, list)) else \
        [out_dims] * len(flat0)
    if len(odims) != len(flat0):
        raise ValueError(f"vmap({name}, ..., out_dims={out_dims})(<inputs>): out_dims is not "
                         "compatible with the structure of `outputs`.")
    stacked = []
    for k, d in enumerate(odims):
        col = [p[k] for p in per]
        if d is None:           # only an output the slices do not change
            if any(c is not col[0] and not (isinstance(c, Tensor) and isinstance(col[0], Tensor)
                                            and c.shape == col[0].shape
                                            and bool((c == col[0]).all()))
                   for c in col[1:]):
                raise ValueError(f"vmap({name}, ...): `{name}` can not return a BatchedTensor "
                                 "when out_dim is None")
            stacked.append(col[0])
            continue
        if not all(isinstance(c, Tensor) for c in col):
            raise ValueError(f"vmap({name}, ...): `{name}` must only return Tensors, got type "
                             f"{type(next(c for c in col if not isinstance(c, Tensor)))}. Did "
                             "you mean to set out_dims= to None for output?")
        nd = col[0].ndim + 1
        if not -nd <= d < nd:
            raise ValueError(f"vmap({name}, ..., out_dims={out_dims})(<inputs>): Got out_dim="
                             f"{d} for an output, but the output has dimensionality {nd}.")
        stacked.append(stack(col, d))
    return _unflatten(spec, stacked)


# ---------------------------------------------------------------- functional_call
def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *,
                    tie_weights=True, strict=False):
    """module called with the given tensors in place of its parameters and buffers (by
    their state_dict names), which are put back afterwards."""
    if not isinstance(module, Module):
        raise TypeError(f"functional_call: expected an nn.Module, got {type(module).__name__}")
    dicts = parameter_and_buffer_dicts
    if isinstance(dicts, dict):
        values = dict(dicts)
    elif isinstance(dicts, (tuple, list)) and all(isinstance(d, dict) for d in dicts):
        values = {}
        for d in dicts:
            dup = set(values) & set(d)
            if dup:
                raise ValueError(f"{sorted(dup)} appeared in multiple dictionaries; behavior "
                                 "of functional call is ambiguous")
            values.update(d)
    else:
        raise ValueError(f"Expected parameter_and_buffer_dicts to be a dict, or a list/tuple "
                         f"of dicts, but got {type(dicts)}")
    named = list(module.named_parameters(remove_duplicate=False)) + \
        list(module.named_buffers(remove_duplicate=False))
    known = {n for n, _ in named}
    if strict:
        missing = sorted(known - set(values))
        unexpected = sorted(set(values) - known)
        if missing or unexpected:
            msg = f"Error(s) in reparametrizing for {type(module).__name__}:"
            if unexpected:
                msg += "\n\tUnexpected key(s): " + ", ".join(repr(k) for k in unexpected) + "."
            if missing:
                msg += "\n\tMissing key(s): " + ", ".join(repr(k) for k in missing) + "."
            raise RuntimeError(msg)
    if tie_weights:             # a tensor tied under several names follows the one given
        by_id = {}
        for n, t in named:
            if n in values:
                by_id.setdefault(id(t), values[n])
        for n, t in named:
            if n not in values and id(t) in by_id:
                values[n] = by_id[id(t)]
    saved = []
    try:
        for n, v in values.items():
            owner, _, leaf = n.rpartition(".")
            sub = module.get_submodule(owner) if owner else module
            table = "_parameters" if leaf in sub._parameters else (
                "_buffers" if leaf in sub._buffers else None)
            if table is None:
                saved.append((sub, None, leaf, sub.__dict__.get(leaf, _MISSING)))
                sub.__dict__[leaf] = v
            else:
                saved.append((sub, table, leaf, getattr(sub, table)[leaf]))
                getattr(sub, table)[leaf] = v
        args = () if args is None else (args if isinstance(args, tuple) else (args,))
        return module(*args, **(kwargs or {}))
    finally:
        for sub, table, leaf, old in reversed(saved):
            if table is None:
                if old is _MISSING:
                    sub.__dict__.pop(leaf, None)
                else:
                    sub.__dict__[leaf] = old
            else:
                getattr(sub, table)[leaf] = old


_MISSING = object()
