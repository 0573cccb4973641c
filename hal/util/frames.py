"""Whose frame is this: torch's, hal's, the standard library's, or the user's code.

One rule for every place hal points at the user's line (redirections in ``hal run``'s report,
the emulator's fallback warnings, ``hal.ops`` and ``hal.fallback`` notices, op traces) and for
the redirection's "torch's own code sees the truth": a frame is told apart by the module its
code belongs to (``f_globals["__name__"]``), one ``sys._getframe`` and a prefix test (about
0.2 µs a call; ``bench/bench_redirect_overhead.py``).
"""
from __future__ import annotations

import functools
import os
import sys
from types import FrameType
from typing import Optional

_getframe = sys._getframe
#: modules whose calls get torch's real answers and are never the user's line: torch, hal, op_coverage, and
#: triton (torch.compile's GPU code generator: inductor asks it for its active driver, and its CUDA driver's
#: ``torch.cuda.is_available()`` is a question about a real GPU to run kernels on)
INTERNAL_PREFIXES = ("torch.", "hal.", "op_coverage.", "triton.")
INTERNAL_NAMES = frozenset({"torch", "hal", "op_coverage", "triton"})
#: not the user's code either: the standard library, and typing_extensions (its backport,
#: whose @deprecated wraps torch.cuda.amp's classes)
STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"runpy", "contextlib", "functools",
                                                                 "threading", "multiprocessing",
                                                                 "typing_extensions"}


def is_internal(name: Optional[str]) -> bool:
    """True for a module name that belongs to torch, hal, op_coverage or triton."""
    return bool(name) and (name in INTERNAL_NAMES or name.startswith(INTERNAL_PREFIXES))


def from_inside(depth: int = 2) -> bool:
    """True when the frame ``depth`` levels up (2: the caller of the function calling this)
    runs torch's or hal's own code."""
    name = _getframe(depth).f_globals.get("__name__")
    return bool(name) and (name in INTERNAL_NAMES or name.startswith(INTERNAL_PREFIXES))


@functools.lru_cache(maxsize=1)
def internal_dirs() -> tuple:
    """The folders of torch's, hal's and op_coverage's own files (each ending in the path separator)."""
    import torch

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../hal
    dirs = [here, os.path.join(os.path.dirname(here), "op_coverage"), os.path.dirname(os.path.abspath(torch.__file__))]
    return tuple(d + os.sep for d in dirs)


def is_internal_file(path: str) -> bool:
    """The same rule for a file name alone (a traceback's text): torch's, hal's or op_coverage's file,
    or frozen import machinery."""
    return path.startswith("<") or path.startswith(internal_dirs())


def is_user(frame: FrameType) -> bool:
    """True for a frame of the user's code: neither torch, hal, the standard library nor frozen
    import machinery (the user's script, or a third-party library it called)."""
    name = frame.f_globals.get("__name__") or ""
    if name in INTERNAL_NAMES or name.startswith(INTERNAL_PREFIXES) or name.partition(".")[0] in STDLIB:
        return False
    return not frame.f_code.co_filename.startswith("<frozen")


def user_frame(depth: int = 1) -> Optional[FrameType]:
    """The innermost frame of the user's code, starting ``depth`` levels up (1: the caller of
    this function); None when there is none (hal's own start-up, a thread torch started)."""
    f = _getframe(depth)
    while f is not None and not is_user(f):
        f = f.f_back
    return f


@functools.lru_cache(maxsize=256)
def short_path(path: str) -> str:
    """*path* relative to the current folder when it lies below it, else as it is."""
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
    return path if rel.startswith("..") else rel


def user_site(depth: int = 1) -> Optional[str]:
    """``file:line`` of :func:`user_frame` (the path shortened), or None."""
    f = user_frame(depth + 1)
    return None if f is None else f"{short_path(f.f_code.co_filename)}:{f.f_lineno}"


def user_stacklevel(depth: int = 1) -> int:
    """The ``stacklevel`` that makes a warning raised ``depth`` frames up point at the user's line
    (the outermost frame when no frame is the user's)."""
    f, level = _getframe(depth), 1
    while f is not None and not is_user(f):
        if f.f_back is None:
            break
        f, level = f.f_back, level + 1
    return level


def torch_context() -> str:
    """Where an op with no caller's frame on the stack comes from: the backward node torch's
    autograd engine is running (``"backward of MseLossBackward0"``), else torch's own code."""
    import torch

    node = torch._C._current_autograd_node() if hasattr(torch._C, "_current_autograd_node") else None
    return f"backward of {node.name()}" if node is not None else "torch's own code"
