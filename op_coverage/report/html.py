"""A standalone HTML page (no scripts, no external assets): summary and a per-op matrix."""
from __future__ import annotations

from html import escape

from op_coverage.report.model import Report, headline

STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:.25em .5em;font-size:14px}th{background:#f4f4f4}
.native{background:#e6f4ea}.host-fallback{background:#fff4ce}.unsupported{background:#fde2e1;font-weight:bold}
.num{text-align:right}small{color:#666}"""


def render_html(report: Report) -> str:
    parts = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>op_coverage report</title>",
             f"<style>{STYLE}</style></head><body><h1>Operator coverage</h1>"]
    for m in report.models:
        parts.append(f"<h2>{escape(m.path)}</h2><p>{escape(headline(m))}</p>")
        parts.append("<table><tr><th>target</th><th>native by node</th><th>native by op type</th>"
                     "<th>host-fallback</th><th>unsupported</th><th>source</th></tr>")
        for t in m.targets:
            parts.append(f"<tr class='{t.worst}'><td>{escape(t.name)}</td><td class=num>{t.coverage_by_node:.1f}%</td>"
                         f"<td class=num>{t.coverage_by_op_type:.1f}%</td>"
                         f"<td class=num>{t.nodes_by_status['host-fallback']}</td>"
                         f"<td class=num>{t.nodes_by_status['unsupported']}</td><td><small>{escape(t.provenance)}"
                         + "".join(f"<br>{escape(n)}" for n in t.notes) + "</small></td></tr>")
        parts.append("</table><table><tr><th>op type</th><th>count</th>"
                     + "".join(f"<th>{escape(t.name)}</th>" for t in m.targets) + "</tr>")
        for r in m.rows:
            cells = []
            for t in m.targets:
                s = r.support[t.name]
                tip = "; ".join(x for x in (s["reason"], s["restriction"], s["provenance"]) if x)
                mark = "*" if s["restriction"] else ""
                cells.append(f"<td class='{s['status']}' title='{escape(tip, quote=True)}'>{s['status']}{mark}</td>")
            where = ", ".join(n for n, _ in r.locations[:5])
            parts.append(f"<tr><td title='{escape(where, quote=True)}'>{escape(r.label)}</td>"
                         f"<td class=num>{r.count}</td>{''.join(cells)}</tr>")
        parts.append("</table>")
        for w in m.warnings:
            parts.append(f"<p>warning: {escape(w)}</p>")
    for e in report.errors:
        parts.append(f"<p class=unsupported>error: {escape(e['message'])}</p>")
    parts.append("<p><small>* native with a restriction; hover a cell for the reason and source.</small></p>"
                 "</body></html>")
    return "\n".join(parts) + "\n"
