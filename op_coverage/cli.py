"""The ``op_coverage`` command: a thin layer over :func:`op_coverage.scan` and friends."""
from __future__ import annotations

import argparse
import json
import sys
import textwrap
from importlib import resources
from pathlib import Path

from . import __version__
from .errors import ScanError
from .report import FORMATS, render
from .report.model import FAIL_ON

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
"""


def _example_model() -> Path:
    return Path(str(resources.files("op_coverage").joinpath("examples", "tiny_block.onnx")))


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(
        prog="op_coverage", formatter_class=fmt,
        description="Which ONNX operators of a model will not run on a target, and why.",
        epilog="commands:\n  scan      coverage report for a model or a folder of models\n"
               "  targets   list target profiles and where their facts come from\n"
               "  rewrite   replace ops a target lacks with verified compositions\n"
               "  conformance  check the decompositions against ONNX's backend node tests\n\n" + SCAN_EXAMPLES + "\n"
               + EXIT_CODES)
    p.add_argument("--version", action="version", version=f"op_coverage {__version__}")
    sub = p.add_subparsers(dest="command", metavar="{scan,targets,rewrite,conformance}")

    s = sub.add_parser("scan", formatter_class=fmt, help="coverage report for a model or folder",
                       description="Inventory every node (subgraphs and functions included) and judge it "
                                   "against each target profile. Weights are never read.",
                       epilog=SCAN_EXAMPLES + "\n" + EXIT_CODES)
    s.add_argument("path", nargs="?", help="a .onnx file or a folder (default: the bundled example model)")
    s.add_argument("-t", "--target", action="append", default=[], metavar="NAME",
                   help="target name or alias, repeatable or comma-separated; 'all' = every profile "
                        "(default: all). See 'op_coverage targets'.")
    s.add_argument("--profile", action="append", default=[], metavar="FILE",
                   help="extra profile JSON (format: op_coverage/data/profile.schema.json)")
    s.add_argument("--format", choices=FORMATS, default=None, help="output format (default: table)")
    s.add_argument("--json", action="store_true", help="same as --format json")
    s.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE (atomically)")
    s.add_argument("--fail-on", choices=FAIL_ON, default="fallback",
                   help="lowest problem that makes the exit code non-zero: 'fallback' (default: 3 for "
                        "host fallback, 4 for unsupported), 'unsupported' (only 4), 'restriction' "
                        "(also 3 for native-with-restriction), 'never' (always 0 unless bad input)")
    s.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour in the table (auto: only when stdout is a terminal)")
    s.add_argument("--no-progress", action="store_true", help="no progress bar even on a terminal")
    s.add_argument("--no-plugins", action="store_true", help="ignore profiles from hal backend plugins")
    s.add_argument("--width", type=int, default=80, help="table width in columns (default 80)")

    t = sub.add_parser("targets", formatter_class=fmt, help="list target profiles and their provenance",
                       epilog="examples:\n  op_coverage targets\n  op_coverage targets --json\n"
                              "  op_coverage targets --profile my_npu.json\n")
    t.add_argument("--json", action="store_true", help="machine-readable list")
    t.add_argument("--profile", action="append", default=[], metavar="FILE", help="extra profile JSON")
    from . import cli_rewrite, conformance
    cli_rewrite.add_parser(sub)
    conformance.add_parser(sub)
    return p


def _cmd_scan(a) -> int:
    from .scan import scan
    from .targets import load_targets

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
    if a.output:
        from hal._io import atomic_write as write_atomic

        from .errors import OutputNotWritable
        try:
            write_atomic(a.output, text)
        except OSError as e:
            print(f"op_coverage: error: cannot write {a.output}: {e.strerror or e}; choose a writable path",
                  file=sys.stderr)
            return OutputNotWritable.exit_code
    else:
        sys.stdout.write(text)
    return report.exit_code(a.fail_on)


def _cmd_targets(a) -> int:
    from . import list_targets

    rows = list_targets(a.profile)
    if a.json:
        print(json.dumps({"format": "op_coverage.targets/1", "targets": rows}, indent=2, ensure_ascii=False))
        return 0
    for r in rows:
        alias = f" (also: {', '.join(r['aliases'])})" if r["aliases"] else ""
        print(f"{r['name']}{alias}")
        print(textwrap.fill(f"{r['title']} [{r['kind']}, {r['entries']} entries]", 80, initial_indent="  ",
                            subsequent_indent="  "))
        print(textwrap.fill(f"source: {r['provenance']}", 80, initial_indent="  ", subsequent_indent="    "))
        if r["fallback_profile"]:
            print(f"  ops it lacks run as host-fallback when {r['fallback_profile']} has them")
        if r.get("expands_functions"):
            print("  an op with no kernel still runs when onnx defines a function body for it: the runtime "
                  "inlines it")
        for u in r["uncertain"]:
            print(textwrap.fill(f"uncertain: {u}", 80, initial_indent="  ", subsequent_indent="    "))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``op_coverage`` console script; returns the exit code."""
    parser = build_parser()
    a = parser.parse_args(argv)
    if a.command is None:
        parser.print_help()
        return 2
    try:
        if a.command in ("rewrite", "conformance"):
            from . import cli_rewrite, conformance
            return cli_rewrite.run(a) if a.command == "rewrite" else conformance.main_run(a)
        return _cmd_scan(a) if a.command == "scan" else _cmd_targets(a)
    except ScanError as e:
        print(f"op_coverage: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("op_coverage: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
