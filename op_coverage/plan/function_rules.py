"""ONNX's own function bodies as decompositions (Gelu, LayerNormalization, Softmax, ...).

The mechanics (finding the body for an opset, inlining it with fresh names) are in
:mod:`op_coverage.onnx.functions`; here a body becomes one more :class:`Rule` for the
planner, with the numerical weaknesses some bodies are known to have.
"""
from __future__ import annotations

import onnx
from onnx import NodeProto

from op_coverage.onnx.builder import Builder
from op_coverage.onnx.functions import expand_body
from op_coverage.plan.rules.base import Rule

#: known numerical weaknesses of ONNX's bodies (quality as in :class:`Rule`: 2 = loose)
BODY_QUALITY = {
    ("ai.onnx", "ReduceLogSumExp"): (2, "log(sum(exp(x))) without the max shift: overflows to inf for "
                                       "x > 88 in float32 (onnx/defs/reduction/defs.cc)"),
}


def body_rule(domain: str, op: str) -> Rule:
    """A :class:`Rule` that expands ``domain::op`` with its ONNX function body."""
    def build(b: Builder, node: NodeProto) -> None:
        expand_body(b, node, domain)

    quality, weakness = BODY_QUALITY.get((domain, op), (0, ""))
    return Rule(f"{op.lower()}.onnx-function", op, build, domain=domain, quality=quality,
                note=f"onnx {onnx.__version__} function body of {op}" + (f"; {weakness}" if weakness else ""))
