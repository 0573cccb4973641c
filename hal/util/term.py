"""Terminal output shared by hal's commands: JSON, colour only on a terminal, tables."""
from __future__ import annotations

import json
import os
import sys
from typing import List, Sequence

_CODES = {"green": "32", "yellow": "33", "red": "31", "bold": "1", "dim": "2", "cyan": "36"}


def use_color(stream=None) -> bool:
    """Colour only on a TTY; ``NO_COLOR`` turns it off, ``FORCE_COLOR`` on."""
    stream = stream or sys.stdout
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return hasattr(stream, "isatty") and stream.isatty()


def paint(text: str, color: str, enabled: bool) -> str:
    return f"\033[{_CODES[color]}m{text}\033[0m" if enabled else text


def print_json(obj, stream=None) -> None:
    json.dump(obj, stream or sys.stdout, indent=2, sort_keys=False, default=str)
    (stream or sys.stdout).write("\n")


def table(rows: Sequence[Sequence[str]], header: Sequence[str], widths: List[int] = None) -> str:
    """Plain-text table; cells longer than their column width are cut with '…'."""
    cols = len(header)
    widths = widths or [max(len(str(r[i])) for r in list(rows) + [header]) for i in range(cols)]

    def cut(s, w):
        s = str(s)
        return s if len(s) <= w else s[: max(w - 1, 0)] + "…"

    lines = ["  ".join(cut(h, w).ljust(w) for h, w in zip(header, widths)).rstrip()]
    for r in rows:
        lines.append("  ".join(cut(c, w).ljust(w) for c, w in zip(r, widths)).rstrip())
    return "\n".join(lines)


def progress(iterable, desc: str, unit: str, enabled=None, total=None, min_items: int = 2):
    """``iterable`` wrapped in a tqdm bar on stderr, only for a person watching a terminal.

    ``enabled=None`` means: when stderr is a TTY.  Short work (fewer than ``min_items``) gets
    no bar.
    """
    if enabled is None:
        enabled = sys.stderr.isatty()
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)
    if not enabled or (total is not None and total < min_items):
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, unit=unit, leave=False, file=sys.stderr)
