"""CSV: one row per node and target (per aten op and target for a torch trace).

The first eight columns are those of Ascend ``msit analyze`` result.csv (ori_op_name,
ori_op_type, op_name, op_type, soc_type, engine, is_supported, details), so its users can
reuse their filters; op_coverage's own columns follow.  ``soc_type`` holds the target name,
``op_type`` what the target turns the op into where the source says so (the CANN op for
Ascend), ``engine`` the status.
"""
from __future__ import annotations

import csv
import io

from op_coverage.report.model import Report
from op_coverage.report.replacement import replacement_text

COLUMNS = ["ori_op_name", "ori_op_type", "op_name", "op_type", "soc_type", "engine", "is_supported", "details",
           "model", "domain", "opset", "op_version", "path", "input_dtypes", "target", "status", "restriction",
           "provenance", "replacement"]


def render_csv(report: Report) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for m in report.models:
        plans = {(r.domain, r.op_type): r.replacement or {} for r in m.rows}
        if m.model.get("kind") == "torch-trace":  # a torch trace: one row per aten op and target
            for r in m.rows:
                where = "; ".join(f"{a} ({b})" if b else a for a, b in r.locations)
                for target, s in r.support.items():
                    w.writerow([r.op_type, r.op_type, "", "", target, s["status"],
                                "TRUE" if s["status"] != "unsupported" else "FALSE", s["reason"], m.path, "aten",
                                m.model["torch_version"], "", where, " ".join(sorted(r.dtypes)), target,
                                s["status"], "", s.get("via") or "", replacement_text(plans[("aten", r.op_type)]
                                                                                    .get(target))
                                if s["status"] != "native" else ""])
            continue
        for node, verdicts in m.nodes:
            for target, v in verdicts.items():
                details = "; ".join(x for x in (v.reason, v.restriction) if x)
                w.writerow([node.name, node.op_type, "", v.target_op or "", target, v.status,
                            "TRUE" if v.status != "unsupported" else "FALSE", details,
                            m.path, node.domain, node.opset if node.opset is not None else "",
                            node.version if node.version is not None else "", node.path,
                            " ".join(d or "?" for d in node.input_dtypes), target, v.status, v.restriction,
                            v.provenance, replacement_text(plans.get(node.key, {}).get(target))
                            if v.status != "native" else ""])
    return buf.getvalue()
