"""Helpers for the rewrite tests: a target lacking some ops, rewrite, run both in onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import parser

from op_coverage.targets.lacking import parse_ops, without
from op_coverage.rewrite import rewrite_model
from op_coverage.targets.catalog import load_targets
from op_coverage.rewrite.verify import compare, generate_inputs

_BASE = {}


def lacking(ops: str, base: str = "ort-cpu"):
    """The *base* profile minus *ops* (comma list, domain::Op for other domains)."""
    if base not in _BASE:
        _BASE[base] = load_targets(use_plugins=False).get(base)
    return without(_BASE[base], parse_ops(ops))


def model(text: str) -> onnx.ModelProto:
    m = parser.parse_model(text)
    onnx.checker.check_model(m, full_check=True)
    return m


def ops_in(m: onnx.ModelProto) -> set:
    found = set()

    def walk(g):
        for n in g.node:
            found.add(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}")
            for a in n.attribute:
                if a.HasField("g"):
                    walk(a.g)
                for s in a.graphs:
                    walk(s)
    walk(m.graph)
    for f in m.functions:
        walk(f)
    return found


def run(m: onnx.ModelProto, feeds: dict) -> list:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def rewrite_and_compare(m: onnx.ModelProto, remove: str, feeds: dict | None = None, base: str = "ort-cpu",
                        atol=None, rtol=None):
    """Rewrite *m* for *base* minus *remove*; return (result, [OutputCheck]) on the same feeds."""
    res = rewrite_model(m, lacking(remove, base))
    onnx.checker.check_model(res.model, full_check=True)
    feeds = feeds if feeds is not None else generate_inputs(m, seed=1)
    want, got = run(m, feeds), run(res.model, feeds)
    return res, [compare(str(i), w, g, atol, rtol) for i, (w, g) in enumerate(zip(want, got))]


__all__ = ["lacking", "model", "np", "ops_in", "rewrite_and_compare", "run"]
