"""The ``op_coverage`` command: a thin layer over :func:`op_coverage.scan` and friends."""
from __future__ import annotations

import argparse
import importlib
import sys

from op_coverage._version import __version__
from op_coverage.cli.scan import EXIT_CODES, SCAN_EXAMPLES, STATIC_EXIT_CODES
from op_coverage.errors import INPUT_ERRORS

#: subcommand name -> module under op_coverage.cli (each has ``add_parser(sub)`` and ``run(args) -> int``),
#: in the order ``--help`` lists them
COMMANDS = {
    "scan": "scan",
    "targets": "targets",
    "trace": "trace",
    "rewrite": "rewrite",
    "quantize": "quantize",
    "conformance": "conformance",
}


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

    for mod in COMMANDS.values():
        importlib.import_module(f"op_coverage.cli.{mod}").add_parser(sub)
    return p


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
        return importlib.import_module(f"op_coverage.cli.{COMMANDS[a.command]}").run(a)
    except INPUT_ERRORS as e:
        print(f"op_coverage: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("op_coverage: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
