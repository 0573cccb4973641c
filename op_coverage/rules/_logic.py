"""Boolean logic and NaN/inf tests from casts, integer arithmetic and comparisons (And, Or, Xor, IsNaN, IsInf).

No Where: onnxruntime's CPU provider has no bool Where, so such a rule could not be verified here.
"""
from __future__ import annotations

from ._base import FLOATS, Builder, Rule, attr, dtype_enum, only_attrs


def _count_true(b: Builder, node) -> str:
    """How many of the two inputs are true, as int32 (Cast and Add exist from opset 6/7)."""
    a, c = node.input
    i32 = dtype_enum("int32")
    return b.op("Add", b.op("Cast", a, to=i32), b.op("Cast", c, to=i32))


def _and_arith(b: Builder, node) -> None:
    b.op("Equal", _count_true(b, node), b.const(2, "int32"), outputs=[node.output[0]])


def _or_arith(b: Builder, node) -> None:
    none = b.op("Equal", _count_true(b, node), b.const(0, "int32"))
    b.op("Equal", none, b.const(False, "bool"), outputs=[node.output[0]])


def _xor_equal(b: Builder, node) -> None:
    a, c = node.input
    b.op("Equal", b.op("Equal", a, c), b.const(False, "bool"), outputs=[node.output[0]])


def _isnan_equal(b: Builder, node) -> None:
    x = node.input[0]
    b.op("Equal", b.op("Equal", x, x), b.const(False, "bool"), outputs=[node.output[0]])  # only NaN != NaN


def _isinf_abs(b: Builder, node) -> None:
    only_attrs(node, "isinf.compare", {"detect_positive": {0, 1}, "detect_negative": {0, 1}})
    x = node.input[0]
    pos, neg = attr(node, "detect_positive", 1), attr(node, "detect_negative", 1)
    inf = b.const(float("inf"), like=x)
    if pos and neg:
        b.op("Equal", b.op("Abs", x), inf, outputs=[node.output[0]])
    elif pos:
        b.op("Equal", x, inf, outputs=[node.output[0]])
    elif neg:
        b.op("Equal", x, b.const(float("-inf"), like=x), outputs=[node.output[0]])
    else:  # detects nothing: always false
        b.op("Greater", x, b.const(float("inf"), like=x), outputs=[node.output[0]])


RULES = (
    Rule("and.arith", "And", _and_arith, since=7, note="Cast(a) + Cast(b) == 2 in int32 (opset 7, before Where); exact"),
    Rule("or.arith", "Or", _or_arith, since=7, note="(Cast(a) + Cast(b) == 0) == false in int32; exact"),
    Rule("xor.equal", "Xor", _xor_equal, since=7, note="Equal(Equal(a, b), false); exact"),
    Rule("isnan.equal", "IsNaN", _isnan_equal, since=9, dtypes=FLOATS,
         note="Equal(Equal(x, x), false): only NaN differs from itself; exact"),
    Rule("isinf.compare", "IsInf", _isinf_abs, since=10, dtypes=FLOATS,
         note="Abs(x) == inf (or x == +inf / x == -inf per detect_*); exact"),
)
