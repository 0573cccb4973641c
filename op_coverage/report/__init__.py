"""Scan reports: the data model (:mod:`.model`) and one module per output format."""
from __future__ import annotations

from op_coverage.report.model import FORMAT, ModelReport, OpRow, Report, TargetSummary

FORMATS = ("table", "json", "csv", "md", "html")


def render(report: Report, fmt: str, color: bool = False, width: int = 80) -> str:
    """Render *report* as text in one of :data:`FORMATS`."""
    if fmt == "table":
        from op_coverage.report.table import render_table
        return render_table(report, color=color, width=width)
    if fmt == "json":
        from op_coverage.report.jsonfmt import render_json
        return render_json(report)
    if fmt == "csv":
        from op_coverage.report.csvfmt import render_csv
        return render_csv(report)
    if fmt == "md":
        from op_coverage.report.markdown import render_markdown
        return render_markdown(report)
    if fmt == "html":
        from op_coverage.report.html import render_html
        return render_html(report)
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


__all__ = ["FORMAT", "FORMATS", "ModelReport", "OpRow", "Report", "TargetSummary", "render"]
