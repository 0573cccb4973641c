"""``hal conformance``: the backend contract as a report a vendor can publish."""
from __future__ import annotations

import argparse
import json
import sys

from hal.util.io import atomic_write
from hal.util.term import paint, print_json, progress, table, use_color

EPILOG = """\
examples:
  hal conformance --backend cpu                 every check on the CPU backend
  hal conformance --backend emu                 on the emulated accelerator
  hal conformance --backend ascend --out ascend.json --markdown ascend.md
  hal conformance --backend mychip --skip collectives
  hal conformance --backend mychip --only ccl   every c10d op a CCL must serve, against gloo
  hal conformance --backend mychip --only ccl --ccl-ops split_group,device_mesh
  HAL_PLUGINS=mychip_hal hal conformance --backend mychip    an uninstalled plugin module
  hal conformance --list                        the checks and the ccl check's ops, in order

Exit code: 0 all checks pass (skips state their reason), 1 a check fails, 3 the backend
cannot be loaded here.
"""


def add_parser(sub):
    p = sub.add_parser("conformance", help="the backend contract, as a publishable report",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", help="backend name or device type (default: the selected one)")
    p.add_argument("--only", help="comma-separated check ids to run")
    p.add_argument("--skip", help="comma-separated check ids to leave out")
    p.add_argument("--ccl-ops", metavar="IDS", help="comma-separated op ids the ccl check runs (default: all)")
    p.add_argument("--out", metavar="PATH", help="write the JSON report (schema hal.conformance/1)")
    p.add_argument("--markdown", metavar="PATH", help="write the report as Markdown")
    p.add_argument("--json", action="store_true", help="print the JSON report")
    p.add_argument("--list", action="store_true", help="list the checks and exit")
    p.set_defaults(run=run)


def _ids(text):
    return [s.strip() for s in text.split(",") if s.strip()] if text else []


def run(args) -> int:
    from hal.conformance import CCL_OPS, CHECKS, run_conformance, to_markdown

    if args.list:
        print(table([(cid, title) for cid, title, _ in CHECKS], ("id", "check")))
        print("\nops of the ccl check (each compared with gloo on the same data):")
        print(table([(oid, used_by) for oid, used_by, _ in CCL_OPS], ("op", "used by")))
        return 0
    name = args.backend
    if not name:
        from hal.plugin.registry import get_registry
        name = get_registry().selected().name
    bar = None if args.json else (lambda it: progress(it, f"conformance {name}", "check"))
    try:
        report = run_conformance(name, only=_ids(args.only) or None, skip=_ids(args.skip), progress=bar,
                                 ccl_ops=_ids(args.ccl_ops))
    except ValueError as exc:
        print(f"hal conformance: error: {exc}", file=sys.stderr)
        return 2
    if args.out:
        atomic_write(args.out, json.dumps(report, indent=2) + "\n")
    if args.markdown:
        atomic_write(args.markdown, to_markdown(report))
    if args.json:
        print_json(report)
        return 1 if report["verdict"] == "fail" else 0
    color = use_color()
    colors = {"pass": "green", "fail": "red", "skip": "yellow"}
    rows = [(r["id"], paint(r["status"].upper(), colors[r["status"]], color), r["reason"])
            for r in report["checks"]]
    print(table(rows, ("check", "status", "detail"), [12, 6 + (9 if color else 0), 100]))
    op_colors = {"ok": "green", "failed": "red", "skipped": "yellow"}
    for r in report["checks"]:
        if r.get("ops"):
            print(f"\n{r['id']}: {r['title']}")
            print(table([(o["id"], paint(o["status"].upper(), op_colors[o["status"]], color),
                          o["error"] or o.get("note", "")) for o in r["ops"]],
                        ("op", "status", "detail"), [32, 7 + (9 if color else 0), 100]))
    s = report["summary"]
    verdict = paint(report["verdict"].upper(), "green" if report["verdict"] == "pass" else "red", color)
    print(f"\n{report['backend']}: {verdict}  {s['pass']} pass, {s['fail']} fail, {s['skip']} skip "
          f"in {report['seconds']} s")
    return 1 if report["verdict"] == "fail" else 0
