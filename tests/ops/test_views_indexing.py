"""Views and indexing: storage and version sharing, in-place checks through views,
gradients into the base (tapegrad.testing.gradcheck, float64, contiguous and
non-contiguous inputs), basic and advanced indexing values against NumPy, __setitem__,
bounds errors with PyTorch's messages, hypothesis-generated keys, and grad_fn names.

Expected errors and messages are PyTorch's, written out so the tests run without torch;
where torch is importable, separate tests run the same programs through torch to confirm
them.
"""
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tapegrad as tg
from tests.helpers import F64, INPLACE_MSG, assert_gradcheck, leaf, vals

HYP = settings(max_examples=15, deadline=None, derandomize=True,
               suppress_health_check=[HealthCheck.too_slow])
LEAF_MSG = "a leaf Variable that requires grad is being used in an in-place operation."
VIEW_LEAF_MSG = ("a view of a leaf Variable that requires grad is being used in an in-place "
                 "operation.")


def data(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def idx(values):
    return tg.tensor(np.asarray(values, np.int64))


def mask(values):
    return tg.tensor(np.asarray(values, bool))


def tg_key(key, as_tensor=True):
    """A NumPy-style key (lists / arrays for advanced parts) as a tapegrad key."""
    def one(k):
        if isinstance(k, (list, np.ndarray)):
            return tg.tensor(np.asarray(k)) if as_tensor else np.asarray(k).tolist()
        return k
    return tuple(one(k) for k in key) if isinstance(key, tuple) else one(key)


def np_key(key):
    def one(k):
        return np.asarray(k) if isinstance(k, list) else k
    return tuple(one(k) for k in key) if isinstance(key, tuple) else one(key)


def scatter(shape, key, w):
    """The gradient of (a[key] * w).sum() w.r.t. a: w added at the positions a[key] reads."""
    n = int(np.prod(shape))
    pos = np.arange(n).reshape(shape)[key]
    g = np.zeros(n)
    np.add.at(g, pos.reshape(-1), np.asarray(w, np.float64).reshape(-1))
    return g.reshape(shape)


def _set(t, key, v):
    t[key] = v
    return t


def error_of(fn, lib):
    try:
        fn(lib)
    except Exception as e:          # noqa: BLE001  (we compare what was raised)
        return type(e), str(e).replace(lib.__name__, "LIB")
    return None, None


def grad_input(shape, layout, seed=0):
    """(leaf, reader): gradcheck perturbs the leaf; reader(leaf) is the op's input, with
    the given memory layout: contiguous, Fortran order, or every other element of a
    twice-as-wide leaf."""
    a = data(shape, seed)
    if layout == "contig":
        return leaf(a), (lambda t: t)
    if layout == "fortran":
        return tg.from_numpy(np.asfortranarray(a)).requires_grad_(), (lambda t: t)
    return leaf(np.repeat(a, 2, axis=-1)), (lambda t: t[..., ::2])


# =========================================================================== 1. sharing
# name: (tapegrad view of a (2, 3, 4) base, the same view in NumPy)
VIEWS = {
    "view": (lambda t: t.view(4, 6), lambda a: a.reshape(4, 6)),
    "reshape": (lambda t: t.reshape(-1), lambda a: a.reshape(-1)),
    "transpose": (lambda t: t.transpose(0, 2), lambda a: a.transpose(2, 1, 0)),
    "permute": (lambda t: t.permute(2, 0, 1), lambda a: a.transpose(2, 0, 1)),
    "T": (lambda t: t[1].T, lambda a: a[1].T),
    "mT": (lambda t: t.mT, lambda a: np.swapaxes(a, -1, -2)),
    "squeeze": (lambda t: t[:, :1].squeeze(), lambda a: a[:, :1].squeeze()),
    "squeeze_int": (lambda t: t[:, 1:2].squeeze(1), lambda a: a[:, 1:2].squeeze(1)),
    "squeeze_tuple": (lambda t: t[:1, 2:].squeeze((0, 1)), lambda a: a[:1, 2:].squeeze((0, 1))),
    "unsqueeze": (lambda t: t.unsqueeze(1), lambda a: a[:, None]),
    "expand": (lambda t: t[:, :, 1:2].expand(2, 3, 4),
               lambda a: np.broadcast_to(a[:, :, 1:2], (2, 3, 4))),
    "flatten": (lambda t: t.flatten(), lambda a: a.reshape(-1)),
    "int": (lambda t: t[1], lambda a: a[1]),
    "slice": (lambda t: t[1:3:1], lambda a: a[1:3:1]),
    "slice_step": (lambda t: t[:, ::2, 1:4:2], lambda a: a[:, ::2, 1:4:2]),
    "none_last": (lambda t: t[..., None], lambda a: a[..., None]),
    "none_first": (lambda t: t[None], lambda a: a[None]),
    "ellipsis": (lambda t: t[...], lambda a: a[...]),
    "narrow": (lambda t: t.narrow(2, 1, 2), lambda a: a[:, :, 1:3]),
    "select": (lambda t: t.select(1, -1), lambda a: a[:, -1]),
    "split": (lambda t: t.split(3, dim=2)[1], lambda a: a[:, :, 3:]),
    "chunk": (lambda t: t.chunk(3, dim=1)[2], lambda a: a[:, 2:3]),
    "chain": (lambda t: t.T[1:][..., 0].unsqueeze(0), lambda a: a.T[1:][..., 0][None]),
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_view_shares_storage_and_version(name):
    """Writes through the base, through the view and through .data all show up on both
    sides; in-place ops bump one shared version counter, .data writes bump none."""
    f, g = VIEWS[name]
    a = np.arange(24.0).reshape(2, 3, 4)
    b = tg.tensor(a.copy(), dtype=F64)
    v, nv = f(b), g(a)
    np.testing.assert_array_equal(vals(v), nv)
    assert b._version == v._version == 0
    b.add_(1)
    a += 1
    assert b._version == v._version == 1
    np.testing.assert_array_equal(vals(v), nv)
    if name == "expand":        # several elements share one location: PyTorch refuses
        with pytest.raises(RuntimeError, match="more than one element of the written-to"):
            v.mul_(2)
    else:
        v.mul_(2)
        nv *= 2
        assert b._version == v._version == 2
        np.testing.assert_array_equal(vals(b), a)
    n = b._version
    b.data.mul_(-1)
    a *= -1
    np.testing.assert_array_equal(vals(v), nv)
    assert b._version == v._version == n


@pytest.mark.parametrize("name", list(VIEWS))
def test_view_of_non_leaf_shares_version(name):
    x = leaf(np.arange(24.0).reshape(2, 3, 4))
    y = x * 1
    v = VIEWS[name][0](y)
    assert v.requires_grad and not v.is_leaf
    y.add_(1)
    assert y._version == v._version == 1
    y[0, 0, 0] = 100.0
    assert y._version == v._version == 2
    a = np.arange(24.0).reshape(2, 3, 4) + 1
    a[0, 0, 0] = 100.0
    np.testing.assert_array_equal(vals(v), VIEWS[name][1](a))


def test_view_versions_match_torch():
    torch = pytest.importorskip("torch")

    def prog(L, f):
        b = L.arange(24.0).reshape(2, 3, 4) * 1
        v = f(b)
        out = [b._version, v._version]
        b.add_(1)
        out += [b._version, v._version]
        b.data.mul_(2)
        out += [b._version, v._version, float(v.sum())]
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # PyTorch deprecates .T on 3-d tensors
        for name, (f, _) in VIEWS.items():
            assert prog(tg, f) == prog(torch, f), name


def test_zero_dim_integer_tensor_index_is_a_select_view():
    """PyTorch treats a 0-d integer tensor key like a Python int: x[tensor(1)] is x[1]."""
    b = tg.arange(12.0).reshape(3, 4)
    v = b[idx(1)]
    b.add_(1)
    assert v._version == b._version == 1
    np.testing.assert_array_equal(vals(v), [5.0, 6.0, 7.0, 8.0])
    x = leaf(np.arange(12.0).reshape(3, 4))
    assert x[idx(1)].grad_fn.name() == "SelectBackward0"


def test_advanced_indexing_and_joins_return_copies():
    """x[idx], masks, index_select, gather, cat, stack, ... copy: later writes to the base
    do not show up, and the results keep their own version counters."""
    b = tg.arange(6.0).reshape(2, 3)
    outs = [b[[0, 1]], b[b > 2], b[:, [2, 0]], b.index_select(1, idx([0])),
            b.gather(1, idx([[0], [1]])), b.masked_select(b > 3), tg.cat([b, b]),
            tg.stack([b, b]), b.masked_fill(b > 3, 0.0), tg.where(b > 2, b, 0.0),
            b.T.reshape(6), b.T.flatten()]
    before = [vals(o).copy() for o in outs]
    b.add_(1)
    assert b._version == 1
    for o, old in zip(outs, before):
        assert o._version == 0
        np.testing.assert_array_equal(vals(o), old)


# =========================================================================== 2. in-place
def _saved_slice_base_changed(L):
    x = L.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 1
    w = y[1:].sin()                 # sin saves its input: a view of y
    y.mul_(2)
    w.sum().backward()


def _saved_transpose_base_setitem(L):
    x = L.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    y = x * 1
    z = y.T
    w = z * z
    y[0, 1] = 7.0
    w.sum().backward()


def _saved_base_view_changed(L):
    x = L.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 1
    w = y.sin()
    with L.no_grad():
        y[1:].mul_(2)
    w.sum().backward()


def _saved_base_setitem(L):
    x = L.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    y = x * 1
    w = y * y
    y[1:3] = 0.0
    w.sum().backward()


VERSION_ERRORS = {
    "saved_slice_base_changed": (_saved_slice_base_changed, "[LIB.FloatTensor [2]]"),
    "saved_transpose_base_setitem": (_saved_transpose_base_setitem, "[LIB.FloatTensor [3, 2]]"),
    "saved_base_view_changed": (_saved_base_view_changed, "[LIB.FloatTensor [3]]"),
    "saved_base_setitem": (_saved_base_setitem, "[LIB.FloatTensor [4]]"),
}


def _version_error_parts(msg):
    """(the text up to the tensor, the version clause); PyTorch names the node differently
    for views whose base changed (AsStrided, CopySlices), so that part is left out."""
    head = msg.split(", which is output")[0]
    return head, msg.split(" is at version ")[1].split(" Hint:")[0]


@pytest.mark.parametrize("case", list(VERSION_ERRORS))
def test_inplace_through_view_is_seen_at_backward(case):
    prog, tensor = VERSION_ERRORS[case]
    typ, msg = error_of(prog, tg)
    assert typ is RuntimeError
    assert msg.startswith(INPLACE_MSG + ": " + tensor + ", which is output 0 of ")
    assert "is at version 1; expected version 0 instead" in msg


@pytest.mark.parametrize("case", list(VERSION_ERRORS))
def test_inplace_through_view_errors_match_torch(case):
    torch = pytest.importorskip("torch")
    prog, _ = VERSION_ERRORS[case]
    (t1, m1), (t2, m2) = error_of(prog, tg), error_of(prog, torch)
    assert t1 is t2 is RuntimeError
    assert _version_error_parts(m1) == _version_error_parts(m2)


def test_changing_a_base_whose_views_are_not_saved_is_fine():
    """exp saves its output, not the view it reads: changing the base later is harmless."""
    x = leaf([1.0, 2.0, 3.0])
    y = x * 1
    w = y[1:].exp()
    y.mul_(2)
    assert y._version == 1
    w.sum().backward()
    np.testing.assert_allclose(vals(x.grad), [0.0, np.exp(2.0), np.exp(3.0)], rtol=1e-12)


def test_advanced_index_result_is_not_affected_by_base_change():
    x = leaf([1.0, 2.0, 3.0])
    y = x * 1
    w = y[[2, 0, 2]].sin()      # sin saves the copy, not y
    y.mul_(2)
    w.sum().backward()
    np.testing.assert_allclose(vals(x.grad), [np.cos(1.0), 0.0, 2 * np.cos(3.0)], rtol=1e-12)


# in-place on a view of a leaf requiring grad: (program on x and the library, PyTorch's message)
MULTI_VIEW_MSG = ("Output {} of Split is a view and is being modified inplace. This view is the "
                  "output of a function that returns multiple views. Such functions do not "
                  "allow the output views to be modified inplace. You should replace the "
                  "inplace operation by an out-of-place one.")
LEAF_VIEW_INPLACE = {
    "slice_mul_": (lambda x, L: x[1:].mul_(2), VIEW_LEAF_MSG),
    "T_add_": (lambda x, L: x.T.add_(1), VIEW_LEAF_MSG),
    "view_zero_": (lambda x, L: x.view(-1).zero_(), VIEW_LEAF_MSG),
    "squeeze_fill_": (lambda x, L: x[:1].squeeze().fill_(1.0), VIEW_LEAF_MSG),
    "select_iadd": (lambda x, L: x[0].__iadd__(1.0), VIEW_LEAF_MSG),
    "ellipsis_div_": (lambda x, L: x[...].div_(2), VIEW_LEAF_MSG),
    "narrow_sub_": (lambda x, L: x.narrow(1, 0, 2).sub_(1), VIEW_LEAF_MSG),
    "unsqueeze_mul_": (lambda x, L: x.unsqueeze(0).mul_(3), VIEW_LEAF_MSG),
    "expand_zero_": (lambda x, L: x[:, :1].expand(2, 3).zero_(), VIEW_LEAF_MSG),
    "view_masked_fill_": (lambda x, L: x[0].masked_fill_(L.tensor([True, False, True]), 0.0),
                          VIEW_LEAF_MSG),
    "leaf_masked_fill_": (lambda x, L: x.masked_fill_(x > 2, 0.0), LEAF_MSG),
    "split_add_": (lambda x, L: x.split(1)[0].add_(1), MULTI_VIEW_MSG.format(0)),
    "chunk_mul_": (lambda x, L: x.chunk(3, 1)[1].mul_(2), MULTI_VIEW_MSG.format(1)),
}


def _leaf_inplace(L, case):
    x = L.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    with pytest.raises(RuntimeError) as ei:
        LEAF_VIEW_INPLACE[case][0](x, L)
    return x, str(ei.value)


@pytest.mark.parametrize("case", list(LEAF_VIEW_INPLACE))
def test_inplace_on_view_of_leaf_raises(case):
    x, msg = _leaf_inplace(tg, case)
    assert msg == LEAF_VIEW_INPLACE[case][1]
    assert x._version == 0
    np.testing.assert_array_equal(vals(x), [[1, 2, 3], [4, 5, 6]])


@pytest.mark.parametrize("case", list(LEAF_VIEW_INPLACE))
def test_inplace_on_view_of_leaf_message_is_torchs(case):
    torch = pytest.importorskip("torch")
    assert _leaf_inplace(torch, case)[1] == LEAF_VIEW_INPLACE[case][1]


# =========================================================================== 3. view grads
# name: (input shape, view); CONTIG_ONLY: views PyTorch refuses on non-contiguous input
VIEW_GRADS = {
    "T": ((3, 2), lambda t: t.T),
    "mT": ((2, 3, 2), lambda t: t.mT),
    "transpose": ((2, 3, 2), lambda t: t.transpose(0, 2)),
    "permute": ((2, 3, 2), lambda t: t.permute(1, 2, 0)),
    "slice": ((4, 3), lambda t: t[1:3]),
    "slice_step": ((5, 3), lambda t: t[::2]),
    "slice_neg_step": ((5, 4), lambda t: t[-4:-1:2, 1::2]),
    "slice_empty": ((4, 2), lambda t: t[3:1]),
    "expand": ((3, 1), lambda t: t.expand(2, 3, 4)),
    "expand_minus1": ((1, 3), lambda t: t.expand(4, -1)),
    "view": ((2, 6), lambda t: t.view(3, 4)),
    "view_minus1": ((2, 3, 2), lambda t: t.view(-1, 2)),
    "reshape": ((2, 3, 2), lambda t: t.reshape(3, 4)),
    "flatten": ((2, 3, 2), lambda t: t.flatten()),
    "flatten_mid": ((2, 3, 2), lambda t: t.flatten(1)),
    "none_mid": ((2, 3), lambda t: t[:, None]),
    "none_last": ((2, 3), lambda t: t[..., None]),
    "none_first": ((2, 3), lambda t: t[None]),
    "unsqueeze": ((2, 3), lambda t: t.unsqueeze(-1)),
    "ellipsis": ((2, 3), lambda t: t[...]),
    "squeeze": ((1, 3, 1, 2), lambda t: t.squeeze()),
    "squeeze_dim": ((1, 3, 1, 2), lambda t: t.squeeze(2)),
    "squeeze_dims": ((1, 3, 1, 2), lambda t: t.squeeze((0, 2))),
    "select": ((3, 4), lambda t: t.select(1, -1)),
    "int": ((3, 4), lambda t: t[1]),
    "int_col": ((3, 4), lambda t: t[:, 2]),
    "int_int": ((3, 4), lambda t: t[1, -1]),
    "narrow": ((3, 4), lambda t: t.narrow(1, 1, 2)),
    "split": ((3, 5), lambda t: t.split(2, dim=1)),
    "split_sizes": ((3, 5), lambda t: t.split([1, 3, 1], 1)),
    "chunk": ((4, 3), lambda t: t.chunk(3)),
    "unbind": ((3, 2), lambda t: t.unbind(1)),
    "chain": ((4, 3), lambda t: t.T[1:][:, ::2].unsqueeze(0)),
    "view_used_twice": ((4, 3), lambda t: t[1:] * t[:-1] + t.sum(0)),
}
CONTIG_ONLY = {"view", "view_minus1"}
VIEW_GRAD_CASES = [(n, lay) for n in VIEW_GRADS for lay in ("contig", "fortran", "strided")
                   if lay == "contig" or n not in CONTIG_ONLY]


@pytest.mark.parametrize("name,layout", VIEW_GRAD_CASES)
def test_view_gradcheck(name, layout):
    """Gradients flow back into the base through every view, from contiguous,
    Fortran-ordered and strided inputs alike."""
    shape, fn = VIEW_GRADS[name]
    x, reader = grad_input(shape, layout)
    assert_gradcheck(lambda t: fn(reader(t)), x)


def test_view_of_non_contiguous_input_refuses_view():
    x = tg.tensor(data((2, 3)), dtype=F64).T
    with pytest.raises(RuntimeError, match="view size is not compatible with input tensor's"):
        x.view(6)


@pytest.mark.parametrize("name", ["slice_step", "T", "expand", "select", "chain", "split"])
def test_view_backward_values(name):
    """The gradient itself, element by element: w scattered back into the base's layout."""
    shape, fn = VIEW_GRADS[name]
    a = data(shape, 3)
    x = leaf(a)
    out = fn(x)
    outs = out if isinstance(out, tuple) else (out,)
    ws = [data(o.shape, 7 + k) for k, o in enumerate(outs)]
    sum((o * tg.tensor(w, dtype=F64)).sum() for o, w in zip(outs, ws)).backward()
    # the same views of a NumPy array of positions give the reference
    pos = tg.tensor(np.arange(a.size, dtype=np.float64).reshape(shape), dtype=F64)
    pouts = fn(pos)
    pouts = pouts if isinstance(pouts, tuple) else (pouts,)
    g = np.zeros(a.size)
    for p, w in zip(pouts, ws):
        np.add.at(g, vals(p).astype(np.int64).reshape(-1), w.reshape(-1))
    np.testing.assert_allclose(vals(x.grad), g.reshape(shape), rtol=1e-12, atol=1e-14)


# =========================================================================== 4. indexing
# advanced keys on a (3, 4, 3) tensor, NumPy spelling (lists are advanced indices)
B = np.array([[True, False, True, True], [False, False, True, False],
              [True, True, False, True]])
ADV_KEYS = {
    "list": [2, 0],
    "list_repeated": [2, 0, 2, 2],
    "list_negative": [-1, -3],
    "index_2d": [[0, 1], [2, 2]],
    "two": ([0, 1], [1, 2]),
    "two_negative": ([-1, 0], [-4, 3]),
    "two_broadcast": ([[0], [2]], [1, 3]),
    "two_repeated": ([1, 1, 1], [2, 2, 0]),
    "slice_list": (slice(None), [1, 3]),
    "slice_list_neg": (slice(None), [-1, 1, -1]),
    "separated": ([0, 2], slice(None), [1, 0]),
    "slices_around": (slice(1, None), [0, 2], slice(None, None, 2)),
    "list_none": ([0, 1], None),
    "ellipsis_list": (Ellipsis, [0, 2, 2]),
    "int_list_adjacent": (1, [0, 3]),
    "list_int_adjacent": ([0, 2], 1),
    "mask_full": np.arange(36).reshape(3, 4, 3) % 3 == 1,
    "mask_rows": np.array([True, False, True]),
    "mask_2d_partial": B,
    "mask_middle": (slice(None), B[0]),
    "mask_none_rows": np.zeros(3, bool),
    "mask_and_list": (np.array([True, False, True]), slice(None), [2, 0]),
}


def _a():
    return data((3, 4, 3), 11)


@pytest.mark.parametrize("as_tensor", [True, False], ids=["tensor", "list"])
@pytest.mark.parametrize("name", list(ADV_KEYS))
def test_advanced_index_values(name, as_tensor):
    a = _a()
    key = ADV_KEYS[name]
    x = tg.tensor(a, dtype=F64)
    if not as_tensor and not isinstance(key, tuple) and np.ndim(key) >= 2:
        # a short list of lists is a tuple of indices (NumPy's legacy rule, PyTorch's)
        as_tuple = tuple(np.asarray(k) for k in np.asarray(key))
        try:
            expected = a[as_tuple]
        except IndexError:
            with pytest.raises(IndexError), pytest.warns(UserWarning, match="non-tuple"):
                x[tg_key(key, as_tensor)]
            return
        with pytest.warns(UserWarning, match="non-tuple sequence"):
            out = x[tg_key(key, as_tensor)]
    else:
        out = x[tg_key(key, as_tensor)]
        expected = a[np_key(key)]
    assert tuple(out.shape) == expected.shape
    np.testing.assert_array_equal(vals(out), expected)


@pytest.mark.parametrize("name", list(ADV_KEYS))
def test_advanced_index_gradcheck(name):
    """Also repeated indices: their gradients accumulate."""
    key = tg_key(ADV_KEYS[name])
    assert_gradcheck(lambda t: t[key], leaf(_a()))


@pytest.mark.parametrize("name", ["list_repeated", "two_repeated", "mask_2d_partial",
                                  "separated"])
def test_advanced_index_backward_values(name):
    a = _a()
    key = ADV_KEYS[name]
    x = leaf(a)
    out = x[tg_key(key)]
    w = data(out.shape, 5)
    (out * tg.tensor(w, dtype=F64)).sum().backward()
    np.testing.assert_allclose(vals(x.grad), scatter(a.shape, np_key(key), w), rtol=1e-12)


def test_advanced_index_of_non_contiguous_input():
    a = _a()
    x = leaf(a)
    key = (slice(None), [2, 0, 2])
    np.testing.assert_array_equal(vals(x.transpose(0, 2)[key]),
                                  a.transpose(2, 1, 0)[np_key(key)])
    m = np.array([[1, 0], [0, 1], [1, 1]], bool)
    np.testing.assert_array_equal(vals(x[:, ::2][mask(m)]), a[:, ::2][m])
    assert_gradcheck(lambda t: t.transpose(0, 2)[key], x)
    assert_gradcheck(lambda t: t[:, 1::2][mask(m)], x)


def test_index_with_negative_indices_and_int32_arrays():
    a = np.arange(10.0)
    x = tg.tensor(a, dtype=F64)
    np.testing.assert_array_equal(vals(x[-1]), a[-1])
    np.testing.assert_array_equal(vals(x[-3:-1]), a[-3:-1])
    np.testing.assert_array_equal(vals(x[idx([-1, -10, 0])]), a[[-1, -10, 0]])
    np.testing.assert_array_equal(vals(x[np.array([0, -2], np.int32)]), a[[0, -2]])


def test_empty_index_list():
    """x[[]] selects nothing (PyTorch reads an empty list as an empty int64 index)."""
    x = leaf(data((3, 4)))
    for key in ([], idx([])):
        out = x[key]
        assert tuple(out.shape) == (0, 4)
    x[[]].sum().backward()
    np.testing.assert_array_equal(vals(x.grad), np.zeros((3, 4)))


def test_int_and_separated_advanced_index_follow_pytorch():
    """PyTorch applies integers first (as select), so x[0, :, [1, 2]] is
    x[0][:, [1, 2]], shape (4, 2); NumPy would move the advanced dimension first."""
    a = _a()
    x = tg.tensor(a, dtype=F64)
    np.testing.assert_array_equal(vals(x[0, :, [1, 2]]), a[0][:, [1, 2]])
    np.testing.assert_array_equal(vals(x[1, ..., [0, 1]]), a[1][..., [0, 1]])


def test_int_and_separated_advanced_index_match_torch():
    torch = pytest.importorskip("torch")
    a = _a()
    for key in [(0, slice(None), [1, 2]), (1, Ellipsis, [0, 1]), ([0, 2], slice(None), [1, 0]),
                (slice(1, None), [0, 2], 1)]:
        ours = tg.tensor(a, dtype=F64)[key]
        theirs = torch.tensor(a)[key]
        np.testing.assert_array_equal(vals(ours), theirs.numpy(), err_msg=str(key))


# ---------------------------------------------------------------- index_select / gather
@pytest.mark.parametrize("dim,index", [(0, [2, 0, 2]), (1, [3, 0]), (-1, [1, 1, 1, 0]),
                                       (1, [])])
def test_index_select(dim, index):
    a = _a()
    np.testing.assert_array_equal(vals(tg.tensor(a, dtype=F64).index_select(dim, idx(index))),
                                  np.take(a, np.asarray(index, np.int64), axis=dim))
    assert_gradcheck(lambda t: t.index_select(dim, idx(index)), leaf(a))
    assert_gradcheck(lambda t: t.transpose(0, 2).index_select(dim, idx(index)), leaf(a))


GATHERS = {   # (dim, index) on a (3, 4) input
    "dim0": (0, [[0, 2, 1, 0], [2, 2, 2, 2]]),
    "dim1": (1, [[3, 3], [0, 1], [2, 0]]),
    "smaller": (1, [[1], [0]]),
    "repeated": (0, [[1, 1, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1]]),
    "negative_dim": (-1, [[0, 0, 3, 3, 2]] * 3),
}


@pytest.mark.parametrize("name", list(GATHERS))
def test_gather(name):
    dim, index = GATHERS[name]
    a = data((3, 4), 2)
    index = np.asarray(index, np.int64)
    d = dim % 2         # PyTorch reads only index.shape[k] elements along the other dims
    src = a[tuple(slice(None) if k == d else slice(0, n) for k, n in enumerate(index.shape))]
    expected = np.take_along_axis(src, index, d)
    np.testing.assert_array_equal(vals(tg.tensor(a, dtype=F64).gather(dim, idx(index))),
                                  expected)
    assert_gradcheck(lambda t: t.gather(dim, idx(index)), leaf(a))
    assert_gradcheck(lambda t: t.T.T.gather(dim, idx(index)), grad_input((3, 4), "fortran")[0])


# ---------------------------------------------------------------- masks and where
def test_masked_select():
    a = data((3, 4), 4)
    x = leaf(a)
    np.testing.assert_array_equal(vals(x.masked_select(mask(B))), a[B])
    np.testing.assert_array_equal(vals(tg.masked_select(x, mask(B[1]))),
                                  a[np.broadcast_to(B[1], a.shape)])
    assert_gradcheck(lambda t: t.masked_select(mask(B)), x)
    assert_gradcheck(lambda t: t.T.masked_select(mask(B.T[:, :1])), x)    # broadcast mask


@pytest.mark.parametrize("value", [0.0, -2.5, "tensor"])
def test_masked_fill(value):
    a = data((3, 4), 5)
    v = tg.tensor(7.0, dtype=F64) if value == "tensor" else value
    nv = 7.0 if value == "tensor" else value
    x = leaf(a)
    np.testing.assert_array_equal(vals(x.masked_fill(mask(B), v)), np.where(B, nv, a))
    np.testing.assert_array_equal(vals(tg.masked_fill(x, mask(B[0]), v)),
                                  np.where(B[0], nv, a))
    assert_gradcheck(lambda t: t.masked_fill(mask(B), v), x)
    assert_gradcheck(lambda t: t.T.masked_fill(mask(B.T[:, :1]), v), x)


def test_masked_fill_with_a_tensor_value_requiring_grad():
    """The 0-d value gets the gradient of every place it filled (MaskedFillBackward1)."""
    a = data((3, 4), 5)
    x, v = leaf(a), tg.tensor(2.0, dtype=F64, requires_grad=True)
    y = x.masked_fill(mask(B), v)
    np.testing.assert_array_equal(vals(y), np.where(B, 2.0, a))
    w = data((3, 4), 6)
    (y * tg.tensor(w, dtype=F64)).sum().backward()
    np.testing.assert_array_equal(vals(x.grad), np.where(B, 0.0, w))
    assert v.grad is not None, "no gradient reached the fill value"
    np.testing.assert_allclose(vals(v.grad), w[B].sum(), rtol=1e-12)
    assert_gradcheck(lambda t, u: t.masked_fill(mask(B), u), leaf(a), leaf(2.0))
    assert y.grad_fn.name() == "MaskedFillBackward1"


def test_masked_fill_inplace_on_non_leaf():
    a = data((3, 4), 6)
    x = leaf(a)
    y = x * 1
    r = y.masked_fill_(mask(B), -1.0)
    assert r is y and y._version == 1
    np.testing.assert_array_equal(vals(y), np.where(B, -1.0, a))
    assert y.grad_fn.name() == "MaskedFillBackward0"
    w = data((3, 4), 7)
    (y * tg.tensor(w, dtype=F64)).sum().backward()
    np.testing.assert_array_equal(vals(x.grad), np.where(B, 0.0, w))

    def fn(t):
        u = t * 1
        u.masked_fill_(mask(B[2]), 3.0)
        return u
    assert_gradcheck(fn, leaf(a))


WHERES = {   # (condition shape, input, other); "s" is a scalar
    "tensor_tensor": ((3, 4), (3, 4), (3, 4)),
    "tensor_scalar": ((3, 4), (3, 4), "s"),
    "scalar_tensor": ((3, 4), "s", (3, 4)),
    "broadcast": ((3, 1), (1, 4), (4,)),
    "broadcast_cond": ((4,), (3, 1), (3, 4)),
}


@pytest.mark.parametrize("name", list(WHERES))
def test_where(name):
    cshape, ishape, oshape = WHERES[name]
    cond = data(cshape, 1) > 0
    ins = [2.5 if s == "s" else data(s, 2 + k) for k, s in enumerate((ishape, oshape))]
    tins = [v if isinstance(v, float) else leaf(v) for v in ins]
    np.testing.assert_array_equal(vals(tg.where(mask(cond), *tins)), np.where(cond, *ins))
    if not isinstance(tins[0], float):
        np.testing.assert_array_equal(vals(tins[0].where(mask(cond), tins[1])),
                                      np.where(cond, *ins))
    grads = [t for t in tins if not isinstance(t, float)]

    def fn(*ts):
        it = iter(ts)
        return tg.where(mask(cond), *[v if isinstance(v, float) else next(it) for v in tins])
    assert_gradcheck(fn, *grads)


# ---------------------------------------------------------------- cat / stack / split
def odd_fortran(ts):
    """The inputs with every other one made non-contiguous (a Fortran-ordered copy)."""
    return [t.T.contiguous().T if k % 2 else t for k, t in enumerate(ts)]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat(n, dim):
    """More than three tensors are joined as a tree of rows."""
    arrs = []
    for k in range(n):
        shape = [2, 3]
        shape[dim] = 1 + k % 3
        arrs.append(data(shape, 20 + k))
    ts = [leaf(a) for a in arrs]
    np.testing.assert_array_equal(vals(tg.cat(ts, dim)), np.concatenate(arrs, dim))
    assert_gradcheck(lambda *t: tg.cat(odd_fortran(t), dim) * 1.5, *ts)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 6])
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_stack(n, dim):
    arrs = [data((2, 3), 30 + k) for k in range(n)]
    ts = [leaf(a) for a in arrs]
    np.testing.assert_array_equal(vals(tg.stack(ts, dim)), np.stack(arrs, dim))
    assert_gradcheck(lambda *t: tg.stack(odd_fortran(t), dim), *ts)


@pytest.mark.parametrize("pattern", ["cg", "gc", "cgc", "gcg", "ccg", "cgcgc"])
@pytest.mark.parametrize("join", ["cat", "stack"])
def test_cat_and_stack_with_inputs_that_need_no_gradient(pattern, join):
    """Inputs that need no gradient (c) are not kept by the row, so the backward must not
    read their shapes from the tape: it took garbage sizes there and wrote the gradients
    of the inputs after them (g, computed by an op) at wrong offsets, or out of bounds."""
    cs = [tg.tensor(data((2, 1 if join == "cat" else 2), 40 + k)) for k in range(len(pattern))]
    x = leaf(data((2, 2), 41))

    def fn(t):
        parts = [cs[k] if p == "c" else t * (k + 1.0) for k, p in enumerate(pattern)]
        return getattr(tg, join)(parts, 1) * 1.5
    out = fn(x)
    expected = getattr(np, "concatenate" if join == "cat" else "stack")(
        [cs[k].numpy() if p == "c" else vals(x) * (k + 1.0) for k, p in enumerate(pattern)],
        1) * 1.5
    np.testing.assert_allclose(vals(out), expected, rtol=1e-12)
    assert_gradcheck(fn, x)


def test_cat_and_stack_of_strided_views_of_one_tensor():
    a = data((4, 6), 8)
    x = leaf(a)
    def parts(t):
        return [t[:, ::2], t[:, 1::2], t.T[1:4].T, t[1:3, 3:], t[::3, :3]]
    np.testing.assert_array_equal(vals(tg.cat(parts(x))), np.concatenate(parts(a)))
    assert_gradcheck(lambda t: tg.cat(parts(t), 0), x)
    assert_gradcheck(lambda t: tg.stack([t[:, ::2], t[:, 1::2], t[:, :3], t[:, 3:]], 1), x)


@pytest.mark.parametrize("name", [n for n in WHERES if "s" not in WHERES[n]])
@pytest.mark.parametrize("const", [0, 1])
def test_where_with_one_operand_that_needs_no_gradient(name, const):
    """The operand that needs no gradient is not kept by the row: the backward must not
    read its shape from the tape."""
    cshape, *shapes = WHERES[name]
    cond = data(cshape, 1) > 0
    c = tg.tensor(data(shapes[const], 7))
    x = leaf(data(shapes[1 - const], 8))

    def fn(t):
        ops = [c, t * 2.0] if const == 0 else [t * 2.0, c]
        return tg.where(mask(cond), *ops)
    ins = [c.numpy(), vals(x) * 2.0][::1 if const == 0 else -1]
    np.testing.assert_array_equal(vals(fn(x)), np.where(cond, *ins))
    assert_gradcheck(fn, x)


@pytest.mark.parametrize("sizes,dim", [([1, 3, 1], 1), ([0, 2, 1], 0), ([4, 1], -1),
                                       ([5], 1)])
def test_split_with_sizes(sizes, dim):
    a = data((3, 5), 9)
    x = leaf(a)
    parts = x.split(sizes, dim)
    expected = np.split(a, np.cumsum(sizes)[:-1], axis=dim)
    assert len(parts) == len(expected)
    for p, e in zip(parts, expected):
        assert tuple(p.shape) == e.shape
        np.testing.assert_array_equal(vals(p), e)
    assert_gradcheck(lambda t: t.split(sizes, dim), x)
    assert_gradcheck(lambda t: t.T.T.split(sizes, dim)[-1] * 2, x)


@pytest.mark.parametrize("size,chunks", [(5, 2), (6, 3), (3, 5), (4, 1)])
def test_split_and_chunk_values(size, chunks):
    a = np.arange(float(size * 2)).reshape(2, size)
    x = tg.tensor(a, dtype=F64)
    split = x.split(chunks, 1)
    expected = [a[:, i:i + chunks] for i in range(0, size, chunks)]
    assert [vals(p).tolist() for p in split] == [e.tolist() for e in expected]
    k = -(-size // chunks)              # chunk: size ceil(n / chunks) pieces
    got = x.chunk(chunks, 1)
    assert [vals(p).tolist() for p in got] == [a[:, i:i + k].tolist() for i in range(0, size, k)]


def test_split_and_chunk_of_an_empty_dimension():
    x = tg.ones(0, 3)
    assert [tuple(p.shape) for p in x.split(2)] == [(0, 3)]
    assert [tuple(p.shape) for p in x.split([0, 0])] == [(0, 3), (0, 3)]
    assert [tuple(p.shape) for p in x.chunk(2)] == [(0, 3), (0, 3)]


# =========================================================================== 5. setitem
# name: (key in NumPy spelling, value shape or "scalar"), on a (3, 4) tensor
SETITEMS = {
    "int": (1, (4,)),
    "slice": (slice(1, 3), (2, 4)),
    "slice_broadcast": (slice(1, 3), (4,)),
    "column": ((slice(None), 1), (3,)),
    "strided": ((slice(None), slice(None, None, 2)), (3, 1)),
    "ellipsis_scalar": ((Ellipsis, 0), "scalar"),
    "int_int": ((2, -1), "scalar"),
    "mask_scalar": (B, "scalar"),
    "mask_value": (B, (1,)),
    "mask_rows": (np.array([True, False, True]), (4,)),
    "index_broadcast": ([0, 2], (4,)),
    "index_slice": (([0, 2], slice(1, 3)), (2, 1)),
    "two_indices": (([0, 1, 2], [3, 0, 1]), (3,)),
    "leading_ones": (1, (1, 1, 4)),
}


def _value(shape, seed=3):
    return 9.5 if shape == "scalar" else data(shape, seed)


@pytest.mark.parametrize("name", list(SETITEMS))
def test_setitem_values_version_and_grads(name):
    key, vshape = SETITEMS[name]
    a, v = data((3, 4), 1), _value(vshape)
    x = leaf(a)
    y = x * 1
    tv = v if vshape == "scalar" else leaf(v)
    y[tg_key(key)] = tv
    assert y._version == 1 and y.requires_grad and not y.is_leaf
    expected = a.copy()
    expected[np_key(key)] = v
    np.testing.assert_array_equal(vals(y), expected)
    w = data((3, 4), 2)
    (y * tg.tensor(w, dtype=F64)).sum().backward()
    written = np.zeros((3, 4), bool)
    written[np_key(key)] = True
    np.testing.assert_allclose(vals(x.grad), np.where(written, 0.0, w), rtol=1e-12)
    if vshape != "scalar":     # each value element gets the w of every place it went to
        region = w[np_key(key)]
        vpos = np.arange(v.size).reshape(v.shape[v.ndim - min(v.ndim, region.ndim):])
        g = np.zeros(v.size)
        np.add.at(g, np.broadcast_to(vpos, region.shape).reshape(-1), region.reshape(-1))
        np.testing.assert_allclose(vals(tv.grad), g.reshape(v.shape), rtol=1e-12)


@pytest.mark.parametrize("name", list(SETITEMS))
def test_setitem_gradcheck(name):
    key, vshape = SETITEMS[name]
    k = tg_key(key)
    x = leaf(data((3, 4), 1))

    def fn(t, *v):
        u = t.T.T * 2
        u[k] = v[0] if v else 9.5
        return u * u
    if vshape == "scalar":
        assert_gradcheck(fn, x)
    else:
        assert_gradcheck(fn, x, leaf(_value(vshape)))


def test_setitem_on_non_contiguous_non_leaf():
    a, v = data((4, 3), 1), data((2,), 2)
    x, vt = leaf(a), leaf(v)
    y = x.T * 1
    z = y[:, ::2]                      # a strided view of y: shares its version
    y[1, 1:3] = vt
    assert y._version == z._version == 1
    expected = a.T.copy()
    expected[1, 1:3] = v
    np.testing.assert_array_equal(vals(y), expected)
    np.testing.assert_array_equal(vals(z), expected[:, ::2])
    assert_gradcheck(lambda t, u: _set(t.T * 1, (1, slice(1, 3)), u), x, vt)


def test_setitem_into_tensor_without_grad_records_the_value():
    v = leaf([1.0, 2.0])
    y = tg.zeros(4, dtype=F64)
    y[1:3] = v
    assert y.requires_grad and not y.is_leaf and y._version == 1
    (y * tg.arange(4.0, dtype=F64)).sum().backward()
    np.testing.assert_array_equal(vals(v.grad), [1.0, 2.0])


@pytest.mark.parametrize("key,msg", [(0, VIEW_LEAF_MSG), (slice(1, None), VIEW_LEAF_MSG),
                                     ((Ellipsis, 1), VIEW_LEAF_MSG), ([0], LEAF_MSG),
                                     (B, LEAF_MSG)], ids=["int", "slice", "ellipsis", "list",
                                                          "mask"])
def test_setitem_on_leaf_requiring_grad_raises(key, msg):
    x = leaf(np.arange(12.0).reshape(3, 4))
    with pytest.raises(RuntimeError) as ei:
        x[tg_key(key)] = 1.0
    assert str(ei.value) == msg
    assert x._version == 0
    np.testing.assert_array_equal(vals(x), np.arange(12.0).reshape(3, 4))
    with tg.no_grad():              # allowed without recording
        x[tg_key(key)] = -1.0
    assert x._version == 1 and x.is_leaf and x.grad_fn is None


def test_setitem_on_leaf_messages_match_torch():
    torch = pytest.importorskip("torch")
    for key, msg in [(0, VIEW_LEAF_MSG), (slice(1, None), VIEW_LEAF_MSG), ([0], LEAF_MSG),
                     (torch.tensor(B), LEAF_MSG)]:
        x = torch.tensor(np.arange(12.0).reshape(3, 4), requires_grad=True)
        with pytest.raises(RuntimeError) as ei:
            x[key] = 1.0
        assert str(ei.value) == msg


OVERLAPS = {   # a NumPy program that tapegrad runs unchanged on a tensor
    "shift_right": lambda a: a.__setitem__(slice(1, None), a[:-1]),
    "shift_left": lambda a: a.__setitem__(slice(None, -1), a[1:]),
    "strided": lambda a: a.__setitem__(slice(None, None, 2), a[1::2]),
    "advanced": lambda a: a.__setitem__([1, 2, 3], a[[0, 1, 2]]),
    "mask": lambda a: a.__setitem__(np.arange(6) % 2 == 0, a[3:]),
}


@pytest.mark.parametrize("name", list(OVERLAPS))
def test_setitem_from_overlapping_source_copies_first(name):
    """x[1:] = x[:-1]: the source is read in full before anything is written (np.copy)."""
    a = np.arange(6.0) + 1
    x = tg.tensor(a.copy(), dtype=F64)
    OVERLAPS[name](a)
    OVERLAPS[name](x)
    np.testing.assert_array_equal(vals(x), a)
    assert x._version == 1


def test_setitem_overlapping_transposed_source():
    a = np.arange(6.0).reshape(2, 3)
    x = tg.tensor(a.copy(), dtype=F64)
    a.T[1:] = a[:, :2].T
    x.T[1:] = x[:, :2].T
    np.testing.assert_array_equal(vals(x), a)


def test_setitem_overlapping_source_gradients():
    def fn(t):
        y = t * 1
        y[1:] = y[:-1]
        return y
    x = leaf(data(5, 4))
    np.testing.assert_array_equal(vals(fn(x)), vals(x)[[0, 0, 1, 2, 3]])
    assert_gradcheck(fn, x)


# =========================================================================== 6. bounds
# name: (program, PyTorch's exception type and message)
BOUNDS = {
    "int": (lambda L: L.arange(3.0)[5], IndexError,
            "index 5 is out of bounds for dimension 0 with size 3"),
    "negative_int": (lambda L: L.arange(3.0)[-4], IndexError,
                     "index -4 is out of bounds for dimension 0 with size 3"),
    "int_second_dim": (lambda L: L.zeros(3, 4)[1, 7], IndexError,
                       "index 7 is out of bounds for dimension 1 with size 4"),
    "slice_then_int": (lambda L: L.zeros(3, 4)[:, 7], IndexError,
                       "index 7 is out of bounds for dimension 1 with size 4"),
    "tensor": (lambda L: L.arange(3.0)[L.tensor([0, 5])], IndexError,
               "index 5 is out of bounds for dimension 0 with size 3"),
    "list_negative": (lambda L: L.arange(3.0)[[0, -4]], IndexError,
                      "index -4 is out of bounds for dimension 0 with size 3"),
    "two_lists": (lambda L: L.zeros(3, 4)[[0, 1], [1, 5]], IndexError,
                  "index 5 is out of bounds for dimension 1 with size 4"),
    "setitem_int": (lambda L: L.arange(3.0).__setitem__(5, 1.0), IndexError,
                    "index 5 is out of bounds for dimension 0 with size 3"),
    "setitem_tensor": (lambda L: L.arange(3.0).__setitem__(L.tensor([5]), 1.0), IndexError,
                       "index 5 is out of bounds for dimension 0 with size 3"),
    "float_tensor": (lambda L: L.arange(3.0)[L.tensor([0.0, 1.0])], IndexError,
                     "tensors used as indices must be long, int, byte or bool tensors"),
    "float_scalar": (lambda L: L.arange(3.0)[1.0], IndexError,
                     ("only integers, slices (`:`), ellipsis (`...`), None and long or byte "
                      "Variables are valid indices (got float)")),
    "too_many": (lambda L: L.arange(3.0)[0, 0], IndexError,
                 "too many indices for tensor of dimension 1"),
    "mask_shape": (lambda L: L.zeros(3, 4)[L.tensor([True, False])], IndexError,
                   ("The shape of the mask [2] at index 0 does not match the shape of the "
                    "indexed tensor [3, 4] at index 0")),
    "step_zero": (lambda L: L.arange(3.0)[::0], ValueError, "slice step cannot be zero"),
    "step_negative": (lambda L: L.arange(3.0)[::-1], ValueError,
                      "step must be greater than zero"),
    "index_select": (lambda L: L.arange(3.0).index_select(0, L.tensor([0, 5])), IndexError,
                     "index out of range in self"),
    "index_select_negative": (lambda L: L.zeros(3, 4).index_select(0, L.tensor([-1])),
                              IndexError, "index out of range in self"),
    "index_select_dim1": (lambda L: L.zeros(3, 4).index_select(1, L.tensor([0, 5])),
                          RuntimeError, ("INDICES element is out of DATA bounds, id=5 "
                                         "axis_dim=4")),
    "index_select_dim1_negative": (lambda L: L.zeros(3, 4).index_select(1, L.tensor([-1])),
                                   RuntimeError, ("INDICES element is out of DATA bounds, "
                                                  "id=-1 axis_dim=4")),
    "gather": (lambda L: L.arange(3.0).gather(0, L.tensor([0, 5])), RuntimeError,
               "index 5 is out of bounds for dimension 0 with size 3"),
    "gather_negative": (lambda L: L.zeros(3, 4).gather(1, L.tensor([[0], [-1], [0]])),
                        RuntimeError, "index -1 is out of bounds for dimension 1 with size 4"),
    "select": (lambda L: L.zeros(3, 4).select(1, 4), IndexError,
               "select(): index 4 out of range for tensor of size [3, 4] at dimension 1"),
    "narrow": (lambda L: L.arange(3.0).narrow(0, 2, 2), RuntimeError,
               "start (2) + length (2) exceeds dimension size (3)."),
    "split_sizes": (lambda L: L.arange(3.0).split([1, 1]), RuntimeError,
                    ("split_with_sizes expects split_sizes to sum exactly to 3 (input tensor's "
                     "size at dimension 0), but got split_sizes=[1, 1]")),
    "setitem_shape": (lambda L: L.zeros(3, 4).__setitem__([0], L.ones(3)), RuntimeError,
                      ("shape mismatch: value tensor of shape [3] cannot be broadcast to "
                       "indexing result of shape [1, 4]")),
}


@pytest.mark.parametrize("name", list(BOUNDS))
def test_bounds_errors(name):
    prog, typ, msg = BOUNDS[name]
    assert error_of(prog, tg) == (typ, msg)


@pytest.mark.parametrize("name", list(BOUNDS))
def test_bounds_errors_are_torchs(name):
    torch = pytest.importorskip("torch")
    prog, typ, msg = BOUNDS[name]
    assert error_of(prog, torch) == (typ, msg)


def test_failed_index_leaves_tensor_and_version_alone():
    x = tg.arange(6.0)
    for bad in (lambda: x.__setitem__(6, 0.0), lambda: x.__setitem__([0, 9], 0.0),
                lambda: x.__setitem__(idx([-7]), 0.0)):
        with pytest.raises(IndexError):
            bad()
    assert x._version == 0
    np.testing.assert_array_equal(vals(x), np.arange(6.0))


# =========================================================================== 7. hypothesis
def _slices(n_max_step):
    bound = st.none() | st.integers(-7, 7)
    return st.builds(slice, bound, bound, st.none() | st.integers(1, n_max_step))


@st.composite
def basic_keys(draw):
    """(shape, key, transposed): ints, slices (negative bounds, None, steps 1-3), None and
    at most one Ellipsis; transposed: index a transposed view instead."""
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    n_used = draw(st.integers(0, len(shape)))
    ellipsis = draw(st.booleans())
    front = draw(st.integers(0, n_used)) if ellipsis else n_used
    dims = list(shape[:front]) + list(shape[len(shape) - (n_used - front):])
    items = [draw(st.integers(-n, n - 1) | _slices(3)) for n in dims]
    if ellipsis:
        items.insert(front, Ellipsis)
    for _ in range(draw(st.integers(0, 2))):
        items.insert(draw(st.integers(0, len(items))), None)
    key = items[0] if len(items) == 1 and draw(st.booleans()) else tuple(items)
    return shape, key, draw(st.booleans())


@st.composite
def advanced_keys(draw):
    """(shape, key, transposed, as_tensor): integer lists (negative, repeated, all of one
    shape) in some leading dims, slices in the others."""
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    ishape = draw(st.sampled_from([(1,), (2,), (3,), (2, 2)]))
    items = []
    for n in shape[:draw(st.integers(1, len(shape)))]:
        if draw(st.booleans()):
            flat = draw(st.lists(st.integers(-n, n - 1), min_size=int(np.prod(ishape)),
                                 max_size=int(np.prod(ishape))))
            items.append(np.asarray(flat).reshape(ishape).tolist())
        else:
            items.append(draw(_slices(2)))
    if not any(isinstance(k, list) for k in items):
        items[0] = np.zeros(ishape, int).tolist()
    return shape, tuple(items), draw(st.booleans()), draw(st.booleans())


def _check_key(shape, key, transposed, key_tg=None):
    """x[key] against NumPy, and x.grad against a NumPy scatter; shape is the shape of the
    indexed tensor, which with transposed is a permuted view of the leaf."""
    a = data(shape[::-1] if transposed else shape, 1)
    x = leaf(a)
    src, nsrc = (x.permute(*range(len(shape) - 1, -1, -1)), a.T) if transposed else (x, a)
    out = src[key if key_tg is None else key_tg]
    expected = nsrc[np_key(key)]
    assert tuple(out.shape) == expected.shape
    np.testing.assert_array_equal(vals(out), expected)
    w = data(expected.shape, 2)
    (out * tg.tensor(w, dtype=F64)).sum().backward()
    g = scatter(nsrc.shape, np_key(key), w)
    np.testing.assert_allclose(vals(x.grad), g.T if transposed else g, rtol=1e-12)


@HYP
@given(basic_keys())
def test_hypothesis_basic_indexing(case):
    shape, key, transposed = case
    _check_key(shape, key, transposed)


@HYP
@given(advanced_keys())
def test_hypothesis_advanced_indexing(case):
    shape, key, transposed, as_tensor = case
    _check_key(shape, key, transposed, tg_key(key, as_tensor))


# =========================================================================== 8. grad_fn
GRAD_FN_NAMES = [
    ("x[0]", "SelectBackward0"),
    ("x[1:3]", "SliceBackward0"),
    ("x[:, ::2]", "SliceBackward0"),
    ("x[...]", "AliasBackward0"),
    ("x[..., None]", "UnsqueezeBackward0"),
    ("x[None]", "UnsqueezeBackward0"),
    ("x[:1].squeeze()", "SqueezeBackward0"),
    ("x[:1].squeeze(0)", "SqueezeBackward1"),
    ("x[:1].squeeze((0, 1))", "SqueezeBackward2"),
    ("x.narrow(1, 0, 2)", "SliceBackward0"),
    ("x.select(1, 0)", "SelectBackward0"),
    ("x.split(1)[0]", "SplitBackward0"),
    ("x.chunk(2, 1)[1]", "SplitBackward0"),
    ("x.split([1, 2], 0)[1]", "SplitWithSizesBackward0"),
    ("x[idx([0, 0])]", "IndexBackward0"),
    ("x[idx(1)]", "SelectBackward0"),
    ("x[[0, 1], [1, 2]]", "IndexBackward0"),
    ("x[:, [1, 3]]", "IndexBackward0"),
    ("x[x > 2]", "IndexBackward0"),
    ("x.index_select(1, idx([0]))", "IndexSelectBackward0"),
    ("x.gather(1, idx([[0], [1], [2]]))", "GatherBackward0"),
    ("x.masked_select(x > 2)", "MaskedSelectBackward0"),
    ("x.masked_fill(x > 2, 0.0)", "MaskedFillBackward0"),
    ("lib.cat([x, x])", "CatBackward0"),
    ("lib.cat([x, x, x, x, x])", "CatBackward0"),
    ("lib.stack([x, x])", "StackBackward0"),
    ("lib.stack([x] * 5, 1)", "StackBackward0"),
    ("lib.where(x > 2, x, x * 2)", "WhereBackward0"),
    ("lib.where(x > 2, x, 0.0)", "WhereBackward0"),
    ("x.expand(2, 3, 4)", "ExpandBackward0"),
    ("x.unsqueeze(0)", "UnsqueezeBackward0"),
]


@pytest.mark.parametrize("expr,name", GRAD_FN_NAMES, ids=[e for e, _ in GRAD_FN_NAMES])
def test_grad_fn_names(expr, name):
    lib = tg  # noqa: F841  (used by eval)
    x = tg.tensor(np.arange(12.0).reshape(3, 4), requires_grad=True)  # noqa: F841
    idx = tg.tensor  # noqa: F841
    y = eval(expr)
    assert y.grad_fn.name() == name
    assert y.requires_grad and not y.is_leaf


@pytest.mark.parametrize("expr,name", GRAD_FN_NAMES, ids=[e for e, _ in GRAD_FN_NAMES])
def test_grad_fn_names_match_torch(expr, name):
    torch = pytest.importorskip("torch")
    lib = torch  # noqa: F841
    x = torch.arange(12.0).reshape(3, 4).requires_grad_()  # noqa: F841
    idx = torch.tensor  # noqa: F841
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert eval(expr).grad_fn.name() == name


def test_row_index_kernel_on_strided_base_and_2d_index():
    """x[idx] with an int64 index tensor reads whole rows in one kernel (no positions):
    a transposed (strided) base, a 2-D index with repeats, values and gradients."""
    base = np.arange(24.0).reshape(2, 4, 3)
    x = tg.tensor(base.transpose(1, 0, 2).copy(), dtype=tg.float64, requires_grad=True)
    xt = x.transpose(0, 1)                                   # (2, 4, 3), strided
    idx = np.array([[1, 0], [1, 1]])
    out = xt[tg.tensor(idx)]
    assert out.grad_fn.name() == "IndexBackward0"
    np.testing.assert_array_equal(out.detach().numpy(), base[idx])
    w = np.random.default_rng(0).standard_normal(out.shape)
    (out * tg.tensor(w, dtype=tg.float64)).sum().backward()
    expect = np.zeros_like(base)
    np.add.at(expect, idx, w)
    np.testing.assert_allclose(x.grad.numpy(), expect.transpose(1, 0, 2))


# ---------------------------------------------------------------- x[idx]: checked in the kernel
def test_row_gather_wraps_negative_indices_and_accumulates_gradients():
    rng = np.random.default_rng(71)
    xn = rng.standard_normal((5, 3))
    x = tg.tensor(xn, requires_grad=True)
    idxn = np.array([[0, -1], [4, -5], [-1, 2]])
    y = x[tg.tensor(idxn)]
    assert y.grad_fn.name() == "IndexBackward0"
    np.testing.assert_array_equal(y.detach().numpy(), xn[idxn])
    g = rng.standard_normal(y.shape)
    y.backward(tg.tensor(g))
    expect = np.zeros_like(xn)
    np.add.at(expect, idxn % 5, g)
    np.testing.assert_allclose(x.grad.numpy(), expect, rtol=1e-15)


@pytest.mark.parametrize("bad", [5, -6, 100])
def test_row_gather_out_of_range_raises_pytorch_error(bad):
    x = tg.tensor(np.arange(15.0).reshape(5, 3), requires_grad=True)
    idx = tg.tensor(np.array([1, bad, 2]))
    with pytest.raises(IndexError, match=f"index {bad} is out of bounds for dimension 0 "
                                         "with size 5"):
        x[idx]
    assert x[tg.tensor(np.array([1, 2]))].shape == (2, 3)       # the engine is unharmed


def test_row_gather_error_matches_torch():
    torch = pytest.importorskip("torch")
    with pytest.raises(IndexError) as ours:
        tg.zeros(4, 2)[tg.tensor(np.array([0, 7]))]
    with pytest.raises(IndexError) as theirs:
        torch.zeros(4, 2)[torch.tensor([0, 7])]
    assert str(ours.value) == str(theirs.value)
