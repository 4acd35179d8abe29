"""From a recording to a replayable program, and running it.

The event log is read in order with a map from tensor id to slot (ids are recycled, so
the map is updated at every birth). Every op input is then an argument of the function,
a tensor from outside (a parameter, a buffer), or the output of an earlier event; a
tensor born any other way (tapegrad.tensor(), zeros(), a NumPy-computed result) would be
replayed as a stale constant, so it is a graph break.
"""
import heapq

import numpy as np

from .._engine import layout as L
from .._engine import core
from .._engine.cache import kernel_cache
from .._engine.lowlevel import native_address
from .._engine import mt19937
from .._engine.state import (engine, RECORDING, _OP_SIG, _SWEEP_SIG, _ENTRY_SIGS,
                             native_entry, EngineError)
from .._front.generator import default_generator
from ..ops.registry import OPS
from .fuse import fuse as fuse_elementwise, fuse_bias
from .recorder import (GraphBreak, PY_OPT, PY_GRAD, PY_GRADNONE, PY_RAND, PY_IADD,
                       PY_CONST, PY_HOST)
from ..optim.optimizer import Optimizer

with kernel_cache():
    from . import _run as X

_UNKNOWN = -2
_ARG, _EXT, _OWN = 0, 1, 2
_RETRY = (L.E_NEED_KERNEL, L.E_GROW_META, L.E_GROW_STOR, L.E_GROW_TAPE)
_GRAVEYARD = []     # arenas of dropped plans whose blocks some tensor still uses


def _bury(arena, occ):
    """Keep a dropped plan's arena while a tensor uses it; let go of the ones no tensor
    uses any more (their last tensors were released since)."""
    _GRAVEYARD[:] = [(a, o) for a, o in _GRAVEYARD if o.any()]
    if occ is not None and occ.any():
        _GRAVEYARD.append((arena, occ))
_EVLEN = {L.EV_BIRTH: 2, L.EV_ALIAS: 4, L.EV_PY: 4, L.EV_ALLOC: 3, L.EV_FREE: 3}


def _addr(a):
    """a's data address (ctypes.data costs microseconds: a replay's call cares)."""
    return a.__array_interface__["data"][0]


def _aligned(nb):
    return (nb + 63) // 64 * 64


class Program:
    """A recorded step made replayable: instructions over slots."""

    def __init__(self, rec, arg_ids, ret_ids, fuse=True):
        from .._front.tensor import _adopt_ref
        self.kinds = []             # slot -> _ARG / _EXT / _OWN
        self.ext = []               # wrappers keeping outside tensors alive (and their ids)
        self.optim = []             # (optimizer, group index, ids table, hyper array,
                                    #  ids of the group's parameters the table left out)
        self.rand = []              # dropout draws, in order (each per step)
        self.host = []              # host callables (state.host_call), by I_HOST index
        code = []
        uses = []                   # per instruction: slots read
        defs = []                   # per instruction: slots defined
        where = {}
        self.arg_slots = []
        for i in arg_ids:
            if i not in where:
                where[i] = self._slot(_ARG)
            self.arg_slots.append(where[i])

        def resolve(i, what):
            s = where.get(i)
            if s is None:
                s = where[i] = self._slot(_EXT)
                self.ext.append((s, _adopt_ref(i)))
            elif s == _UNKNOWN:
                raise GraphBreak(f"{what} uses a tensor made inside the function by something "
                                 "other than a tensor op (tapegrad.tensor/zeros/from_numpy, or "
                                 "an integer or indexing result computed with NumPy): a replay "
                                 "would reuse its first value", born.get(i))
            return s

        born = {}                   # id -> where Python made it (for the break's message)
        self.grad_guards = []       # (outside tensor id, has a .grad) when the step starts
        grads_touched = False
        log = rec.log
        p, end = 0, rec.nlog
        while p < end:
            ev = log[p]
            if ev == L.EV_BIRTH:
                i = int(log[p + 1])
                where[i] = _UNKNOWN
                born[i] = rec.created_at.get(i)
                p += 2
            elif ev == L.EV_OP:
                n = int(log[p + 1])
                op = int(log[p + 2])
                od = OPS[op]
                if od.kind == "python":
                    raise GraphBreak(f"autograd.Function ({od.grad_fn})")
                a, b, c = (int(x) for x in log[p + 3:p + 6])
                flags = int(log[p + 7])
                nouts = int(log[p + 8])
                outs = [int(x) for x in log[p + 9:p + 9 + nouts]]
                sa = resolve(a, od.name)
                sb = resolve(b, od.name) if b >= 0 else -1
                sc = resolve(c, od.name) if c >= 0 else -1
                if flags & L.OPF_INPLACE:
                    osl = [sa]
                    for o in outs:
                        where[o] = sa
                    d = []
                else:
                    osl = [self._slot(_OWN) for _ in outs]
                    for o, s in zip(outs, osl):
                        where[o] = s
                    d = osl
                iargs = [int(x) for x in log[p + 9 + nouts:p + n]]
                code.append([X.I_OP, 10 + nouts + len(iargs), op, sa, sb, sc,
                             int(log[p + 6]), flags, nouts, len(iargs)] + osl + iargs)
                uses.append([s for s in (sa, sb, sc) if s >= 0])
                defs.append(d)
                p += n
            elif ev == L.EV_ALIAS:
                kind, src, new = (int(x) for x in log[p + 1:p + 4])
                s = resolve(src, "detach()" if kind == 0 else ".data")
                d = where[new] = self._slot(_OWN)
                code.append([X.I_ALIAS, 5, kind, s, d])
                uses.append([s])
                defs.append([d])
                p += 4
            elif ev == L.EV_SWEEP:
                n = int(log[p + 1])
                nroots, ncap, mode, retain = (int(x) for x in log[p + 2:p + 6])
                if mode != L.MODE_BACKWARD or ncap:
                    raise GraphBreak("autograd.grad (its results are new tensors for Python)")
                roots = [resolve(int(x), "backward()") for x in log[p + 6:p + 6 + nroots]]
                seeds = [resolve(int(x), "backward(gradient=)") if x >= 0 else -1
                         for x in log[p + 6 + nroots:p + n]]
                code.append([X.I_SWEEP, 4 + 2 * nroots, nroots, retain] + roots + seeds)
                grads_touched = True
                uses.append(roots + [s for s in seeds if s >= 0])
                defs.append([])
                p += n
            elif ev == L.EV_PY:
                what, x, y = (int(v) for v in log[p + 1:p + 4])
                if what == PY_OPT:
                    opt, gi, ids = rec.objects[x]
                    ids = ids.copy()
                    ids[:, 5] = 0           # state buffers exist now (NEW column)
                    h = opt.hyper_values(opt.param_groups[gi])
                    inside = set(ids[:, 0].tolist())
                    left = np.array([p._i for p in opt.param_groups[gi]["params"]
                                     if p._i not in inside] + [0], np.int64)
                    self.optim.append((opt, gi, ids, h, left))
                    fn = native_address(opt.kernel, "int64(int64, int64, int64, int64)")
                    code.append([X.I_OPT, 8, fn, ids.ctypes.data, len(ids), h.ctypes.data,
                                 left.ctypes.data, len(left) - 1])
                    uses.append([])
                    defs.append([])
                elif what == PY_GRAD:
                    s = resolve(x, ".grad")
                    if not grads_touched and self.kinds[s] == _EXT:
                        # read before anything in the step changed gradients: whether there
                        # is one is the state the step started in, a guard
                        self.grad_guards.append((x, y >= 0))
                    elif y < 0:
                        raise GraphBreak(".grad read while it is None after this step's "
                                         "backward or zero_grad (Python may branch on it)")
                    if y >= 0:
                        d = where[y] = self._slot(_OWN)
                        code.append([X.I_GRAD, 4, s, d])
                        uses.append([s])
                        defs.append([d])
                elif what == PY_GRADNONE:
                    grads_touched = True
                    s = resolve(x, "zero_grad()")
                    code.append([X.I_GRADNONE, 4, s, y])
                    uses.append([s])
                    defs.append([])
                elif what == PY_IADD:
                    s = resolve(x, "an integer add_")
                    code.append([X.I_IADD, 4, s, y])
                    uses.append([s])
                    defs.append([])
                elif what == PY_HOST:
                    self.host.append(rec.objects[x])
                    code.append([X.I_HOST, 3, len(self.host) - 1])
                    uses.append([])
                    defs.append([])
                elif what == PY_CONST:          # (no instruction: a constant of the plan)
                    s = where[x] = self._slot(_EXT)
                    self.ext.append((s, rec.held[y]))
                elif what == PY_RAND:
                    keep, scale, shape, dt = rec.objects[y]
                    d = where[x] = self._slot(_OWN)
                    bits = np.array([keep, scale], np.float64).view(np.int64).tolist()
                    code.append([X.I_RAND, 8 + len(shape), d, dt, len(shape), bits[0], bits[1],
                                 len(self.rand)] + list(shape))
                    self.rand.append(keep)
                    uses.append([])
                    defs.append([d])
                p += 4
            elif ev in (L.EV_ALLOC, L.EV_FREE):
                p += 3
            else:
                raise AssertionError(f"unknown event {ev} at {p}")

        # what the function returns
        self.ret_slots, self.ret_own = [], []
        seen = set()
        for i in ret_ids:
            s = resolve(i, "the returned value")
            own = self.kinds[s] == _OWN and s not in seen
            seen.add(s)
            self.ret_slots.append(s)
            self.ret_own.append(int(own))
        self.fused = []             # per fused op: its members' op names
        if fuse:
            code, uses, defs, self.fused = fuse_bias(code, uses, defs, self.ret_slots)
            code, uses, defs, more = fuse_elementwise(code, uses, defs, self.ret_slots)
            self.fused += more
        # free every owned slot right after its last use (returned ones never)
        last = {}
        for k, (u, d) in enumerate(zip(uses, defs)):
            for s in d:
                last[s] = k
            for s in u:
                last[s] = k
        frees = {}
        for s, k in last.items():
            if self.kinds[s] == _OWN and s not in seen:
                frees.setdefault(k, []).append(s)
        prog = []
        for k, ins in enumerate(code):
            prog += ins
            if k in frees:
                prog += [X.I_FREE, 2 + len(frees[k])] + frees[k]
        self.prog = np.array(prog, np.int64)
        self.nslots = len(self.kinds)
        self.ninstr = len(code)

    def _slot(self, kind):
        self.kinds.append(kind)
        return len(self.kinds) - 1


_C_PLANN, _C_PLANK = L.C_PLANN, L.C_PLANK


def _hyper_reader(optim):
    """A generated function returning every optimizer group's hyper-parameters as a tuple
    of tuples (read on every replayed call: one expression, no per-group calls where the
    optimizer reads its group's values by name)."""
    env, items = {}, []
    for k, (opt, gi, _, _, _) in enumerate(optim):
        env[f"_o{k}"] = opt
        g = f"_o{k}.param_groups[{gi}]"
        if type(opt)._hyper is Optimizer._hyper:
            items.append(f"(_g := {g}, (" + "".join(f"_g[{n!r}], " for n in opt.hyper)
                         + "))[1]")
        else:
            items.append(f"tuple(_o{k}._hyper({g}))")
    return eval(f"lambda: ({''.join(i + ', ' for i in items)})", env)


class GuardMiss(Exception):
    """The arguments are not the ones the plan was recorded for; nothing ran."""


def small_natives(which=None):
    """The addresses of the engine entries the executor calls besides op_entry and sweep,
    those in which (default all): H_* -> address. Each compiles on first use, when a
    program first has an instruction that calls it (_natives_needed): a cold start
    compiles only the ones its steps need."""
    entries = {X.H_RELEASE: (core.release_id, _ENTRY_SIGS["release_id"]),
               X.H_DETACH: (core.detach, _ENTRY_SIGS["detach"]),
               X.H_DATA: (core.data_alias, _ENTRY_SIGS["data_alias"]),
               X.H_NEW: (core.new_tensor, _ENTRY_SIGS["new_tensor"]),
               X.H_FILL: (mt19937.fill_dropout, mt19937.FILL_SIG)}
    with kernel_cache():
        return {h: native_address(*entries[h]) for h in entries
                if which is None or h in which}


def _natives_needed(prog):
    """The small natives (H_*) the instructions of prog call."""
    need = set()
    pc = 0
    while pc < len(prog):
        code = int(prog[pc])
        if code in (X.I_FREE, X.I_GRADNONE):
            need.add(X.H_RELEASE)
        elif code == X.I_ALIAS:
            need.add(X.H_DATA if prog[pc + 2] else X.H_DETACH)
        elif code == X.I_RAND:
            need.update((X.H_NEW, X.H_FILL))
        pc += int(prog[pc + 1])
    return need


class Runner:
    """Runs a Program for k steps per call; owns its buffers and its memory plan."""

    def __init__(self, program):
        self.pg = program
        E = engine()
        E.compile_core()
        with kernel_cache():
            natives = {X.H_OPFN: native_address(core.op_entry, _OP_SIG),
                       X.H_SWEEPFN: native_address(core.sweep, _SWEEP_SIG)}
        natives.update(small_natives(_natives_needed(program.prog)))
        self.run = native_entry(X.run, X.RUN_SIG)
        self.H = np.zeros(X.HW, np.int64)
        self.state = np.zeros(4, np.int64)
        self.slots = np.full(max(program.nslots, 1), -1, np.int64)
        self.argslots = np.array(program.arg_slots + [0], np.int64)
        self.retslots = np.array(program.ret_slots + [0], np.int64)
        self.retown = np.array(program.ret_own + [0], np.int64)
        self._ret1 = np.zeros(len(program.ret_slots) + 1, np.int64)[:-1].reshape(1, -1)
        self._arg1 = np.zeros((1, len(program.arg_slots) + 1), np.int64)
        self._noseeds = np.zeros(1, np.int64)
        self._a1, self._r1, self._s0 = _addr(self._arg1), _addr(self._ret1), _addr(self._noseeds)
        self._arg1_mv = memoryview(self._arg1[0])
        self._ret1_mv = memoryview(self._ret1[0])
        self._Hmv = None
        self._one_step = False      # H holds call1's step set-up
        self._ctx, self._caddr, self._engine_lock = memoryview(E.ctx), E.caddr, E.lock
        self._hyper = None          # the hyper-parameters last written
        self._read_hyper = _hyper_reader(program.optim)
        self.guard = None
        self.plan = None            # memory plan: per allocation (address, bytes, occupancy)
        self.step1 = None           # call1's fast branch, once the plan exists
        self.stale = False          # a call found the recording out of date: record again
        self._opt_at = {}           # pc of an I_OPT -> (optimizer, group index)
        pc, k = 0, 0
        while pc < len(program.prog):
            if program.prog[pc] == X.I_OPT:
                self._opt_at[pc] = program.optim[k][:2]
                k += 1
            pc += int(program.prog[pc + 1])
        self.arena = None
        self.occ = None
        H = self.H
        self.haddr = H.ctypes.data
        H[X.H_NARGS] = len(program.arg_slots)
        H[X.H_ARGSLOTS] = self.argslots.ctypes.data
        H[X.H_NRET] = len(program.ret_slots)
        H[X.H_RETSLOTS] = self.retslots.ctypes.data
        H[X.H_RETOWN] = self.retown.ctypes.data
        for h, addr in natives.items():
            H[h] = addr
        H[X.H_NSEEDS] = len(program.rand)
        H[X.H_STATE] = self.state.ctypes.data
        H[X.H_PROG] = program.prog.ctypes.data
        H[X.H_NPROG] = len(program.prog)
        H[X.H_SLOTS] = self.slots.ctypes.data
        H[X.H_NSLOTS] = len(self.slots)
        for s, w in program.ext:
            self.slots[s] = w._i
        self._Hmv = memoryview(H)

    def grads_match(self):
        """Whether each .grad the recording read before changing any is (or is not) there
        now as it was then."""
        M = engine().meta
        return all((M[i, L.M_GRAD] >= 0) == has for i, has in self.pg.grad_guards)

    def call1(self, args):
        """One step with argument tensors `args` (Tensors); returns the returned ids, or
        None when nothing ran (the arguments miss the guard table)."""
        if self.step1 is not None and not self.pg.rand:
            return self.step1(self, args)
        with self._engine_lock:
            self._arg1[0, :len(args)] = [a._i for a in args]
            try:
                return self(self._arg1)[0].tolist()
            except GuardMiss:
                return None

    def _make_step1(self):
        """The replay of one step for argument tensors `args` (Tensors, checked by the
        caller) once the memory plan exists, without dropout: the returned ids, or None
        when nothing ran (the arguments miss the guard table, the plan was dropped, or a
        recording started in another thread). It is the path of every replayed call
        (CompiledFunction's fast path calls it), so what it reads is bound once; it takes
        the runner rather than holding it: no reference cycle. The engine's lock alone
        guards the runner's buffers: every writer of them holds it."""
        read_hyper, lock, run, caddr, haddr = (self._read_hyper, self._engine_lock,
                                               self.run, self._caddr, self.haddr)
        ret, a1 = self._ret1_mv, self._arg1_mv

        def step1(self, args):
            hps = read_hyper()
            with lock:
                if self.plan is None or RECORDING[0] is not None:
                    return None
                if hps != self._hyper:
                    self._write_hyper(hps)
                if not self._one_step:
                    self._set_steps(1, self._a1, self._r1, self._s0)
                    self._one_step = True
                j = 0
                for a in args:
                    a1[j] = a._i
                    j += 1
                try:
                    r = run(caddr, haddr)
                    if r != 0 and not self._served(r):
                        return None
                except BaseException:
                    self._end_call()
                    raise
                return ret.tolist()
        return step1

    def _served(self, r):
        """A call stopped on status r: go on with Python serving the statuses to the end
        of the call (True), or False for a guard miss (nothing ran)."""
        if r == X.E_GUARD:
            return False
        try:
            self._drive(engine(), r)
        finally:
            self._end_call()
        return True

    def _end_call(self):
        """What the executor clears when a call ends, for a call Python ended: the plan's
        ctx words (no later allocation may take a block of it) and the resume state."""
        c = self._ctx
        c[_C_PLANN] = 0
        c[_C_PLANK] = 0
        self.state[:2] = 0

    def _set_steps(self, k, argids, retids, seeds):
        H = self._Hmv
        H[X.H_STEPS] = k
        H[X.H_ARGIDS] = argids
        H[X.H_RETIDS] = retids
        H[X.H_SEEDS] = seeds

    def _write_hyper(self, hps=None):
        """Hyper-parameters are read at every call (a scheduler changes them), written
        to the kernels' table when they changed."""
        if hps is None:
            hps = self._read_hyper()
        if hps != self._hyper:
            for (_, _, _, h, _), hp in zip(self.pg.optim, hps):
                h[:len(hp)] = hp
            self._hyper = hps

    def set_guard(self, guard):
        """The argument guard table (see _run.GW) every call checks before it runs."""
        self.guard = guard
        self.H[X.H_GUARD] = guard.ctypes.data

    def __call__(self, argids):
        """argids: (k, nargs) int64. Returns (k, nret) ids of the returned tensors (owned
        ones carry the reference their wrapper takes)."""
        pg = self.pg
        k = len(argids)
        with self._engine_lock:
            self._write_hyper()
            if k == 1:
                retids = self._ret1
                if argids is not self._arg1:
                    self._arg1[0, :len(pg.arg_slots)] = argids[0]
                argids = self._arg1
            else:
                nret = len(pg.ret_slots)
                retids = np.zeros(k * nret + 1, np.int64)[:k * nret].reshape(k, nret)
                argids = np.ascontiguousarray(argids, np.int64)
            seeds = self._seeds(k) if pg.rand else self._noseeds
            if self.plan is None:
                self._run(argids[:1], retids[:1], seeds, measure=True)
                if k > 1:
                    self._run(argids[1:], retids[1:], seeds[len(pg.rand):], measure=False)
            else:
                self._run(argids, retids, seeds, measure=False)
        return retids[:, :len(pg.ret_slots)]

    def _seeds(self, k):
        """What each step's dropout draws from: the default generator's state (its
        address), drawn from as the step runs, so replayed masks are the eager ones."""
        return np.full(k * len(self.pg.rand) + 1, default_generator._addr, np.int64)

    def _run(self, argids, retids, seeds, measure):
        """(The caller, __call__, holds the engine's lock.)"""
        E = engine()
        self._one_step = False
        self._set_steps(len(argids), self._a1 if argids is self._arg1 else _addr(argids),
                        self._r1 if retids is self._ret1 else _addr(retids),
                        self._s0 if seeds is self._noseeds else _addr(seeds))
        st = self.state
        st[0] = st[1] = 0
        c = E.ctx
        if measure:
            log = np.zeros(1 << 20, np.int64)
            c[L.C_RECN] = 0
            c[L.C_RECCAP] = len(log)
            c[L.C_REC] = log.ctypes.data
            try:
                self._drive(E)
            finally:
                nlog = int(c[L.C_RECN])
                c[L.C_REC] = 0
            if nlog > 0:
                self._make_plan(log[:nlog])
        else:
            try:
                self._drive(E)
            finally:
                self._end_call()

    def _drive(self, E, r=None):
        """Run (or, given a status r, go on from it) until the call is done."""
        while True:
            if r is None:
                r = self.run(E.caddr, self.haddr)
            if r == 0:
                return
            if r == X.E_GUARD:
                raise GuardMiss
            if r == X.E_HOST:           # a host call: Python's part, then on after it
                pc = int(self.state[X.S_PC])
                try:
                    self.pg.host[int(self.pg.prog[pc + 2])]()
                except BaseException:
                    self._abandon()
                    raise
                self.state[X.S_PC] = pc + int(self.pg.prog[pc + 1])
                r = None
                continue
            from ..autograd.function import drive
            from ..autograd import _sweep_error
            if r in _RETRY:
                E.handle(r)
                r = None
                continue
            pc = int(self.state[X.S_PC])
            prog = self.pg.prog
            if r == L.E_CALLBACK:     # hooks added after recording: Python serves them
                retain = bool(prog[pc + 3])
                r2 = drive(r, retain)
                if r2 >= 0:
                    self.state[X.S_PC] = pc + int(prog[pc + 1])
                    r = None
                    continue
                r = r2
            if r in (X.E_OPT_STALE, X.E_OPTIMIZER) and prog[pc] == X.I_OPT:
                # the parameters with gradients (or the options needing state) changed
                # since the recording: this group's update runs eagerly, the plan retires
                self.stale = True
                opt, gi = self._opt_at[pc]
                try:
                    opt.step_group(gi)
                except Exception:
                    self._abandon()
                    raise
                self.state[X.S_PC] = pc + int(prog[pc + 1])
                r = None
                continue
            err = E.err.copy()
            code = int(prog[pc])
            if code == X.I_OP:          # the error eager would raise for these operands
                from .._front.tensor import op_error
                op = OPS[int(prog[pc + 2])]
                a = int(self.slots[prog[pc + 3]])
                b = int(self.slots[prog[pc + 4]]) if prog[pc + 4] >= 0 else -1
                exc = op_error(EngineError(r, err), op, a, b)
                self._abandon()
                raise exc
            self._abandon()
            if code == X.I_SWEEP:
                raise _sweep_error(r, err)
            if r == X.E_OPTIMIZER:
                raise RuntimeError("tapegrad.compile: an optimizer step failed in the replay "
                                   f"(status {int(self.state[X.S_DETAIL])}): parameters and "
                                   "gradients must be contiguous and the state complete")
            if r == X.E_NO_GRAD:
                raise RuntimeError("tapegrad.compile: the function reads .grad of a tensor "
                                   "that has none at this point of the replay")
            raise EngineError(r, E.err.copy())

    def _abandon(self):
        """A failed call: give back what the slots own, so nothing leaks."""
        E = engine()
        for s, kind in enumerate(self.pg.kinds):
            if kind == _OWN and self.slots[s] >= 0:
                E.release(int(self.slots[s]))
                self.slots[s] = -1
        self.state[:] = 0

    # ------------------------------------------------------------ memory plan
    def _make_plan(self, log):
        """Blocks for one step's allocations, by lifetime: an allocation reuses a block of
        its size freed earlier in the step; one still alive at the end of the step (a
        returned value, a .grad) keeps its own block (and the occupancy check makes the
        next step malloc if that block is still in use then)."""
        allocs = []                 # [bytes, first event, last event]
        open_ = {}
        p = j = 0
        while p < len(log):
            ev = log[p]
            if ev == L.EV_ALLOC:
                open_[int(log[p + 1])] = len(allocs)
                allocs.append([int(log[p + 2]), j, 1 << 62])
            elif ev == L.EV_FREE:
                a = open_.pop(int(log[p + 1]), None)
                if a is not None:
                    allocs[a][2] = j
            p += _EVLEN.get(int(ev)) or int(log[p + 1])
            j += 1
        if not allocs:
            return
        blocks = []                 # [bytes, offset]
        free_by_size = {}
        release = []                # heap of (event, block)
        assign = []
        for a, (nb, start, end) in enumerate(allocs):
            while release and release[0][0] <= start:
                _, b = heapq.heappop(release)
                free_by_size.setdefault(blocks[b][0], []).append(b)
            pool = free_by_size.get(nb)
            if pool:
                b = pool.pop()
            else:
                off = blocks[-1][1] + _aligned(blocks[-1][0]) if blocks else 0
                blocks.append([nb, off])
                b = len(blocks) - 1
            assign.append(b)
            heapq.heappush(release, (end, b))
        total = blocks[-1][1] + _aligned(blocks[-1][0])
        self.arena = np.zeros(total // 8 + 8, np.int64)
        self.occ = np.zeros(len(blocks), np.int64)
        base = self.arena.ctypes.data
        plan = np.zeros(len(allocs) * L.PLW, np.int64).reshape(-1, L.PLW)
        for a, b in enumerate(assign):
            plan[a, L.PL_ADDR] = base + blocks[b][1]
            plan[a, L.PL_BYTES] = allocs[a][0]
            plan[a, L.PL_OCC] = self.occ.ctypes.data + 8 * b
        self.plan = plan.reshape(-1)
        self.H[X.H_PLAN] = self.plan.ctypes.data
        self.H[X.H_PLANN] = len(allocs)
        self.arena_bytes = total
        self.step1 = self._make_step1()

    def close(self):
        """The plan is dropped, or the runner dies with its compiled function: the arena
        stays (in the graveyard) while a tensor still lives in it, a returned value or a
        parameter's .grad. Before, a dropped compiled function freed it under them: they
        read freed memory, and their release wrote into it. (Under the engine's lock: a
        replay in another thread checks the plan under it.)"""
        with self._engine_lock:
            _bury(self.arena, self.occ)
            self.arena = self.occ = None
            self.plan = self.step1 = None
            self.H[X.H_PLANN] = 0

    def __del__(self):
        try:
            self.close()
        except Exception:       # interpreter shutdown: the module may be gone
            pass
