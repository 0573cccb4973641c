"""Which inputs of an operator have a type the schema fixes (Where's bool condition, Xor's bools, Reshape's
int64 shape...).

Support tables (onnxruntime's kernel registry, vendor op lists) list the types an implementation
registers for the *polymorphic* type constraints only, so the dtype of a fixed-type input must
not be checked against them: ``Where(bool, float, float)`` is a float Where.
"""
from __future__ import annotations

from functools import lru_cache

import onnx


@lru_cache(maxsize=None)
def fixed_type_inputs(op: str, domain: str, opset: int | None) -> frozenset:
    """Positions of the inputs of ``domain::op`` (at *opset*) whose type admits a single choice."""
    if opset is None:
        return frozenset()
    try:
        s = onnx.defs.get_schema(op, opset, "" if domain == "ai.onnx" else domain)
    except onnx.defs.SchemaError:
        return frozenset()
    allowed = {c.type_param_str: len(c.allowed_type_strs) for c in s.type_constraints}
    fixed = set()
    for i, f in enumerate(s.inputs):
        n = allowed.get(f.type_str)
        if n is None or n == 1:  # a concrete type ("tensor(int64)") or a one-type constraint
            fixed.add(i)
    if s.inputs and s.inputs[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
        last = len(s.inputs) - 1
        if last in fixed:
            fixed |= set(range(last, 64))  # a variadic fixed-type tail
    return frozenset(fixed)


def judged_dtypes(node) -> list[str]:
    """The sorted dtypes of *node*'s (a NodeInfo) polymorphic inputs: what a support table is checked against."""
    fixed = fixed_type_inputs(node.op_type, node.domain, node.opset)
    return sorted({d for i, d in enumerate(node.input_dtypes) if d and i not in fixed})
