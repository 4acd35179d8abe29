"""The Tensor object: creation functions, dtypes, properties, printing, seeding."""
import numpy as np
import pytest

import tapegrad as tg


# ------------------------------------------------------------------ creation
@pytest.mark.parametrize("fn", [tg.zeros, tg.ones, tg.empty, tg.rand, tg.randn])
def test_filled_creation_shapes_and_default_dtype(fn):
    for args, shape in (((2, 3), (2, 3)), (((2, 3),), (2, 3)), (([4],), (4,)), ((), ()),
                        ((0,), (0,)), ((1, 1, 2),  (1, 1, 2))):
        if not args and fn in (tg.rand, tg.randn):
            with pytest.raises(TypeError):      # (PyTorch's rand() and randn() want a size)
                fn()
            t = fn(())
        else:
            t = fn(*args)
        assert t.shape == shape
        assert isinstance(t.shape, tg.Size)
        assert t.dtype is tg.float32
        assert t.ndim == len(shape) and t.dim() == len(shape)
        assert t.numel() == int(np.prod(shape))
        assert not t.requires_grad and t.is_leaf and t.grad_fn is None
        assert t.is_contiguous()
    t = fn(2, dtype=tg.float64, requires_grad=True)
    assert t.dtype is tg.float64 and t.requires_grad and t.is_leaf


def test_zeros_ones_full_values():
    np.testing.assert_array_equal(tg.zeros(2, 3).numpy(), np.zeros((2, 3), np.float32))
    np.testing.assert_array_equal(tg.ones(3).numpy(), np.ones(3, np.float32))
    assert tg.ones(2, dtype=tg.int64).tolist() == [1, 1]
    assert tg.zeros(2, dtype=tg.bool).tolist() == [False, False]
    f = tg.full((2, 2), 7.5)
    assert f.dtype is tg.float32 and f.tolist() == [[7.5, 7.5], [7.5, 7.5]]
    assert tg.full((2,), 7).dtype is tg.int64
    assert tg.full((2,), True).dtype is tg.bool
    assert tg.full((2,), 7, dtype=tg.float64).tolist() == [7.0, 7.0]
    assert tg.full((2,), 1.5, requires_grad=True).requires_grad


def test_full_dtypes_match_torch():
    torch = pytest.importorskip("torch")
    for v in (7, 7.5, True):
        assert str(tg.full((2,), v).dtype).replace("tapegrad", "torch") == \
            str(torch.full((2,), v).dtype)


def test_arange():
    a = tg.arange(5)
    assert a.dtype is tg.int64 and a.tolist() == [0, 1, 2, 3, 4]
    b = tg.arange(1, 7, 2)
    assert b.tolist() == [1, 3, 5]
    c = tg.arange(0, 1, 0.25)
    assert c.dtype is tg.float32 and c.tolist() == [0.0, 0.25, 0.5, 0.75]
    d = tg.arange(3, dtype=tg.float64)
    assert d.dtype is tg.float64 and d.tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(RuntimeError):
        tg.arange(0, 5, 0)


def test_like_functions():
    src = tg.ones(2, 3, dtype=tg.float64)
    for fn in (tg.zeros_like, tg.ones_like, tg.empty_like, tg.rand_like, tg.randn_like):
        t = fn(src)
        assert t.shape == (2, 3) and t.dtype is tg.float64 and not t.requires_grad
    assert tg.zeros_like(src).tolist() == [[0.0] * 3] * 2
    assert tg.ones_like(src).tolist() == [[1.0] * 3] * 2
    f = tg.full_like(src, 2.5)
    assert f.dtype is tg.float64 and f.tolist() == [[2.5] * 3] * 2
    assert tg.zeros_like(src, dtype=tg.float32).dtype is tg.float32
    g = tg.ones_like(tg.ones(2, requires_grad=True))
    assert not g.requires_grad                       # *_like does not copy requires_grad
    assert tg.zeros_like(src, requires_grad=True).requires_grad


def test_rand_and_randn_values():
    tg.manual_seed(1)
    r = tg.rand(1000).numpy()
    assert r.min() >= 0.0 and r.max() < 1.0
    assert 0.4 < r.mean() < 0.6
    n = tg.randn(2000, dtype=tg.float64).numpy()
    assert n.dtype == np.float64
    assert abs(n.mean()) < 0.1 and 0.9 < n.std() < 1.1


def test_manual_seed_reproducibility():
    tg.manual_seed(123)
    a1, b1 = tg.rand(5), tg.randn(2, 3)
    tg.manual_seed(123)
    a2, b2 = tg.rand(5), tg.randn(2, 3)
    np.testing.assert_array_equal(a1.numpy(), a2.numpy())
    np.testing.assert_array_equal(b1.numpy(), b2.numpy())
    tg.manual_seed(124)
    a3 = tg.rand(5)
    assert not np.array_equal(a1.numpy(), a3.numpy())
    assert not np.array_equal(a1.numpy(), tg.rand(5).numpy())     # the stream advances
    with pytest.raises(ValueError, match="invalid literal for int"):   # (int(seed), as torch)
        tg.manual_seed("seed")
    with pytest.raises(TypeError):
        tg.manual_seed(None)


# ------------------------------------------------------------------ tensor() and dtypes
def test_tensor_infers_dtypes_like_torch():
    assert tg.tensor([1.0, 2.0]).dtype is tg.float32
    assert tg.tensor(2.5).dtype is tg.float32
    assert tg.tensor([1, 2]).dtype is tg.int64
    assert tg.tensor(3).dtype is tg.int64
    assert tg.tensor([1, 2.5]).dtype is tg.float32
    assert tg.tensor([True]).dtype is tg.bool
    assert tg.tensor([True, False]).tolist() == [True, False]
    assert tg.tensor([]).dtype is tg.float32 and tg.tensor([]).shape == (0,)
    assert tg.tensor([1, 2], dtype=tg.float64).dtype is tg.float64
    assert tg.tensor([1, 2], dtype=tg.float64).tolist() == [1.0, 2.0]


def test_tensor_from_numpy_arrays_keeps_dtype():
    a64 = np.array([1.0, 2.0])
    t = tg.tensor(a64)
    assert t.dtype is tg.float64
    assert tg.tensor(np.array([1.0], np.float32)).dtype is tg.float32
    assert tg.tensor(np.array([1, 2], np.int64)).dtype is tg.int64
    assert tg.tensor(np.array([True])).dtype is tg.bool
    a64[0] = 100.0
    assert t.tolist() == [1.0, 2.0]                  # tensor() copies


@pytest.mark.filterwarnings("ignore:Creating a tensor from a list of numpy.ndarrays")
def test_tensor_dtype_inference_matches_torch():
    torch = pytest.importorskip("torch")
    for data in ([1.0, 2.0], [1, 2], [True], [1, 2.5], [], 3, 2.5,
                 np.array([1.0, 2.0]), np.array([1.0], np.float32), np.array([1, 2]),
                 # a NumPy float64 keeps its dtype, in a list too; a Python float does not
                 np.float64(0.3), np.float32(0.3), [np.float64(0.3), 1.0], [np.float32(1), 2.0],
                 [[0.5], (np.float64(1),)], [np.array([1.0, 2.0]), np.array([3.0, 4.0])]):
        ours = str(tg.tensor(data).dtype).replace("tapegrad", "torch")
        theirs = str(torch.tensor(data).dtype)
        assert ours == theirs, data


def test_tensor_copies_its_input_and_nested_shapes():
    src = tg.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert src.shape == (2, 2) and src.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    cp = tg.tensor(src)
    cp.add_(1)
    assert src.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert cp.tolist() == [[2.0, 3.0], [4.0, 5.0]]
    t3 = tg.tensor([[[1], [2]], [[3], [4]]])
    assert t3.shape == (2, 2, 1) and t3.dtype is tg.int64


def test_dtype_objects():
    assert tg.float is tg.float32 and tg.double is tg.float64 and tg.long is tg.int64
    assert repr(tg.float32) == "tapegrad.float32"
    assert repr(tg.bool) == "tapegrad.bool"
    assert tg.float32.is_floating_point and tg.float64.is_floating_point
    assert not tg.int64.is_floating_point and not tg.bool.is_floating_point
    assert tg.float32.itemsize == 4 and tg.float64.itemsize == 8


def test_from_numpy_dtypes_and_errors():
    for npd, d in ((np.float32, tg.float32), (np.float64, tg.float64), (np.int64, tg.int64),
                   (np.bool_, tg.bool)):
        assert tg.from_numpy(np.zeros(2, npd)).dtype is d
    with pytest.raises(TypeError, match="can't convert np.ndarray of type numpy.int8"):
        tg.from_numpy(np.zeros(2, np.int8))
    with pytest.raises(TypeError):
        tg.from_numpy([1.0, 2.0])


# ------------------------------------------------------------------ properties
def test_size_and_shape():
    t = tg.zeros(2, 3, 4)
    assert t.shape == (2, 3, 4)
    assert t.size() == (2, 3, 4)
    assert t.size(1) == 3 and t.size(-1) == 4
    assert t.shape[0] == 2
    assert isinstance(t.shape, tuple) and isinstance(t.shape, tg.Size)
    assert t.shape.numel() == 24 == t.numel()
    assert len(t) == 2
    assert t.stride() == (12, 4, 1)
    assert t.T.shape == (4, 3, 2)
    assert not t.T.is_contiguous()



def test_python_reads_of_the_tables_follow_their_growth():
    """shape, .grad, the reductions and matmul read the meta table through a flat view
    (state.Engine.meta_mv), remade whenever the table grows: values made before and after
    a growth read right."""
    from tapegrad._engine.state import engine
    ENGINE = engine()
    w = tg.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], requires_grad=True)
    y = (w * 2.0)                           # its shape not yet read
    cap = ENGINE.meta.shape[0]
    keep = [tg.zeros(1) for _ in range(cap + 10)]
    assert ENGINE.meta.shape[0] > cap       # the table grew
    assert ENGINE.meta_mv.nbytes == ENGINE.meta.nbytes
    assert y.shape == (3, 2) and keep[-1].shape == (1,)
    m = y.max(1, keepdim=True)
    assert m.values.tolist() == [[4.0], [8.0], [12.0]] and m.indices.tolist() == [[1], [1], [1]]
    loss = (y @ tg.ones(2, 1)).sum(0).mean() + y.sum(1, keepdim=True).sum()
    loss.backward()
    assert w.grad.tolist() == [[4.0, 4.0]] * 3
    w.grad = None
    assert w.grad is None
    assert y.detach().tolist() == [[2.0, 4.0], [6.0, 8.0], [10.0, 12.0]]

def test_size_repr():
    assert repr(tg.Size([2, 3])) == "tapegrad.Size([2, 3])"
    assert repr(tg.zeros(2, 3).shape) == "tapegrad.Size([2, 3])"
    assert repr(tg.tensor(1.0).shape) == "tapegrad.Size([])"
    assert repr(tg.zeros(0).shape) == "tapegrad.Size([0])"
    assert str(tg.zeros(5).shape) == "tapegrad.Size([5])"


def test_size_repr_matches_torch():
    torch = pytest.importorskip("torch")
    for shape in ((2, 3), (), (0,), (1, 1, 5)):
        assert repr(tg.zeros(shape).shape).replace("tapegrad", "torch") == \
            repr(torch.zeros(shape).shape)


def test_version_counter_starts_at_zero_and_counts_inplace_ops():
    t = tg.zeros(3)
    assert t._version == 0
    t.add_(1)
    t.mul_(2)
    t += 1
    t.zero_()
    t.fill_(5)
    assert t._version == 5
    assert t.tolist() == [5.0, 5.0, 5.0]
    u = t * 2                    # out-of-place ops do not bump their inputs
    assert t._version == 5 and u._version == 0


def test_boolean_properties_are_python_bools():
    x = tg.ones(2, requires_grad=True)
    y = x * 2
    for v in (x.requires_grad, y.requires_grad, x.retains_grad, x.is_contiguous()):
        assert type(v) is bool


def test_is_leaf_is_a_python_bool():
    x = tg.ones(2, requires_grad=True)
    assert x.is_leaf is True
    assert (x * 2).is_leaf is False


def test_conversions():
    assert float(tg.tensor([2.5])) == 2.5
    assert int(tg.tensor(3)) == 3
    assert bool(tg.tensor([1.0])) is True and bool(tg.tensor(0.0)) is False
    np.testing.assert_array_equal(np.asarray(tg.tensor([[1, 2]])), [[1, 2]])
    assert tg.ones(2).type() == "tapegrad.FloatTensor"
    assert tg.ones(2, dtype=tg.float64).type() == "tapegrad.DoubleTensor"
    assert tg.ones(2, dtype=tg.int64).type() == "tapegrad.LongTensor"
    assert [v.item() for v in tg.tensor([1.0, 2.0, 3.0])] == [1.0, 2.0, 3.0]


# ------------------------------------------------------------------ repr
REPRS = [
    ("tg.tensor([1., 2.])", "tensor([1., 2.])"),
    ("tg.tensor([1., 2.], requires_grad=True)", "tensor([1., 2.], requires_grad=True)"),
    ("tg.tensor([1., 2.], requires_grad=True) * 2", "tensor([2., 4.], grad_fn=<MulBackward0>)"),
    ("tg.tensor([1, 2])", "tensor([1, 2])"),
    ("tg.tensor([1., 2.], dtype=tg.float64)", "tensor([1., 2.], dtype=tapegrad.float64)"),
    ("tg.tensor([1., 2.], dtype=tg.float64, requires_grad=True)",
     "tensor([1., 2.], dtype=tapegrad.float64, requires_grad=True)"),
    ("tg.ones(2, dtype=tg.float64, requires_grad=True) * 2",
     "tensor([2., 2.], dtype=tapegrad.float64, grad_fn=<MulBackward0>)"),
    ("tg.tensor([True, False])", "tensor([ True, False])"),
    ("tg.tensor(3.)", "tensor(3.)"),
    ("tg.tensor(7)", "tensor(7)"),
    ("tg.tensor(2.5, requires_grad=True) * 2", "tensor(5., grad_fn=<MulBackward0>)"),
    ("tg.tensor([1.5, 2.25])", "tensor([1.5000, 2.2500])"),
    ("tg.tensor([-1., 2.])", "tensor([-1.,  2.])"),
    ("tg.tensor([-1, 20])", "tensor([-1, 20])"),
    ("tg.zeros(2, 3)", "tensor([[0., 0., 0.],\n        [0., 0., 0.]])"),
    ("tg.tensor([[1.5, 2.], [3., -4.]])",
     "tensor([[ 1.5000,  2.0000],\n        [ 3.0000, -4.0000]])"),
    ("tg.tensor([])", "tensor([])"),
    ("tg.zeros(0, 3)", "tensor([], size=(0, 3))"),
    ("tg.zeros(2, 0, dtype=tg.int64)", "tensor([], size=(2, 0), dtype=tapegrad.int64)"),
    ("tg.zeros(0, dtype=tg.bool)", "tensor([], dtype=tapegrad.bool)"),
    ("tg.tensor([1e-5, 1.])", "tensor([1.0000e-05, 1.0000e+00])"),
    ("tg.tensor([1e10, 1.])", "tensor([1.0000e+10, 1.0000e+00])"),
    ("tg.tensor([float('nan'), 1.])", "tensor([nan, 1.])"),
    ("tg.tensor([[1., 2.], [3., 4.]]).T", "tensor([[1., 3.],\n        [2., 4.]])"),
]


@pytest.mark.parametrize("expr,expected", REPRS, ids=[e for e, _ in REPRS])
def test_repr(expr, expected):
    t = eval(expr)
    assert repr(t) == expected
    assert str(t) == expected


@pytest.mark.parametrize("expr,expected", REPRS, ids=[e for e, _ in REPRS])
def test_repr_matches_torch(expr, expected):
    torch = pytest.importorskip("torch")
    t = eval(expr.replace("tg.", "torch."), {"torch": torch})
    assert repr(t) == expected.replace("tapegrad", "torch")


def test_repr_of_computed_tensors_matches_torch():
    torch = pytest.importorskip("torch")

    def reprs(L):
        x = L.tensor([[0.5, -1.25, 3.0], [2.0, 0.1, -0.3]], requires_grad=True)
        return [repr(x.exp()), repr(x.sum(0)), repr(x.mean()), repr(x.T),
                repr(x.unbind()[0]), repr(x.detach()), repr(x.reshape(3, 2))]
    ours = [r.replace("tapegrad", "torch") for r in reprs(tg)]
    assert ours == reprs(torch)


# ------------------------------------------------------------------ copy, deepcopy, pickle
def test_deepcopy_of_a_leaf_copies_values_layout_requires_grad_and_grad():
    import copy
    x = tg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=tg.float64, requires_grad=True)
    (x * x).sum().backward()
    y = copy.deepcopy(x)
    assert y is not x and y.is_leaf and y.grad_fn is None and y.requires_grad
    assert y.dtype is tg.float64 and y.shape == (2, 3)
    np.testing.assert_array_equal(y.detach().numpy(), x.detach().numpy())
    assert y.grad is not x.grad
    np.testing.assert_array_equal(y.grad.numpy(), 2 * x.detach().numpy())
    with tg.no_grad():
        y.mul_(10.0)
        y.grad.zero_()
    assert x.detach().tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]     # new memory
    assert x.grad.tolist() == [[2.0, 4.0, 6.0], [8.0, 10.0, 12.0]]
    t = tg.tensor(np.arange(12.0).reshape(3, 4)).t()        # strided: layout kept
    c = copy.deepcopy(t)
    assert c.stride() == t.stride() == (1, 4)
    np.testing.assert_array_equal(c.numpy(), np.arange(12.0).reshape(3, 4).T)
    for v in (tg.tensor([1, -2]), tg.tensor([True, False]), tg.tensor(2.5)):
        c = copy.deepcopy(v)
        assert c.dtype is v.dtype and c.shape == v.shape and c.tolist() == v.tolist()
        assert not c.requires_grad


def test_deepcopy_refuses_a_non_leaf_and_keeps_shared_memory_shared():
    import copy
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(x * 2)
    with tg.no_grad():
        assert copy.deepcopy(x * 2).tolist() == [2.0, 4.0, 6.0]    # no graph: a leaf
    base = x.detach()
    a, b = copy.deepcopy([base, base[1:]])      # copied together: one copy of the memory
    a[2] = 100.0
    assert b.tolist() == [2.0, 100.0] and x.tolist() == [1.0, 2.0, 3.0]
    same = copy.deepcopy([x, x])
    assert same[0] is same[1]


def test_deepcopy_of_a_parameter_drops_its_grad_as_in_pytorch():
    import copy
    p = tg.nn.Parameter(tg.ones(2))
    (p * 3).sum().backward()
    q = copy.deepcopy(p)
    assert type(q) is tg.nn.Parameter and q.requires_grad and q.grad is None
    assert q.tolist() == [1.0, 1.0]
    frozen = copy.deepcopy(tg.nn.Parameter(tg.zeros(1), requires_grad=False))
    assert type(frozen) is tg.nn.Parameter and not frozen.requires_grad


def test_deepcopy_of_model_and_optimizer_trains_apart_in_lockstep():
    """A model and its optimizer copied together: the copy's optimizer updates the copy's
    parameters, continuing from the copied momentum; both then train to the same values
    while the original's parameters are left alone by the copy's steps."""
    import copy
    tg.manual_seed(0)
    model = tg.nn.Sequential(tg.nn.Linear(3, 4), tg.nn.Tanh(), tg.nn.Linear(4, 1))
    opt = tg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = tg.tensor(np.linspace(-1, 1, 15, dtype=np.float32).reshape(5, 3))

    def step(m, o):
        o.zero_grad()
        loss = (m(x) ** 2).mean()
        loss.backward()
        o.step()
        return loss.item()
    step(model, opt)
    model2, opt2 = copy.deepcopy((model, opt))
    assert opt2.param_groups[0]["params"][0] is model2[0].weight
    assert opt.__dict__["_tables"] and not opt2.__dict__["_tables"]    # (raw addresses of
    # the original's memory: were the originals freed, their ids could match the key)
    before = [p.detach().numpy().copy() for p in model.parameters()]
    step(model2, opt2)
    for p, b in zip(model.parameters(), before):
        np.testing.assert_array_equal(p.detach().numpy(), b)
    step(model, opt)
    for _ in range(3):
        assert step(model, opt) == step(model2, opt2)
    for p, q in zip(model.parameters(), model2.parameters()):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())


def test_copy_shares_memory_and_pickle_round_trips():
    import copy
    import pickle
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x * 2).sum().backward()
    c = copy.copy(x)
    assert c is not x and c.requires_grad and c.is_leaf and c.grad is None
    c.data[0] = 9.0
    assert x.tolist() == [9.0, 2.0, 3.0]
    for t in (x, x * 2, tg.tensor(np.arange(6.0).reshape(2, 3), dtype=tg.float64).t(),
              tg.tensor([3, 4]), tg.tensor([True]), tg.tensor(1.5)):
        r = pickle.loads(pickle.dumps(t))
        assert r.dtype is t.dtype and r.shape == t.shape and r.tolist() == t.tolist()
        assert r.requires_grad == t.requires_grad and r.is_leaf and r.grad is None
    p = pickle.loads(pickle.dumps(tg.nn.Parameter(tg.ones(2))))
    assert type(p) is tg.nn.Parameter and p.requires_grad
    tg.manual_seed(1)
    model = tg.nn.Linear(2, 3)
    inp = tg.ones(4, 2)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(model))(inp).detach().numpy(),
                                  model(inp).detach().numpy())


def test_copy_deepcopy_and_pickle_match_torch():
    import copy
    import pickle
    torch = pytest.importorskip("torch")
    for lib in (tg, torch):
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        (x * x).sum().backward()
        p = lib.nn.Parameter(lib.ones(2))
        (p * 2).sum().backward()
        got = []
        for y in (copy.deepcopy(x), copy.copy(x), pickle.loads(pickle.dumps(x)),
                  pickle.loads(pickle.dumps(x * 2)), copy.deepcopy(p), copy.copy(p)):
            got.append((type(y).__name__, y.tolist(), y.requires_grad, y.is_leaf,
                        None if y.grad is None else y.grad.tolist()))
        if lib is tg:
            mine = got
    assert mine == got
