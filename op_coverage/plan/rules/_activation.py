"""Erf, the GELU family (com.microsoft FastGelu, BiasGelu, Gelu) and the hard activations
(HardSigmoid; HardSwish's ONNX body is x * HardSigmoid(x)) as elementwise arithmetic."""
from __future__ import annotations

import math

import numpy as np

from op_coverage.plan.rules.base import FLOATS, Builder, Decline, Rule, attr, float_only, only_attrs

# Abramowitz & Stegun, Handbook of Mathematical Functions (1964), formula 7.1.26:
# erf(x) = 1 - (a1 t + a2 t^2 + a3 t^3 + a4 t^4 + a5 t^5) exp(-x^2), t = 1 / (1 + p x), x >= 0,
# absolute error <= 1.5e-7 (in exact arithmetic; float32 evaluation adds a few ulp).
AS_P = 0.3275911
AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
# Maclaurin series erf(x) = 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1)); for |x| < 0.5 the first
# seven terms leave a truncation error below 2e-10 (next term 2/sqrt(pi) x^15/(7! 15) at x = 0.5).
TAYLOR = tuple((-1) ** n * 2 / math.sqrt(math.pi) / (math.factorial(n) * (2 * n + 1)) for n in range(7))
SMALL = 0.5


def _erf_abs(b: Builder, ax: str, like: str) -> str:
    """erf(|x|) by A&S 7.1.26 from ax = |x|."""
    one = b.const(1.0, like=like)
    t = b.op("Div", one, b.op("Add", one, b.op("Mul", ax, b.const(AS_P, like=like))))
    poly = b.const(AS_A[4], like=like)
    for a in reversed(AS_A[:4]):
        poly = b.op("Add", b.op("Mul", poly, t), b.const(a, like=like))
    poly = b.op("Mul", poly, t)
    e = b.op("Exp", b.op("Neg", b.op("Mul", ax, ax)))
    return b.op("Sub", one, b.op("Mul", poly, e))


def _erf_series(b: Builder, x: str) -> str:
    x2 = b.op("Mul", x, x)
    acc = b.const(TAYLOR[-1], like=x)
    for c in reversed(TAYLOR[:-1]):
        acc = b.op("Add", b.op("Mul", acc, x2), b.const(c, like=x))
    return b.op("Mul", acc, x)


def _erf_where(b: Builder, node) -> None:
    x = node.input[0]
    float_only(b, x, "erf.series-as7126")
    ax = b.op("Abs", x)
    far = b.op("Mul", _erf_abs(b, ax, x), b.op("Sign", x))
    near = _erf_series(b, x)
    b.op("Where", b.op("Less", ax, b.const(SMALL, like=x)), near, far, outputs=[node.output[0]])


def _erf_plain(b: Builder, node) -> None:
    x = node.input[0]
    d = float_only(b, x, "erf.as7126")
    ax = b.op("Abs", x)
    tiny = {"float16": 6e-8, "bfloat16": 1e-30}.get(d, 1e-30)
    sign = b.op("Div", x, b.op("Add", ax, b.const(tiny, like=x)))  # x/(|x|+tiny): no Sign, no Where
    b.op("Mul", _erf_abs(b, ax, x), sign, outputs=[node.output[0]])


def gelu_erf(b: Builder, x: str, out: str) -> None:
    """0.5 x (1 + erf(x / sqrt 2)), as PyTorch's exact GELU."""
    e = b.op("Erf", b.op("Div", x, b.const(math.sqrt(2.0), like=x)))
    half_x = b.op("Mul", x, b.const(0.5, like=x))
    b.op("Mul", half_x, b.op("Add", e, b.const(1.0, like=x)), outputs=[out])


def gelu_tanh(b: Builder, x: str, out: str) -> None:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    x3 = b.op("Mul", b.op("Mul", x, x), x)
    inner = b.op("Add", x, b.op("Mul", x3, b.const(0.044715, like=x)))
    t = b.op("Tanh", b.op("Mul", inner, b.const(math.sqrt(2.0 / math.pi), like=x)))
    half_x = b.op("Mul", x, b.const(0.5, like=x))
    b.op("Mul", half_x, b.op("Add", t, b.const(1.0, like=x)), outputs=[out])


def _onnx_gelu(b: Builder, node) -> None:
    only_attrs(node, "gelu.pattern", {"approximate": {"none", "tanh"}})
    x = node.input[0]
    float_only(b, x, "gelu.pattern")
    approx = attr(node, "approximate", b"none")
    approx = approx.decode() if isinstance(approx, bytes) else approx
    (gelu_tanh if approx == "tanh" else gelu_erf)(b, x, node.output[0])


def _fast_gelu(b: Builder, node) -> None:
    only_attrs(node, "com.microsoft.fastgelu", {})
    x = node.input[0]
    float_only(b, x, "com.microsoft.fastgelu")
    if len(node.input) > 1 and node.input[1]:
        x = b.op("Add", x, node.input[1])
        b.types[x] = b.dtype(node.input[0])
    gelu_tanh(b, x, node.output[0])


def _bias_gelu(b: Builder, node) -> None:
    only_attrs(node, "com.microsoft.biasgelu", {})
    x = node.input[0]
    float_only(b, x, "com.microsoft.biasgelu")
    if len(node.input) < 2 or not node.input[1]:
        raise Decline("com.microsoft.biasgelu: bias input missing")
    s = b.op("Add", x, node.input[1])
    b.types[s] = b.dtype(x)
    gelu_erf(b, s, node.output[0])


def _ms_gelu(b: Builder, node) -> None:
    only_attrs(node, "com.microsoft.gelu", {})
    float_only(b, node.input[0], "com.microsoft.gelu")
    gelu_erf(b, node.input[0], node.output[0])


def _hard_sigmoid(b: Builder, x: str, alpha: float, beta: float, out: str) -> None:
    """Clip(alpha x + beta, 0, 1): ONNX's body computes max(0, min(1, alpha x + beta)), the same
    values (NaN and ±inf included); one Clip where the body has a Min and a Max, which onnxruntime
    runs faster (MobileNetV3-small: 1.20x the original against 1.31x with the body)."""
    v = b.op("Add", b.op("Mul", x, b.const(alpha, like=x)), b.const(beta, like=x))
    if b.opset < 11:  # Clip-6: bounds are attributes
        b.op("Clip", v, outputs=[out], min=0.0, max=1.0)
    else:
        b.op("Clip", v, b.const(0.0, like=x), b.const(1.0, like=x), outputs=[out])


def _hardsigmoid(b: Builder, node) -> None:
    only_attrs(node, "hardsigmoid.clip", {"alpha": None, "beta": None})
    float_only(b, node.input[0], "hardsigmoid.clip")
    # attributes are float32, as the body's constants: 0.2 is float32(0.2) for a double input too
    alpha, beta = (float(np.float32(attr(node, k, d))) for k, d in (("alpha", 0.2), ("beta", 0.5)))
    _hard_sigmoid(b, node.input[0], alpha, beta, node.output[0])


RULES = (
    Rule("hardsigmoid.clip", "HardSigmoid", _hardsigmoid, since=6, dtypes=FLOATS,
         note="Clip(alpha x + beta, 0, 1): the values of ONNX's body (NaN and ±inf included) with one Clip "
              "for its Min and Max"),
    Rule("erf.series-as7126", "Erf", _erf_where, since=9, dtypes=FLOATS,
         note="Maclaurin series (7 terms) for |x| < 0.5, Abramowitz-Stegun 7.1.26 elsewhere; "
              "abs. error <= 1.5e-7 plus float rounding, relative error small near 0", quality=1),
    Rule("erf.as7126", "Erf", _erf_plain, since=9, dtypes=FLOATS,
         note="Abramowitz-Stegun 7.1.26 with sign x/(|x|+tiny): no Where, no Sign; abs. error <= 1.5e-7 "
              "plus float rounding, relative error large for |x| < 1e-6", quality=2),
    Rule("gelu.pattern", "Gelu", _onnx_gelu, since=20, dtypes=FLOATS,
         note="x/sqrt2 -> Erf -> +1 -> *x -> *0.5 (or the tanh form): the patterns onnxruntime's GeluFusion / "
              "FastGeluFusion re-fuse; exact"),
    Rule("com.microsoft.fastgelu", "FastGelu", _fast_gelu, domain="com.microsoft", dtypes=FLOATS,
         note="tanh GELU of (X + bias), as onnxruntime's FastGelu kernel"),
    Rule("com.microsoft.biasgelu", "BiasGelu", _bias_gelu, domain="com.microsoft", dtypes=FLOATS,
         note="erf GELU of (A + B)"),
    Rule("com.microsoft.gelu", "Gelu", _ms_gelu, domain="com.microsoft", dtypes=FLOATS, note="erf GELU"),
)

