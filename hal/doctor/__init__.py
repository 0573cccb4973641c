"""``hal doctor``: the environment checklist, each check in a subprocess with a hard time limit.

::

    report = hal.doctor.run(data=["/datasets/imagenet"])
    report["status"]          # "OK" | "WARN" | "FAIL"

Checks (in order): ``backends``, ``devices``, ``versions``, ``data``, ``tiny_network``,
``all_reduce_2``, ``all_reduce_4``, ``all_reduce_8``, ``transport``.  Exit codes of the
command: 0 OK, 1 WARN, 2 FAIL.  :mod:`hal.doctor.patrol` repeats the quick checks beside a
running job (``hal doctor --every 300 --out health.jsonl``).  Under a multi-node torchrun,
``hal doctor`` runs the cluster checks of :mod:`hal.doctor.cluster` instead (software, clocks,
reachability, transport, process group, links, scale ladder; report schema
``hal.doctor.cluster/1``).
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, Iterable, List, Optional, Union

SCHEMA = "hal.doctor/1"
ORDER = ("backends", "devices", "versions", "redirect", "data", "tiny_network", "all_reduce_2", "all_reduce_4",
         "all_reduce_8", "transport")
EXIT_CODES = {"OK": 0, "WARN": 1, "FAIL": 2}
_RANK = {"SKIP": 0, "OK": 0, "WARN": 1, "FAIL": 2}


def run(checks: Optional[Iterable[str]] = None, data: Iterable[str] = (),
        timeout: Union[None, float, Dict[str, float]] = None,
        jobs: int = 2, on_result: Optional[Callable[[str, dict], None]] = None,
        stop: Optional[threading.Event] = None) -> dict:
    """Run the checklist; the library call behind ``hal doctor``.

    :param checks: names to run (default: all, in :data:`ORDER`).
    :param data: paths the ``data`` check must find readable.
    :param timeout: hard limit per check in seconds, for all checks or as ``{name: seconds}``
        (default: each check's own, 30-120 s).
    :param jobs: checks run side by side (the all-reduce checks always run alone, after the rest).
    :param on_result: called with ``(name, result)`` as each check finishes (progress output).
    :param stop: when set, running checks are killed and the rest are not started; they are
        reported as SKIP with ``details.interrupted`` (see :func:`hal.doctor.patrol.patrol`).
    :return: report with schema ``hal.doctor/1``: overall ``status`` and ``exit_code``, ``checks``.
    """
    from hal.doctor.checks import CHECKS

    names = list(ORDER) if checks is None else list(checks)
    unknown = [n for n in names + list(timeout if isinstance(timeout, dict) else ()) if n not in CHECKS]
    if unknown:
        raise ValueError(f"unknown check(s) {', '.join(unknown)}; choose from {', '.join(ORDER)}")
    from hal.doctor.runner import INTERRUPTED, run_check

    def one(name: str) -> dict:
        if isinstance(timeout, dict):
            limit = float(timeout.get(name, CHECKS[name][1]))
        else:
            limit = float(timeout) if timeout is not None else float(CHECKS[name][1])
        kwargs: Dict[str, object] = {}
        if name == "data":
            kwargs["paths"] = list(data)
        if name.startswith("all_reduce_"):
            kwargs["timeout"] = limit
        if stop is not None and stop.is_set():
            res = {"status": "SKIP", "summary": INTERRUPTED, "details": {"interrupted": True}, "seconds": 0.0}
        else:
            res = run_check(name, kwargs, limit, stop)
        res["name"] = name
        res["time_limit_s"] = limit
        if on_result:
            on_result(name, res)
        return res

    start = time.monotonic()
    light = [n for n in names if not n.startswith("all_reduce_")]
    heavy = [n for n in names if n.startswith("all_reduce_")]
    results: Dict[str, dict] = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for name, res in zip(light, pool.map(one, light)):
            results[name] = res
    for name in heavy:
        results[name] = one(name)
    ordered: List[dict] = [results[n] for n in names]
    worst = max((_RANK[r["status"]] for r in ordered), default=0)
    status = {0: "OK", 1: "WARN", 2: "FAIL"}[worst]
    return {"schema": SCHEMA, "status": status, "exit_code": EXIT_CODES[status],
            "seconds": time.monotonic() - start, "checks": ordered}
