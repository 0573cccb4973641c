"""Small elementwise ops (Reciprocal, Neg, Not, Sign, Mod, Where) from arithmetic and comparisons."""
from __future__ import annotations

from ._base import FLOATS, INTS, NUMERIC, Builder, Decline, Rule, attr, dtype_enum, only_attrs

SIGNED = NUMERIC - {"uint8", "uint16", "uint32", "uint64"}


def _reciprocal(b: Builder, node) -> None:
    x = node.input[0]
    b.op("Div", b.const(1.0, like=x), x, outputs=[node.output[0]])


def _neg_sub(b: Builder, node) -> None:
    x = node.input[0]
    b.op("Sub", b.const(0, like=x), x, outputs=[node.output[0]])


def _neg_mul(b: Builder, node) -> None:
    x = node.input[0]
    b.op("Mul", x, b.const(-1, like=x), outputs=[node.output[0]])


def _not_xor(b: Builder, node) -> None:
    b.op("Xor", node.input[0], b.const(True, "bool"), outputs=[node.output[0]])


def _not_equal(b: Builder, node) -> None:
    b.op("Equal", node.input[0], b.const(False, "bool"), outputs=[node.output[0]])


def _sign(b: Builder, node) -> None:
    x = node.input[0]
    d = b.dtype(x)
    if d is None:
        raise Decline("sign.compare: input dtype unknown")
    to = dtype_enum(d)
    zero = b.const(0, like=x)
    pos = b.op("Cast", b.op("Greater", x, zero), to=to)
    neg = b.op("Cast", b.op("Less", x, zero), to=to)
    b.op("Sub", pos, neg, outputs=[node.output[0]])


def _trunc(b: Builder, y: str) -> str:
    """Round toward zero: Sign(y) * Floor(|y|) (Sign itself may be decomposed)."""
    return b.op("Mul", b.op("Sign", y), b.op("Floor", b.op("Abs", y)))


def _mod(b: Builder, node) -> None:
    only_attrs(node, "mod.arith", {"fmod": {0, 1}})
    a, m = node.input
    d = b.dtype(a)
    if d is None:
        raise Decline("mod.arith: input dtype unknown")
    fmod = attr(node, "fmod", 0)
    if d in FLOATS:
        q = b.op("Div", a, m)
        q = _trunc(b, q) if fmod else b.op("Floor", q)  # fmod=1: C fmod; fmod=0: numpy mod (sign of m)
        r = b.op("Sub", a, b.op("Mul", m, q))
        # an infinite divisor: inf * 0 would give NaN; C fmod gives a, numpy mod gives a when a has
        # m's sign (or is 0) and m otherwise
        inf_m = b.op("And", b.op("IsInf", m), b.op("Not", b.op("IsInf", a)))
        if fmod:
            pick = a
        else:
            zero = b.const(0, like=a)
            same = b.op("Or", b.op("Equal", a, zero), b.op("Equal", b.op("Less", a, zero), b.op("Less", m, zero)))
            pick = b.op("Where", same, a, m)
        b.op("Where", inf_m, pick, r, outputs=[node.output[0]])
        return
    if d not in INTS:
        raise Decline(f"mod.arith: dtype {d} not handled")
    # integer Div truncates toward zero, so r = a - m * (a / m) has the sign of a (C fmod)
    r = b.op("Sub", a, b.op("Mul", m, b.op("Div", a, m)))
    if fmod or d.startswith("uint"):
        b.op("Identity", r, outputs=[node.output[0]])
        return
    # Python/numpy mod: the sign follows the divisor; add m where r != 0 and sign(r) != sign(m)
    zero = b.const(0, like=a)
    fix = b.op("And", b.op("Not", b.op("Equal", r, zero)),
               b.op("Xor", b.op("Less", r, zero), b.op("Less", m, zero)))
    b.op("Add", r, b.op("Mul", m, b.op("Cast", fix, to=dtype_enum(d))), outputs=[node.output[0]])


def _where_arith(b: Builder, node) -> None:
    c, x, y = node.input
    d = b.dtype(x) or b.dtype(y)
    if d not in NUMERIC:
        raise Decline(f"where.arith: dtype {d or 'unknown'} is not numeric")
    cx = b.op("Cast", c, to=dtype_enum(d))
    cy = b.op("Sub", b.const(1, d), cx)
    b.op("Add", b.op("Mul", cx, x), b.op("Mul", cy, y), outputs=[node.output[0]])


RULES = (
    Rule("reciprocal.div", "Reciprocal", _reciprocal, since=6, dtypes=FLOATS, note="1 / x; exact"),
    Rule("neg.sub", "Neg", _neg_sub, since=6, dtypes=SIGNED, note="0 - x; exact (gives +0 for x = +0)"),
    Rule("neg.mul", "Neg", _neg_mul, since=6, dtypes=SIGNED, note="x * -1; exact"),
    Rule("not.xor", "Not", _not_xor, since=1, note="Xor(x, true)"),
    Rule("not.equal", "Not", _not_equal, since=1, note="Equal(x, false)"),
    Rule("sign.compare", "Sign", _sign, since=9, dtypes=NUMERIC,
         note="Cast(x > 0) - Cast(x < 0); NaN gives 0 instead of NaN"),
    Rule("mod.arith", "Mod", _mod, since=10, dtypes=NUMERIC,
         note="a - m*trunc(a/m) (fmod=1) or a - m*floor(a/m) (fmod=0), infinite divisors handled with Where; "
              "integer sign fixed without Where; float results may differ in the last ulp for large quotients"),
    Rule("where.arith", "Where", _where_arith, since=9, dtypes=frozenset(),
         note="c*x + (1-c)*y for numeric types; inf/NaN in the branch not taken leak into the result",
         quality=1),
)
