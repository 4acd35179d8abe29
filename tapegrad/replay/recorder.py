"""Recording a step for tapegrad.compile: the engine logs every op, alias, tensor birth
and sweep into a flat event log (layout.EV_*) while the function runs eagerly; Python
adds what happens in Python (optimizer steps, .grad reads, dropout draws) and notes
anything a replay could not reproduce (a graph break)."""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import contextlib
import os
import sys

import numpy as np

from .._engine import layout as L
from .._engine.state import engine, RECORDING, note_break  # noqa: F401  (its users' name)

PY_OPT, PY_GRAD, PY_GRADNONE, PY_RAND, PY_IADD, PY_CONST, PY_HOST = 1, 2, 3, 4, 5, 6, 7
_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LOG_WORDS = 1 << 20


def user_frame():
    """'file:line' of the innermost caller outside tapegrad (what the user wrote)."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_PKG):
        f = f.f_back
    if f is None:
        return "<unknown>"
    return f"{f.f_code.co_filename}:{f.f_lineno}"


class GraphBreak(Exception):
    """Something in the recorded function cannot be replayed."""

    def __init__(self, reason, where=None):
        super().__init__(reason)
        self.reason = reason
        self.where = where


class Recorder:
    def __init__(self):
        self.log = np.zeros(_LOG_WORDS, np.int64)
        self.objects = []           # what PY_OPT / PY_RAND events point at
        self.breaks = []            # GraphBreak, first one wins
        self.created_at = {}        # id -> the user's line that made it (tensor(), zeros()...)
        self.held = []              # constants made unrecorded (PY_CONST, constant())
        self.nlog = 0

    def __enter__(self):
        E = engine()
        if RECORDING[0] is not None:
            raise RuntimeError("tapegrad.compile: a compiled function called another one "
                               "while recording (nested compile is not supported)")
        # (under the engine's lock: a replay checks under it that no recording is on)
        with E.lock:
            E.flush()   # ids Python let go of before the recording are not its births
            c = E.ctx
            c[L.C_RECN] = 0
            c[L.C_RECCAP] = len(self.log)
            c[L.C_REC] = self.log.ctypes.data
            RECORDING[0] = self
        return self

    def __exit__(self, *exc):
        E = engine()
        with E.lock:
            E.flush()
            c = E.ctx
            self.nlog = int(c[L.C_RECN])
            c[L.C_REC] = 0
            RECORDING[0] = None
        if self.nlog < 0:
            self.graph_break("the step is too long to record (more than "
                             f"{_LOG_WORDS} log words)")
        return False

    # ------------------------------------------------------------ Python-side events
    def event(self, what, x, y):
        c = engine().ctx
        p = int(c[L.C_RECN])
        if p < 0:
            return
        if p + 4 > len(self.log):
            c[L.C_RECN] = -1
            return
        self.log[p:p + 4] = (L.EV_PY, what, x, y)
        c[L.C_RECN] = p + 4

    def optimizer_step(self, opt, group_index, ids):
        self.objects.append((opt, group_index, ids.copy()))
        self.event(PY_OPT, len(self.objects) - 1, 0)

    def grad_read(self, t, g):
        self.event(PY_GRAD, t, g)

    def grad_cleared(self, t, set_to_none):
        self.event(PY_GRADNONE, t, int(not set_to_none))

    @contextlib.contextmanager
    def paused(self):
        """Run something unrecorded (its replay is one logged event instead)."""
        c = engine().ctx
        saved = int(c[L.C_REC])
        c[L.C_REC] = 0
        RECORDING[0] = None
        try:
            yield
        finally:
            c[L.C_REC] = saved
            RECORDING[0] = self

    def dropout_mask(self, t, keep, scale, shape, dtype_code):
        self.objects.append((keep, scale, tuple(shape), dtype_code))
        self.event(PY_RAND, t, len(self.objects) - 1)

    def created(self, t):
        self.created_at[t] = user_frame()

    def constant(self, make):
        """A tensor whose values a replay may reuse (make() builds it, unrecorded): the
        plan holds it as an outside tensor. Its id may be one an earlier birth in the log
        used, so the event, not the id, says which tensor it is."""
        with self.paused():
            t = make()
        self.held.append(t)
        self.event(PY_CONST, t._i, len(self.held) - 1)
        return t

    def host_call(self, fn):
        """fn() (state.host_call while recording): logged, so the replay calls fn at this
        point of the step, then run now, unrecorded (what it does is not part of the
        program: it works in place on tensors the program does not make or free)."""
        self.objects.append(fn)
        self.event(PY_HOST, len(self.objects) - 1, 0)
        with self.paused():
            return fn()

    def int_add(self, t, value):
        self.event(PY_IADD, t, value)

    def graph_break(self, reason):
        if not self.breaks:
            self.breaks.append(GraphBreak(reason, user_frame()))
