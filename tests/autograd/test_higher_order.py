"""create_graph=True: gradients recorded as rows and differentiated again, against
PyTorch (float64) — a physics-informed net's u_xx loss, a gradient penalty, third
derivatives of elementwise ops, Hessian-vector products through views and reductions —
and the errors: an op whose double backward is not written yet, in-place changes."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")


def _mlp(L, rng, sizes, act):
    """Weights drawn once with NumPy, the same in both libraries."""
    ws = [(L.tensor(rng.standard_normal((o, i)) / np.sqrt(i), requires_grad=True),
           L.tensor(rng.standard_normal(o) * 0.1, requires_grad=True))
          for i, o in zip(sizes[:-1], sizes[1:])]

    def f(x):
        for k, (w, b) in enumerate(ws):
            x = L.nn.functional.linear(x, w, b)
            if k < len(ws) - 1:
                x = act(x)
        return x
    return f, [p for wb in ws for p in wb]


def _both(program):
    """program(L) -> list of tensors, run in both libraries; values and then compared."""
    ours, theirs = program(tg), program(torch)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10,
                                       atol=1e-12)


def test_pinn_poisson_loss_with_u_xx_and_its_parameter_gradients():
    def program(L):
        rng = np.random.default_rng(0)
        net, params = _mlp(L, rng, [1, 8, 8, 1], lambda h: h.tanh())
        x = L.tensor(np.linspace(0, 1, 16).reshape(-1, 1), requires_grad=True)
        u = net(x)
        (u_x,) = L.autograd.grad(u.sum(), x, create_graph=True)
        (u_xx,) = L.autograd.grad(u_x.sum(), x, create_graph=True)
        f = -(np.pi ** 2) * L.sin(np.pi * x)
        loss = ((u_xx - f) ** 2).mean() + (u[0] ** 2 + u[-1] ** 2).sum()
        loss.backward()
        return [u_x, u_xx, loss] + [p.grad for p in params]
    _both(program)


def test_gradient_penalty_backward_create_graph():
    """WGAN-GP style: the norm of the input gradient in the loss; leaky_relu, mse."""
    def program(L):
        rng = np.random.default_rng(1)
        net, params = _mlp(L, rng, [3, 6, 1],
                           lambda h: L.nn.functional.leaky_relu(h, 0.2))
        x = L.tensor(rng.standard_normal((5, 3)), requires_grad=True)
        out = net(x)
        (gx,) = L.autograd.grad(out, x, grad_outputs=L.ones_like(out), create_graph=True)
        penalty = ((gx.norm(2, dim=1) - 1) ** 2).mean()
        loss = L.nn.functional.mse_loss(out, L.zeros_like(out)) + 10 * penalty
        loss.backward()
        return [gx, penalty] + [p.grad for p in params]
    _both(program)


def _layer_norm(L, x, shape, weight=None, bias=None, eps=1e-5):
    """tapegrad's layer_norm; PyTorch's composed of its ops, as the reference: its native
    double backward holds the mean and rstd constant, so its third derivatives are not
    exact (those of sum(layer_norm(x) * c) along a row's shift are not 0 there)."""
    if L is tg:
        return L.nn.functional.layer_norm(x, shape, weight, bias, eps)
    dims = tuple(range(-len(shape), 0))
    xc = x - x.mean(dims, keepdim=True)
    y = xc * ((xc * xc).mean(dims, keepdim=True) + eps).rsqrt()
    y = y if weight is None else y * weight
    return y if bias is None else y + bias


@pytest.mark.parametrize("fn", [
    lambda L, x: (x.sin() * x.exp()).sum(),
    lambda L, x: (x.sigmoid() / (1 + x * x)).sum(),
    lambda L, x: (x ** 3 - 2.5 * x).pow(2).sum(),
    lambda L, x: (L.softmax(x.reshape(2, 3), 1) * L.arange(6.0, dtype=L.float64).reshape(2, 3)).sum(),
    lambda L, x: L.log_softmax(x.reshape(3, 2).t(), 0)[1].sum(),
    lambda L, x: (x.reshape(2, 3).permute(1, 0) @ x.reshape(2, 3)).tanh().mean(),
    lambda L, x: L.cat([x[:2], x[3:] * 2], 0).unsqueeze(0).expand(2, 5).sum(0).norm(),
    lambda L, x: (x.reshape(2, 3)[1] * x.reshape(3, 2)[:, ::2].squeeze(1)).sum() * x[1:5:3].sum(),
    lambda L, x: L.where(x > 0, x * x, x.exp()).sum(),
    lambda L, x: (-L.log_softmax(x.reshape(3, 2) * x[:2], 1)[L.arange(3), L.tensor([1, 0, 1])]
                  .mean() + (x[L.tensor([0, 5, 5])] ** 3).sum()
                  + (x.reshape(2, 3).gather(1, L.tensor([[2, 2], [0, 1]])) ** 2).sum()),
    lambda L, x: ((L.zeros(4, dtype=L.float64).index_add(0, L.tensor([1, 3, 1, 0, 2, 3]), x)
                   ** 3).sum() + (x.reshape(2, 3).cumsum(1) ** 2).sum()
                  + (x.masked_select(x > 0) ** 3).sum()),
    lambda L, x: ((x.reshape(1, 2, 3).transpose(0, 2) * L.arange(6.0, dtype=L.float64)
                   .reshape(3, 2, 1)).sin().sum() + x.reshape(3, 2).t()[1].exp().sum()
                  + L.nn.functional.pad(x.reshape(2, 3), (1, -1, 2, 0)).pow(3).sum()
                  + (x.roll(2, 0) * x).sum() ** 2),
    lambda L, x: (x.reshape(2, 3).split([1, 2], 1)[1].exp().sum()
                  + (x.reshape(3, 2).unbind(0)[2] ** 3).sum()),
    lambda L, x: (x.reshape(2, 3).logsumexp(1).pow(2).sum() + L.logsumexp(x * x, 0)
                  + x.reshape(3, 2).logsumexp(0, keepdim=True).exp().sum()),
    lambda L, x: (x.reshape(2, 3).var(1).pow(2).sum()
                  + x.std() * x.reshape(3, 2).var(0, correction=0).sum()
                  + x.reshape(3, 2).std(1, keepdim=True).pow(3).sum()),
    lambda L, x: ((x.reshape(2, 3).amax(1) ** 3).sum() + x.max() ** 2
                  + (x.reshape(3, 2).min(0).values * x[:2]).sum()
                  + x.reshape(3, 2).max(1, keepdim=True).values.exp().sum()),
    lambda L, x: ((L.stack([x, x * 1.0]).amax(0) ** 3).sum() + L.cat([x, x]).min() ** 3
                  + (L.amin(x.reshape(2, 3), (0, 1)) * x).sum()),        # (ties share)
    lambda L, x: (L.nn.functional.cross_entropy(
        x.reshape(2, 3), L.tensor([2, 0]), weight=L.tensor([0.5, 1.0, 2.0], dtype=L.float64),
        label_smoothing=0.1)
        + L.nn.functional.cross_entropy(x.reshape(3, 2) * x.reshape(3, 2), L.tensor([1, 0, 1]))
        + (L.nn.functional.cross_entropy(x.reshape(1, 3, 2), L.tensor([[2, -100]]),
                                         reduction="none") ** 2).sum()
        + L.nn.functional.cross_entropy(x[:3], L.tensor(1)) * x[4]),
    lambda L, x: (L.nn.functional.nll_loss(x.reshape(3, 2).log_softmax(1) * x.reshape(3, 2),
                                           L.tensor([1, -100, 0]))
                  + L.nn.functional.nll_loss((x * x).reshape(2, 3), L.tensor([2, 1]),
                                             weight=L.tensor([0.5, 1.0, 2.0], dtype=L.float64),
                                             reduction="sum")
                  + L.nn.functional.cross_entropy(
                      x.reshape(1, 2, 3, 1).tanh() * 3, L.tensor([[[0], [1], [1]]]),
                      weight=L.tensor([0.3, 1.0], dtype=L.float64), label_smoothing=0.2)),
    lambda L, x: ((_layer_norm(L, x.reshape(2, 3), (3,), x[:3] * 2, x[3:].exp(), 1e-3) ** 3).sum()
                  + (_layer_norm(L, x.reshape(3, 2) * x.reshape(3, 2), (3, 2))
                     * L.arange(6.0, dtype=L.float64).reshape(3, 2)).sum()
                  + (_layer_norm(L, x.reshape(2, 3), (3,), None, x[:3]) ** 2
                     * x.reshape(2, 3)).sum()
                  + _layer_norm(L, x.reshape(1, 2, 3), (3,),
                                L.tensor([0.5, -1.0, 2.0], dtype=L.float64)).tanh().sum()),
    lambda L, x: ((x.reshape(2, 3).flip(1) * x.reshape(2, 3) ** 2).sum()
                  + (x.reshape(3, 2).flip((0, 1)).exp() * x.reshape(3, 2)).sum()),
])
def test_third_derivatives(fn):
    def program(L):
        x = L.tensor(np.array([0.3, -1.2, 0.7, 2.0, -0.4, 1.1]), requires_grad=True)
        (g,) = L.autograd.grad(fn(L, x), x, create_graph=True)
        (h,) = L.autograd.grad((g * L.arange(6.0, dtype=L.float64)).sum(), x,
                               create_graph=True)
        (t,) = L.autograd.grad(h.sum(), x)
        return [g, h, t]
    _both(program)


def test_hessian_vector_product_and_grad_outputs_that_require_grad():
    def program(L):
        rng = np.random.default_rng(2)
        A = L.tensor(rng.standard_normal((4, 4)))
        x = L.tensor(rng.standard_normal(4), requires_grad=True)
        v = L.tensor(rng.standard_normal(4), requires_grad=True)
        y = (x @ A @ x).tanh() + (x ** 2).sum()
        (g,) = L.autograd.grad(y, x, create_graph=True)
        (hv,) = L.autograd.grad(g, x, grad_outputs=v, create_graph=True)
        gx, gv = L.autograd.grad(hv.sum(), (x, v))
        return [g, hv, gx, gv]
    _both(program)


def test_backward_create_graph_accumulates_with_history_and_warns():
    x = tg.tensor([0.5, -1.0], dtype=tg.float64, requires_grad=True)
    with pytest.warns(UserWarning, match="reference cycle between the parameter and its"):
        (x ** 3).sum().backward(create_graph=True)
    assert x.grad.requires_grad and x.grad.grad_fn is not None
    np.testing.assert_allclose(x.grad.detach().numpy(), [0.75, 3.0])
    g = x.grad
    x.grad = None
    g.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, -6.0])


def test_a_non_leaf_input_and_allow_unused():
    x = tg.tensor([1.0, 2.0], dtype=tg.float64, requires_grad=True)
    h = x * 3
    y = (h * h).sum()
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        tg.autograd.grad(y, (x, tg.ones(1, requires_grad=True)), create_graph=True)
    gh, gz = tg.autograd.grad(y, (h, tg.ones(1, requires_grad=True)), create_graph=True,
                              allow_unused=True)
    assert gz is None
    np.testing.assert_allclose(gh.detach().numpy(), [6.0, 12.0])
    (gx,) = tg.autograd.grad(gh.sum(), x)
    np.testing.assert_allclose(gx.numpy(), [6.0, 6.0])


def test_an_op_without_a_double_backward_says_so():
    x = tg.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=tg.float64, requires_grad=True)
    y = x.cumprod(0).sum()
    with pytest.raises(NotImplementedError, match="double backward of CumprodBackward0 is not "
                                                  "supported yet"):
        tg.autograd.grad(y, x, create_graph=True)


def test_in_place_change_of_a_saved_value_is_caught():
    def program(L):
        x = L.tensor([0.5, 1.5], requires_grad=True)
        y = x * 2
        z = (y * y).sum()
        y.add_(1)
        return L.autograd.grad(z, x, create_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        program(torch)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        program(tg)


def test_a_second_order_graph_replays_like_its_eager_step():
    """A PINN step under tapegrad.compile: the same losses and parameters as eager."""
    def make():
        rng = np.random.default_rng(3)
        net, params = _mlp(tg, rng, [1, 6, 1], lambda h: h.tanh())
        opt = tg.optim.SGD(params, lr=0.05)
        x = tg.tensor(np.linspace(0, 1, 8).reshape(-1, 1), requires_grad=True)

        def step(x):
            opt.zero_grad()
            u = net(x)
            (u_x,) = tg.autograd.grad(u.sum(), x, create_graph=True)
            loss = ((u_x - 1.0) ** 2).mean()
            loss.backward()
            opt.step()
            return loss
        return step, x, params
    step, x, params = make()
    eager = [step(x).item() for _ in range(3)]
    step2, x2, params2 = make()
    compiled = tg.compile(step2)
    with pytest.warns(Warning):         # autograd.grad is a graph break today: runs eagerly
        replayed = [compiled(x2).item() for _ in range(3)]
    assert replayed == eager
    for p, q in zip(params, params2):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())


def _cube(L, detach_in_backward):
    class Cube(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * (x.detach() if detach_in_backward else x) ** 2
    return Cube


@pytest.mark.parametrize("detach", [False, True])
def test_gradgradcheck_and_a_function_double_backward(detach):
    """A Function whose backward is written in differentiable ops differentiates twice;
    one whose backward cuts the graph fails gradgradcheck, in both libraries."""
    for L in (tg, torch):
        x = L.tensor(np.array([0.3, -0.5, 1.2]), dtype=L.float64, requires_grad=True)
        Cube = _cube(L, detach)
        assert L.autograd.gradcheck(Cube.apply, (x,))
        assert L.autograd.gradgradcheck(Cube.apply, (x,), raise_exception=False) is not detach
    x = tg.tensor(np.array([0.3, -0.5, 1.2]), requires_grad=True)
    assert tg.testing.gradgradcheck(lambda x: (x.sin() * x).sum(), (x,))


def test_gradcheck_refuses_what_it_cannot_check():
    x = tg.tensor([0.5], dtype=tg.float64, requires_grad=True)
    with pytest.raises(NotImplementedError, match="gradcheck\\(check_forward_ad=True\\)"):
        tg.autograd.gradcheck(lambda x: x * 2, (x,), check_forward_ad=True)


def test_constant_operands_stay_constants_and_norm_along_a_dim():
    """A gradient times a constant does not require grad through the constant; the
    2-norm along one dim (F.normalize's) differentiates twice."""
    def program(L):
        x = L.tensor(np.array([[0.3, -1.2, 0.7], [2.0, -0.4, 1.1]]), requires_grad=True)
        c = L.tensor(np.array([1.5, -2.0, 0.5]))
        (g,) = L.autograd.grad((x * x).sum(), x, create_graph=True)
        (h,) = L.autograd.grad(g, x, grad_outputs=g * c, create_graph=True)
        n = L.nn.functional.normalize(x, dim=1)
        (gn,) = L.autograd.grad((n * c).sum(), x, create_graph=True)
        (hn,) = L.autograd.grad((gn ** 2).sum(), x)
        return [g, h, gn, hn]
    _both(program)
    for L in (tg, torch):       # 2c: nothing left to differentiate, in both libraries
        u = L.ones(2, requires_grad=True)
        (g,) = L.autograd.grad((u * u).sum(), u, create_graph=True)
        (k,) = L.autograd.grad(g, u, grad_outputs=L.tensor([1.0, 2.0]), create_graph=True)
        assert k.requires_grad is False and k.tolist() == [2.0, 4.0]


def test_once_differentiable_as_pytorch():
    """Differentiable once: the first gradient is right; a second through it raises
    PyTorch's error, and anything before it is unused, as in PyTorch."""
    for L in (tg, torch):
        from importlib import import_module
        od = import_module(L.__name__ + ".autograd.function").once_differentiable

        class Cube(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x ** 3

            @staticmethod
            @od
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return g * 3 * x ** 2
        x = L.tensor([0.5, 2.0], dtype=L.float64, requires_grad=True)
        (g,) = L.autograd.grad(Cube.apply(x).sum(), x)
        assert g.tolist() == [0.75, 12.0]
        v = L.ones(2, dtype=L.float64, requires_grad=True)
        (g2,) = L.autograd.grad(Cube.apply(x), x, grad_outputs=v, create_graph=True)
        assert g2.requires_grad
        with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
            L.autograd.grad(g2.sum(), v)
        with pytest.raises(RuntimeError, match="trying to differentiate twice a function that "
                                               "was marked with @once_differentiable"):
            g2.sum().backward()
