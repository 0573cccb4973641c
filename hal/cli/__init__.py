"""The ``hal`` command.  One library call behind each subcommand; every one has ``--json``.

Subcommands are modules of this package named in :data:`COMMANDS`; each defines
``add_parser(subparsers)`` and ``run(args) -> int``.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from hal._errors import HalError

#: subcommand name -> module under hal.cli
COMMANDS = {
    "list": "list_backends",
    "info": "info",
    "run": "run",
    "probe": "probe",
    "conformance": "conformance",
    "metrics": "metrics",
    "checkpoint": "checkpoint",
    "bench": "bench",
    "doctor": "doctor",
    "ops": "ops",
}

EPILOG = """\
examples:
  hal list                     every backend, its status and why
  hal list --json              the same as JSON (schema hal.list/1)
  hal info                     the selected backend in detail
  HAL_BACKEND=cpu hal info     force a backend by name or device type
  HAL_BACKEND=emu hal run train.py   a CUDA-written script on the emulated accelerator
  hal conformance --backend emu      the backend contract as a publishable report
  hal metrics summary run.jsonl  throughput drops in a run's metrics
  hal checkpoint ls ckpt/      which checkpoint resume would use, and why not the others
  hal checkpoint info ckpt/    what a step holds, the world size and layout it was saved at
  hal doctor                   environment checklist: OK / WARN / FAIL
  hal bench all_reduce -n 2    collective bandwidth, nccl-tests columns
  hal ops                      which fused kernel each hal.ops operator runs here
  hal accept train.py          the migration acceptance report: the script on cpu against emu

environment:
  HAL_BACKEND                  force a backend (name such as ascend, or device type such as npu)
  HAL_BLOCK_PLUGINS=a,b        block plugins or backends by name
  HAL_PLUGINS=mod1,mod2        load extra plugin modules by import name
  HAL_DISABLE_PLUGIN_AUTOLOAD=1  ignore entry points of group hal.backends
"""


def _wanted(argv) -> "str | None":
    """The subcommand ``argv`` names (its first word that is not an option), or None."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(argv=None) -> argparse.ArgumentParser:
    """The ``hal`` parser.  Given ``argv`` that names one of hal's own commands, only that command's module is
    imported (every rank and child process of ``hal run`` starts here); otherwise all of them and the
    commands of packages above hal, for help and for those commands."""
    p = argparse.ArgumentParser(
        prog="hal", description="One PyTorch script across CUDA and domestic accelerators.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    from hal import __version__
    p.add_argument("--version", action="version", version=f"hal {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    wanted = _wanted(argv) if argv is not None else None
    if wanted in COMMANDS:
        importlib.import_module(f"hal.cli.{COMMANDS[wanted]}").add_parser(sub)
        return p
    for name, mod in COMMANDS.items():
        importlib.import_module(f"hal.cli.{mod}").add_parser(sub)
    for ep in _command_entry_points():
        try:
            ep.load().add_parser(sub)
        except Exception as exc:  # noqa: BLE001 - a broken extension must not take hal's own commands down
            print(f"hal: the command {ep.name!r} of {ep.value} did not load ({type(exc).__name__}: {exc}); "
                  f"reinstall the package that provides it", file=sys.stderr)
    return p


#: packages above hal add commands through this entry-point group: ``name = "module"`` whose
#: ``add_parser(subparsers)`` adds the subcommand (hal_accept's ``accept``)
COMMANDS_GROUP = "hal.commands"


def _command_entry_points():
    from importlib.metadata import entry_points

    return sorted(entry_points(group=COMMANDS_GROUP), key=lambda ep: ep.name)


def main(argv=None) -> int:
    try:
        import torch  # noqa: F401 - here so that a device extension torch cannot load is told in one line
    except Exception as exc:
        from hal.plugin.torch_import import explain
        line = explain(exc)
        if line is None:
            raise
        print(f"hal: error: {line}", file=sys.stderr)
        return 3
    parser = build_parser(sys.argv[1:] if argv is None else list(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return int(args.run(args) or 0)
    except HalError as exc:
        print(f"hal {args.command}: error: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print(f"hal {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
