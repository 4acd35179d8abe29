"""Single ops on large inputs, tapegrad against PyTorch, forward and backward: a quick scan
for ops slower than PyTorch (the ones found here get a row in benchmarks.compare, which
checks values and interleaves rounds; this only times).

    python -m benchmarks.op_sweep [PATTERN]      # ops whose name contains PATTERN

One thread. Prints one line per op: the best of 5 interleaved rounds of each library, in
µs, and the ratio, marked <<< above 1.1. Needs PyTorch.
"""
import os
import sys
import timeit


def cases(np):
    """(name, shape, op on a tensor x of library L)."""
    mid, big = (256, 1000), (1000, 1000)
    F = lambda L: L.nn.functional     # noqa: E731
    return [
        ("sum(1)", mid, lambda L, x: x.sum(1)),
        ("mean(0)", mid, lambda L, x: x.mean(0)),
        ("max(1).values", mid, lambda L, x: x.max(1).values),
        ("amax(1)", mid, lambda L, x: L.amax(x, 1)),
        ("softmax(1)", mid, lambda L, x: L.softmax(x, 1)),
        ("log_softmax(1)", mid, lambda L, x: L.log_softmax(x, 1)),
        ("softmax(0)", mid, lambda L, x: L.softmax(x, 0)),
        ("logsumexp(1)", mid, lambda L, x: L.logsumexp(x, 1)),
        ("var(1)", mid, lambda L, x: x.var(1)),
        ("norm", mid, lambda L, x: x.norm()),
        ("cumsum(1)", mid, lambda L, x: x.cumsum(1)),
        ("layer_norm", mid, lambda L, x: F(L).layer_norm(x, (1000,))),
        ("batch_norm", mid, lambda L, x: F(L).batch_norm(x, None, None, training=True)),
        ("gelu", big, lambda L, x: F(L).gelu(x)),
        ("silu", big, lambda L, x: F(L).silu(x)),
        ("softplus", big, lambda L, x: F(L).softplus(x)),
        ("tanh", big, lambda L, x: x.tanh()),
        ("relu", big, lambda L, x: x.relu()),
        ("pow 3", big, lambda L, x: x ** 3),
        ("x * x.t()", big, lambda L, x: x * x.t()),
        ("x.t().contiguous()", big, lambda L, x: x.t().contiguous()),
        ("x.t().sum(0)", big, lambda L, x: x.t().sum(0)),
        ("cat", mid, lambda L, x: L.cat([x, x], 1)),
        ("where", big, lambda L, x: L.where(x > 0, x, x * 2)),
        ("gather", mid, lambda L, x: x.gather(1, L.tensor(np.tile(np.arange(0, 1000, 3),
                                                                 (256, 1))))),
        ("mse_loss", big, lambda L, x: F(L).mse_loss(x, x.detach() * 0.5)),
        ("bce_with_logits", big,
         lambda L, x: F(L).binary_cross_entropy_with_logits(x, x.detach() * 0.5)),
        ("smooth_l1_loss", big, lambda L, x: F(L).smooth_l1_loss(x, x.detach() * 0.5)),
        ("cross_entropy", mid,
         lambda L, x: F(L).cross_entropy(x, L.tensor(np.arange(256) % 1000))),
        ("normalize", mid, lambda L, x: F(L).normalize(x, dim=1)),
        ("topk", mid, lambda L, x: x.topk(5, 1).values),
        ("flip", big, lambda L, x: L.flip(x, [1])),
        ("roll", big, lambda L, x: L.roll(x, 3, 1)),
        ("cumprod(1)", mid, lambda L, x: x.cumprod(1)),
        ("cumprod(0)", mid, lambda L, x: x.cumprod(0)),
        ("cummax(1)", mid, lambda L, x: x.cummax(1).values),
        ("logcumsumexp(1)", mid, lambda L, x: x.logcumsumexp(1)),
        ("median(1)", mid, lambda L, x: x.median(1).values),
        ("nanmedian(1)", mid, lambda L, x: x.nanmedian(1).values),
        ("kthvalue(5, 1)", mid, lambda L, x: x.kthvalue(5, 1).values),
        ("mode(1)", mid, lambda L, x: x.mode(1).values),
        ("quantile(0.3, 1)", mid, lambda L, x: L.quantile(x, 0.3, dim=1)),
        ("lgamma", mid, lambda L, x: x.lgamma()),
        ("digamma", mid, lambda L, x: x.digamma()),
        ("erfinv", mid, lambda L, x: (x * 0.3).tanh().erfinv()),
        ("scatter_add", mid, lambda L, x: L.zeros(256, 1000).scatter_add(
            1, L.tensor(np.tile(np.arange(1000)[::-1].copy(), (256, 1))), x)),
        ("index_add", mid, lambda L, x: L.zeros(256, 1000).index_add(
            1, L.tensor(np.arange(1000)[::-1].copy()), x)),
        ("cdist p=1", (256, 64), lambda L, x: L.cdist(x, x, p=1.0)),
        ("cdist p=2 no mm", (256, 64),
         lambda L, x: L.cdist(x, x, compute_mode="donot_use_mm_for_euclid_dist")),
        ("cummin(1)", mid, lambda L, x: x.cummin(1).values),
    ]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    pattern = argv[0] if argv else ""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                "NUMBA_NUM_THREADS", "TAPEGRAD_NUM_THREADS"):
        os.environ.setdefault(var, "1")     # (before the imports; asv imports this module)
    import numpy as np
    import torch
    import tapegrad as tg
    torch.set_num_threads(1)
    xn_by_shape = {}
    for name, shape, fn in cases(np):
        if pattern not in name:
            continue
        xn = xn_by_shape.setdefault(shape, np.random.default_rng(0).standard_normal(shape)
                                    .astype(np.float32))
        calls, counts = [], []
        for L in (tg, torch):
            x = L.tensor(xn, requires_grad=True)

            def call(L=L, x=x):
                y = fn(L, x)
                if y.requires_grad:
                    y.sum().backward()
                x.grad = None
            call()
            calls.append(call)
            counts.append(max(3, int(0.05 / (timeit.timeit(call, number=1) + 1e-7))))
        # rounds interleaved (tapegrad, PyTorch, tapegrad, ...): on a shared machine a
        # burst of load then slows both, and the best round of each is compared
        times = [float("inf"), float("inf")]
        for _ in range(5):
            for k in (0, 1):
                t = timeit.timeit(calls[k], number=counts[k]) / counts[k] * 1e6
                times[k] = min(times[k], t)
        ratio = times[0] / times[1]
        print(f"{name:20s} {str(shape):14s} tapegrad {times[0]:9.1f}  torch {times[1]:9.1f}  "
              f"ratio {ratio:5.2f}{' <<<' if ratio > 1.1 else ''}", flush=True)


if __name__ == "__main__":
    main()
