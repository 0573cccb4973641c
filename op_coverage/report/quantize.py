"""The ``op_coverage quantize`` report as a table (terminal) or Markdown; JSON is ``QuantizeReport.to_dict()``."""
from __future__ import annotations

import json

QUANTIZE_FORMATS = ("table", "json", "md")


def _mb(n) -> str:
    return f"{n / 1e6:.2f} MB" if n is not None else "?"


def _num(x, fmt=".3g") -> str:
    return "-" if x is None else format(x, fmt)


def _lines(doc: dict) -> list[tuple[str, str]]:
    """(heading, text) pairs shared by the table and Markdown forms."""
    q = doc["quantization"]
    out = []
    if q["format"]:
        v = q["variant"] or {}
        out.append(("format", f"{q['format']}: {q['title']}; activations {v.get('activation')}, weights "
                              f"{v.get('weight')}{', per channel' if q['per_channel'] else ''}"))
        done = ", ".join(f"{k} x{n}" for k, n in sorted(q["quantized_nodes"].items())) or "none"
        out.append(("quantized", done))
    for k in q["kept_float_nodes"]:
        out.append(("kept float", f"{k['node']} ({k['op_type']}): {k['reason']}"))
    if q["format"] is None:
        for t in q["tried"]:
            out.append(("tried", f"{t['format']} {t['variant'] or ''}: {t['outcome']}"))
    cal = q.get("calibration")
    if cal:
        out.append(("calibration", f"{cal['samples']} samples from {cal['source']}"))
    if q.get("pre_process") not in (None, "ok"):
        out.append(("pre-process", q["pre_process"]))
    s = doc["size"]
    if s:
        out.append(("size", f"{_mb(s['float_bytes'])} -> {_mb(s['quantized_bytes'])} ({s['ratio']:.3f}x)"))
    lat = doc["latency"]
    if lat:
        out.append(("latency", f"{lat['ratio']:.3f}x (min {lat['min']:.3f}, max {lat['max']:.3f}; "
                               f"{lat['float_ms']:.3g} ms -> {lat['quantized_ms']:.3g} ms; onnxruntime CPU, "
                               f"{lat['threads']} thread, median of {lat['repeats']} x {lat['runs']} interleaved runs)"))
    acc = doc["accuracy"]
    if acc:
        shapes = ", ".join(f"{k}{v}" for k, v in acc["shapes"].items())
        out.append(("inputs", f"{acc['inputs']} ({shapes})"))
        for o in acc["outputs"]:
            top1 = f", top-1 agreement {o['top1']:.1%}" if o["top1"] is not None else ""
            out.append(("accuracy", f"{o['name']}{o['shape']}: max abs {_num(o['max_abs'])}, max rel "
                                    f"{_num(o['max_rel'])}, cosine {_num(o['cosine'], '.6f')}{top1}"))
        for f in acc["gates"]["failed"]:
            out.append(("GATE FAILED", f))
    b = doc.get("baseline")
    if b and b.get("error"):
        out.append(("onnxruntime", f"{b['call']}: failed ({b['error']})"))
    elif b:
        bl, cos = b.get("latency"), [o["cosine"] for o in b["accuracy"] if o["cosine"] is not None]
        out.append(("onnxruntime", f"{b['call']}: {_mb(b['bytes'])} ({b['ratio']:.3f}x); "
                                   + ("the written file is that result" if b.get("same_file") else
                                      f"this result is {b['size_vs_baseline']:.3f}x its size")
                                   + (f"; latency {bl['ratio']:.3f}x float (min {bl['min']:.3f}, max {bl['max']:.3f})"
                                      if bl else "")
                                   + (f"; cosine {min(cos):.6f}" if cos else "")))
        here = b.get("float_here") or []
        if here:
            out.append(("float here", f"{len(here)} node(s) onnxruntime's default call quantizes stay float here: "
                                      + ", ".join(f"{k['node']} ({k['op_type']})" for k in here[:10])
                                      + (" ..." if len(here) > 10 else "")))
    rs = doc["rescan"]
    if rs:
        bad = ", ".join(f"{k} x{v}" for k, v in rs["not_native"].items())
        out.append(("rescan", f"{doc['target']}: {rs['nodes']} nodes, {rs['coverage_by_node']:.1f}% native"
                              + (f"; not native: {bad}" if bad else "")))
    for n in doc["notes"]:
        out.append(("note", n))
    if doc["error"]:
        out.append(("error", doc["error"]["message"]))
    elif doc["written"]:
        out.append(("wrote", doc["output"] + (f" (+ {doc['external_data']} beside it)" if doc["external_data"] else "")))
    return out


def render_quantize(doc: dict, fmt: str) -> str:
    """Render a ``op_coverage.quantize/1`` document as ``table``, ``json`` or ``md``."""
    if fmt == "json":
        return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    rows = _lines(doc)
    head = f"INT8 ({doc['mode']}) of {doc['source']} for {doc['target']}"
    if fmt == "md":
        out = [f"# {head}", "", "| | |", "|---|---|"]
        out += [f"| {k} | {v.replace('|', '/')} |" for k, v in rows]
        return "\n".join(out) + "\n"
    if fmt != "table":
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(QUANTIZE_FORMATS)}")
    width = max((len(k) for k, _ in rows), default=0)
    return "\n".join([head] + [f"  {k:<{width}}  {v}" for k, v in rows]) + "\n"
