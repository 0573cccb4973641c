"""Whose call is this: torch's and hal's own code see the truth, the script sees the redirection.

``torch.cuda.is_available()`` answers True to a CUDA-written script running on another
backend, but torch itself must keep hearing the real answer: on a CUDA build of torch
without a driver, a True given to torch's own code sends it into CUDA (DataLoader pinning,
the optimizers' CUDA-graph health check, ``torch.accelerator``).  The caller is told apart
by the module its frame belongs to: one ``sys._getframe`` and a prefix test on
``f_globals["__name__"]`` (about 0.2 µs a call; ``bench/bench_redirect_overhead.py``).
"""
from __future__ import annotations

import functools
import os
import sys
from typing import Optional

_getframe = sys._getframe
#: modules whose calls get torch's real answers and never appear in the run report
INTERNAL_PREFIXES = ("torch.", "hal.", "op_coverage.")
INTERNAL_NAMES = frozenset({"torch", "hal", "op_coverage"})
#: not the user's code either: the standard library, and typing_extensions (its backport,
#: whose @deprecated wraps torch.cuda.amp's classes)
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"runpy", "contextlib", "functools",
                                                                  "threading", "multiprocessing",
                                                                  "typing_extensions"}


def is_internal(name: Optional[str]) -> bool:
    """True for a module name that belongs to torch or hal."""
    return bool(name) and (name in INTERNAL_NAMES or name.startswith(INTERNAL_PREFIXES))


def from_inside(depth: int = 2) -> bool:
    """True when the frame ``depth`` levels up (2: the caller of the function calling this)
    runs torch's or hal's own code."""
    name = _getframe(depth).f_globals.get("__name__")
    return bool(name) and (name in INTERNAL_NAMES or name.startswith(INTERNAL_PREFIXES))


@functools.lru_cache(maxsize=256)
def _short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
    return path if rel.startswith("..") else rel


def user_site(depth: int = 1) -> Optional[str]:
    """``file:line`` of the innermost frame that is neither torch, hal nor the standard
    library (the user's script, or a third-party library it called); None when there is
    none (hal's own start-up, a thread torch started)."""
    f = _getframe(depth)
    while f is not None:
        name = f.f_globals.get("__name__") or ""
        if not (name in INTERNAL_NAMES or name.startswith(INTERNAL_PREFIXES)) and name.partition(".")[0] not in _STDLIB:
            filename = f.f_code.co_filename
            if not filename.startswith("<frozen"):
                return f"{_short(filename)}:{f.f_lineno}"
        f = f.f_back
    return None
