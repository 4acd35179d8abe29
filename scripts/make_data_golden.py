"""Write tests/data/golden_indices.json: the indices PyTorch's samplers, shuffled
DataLoader and random_split give for fixed seeds, so tests/data checks tapegrad's
against them without PyTorch installed.

    python scripts/make_data_golden.py
"""
import json
import os

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
                   "data", "golden_indices.json")


def cases(torch):
    """{name: list of index lists} for each case, seeds fixed, drawn by torch (PyTorch,
    or tapegrad: tests/data/test_golden.py runs this with it)."""
    data = torch.utils.data
    out = {}
    for seed in (0, 1, 2024):
        torch.manual_seed(seed)
        loader = data.DataLoader(range(50), batch_size=8, shuffle=True)
        out[f"loader_default_gen_seed{seed}"] = [b.tolist() for _ in range(2) for b in loader]
        g = torch.Generator().manual_seed(seed)
        loader = data.DataLoader(range(37), batch_size=5, shuffle=True, generator=g,
                                 drop_last=True)
        out[f"loader_generator_seed{seed}"] = [b.tolist() for _ in range(2) for b in loader]
        g = torch.Generator().manual_seed(seed)
        out[f"random_replacement_seed{seed}"] = [list(data.RandomSampler(
            range(10), replacement=True, num_samples=70, generator=g))]
        g = torch.Generator().manual_seed(seed)
        out[f"random_num_samples_seed{seed}"] = [list(data.RandomSampler(
            range(10), num_samples=23, generator=g))]
        g = torch.Generator().manual_seed(seed)
        out[f"subset_random_seed{seed}"] = [list(data.SubsetRandomSampler(
            [3, 9, 4, 17, 8], generator=g))]
        g = torch.Generator().manual_seed(seed)
        w = [0.1, 0.9, 0.4, 0.7, 3.0, 0.6]
        out[f"weighted_seed{seed}"] = [
            list(data.WeightedRandomSampler(w, 12, generator=g)),
            list(data.WeightedRandomSampler(w, 5, replacement=False, generator=g))]
        g = torch.Generator().manual_seed(seed)
        out[f"random_split_seed{seed}"] = [
            s.indices for s in data.random_split(range(11), [0.3, 0.3, 0.4], generator=g)]
        torch.manual_seed(seed)
        out[f"rng_state_after_loader_seed{seed}"] = [
            [b.tolist() for b in data.DataLoader(range(9), batch_size=4, shuffle=True)][0],
            [int(torch.randint(0, 1 << 30, (4,)).tolist()[k]) for k in range(4)]]
    return out


if __name__ == "__main__":
    import torch
    with open(OUT, "w") as f:
        json.dump({"torch": torch.__version__, "cases": cases(torch)}, f, indent=None)
        f.write("\n")
    print(f"wrote {OUT}")
