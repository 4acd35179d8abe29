"""A tutorial's training script, written the way tutorials write it: the device picked from
what is available (`"cuda" if torch.cuda.is_available() else ...`), seeds and cuDNN flags
set, data made with `device=`, `model.to(device)`, batches moved with `.to(device)` in the
loop, evaluation under no_grad, then a float64 Newton iteration under
`torch.set_default_dtype(torch.float64)`. Only the import differs between libraries.

The initial weights are set from linspace/cos (the libraries' random streams differ), so
both print the same losses; the checks compare them with PyTorch's, stored below.

    python scenarios/device_training.py [torch|tapegrad]
"""
import importlib
import math
import sys

# what PyTorch (2.x, CPU) prints for this program: the loss before and after training
TORCH_FIRST_LOSS = 1.611725091934204
TORCH_FINAL_LOSS = 0.006451613735407591
ROOT = 2.0945514815423265       # x**3 - 2x - 5 = 0 (Newton's own example)


def main(lib="tapegrad"):
    torch = importlib.import_module(lib)
    nn = torch.nn

    device = ("cuda" if torch.cuda.is_available()
              else "mps" if torch.backends.mps.is_available() else "cpu")
    device = torch.device(device)
    print(f"Using {device} device")
    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False

    # data: y = sin(3x) on [-1, 1], made where the model will run
    X = torch.linspace(-1, 1, 64, device=device).unsqueeze(1)
    y = torch.sin(3 * X)

    class NeuralNetwork(nn.Module):
        def __init__(self):
            super().__init__()
            self.stack = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 1))

        def forward(self, x):
            return self.stack(x)

    model = NeuralNetwork().to(device)
    with torch.no_grad():       # deterministic weights, the same in both libraries
        for k, p in enumerate(model.parameters()):
            values = torch.cos(torch.arange(p.numel(), device=device) * 1.3 + k)
            p.copy_(values.reshape(p.shape) * (p.shape[-1] ** -0.5 if p.dim() == 2 else 0.1))
    print(model)

    loss_fn = nn.MSELoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    batch_size = 16

    def evaluate():
        model.eval()
        with torch.no_grad():
            loss = loss_fn(model(X.to(device)), y.to(device)).item()
        model.train()
        return loss

    first = evaluate()
    for epoch in range(150):
        for start in range(0, len(X), batch_size):
            xb, yb = X[start:start + batch_size], y[start:start + batch_size]
            xb, yb = xb.to(device), yb.to(device)
            pred = model(xb)
            loss = loss_fn(pred, yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if epoch % 50 == 0:
            print(f"epoch {epoch:3d}  loss: {loss.item():>7f}")
    final = evaluate()
    print(f"test loss: {first:.6f} -> {final:.6f}")

    # a float64 computation, as scientific scripts set it up
    torch.set_default_dtype(torch.float64)
    try:
        x = torch.tensor([2.0], device=device, requires_grad=True)
        for _ in range(6):
            f = x ** 3 - 2 * x - 5
            f.backward()
            with torch.no_grad():
                x -= f / x.grad
            x.grad = None
        root, root_dtype = x.item(), x.dtype
    finally:
        torch.set_default_dtype(torch.float32)
    print(f"root of x^3 - 2x - 5: {root!r} ({root_dtype})")

    param = next(model.parameters())
    checks = {
        "device is the CPU": str(device) == "cpu" and device.type == "cpu",
        "data on the device": X.device == device and y.device.type == "cpu",
        "model on the device": param.device == device and not param.is_cuda,
        "first loss is PyTorch's": math.isclose(first, TORCH_FIRST_LOSS, rel_tol=1e-6),
        "final loss is PyTorch's": math.isclose(final, TORCH_FINAL_LOSS, rel_tol=1e-5),
        "training reduced the loss": final < first / 100,
        "float64 by default": root_dtype == torch.float64 and abs(root - ROOT) < 1e-14,
        "default dtype restored": torch.get_default_dtype() == torch.float32,
    }
    for name, ok in checks.items():
        print(f"{name:28s} {'ok' if ok else 'FAILED'}")
    return all(checks.values())


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv[1] if len(sys.argv) > 1 else "tapegrad") else 1)
