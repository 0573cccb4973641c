"""Errors of ``hal.dist``.  Each names the thing, the reason and the fix."""
from __future__ import annotations

from typing import Dict, List, Sequence

from hal._errors import HalError


class DistError(HalError):
    """A distributed set-up or collective failed; the message says why and what to do."""


class RendezvousError(DistError):
    """Ranks could not meet: store unreachable, ranks missing, or inconsistent world sizes."""


class CollectiveTimeout(DistError):
    """A collective did not complete in time.

    ``missing`` lists the ranks that never reached it (empty when every rank arrived but the
    transport itself stalled).
    """

    def __init__(self, op: str, missing: Sequence[int], timeout_s: float, world_size: int,
                 detail: str = ""):
        self.op = op
        self.missing: List[int] = list(missing)
        self.timeout_s = timeout_s
        self.world_size = world_size
        if self.missing:
            ranks = ", ".join(str(r) for r in self.missing)
            msg = (f"{op}: rank{'s' if len(self.missing) > 1 else ''} {ranks} did not join within "
                   f"{timeout_s:g} s (world size {world_size}); a rank that never reaches a "
                   f"collective has usually crashed, is stuck (data loading, I/O) or took another "
                   f"code path: read that rank's log")
        else:
            msg = (f"{op}: every rank arrived but the collective did not complete within "
                   f"{timeout_s:g} s (world size {world_size}); the transport stalled: run "
                   f"'hal doctor' on each node and check the network")
        if detail:
            msg += f" ({detail})"
        super().__init__(msg)


class CollectiveMismatch(DistError):
    """Ranks called different collectives, or the same one with different shapes or dtypes.

    ``calls`` maps each distinct call description to the ranks that made it.
    """

    def __init__(self, op: str, calls: Dict[str, List[int]]):
        self.op = op
        self.calls = calls
        parts = "; ".join(f"rank{'s' if len(r) > 1 else ''} {', '.join(map(str, r))}: {c}"
                          for c, r in calls.items())
        super().__init__(f"{op}: ranks disagree on the call ({parts}); every rank must pass the "
                         f"same collective with the same shape and dtype")
