"""The project's decomposition rules, one small topic module per group of operators.

:data:`RULES` is the registry: an explicit tuple, in the order the planner tries rules of the
same cost.  ONNX's own function bodies (:mod:`op_coverage.plan.function_rules`) are tried before these.
Each rule states the opsets, dtypes and attribute values it handles and declines outside
them with the reason (:class:`Decline`).
"""
from __future__ import annotations

from op_coverage.plan.rules import _activation, _attention, _elementwise, _index, _linalg, _logic, _norm, _reduce, _shape
from op_coverage.plan.rules.base import Builder, Decline, Rule

RULES: tuple[Rule, ...] = (
    *_linalg.RULES,
    *_activation.RULES,
    *_elementwise.RULES,
    *_logic.RULES,
    *_reduce.RULES,
    *_shape.RULES,
    *_norm.RULES,
    *_index.RULES,
    *_attention.RULES,
)


def rules_for(domain: str, op: str) -> list[Rule]:
    """The project rules that replace ``domain::op``, in registry order."""
    return [r for r in RULES if r.domain == domain and r.op == op]


__all__ = ["Builder", "Decline", "RULES", "Rule", "rules_for"]
