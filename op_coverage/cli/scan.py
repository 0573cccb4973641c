"""``op_coverage scan``: a coverage report for an ONNX model or folder, a torch trace, or a training script."""
from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path

from op_coverage.cli import trace as torch_half
from op_coverage.cli._common import wants_color, write_output
from op_coverage.errors import NotAvailable
from op_coverage.report import FORMATS, render
from op_coverage.report.model import FAIL_ON

#: --fail-on values: the ONNX scan's, and the static torch scan's (each accepts the other's)
FAIL_ON_ALL = FAIL_ON + ("caveat", "change")
#: static --fail-on -> ONNX equivalent
ONNX_FAIL_ON = {"caveat": "fallback", "change": "unsupported"}

EXIT_CODES = """\
exit codes:
  0   every op is native on every target (or nothing reaches --fail-on)
  3   some ops need a host fallback (or, with --fail-on restriction, carry a restriction)
  4   unsupported ops remain on at least one target
  2   command-line usage error
  10  model not found (or a folder without *.onnx)
  11  not an ONNX model / corrupt protobuf / subgraphs nested too deeply to parse
  12  truncated model file
  13  external-data location escapes the model's folder
  14  opset newer than the installed onnx knows, or a domain the model does not import
  15  bad --profile file
  16  unknown --target
  17  cannot write the -o file
"""

SCAN_EXAMPLES = """\
examples:
  op_coverage scan                                   # the bundled example model, all targets
  op_coverage scan model.onnx --target ascend        # one target
  op_coverage scan model.onnx -t ort-cuda -t tensorrt -t ascend -t musa
  op_coverage scan models/ --target all --format csv -o coverage.csv
  op_coverage scan model.onnx -t ascend --fail-on unsupported   # CI: fail only on unsupported ops
  op_coverage scan model.onnx --profile my_npu.json -t my_npu --json

PyTorch training scripts (a .py file, or a folder of them):
  op_coverage scan train.py --static                 # migration checklist for hal run, nothing is run
  op_coverage scan src/ --static -t ascend --format md -o checklist.md
  op_coverage scan train.py --static --json --fail-on change   # CI: fail only on needed changes
  op_coverage scan train.py -t ascend,mlu,musa -- --epochs 1   # run it (3 optimizer steps), judge each aten op
  op_coverage scan ops.json -t ascend-2.13 --format html -o ops.html   # a trace from 'op_coverage trace'
"""

STATIC_EXIT_CODES = """exit codes with --static:
  0   nothing at or above --fail-on (everything works via hal run as it is)
  3   findings hal run handles with a caveat (--fail-on caveat, the default)
  4   findings that need a code change
  10  no such script, or a folder without *.py
"""


def _example_model() -> Path:
    return Path(str(resources.files("op_coverage").joinpath("examples", "tiny_block.onnx")))


def add_parser(sub) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    s = sub.add_parser("scan", formatter_class=fmt, help="coverage report for a model or folder",
                       description="Inventory every node (subgraphs and functions included) and judge it "
                                   "against each target profile. Weights are never read. With a PyTorch "
                                   "training script (.py) and --static: the migration checklist for hal run, "
                                   "read from the source with ast (the script is never imported or run).",
                       epilog=SCAN_EXAMPLES + "\n" + EXIT_CODES + "\n" + STATIC_EXIT_CODES)
    s.add_argument("path", nargs="?", help="a .onnx file, a .py training script, or a folder of either "
                                           "(default: the bundled example model)")
    s.add_argument("--static", action="store_true",
                   help="for .py scripts: read the source and list what hal run will not redirect, CUDA-only "
                        "libraries with portable replacements, NCCL/cuDNN settings, distributed-init, "
                        "data-loading and checkpoint forms, each with file:line and a fix (-t narrows the "
                        "vendor equivalents named in fixes)")
    s.add_argument("-t", "--target", action="append", default=[], metavar="NAME",
                   help="target name or alias, repeatable or comma-separated; 'all' = every profile "
                        "(default: all). See 'op_coverage targets'.")
    s.add_argument("--profile", action="append", default=[], metavar="FILE",
                   help="extra profile JSON (format: op_coverage/data/profile.schema.json)")
    s.add_argument("--format", choices=FORMATS, default=None, help="output format (default: table)")
    s.add_argument("--json", action="store_true", help="same as --format json")
    s.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE (atomically)")
    s.add_argument("--fail-on", choices=FAIL_ON_ALL, default="fallback",
                   help="lowest problem that makes the exit code non-zero: 'fallback' (default: 3 for "
                        "host fallback, 4 for unsupported), 'unsupported' (only 4), 'restriction' "
                        "(also 3 for native-with-restriction), 'never' (always 0 unless bad input); with "
                        "--static: 'caveat' (= fallback) or 'change' (= unsupported)")
    s.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour in the table (auto: only when stdout is a terminal)")
    s.add_argument("--no-progress", action="store_true", help="no progress bar even on a terminal")
    s.add_argument("--no-plugins", action="store_true", help="ignore profiles from hal backend plugins")
    s.add_argument("--width", type=int, default=80, help="table width in columns (default 80)")
    torch_half.add_scan_options(s)


def _is_python(path) -> bool:
    """A ``.py`` file, or a folder with ``*.py`` files and no ``*.onnx`` model."""
    p = Path(path)
    if p.is_file() or p.suffix == ".py":
        return p.suffix == ".py"
    if not p.is_dir():
        return False
    return next(p.rglob("*.onnx"), None) is None and next(p.rglob("*.py"), None) is not None


def _scan_python(a) -> int:
    """``op_coverage scan train.py``: the static checklist with --static; else trace it, then judge each op."""
    if not a.static:
        if Path(a.path).is_dir():
            raise NotAvailable(f"{a.path}: a folder of scripts is read with --static; to trace one, "
                               f"pass its file: op_coverage scan {a.path}/train.py -t ascend")
        return torch_half.cmd_scan_script(a)
    from op_coverage.report.torch_static import render as render_static
    from op_coverage.torch.static import static_scan

    report = static_scan(a.path, vendors=a.target)
    for w in report.warnings:
        print(f"op_coverage: warning: {w}", file=sys.stderr)
    fmt = "json" if a.json else (a.format or "table")
    color = wants_color(a)
    # --fail-on: caveat/change, or scan's fallback/restriction (= caveat) and unsupported (= change)
    rc = write_output(a, render_static(report, fmt, color=color, width=a.width, fail_on=a.fail_on))
    return rc or report.exit_code(a.fail_on)


def run(a) -> int:
    from op_coverage.scan import scan
    from op_coverage.targets.catalog import load_targets

    if a.path is not None and (_is_python(a.path) or (a.static and Path(a.path).is_dir())):
        return _scan_python(a)
    from op_coverage.torch.scan import is_trace_file
    if a.path is not None and is_trace_file(a.path):
        return torch_half.cmd_scan_trace_file(a)
    if a.static:
        raise NotAvailable(f"--static reads Python training scripts; {a.path or 'the bundled example'} is not a "
                           f".py file or a folder of them: drop --static to scan an ONNX model")
    a.fail_on = ONNX_FAIL_ON.get(a.fail_on, a.fail_on)
    path = a.path
    if path is None:
        path = _example_model()
        print(f"op_coverage: no model given; scanning the bundled example {path.name}", file=sys.stderr)
    fmt = "json" if a.json else (a.format or "table")
    ts = load_targets(a.profile, use_plugins=not a.no_plugins)
    report = scan(path, a.target or ["all"], target_set=ts, progress=False if a.no_progress else None)
    for m in report.models:
        for w in m.warnings:
            print(f"op_coverage: warning: {w}", file=sys.stderr)
    for e in report.errors:
        print(f"op_coverage: error: {e['message']}", file=sys.stderr)
    for prob in ts.problems:
        print(f"op_coverage: warning: {prob}", file=sys.stderr)
    color = wants_color(a)
    text = render(report, fmt, color=color, width=a.width)
    return write_output(a, text) or report.exit_code(a.fail_on)


