"""autograd.Function and tensor hooks: the places where the compiled sweep hands control
back to Python.

A Function's forward runs in Python under no_grad; one tape row then links its inputs to
its outputs. When the sweep reaches that row (or a row whose outputs have hooks) it saves
its state and returns E_CALLBACK; drive() runs the hooks / the backward here, adds the
input gradients into the row's edges, and resumes the sweep where it stopped.
"""
import gc
import weakref

from .._engine import layout as L
from .._engine import core
from .._engine.state import engine, GRAD_MODE
from .grad_mode import no_grad
from .anomaly_mode import check_function_grads
from .._engine.state import note_break

from .._front import dtype as D
from .._front.creation import zeros
from .._front.nodes import FUNCTION_ROWS as _FUNCTION_ROWS, ROW_HOOKS as _ROW_HOOKS
from .._front.tensor import (Tensor, run, _wrap, _wrap_leaf, _check_not_stale, _numpy_view,
                             LEAF_HOOKS as _LEAF_HOOKS)
from ..ops.registry import BY_NAME
_PRUNE_AT = [64]        # prune the registries when they grow past this
# callables run (no arguments) after every backward() whose sweep finished, in order:
# PyTorch's engine callbacks (Variable._execution_engine.queue_callback), kept registered.
# DistributedDataParallel averages gradients from here; the last sweep's rows are still
# in the engine's sweep buffer then (swept_leaves). Empty: backward() checks nothing more.
POST_BACKWARD = []


def post_backward():
    """Run the POST_BACKWARD callables (after a backward() sweep finished)."""
    for fn in list(POST_BACKWARD):
        fn()


def swept_leaves():
    """The ids of the leaves the last finished backward sweep delivered gradients to
    (an int64 array, with repeats): the leaf edges of the rows it ran, still in the sweep
    buffer until the next sweep. Read it from a POST_BACKWARD callable."""
    E = engine()
    nm = int(E.swstate[L.SW_NM])
    cap = len(E.swbuf) // 4
    rows = E.swbuf[3 * cap:3 * cap + nm]
    if nm == 0:
        return rows
    cols = [L.R_IN + k * L.IW + L.IN_T for k in range(L.MAXIN)]
    ids = E.tape[rows][:, cols].reshape(-1)
    return ids[ids >= 0]


class _Record:
    """What a Function row needs in Python: the class (for its name), the ctx, how the
    forward's arguments map to the row's inputs, and the forward's outputs (attached to the
    row, other tensors, or other values) so backward gets one gradient per output."""
    __slots__ = ("cls", "ctx", "args", "outputs")

    def __init__(self, cls, ctx, args, outputs):
        self.cls, self.ctx, self.args, self.outputs = cls, ctx, args, outputs


def prune():
    """Drop the entries of rows and tensors that died (the engine frees them in compiled
    code, so Python notices here, amortised): their ctx, saved tensors and hooks go."""
    E = engine()
    py = BY_NAME["py_function"].opcode
    for r in list(_FUNCTION_ROWS):
        if not E.tape[r, L.R_STATE] & L.RS_LIVE or E.tape[r, L.R_OP] != py:
            del _FUNCTION_ROWS[r]
    for r in list(_ROW_HOOKS):
        if not E.tape[r, L.R_STATE] & L.RS_HOOK:
            del _ROW_HOOKS[r]
    for i in list(_LEAF_HOOKS):
        if E.meta[i, L.M_REFS] <= 0 or not E.meta[i, L.M_FLAGS] & L.FL_HOOK:
            del _LEAF_HOOKS[i]
    _PRUNE_AT[0] = 2 * (len(_FUNCTION_ROWS) + len(_ROW_HOOKS) + len(_LEAF_HOOKS)) + 64


def _maybe_prune():
    if len(_FUNCTION_ROWS) + len(_ROW_HOOKS) + len(_LEAF_HOOKS) > _PRUNE_AT[0]:
        prune()


# ---------------------------------------------------------------- Function
# PyTorch's words for a backward through a graph whose saved values a backward freed
FREED_GRAPH = ("Trying to backward through the graph a second time (or directly access saved "
               "tensors after they have already been freed). Saved intermediate values of the "
               "graph are freed when you call .backward() or autograd.grad(). Specify "
               "retain_graph=True if you need to backward through the graph a second time or "
               "if you need to access saved tensors after calling backward.")

class FunctionCtx:
    """What forward() leaves for backward(): saved tensors (version-checked when read),
    needs_input_grad, and any attributes the user sets."""

    def __init__(self):
        self._saved = ()
        self._versions = ()
        self._freed = False
        self.needs_input_grad = ()
        self._non_differentiable = set()
        self.materialize_grads = True

    def save_for_backward(self, *tensors):
        """Keep tensors for backward (read them as ctx.saved_tensors); in-place changes to
        them are detected."""
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError("save_for_backward can only save variables, but argument "
                                f"{len(self._saved)} is of type {type(t).__name__}")
        self._saved = tensors
        self._versions = tuple(None if t is None else t._version for t in tensors)

    @property
    def saved_tensors(self):
        """The tensors given to save_for_backward (refused if one was changed in place
        since)."""
        if self._freed:
            raise RuntimeError(FREED_GRAPH)
        for i, (t, v) in enumerate(zip(self._saved, self._versions)):
            if t is not None and t._version != v:
                raise RuntimeError(
                    "one of the variables needed for gradient computation has been modified "
                    f"by an inplace operation: [tapegrad.{t.dtype.tensor_type} "
                    f"{list(t.shape)}] is at version {t._version}; expected version {v} "
                    f"instead. Hint: the tensor was saved with ctx.save_for_backward (entry "
                    f"{i}); make the in-place change on a clone.")
        return self._saved

    def mark_non_differentiable(self, *tensors):
        """Mark outputs that get no gradient."""
        self._non_differentiable.update(id(t) for t in tensors)

    def set_materialize_grads(self, value):
        """Whether backward gets zeros (True, the default) or None for outputs without a
        gradient."""
        self.materialize_grads = bool(value)

    def mark_dirty(self, *tensors):
        """Not supported: tapegrad refuses in-place autograd.Functions (raises
        NotImplementedError)."""
        raise NotImplementedError("in-place autograd.Functions (mark_dirty) are not supported")


class Function:
    """Subclass with static forward(ctx, *args) and backward(ctx, *grad_outputs); call
    with MyFn.apply(*args)."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        """Compute the outputs from the inputs (override as a staticmethod taking ctx
        first)."""
        raise NotImplementedError("You must implement the forward function for custom "
                                  "autograd.Function.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        """Return one gradient per forward input (None where there is none), given the
        outputs' gradients (override as a staticmethod)."""
        raise NotImplementedError("You must implement either the backward or vjp method for "
                                  "your custom autograd.Function to use it with backward mode "
                                  "AD.")

    @classmethod
    def apply(cls, *args):
        """Run forward and record the call so that backward runs in the backward pass."""
        note_break(f"autograd.Function {cls.__name__} (its forward and backward are Python)")
        ctx = FunctionCtx()
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        with no_grad():
            out = cls.forward(ctx, *args)
        if not (GRAD_MODE.on and any(ctx.needs_input_grad)):
            return out
        single = not isinstance(out, tuple)
        outs = [out] if single else list(out)
        orig = list(outs)
        attach = []
        for i, o in enumerate(outs):
            if (isinstance(o, Tensor) and o.dtype.is_floating_point
                    and id(o) not in ctx._non_differentiable):
                if o.requires_grad or o.grad_fn is not None or any(o is a for a in args):
                    o = outs[i] = o.detach()        # a new id the row can own
                attach.append(o)
        if not attach:
            return out
        if len({tuple(o.shape) for o in attach}) > 1 or len({o.dtype for o in attach}) > 1:
            raise NotImplementedError(
                f"{cls.__name__}: tapegrad Functions with several differentiable outputs need "
                "them to have one shape and dtype; return a stacked tensor instead")
        slots = [(i, a) for i, a in enumerate(args) if isinstance(a, Tensor) and a.requires_grad]
        if len(slots) > L.MAXIN:
            raise NotImplementedError(
                f"{cls.__name__}: at most {L.MAXIN} tensor inputs that require grad are "
                "supported per Function")
        _maybe_prune()
        ids = [a._i for _, a in slots] + [-1] * (L.MAXIN - len(slots))
        first = run(BY_NAME["py_function"], ids[0], ids[1], c=ids[2],
                    fargs=[len(attach)] + [o._i for o in attach])
        row = int(engine().meta[first, L.M_ROW])
        slot_of = {i: k for k, (i, _) in enumerate(slots)}
        args_map = [(i, slot_of.get(i, -1)) for i, a in enumerate(args) if isinstance(a, Tensor)]
        attached = {id(o): k for k, o in enumerate(attach)}
        spec = [("row", attached[id(o)]) if id(o) in attached else
                (("tensor", tuple(o.shape), o.dtype) if isinstance(o, Tensor) else ("none",))
                for o in outs]
        _FUNCTION_ROWS[row] = _Record(cls, ctx, args_map, spec)
        # a saved output would hold its own row through the ctx (a cycle the engine never
        # frees): keep a history-free alias instead, as PyTorch's SavedVariable does
        outputs_by_id = {id(o): outs[k] for k, o in enumerate(orig)}
        ctx._saved = tuple(outputs_by_id[id(t)].detach() if id(t) in outputs_by_id else t
                           for t in ctx._saved)
        return outs[0] if single else tuple(outs)


def _grad_tensor(row, k):
    E = engine()
    g = E.entry(core.grad_of_row)(E.caddr, row, k)
    if g < 0:
        raise MemoryError("tapegrad: no room for a gradient view")
    return _wrap(g)


def _input_shape(row, k):
    E = engine()
    base = L.R_IN + k * L.IW
    pr, t = int(E.tape[row, base + L.IN_ROW]), int(E.tape[row, base + L.IN_T])
    if pr >= 0:
        nd = int(E.tape[pr, L.R_ONDIM])
        return tuple(E.tape[pr, L.R_OSHAPE:L.R_OSHAPE + nd].tolist()), int(E.tape[pr, L.R_ODTYPE])
    nd = int(E.meta[t, L.M_NDIM])
    return tuple(E.meta[t, L.M_SHAPE:L.M_SHAPE + nd].tolist()), int(E.meta[t, L.M_DTYPE])


def _sum_to(g, shape):
    """g summed down to shape (PyTorch accepts a gradient that broadcasts to the input)."""
    lead = g.ndim - len(shape)
    if lead < 0:
        return None
    dims = list(range(lead)) + [lead + d for d, n in enumerate(shape)
                                if n == 1 and g.shape[lead + d] != 1]
    if any(g.shape[lead + d] != n and n != 1 for d, n in enumerate(shape)):
        return None
    if dims:
        g = g.sum(tuple(dims), keepdim=True)
    return g.reshape(shape) if lead else g


def _run_function(row, retain):
    rec = _FUNCTION_ROWS.get(row)
    if rec is None or rec.ctx._freed:
        raise RuntimeError(FREED_GRAPH)
    cls, ctx = rec.cls, rec.ctx
    grads = []
    for o in rec.outputs:
        if o[0] == "row":
            grads.append(_grad_tensor(row, o[1]))
        elif o[0] == "tensor" and ctx.materialize_grads:
            grads.append(zeros(*o[1], dtype=o[2]))
        else:
            grads.append(None)
    with no_grad():
        res = cls.backward(ctx, *grads)
    res = res if isinstance(res, tuple) else (res,)
    nargs = len(ctx.needs_input_grad)
    if len(res) != nargs:
        raise RuntimeError(f"function {cls.__name__}Backward returned an incorrect number of "
                           f"gradients (expected {nargs}, got {len(res)})")
    check_function_grads(row, res)          # (anomaly mode's NaN check; else nothing)
    E = engine()
    add = E.entry(core.add_to_edge)
    for i, k in rec.args:
        g = res[i]
        if g is None or k < 0:
            continue
        if not isinstance(g, Tensor):
            raise TypeError(f"function {cls.__name__}Backward returned a gradient of type "
                            f"{type(g).__name__} at index {i}; expected a Tensor or None")
        shape, dt = _input_shape(row, k)
        if tuple(g.shape) != shape:
            summed = _sum_to(g, shape)
            if summed is None:
                raise RuntimeError(f"Function {cls.__name__}Backward returned an invalid "
                                   f"gradient at index {i} - got {list(g.shape)} but expected "
                                   f"shape compatible with {list(shape)}")
            g = summed
        g = g.detach().to(D.BY_CODE[dt]).contiguous()
        add(E.caddr, row, k, g._i)
    if not retain and ctx._saved:
        ctx._freed = True           # (a Function that saved nothing may run again)
        ctx._saved = ()


# ---------------------------------------------------------------- hooks
class RemovableHandle:
    _next_id = 0

    def __init__(self, remove):
        self._remove = remove
        RemovableHandle._next_id += 1
        self.id = RemovableHandle._next_id

    def remove(self):
        if self._remove is not None:
            self._remove()
            self._remove = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def register_hook(t, hook):
    """Call hook(grad) when this tensor's gradient is computed; a returned tensor
    replaces the gradient. Returns a handle with remove()."""
    note_break("register_hook (hooks are Python)")
    if not t.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    if not callable(hook):
        raise TypeError(f"hook must be callable, got {type(hook).__name__}")
    _check_not_stale(t._i)
    E = engine()
    _maybe_prune()
    i = t._i
    row = int(E.meta[i, L.M_ROW])
    if row < 0:
        if not E.meta[i, L.M_FLAGS] & L.FL_HOOK:
            _LEAF_HOOKS.pop(i, None)            # a recycled id: old hooks are not ours
        hooks = _LEAF_HOOKS.setdefault(i, [])
        hooks.append(hook)
        E.meta[i, L.M_FLAGS] |= L.FL_HOOK
        ref = weakref.ref(t)

        def remove():
            if hook in hooks:
                hooks.remove(hook)
            if not hooks and _LEAF_HOOKS.get(i) is hooks:
                del _LEAF_HOOKS[i]
                if ref() is not None:
                    E.meta[i, L.M_FLAGS] &= ~L.FL_HOOK
        return RemovableHandle(remove)
    k = int(E.meta[i, L.M_OIDX])
    if not E.tape[row, L.R_STATE] & L.RS_HOOK:
        _ROW_HOOKS.pop(row, None)               # a recycled row: old hooks are not ours
    per = _ROW_HOOKS.setdefault(row, {})
    hooks = per.setdefault(k, [])
    hooks.append(hook)
    E.tape[row, L.R_STATE] |= L.RS_HOOK

    def remove():
        if hook in hooks:
            hooks.remove(hook)
        if not any(per.values()) and _ROW_HOOKS.get(row) is per:
            del _ROW_HOOKS[row]
            E.tape[row, L.R_STATE] &= ~L.RS_HOOK
    return RemovableHandle(remove)


_POST_ACC = []         # [weakref to a leaf, its post-accumulate-grad hooks], registration order


def register_post_accumulate_grad_hook(t, hook):
    """Call hook(tensor) after a backward() has accumulated this leaf's gradient into its
    .grad (the hook returns None; it may change .grad in place). Returns a handle with
    remove(). autograd.grad does not run it (it accumulates nothing), as in PyTorch. The
    hooks run after the backward sweep, each leaf's in registration order (the order
    across leaves may differ from PyTorch's)."""
    note_break("register_post_accumulate_grad_hook (hooks are Python)")
    if not t.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    if int(engine().meta[t._i, L.M_ROW]) >= 0:
        raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf "
                           "tensors")
    entry = next((e for e in _POST_ACC if e[0]() is t), None)
    if entry is None:
        entry = [weakref.ref(t), []]
        _POST_ACC.append(entry)
    entry[1].append(hook)
    if _run_post_accumulate_hooks not in POST_BACKWARD:
        POST_BACKWARD.append(_run_post_accumulate_hooks)

    def remove():
        if hook in entry[1]:
            entry[1].remove(hook)
        if not entry[1] and entry in _POST_ACC:
            _POST_ACC.remove(entry)
        if not _POST_ACC and _run_post_accumulate_hooks in POST_BACKWARD:
            POST_BACKWARD.remove(_run_post_accumulate_hooks)
    return RemovableHandle(remove)


def _run_post_accumulate_hooks():
    """(POST_BACKWARD) The post-accumulate-grad hooks of the leaves the sweep reached."""
    reached = set(swept_leaves().tolist())
    due = []
    for entry in list(_POST_ACC):
        t = entry[0]()
        if t is None:
            _POST_ACC.remove(entry)
        elif t._i in reached and entry[1]:
            due.append((t, list(entry[1])))
    if not _POST_ACC and _run_post_accumulate_hooks in POST_BACKWARD:
        POST_BACKWARD.remove(_run_post_accumulate_hooks)
    if due:
        note_break("post-accumulate-grad hooks run during backward (Python)")
    for t, hooks in due:
        for h in hooks:
            out = h(t)
            if isinstance(out, Tensor):
                raise RuntimeError("Tensor post accumulate grad hooks should return None.")
            if out is not None:
                raise TypeError(f"expected Variable, but hook returned "
                                f"'{type(out).__name__}'")


def _apply_hooks(hooks, g):
    """Run hooks in order on g; returns the final gradient (a replacement or g)."""
    for h in list(hooks):
        new = h(g)
        if new is not None:
            if tuple(new.shape) != tuple(g.shape):
                raise RuntimeError(f"hook returned a gradient of shape {list(new.shape)}; "
                                   f"expected {list(g.shape)}")
            g = new
    return g


def _run_row_hooks(row):
    """Hooks get a copy of the row's gradient (they may keep it); the final result is
    written back into the row's buffer."""
    for k, hooks in list(_ROW_HOOKS.get(row, {}).items()):
        if not hooks:
            continue
        buf = _grad_tensor(row, k)
        g = buf.clone()
        with no_grad():
            new = _apply_hooks(hooks, g)
        if new is not g:
            _numpy_view(buf)[...] = _numpy_view(new.detach().to(buf.dtype))


def finish_leaf_hooks():
    """After a backward: hand each hooked leaf's gathered gradient to its hooks, then
    accumulate the result into .grad."""
    E = engine()
    take = E.entry(core.take_leaf_hook_grad)
    pending = []                    # take every gathered gradient first: an exception in
    for i, hooks in list(_LEAF_HOOKS.items()):      # one hook must not leave others behind
        if E.meta[i, L.M_FLAGS] & L.FL_HOOK:
            g = take(E.caddr, i)
            if g >= 0:
                pending.append((i, hooks, _wrap(g)))
    if pending:         # hooks of leaves this sweep reached (others do not break a replay)
        note_break("tensor hooks run during backward (Python)")
    for i, hooks, g in pending:
        with no_grad():
            g = _apply_hooks(hooks, g).detach()
            leaf = _wrap_leaf(i)
            if leaf.grad is None:
                leaf.grad = g.to(leaf.dtype).clone()    # never the hook's own tensor
            else:
                leaf.grad.add_(g.to(leaf.dtype))


def _on_gc(phase, info):
    """After a garbage collection, release what dead graphs held here (their rows die in
    compiled code once their wrappers' ids are drained, which flush() does now)."""
    if phase == "stop" and (_FUNCTION_ROWS or _ROW_HOOKS or _LEAF_HOOKS):
        try:
            engine().flush()
            prune()
        except Exception:       # interpreter shutdown
            pass


gc.callbacks.append(_on_gc)


def drive(r, retain):
    """Serve the sweep's callbacks until it finishes; returns its final status."""
    if r == L.E_CALLBACK:
        note_break("tensor hooks or an autograd.Function run during backward (Python)")
    E = engine()
    while r == L.E_CALLBACK:
        row, bits = int(E.err[0]), int(E.err[1])
        try:
            if bits & L.CB_HOOKS:
                _run_row_hooks(row)
            if bits & L.CB_FUNCTION:
                _run_function(row, retain)
        except BaseException:
            E.entry(core.sweep_abort)(E.caddr)
            raise
        E.ensure_room()
        r = E.entry(core.sweep_resume)(E.caddr)
    if r >= 0 and _LEAF_HOOKS:
        finish_leaf_hooks()
    _maybe_prune()
    return r




class _DelayedError(Function):
    """After a once_differentiable backward's result: its own backward raises, as
    PyTorch's DelayedError node does. As in PyTorch its input is the result made a leaf
    that requires grad, not the graph the result came from: differentiating with respect
    to anything before it finds it unused."""

    @staticmethod
    def forward(ctx, result):
        """The result itself (a copy: a Function's output is a new tensor)."""
        return result.clone()

    @staticmethod
    def backward(ctx, grad):
        """Refuse, as PyTorch does."""
        raise RuntimeError("trying to differentiate twice a function that was marked with "
                           "@once_differentiable")


def once_differentiable(fn):
    """Decorate a Function's backward that is not itself differentiable: it runs without
    recording, and differentiating its results again (create_graph=True) raises, as
    PyTorch's torch.autograd.function.once_differentiable."""
    import functools

    @functools.wraps(fn)
    def wrapper(ctx, *args):
        with no_grad():
            outputs = fn(ctx, *args)
        if not GRAD_MODE.on or not any(isinstance(a, Tensor) and a.requires_grad
                                       for a in args):
            return outputs
        single = not isinstance(outputs, tuple)
        wrapped = tuple(_DelayedError.apply(o.detach().requires_grad_(True))
                        if isinstance(o, Tensor) else o
                        for o in ((outputs,) if single else outputs))
        return wrapped[0] if single else wrapped
    return wrapper
