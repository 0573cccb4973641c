"""The acceptance report for people: a terminal summary and one self-contained HTML page (charts as
inline SVG, no script, no external file), both from the JSON report (``hal.accept/1``)."""
from __future__ import annotations

import html
import json
from typing import Dict, List, Optional, Sequence

TITLES = {"code_changes": "1. Code changes", "operators": "2. Operators", "numerics": "3. Numerics",
          "throughput": "4. Throughput and memory", "stability": "5. Stability", "inference": "6. Inference",
          "environment": "7. Environment"}
_COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def _fmt(v, digits: int = 4) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def terminal(report: dict) -> str:
    """A few lines: the verdict, each gate, each section's verdict and summary."""
    lines = [f"hal accept: {report['script']}: {report['verdict'].upper()} (exit {report['exit_code']}); "
             f"reference {report['reference']}, target(s) {', '.join(report['targets'])}, {report['steps']} steps"]
    for g in report["gates"]:
        lines.append(f"  gate {g['gate']:<10} {'holds' if g['holds'] else 'FAILS'}: {g['detail']}")
    for key, title in TITLES.items():
        s = report["sections"].get(key)
        if s:
            lines.append(f"  {title:<26} {s['verdict']:<11} {s['summary']}")
    for name, t in report["sections"].get("numerics", {}).get("targets", {}).items():
        b = t.get("bisection")
        if b and b["status"] == "found":
            sites = ", ".join(list(b["sites"])[:3]) or "no call site recorded"
            lines.append(f"  {name}: the loss differs because of aten::{b['op']} (at {sites}); "
                         f"{len(b['runs'])} bisection runs")
        elif b:
            lines.append(f"  {name}: bisection: {b['status']}: {b.get('why', '')}")
    stab = report["sections"].get("stability", {})
    for name, e in (stab.get("rehearsals") or {}).items():
        lines.append(f"  stability {name}: {rehearsal_line(e)}")
    for name, e in (stab.get("portability") or {}).items():
        lines.append(f"  stability {name}: the reference's checkpoint of step {e['step']}: "
                     + (e.get("note") or "resumed, losses within tolerance" if e.get("ok") else
                        e.get("why") or "the losses after it differ from the reference's"))
    for name, t in report["sections"].get("operators", {}).get("targets", {}).items():
        if "onnx" in t:
            lines.append(f"  {name}: ONNX: {onnx_line(t['onnx'])}")
    for name, e in (report["sections"].get("inference", {}).get("int8") or {}).get("targets", {}).items():
        lines.append(f"  {name}: INT8: {int8_line(e)}")
    tps = report["sections"].get("throughput", {})
    for name, m in [("reference", tps.get("reference_mfu")), *tps.get("targets", {}).items()]:
        if m and "mfu" in m:
            lines.append(f"  {name}: MFU {mfu_line(m)}")
    return "\n".join(lines)


def rehearsal_line(e: dict) -> str:
    """One backend's rehearsed failure in a line: where it died, where it resumed, how the losses compare."""
    if not e.get("restarted"):
        return e.get("why", "not restarted")
    line = (f"killed at step {e['killed_at_step']}, resumed from step {e['resumed_from_step']} "
            f"({e.get('steps_redone', '?')} redone), recovery {_fmt(e.get('recovery_s'), 3)} s; losses after the "
            f"resume {'bitwise equal' if e.get('bitwise') else 'max abs diff ' + _fmt(e.get('max_abs_diff'), 3)}")
    return line + ("" if e.get("ok") else f" ({e.get('why', 'outside the tolerance')})")


def mfu_line(m: dict) -> str:
    """One run's MFU in a line: the share of its devices' dense peak for the dtype its products ran in, with the
    peak's source, or why it is unknown (hal_accept.accept.mfu)."""
    if m.get("mfu") is None:
        return f"unknown: {m.get('mfu_why') or 'no figures'}"
    return (f"{m['mfu']:.1%} of {m.get('devices') or 1} x {m['peak_device']}'s dense {m['compute_dtype']} peak "
            f"({m['peak_flops'] / 1e12:.1f} TFLOP/s each, {m['peak_source']})")


def onnx_line(e: dict) -> str:
    """One target's ONNX export in a line: its ONNX target, the ops it lacks with their replacement, the rewrite."""
    if e["onnx_target"] is None:
        return e["why"]
    if e.get("error"):
        return f"{e['onnx_target']}: the scan failed: {e['error']}"
    s = e["nodes_by_status"]
    line = f"{e['onnx_target']}: {s['native']} of {e['nodes']} nodes native"
    for o in e["needs_attention"]:
        line += f"; {o['op']} x{o['nodes']} {o['status']}: {o['replacement'] or o['reason'] or 'no replacement'}"
    rw = e.get("rewrite")
    if rw is not None:
        if rw.get("error"):
            line += f"; the rewrite failed: {rw['error']}"
        else:
            left = sum(rw["remaining"].values()) if rw.get("remaining") is not None else "?"
            line += (f"; rewritten ({sum(rw['replaced'].values())} node(s) replaced, "
                     f"{'verified' if rw['verified'] else 'NOT verified'} in onnxruntime, {left} not native left)"
                     + (f" -> {rw['written']}" if rw.get("written") else ""))
    return line


def int8_line(e: dict) -> str:
    """One target's INT8 model in a line: format, size before and after, accuracy, the gates, the file."""
    if e["onnx_target"] is None:
        return "not made: the target has no ONNX profile (its ONNX line says why)"
    if e["status"] == "nothing_quantized":
        return f"{e['onnx_target']} runs no INT8 form of the model's ops; it stays float"
    if e["status"] == "failed":
        return f"{e['onnx_target']}: failed: {e['error']}"
    size = e["size"]
    return (f"{e['onnx_target']}, {e['format']}: {size['float_bytes']} -> {size['quantized_bytes']} bytes "
            f"(x{size['ratio']}), max abs error {_fmt(e['max_abs_error'], 3)}, cosine {_fmt(e['min_cosine'], 6)}"
            + ("" if e["within_gates"] else " (OUTSIDE the gates: not written)")
            + (f" -> {e['written']}" if e.get("written") else ""))


def _svg_lines(series: Dict[str, Sequence[Optional[float]]], title: str, width: int = 560, height: int = 220) -> str:
    """A line chart: one polyline per series over steps 1..n (None values skipped)."""
    pts = [v for s in series.values() for v in s if v is not None]
    if not pts:
        return f"<p>{html.escape(title)}: no values</p>"
    lo, hi = min(pts), max(pts)
    hi = hi if hi > lo else lo + 1.0
    n = max(len(s) for s in series.values())
    left, right, top, bottom = 56, 12, 22, 28

    def xy(i, v):
        x = left + (width - left - right) * (i / max(n - 1, 1))
        y = top + (height - top - bottom) * (1 - (v - lo) / (hi - lo))
        return f"{x:.1f},{y:.1f}"
    parts = [f'<svg role="img" aria-label="{html.escape(title)}" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
             f'<text x="{left}" y="14" font-size="12">{html.escape(title)}</text>',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#999"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#999"/>',
             f'<text x="4" y="{top + 8}" font-size="10">{_fmt(hi)}</text>',
             f'<text x="4" y="{height - bottom}" font-size="10">{_fmt(lo)}</text>',
             f'<text x="{left}" y="{height - 8}" font-size="10">step 1</text>',
             f'<text x="{width - right - 40}" y="{height - 8}" font-size="10">step {n}</text>']
    for k, (name, values) in enumerate(series.items()):
        colour = _COLOURS[k % len(_COLOURS)]
        dots = " ".join(xy(i, v) for i, v in enumerate(values) if v is not None)
        parts.append(f'<polyline class="series" data-name="{html.escape(name)}" fill="none" stroke="{colour}" '
                     f'stroke-width="2" points="{dots}"/>')
        parts.append(f'<text x="{width - right - 150}" y="{top + 14 * (k + 1)}" font-size="11" fill="{colour}">'
                     f'{html.escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table(rows: List[dict], columns: Sequence[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(c)))}</td>" for c in columns) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _onnx_html(e: dict) -> str:
    """A target's ONNX export: its ONNX target and where that comes from, the ops it lacks, the rewrite."""
    if e["onnx_target"] is None:
        return f"<h4>ONNX export</h4><p>{html.escape(e['why'])}</p>"
    out = [f"<h4>ONNX export on {html.escape(e['onnx_target'])}</h4><p>{html.escape(e['how'])}</p>"]
    if e.get("error"):
        out.append(f"<p>the scan failed: {html.escape(e['error'])}</p>")
        return "".join(out)
    out.append(f"<p>{e['nodes_by_status']['native']} of {e['nodes']} nodes native; nodes by status: "
               f"{html.escape(json.dumps(e['nodes_by_status']))}</p>")
    out.append(_table(e["needs_attention"] or [{"op": "(every op native)"}],
                      ["op", "nodes", "status", "reason", "replacement"]))
    rw = e.get("rewrite")
    if rw is not None and rw.get("error") and rw.get("replaced") is None:
        out.append(f"<p class='rewrite'>the rewrite failed: {html.escape(rw['error'])}</p>")
    elif rw is not None:
        ver = rw.get("verification") or {}
        errors = ", ".join(f"{o['name']} {_fmt(o['max_abs'])}" for o in ver.get("outputs", []))
        out.append(f"<p class='rewrite'>rewrite: replaced {html.escape(json.dumps(rw['replaced']))} with "
                   f"{html.escape(json.dumps(rw['added']))}; {'verified' if rw['verified'] else 'NOT verified'} "
                   f"in onnxruntime against the export (max abs error per output: {html.escape(errors or '-')}); "
                   f"not native left: {html.escape(json.dumps(rw.get('remaining')))}; written: "
                   f"{html.escape(_fmt(rw.get('written')))}"
                   + (f"; {html.escape(rw['error'])}" if rw.get("error") else "") + "</p>")
    return "".join(out)


def _int8_html(part: dict) -> str:
    """Section 6's INT8 part (its summary is in the section's): one row per target, then why a target has none."""
    rows = []
    for name, e in part["targets"].items():
        size = e.get("size") or {}
        rows.append({"target": name, "ONNX target": e["onnx_target"], "INT8": e.get("status", "no ONNX target"),
                     "format": e.get("format"), "float bytes": size.get("float_bytes"),
                     "INT8 bytes": size.get("quantized_bytes"), "ratio": size.get("ratio"),
                     "max abs error": e.get("max_abs_error"), "cosine": e.get("min_cosine"),
                     "within gates": e.get("within_gates"), "file": e.get("written")})
    notes = [f"{name}: {e.get('why') or e.get('error')}" for name, e in part["targets"].items()
             if e.get("why") or e.get("error")]
    return (f"<h3>INT8 of the ONNX export <span class='verdict'>{html.escape(part['verdict'])}</span></h3>"
            + _table(rows, ["target", "ONNX target", "INT8", "format", "float bytes", "INT8 bytes", "ratio",
                            "max abs error", "cosine", "within gates", "file"])
            + ("<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>" if notes else ""))


def _stability_html(s: dict, report: dict) -> str:
    """Section 5: the resumed losses against the uninterrupted ones per backend, the rehearsals, portability."""
    out, series = [], {}
    for name, e in s["rehearsals"].items():
        run = report["runs"].get(name) or {}
        series[f"{name} uninterrupted"] = run.get("loss") or []
        start = e.get("resumed_from_step")
        if start is not None and e.get("resumed_loss"):
            series[f"{name} resumed"] = [None] * start + list(e["resumed_loss"])
    out.append(_svg_lines(series, f"loss per step: killed at step {s['killed_at_step']}, resumed from the newest "
                                  f"checkpoint (every {s['checkpoint_every']} steps)"))
    out.append(_table([{"backend": n, "killed at": e["killed_at_step"], "restarted": e["restarted"],
                        "resumed from": e["resumed_from_step"], "steps redone": e.get("steps_redone"),
                        "bitwise": e.get("bitwise"), "max abs diff": e.get("max_abs_diff"),
                        "recovery s": e.get("recovery_s"), "failed step again s": e.get("regained_s"),
                        "ok": e["ok"], "why": e.get("why")} for n, e in s["rehearsals"].items()],
                      ["backend", "killed at", "restarted", "resumed from", "steps redone", "bitwise", "max abs diff",
                       "recovery s", "failed step again s", "ok", "why"]))
    rows = []
    for n, e in (s.get("portability") or {}).items():
        c = e.get("comparison") or {}
        rows.append({"target": n, "reference checkpoint": e["checkpoint"], "step": e["step"],
                     "opened": e.get("opened"), "first divergent step": c.get("first_divergent_step"),
                     "max rel diff": c.get("max_rel_diff"), "ok": e["ok"], "why": e.get("why") or e.get("note")})
    if rows:
        out.append("<h3>The reference's checkpoint on each target</h3>")
        out.append(_table(rows, ["target", "reference checkpoint", "step", "opened", "first divergent step",
                                 "max rel diff", "ok", "why"]))
    return "".join(out)


def _section_html(key: str, s: dict, report: dict) -> str:
    out = [f'<section id="{key}" class="{s["verdict"]}"><h2>{TITLES[key]} <span class="verdict">'
           f'{html.escape(s["verdict"])}</span></h2><p>{html.escape(s["summary"])}</p>']
    if key == "code_changes":
        out.append(_table(s.get("static_findings", []), ["file", "line", "rule", "level", "what"]))
    elif key == "operators":
        for name, t in s.get("targets", {}).items():
            out.append(f"<h3>{html.escape(name)} ({html.escape(t.get('profile', ''))})</h3>")
            if t.get("error"):
                out.append(f"<p>{html.escape(t['error'])}</p>")
            elif "ops" in t:
                out.append(f"<p>{t['op_types_native']} of {t['op_types']} op types native; nodes by status: "
                           f"{html.escape(json.dumps(t['nodes_by_status']))}</p>")
                out.append(_table([o for o in t["ops"] if o["status"] != "native"] or
                                  [{"op": "(every op native)"}], ["op", "calls", "status", "replacement"]))
            if "onnx" in t:
                out.append(_onnx_html(t["onnx"]))
    elif key == "numerics":
        series = {f"reference ({report['reference']})": s.get("reference_loss", [])}
        for name, t in s.get("targets", {}).items():
            series[name] = [row["target"] for row in t["comparison"]["steps"]]
        out.append(_svg_lines(series, "loss per step"))
        for name, t in s.get("targets", {}).items():
            c = t["comparison"]
            out.append(f"<h3>{html.escape(name)}</h3><p>first divergent step: {_fmt(c['first_divergent_step'])}, "
                       f"max relative difference {_fmt(c['max_rel_diff'])} (rtol {c['rtol']})</p>")
            out.append(_table(c["steps"], ["step", "reference", "target", "rel_diff", "within"]))
            b = t.get("bisection")
            if b:
                found = (f"aten::{b['op']} at {', '.join(b['sites']) or 'no recorded call site'}"
                         if b["status"] == "found" else f"{b['status']}: {b.get('why', '')}")
                out.append(f"<p class='bisection'>Bisection: {html.escape(found)}</p>")
                out.append(_table([{"run": i + 1, "ops on the host": len(r["host_ops"]), "agrees": r["agrees"],
                                    "command": f"HAL_FALLBACK_HOST=... {r['command']}"}
                                   for i, r in enumerate(b.get("runs", []))],
                                  ["run", "ops on the host", "agrees", "command"]))
    elif key == "throughput":
        rows = []
        ref = s.get("reference") or {}
        for name, t in s.get("targets", {}).items():
            tp = t.get("throughput") or {}
            rows.append({"target": name, "ratio": t.get("ratio"), "unit": t.get("unit"),
                         "gate": t.get("gate"), "within gate": t.get("within_gate"),
                         "p50 step s": (tp.get("step_time_s") or {}).get("p50"),
                         "peak memory bytes": tp.get("mem_peak_bytes"),
                         "exposed comm share": tp.get("comm_exposed_share"),
                         "achieved FLOP/s": tp.get("achieved_flops_per_s"), "MFU": t.get("mfu"),
                         "first slow step": tp.get("first_slow_step")})
        out.append(f"<p>reference p50 step time: {_fmt((ref.get('step_time_s') or {}).get('p50'))} s</p>")
        out.append(_table(rows, ["target", "ratio", "unit", "gate", "within gate", "p50 step s",
                                 "peak memory bytes", "exposed comm share", "achieved FLOP/s", "MFU",
                                 "first slow step"]))
        runs_mfu = [("reference", s.get("reference_mfu")), *s.get("targets", {}).items()]
        out.append("<ul class='mfu'>" + "".join(f"<li>MFU {html.escape(name)}: {html.escape(mfu_line(m))}</li>"
                                                for name, m in runs_mfu if m and "mfu" in m) + "</ul>")
    elif key == "stability" and s.get("rehearsals"):
        out.append(_stability_html(s, report))
    elif key == "inference" and isinstance(s.get("reference"), dict):  # the reference's generation failed
        out.append(f"<pre>{html.escape(s['reference'].get('output_tail', ''))}</pre>")
    elif key == "inference" and s.get("targets") is not None:
        ref_rows = s.get("reference") or []
        series = {f"reference ({report['reference']})": [r["tokens_per_s"] for r in ref_rows]}
        for name, t in s.get("targets", {}).items():
            series[name] = [r["tokens_per_s"] for r in t.get("rows", [])]
        out.append(_svg_lines(series, "output tokens/s per batch size ("
                              + ", ".join(str(r["batch"]) for r in ref_rows) + ")"))
        for name, t in s.get("targets", {}).items():
            out.append(f"<h3>{html.escape(name)}</h3><p>token agreement with the reference: "
                       f"{_fmt(t.get('agreement'))}</p>")
            out.append(_table(t.get("rows", []), ["batch", "ttft_s", "tpot_s", "tokens_per_s",
                                                  "reference_tokens_per_s", "ratio"]))
    if key == "inference" and s.get("int8"):
        out.append(_int8_html(s["int8"]))
    if key == "environment":
        out.append(f"<p>torch {html.escape(s.get('torch', ''))}, Python {html.escape(s.get('python', ''))}, "
                   f"hal {html.escape(s.get('hal', ''))}</p>")
        out.append("<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in s.get("not_checked", [])) + "</ul>")
    ev = s.get("evidence")
    if ev:
        out.append("<details><summary>commands</summary><pre>" + html.escape("\n".join(ev)) + "</pre></details>")
    out.append("</section>")
    return "".join(out)


def to_html(report: dict) -> str:
    """The report as one self-contained page."""
    gates = _table([{"gate": g["gate"], "holds": g["holds"], "detail": g["detail"]} for g in report["gates"]],
                   ["gate", "holds", "detail"])
    runs = _table([{"run": n, "target": r["target"], "exit": r["exit_code"], "wall s": r["wall_s"],
                    "command": r["command"]} for n, r in report["runs"].items()],
                  ["run", "target", "exit", "wall s", "command"])
    sections = "".join(_section_html(k, report["sections"][k], report) for k in TITLES if k in report["sections"])
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
             "table{border-collapse:collapse;margin:.5em 0;font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px}"
             ".verdict{font-size:13px;padding:1px 6px;border-radius:3px;background:#eee}"
             ".pass .verdict{background:#c8e6c9}.fail .verdict{background:#ffcdd2}"
             ".not_checked .verdict{background:#fff3c4}section{border-top:1px solid #ddd;margin-top:1em}")
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>hal accept: "
            f"{html.escape(report['script'])}</title><style>{style}</style></head><body>"
            f"<h1>hal accept: <span id='verdict'>{html.escape(report['verdict'])}</span></h1>"
            f"<p>{html.escape(report['script'])} {html.escape(' '.join(report['script_args']))}: reference "
            f"{html.escape(report['reference'])}, target(s) {html.escape(', '.join(report['targets']))}, "
            f"{report['steps']} steps, {report['created']}</p>{gates}{sections}<h2>Runs</h2>{runs}</body></html>")
