"""Find where throughput dropped in a run's metrics, and which ranks straggled.

A step is *slow* when its throughput (samples/s, else tokens/s, else 1/step time) falls
below ``threshold`` times the median of the previous ``window`` normal steps; runs of
consecutive slow steps are reported as one drop.  With several files (one per rank), a
rank whose median step time exceeds the fastest rank's by more than ``straggler_ratio``
is reported as a straggler.  Stragglers named live during the run (the ``events`` of rank
0's records, see ``MetricsLogger(straggler_factor=...)``) are listed with their steps.

Where the records carry communication time (``MetricsLogger.watch``), each rank gets the
share of its step time spent in collectives and in *exposed* collectives (the training
waited for them); a rank whose exposed share is above ``comm_bound`` is communication-bound,
unless another rank waited less and is below it (then the ranks above wait for that slower
rank, not for the network: ``comm_waiting_ranks``), and each drop gets the exposed share of its own steps (``comm_bound`` when that share is above
``comm_bound`` and above the whole run's: the drop is the network's).
"""
from __future__ import annotations

import statistics
from collections import deque
from typing import List, Optional, Sequence

from hal._errors import HalError
from hal.util.io import read_jsonl as read_records
from hal.metrics._logger import SCHEMA
from hal.metrics._timer import percentile

SUMMARY_SCHEMA = "hal.metrics.summary/1"

#: what to try when a run is communication-bound, in the order to try it
COMM_ADVICE = (
    "accumulate gradients over several micro-batches per optimizer step (DDP: model.no_sync() on all but the "
    "last; FSDP2: model.set_requires_gradient_sync(False)), or use larger steps: the same communication then "
    "covers more computation",
    "DDP: tune DistributedDataParallel(bucket_cap_mb=...) (25 by default): smaller buckets start the "
    "all-reduce earlier in the backward pass and leave less of it after the last layer; larger ones cost "
    "fewer launches",
    "node placement: `hal bench --pairs` and `hal doctor` across the nodes name a slow link or node; regroup "
    "the nodes (or leave the slow one out) so the ranks that communicate do it over the fast links",
)


def read_jsonl(path) -> tuple:
    """``(records, notes)`` of a metrics file; a torn last line is skipped with a note."""
    records, notes = read_records(path, SCHEMA, "hal.metrics.MetricsLogger")
    if not records:
        raise HalError(f"{path}: no {SCHEMA} records; the run logged nothing yet")
    return records, notes


def _metric(records) -> str:
    for key in ("samples_per_s", "tokens_per_s"):
        if any(r.get(key) for r in records):
            return key
    return "steps_per_s"


def _value(rec, metric) -> Optional[float]:
    if metric == "steps_per_s":
        t = rec.get("step_time_s")
        return 1.0 / t if t else None
    return rec.get(metric)


def find_drops(records, metric: str, threshold: float = 0.7, window: int = 20,
               min_history: int = 5) -> List[dict]:
    """Runs of consecutive steps whose throughput fell below ``threshold`` x the trailing median."""
    history: deque = deque(maxlen=window)
    drops, cur = [], None
    for rec in records:
        v = _value(rec, metric)
        if v is None:
            continue
        base = statistics.median(history) if len(history) >= min(min_history, window) else None
        if base and v < threshold * base:
            if cur is None:
                cur = {"start_step": rec["step"], "end_step": rec["step"], "steps": 0,
                       "min_value": v, "baseline": base, "start_time_unix": rec.get("time_unix")}
            cur["end_step"] = rec["step"]
            cur["end_time_unix"] = rec.get("time_unix")
            cur["steps"] += 1
            cur["min_value"] = min(cur["min_value"], v)
            continue
        if cur is not None:
            cur["ratio"] = cur["min_value"] / cur["baseline"]
            drops.append(cur)
            cur = None
        history.append(v)
    if cur is not None:
        cur["ratio"] = cur["min_value"] / cur["baseline"]
        drops.append(cur)
    return drops


def live_stragglers(path, records) -> List[dict]:
    """Stragglers named during the run, from the ``events`` of ``records``: one entry per episode."""
    out: List[dict] = []
    open_: dict = {}
    for rec in records:
        for ev in rec.get("events") or ():
            kind, rank = ev.get("type"), ev.get("rank")
            if kind == "straggler":
                entry = {"file": str(path), "rank": rank, "first_step": ev["first_step"],
                         "last_step": ev["last_step"], "steps": ev["steps"], "step_time_s": ev["step_time_s"],
                         "others_median_s": ev["others_median_s"], "ratio": ev["ratio"],
                         "factor": ev.get("factor"), "named_at_step": rec["step"],
                         "named_time_unix": rec.get("time_unix"), "recovered_at_step": None}
                open_[rank] = entry
                out.append(entry)
            elif kind == "straggler_recovered" and rank in open_:
                entry = open_.pop(rank)
                entry.update(last_step=ev["last_step"], steps=ev["steps"], step_time_s=ev["step_time_s"],
                             others_median_s=ev["others_median_s"], ratio=ev["ratio"],
                             recovered_at_step=rec["step"])
    return out


def comm_share(records) -> Optional[dict]:
    """Communication of ``records`` as shares of their step time; None when none carries it.

    Only records with both ``step_time_s`` and ``comm_time_s`` count (the first record of a
    run, which only starts the clock, has no step time).
    """
    rows = [r for r in records if r.get("step_time_s") and r.get("comm_time_s") is not None]
    if not rows:
        return None
    step = sum(r["step_time_s"] for r in rows)
    comm = sum(r["comm_time_s"] for r in rows)
    exposed = sum(r.get("comm_exposed_s") or 0.0 for r in rows)
    return {"steps": len(rows), "step_time_s": step, "comm_time_s": comm, "comm_exposed_s": exposed,
            "share": comm / step, "exposed_share": exposed / step,
            "count": sum(r.get("comm_count") or 0 for r in rows),
            "bytes": sum(r.get("comm_bytes") or 0 for r in rows)}


def judge_comm(runs) -> tuple:
    """``(communication-bound ranks, ranks waiting for slower ranks)`` from runs with ``comm``.

    A collective completes when the last rank has joined it, so a rank's exposed time also
    holds its wait for slower ranks.  The rank that waits least is the one the others wait
    for: its exposed share is the network's alone.  When it is below the bound too, the
    ranks above it wait for it (uneven work, a straggler), not for the network.
    """
    judged = [r for r in runs if r.get("comm")]
    above = [r["rank"] for r in judged if r["comm"]["bound"]]
    if above and len(judged) > 1 and not all(r["comm"]["bound"] for r in judged):
        return [], above
    return above, []


def summarize(paths: Sequence, threshold: float = 0.7, window: int = 20,
              straggler_ratio: float = 1.2, health: Sequence = (), health_margin: float = 300.0,
              comm_bound: float = 0.3) -> dict:
    """Summary of one or more metrics files (``hal metrics summary --json`` prints it).

    :param comm_bound: a rank whose exposed communication is above this share of its step
        time is communication-bound (``comm_bound_ranks``, with ``comm_advice``); a drop
        whose own steps are above it says so (``comm_bound`` in the drop).

    :param health: patrol files (``hal doctor --every S --out FILE``): each drop gets the
        rounds that overlap its time window widened by ``health_margin`` seconds, and the
        summary gets a ``health`` section with the rounds that were not OK.
    """
    if not 0 < threshold < 1:
        raise HalError(f"threshold={threshold}: must be between 0 and 1 (0.7 = flag steps below 70% of normal)")
    if window < 1:
        raise HalError(f"window={window}: must be at least 1 step")
    if not 0 < comm_bound < 1:
        raise HalError(f"comm_bound={comm_bound}: must be between 0 and 1 (0.3 = communication-bound when the "
                       "training waits for collectives in more than 30% of its step time)")
    if health_margin < 0:
        raise HalError(f"health_margin={health_margin}: must be 0 or more seconds")
    from hal.doctor.patrol import brief, near, read_health

    rounds, health_notes = [], []
    for h in health:
        recs, notes = read_health(h)
        rounds += recs
        health_notes += notes
    rounds.sort(key=lambda r: r["time_unix"])
    runs, live = [], []
    for p in paths:
        records, notes = read_jsonl(p)
        live += live_stragglers(p, records)
        metric = _metric(records)
        values = [v for v in (_value(r, metric) for r in records) if v is not None]
        times = [r["step_time_s"] for r in records if r.get("step_time_s")]
        peaks = [r["mem_peak_bytes"] for r in records if r.get("mem_peak_bytes") is not None]
        runs.append({
            "file": str(p), "run": records[0].get("run"), "rank": records[0].get("rank"),
            "device": records[0].get("device"), "records": len(records),
            "first_step": records[0]["step"], "last_step": records[-1]["step"],
            "metric": metric, "median": statistics.median(values) if values else None,
            "step_time_p50_s": percentile(times, 50), "step_time_p99_s": percentile(times, 99),
            "step_time_median_s": statistics.median(times) if times else None,
            "mem_peak_bytes": max(peaks) if peaks else None,
            "mem_source": records[-1].get("mem_source"),
            "drops": find_drops(records, metric, threshold, window), "notes": notes})
        comm = comm_share(records)
        if comm is not None:
            comm["bound"] = comm["exposed_share"] > comm_bound
            for d in runs[-1]["drops"]:
                c = comm_share([r for r in records if d["start_step"] <= r["step"] <= d["end_step"]])
                d["comm_exposed_share"] = None if c is None else c["exposed_share"]
                # the drop is communication's when its steps waited more than the bound and more than the run
                d["comm_bound"] = (c is not None and c["exposed_share"] > comm_bound
                                   and c["exposed_share"] > comm["exposed_share"])
        runs[-1]["comm"] = comm
        if health:
            for d in runs[-1]["drops"]:
                d["health"] = near(rounds, d["start_time_unix"], d.get("end_time_unix"), health_margin)
    stragglers = []
    medians = [(r, r["step_time_median_s"]) for r in runs if r["step_time_median_s"]]
    if len(medians) > 1:
        fastest = min(m for _, m in medians)
        for r, m in medians:
            if fastest and m > straggler_ratio * fastest:
                stragglers.append({"file": r["file"], "rank": r["rank"], "median_step_time_s": m,
                                   "vs_fastest": m / fastest})
    bound, waiting = judge_comm(runs)
    rep = {"schema": SUMMARY_SCHEMA, "threshold": threshold, "window": window, "runs": runs,
           "stragglers": stragglers, "live_stragglers": live, "comm_bound": comm_bound,
           "comm_bound_ranks": bound, "comm_waiting_ranks": waiting,
           "comm_advice": list(COMM_ADVICE) if bound else []}
    if health:
        rep["health"] = {"files": [str(h) for h in health], "margin_s": health_margin, "rounds": len(rounds),
                         "not_ok": [brief(r) for r in rounds if r["status"] != "OK"],
                         "notes": health_notes}
    return rep
