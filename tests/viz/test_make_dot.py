"""tapegrad.viz.make_dot: the DOT source's structure against PyTorch's grad_fn graph for the
same code, rendering with Graphviz's dot, and a large graph."""
import re
import shutil

import pytest

import tapegrad
from tapegrad import viz

graphviz = pytest.importorskip("graphviz")

def structure(dot):
    """Node labels and labelled edges between grad_fn nodes, read from the DOT statements."""
    labels, attrs, edges = {}, {}, []
    for stmt in dot.body:
        stmt = stmt.strip()
        m = re.match(r'^(\w+) -> (\w+)(?: \[(.*)\])?$', stmt, re.S)
        if m:
            idx = re.search(r'label=(\d+)', m[3] or "")
            edges.append((m[1], m[2], int(idx[1]) if idx else None, m[3] or ""))
            continue
        m = re.match(r'^(\w+) \[label=(".*?"|\S+?)(?: (.*))?\]$', stmt, re.S)
        if m:
            labels[m[1]] = m[2].strip('"').split("\n")
            attrs[m[1]] = m[3] or ""
    return labels, attrs, edges


def fn_edges(dot):
    """(consumer name, input node name, index label) for edges between grad_fn boxes."""
    labels, _, edges = structure(dot)
    fn = {k for k in labels if k.startswith("n")}
    return sorted((labels[d][0], labels[s][0], i) for s, d, i, _ in edges
                  if s in fn and d in fn)


def torch_edges(out):
    """The same, walking PyTorch's grad_fn graph directly."""
    seen, edges, stack = {}, [], [out.grad_fn]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen[id(n)] = n
        for nxt, k in n.next_functions:
            if nxt is not None:
                edges.append((n.name(), nxt.name(), k))
                stack.append(nxt)
    return seen, edges


def compare(build):
    torch = pytest.importorskip("torch")
    dot = viz.make_dot(build(tapegrad))
    out = build(torch)
    seen, edges = torch_edges(out)
    strip = lambda s: s.replace("torch::autograd::", "")    # noqa: E731
    names = sorted(strip(n.name()) for n in seen.values())
    labels, _, _ = structure(dot)
    assert sorted(v[0] for k, v in labels.items() if k.startswith("n")) == names
    # several outputs (unbind) show their index: compare indices only there
    multi = {strip(c) for _, c, k in edges if k}
    want = sorted((strip(p), strip(c), k if strip(c) in multi else None)
                  for p, c, k in edges)
    assert fn_edges(dot) == want
    return dot


def ex_mul(T):
    a = T.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = T.tensor([4.0, 5.0, 6.0], requires_grad=True)
    return a * b


def ex_unbind(T):
    a = T.tensor([1.0, 2.0, 3.0], requires_grad=True)
    u0, u1, u2 = (a * 2).unbind(0)
    return u0 * u2 + u1


def ex_retain(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3
    h.retain_grad()
    return (h * h).sum()


def ex_detach(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x.exp()
    return y * y.detach()


def ex_loop(T):
    T.manual_seed(0)
    w = T.randn(3, 2, requires_grad=True)
    b = T.zeros(2, requires_grad=True)
    x, y = T.randn(4, 3), T.randn(4, 2)
    opt = T.optim.SGD([w, b], lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        loss = ((x @ w + b - y) ** 2).mean()
        loss.backward()
        opt.step()
    return loss


@pytest.mark.parametrize("build", [ex_mul, ex_unbind, ex_retain, ex_detach, ex_loop],
                         ids=lambda f: f.__name__)
def test_same_nodes_and_edges_as_pytorch(build):
    compare(build)


def test_mul_draws_leaves_output_and_names():
    a = tapegrad.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = tapegrad.tensor([4.0, 5.0, 6.0], requires_grad=True)
    c = a * b
    labels, attrs, edges = structure(viz.make_dot(c, params={"a": a, "b": b}))
    leaves = {k: v for k, v in labels.items() if "lightblue" in attrs[k]}
    assert sorted(v[0] for v in leaves.values()) == ["a", "b"]
    assert all(v[1] == "(3)" for v in leaves.values())
    acc = {k for k, v in labels.items() if v[0] == "AccumulateGrad"}
    assert {(s, d) for s, d, _, _ in edges if s in leaves} == \
        {(s, d) for s, d, _, _ in edges if d in acc}
    outs = [k for k in labels if "darkolivegreen1" in attrs[k]]
    assert len(outs) == 1 and labels[outs[0]] == ["(3)"]
    mul = next(k for k, v in labels.items() if v[0] == "MulBackward0")
    assert (mul, outs[0]) in {(s, d) for s, d, _, _ in edges}
    assert sorted(d for s, d, _, _ in edges if s in acc) == [mul, mul]


def test_unbind_edges_carry_the_output_index():
    a = tapegrad.tensor([1.0, 2.0, 3.0], requires_grad=True)
    u0, u1, u2 = (a * 2).unbind(0)
    dot = viz.make_dot(u0 * u2 + u1)
    labels, _, edges = structure(dot)
    unbind = next(k for k, v in labels.items() if v[0] == "UnbindBackward0")
    assert sorted(i for s, _, i, _ in edges if s == unbind) == [0, 1, 2]
    assert all(i is None for s, _, i, _ in edges if s != unbind)


def test_retained_gradients_are_marked():
    x = tapegrad.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3
    h.retain_grad()
    y = (h * h).sum()
    y.retain_grad()
    labels, attrs, _ = structure(viz.make_dot(y))
    marked = sorted(v[0] for v in labels.values() if "retains_grad" in v)
    assert marked == ["()", "MulBackward0"]     # y's box, and h's node (h is not drawn)
    h_node = next(k for k, v in labels.items() if v == ["MulBackward0", "retains_grad"])
    assert "gold" in attrs[h_node]


def test_saved_tensors_and_a_stale_one_in_red():
    torch = pytest.importorskip("torch")
    x = tapegrad.tensor([1.0, 2.0], requires_grad=True)
    e = x.exp()
    e.add_(1)           # exp saved its result: the backward would refuse it
    labels, attrs, edges = structure(viz.make_dot(e, show_saved=True, show_versions=True))
    saved = {k: v for k, v in labels.items() if v[0] == "result"}
    assert len(saved) == 1
    (k, lines), = saved.items()
    assert lines[1:] == ["(2)", "float32", "saved at version 0, now 1"]
    assert "fillcolor=red" in attrs[k]
    assert any(d == k and "dir=none" in a for _, d, _, a in edges)
    assert any(v[0] == "(2)" and "version 1" in v for v in labels.values())
    # PyTorch saves the same value for exp and refuses the same backward
    tx = torch.tensor([1.0, 2.0], requires_grad=True)
    te = tx.exp()
    assert te.grad_fn._saved_result.shape == (2,)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        e.sum().backward()


def test_saved_tensors_unchanged_are_orange():
    a = tapegrad.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = tapegrad.tensor([4.0, 5.0, 6.0], requires_grad=True)
    labels, attrs, _ = structure(viz.make_dot(a * b, show_saved=True))
    saved = sorted(v[0] for v in labels.values() if v[0] in ("self", "other"))
    assert saved == ["other", "self"]
    assert all("orange" in attrs[k] for k, v in labels.items() if v[0] in ("self", "other"))


def test_several_outputs_and_lists():
    a = tapegrad.tensor([1.0, 2.0], requires_grad=True)
    labels, attrs, _ = structure(viz.make_dot([a * 2, a.exp()], a))
    assert sum("darkolivegreen1" in v for v in attrs.values()) == 2
    assert sum("lightblue" in v for v in attrs.values()) == 1


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot program is missing")
def test_render_svg_holds_every_label():
    a = tapegrad.tensor([1.0, 2.0, 3.0], requires_grad=True)
    u0, u1, u2 = (a * 2).unbind(0)
    dot = viz.make_dot(u0 * u2 + u1, params={"a": a}, show_saved=True)
    svg = dot.pipe("svg").decode()
    labels, _, _ = structure(dot)
    for lines in labels.values():
        for line in lines:
            assert line.replace("&", "&amp;") in svg, line
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg


def test_missing_dot_says_how_to_install(monkeypatch):
    a = tapegrad.tensor([1.0], requires_grad=True)
    dot = viz.make_dot(a * 2)
    monkeypatch.setenv("PATH", "")
    assert "MulBackward0" in dot.source
    with pytest.raises(graphviz.ExecutableNotFound, match="apt-get install graphviz"):
        dot.pipe("svg")


def test_a_thousand_nodes():
    x = tapegrad.tensor([1.0, 2.0], requires_grad=True)
    y = x
    for _ in range(1000):
        y = y * 1.0001
    labels, _, edges = structure(viz.make_dot(y))
    assert sum(v[0] == "MulBackward0" for v in labels.values()) == 1000
    assert len(edges) == 1000 + 1 + 1       # chain, AccumulateGrad, leaf, output
