"""Step timing: wall time per step, with optional device synchronisation, and percentiles."""
from __future__ import annotations

import collections
import time
from typing import Deque, Optional


def percentile(values, q: float) -> Optional[float]:
    """The ``q``-th percentile (0..100) by linear interpolation, as numpy's default; None if empty."""
    xs = sorted(values)
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


class StepTimer:
    """Measures the time of each training step.

    Either bracket a step (``with timer: ...``) or call :meth:`lap` once per step, which
    measures from the previous lap.  ``sync=True`` waits for the device
    (``hal.synchronize()``) before reading the clock, so queued device work is counted.
    The last ``window`` step times feed :meth:`p50` / :meth:`p99`.
    """

    def __init__(self, window: int = 100, sync: bool = False):
        if window < 1:
            raise ValueError(f"window={window}: must be at least 1 step")
        self.sync = sync
        self.times: Deque[float] = collections.deque(maxlen=window)
        self.last: Optional[float] = None
        self._t0: Optional[float] = None

    def _now(self) -> float:
        if self.sync:
            from hal.device import synchronize
            synchronize()
        return time.perf_counter()

    def start(self) -> None:
        """Mark the start of a step (and of the first lap)."""
        self._t0 = self._now()

    def stop(self) -> float:
        """End the step begun by :meth:`start`; return its seconds."""
        if self._t0 is None:
            raise RuntimeError("StepTimer.stop() without start(); call start() first or use lap()")
        t = self._now()
        dt, self._t0 = t - self._t0, None
        self._record(dt)
        return dt

    def lap(self) -> Optional[float]:
        """Seconds since the previous lap (None on the first call, which only starts the clock)."""
        t = self._now()
        prev, self._t0 = self._t0, t
        if prev is None:
            return None
        dt = t - prev
        self._record(dt)
        return dt

    def _record(self, dt: float) -> None:
        self.last = dt
        self.times.append(dt)

    def p50(self) -> Optional[float]:
        return percentile(self.times, 50)

    def p99(self) -> Optional[float]:
        return percentile(self.times, 99)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
