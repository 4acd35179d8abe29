"""tapegrad.func against torch.func (float64): grad and grad_and_value (argnums, has_aux,
nesting), vjp, jvp, jacrev, jacfwd, hessian, vmap (in_dims, out_dims, randomness,
per-sample gradients), functional_call (tied weights, strict) and the errors."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")


def _np(x):
    if isinstance(x, (tuple, list)):
        return [_np(v) for v in x]
    if isinstance(x, dict):
        return {k: _np(v) for k, v in x.items()}
    return x.detach().numpy() if hasattr(x, "detach") else x


def _same(a, b):
    a, b = _np(a), _np(b)
    if isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _same(a[k], b[k])
    else:
        assert np.shape(a) == np.shape(b)
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def _both(program):
    _same(program(tg), program(torch))


X = np.array([0.3, -1.2, 0.7, 2.0])
Y = np.array([[0.5, -0.1, 0.2, 1.0], [1.5, 0.3, -0.7, 0.4], [0.2, 0.2, -2.0, 1.1]])


def f(L, x, y):
    return (y @ x.tanh()).sin().sum() + (x ** 3).mean()


@pytest.mark.parametrize("argnums", [0, 1, (0, 1), (1,), -1])
def test_grad_argnums(argnums):
    _both(lambda L: L.func.grad(lambda x, y: f(L, x, y), argnums)(L.tensor(X), L.tensor(Y)))


def test_grad_and_value_has_aux_and_nesting():
    def program(L):
        x = L.tensor(X)
        g, (v, aux) = L.func.grad_and_value(lambda x: (f(L, x, L.tensor(Y)), x * 2),
                                            has_aux=True)(x)
        nested = L.func.grad(lambda x: L.func.grad(lambda z: (z.sin() * z).sum())(x)
                             .pow(2).sum())(x)
        return [g, v, aux, nested]
    _both(program)


def test_grad_of_a_tensor_that_requires_grad_stays_differentiable():
    """A parameter given to grad: the gradient carries history back to it, as in torch."""
    def program(L):
        w = L.tensor(X, requires_grad=True)
        g = L.func.grad(lambda w: (w.tanh() * w).sum())(w)
        assert g.requires_grad
        (gw,) = L.autograd.grad(g.sum(), w)
        return [g, gw]
    _both(program)
    g = tg.func.grad(lambda w: (w.tanh() * w).sum())(tg.tensor(X))
    assert not g.requires_grad


def test_vjp_jvp_jacrev_jacfwd_hessian():
    def program(L):
        x, y = L.tensor(X), L.tensor(Y)
        out, fn = L.func.vjp(lambda x, y: (y @ x).exp(), x, y)
        v = L.tensor(np.array([1.0, -2.0, 0.5]))
        o2, t2 = L.func.jvp(lambda x: (y @ x.sin()) ** 2, (x,), (L.ones(4, dtype=L.float64),))
        jr = L.func.jacrev(lambda x, y: (y @ x).tanh(), argnums=(0, 1))(x, y)
        jf = L.func.jacfwd(lambda x: (y @ x).tanh())(x)
        h = L.func.hessian(lambda x: (x.sin() * x.sum()).sum() + (y @ x).pow(2).sum())(x)
        return [out, list(fn(v)), o2, t2, list(jr), jf, h]
    _both(program)


def test_vmap_in_dims_out_dims_and_per_sample_gradients():
    def program(L):
        x, y = L.tensor(X), L.tensor(Y)
        a = L.vmap(lambda r, x: (r * x).sum(), in_dims=(0, None))(y, x)
        b = L.func.vmap(lambda c: c * 2, in_dims=1, out_dims=1)(y)
        c = L.func.vmap(L.func.vmap(lambda e: e.sin()))(y)
        w = L.tensor(X * 0.5)
        per_sample = L.func.vmap(L.func.grad(lambda w, r, t: ((r @ w).tanh() - t) ** 2),
                                 in_dims=(None, 0, 0))(w, y, L.tensor(np.array([0.1, -0.3,
                                                                                0.8])))
        d = L.func.vmap(lambda r: (r, x.sum()), out_dims=(0, None))(y)
        return [a, b, c, per_sample, list(d)]
    _both(program)


def test_vmap_randomness():
    with pytest.raises(RuntimeError, match="called random operation while in randomness "
                                           "error mode"):
        tg.func.vmap(lambda x: tg.rand(3) + x)(tg.zeros(2, 3))
    same = tg.func.vmap(lambda x: tg.rand(3) + x, randomness="same")(tg.zeros(2, 3))
    assert bool((same[0] == same[1]).all())
    diff = tg.func.vmap(lambda x: tg.rand(3) + x, randomness="different")(tg.zeros(2, 3))
    assert not bool((diff[0] == diff[1]).all())


def test_functional_call_with_tied_weights_and_strict():
    def program(L):
        L.manual_seed(0)
        m = L.nn.Sequential(L.nn.Linear(4, 3), L.nn.Tanh(), L.nn.Linear(3, 2))
        params = {k: v.detach() * 2 for k, v in m.named_parameters()}
        out = L.func.functional_call(m, params, (L.tensor(X, dtype=L.float32),))
        grads = L.func.grad(lambda p, x: L.func.functional_call(m, p, (x,)).sum())(
            params, L.tensor(X, dtype=L.float32))
        after = m(L.tensor(X, dtype=L.float32))         # the module's own weights are back
        return [out, {k: grads[k] for k in sorted(grads)}, after]
    ours, theirs = program(tg), program(torch)
    for a, b in zip(ours[:1] + ours[2:], theirs[:1] + theirs[2:]):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-6)
    for k in ours[1]:
        np.testing.assert_allclose(_np(ours[1][k]), _np(theirs[1][k]), rtol=1e-5, atol=1e-7)

    class Tied(tg.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = tg.nn.Linear(2, 2, bias=False)
            self.b = self.a

        def forward(self, x):
            return self.b(x)
    m = Tied()
    out = tg.func.functional_call(m, {"a.weight": tg.eye(2)}, (tg.tensor([1.0, 2.0]),))
    np.testing.assert_array_equal(out.detach().numpy(), [1.0, 2.0])
    with pytest.raises(RuntimeError, match="Error\\(s\\) in reparametrizing for Tied:\n\t"
                                           "Unexpected key\\(s\\): 'c'."):
        tg.func.functional_call(m, {"a.weight": tg.eye(2), "c": tg.eye(2)},
                                (tg.ones(2),), strict=True)


@pytest.mark.parametrize("call, kind, message", [
    (lambda L: L.func.grad(lambda x: x)(L.tensor(X)), RuntimeError,
     "Expected f(*args) to return a scalar Tensor, got tensor with 1 dims"),
    (lambda L: L.func.grad(lambda x: x.sum(), has_aux=True)(L.tensor(X)), RuntimeError,
     "output of function f should be a tuple: (output, aux) if has_aux is True"),
    (lambda L: L.func.grad(lambda x: x.sum(), argnums=1)(L.tensor(X)), RuntimeError,
     "Got argnum=1, but only 1 positional inputs"),
    (lambda L: L.func.grad(lambda x: x.sum(), argnums=(0, 0))(L.tensor(X)), RuntimeError,
     "argnums elements must be unique, got (0, 0)"),
    (lambda L: L.func.grad(lambda x: x.sum())(5.0), ValueError,
     "Thing passed to transform API must be Tensor, got <class 'float'>"),
    (lambda L: L.func.grad(lambda x: x.sum())(L.tensor([1, 2])), RuntimeError,
     "only Tensors of floating point dtype can require gradients"),
    (lambda L: L.func.vmap(lambda x, y: x + y)(L.tensor(Y), L.tensor(X)), ValueError,
     "vmap: Expected all tensors to have the same size in the mapped dimension, got sizes "
     "[3, 4] for the mapped dimension"),
    (lambda L: L.func.vmap(lambda r: r.sum(), out_dims=None)(L.tensor(Y)), ValueError,
     "can not return a BatchedTensor when out_dim is None"),
    (lambda L: L.func.vmap(lambda x: 5)(L.tensor(Y)), ValueError,
     "must only return Tensors, got type <class 'int'>. Did you mean to set out_dims= to "
     "None for output?"),
])
def test_errors(call, kind, message):
    for L in (torch, tg):
        with pytest.raises(kind) as e:
            call(L)
        assert message in str(e.value), (L.__name__, str(e.value))
