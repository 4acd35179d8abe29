"""Anomaly mode (PyTorch's torch.autograd.detect_anomaly / set_detect_anomaly).

While it is on, every op that records a row keeps the Python stack of its forward call in
a side table keyed by row (nothing is kept, and no op pays anything, while it is off: the
engine's op entry is swapped for a recording one only then). With check_nan, the compiled
sweep checks the gradients each row's backward wrote (a flag the sweep reads once, see
_engine/layout.SW_ANOMALY) and stops with E_ANOMALY naming the row and input; the front
then prints PyTorch's "Error detected in ..." warning with the stored forward stack and
raises PyTorch's RuntimeError.

A row id is reused once its row dies: an entry is overwritten when its id is recorded
again, checked against the row's op before it is printed, and the whole table goes when
anomaly mode is switched off, so a stack printed is the stack of that row's op.
"""
import os
import sys
import traceback
import warnings

from .._engine import layout as L
from .._engine.state import engine as _engine
from ..ops.registry import OPS

__all__ = ["detect_anomaly", "set_detect_anomaly", "is_anomaly_enabled",
           "is_anomaly_check_nan_enabled"]

_STATE = [False, True]      # enabled, check_nan (process-wide, as PyTorch's flags)
_TRACES = {}                # row -> (opcode, StackSummary of its forward call)
_REAL_OP = [None]           # the engine's own op entry while the recording one stands in
E_ANOMALY = L.E_ANOMALY

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# frames of tapegrad's own dispatch, dropped from the inner end of a stored stack (PyTorch's
# stacks end at the user's line, its ops being C++)
_INTERNAL = tuple(os.path.join(_PKG, d) + os.sep
                  for d in ("_front", "_engine", "ops", "autograd"))


def is_anomaly_enabled():
    """Whether anomaly detection is on (PyTorch's torch.is_anomaly_enabled)."""
    return _STATE[0]


def is_anomaly_check_nan_enabled():
    """Whether anomaly detection checks the backward for NaN (PyTorch's
    torch.is_anomaly_check_nan_enabled)."""
    return _STATE[1]


def _op_with_trace(caddr, op, a, b, s, flags):
    E = _engine()
    r = _REAL_OP[0](caddr, op, a, b, s, flags)
    if r >= 0 and flags & L.OPF_GRAD:
        row = int(E.meta[r, L.M_ROW])
        if row >= 0:
            stack = traceback.StackSummary.extract(
                traceback.walk_stack(sys._getframe(1)), lookup_lines=False)
            _TRACES[row] = (int(E.tape[row, L.R_OP]), stack)
    return r


def set_anomaly_enabled(enabled, check_nan=True):
    """Switch anomaly mode (PyTorch's torch.set_anomaly_enabled)."""
    if not isinstance(enabled, bool):
        raise TypeError(f"set_anomaly_enabled(): argument 'enabled' (position 1) must be bool, "
                        f"not {type(enabled).__name__}")
    if not isinstance(check_nan, bool):
        raise TypeError(f"set_anomaly_enabled(): argument 'check_nan' (position 2) must be "
                        f"bool, not {type(check_nan).__name__}")
    E = _engine()
    with E.lock:
        if enabled and _REAL_OP[0] is None:
            E.compile_core()        # (E.op must be the compiled entry before it is wrapped)
            _REAL_OP[0] = E.op
            E.op = _op_with_trace
        elif not enabled and _REAL_OP[0] is not None:
            E.op = _REAL_OP[0]
            _REAL_OP[0] = None
            _TRACES.clear()
        _STATE[0], _STATE[1] = enabled, check_nan
        E.swstate[L.SW_ANOMALY] = 1 if enabled and check_nan else 0


class detect_anomaly:
    r"""Context manager that enables anomaly detection for the autograd engine, as
    PyTorch's: ops run inside record their forward stack, and a backward that produces
    NaN (with check_nan) raises naming the op, after a warning with that stack."""

    def __init__(self, check_nan=True) -> None:
        self.prev = is_anomaly_enabled()
        self.check_nan = check_nan
        self.prev_check_nan = is_anomaly_check_nan_enabled()
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the runtime "
                      "and should only be enabled for debugging.", UserWarning, stacklevel=2)

    def __enter__(self) -> None:
        set_anomaly_enabled(True, self.check_nan)

    def __exit__(self, *args: object) -> None:
        set_anomaly_enabled(self.prev, self.prev_check_nan)


class set_detect_anomaly:
    r"""Set anomaly detection on or off (PyTorch's torch.autograd.set_detect_anomaly):
    usable as a function or as a context manager, which restores the previous setting."""

    def __init__(self, mode: bool, check_nan: bool = True) -> None:
        self.prev = is_anomaly_enabled()
        self.prev_check_nan = is_anomaly_check_nan_enabled()
        set_anomaly_enabled(mode, check_nan)

    def __enter__(self) -> None:
        """Nothing: the setting took effect when the object was made."""

    def __exit__(self, *args: object) -> None:
        set_anomaly_enabled(self.prev, self.prev_check_nan)


def _node_name(row):
    from .._front.nodes import FUNCTION_ROWS
    rec = FUNCTION_ROWS.get(row)
    if rec is not None:             # an autograd.Function's row: PyTorch's <Class>Backward
        return f"{rec.cls.__name__}Backward"
    return OPS[int(_engine().tape[row, L.R_OP])].grad_fn


def check_function_grads(row, grads):
    """With check_nan on, the gradients an autograd.Function's backward returned, as
    PyTorch checks every node's outputs."""
    if not (_STATE[0] and _STATE[1]):
        return
    from .._front.tensor import Tensor
    for i, g in enumerate(grads):
        if isinstance(g, Tensor) and g.dtype.is_floating_point and bool(g.isnan().any()):
            warn_row(row, stacklevel=5)
            raise RuntimeError(f"Function '{_node_name(row)}' returned nan values in its "
                               f"{i}th output.")


def _format(stack):
    frames = list(reversed(stack))
    while frames and frames[-1].filename.startswith(_INTERNAL):
        frames.pop()
    for f in frames:
        f.line      # (read now: the lines were not looked up while recording)
    return "".join(traceback.StackSummary.from_list(frames).format())


def warn_row(row, stacklevel=3):
    """PyTorch's warning for an error in row's backward while anomaly mode is on."""
    if not _STATE[0]:
        return
    name = _node_name(row)
    entry = _TRACES.get(row)
    if entry is None or entry[0] != int(_engine().tape[row, L.R_OP]):
        msg = (f"Error detected in {name}. No forward pass information available. Enable "
               "detect anomaly during forward pass for more information.")
    else:
        msg = (f"Error detected in {name}. Traceback of forward call that caused the "
               f"error:\n{_format(entry[1])}")
    warnings.warn(msg, UserWarning, stacklevel=stacklevel)


def nan_error(err):
    """The RuntimeError for an E_ANOMALY status (err = row, input index), after the
    warning with the row's forward stack."""
    row, k = int(err[0]), int(err[1])
    warn_row(row, stacklevel=4)
    return RuntimeError(f"Function '{_node_name(row)}' returned nan values in its {k}th "
                        "output.")
