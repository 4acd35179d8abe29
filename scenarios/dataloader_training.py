"""A tutorial's training loop over a DataLoader: the device line, manual_seed, a
TensorDataset split with random_split, a shuffled DataLoader for training and a plain one
for evaluation, a few epochs printing the loss. Only the import differs between
libraries; the shuffled batches are PyTorch's (same seed, same draws), so the losses are
PyTorch's, stored below.

The initial weights are set from cos (so the check does not rest on the layers' init).

    python scenarios/dataloader_training.py [torch|tapegrad]
"""
import importlib
import math
import sys

# what PyTorch (2.x, CPU) prints for this program: the mean training loss of each epoch
# and the validation loss at the end
TORCH_EPOCH_LOSSES = [0.23983685672283173, 0.053790419548749926,
                      0.033744930475950244, 0.028469105996191502]
TORCH_VAL_LOSS = 0.03532332852482796


def main(lib="tapegrad"):
    torch = importlib.import_module(lib)
    nn = torch.nn
    from_lib = importlib.import_module(f"{lib}.utils.data")
    DataLoader, TensorDataset = from_lib.DataLoader, from_lib.TensorDataset

    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"Using {device} device")
    torch.manual_seed(0)

    # data: y = sin(2 x0) + x1 / 2 on a grid, 400 samples
    t = torch.linspace(-1, 1, 400)
    X = torch.stack([t, torch.cos(5 * t)], dim=1)
    y = (torch.sin(2 * X[:, 0]) + X[:, 1] / 2).unsqueeze(1)
    train_set, val_set = from_lib.random_split(TensorDataset(X, y), [0.8, 0.2])
    train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=64)

    model = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 1)).to(device)
    with torch.no_grad():       # deterministic weights, the same in both libraries
        for k, p in enumerate(model.parameters()):
            values = torch.cos(torch.arange(p.numel()) * 0.7 + k)
            p.copy_(values.reshape(p.shape) * (p.shape[-1] ** -0.5 if p.dim() == 2 else 0.1))
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    losses = []
    for epoch in range(4):
        model.train()
        total, count = 0.0, 0
        for xb, yb in train_loader:
            xb, yb = xb.to(device), yb.to(device)
            loss = loss_fn(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(xb)
            count += len(xb)
        losses.append(total / count)
        print(f"epoch {epoch}  loss: {losses[-1]:>8f}")
    model.eval()
    with torch.no_grad():
        total = sum(loss_fn(model(xb), yb).item() * len(xb) for xb, yb in val_loader)
    val = total / len(val_set)
    print(f"validation loss: {val:.6f}")

    checks = {
        "batches per epoch": len(train_loader) == 10 and len(val_loader) == 2,
        "epoch losses are PyTorch's": all(math.isclose(a, b, rel_tol=1e-4)
                                          for a, b in zip(losses, TORCH_EPOCH_LOSSES)),
        "validation loss is PyTorch's": math.isclose(val, TORCH_VAL_LOSS, rel_tol=1e-4),
        "training reduced the loss": losses[-1] < losses[0] / 4,
    }
    for name, ok in checks.items():
        print(f"{name:30s} {'ok' if ok else 'FAILED'}")
    return all(checks.values())


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv[1] if len(sys.argv) > 1 else "tapegrad") else 1)
