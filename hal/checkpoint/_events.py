"""Why a job restarted: failure and resume events kept beside the checkpoints.

``<dir>/events.jsonl`` holds one JSON record per event (schema ``hal.checkpoint.event/1``):

* ``failure`` -- a rank left the training loop with an exception (the collective that
  timed out waiting for a hung rank, the error a dead peer caused, the script's own);
* ``save_failed`` -- a save could not be written (disk full...) and training went on;
* ``resume`` -- a (re)started group resumed from a checkpoint;
* ``closed`` -- the loop ended normally;
* ``killed`` -- ``hal run --checkpoint``'s rehearsed failure (``HAL_CHECKPOINT_KILL_AT``): the rank that
  kills itself says so first;
* ``script_checkpointer`` -- ``hal run --checkpoint`` found the script checkpointing itself (a note).

A rank killed by a signal (SIGKILL, the OOM killer, a stopped rank that its launcher
killed) cannot write anything: at resume, the ranks of the failed attempt that left no
``failure`` record are named as "no report".  Lines are appended with ``O_APPEND`` and
fsynced, one ``write`` each (:func:`hal.util.io.append_jsonl`), so ranks writing at once never
interleave within a line.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import List, Optional

from hal._errors import HalError
from hal.util.io import append_jsonl

log = logging.getLogger("hal.checkpoint")

SCHEMA = "hal.checkpoint.event/1"
EVENTS = "events.jsonl"


def attempt() -> int:
    """How many times torchrun's agent restarted this group (0 on the first start)."""
    try:
        return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    except ValueError:
        return 0


def record(root, event: str, *, rank: int, step: Optional[int], **fields) -> dict:
    """Append one event to ``<root>/events.jsonl``; never raises (a full disk must not hide the fault)."""
    rec = {"schema": SCHEMA, "event": event, "time_unix": time.time(), "host": socket.gethostname(),
           "pid": os.getpid(), "rank": rank, "attempt": attempt(),
           "run_id": os.environ.get("TORCHELASTIC_RUN_ID"), "step": step, **fields}
    path = Path(root) / EVENTS
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        append_jsonl(path, rec)
    except (OSError, HalError) as exc:
        log.warning("hal.checkpoint: could not record the %s event in %s (%s)", event, path, exc)
    return rec


def read(root) -> List[dict]:
    """Every event under ``root``, oldest first; unreadable lines are skipped."""
    path = Path(root) / EVENTS
    out = []
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("schema") == SCHEMA:
            out.append(rec)
    return out


def since_last_start(events: List[dict]) -> List[dict]:
    """The events after the last ``resume`` / ``closed`` / fresh start that tell what ended the previous
    attempt (``failure``, ``save_failed``, ``killed``; not ``hal run --checkpoint``'s notes)."""
    tail: List[dict] = []
    for rec in events:
        if rec.get("event") in ("resume", "closed", "start"):
            tail = []
        elif rec.get("event") in ("failure", "save_failed", "killed"):
            tail.append(rec)
    return tail


def started_world_size(events: List[dict]) -> Optional[int]:
    """The world size the last start or resume recorded: that of the attempt :func:`since_last_start`
    ended (an elastic job may come back with fewer ranks); None where none is recorded."""
    for rec in reversed(events):
        if rec.get("event") in ("resume", "start"):
            size = rec.get("world_size")
            return size if isinstance(size, int) else None
    return None


def _short(error: Optional[dict]) -> str:
    if not error:
        return ""
    msg = " ".join(str(error.get("message", "")).split())
    if len(msg) > 160:
        msg = msg[:157] + "..."
    return f"{error.get('type', 'Error')}: {msg}" if msg else str(error.get("type", "Error"))


def restart_lines(tail: List[dict], world_size: int, resumed_step: int, resumed_from: str,
                  restarted: bool = False) -> List[str]:
    """One line per failure of the attempt that ended, one per silent rank, one for the resume."""
    failures = [r for r in tail if r.get("event") in ("failure", "killed")]
    last = max((r["step"] for r in tail if isinstance(r.get("step"), int)), default=None)
    lines = [f"rank {r.get('rank')} failed at step {r.get('step')} on {r.get('host')} "
             f"(attempt {r.get('attempt')}): {_short(r.get('error'))}" if r["event"] == "failure" else
             f"rank {r.get('rank')} was killed at step {r.get('step')} on {r.get('host')} (attempt "
             f"{r.get('attempt')}): {r.get('why')}" for r in failures]
    reported = {r.get("rank") for r in failures}
    if failures:
        lines += [f"rank {rank} sent no report (last step seen: {last}): it was ended by a signal "
                  "(SIGKILL, the OOM killer, or its launcher killing a hung rank)"
                  for rank in range(world_size) if rank not in reported]
    elif restarted:
        lines.append("no rank reported a failure: a rank was ended by a signal (SIGKILL, the OOM killer) "
                     "and torchrun stopped the others; torchrun's log names it ('failed (exitcode: -9) "
                     "local_rank: N')")
    else:
        lines.append("the previous run left no failure report: it was killed as a whole (a signal to "
                     "the job, a lost node) or stopped without closing its Checkpointer")
    lost = f", {last - resumed_step} step(s) to redo" if last is not None and last >= resumed_step else ""
    lines.append(f"resumed at step {resumed_step} from {resumed_from}{lost}")
    return lines
