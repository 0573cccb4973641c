"""``op_coverage targets``: every ONNX and torch target profile, its provenance and caveats."""
from __future__ import annotations

import argparse
import json
import sys
import textwrap


def add_parser(sub) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    t = sub.add_parser("targets", formatter_class=fmt, help="list ONNX and torch target profiles and their provenance",
                       description="Every target profile, ONNX (models) and torch (training scripts), with its kind.",
                       epilog="examples:\n  op_coverage targets\n  op_coverage targets --kind torch\n"
                              "  op_coverage targets --json\n  op_coverage targets --details\n"
                              "  op_coverage targets --profile my_npu.json   # ONNX or torch profile, by its schema\n")
    t.add_argument("--json", action="store_true", help="machine-readable list (format op_coverage.targets/2)")
    t.add_argument("--kind", choices=("onnx", "torch"), action="append", default=[],
                   help="only targets of this kind (repeatable; default: both)")
    t.add_argument("--details", action="store_true", help="also each target's source and what is uncertain")
    t.add_argument("--profile", action="append", default=[], metavar="FILE",
                   help="extra profile JSON (ONNX: profile.schema.json; torch: torch_profile.schema.json)")
    t.add_argument("--no-plugins", action="store_true", help="ignore profiles from hal backend plugins")


def run(a) -> int:
    from op_coverage import list_targets

    problems: list = []
    rows = list_targets(a.profile, kinds=tuple(a.kind) or ("onnx", "torch"), use_plugins=not a.no_plugins,
                        problems=problems)
    for prob in problems:
        print(f"op_coverage: warning: {prob}", file=sys.stderr)
    if a.json:
        print(json.dumps({"format": "op_coverage.targets/2", "targets": rows}, indent=2, ensure_ascii=False))
        return 0
    from hal.util.term import table
    body = []
    for r in rows:
        body.append((r["name"], r["kind"], r["entries"], ", ".join(r["aliases"]), r["title"]))
    if not a.details:
        print(table(body, ("name", "kind", "ops", "aliases", "title"), [14, 5, 5, 22, 60]))
    if a.details:
        for r in rows:
            alias = f" (also: {', '.join(r['aliases'])})" if r["aliases"] else ""
            print(f"{r['name']} [{r['kind']}]{alias}")
            print(textwrap.fill(f"{r['title']} [{r['profile_kind']}, {r['entries']} entries]", 80,
                                initial_indent="  ", subsequent_indent="  "))
            print(textwrap.fill(f"source: {r['provenance']}", 80, initial_indent="  ", subsequent_indent="    "))
            if r["fallback_profile"]:
                print(f"  ops it lacks run as host-fallback when {r['fallback_profile']} has them")
            if r.get("expands_functions"):
                print("  an op with no kernel still runs when onnx defines a function body for it: the runtime "
                      "inlines it")
            if r["kind"] == "torch":
                print(f"  torch {r['torch_version']}, device type {r['device_type']}; a missing op: "
                      f"{r['unimplemented']}" + (" (PARTIAL list)" if r["partial"] else ""))
            for u in r["uncertain"]:
                print(textwrap.fill(f"uncertain: {u}", 80, initial_indent="  ", subsequent_indent="    "))
    else:
        print("\n(-t takes a name or an alias; 'op_coverage targets --details' shows sources and caveats)")
    return 0
