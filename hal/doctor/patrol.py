"""Health patrol: the quick doctor checks, repeated beside a running job, one JSON line per round.

::

    hal doctor --every 300 --out health.jsonl

Each round runs :data:`PATROL_CHECKS` (or the ``--check`` ones) through
:func:`hal.doctor.run` and appends one record (schema ``hal.doctor.patrol/1``, published
as ``hal/data/doctor-patrol.schema.json``) to the file, fsynced, so the moment a node
turned sub-healthy is on record.  Setting ``stop`` (the command does on SIGINT / SIGTERM)
ends the patrol between rounds, or kills the checks of the round in progress, which is
then not recorded: the file never gets a torn line from a clean stop.
``hal metrics summary run.jsonl --health health.jsonl`` places throughput drops next to
the records near them (:func:`near`).
"""
from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, List, Optional, Sequence, Union

from hal._errors import HalError
from hal.util.io import append_jsonl

SCHEMA = "hal.doctor.patrol/1"
#: the checks a patrol round runs by default: quick, and able to change while a job runs
#: (``data`` joins them when paths are given); versions and the 4-/8-rank all-reduce are left out
PATROL_CHECKS = ("devices", "tiny_network", "all_reduce_2", "transport")


def schema_path() -> Path:
    """Path of the JSON Schema of a patrol record."""
    return Path(__file__).resolve().parent.parent / "data" / "doctor-patrol.schema.json"


def round_record(report: dict, number: int, started: float, ended: float, every_s: Optional[float]) -> dict:
    """The patrol record of one :func:`hal.doctor.run` report."""
    return {"schema": SCHEMA, "round": number, "host": socket.gethostname(), "time_unix": started,
            "end_time_unix": ended, "seconds": report["seconds"], "every_s": every_s,
            "status": report["status"], "exit_code": report["exit_code"],
            "checks": [{"name": c["name"], "status": c["status"], "summary": c["summary"],
                        "seconds": c.get("seconds")} for c in report["checks"]]}


def patrol(every: float, count: Optional[int] = None, out: Optional[Union[str, Path]] = None,
           checks: Optional[Iterable[str]] = None, data: Sequence[str] = (), timeout=None, jobs: int = 2,
           stop: Optional[threading.Event] = None,
           on_round: Optional[Callable[[dict], None]] = None) -> dict:
    """Run a doctor round every ``every`` seconds (start to start) until ``count`` rounds or ``stop``.

    :param out: file each round's record is appended to (``None``: records only go to ``on_round``).
    :param checks: checks per round (default :data:`PATROL_CHECKS`, plus ``data`` with ``data``).
    :param timeout: / jobs: as for :func:`hal.doctor.run`.
    :return: ``{"rounds": n recorded, "exit_code": worst round's, "stopped_in_round": n or None}``.
    """
    if every <= 0:
        raise HalError(f"every={every}: the patrol interval must be a positive number of seconds")
    if count is not None and count < 1:
        raise HalError(f"count={count}: give at least 1 round, or none to patrol until stopped")
    from hal.doctor import run

    names = list(checks) if checks else list(PATROL_CHECKS) + (["data"] if data else [])
    stop = stop or threading.Event()
    worst, number, stopped_in = 0, 0, None
    while count is None or number < count:
        started_mono, started = time.monotonic(), time.time()
        report = run(checks=names, data=data, timeout=timeout, jobs=jobs, stop=stop)
        if stop.is_set():
            stopped_in = number + 1
            break
        number += 1
        rec = round_record(report, number, started, time.time(), every)
        if out is not None:
            append_jsonl(out, rec)
        worst = max(worst, rec["exit_code"])
        if on_round:
            on_round(rec)
        if count is not None and number >= count:
            break
        if stop.wait(max(0.0, started_mono + every - time.monotonic())):
            break
    return {"rounds": number, "exit_code": worst, "stopped_in_round": stopped_in}


def read_health(path) -> tuple:
    """``(records, notes)`` of a patrol file; a torn last line is skipped with a note."""
    from hal.util.io import read_jsonl

    return read_jsonl(path, SCHEMA, "hal doctor --every SECONDS --out FILE")


def brief(record: dict, start: Optional[float] = None) -> dict:
    """A patrol record cut to what a summary shows: ``{round, host, time_unix, end_time_unix,
    offset_s, status, not_ok}``; ``offset_s`` is the round's start minus ``start`` (None
    without it) and ``not_ok`` lists the checks that were neither OK nor SKIP."""
    t0 = record["time_unix"]
    return {"round": record.get("round"), "host": record.get("host"), "time_unix": t0,
            "end_time_unix": record.get("end_time_unix") or t0,
            "offset_s": None if start is None else t0 - start, "status": record["status"],
            "not_ok": [c for c in record.get("checks", []) if c["status"] not in ("OK", "SKIP")]}


def near(records: List[dict], start: Optional[float], end: Optional[float], margin: float) -> List[dict]:
    """Patrol rounds that overlap ``[start - margin, end + margin]`` (unix times), in time order.

    Each comes back as :func:`brief` gives it, ``offset_s`` relative to ``start``.
    """
    if start is None:
        return []
    end = start if end is None else end
    out = []
    for r in records:
        t0 = r["time_unix"]
        t1 = r.get("end_time_unix") or t0
        if t1 >= start - margin and t0 <= end + margin:
            out.append(brief(r, start))
    return sorted(out, key=lambda x: x["time_unix"])
