"""Versioned JSON (``op_coverage.report/1``, schema in ``op_coverage/data/report.schema.json``)."""
from __future__ import annotations

import json

from op_coverage.report.model import Report


def render_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n"
