"""Markdown: summary per target, then one table per model with status and reasons."""
from __future__ import annotations

from op_coverage.report.model import Report, headline
from op_coverage.report.replacement import replacement_text

ICON = {"native": "native", "host-fallback": "**host-fallback**", "unsupported": "**unsupported**"}


def _esc(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: Report) -> str:
    out = ["# Operator coverage", ""]
    for m in report.models:
        info = m.model
        out += [f"## `{m.path}`", "",
                headline(m) + (f", {info['weight_bytes']} weight bytes." if info.get("kind") != "torch-trace"
                               else "."), "",
                "| target | native by node | native by op type | host-fallback nodes | unsupported nodes | source |",
                "|---|---:|---:|---:|---:|---|"]
        for t in m.targets:
            out.append(f"| {t.name} | {t.coverage_by_node:.1f}% | {t.coverage_by_op_type:.1f}% | "
                       f"{t.nodes_by_status['host-fallback']} | {t.nodes_by_status['unsupported']} | "
                       f"{_esc(t.provenance)} |")
        notes = [n for t in m.targets for n in t.notes] + m.warnings
        if notes:
            out += [""] + [f"- {_esc(n)}" for n in notes]
        out += ["", "| op type | count | " + " | ".join(t.name for t in m.targets) + " |",
                "|---|---:|" + "---|" * len(m.targets)]
        for r in m.rows:
            cells = []
            for t in m.targets:
                s = r.support[t.name]
                c = ICON[s["status"]] + ("†" if s["restriction"] else "")
                cells.append(c)
            out.append(f"| `{_esc(r.label)}` | {r.count} | " + " | ".join(cells) + " |")
        out += ["", "### Reasons and restrictions", ""]
        for r in m.rows:
            for t in m.targets:
                s = r.support[t.name]
                if s["status"] != "native" or s["restriction"]:
                    text = "; ".join(x for x in (s["reason"], s["restriction"]) if x)
                    where = ", ".join(f"`{n}`" for n, _ in r.locations[:5])
                    repl = replacement_text((r.replacement or {}).get(t.name))
                    out.append(f"- `{_esc(r.label)}` on **{t.name}** ({s['status']}): {_esc(text)} — at {where}"
                               + (f"; {_esc(repl)}" if repl else ""))
        out.append("")
    for e in report.errors:
        out.append(f"- error: {_esc(e['message'])}")
    out.append("† native with a restriction.")
    return "\n".join(out) + "\n"
