"""Elementwise ops: one line each. Gradient formulas follow PyTorch's derivatives.yaml
(so values match it bit for bit where the arithmetic allows); what each op saves, and so
which in-place changes break its backward, is read off these formulas.
"""
from .registry import OpDef, register


def unary(name, grad_fn, forward, grad, method=True):
    """method=False: the op takes arguments (s, s2), so its front lives in tapegrad._math."""
    op = register(OpDef(name, grad_fn, "unary", forward=forward, grads=(grad,)))
    op.method = method
    return op


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
# PyTorch's scalar-exponent special cases (PowKernel.cpp; 0 and 1 fill and copy), in its
# backward too, grad * (b * a ** (b - 1)) with the inner power special-cased again: exact
# where PyTorch's are, and they vectorise where a ** b is a libm call per element (the
# generated loops for a scalar b have one copy per constant tested: _codegen)
binary("pow", "PowBackward0",
       "one if b == zero else (a if b == one else (a * a if b == two else ("
       "a * a * a if b == 3.0 else (sqrt(a) if b == half else (one / sqrt(a) if b == -half"
       " else (one / a if b == -one else (one / (a * a) if b == -two else a ** b)))))))",
       "zero if b == zero else g * (b * (one if b == one else (a if b == two else ("
       "a * a if b == 3.0 else (a * a * a if b == 4.0 else (sqrt(a) if b == 1.5 else ("
       "one / sqrt(a) if b == half else (one / (a * a) if b == -one else a ** (b - one)))))))))",
       None)
# a tensor exponent varies per element: squaring alone is a multiply (any other exponent
# is a libm call per element, tests or not)
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
unary("relu", "ReluBackward0", "zero if a < zero else a",     # (-0. stays -0., as in PyTorch)
      "zero if out <= zero else g")        # (NaN passes its gradient, as PyTorch's)
unary("sqrt", "SqrtBackward0", "sqrt(a)", "g / (two * out)")
unary("abs", "AbsBackward0", "abs(a)",      # PyTorch's sgn: 0 for NaN (NumPy's sign: NaN)
      "g * (one if a > zero else (-one if a < zero else zero))")
unary("clone", "CloneBackward0", "a", "g")
unary("zero_", "ZeroBackward0", "zero", "zero")
unary("fill_", "FillBackward2", "s", "zero")

# s and s2 are the lower and upper bound (-inf / inf when absent); NaN stays NaN
unary("clamp", "ClampBackward1",
      "a if a != a else (s if s != s else (s2 if s2 != s2 else min(max(a, s), s2)))",
      "g if (a >= s and a <= s2) else zero", method=False)
unary("clamp_min", "ClampMinBackward0", "a if a != a else (s if s != s else max(a, s))",
      "g if a >= s else zero", method=False)
unary("clamp_max", "ClampMaxBackward0", "a if a != a else (s if s != s else min(a, s))",
      "g if a <= s else zero", method=False)
unary("sign", "SignBackward0",
      "one if a > zero else (-one if a < zero else zero)",   # NaN and -0. give +0.
      "zero")
unary("floor", "FloorBackward0", "floor(a)", "zero")
unary("ceil", "CeilBackward0", "ceil(a)", "zero")
unary("round", "RoundBackward0", "rint(a)", "zero")         # half to even, as PyTorch
unary("erf", "ErfBackward0", "erf(a)", "g * 1.1283791670955126 * exp(-(a * a))")
unary("log1p", "Log1PBackward0", "log1p(a)", "g / (one + a)")
unary("expm1", "Expm1Backward0", "expm1(a)", "g * (out + one)")
unary("exp2", "Exp2Backward0", "exp2(a)", "g * out * 0.6931471805599453")
unary("log2", "Log2Backward0", "log2(a)", "g / (a * 0.6931471805599453)")
unary("log10", "Log10Backward0", "log10(a)", "g / (a * 2.302585092994046)")
unary("rsqrt", "RsqrtBackward0", "one / sqrt(a)", "g * -half * (out * out * out)")
unary("trunc", "TruncBackward0", "trunc(a)", "zero")
unary("frac", "FracBackward0", "a - trunc(a)", "g")
unary("tan", "TanBackward0", "tan(a)", "g * (one + out * out)")
unary("asin", "AsinBackward0", "arcsin(a)", "g * (one / sqrt(one - a * a))")
unary("acos", "AcosBackward0", "arccos(a)", "g * -(one / sqrt(one - a * a))")
unary("atan", "AtanBackward0", "arctan(a)", "g / (a * a + one)")
unary("sinh", "SinhBackward0", "sinh(a)", "g * cosh(a)")
unary("cosh", "CoshBackward0", "cosh(a)", "g * sinh(a)")
unary("asinh", "AsinhBackward0", "arcsinh(a)", "g * (one / sqrt(a * a + one))")
unary("acosh", "AcoshBackward0", "arccosh(a)", "g * (one / sqrt(a * a - one))")
unary("atanh", "AtanhBackward0", "arctanh(a)", "g * (one / (one - a * a))")
unary("leaky_relu", "LeakyReluBackward0", "a if a > zero else a * s",
      "g if a > zero else g * s", method=False)
# erf's argument in the operand's dtype (1/sqrt(2) as sqrt(half)), as PyTorch's kernel: a
# float32 gelu then calls the float32 erf (vectorised), not the float64 one (libm)
unary("gelu", "GeluBackward0", "half * a * (one + erf(a * sqrt(half)))",
      "g * (half * (one + erf(a * sqrt(half)))"
      " + a * 0.3989422804014327 * exp(-half * a * a))", method=False)
unary("gelu_tanh", "GeluBackward0",
      "half * a * (one + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)))",
      "g * (half * (one + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)))"
      " + half * a * (one - tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)) ** 2)"
      " * 0.7978845608028654 * (one + 0.134145 * a * a))", method=False)
# PyTorch's silu kernel (x / (1 + e^-x)) and its infinitely differentiable backward
unary("silu", "SiluBackward0", "a / (one + exp(-a))",
      "g * (one / (one + exp(-a))) * (one + a * (one - one / (one + exp(-a))))", method=False)
# s = alpha; expm1 keeps small negative inputs exact, as PyTorch's kernel does
unary("elu", "EluBackward0", "a if a > zero else s * expm1(a)",
      "g if a > zero else g * s * exp(a)", method=False)
# s = min_val, s2 = max_val; the gradient passes strictly inside, as PyTorch's
unary("hardtanh", "HardtanhBackward0", "a if a != a else min(max(a, s), s2)",
      "g if (a > s and a < s2) else zero", method=False)
unary("logsigmoid", "LogSigmoidBackward0", "min(a, zero) - log1p(exp(-abs(a)))",
      "g * (one / (one + exp(a)))", method=False)
# s = beta, s2 = threshold
unary("softplus", "SoftplusBackward0", "a if a * s > s2 else log1p(exp(a * s)) / s",
      "g if a * s > s2 else g / (one + exp(-(a * s)))", method=False)
# PyTorch's where(a == b, g / 2, g).masked_fill(a < b, 0): a NaN operand passes g to both
binary("maximum", "MaximumBackward0", "a if (a != a or a > b) else b",
       "zero if a < b else (g * half if a == b else g)",
       "zero if a > b else (g * half if a == b else g)")
binary("minimum", "MinimumBackward0", "a if (a != a or a < b) else b",
       "zero if a > b else (g * half if a == b else g)",
       "zero if a < b else (g * half if a == b else g)")
# PyTorch's formulas (derivatives.yaml); b is a tensor element or the Python scalar
binary("atan2", "Atan2Backward0", "arctan2(a, b)",     # (0 at a = b = 0, as PyTorch's)
       "g * b * (zero if a * a + b * b == zero else one / (a * a + b * b))",
       "g * -a * (zero if a * a + b * b == zero else one / (a * a + b * b))")
binary("hypot", "HypotBackward0", "hypot(a, b)", "g * a / out", "g * b / out")
# fmod and remainder: PyTorch names the tensor-divisor node ...Backward1, the scalar one
# ...Backward0 (as pow / pow_tensor)
_REMAINDER = ("fmod(a, b) + b if (fmod(a, b) != zero and ((b < zero) != (fmod(a, b) < zero)))"
              " else fmod(a, b)")
binary("fmod", "FmodBackward0", "fmod(a, b)", "g", None)
binary("fmod_tensor", "FmodBackward1", "fmod(a, b)", "g", "-g * trunc(a / b)")
binary("remainder", "RemainderBackward0", _REMAINDER, "g", None)
binary("remainder_tensor", "RemainderBackward1", _REMAINDER, "g", "-g * floor(a / b)")
binary("logaddexp", "LogaddexpBackward0",
       "a if (a == b and (a - a) != (a - a)) else max(a, b) + log1p(exp(-abs(a - b)))",
       "g / (one + exp(b - a))", "g / (one + exp(a - b))")
# b is the mask as 0/1 in the operands' dtype, s the fill value; input 2, the user's bool
# mask, is saved as PyTorch saves it, only to be version-checked (the loops read b), and
# next_functions holds input 0 alone, as PyTorch's
_masked_fill = binary("masked_fill", "MaskedFillBackward0", "s if b != zero else a",
                      "zero if b != zero else g", None)
_masked_fill.nin = 3
_masked_fill.saves_if[0] |= {"c"}
_masked_fill.edges = (0,)
