"""Reports of the static torch scan in every ``scan`` format: table, json, csv, md, html.

Works on any report with ``findings`` (objects with file, line, col, rule, category, level,
what, fix, code, source), ``files``, ``counts()``, ``exit_code()`` and ``to_dict()``:
:class:`op_coverage.torch.static.StaticReport` today, the dynamic torch scan's findings later.
The table and HTML reuse the ONNX report's colours and style.
"""
from __future__ import annotations

import csv
import io
import json
import textwrap
from html import escape

from op_coverage.report.html import STYLE as ONNX_STYLE
from op_coverage.report.markdown import _esc
from op_coverage.report.table import COLOR as ONNX_COLOR, RESET

LEVEL_LABEL = {"change": "CHANGE", "caveat": "caveat", "ok": "ok"}
LEVEL_TITLE = {"change": "Needs a change", "caveat": "Runs via hal run, with a caveat", "ok": "Works via hal run"}
COLOR = {"change": ONNX_COLOR["unsupported"], "caveat": ONNX_COLOR["host-fallback"], "ok": ONNX_COLOR["native"]}
CSV_COLUMNS = ["file", "line", "col", "level", "category", "rule", "what", "fix", "code", "source"]
STYLE = (ONNX_STYLE + "\n.change{background:#fde2e1}.caveat{background:#fff4ce}.ok{background:#e6f4ea}"
         "code{font-size:13px}")


def summary_line(report) -> str:
    """``32 file(s), 90 finding(s): 2 need a change, 7 caveat(s), 81 work via hal run``."""
    c = report.counts()
    return (f"{len(report.files)} file(s), {len(report.findings)} finding(s): {c['change']} need a change, "
            f"{c['caveat']} caveat(s), {c['ok']} work via hal run")


def render_table(report, color: bool = False, width: int = 80, fail_on: str = "caveat") -> str:
    """Findings grouped by file, in line order; changes and caveats with their fix, the rest one line each."""
    out = ["Migration checklist (static: read, not run) for hal run", ""]
    current, shown = None, {}
    for f in report.findings:
        if f.file != current:
            if current is not None:
                out.append("")
            out.append(f.file)
            current, shown = f.file, {}
        tag = LEVEL_LABEL[f.level].ljust(6)
        if color:
            tag = f"{COLOR[f.level]}{tag}{RESET}"
        head, indent = f"  {f.line:>5}  {tag}  ", " " * 17
        text = f"[{f.category}] {f.what}"
        if f.level == "ok":
            room = max(20, width - len(indent))
            out.append(head + (text if len(text) <= room else text[: room - 3] + "..."))
            continue
        body = textwrap.wrap(text, max(20, width - len(indent)))
        out.append(head + body[0])
        out += [indent + line for line in body[1:]]
        fix = f"fix: as at line {shown[f.rule, f.fix]}" if (f.rule, f.fix) in shown else "fix: " + f.fix
        shown.setdefault((f.rule, f.fix), f.line)
        out += textwrap.wrap(fix, width, initial_indent=indent, subsequent_indent=indent + "     ")
    if report.findings:
        out.append("")
    out += textwrap.wrap(summary_line(report) + f"; exit code {report.exit_code(fail_on)}", width)
    out.append("CHANGE = needs a code change, caveat = runs via hal run but differs from CUDA, ok = works via hal "
               "run (--format md lists every fix)" if width >= 100 else
               "CHANGE = needs a code change; caveat = runs via hal run, differs from CUDA;")
    if width < 100:
        out.append("ok = works via hal run as it is (--format md lists every fix)")
    return "\n".join(out) + "\n"


def render_json(report, fail_on: str = "caveat") -> str:
    return json.dumps(report.to_dict(fail_on), indent=2, ensure_ascii=False) + "\n"


def render_csv(report) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for f in report.findings:
        d = f.to_dict()
        w.writerow([d[c] for c in CSV_COLUMNS])
    return buf.getvalue()


def render_markdown(report) -> str:
    """A checklist: every change and caveat as a box to tick, then the forms that work as they are."""
    out = ["# Migration checklist for `hal run` (static scan)", "", summary_line(report) + ".", ""]
    for level in ("change", "caveat"):
        items = [f for f in report.findings if f.level == level]
        if not items:
            continue
        out += [f"## {LEVEL_TITLE[level]}", ""]
        for f in items:
            out.append(f"- [ ] `{f.where}` ({f.category}, `{f.rule}`): {_esc(f.what)}  \n"
                       f"  fix: {_esc(f.fix)}")
        out.append("")
    ok = [f for f in report.findings if f.level == "ok"]
    if ok:
        out += [f"## {LEVEL_TITLE['ok']}", "", "| where | category | what | note |", "|---|---|---|---|"]
        out += [f"| `{f.where}` | {f.category} | {_esc(f.what)} | {_esc(f.fix)} |" for f in ok]
        out.append("")
    bad = [m for m in report.files if m["status"] != "scanned"]
    for m in bad:
        out.append(f"- `{m['path']}`: {m['status']}")
    for w in getattr(report, "warnings", ()):
        out.append(f"- warning: {_esc(w)}")
    return "\n".join(out).rstrip() + "\n"


def render_html(report) -> str:
    parts = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>hal run migration checklist</title>",
             f"<style>{STYLE}</style></head><body><h1>Migration checklist for hal run</h1>",
             f"<p>{escape(summary_line(report))}. Static scan: the scripts were read, not run.</p>",
             "<table><tr><th>where</th><th>level</th><th>category</th><th>what</th><th>fix</th></tr>"]
    for f in report.findings:
        parts.append(f"<tr class='{f.level}'><td><code>{escape(f.where)}</code></td><td>{f.level}</td>"
                     f"<td>{escape(f.category)}</td><td title='{escape(f.code, quote=True)}'>{escape(f.what)}</td>"
                     f"<td>{escape(f.fix)}<br><small>{escape(f.source)}</small></td></tr>")
    parts.append("</table>")
    for w in getattr(report, "warnings", ()):
        parts.append(f"<p>warning: {escape(w)}</p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def render(report, fmt: str, color: bool = False, width: int = 80, fail_on: str = "caveat") -> str:
    """Render a findings report in one of ``table``, ``json``, ``csv``, ``md``, ``html``."""
    if fmt == "table":
        return render_table(report, color=color, width=width, fail_on=fail_on)
    if fmt == "json":
        return render_json(report, fail_on)
    if fmt == "csv":
        return render_csv(report)
    if fmt == "md":
        return render_markdown(report)
    if fmt == "html":
        return render_html(report)
    raise ValueError(f"unknown format {fmt!r}; choose one of table, json, csv, md, html")
