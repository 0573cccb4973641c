"""``python -m hal.emu.build [--verbose]``: compile the emulated accelerator for the torch
installed here (``scripts/setup.sh`` runs it once), then print where it lives."""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m hal.emu.build", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--verbose", action="store_true", help="show the compiler's output")
    args = p.parse_args(argv)
    from hal._errors import HalError
    from hal.emu import _build

    try:
        _build.load(verbose=args.verbose)
    except HalError as exc:
        print(f"hal: {exc}", file=sys.stderr)
        return 1
    print(f"hal: emulated accelerator ready: {_build.build_dir()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
