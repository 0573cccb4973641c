"""Small elementwise ops (Reciprocal, Neg, Not, Sign, Abs, Ceil, Mod, Where) from arithmetic and comparisons."""
from __future__ import annotations

import numpy as np

from op_coverage.plan.rules.base import FLOATS, INTS, NUMERIC, Builder, Decline, Rule, attr, dtype_enum, only_attrs

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


def _abs_max(b: Builder, node) -> None:
    x = node.input[0]
    d = b.dtype(x)
    if d is None:
        raise Decline("abs.max: input dtype unknown")
    if d.startswith("uint"):
        b.op("Identity", x, outputs=[node.output[0]])
    elif d in FLOATS:  # Max(-0, +0) may be -0; adding +0 makes it +0 (and changes nothing else)
        b.op("Add", b.op("Max", x, b.op("Neg", x)), b.const(0, d), outputs=[node.output[0]])
    else:
        b.op("Max", x, b.op("Neg", x), outputs=[node.output[0]])


def _ceil_floor(b: Builder, node) -> None:
    x = node.input[0]
    m1 = b.const(-1, like=x)  # Mul by -1, not Neg: its rules may turn -0 into +0, and Ceil(-0.5) is -0
    b.op("Mul", b.op("Floor", b.op("Mul", x, m1)), m1, outputs=[node.output[0]])


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


def _where_log_mask(const_keep: bool):
    return lambda b, node: _log_mask(b, node, const_keep)


def _log_mask(b: Builder, node, const_keep: bool) -> None:
    """Where(c, x, -inf) = x + Log(Cast(c)): Log(1) = 0 keeps x, Log(0) = -inf; +inf by subtracting."""
    c, x, y = node.input
    d = b.dtype(x) or b.dtype(y)
    if d not in FLOATS:
        raise Decline(f"where.log-mask: dtype {d or 'unknown'} is not floating point")
    xv, yv = b.const_value(x), b.const_value(y)

    def infinite(v):
        if v is None:
            return 0
        a = np.asarray(v, dtype=np.float64)
        if a.size and np.all(a == np.inf):
            return 1
        if a.size and np.all(a == -np.inf):
            return -1
        return 0

    if infinite(yv):
        sign, keep, fill, flt = infinite(yv), x, y, b.op("Cast", c, to=dtype_enum(d))
    elif infinite(xv):
        flt = b.op("Sub", b.const(1, d), b.op("Cast", c, to=dtype_enum(d)))  # 1 where c is false
        sign, keep, fill = infinite(xv), y, x
    else:
        raise Decline("where.log-mask: needs one branch to be a constant of only inf or only -inf")
    kv = b.const_value(keep)
    if const_keep and kv is None:
        raise Decline("where.log-mask: the other branch is computed at run time (where.log-mask-add handles it)")
    if not const_keep and kv is not None:
        raise Decline("where.log-mask-add: the other branch is a constant (where.log-mask handles it)")
    if kv is not None and not np.all(np.isfinite(np.asarray(kv, dtype=np.float64))):
        raise Decline("where.log-mask: the other branch holds inf/NaN too (inf - inf is NaN)")
    ranks = [b.rank(v) for v in (c, keep)]
    fill_shape = np.shape(b.const_value(fill))
    expand = not (int(np.prod(fill_shape)) == 1 and None not in ranks and len(fill_shape) <= max(ranks))
    out = [node.output[0]] if not expand else None
    y_ = b.op("Add" if sign < 0 else "Sub", keep, b.op("Log", flt), outputs=out)
    if expand:  # the constant branch widens the broadcast: give the result its shape
        b.op("Expand", y_, b.op("Shape", fill), outputs=[node.output[0]])


RULES = (
    Rule("reciprocal.div", "Reciprocal", _reciprocal, since=6, dtypes=FLOATS, note="1 / x; exact"),
    Rule("neg.sub", "Neg", _neg_sub, since=6, dtypes=SIGNED, note="0 - x; exact (gives +0 for x = +0)"),
    Rule("neg.mul", "Neg", _neg_mul, since=6, dtypes=SIGNED, note="x * -1; exact"),
    Rule("not.xor", "Not", _not_xor, since=1, note="Xor(x, true)"),
    Rule("not.equal", "Not", _not_equal, since=1, note="Equal(x, false)"),
    Rule("abs.max", "Abs", _abs_max, since=6, dtypes=NUMERIC,
         note="Max(x, -x) (+0 added for floats, so -0 gives +0); unsigned: Identity; exact (NaN too)"),
    Rule("ceil.floor", "Ceil", _ceil_floor, since=6, dtypes=FLOATS,
         note="-Floor(-x) with multiplications by -1 (signed zeros kept); exact"),
    Rule("sign.compare", "Sign", _sign, since=9, dtypes=NUMERIC,
         note="Cast(x > 0) - Cast(x < 0); NaN gives 0 instead of NaN", finite_only=True),
    Rule("mod.arith", "Mod", _mod, since=10, dtypes=NUMERIC,
         note="a - m*trunc(a/m) (fmod=1) or a - m*floor(a/m) (fmod=0), infinite divisors handled with Where; "
              "integer sign fixed without Where; float results may differ in the last ulp for large quotients"),
    Rule("where.log-mask", "Where", _where_log_mask(True), since=9,
         note="Where(c, x, -inf) as x + Log(Cast(c)) (+inf by subtracting; either branch) when x is a finite "
              "constant (attention masks: Where(mask, 0, -inf)); exact for every mask"),
    Rule("where.log-mask-add", "Where", _where_log_mask(False), since=9, quality=1,
         note="the same with x computed at run time (masked_fill of scores): exact where x is finite or kept; "
              "x = inf where the mask drops it gives NaN"),
    Rule("where.arith", "Where", _where_arith, since=9, dtypes=frozenset(),
         note="c*x + (1-c)*y for numeric types; exact for finite values only, so declined when a constant "
              "branch holds inf/NaN; a runtime inf/NaN in the branch not taken leaks into the result",
         quality=1, finite_only=True),
)
