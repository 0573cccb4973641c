"""Boolean logic, comparisons and NaN/inf tests from casts, integer arithmetic and other
comparisons (And, Or, Xor, IsNaN, IsInf, Less, Greater, LessOrEqual, GreaterOrEqual, Cast to or
from bool).

No Where with bool branches: onnxruntime's CPU provider has none, so such a rule could not be
verified here (a bool condition choosing numeric branches is fine).
"""
from __future__ import annotations

from op_coverage.plan.rules.base import FLOATS, INTS, Builder, Decline, Rule, dtype_name, attr, dtype_enum, only_attrs


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


def _swap(op: str):
    """Less(a, b) is Greater(b, a) and the other way round (NaN compares false both ways)."""
    def build(b: Builder, node) -> None:
        a, c = node.input
        b.op(op, c, a, outputs=[node.output[0]])
    return build


def _isnan_not_equal(b: Builder, node) -> None:
    x = node.input[0]
    b.op("Not", b.op("Equal", x, x), outputs=[node.output[0]])


def _dtype_of_pair(b: Builder, node, rule: str) -> str:
    dts = {b.dtype(x) for x in node.input[:2]} - {None}
    if len(dts) != 1:
        raise Decline(f"{rule}: input dtype unknown")
    return next(iter(dts))


def _less_min(swap: bool):
    """Integers: a < b is Not(Min(a, b) == b) (Min(a, b) == b exactly when b <= a); no
    arithmetic, so no overflow.  Greater(a, b) is the same with a and b swapped."""
    def build(b: Builder, node) -> None:
        rule = "greater.min-equal" if swap else "less.min-equal"
        if _dtype_of_pair(b, node, rule) not in INTS:
            raise Decline(f"{rule}: integers only (Min's NaN handling varies between runtimes)")
        a, c = node.input[1], node.input[0]
        if not swap:
            a, c = c, a
        b.op("Not", b.op("Equal", b.op("Min", a, c), c), outputs=[node.output[0]])
    return build


def _less_sign(swap: bool):
    """Floats: a < b is Sign(b - a) == 1.  IEEE subtraction with subnormals gives b - a == 0 only
    when b == a, and never flips the sign; inf - inf and any NaN give NaN, and NaN == 1 is false,
    as NaN < x is; b - a overflowing to inf keeps the sign."""
    def build(b: Builder, node) -> None:
        rule = "greater.sign-sub" if swap else "less.sign-sub"
        if _dtype_of_pair(b, node, rule) not in FLOATS:
            raise Decline(f"{rule}: floats only (an integer difference can overflow)")
        a, c = node.input
        if swap:
            a, c = c, a
        b.op("Equal", b.op("Sign", b.op("Sub", c, a)), b.const(1, like=a), outputs=[node.output[0]])
    return build


def _le_min(swap: bool):
    """Integers: a <= b is Min(a, b) == a (GreaterOrEqual: Min(a, b) == b)."""
    def build(b: Builder, node) -> None:
        rule = "greaterorequal.min-equal" if swap else "lessorequal.min-equal"
        if _dtype_of_pair(b, node, rule) not in INTS:
            raise Decline(f"{rule}: integers only (NaN <= x is false, Min's NaN handling varies)")
        a, c = node.input
        b.op("Equal", b.op("Min", a, c), c if swap else a, outputs=[node.output[0]])
    return build


def _not_of(op: str):
    """a <= b as Not(a > b), a >= b as Not(a < b): integers only, a NaN would compare true."""
    def build(b: Builder, node) -> None:
        b.op("Not", b.op(op, *node.input), outputs=[node.output[0]])
    return build


def _cast_bool(b: Builder, node) -> None:
    rule = "cast.bool"
    only_attrs(node, rule, {"to": None, "saturate": None})
    x = node.input[0]
    src, to = b.dtype(x), attr(node, "to")
    if src is None:
        raise Decline(f"{rule}: input dtype unknown")
    if src == "bool" and to == dtype_enum("bool"):
        b.op("Identity", x, outputs=[node.output[0]])
    elif src == "bool":
        d = dtype_name(to)
        if d == "string":
            raise Decline(f"{rule}: bool to string is not numeric")
        b.op("Where", x, b.const(1, d), b.const(0, d), outputs=[node.output[0]])
    elif to == dtype_enum("bool"):
        if src == "string":
            raise Decline(f"{rule}: string to bool is not numeric")
        # nonzero is true; NaN is nonzero (NaN == 0 is false)
        b.op("Not", b.op("Equal", x, b.const(0, src)), outputs=[node.output[0]])
    else:
        raise Decline(f"{rule}: handles casts to or from bool only ({src} to a non-bool type)")


RULES = (
    Rule("and.arith", "And", _and_arith, since=7, note="Cast(a) + Cast(b) == 2 in int32 (opset 7, before Where); exact"),
    Rule("or.arith", "Or", _or_arith, since=7, note="(Cast(a) + Cast(b) == 0) == false in int32; exact"),
    Rule("xor.equal", "Xor", _xor_equal, since=7, note="Equal(Equal(a, b), false); exact"),
    Rule("isnan.equal", "IsNaN", _isnan_equal, since=9, dtypes=FLOATS,
         note="Equal(Equal(x, x), false): only NaN differs from itself; exact"),
    Rule("isnan.not-equal", "IsNaN", _isnan_not_equal, since=9, dtypes=FLOATS,
         note="Not(Equal(x, x)), for targets whose Equal takes no bool; exact"),
    Rule("less.min-equal", "Less", _less_min(False), since=12, dtypes=INTS,
         note="Not(Min(a, b) == b) for integers (Min takes integers from opset 12); exact, no arithmetic"),
    Rule("greater.min-equal", "Greater", _less_min(True), since=12, dtypes=INTS,
         note="Not(Min(a, b) == a) for integers; exact, no arithmetic"),
    Rule("less.sign-sub", "Less", _less_sign(False), since=9, dtypes=FLOATS,
         note="Sign(b - a) == 1 for floats; exact under IEEE arithmetic with subnormals (b - a is 0 only when "
              "a == b; NaN and inf - inf give NaN, which compares false), not on a target that flushes "
              "subnormals to zero"),
    Rule("greater.sign-sub", "Greater", _less_sign(True), since=9, dtypes=FLOATS,
         note="Sign(a - b) == 1 for floats; exact as less.sign-sub"),
    Rule("lessorequal.min-equal", "LessOrEqual", _le_min(False), since=12, dtypes=INTS,
         note="Min(a, b) == a for integers; exact"),
    Rule("greaterorequal.min-equal", "GreaterOrEqual", _le_min(True), since=12, dtypes=INTS,
         note="Min(a, b) == b for integers; exact"),
    Rule("less.greater", "Less", _swap("Greater"), since=7, note="Greater(b, a); exact (NaN too)"),
    Rule("greater.less", "Greater", _swap("Less"), since=7, note="Less(b, a); exact (NaN too)"),
    Rule("lessorequal.not-greater", "LessOrEqual", _not_of("Greater"), since=12, dtypes=INTS,
         note="Not(Greater(a, b)) for integers (ONNX's body, Less or Equal, covers floats, where NaN <= x is "
              "false); exact"),
    Rule("greaterorequal.not-less", "GreaterOrEqual", _not_of("Less"), since=12, dtypes=INTS,
         note="Not(Less(a, b)) for integers; exact"),
    Rule("cast.bool", "Cast", _cast_bool, since=6,
         note="bool to a number: Where(x, 1, 0); a number to bool: Not(Equal(x, 0)) (NaN is true, as Cast); exact"),
    Rule("isinf.compare", "IsInf", _isinf_abs, since=10, dtypes=FLOATS,
         note="Abs(x) == inf (or x == +inf / x == -inf per detect_*); exact"),
)
