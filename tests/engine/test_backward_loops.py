"""The elementwise backward loops (tapegrad/ops/_codegen.py): the flat and unit-stride
loops come in one copy per case of which inputs want a gradient, so that no store sits
under a flag inside a loop (it kept LLVM from vectorising: a flat mul's backward ran 3x
slower). Every copy must give the values the odometer's strided loop, which keeps its
flag tests, gives: bitwise, for each case (a, b or both wanting a gradient, a fresh
gradient buffer or one accumulated into, x op x)."""
import ast

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.ops import _codegen
from tapegrad.ops.registry import OPS

RNG = np.random.default_rng(515)
TWO_GRADS = [o.name for o in OPS if o.kind == "binary" and all(g is not None for g in o.grads)
             and o.name not in ("masked_fill",)]
GENERATED = [o for o in OPS if o.kind in ("unary", "binary")]


def _loops_with_flag_tests(src, fn_name):
    """The `for` loops of fn_name's flat (`for i`) and unit-stride (reading Gu) copies
    that test a flag w0/w1 inside."""
    fn = next(n for n in ast.walk(ast.parse(src))
              if isinstance(n, ast.FunctionDef) and n.name == fn_name)
    bad = []
    for loop in (n for n in ast.walk(fn) if isinstance(n, ast.For)):
        names = {x.id for x in ast.walk(loop) if isinstance(x, ast.Name)}
        if loop.target.id != "i" and "Gu" not in names:
            continue            # the odometer's strided loop: it keeps its tests
        tests = [x for x in ast.walk(loop) if isinstance(x, ast.If)
                 and {y.id for y in ast.walk(x.test) if isinstance(y, ast.Name)} & {"w0", "w1"}]
        if tests:
            bad.append(ast.unparse(loop).splitlines()[0])
    return bad


@pytest.mark.parametrize("op", GENERATED, ids=lambda o: o.name)
def test_no_flag_test_inside_a_flat_or_unit_stride_backward_loop(op):
    assert _loops_with_flag_tests(_codegen._source(op), "_bwd_loop") == []


def test_the_check_sees_a_flag_inside_a_loop():
    src = ("def _bwd_loop(G, GA, n, w0):\n    for i in range(n):\n        g = G[i]\n"
           "        if w0:\n            GA[i] = g\n")
    assert _loops_with_flag_tests(src, "_bwd_loop") == ["for i in range(n):"]


def _fn(name):
    """The function of op name (pow_tensor is pow with a tensor exponent, and so on)."""
    return getattr(tg, name.removesuffix("_tensor"))


def _operands(name, dtype):
    a = RNG.uniform(0.5, 2.0, (40, 30)) * RNG.choice([-1.0, 1.0], (40, 30))
    b = RNG.uniform(0.5, 2.0, (40, 30)) * RNG.choice([-1.0, 1.0], (40, 30))
    if name == "pow_tensor":
        a = np.abs(a)
    a[0, :3] = b[0, :3]           # ties (maximum/minimum split the gradient there)
    return a.astype(dtype), b.astype(dtype)


def _grads(name, a, b, g, layout, wants, twice):
    """(a's gradient, b's gradient) of op(a, b) with incoming gradient g, the operands laid
    out flat (contiguous), as column slices of wider arrays (the unit-stride loop) or as
    transposes (the strided loop)."""
    def leaf(x, want):
        if layout == "flat":
            t = tg.tensor(x, requires_grad=want)
            return t, t
        if layout == "unit":
            wide = np.concatenate([x, x[:, :7]], axis=1)
            base = tg.tensor(wide, requires_grad=want)
            return base, base[:, :x.shape[1]]
        base = tg.tensor(x.T.copy(), requires_grad=want)
        return base, base.t()
    (la, xa), (lb, xb) = leaf(a, "a" in wants), leaf(b, "b" in wants)
    for _ in range(2 if twice else 1):
        _fn(name)(xa, xb).backward(tg.tensor(g))

    def grad(leaf_):
        if leaf_.grad is None:
            return None
        x = leaf_.grad.numpy()
        return {"flat": x, "unit": x[:, :a.shape[1]], "strided": x.T}[layout]
    return grad(la), grad(lb)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", TWO_GRADS)
def test_every_case_of_the_backward_loops_agrees_with_the_strided_loop(name, dtype):
    a, b = _operands(name, dtype)
    g = RNG.standard_normal(a.shape).astype(dtype)
    with np.errstate(all="ignore"):
        for wants in ("a", "b", "ab"):
            for twice in (False, True):
                want = _grads(name, a, b, g, "strided", wants, twice)
                assert (want[0] is not None) == ("a" in wants)
                assert (want[1] is not None) == ("b" in wants)
                for layout in ("flat", "unit"):
                    got = _grads(name, a, b, g, layout, wants, twice)
                    for k in range(2):
                        if want[k] is None:
                            assert got[k] is None
                        else:
                            np.testing.assert_array_equal(
                                got[k], want[k], err_msg=f"{name} {layout} wants={wants} "
                                f"twice={twice} input {k}")


@pytest.mark.parametrize("name", TWO_GRADS)
def test_an_op_of_a_tensor_with_itself_adds_both_gradients(name):
    """x op x: both gradients land in one buffer (the second accumulates into the first)."""
    a, _ = _operands(name, np.float64)
    g = RNG.standard_normal(a.shape)
    x = tg.tensor(a, requires_grad=True)
    with np.errstate(all="ignore"):
        _fn(name)(x, x).backward(tg.tensor(g))
        ga, gb = _grads(name, a, a, g, "strided", "ab", False)
    np.testing.assert_array_equal(x.grad.numpy(), ga + gb)


def test_mul_backward_values():
    """The flat loops' values, exactly: d(a*b)/da = g*b, d(a*b)/db = g*a, accumulated."""
    a, b = _operands("mul", np.float32)
    g = RNG.standard_normal(a.shape).astype(np.float32)
    x, y = tg.tensor(a, requires_grad=True), tg.tensor(b, requires_grad=True)
    (x * y).backward(tg.tensor(g))
    np.testing.assert_array_equal(x.grad.numpy(), g * b)
    np.testing.assert_array_equal(y.grad.numpy(), g * a)
    (x * tg.tensor(b)).backward(tg.tensor(g))           # a alone, accumulating
    np.testing.assert_array_equal(x.grad.numpy(), g * b + g * b)
    np.testing.assert_array_equal(y.grad.numpy(), g * a)


def _loop_heads(src, fn_name):
    fn = next(n for n in ast.walk(ast.parse(src))
              if isinstance(n, ast.FunctionDef) and n.name == fn_name)
    return [ast.unparse(n.iter) for n in ast.walk(fn) if isinstance(n, ast.For)]


@pytest.mark.parametrize("op", [o for o in GENERATED if o.kind == "unary"],
                         ids=lambda o: o.name)
def test_a_unary_op_compiles_no_scalar_b_copies(op):
    """A unary op has no b, so its loops have no copy for a scalar b (the engine marks
    every unary row bscal, which sent the flat loops to such copies and left the plain
    ones dead: two more vectorised loops to compile per kernel). Forward: in place, flat,
    unit-stride, strided; backward: flat, unit-stride, strided."""
    src = _codegen._source(op)
    assert "bscal:" not in src and "B[0]" not in src
    assert _loop_heads(src, "_fwd_loop") == ["range(n)"] * 2 + ["range(inner)"] * 2
    assert _loop_heads(src, "_bwd_loop") == ["range(n)", "range(inner)", "range(inner)"]


def test_a_binary_op_keeps_its_scalar_b_loops():
    src = _codegen._source(next(o for o in OPS if o.name == "mul"))
    assert src.count("if flat and bscal:") == 2 and "b = B[0]" in src
