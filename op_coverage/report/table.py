"""Terminal table: fits 80 columns (targets wrap into several blocks), colour only on a TTY."""
from __future__ import annotations

import textwrap

from op_coverage.report.model import ModelReport, Report, headline
from op_coverage.report.replacement import replacement_text

CELL = {"native": "ok", "host-fallback": "host", "unsupported": "NO"}
COLOR = {"native": "\033[32m", "host-fallback": "\033[33m", "unsupported": "\033[31;1m"}
RESET = "\033[0m"


def _human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _cell(sup: dict, color: bool, width: int) -> str:
    text = CELL[sup["status"]] + ("*" if sup["status"] == "native" and sup.get("restriction") else "")
    pad = text.ljust(width)
    return f"{COLOR[sup['status']]}{pad}{RESET}" if color else pad


def render_model(m: ModelReport, color: bool, width: int) -> list[str]:
    info = m.model
    head = headline(m)
    if info.get("kind") != "torch-trace":
        head += f"; weights {_human(info['weight_bytes'])}" + (
            f" ({len(info['external_data'])} external file(s))" if info["external_data"] else "")
    lines = [f"{m.path}", *textwrap.wrap(head, width, initial_indent="  ", subsequent_indent="  "), ""]
    names = [t.name for t in m.targets]
    label_w = min(24, max([len("op type")] + [len(r.label) for r in m.rows]) + 1)
    fixed = label_w + 6
    blocks, cur, used = [], [], fixed
    for n in names:
        w = max(len(n), 4) + 1
        if cur and used + w > width:
            blocks.append(cur)
            cur, used = [], fixed
        cur.append(n)
        used += w
    if cur:
        blocks.append(cur)
    for block in blocks:
        widths = {n: max(len(n), 4) + 1 for n in block}
        lines.append("op type".ljust(label_w) + "count ".rjust(6) + "".join(n.ljust(widths[n]) for n in block).rstrip())
        lines.append("-" * min(width, fixed + sum(widths.values())))
        for r in m.rows:
            label = r.label if len(r.label) < label_w else r.label[: label_w - 2] + "~"
            cells = "".join(_cell(r.support[n], color, widths[n]) for n in block)
            lines.append(label.ljust(label_w) + f"{r.count:5d} " + cells.rstrip())
        lines.append("")
    problems = [(r, t, r.support[t]) for r in m.rows for t in names if r.support[t]["status"] != "native"]
    if problems:
        lines.append("Not native (reason; where):")
        for r in m.rows:
            bad = [(t, s) for t, s in ((t, r.support[t]) for t in names) if s["status"] != "native"]
            if not bad:
                continue
            where = ", ".join(n for n, _ in r.locations[:3]) + (" ..." if len(r.locations) > 3 else "")
            lines.append(f"  {r.label} x{r.count}  [{where}]")
            for t, s in bad:
                lines += textwrap.wrap(f"{t}: {s['status']}: {s['reason']}", width, initial_indent="    ",
                                       subsequent_indent="      ")
                repl = replacement_text((r.replacement or {}).get(t))
                if repl:
                    lines += textwrap.wrap(repl, width, initial_indent="      ", subsequent_indent="        ")
        lines.append("")
    lines.append("Coverage (native share)         by node   by op type   fallback  unsupported")
    for t in m.targets:
        lines.append(f"  {t.name:28.28} {t.coverage_by_node:7.1f}%  {t.coverage_by_op_type:8.1f}%   "
                     f"{t.nodes_by_status['host-fallback']:8d}  {t.nodes_by_status['unsupported']:11d}")
        for note in t.notes:
            lines += textwrap.wrap("! " + note, width, initial_indent="    ", subsequent_indent="      ")
    for w in m.warnings:
        lines += textwrap.wrap("warning: " + w, width)
    return lines


def render_table(report: Report, color: bool = False, width: int = 80) -> str:
    """Human-readable report; every line fits *width* columns (colour codes aside)."""
    out: list[str] = []
    for m in report.models:
        out += render_model(m, color, width) + [""]
    for e in report.errors:
        out += textwrap.wrap(f"error: {e['message']}", width, subsequent_indent="  ")
    out.append("ok = native, ok* = native with a restriction (see --format md), host = runs on the host CPU, "
               "NO = unsupported")
    return "\n".join(textwrap.fill(line, width) if len(line) > width and not color else line
                     for line in out) + "\n"
