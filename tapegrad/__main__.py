"""python -m tapegrad demo | warmup

demo:   fits a small MLP (2-16-16-1, tanh) to a generated two-moons data set by plain
        gradient descent, printing the loss as it goes, the accuracy, steps per second and
        how much of the first step was kernel compilation; with PyTorch installed, runs the
        same loop in PyTorch and prints the speed ratio.
warmup: compiles (or loads from the cache) every kernel, so later runs start warm.
"""
import argparse
import sys
import time

import numpy as np


def two_moons(n, seed=0, noise=0.15):
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, np.pi, n)
    upper = rng.random(n) < 0.5
    x = np.where(upper, np.cos(t), 1 - np.cos(t))
    y = np.where(upper, np.sin(t), 0.5 - np.sin(t))
    pts = np.stack([x, y], 1) + noise * rng.standard_normal((n, 2))
    return pts.astype(np.float32), upper.astype(np.float32)[:, None]


def init_params(seed=0):
    rng = np.random.default_rng(seed)
    shapes = [(2, 16), (16,), (16, 16), (16,), (16, 1), (1,)]
    out = []
    for s in shapes:
        fan_in = s[0] if len(s) == 2 else 16
        bound = 1 / np.sqrt(fan_in)
        out.append(rng.uniform(-bound, bound, s).astype(np.float32))
    return out


def loss_fn(lib, params, X, Y):
    """Binary cross-entropy with logits, written with elementary ops (stable form)."""
    w1, b1, w2, b2, w3, b3 = params
    h = (X @ w1 + b1).tanh()
    h = (h @ w2 + b2).tanh()
    z = h @ w3 + b3
    # log(1 + e^z) - y z  ==  relu(z) + log(1 + e^-|z|) - y z
    loss = (z.relu() + ((-z.abs()).exp() + 1).log() - Y * z).mean()
    return loss, z


def train(lib, X, Y, steps, lr, report=None):
    params = [lib.tensor(p, requires_grad=True) for p in init_params()]
    Xt, Yt = lib.tensor(X), lib.tensor(Y)
    t_first = None
    t0 = time.perf_counter()
    for step in range(steps):
        loss, z = loss_fn(lib, params, Xt, Yt)
        loss.backward()
        with lib.no_grad():
            for p in params:
                p.sub_(p.grad * lr)
                p.grad = None
        if step == 0:
            t_first = time.perf_counter() - t0
            t0 = time.perf_counter()
        if report and (step % report == 0 or step == steps - 1):
            acc = ((z.detach().numpy() > 0) == (Y > 0.5)).mean()
            print(f"  step {step:5d}  loss {loss.item():.4f}  accuracy {acc:.3f}", flush=True)
    elapsed = time.perf_counter() - t0
    loss, z = loss_fn(lib, params, Xt, Yt)
    acc = float(((z.detach().numpy() > 0) == (Y > 0.5)).mean())
    return loss.item(), acc, (steps - 1) / elapsed, t_first


def demo(steps=2000, n=256, lr=0.5):
    import tapegrad as tg
    X, Y = two_moons(n)
    print(f"tapegrad {tg.__version__}: MLP 2-16-16-1 (tanh) on two moons, {n} points, "
          f"full-batch gradient descent, lr {lr}, {steps} steps")
    loss, acc, sps, first = train(tg, X, Y, steps, lr, report=max(steps // 10, 1))
    print(f"tapegrad: final loss {loss:.4f}, accuracy {acc:.3f}, {sps:,.0f} steps/s "
          f"({1e6 / sps:.0f} us/step)")
    print(f"          first step {first:.2f} s: kernels compiled on first use (cold cache) or "
          "loaded from the cache (warm)")
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed: no side-by-side comparison.")
        return 0
    torch.set_num_threads(1)
    tloss, tacc, tsps, _ = train(torch, X, Y, steps, lr)
    print(f"PyTorch {torch.__version__}: final loss {tloss:.4f}, accuracy {tacc:.3f}, "
          f"{tsps:,.0f} steps/s ({1e6 / tsps:.0f} us/step)")
    print(f"speed: tapegrad step time is {tsps / sps:.2f}x PyTorch's "
          f"({sps / tsps:.1f}x the steps per second); losses differ by {abs(loss - tloss):.1e}")
    return 0


def warmup():
    import tapegrad as tg
    from tapegrad.ops.registry import OPS
    from tapegrad._engine.state import engine
    t0 = time.perf_counter()
    for op in OPS:
        for slot in range(2):
            engine().load_kernels(op.opcode, slot)
    print(f"{len(OPS)} ops ready in {time.perf_counter() - t0:.1f} s "
          f"(cache: {tg._engine.cache.CACHE_DIR})")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tapegrad", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="train a small classifier and compare with PyTorch")
    d.add_argument("--steps", type=int, default=2000)
    sub.add_parser("warmup", help="compile every kernel into the cache")
    args = p.parse_args(argv)
    if args.cmd == "demo":
        return demo(steps=args.steps)
    return warmup()


if __name__ == "__main__":
    sys.exit(main())
