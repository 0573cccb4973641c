"""``hal bench <collective>``: nccl-tests-style bandwidth on any backend; ``hal bench --pairs``: links."""
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
  torchrun --nnodes 4 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:PORT \\
      -m hal bench all_reduce -b 1M -e 1G              the same table across 4 nodes

node links (--pairs, no collective): run on every node under torchrun; the nodes' leaders
(local rank 0) meet in rounds of disjoint pairs (N-1 rounds for N nodes) and time round trips
of --size bytes with send/recv; the other ranks wait.  It prints the node x node matrix (GB/s
one way = 2 x size / round-trip time), the links below --min-link-fraction of the median and the
nodes most of whose links are, re-pairs the slowest node alone with the fastest to confirm it,
and exits 1 when a link fails, is below that fraction, or below --min-link-bw:
  torchrun --nnodes 4 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint HOST:PORT \\
      -m hal bench --pairs                            16 MiB transfers, 1 warm-up + 3 timed
  ... -m hal bench --pairs --size 64M --min-link-bw 10 --json    fail below 10 GB/s too
  ... -m hal bench --pairs --ladder     and all_reduce over 2, 3, ... N nodes: where it falls off
With --pairs, --timeout is each transfer's deadline (default 30 s): a dead link is named, not
waited on for minutes; --warmup and --iters default to 1 and 3.

output: nccl-tests' columns and formulas (size, count, type, redop, root, then time/algbw/busbw/
#wrong out-of-place and in-place; busbw = algbw x 2(n-1)/n for all_reduce, x (n-1)/n for
all_gather, reduce_scatter, all_to_all, x 1 for broadcast).  torch runs all_reduce and broadcast
in place and the others out of place; the other group reads N/A.  Unlike nccl-tests, -n is the
number of local ranks; the iteration count is --iters.

exit status: 0 all values correct and every gate passed, 1 wrong values or a gate failed
(--pairs: a link failed or is below a bar), 2 usage error, 3 the run itself failed (message says why)
"""


def add_parser(sub):
    from hal.dist.bench import COLLECTIVES

    p = sub.add_parser("bench", help="collective bandwidth, nccl-tests style", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Measure a collective over torch.distributed on the selected backend, "
                                   "or (--pairs) the links between the nodes of a multi-node job.")
    p.add_argument("collective", choices=COLLECTIVES, nargs="?", default=None,
                   help="the collective to measure (none with --pairs)")
    p.add_argument("-n", "--nproc", type=int, default=None,
                   help="start N local ranks (default: run inside torchrun, or as one rank)")
    p.add_argument("-b", "--minbytes", default="32M", help="smallest size (default 32M; K/M/G are 1024-based)")
    p.add_argument("-e", "--maxbytes", default="32M", help="largest size (default 32M)")
    p.add_argument("-f", "--stepfactor", type=float, default=2.0, help="multiply the size by this (default 2)")
    p.add_argument("-i", "--stepbytes", default="0", help="add this many bytes instead of -f")
    p.add_argument("-w", "--warmup", type=int, default=None,
                   help="warm-up iterations per size (default 5; 1 with --pairs)")
    p.add_argument("--iters", type=int, default=None, help="timed iterations per size (default 20; 3 with --pairs)")
    p.add_argument("-d", "--datatype", default="float", help="float, half, bfloat16, double, int32, int64")
    p.add_argument("-o", "--op", default="sum", help="reduction: sum, prod, max, min, avg (default sum)")
    p.add_argument("-r", "--root", type=int, default=0, help="broadcast root (default 0)")
    p.add_argument("-c", "--check", type=int, default=1, choices=(0, 1), help="check results (default 1)")
    p.add_argument("--timeout", type=float, default=None,
                   help="hard limit in seconds for the whole run (default 300); with --pairs each "
                        "transfer's deadline (default 30)")
    p.add_argument("--min-busbw", type=float, default=None, metavar="GB/s",
                   help="fail when the average bus bandwidth is below this")
    p.add_argument("--baseline", default=None, metavar="FILE",
                   help="fail when the average bus bandwidth is more than --tolerance below this saved report")
    p.add_argument("--tolerance", type=float, default=0.10, help="allowed drop below --baseline (default 0.10)")
    p.add_argument("--save", default=None, metavar="FILE", help="write the JSON report here (atomically)")
    p.add_argument("--pairs", action="store_true",
                   help="measure the node x node link matrix instead of a collective (see below)")
    p.add_argument("--ladder", action="store_true",
                   help="with --pairs: also all_reduce over the first 2, 3, ... N nodes, naming where "
                        "bus bandwidth falls below --min-link-fraction of the best earlier step")
    p.add_argument("--size", default="16M", help="with --pairs: bytes per transfer (default 16M)")
    p.add_argument("--min-link-bw", type=float, default=None, metavar="GB/s",
                   help="with --pairs: fail when a link is below this")
    p.add_argument("--min-link-fraction", type=float, default=0.5, metavar="F",
                   help="with --pairs: fail when a link is below F x the median link (default 0.5)")
    p.add_argument("--json", action="store_true",
                   help="print JSON (schema hal.bench/1; hal.bench.pairs/1 with --pairs)")
    p.set_defaults(run=run)


def _print(report: dict, text: str, args) -> int:
    from hal.util.io import atomic_write

    if args.save:
        atomic_write(args.save, json.dumps(report, indent=2))
    if args.json:
        print_json(report)
    else:
        color = use_color()
        print(text.replace(": PASS", ": " + paint("PASS", "green", color)).replace(
            ": FAIL", ": " + paint("FAIL", "red", color)))
    return 0 if report["passed"] else 1


def _run_pairs(args) -> int:
    from hal.dist.bench import PAIRS_USAGE, PairsConfig, format_pairs, parse_size, run_pairs
    from hal.doctor.cluster_context import from_launcher_env

    try:
        if args.ladder and not args.pairs:
            raise ValueError("--ladder goes with --pairs: hal bench --pairs --ladder")
        if args.collective:
            raise ValueError(f"--pairs measures node links with send/recv, not {args.collective}; "
                             f"drop the collective, or run it separately")
        cfg = PairsConfig(size=parse_size(args.size), min_link_fraction=args.min_link_fraction,
                          min_link_bw=args.min_link_bw,
                          warmup=1 if args.warmup is None else args.warmup,
                          iters=3 if args.iters is None else args.iters,
                          timeout=30.0 if args.timeout is None else args.timeout,
                          ladder=args.ladder).validate()
        if args.nproc is not None:
            raise ValueError(f"--pairs measures the links between nodes, -n starts ranks on this one; "
                             f"drop -n and {PAIRS_USAGE}")
        report = run_pairs(cfg, from_launcher_env)
    except ValueError as exc:
        print(f"hal bench: error: {exc}", file=sys.stderr)
        return 2
    if report is None:  # not global rank 0: rank 0 prints
        return 0
    return _print(report, format_pairs(report), args)


def run(args) -> int:
    from hal.dist.bench import BenchConfig, format_text, parse_size
    from hal.dist.bench import run as bench_run

    if args.pairs or args.ladder:
        return _run_pairs(args)
    try:
        if args.collective is None:
            raise ValueError("name a collective (all_reduce, all_gather, reduce_scatter, broadcast, "
                             "all_to_all), or measure node links with --pairs")
        cfg = BenchConfig(collective=args.collective, min_bytes=parse_size(args.minbytes),
                          max_bytes=parse_size(args.maxbytes), step_factor=args.stepfactor,
                          step_bytes=parse_size(args.stepbytes) if args.stepbytes != "0" else 0,
                          warmup=5 if args.warmup is None else args.warmup,
                          iters=20 if args.iters is None else args.iters, dtype=args.datatype, op=args.op,
                          root=args.root, check=bool(args.check), nproc=args.nproc,
                          timeout=300.0 if args.timeout is None else args.timeout).validate()
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
    return _print(report, format_text(report), args)
