"""A course exercise, written the way it is taught: the backward pass of a two-layer
character MLP (embedding, batch norm, tanh, a hand-written cross entropy) derived by
hand, tensor by tensor, and checked against autograd through retain_grad().

It picks one logit per row with `logprobs[range(n), Yb]`, writes gradients with
`dlogprobs[range(n), Yb] = -1/n`, accumulates embedding rows with `dC[ix] += demb[k, j]`
(ix a 0-d tensor), and reads `.max(1).indices`, `F.one_hot`, `.item()`.

    python scenarios/manual_backprop.py [torch|tapegrad]
"""
import importlib
import sys


def cmp(torch, name, dt, t):
    exact = torch.all(dt == t.grad).item()
    approx = torch.allclose(dt, t.grad, rtol=1e-4, atol=1e-6)
    maxdiff = (dt - t.grad).abs().max().item()
    print(f"{name:15s} | exact: {str(exact):5s} | approximate: {str(approx):5s} | "
          f"maxdiff: {maxdiff:.2e}")
    return approx


def main(lib="tapegrad"):
    torch = importlib.import_module(lib)
    F = torch.nn.functional
    torch.manual_seed(42)
    n_vocab, block, n_embd, n_hidden, n = 27, 3, 10, 64, 32
    C = torch.randn((n_vocab, n_embd))
    W1 = torch.randn((n_embd * block, n_hidden)) * (5 / 3) / ((n_embd * block) ** 0.5)
    b1 = torch.randn(n_hidden) * 0.1
    W2 = torch.randn((n_hidden, n_vocab)) * 0.1
    b2 = torch.randn(n_vocab) * 0.1
    bngain = torch.randn((1, n_hidden)) * 0.1 + 1.0
    bnbias = torch.randn((1, n_hidden)) * 0.1
    parameters = [C, W1, b1, W2, b2, bngain, bnbias]
    for p in parameters:
        p.requires_grad = True
    Xb = torch.randint(0, n_vocab, (n, block))
    Yb = torch.randint(0, n_vocab, (n,))

    # forward, chunked into small steps that can be backpropagated one at a time
    emb = C[Xb]
    embcat = emb.view(emb.shape[0], -1)
    hprebn = embcat @ W1 + b1
    bnmeani = 1 / n * hprebn.sum(0, keepdim=True)
    bndiff = hprebn - bnmeani
    bndiff2 = bndiff ** 2
    bnvar = 1 / (n - 1) * bndiff2.sum(0, keepdim=True)
    bnvar_inv = (bnvar + 1e-5) ** -0.5
    bnraw = bndiff * bnvar_inv
    hpreact = bngain * bnraw + bnbias
    h = torch.tanh(hpreact)
    logits = h @ W2 + b2
    logit_maxes = logits.max(1, keepdim=True).values
    norm_logits = logits - logit_maxes
    counts = norm_logits.exp()
    counts_sum = counts.sum(1, keepdim=True)
    counts_sum_inv = counts_sum ** -1
    probs = counts * counts_sum_inv
    logprobs = probs.log()
    loss = -logprobs[range(n), Yb].mean()

    for p in parameters:
        p.grad = None
    for t in [logprobs, probs, counts, counts_sum, counts_sum_inv, norm_logits,
              logit_maxes, logits, h, hpreact, bnraw, bnvar_inv, bnvar, bndiff2, bndiff,
              hprebn, bnmeani, embcat, emb]:
        t.retain_grad()
    loss.backward()
    print(f"loss {loss.item():.6f}")

    # backward by hand
    dlogprobs = torch.zeros_like(logprobs)
    dlogprobs[range(n), Yb] = -1.0 / n
    dprobs = (1.0 / probs) * dlogprobs
    dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)
    dcounts = counts_sum_inv * dprobs
    dcounts_sum = (-counts_sum ** -2) * dcounts_sum_inv
    dcounts += torch.ones_like(counts) * dcounts_sum
    dnorm_logits = counts * dcounts
    dlogits = dnorm_logits.clone()
    dlogit_maxes = (-dnorm_logits).sum(1, keepdim=True)
    dlogits += F.one_hot(logits.max(1).indices, num_classes=logits.shape[1]) * dlogit_maxes
    dh = dlogits @ W2.T
    dW2 = h.T @ dlogits
    db2 = dlogits.sum(0)
    dhpreact = (1.0 - h ** 2) * dh
    dbngain = (bnraw * dhpreact).sum(0, keepdim=True)
    dbnraw = bngain * dhpreact
    dbnbias = dhpreact.sum(0, keepdim=True)
    dbndiff = bnvar_inv * dbnraw
    dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)
    dbnvar = (-0.5 * (bnvar + 1e-5) ** -1.5) * dbnvar_inv
    dbndiff2 = (1.0 / (n - 1)) * torch.ones_like(bndiff2) * dbnvar
    dbndiff += (2 * bndiff) * dbndiff2
    dhprebn = dbndiff.clone()
    dbnmeani = (-dbndiff).sum(0)
    dhprebn += 1.0 / n * (torch.ones_like(hprebn) * dbnmeani)
    dembcat = dhprebn @ W1.T
    dW1 = embcat.T @ dhprebn
    db1 = dhprebn.sum(0)
    demb = dembcat.view(emb.shape)
    dC = torch.zeros_like(C)
    for k in range(Xb.shape[0]):
        for j in range(Xb.shape[1]):
            ix = Xb[k, j]
            dC[ix] += demb[k, j]

    checks = [("logprobs", dlogprobs, logprobs), ("probs", dprobs, probs),
              ("counts_sum_inv", dcounts_sum_inv, counts_sum_inv),
              ("counts_sum", dcounts_sum, counts_sum), ("counts", dcounts, counts),
              ("norm_logits", dnorm_logits, norm_logits),
              ("logit_maxes", dlogit_maxes, logit_maxes), ("logits", dlogits, logits),
              ("h", dh, h), ("W2", dW2, W2), ("b2", db2, b2), ("hpreact", dhpreact, hpreact),
              ("bngain", dbngain, bngain), ("bnbias", dbnbias, bnbias),
              ("bnraw", dbnraw, bnraw), ("bnvar_inv", dbnvar_inv, bnvar_inv),
              ("bnvar", dbnvar, bnvar), ("bndiff2", dbndiff2, bndiff2),
              ("bndiff", dbndiff, bndiff), ("bnmeani", dbnmeani, bnmeani),
              ("hprebn", dhprebn, hprebn), ("embcat", dembcat, embcat),
              ("W1", dW1, W1), ("b1", db1, b1), ("emb", demb, emb), ("C", dC, C)]
    ok = all([cmp(torch, *c) for c in checks])
    print("all gradients match autograd" if ok else "SOME GRADIENTS DIFFER")
    return ok


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv[1] if len(sys.argv) > 1 else "tapegrad") else 1)
