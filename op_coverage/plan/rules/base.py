"""What a decomposition rule is, and the small builder every rule writes its nodes with.

A rule replaces one node by a composition of other ONNX nodes.  It states the opsets, dtypes
and attribute values it handles; outside them :meth:`Rule.apply` raises :class:`Decline`
with the reason, and the planner tries the next rule.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
from onnx import helper

# the builder and its dtype helpers are ONNX-level; rules import them from here as before
from op_coverage.onnx.builder import FLOATS, INTS, NUMERIC, Builder, Decline, dtype_name, dtype_enum  # noqa: F401


@dataclass(frozen=True)
class Rule:
    """One way to express ``domain::op`` with other operators.

    :param name: short unique name, shown in plans (``"erf.abramowitz-stegun"``).
    :param op: operator replaced; ``domain`` is ``"ai.onnx"`` or e.g. ``"com.microsoft"``.
    :param since / until: opset versions of ``op``'s domain the rule handles (inclusive; None = open).
    :param dtypes: input dtypes handled (empty: any).
    :param build: ``build(b: Builder, node)`` emits the replacement through *b*, writing the
        node's own output names, or raises :class:`Decline`.
    :param note: what the rule does, and its accuracy when it is not exact.
    """

    name: str
    op: str
    build: Callable
    domain: str = "ai.onnx"
    since: int | None = None
    until: int | None = None
    dtypes: frozenset = frozenset()
    note: str = ""
    quality: int = 0  # 0 exact; 1 approximate, tight bound; 2 approximate, loose bound (planner prefers low)
    penalty: float = 0.0  # extra cost beyond the emitted nodes (e.g. a materialised outer product)
    finite_only: bool = False  # exact only for finite operands: declined when a constant operand holds inf/NaN

    def apply(self, b: "Builder", node: onnx.NodeProto) -> None:
        """Emit the replacement of *node* into *b*, or raise :class:`Decline` with the reason."""
        v = b.opset_of(self.domain)
        if v is not None and ((self.since and v < self.since) or (self.until and v > self.until)):
            raise Decline(f"{self.name} handles opset {self.since or 1}-{self.until or 'newest'}, model has {v}")
        if self.dtypes:
            dts = {d for d in (b.dtype(x) for x in node.input if x) if d}
            first = b.dtype(node.input[0]) if node.input and node.input[0] else None
            if first is None and not dts:
                raise Decline(f"{self.name}: input dtype unknown (needs one of {', '.join(sorted(self.dtypes))})")
            if first is not None and first not in self.dtypes:
                raise Decline(f"{self.name}: dtype {first} not handled (handles {', '.join(sorted(self.dtypes))})")
        if self.finite_only:
            for x in node.input:
                bad = non_finite(b.const_value(x))
                if bad:
                    raise Decline(f"{self.name}: exact only for finite values, and constant operand {x!r} holds "
                                  f"{bad} (0 * inf is NaN)")
        self.build(b, node)


def non_finite(value) -> str:
    """``"-inf"``, ``"inf"``, ``"NaN"`` (comma-joined) when a float array holds them, else ``""``."""
    if value is None:
        return ""
    a = np.asarray(value)
    if a.dtype.kind != "f" or a.size == 0:
        return ""
    found = [w for w, m in (("-inf", np.isneginf(a)), ("inf", np.isposinf(a)), ("NaN", np.isnan(a))) if m.any()]
    return ", ".join(found)


def attr(node: onnx.NodeProto, name: str, default=None):
    """The value of attribute *name* of *node*, or *default*."""
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def only_attrs(node: onnx.NodeProto, rule: str, allowed: dict) -> None:
    """Decline when *node* sets an attribute to a value outside ``allowed`` (name -> set, or None = any)."""
    for a in node.attribute:
        if a.name not in allowed:
            raise Decline(f"{rule}: attribute {a.name} not handled")
        ok = allowed[a.name]
        if ok is not None:
            v = helper.get_attribute_value(a)
            v = v.decode() if isinstance(v, bytes) else v
            if v not in ok:
                raise Decline(f"{rule}: {a.name}={v!r} not handled (handles {sorted(map(str, ok))})")


# -- opset-aware emitters for ops whose signature changed over the opsets ------------------
_AXES_AS_INPUT = {"ReduceSum": 13, "ReduceMean": 18, "ReduceMax": 18, "ReduceMin": 18, "ReduceProd": 18,
                  "ReduceL1": 18, "ReduceL2": 18, "ReduceLogSumExp": 18, "ReduceSumSquare": 18,
                  "ReduceLogSum": 18, "Unsqueeze": 13, "Squeeze": 13}


def reduce(b: Builder, op: str, x: str, axes, keepdims: int = 1, outputs=None) -> str:
    """``op`` (ReduceSum/ReduceMean/...) over *axes* (list of ints, or None for all) at the model's opset."""
    if b.opset >= _AXES_AS_INPUT[op]:
        args = [x] if axes is None else [x, b.ints(axes)]
        return b.op(op, *args, keepdims=keepdims, outputs=outputs)
    return b.op(op, x, keepdims=keepdims, axes=None if axes is None else list(axes), outputs=outputs)


def unsqueeze(b: Builder, x: str, axes, outputs=None) -> str:
    if b.opset >= 13:
        return b.op("Unsqueeze", x, b.ints(axes), outputs=outputs)
    return b.op("Unsqueeze", x, axes=list(axes), outputs=outputs)


def squeeze(b: Builder, x: str, axes, outputs=None) -> str:
    if b.opset >= 13:
        return b.op("Squeeze", x, b.ints(axes), outputs=outputs)
    return b.op("Squeeze", x, axes=list(axes), outputs=outputs)


def dim(b: Builder, x: str, axis: int) -> str:
    """The size of *x* along *axis* as an int64 tensor of shape [1]."""
    return b.op("Gather", b.op("Shape", x), b.ints([axis]), axis=0)


def need_rank(b: Builder, x: str, rule: str) -> int:
    r = b.rank(x)
    if r is None:
        raise Decline(f"{rule}: rank of {x!r} unknown (run shape inference or give static shapes)")
    return r


def float_only(b: Builder, x: str, rule: str) -> str:
    d = b.dtype(x)
    if d not in FLOATS:
        raise Decline(f"{rule}: needs a floating-point input, {x!r} is {d or 'of unknown type'}")
    return d
