"""Views, indexing and joining: select/slice/narrow/squeeze/unsqueeze/split/chunk,
x[key] and x[key] = v, index_select/gather/masked_select/masked_fill, where, cat/stack.

Every index a user passes is checked here, with PyTorch's messages, before a kernel sees
it. Views are one strided-view row each (Python computes the layout and where the view's
elements sit in the base's gradient). Advanced indexing becomes positions: row-major
offsets into the indexed tensor, computed by NumPy (whose indexing rules PyTorch shares).
"""
import numbers
import warnings

import numpy as np

from . import dtype as D
from . import methods
from .._engine import layout as L
from .._engine import sizes
from .._engine.state import GRAD_MODE, RECORDING
from .tensor import (Tensor, E, run, VIEW_WRITERS, _wrap, _adopt_ref, _numpy_view, _array_of, _dim,
                     _is_scalar, multi_view_output, view_of_leaf, not_tensor)
from ..ops.registry import BY_NAME
from .promotion import from_array, bump_version, to, _broadcast_check, result_type
from .creation import tensor as make

_FV = 16


def _layout(t):
    m = E.meta[t._i]
    nd = int(m[L.M_NDIM])
    return (m[L.M_SHAPE:L.M_SHAPE + nd].tolist(), m[L.M_STRIDE:L.M_STRIDE + nd].tolist(),
            int(m[L.M_OFF]))


def _contiguous_strides(shape):
    st, s = [], 1
    for n in reversed(shape):
        st.append(s)
        s *= n
    return st[::-1]


def view_strides(shape, strides, new):
    """The strides of a view of a tensor (shape, strides) as shape `new`, or None when a
    dim of `new` would span elements that are not evenly spaced (PyTorch's
    computeStride): dims can merge only where the memory is evenly spaced, and split
    anywhere, so view() works on slices, transposes and expands where their layout allows
    it, and reshape() of such a tensor is a view as in PyTorch."""
    if not shape:
        return [1] * len(new)
    numel = 1
    for n in shape:
        numel *= n
    if numel == 0:
        return list(strides) if list(shape) == list(new) else _contiguous_strides(
            [max(n, 1) for n in new])
    out = [0] * len(new)
    vd = len(new) - 1
    chunk = strides[-1]
    tn = vn = 1
    for td in range(len(shape) - 1, -1, -1):
        tn *= shape[td]
        if td == 0 or (shape[td - 1] != 1 and strides[td - 1] != tn * chunk):
            while vd >= 0 and (vn < tn or new[vd] == 1):
                out[vd] = vn * chunk
                vn *= new[vd]
                vd -= 1
            if vn != tn:
                return None
            if td > 0:
                chunk = strides[td - 1]
                tn = vn = 1
    return out if vd == -1 else None


def _view(t, opname, shape, strides, off, gst, goff, piece=0):
    """A view of t with the given layout; gst/goff: where its elements sit in t's
    contiguous gradient."""
    nd = len(shape)
    fargs = [off, nd] + list(shape) + [0] * (L.MAXD - nd) + list(strides)
    op = BY_NAME[opname]
    iargs = op.pack(grad_offset=goff, grad_strides=gst, piece=piece)
    return _wrap(run(op, t._i, iargs=iargs, fargs=fargs))


# ---------------------------------------------------------------- basic views
def select(input, dim, index):
    shape, st, off = _layout(input)
    nd = len(shape)
    if nd == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    d = _dim(dim, nd, "select")
    index = _int(index, "select")
    if not -shape[d] <= index < shape[d]:
        raise IndexError(f"select(): index {index} out of range for tensor of size {shape} at "
                         f"dimension {d}")
    index %= shape[d]
    cst = _contiguous_strides(shape)
    return _view(input, "select", shape[:d] + shape[d + 1:], st[:d] + st[d + 1:],
                 off + index * st[d], cst[:d] + cst[d + 1:], index * cst[d])


def _int(x, fn):
    if isinstance(x, Tensor):
        x = x.__index__()
    if not isinstance(x, numbers.Integral) or isinstance(x, bool):
        raise TypeError(f"{fn}(): expected an int, got {type(x).__name__}")
    return int(x)


def _slice(input, d, start, stop, step, opname="slice", piece=0):
    shape, st, off = _layout(input)
    if step <= 0:
        raise ValueError("step must be greater than zero")
    start, stop, _ = slice(start, stop, step).indices(shape[d])
    n = len(range(start, stop, step))
    cst = _contiguous_strides(shape)
    sh = list(shape)
    sh[d] = n
    nst = list(st)
    nst[d] = st[d] * step
    gst = list(cst)
    gst[d] = cst[d] * step
    start = start if n else 0
    return _view(input, opname, sh, nst, off + start * st[d], gst, start * cst[d], piece)


def narrow(input, dim, start, length):
    nd = input.ndim
    if nd == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    d = _dim(dim, nd, "narrow")
    size = input.shape[d]
    start, length = _int(start, "narrow"), _int(length, "narrow")
    if not -size <= start <= size:
        raise IndexError(f"start out of range (expected to be in range of [{-size}, {size}], "
                         f"but got {start})")
    if start < 0:           # (start == size stays: an empty slice at the end, or an error)
        start += size
    if length < 0 or start + length > size:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size "
                           f"({size}).")
    return _slice(input, d, start, start + length, 1)


def unsqueeze(input, dim):
    """A view of input with a dim of size 1 inserted at dim."""
    if not isinstance(input, Tensor):
        raise not_tensor("unsqueeze", input)
    shape, st, off = _layout(input)
    nd = len(shape)
    if nd >= L.MAXD:
        raise RuntimeError(f"tapegrad tensors have at most {L.MAXD} dims")
    d = _dim(dim, nd + 1, "unsqueeze")
    new_st = st[d] * shape[d] if d < nd else 1
    cst = _contiguous_strides(shape)
    return _view(input, "unsqueeze", shape[:d] + [1] + shape[d:], st[:d] + [new_st] + st[d:],
                 off, cst[:d] + [0] + cst[d:], 0)


def squeeze(input, dim=None):
    """A view of input without its dims of size 1 (all, or those of dim)."""
    if not isinstance(input, Tensor):
        raise not_tensor("squeeze", input)
    shape, st, off = _layout(input)
    nd = len(shape)
    if dim is None:
        drop, op = {d for d in range(nd) if shape[d] == 1}, "squeeze"
    elif isinstance(dim, (tuple, list)):
        drop = {_dim(x, nd, "squeeze") for x in dim}
        drop, op = {d for d in drop if shape[d] == 1}, "squeeze_dims"
    else:
        d = _dim(dim, nd, "squeeze")
        drop, op = ({d} if nd and shape[d] == 1 else set()), "squeeze_dim"
    cst = _contiguous_strides(shape)
    keep = [d for d in range(nd) if d not in drop]
    return _view(input, op, [shape[d] for d in keep], [st[d] for d in keep], off,
                 [cst[d] for d in keep], 0)


def _alias(input):
    shape, st, off = _layout(input)
    return _view(input, "alias", shape, st, off, _contiguous_strides(shape), 0)


def split(tensor, split_size_or_sections, dim=0):
    """Views of tensor along dim: pieces of split_size_or_sections elements (the last
    may be shorter), or of the sizes a list of them gives."""
    if not isinstance(tensor, Tensor):
        raise not_tensor("split", tensor, "tensor")
    nd = tensor.ndim
    if nd == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    d = _dim(dim, nd, "split")
    size = tensor.shape[d]
    if isinstance(split_size_or_sections, (list, tuple)):
        sizes = [_int(s, "split") for s in split_size_or_sections]
        if sum(sizes) != size or any(s < 0 for s in sizes):
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {size} "
                               f"(input tensor's size at dimension {d}), but got "
                               f"split_sizes={sizes}")
        op = "split_with_sizes"
    else:
        k = _int(split_size_or_sections, "split")
        if k <= 0 and not (k == 0 and size == 0):
            raise RuntimeError(f"split expects split_size be non-negative, but got split_size={k}")
        sizes = ([k] * (size // k) + ([size % k] if size % k else [])) if k and size else [0]
        op = "split"
    out, start = [], 0
    for k, s in enumerate(sizes):
        out.append(_slice(tensor, d, start, start + s, 1, op, k))
        start += s
    return tuple(out)


def chunk(input, chunks, dim=0):
    chunks = _int(chunks, "chunk")
    if chunks <= 0:
        raise RuntimeError("chunk expects `chunks` to be greater than 0, got: " + str(chunks))
    d = _dim(dim, input.ndim, "chunk")
    size = input.shape[d]
    if size == 0:           # PyTorch: `chunks` empty pieces
        return tuple(_slice(input, d, 0, 0, 1, "split", k) for k in range(chunks))
    return split(input, -(-size // chunks), d)


# ---------------------------------------------------------------- x[key]
# An index key is first put in one canonical form, read as PyTorch reads it
# (python_variable_indexing.cpp): a tuple whose items are Python ints, slices of ints,
# None, and index arrays (NumPy int64 or bool arrays, or int64/bool tensors of one dim or
# more; a bool scalar is a 0-d bool array). Ellipsis is spelled out as full slices once
# the tensor's rank is known. Everything after that reads only this form, so a kind of
# index is either understood here or refused here, never reinterpreted downstream.
_INDEX_TYPES_MSG = ("only integers, slices (`:`), ellipsis (`...`), None and long or byte "
                    "Variables are valid indices (got {})")
_FLOAT_INDEX_MSG = "tensors used as indices must be long, int, byte or bool tensors"
_SEQ_AS_TUPLE_LIMIT = 32        # NumPy's legacy rule, which PyTorch keeps


def _is_sequence(k):
    return isinstance(k, (list, tuple, range, np.ndarray, str, bytes))


def _sequence_as_tuple(key):
    """PyTorch's (and old NumPy's) heuristic: a short non-tuple sequence holding a
    sequence, tensor, slice, None or Ellipsis is a tuple of indices (x[[[0, 1], [2, 2]]]
    is x[[0, 1], [2, 2]]), with a deprecation warning; any other is one index array."""
    if not isinstance(key, (list, range)) or len(key) >= _SEQ_AS_TUPLE_LIMIT:
        return False
    return any(isinstance(k, (Tensor, slice)) or k is None or k is Ellipsis or _is_sequence(k)
               for k in key)


def _uint8_mask(a):
    warnings.warn("indexing with dtype uint8 is deprecated, please use a dtype bool "
                  "instead.", UserWarning, stacklevel=4)
    return a.astype(np.bool_)


def _array_index(a):
    """A NumPy array used as an index, as PyTorch reads it (it converts the array to a
    tensor first): bool and uint8 are masks, other integers and floats (truncated toward
    zero, as PyTorch's conversion to long does) are int64 positions."""
    if a.dtype == np.bool_:
        return a
    if a.dtype == np.uint8:
        return _uint8_mask(a)
    if a.dtype.kind in "iuf":
        if a.dtype.kind == "f" and a.size and not np.isfinite(a).all():
            raise IndexError("index arrays must hold finite numbers")
        if a.ndim == 0:
            return _int_item(int(a), "index")
        return a.astype(np.int64)
    raise IndexError(_INDEX_TYPES_MSG.format(f"numpy.ndarray of dtype {a.dtype}"))


def _data_index(data):
    """A (nested) list, tuple or range used as one index array, as PyTorch builds its index
    tensor: all-bool data is a mask, all-uint8 a (deprecated) mask, anything else int64,
    floats truncated toward zero; strings and other objects are refused."""
    kinds = set()

    def walk(v):
        if isinstance(v, Tensor):
            if v.dtype.is_floating_point:
                kinds.add("f")
            else:
                kinds.add("b" if v.dtype is D.bool_ else "i")
            return _numpy_view(v)
        if isinstance(v, np.ndarray):
            kinds.add({"b": "b", "u": "u8" if v.dtype == np.uint8 else "i"}.get(
                v.dtype.kind, "f" if v.dtype.kind == "f" else "i" if v.dtype.kind == "i"
                else "?"))
            return v
        if isinstance(v, (bool, np.bool_)):
            kinds.add("b")
            return bool(v)
        if isinstance(v, np.uint8):
            kinds.add("u8")
            return int(v)
        if isinstance(v, numbers.Integral):
            kinds.add("i")
            return int(v)
        if isinstance(v, numbers.Real):
            kinds.add("f")
            return float(v)
        if isinstance(v, (str, bytes)):
            raise TypeError(f"new(): invalid data type '{type(v).__name__}'")
        if isinstance(v, (list, tuple, range)):
            return [walk(e) for e in v]
        raise TypeError(f"Could not infer dtype of {type(v).__name__}")

    values = walk(data)
    if "?" in kinds:
        raise IndexError(_FLOAT_INDEX_MSG)
    try:
        a = np.array(values, dtype=np.float64 if "f" in kinds else None)
    except ValueError:
        raise ValueError("an index given as a nested sequence must be rectangular (its "
                         "lists at one depth all of one length)") from None
    if a.dtype == object:
        raise ValueError("an index given as a nested sequence must be rectangular (its "
                         "lists at one depth all of one length)")
    if kinds == {"b"}:
        return a.astype(np.bool_)
    if kinds == {"u8"}:
        return _uint8_mask(a)
    if a.size and a.dtype.kind == "f" and not np.isfinite(a).all():
        raise IndexError("index arrays must hold finite numbers")
    return a.astype(np.int64)


def _int_item(k, fn):
    """A Python int index; one outside int64 can only be out of bounds."""
    k = int(k)
    if not -2 ** 63 <= k < 2 ** 63:
        raise IndexError(f"{fn} {k} is out of range for a 64-bit index")
    return k


def _slice_item(k):
    def part(v):
        if v is None:
            return None
        if isinstance(v, Tensor):
            if v.numel() != 1 or not (v.dtype is D.int64 or v.dtype is D.bool_):
                raise TypeError("only integer tensors of a single element can be converted "
                                "to an index")
            return int(v.item())
        if not hasattr(v, "__index__"):
            raise TypeError("slice indices must be integers or None or have an __index__ "
                            "method")
        return _int_item(v.__index__(), "slice index")
    s = slice(part(k.start), part(k.stop), part(k.step))
    if s.step == 0:
        raise ValueError("slice step cannot be zero")
    if s.step is not None and s.step < 0:
        raise ValueError("step must be greater than zero")
    return s


def _key_item(k):
    """One item of a tuple key in canonical form (see above)."""
    if k is None or k is Ellipsis:
        return k
    if isinstance(k, slice):
        return _slice_item(k)
    if isinstance(k, bool):
        return np.array(k)
    if isinstance(k, Tensor):
        if k.dtype.is_floating_point:
            raise IndexError(_FLOAT_INDEX_MSG)
        if k.ndim == 0:         # a 0-d tensor indexes like the Python value it holds
            v = k.item()
            return np.array(v) if k.dtype is D.bool_ else _int_item(v, "index")
        return k
    if isinstance(k, np.ndarray):
        return _array_index(k)
    if isinstance(k, np.bool_):         # (PyTorch refuses NumPy's bool scalar, too)
        raise IndexError(_INDEX_TYPES_MSG.format("numpy.bool"))
    if isinstance(k, numbers.Integral):
        return _int_item(k, "index")
    if isinstance(k, (list, tuple, range)):
        return _data_index(k)
    if isinstance(k, (str, bytes)):
        raise TypeError(f"new(): invalid data type '{type(k).__name__}'")
    name = type(k).__name__
    if type(k).__module__ not in ("builtins", None):
        name = f"{type(k).__module__.split('.')[0]}.{name}"
    raise IndexError(_INDEX_TYPES_MSG.format(name))


def _canonical_key(key):
    """key as a tuple of canonical items (see above), Ellipsis still in place."""
    if isinstance(key, tuple):
        items = key
    elif _sequence_as_tuple(key):
        warnings.warn("Using a non-tuple sequence for multidimensional indexing is "
                      "deprecated (PyTorch will read it as one index tensor); use "
                      "x[tuple(seq)] instead of x[seq].", UserWarning, stacklevel=3)
        items = tuple(key)
    else:
        items = (key,)
    return tuple(_key_item(k) for k in items)


def _dims_used(k):
    if k is None or k is Ellipsis:
        return 0
    if isinstance(k, (np.ndarray, Tensor)) and k.dtype in (np.bool_, D.bool_):
        return k.ndim               # a mask covers its own dims (a bool scalar none)
    return 1


def _spell_out(key, nd):
    """key with each Ellipsis replaced by the full slices it stands for, checked against
    the tensor's rank."""
    used = sum(_dims_used(k) for k in key)
    if used > nd:
        raise IndexError(f"too many indices for tensor of dimension {nd}")
    out = []
    for k in key:
        if k is Ellipsis:
            out.extend([slice(None)] * (nd - used))
        else:
            out.append(k)
    return tuple(out)


def _is_advanced(k):
    return isinstance(k, (Tensor, np.ndarray))


def _as_array(k):
    return _numpy_view(k) if isinstance(k, Tensor) else k


def _numpy_key(key):
    return tuple(_as_array(k) for k in key)


def _positions(shape, key):
    """Row-major offsets of x[key] into x (bounds checked here), key canonical and spelled
    out. As in PyTorch, integers, slices and None apply first (a view); then the index
    arrays index that view with NumPy's rules, which PyTorch shares from there on (a
    bool scalar is a unit dim, added by the view, masked by a one-element mask)."""
    n = 1
    for s in shape:
        n *= s
    ar = np.arange(n, dtype=np.int64).reshape(shape)
    basic, rest = [], []
    for k in _numpy_key(key):
        if isinstance(k, np.ndarray) and k.ndim == 0:
            basic.append(None)
            rest.append(k.reshape(1))
        elif isinstance(k, np.ndarray):         # (a mask keeps the dims it covers)
            basic.extend([slice(None)] * (k.ndim if k.dtype == np.bool_ else 1))
            rest.append(k)
        elif k is None or isinstance(k, slice):
            basic.append(k)
            rest.append(slice(None))
        else:                                   # an integer: a select, gone from the view
            basic.append(k)
    try:
        sub = ar[tuple(basic)]
        _check_masks(sub.shape, rest)
        return np.ascontiguousarray(sub[tuple(rest)])
    except IndexError as exc:
        raise IndexError(str(exc).replace("axis", "dimension")) from None


def _check_masks(shape, rest):
    nd = len(shape)
    d = 0
    for k in rest:
        if isinstance(k, np.ndarray) and k.dtype == np.bool_:
            for j in range(k.ndim):
                if d + j >= nd or k.shape[j] != shape[d + j]:
                    raise IndexError(f"The shape of the mask {list(k.shape)} at index {j} does "
                                     f"not match the shape of the indexed tensor {list(shape)} "
                                     f"at index {d + j}")
            d += k.ndim
        else:
            d += 1


def _index_key(self, key):
    """The canonical, spelled-out form of key for tensor self."""
    if self.ndim == 0 and isinstance(key, numbers.Integral) and not isinstance(key, bool):
        raise IndexError("invalid index of a 0-dim tensor. Use `tensor.item()` in Python to "
                         "convert a 0-dim tensor to a number")
    return _spell_out(_canonical_key(key), self.ndim)


def getitem(self, key):
    if type(key) is slice and self.ndim:        # x[a:b:c]: the common case, one view
        key = _slice_item(key)
        return _slice(self, 0, key.start, key.stop, 1 if key.step is None else key.step)
    key = _index_key(self, key)
    if any(_is_advanced(k) for k in key):
        return _advanced(self, key)
    t = self
    d = 0           # dim of the view built so far
    od = 0          # dim of self (for messages)
    for k in key:
        if k is None:
            t = unsqueeze(t, d)
            d += 1
        elif isinstance(k, slice):
            start, stop, step = k.indices(t.shape[d])
            if not (start == 0 and stop == t.shape[d] and step == 1):
                t = _slice(t, d, k.start, k.stop, step)
            d += 1
            od += 1
        else:
            size = t.shape[d]
            if not -size <= k < size:
                raise IndexError(f"index {k} is out of bounds for dimension {od} with size {size}")
            t = select(t, d, k)
            od += 1
    return _alias(t) if t is self else t


def _advanced(self, key):
    shape = list(self.shape)
    if len(key) == 1:
        t = key[0]
        if (isinstance(t, Tensor) and t.dtype is D.int64 and shape
                and self.dtype.is_floating_point and t.is_contiguous()
                and t.ndim + len(shape) - 1 <= L.MAXD):
            # x[idx] with an index tensor: the kernel reads (and bounds-checks) the index
            # tensor itself; no positions are made and Python never reads its values
            out = list(t.shape) + shape[1:]
            return _wrap(run(BY_NAME["index_rows"], self._i, t._i, fargs=[len(out)] + out))
        idx = _as_array(t)
        if idx.dtype != np.bool_ and shape:                         # x[idx]: rows
            return _take(self, "index", _row_positions(shape, 0, idx), t)
    # the first index tensor is the row's third input; a second one counts versions for
    # the saved positions (input 1: made here, never seen by the user), so a write into
    # either is refused; one more input slot each would be needed for a third and more
    tensors = [k for k in key if isinstance(k, Tensor)]
    out = _take(self, "index", _positions(shape, key), tensors[0] if tensors else None)
    if len(tensors) > 1 and tensors[1] is not tensors[0]:
        r = int(E.meta[out._i, L.M_ROW])
        if r >= 0:
            _saved_counts_with(r, L.R_IN + L.IW + L.IN_SAVED, L.R_IN + L.IW + L.IN_VER,
                               tensors[1])
    return out


def _row_positions(shape, d, idx):
    """Offsets of x.index_select(d, idx) (idx any shape, inserted at d), bounds checked."""
    size = shape[d]
    idx = np.asarray(idx, dtype=np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        bad = (idx < -size) | (idx >= size)
        if bad.any():
            v = int(idx[bad].flat[0])
            raise IndexError(f"index {v} is out of bounds for dimension {d} with size {size}")
        idx = np.where(idx < 0, idx + size, idx)
    outer = inner = 1
    for n in shape[:d]:
        outer *= n
    for n in shape[d + 1:]:
        inner *= n
    rows = idx.reshape(-1, 1) * inner + np.arange(inner, dtype=np.int64)   # (k, inner)
    if outer > 1:
        rows = np.arange(outer, dtype=np.int64).reshape(-1, 1, 1) * (size * inner) + rows
    return rows.reshape(tuple(shape[:d]) + idx.shape + tuple(shape[d + 1:]))


def _take(t, opname, pos, index=None):
    """t's elements at the positions pos; index: the user's index or mask tensor, which
    the row saves (as PyTorch saves it) so that writing into it before the backward is
    refused."""
    if not t.dtype.is_floating_point:
        return from_array(_numpy_view(t).reshape(-1)[pos] if t.is_contiguous()
                          else np.ascontiguousarray(_numpy_view(t)).reshape(-1)[pos])
    p = from_array(np.ascontiguousarray(pos, dtype=np.int64))
    c = index._i if isinstance(index, Tensor) else -1
    return _wrap(run(BY_NAME[opname], t._i, p._i, c=c))


def index_select(input, dim, index):
    if not isinstance(index, Tensor) or index.dtype is not D.int64:
        raise TypeError("index_select(): Expected dtype int64 for index")
    if index.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    nd = input.ndim
    d = _dim(dim, nd, "index_select")
    shape = list(input.shape) or [1]
    idx = _numpy_view(index).reshape(-1)
    size = shape[d]
    bad = (idx < 0) | (idx >= size)
    if bad.any():
        if d == 0:
            raise IndexError("index out of range in self")
        raise RuntimeError(f"INDICES element is out of DATA bounds, id={int(idx[bad][0])} "
                           f"axis_dim={size}")
    pos = _row_positions(shape, d, idx)
    if nd == 0:
        pos = pos.reshape(index.shape)
    return _take(input, "index_select", pos, index)


def gather(input, dim, index):
    if not isinstance(index, Tensor) or index.dtype is not D.int64:
        raise RuntimeError("gather(): Expected dtype int64 for index")
    nd = input.ndim
    d = _dim(dim, nd, "gather")
    if index.ndim != nd and not (nd == 0 and index.ndim <= 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as input "
                           "tensor")
    shape = list(input.shape)
    ishape = list(index.shape)
    for k in range(nd):
        if k != d and ishape[k] > shape[k]:
            raise RuntimeError(f"Size does not match at dimension {k} expected index "
                               f"{ishape} to be no larger than self {shape} apart from "
                               f"dimension {d}")
    idx = _numpy_view(index)
    size = shape[d] if nd else 1
    bad = (idx < 0) | (idx >= size)
    if bad.any():
        raise RuntimeError(f"index {int(idx[bad].flat[0])} is out of bounds for dimension {d} "
                           f"with size {size}")
    cst = _contiguous_strides(shape)
    pos = np.zeros(ishape, np.int64)
    for k in range(nd):
        if k == d:
            pos = pos + idx * cst[k]
        else:
            sh = [1] * nd
            sh[k] = ishape[k]
            pos = pos + np.arange(ishape[k], dtype=np.int64).reshape(sh) * cst[k]
    return _take(input, "gather", pos, index)


def _bool_mask(mask, fn):
    if not isinstance(mask, Tensor) or mask.dtype is not D.bool_:
        raise RuntimeError(f"{fn} only supports boolean masks, but got mask with dtype "
                           f"{getattr(mask, 'dtype', type(mask).__name__)}")
    return _numpy_view(mask)


def masked_select(input, mask):
    m = _bool_mask(mask, "masked_select")
    shape = np.broadcast_shapes(tuple(input.shape), m.shape)
    src = input if tuple(input.shape) == shape else input.expand(shape)
    return _take(src, "masked_select", np.flatnonzero(np.broadcast_to(m, shape)), mask)


def masked_fill(input, mask, value):
    """input with value where mask (broadcast) is True."""
    return _masked_fill(input, mask, value, False)


def masked_fill_(input, mask, value):
    """masked_fill in place."""
    return _masked_fill(input, mask, value, True)


def _masked_fill(input, mask, value, _inplace):
    if not isinstance(input, Tensor):
        raise not_tensor("masked_fill_" if _inplace else "masked_fill", input)
    m = _bool_mask(mask, "masked_fill_" if _inplace else "masked_fill")
    if isinstance(value, Tensor):
        if value.ndim:
            raise RuntimeError("masked_fill_ only supports a 0-dimensional value tensor, but "
                               f"got tensor with {value.ndim} dimension(s).")
        if value.requires_grad and not _inplace:    # the value gets a gradient too
            return _where(mask, value.to(input.dtype), input, "masked_fill_tensor")
        value = value.item()
    if not input.dtype.is_floating_point:
        if _inplace:
            a = _numpy_view(input)
            a[np.broadcast_to(m, a.shape)] = value
            bump_version(input)
            return input
        a = _numpy_view(input).copy()
        shape = np.broadcast_shapes(a.shape, m.shape)
        a = np.broadcast_to(a, shape).copy()
        a[np.broadcast_to(m, shape)] = value
        return from_array(a)
    mf = from_array(m.astype(input.dtype.np))
    flags = GRAD_MODE.on | (L.OPF_INPLACE if _inplace else 0)
    r = run(BY_NAME["masked_fill"], input._i, mf._i, float(value), flags=flags, c=mask._i)
    return input if _inplace else _wrap(r)



# ---------------------------------------------------------------- x[key] = v
def setitem(self, key, value):
    if not (isinstance(value, Tensor) or _is_scalar(value)):
        raise TypeError(f"can't assign a {type(value).__name__} to a tapegrad tensor")
    orig_key = key
    key = _index_key(self, key)
    if not self.dtype.is_floating_point:
        pos = _positions(list(self.shape), key)
        v = _numpy_view(value) if isinstance(value, Tensor) else value
        _value_shape(v, pos.shape)
        a = _numpy_view(self)
        flat = a.reshape(-1) if a.flags.c_contiguous else np.ascontiguousarray(a).reshape(-1)
        flat[pos] = np.reshape(v, np.shape(v)[max(np.ndim(v) - pos.ndim, 0):])
        if not a.flags.c_contiguous:
            a[...] = flat.reshape(a.shape)
        bump_version(self)
        return
    pos = _positions(list(self.shape), key)
    if isinstance(value, Tensor):
        v = to(value, self.dtype)
    else:
        v = _constant(lambda: make(float(value), dtype=self.dtype))
    _value_shape(v, pos.shape)
    if len(v.shape) > len(pos.shape):           # PyTorch drops leading 1s of the value
        v = v.reshape(v.shape[len(v.shape) - len(pos.shape):])
    advanced = any(_is_advanced(k) for k in key)
    if not advanced and _overlaps(self):
        # an expanded tensor: PyTorch writes into the view self[key], which need not
        # repeat a memory location though self does (the engine refuses self)
        view = getitem(self, orig_key)
        if not _overlaps(view):
            copy_(view, v)
            return
    try:        # a basic key writes through a view: PyTorch's CopySlices
        _put(self, pos, v, op="index_put" if advanced else "copy_slices")
    except RuntimeError as exc:
        if "leaf Variable" in str(exc) and not advanced:
            # PyTorch writes x[basic key] through a view of x
            raise RuntimeError("a view of a leaf Variable that requires grad is being used in "
                               "an in-place operation.") from None
        raise


def _overlaps(t):
    """Whether t has a 0 stride over a dim longer than 1 (elements sharing memory)."""
    return any(n > 1 and st == 0 for n, st in zip(t.shape, t.stride()))


def _value_shape(v, shape):
    """Refuse a value that does not broadcast to the indexing result's shape (PyTorch
    also drops a value's leading unit dims)."""
    vs = tuple(np.shape(v))
    extra = max(len(vs) - len(shape), 0)
    try:
        if any(s != 1 for s in vs[:extra]):
            raise ValueError
        np.broadcast_shapes(vs[extra:], tuple(shape))
    except ValueError:
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(vs)} cannot be "
                           f"broadcast to indexing result of shape {list(shape)}") from None


def _put(self, pos, v, accumulate=False, op="index_put"):
    """self.flat[pos] = v (or += v), v broadcastable to pos's shape and of self's dtype:
    one IndexPutBackward0 (or CopySlices) row, the gradient reaching v and self's other
    elements."""
    if E.meta[self._i, L.M_NUMEL] == 0:
        # nothing to write, and the engine would refuse an empty tensor whose strides
        # repeat a memory location (a 0 stride)
        bump_version(self)
        return
    if E.meta[v._i, L.M_SID] == E.meta[self._i, L.M_SID]:
        v = v.clone()               # reading while writing the same memory
    if tuple(v.shape) != pos.shape:
        v = v.expand(pos.shape)
    positions = _constant(lambda: from_array(pos))  # (held: a dropped wrapper frees it)
    op = BY_NAME[op]
    run(op, self._i, positions._i, flags=GRAD_MODE.on | L.OPF_INPLACE, c=v._i,
        iargs=op.pack(accumulate=bool(accumulate)))


def _constant(make):
    """make(): a tensor of positions, or of a Python scalar to write. Python computed it
    from shapes, layouts and Python values, which a replay's guards fix (index tensors
    are read through _numpy_view: a graph break), so a recording keeps it as an outside
    tensor, the same every step, instead of logging a birth a replay could not repeat."""
    rec = RECORDING[0]
    return make() if rec is None else rec.constant(make)


def write_through_view(op, a, b, s, flags, c, iargs, s2, fargs):
    """PyTorch's CopySlices: an in-place op that records on view a (of a tensor with a
    history, or with a value that requires grad) is a write into a's base. Here: the op
    out of place on a copy of a's values (what it saves stays unmodified), then that
    result written into the base at a's positions; the base's in-place row re-derives
    a's history and its other views' (AsStridedBackward0). Returns 0 when written, 1
    where PyTorch refuses (a view of a leaf, an output of a multi-view op) or the base
    is not contiguous (the caller raises its refusal), or another refusal's code."""
    M = E.meta
    fl = int(M[a, L.M_FLAGS])
    if view_of_leaf(a) or not fl & (L.FL_VIEW | L.FL_PLAINVIEW) or M[a, L.M_BASE] < 0:
        return 1
    if multi_view_output(a) is not None:
        return 1
    base = _adopt_ref(int(M[a, L.M_BASE]))
    if not base.is_contiguous():
        return 1
    nd = int(M[a, L.M_NDIM])
    shape = tuple(int(n) for n in M[a, L.M_SHAPE:L.M_SHAPE + nd])
    if any(M[a, L.M_STRIDE + d] == 0 and shape[d] > 1 for d in range(nd)):
        # (even fill_/zero_: PyTorch takes the write and refuses it at backward, where
        # CopySlices writes the gradient through the expanded view; refused here now)
        return L.E_SELF_OVERLAP
    pos = np.full(shape, M[a, L.M_OFF] - M[base._i, L.M_OFF], np.int64)
    for d in range(nd):
        pos += (np.arange(shape[d], dtype=np.int64)
                * M[a, L.M_STRIDE + d]).reshape((-1,) + (1,) * (nd - 1 - d))
    if op.name in ("index_put", "copy_slices"):         # view[key] = value
        # b holds the positions _put computed in Python (a constant to a replay)
        pos = pos.reshape(-1)[_array_of(_adopt_ref(b))]
        _put(base, pos, _adopt_ref(c), bool(iargs[0]), op="copy_slices")
        return 0
    view = _adopt_ref(a)
    values = view.clone()           # (held: a dropped wrapper frees its id)
    out = _wrap(run(op, values._i, b, s, flags & ~(L.OPF_INPLACE | L.OPF_SOLO), iargs,
                    c=c, s2=s2, fargs=fargs))
    if out.shape != view.shape or out.dtype is not view.dtype:
        return 1
    _put(base, pos, out, op="copy_slices")
    _saved_result_is_the_view(out, view)
    return 0


def _saved_result_is_the_view(out, view):
    """An op that saves its result saves, in PyTorch, the view it wrote: a later write
    into the base makes the backward refuse it. So the saved result counts versions with
    the view's counter, from the version the write left."""
    r = int(E.meta[out._i, L.M_ROW])
    if r >= 0:
        _saved_counts_with(r, L.R_OSAVED, L.R_OVER, view)


def _saved_counts_with(r, saved_col, version_col, t):
    """The tensor row r saved in column saved_col (if any) counts versions with t's
    counter from t's version now, so that a write into t makes the backward refuse it."""
    saved = int(E.tape[r, saved_col])
    if saved < 0:
        return
    vs = int(E.meta[t._i, L.M_VSID])
    if E.meta[saved, L.M_VSID] != vs:
        E.meta[saved, L.M_VSID] = vs
        E.stor[vs, L.S_REFS] += 1           # (dropped with the alias)
    E.tape[r, version_col] = E.stor[vs, L.S_VERSION]


def index_put_(self, indices, values, accumulate=False):
    if not isinstance(indices, (tuple, list)) or not all(isinstance(k, Tensor) or k is None
                                                          for k in indices):
        raise TypeError("index_put_(): argument 'indices' must be tuple of Tensors")
    if not isinstance(values, Tensor):
        raise TypeError(f"index_put_(): argument 'values' must be Tensor, not "
                        f"{type(values).__name__}")
    key = _spell_out(tuple(slice(None) if k is None else _key_item(k) for k in indices),
                     self.ndim)
    _put(self, _positions(list(self.shape), key), to(values, self.dtype), accumulate)
    return self


def copy_(self, src, non_blocking=False):
    """self's values := src's, broadcast to self's shape and converted to self's dtype, in
    place (one version bump). A float tensor is written as self[...] = src, so under
    autograd the gradient reaches src (summed over broadcast dims, through the dtype
    conversion) and not self's old values, as PyTorch's CopyBackwards does."""
    if not isinstance(self, Tensor):
        raise TypeError(f"copy_(): argument 'self' must be Tensor, not {type(self).__name__}")
    if _is_scalar(src):
        src = make(src, dtype=self.dtype if self.dtype.is_floating_point else None)
    elif not isinstance(src, Tensor):
        raise TypeError(f"copy_(): argument 'src' (position 1) must be Tensor, not "
                        f"{type(src).__name__}")
    _broadcast_check(self, src)
    shape = tuple(self.shape)
    wide = np.broadcast_shapes(shape, tuple(src.shape))
    if wide != shape:
        raise RuntimeError(f"output with shape {list(shape)} doesn't match the broadcast "
                           f"shape {list(wide)}")
    if not self.dtype.is_floating_point:
        _numpy_view(self)[...] = _numpy_view(src)
        bump_version(self)
        return self
    _put(self, _positions(list(shape), (slice(None),) * len(shape)),
         to(src, self.dtype))
    return self


# ---------------------------------------------------------------- where
def where(condition, input=None, other=None):
    """input where condition is True, other elsewhere (broadcast together); with the
    condition alone, nonzero(condition, as_tuple=True)."""
    if input is None and other is None:
        return nonzero(condition, as_tuple=True)
    if input is None or other is None:
        raise TypeError("where() missing the 'input' or 'other' argument: give both, or "
                        "neither (nonzero)")
    return _where(condition, input, other, "where")


def _where(condition, input, other, _op):
    if not isinstance(condition, Tensor) or condition.dtype is not D.bool_:
        raise RuntimeError("where expected condition to be a boolean tensor, but got a tensor "
                           f"with dtype {getattr(condition, 'dtype', type(condition).__name__)}")
    rt = result_type(input, other)
    x = to(input, rt) if isinstance(input, Tensor) else make(input, dtype=rt)
    y = to(other, rt) if isinstance(other, Tensor) else make(other, dtype=rt)
    try:
        shape = np.broadcast_shapes(tuple(condition.shape), tuple(x.shape), tuple(y.shape))
    except ValueError:
        raise RuntimeError(f"where: shapes {list(condition.shape)}, {list(x.shape)} and "
                           f"{list(y.shape)} cannot be broadcast together") from None
    if not rt.is_floating_point:
        return from_array(np.where(_numpy_view(condition), _numpy_view(x), _numpy_view(y)))
    return _wrap(run(BY_NAME[_op], x._i, y._i, c=condition._i,
                     fargs=[len(shape)] + list(shape)))


def nonzero(input, *, as_tuple=False):
    """The indices of input's nonzero elements: one row per element, or (as_tuple) one
    index tensor per dim."""
    if not isinstance(input, Tensor):
        raise not_tensor("nonzero", input)
    nz = np.nonzero(_numpy_view(input))
    if as_tuple:
        return tuple(from_array(np.ascontiguousarray(i, dtype=np.int64)) for i in nz)
    return from_array(np.ascontiguousarray(np.stack(nz, axis=1), dtype=np.int64))


# ---------------------------------------------------------------- cat / stack
def _join_check(tensors, fn):
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{fn}(): argument 'tensors' must be tuple of Tensors, not "
                        f"{type(tensors).__name__}")
    if not tensors:
        raise RuntimeError(f"{fn}(): expected a non-empty list of Tensors")
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"{fn}(): expected Tensor as element in argument 'tensors', but "
                            f"got {type(t).__name__}")
    rt = result_type(*tensors) if len(tensors) > 1 else tensors[0].dtype
    if any(t.ndim == 0 for t in tensors) and fn == "cat":
        raise RuntimeError("zero-dimensional tensor (at position "
                           f"{[t.ndim for t in tensors].index(0)}) cannot be concatenated")
    return [to(t, rt) for t in tensors], rt


def cat(tensors, dim=0):
    given, rt = _join_check(tensors, "cat")
    # PyTorch skips legacy empty 1-D tensors in the checks (they stay in the graph)
    ts = [t for t in given if not (t.ndim == 1 and t.shape[0] == 0)] or given[:1]
    nd = ts[0].ndim
    d = _dim(dim, nd, "cat")
    ref = list(ts[0].shape)
    for k, t in enumerate(ts):
        if t.ndim != nd:
            raise RuntimeError(f"Tensors must have same number of dimensions: got {nd} and "
                               f"{t.ndim}")
        for j in range(nd):
            if j != d and t.shape[j] != ref[j]:
                raise RuntimeError(f"Sizes of tensors must match except in dimension {d}. "
                                   f"Expected size {ref[j]} but got size {t.shape[j]} for "
                                   f"tensor number {k} in the list.")
    shape = ref[:d] + [sum(t.shape[d] for t in ts)] + ref[d + 1:]
    sizes.check_new(shape, rt.np.itemsize)
    if not rt.is_floating_point:
        return from_array(np.concatenate([_numpy_view(t) for t in ts], axis=d))
    if len(ts) < len(given) and any(t.requires_grad for t in given):
        empty = ref[:d] + [0] + ref[d + 1:]     # a skipped tensor's (empty) gradient
        kept = {id(t) for t in ts}              # still reaches it, as in PyTorch
        ts = [t if id(t) in kept else t.reshape(empty) for t in given
              if id(t) in kept or t.requires_grad]
    return _join(ts, d, False)


def _join(ts, d, stack, opname=None):
    """One row joins up to three tensors; more are joined as a tree of rows."""
    if len(ts) > L.MAXIN:
        parts = [_join(ts[i:i + L.MAXIN], d, stack) for i in range(0, len(ts), L.MAXIN)]
        return _join(parts, d, False, "stack_parts" if stack else "cat")
    shape = list(ts[0].shape)
    if stack:
        shape.insert(d, len(ts))
    else:
        shape[d] = sum(t.shape[d] for t in ts)
    opname = opname or ("stack" if stack else "cat")
    sizes = [1 if stack else t.shape[d] for t in ts]
    op = BY_NAME[opname]
    return _wrap(run(op, ts[0]._i, ts[1]._i if len(ts) > 1 else -1,
                     c=ts[2]._i if len(ts) > 2 else -1,
                     iargs=op.pack(dim=d, stack=stack, sizes=sizes),
                     fargs=[len(shape)] + shape))


def stack(tensors, dim=0):
    ts, rt = _join_check(tensors, "stack")
    ref = list(ts[0].shape)
    for k, t in enumerate(ts):
        if list(t.shape) != ref:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {ref} at "
                               f"entry 0 and {list(t.shape)} at entry {k}")
    nd = len(ref)
    if nd >= L.MAXD:
        raise RuntimeError(f"tapegrad tensors have at most {L.MAXD} dims")
    d = _dim(dim, nd + 1, "stack")
    sizes.check_new(ref[:d] + [len(ts)] + ref[d:], rt.np.itemsize)
    if not rt.is_floating_point:
        return from_array(np.stack([_numpy_view(t) for t in ts], axis=d))
    return _join(ts, d, True)


def _split_method(self, split_size, dim=0):
    """Views of self along dim (tapegrad.split; PyTorch's method names the size
    split_size)."""
    return split(self, split_size, dim)


def _where_method(self, condition, other):
    """self where condition is True, other elsewhere (tapegrad.where)."""
    return where(condition, self, other)


_split_method.__name__, _where_method.__name__ = "split", "where"


def _register():
    T = {name: globals()[name] for name in (
        "select", "narrow", "unsqueeze", "squeeze", "chunk", "index_select", "gather",
        "masked_select", "masked_fill", "masked_fill_", "index_put_", "nonzero", "copy_")}
    T.update(__getitem__=getitem, __setitem__=setitem, split=_split_method,
             where=_where_method)
    methods.methods(**T)
    for name in ("select", "narrow", "unsqueeze", "squeeze", "split", "chunk", "index_select",
                 "gather", "masked_select", "masked_fill", "where", "nonzero", "cat", "stack"):
        methods.function(name, globals()[name])
    methods.functions(concat=cat, concatenate=cat)


_register()
VIEW_WRITERS.append(write_through_view)
