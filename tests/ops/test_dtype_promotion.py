"""Dtype promotion and casts: PyTorch's type promotion between float32, float64, int64, bool
and Python scalars, integer arithmetic, gradients through mixed float32/float64 ops, in-
place rules; integer and bool tensors (no gradients, casts, unary ops and reductions).

PyTorch is optional: a test that compares with it imports it with pytest.importorskip.
"""
import operator

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import gradcheck
from tests.helpers import as_tensor, assert_close, assert_same_error, dtype_name, raised, rng


# ------------------------------------------------------------------ dtype promotion
# operand kinds: dimensioned tensors, 0-d tensors, Python scalars
KINDS = {
    "f32": lambda L: L.tensor([1.5, 2.0], dtype=L.float32),
    "f64": lambda L: L.tensor([1.5, 2.0], dtype=L.float64),
    "i64": lambda L: L.tensor([3, 2]),
    "bool": lambda L: L.tensor([True, False]),
    "f32_0d": lambda L: L.tensor(1.5, dtype=L.float32),
    "f64_0d": lambda L: L.tensor(2.5, dtype=L.float64),
    "i64_0d": lambda L: L.tensor(3),
    "bool_0d": lambda L: L.tensor(True),
    "int": lambda L: 2,
    "float": lambda L: 0.5,
    "py_bool": lambda L: True,
}
SCALARS = ("int", "float", "py_bool")
PAIRS = [(a, b) for a in KINDS for b in KINDS if not (a in SCALARS and b in SCALARS)]
OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
       "**": operator.pow, "<": operator.lt, "==": operator.eq, ">=": operator.ge}


def _outcome(L, op, ka, kb):
    """('float32', values) or (exception type, message) of KINDS[ka] op KINDS[kb]."""
    try:
        r = OPS[op](KINDS[ka](L), KINDS[kb](L))
    except Exception as e:      # noqa: BLE001
        return type(e).__name__, str(e).replace("tapegrad", "torch")
    return dtype_name(r.dtype), np.asarray(r.tolist(), np.float64)


@pytest.mark.parametrize("op", list(OPS))
def test_promotion_table_matches_torch(op):
    """Every (operand kind, operand kind) pair: same dtype and values, or same error."""
    torch = pytest.importorskip("torch")
    wrong = []
    for ka, kb in PAIRS:
        (d1, v1), (d2, v2) = _outcome(tg, op, ka, kb), _outcome(torch, op, ka, kb)
        if isinstance(v1, np.ndarray) and isinstance(v2, np.ndarray):
            same = v1.shape == v2.shape and np.allclose(v1, v2, rtol=1e-6, equal_nan=True)
        else:
            same = v1 == v2
        if d1 != d2 or not same:
            wrong.append(f"{ka} {op} {kb}: tapegrad {d1} {v1}; torch {d2} {v2}")
    assert not wrong, "\n".join(wrong)


def test_result_type_matches_torch():
    torch = pytest.importorskip("torch")
    wrong = [f"{ka}, {kb}" for ka, kb in PAIRS
             if dtype_name(tg.result_type(KINDS[ka](tg), KINDS[kb](tg)))
             != dtype_name(torch.result_type(KINDS[ka](torch), KINDS[kb](torch)))]
    assert not wrong


# (description, program, dtype, values): no PyTorch needed
KEY_PROMOTIONS = [
    ("int_tensor * 0.5", lambda: tg.tensor([1, 3]) * 0.5, tg.float32, [0.5, 1.5]),
    ("0.5 * int_tensor", lambda: 0.5 * tg.tensor([1, 3]), tg.float32, [0.5, 1.5]),
    ("int / int", lambda: tg.tensor([1, 3]) / tg.tensor([2, 2]), tg.float32, [0.5, 1.5]),
    ("int / 2", lambda: tg.tensor([1, -3]) / 2, tg.float32, [0.5, -1.5]),
    ("f32 + f64", lambda: tg.tensor([1.5]) + tg.tensor([0.25], dtype=tg.float64),
     tg.float64, [1.75]),
    ("f64 * f32", lambda: tg.tensor([1.5], dtype=tg.float64) * tg.tensor([2.0]),
     tg.float64, [3.0]),
    ("f32 * 0-d f64", lambda: tg.tensor([1.5, 2.0]) * tg.tensor(2.0, dtype=tg.float64),
     tg.float32, [3.0, 4.0]),
    ("0-d f64 - f32", lambda: tg.tensor(2.0, dtype=tg.float64) - tg.tensor([1.5]),
     tg.float32, [0.5]),
    ("int * 0-d f64", lambda: tg.tensor([1, 2]) * tg.tensor(0.5, dtype=tg.float64),
     tg.float64, [0.5, 1.0]),
    ("int + 0-d f32", lambda: tg.tensor([1, 2]) + tg.tensor(0.5), tg.float32, [1.5, 2.5]),
    ("f32 + 0-d int", lambda: tg.tensor([1.5]) + tg.tensor(2), tg.float32, [3.5]),
    ("0-d f32 * 0-d f64", lambda: tg.tensor(1.5) * tg.tensor(2.0, dtype=tg.float64),
     tg.float64, 3.0),
    ("int + 0-d int", lambda: tg.tensor([1, 2]) + tg.tensor(5), tg.int64, [6, 7]),
    ("f32 ** 2", lambda: tg.tensor([1.5]) ** 2, tg.float32, [2.25]),
    ("f64 + 1", lambda: tg.tensor([1.5], dtype=tg.float64) + 1, tg.float64, [2.5]),
    ("bool + bool", lambda: tg.tensor([True, False]) + tg.tensor([True, False]),
     tg.bool, [True, False]),
    ("bool * 2", lambda: tg.tensor([True, False]) * 2, tg.int64, [2, 0]),
    ("bool + 0.5", lambda: tg.tensor([True, False]) + 0.5, tg.float32, [1.5, 0.5]),
    ("bool + 0-d int", lambda: tg.tensor([True, False]) + tg.tensor(3), tg.int64, [4, 3]),
    ("int < 2.5", lambda: tg.tensor([1, 3]) < 2.5, tg.bool, [True, False]),
    ("f32 == f64", lambda: tg.tensor([1.5, 2.0]) == tg.tensor([1.5, 1.0], dtype=tg.float64),
     tg.bool, [True, False]),
]


@pytest.mark.parametrize("desc,prog,dtype,values", KEY_PROMOTIONS,
                         ids=[k[0] for k in KEY_PROMOTIONS])
def test_key_promotions(desc, prog, dtype, values):
    r = prog()
    assert r.dtype is dtype
    assert r.tolist() == values


def test_result_type_key_cases():
    f64_0d, i64 = tg.tensor(1.0, dtype=tg.float64), tg.tensor([1])
    assert tg.result_type(i64, 0.5) is tg.float32
    assert tg.result_type(tg.tensor([1.0]), tg.tensor([1.0], dtype=tg.float64)) is tg.float64
    assert tg.result_type(tg.tensor([1.0]), f64_0d) is tg.float32
    assert tg.result_type(i64, f64_0d) is tg.float64
    assert tg.result_type(tg.tensor([True]), True) is tg.bool
    assert tg.result_type(tg.tensor([True]), 2) is tg.int64
    assert tg.result_type(i64, i64) is tg.int64
    assert tg.promote_types(tg.int64, tg.float32) is tg.float32
    assert tg.promote_types(tg.bool, tg.int64) is tg.int64


INT_A = np.array([2 ** 62, -7, 5, 0, 123456789])
INT_B = np.array([2, 3, -4, 9, -1])


@pytest.mark.parametrize("name,f", [
    ("a+b", lambda a, b: a + b), ("a-b", lambda a, b: a - b), ("a*b", lambda a, b: a * b),
    ("a*4", lambda a, b: a * 4), ("10-a", lambda a, b: 10 - a),
    ("a+True", lambda a, b: a + True), ("-a", lambda a, b: -a), ("abs", lambda a, b: abs(a)),
    ("b**3", lambda a, b: b ** 3), ("b**|b|", lambda a, b: b ** abs(b)),
    ("2**|b|", lambda a, b: 2 ** abs(b)), ("a==b", lambda a, b: a == b),
])
def test_int_arithmetic_matches_numpy(name, f):
    """int64 results, wrapping on overflow exactly like NumPy."""
    r = f(tg.tensor(INT_A), tg.tensor(INT_B))
    expected = f(INT_A, INT_B)
    assert dtype_name(r.dtype) == expected.dtype.name
    assert r.tolist() == expected.tolist()


def test_int_true_division_is_float32():
    a, b = np.array([7, -7, 5, 1]), np.array([2, 2, -3, 3])
    r = tg.tensor(a) / tg.tensor(b)
    assert r.dtype is tg.float32
    np.testing.assert_array_equal(r.numpy(), a.astype(np.float32) / b.astype(np.float32))


def test_int_pow_negative_exponent_tensor():
    """PyTorch (unlike NumPy, and unlike a negative Python-int exponent, see
    INT_BOOL_ERRORS): 1 ** n = 1, (-1) ** n = +-1 and 0 otherwise."""
    r = tg.tensor([1, 2, -1, -1, 3]) ** tg.tensor([-1, -1, -1, -2, 2])
    assert r.dtype is tg.int64 and r.tolist() == [1, 0, -1, 1, 9]


# float32 / float64 operands, broadcasting both ways, a 0-d operand on either side
MIXED = [((2, 3), "float32", (), "float64"), ((), "float64", (2, 3), "float32"),
         ((3,), "float32", (2, 3), "float64"), ((2, 3), "float64", (3,), "float32")]
MIXED_IDS = ["*".join(f"{'x'.join(map(str, s)) or '0d'}-f{d[5:]}" for s, d in (m[:2], m[2:]))
             for m in MIXED]
MIXED_OPS = {"mul": lambda a, b: a * b, "div": lambda a, b: a / b,
             "pow": lambda a, b: a ** b, "sub": lambda a, b: a - b,
             "chain": lambda a, b: ((a + b) * a).exp().sum()}


def _mixed_leaves(L, sa, da, sb, db):
    a = np.arange(1, 1 + int(np.prod(sa))).reshape(sa) * 0.5
    b = np.arange(2, 2 + int(np.prod(sb))).reshape(sb) * 0.25
    return as_tensor(L, a, da, True), as_tensor(L, b, db, True)


@pytest.mark.parametrize("sa,da,sb,db", MIXED, ids=MIXED_IDS)
def test_gradients_flow_through_mixed_float_ops(sa, da, sb, db):
    """a * b: each operand's gradient arrives in its own dtype and shape."""
    a, b = _mixed_leaves(tg, sa, da, sb, db)
    (a * b).sum().backward()
    an, bn = a.detach().numpy().astype(np.float64), b.detach().numpy().astype(np.float64)
    shape = np.broadcast_shapes(sa, sb)
    ga = np.broadcast_to(bn, shape).sum(tuple(range(len(shape) - len(sa))))
    gb = np.broadcast_to(an, shape).sum(tuple(range(len(shape) - len(sb))))
    assert dtype_name(a.grad.dtype) == da and a.grad.shape == sa
    assert dtype_name(b.grad.dtype) == db and b.grad.shape == sb
    np.testing.assert_allclose(a.grad.numpy(), ga.reshape(sa), rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), gb.reshape(sb), rtol=1e-6)


@pytest.mark.parametrize("op", list(MIXED_OPS))
@pytest.mark.parametrize("sa,da,sb,db", MIXED, ids=MIXED_IDS)
def test_mixed_float_gradients_match_torch(sa, da, sb, db, op):
    torch = pytest.importorskip("torch")
    (a, b), (ta, tb) = _mixed_leaves(tg, sa, da, sb, db), _mixed_leaves(torch, sa, da, sb, db)
    out, tout = MIXED_OPS[op](a, b), MIXED_OPS[op](ta, tb)
    assert dtype_name(out.dtype) == dtype_name(tout.dtype)
    out.sum().backward()
    tout.sum().backward()
    for o, t in ((a, ta), (b, tb)):
        assert dtype_name(o.grad.dtype) == dtype_name(t.grad.dtype)
        assert_close(o.grad.numpy(), t.grad.numpy())


# ------------------------------------------------------------------ in-place promotion
def _iop(dtype, values, op, other):
    """x op= other on a fresh tensor x; returns x, checking op= kept it in place."""
    def prog(L):
        x = L.tensor(values, dtype=getattr(L, dtype))
        y = op(x, other(L) if callable(other) else other)
        assert y is x
        return x
    return prog


# (id, program, dtype and values, or the error message): the result must fit the target
INPLACE = [
    ("f32+=f64", _iop("float32", [1.0, 2.0], operator.iadd,
                      lambda L: L.tensor([0.5, 0.25], dtype=L.float64)), ("float32", [1.5, 2.25])),
    ("f64-=int", _iop("float64", [1.5, 2.0], operator.isub, lambda L: L.tensor([1, 2])),
     ("float64", [0.5, 0.0])),
    ("f32*=0-d f64", _iop("float32", [1.5, 2.0], operator.imul,
                          lambda L: L.tensor(2.0, dtype=L.float64)), ("float32", [3.0, 4.0])),
    ("int+=True", _iop("int64", [1, 2], operator.iadd, True), ("int64", [2, 3])),
    ("int*=3", _iop("int64", [1, -2], operator.imul, 3), ("int64", [3, -6])),
    ("int+=bool", _iop("int64", [1, 2], operator.iadd, lambda L: L.tensor([True, False])),
     ("int64", [2, 2])),
    ("int+=0.5", _iop("int64", [1, 2], operator.iadd, 0.5),
     "result type Float can't be cast to the desired output type Long"),
    ("int*=f32", _iop("int64", [1, 2], operator.imul, lambda L: L.tensor([1.5, 2.0])),
     "result type Float can't be cast to the desired output type Long"),
    ("int+=0-d f64", _iop("int64", [1, 2], operator.iadd,
                          lambda L: L.tensor(1.0, dtype=L.float64)),
     "result type Double can't be cast to the desired output type Long"),
    ("int/=2", _iop("int64", [1, 2], operator.itruediv, 2),
     "result type Float can't be cast to the desired output type Long"),
    ("bool+=1", _iop("bool", [True, False], operator.iadd, 1),
     "result type Long can't be cast to the desired output type Bool"),
]


@pytest.mark.parametrize("name,prog,expected", INPLACE, ids=[i[0] for i in INPLACE])
def test_inplace_promotion(name, prog, expected):
    if isinstance(expected, str):
        assert raised(prog, tg) == (RuntimeError, expected)
        return
    r = prog(tg)
    assert (dtype_name(r.dtype), r.tolist()) == expected


@pytest.mark.parametrize("name,prog,expected", INPLACE, ids=[i[0] for i in INPLACE])
def test_inplace_promotion_matches_torch(name, prog, expected):
    torch = pytest.importorskip("torch")
    if isinstance(expected, str):
        assert_same_error(prog)
        return
    r, t = prog(tg), prog(torch)
    assert (dtype_name(r.dtype), r.tolist()) == (dtype_name(t.dtype), t.tolist())


def test_inplace_mixed_dtype_carries_both_gradients():
    a = tg.tensor([1.0, 2.0], requires_grad=True)
    b = tg.tensor([0.5, 0.25], dtype=tg.float64, requires_grad=True)
    h = a * 3
    h += b * 2
    assert h.dtype is tg.float32
    h.sum().backward()
    assert a.grad.dtype is tg.float32 and a.grad.tolist() == [3.0, 3.0]
    assert b.grad.dtype is tg.float64 and b.grad.tolist() == [2.0, 2.0]


# ------------------------------------------------------------------ int/bool tensors
# (id, program, PyTorch's message)
REQUIRES_GRAD_ERRORS = [
    ("tensor_int", lambda L: L.tensor([1, 2], requires_grad=True),
     "Only Tensors of floating point and complex dtype can require gradients"),
    ("tensor_bool", lambda L: L.tensor([True, False], requires_grad=True),
     "Only Tensors of floating point and complex dtype can require gradients"),
    ("arange_int", lambda L: L.arange(3, requires_grad=True),
     "Only Tensors of floating point and complex dtype can require gradients"),
    ("ones_int", lambda L: L.ones(2, dtype=L.int64, requires_grad=True),
     "Only Tensors of floating point and complex dtype can require gradients"),
    ("zeros_bool", lambda L: L.zeros(2, dtype=L.bool, requires_grad=True),
     "Only Tensors of floating point and complex dtype can require gradients"),
    ("full_int", lambda L: L.full((2,), 3, requires_grad=True),
     "Only Tensors of floating point and complex dtype can require gradients"),
    ("requires_grad_int", lambda L: L.tensor([1, 2]).requires_grad_(),
     "only Tensors of floating point dtype can require gradients"),
    ("requires_grad_bool", lambda L: L.tensor([True]).requires_grad_(),
     "only Tensors of floating point dtype can require gradients"),
    ("requires_grad_after_long", lambda L: L.tensor([1.5]).long().requires_grad_(True),
     "only Tensors of floating point dtype can require gradients"),
    ("set_requires_grad_attr", lambda L: setattr(L.tensor([1, 2]), "requires_grad", True),
     "only Tensors of floating point and complex dtype can require gradients"),
]
RG_IDS = [r[0] for r in REQUIRES_GRAD_ERRORS]


@pytest.mark.parametrize("name,prog,msg", REQUIRES_GRAD_ERRORS, ids=RG_IDS)
def test_int_and_bool_tensors_cannot_require_grad(name, prog, msg):
    assert raised(prog, tg) == (RuntimeError, msg)


@pytest.mark.parametrize("name,prog,msg", REQUIRES_GRAD_ERRORS, ids=RG_IDS)
def test_requires_grad_errors_match_torch(name, prog, msg):
    assert_same_error(prog)


def test_int_tensor_requires_grad_false_is_fine():
    x = tg.tensor([1, 2]).requires_grad_(False)
    assert x.requires_grad is False and x.dtype is tg.int64


SOURCES = {"float32": [1.5, -2.7, 0.0, 3.0], "float64": [1.5, -2.7, 0.0, 3.0],
           "int64": [2, -3, 0, 7], "bool": [True, False, False, True]}
# how -> (target dtype, cast); a target of None keeps the source dtype
CASTS = {
    "to_float32": ("float32", lambda t, L: t.to(L.float32)),
    "to_float64": ("float64", lambda t, L: t.to(L.float64)),
    "to_int64": ("int64", lambda t, L: t.to(L.int64)),
    "to_bool": ("bool", lambda t, L: t.to(L.bool)),
    "to_dtype_kw": ("float64", lambda t, L: t.to(dtype=L.float64)),
    "float": ("float32", lambda t, L: t.float()),
    "double": ("float64", lambda t, L: t.double()),
    "long": ("int64", lambda t, L: t.long()),
    "bool": ("bool", lambda t, L: t.bool()),
    "to_other_f64": ("float64", lambda t, L: t.to(L.tensor([1.0], dtype=L.float64))),
    "to_other_int": ("int64", lambda t, L: t.to(L.tensor([1]))),
    "to_cpu": (None, lambda t, L: t.to("cpu")),
    "to_cpu_f64": ("float64", lambda t, L: t.to("cpu", L.float64)),
}


def _source(L, src):
    dt = getattr(L, src)
    return L.tensor(SOURCES[src], dtype=dt, requires_grad=dt.is_floating_point)


@pytest.mark.parametrize("how", list(CASTS))
@pytest.mark.parametrize("src", list(SOURCES))
def test_casts(src, how):
    """Values as NumPy's astype; float -> other float records ToCopyBackward0, a cast to
    the same dtype returns the tensor itself, int/bool results never require grad."""
    target, cast = CASTS[how]
    target = target or src
    x = _source(tg, src)
    y = cast(x, tg)
    assert dtype_name(y.dtype) == target
    assert y.tolist() == np.array(SOURCES[src], dtype=src).astype(target).tolist()
    if target == src:
        assert y is x
    elif src.startswith("float") and target.startswith("float"):
        assert y.requires_grad and y.grad_fn.name() == "ToCopyBackward0"
    else:
        assert not y.requires_grad and y.grad_fn is None


@pytest.mark.parametrize("src", list(SOURCES))
def test_casts_match_torch(src):
    torch = pytest.importorskip("torch")
    for how, (_, cast) in CASTS.items():
        x, tx = _source(tg, src), _source(torch, src)
        y, ty = cast(x, tg), cast(tx, torch)
        assert dtype_name(y.dtype) == dtype_name(ty.dtype), how
        assert y.tolist() == ty.tolist(), how
        assert (y is x) == (ty is tx), how
        assert y.requires_grad == ty.requires_grad, how
        assert (y.grad_fn and y.grad_fn.name()) == (ty.grad_fn and ty.grad_fn.name()), how


def test_float_casts_carry_gradients():
    """gradcheck through a float32 round trip: eps=1e-3 keeps float32 rounding (1e-7) out
    of the finite differences, which are exact for these polynomials."""
    x = as_tensor(tg, rng(12).uniform(0.5, 2.0, (2, 3)), requires_grad=True)
    assert gradcheck(lambda t: t.float().double() ** 2, [x], eps=1e-3) is True
    assert gradcheck(lambda t: t.to(tg.float32).to(tg.float64) * t, [x], eps=1e-3) is True
    assert gradcheck(lambda t: t.float() * t, [x], eps=1e-3) is True
    assert x.float().grad_fn.name() == "ToCopyBackward0"
    x32 = tg.tensor([1.0, -2.0], requires_grad=True)
    y = x32.double()
    assert y.grad_fn.name() == "ToCopyBackward0"
    (y * tg.tensor([3.0, 4.0], dtype=tg.float64)).sum().backward()
    assert x32.grad.dtype is tg.float32 and x32.grad.tolist() == [3.0, 4.0]


def test_casts_to_int_or_bool_cut_the_graph():
    x = tg.tensor([1.5, -2.5], requires_grad=True)
    for y in (x.long(), x.bool(), x.to(tg.int64), (x * 2).long()):
        assert not y.requires_grad and y.grad_fn is None
    back = x.long().float()
    assert not back.requires_grad


FLOAT_UNARY = {"exp": np.exp, "sqrt": np.sqrt, "sin": np.sin,
               "sigmoid": lambda a: 1 / (1 + np.exp(-a)), "tanh": np.tanh}


@pytest.mark.parametrize("src", ["int64", "bool"])
@pytest.mark.parametrize("name", list(FLOAT_UNARY))
def test_float_unary_ops_on_int_and_bool_give_float32(name, src):
    a = np.array([1, 4, 9, 2] if src == "int64" else [True, False, True, True])
    for r in (getattr(tg.tensor(a), name)(), getattr(tg, name)(tg.tensor(a))):
        assert r.dtype is tg.float32 and not r.requires_grad
        np.testing.assert_allclose(r.numpy(), FLOAT_UNARY[name](a.astype(np.float64)),
                                   rtol=1e-6)


def test_neg_and_abs_keep_int64():
    x = tg.tensor([3, -4, 0])
    for r, expected in ((-x, [-3, 4, 0]), (x.neg(), [-3, 4, 0]), (abs(x), [3, 4, 0]),
                        (x.abs(), [3, 4, 0]), (tg.abs(x), [3, 4, 0])):
        assert r.dtype is tg.int64 and r.tolist() == expected


_MASK_HINT = ("If you are trying to invert a mask, use the `~` or `logical_not()` operator "
              "instead.")
# (id, program, exception type, PyTorch's message)
INT_BOOL_ERRORS = [
    ("neg_bool", lambda L: -L.tensor([True, False]), RuntimeError,
     "Negation, the `-` operator, on a bool tensor is not supported. " + _MASK_HINT),
    ("abs_bool", lambda L: L.tensor([True]).abs(), NotImplementedError,
     "\"abs_cpu\" not implemented for 'Bool'"),
    ("bool_minus_bool", lambda L: L.tensor([True]) - L.tensor([False]), RuntimeError,
     "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
     "`logical_xor()` operator instead."),
    ("bool_minus_int", lambda L: L.tensor([True]) - 1, RuntimeError,
     "Subtraction, the `-` operator, with a bool tensor is not supported. " + _MASK_HINT),
    ("float_minus_bool", lambda L: L.tensor([1.5]) - L.tensor([True]), RuntimeError,
     "Subtraction, the `-` operator, with a bool tensor is not supported. " + _MASK_HINT),
    ("bool_pow_bool", lambda L: L.tensor([True]) ** L.tensor([False]), NotImplementedError,
     "\"pow\" not implemented for 'Bool'"),
    ("int_pow_negative_int", lambda L: L.tensor([1, 2]) ** -1, RuntimeError,
     "Integers to negative integer powers are not allowed."),
    ("mean_int", lambda L: L.tensor([1, 2]).mean(), RuntimeError,
     "mean(): could not infer output dtype. Input dtype must be either a floating point or "
     "complex dtype. Got: Long"),
]
IB_IDS = [e[0] for e in INT_BOOL_ERRORS]


@pytest.mark.parametrize("name,prog,exc,msg", INT_BOOL_ERRORS, ids=IB_IDS)
def test_int_and_bool_op_errors(name, prog, exc, msg):
    assert raised(prog, tg) == (exc, msg)


@pytest.mark.parametrize("name,prog,exc,msg", INT_BOOL_ERRORS, ids=IB_IDS)
def test_int_and_bool_op_errors_match_torch(name, prog, exc, msg):
    assert_same_error(prog)


def test_int_and_bool_reductions():
    b = tg.tensor([[True, False, True], [True, True, False]])
    i = tg.tensor([[3, -7, 5], [2, 9, -1]])
    for r, expected in ((b.sum(), 4), (b.sum(0), [2, 1, 1]), (b.sum(1, keepdim=True), [[2], [2]]),
                        (i.sum(), 11), (i.sum(1), [1, 10]), (tg.sum(i, 0), [5, 2, 4])):
        assert r.dtype is tg.int64 and r.tolist() == expected
    assert i.max().dtype is tg.int64 and i.max().item() == 9
    assert i.min().dtype is tg.int64 and i.min().item() == -7
    values, indices = i.max(1)
    assert values.dtype is tg.int64 and values.tolist() == [5, 9]
    assert indices.dtype is tg.int64 and indices.tolist() == [2, 1]
    values, indices = i.min(0)
    assert values.tolist() == [2, -7, -1] and indices.tolist() == [1, 0, 1]
    assert b.max().dtype is tg.bool and b.max().item() is True


def test_int_and_bool_reductions_match_torch():
    torch = pytest.importorskip("torch")
    progs = [lambda L, t: t.sum(), lambda L, t: t.sum(0), lambda L, t: t.max(),
             lambda L, t: t.min(), lambda L, t: t.max(1).values, lambda L, t: t.min(0).indices,
             lambda L, t: L.sum(t, 1, keepdim=True)]
    for values in ([[3, -7, 5], [2, 9, -1]], [[True, False, True], [True, True, False]]):
        for f in progs:
            r, t = f(tg, tg.tensor(values)), f(torch, torch.tensor(values))
            assert (dtype_name(r.dtype), r.tolist()) == (dtype_name(t.dtype), t.tolist())
