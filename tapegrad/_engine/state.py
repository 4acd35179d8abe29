"""The Python half of the engine: owns the tables, grows them, loads kernels on demand,
and turns kernel status codes into retries or exceptions.

Kernels see the tables only through the addresses in ``ctx``; growing a table is a
Python reallocation plus an address update, with no recompilation.
"""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import itertools
import warnings
import os
import threading

import numpy as np

from . import layout as L
from . import sizes
from .cache import kernel_cache
from .lowlevel import native_address, has_entry

with kernel_cache():
    from . import core
    from . import threads
    from . import mt19937  # noqa: F401  (declared here so its cache lands with the engine's)


class EngineError(Exception):
    """A kernel status that the front turns into a PyTorch-style exception."""

    def __init__(self, code, err):
        super().__init__(code)
        self.code = code
        self.err = err


_OP_SIG = "int64(int64, int64, int64, int64, float64, int64)"
_ENTRY_SIGS = {"new_tensor": "int64(int64, int64, int64, boolean)",
               "adopt": "int64(int64, int64, int64, int64, int64, int64)",
               "detach": "int64(int64, int64)", "data_alias": "int64(int64, int64)",
               "contiguous_copy": "int64(int64, int64)", "drain_queue": "int64(int64)",
               "sweep_resume": "int64(int64)", "sweep_abort": "int64(int64)",
               "grad_of_row": "int64(int64, int64, int64)",
               "add_to_edge": "int64(int64, int64, int64, int64)",
               "take_leaf_hook_grad": "int64(int64, int64)",
               "release_id": "int64(int64, int64)", "contiguous_id": "int64(int64, int64)",
               "incref_meta": "int64(int64, int64)",
               "bump_version_id": "int64(int64, int64)",
               "incref_row": "int64(int64, int64)", "decref_row": "int64(int64, int64)"}
_SWEEP_SIG = "int64(int64, int64, int64, int64, boolean)"


def _entry(dispatcher, sig):
    """The compiled function's C-level entry point: skips Numba's type dispatch. Only
    ever called with arguments tapegrad builds itself (ints and floats)."""
    if not has_entry(dispatcher):
        raise TypeError(f"tapegrad: {dispatcher.py_func.__name__} has no Python entry "
                        "point: declare it with lowlevel.jit_entry")
    dispatcher.compile(sig)
    return dispatcher.overloads[dispatcher.signatures[-1]].entry_point


class Engine:
    def __init__(self, meta_cap=1024, stor_cap=1024, tape_cap=1024):
        # One engine per process. A compiled call holds the GIL, so kernels never race;
        # this lock makes the multi-step paths (write int arguments, then call; grow a
        # table and retry) atomic across threads. The one-call fast paths need no lock
        # (their outputs go to outs_solo, see layout.OPF_SOLO).
        self.lock = threading.RLock()
        self.ctx = np.zeros(L.NCTX, np.int64)
        self.caddr = self.ctx.ctypes.data
        self.fwd = np.zeros(L.MAXOPS * L.NKSLOT, np.int64)
        self.bwd = np.zeros(L.MAXOPS * L.NKSLOT, np.int64)
        self.desc = np.zeros(L.DW, np.int64)
        self.opinfo = np.zeros((L.MAXOPS, L.OIW), np.int64)
        self.err = np.zeros(16, np.int64)
        self.iargs = np.zeros(64, np.int64)
        self.outs = np.zeros(64, np.int64)
        self.meta = np.zeros((0, L.MW), np.int64)
        self.stor = np.zeros((0, L.SW), np.int64)
        self.tape = np.zeros((0, L.RW), np.int64)
        self.fattr = np.zeros(0, np.float64)
        c = self.ctx
        c[L.C_FWD] = self.fwd.ctypes.data
        c[L.C_BWD] = self.bwd.ctypes.data
        c[L.C_OPINFO] = self.opinfo.ctypes.data
        c[L.C_ERR] = self.err.ctypes.data
        self.iargs_mv, self.outs_mv = memoryview(self.iargs), memoryview(self.outs)
        self.outs_solo = np.zeros(len(self.outs), np.int64)
        c[L.C_OUTS_SOLO] = self.outs_solo.ctypes.data
        c[L.C_IARGS] = self.iargs.ctypes.data
        c[L.C_IARGS_CAP] = len(self.iargs)
        c[L.C_OUTS] = self.outs.ctypes.data
        c[L.C_OUTS_CAP] = len(self.outs)
        c[L.C_DESC] = self.desc.ctypes.data
        c[L.C_META_FREE] = c[L.C_STOR_FREE] = c[L.C_TAPE_FREE] = -1
        c[L.C_INPLACE] = -1
        c[L.C_MAX_BYTES] = sizes.alloc_limit()
        self._grow("meta", meta_cap)
        self._grow("stor", stor_cap)
        self._grow("tape", tape_cap)
        self.ext = {}            # storage id -> the NumPy array whose memory it adopted
        # ids whose Python wrapper died (a ring of id + 1, see layout.C_RELQ): a writer
        # claims a slot with next() on a counter (atomic in CPython, so threads never share
        # a slot) and writes through a memoryview, the cheapest write Python has
        self.relq = np.zeros(4096, np.int64)
        c[L.C_RELQ] = self.relq.ctypes.data
        c[L.C_RELQ_CAP] = len(self.relq)
        self.relq_mv = memoryview(self.relq)
        self.relq_slot = itertools.count().__next__
        self.kernel_loader = None    # set by the front: (opcode, slot) -> (fwd, bwd) cfuncs
        self.has_row_kernels = None  # ... opcode -> whether the op has row-broadcast loops
        self._kernels = {}
        # op_entry and sweep (most of a cold start) compile on first use, not at import,
        # so a program can start other work (the demo compiles op kernels in a second
        # process meanwhile); the front calls them as E.op and E.sweep, so it reaches the
        # compiled entries once they exist
        self.op = self._first_op
        self.sweep = self._first_sweep
        self.entries = {}
        c[L.C_PAR_MIN] = PAR_MIN
        self.set_num_threads(_default_threads())

    def set_num_threads(self, n):
        """Threads for large elementwise loops (see threads.py)."""
        with self.lock:
            self.ctx[L.C_NTHREADS] = n
            self.ctx[L.C_WORKER] = threads.worker_address() if n > 1 else 0

    def compile_core(self):
        """Compile (or load from the cache) the two engine entry points now."""
        if self.op != self._first_op:
            return
        with self.lock:
            if self.op != self._first_op:
                return
            with kernel_cache():
                op = _entry(core.op_entry, _OP_SIG)
                sweep = _entry(core.sweep, _SWEEP_SIG)
                # (loaded now, not at the first flush: that may run in a garbage
                # collection inside Numba's code generation, which must not load code)
                self.entry(core.drain_queue)
            self.op, self.sweep = op, sweep

    def _first_op(self, *args):
        self.compile_core()
        return self.op(*args)

    def _first_sweep(self, *args):
        self.compile_core()
        return self.sweep(*args)

    # ------------------------------------------------------------ tables
    def _grow(self, which, newcap=None):
        with self.lock:         # (growth is one thread's at a time; the lock is reentrant)
            self._grow_locked(which, newcap)

    def _grow_locked(self, which, newcap):
        """Double a table (and the arrays sized by it). Other threads' one-call paths take
        no lock, so the switch, from copying the old contents to pointing ctx at the new
        arrays, makes no Python call (a thread switch happens only at one): no op runs
        between, to write where the copy has already been taken or beyond a buffer the
        capacity does not yet cover. The old arrays stay referenced until then."""
        spec = {"meta": ("meta", L.C_META, L.C_META_CAP, L.C_META_FREE, L.M_NEXT),
                "stor": ("stor", L.C_STOR, L.C_STOR_CAP, L.C_STOR_FREE, L.S_NEXT),
                "tape": ("tape", L.C_TAPE, L.C_TAPE_CAP, L.C_TAPE_FREE, L.R_NEXT)}
        attr, c_addr, c_cap, c_free, col = spec[which]
        old = getattr(self, attr)
        n0 = old.shape[0]
        n1 = newcap or 2 * n0
        new = np.zeros((n1, old.shape[1]), np.int64)
        new[n0:, col] = np.arange(n0 + 1, n1 + 1)
        side = {"tape": ("fattr", L.C_FATTR, np.float64),
                "stor": ("extq", L.C_EXTQ, np.int64)}.get(which)
        if side is not None:        # fattr (tape) and extq (stor): one entry per row / id
            side_old = getattr(self, side[0], None)
            if side_old is None:
                side_old = np.zeros(0, side[2])
            side_new = np.zeros(n1, side[2])
            side_addr, side_n = side_new.ctypes.data, len(side_old)
        work_n = n1 + sum(getattr(self, a).shape[0] for a in ("meta", "stor", "tape")
                          if a != attr and hasattr(self, a)) + 16
        work_old = getattr(self, "work", None)
        work_new = (np.zeros(work_n, np.int64)
                    if work_old is None or len(work_old) < work_n else work_old)
        work_addr = work_new.ctypes.data
        addr, ctx = new.ctypes.data, self.ctx
        # the switch: no Python call from here to the last store
        new[:n0] = old
        new[n1 - 1, col] = ctx[c_free]
        if side is not None:
            side_new[:side_n] = side_old        # (queued releases survive the growth)
            ctx[side[1]] = side_addr
        ctx[L.C_WORK] = work_addr
        ctx[L.C_WORK_CAP] = len(work_new)
        ctx[c_addr] = addr
        ctx[c_cap] = n1
        ctx[c_free] = n0
        # (the switch is done)
        setattr(self, attr, new)
        if side is not None:
            setattr(self, side[0], side_new)
        self.work = work_new
        if which == "meta":     # Python's scalar reads of meta: under half a NumPy index
            self.meta_mv = memoryview(new.reshape(-1))
        if which in ("meta", "tape"):
            self._grow_sweep_state()

    def _grow_sweep_state(self):
        """The sweep's pausable state: 4 regions as large as meta + tape (marked rows,
        stack, deliveries, captures each fit). Kept across growth: a sweep paused for
        Python may see the tables grow."""
        cap = self.meta.shape[0] + self.tape.shape[0] + 16
        old = getattr(self, "swbuf", None)
        buf = np.zeros(4 * cap, np.int64)
        if old is not None:
            ocap = len(old) // 4
            for k in range(4):
                buf[k * cap:k * cap + ocap] = old[k * ocap:(k + 1) * ocap]
        else:
            self.swstate = np.zeros(L.SWW, np.int64)
            self.ctx[L.C_SW_STATE] = self.swstate.ctypes.data
        self.swbuf = buf
        self.ctx[L.C_SW_BUF] = buf.ctypes.data
        self.ctx[L.C_SW_CAP] = cap

    def ensure_room(self):
        """Room for a paused sweep to finish (a Python callback may have used some): one
        gradient buffer per live row and a margin."""
        with self.lock:     # (other threads may call this without the lock)
            need = int(self.ctx[L.C_LIVE_ROWS]) + 64
            while self.meta.shape[0] - self.ctx[L.C_LIVE_META] < need:
                self._grow("meta")
            while self.stor.shape[0] - self.ctx[L.C_LIVE_STOR] < need:
                self._grow("stor")

    def reserve_args(self, n):
        """Room for n int arguments (root lists, captured ids, many outputs)."""
        with self.lock:     # (other threads may call this without the lock)
            # (ctx points at the new arrays before the old ones are dropped: another
            # thread's one-call op may run at any Python call in between)
            if n > len(self.iargs):
                iargs = np.zeros(2 * n, np.int64)
                self.ctx[L.C_IARGS] = iargs.ctypes.data
                self.ctx[L.C_IARGS_CAP] = len(iargs)
                self.iargs, self.iargs_mv = iargs, memoryview(iargs)
            if n > len(self.outs):
                outs, solo = np.zeros(2 * n, np.int64), np.zeros(2 * n, np.int64)
                addr, solo_addr = outs.ctypes.data, solo.ctypes.data
                self.ctx[L.C_OUTS] = addr
                self.ctx[L.C_OUTS_SOLO] = solo_addr
                self.ctx[L.C_OUTS_CAP] = len(outs)
                self.outs, self.outs_mv, self.outs_solo = outs, memoryview(outs), solo
            need = 16 + len(self.outs)
            while self.meta.shape[0] - self.ctx[L.C_LIVE_META] < need:
                self._grow("meta")
            while self.stor.shape[0] - self.ctx[L.C_LIVE_STOR] < need:
                self._grow("stor")

    # ------------------------------------------------------------ kernels
    def load_kernels(self, opcode, slot=0):
        """Compile (or load) an op's kernels for a slot: 0/1 its float32/float64 loops,
        2/3 their row-broadcast versions (see core.call_ew); the loader gives None for an
        op that has none, and the table then holds -1 (never asked for again)."""
        pair = self.kernel_loader(opcode, slot)
        i = opcode * L.NKSLOT + slot
        if pair is None:
            self.fwd[i] = self.bwd[i] = -1
            return
        self._kernels[i] = pair            # keep the cfuncs alive
        self.fwd[i] = pair[0].address
        self.bwd[i] = pair[1].address
        rows = i + L.KSLOT_ROWS
        if slot < L.KSLOT_ROWS and self.fwd[rows] == 0 and not self.has_row_kernels(opcode):
            self.fwd[rows] = self.bwd[rows] = -1

    def _load_rows(self, opcode, slot):
        """Load an op's row-broadcast kernels (an op asked: see core.call_ew). They only
        make a layout faster: if they fail to compile, the op keeps its strided loop,
        with a warning, and the op that asked goes on."""
        self.ctx[L.C_WANT_ROWS] = 0
        i = opcode * L.NKSLOT + slot
        if self.fwd[i] != 0:
            return
        try:
            self.load_kernels(opcode, slot)
        except Exception as e:              # noqa: BLE001
            self.fwd[i] = self.bwd[i] = -1
            warnings.warn(f"tapegrad: op {opcode}'s row-broadcast loops failed to compile "
                          f"({type(e).__name__}: {e}); it keeps its strided loop",
                          RuntimeWarning, stacklevel=4)

    def handle(self, code):
        """Recover from a retryable status (grow a table, load a kernel). Returns False
        when the status is an error for the caller to raise."""
        if code == L.E_NEED_KERNEL and self.err[1] == L.KSLOT_CLONE:
            with kernel_cache():
                self.ctx[L.C_CLONE] = native_address(core.clone_entry, "int64(int64, int64)")
        elif code == L.E_NEED_KERNEL and self.err[1] == L.KSLOT_TANGENT:
            with kernel_cache():
                self.ctx[L.C_TANGENT] = native_address(
                    core.tangent_entry, "int64(int64, int64, int64, int64)")
        elif code == L.E_NEED_KERNEL and self.err[1] == L.KSLOT_INPLACE:
            with kernel_cache():
                self.ctx[L.C_INPLACE_FN] = native_address(
                    core.inplace_entry, "int64(int64, int64, int64, int64)")
        elif code == L.E_NEED_KERNEL and self.err[1] == L.KSLOT_PRUNE:
            with kernel_cache():
                self.ctx[L.C_PRUNE_FN] = native_address(core.prune_entry, "int64(int64, int64)")
        elif code == L.E_NEED_KERNEL and self.err[1] >= L.KSLOT_ROWS:
            self._load_rows(int(self.err[0]), int(self.err[1]))
        elif code == L.E_NEED_KERNEL:
            self.load_kernels(int(self.err[0]), int(self.err[1]))
        elif code == L.E_GROW_META:
            self._grow("meta")
        elif code == L.E_GROW_STOR:
            self._grow("stor")
        elif code == L.E_GROW_TAPE:
            self._grow("tape")
        elif code == L.E_NOMEM or code == L.E_OVERFLOW:
            raise sizes.engine_error(code, self.err, int(self.ctx[L.C_NOMEM_BYTES]))
        else:
            return False
        return True

    def run_op(self, opcode, a, b, s, flags):
        """The slow path of an op: retry through growth and kernel loading (the caller
        holds the lock)."""
        while True:
            r = self.op(self.caddr, opcode, a, b, s, flags)
            if r >= 0:
                return r
            if not self.handle(r):
                raise EngineError(r, self.err.copy())

    def entry(self, fn):
        """fn's C entry point (a call through a Numba dispatcher costs several times a
        direct one; the creation calls run once per tensor made), compiled when first
        needed."""
        e = self.entries.get(fn)
        if e is None:
            sig = _ENTRY_SIGS.get(fn.__name__)
            if sig is None:
                return fn
            with kernel_cache():
                e = self.entries[fn] = _entry(fn, sig)
        return e

    def call(self, fn, *args):
        """Call an engine kernel that may need room, retrying after growth."""
        fn = self.entry(fn)
        with self.lock:
            while True:
                self.reserve_args(0)
                r = fn(self.caddr, *args)
                if r >= 0 or not self.handle(r):
                    return r

    # ------------------------------------------------------------ memory
    def release(self, i):
        """Drop a reference Python holds on id i (the work of Tensor.__del__)."""
        k = self.relq_slot() & 4095
        if self.relq_mv[k]:             # a full lap without a compiled call in between
            self.flush()
        self.relq_mv[k] = i + 1

    def flush(self):
        """Release queued ids now, and let go of adopted NumPy arrays no tensor uses."""
        self.entry(core.drain_queue)(self.caddr)
        n = int(self.ctx[L.C_EXTN])
        if n:
            for sid in self.extq[:n].tolist():
                self.ext.pop(sid, None)
            self.ctx[L.C_EXTN] = 0

    def stats(self):
        c = self.ctx
        return {"tensors": int(c[L.C_LIVE_META]), "storages": int(c[L.C_LIVE_STOR]),
                "rows": int(c[L.C_LIVE_ROWS]), "bytes": int(c[L.C_BYTES])}


# elements per thread below which a loop is not split: starting a thread costs about what
# a float32 add of this size takes
PAR_MIN = 1 << 16


def _default_threads():
    """TAPEGRAD_NUM_THREADS, else OMP_NUM_THREADS, else the cores this process may use."""
    for var in ("TAPEGRAD_NUM_THREADS", "OMP_NUM_THREADS"):
        v = os.environ.get(var, "")
        if v.strip().isdigit() and int(v) > 0:
            return int(v)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:       # (not on Linux)
        return max(1, os.cpu_count() or 1)


def tune_malloc():
    """Keep glibc from handing large freed blocks back to the OS between ops: opt-in
    (TAPEGRAD_MALLOPT=1), since it changes malloc for the whole process.

    By default glibc serves blocks of a few MB by mmap, or from a heap it trims as soon as
    its free top passes twice the last such block; either way a loop over 1M-element
    tensors gets fresh pages every op and pays a page fault per 4 KB. Fixed thresholds
    (32 MB, glibc's largest, for mmap; 256 MB of free heap before trimming) make freed
    blocks reusable. Returns whether the settings were applied."""
    if os.environ.get("TAPEGRAD_MALLOPT", "0") != "1":
        return False
    import ctypes
    import platform
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    return bool(mallopt(M_MMAP_THRESHOLD, 32 << 20)) and bool(mallopt(M_TRIM_THRESHOLD, 256 << 20))


MALLOC_TUNED = tune_malloc()


def set_alloc_limit(nbytes=None):
    """Set the largest allocation tapegrad tries (None: the machine's memory and swap);
    larger ones raise MemoryError without touching memory. Returns the previous limit.
    Both Python's checks and the engine's allocator use it."""
    old = sizes.set_limit(nbytes)
    engine().ctx[L.C_MAX_BYTES] = sizes.alloc_limit()
    return old


def set_num_threads(n):
    """How many threads tapegrad's kernels may use (PyTorch's torch.set_num_threads): the
    large elementwise loops, the matrix products' OpenBLAS (NumPy's, whose own products
    then follow it too, as with threadpoolctl, or tapegrad's private instance of it: see
    _engine/blas_library.py) and the OpenBLAS of SciPy, whose LAPACK tapegrad.linalg
    calls (and SciPy's own products then follow it). Results do not depend on it."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_num_threads: expected a positive integer, got {n!r}")
    engine().set_num_threads(n)
    _set_blas_threads(n)


def _set_blas_threads(n):
    """Set the thread count of the OpenBLAS tapegrad's products call. (Left at OpenBLAS's
    own default until asked: one idle-spinning BLAS thread per core is what makes a product
    10-100x slower on a busy machine, so a user asking for n threads means the products
    too.)"""
    from . import blas, blas_library
    for lib in (blas.LIBRARY, blas_library.scipy_openblas()):
        if lib is not None:
            blas_library.set_threads(lib, n)


def get_num_threads():
    """Number of threads the compiled kernels use."""
    return int(engine().ctx[L.C_NTHREADS])


ENGINE = None
class _GradMode(threading.local):
    """Grad mode, per thread as PyTorch's (a no_grad block in one thread leaves another
    thread's recording alone); every thread starts with it on. `on` is the OPF_GRAD bit
    each op passes to the engine."""
    on = 1


GRAD_MODE = _GradMode()
RECORDING = [None]  # the tapegrad.compile recording in progress (Python-side events go there)


def note_break(reason):
    """Called by the front where Python would need a tensor's value (or does something a
    replay cannot repeat) while a step is being recorded."""
    rec = RECORDING[0]
    if rec is not None:
        rec.graph_break(reason)


def host_call(fn):
    """Call fn() (no arguments) and return its result. While tapegrad.compile records a
    step this is not a graph break: the call is logged, and the compiled replay stops at
    this point of the step, Python calls fn() again and the replay goes on. fn runs
    unrecorded, so what it does must not be part of the program: it reads and writes, in
    place, tensors that exist outside it (a parameter's .grad, a buffer); tensors it makes
    are not seen by the replay. nn.parallel.DistributedDataParallel averages gradients
    with it."""
    rec = RECORDING[0]
    if rec is None:
        return fn()
    return rec.host_call(fn)


_NATIVE = {}


def native_entry(dispatcher, sig):
    """The C entry point of a compiled function for sig (compiled on first use), for
    calls from Python with ints only."""
    key = (dispatcher, sig)
    e = _NATIVE.get(key)
    if e is None:
        with kernel_cache():
            e = _NATIVE[key] = _entry(dispatcher, sig)
    return e


def engine():
    global ENGINE
    if ENGINE is None:
        ENGINE = Engine()
    return ENGINE


# fork (multiprocessing's fork start method, DataLoader workers, os.fork): the child has
# only the forking thread. A lock another thread held at the fork would stay held in the
# child for ever, and that thread's half-done engine work (a sweep paused for a Python
# callback) would never finish. So the fork waits (a bounded time) for the engine's lock,
# as the logging module does for its own, and for Numba's compiler lock, which a thread
# loading kernels may hold; the child starts with them free. The elementwise threads are
# started and joined inside one compiled call (threads.py), which holds the GIL, so none
# runs at a fork; the tables are plain memory the child gets a copy of.
_FORK_WAIT = 10.0       # seconds: past it the fork goes on and the child gets fresh locks
_FORK_HELD = []


def _compiler_lock():
    try:
        from numba.core.compiler_lock import global_compiler_lock
        return global_compiler_lock._lock
    except (ImportError, AttributeError):
        return None


def _before_fork():
    held = []
    locks = [_compiler_lock()]
    if ENGINE is not None:
        locks.insert(0, ENGINE.lock)
    for lock in locks:
        if lock is not None and lock.acquire(timeout=_FORK_WAIT):
            held.append(lock)
    _FORK_HELD.append(held)


def _after_fork_parent():
    for lock in reversed(_FORK_HELD.pop() if _FORK_HELD else []):
        lock.release()


def _after_fork_child():
    held = _FORK_HELD.pop() if _FORK_HELD else []
    for lock in reversed(held):
        lock.release()
    cl = _compiler_lock()
    if cl is not None and cl not in held:
        from numba.core.compiler_lock import global_compiler_lock
        global_compiler_lock._lock = threading.RLock()
    E = ENGINE
    if E is None:
        return
    if E.lock not in held:      # (another thread kept it: that thread is gone here)
        E.lock = threading.RLock()
        sw = getattr(E, "swstate", None)
        if sw is not None and sw[L.SW_ACTIVE] and E.op != E._first_op:
            E.entry(core.sweep_abort)(E.caddr)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_parent,
                        after_in_child=_after_fork_child)
