"""The shortcuts through Numba's compile-time overhead (tapegrad._engine.compile_speed)
give Numba's own answers."""
import os
import subprocess
import sys

import numpy as np
import pytest
from numba import njit, types
from numba.core import errors
from numba.core.compiler import Flags
from numba.extending import overload

import tapegrad  # noqa: F401  (installs the shortcuts)


def _numba_values(flags):
    """TargetConfig.values as Numba writes it: every option through its property."""
    return {name: getattr(flags, name) for name in type(flags).options}


def _flag_cases():
    plain = Flags()
    explicit_default = Flags()
    explicit_default.nrt = Flags.options["nrt"].default
    nrt = Flags()
    nrt.nrt = True
    nrt_copy = nrt.copy()
    boundscheck = Flags()
    boundscheck.boundscheck = True
    both = nrt.copy()
    both.boundscheck = True
    return [plain, explicit_default, nrt, nrt_copy, boundscheck, both]


def test_flags_values_hash_and_equality_match_numbas_definitions():
    cases = _flag_cases()
    for a in cases:
        assert a.values() == _numba_values(a)
        assert list(a.values()) == list(type(a).options)
        assert hash(a) == hash(tuple(sorted(_numba_values(a))))
        for b in cases:
            assert (a == b) == (_numba_values(a) == _numba_values(b))
    assert cases[0] == cases[1]             # an option set to its default equals unset
    assert cases[2] == cases[3] and cases[2] != cases[0] and cases[4] != cases[5]
    assert Flags().__eq__(object()) is NotImplemented


def _isnan_by_self_compare(x):
    pass


@overload(_isnan_by_self_compare)
def _isnan_by_self_compare_impl(x):
    def impl(x):
        return x != x          # fastmath's nnan folds this to False
    return impl


def test_an_overload_resolved_again_under_other_flags_keeps_each_callers_implementation():
    """The overload inherits the caller's fastmath. A plain caller typed after a
    fastmath one resolves from the memo, and must get the plain implementation back."""
    @njit
    def plain_first(x):
        return _isnan_by_self_compare(x)

    @njit(fastmath=True)
    def fast(x):
        return _isnan_by_self_compare(x)

    @njit
    def plain_after(x):
        return _isnan_by_self_compare(x)

    assert plain_first(np.nan) is True
    assert fast(np.nan) is False
    assert plain_after(np.nan) is True
    assert plain_after(1.0) is False


def test_subscripts_type_as_before_and_failures_still_raise_numbas_error():
    @njit
    def pick(a, i, j):
        a[i] = a[j] * 2.0
        return a[i], (1, 2.5)[1]

    a = np.arange(4.0)
    assert pick(a, 0, 3) == (6.0, 2.5) and a[0] == 6.0

    @njit
    def bad(x):
        return x["key"]

    for _ in range(2):                      # a failure is not remembered
        with pytest.raises(errors.TypingError, match="No implementation of function"):
            bad(np.arange(3.0))


def test_the_memo_returns_numbas_signature():
    from numba.core.registry import cpu_target
    import operator
    ctx = cpu_target.typing_context
    fnty = ctx.resolve_value_type(operator.getitem)
    args = (types.float64[:], types.intp)
    first = ctx.resolve_function_type(fnty, args, {})
    again = ctx.resolve_function_type(fnty, args, {})
    assert first == again and first.return_type == types.float64


@pytest.mark.parametrize("setting", ["0", "1"])
def test_setting_the_variable_to_0_leaves_numba_unchanged(setting):
    code = ("import tapegrad\nfrom numba.core import targetconfig, errors\n"
            "from numba.core.types.functions import BaseFunction\n"
            "print(targetconfig.TargetConfig.__eq__.__module__, "
            "BaseFunction.get_call_type.__module__, errors.ColorShell.__module__)")
    env = dict(os.environ, TAPEGRAD_NUMBA_SHORTCUTS=setting)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    numba_own = ["numba.core.targetconfig", "numba.core.types.functions", "numba.core.errors"]
    assert out == (["tapegrad._engine.compile_speed"] * 3 if setting == "1" else numba_own)
