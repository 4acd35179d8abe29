"""Differential fuzzing of tapegrad against PyTorch (needs torch installed).

Two fuzzers, each case a program in PyTorch's spelling made from a seed:

* graphs: random float64 graphs over a few leaves: elementwise ops with broadcasting,
  reductions, views (slicing, transpose, reshape, expand, unsqueeze), in-place writes on
  non-leaves, views and leaves, retain_grad, no_grad blocks, detach, one or two backward
  roots (retain_graph or not) or autograd.grad. The program runs under PyTorch and under
  tapegrad (`torch` bound to tapegrad); forward values, gradients (leaves and retained),
  requires_grad, grad_fn names and the first error (type and message) must agree.
* inputs: a call from a table of common functions with a wrong argument (shape, dtype,
  out-of-range index or dim, negative size, wrong type); the exception type (and message,
  reported apart) must agree.

Each case runs in a worker process (a crash is one finding, and the worker is started
again); a mismatch is shrunk to a minimal program, printed with its seed.

    python scripts/fuzz_graphs.py --seeds 0:20000 --workers 2      # before a release
    python scripts/fuzz_graphs.py --kind inputs --seeds 0:5000
    python scripts/fuzz_graphs.py --show 123                        # one case's program
"""
import argparse
import json
import math
import os
import random
import select
import subprocess
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = [(2, 3), (3,), (1, 3), (2, 1), (), (3, 1, 2)]


# ------------------------------------------------------------------ graph programs
def _lit(rng, shape):
    if not shape:
        return repr(round(rng.uniform(-2, 2), 2))
    return "[" + ", ".join(_lit(rng, shape[1:]) for _ in range(shape[0])) + "]"


def _leaf(rng, shape, req):
    return (f"torch.tensor({_lit(rng, shape)}, dtype=torch.float64"
            f"{', requires_grad=True' if req else ''})")


UNARY = ["{x}.exp()", "{x}.sin()", "{x}.tanh()", "{x}.sigmoid()", "-{x}", "{x}.relu()",
         "{x} * 2.5", "{x}.pow(2)", "{x}.sum()", "{x}.mean()", "{x}.abs()", "{x}.clone()",
         "{x}.sum(dim=-1)", "{x}.softmax(dim=-1)", "{x} + 1.0", "3.0 - {x}", "{x}.sqrt()",
         "{x}.log()", "{x}.cos()", "{x}.amax(dim=0)", "{x}.cumsum(dim=0)"]
BINARY = ["{x} + {y}", "{x} - {y}", "{x} * {y}", "{x} / {y}", "torch.maximum({x}, {y})",
          "torch.where({x} > 0, {x}, {y})", "{x}.mul({y})"]
INPLACE = ["{x}.add_(1.0)", "{x}.mul_(2.0)", "{x}.exp_()", "{x}.zero_()", "{x}.sin_()",
           "{x}.add_({y})", "{x}.mul_({y})", "{x}.copy_({y})", "{x}.sigmoid_()"]


def _views(shape):
    n = len(shape)
    out = []
    if n >= 1 and shape[0] > 1:
        out += ["{x}[0]", "{x}[1:]", "{x}.narrow(0, 0, 1)"]
    if n >= 2:
        out += ["{x}.t()" if n == 2 else "{x}.transpose(0, 1)", "{x}[:, 1:]",
                "{x}.transpose(0, -1)"]
    if n >= 1:
        out += ["{x}.reshape(-1)", "{x}.unsqueeze(0)", "{x}.view(-1)", "{x}.flip(0)"]
    if n == 0:
        out += ["{x}.unsqueeze(0)", "{x}.expand(2)", "{x}.reshape(1, 1)"]
    if 1 in shape:
        target = tuple(2 if d == 1 else d for d in shape)
        out.append("{x}.expand" + repr(target).replace(",)", ")"))
    return out


def make_graph(seed, torch):
    """The program (a list of statements) for seed; torch (the real one) answers shapes
    as the program is built."""
    rng = random.Random(seed)
    ns = {"torch": torch}
    lines = []
    names = []

    def run(stmt):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                exec(stmt, ns)
        except Exception:
            return False
        lines.append(stmt)
        return True

    for i in range(rng.randint(1, 3)):
        shape = rng.choice(SHAPES)
        run(f"l{i} = {_leaf(rng, shape, rng.random() < 0.85)}")
        names.append(f"l{i}")
    if rng.random() < 0.3:
        run(f"c0 = {_leaf(rng, rng.choice(SHAPES), False)}")
        names.append("c0")
    nsteps = rng.randint(2, 9)
    k = 0
    nograd = False
    while k < nsteps:
        x = rng.choice(names)
        y = rng.choice(names)
        shape = tuple(ns[x].shape)
        r = rng.random()
        v = f"v{k}"
        if r < 0.3:
            expr = rng.choice(UNARY).format(x=x)
        elif r < 0.55:
            expr = rng.choice(BINARY).format(x=x, y=y)
        elif r < 0.72:
            opts = _views(shape)
            if not opts:
                continue
            expr = rng.choice(opts).format(x=x)
        elif r < 0.85:
            stmt = rng.choice(INPLACE).format(x=x, y=y)
            if rng.random() < 0.3 and len(shape) >= 1:
                stmt = f"{x}[0] = {rng.choice(['0.5', y + '.sum()'])}"
            # only what PyTorch accepts for shapes: a refusal is then about autograd
            probe = dict(ns)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    exec(stmt, {k2: (v2.detach().clone() if isinstance(v2, torch.Tensor)
                                     else v2) for k2, v2 in probe.items()})
            except Exception:
                k += 1
                continue
            lines.append(stmt)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    exec(stmt, ns)
            except Exception:
                break               # (the program ends at its error)
            k += 1
            continue
        elif r < 0.9:
            if ns[x].requires_grad and ns[x].grad_fn is not None:
                lines.append(f"{x}.retain_grad()")
                exec(f"{x}.retain_grad()", ns)
            k += 1
            continue
        elif r < 0.95:
            expr = f"{x}.detach()"
        else:
            nograd = True
            expr = rng.choice(UNARY + BINARY).format(x=x, y=y)
        stmt = f"{v} = {expr}"
        if nograd:
            stmt = f"with torch.no_grad():\n    {stmt}"
            nograd = False
        if run(stmt):
            names.append(v)
        k += 1
    # roots
    roots = [n for n in names if isinstance(ns.get(n), torch.Tensor) and ns[n].requires_grad]
    if not roots:
        return lines
    nroot = rng.choice([1, 1, 2])
    retain = rng.random() < 0.5
    for j in range(nroot):
        root = rng.choice(roots)
        w = "" if ns[root].dim() == 0 else ".sum()"
        if rng.random() < 0.2 and j == 0:
            leaves = [n for n in names if n.startswith("l") and ns[n].requires_grad]
            if leaves:
                lines.append(f"g{j} = torch.autograd.grad({root}{w}, [{', '.join(leaves)}], "
                             f"retain_graph={retain}, allow_unused=True)")
                continue
        lines.append(f"{root}{w}.backward(retain_graph={retain})")
    return lines


def _summary(torch, ns, names):
    out = {}
    for n in names:
        t = ns.get(n)
        if isinstance(t, tuple):
            for i, g in enumerate(t):
                out[f"{n}[{i}]"] = None if g is None else g.detach().numpy().tolist()
            continue
        if not isinstance(t, torch.Tensor):
            continue
        d = {"value": t.detach().numpy().tolist(), "requires_grad": t.requires_grad,
             "shape": list(t.shape)}
        if t.grad_fn is not None:
            d["grad_fn"] = t.grad_fn.name()
        if t.is_leaf or t.retains_grad:
            d["grad"] = None if t.grad is None else t.grad.numpy().tolist()
        out[n] = d
    return out


def run_program(lines, lib):
    """Run the program with `torch` bound to lib: (error or None, summary)."""
    ns = {"torch": lib}
    err = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, stmt in enumerate(lines):
            try:
                exec(stmt, ns)
            except Exception as e:      # noqa: BLE001
                err = (i, type(e).__name__, _norm(str(e)))
                break
        names = sorted(k for k in ns if k != "torch" and not k.startswith("__"))
        return err, _summary(lib, ns, names)


def _norm(msg):
    return msg.replace("tapegrad", "torch").split("\n")[0]


def _close(a, b):
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b or abs(a - b) <= 1e-9 + 1e-7 * abs(b)
    return a == b


# known differences, not reported: copy_ is recorded as an index_put of every position
# (the gradients are PyTorch's; only the node's name differs)
KNOWN_GRAD_FN = {("torch::autograd::CopyBackwards", "IndexPutBackward0")}


def _empty(summary):
    return any(isinstance(d, dict) and 0 in d.get("shape", ()) for d in summary.values())


def compare_graph(lines, torch, tg):
    """None, or (kind, detail) of the first difference; a known difference (listed in
    the report, allowed by the tests) has a kind starting with "known"."""
    got = _compare_graph(lines, torch, tg)
    if got is None or got[0] == "message":
        return got
    e1, s1 = run_program(lines, torch)
    if got[0] == "grad_fn" and " torch AsStridedBackward0 " in got[1]:
        # PyTorch re-derives a view's grad_fn (AsStridedBackward0) once its base's version
        # moves, also through a detach()ed alias; tapegrad only through its views
        return ("known-view-grad_fn", got[1])
    if _empty(s1):
        # writes into empty views (a leaf's, or one that would make the base require grad)
        # and the names of views of empty tensors
        return ("known-empty-view", got[1])
    return got


def _compare_graph(lines, torch, tg):
    e1, s1 = run_program(lines, torch)
    e2, s2 = run_program(lines, tg)
    if (e1 is None) != (e2 is None):
        return ("error", f"torch: {e1}\ntapegrad: {e2}")
    if e1 is not None:
        if e1[:2] != e2[:2]:
            return ("error", f"torch: {e1}\ntapegrad: {e2}")
        if e1[2] != e2[2]:
            return ("message", f"torch: {e1}\ntapegrad: {e2}")
    for n in s1:
        if n not in s2:
            return ("missing", n)
        a, b = s1[n], s2[n]
        if e1 is not None and not isinstance(a, dict):
            continue
        if isinstance(a, dict):
            for key in a:
                if key == "grad" and e1 is not None:
                    # (a backward that fails: PyTorch has run some nodes and filled some
                    # .grad; tapegrad checks every row first and writes nothing)
                    continue
                if (key == "grad_fn" and b.get(key) != a[key]
                        and (a[key], b.get(key)) not in KNOWN_GRAD_FN):
                    return ("grad_fn", f"{n}: torch {a[key]} tapegrad {b.get(key)}")
                if key != "grad_fn" and not _close(a[key], b.get(key)):
                    return (key, f"{n}.{key}: torch {a[key]}\n  tapegrad {b.get(key)}")
        elif not _close(a, b):
            return ("grad", f"{n}: torch {a}\n  tapegrad {b}")
    return None


def shrink(lines, kind, check):
    """Drop statements while check(lines) still reports the same kind of difference."""
    changed = True
    while changed:
        changed = False
        for i in range(len(lines) - 1, -1, -1):
            cand = lines[:i] + lines[i + 1:]
            got = check(cand)
            if got is not None and got[0] == kind:
                lines = cand
                changed = True
    return lines


# ------------------------------------------------------------------ bad inputs
BAD = [
    "x.sum(dim={d})", "x.transpose(0, {d})", "x.view({n})", "x.reshape({neg}, {neg})",
    "torch.zeros({neg})", "torch.ones(2, {bad})", "x[{i}]", "x[:, {i}]",
    "x.index_select(0, torch.tensor([{i}]))", "torch.cat([x, torch.ones({n}, {n})])",
    "torch.matmul(x, torch.ones({n}, 2))", "x.expand({n}, {n})", "x.unsqueeze({d})",
    "x.squeeze({d})", "x.narrow(0, {i}, 1)", "x.permute(0, {d})", "x.softmax(dim={d})",
    "torch.gather(x, 1, torch.tensor([[{i}]]))", "x.mean(dim={bad})", "x.repeat({neg})",
    "x.new_zeros({bad})", "torch.stack([x, torch.ones({n})])", "x.flip({d})",
    "torch.arange({bad})", "torch.full(({neg},), 1.0)", "x.split({neg})",
    "x.chunk({neg})", "torch.where(x, x, x)", "x.masked_fill(torch.ones({n}), 0.0)",
    "torch.nn.functional.linear(x, torch.ones({n}, {n}))", "x.add(torch.ones({n}))",
    "x.topk({i})", "x.argmax(dim={d})", "x.clamp(min={bad})", "x.to({bad})",
    "x.type({bad})", "x.max(dim={d})", "x.cumsum({d})", "x.pow({bad})",
    "torch.tensor([[1.0], [1.0, 2.0]])", "x.diagonal(0, 0, {d})", "x.roll(1, {d})",
]


def make_bad(seed):
    rng = random.Random(seed)
    vals = {"d": rng.choice([2, 3, -3, 5, 100]), "n": rng.choice([0, 4, 5, 7]),
            "neg": rng.choice([-2, -5, -1, 0]), "i": rng.choice([3, 4, -4, 99, -100]),
            "bad": rng.choice(["'a'", "None", "1.5", "[1, 'x']", "torch.float64", "(2, 'b')",
                               "True"])}
    call = rng.choice(BAD).format(**vals)
    return ["x = torch.ones(3, 4, dtype=torch.float64)", f"y = {call}"]


def compare_bad(lines, torch, tg):
    e1, s1 = run_program(lines, torch)
    e2, s2 = run_program(lines, tg)
    if e1 is None and e2 is not None and e2[1] == "TypeError":
        # PyTorch's argument parser takes a few oddities (x.to(1.5) returns x, a bool as a
        # size in ones(2, True)) that tapegrad refuses: reported apart, not a misreading
        return ("stricter", f"torch: accepted\ntapegrad: {e2}")
    if (e1 is None) != (e2 is None) or (e1 is not None and e1[1] != e2[1]):
        return ("error", f"torch: {e1}\ntapegrad: {e2}")
    if e1 is not None and e1[2] != e2[2]:
        return ("message", f"torch: {e1}\ntapegrad: {e2}")
    if e1 is None:
        a, b = s1.get("y"), s2.get("y")
        if a is not None and not (isinstance(a, dict) and isinstance(b, dict)
                                  and _close(a["value"], b["value"])):
            return ("value", f"torch: {a}\ntapegrad: {b}")
    return None


# ------------------------------------------------------------------ one case / workers
def case(kind, seed, torch, tg):
    lines = make_graph(seed, torch) if kind == "graphs" else make_bad(seed)
    cmp = compare_graph if kind == "graphs" else compare_bad
    got = cmp(lines, torch, tg)
    if got is None:
        return None
    small = shrink(list(lines), got[0], lambda ls: cmp(ls, torch, tg))
    got = cmp(small, torch, tg) or got
    return {"seed": seed, "kind": got[0], "detail": got[1],
            "program": "import torch\n" + "\n".join(small)}


def worker():
    """Read "kind seed" lines, answer one JSON line each."""
    import torch
    import tapegrad as tg
    torch.set_num_threads(1)
    tg.set_num_threads(1)
    crash = os.environ.get("TAPEGRAD_FUZZ_CRASH_AT")     # (the tests' crash on purpose)
    for line in sys.stdin:
        kind, seed = line.split()
        if seed == crash:
            os.abort()
        try:
            res = case(kind, int(seed), torch, tg)
        except Exception as e:      # noqa: BLE001  (the fuzzer's own failure: a finding too)
            res = {"seed": int(seed), "kind": "harness", "detail": f"{type(e).__name__}: {e}",
                   "program": ""}
        sys.stdout.write(json.dumps(res) + "\n")
        sys.stdout.flush()


class Pool:
    """Worker processes fed one case at a time; one that dies or hangs is a finding for
    its case, and is started again."""

    def __init__(self, n, timeout):
        self.n, self.timeout = n, timeout
        self.procs = [self._start() for _ in range(n)]

    def _start(self):
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        return subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env, bufsize=1)

    def run(self, kind, seeds, report):
        todo = list(seeds)
        busy = {}           # proc index -> (seed, start time)
        findings = []
        while todo or busy:
            for i, p in enumerate(self.procs):
                if i not in busy and todo:
                    s = todo.pop(0)
                    busy[i] = (s, time.time())
                    try:
                        p.stdin.write(f"{kind} {s}\n")
                        p.stdin.flush()
                    except OSError:     # (it died since its last answer: readline sees EOF)
                        pass
            fds = {self.procs[i].stdout.fileno(): i for i in busy}
            ready, _, _ = select.select(list(fds), [], [], 1.0)
            for fd in ready:
                i = fds[fd]
                line = self.procs[i].stdout.readline()
                seed = busy.pop(i)[0]
                if not line:
                    findings.append(self._crash(i, kind, seed))
                    continue
                res = json.loads(line)
                if res is not None:
                    findings.append(res)
                report(seed, res)
            now = time.time()
            for i, (seed, t0) in list(busy.items()):
                if now - t0 > self.timeout:
                    busy.pop(i)
                    self.procs[i].kill()
                    findings.append(self._crash(i, kind, seed, "timeout"))
        return findings

    def _crash(self, i, kind, seed, what="crash"):
        p = self.procs[i]
        p.kill()
        p.wait()
        err = p.stderr.read()[-2000:]
        self.procs[i] = self._start()
        import torch
        lines = make_graph(seed, torch) if kind == "graphs" else make_bad(seed)
        return {"seed": seed, "kind": what, "detail": f"exit {p.returncode}\n{err}",
                "program": "import torch\n" + "\n".join(lines)}

    def close(self):
        for p in self.procs:
            try:
                p.stdin.close()
            except OSError:
                pass
            p.wait(timeout=30)


def fuzz(kind, seeds, workers=2, timeout=120, verbose=False):
    """Run the cases; the findings (dicts with seed, kind, detail, program)."""
    pool = Pool(workers, timeout)
    try:
        def report(seed, res):
            if verbose and res is not None:
                print(format_finding(res), flush=True)
        return pool.run(kind, seeds, report)
    finally:
        pool.close()


def format_finding(f):
    return (f"--- seed {f['seed']}: {f['kind']}\n{f['detail']}\nreproducer:\n"
            f"{f['program']}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0:200", help="start:stop")
    ap.add_argument("--kind", choices=["graphs", "inputs", "both"], default="both")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per case")
    ap.add_argument("--show", type=int, help="print the program of one graph seed")
    ap.add_argument("--messages", action="store_true",
                    help="report differing error messages (same type) too")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker()
    if a.show is not None:
        import torch
        kind = "inputs" if a.kind == "inputs" else "graphs"
        lines = make_graph(a.show, torch) if kind == "graphs" else make_bad(a.show)
        print("import torch\n" + "\n".join(lines))
        return 0
    lo, hi = (int(v) for v in a.seeds.split(":"))
    kinds = ["graphs", "inputs"] if a.kind == "both" else [a.kind]
    bad = 0
    t0 = time.time()
    for kind in kinds:
        found = fuzz(kind, range(lo, hi), a.workers, a.timeout)
        for f in sorted(found, key=lambda f: f["seed"]):
            if f["kind"] in ("message", "stricter") and not a.messages:
                continue
            print(f"[{kind}] " + format_finding(f))
            bad += 1
        print(f"{kind}: {hi - lo} cases, {len(found)} differences "
              f"({sum(f['kind'] == 'message' for f in found)} in messages only, "
              f"{sum(f['kind'] == 'stricter' for f in found)} arguments only PyTorch takes)",
              flush=True)
    print(f"{time.time() - t0:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
