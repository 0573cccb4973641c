"""CSV: one row per node and target.

The first eight columns are those of Ascend ``msit analyze`` result.csv (ori_op_name,
ori_op_type, op_name, op_type, soc_type, engine, is_supported, details), so its users can
reuse their filters; op_coverage's own columns follow.  ``soc_type`` holds the target name,
``op_type`` what the target turns the op into where the source says so (the CANN op for
Ascend), ``engine`` the status.
"""
from __future__ import annotations

import csv
import io

from .model import Report

COLUMNS = ["ori_op_name", "ori_op_type", "op_name", "op_type", "soc_type", "engine", "is_supported", "details",
           "model", "domain", "opset", "op_version", "path", "input_dtypes", "target", "status", "restriction",
           "provenance", "replacement"]


def render_csv(report: Report) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for m in report.models:
        for node, verdicts in m.nodes:
            for target, v in verdicts.items():
                details = "; ".join(x for x in (v.reason, v.restriction) if x)
                w.writerow([node.name, node.op_type, "", v.target_op or "", target, v.status,
                            "TRUE" if v.status != "unsupported" else "FALSE", details,
                            m.path, node.domain, node.opset if node.opset is not None else "",
                            node.version if node.version is not None else "", node.path,
                            " ".join(d or "?" for d in node.input_dtypes), target, v.status, v.restriction,
                            v.provenance, ""])
    return buf.getvalue()
