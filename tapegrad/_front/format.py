"""PyTorch-style printing of tensor values."""
import numpy as np

from .dtype import default_float


def _float_formatter(values):
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return lambda x: _special(x) or f"{x:.4f}"
    amax = np.abs(finite).max()
    amin = np.abs(finite[finite != 0]).min() if np.any(finite != 0) else 0.0
    ints = np.all(finite == np.round(finite))
    if ints and amax < 1e8:
        width = max(len(f"{v:.0f}") for v in finite) + 1
        return lambda x: (_special(x) or f"{x:.0f}.").rjust(width)
    if amax >= 1e8 or (amin and amin < 1e-4) or (amin and amax / amin > 1e3):
        return lambda x: _special(x) or f"{x:.4e}"
    width = max(len(f"{v:.4f}") for v in finite)
    return lambda x: (_special(x) or f"{x:.4f}").rjust(width)


def _special(x):
    if np.isnan(x):
        return "nan"
    if np.isinf(x):
        return "inf" if x > 0 else "-inf"
    return None


def tensor_repr(t, values):
    dt = t.dtype
    if values.size == 0:
        body = "[]"
    else:
        if dt.is_floating_point:
            fmt = {"float_kind": _float_formatter(values.astype(np.float64))}
        elif dt.name == "bool":
            pad = " " if not values.all() else ""   # PyTorch pads to the widest element
            fmt = {"bool": lambda x: pad + "True" if x else "False"}
        else:
            fmt = None
        body = np.array2string(values, separator=", ", formatter=fmt, prefix="tensor(",
                               threshold=1000, edgeitems=3, max_line_width=80)
    extra = []
    if values.size == 0 and values.ndim != 1:       # PyTorch shows an empty tensor's shape
        extra.append(f"size={tuple(values.shape)}")
    # (an empty tensor's values cannot show an int or bool dtype, so PyTorch names it; the
    # default dtype is float32 unless set_default_dtype changed it)
    default = default_float().name
    if dt.name not in ((default,) if values.size == 0 else (default, "int64", "bool")):
        extra.append(f"dtype=tapegrad.{dt.name}")
    try:
        fn = t.grad_fn
    except RuntimeError:        # a stale view made under no_grad: PyTorch prints this
        extra.append("grad_fn=<Invalid>")
    else:
        if fn is not None:
            extra.append(f"grad_fn=<{fn.name()}>")
        elif t.requires_grad:
            extra.append("requires_grad=True")
    return "tensor(" + body + "".join(", " + e for e in extra) + ")"
