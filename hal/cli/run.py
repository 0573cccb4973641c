"""``hal run``: run an unmodified CUDA-written script on the selected backend."""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys

from hal._io import atomic_write
from hal.cli._term import paint, print_json, use_color

EPILOG = """\
examples:
  hal run train.py --epochs 1                  the script's own arguments follow its path
  HAL_BACKEND=emu hal run train.py             on the emulated accelerator
  hal run --nproc-per-node 2 train_ddp.py      DDP at 2 ranks through torchrun
  hal run --report run.json train.py           write the run report (schema hal.run/1)
  hal run --json train.py                      print the run report as JSON at the end

What is redirected: .cuda(), device="cuda" / torch.device("cuda"), torch.cuda.* device,
memory, RNG, stream and event calls, torch.autocast("cuda"), GradScaler("cuda"),
init_process_group("nccl"), DDP device_ids.  Every redirection is printed once; calls
that cannot be redirected are reported; numerics are never changed (no dtype downgrade).
"""


def add_parser(sub):
    p = sub.add_parser("run", help="run a CUDA-written script on the selected backend", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("script", help="path of the Python script")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    p.add_argument("--nproc-per-node", type=int, default=0, metavar="N",
                   help="launch N processes with torchrun (--standalone)")
    p.add_argument("--report", metavar="PATH", help="write the run report as JSON (rank 0 only)")
    p.add_argument("--json", action="store_true", help="print the run report as JSON after the script")
    p.add_argument("--quiet", action="store_true", help="do not print redirections as they happen")
    p.set_defaults(run=run)


def _launch(args) -> int:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={args.nproc_per_node}", "-m", "hal.transfer"]
    if args.report:
        cmd += ["--report", args.report]
    if args.quiet:
        cmd.append("--quiet")
    cmd += [args.script, *args.args]
    return subprocess.call(cmd)


def run(args) -> int:
    if args.nproc_per_node:
        return _launch(args)
    if args.quiet:
        logging.getLogger("hal.transfer").setLevel(logging.ERROR)
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("hal run: %(message)s"))
        log = logging.getLogger("hal.transfer")
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    from hal.transfer import run_script

    report = run_script(args.script, args.args)
    if args.report and report["rank"] == 0:
        atomic_write(args.report, json.dumps(report, indent=2, default=str) + "\n")
    if args.json:
        print_json(report)
    elif not args.quiet:
        color = use_color(sys.stderr)
        summary = (f"hal run: {os.path.basename(report['script'])} on {report['backend']}: "
                   f"{len(report['redirected'])} redirection(s), "
                   f"{len(report['not_redirected'])} call(s) not redirected")
        if report["fallbacks"]:
            summary += (f", {len(report['fallbacks'])} op(s) fell back: " +
                        ", ".join(f"{r['op']} ({r['route']} x{r['count']})" for r in report["fallbacks"][:8]))
        print(paint(summary, "cyan", color), file=sys.stderr)
    return int(report["exit_code"] or 0)
