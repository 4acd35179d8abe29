"""PyTorch-style printing of tensor values, and set_printoptions.

The layout is PyTorch's (torch/_tensor_str.py), computed on a NumPy view of the values:
one formatter per tensor chooses integer, fixed or scientific notation from the nonzero
finite values (scientific when the largest is over 1e8, the smallest under 1e-4, or their
ratio over 1000, unless sci_mode says otherwise) and pads every element to the widest;
rows break at linewidth, tensors with more than threshold elements are summarised to
edgeitems at each end of each dim; the suffixes (size=, dtype=, grad_fn=) wrap at
linewidth too. The dtype is named tapegrad.<name> where PyTorch writes torch.<name>; line
breaks are chosen as for PyTorch's spelling, so the text equals PyTorch's after that
rename.
"""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import math
import numbers

import numpy as np

from .dtype import default_float


class _Options:
    __slots__ = ("precision", "threshold", "edgeitems", "linewidth", "sci_mode")

    def __init__(self):
        self.precision, self.threshold, self.edgeitems, self.linewidth = 4, 1000, 3, 80
        self.sci_mode = None


OPTS = _Options()
_PROFILES = {"default": (4, 1000, 3, 80), "short": (2, 1000, 2, 80),
             "full": (4, math.inf, 3, 80)}


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None,
                     profile=None, sci_mode=None):
    """Options for printing tensors, as PyTorch's: precision (digits after the point,
    default 4), threshold (more elements than this are summarised, default 1000),
    edgeitems (elements shown at each end when summarised, default 3), linewidth
    (characters per line, default 80), profile ("default", "short" or "full": presets
    the others override), sci_mode (True or False forces scientific notation on or off;
    None, also when not given, lets the values decide). Values printing could not use
    (a float precision, a negative width, ...) are a TypeError here, where PyTorch fails
    at the next print."""
    _option_check(precision, threshold, edgeitems, linewidth, profile, sci_mode)
    if profile is not None and profile in _PROFILES:     # (another profile: no effect,
        (OPTS.precision, OPTS.threshold, OPTS.edgeitems,  # as in PyTorch)
         OPTS.linewidth) = _PROFILES[profile]
    if precision is not None:
        OPTS.precision = precision
    if threshold is not None:
        OPTS.threshold = threshold
    if edgeitems is not None:
        OPTS.edgeitems = edgeitems
    if linewidth is not None:
        OPTS.linewidth = linewidth
    OPTS.sci_mode = sci_mode


def _option_check(precision, threshold, edgeitems, linewidth, profile, sci_mode):
    """Values printing could not use are refused here (PyTorch takes them and fails at the
    next print, or prints nonsense)."""
    for name, value in (("precision", precision), ("edgeitems", edgeitems),
                        ("linewidth", linewidth)):
        if value is not None and (not isinstance(value, numbers.Integral) or
                                  isinstance(value, (bool, np.bool_)) or value < 0):
            raise TypeError(f"set_printoptions(): {name} must be a non-negative int, not "
                            f"{value!r}")
    if threshold is not None and (not isinstance(threshold, numbers.Real) or
                                  isinstance(threshold, (bool, np.bool_)) or threshold != threshold):
        raise TypeError(f"set_printoptions(): threshold must be a number, not {threshold!r}")
    if profile is not None and not isinstance(profile, str):
        raise TypeError(f"set_printoptions(): profile must be a str, not {profile!r}")
    if sci_mode is not None and not isinstance(sci_mode, (bool, np.bool_)):
        raise TypeError(f"set_printoptions(): sci_mode must be a bool or None, not "
                        f"{sci_mode!r}")


def get_printoptions():
    """The current print options as a dict set_printoptions takes (PyTorch's
    torch._tensor_str.get_printoptions)."""
    return {name: getattr(OPTS, name) for name in _Options.__slots__}


# ---------------------------------------------------------------- the formatter
class _Formatter:
    def __init__(self, values, kind):
        self.kind = kind            # "f" (floating), "i", "b"
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1
        flat = values.reshape(-1)
        if kind != "f":
            if flat.size:
                if kind == "b":
                    self.max_width = 5 if not flat.all() else 4
                else:
                    self.max_width = max(1, len(str(int(flat.max()))), len(str(int(flat.min()))))
            return
        vals = flat[np.isfinite(flat) & (flat != 0)].astype(np.float64)
        if vals.size == 0:
            return
        absv = np.abs(vals)
        lo, hi = absv.min(), absv.max()
        self.int_mode = bool(np.all(vals == np.ceil(vals)))
        if OPTS.sci_mode is None:
            self.sci_mode = bool(hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4)
        else:
            self.sci_mode = OPTS.sci_mode
        p = OPTS.precision
        if self.sci_mode:
            spec = f".{p}e"
            self.max_width = max(1, max(len(format(v, spec)) for v in _extremes(vals)))
        elif self.int_mode:
            self.max_width = max(1, max(len(f"{v:.0f}") + 1 for v in _extremes(vals)))
        else:
            spec = f".{p}f"
            self.max_width = max(1, max(len(format(v, spec)) for v in _extremes(vals)))

    def format(self, value):
        if self.kind == "f":
            if self.sci_mode:
                s = format(value, f"{self.max_width}.{OPTS.precision}e")
            elif self.int_mode:
                s = f"{value:.0f}"
                if not (math.isinf(value) or math.isnan(value)):
                    s += "."
            else:
                s = format(value, f".{OPTS.precision}f")
        else:
            s = f"{value}"
        return (self.max_width - len(s)) * " " + s


def _extremes(vals):
    """The values whose printed width can be the largest: the widest are among the
    largest magnitudes of each sign and (for fixed notation, where small values round to
    longer digits only by sign) the whole set when it is small. Formatting all of a
    large tensor's values in Python is what PyTorch does; here only candidates are
    formatted, with the same result."""
    if vals.size <= 64:
        return vals.tolist()
    out = set()
    for part in (vals[vals > 0], vals[vals < 0]):
        if part.size:
            a = np.abs(part)
            # widths grow with magnitude and exponent digits; the extremes and values
            # rounding up to a new digit live at both ends of the magnitude range
            order = np.argsort(a)
            pick = np.concatenate([order[:32], order[-32:]])
            out.update(part[pick].tolist())
    return list(out)


# ---------------------------------------------------------------- layout
def _summarized(a):
    e = OPTS.edgeitems
    if a.ndim == 0:
        return a
    if a.ndim == 1:
        return np.concatenate([a[:e], a[-e:]]) if a.shape[0] > 2 * e else a
    if not e:
        return a[tuple(slice(0, 0) for _ in range(a.ndim))]
    rows = list(range(e)) + list(range(a.shape[0] - e, a.shape[0])) \
        if a.shape[0] > 2 * e else range(a.shape[0])
    return np.stack([_summarized(a[i]) for i in rows])


def _py(v, kind):
    return float(v) if kind == "f" else (bool(v) if kind == "b" else int(v))


def _vector(a, indent, summarize, fmt, kind):
    per_line = max(1, math.floor((OPTS.linewidth - indent) / (fmt.max_width + 2)))
    e = OPTS.edgeitems
    if summarize and not e:
        data = ["..."]
    elif summarize and a.shape[0] > 2 * e:
        data = [fmt.format(_py(v, kind)) for v in a[:e].tolist()] + [" ..."] + \
            [fmt.format(_py(v, kind)) for v in a[-e:].tolist()]
    else:
        data = [fmt.format(_py(v, kind)) for v in a.tolist()]
    lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _body(a, indent, summarize, fmt, kind):
    if a.ndim == 0:
        return fmt.format(_py(a.item(), kind))
    if a.ndim == 1:
        return _vector(a, indent, summarize, fmt, kind)
    e = OPTS.edgeitems
    if summarize and a.shape[0] > 2 * e:
        parts = [_body(a[i], indent + 1, summarize, fmt, kind) for i in range(e)] + \
            ["..."] + [_body(a[i], indent + 1, summarize, fmt, kind)
                       for i in range(a.shape[0] - e, a.shape[0])]
    else:
        parts = [_body(a[i], indent + 1, summarize, fmt, kind) for i in range(a.shape[0])]
    return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(parts) + "]"


def _values_str(values, kind, indent):
    if values.size == 0:
        return "[]"
    summarize = values.size > OPTS.threshold
    fmt = _Formatter(_summarized(values) if summarize else values, kind)
    return _body(values, indent, summarize, fmt, kind)


def _with_suffixes(text, suffixes, indent):
    """PyTorch's _add_suffixes: each suffix after ', ' or, when the line would pass
    linewidth, on a new line (lengths measured with PyTorch's torch.<dtype> spelling)."""
    out = [text]
    last = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        n = len(suffix.replace("tapegrad.", "torch."))
        if last + n + 2 > OPTS.linewidth:
            out.append(",\n" + " " * indent + suffix)
            last = indent + n
        else:
            out.append(", " + suffix)
            last += n + 2
    out.append(")")
    return "".join(out)


def tensor_repr(t, values):
    """PyTorch's repr of tensor t whose values (a NumPy view) are given."""
    dt = t.dtype
    kind = "f" if dt.is_floating_point else ("b" if dt.name == "bool" else "i")
    prefix = "tensor("
    indent = len(prefix)
    suffixes = []
    default = default_float().name
    if values.size == 0:
        if values.ndim != 1:                # PyTorch shows an empty tensor's shape
            suffixes.append(f"size={tuple(values.shape)}")
        if dt.name != default:
            suffixes.append(f"dtype=tapegrad.{dt.name}")
        body = "[]"
    else:
        if not OPTS.edgeitems:
            suffixes.append(f"size={tuple(values.shape)}")
        if dt.name not in (default, "int64", "bool"):
            suffixes.append(f"dtype=tapegrad.{dt.name}")
        body = _values_str(values, kind, indent)
    try:
        fn = t.grad_fn
    except RuntimeError:        # a stale view made under no_grad: PyTorch prints this
        suffixes.append("grad_fn=<Invalid>")
    else:
        if fn is not None:
            suffixes.append(f"grad_fn=<{fn.name()}>")
        elif t.requires_grad:
            suffixes.append("requires_grad=True")
    return _with_suffixes(prefix + body, suffixes, indent)


def tensor_format(self, format_spec):
    """format(x, spec) and f"{x:spec}": a 0-d tensor formats as its Python number (so
    f"{loss:.4f}" works, as in PyTorch); any other tensor, or a subclass such as
    Parameter, as object does (its str for an empty spec, else a TypeError)."""
    cls = type(self)
    plain = "__format__" in vars(cls)       # (Tensor itself, where this is installed)
    if plain and self.ndim == 0:
        return self.detach().item().__format__(format_spec)
    return object.__format__(self, format_spec)


def _register():
    from . import methods
    methods.function("set_printoptions", set_printoptions)
    methods.method("__format__", tensor_format)


_register()
