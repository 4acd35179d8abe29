"""Elementwise ops: one line each. Gradient formulas follow PyTorch's derivatives.yaml
(so values match it bit for bit where the arithmetic allows); what each op saves, and so
which in-place changes break its backward, is read off these formulas.
"""
from .opinfo import (ABOVE1, NEAR_ONE, NONZERO, OFF_GRID, POS, UNIT, XY, Fixed, Mask, T, away,
                     between_multiples, uniform)
from .registry import OpDef, Sample, register, samples
from .signature import Pointwise


def unary(name, grad_fn, forward, grad, method=True, front=None):
    """method=False: x.name() and x.name_() are not made from the entry alone: the op is
    reached through its front, declared here (front=, see signature.py) or written by
    hand in tapegrad/_front."""
    op = register(OpDef(name, grad_fn, "unary", forward=forward, grads=(grad,), front=front))
    op.method = method
    return op


def binary(name, grad_fn, forward, grad_a, grad_b, scalar_slot=False):
    """b is a tensor element or the Python scalar operand. scalar_slot: like PyTorch,
    the scalar shows up as a (None, 0) entry of next_functions."""
    op = register(OpDef(name, grad_fn, "binary", forward=forward, grads=(grad_a, grad_b)))
    op.scalar_slot = scalar_slot
    return op


binary("add", "AddBackward0", "a + b", "g", "g", scalar_slot=True)
samples("add", "x + y", "x.add(y)", "L.add(x, y, alpha=2)", "x + 2.5", "2.5 + x",
        "x.clone().add_(y)", Sample("x + y", y=T(4)), Sample("x + y", x=T(3, 1)), fuses=True,
        errors=[Sample("x + y", y=T(5)), Sample("x.add_(y)", y=T(2, 3, 4))], **XY)
binary("sub", "SubBackward0", "a - b", "g", "-g", scalar_slot=True)
samples("sub", "x - y", "L.sub(x, y, alpha=0.5)", "x - 1.5", Sample("x - y", y=T(3, 1)),
        fuses=True, **XY)
binary("rsub", "RsubBackward1", "b - a", "-g", None)
samples("rsub", "1.5 - x", "0 - x", fuses=True)
binary("mul", "MulBackward0", "a * b", "g * b", "g * a", scalar_slot=True)
samples("mul", "x * y", "x.mul(y)", "x * 2.5", "2.5 * x", "x.clone().mul_(y)",
        Sample("x * y", y=T(4)), fuses=True, **XY)
binary("div", "DivBackward0", "a / b", "g / b", "-g * ((a / b) / b)", scalar_slot=True)
samples("div", "x / y", "L.div(x, y)", "L.true_divide(x, y)", "x / 2.5",
        Sample("x / y", y=T(3, 1, domain=NONZERO)), fuses=True, x=T(3, 4),
        y=T(3, 4, domain=NONZERO))
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
# (every exponent the formulas special-case, forward or backward, then 2.7, which none
# does; positive bases, and negative ones for an integer exponent)
samples("pow", *(f"x ** {e}" for e in (0, 1, 2, 3, 4, 0.5, -0.5, -1, -2, 1.5, 2.7)),
        "x.pow(2)", "L.pow(x, 3)", Sample("x ** 3", x=T(3, 4)), fuses=True, x=T(3, 4, domain=POS))
# a tensor exponent varies per element: squaring alone is a multiply (any other exponent
# is a libm call per element, tests or not)
binary("pow_tensor", "PowBackward1", "a * a if b == two else a ** b",
       "zero if b == zero else (g * two * a if b == two else g * b * a ** (b - one))",
       "zero if (a == zero and b >= zero) else g * out * log(a)")
samples("pow_tensor", "x ** y", "x.pow(y)", "L.pow(x, y)", Sample("x ** y", y=T(4)),
        Sample("x ** y", y=Fixed([[0, 1, 2, 3], [0.5, -1, 2, 2.5], [-0.5, 2, 0, 1.5]], "float")),
        fuses=True, x=T(3, 4, domain=POS), y=T(3, 4))
binary("rpow", "PowBackward2", "b ** a",
       "zero if (b == zero and a >= zero) else g * out * log(b)", None)
samples("rpow", "2.0 ** x", "0.5 ** x", "3 ** x", "L.pow(2.0, x)", fuses=True)

unary("neg", "NegBackward0", "-a", "-g")
samples("neg", "-x", "L.neg(x)", "x.neg()", fuses=True)
unary("reciprocal", "ReciprocalBackward0", "one / a", "-g * (out * out)")
samples("reciprocal", "x.reciprocal()", "L.reciprocal(x)", fuses=True, x=T(3, 4, domain=NONZERO))
unary("exp", "ExpBackward0", "exp(a)", "g * out")
samples("exp", "x.exp()", "L.exp(x)", "x.clone().exp_()", fuses=True)
unary("log", "LogBackward0", "log(a)", "g / a")
samples("log", "x.log()", "L.log(x)", fuses=True, x=T(3, 4, domain=POS))
unary("sin", "SinBackward0", "sin(a)", "g * cos(a)")
samples("sin", "x.sin()", "L.sin(x)", fuses=True)
unary("cos", "CosBackward0", "cos(a)", "g * -sin(a)")
samples("cos", "x.cos()", "L.cos(x)", fuses=True)
unary("tanh", "TanhBackward0", "tanh(a)", "g * (one - out * out)")
samples("tanh", "x.tanh()", "L.tanh(x)", "F.tanh(x)", fuses=True)
unary("sigmoid", "SigmoidBackward0", "one / (one + exp(-a))", "g * (one - out) * out")
samples("sigmoid", "x.sigmoid()", "L.sigmoid(x)", "x.clone().sigmoid_()", fuses=True)
unary("relu", "ReluBackward0", "zero if a < zero else a",     # (-0. stays -0., as in PyTorch)
      "zero if out <= zero else g")        # (NaN passes its gradient, as PyTorch's)
samples("relu", "x.relu()", "L.relu(x)", "F.relu(x)", "x.clone().relu_()", fuses=True,
        x=T(3, 4, domain=NONZERO))
unary("sqrt", "SqrtBackward0", "sqrt(a)", "g / (two * out)")
samples("sqrt", "x.sqrt()", "L.sqrt(x)", fuses=True, x=T(3, 4, domain=POS))
unary("abs", "AbsBackward0", "abs(a)",      # PyTorch's sgn: 0 for NaN (NumPy's sign: NaN)
      "g * (one if a > zero else (-one if a < zero else zero))")
samples("abs", "x.abs()", "L.abs(x)", "abs(x)", fuses=True, x=T(3, 4, domain=NONZERO))
unary("clone", "CloneBackward0", "a", "g")
samples("clone", "x.clone()", "L.clone(x)", fuses=True)
unary("zero_", "ZeroBackward0", "zero", "zero")
samples("zero_", "x.clone().zero_()")
unary("fill_", "FillBackward2", "s", "zero")
samples("fill_", "x.clone().fill_(1.5)")

# s and s2 are the lower and upper bound (-inf / inf when absent); NaN stays NaN
unary("clamp", "ClampBackward1",
      "a if a != a else (s if s != s else (s2 if s2 != s2 else min(max(a, s), s2)))",
      "g if (a >= s and a <= s2) else zero", method=False)
samples("clamp", "x.clamp(-0.5, 0.5)", "L.clamp(x, min=-0.5)", "L.clip(x, max=0.5)",
        "x.clone().clamp_(-0.5, 0.5)", fuses=True, errors=["L.clamp(x)"],
        x=T(3, 4, domain=away(-0.5, 0.5)))
unary("clamp_min", "ClampMinBackward0", "a if a != a else (s if s != s else max(a, s))",
      "g if a >= s else zero", method=False)
samples("clamp_min", "x.clamp_min(-0.5)", "L.clamp_min(x, 0.5)", fuses=True,
        x=T(3, 4, domain=away(-0.5, 0.5)))
unary("clamp_max", "ClampMaxBackward0", "a if a != a else (s if s != s else min(a, s))",
      "g if a <= s else zero", method=False)
samples("clamp_max", "x.clamp_max(-0.5)", "L.clamp_max(x, 0.5)", fuses=True,
        x=T(3, 4, domain=away(-0.5, 0.5)))
unary("sign", "SignBackward0",
      "one if a > zero else (-one if a < zero else zero)",   # NaN and -0. give +0.
      "zero")
samples("sign", "x.sign()", "L.sign(x)", fuses=True, x=T(3, 4, domain=NONZERO))
unary("floor", "FloorBackward0", "floor(a)", "zero")
samples("floor", "x.floor()", "L.floor(x)", fuses=True, x=T(3, 4, domain=OFF_GRID))
unary("ceil", "CeilBackward0", "ceil(a)", "zero")
samples("ceil", "x.ceil()", "L.ceil(x)", fuses=True, x=T(3, 4, domain=OFF_GRID))
unary("round", "RoundBackward0", "rint(a)", "zero")         # half to even, as PyTorch
samples("round", "x.round()", "L.round(x)", fuses=True, x=T(3, 4, domain=OFF_GRID))
unary("erf", "ErfBackward0", "erf(a)", "g * 1.1283791670955126 * exp(-(a * a))")
samples("erf", "x.erf()", "L.erf(x)", fuses=True)
unary("log1p", "Log1PBackward0", "log1p(a)", "g / (one + a)")
samples("log1p", "x.log1p()", "L.log1p(x)", fuses=True, x=T(3, 4, domain=uniform(-0.5, 2.0)))
unary("expm1", "Expm1Backward0", "expm1(a)", "g * (out + one)")
samples("expm1", "x.expm1()", "L.expm1(x)", fuses=True)
unary("exp2", "Exp2Backward0", "exp2(a)", "g * out * 0.6931471805599453")
samples("exp2", "x.exp2()", "L.exp2(x)", fuses=True)
unary("log2", "Log2Backward0", "log2(a)", "g / (a * 0.6931471805599453)")
samples("log2", "x.log2()", "L.log2(x)", fuses=True, x=T(3, 4, domain=POS))
unary("log10", "Log10Backward0", "log10(a)", "g / (a * 2.302585092994046)")
samples("log10", "x.log10()", "L.log10(x)", fuses=True, x=T(3, 4, domain=POS))
unary("rsqrt", "RsqrtBackward0", "one / sqrt(a)", "g * -half * (out * out * out)")
samples("rsqrt", "x.rsqrt()", "L.rsqrt(x)", fuses=True, x=T(3, 4, domain=POS))
unary("trunc", "TruncBackward0", "trunc(a)", "zero")
samples("trunc", "x.trunc()", "L.trunc(x)", fuses=True, x=T(3, 4, domain=OFF_GRID))
unary("frac", "FracBackward0", "a - trunc(a)", "g")
samples("frac", "x.frac()", "L.frac(x)", fuses=True, x=T(3, 4, domain=OFF_GRID))
unary("tan", "TanBackward0", "tan(a)", "g * (one + out * out)")
samples("tan", "x.tan()", "L.tan(x)", fuses=True, x=T(3, 4, domain=uniform(-1.2, 1.2)))
unary("asin", "AsinBackward0", "arcsin(a)", "g * (one / sqrt(one - a * a))")
samples("asin", "x.asin()", "L.asin(x)", fuses=True, x=T(3, 4, domain=UNIT))
unary("acos", "AcosBackward0", "arccos(a)", "g * -(one / sqrt(one - a * a))")
samples("acos", "x.acos()", "L.acos(x)", fuses=True, x=T(3, 4, domain=UNIT))
unary("atan", "AtanBackward0", "arctan(a)", "g / (a * a + one)")
samples("atan", "x.atan()", "L.atan(x)", fuses=True)
unary("sinh", "SinhBackward0", "sinh(a)", "g * cosh(a)")
samples("sinh", "x.sinh()", "L.sinh(x)", fuses=True)
unary("cosh", "CoshBackward0", "cosh(a)", "g * sinh(a)")
samples("cosh", "x.cosh()", "L.cosh(x)", fuses=True)
unary("asinh", "AsinhBackward0", "arcsinh(a)", "g * (one / sqrt(a * a + one))")
samples("asinh", "x.asinh()", "L.asinh(x)", fuses=True)
unary("acosh", "AcoshBackward0", "arccosh(a)", "g * (one / sqrt(a * a - one))")
samples("acosh", "x.acosh()", "L.acosh(x)", fuses=True, x=T(3, 4, domain=ABOVE1))
unary("atanh", "AtanhBackward0", "arctanh(a)", "g * (one / (one - a * a))")
samples("atanh", "x.atanh()", "L.atanh(x)", fuses=True, x=T(3, 4, domain=UNIT))
unary("leaky_relu", "LeakyReluBackward0", "a if a > zero else a * s",
      "g if a > zero else g * s", method=False,
      front=Pointwise(("negative_slope", 0.01), function=False, method=False, inplace=False,
                      positions="always",
                      functional=True, kernel="leaky_relu_cpu",
                      doc="x where x > 0, negative_slope * x elsewhere."))
samples("leaky_relu", "F.leaky_relu(x)", "F.leaky_relu(x, 0.2)",
        "F.leaky_relu(x, negative_slope=0.3, inplace=False)", fuses=True, x=T(3, 4, domain=NONZERO))
# erf's argument in the operand's dtype (1/sqrt(2) as sqrt(half)), as PyTorch's kernel: a
# float32 gelu then calls the float32 erf (vectorised), not the float64 one (libm)
unary("gelu", "GeluBackward0", "half * a * (one + erf(a * sqrt(half)))",
      "g * (half * (one + erf(a * sqrt(half)))"
      " + a * 0.3989422804014327 * exp(-half * a * a))", method=False)
samples("gelu", "F.gelu(x)", 'F.gelu(x, approximate="none")', fuses=True,
        errors=[Sample('F.gelu(x, approximate="erf")', xfail={"error": (
            "message: tapegrad's ends 'none or tanh, got erf', PyTorch's 'none or tanh.'")})])
unary("gelu_tanh", "GeluBackward0",
      "half * a * (one + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)))",
      "g * (half * (one + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)))"
      " + half * a * (one - tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)) ** 2)"
      " * 0.7978845608028654 * (one + 0.134145 * a * a))", method=False)
samples("gelu_tanh", 'F.gelu(x, approximate="tanh")', fuses=True)
# PyTorch's silu kernel (x / (1 + e^-x)) and its infinitely differentiable backward
unary("silu", "SiluBackward0", "a / (one + exp(-a))",
      "g * (one / (one + exp(-a))) * (one + a * (one - one / (one + exp(-a))))", method=False,
      front=Pointwise(function=False, method=False, inplace=False, functional=True,
                      kernel="silu_cpu", doc="x * sigmoid(x), elementwise."))
samples("silu", "F.silu(x)", fuses=True)
# s = alpha; expm1 keeps small negative inputs exact, as PyTorch's kernel does
unary("elu", "EluBackward0", "a if a > zero else s * expm1(a)",
      "g if a > zero else g * s * exp(a)", method=False,
      front=Pointwise(("alpha", 1.0), function=False, method=False, inplace=False,
                      positions="always",
                      functional=True, kernel="elu_cpu",
                      doc="x where x > 0, alpha * (exp(x) - 1) elsewhere."))
samples("elu", "F.elu(x)", "F.elu(x, alpha=0.5)", fuses=True, x=T(3, 4, domain=NONZERO))
# s = min_val, s2 = max_val; the gradient passes strictly inside, as PyTorch's
unary("hardtanh", "HardtanhBackward0", "a if a != a else min(max(a, s), s2)",
      "g if (a > s and a < s2) else zero", method=False)
samples("hardtanh", "F.hardtanh(x)",
        Sample("F.hardtanh(x, -0.5, 1.5)", x=T(3, 4, domain=away(-0.5, 1.5))),
        Sample("F.relu6(x * 4)", x=T(3, 4, domain=away(0.0, 1.5, gap=0.05))), fuses=True,
        errors=["F.hardtanh(x, 1.0, -1.0)"], x=T(3, 4, domain=away(-1.0, 1.0)))
unary("logsigmoid", "LogSigmoidBackward0", "min(a, zero) - log1p(exp(-abs(a)))",
      "g * (one / (one + exp(a)))", method=False,
      front=Pointwise(function=False, method=False, inplace=False, functional=True,
                      functional_inplace=False, kernel="log_sigmoid_cpu",
                      doc="log(sigmoid(x)), computed without overflow."))
samples("logsigmoid", "F.logsigmoid(x)", fuses=True)
# s = lambd
unary("hardshrink", "HardshrinkBackward0", "zero if (a >= -s and a <= s) else a",
      "g if (a < -s or a > s) else zero", method=False,  # (NaN: 0, as PyTorch's kernel)
      front=Pointwise(("lambd", 0.5), inplace=False, functional=True, functional_inplace=False,
                      kernel="hardshrink_cpu",
                      doc="x where |x| > lambd, else 0 (a negative lambd keeps every x)."))
samples("hardshrink", "F.hardshrink(x)", "L.hardshrink(x, 0.25)", "x.hardshrink(lambd=-1.0)",
        fuses=True, errors=["F.hardshrink(x, 'a')", "x.hardshrink(None)"],
        x=T(3, 4, domain=away(-0.5, 0.5, -0.25, 0.25)))
# s = beta, s2 = threshold
unary("softplus", "SoftplusBackward0", "a if a * s > s2 else log1p(exp(a * s)) / s",
      "g if a * s > s2 else g / (one + exp(-(a * s)))", method=False)
samples("softplus", "F.softplus(x)", "F.softplus(x, beta=2.0, threshold=3.0)", fuses=True,
        x=T(3, 4, domain=away(1.5)))
# PyTorch's where(a == b, g / 2, g).masked_fill(a < b, 0): a NaN operand passes g to both
binary("maximum", "MaximumBackward0", "a if (a != a or a > b) else b",
       "zero if a < b else (g * half if a == b else g)",
       "zero if a > b else (g * half if a == b else g)")
samples("maximum", "L.maximum(x, y)", "x.maximum(y)", "L.max(x, y)",
        Sample("L.maximum(x, y)", y=T(4)), fuses=True, **XY)
binary("minimum", "MinimumBackward0", "a if (a != a or a < b) else b",
       "zero if a > b else (g * half if a == b else g)",
       "zero if a < b else (g * half if a == b else g)")
samples("minimum", "L.minimum(x, y)", "x.minimum(y)", "L.min(x, y)",
        Sample("L.minimum(x, y)", y=T(4)), fuses=True, **XY)
# PyTorch's formulas (derivatives.yaml); b is a tensor element or the Python scalar
binary("atan2", "Atan2Backward0", "arctan2(a, b)",     # (0 at a = b = 0, as PyTorch's)
       "g * b * (zero if a * a + b * b == zero else one / (a * a + b * b))",
       "g * -a * (zero if a * a + b * b == zero else one / (a * a + b * b))")
samples("atan2", "L.atan2(x, y)", "x.atan2(y)", "L.arctan2(x, y)", Sample("L.atan2(x, y)", y=T(4)),
        fuses=True, x=T(3, 4), y=T(3, 4, domain=NONZERO))
binary("hypot", "HypotBackward0", "hypot(a, b)", "g * a / out", "g * b / out")
samples("hypot", "L.hypot(x, y)", "x.hypot(y)", fuses=True, x=T(3, 4, domain=NONZERO), y=T(3, 4))
# fmod and remainder: PyTorch names the tensor-divisor node ...Backward1, the scalar one
# ...Backward0 (as pow / pow_tensor)
_REMAINDER = ("fmod(a, b) + b if (fmod(a, b) != zero and ((b < zero) != (fmod(a, b) < zero)))"
              " else fmod(a, b)")
binary("fmod", "FmodBackward0", "fmod(a, b)", "g", None)
samples("fmod", "L.fmod(x, 1.5)", "x.fmod(-1.5)", fuses=True,
        x=T(3, 4, domain=between_multiples(1.5)))
binary("fmod_tensor", "FmodBackward1", "fmod(a, b)", "g", "-g * trunc(a / b)")
samples("fmod_tensor", "L.fmod(x, y)", "x.fmod(y)", fuses=True,
        x=T(3, 4, domain=between_multiples(1.0)), y=T(3, 4, domain=NEAR_ONE))
binary("remainder", "RemainderBackward0", _REMAINDER, "g", None)
samples("remainder", "x % 1.5", "L.remainder(x, 1.5)", "x.remainder(-1.5)", fuses=True,
        x=T(3, 4, domain=between_multiples(1.5)))
binary("remainder_tensor", "RemainderBackward1", _REMAINDER, "g", "-g * floor(a / b)")
samples("remainder_tensor", "x % y", "L.remainder(x, y)",
        Sample("x % y", y=T(3, 4, domain=uniform(-1.05, -0.95))), fuses=True,
        x=T(3, 4, domain=between_multiples(1.0)), y=T(3, 4, domain=NEAR_ONE))
binary("logaddexp", "LogaddexpBackward0",
       "a if (a == b and (a - a) != (a - a)) else max(a, b) + log1p(exp(-abs(a - b)))",
       "g / (one + exp(b - a))", "g / (one + exp(a - b))")
samples("logaddexp", "L.logaddexp(x, y)", "x.logaddexp(y)", fuses=True, **XY)
# b is the mask as 0/1 in the operands' dtype, s the fill value; input 2, the user's bool
# mask, is saved as PyTorch saves it, only to be version-checked (the loops read b), and
# next_functions holds input 0 alone, as PyTorch's
_masked_fill = binary("masked_fill", "MaskedFillBackward0", "s if b != zero else a",
                      "zero if b != zero else g", None)
_masked_fill.nin = 3
_masked_fill.saves_if[0] |= {"c"}
_masked_fill.edges = (0,)
samples("masked_fill", "x.masked_fill(m, 0.5)", "L.masked_fill(x, m, -1.0)",
        "x.clone().masked_fill_(m, 0.5)", Sample("x.masked_fill(m, 0.5)", m=Mask(4)),
        errors=[Sample("x.masked_fill(m, 0.5)", m=Mask(5), xfail={"error": (
            "message names the operands the other way round: tapegrad 'tensor a (4) ... "
            "tensor b (5)', PyTorch 'tensor a (5) ... tensor b (4)'")})],
        replay="the front turns the mask into the op's 0/1 operand with NumPy",
        x=T(3, 4), m=Mask(3, 4))
