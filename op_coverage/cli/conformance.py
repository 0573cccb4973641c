"""``op_coverage conformance``: every decomposition checked against ONNX's backend node tests."""
from __future__ import annotations

import argparse
import json

from op_coverage.plan import node_suite


#: the help text is the node suite's own description
DESCRIPTION = node_suite.__doc__.split("\n\n")[1].replace("\n", " ")


def add_parser(sub) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    c = sub.add_parser("conformance", formatter_class=fmt, help="check decompositions against ONNX's node tests",
                       description=DESCRIPTION,
                       epilog="examples:\n  op_coverage conformance\n  op_coverage conformance --op Gelu --op Erf\n"
                              "  op_coverage conformance --json > conformance.json\n\n"
                              "exit codes: 0 no failures, 1 some case failed\n")
    c.add_argument("--op", action="append", default=[], help="only this operator (repeatable)")
    c.add_argument("--base", default="ort-cpu", help="profile the op is removed from (default ort-cpu)")
    c.add_argument("--json", action="store_true", help="per-op counts and every non-passing case as JSON")


def run(a) -> int:
    results = node_suite.run(a.op, a.base)
    per = node_suite.summarize(results)
    bad = [r for r in results if r.status != "passed"]
    if a.json:
        print(json.dumps({"format": "op_coverage.conformance/1", "per_op": per,
                          "cases": [r.__dict__ for r in bad]}, indent=2))
    else:
        print(f"{'operator':28} passed failed declined")
        for op, c in per.items():
            print(f"{op:28} {c['passed']:6d} {c['failed']:6d} {c['declined']:8d}")
        tot = {k: sum(c[k] for c in per.values()) for k in ("passed", "failed", "declined")}
        print(f"{'total':28} {tot['passed']:6d} {tot['failed']:6d} {tot['declined']:8d}")
        for r in bad:
            print(f"  {r.status:8} {r.case}: {r.reason}")
    return 1 if any(r.status == "failed" for r in results) else 0
