"""Which of PyTorch's public names tapegrad has, refuses on purpose, or misses: writes
docs/api-coverage.md (committed; tests/api/test_api_coverage.py fails when it is stale).

    python scripts/api_coverage.py [--check]

Two parts:
- the commonly used names (tests/api/data/pytorch_common_api.txt: top level and Tensor),
  the coverage target: each name is supported, refused on purpose (it exists and raises a
  clear error saying why, e.g. a dtype tapegrad has no kernels for), or missing;
- every public name of torch.nn (classes), torch.nn.functional, torch.optim,
  torch.optim.lr_scheduler, torch.autograd and torch.utils.data, read from the installed
  PyTorch (so this script needs it), marked the same way.
"""
import argparse
import inspect
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMON = os.path.join(REPO, "tests", "api", "data", "pytorch_common_api.txt")
PAGE = os.path.join(REPO, "docs", "api-coverage.md")

# Names tapegrad defines only to refuse them, with the reason its error gives.
REFUSED = {
    "torch": {},
    "Tensor": {
        "cuda": "CPU only: raises PyTorch's 'not compiled with CUDA enabled' error",
        "share_memory_": "a live storage cannot move into shared memory: raises, where a "
                         "silent no-op would let each Hogwild process train its own copy",
        "is_cuda": None,            # (supported: always False)
    },
}


def read_common(path=COMMON):
    """{section: [names]} from the common-names list."""
    out, section = {}, None
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line.startswith("["):
                section = line.strip("[]")
                out[section] = []
            elif line and section:
                out[section].extend(line.split())
    return out


def _dtype_refusal(tg, value):
    """The error tapegrad gives for a dtype it has no kernels for, or None."""
    if not isinstance(value, tg.dtype):
        return None
    try:
        tg.zeros(1, dtype=value)
    except TypeError as e:
        return str(e).split(": ", 1)[-1]
    return None


def status(tg, section, name):
    """("supported" | "refused" | "missing", reason)."""
    owner = tg if section == "torch" else tg.Tensor
    if not hasattr(owner, name):
        return "missing", ""
    reason = REFUSED.get(section, {}).get(name)
    if reason:
        return "refused", reason
    value = getattr(owner, name)
    if section == "torch":
        why = _dtype_refusal(tg, value)
        if why:
            return "refused", why
    elif name in ("half",):
        return "refused", _dtype_refusal(tg, tg.float16)
    return "supported", ""


def _public(mod, keep):
    return sorted(n for n in dir(mod) if not n.startswith("_") and keep(n, getattr(mod, n)))


def torch_namespaces():
    """[(title, torch module, tapegrad attribute path, names)] for the full-namespace part."""
    import torch
    import torch.nn.functional
    import torch.optim.lr_scheduler
    import torch.utils.data

    def own(n, v):
        return (inspect.isclass(v) or inspect.isfunction(v) or inspect.isbuiltin(v)) and \
            not inspect.ismodule(v) and getattr(v, "__module__", "").startswith("torch")

    def nn_class(n, v):
        return inspect.isclass(v) and issubclass(v, torch.nn.Module) and not n.startswith("Lazy")

    def optimizer(n, v):
        return inspect.isclass(v) and issubclass(v, torch.optim.Optimizer) and \
            v is not torch.optim.Optimizer

    def scheduler(n, v):
        S = torch.optim.lr_scheduler
        return inspect.isclass(v) and (issubclass(v, S.LRScheduler) or v is S.ReduceLROnPlateau) \
            and n not in ("LRScheduler", "_LRScheduler")
    return [("torch.nn (modules, the Lazy variants aside)", torch.nn, "nn", _public(torch.nn, nn_class)),
            ("torch.nn.functional", torch.nn.functional, "nn.functional",
             _public(torch.nn.functional, own)),
            ("torch.optim (optimizers)", torch.optim, "optim", _public(torch.optim, optimizer)),
            ("torch.optim.lr_scheduler", torch.optim.lr_scheduler, "optim.lr_scheduler",
             _public(torch.optim.lr_scheduler, scheduler)),
            ("torch.autograd", torch.autograd, "autograd", _public(torch.autograd, own)),
            ("torch.utils.data", torch.utils.data, "utils.data", _public(torch.utils.data, own))]


def _resolve(tg, path):
    obj = tg
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _names(names):
    return ", ".join(f"`{n}`" for n in names) if names else "none"


def page():
    import tapegrad as tg
    lines = ["# PyTorch names: supported, refused, missing", "",
             "Written by `scripts/api_coverage.py` from the installed PyTorch and tapegrad; "
             "do not edit by hand. *Refused* names exist and raise an error that says why "
             "(never a silent fallback); *missing* names raise AttributeError.", "",
             "## Commonly used names", "",
             "The list is `tests/api/data/pytorch_common_api.txt`.", "",
             "| namespace | supported | refused on purpose | covered | missing |",
             "|---|---|---|---|---|"]
    detail = []
    for section, names in read_common().items():
        got = {n: status(tg, section, n) for n in names}
        sup = [n for n in names if got[n][0] == "supported"]
        ref = [n for n in names if got[n][0] == "refused"]
        mis = [n for n in names if got[n][0] == "missing"]
        title = "top level (`torch.*`)" if section == "torch" else "`Tensor` attributes"
        covered = 100 * (len(sup) + len(ref)) / len(names)
        lines.append(f"| {title} | {len(sup)} of {len(names)} | {len(ref)} | {covered:.0f}% "
                     f"| {len(mis)} |")
        detail += [f"### {title}", "", f"Missing: {_names(mis)}.", ""]
        if ref:
            detail += ["Refused on purpose:", ""] + [f"- `{n}`: {got[n][1]}" for n in ref] + [""]
    lines += [""] + detail
    lines += ["## Whole namespaces", "",
              "Every public name of these PyTorch namespaces (as the installed PyTorch lists "
              "them).", "", "| namespace | tapegrad has | missing |", "|---|---|---|"]
    detail = []
    for title, _, path, names in torch_namespaces():
        mine = _resolve(tg, path)
        have = [n for n in names if mine is not None and hasattr(mine, n)]
        mis = [n for n in names if n not in have]
        lines.append(f"| {title} | {len(have)} of {len(names)} | {len(mis)} |")
        detail += [f"### {title}", "", f"Missing: {_names(mis)}.", ""]
    return "\n".join(lines + [""] + detail).rstrip() + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true",
                   help="exit 1 if docs/api-coverage.md differs from what this writes")
    args = p.parse_args(argv)
    text = page()
    if args.check:
        with open(PAGE) as f:
            same = f.read() == text
        print("docs/api-coverage.md is " + ("current" if same else
              "stale: run python scripts/api_coverage.py"))
        return 0 if same else 1
    with open(PAGE, "w") as f:
        f.write(text)
    print(f"wrote {os.path.relpath(PAGE, REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
