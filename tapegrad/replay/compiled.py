"""tapegrad.compile: record a step once, replay its tape in one compiled call.

The first call (and every guard miss) runs the function eagerly while the engine records
it; later calls whose guards match replay the recording for the new inputs: forward
rows, the backward sweep and the optimizer updates, in one compiled call per call (or
per k steps with `steps=k`). Anything a replay cannot repeat makes the function run
eagerly from then on, with one warning saying what and where.
"""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import dis
import functools
import operator
import inspect
import threading
import warnings

import numpy as np

from .._engine import layout as L
from .._engine.state import GRAD_MODE, RECORDING, engine
from .._front.tensor import Tensor, STRUCTURE, _wrap, _adopt_ref, run as _run_op
from ..ops.registry import BY_NAME
from .plan import Program, Runner, GuardMiss
from . import _run as X
from .recorder import Recorder, GraphBreak
from ..optim.optimizer import Optimizer
from ..autograd.function import _LEAF_HOOKS

_MAX_PLANS = 8


class CompileWarning(UserWarning):
    """tapegrad.compile fell back to eager execution for a function."""


def compile(fn=None, *, steps=None, fuse=True):
    """Compile a step function: `step = tapegrad.compile(step)` or `@tapegrad.compile`.

    With steps=k, the compiled function takes its tensor arguments stacked along a new
    first dim of size k and runs k steps (step i sees argument[i]) in one call, returning
    the list of the k steps' results. fuse=False replays every elementwise op as its own
    loop (see tapegrad/replay/fuse.py)."""
    if fn is None:
        return lambda f: compile(f, steps=steps, fuse=fuse)
    if steps is not None and (not isinstance(steps, int) or steps < 1):
        raise ValueError(f"compile: steps must be a positive int, got {steps!r}")
    return CompiledFunction(fn, steps, bool(fuse))


def _flatten(value, out):
    """The tensors inside value (tuples, lists, dicts), and a rebuild spec."""
    if isinstance(value, Tensor):
        out.append(value)
        return ("t", len(out) - 1)
    if isinstance(value, (tuple, list)):
        return (type(value), [_flatten(v, out) for v in value])
    if isinstance(value, dict):
        return ("d", [(k, _flatten(v, out)) for k, v in value.items()])
    return ("c", value)


def _rebuild(spec, tensors):
    kind, body = spec
    if kind == "t":
        return tensors[body]
    if kind == "c":
        return body
    if kind == "d":
        return {k: _rebuild(v, tensors) for k, v in body}
    items = [_rebuild(v, tensors) for v in body]
    if hasattr(kind, "_fields"):        # a named tuple (max(dim)'s values, indices) takes
        return kind(*items)             # its fields one by one
    return kind(items)


class CompiledFunction:
    def __init__(self, fn, steps, fuse=True):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.steps = steps
        self.fuse = fuse
        self.plans = {}             # guard key -> (Runner, return spec)
        self.eager = None           # the GraphBreak that made this function eager
        self._structure = None      # STRUCTURE[0] when the objects' fingerprint was taken
        self._fingerprint = None
        self._read_sources = None
        self._last_visible = None
        self._same_visible = None   # generated: is the last snapshot still current?
        self._source_exprs = None
        self._fast = None           # _fast_path's function for the last plan replayed
        self.stats = {"recordings": 0, "replays": 0}
        self._lock = threading.RLock()

    def __reduce__(self):
        """pickle and cloudpickle: the function and the options only. Plans, kernel
        addresses and arenas belong to this process: the copy records afresh on its first
        call. One a module defines at top level (@tapegrad.compile on a def) travels by
        reference, as a function does; any other (a lambda, a closure, one defined in
        __main__) carries its function, which cloudpickle sends by value."""
        import sys
        mod = sys.modules.get(getattr(self, "__module__", None) or "")
        qualname = getattr(self, "__qualname__", "")
        obj = mod
        for part in qualname.split("."):
            obj = getattr(obj, part, None)
        if obj is self and mod.__name__ != "__main__":
            return qualname
        return CompiledFunction, (self.fn, self.steps, self.fuse)

    # ------------------------------------------------------------ guards
    def _sources(self):
        """A function listing what the function's code can see: bound self, the globals
        it loads and its closure cells' values."""
        target = inspect.unwrap(self.fn)
        head = []
        if hasattr(target, "__self__"):
            head = [target.__self__]
            target = target.__func__
        code = getattr(target, "__code__", None)
        if code is None:
            self._source_exprs = ([f"_h{i}" for i in range(len(head))],
                                  {f"_h{i}": h for i, h in enumerate(head)})
            return lambda: list(head)
        g = getattr(target, "__globals__", {})
        names = sorted(_loaded_globals(code))
        cells = target.__closure__ or ()
        # one generated list display (every call reads these: no comprehension frames)
        env = {"_g": g, "_M": _MISSING}
        items = []
        for i, h in enumerate(head):
            env[f"_h{i}"] = h
            items.append(f"_h{i}")
        items += [f"_g.get({n!r}, _M)" for n in names]
        for i, c in enumerate(cells):
            env[f"_c{i}"] = c
            items.append(f"_c{i}.cell_contents")
        fast = eval(f"lambda: [{', '.join(items)}]", env)
        self._source_exprs = (items, env)

        def read():
            try:
                return fast()
            except ValueError:              # a cell not bound yet
                return head + [g.get(n, _MISSING) for n in names] + [_cell_value(c)
                                                                     for c in cells]
        return read

    def _visible(self):
        """Key parts for everything the function can see besides its arguments: numbers by
        value, objects by identity, and one level into plain objects and small containers
        (`trainer.model`, a list of layers). Reused while every value is the same object."""
        if self._same_visible is not None:
            try:
                if self._same_visible():
                    return self._last_visible[3]
            except ValueError:              # a cell unbound since
                pass
        if self._read_sources is None:
            self._read_sources = self._sources()
        vals = self._read_sources()
        parts = []
        holders, members = [], []
        for v in vals:
            parts.append(_part(v))
            ms = _members(v)
            if ms:
                holders.append(v)
                members.append(ms)
                parts += [_part(x) for x in ms]
        parts = tuple(parts)
        self._last_visible = (vals, holders, members, parts)
        self._same_visible = self._unchanged_check(vals, holders, members)
        return parts

    def _unchanged_check(self, vals, holders, members):
        """A generated function saying whether every source value and every holder's
        members are still the same objects as in this snapshot (one expression: this
        runs on every replayed call)."""
        items, env = self._source_exprs
        env = dict(env, _all=all, _map=map, _is=operator.is_)
        terms = []
        for i, (expr, v) in enumerate(zip(items, vals)):
            env[f"_v{i}"] = v
            terms.append(f"{expr} is _v{i}")
        for j, (h, ms) in enumerate(zip(holders, members)):
            env[f"_H{j}"], env[f"_ms{j}"] = h, ms
            if isinstance(h, (list, tuple)):
                terms.append(f"len(_H{j}) == {len(ms)}")
                for k, m in enumerate(ms):
                    env[f"_m{j}_{k}"] = m
                    terms.append(f"_H{j}[{k}] is _m{j}_{k}")
            else:
                d = f"_H{j}" if isinstance(h, dict) else f"_H{j}.__dict__"
                terms.append(f"len({d}) == {len(ms)} and _all(_map(_is, {d}.values(), "
                             f"_ms{j}))")
        return eval(f"lambda: {' and '.join(terms) or 'True'}", env)

    def _objects(self, args, kwargs):
        """Modules and optimizers the function can reach (their insides are fingerprinted
        when the structure counter moved)."""
        from ..nn.module import Module
        from ..optim.optimizer import Optimizer
        found = []
        seen = set()
        kinds = (Module, Optimizer)
        values = self._read_sources() + list(args) + list(kwargs.values())
        for v in values:
            for x in [v] + _members(v):
                if isinstance(x, kinds) and id(x) not in seen:
                    seen.add(id(x))
                    found.append(x)
        return found

    def _objects_fingerprint(self, args, kwargs):
        from ..nn.module import Module
        # the tensors the function sees outside its arguments, with the ids they hold now:
        # `t.data = ...` gives the same object a new id, which the plan would not read
        # (it replays the ids it recorded)
        seen = [x for v in self._read_sources() for x in [v] + _members(v)]
        parts = [("t", tuple((id(x), x._i) for x in seen if isinstance(x, Tensor)))]
        for o in self._objects(args, kwargs):
            if isinstance(o, Module):
                parts.append(("m", id(o), tuple((id(p), p._i, p.requires_grad)
                                                for p in o.parameters()),
                              tuple(id(b) for b in o.buffers()),
                              tuple(m.training for m in o.modules())))
            else:
                parts.append(("o", id(o), tuple(tuple((id(p), p._i) for p in g["params"])
                                                for g in o.param_groups),
                              tuple((id(p), tuple((k, v._i if isinstance(v, Tensor) else v)
                                                  for k, v in st.items()))
                                    for p, st in o.state.items())))
        return tuple(parts)

    def _key(self, args, kwargs):
        """(the guard key, the argument tensors' ids). Objects enter the key by id: the
        plan stored under a key holds them (_held), so no other object can take their ids
        while it exists."""
        # the leaves with hooks: a recording that reaches one breaks (Python runs them);
        # one that does not may replay until the set changes
        # (live ones only: a dead leaf's entry stays until a garbage collection prunes it,
        # and the key must not change when that happens)
        meta = engine().meta
        hooked = frozenset(i for i, h in _LEAF_HOOKS.items() if h and meta[i, L.M_REFS] > 0
                           and meta[i, L.M_FLAGS] & L.FL_HOOK) if _LEAF_HOOKS else None
        parts = [GRAD_MODE.on, hooked or None]
        ids = []
        values = args if not kwargs else list(args) + [kwargs[k] for k in sorted(kwargs)]
        for a in values:
            if isinstance(a, Tensor):
                i = a._i
                m = meta[i].tolist()
                nd = m[2]                                   # M_NDIM, then dtype, flags, row
                parts.append((tuple(m[_SHAPE:_SHAPE + nd]), m[3], m[4] & _GUARDED_FLAGS,
                              m[5] < 0, tuple(m[_STRIDE:_STRIDE + nd])))
                ids.append(i)
            else:
                parts.append(_part(a))
        if len(set(ids)) != len(ids):           # the same tensor for two arguments
            parts.append(("same", tuple(ids.index(i) for i in ids)))
        if kwargs:
            parts.append(tuple(sorted(kwargs)))
        parts.append(self._visible())
        if self._structure != STRUCTURE[0]:
            self._fingerprint = self._objects_fingerprint(args, kwargs)
            self._structure = STRUCTURE[0]
        parts.append(self._fingerprint)
        return tuple(parts), ids

    def _held(self, args, kwargs):
        """What a plan keeps alive: every object its key names by id."""
        return ([a for a in list(args) + list(kwargs.values()) if not isinstance(a, _SCALARS)]
                + list(self._last_visible[0]) + list(self._last_visible[1])
                + [x for ms in self._last_visible[2] for x in ms]
                + self._objects(args, kwargs))

    # ------------------------------------------------------------ calls
    def __call__(self, *args, **kwargs):
        fast = self._fast
        if fast is not None and not kwargs:
            out = fast(self, args)
            if out is not _MISSING:
                return out
        if self.eager is not None or RECORDING[0] is not None:
            # (called while another compiled function records: its ops join that recording)
            if self.steps:
                return [self.fn(*a, **kw) for a, kw in _step_args(args, kwargs, self.steps)]
            return self.fn(*args, **kwargs)
        # one call at a time: the guards, the plans and a recording are shared
        with self._lock:
            if self.steps:
                return self._call_steps(args, kwargs)
            key, ids = self._key(args, kwargs)
            plan = self.plans.get(key)
            if plan is None or (plan[0].pg.grad_guards and not plan[0].grads_match()):
                return self._record(args, kwargs)
            runner, spec = plan[0], plan[1]
            out = runner.call1(_tensor_args(args, kwargs))
            if out is None:     # (cannot happen: the key matched, so must the table)
                return self._record(args, kwargs)
            self._fast = self._fast_path(plan, key, len(args),
                                         len(ids) == len(args) and not kwargs)
            self.stats["replays"] += 1
            if runner.stale:
                self._retire(plan, runner)
        if spec is _ONE:                        # the common case: one returned tensor
            return _wrap(out[0]) if runner.pg.ret_own[0] else _adopt_ref(out[0])
        return _results(runner, spec, out)

    def _fast_path(self, plan, key, nargs, tensors_only):
        """The replay of `plan` (just replayed under `key`) for the next calls whose guards
        other than the arguments' are unchanged (the compiled call checks the arguments'
        own): no guard key to build, and no lock but the engine's, which the runner's step
        takes. None: it cannot apply. The function it returns, called with this function
        and the arguments, gives _MISSING when its checks fail (nothing ran). (It takes
        this function as an argument rather than holding it: no reference cycle, so a
        dropped compiled function and its plans go at once.)

        Without this function's own lock a replay may run while another thread records
        this function again or retires the plan: the step checks, under the engine's lock,
        that the plan is still there and that no recording is under way (a recording
        starts under that lock), so it never runs a closed plan nor writes into a
        recording. (The replay count may then miss one replay.)"""
        runner, spec = plan[0], plan[1]
        if not tensors_only or key[1] is not None or runner.step1 is None or runner.pg.rand:
            return None
        grad_mode, fingerprint, visible = key[0], self._fingerprint, self._last_visible[3]
        step1 = runner.step1
        one = spec is _ONE
        grad_guards, own = runner.pg.grad_guards, one and runner.pg.ret_own[0]

        def fast(self, args):
            if (len(args) != nargs or _LEAF_HOOKS or GRAD_MODE.on != grad_mode
                    or self._structure != STRUCTURE[0] or self._fingerprint is not fingerprint
                    or (grad_guards and not runner.grads_match())):
                return _MISSING
            try:                # (self._visible(), inlined)
                same = self._same_visible()
            except ValueError:  # a cell unbound since
                same = False
            if not same or self._last_visible[3] is not visible:
                return _MISSING
            for a in args:
                if not isinstance(a, Tensor):
                    return _MISSING
            out = step1(runner, args)
            if out is None:
                return _MISSING
            self.stats["replays"] += 1
            if runner.stale:
                with self._lock:
                    self._retire(plan, runner)
            if one:
                return _wrap(out[0]) if own else _adopt_ref(out[0])
            return _results(runner, spec, out)
        return fast

    def _retire(self, plan, runner):
        """A call found the recording out of date (the optimizer's parameters with
        gradients changed): the next call records again."""
        if runner.stale:
            self._fast = None
            for key, p in list(self.plans.items()):
                if p is plan:
                    self.plans.pop(key)
            runner.close()

    def _call_steps(self, args, kwargs):
        k = self.steps
        tens = _tensor_args(args, kwargs)
        for a in tens:
            if a.ndim == 0 or a.shape[0] != k:
                raise ValueError(f"compile(steps={k}): every tensor argument needs a first "
                                 f"dim of size {k} (one slice per step), got shape "
                                 f"{list(a.shape)}")
        # the slices' ids (one engine call per tensor); a replay passes them as they are,
        # only the ones Python sees get wrappers (the first step's, for the guard key)
        cols = [_unbind_ids(a) for a in tens]
        views = [[None] * k for _ in tens]
        try:
            return self._replay_steps(args, kwargs, k, cols, views)
        finally:
            release = engine().release
            for col, vs in zip(cols, views):
                for i, v in zip(col, vs):
                    if v is None:
                        release(i)

    def _replay_steps(self, args, kwargs, k, cols, views):
        def step(i):
            """Step i's arguments: each tensor replaced by its slice i."""
            for j, vs in enumerate(views):
                if vs[i] is None:
                    vs[i] = _wrap(cols[j][i])
            it = iter(vs[i] for vs in views)
            a = tuple(next(it) if isinstance(x, Tensor) else x for x in args)
            kw = {n: next(it) if isinstance(kwargs[n], Tensor) else kwargs[n]
                  for n in sorted(kwargs)}
            return a, kw
        a0, kw0 = step(0)
        key = self._key(a0, kw0)[0]
        plan = self.plans.get(key)
        out = []
        start = 0
        if plan is None or (plan[0].pg.grad_guards and not plan[0].grads_match()):
            out.append(self._record(a0, kw0))
            start = 1
            key = self._key(a0, kw0)[0]
            plan = None if self.eager is not None else self.plans.get(key)
            if plan is None:
                return out + [self.fn(*a, **kw) for a, kw in map(step, range(1, k))]
        runner, spec = plan[0], plan[1]
        if start < k:
            try:
                ids = runner(np.array(cols, np.int64).T[start:])
            except GuardMiss:   # (cannot happen: the slices share the first one's guards)
                return out + [self.fn(*a, **kw) for a, kw in map(step, range(start, k))]
            self.stats["replays"] += k - start
            self._retire(plan, runner)
            if spec is _ONE:
                own = runner.pg.ret_own[0]
                out += [_wrap(i) if own else _adopt_ref(i) for i in ids[:, 0].tolist()]
            else:
                out += [_results(runner, spec, row) for row in ids]
        return out

    def _record(self, args, kwargs):
        self.stats["recordings"] += 1
        rec = Recorder()
        with rec:
            result = self.fn(*args, **kwargs)
        if rec.breaks:
            self._fall_back(rec.breaks[0])
            return result
        rets = []
        spec = _flatten(result, rets)
        try:
            program = Program(rec, [a._i for a in _tensor_args(args, kwargs)],
                              [t._i for t in rets], fuse=self.fuse)
        except GraphBreak as b:
            self._fall_back(b)
            return result
        key, ids = self._key(args, kwargs)  # after the step: optimizer state now exists
        self._fast = None
        old = self.plans.pop(key, None)
        if old is not None:
            old[0].close()
        if len(self.plans) >= _MAX_PLANS:
            old = next(iter(self.plans))
            self.plans.pop(old)[0].close()
        if spec == ("t", 0):
            spec = _ONE
        runner = Runner(program)
        runner.set_guard(_arg_guard(ids))
        self.plans[key] = (runner, spec, self._held(args, kwargs))
        return result

    def _fall_back(self, brk):
        self.eager = brk
        self._fast = None
        where = f" at {brk.where}" if brk.where else ""
        warnings.warn(f"tapegrad.compile: {getattr(self.fn, '__qualname__', self.fn)} runs "
                      f"eagerly: {brk.reason}{where}", CompileWarning, stacklevel=3)


def _arg_guard(ids):
    """The argument guard table (tapegrad/replay/_run.py, GW) for the arguments with
    tensor ids `ids`: what the guard key (_key) says of them, checked natively."""
    meta = engine().meta
    g = np.zeros(2 + len(ids) * X.GW, np.int64)
    g[0], g[1] = len(ids), _GUARDED_FLAGS
    for j, i in enumerate(ids):
        m = meta[i]
        nd = int(m[L.M_NDIM])
        row = g[2 + j * X.GW:2 + (j + 1) * X.GW]
        row[:4] = nd, m[L.M_DTYPE], m[L.M_FLAGS] & _GUARDED_FLAGS, m[L.M_ROW] < 0
        row[4:4 + nd] = m[_SHAPE:_SHAPE + nd]
        row[4 + L.MAXD:4 + L.MAXD + nd] = m[_STRIDE:_STRIDE + nd]
        row[4 + 2 * L.MAXD] = ids.index(i)
    return g


_MISSING = object()
_ONE = ("t", 0)         # the return spec of a function returning one tensor
_SHAPE, _STRIDE = L.M_SHAPE, L.M_STRIDE
_GUARDED_FLAGS = L.FL_REQ | L.FL_HOOK     # an argument's requires_grad and whether it has hooks
_SCALARS = (int, float, bool, str, bytes, type(None), complex)


def _part(v):
    """A key part: numbers and strings by value, anything else by identity (the plan
    keeps it alive, see CompiledFunction._held)."""
    return (type(v), v) if isinstance(v, _SCALARS) else id(v)


def _cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:
        return _MISSING


def _members(v):
    """One level into v: a plain object's attributes, a small list/tuple/dict's items
    (functions, classes and modules are looked into no further)."""
    if isinstance(v, (list, tuple)):
        return list(v) if len(v) <= 64 else []
    if isinstance(v, dict):
        return list(v.values()) if len(v) <= 64 else []
    if isinstance(v, (Tensor, _SCALARS, Optimizer)) or inspect.ismodule(v) \
            or isinstance(v, type) or callable(v) or not hasattr(v, "__dict__"):
        return []           # (modules' and optimizers' insides are fingerprinted)
    d = vars(v)
    return list(d.values()) if len(d) <= 64 else []


def _loaded_globals(code):
    """Names the code (and code nested in it) loads as globals: not co_names, which also
    holds attribute names."""
    names = set()
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            names.add(ins.argval)
    for c in code.co_consts:
        if inspect.iscode(c):
            names |= _loaded_globals(c)
    return names


def _tensor_args(args, kwargs):
    return [a for a in list(args) + [kwargs[k] for k in sorted(kwargs)]
            if isinstance(a, Tensor)]


def _unbind_ids(t):
    """The ids of t's slices along dim 0, each with the reference a wrapper would hold."""
    engine().reserve_args(t.shape[0])
    op = BY_NAME["unbind"]
    return _run_op(op, t._i, iargs=op.pack(dim=0), all_outputs=True)


def _step_args(args, kwargs, k):
    """Per step i: the arguments with every tensor replaced by its slice [i] (one unbind
    per tensor: one engine call for the k views)."""
    cols = [a.unbind(0) if isinstance(a, Tensor) else (a,) * k for a in args]
    kcols = {n: (v.unbind(0) if isinstance(v, Tensor) else (v,) * k)
             for n, v in kwargs.items()}
    return [(tuple(c[i] for c in cols), {n: c[i] for n, c in kcols.items()})
            for i in range(k)]


def _results(runner, spec, ids):
    ids = ids.tolist() if hasattr(ids, "tolist") else ids
    tensors = []
    for i, own in zip(ids, runner.pg.ret_own):
        tensors.append(_wrap(i) if own else _adopt_ref(i))
    return _rebuild(spec, tensors)
