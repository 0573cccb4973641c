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

exit status: 0 OK, 1 WARN, 2 FAIL (3: hal itself could not run); a patrol exits with its
worst round's
test hooks: HAL_DOCTOR_TEST_HANG=check[,check] makes a check hang; HAL_DOCTOR_TEST_ABORT=check
makes it abort
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


def run(args) -> int:
    from hal import doctor

    from hal.doctor import ORDER

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
