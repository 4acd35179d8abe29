"""Every op of the op table, checked from its OpInfo (tapegrad/ops/registry.py), the
samples declared next to its definition: a new op without samples turns this suite red,
and a new op with samples is checked like every other one, with no test of its own.

Per sample (ids `<op>-<sample>-<dtype>`):
- records: running the call records the op (a node named the op's grad_fn on the
  output's graph, reached through the public grad_fn/next_functions);
- forward: results against PyTorch's, in float32 and float64: dtype exactly, shape,
  requires_grad, values to a few ulps (DEFAULT_RTOL, or the OpInfo's rtol and why);
- gradcheck: float64 gradients against central finite differences;
- torch_grad: float64 gradients against PyTorch's;
- replay: a step (the call, then a backward) built with tapegrad.compile, recorded and
  replayed on new inputs, gives the eager step's values and gradients bitwise (fuse=False,
  as tests/replay does), or falls back to eager with a CompileWarning where the OpInfo
  says the call is a graph break;
- fused: for ops that fuse, the first sample in a default (fused) replay joins a fused
  chain (the op's node is gone from the graph), with forward values bitwise eager's and
  gradients eager's to round-off.
Per error call of an OpInfo: the same exception type and message as PyTorch.

A check an OpInfo says does not apply (no gradient of a bool result, no node for a
comparison) is skipped for that op alone, by its data; a known mismatch with PyTorch is a
strict xfail of that sample, declared in its OpInfo.
"""
import builtins
import dis
import json
import subprocess
import sys
import zlib

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.ops.opinfo import HELPERS
from tapegrad.ops.registry import OPS
from tapegrad.testing import gradcheck
from tests.helpers import (REPO_ROOT, as_tensor, assert_same_error, dtype_name, functional,
                           numpy_of, raised)
from tests.replay.helpers import assert_same, no_break

torch = pytest.importorskip("torch")

DEFAULT_RTOL = {"float32": 1e-6, "float64": 1e-12, "grad": 1e-12}
SHORT = {"float32": "f32", "float64": "f64"}
# an op with a kind here is made at run time (replay/fuse.py registers one per fused
# chain it generates) and is checked through its members' samples
RUNTIME_KINDS = ("fused",)


# ---------------------------------------------------------------- the samples
def _samples(check, dtypes=("float32", "float64"), first_only=False):
    params = []
    for op in OPS:
        if op.info is None:
            continue
        for k, s in enumerate(op.info.samples):
            if first_only and k:
                break
            for dt in s.dtypes:
                if dt not in dtypes:
                    continue
                marks = []
                reason = s.xfail_reason(check, dt)
                if reason:
                    marks.append(pytest.mark.xfail(strict=True, reason=reason))
                params.append(pytest.param(op, k, dt, marks=marks,
                                           id=f"{op.name}-{k}-{SHORT[dt]}"))
    return params


def _errors():
    params = []
    for op in OPS:
        for k, s in enumerate(op.info.errors if op.info else ()):
            reason = s.xfail_reason("error", "float64")
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            params.append(pytest.param(op, k, marks=marks, id=f"{op.name}-error{k}"))
    return params


def _seed(op, k, name, run=0):
    return zlib.crc32(f"{op.name}/{k}/{name}/{run}".encode())


def _loaded(call):
    """The names a call reads (not the attributes it looks up: x.t() reads x alone)."""
    return {i.argval for i in dis.get_instructions(compile(call, "<sample>", "eval"))
            if i.opname in ("LOAD_NAME", "LOAD_GLOBAL")}


def _names(sample):
    """The inputs the sample's call uses, in the order the OpInfo declares them."""
    used = _loaded(sample.call)
    return [n for n in sample.inputs if n in used]


def arrays(op, k, sample, run=0):
    """{name: NumPy values} of the inputs sample k of op uses (run: another draw, for
    a replay's second call)."""
    return {n: sample.inputs[n].make(np.random.default_rng(_seed(op, k, n, run)))
            for n in _names(sample)}


def tensors(L, sample, values, dtype):
    """The inputs as tensors of library L: float ones in dtype (requiring grad as the
    OpInfo says), index and mask ones as int64 and bool."""
    return {n: as_tensor(L, a, dtype, requires_grad=sample.inputs[n].grad)
            for n, a in values.items()}


def evaluate(L, sample, inputs):
    call = sample.torch if (L is torch and sample.torch) else sample.call
    return eval(call, {"L": L, "F": functional(L), **HELPERS, **inputs})  # noqa: S307


def flat(out):
    """The tensors of a result (a tensor, or tuples and lists of them)."""
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flat(o)]
    return [out]


def differentiable(outs):
    return [o for o in outs if o.dtype.is_floating_point and o.requires_grad]


def rtol(sample, key):
    return sample.rtol.get(key, DEFAULT_RTOL[key])


def assert_values(ours, theirs, tol, what):
    """ours (NumPy) equals theirs to tol, relative, with an absolute floor of tol times
    the largest magnitude (a sum's cancellation leaves its few ulps of the largest term)."""
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    assert ours.shape == theirs.shape, what
    if theirs.dtype == np.bool_ or theirs.dtype.kind in "iu":
        np.testing.assert_array_equal(ours, theirs, err_msg=what)
        return
    finite = np.abs(theirs[np.isfinite(theirs)])
    scale = float(finite.max()) if finite.size else 1.0
    np.testing.assert_allclose(ours.astype(np.float64), theirs.astype(np.float64), rtol=tol,
                               atol=tol * scale, equal_nan=True, err_msg=what)


def both(op, k, dtype):
    """Sample k of op run in tapegrad and in PyTorch on the same values: (sample,
    (tapegrad inputs, results), (torch inputs, results))."""
    sample = op.info.samples[k]
    values = arrays(op, k, sample)
    runs = []
    for L in (tg, torch):
        ins = tensors(L, sample, values, dtype)
        runs.append((ins, flat(evaluate(L, sample, ins))))
    return sample, runs[0], runs[1]


def weights(outs, seed=1234):
    """Fixed random output gradients, as NumPy float64 arrays."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tuple(o.shape)) for o in outs]


def graph_nodes(outs):
    """Every node of the graph behind outs (grad_fn, then next_functions, breadth first)."""
    seen, todo, nodes = set(), [o.grad_fn for o in outs if o.grad_fn is not None], []
    while todo:
        node = todo.pop(0)
        if id(node) in seen:
            continue
        seen.add(id(node))
        nodes.append(node)
        todo.extend(n for n, _ in node.next_functions if n is not None)
    return nodes


def next_names(node):
    return tuple(n.name().rsplit("::", 1)[-1] if n is not None else None
                 for n, _ in node.next_functions)


def assert_records(op, sample, outs):
    want = op.info.grad_fn or op.grad_fn
    found = [n for n in graph_nodes(outs) if n.name() == want]
    names = sorted({n.name() for n in graph_nodes(outs)})
    assert found, f"{sample.call} records no {want} (its graph: {names})"
    if sample.next_fns is not None:
        assert any(next_names(n) == tuple(sample.next_fns) for n in found), (
            f"{want} of {sample.call}: next_functions {[next_names(n) for n in found]}, "
            f"expected {sample.next_fns}")


# ---------------------------------------------------------------- coverage
def test_every_op_has_an_opinfo():
    missing = [op.name for op in OPS if op.kind not in RUNTIME_KINDS and op.info is None]
    assert not missing, (f"ops without an OpInfo: {missing}; declare their samples with "
                         "registry.samples() next to their definition "
                         "(docs/contributing/adding-an-op.md)")


def test_every_sample_names_known_inputs():
    """A call may only name L, F, the helper programs, builtins and the sample's inputs
    (a typo in an input's name would otherwise fail every check of the sample alike)."""
    known = {"L", "F", *HELPERS, *dir(builtins)}
    for op in OPS:
        for s in (op.info.samples + op.info.errors) if op.info else ():
            unknown = _loaded(s.call) - known - set(s.inputs)
            assert not unknown, f"{op.name}: {s.call} names {sorted(unknown)}"


# ---------------------------------------------------------------- records
@pytest.mark.parametrize("op, k, dtype", _samples("records"))
def test_records(op, k, dtype):
    sample = op.info.samples[k]
    if sample.records is not True:
        pytest.skip(sample.records)
    if op.info.fused_only:
        outs = flat(_replayed(op, k, sample, dtype, fuse=True, tail=False)[0])
    else:
        outs = flat(evaluate(tg, sample, tensors(tg, sample, arrays(op, k, sample), dtype)))
    assert_records(op, sample, outs)


# ---------------------------------------------------------------- forward
@pytest.mark.parametrize("op, k, dtype", _samples("forward"))
def test_forward(op, k, dtype):
    sample, (_, ours), (_, theirs) = both(op, k, dtype)
    assert len(ours) == len(theirs), f"{len(ours)} results, PyTorch's {len(theirs)}"
    for j, (o, t) in enumerate(zip(ours, theirs)):
        what = f"{sample.call} result {j}"
        assert dtype_name(o.dtype) == dtype_name(t.dtype), what
        assert tuple(o.shape) == tuple(t.shape), what
        assert o.requires_grad == t.requires_grad, what
        assert_values(numpy_of(o), t.detach().numpy(), rtol(sample, dtype), what)


# ---------------------------------------------------------------- gradients
def _grad_sample(op, k):
    sample = op.info.samples[k]
    if sample.grad is not True:
        pytest.skip(sample.grad)
    return sample


@pytest.mark.parametrize("op, k, dtype", _samples("gradcheck", ("float64",)))
def test_gradcheck(op, k, dtype):
    sample = _grad_sample(op, k)
    ins = tensors(tg, sample, arrays(op, k, sample), dtype)
    names = list(ins)

    def fn(*args):
        outs = flat(evaluate(tg, sample, dict(zip(names, args))))
        return [o for o in outs if o.dtype.is_floating_point]

    # a float32 result (x.float()) rounds each value to ~6e-8 relative, which a 1e-6 step
    # cannot resolve: a coarser step, still exact for the linear ops that make one
    outs = fn(*ins.values())
    assert differentiable(outs) and any(t.requires_grad for t in ins.values()), (
        f"{sample.call}: nothing to differentiate (say why in the OpInfo's grad=)")
    coarse = any(o.dtype is tg.float32 for o in outs)
    assert gradcheck(fn, list(ins.values()), eps=1e-3 if coarse else 1e-6) is True


@pytest.mark.parametrize("op, k, dtype", _samples("torch_grad", ("float64",)))
def test_torch_grad(op, k, dtype):
    sample = _grad_sample(op, k)
    _, (ins_o, outs_o), (ins_t, outs_t) = both(op, k, dtype)
    do, dt = differentiable(outs_o), differentiable(outs_t)
    assert do and len(do) == len(dt), f"{len(do)} differentiable results, PyTorch's {len(dt)}"
    ws = weights(do)
    wanted = [n for n in ins_o if sample.inputs[n].grad]
    go = tg.autograd.grad(do, [ins_o[n] for n in wanted], allow_unused=True,
                          grad_outputs=[as_tensor(tg, w, dtype_name(o.dtype))
                                        for w, o in zip(ws, do)])
    gt = torch.autograd.grad(dt, [ins_t[n] for n in wanted], allow_unused=True,
                             grad_outputs=[as_tensor(torch, w, dtype_name(o.dtype))
                                           for w, o in zip(ws, dt)])
    for n, a, b in zip(wanted, go, gt):
        assert (a is None) == (b is None), f"gradient of {n}: {a} vs PyTorch's {b}"
        if a is not None:
            assert dtype_name(a.dtype) == dtype_name(b.dtype), n
            assert_values(numpy_of(a), b.numpy(), rtol(sample, "grad"), f"gradient of {n}")


# ---------------------------------------------------------------- errors
_COLD = """
import json, sys
sys.path.insert(0, {root!r})
import tapegrad as tg
from tests.helpers import raised
from tests.ops import test_every_op as t
out = {{}}
for op in t.OPS:
    for k, s in enumerate(op.info.errors if op.info else ()):
        values = t.arrays(op, k, s, run="error")
        kind, msg = raised(lambda L: t.evaluate(L, s, t.tensors(L, s, values, "float64")), tg)
        out[op.name + "/" + str(k)] = [kind and kind.__name__, msg]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def cold_errors():
    """{op/k: (exception type name, message)} of every error call, each made in one fresh
    interpreter before anything else ran its op there: a first call (kernels not loaded
    yet) takes other paths than later ones, and must raise the same error."""
    done = subprocess.run([sys.executable, "-c", _COLD.format(root=REPO_ROOT)],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("op, k", _errors())
def test_error(op, k, cold_errors):
    sample = op.info.errors[k]
    values = arrays(op, k, sample, run="error")

    def prog(L):
        return evaluate(L, sample, tensors(L, sample, values, "float64"))
    kind, msg = raised(prog, torch)
    assert kind is not None, "PyTorch does not raise"
    cold_kind, cold_msg = cold_errors[f"{op.name}/{k}"]
    assert (cold_kind, (cold_msg or "").replace("tapegrad", "torch")) == (kind.__name__, msg), (
        "the first call in a process")
    first = op.info.samples[0]      # the op has run before: its kernels are loaded
    evaluate(tg, first, tensors(tg, first, arrays(op, 0, first), "float64"))
    assert_same_error(prog)


# ---------------------------------------------------------------- compiled replay
def _step(op, k, sample, dtype, tail):
    """The call (then * 1.5), and a backward through its differentiable results with fixed
    weights (tensors made outside the step, as parameters are: a replay reads them)."""
    names = _names(sample)
    probe = flat(_tail(evaluate(tg, sample, tensors(tg, sample, arrays(op, k, sample), dtype)),
                       tail))
    ws = [tg.tensor(w, dtype=o.dtype) for w, o in zip(weights(probe), differentiable(probe))]

    def step(*args):
        out = _tail(evaluate(tg, sample, dict(zip(names, args))), tail)
        outs = differentiable(flat(out))
        if outs:
            total = (outs[0] * ws[0]).sum()
            for o, w in zip(outs[1:], ws[1:]):
                total = total + (o * w).sum()
            total.backward()
        return out
    return step


def _tail(out, tail):
    return out * 1.5 if tail else out


def _run(step, op, k, sample, dtype, run):
    values = arrays(op, k, sample, run)
    ins = tensors(tg, sample, values, dtype)
    out = step(*ins.values())
    return out, [t.grad for t in ins.values() if t.requires_grad]


def _replayed(op, k, sample, dtype, fuse, tail):
    """(result, input gradients) of the step compiled with tapegrad.compile, recorded on
    one draw of the inputs and replayed on another."""
    cf = tg.compile(_step(op, k, sample, dtype, tail), fuse=fuse)
    _run(cf, op, k, sample, dtype, run=0)
    out = _run(cf, op, k, sample, dtype, run=1)
    assert cf.stats["replays"] == 1, cf.stats
    return out


@pytest.mark.parametrize("op, k, dtype", _samples("replay", ("float64",)))
def test_replay(op, k, dtype):
    sample = op.info.samples[k]
    eager = _run(_step(op, k, sample, dtype, False), op, k, sample, dtype, run=1)
    if sample.replay is True:
        with no_break():
            replayed = _replayed(op, k, sample, dtype, fuse=False, tail=False)
    else:
        cf = tg.compile(_step(op, k, sample, dtype, False), fuse=False)
        with pytest.warns(tg.CompileWarning):
            _run(cf, op, k, sample, dtype, run=0)
            replayed = _run(cf, op, k, sample, dtype, run=1)
        assert cf.stats["replays"] == 0, cf.stats
    assert_same(replayed[0], eager[0], "result")
    assert_same(replayed[1], eager[1], "gradients")


def _fusing():
    return [p for p in _samples("fused", ("float64",), first_only=True)
            if p.values[0].info.samples[0].fuses or p.values[0].info.fused_only]


@pytest.mark.parametrize("op, k, dtype", _fusing())
def test_fused(op, k, dtype):
    sample = op.info.samples[k]
    chain = not op.info.fused_only
    eager = _run(_step(op, k, sample, dtype, chain), op, k, sample, dtype, run=1)
    with no_break():
        out, grads = _replayed(op, k, sample, dtype, fuse=True, tail=chain)
    outs = flat(out)
    if chain:       # the op and the tail's multiply are one node, named after the multiply,
        node = outs[0].grad_fn      # whose edges lead to the leaves the op read
        assert node.name() == "MulBackward0"
        assert op.grad_fn not in next_names(node) and "AccumulateGrad" in next_names(node), (
            f"({sample.call}) * 1.5 did not fuse: {next_names(node)}")
    else:
        assert_records(op, sample, outs)
    assert_same(out, eager[0], "result")
    for g, e in zip(grads, eager[1]):   # fused gradients round differently
        assert_values(numpy_of(g), numpy_of(e), rtol(sample, "grad"), "gradient")
