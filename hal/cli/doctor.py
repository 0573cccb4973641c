"""``hal doctor``: environment checklist with OK / WARN / FAIL."""
from __future__ import annotations

import argparse
import sys

from hal.cli._term import paint, print_json, use_color

EPILOG = """\
examples:
  hal doctor                              every check
  hal doctor --data /datasets/coco /ckpt  also check that these paths are readable
  hal doctor --check versions --check transport
  hal doctor --json                       JSON, schema hal.doctor/1
  hal doctor --timeout 20                 hard limit per check (default: 30-120 s per check)
  hal doctor --timeout tiny_network=120   a longer limit for one check

checks: backends (found and why), devices (count, model), versions (driver / runtime / torch /
vendor extension against hal/data/compat.json), data (--data paths readable), tiny_network
(forward+backward on the device vs the CPU), all_reduce_2/4/8 (local ranks; on the CPU also
with fewer cores than ranks, oversubscribed: values judged, timings not; stragglers slower than
2x the median), transport (RDMA or TCP, with
the evidence).  Each check runs in its own process and is killed at its time limit, so a hung
driver call cannot hang the doctor.

exit status: 0 OK, 1 WARN, 2 FAIL (3: hal itself could not run)
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
    p.add_argument("--json", action="store_true", help="print JSON (schema hal.doctor/1)")
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


def run(args) -> int:
    from hal import doctor

    from hal.doctor import ORDER

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
        report = doctor.run(checks=args.check, data=args.data, timeout=timeout, jobs=args.jobs,
                            on_result=progress)
    except ValueError as exc:
        print(f"hal doctor: error: {exc}", file=sys.stderr)
        return 2
    finally:
        if bar is not None:
            bar.close()
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
