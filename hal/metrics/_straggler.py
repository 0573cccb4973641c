"""Live straggler detection: which rank is slower than the others, named while training runs.

Every ``every`` logged steps, each rank other than 0 posts its recent step times (step
number and seconds, a few hundred bytes of JSON) under one key of the torch.distributed
store; rank 0 reads those keys once they all exist and judges every step that all ranks
have reported.  A rank whose step time is at least ``factor`` x the median of the other
ranks' for ``steps`` consecutive judged steps is a straggler: rank 0 logs one warning
through the logger ``hal.metrics`` and returns an event for its JSONL record.

Nothing here waits for another rank: a rank that logs other steps, or has no logger at
all, only leaves steps unjudged.  The cost per rank is one store write every ``every``
steps; rank 0 adds one store read and a sort of the ranks' times per judged step.
"""
from __future__ import annotations

import json
import logging
import math
from collections import deque
from typing import Deque, Dict, List, Optional, Tuple

LOGGER = logging.getLogger("hal.metrics")
EVENT_NAMED = "straggler"
EVENT_RECOVERED = "straggler_recovered"
_instances: Dict[str, int] = {}


def _median_without(xs: List[float], i: int) -> float:
    """Median of sorted ``xs`` without its element at index ``i`` (``len(xs) >= 2``)."""
    m = len(xs) - 1

    def at(p):
        return xs[p] if p < i else xs[p + 1]
    return (at((m - 1) // 2) + at(m // 2)) / 2.0


def _secs(t: float) -> str:
    return f"{t:.3g} s"


class StragglerJudge:
    """Rank 0's verdicts from per-rank step times (no communication; see :class:`StragglerWatch`).

    :param world: number of ranks.
    :param factor: a rank is slow in a step when its time is at least ``factor`` x the
        median of the other ranks' times in that step.
    :param steps: consecutive slow steps before the rank is named.
    :param keep: steps kept per rank while waiting for the others (the oldest go first, so a
        rank that never reports costs rank 0 bounded memory).
    """

    def __init__(self, world: int, factor: float, steps: int, keep: int = 4096):
        self.world, self.factor, self.steps, self.keep = world, factor, steps, keep
        self.times: Dict[int, Dict[int, Optional[float]]] = {r: {} for r in range(world)}
        self.latest: Dict[int, int] = {}
        self.judged: Optional[int] = None
        self.streaks: Dict[int, dict] = {}

    def add(self, rank: int, steps, times) -> None:
        """Step times of ``rank`` (``None`` for a step without a time)."""
        own = self.times[rank]
        for s, t in zip(steps, times):
            s = int(s)
            if self.judged is None or s > self.judged:
                own[s] = None if t is None else float(t)
            self.latest[rank] = max(self.latest.get(rank, s), s)
        if len(own) > self.keep:
            for s in sorted(own)[:len(own) - self.keep]:
                del own[s]

    def judge(self) -> List[dict]:
        """Judge every step all ranks have reported since the last call; return the events."""
        events: List[dict] = []
        for s in sorted(self.times[0]):
            if all(s in self.times[r] for r in range(self.world)):
                self._judge_step(s, events)
            elif not all(self.latest.get(r, -math.inf) >= s for r in range(self.world)):
                break  # a rank has not reported this far yet
            self.judged = s  # (or a rank skipped this step: nothing to compare)
        if self.judged is not None:
            for r in range(self.world):
                for s in [s for s in self.times[r] if s <= self.judged]:
                    del self.times[r][s]
        return events

    def _judge_step(self, step: int, events: List[dict]) -> None:
        ts = [self.times[r][step] for r in range(self.world)]
        if any(t is None for t in ts):
            return
        order = sorted(range(self.world), key=lambda r: ts[r])
        xs = [ts[r] for r in order]
        for pos, r in enumerate(order):
            med = _median_without(xs, pos)
            st = self.streaks.get(r)
            if med > 0 and ts[r] >= self.factor * med:
                if st is None:
                    st = self.streaks[r] = {"first_step": step, "n": 0, "sum_t": 0.0, "sum_med": 0.0,
                                            "named": False}
                st["last_step"] = step
                st["n"] += 1
                st["sum_t"] += ts[r]
                st["sum_med"] += med
                if not st["named"] and st["n"] >= self.steps:
                    st["named"] = True
                    events.append(self._event(EVENT_NAMED, r, st))
            elif st is not None:
                if st["named"]:
                    events.append(self._event(EVENT_RECOVERED, r, st))
                del self.streaks[r]

    def _event(self, kind: str, rank: int, st: dict) -> dict:
        t, med = st["sum_t"] / st["n"], st["sum_med"] / st["n"]
        return {"type": kind, "rank": rank, "first_step": st["first_step"], "last_step": st["last_step"],
                "steps": st["n"], "step_time_s": t, "others_median_s": med, "ratio": t / med,
                "factor": self.factor}


def describe(event: dict) -> str:
    """The log line of an event, e.g. ``rank 1 is a straggler: step time 0.31 s = 2.4x ...``."""
    what = (f"step time {_secs(event['step_time_s'])} = {event['ratio']:.1f}x the median of the other "
            f"ranks for {event['steps']} steps (steps {event['first_step']}-{event['last_step']})")
    if event["type"] == EVENT_NAMED:
        return f"rank {event['rank']} is a straggler: {what}"
    return f"rank {event['rank']} is no longer a straggler: {what}"


def _default_store():
    from torch.distributed import distributed_c10d
    return distributed_c10d._get_default_store()


class StragglerWatch:
    """One rank's part of live straggler detection (see the module docstring).

    :param run: run name (part of the store keys).
    :param every: post (other ranks) or read and judge (rank 0) every this many steps.
    :param store: a ``torch.distributed.Store`` (default: the default process group's).
    """

    def __init__(self, run: str, rank: int, world: int, factor: float, steps: int, every: int,
                 store=None):
        self.rank, self.world, self.every = rank, world, every
        self.run = run
        n = _instances[run] = _instances.get(run, 0) + 1  # loggers made in the same order on every rank
        self.prefix = f"hal.metrics/straggler/{run}/{n}/"
        self.keys = [f"{self.prefix}rank{r}" for r in range(1, world)]
        self.recent: Deque[Tuple[int, Optional[float]]] = deque(maxlen=max(4 * every, steps + 2 * every))
        self.judge = StragglerJudge(world, factor, steps) if rank == 0 else None
        self.calls = 0
        self.store = store
        self.off: Optional[str] = None
        if self.store is None:
            self._guard(lambda: setattr(self, "store", _default_store()), "the store could not be found")

    def _guard(self, fn, what):
        if self.off is not None:
            return None
        try:
            return fn()
        except Exception as exc:  # detection is a help, never a reason for training to stop
            self.off = f"{what} ({type(exc).__name__}: {exc})"
            LOGGER.warning("straggler detection is off for run %s on rank %d: %s; "
                           "pass straggler_factor=None to MetricsLogger to silence this",
                           self.run, self.rank, self.off)
            return None

    def add(self, step: int, step_time_s: Optional[float]) -> List[dict]:
        """Note this rank's step; on rank 0, return the events judged now (usually none)."""
        self.recent.append((int(step), step_time_s))
        self.calls += 1
        if self.off is not None or self.calls % self.every:
            return []
        if self.judge is None:
            self._post()
            return []
        self.judge.add(0, [s for s, _ in self.recent], [t for _, t in self.recent])
        self.recent.clear()
        values = self._guard(self._read, "reading the other ranks' step times failed")
        if values is None:
            return []
        for r, raw in enumerate(values, 1):
            got = json.loads(raw)
            self.judge.add(r, got["steps"], got["times"])
        events = self.judge.judge()
        for e in events:
            (LOGGER.warning if e["type"] == EVENT_NAMED else LOGGER.info)("%s", describe(e))
        return events

    def _post(self) -> None:
        payload = json.dumps({"steps": [s for s, _ in self.recent], "times": [t for _, t in self.recent]})
        self._guard(lambda: self.store.set(f"{self.prefix}rank{self.rank}", payload),
                    "posting this rank's step times failed")

    def _read(self):
        if not self.store.check(self.keys):
            return None  # not every rank has posted yet
        if hasattr(self.store, "multi_get"):
            return self.store.multi_get(self.keys)
        return [self.store.get(k) for k in self.keys]

    def close(self) -> None:
        """Post the last step times (ranks other than 0)."""
        if self.judge is None and self.calls % self.every:
            self._post()
