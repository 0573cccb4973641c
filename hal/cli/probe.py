"""``hal probe``: observed op support of the selected device, written as a profile file."""
from __future__ import annotations

import argparse
import json
import sys

from hal.util.io import atomic_write
from hal.util.term import paint, print_json, progress, table, use_color

EPILOG = """\
examples:
  hal probe                              every op of the built-in list on the selected device
  HAL_BACKEND=emu hal probe --ops gelu,softmax,lgamma
  hal probe --out profiles/ascend.json   write the profile (schema hal.op_profile/1)
  hal probe --json                       print it as JSON
  hal probe --list                       the ops it knows
  hal probe --trace ops.json --out npu.json   every op of a trace (op_coverage trace), inputs built
                                         from each op's schema; writes a torch profile
                                         (op_coverage.torch_profile/1, usable with op_coverage -t)

Status: native (ran and matched the CPU), fallback (matched, but the stack signalled a
CPU/host fallback), failing (raised, or differed from the CPU); with --trace also not_probed (no
inputs could be built from the op's schema: the reason is printed).  Exit code 1 when any op fails.
"""


def add_parser(sub):
    p = sub.add_parser("probe", help="observed op support of the selected device -> profile file",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", help="comma-separated op names (default: all known ops)")
    p.add_argument("--out", metavar="PATH", help="write the profile JSON here (atomically)")
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
    p.add_argument("--list", action="store_true", help="list the known ops and exit")
    p.add_argument("--trace", metavar="OPS_JSON",
                   help="probe every op of this trace (op_coverage.torch_trace/1) instead of the built-in list")
    p.add_argument("--name", help="profile name with --trace (default: <backend>-probe)")
    p.set_defaults(run=run)


def run(args) -> int:
    from hal.op_support.observe import CASES, probe_ops
    from hal.plugin.registry import selected_backend

    if args.list:
        print("\n".join(CASES))
        return 0
    if args.trace:
        return _run_trace(args)
    names = [n.strip() for n in args.ops.split(",") if n.strip()] if args.ops else None
    bar = None if args.json else (lambda it: progress(it, "hal probe", "op"))
    try:
        prof = probe_ops(selected_backend(), names, bar)
    except ValueError as exc:
        print(f"hal probe: error: {exc}", file=sys.stderr)
        return 2
    s = prof["summary"]
    _show(args, prof, prof["ops"], f"{prof['backend']} ({prof['device']}): {s['native']} native, "
                                   f"{s['fallback']} fallback, {s['failing']} failing")
    return 1 if s["failing"] else 0


_COLORS = {"native": "green", "fallback": "yellow", "failing": "red", "not_probed": "yellow"}


def _show(args, prof: dict, results: dict, line: str) -> None:
    """Write ``prof`` to --out, then print it as JSON, or the results as a table and ``line``."""
    if args.out:
        atomic_write(args.out, json.dumps(prof, indent=1) + "\n")
    if args.json:
        print_json(prof)
        return
    color = use_color()
    rows = [(name, paint(r["status"], _COLORS[r["status"]], color), r["detail"]) for name, r in results.items()]
    print(table(rows, ("op", "status", "detail"), [28, 10 + (9 if color else 0), 90]))
    print(f"\n{line}" + (f"; written to {args.out}" if args.out else ""))


def _run_trace(args) -> int:
    from hal.op_support.observe import load_trace, probe_trace
    from hal.plugin.registry import selected_backend

    if args.ops:
        print("hal probe: error: --ops and --trace exclude each other; give one of them", file=sys.stderr)
        return 2
    try:
        trace = load_trace(args.trace)
    except ValueError as exc:
        print(f"hal probe: error: {exc}", file=sys.stderr)
        return 2
    bar = None if args.json else (lambda it: progress(it, "hal probe", "op"))
    prof = probe_trace(selected_backend(), trace, bar, name=args.name, trace_path=args.trace)
    c = prof["counts"]
    _show(args, prof, prof["probe"], f"{prof['backend']} ({prof['source']['device']}): {len(prof['probe'])} ops of "
                                     f"{args.trace}: {c['native']} native, {c['fallback']} fallback, "
                                     f"{c['failing']} failing, {c['not_probed']} not probed")
    return 1 if c["failing"] else 0
