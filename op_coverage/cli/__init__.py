"""The ``op_coverage`` command: a thin layer over :func:`op_coverage.scan` and friends."""
from __future__ import annotations

import argparse
import json
import sys
import textwrap
from importlib import resources
from pathlib import Path

from op_coverage import __version__
from op_coverage.errors import NotAvailable, ScanError
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


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(
        prog="op_coverage", formatter_class=fmt,
        description="Which ONNX operators of a model, or which aten ops of a PyTorch training script, will not "
                    "run on a target, why, and what replaces them.",
        epilog="commands:\n  scan      coverage report for a model or a folder of models, a torch trace or a script\n"
               "  trace     record the aten ops a PyTorch training script sends to the device\n"
               "  targets   list target profiles and where their facts come from\n"
               "  rewrite   replace ops a target lacks with verified compositions\n"
               "  quantize  INT8 the target can run, with the size, latency and accuracy it costs\n"
               "  conformance  check the decompositions against ONNX's backend node tests\n\n" + SCAN_EXAMPLES + "\n"
               + EXIT_CODES + "\n" + STATIC_EXIT_CODES)
    p.add_argument("--version", action="version", version=f"op_coverage {__version__}")
    sub = p.add_subparsers(dest="command", metavar="{scan,trace,targets,rewrite,quantize,conformance}")

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
    from op_coverage import cli_torch
    cli_torch.add_scan_options(s)

    t = sub.add_parser("targets", formatter_class=fmt, help="list ONNX and torch target profiles and their provenance",
                       description="Every target profile, ONNX (models) and torch (training scripts), with its kind.",
                       epilog="examples:\n  op_coverage targets\n  op_coverage targets --kind torch\n"
                              "  op_coverage targets --json\n  op_coverage targets --details\n"
                              "  op_coverage targets --profile my_npu.json   # ONNX or torch profile, by its schema\n")
    t.add_argument("--json", action="store_true", help="machine-readable list (format op_coverage.targets/2)")
    t.add_argument("--kind", choices=("onnx", "torch"), action="append", default=[],
                   help="only targets of this kind (repeatable; default: both)")
    t.add_argument("--details", action="store_true", help="also each target's source and what is uncertain")
    t.add_argument("--profile", action="append", default=[], metavar="FILE",
                   help="extra profile JSON (ONNX: profile.schema.json; torch: torch_profile.schema.json)")
    t.add_argument("--no-plugins", action="store_true", help="ignore profiles from hal backend plugins")
    from op_coverage import cli_quantize, cli_rewrite, conformance
    cli_torch.add_trace_parser(sub)
    cli_rewrite.add_parser(sub)
    cli_quantize.add_parser(sub)
    conformance.add_parser(sub)
    return p


def _is_python(path) -> bool:
    """A ``.py`` file, or a folder with ``*.py`` files and no ``*.onnx`` model."""
    p = Path(path)
    if p.is_file() or p.suffix == ".py":
        return p.suffix == ".py"
    if not p.is_dir():
        return False
    return next(p.rglob("*.onnx"), None) is None and next(p.rglob("*.py"), None) is not None


def _write(a, text: str) -> int:
    """``text`` to ``-o`` (atomically) or stdout; 0, or the exit code of an unwritable -o."""
    if not a.output:
        sys.stdout.write(text)
        return 0
    from hal.util.io import atomic_write as write_atomic

    from op_coverage.errors import OutputNotWritable
    try:
        write_atomic(a.output, text)
    except OSError as e:
        print(f"op_coverage: error: cannot write {a.output}: {e.strerror or e}; choose a writable path",
              file=sys.stderr)
        return OutputNotWritable.exit_code
    return 0


def _scan_python(a) -> int:
    """``op_coverage scan train.py``: the static checklist with --static; else trace it, then judge each op."""
    if not a.static:
        if Path(a.path).is_dir():
            raise NotAvailable(f"{a.path}: a folder of scripts is read with --static; to trace one, "
                               f"pass its file: op_coverage scan {a.path}/train.py -t ascend")
        from op_coverage.cli.torch import cmd_scan_script
        return cmd_scan_script(a)
    from op_coverage.report.torch_static import render as render_static
    from op_coverage.torch.static import static_scan

    report = static_scan(a.path, vendors=a.target)
    for w in report.warnings:
        print(f"op_coverage: warning: {w}", file=sys.stderr)
    fmt = "json" if a.json else (a.format or "table")
    color = a.color == "always" or (a.color == "auto" and not a.output and sys.stdout.isatty())
    # --fail-on: caveat/change, or scan's fallback/restriction (= caveat) and unsupported (= change)
    rc = _write(a, render_static(report, fmt, color=color, width=a.width, fail_on=a.fail_on))
    return rc or report.exit_code(a.fail_on)


def _cmd_scan(a) -> int:
    from op_coverage.scan import scan
    from op_coverage.targets.catalog import load_targets

    if a.path is not None and (_is_python(a.path) or (a.static and Path(a.path).is_dir())):
        return _scan_python(a)
    from op_coverage.torch.scan import is_trace_file
    if a.path is not None and is_trace_file(a.path):
        from op_coverage.cli.torch import cmd_scan_trace_file
        return cmd_scan_trace_file(a)
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
    color = a.color == "always" or (a.color == "auto" and not a.output and sys.stdout.isatty())
    text = render(report, fmt, color=color, width=a.width)
    return _write(a, text) or report.exit_code(a.fail_on)


def _cmd_targets(a) -> int:
    from op_coverage import list_targets

    problems: list = []
    rows = list_targets(a.profile, kinds=tuple(a.kind) or ("onnx", "torch"), use_plugins=not a.no_plugins,
                        problems=problems)
    for prob in problems:
        print(f"op_coverage: warning: {prob}", file=sys.stderr)
    if a.json:
        print(json.dumps({"format": "op_coverage.targets/2", "targets": rows}, indent=2, ensure_ascii=False))
        return 0
    from hal.util.term import table
    body = []
    for r in rows:
        body.append((r["name"], r["kind"], r["entries"], ", ".join(r["aliases"]), r["title"]))
    if not a.details:
        print(table(body, ("name", "kind", "ops", "aliases", "title"), [14, 5, 5, 22, 60]))
    if a.details:
        for r in rows:
            alias = f" (also: {', '.join(r['aliases'])})" if r["aliases"] else ""
            print(f"{r['name']} [{r['kind']}]{alias}")
            print(textwrap.fill(f"{r['title']} [{r['profile_kind']}, {r['entries']} entries]", 80,
                                initial_indent="  ", subsequent_indent="  "))
            print(textwrap.fill(f"source: {r['provenance']}", 80, initial_indent="  ", subsequent_indent="    "))
            if r["fallback_profile"]:
                print(f"  ops it lacks run as host-fallback when {r['fallback_profile']} has them")
            if r.get("expands_functions"):
                print("  an op with no kernel still runs when onnx defines a function body for it: the runtime "
                      "inlines it")
            if r["kind"] == "torch":
                print(f"  torch {r['torch_version']}, device type {r['device_type']}; a missing op: "
                      f"{r['unimplemented']}" + (" (PARTIAL list)" if r["partial"] else ""))
            for u in r["uncertain"]:
                print(textwrap.fill(f"uncertain: {u}", 80, initial_indent="  ", subsequent_indent="    "))
    else:
        print("\n(-t takes a name or an alias; 'op_coverage targets --details' shows sources and caveats)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``op_coverage`` console script; returns the exit code."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args: list[str] = []
    if "--" in argv:  # the traced script's own arguments
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1:]
    a = parser.parse_args(argv)
    a.script_args = script_args
    if a.command is None:
        parser.print_help()
        return 2
    try:
        if a.command in ("rewrite", "conformance"):
            from op_coverage import cli_rewrite, conformance
            return cli_rewrite.run(a) if a.command == "rewrite" else conformance.main_run(a)
        if a.command == "quantize":
            from op_coverage import cli_quantize
            return cli_quantize.run(a)
        if a.command == "trace":
            from op_coverage.cli.torch import cmd_trace
            return cmd_trace(a)
        return _cmd_scan(a) if a.command == "scan" else _cmd_targets(a)
    except ScanError as e:
        print(f"op_coverage: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("op_coverage: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
