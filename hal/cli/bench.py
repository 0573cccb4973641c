"""``hal bench <collective>``: nccl-tests-style bandwidth on any backend."""
from __future__ import annotations

import argparse
import json
import sys

from hal.util.term import paint, print_json, use_color

EPILOG = """\
examples:
  hal bench all_reduce -n 2 -b 1K -e 64M -f 4      2 local ranks, 1 KiB..64 MiB, x4 steps
  torchrun --nproc-per-node 8 -m hal bench all_gather -b 8 -e 1G -f 2
  hal bench all_reduce -n 2 --json --save base.json  keep a baseline
  hal bench all_reduce -n 2 --baseline base.json     fail when >10% below it
  hal bench broadcast -n 4 --min-busbw 10            fail below 10 GB/s average busbw

output: nccl-tests' columns and formulas (size, count, type, redop, root, then time/algbw/busbw/
#wrong out-of-place and in-place; busbw = algbw x 2(n-1)/n for all_reduce, x (n-1)/n for
all_gather, reduce_scatter, all_to_all, x 1 for broadcast).  torch runs all_reduce and broadcast
in place and the others out of place; the other group reads N/A.  Unlike nccl-tests, -n is the
number of local ranks; the iteration count is --iters.

exit status: 0 all values correct and every gate passed, 1 wrong values or a gate failed,
2 usage error, 3 the run itself failed (message says why)
"""


def add_parser(sub):
    from hal.dist.bench import COLLECTIVES

    p = sub.add_parser("bench", help="collective bandwidth, nccl-tests style", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Measure a collective over torch.distributed on the selected backend.")
    p.add_argument("collective", choices=COLLECTIVES, help="the collective to measure")
    p.add_argument("-n", "--nproc", type=int, default=None,
                   help="start N local ranks (default: run inside torchrun, or as one rank)")
    p.add_argument("-b", "--minbytes", default="32M", help="smallest size (default 32M; K/M/G are 1024-based)")
    p.add_argument("-e", "--maxbytes", default="32M", help="largest size (default 32M)")
    p.add_argument("-f", "--stepfactor", type=float, default=2.0, help="multiply the size by this (default 2)")
    p.add_argument("-i", "--stepbytes", default="0", help="add this many bytes instead of -f")
    p.add_argument("-w", "--warmup", type=int, default=5, help="warm-up iterations per size (default 5)")
    p.add_argument("--iters", type=int, default=20, help="timed iterations per size (default 20)")
    p.add_argument("-d", "--datatype", default="float", help="float, half, bfloat16, double, int32, int64")
    p.add_argument("-o", "--op", default="sum", help="reduction: sum, prod, max, min, avg (default sum)")
    p.add_argument("-r", "--root", type=int, default=0, help="broadcast root (default 0)")
    p.add_argument("-c", "--check", type=int, default=1, choices=(0, 1), help="check results (default 1)")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="hard limit in seconds for the whole run (default 300)")
    p.add_argument("--min-busbw", type=float, default=None, metavar="GB/s",
                   help="fail when the average bus bandwidth is below this")
    p.add_argument("--baseline", default=None, metavar="FILE",
                   help="fail when the average bus bandwidth is more than --tolerance below this saved report")
    p.add_argument("--tolerance", type=float, default=0.10, help="allowed drop below --baseline (default 0.10)")
    p.add_argument("--save", default=None, metavar="FILE", help="write the JSON report here (atomically)")
    p.add_argument("--json", action="store_true", help="print JSON (schema hal.bench/1)")
    p.set_defaults(run=run)


def run(args) -> int:
    from hal.util.io import atomic_write
    from hal.dist.bench import BenchConfig, format_text, parse_size
    from hal.dist.bench import run as bench_run

    try:
        cfg = BenchConfig(collective=args.collective, min_bytes=parse_size(args.minbytes),
                          max_bytes=parse_size(args.maxbytes), step_factor=args.stepfactor,
                          step_bytes=parse_size(args.stepbytes) if args.stepbytes != "0" else 0,
                          warmup=args.warmup, iters=args.iters, dtype=args.datatype, op=args.op,
                          root=args.root, check=bool(args.check), nproc=args.nproc,
                          timeout=args.timeout).validate()
        baseline = None
        if args.baseline:
            try:
                with open(args.baseline, encoding="utf-8") as f:
                    baseline = json.load(f)
            except (OSError, ValueError) as exc:
                raise ValueError(f"--baseline {args.baseline}: cannot read a JSON report ({exc}); "
                                 f"save one with --save") from None
    except ValueError as exc:
        print(f"hal bench: error: {exc}", file=sys.stderr)
        return 2
    try:
        report = bench_run(cfg, min_busbw=args.min_busbw, baseline=baseline, tolerance=args.tolerance)
    except ValueError as exc:
        print(f"hal bench: error: {exc}", file=sys.stderr)
        return 2
    if report is None:  # a non-zero rank under torchrun: rank 0 prints
        return 0
    if args.save:
        atomic_write(args.save, json.dumps(report, indent=2))
    if args.json:
        print_json(report)
    else:
        text = format_text(report)
        color = use_color()
        text = text.replace(": PASS", ": " + paint("PASS", "green", color)).replace(
            ": FAIL", ": " + paint("FAIL", "red", color))
        print(text)
    return 0 if report["passed"] else 1
