"""Write tests/random/golden.json: PyTorch's values for the cases of tests/random/cases.py,
once per CPU build whose numbers differ (ATEN_CPU_CAPABILITY=default, and the AVX2 one
that AVX2 and AVX-512 machines run), so tests/random/test_golden.py checks tapegrad's
draws bit for bit on a machine without PyTorch.

    python scripts/make_random_golden.py          # needs torch and an AVX2 CPU

Each build runs in a child process (PyTorch reads ATEN_CPU_CAPABILITY when it starts).
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "random", "golden.json")
PATHS = {"default": "default", "avx2": "avx2"}     # cpu_path name -> ATEN_CPU_CAPABILITY


def child():
    """Run every case with PyTorch in this process; print the records as JSON."""
    import torch
    sys.path.insert(0, ROOT)
    from tests.random.cases import CASES, run
    torch.set_num_threads(1)
    want = os.environ["ATEN_CPU_CAPABILITY"]
    got = torch.backends.cpu.get_cpu_capability().lower()
    if want != got:
        sys.exit(f"PyTorch runs its {got} kernels, not {want}: this CPU cannot record them")
    json.dump({"torch": torch.__version__,
               "cases": {name: run(torch, name, seed, fn) for name, seed, fn in CASES}},
              sys.stdout)


def main():
    paths, version = {}, None
    for name, capability in PATHS.items():
        env = dict(os.environ, ATEN_CPU_CAPABILITY=capability)
        out = subprocess.run([sys.executable, __file__, "--child"], env=env, check=True,
                             capture_output=True, text=True).stdout
        data = json.loads(out)
        version = data["torch"]
        paths[name] = data["cases"]
    lines = ["{", f'"torch": {json.dumps(version)},', '"paths": {']
    for i, (name, cases) in enumerate(sorted(paths.items())):
        lines.append(f"{json.dumps(name)}: {{")
        items = sorted(cases.items())
        lines += [f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)}"
                  + ("," if j < len(items) - 1 else "") for j, (k, v) in enumerate(items)]
        lines.append("}" + ("," if i < len(paths) - 1 else ""))
    lines += ["}", "}"]
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {OUT} (PyTorch {version}, {len(paths['default'])} cases per build)")


if __name__ == "__main__":
    child() if sys.argv[1:] == ["--child"] else main()
