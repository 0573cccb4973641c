"""ONNX's own backend node test cases (``onnx.backend.test.case.node``, shipped in the onnx package).

The outside ground truth two checks run on: the decompositions (:mod:`op_coverage.plan.node_suite`)
and the agreement of a table profile with onnxruntime (:mod:`op_coverage.targets.agreement`).
"""
from __future__ import annotations

import contextlib
import io
import warnings
from functools import lru_cache

import numpy as np


@lru_cache(maxsize=1)
def node_cases() -> tuple:
    """All ONNX backend node test cases (generated in memory by the onnx package; ~10 s)."""
    from onnx.backend.test.case import node
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return tuple(node.collect_testcases(None))



def case_op(case) -> tuple[str, str] | None:
    """The single operator a case tests, or None (multi-op or expanded-function cases)."""
    if case.name.endswith(("_expanded",)) or "_expanded_ver" in case.name:
        return None
    ops = {(n.domain or "ai.onnx", n.op_type) for n in case.model.graph.node if n.op_type != "Constant"}
    return next(iter(ops)) if len(ops) == 1 else None
