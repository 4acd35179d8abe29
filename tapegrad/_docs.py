"""Docstrings of the op surface: the Tensor methods and tapegrad functions that are
generated from the op table or installed under several names.

One line per name, in terms of ``input`` (the tensor a method is called on). A function
that already has a docstring keeps it; an in-place spelling (``exp_``) without one of its
own is described from its out-of-place name. ``attach`` runs once, at import, after the
install() functions have put the methods in place.
"""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import sys
import types

_UNARY = {
    "abs": "Absolute value, elementwise.",
    "acos": "Arccosine, elementwise.",
    "acosh": "Inverse hyperbolic cosine, elementwise.",
    "asin": "Arcsine, elementwise.",
    "asinh": "Inverse hyperbolic sine, elementwise.",
    "atan": "Arctangent, elementwise.",
    "atanh": "Inverse hyperbolic tangent, elementwise.",
    "ceil": "Smallest integer not less than each element (gradient zero).",
    "clone": "A copy of input with its own memory; the gradient flows back to input.",
    "cos": "Cosine, elementwise.",
    "cosh": "Hyperbolic cosine, elementwise.",
    "erf": "Gauss error function, elementwise.",
    "exp": "e to the power of each element.",
    "exp2": "2 to the power of each element.",
    "expm1": "exp(x) - 1, elementwise, exact for small x.",
    "floor": "Largest integer not greater than each element (gradient zero).",
    "frac": "Fractional part, x - trunc(x), elementwise.",
    "log": "Natural logarithm, elementwise.",
    "log10": "Base-10 logarithm, elementwise.",
    "log1p": "log(1 + x), elementwise, exact for small x.",
    "log2": "Base-2 logarithm, elementwise.",
    "neg": "-x, elementwise.",
    "reciprocal": "1 / x, elementwise.",
    "relu": "max(x, 0), elementwise.",
    "round": "Round to the nearest integer, halves to even, as PyTorch (gradient zero).",
    "rsqrt": "1 / sqrt(x), elementwise.",
    "sigmoid": "Logistic sigmoid 1 / (1 + exp(-x)), elementwise.",
    "sign": "-1, 0 or 1 by the sign of each element (NaN gives 0; gradient zero).",
    "sin": "Sine, elementwise.",
    "sinh": "Hyperbolic sine, elementwise.",
    "sqrt": "Square root, elementwise.",
    "tan": "Tangent, elementwise.",
    "tanh": "Hyperbolic tangent, elementwise.",
    "trunc": "Round toward zero, elementwise (gradient zero).",
    "square": "x * x, elementwise.",
    "gelu": "GELU activation; approximate='tanh' uses the tanh approximation.",
    "hardtanh": "Clamp to [min_val, max_val] (default [-1, 1]).",
    "relu6": "min(max(x, 0), 6), elementwise.",
    "softplus": "log(1 + exp(beta * x)) / beta; linear above threshold.",
    "softsign": "x / (1 + |x|), elementwise.",
}

_BINARY = {
    "add": "input + alpha * other, with broadcasting and PyTorch's type promotion.",
    "sub": "input - alpha * other, with broadcasting and PyTorch's type promotion.",
    "mul": "input * other, with broadcasting and PyTorch's type promotion.",
    "div": "input / other (true division), with broadcasting and type promotion.",
    "true_divide": "input / other; the same as div.",
    "pow": "input raised to exponent (a tensor or a Python number), elementwise.",
    "atan2": "Arctangent of input / other, taking the quadrant from both signs.",
    "arctan2": "Arctangent of input / other; the same as atan2.",
    "hypot": "sqrt(input ** 2 + other ** 2), elementwise.",
    "logaddexp": "log(exp(input) + exp(other)), elementwise, computed stably.",
    "fmod": "Remainder of input / other with the sign of input (C's fmod).",
    "remainder": "Remainder of input / other with the sign of other (Python's %).",
    "maximum": "Elementwise maximum of two tensors (NaN wins).",
    "minimum": "Elementwise minimum of two tensors (NaN wins).",
    "fill_": "Fill input with value, in place.",
    "zero_": "Fill input with zeros, in place.",
}

_COMPARE = {
    "eq": "input == other, elementwise, as a bool tensor.",
    "ne": "input != other, elementwise, as a bool tensor.",
    "not_equal": "input != other, elementwise; the same as ne.",
    "lt": "input < other, elementwise, as a bool tensor.",
    "less": "input < other, elementwise; the same as lt.",
    "le": "input <= other, elementwise, as a bool tensor.",
    "less_equal": "input <= other, elementwise; the same as le.",
    "gt": "input > other, elementwise, as a bool tensor.",
    "greater": "input > other, elementwise; the same as gt.",
    "ge": "input >= other, elementwise, as a bool tensor.",
    "greater_equal": "input >= other, elementwise; the same as ge.",
    "isclose": "Elementwise |input - other| <= atol + rtol * |other| (equal_nan= as PyTorch).",
    "allclose": "Whether every element of input is close to other (see isclose), as a bool.",
    "isnan": "Whether each element is NaN, as a bool tensor.",
    "isinf": "Whether each element is +inf or -inf, as a bool tensor.",
    "isfinite": "Whether each element is neither inf nor NaN, as a bool tensor.",
    "logical_and": "Elementwise logical AND of the truth values, as a bool tensor.",
    "logical_or": "Elementwise logical OR of the truth values, as a bool tensor.",
    "logical_xor": "Elementwise logical XOR of the truth values, as a bool tensor.",
    "logical_not": "Elementwise logical NOT of the truth values, as a bool tensor.",
    "bitwise_and": "Bitwise AND of integer or bool tensors (the & operator).",
    "bitwise_or": "Bitwise OR of integer or bool tensors (the | operator).",
    "bitwise_xor": "Bitwise XOR of integer or bool tensors (the ^ operator).",
    "bitwise_not": "Bitwise NOT of an integer or bool tensor (the ~ operator).",
}

_REDUCE = {
    "sum": "Sum of the elements, over dim (int or tuple) if given; keepdim= and dtype= "
           "as PyTorch.",
    "mean": "Mean of the elements, over dim (int or tuple) if given; keepdim= and dtype= "
            "as PyTorch.",
    "prod": "Product of the elements, over one dim if given; keepdim= and dtype= as PyTorch.",
    "max": "The largest element; with dim, a (values, indices) named tuple; with a tensor "
           "argument, the elementwise maximum.",
    "min": "The smallest element; with dim, a (values, indices) named tuple; with a tensor "
           "argument, the elementwise minimum.",
    "argmax": "Index of the largest element (in the flattened tensor, or along dim).",
    "argmin": "Index of the smallest element (in the flattened tensor, or along dim).",
    "var": "Variance over dim (all elements if omitted), with Bessel's correction unless "
           "correction=0 (or unbiased=False).",
    "std": "Standard deviation over dim (all elements if omitted), with Bessel's correction "
           "unless correction=0 (or unbiased=False).",
    "all": "Whether every element is true (over dim if given), as a bool tensor.",
    "any": "Whether any element is true (over dim if given), as a bool tensor.",
    "count_nonzero": "Number of non-zero elements (over dim if given), as an int64 tensor.",
    "logsumexp": "log(sum(exp(input))) over dim, computed stably; keepdim= as PyTorch.",
    "softmax": "Softmax over dim: exp(x) / sum(exp(x)), computed stably.",
    "log_softmax": "log(softmax(input, dim)), computed stably.",
    "cumsum": "Cumulative sum along dim.",
    "sort": "(values, indices) sorted along dim (default the last); descending= and "
            "stable= as PyTorch.",
    "argsort": "Indices that sort input along dim (default the last).",
    "topk": "(values, indices) of the k largest (or smallest, largest=False) along dim.",
}

_LINALG = {
    "matmul": "Matrix product with PyTorch's rules for 1-D, 2-D and batched operands "
              "(the @ operator).",
    "mm": "Product of two 2-D matrices.",
    "mv": "Product of a 2-D matrix and a 1-D vector.",
    "dot": "Dot product of two 1-D tensors.",
    "bmm": "Batched product of two 3-D tensors, (b, n, m) @ (b, m, p).",
    "outer": "Outer product of two 1-D tensors.",
    "ger": "Outer product of two 1-D tensors; the same as outer.",
}

_SHAPE = {
    "view": "A view with a new shape (the elements must be laid out compatibly); -1 "
            "infers one size; a dtype argument is not supported.",
    "view_as": "A view of input with other's shape.",
    "reshape_as": "input reshaped to other's shape (a view where possible).",
    "flatten": "Dims start_dim..end_dim merged into one (a view where possible).",
    "transpose": "A view with dims dim0 and dim1 swapped.",
    "swapaxes": "A view with two dims swapped; the same as transpose.",
    "t": "Transpose of a tensor of at most 2 dims (a view).",
    "T": "The tensor with all its dims reversed (a view; PyTorch deprecates it beyond 2-D).",
    "mT": "A view with the last two dims swapped (batched matrix transpose).",
    "expand": "A view with size-1 dims broadcast to the given sizes (-1 keeps a size), "
              "without copying.",
    "expand_as": "input expanded to other's shape (a view).",
    "unbind": "A tuple of the slices along dim, each without that dim (views).",
    "select": "The slice at index along dim, without that dim (a view).",
    "narrow": "The slice start:start + length along dim (a view).",
    "chunk": "Split into the given number of chunks along dim (views; the last may be "
             "smaller).",
    "hsplit": "Split horizontally (along dim 1, or 0 for 1-D) into sections or at indices.",
    "vsplit": "Split vertically (along dim 0) into sections or at indices.",
    "cat": "Concatenate a sequence of tensors along an existing dim.",
    "stack": "Stack a sequence of same-shaped tensors along a new dim.",
    "flip": "A copy with the order of elements reversed along the given dims.",
    "tril": "The lower triangle (on and below the diagonal + k) of the last two dims; "
            "zeros elsewhere.",
    "triu": "The upper triangle (on and above the diagonal + k) of the last two dims; "
            "zeros elsewhere.",
}

_INDEX = {
    "index_select": "The entries at the 1-D index along dim (a copy).",
    "gather": "Values picked along dim by an index tensor of the output's shape.",
    "masked_select": "A 1-D tensor of the elements where the bool mask (broadcast) is true.",
    "index_put_": "input[indices] = values in place (accumulate=True adds instead).",
}

_CLAMP = {
    "clamp": "Each element limited to [min, max]; either bound may be None or a tensor.",
    "clip": "Each element limited to [min, max]; the same as clamp.",
    "clamp_min": "Each element limited from below by min.",
    "clamp_max": "Each element limited from above by max.",
}

_TYPES = {
    "float": "input converted to float32 (input itself if it already is).",
    "double": "input converted to float64 (input itself if it already is).",
    "long": "input converted to int64 (input itself if it already is).",
    "bool": "input converted to bool (input itself if it already is).",
    "type_as": "input converted to other's dtype.",
    "element_size": "Bytes per element of input's dtype.",
    "nelement": "Number of elements; the same as numel.",
    "numel": "Number of elements of input.",
    "is_floating_point": "Whether input's dtype is a floating point type.",
    "is_tensor": "Whether obj is a tapegrad Tensor.",
}

_CREATION = {
    "arange": "Values from start (default 0) to end, exclusive, spaced by step; int64 "
              "when all arguments are integers, else the default float dtype.",
    "linspace": "steps values evenly spaced from start to end, inclusive.",
    "eye": "A 2-D tensor with ones on the diagonal and zeros elsewhere.",
    "new_zeros": "A tensor of zeros of the given size with input's dtype (unless dtype=).",
    "new_ones": "A tensor of ones of the given size with input's dtype (unless dtype=).",
    "new_empty": "An uninitialised tensor of the given size with input's dtype (unless "
                 "dtype=).",
    "new_full": "A tensor of the given size filled with fill_value, with input's dtype "
                "(unless dtype=).",
    "new_tensor": "A new tensor from data (copied, a leaf), with input's dtype unless dtype=.",
}

DOCS = {**_UNARY, **_BINARY, **_COMPARE, **_REDUCE, **_LINALG, **_SHAPE, **_INDEX,
        **_CLAMP, **_TYPES, **_CREATION}


def _doc_for(name):
    if name in DOCS:
        return DOCS[name]
    if name.endswith("_") and name[:-1] in DOCS:
        return f"In-place {name[:-1]}: {DOCS[name[:-1]][0].lower()}{DOCS[name[:-1]][1:]}"
    return None


def _fill(name, obj):
    """Give obj (a function or property) the docstring of name, unless it has one. An
    object installed under several names (clip is clamp) is described by its own name."""
    if not isinstance(obj, (property, types.FunctionType)) or (obj.__doc__ or "").strip():
        return
    own_name = getattr(obj, "__name__", None)
    doc = _doc_for(own_name) if own_name in DOCS else _doc_for(name)
    if doc:
        obj.__doc__ = doc


def _findable(fn):
    """Whether fn is where its __module__ and __qualname__ say (pickle, help() and the API
    reference look it up there)."""
    owner = sys.modules.get(fn.__module__)
    for part in fn.__qualname__.split("."):
        owner = getattr(owner, part, None)
    return owner is fn


def attach(Tensor, *namespaces):
    """Docstrings for the installed Tensor methods and the functions of each namespace
    (a module's globals()) that have none of their own. A function made by a factory
    (tapegrad.exp) is renamed to where the user finds it."""
    for name, member in vars(Tensor).items():
        if not name.startswith("_"):
            _fill(name, member)
    for namespace in namespaces:
        for name, value in list(namespace.items()):
            if not name.startswith("_"):
                _fill(name, value)
                if isinstance(value, types.FunctionType) and not _findable(value):
                    value.__module__ = namespace["__name__"]
                    value.__qualname__ = name
