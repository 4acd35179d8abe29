"""tapegrad.autograd.functional against torch.autograd.functional (float64): vjp, jvp,
jacobian, hessian, vhp and hvp on single and tuple inputs and outputs (the result's
structure as well as its values), create_graph results differentiated again, the
vectorize / forward-mode variants (same numbers), strict-mode errors and bad arguments by
type and message."""
import numpy as np
import pytest

import tapegrad as tg
import tapegrad.autograd.functional as TF

torch = pytest.importorskip("torch")
PF = torch.autograd.functional

X = np.array([0.3, -1.2, 0.7, 2.0, -0.4, 1.1])
Y = np.array([[0.5, 1.5], [-0.2, 0.4], [0.9, -0.6]])
A = np.array([[0.2, -0.5, 1.0], [0.7, 0.1, -0.3]])


def _lib(L):
    return TF if L is tg else PF


def _same(ours, theirs):
    """Same structure (Tensor / tuple nesting, shapes, dtypes, requires_grad), same values."""
    if isinstance(theirs, (tuple, list)):
        assert type(ours) is type(theirs) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            _same(a, b)
        return
    assert isinstance(ours, tg.Tensor), type(ours)
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert str(ours.dtype).split(".")[1] == str(theirs.dtype).split(".")[1]
    assert ours.requires_grad == theirs.requires_grad
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-10,
                               atol=1e-12)


def _both(program):
    _same(program(tg, TF), program(torch, PF))


# functions of ops whose double backward tapegrad records (higher_order.py)
def f_elementwise(x):
    return x.sin() * x.exp() + x ** 3 / (1 + x * x)


def f_matrix(x, y):
    return (x.reshape(2, 3) @ y).tanh(), (y * y).sum()


def f_softmax(x):
    return (x.reshape(3, 2).softmax(1) * x.reshape(3, 2).log_softmax(0)).sum(0)


def f_views(x):
    z = x.reshape(2, 3).t()[1:] * 2
    return (z.sigmoid() - z.permute(1, 0).unsqueeze(0).sum(0).t() ** 2)


def s_scalar(x):
    return (x.sin() * x.exp()).sum() + (x.reshape(2, 3).softmax(1) ** 2).sum()


def s_pair(x, y):
    return ((x.reshape(2, 3) @ y).tanh() ** 2).mean() + (x * x.exp()).sum() * y.sum()


def s_where(x):
    return tg_or_torch(x).where(x > 0, x * x * x, x.exp()).sum()


def tg_or_torch(x):
    return tg if isinstance(x, tg.Tensor) else torch


SINGLE_FUNCS = [f_elementwise, f_softmax, f_views]


def _x(L, requires_grad=False):
    return L.tensor(X, requires_grad=requires_grad)


def _xy(L):
    return L.tensor(X), L.tensor(Y)


# ---------------------------------------------------------------- values and structure
@pytest.mark.parametrize("f", SINGLE_FUNCS)
def test_vjp_and_jvp_single(f):
    def program(L, F):
        x = _x(L)
        out_shape = f(x).shape
        v_out = L.arange(float(np.prod(out_shape)), dtype=L.float64).reshape(out_shape) - 1
        return F.vjp(f, x, v_out), F.jvp(f, x, L.tensor(X[::-1].copy()))
    _both(program)


def test_vjp_and_jvp_on_tuples_of_inputs_and_outputs():
    def program(L, F):
        x, y = _xy(L)
        v_out = (L.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=L.float64),
                 L.tensor(2.0, dtype=L.float64))
        return (F.vjp(f_matrix, (x, y), v_out),
                F.jvp(f_matrix, (x, y), (L.tensor(X[::-1].copy()), L.tensor(Y * 2))))
    _both(program)


def test_vjp_v_none_for_a_one_element_output_and_jvp_for_a_one_element_input():
    def program(L, F):
        x = _x(L)
        t = L.tensor([0.4], dtype=L.float64)
        return (F.vjp(s_scalar, x), F.jvp(lambda t: L.cat([t.exp(), t * t]), t),
                F.vhp(lambda t: (t ** 4).sum(), t), F.hvp(lambda t: (t.sin() ** 2).sum(), t))
    _both(program)


@pytest.mark.parametrize("f", SINGLE_FUNCS)
def test_jacobian_single(f):
    _both(lambda L, F: F.jacobian(f, _x(L)))


def test_jacobian_tuple_combinations():
    def program(L, F):
        x, y = _xy(L)
        return (F.jacobian(f_matrix, (x, y)),                              # tuple x tuple
                F.jacobian(lambda x: (x.exp(), x.sum()), x),               # tuple outputs
                F.jacobian(lambda x, y: (x.reshape(2, 3) @ y).sum(0), (x, y)),  # tuple inputs
                F.jacobian(lambda x, y: x * 2, (x, y)))                   # an unused input
    _both(program)


@pytest.mark.parametrize("f", [s_scalar, s_where])
def test_hessian_vhp_hvp_single(f):
    def program(L, F):
        x = _x(L)
        v = L.tensor(X[::-1].copy())
        return F.hessian(f, x), F.vhp(f, x, v), F.hvp(f, x, v)
    _both(program)


def test_hessian_vhp_hvp_on_tuples():
    def program(L, F):
        x, y = _xy(L)
        v = (L.tensor(X[::-1].copy()), L.tensor(Y - 1))
        return (F.hessian(s_pair, (x, y)), F.vhp(s_pair, (x, y), v), F.hvp(s_pair, (x, y), v),
                F.hessian(lambda x, y: (x ** 3).sum(), (x, y)))      # unused input: zeros
    _both(program)


def test_unused_inputs_give_zeros_and_captured_inputs_are_constants():
    def program(L, F):
        x, y = _xy(L)
        g = (lambda x, y: (x * x).sum())
        return (F.vjp(g, (x, y)), F.jvp(lambda x, y: x * 2, (x, y), (x, y)),
                F.vhp(g, (x, y), (x, y)), F.hvp(g, (x, y), (x, y)),
                # (the function's argument is a new tensor: the captured x is a constant)
                F.jacobian(lambda t: t * x, x), F.hessian(lambda t: (t * t * x).sum(), x))
    _both(program)


def test_results_are_detached_and_grad_mode_is_respected():
    def program(L, F):
        x = _x(L, requires_grad=True)
        out = F.vjp(f_elementwise, x, L.ones(6, dtype=L.float64))
        with L.no_grad():
            out2 = F.hvp(s_scalar, x, x.detach())
            inside = L.is_grad_enabled()
        assert not inside
        return out + out2 + (F.jacobian(f_softmax, x),)
    _both(program)


def test_second_order_of_a_classifier_loss():
    """Hessian-vector products of a cross-entropy loss in the weights (influence functions,
    Hessian-free steps), its Hessian, and the Jacobian of a logsumexp and amax head."""
    def program(L, F):
        rng = np.random.default_rng(4)
        X_ = L.tensor(rng.standard_normal((5, 3)))
        t = L.tensor([0, 2, 1, 1, 0])
        W = L.tensor(rng.standard_normal((3, 3)))
        v = L.tensor(rng.standard_normal((3, 3)))

        def loss(W):
            return L.nn.functional.cross_entropy(X_ @ W, t, label_smoothing=0.05)
        return (F.hvp(loss, W, v), F.vhp(loss, W, v), F.hessian(loss, W),
                F.jacobian(lambda W: (X_ @ W).logsumexp(1) + (X_ @ W).amax(1), W))
    _both(program)


# ---------------------------------------------------------------- create_graph
def test_create_graph_results_differentiate_again():
    def program(L, F):
        x = _x(L, requires_grad=True)
        v = L.tensor(X[::-1].copy(), requires_grad=True)
        out, g = F.vjp(f_elementwise, x, v, create_graph=True)
        _, jv = F.jvp(f_softmax, x, v, create_graph=True)
        _, hv = F.hvp(s_scalar, x, v, create_graph=True)
        _, vh = F.vhp(s_scalar, x, v, create_graph=True)
        total = (g * g).sum() + jv.sum() + (hv ** 2).sum() + vh.sum() + out.sum()
        gx, gv = L.autograd.grad(total, (x, v))
        return out, g, jv, hv, vh, gx, gv
    _both(program)


def test_create_graph_jacobian_and_hessian_differentiate_again():
    def program(L, F):
        x, y = _xy(L)
        x.requires_grad_(True)
        y.requires_grad_(True)
        J = F.jacobian(f_matrix, (x, y), create_graph=True)
        H = F.hessian(s_pair, (x, y), create_graph=True)
        total = (J[0][0] ** 2).sum() + J[1][1].sum() + H[0][1].sum() + (H[0][0] ** 2).sum()
        return J, H, L.autograd.grad(total, (x, y))
    _both(program)


def test_create_graph_on_inputs_without_grad_keeps_results_in_a_graph():
    def program(L, F):
        x = _x(L)                          # does not require grad
        out, g = F.vjp(f_elementwise, x, L.ones(6, dtype=L.float64), create_graph=True)
        return out, g, F.jacobian(lambda x: x * 3.0, x, create_graph=True)
    _both(program)


# ---------------------------------------------------------------- vectorize, forward mode
def test_vectorize_and_forward_mode_give_the_same_numbers():
    def program(L, F):
        x, y = _xy(L)
        return (F.jacobian(f_matrix, (x, y), vectorize=True),
                F.jacobian(f_softmax, x, vectorize=True, strategy="forward-mode"),
                F.jacobian(lambda x, y: (x.exp(), y.sum()), (x, y), vectorize=True,
                           strategy="forward-mode"),
                F.hessian(s_pair, (x, y), vectorize=True),
                F.hessian(s_scalar, x, vectorize=True, outer_jacobian_strategy="forward-mode"),
                # (PyTorch's forward mode nests lists for tuples of inputs and outputs)
                F.hessian(s_pair, (x, y), vectorize=True,
                          outer_jacobian_strategy="forward-mode"),
                F.jacobian(lambda x, y: x * y.sum(), (x, y), vectorize=True,
                           strategy="forward-mode"),
                F.jacobian(f_softmax, x.requires_grad_(True), create_graph=True,
                           vectorize=True))
    _both(program)


def test_forward_mode_has_the_outputs_dtype_and_keeps_the_inputs_graph():
    def program(L, F):
        x = _x(L, requires_grad=True)
        J = F.jacobian(lambda x: x.sin().float(), x, vectorize=True, strategy="forward-mode")
        Jr = F.jacobian(lambda x: x.sin().float(), x, vectorize=True)     # (input's dtype)
        (gx,) = L.autograd.grad(J.double().sum(), x)
        return J, Jr, gx
    _both(program)


def test_an_op_without_a_double_backward_is_named_by_jvp():
    x = tg.tensor(Y)
    with pytest.raises(NotImplementedError, match="double backward of CumprodBackward0"):
        TF.jvp(lambda x: x.cumprod(0), x, x)
    assert TF.vjp(lambda x: x.cumprod(0), x, x)[1].shape == (3, 2)   # (no double backward)


# ---------------------------------------------------------------- errors, as PyTorch's
def _linear(x):
    return x * 2.0


def _const(L):
    return lambda x: L.ones(3, dtype=L.float64)


ERRORS = {
    # inputs and outputs that are not Tensors
    "inputs list": lambda L, F: F.vjp(f_elementwise, [_x(L)], _x(L)),
    "inputs tuple entry": lambda L, F: F.jacobian(f_elementwise, (_x(L), 3)),
    "hessian inputs": lambda L, F: F.hessian(s_scalar, 1.0),
    "outputs list": lambda L, F: F.jvp(lambda x: [x], _x(L), _x(L)),
    "outputs tuple entry": lambda L, F: F.jacobian(lambda x: (x, 2), _x(L)),
    "forward outputs": lambda L, F: F.jacobian(lambda x: [x], _x(L), vectorize=True,
                                               strategy="forward-mode"),
    # v
    "v not a tensor": lambda L, F: F.vjp(_linear, _x(L), [1.0] * 6),
    "v none vjp": lambda L, F: F.vjp(_linear, _x(L)),
    "v none jvp": lambda L, F: F.jvp(_linear, _x(L)),
    "v none vhp": lambda L, F: F.vhp(s_scalar, _xy(L)),
    "v none hvp": lambda L, F: F.hvp(s_scalar, _x(L)),
    "v single size": lambda L, F: F.vjp(_linear, _x(L), L.ones(5, dtype=L.float64)),
    "v tuple size": lambda L, F: F.jvp(f_matrix, _xy(L), (L.ones(6, dtype=L.float64),
                                                          L.ones(2, dtype=L.float64))),
    "v tuple length": lambda L, F: F.vhp(s_pair, _xy(L), (_x(L),)),
    "v for a single tensor": lambda L, F: F.hvp(s_scalar, _x(L), (_x(L), _x(L))),
    # functions of the wrong kind
    "hessian tuple output": lambda L, F: F.hessian(lambda x: (x.sum(),), _x(L)),
    "hessian vector output": lambda L, F: F.hessian(lambda x: x * x, _x(L)),
    "vhp tuple output": lambda L, F: F.vhp(lambda x: (x.sum(),), _x(L), _x(L)),
    "hvp vector output": lambda L, F: F.hvp(lambda x: x * x, _x(L), _x(L)),
    # strict mode
    "strict output": lambda L, F: F.vjp(_const(L), _x(L), _x(L)[:3], strict=True),
    "strict vjp unused": lambda L, F: F.vjp(lambda x, y: x * 2, _xy(L), _x(L), strict=True),
    "strict vjp create_graph": lambda L, F: F.vjp(_linear, _x(L), _x(L), create_graph=True,
                                                  strict=True),
    "strict jvp unused": lambda L, F: F.jvp(lambda x, y: x * 2, _xy(L), _xy(L), strict=True),
    "strict jacobian unused": lambda L, F: F.jacobian(lambda x, y: x.exp(), _xy(L),
                                                      strict=True),
    "strict jacobian linear": lambda L, F: F.jacobian(_linear, _x(L), create_graph=True,
                                                      strict=True),
    "strict hessian linear": lambda L, F: F.hessian(lambda x: x.sum(), _x(L), strict=True),
    "strict hessian unused": lambda L, F: F.hessian(lambda x, y: (x * x).sum(), _xy(L),
                                                    strict=True),
    "strict vhp linear": lambda L, F: F.vhp(lambda x: (x * 3).sum(), _x(L), _x(L),
                                            strict=True),
    "strict hvp quadratic create_graph": lambda L, F: F.hvp(lambda x: (x * x).sum(), _x(L),
                                                            _x(L), strict=True,
                                                            create_graph=True),
    "strict vhp quadratic create_graph": lambda L, F: F.vhp(lambda x: (x * x).sum(), _x(L),
                                                            _x(L), strict=True,
                                                            create_graph=True),
    # strategies
    "strategy name": lambda L, F: F.jacobian(_linear, _x(L), strategy="forward"),
    "hessian strategy name": lambda L, F: F.hessian(s_scalar, _x(L),
                                                    outer_jacobian_strategy="reverse"),
    "forward create_graph": lambda L, F: F.jacobian(_linear, _x(L), create_graph=True,
                                                    vectorize=True, strategy="forward-mode"),
    "forward strict": lambda L, F: F.jacobian(_linear, _x(L), strict=True, vectorize=True,
                                              strategy="forward-mode"),
    "forward without vectorize": lambda L, F: F.jacobian(_linear, _x(L),
                                                         strategy="forward-mode"),
    "hessian forward without vectorize": lambda L, F: F.hessian(
        s_scalar, _x(L), outer_jacobian_strategy="forward-mode"),
    "hessian forward create_graph": lambda L, F: F.hessian(
        s_scalar, _x(L), create_graph=True, vectorize=True,
        outer_jacobian_strategy="forward-mode"),
    "vectorize strict": lambda L, F: F.jacobian(f_elementwise, _x(L), strict=True,
                                                vectorize=True),
    "hessian vectorize strict": lambda L, F: F.hessian(s_scalar, _x(L), strict=True,
                                                       vectorize=True),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors_are_pytorchs(case):
    call = ERRORS[case]
    with pytest.raises(Exception) as theirs:
        call(torch, PF)
    with pytest.raises(Exception) as ours:
        call(tg, TF)
    assert type(ours.value) is type(theirs.value)
    assert str(ours.value) == str(theirs.value).replace("torch.", "tapegrad.")


def test_submodule_and_attribute_with_docstrings():
    import importlib
    assert tg.autograd.functional is importlib.import_module("tapegrad.autograd.functional")
    assert sorted(TF.__all__) == sorted(PF.__all__)
    for name in TF.__all__:
        fn = getattr(TF, name)
        assert fn.__doc__ and fn.__doc__.strip()
        assert list(__import__("inspect").signature(fn).parameters) == \
            list(__import__("inspect").signature(getattr(PF, name)).parameters)


def test_a_step_with_hvp_and_jacobian_penalties_compiles_like_its_eager_step():
    """Under tapegrad.compile (the functional API breaks the graph: the step runs
    eagerly, with a warning): the same losses and parameters as eager."""
    def make():
        rng = np.random.default_rng(3)
        w = tg.tensor(rng.standard_normal(4), requires_grad=True)
        opt = tg.optim.SGD([w], lr=0.05)

        def step(X):
            opt.zero_grad()

            def loss_fn(w):
                return ((X @ w).tanh() ** 2).mean()
            _, hv = TF.hvp(loss_fn, w, w.detach(), create_graph=True)
            J = TF.jacobian(lambda w: (X @ w).tanh(), w, create_graph=True)
            loss = loss_fn(w) + 0.1 * (hv ** 2).sum() + 0.01 * (J ** 2).sum()
            loss.backward()
            opt.step()
            return loss
        return step, w
    X = tg.tensor(np.random.default_rng(5).standard_normal((5, 4)))
    step, w = make()
    eager = [step(X).item() for _ in range(3)]
    step2, w2 = make()
    compiled = tg.compile(step2)
    with pytest.warns(Warning, match="runs eagerly"):
        replayed = [compiled(X).item() for _ in range(3)]
    assert replayed == eager
    np.testing.assert_array_equal(w.detach().numpy(), w2.detach().numpy())
