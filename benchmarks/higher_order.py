"""Gradients of gradients as benchmarks.compare workloads: a physics-informed net's step
(u_xx in the loss), a WGAN-GP critic step (the input gradient's norm in the loss), a
Hessian-vector product of an MLP loss, and per-sample gradients (vmap of grad), each the
same code in tapegrad and PyTorch from the same initial weights."""
if __package__:
    from .compare import Workload, Impl, _np
else:                                   # run as a plain script
    from compare import Workload, Impl, _np


def _mlp(lib, sizes, act, seed):
    """nn.Sequential of Linear layers with act between, weights drawn with NumPy."""
    import numpy as np
    rng = np.random.default_rng(seed)
    layers = []
    for k, (i, o) in enumerate(zip(sizes[:-1], sizes[1:])):
        lin = lib.nn.Linear(i, o)
        with lib.no_grad():
            lin.weight.copy_(lib.tensor(rng.standard_normal((o, i)) / np.sqrt(i),
                                        dtype=lib.float32))
            lin.bias.copy_(lib.tensor(rng.standard_normal(o) * 0.1, dtype=lib.float32))
        layers.append(lin)
        if k < len(sizes) - 2:
            layers.append(act(lib))
    return lib.nn.Sequential(*layers)


def _training_impl(step, model):
    """The harness's view of a training step: n steps timed, or one step's loss and the
    parameters after it compared across libraries."""
    def loop(n):
        for _ in range(n):
            step()

    def values():
        loss = _np(step())
        return dict(loss=loss, **{name: _np(p) for name, p in model.named_parameters()})
    return Impl(values, loop)


class PINNStep(Workload):
    key, title = ("pinn_step", "PINN step: 1-D Poisson, MLP 1-32-32-1 tanh, 128 collocation "
                  "points, loss with u_xx (two create_graph grads), Adam, float32")
    rows = (("main", "", "µs/step", 1),)

    def eager(self, M):
        import numpy as np
        model = _mlp(M, [1, 32, 32, 1], lambda L: L.nn.Tanh(), seed=7)
        opt = M.optim.Adam(model.parameters(), lr=1e-3)
        x = M.linspace(0, 1, 128).reshape(-1, 1).requires_grad_()
        f = -(np.pi ** 2) * M.sin(np.pi * x.detach())

        def step():
            opt.zero_grad()
            u = model(x)
            (u_x,) = M.autograd.grad(u.sum(), x, create_graph=True)
            (u_xx,) = M.autograd.grad(u_x.sum(), x, create_graph=True)
            loss = ((u_xx - f) ** 2).mean() + (u[0] ** 2 + u[-1] ** 2).sum()
            loss.backward()
            opt.step()
            return loss
        return _training_impl(step, model)


class GradientPenaltyStep(Workload):
    key, title = ("wgan_gp_step", "WGAN-GP critic step: MLP 2-64-64-1 leaky ReLU, batch 256, "
                  "gradient penalty through create_graph, Adam, float32")
    rows = (("main", "", "µs/step", 1),)

    def eager(self, M):
        import numpy as np
        critic = _mlp(M, [2, 64, 64, 1], lambda L: L.nn.LeakyReLU(0.2), seed=8)
        opt = M.optim.Adam(critic.parameters(), lr=1e-4, betas=(0.5, 0.9))
        rng = np.random.default_rng(9)
        real = M.tensor(rng.standard_normal((256, 2)), dtype=M.float32)
        fake = M.tensor(rng.standard_normal((256, 2)) * 2 + 1, dtype=M.float32)
        eps = M.tensor(rng.random((256, 1)), dtype=M.float32)

        def step():
            opt.zero_grad()
            mix = (eps * real + (1 - eps) * fake).requires_grad_()
            out = critic(mix)
            (g,) = M.autograd.grad(out.sum(), mix, create_graph=True)
            penalty = ((g.norm(2, dim=1) - 1) ** 2).mean()
            loss = critic(fake).mean() - critic(real).mean() + 10 * penalty
            loss.backward()
            opt.step()
            return loss
        return _training_impl(step, critic)


class HessianVectorProduct(Workload):
    key, title = ("hvp", "Hessian-vector product of an MLP loss (10-64-64-1 tanh, ~5k "
                  "parameters, batch 64), double backward, float64")
    dtype = "float64"
    rows = (("main", "", "µs/call", 1),)

    def eager(self, M):
        import numpy as np
        model = _mlp(M, [10, 64, 64, 1], lambda L: L.nn.Tanh(), seed=10).double()
        params = list(model.parameters())
        rng = np.random.default_rng(11)
        x = M.tensor(rng.standard_normal((64, 10)))
        t = M.tensor(rng.standard_normal((64, 1)))
        v = [M.tensor(rng.standard_normal(tuple(p.shape))) for p in params]

        def hvp():
            loss = ((model(x) - t) ** 2).mean()
            gs = M.autograd.grad(loss, params, create_graph=True)
            dot = sum((g * w).sum() for g, w in zip(gs, v))
            return M.autograd.grad(dot, params)

        def loop(n):
            for _ in range(n):
                hvp()

        def values():
            return {f"hv{k}": _np(h) for k, h in enumerate(hvp())}
        return Impl(values, loop)


class PerSampleGrads(Workload):
    key, title = ("per_sample_grads", "per-sample gradients, func.vmap(func.grad(loss)) of a "
                  "784-128-10 MLP over a batch of 64, float32")
    rows = (("main", "", "µs/call", 1),)

    def eager(self, M):
        import numpy as np
        model = _mlp(M, [784, 128, 10], lambda L: L.nn.ReLU(), seed=12)
        params = {k: v.detach() for k, v in model.named_parameters()}
        rng = np.random.default_rng(13)
        x = M.tensor(rng.standard_normal((64, 784)), dtype=M.float32)
        y = M.tensor(rng.integers(0, 10, 64))
        F = M.nn.functional

        def loss(p, xi, yi):
            out = M.func.functional_call(model, p, (xi.unsqueeze(0),))
            return F.cross_entropy(out, yi.unsqueeze(0))
        per_sample = M.func.vmap(M.func.grad(loss), in_dims=(None, 0, 0))

        def loop(n):
            for _ in range(n):
                per_sample(params, x, y)

        def values():
            return {k: _np(g) for k, g in per_sample(params, x, y).items()}
        return Impl(values, loop)


def higher_order_workloads(L):
    return [PINNStep(L), GradientPenaltyStep(L), HessianVectorProduct(L), PerSampleGrads(L)]
