"""``op_coverage trace`` and the torch half of ``op_coverage scan`` (traces and training scripts)."""
from __future__ import annotations

import argparse
import json
import sys

from op_coverage.cli._common import wants_color, write_output
from op_coverage.report import render

TRACE_EXAMPLES = """\
examples:
  op_coverage trace train.py -o ops.json                     # run it on the emulator, record every aten op
  op_coverage trace train.py --steps 20 -o ops.json -- --epochs 1 --lr 3e-4   # the script's own arguments after --
  op_coverage trace train.py --seconds 60 --json             # print the trace instead
  op_coverage trace mypkg.models:build_model -o ops.json     # a factory: one forward, backward, optimizer step
  op_coverage trace exported.pt2 -o ops.json                 # a torch.export file: one forward
  op_coverage scan ops.json -t ascend,mlu,musa               # then judge it per vendor
  op_coverage scan train.py -t ascend --steps 5 -- --epochs 1   # trace and scan in one go

What is recorded: every aten op that reaches the device (after autograd and
CompositeImplicitAutograd: what a vendor's kernel receives), with overload name, dtypes,
count, phase (forward / backward / optimizer) and the first file:line of your code that
led to it.  The script runs unmodified through the hal run shim (CUDA-written scripts
work) on hal's emulated accelerator, in a fresh process.  No tensor data is kept.

exit codes:
  0   traced (the script ended, or --steps / --seconds stopped it)
  1   the script raised; the trace of what ran until then is still written
  10  the script, module:factory or .pt2 file was not found
  17  cannot write the -o file
  19  the run ended before a trace was written
"""


def add_parser(sub) -> None:
    t = sub.add_parser("trace", formatter_class=argparse.RawDescriptionHelpFormatter,
                       help="record the aten ops a PyTorch script sends to the device",
                       description="Run a PyTorch training script (or an nn.Module factory, or a torch.export "
                                   ".pt2 file) on hal's emulated accelerator and record every aten op that "
                                   "reaches the device. Arguments after -- go to the script.",
                       epilog=TRACE_EXAMPLES)
    t.add_argument("target", help="train.py, module:factory, or model.pt2")
    t.add_argument("--steps", type=int, default=0, metavar="N", help="stop cleanly after N optimizer steps")
    t.add_argument("--seconds", type=float, default=0.0, metavar="S", help="stop cleanly after S seconds")
    t.add_argument("-o", "--output", metavar="FILE", help="write the trace (JSON) to FILE, atomically")
    t.add_argument("--json", action="store_true", help="print the trace as JSON on stdout")
    t.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="give up if the run has not ended after S seconds (default: no limit)")
    t.add_argument("--quiet", action="store_true", help="hide the script's own output")


def add_scan_options(s) -> None:
    """Options of ``scan`` that only a training script uses."""
    s.add_argument("--steps", type=int, default=0, metavar="N",
                   help="for a .py script without --static: trace N optimizer steps (default 3), then scan")
    s.add_argument("--seconds", type=float, default=0.0, metavar="S",
                   help="for a .py script without --static: stop the trace after S seconds")


def run(a) -> int:
    from op_coverage.torch.trace import record, summary
    trace = record(a.target, a.script_args, steps=a.steps or None, seconds=a.seconds or None,
                   timeout=a.timeout, echo=not a.quiet)
    text = json.dumps(trace, indent=1) + "\n"
    rc = write_output(a, text) if a.output else 0
    if a.json:
        sys.stdout.write(text)
    print(f"op_coverage trace: {summary(trace)}" + (f"; written to {a.output}" if a.output and not rc else ""),
          file=sys.stderr)
    if trace.get("error"):
        print(f"op_coverage trace: the traced {trace['source']['kind']} failed: {trace['error']}", file=sys.stderr)
    return rc or (1 if trace.get("exit_code") else 0)


def cmd_scan_trace(a, trace: dict, path: str) -> int:
    """Judge a trace dict per torch target and print the report in the chosen format."""
    from op_coverage.report.model import FAIL_ON
    from op_coverage.torch.scan import scan_trace
    fail_on = {"caveat": "fallback", "change": "unsupported"}.get(a.fail_on, a.fail_on)
    if fail_on not in FAIL_ON:
        fail_on = "fallback"
    report = scan_trace(trace, a.target, a.profile, use_plugins=not a.no_plugins, path=path)
    for m in report.models:
        for w in m.warnings:
            print(f"op_coverage: warning: {w}", file=sys.stderr)
    fmt = "json" if a.json else (a.format or "table")
    color = wants_color(a)
    return write_output(a, render(report, fmt, color=color, width=a.width)) or report.exit_code(fail_on)


def cmd_scan_trace_file(a) -> int:
    from op_coverage.torch.trace import load
    return cmd_scan_trace(a, load(a.path), a.path)


def cmd_scan_script(a) -> int:
    """``op_coverage scan train.py -t ...``: trace (3 optimizer steps unless told), then judge."""
    from op_coverage.torch.trace import record, summary
    steps = a.steps or (0 if a.seconds else 3)
    trace = record(a.path, getattr(a, "script_args", []), steps=steps or None, seconds=a.seconds or None,
                   echo=False)
    print(f"op_coverage: {summary(trace)}", file=sys.stderr)
    if trace.get("error"):
        print(f"op_coverage: warning: the script failed ({trace['error']}); the ops it ran until then are "
              f"scanned", file=sys.stderr)
    return cmd_scan_trace(a, trace, a.path)
