"""Elementwise ops: one line each. Gradient formulas follow PyTorch's derivatives.yaml
(so values match it bit for bit where the arithmetic allows); what each op saves, and so
which in-place changes break its backward, is read off these formulas.
"""
from .registry import OpDef, register


def unary(name, grad_fn, forward, grad):
    return register(OpDef(name, grad_fn, "unary", forward=forward, grads=(grad,)))


def binary(name, grad_fn, forward, grad_a, grad_b, scalar_slot=False):
    """b is a tensor element or the Python scalar operand. scalar_slot: like PyTorch,
    the scalar shows up as a (None, 0) entry of next_functions."""
    op = register(OpDef(name, grad_fn, "binary", forward=forward, grads=(grad_a, grad_b)))
    op.scalar_slot = scalar_slot
    return op


binary("add", "AddBackward0", "a + b", "g", "g", scalar_slot=True)
binary("sub", "SubBackward0", "a - b", "g", "-g", scalar_slot=True)
binary("rsub", "RsubBackward1", "b - a", "-g", None)
binary("mul", "MulBackward0", "a * b", "g * b", "g * a", scalar_slot=True)
binary("div", "DivBackward0", "a / b", "g / b", "-g * ((a / b) / b)", scalar_slot=True)
# like PyTorch, squaring is a multiply (exact, and it vectorises; pow is a libm call)
binary("pow", "PowBackward0", "a * a if b == two else a ** b",
       "zero if b == zero else (g * two * a if b == two else g * b * a ** (b - one))", None)
binary("pow_tensor", "PowBackward1", "a * a if b == two else a ** b",
       "zero if b == zero else (g * two * a if b == two else g * b * a ** (b - one))",
       "zero if (a == zero and b >= zero) else g * out * log(a)")
binary("rpow", "PowBackward2", "b ** a",
       "zero if (b == zero and a >= zero) else g * out * log(b)", None)

unary("neg", "NegBackward0", "-a", "-g")
unary("reciprocal", "ReciprocalBackward0", "one / a", "-g * (out * out)")
unary("exp", "ExpBackward0", "exp(a)", "g * out")
unary("log", "LogBackward0", "log(a)", "g / a")
unary("sin", "SinBackward0", "sin(a)", "g * cos(a)")
unary("cos", "CosBackward0", "cos(a)", "g * -sin(a)")
unary("tanh", "TanhBackward0", "tanh(a)", "g * (one - out * out)")
unary("sigmoid", "SigmoidBackward0", "one / (one + exp(-a))", "g * (one - out) * out")
unary("relu", "ReluBackward0", "zero if a <= zero else a", "g if out > zero else zero")
unary("sqrt", "SqrtBackward0", "sqrt(a)", "g / (two * out)")
unary("abs", "AbsBackward0", "a if a >= zero else -a", "g * sign(a)")
unary("clone", "CloneBackward0", "a", "g")
unary("zero_", "ZeroBackward0", "zero", "zero")
unary("fill_", "FillBackward2", "s", "zero")
