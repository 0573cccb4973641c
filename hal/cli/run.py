"""``hal run``: run an unmodified CUDA-written script on the selected backend."""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys

from hal._errors import HalError
from hal.util.io import atomic_write
from hal.util.term import paint, print_json, use_color

#: set to 1 to silence the redirection lines (as --quiet does)
QUIET_ENV = "HAL_RUN_QUIET"

EPILOG = """\
examples:
  hal run train.py --epochs 1                  the script's own arguments follow its path
  HAL_BACKEND=emu hal run train.py             on the emulated accelerator
  HAL_BACKEND=cpu hal run train.py             on the CPU (torch.cuda.is_available() -> True)
  hal run --nproc-per-node 2 train_ddp.py      DDP at 2 ranks through torchrun
  hal run --nproc-per-node 2 -m torchtitan.train --job.config_file llama3_debug.toml
                                               a library module as the script, as torchrun -m
  hal run --nproc-per-node 2 --local-ranks-filter 0 --role rank --tee 3 -m torchtitan.train ...
                                               torchrun's console options, as torchtitan's
                                               run_train.sh gives them: rank 0's lines only
  hal run --nproc-per-node 2 --max-restarts 3 train_ddp.py
                                               torchrun restarts the group when a rank dies,
                                               hangs past its timeout or raises
  hal run --report run.json train.py           write the run report (schema hal.run/3)
  hal run --json train.py                      print the run report as JSON at the end
  hal run --metrics runs/a train.py            loss, grad norm, throughput per step into runs/a/run.jsonl
  hal run --nproc-per-node 2 --max-restarts 1 --checkpoint ckpt --checkpoint-every 50 train_ddp.py
                                               checkpointed from outside every 50 steps; a restarted
                                               group goes on from the newest checkpoint
  HAL_RUN_QUIET=1 hal run train.py             no redirection lines (as --quiet)
  HAL_BACKEND=emu HAL_EMU_DEVICES=4 hal run train_4gpu.py
                                               a script that gates on device_count() >= 4
  HAL_BACKEND=cpu HAL_CPU_DEVICES=2 hal run train.py
                                               Trainer(accelerator="gpu", devices=2) on a CPU box:
                                               two logical devices, both the CPU

What is redirected: every torch call that takes a device (factories, .to, .cuda(),
Module.to/cuda, with torch.device("cuda"), torch.Generator/Stream/Event, torch.load map
locations), torch.cuda.* (device count and selection, properties, synchronize, memory,
RNG, streams, events), torch.autocast("cuda") / GradScaler, init_process_group("nccl"),
DDP device_ids, DataParallel, torch.compile on devices inductor lacks.  torch's own code
keeps seeing the real torch.cuda answers.  Each redirection is printed once per line of
the script that made it (rank 0 only); numerics are never changed.  Whatever the script
does, the summary is printed and the report written; the exit code is the script's
(1 for an exception).  Python processes the script starts (subprocess, os.exec*,
multiprocessing: Lightning's DDP ranks) run their script under the redirection too, and the
report counts them with their exit codes; not a Python started with -I, -E, -c or -m.  Not redirected: x.device == torch.device("cuda") (a tensor's
device is its true device), custom CUDA kernels; CUDA graphs are refused (hal.NotSupported
naming the switches of the libraries that capture them).  Details and the
idiom table: docs/redirect.md.
"""


def add_parser(sub):
    p = sub.add_parser("run", help="run a CUDA-written script on the selected backend", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("script", nargs="?", help="path of the Python script")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    p.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE ...",
                   help="run a library module as the script, as python -m and torchrun -m do "
                        "(hal run --nproc-per-node 2 -m torchtitan.train --job.config_file x.toml); "
                        "the module's arguments follow its name")
    p.add_argument("--nproc-per-node", type=int, default=0, metavar="N",
                   help="launch N processes with torchrun (--standalone)")
    p.add_argument("--max-restarts", type=int, default=0, metavar="N",
                   help="with --nproc-per-node: torchrun restarts the whole group up to N times when a "
                        "rank fails (resume with hal.checkpoint.Checkpointer; docs/fault-tolerance.md)")
    # torchrun's console options, as torchtitan's run_train.sh passes them (--local-ranks-filter 0 --role rank --tee 3)
    p.add_argument("--local-ranks-filter", metavar="RANKS",
                   help="with --nproc-per-node: show only these local ranks' output (torchrun's option, e.g. 0 or 0,1)")
    p.add_argument("--tee", metavar="STD",
                   help="with --nproc-per-node: torchrun's --tee (1 stdout, 2 stderr, 3 both): each line of a "
                        "rank's output prefixed with [ROLE RANK]:")
    p.add_argument("--role", metavar="NAME", help="with --nproc-per-node: torchrun's --role (the prefix of --tee)")
    p.add_argument("--report", metavar="PATH", help="write the run report as JSON (rank 0 only)")
    p.add_argument("--json", action="store_true", help="print the run report as JSON after the script")
    p.add_argument("--metrics", metavar="DIR",
                   help="record hal.metrics per optimizer step from outside the script (loss, grad norm, lr, "
                        "samples and tokens, step time, memory, DDP communication) into DIR/run.jsonl "
                        "(run.rank<N>.jsonl per rank); docs/metrics.md")
    p.add_argument("--checkpoint", metavar="DIR",
                   help="checkpoint the training state from outside the script into DIR every "
                        "--checkpoint-every optimizer steps, and resume from DIR's newest checkpoint when the "
                        "script starts again (a torchrun restart, or by hand); a script with its own "
                        "hal.checkpoint.Checkpointer keeps checkpointing itself, into DIR; docs/fault-tolerance.md")
    p.add_argument("--checkpoint-every", type=int, metavar="N",
                   help="with --checkpoint: save every N optimizer steps (default 100)")
    p.add_argument("--quiet", action="store_true",
                   help=f"do not print redirections as they happen (also {QUIET_ENV}=1); "
                        f"the one-line summary stays")
    # a child process of a hal run script, re-executed by hal/redirect/_child_start.py: silent, no report
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(run=run)


def _launch(args) -> int:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={args.nproc_per_node}"]
    if args.max_restarts:
        cmd += [f"--max-restarts={args.max_restarts}", "--monitor-interval=0.5"]
    for option in ("local_ranks_filter", "tee", "role"):
        if getattr(args, option) is not None:
            cmd.append(f"--{option.replace('_', '-')}={getattr(args, option)}")
    cmd += ["-m", "hal.redirect"]
    if args.report:
        cmd += ["--report", args.report]
    if args.quiet:
        cmd.append("--quiet")
    if args.json:
        cmd.append("--json")
    cmd += ["-m", args.module] if args.module else [args.script]
    cmd += args.args
    return subprocess.call(cmd)


def _quiet(args) -> bool:
    return bool(args.quiet) or os.environ.get(QUIET_ENV, "").strip() not in ("", "0")


def _summary(report: dict) -> str:
    name = os.path.basename(report["script"])
    head = f"hal run: {name} on {report['backend']}"
    if report["status"] == "ok":
        head += ": ok"
    else:
        err = report.get("error")
        head += f": failed (exit code {report['exit_code']}"
        if err and err["type"] != "SystemExit":
            head += f", {err['type']}" + (f" at {err['where']}" if err.get("where") else "")
        head += ")"
    head += (f", {len(report['redirected'])} redirection(s), "
             f"{len(report['not_redirected'])} call(s) not redirected")
    if report.get("children"):
        codes = [str(c["exit_code"]) if c["exit_code"] is not None else c["status"] for c in report["children"]]
        n = len(codes)
        head += f", {n} child process{'es' if n > 1 else ''} (exit code{'s' if n > 1 else ''} {', '.join(codes)})"
    if report["fallbacks"]:
        head += (f", {len(report['fallbacks'])} op(s) fell back: " +
                 ", ".join(f"{r['op']} ({r['route']} x{r['count']})" for r in report["fallbacks"][:8]))
    return head


def _device_count_hint(report: dict) -> "str | None":
    """For a script that failed on the cpu backend after torch.cuda.device_count() answered 1
    (a multi-GPU recipe refusing to start): how to show it more devices."""
    if report["status"] == "ok" or report["device_type"] != "cpu":
        return None
    for row in report["redirected"]:
        if row["call"] == "torch.cuda.device_count" and row["detail"].startswith("1 "):
            return (f"hal run: torch.cuda.device_count() answered 1 at {row['where']}: on the cpu backend "
                    f"HAL_CPU_DEVICES=N shows N logical devices (all the one CPU), e.g. "
                    f"HAL_CPU_DEVICES=2 for Trainer(devices=2); or HAL_BACKEND=emu (emulated devices, 8 by default)")
    return None


def _options(args) -> list:
    """The hal run options a script keeps when it replaces its process with os.exec*."""
    out = ["--report", os.path.abspath(args.report)] if args.report else []
    return out + (["--json"] if args.json else []) + (["--quiet"] if args.quiet else [])


def _script(args, options=None) -> dict:
    """``run_script`` of ``args``, with hal.metrics attached from outside where ``--metrics`` (or
    ``HAL_METRICS_DIR``, which every process of the run inherits) asks for it."""
    from hal import checkpoint, metrics
    from hal.redirect import run_script

    saver = checkpoint.attach_from_env()  # first: its step hook loads a checkpoint before metrics record the step
    try:
        attached = metrics.attach_from_env()
    except BaseException:
        if saver is not None:
            saver.close()
        raise
    if saver is not None and attached is not None:
        saver.on_resume.append(attached.resumed)
    try:
        return run_script(args.script, args.args, options, module=args.module)
    finally:
        for part in (attached, saver):
            if part is not None:
                part.close()


def _run_child(args) -> int:
    """A child process of a hal run script: the script runs under the redirection, silently; its end
    is recorded for the parent's report; a failure is printed (traceback and one line)."""
    logging.getLogger("hal.redirect").setLevel(logging.ERROR)
    from hal.redirect import record_child_exit

    try:
        report = _script(args)
    except HalError:  # the redirection could not start (a wrong setting): hal's error, as hal run's
        record_child_exit(3, {"type": "HalError", "where": None}, None, 0.0, script=args.script, argv=args.args)
        raise
    if report["status"] != "ok":
        err = report.get("error")
        if err is not None:
            sys.stderr.write(err["traceback"])
        ranks = [f"{k}={os.environ[k]}" for k in ("RANK", "LOCAL_RANK") if k in os.environ]
        summary = _summary(report).replace("hal run: ", f"hal run: child process {os.getpid()}"
                                           f"{' (' + ', '.join(ranks) + ')' if ranks else ''}: ", 1)
        print(paint(summary, "red", use_color(sys.stderr)), file=sys.stderr)
    return int(report["exit_code"])


def _target(args) -> "str | None":
    """Split ``-m MODULE args...`` into ``args.module`` and ``args.args``; an error message, or None."""
    if args.module is not None:
        if args.script is not None:
            return f"give a script or -m MODULE, not both ({args.script!r} and -m {' '.join(args.module)})"
        if not args.module or args.module[0].startswith("-"):
            return "-m needs a module name, e.g. hal run -m torchtitan.train --job.config_file x.toml"
        args.module, args.args = args.module[0], args.module[1:]
    elif args.script is None:
        return "give the script to run (hal run train.py) or a module (hal run -m torchtitan.train)"
    return None


def run(args) -> int:
    problem = _target(args)
    if problem:
        print(f"hal run: error: {problem}", file=sys.stderr)
        return 2
    given = [f"--{o.replace('_', '-')}" for o in ("local_ranks_filter", "tee", "role") if getattr(args, o) is not None]
    if given and not args.nproc_per_node:
        print(f"hal run: error: {' '.join(given)} are torchrun's options: give --nproc-per-node too "
              f"(--nproc-per-node 1 for a single process)", file=sys.stderr)
        return 2
    if args.max_restarts and not args.nproc_per_node:
        print("hal run: error: --max-restarts restarts a torchrun group: give --nproc-per-node too "
              "(--nproc-per-node 1 for a single process)", file=sys.stderr)
        return 2
    if args.checkpoint_every is not None and not args.checkpoint:
        print("hal run: error: --checkpoint-every needs --checkpoint DIR (where the checkpoints go)", file=sys.stderr)
        return 2
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        print(f"hal run: error: --checkpoint-every {args.checkpoint_every}: give a number of optimizer steps "
              f"above 0", file=sys.stderr)
        return 2
    if args.metrics:
        from hal.metrics import ENV_DIR

        os.environ[ENV_DIR] = os.path.abspath(args.metrics)  # every rank and child process records
    if args.checkpoint:
        from hal.checkpoint import ATTACH_DIR_ENV, ATTACH_EVERY_ENV

        os.environ[ATTACH_DIR_ENV] = os.path.abspath(args.checkpoint)  # every rank, every restart
        if args.checkpoint_every is not None:
            os.environ[ATTACH_EVERY_ENV] = str(args.checkpoint_every)
    if args.nproc_per_node:
        return _launch(args)
    if args.child:
        return _run_child(args)
    log = logging.getLogger("hal.redirect")
    before = (log.level, log.propagate, list(log.handlers))  # given back: hal run may be called in a process
    if _quiet(args):
        log.setLevel(logging.ERROR)
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("hal run: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    try:
        report = _script(args, _options(args))
    finally:
        log.setLevel(before[0])
        log.propagate = before[1]
        log.handlers[:] = before[2]
    err = report.get("error")
    if err is not None:
        sys.stderr.write(err["traceback"])
        sys.stderr.flush()
    if report["rank"] == 0:
        if args.report:
            atomic_write(args.report, json.dumps(report, indent=2, default=str) + "\n")
        if args.json:
            print_json(report)
        print(paint(_summary(report), "cyan" if report["status"] == "ok" else "red", use_color(sys.stderr)),
              file=sys.stderr)
        hint = _device_count_hint(report)
        if hint:
            print(hint, file=sys.stderr)
    return int(report["exit_code"])
