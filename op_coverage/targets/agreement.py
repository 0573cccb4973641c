"""Does a table profile say what onnxruntime itself does?  ``ort-cpu`` against ``ort-live``.

Every node of every ONNX backend node test case (``onnx.backend.test.case.node``) is judged by
the table profile and by the live probe (one-node sessions of the installed onnxruntime).  The
disagreements that remain are listed, each with its reason, in
``data/ort_live_disagreements.json``; the test suite keeps that list exact.

Run: ``python -m op_coverage.targets.agreement [--table ort-cpu] [--json]``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def disagreements(table: str = "ort-cpu") -> list[dict]:
    """``[{op, version, dtypes, table, live, cases, table_says, live_says}]``, one row per distinct signature."""
    from op_coverage.onnx.node_tests import node_cases
    from op_coverage.onnx.inventory import build_inventory
    from op_coverage.onnx.load import LoadedModel
    from op_coverage.targets.catalog import load_targets
    ts = load_targets(use_plugins=False)
    tab, live = ts.get(table), ts.get("ort-live")
    rows: dict = {}
    for c in node_cases():
        loaded = LoadedModel(path=Path(c.name), model=c.model, file_bytes=0, embedded_weight_bytes=0)
        inv = build_inventory(loaded)
        live.prepare(c.model, inv.nodes)
        for n in inv.nodes:
            a, b = tab.judge(n), live.judge(n)
            if a.status == b.status:
                continue
            key = (n.op_type, n.version, tuple(n.known_dtypes), a.status, b.status)
            r = rows.setdefault(key, {"op": n.op_type, "version": n.version, "dtypes": list(n.known_dtypes),
                                      "table": a.status, "live": b.status, "cases": [],
                                      "table_says": a.reason or a.provenance, "live_says": b.reason})
            r["cases"].append(c.name)
    return list(rows.values())


def known() -> list[dict]:
    """The listed disagreements with their reasons (``data/ort_live_disagreements.json``)."""
    from op_coverage.datafiles import read_json
    return read_json("ort_live_disagreements.json")["disagreements"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m op_coverage.targets.agreement", description=__doc__.splitlines()[0])
    ap.add_argument("--table", default="ort-cpu", help="table profile to check (default ort-cpu)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    found = disagreements(a.table)
    reasons = {(k["op"], k["version"], tuple(k["dtypes"]), k["table"], k["live"]): k["reason"] for k in known()}
    for r in found:
        r["reason"] = reasons.get((r["op"], r["version"], tuple(r["dtypes"]), r["table"], r["live"]), "not listed")
    if a.json:
        print(json.dumps(found, indent=2))
    else:
        for r in found:
            print(f"{r['op']}-{r['version']} {','.join(r['dtypes'])}: {a.table} {r['table']}, onnxruntime {r['live']} "
                  f"({len(r['cases'])} case(s), e.g. {r['cases'][0]}); {r['reason']}")
        print(f"{len(found)} disagreement(s)")
    return 1 if any(r["reason"] == "not listed" for r in found) else 0


if __name__ == "__main__":
    sys.exit(main())
