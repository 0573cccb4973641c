"""What every ``op_coverage`` command shares: writing its output, colour, ``--dim`` values."""
from __future__ import annotations

import sys


def write_output(a, text: str) -> int:
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


def wants_color(a) -> bool:
    """``--color``: always, never, or auto (only when stdout is a terminal and no ``-o``)."""
    return a.color == "always" or (a.color == "auto" and not a.output and sys.stdout.isatty())


def parse_dims(items):
    from op_coverage.rewrite.verify import BadInputs
    out = {}
    for it in items:
        name, _, val = it.partition("=")
        if not val.isdigit():
            raise BadInputs(f"--dim {it!r}: expected NAME=N with a positive integer N")
        out[name] = int(val)
    return out
