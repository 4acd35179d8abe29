"""What Tensor and the tapegrad namespace are made of, beyond the Tensor class itself.

The front's modules each define the methods and functions of their ops and register
them here as they load (``method``/``function``); ``install`` then puts every entry on
Tensor and into the tapegrad namespace in one loop, when the package has loaded. So a
module never patches Tensor itself, and one name is defined once: registering a name
twice is an error unless the second entry says it replaces the first.
"""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)

METHODS = {}        # Tensor attribute -> function, property or value
FUNCTIONS = {}      # tapegrad.<name> -> function
FUNCTIONAL = {}     # tapegrad.nn.functional.<name> -> function (the ops' own fronts)


def _put(table, what, name, value, replace):
    if name in table and not replace and table[name] is not value:
        raise RuntimeError(f"tapegrad: {what} {name!r} is defined twice")
    table[name] = value
    return value


def method(name, value, replace=False):
    """Register Tensor.<name>; returns value."""
    return _put(METHODS, "Tensor method", name, value, replace)


def methods(replace=False, **named):
    """Register several Tensor methods by keyword."""
    for name, value in named.items():
        method(name, value, replace)


def function(name, value, replace=False):
    """Register tapegrad.<name>; returns value."""
    return _put(FUNCTIONS, "function", name, value, replace)


def functions(replace=False, **named):
    for name, value in named.items():
        function(name, value, replace)


def functional(name, value, replace=False):
    """Register tapegrad.nn.functional.<name>; returns value."""
    return _put(FUNCTIONAL, "nn.functional function", name, value, replace)


def install(cls, namespace):
    """Put every registered method on cls and every function into namespace."""
    for name, value in METHODS.items():
        setattr(cls, name, value)
    for name, value in FUNCTIONS.items():
        namespace.setdefault(name, value)


def install_functional(namespace):
    """Put every registered nn.functional function into namespace (nn.functional's)."""
    namespace.update(FUNCTIONAL)
