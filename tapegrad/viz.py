"""tapegrad.viz: pictures of the backward graph and a readable listing of the tape.

``make_dot`` draws what ``backward()`` would walk, as torchviz draws PyTorch's graph: one box
per grad_fn node, the leaves' ``AccumulateGrad`` nodes with their tensors, the outputs, and
on request what each node saved (with the version it was saved at and the version now).
It reads the public node API (``grad_fn``, ``next_functions``, ``name()``,
``AccumulateGrad.variable``), so PyTorch tensors can be drawn too, for comparison; what that
API does not show (saved values, output counts, retained gradients of intermediates) comes
from read-only helpers in ``_front/nodes.py``. ``tape`` lists the live rows of the tape.

The ``graphviz`` Python package is an optional dependency (``pip install tapegrad[viz]``),
imported only when ``make_dot`` runs; rendering also needs Graphviz's ``dot`` program.
"""
from ._front import nodes as _nodes
from ._front.tensor import Tensor as _Tensor

__all__ = ["make_dot", "tape"]

_INSTALL_PY = ("tapegrad.viz.make_dot needs the graphviz Python package: "
               "pip install tapegrad[viz]  (or: pip install graphviz)")
_INSTALL_DOT = ("Graphviz's 'dot' program was not found on PATH; the DOT source is still "
                "available as .source. Install Graphviz to render it: apt-get install "
                "graphviz (Debian/Ubuntu), brew install graphviz (macOS), conda install "
                "-c conda-forge graphviz, or see https://graphviz.org/download/")

# torchviz's colours, so the pictures read the same
_OUTPUT, _LEAF, _SAVED, _STALE, _RETAINED = ("darkolivegreen1", "lightblue", "orange",
                                             "red", "gold")
_DIGRAPH = [None]       # the Digraph subclass, made on first use (graphviz imports lazily)


def _graphviz():
    try:
        import graphviz
    except ImportError as err:
        raise ImportError(_INSTALL_PY) from err
    return graphviz


def _digraph_class():
    """graphviz.Digraph whose rendering errors say how to install dot."""
    if _DIGRAPH[0] is not None:
        return _DIGRAPH[0]
    graphviz = _graphviz()

    class DotNotFound(graphviz.ExecutableNotFound):
        def __init__(self, cause):
            RuntimeError.__init__(self, f"{cause}\n{_INSTALL_DOT}")

    class Digraph(graphviz.Digraph):
        def pipe(self, *args, **kwargs):
            try:
                return super().pipe(*args, **kwargs)
            except graphviz.ExecutableNotFound as err:
                raise DotNotFound(err) from err

        def render(self, *args, **kwargs):
            try:
                return super().render(*args, **kwargs)
            except graphviz.ExecutableNotFound as err:
                raise DotNotFound(err) from err

    Digraph.__module__ = DotNotFound.__module__ = __name__
    _DIGRAPH[0] = Digraph
    return Digraph


def _size(shape):
    return "(" + ", ".join(str(int(v)) for v in shape) + ")"


def _fn_name(fn):
    return fn.name().replace("torch::autograd::", "")


def _param_key(t):
    """How a parameter is recognised: tapegrad's tensor id (a wrapper may be remade), or the
    object for other tensors (PyTorch returns the Parameter itself)."""
    return ("tg", t._i) if isinstance(t, _Tensor) else ("obj", id(t))


def _flatten(tensors):
    out = []
    for t in tensors:
        if isinstance(t, (list, tuple)):
            out.extend(_flatten(t))
        elif t is not None:
            out.append(t)
    return out


def _saved_slot(k):
    return {-1: "result", 0: "self", 1: "other"}.get(k, f"input{k}")


def make_dot(*tensors, params=None, show_saved=False, show_versions=False):
    """A graphviz.Digraph of the backward graph of tensors, drawn as torchviz draws it.

    One box per grad_fn node with its name; for each leaf an ``AccumulateGrad`` box and the
    leaf (light blue, with its name from ``params`` and its shape); the output tensors
    (green, with their shape). Edges run from a node to the node that consumes its gradient
    and carry the output index when a node has several outputs (``UnbindBackward0``).
    Tensors that retain their gradient (``retain_grad()``) are marked "retains_grad",
    intermediates too (their node is drawn in gold).

    :param tensors: output tensors (or lists/tuples of them), tapegrad's or PyTorch's.
    :param params: a mapping name -> tensor, such as ``dict(model.named_parameters())``,
        naming the leaves.
    :param show_saved: also draw what each node saved for its backward (orange), with its
        shape, dtype and the version it was saved at next to its version now; a saved
        tensor changed in place since (the backward would refuse it) is drawn in red.
    :param show_versions: add each drawn tensor's version counter (``_version``).
    :returns: a ``graphviz.Digraph``: ``.source`` is the DOT text, ``.render()`` and
        ``.pipe("svg")`` need Graphviz's ``dot`` program, Jupyter displays it.
    :raises ImportError: when the graphviz Python package is missing.
    """
    Digraph = _digraph_class()
    outputs = _flatten(tensors)
    names = {}
    if params is not None:
        items = params.items() if hasattr(params, "items") else params
        names = {_param_key(p): name for name, p in items}
    dot = Digraph(node_attr=dict(style="filled", shape="box", align="left", fontsize="10",
                                 ranksep="0.1", height="0.2", fontname="monospace"),
                  graph_attr=dict(size="12,12"))
    ids = {}            # id(object) -> DOT name; keep holds the objects, so ids stay unique
    keep = []

    def dot_id(obj, prefix):
        key = id(obj)
        if key not in ids:
            ids[key] = f"{prefix}{len(ids)}"
            keep.append(obj)
        return ids[key]

    def tensor_label(t, name):
        lines = [name] if name else []
        lines.append(_size(t.shape))
        if show_versions:
            lines.append(f"version {t._version}")
        if getattr(t, "retains_grad", False):
            lines.append("retains_grad")
        return "\n".join(lines)

    # the outputs' own retained gradients show on their boxes, not on their nodes
    drawn = {t._i for t in outputs if isinstance(t, _Tensor)}
    # the nodes, breadth first from the outputs
    queue = []
    for t in outputs:
        fn = getattr(t, "grad_fn", None)
        if fn is not None:
            queue.append(fn)
    seen = set()
    edges = []          # (source node, consumer node, output index)
    order = []
    while queue:
        fn = queue.pop(0)
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        dot_id(fn, "n")
        order.append(fn)
        for nxt, k in fn.next_functions:
            if nxt is None:
                continue
            dot_id(nxt, "n")
            edges.append((nxt, fn, int(k)))
            if id(nxt) not in seen:
                queue.append(nxt)
    indices = {}        # source -> the output indices its edges carry
    for src, _, k in edges:
        indices.setdefault(id(src), set()).add(k)

    def several_outputs(fn):
        row = _nodes.node_row(fn)
        if row is not None:
            return _nodes.row_summary(row)["nout"] > 1
        return len(indices.get(id(fn), ())) > 1 or indices.get(id(fn)) != {0}

    for fn in order:
        fid = ids[id(fn)]
        variable = getattr(fn, "variable", None)
        row = _nodes.node_row(fn)
        label, attrs = _fn_name(fn), {}
        if row is not None:
            retained = [k for t, k, keeps in _nodes.row_outputs(row)
                        if keeps and t not in drawn]
            if retained:
                label += "\nretains_grad" + ("" if retained == [0] else
                                             " " + ",".join(map(str, sorted(retained))))
                attrs["fillcolor"] = _RETAINED
        dot.node(fid, label, **attrs)
        if variable is not None:
            vid = dot_id(variable, "v")
            dot.node(vid, tensor_label(variable, names.get(_param_key(variable), "")),
                     fillcolor=_LEAF)
            dot.edge(vid, fid)
        if show_saved and row is not None:
            for s in _nodes.saved_values(row):
                sid = f"{fid}s{s['slot'] + 1}"
                lines = [_saved_slot(s["slot"]), _size(s["shape"]), s["dtype"]]
                stale = s["version"] != s["saved_version"]
                lines.append(f"saved at version {s['saved_version']}, now {s['version']}")
                if s["released"]:
                    lines.append("freed by backward")
                dot.node(sid, "\n".join(lines), fillcolor=_STALE if stale else _SAVED,
                         **({"fontcolor": "white"} if stale else {}))
                dot.edge(fid, sid, dir="none", **({"color": _STALE} if stale else {}))
    for src, dst, k in edges:
        label = str(k) if several_outputs(src) else None
        dot.edge(ids[id(src)], ids[id(dst)], **({"label": label} if label else {}))

    for t in outputs:
        fn = getattr(t, "grad_fn", None)
        if fn is None and getattr(t, "requires_grad", False):
            # a leaf given as an output: drawn once, as its AccumulateGrad's variable is
            tid = dot_id(t, "v")
            dot.node(tid, tensor_label(t, names.get(_param_key(t), "")), fillcolor=_LEAF)
            continue
        tid = dot_id(t, "t")
        dot.node(tid, tensor_label(t, names.get(_param_key(t), "")), fillcolor=_OUTPUT)
        if fn is not None:
            dot.edge(ids[id(fn)], tid)
    return dot


def _dtype(name):
    return name.rpartition(".")[2]


def _grid(rows):
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]


def tape(tensor=None):
    """A plain-text listing of the live rows of the tape, one line per row.

    Columns: the row; its op (the grad_fn name); its inputs (``row r.k``: output k of row
    r; ``leaf t<id>``: an AccumulateGrad edge to leaf tensor id; with ``@v<n>`` the version
    the input was saved at when its backward reads it); the outputs' shape and dtype and the
    live tensor ids the row made (``*``: retains its gradient); what it saved (``self``,
    ``other``, ``result``: alias id, version saved -> version now, ``STALE`` when an in-place
    change since makes the backward refuse it, ``freed`` after a backward); and, when
    ``tensor`` is given, ``visit`` on the rows a backward from it would run.

    Rows are recycled, so the listing is in table order, not time order.

    :param tensor: a tensor whose backward is marked, or None.
    :returns: the listing, a str.
    """
    rows = _nodes.live_rows()
    visit = set()
    head = f"tape: {len(rows)} live row{'s' * (len(rows) != 1)}"
    if tensor is not None:
        fn = tensor.grad_fn
        row = _nodes.node_row(fn)
        if row is not None:
            visit = set(_nodes.reachable_rows(row))
            head += f"; a backward from tensor {tensor._i} visits {len(visit)}"
        else:
            head += f"; tensor {tensor._i} has no grad_fn: a backward from it visits none"
    table = [("row", "op", "inputs", "outputs", "saved", "backward" if tensor is not None
              else "")]
    for r in rows:
        s = _nodes.row_summary(r)
        saved_at = {v["slot"]: v for v in s["saved"]}
        ins = []
        for i in s["inputs"]:
            if i["row"] >= 0:
                txt = f"row {i['row']}.{i['oidx']}"
            elif i["leaf"] >= 0:
                txt = f"leaf t{i['leaf']}"
            else:
                txt = "-"
            if i["k"] in saved_at:
                txt += f"@v{saved_at[i['k']]['saved_version']}"
            ins.append(txt)
        outs = f"{s['nout']}x{_size(s['out_shape'])} {_dtype(s['out_dtype'])}"
        made = [f"t{t}[{k}]" + ("*" if keeps else "") for t, k, keeps in s["outputs"]]
        if made:
            outs += " " + " ".join(made)
        saved = []
        for v in s["saved"]:
            txt = (f"{_saved_slot(v['slot'])}=t{v['id']} v{v['saved_version']}"
                   f"->v{v['version']}")
            if v["version"] != v["saved_version"]:
                txt += " STALE"
            if v["released"]:
                txt += " freed"
            saved.append(txt)
        table.append((str(r), s["op"], ", ".join(ins) or "-", outs, "; ".join(saved) or "-",
                      "visit" if r in visit else ""))
    return "\n".join([head] + _grid(table)) + "\n"
