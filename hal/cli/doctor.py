"""``hal doctor``: environment checklist with OK / WARN / FAIL."""
from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time

from hal.util.term import paint, print_json, use_color

EPILOG = """\
examples:
  hal doctor                              every check
  hal doctor --data /datasets/coco /ckpt  also check that these paths are readable
  hal doctor --check versions --check transport
  hal doctor --json                       JSON, schema hal.doctor/1
  hal doctor --timeout 20                 hard limit per check (default: 30-120 s per check)
  hal doctor --timeout tiny_network=120   a longer limit for one check
  hal doctor --every 300 --out health.jsonl
                                          health patrol beside a running job: the quick checks
                                          every 5 minutes, one JSON line per round, until Ctrl-C
  hal doctor --every 60 --count 3 --check devices --json
                                          three rounds of one check, each printed as a JSON line
  hal doctor --out health.jsonl           one round of every check, appended to the file
  hal metrics summary run.jsonl --health health.jsonl
                                          throughput drops next to the patrol rounds near them

checks: backends (found and why), devices (count, model), versions (driver / runtime / torch /
vendor extension against each backend's version matrices), data (--data paths readable), tiny_network
(forward+backward on the device vs the CPU), all_reduce_2/4/8 (local ranks; on the CPU also
with fewer cores than ranks, oversubscribed: values judged, timings not; stragglers slower than
2x the median), transport (RDMA or TCP, with
the evidence).  Each check runs in its own process and is killed at its time limit, so a hung
driver call cannot hang the doctor.

patrol: --every runs devices, tiny_network, all_reduce_2, transport (and data with --data) unless
--check says otherwise; records follow hal/data/doctor-patrol.schema.json (hal.doctor.patrol/1).
SIGINT / SIGTERM stop it between rounds, or kill the round in progress, which is not recorded.

across nodes (every process of a multi-node torchrun takes part; rank 0 prints the report, the
others one line each):
  torchrun --nnodes 4 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint host-a:29400 -m hal doctor
                                          on each node; add --json for schema hal.doctor.cluster/1
  hal doctor --nnodes 4 --rdzv-endpoint host-a:29400
                                          the same through torchrun (run it on each node);
                                          --nproc-per-node P (default 1)
  hal doctor --nnodes 2 --rdzv-endpoint host-a:29400 --port 29500 --port 6000 --timeout 10
                                          also test the job's own ports; name a node that does
                                          not answer within 10 s
cluster checks, in this order: software (torch, hal, backend, vendor stack, driver, device count
per node, after each node's backends / devices / versions / transport checks), clocks (offset
from rank 0 by NTP's method over store round trips: WARN > 100 ms, FAIL > 1 s), reachability
(every node connects to every other, before any process group exists, on an ephemeral port and
each --port, on the address its collective would use, and to the rendezvous store: 2.5 s per
try), transport (RDMA or TCP and the collective's interface per node; WARN when they differ),
process_group, links (node x node bandwidth), scale_ladder (all-reduce at 2, 4, ... nodes).
Every wait on another node ends after --timeout (default 20 s) with that node named.

exit status: 0 OK, 1 WARN, 2 FAIL (3: hal itself could not run); a patrol exits with its
worst round's; across nodes every rank exits with the report's (torchrun itself then exits 1
when it is not 0; hal doctor --nnodes exits with the report's)
test hooks: HAL_DOCTOR_TEST_HANG=check[,check] makes a check hang; HAL_DOCTOR_TEST_ABORT=check
makes it abort; across nodes HAL_DOCTOR_TEST_VERSIONS='{"torch": "2.12.0"}' replaces what this
node reports, HAL_DOCTOR_TEST_CLOCK_OFFSET_S=1.5 shifts its clock, HAL_DOCTOR_TEST_CLOSED_PORTS=
29500[,ephemeral] keeps it from listening on those ports (as a firewall that rejects them)
"""
_COLORS = {"OK": "green", "WARN": "yellow", "FAIL": "red", "SKIP": "dim"}


def add_parser(sub):
    from hal.doctor import ORDER

    p = sub.add_parser("doctor", help="environment checklist (OK / WARN / FAIL)", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Check that this machine can train: devices, versions, data, a tiny "
                                   "network, collectives, network transport.")
    p.add_argument("--data", nargs="+", default=[], metavar="PATH", help="paths that must be readable")
    p.add_argument("--check", action="append", choices=ORDER, metavar="NAME",
                   help=f"run only this check (repeatable): {', '.join(ORDER)}")
    p.add_argument("--timeout", action="append", default=None, metavar="[NAME=]SECONDS",
                   help="hard limit per check; NAME=SECONDS for one check (repeatable)")
    p.add_argument("-j", "--jobs", type=int, default=2, help="checks run side by side (default 2)")
    p.add_argument("--json", action="store_true",
                   help="print JSON (schema hal.doctor/1; with --every one hal.doctor.patrol/1 line per round)")
    p.add_argument("--every", type=float, metavar="SECONDS",
                   help="health patrol: repeat the quick checks every SECONDS (start to start) until stopped")
    p.add_argument("--count", type=int, metavar="N", help="with --every: stop after N rounds")
    p.add_argument("--out", metavar="FILE.jsonl",
                   help="append one record per round (schema hal.doctor.patrol/1) to this file, fsynced")
    g = p.add_argument_group("across nodes (under a multi-node torchrun, or the shorthand --nnodes)")
    g.add_argument("--nnodes", type=int, metavar="N",
                   help="run the cluster doctor through torchrun on N nodes (run this on each node)")
    g.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="with --nnodes: torchrun's c10d rendezvous endpoint")
    g.add_argument("--nproc-per-node", type=int, default=1, metavar="P",
                   help="with --nnodes: processes per node (default 1)")
    g.add_argument("--port", type=int, action="append", default=None, metavar="PORT",
                   help="a port the job uses on every node, tested between every pair of nodes (repeatable)")
    p.set_defaults(run=run)


def _timeouts(values):
    """``["20"]`` → 20.0; ``["devices=3", "20"]`` → ``{"devices": 3.0, <every other>: 20.0}``."""
    from hal.doctor import ORDER

    default, per = None, {}
    for v in values:
        name, _, secs = v.rpartition("=")
        try:
            value = float(secs)
        except ValueError:
            raise ValueError(f"--timeout {v!r}: {secs!r} is not a number of seconds; write 20 or devices=20") from None
        if value <= 0:
            raise ValueError(f"--timeout {v!r}: the limit must be positive")
        if name:
            per[name] = value
        else:
            default = value
    if not per:
        return default
    if default is not None:
        per = {**{n: default for n in ORDER}, **per}
    return per


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _print_round(rec: dict, as_json: bool, color: bool) -> None:
    if as_json:
        print(json.dumps(rec, default=str), flush=True)
        return
    st = rec["status"]
    checks = ", ".join(f"{c['name']} {c['status']}" for c in rec["checks"])
    print(f"{_when(rec['time_unix'])}  round {rec['round']}  {paint(f'{st:<4}', _COLORS[st], color)}  "
          f"{rec['seconds']:.1f} s  {checks}")
    for c in rec["checks"]:
        if c["status"] in ("WARN", "FAIL"):
            print(f"    {paint(c['status'], _COLORS[c['status']], color)} {c['name']}: {c['summary']}")
    sys.stdout.flush()


def run_patrol(args) -> int:
    """``hal doctor --every SECONDS``: rounds until --count or SIGINT / SIGTERM."""
    from hal.doctor.patrol import PATROL_CHECKS, patrol

    stop = threading.Event()
    caught = []

    def on_signal(signum, frame):
        caught.append(signal.Signals(signum).name)
        stop.set()

    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    color = use_color()
    names = args.check or list(PATROL_CHECKS) + (["data"] if args.data else [])
    msg = (f"hal doctor: patrolling every {args.every:g} s ({', '.join(names)})"
           f"{' -> ' + args.out if args.out else ''}; Ctrl-C stops")
    print(msg, file=sys.stderr if args.json else sys.stdout, flush=True)
    try:
        res = patrol(args.every, count=args.count, out=args.out, checks=args.check, data=args.data,
                     timeout=_timeouts(args.timeout or []), jobs=args.jobs, stop=stop,
                     on_round=lambda rec: _print_round(rec, args.json, color))
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if caught:
        where = (f"during round {res['stopped_in_round']} (not recorded)" if res["stopped_in_round"]
                 else "between rounds")
        print(f"hal doctor: stopped by {caught[0]} {where}; {res['rounds']} round(s) recorded"
              f"{' in ' + args.out if args.out else ''}", file=sys.stderr, flush=True)
    return res["exit_code"]


def _cluster_timeout(values) -> float:
    from hal.doctor.cluster import DEFAULT_TIMEOUT_S

    t = _timeouts(values or [])
    if isinstance(t, dict):
        raise ValueError("across nodes --timeout takes one number of seconds (the limit of every wait on "
                         "another node), not NAME=SECONDS")
    return DEFAULT_TIMEOUT_S if t is None else t


def run_shorthand(args) -> int:
    """``hal doctor --nnodes N --rdzv-endpoint HOST:PORT``: the cluster doctor through torchrun."""
    import os
    import subprocess
    import tempfile

    from hal.doctor.cluster import ENV_EXIT_FILE, ENV_RDZV_ENDPOINT

    if args.every is not None or args.check or args.data or args.out:
        print("hal doctor: error: --nnodes runs the cluster checks; --every, --check, --data and --out are "
              "for one node (run 'hal doctor' there)", file=sys.stderr)
        return 2
    if not args.rdzv_endpoint:
        print("hal doctor: error: --nnodes N needs --rdzv-endpoint HOST:PORT (a host every node reaches, "
              "usually the first node, and a free port)", file=sys.stderr)
        return 2
    if args.nnodes < 1 or args.nproc_per_node < 1:
        print("hal doctor: error: --nnodes and --nproc-per-node must be at least 1", file=sys.stderr)
        return 2
    forward = (["--json"] if args.json else []) + sum((["--timeout", t] for t in args.timeout or []), []) + \
        sum((["--port", str(p)] for p in args.port or []), [])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(args.nnodes), "--nproc-per-node",
           str(args.nproc_per_node), "--rdzv-backend", "c10d", "--rdzv-endpoint", args.rdzv_endpoint,
           "-m", "hal", "doctor", *forward]
    with tempfile.TemporaryDirectory(prefix="hal-doctor-") as tmp:
        exit_file = os.path.join(tmp, "exit")
        env = {**os.environ, ENV_RDZV_ENDPOINT: args.rdzv_endpoint, ENV_EXIT_FILE: exit_file}
        rc = subprocess.call(cmd, env=env)
        if os.path.exists(exit_file):
            with open(exit_file) as f:
                return int(f.read().strip() or 2)
    print(f"hal doctor: torchrun exited with status {rc} before the cluster doctor reported; its "
          f"messages above name the cause (rendezvous at {args.rdzv_endpoint} not reached, or fewer "
          f"than {args.nnodes} nodes joined)", file=sys.stderr)
    return 2


def run_cluster(args) -> int:
    """``hal doctor`` as one process of a multi-node torchrun job."""
    import os

    from hal.doctor import cluster

    if args.every is not None or args.check or args.data or args.out:
        print("hal doctor: error: across nodes the doctor runs its cluster checks; --every, --check, --data "
              "and --out are for one node (run 'hal doctor' there)", file=sys.stderr)
        return 2
    try:
        report, final, ctx = cluster.run(ports=args.port or [], timeout=_cluster_timeout(args.timeout))
    except ValueError as exc:
        print(f"hal doctor: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # the store unreachable: hal.dist's error names it
        print(f"hal doctor: rank {os.environ.get('RANK')}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if report is not None:
        if args.json:
            print_json(report)
        else:
            color = use_color()
            print(cluster.format_text(report, lambda s, c: paint(s, c, color)), flush=True)
    else:
        print(cluster.rank_line(ctx, final), file=sys.stderr if args.json else sys.stdout, flush=True)
    exit_file = os.environ.get(cluster.ENV_EXIT_FILE)
    if exit_file and ctx.local_rank == 0:
        with open(exit_file, "w") as f:
            f.write(str(final["exit_code"]))
    return final["exit_code"]


def run(args) -> int:
    from hal import doctor

    from hal.doctor import ORDER
    from hal.doctor.cluster import is_multi_node

    if args.nnodes is not None:
        return run_shorthand(args)
    if is_multi_node():
        return run_cluster(args)
    if args.port:
        print("hal doctor: error: --port is for the doctor across nodes (under a multi-node torchrun, or "
              "with --nnodes N --rdzv-endpoint HOST:PORT)", file=sys.stderr)
        return 2
    if args.count is not None and args.every is None:
        print("hal doctor: error: --count N needs --every SECONDS (the interval between rounds)", file=sys.stderr)
        return 2
    if args.every is not None:
        if not args.every > 0:
            print(f"hal doctor: error: --every {args.every:g}: give a positive number of seconds", file=sys.stderr)
            return 2
        if args.count is not None and args.count < 1:
            print(f"hal doctor: error: --count {args.count}: give at least 1 round", file=sys.stderr)
            return 2
        try:
            return run_patrol(args)
        except ValueError as exc:
            print(f"hal doctor: error: {exc}", file=sys.stderr)
            return 2

    color = use_color()
    bar = None
    if not args.json and sys.stderr.isatty():  # a progress bar only for a person watching
        from tqdm import tqdm

        bar = tqdm(total=len(args.check or ORDER), desc="hal doctor", unit="check", leave=False)

    def progress(name, res):
        if bar is not None:
            bar.set_postfix_str(f"{name} {res['status']}")
            bar.update(1)

    try:
        timeout = _timeouts(args.timeout or [])
        started = time.time()
        report = doctor.run(checks=args.check, data=args.data, timeout=timeout, jobs=args.jobs,
                            on_result=progress)
    except ValueError as exc:
        print(f"hal doctor: error: {exc}", file=sys.stderr)
        return 2
    finally:
        if bar is not None:
            bar.close()
    if args.out:
        from hal.util.io import append_jsonl
        from hal.doctor.patrol import round_record

        append_jsonl(args.out, round_record(report, 1, started, time.time(), None))
    if args.json:
        print_json(report)
        return report["exit_code"]
    for r in report["checks"]:
        st = r["status"]
        print(f"{paint(f'{st:<4}', _COLORS[st], color)}  {r['name']:<13} {r['summary']}")
    overall = report["status"]
    print(f"\n{paint(overall, _COLORS[overall], color)}: {len(report['checks'])} checks in "
          f"{report['seconds']:.1f} s (exit {report['exit_code']})")
    return report["exit_code"]
