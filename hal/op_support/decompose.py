"""A device kernel made of a ``torch._decomp`` decomposition: shared by the emulator's decomposition
route (:mod:`hal.emu._dispatch`) and :mod:`hal.fallback` (decompositions on a vendor's device).

The kernel runs the decomposition, whose pieces dispatch again (each to the device's own kernel, or
to another decomposition).  It falls back to ``otherwise`` (the host, the vendor's behaviour...) when

* the decomposition re-enters the same op on this thread (it calls itself on other arguments);
* it returns ``NotImplemented`` (it declines this call);
* it raises, unless the op writes to an input in place (it may have written part of it already:
  the error is raised) -- the op is then marked broken and goes to ``otherwise`` from then on.

Each call is counted in ``counts`` (unless ``counting()`` says no) and ``announce(op)`` is called
on an op's first counted use.
"""
from __future__ import annotations

import threading
from typing import Callable, Dict, Optional

import torch

_tls = threading.local()


class Uses:
    """Per-op use counts of one owner's decomposition kernels (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Dict[str, int] = {}
        #: ops whose decomposition failed once: they go to ``otherwise`` from then on
        self.broken: set = set()

    def add(self, op: str) -> bool:
        """Count one use; True on the op's first."""
        with self.lock:
            first = op not in self.counts
            self.counts[op] = self.counts.get(op, 0) + 1
        return first

    def snapshot(self) -> Dict[str, int]:
        with self.lock:
            return dict(self.counts)

    def reset(self) -> None:
        with self.lock:
            self.counts.clear()


def writes_input(op: torch._ops.OpOverload) -> bool:
    """True for in-place ops (an argument written that is not an ``out=``)."""
    return any(a.alias_info is not None and a.alias_info.is_write and not a.is_out for a in op._schema.arguments)


def decomposition_kernel(op: torch._ops.OpOverload, decomp: Callable, qualified: str, otherwise: Callable,
                         uses: Uses, announce: Optional[Callable[[str], None]] = None,
                         counting: Callable[[], bool] = lambda: True) -> Callable:
    """A kernel for ``qualified`` (``aten::gelu``) that runs ``decomp``; see the module docstring."""
    in_place = writes_input(op)

    def kernel(*args, **kwargs):
        active = getattr(_tls, "active", None)
        if active is None:
            active = _tls.active = set()
        if qualified in active or qualified in uses.broken:
            return otherwise(*args, **kwargs)
        if counting() and uses.add(qualified) and announce is not None:
            announce(qualified)
        active.add(qualified)
        try:
            out = decomp(*args, **kwargs)
            if out is not NotImplemented:
                return out
            # the decomposition declines this call (e.g. an argument it does not cover)
        except Exception:
            if in_place:  # it may have written part of its input already
                raise
            uses.broken.add(qualified)  # the decomposition does not cover this call
        finally:
            active.discard(qualified)
        return otherwise(*args, **kwargs)
    return kernel
