"""Node x node links: pairwise bandwidth between nodes, and the all-reduce scale ladder.

One rank per node (its leader, local rank 0) speaks for the node; the other ranks wait.

* **links** -- the leaders meet in rounds of disjoint pairs (:func:`pair_rounds`, a round-robin
  tournament: N-1 rounds for an even N, N for an odd one), and each pair times round trips of one
  buffer with ``torch.distributed`` send/recv over the default group.  A link's figure is the rate
  one way, ``2 x size / round-trip time`` in GB/s (1e9 bytes).  Every transfer has a deadline (the
  context's ``timeout_s``), so a dead link is named instead of hanging for the collective's minutes.
  :func:`analyse_links` then compares every link with the median and names slow links and slow
  nodes with their figures; the slowest node is re-paired alone with the fastest one to confirm it
  (the re-pairing DLRover's node check uses to localise a network fault).
* **scale ladder** -- all-reduce bus bandwidth (nccl-tests' formula, :func:`hal.dist.bench.bus_factor`)
  over the first 2, 3, ... N nodes' leaders; :func:`analyse_ladder` names the step where it fell
  below a fraction of the best earlier step, and the node whose addition did it.

Rank 0 gathers the figures through the launcher's store (not a collective, so that a broken link
cannot hang the report) and returns the report; the other ranks return None.  The analyses are pure
functions of the figures, testable on given matrices.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
import socket
import statistics
import time
from typing import Dict, List, Optional, Sequence, Tuple

#: schema id of :func:`measure_links`' report (``hal bench --pairs --json``)
SCHEMA_PAIRS = "hal.bench.pairs/1"
#: a link (a ladder step) below this fraction of the median (the best earlier step) is slow
DEFAULT_FRACTION = 0.5
#: bytes per transfer: 16 MiB takes ~0.13 s one way at 1 Gbit/s, ~1.3 ms at 100 Gbit/s
DEFAULT_BYTES = 16 << 20

Pair = Tuple[int, int]
_SEQ = [0]
#: test hook: the leader of the node named here never answers its pairs (a dead link, not a hang)
ENV_STALL = "HAL_LINKS_TEST_STALL_NODE"


# -- pure parts --------------------------------------------------------------------------------
def pair_rounds(n: int) -> List[List[Pair]]:
    """Rounds of disjoint node pairs in which every pair of ``n`` nodes meets exactly once.

    The circle method of a round-robin tournament: ``n - 1`` rounds for an even ``n``, ``n`` for
    an odd one (one node sits each round out).  Pairs are ``(low, high)``, sorted within a round.
    """
    if n < 2:
        return []
    seats: List[Optional[int]] = list(range(n)) + ([None] if n % 2 else [])
    m = len(seats)
    rounds = []
    for _ in range(m - 1):
        pairs = [(seats[i], seats[m - 1 - i]) for i in range(m // 2)]
        rounds.append(sorted((min(a, b), max(a, b)) for a, b in pairs if a is not None and b is not None))
        seats = [seats[0], seats[-1]] + seats[1:-1]
    return rounds


def _gb(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.3g} GB/s"


def _label(labels: Optional[Sequence[str]], node: int) -> str:
    return labels[node] if labels and node < len(labels) and labels[node] else f"node {node}"


def _median(values: Sequence[float]) -> Optional[float]:
    return statistics.median(values) if values else None


def analyse_links(matrix: Sequence[Sequence[Optional[float]]], labels: Optional[Sequence[str]] = None,
                  fraction: float = DEFAULT_FRACTION, min_gbps: Optional[float] = None,
                  errors: Optional[Dict[Pair, str]] = None) -> dict:
    """Slow links, slow nodes and dead links of a symmetric node x node matrix in GB/s.

    The reference is *the median*: each node's median link first, then the median of those, so that
    one slow node (whose links are half of a 4-node matrix) does not drag the reference down.

    :param matrix: ``matrix[a][b]`` GB/s between nodes a and b; None on the diagonal and for a pair
        that did not complete (its reason in ``errors``).
    :param labels: how to name each node (``"node 3 (d)"``); default ``"node 3"``.
    :param fraction: a link below ``fraction`` x the median is slow.
    :param min_gbps: a link below this absolute figure is named too (``below_min``).
    :param errors: ``{(a, b): reason}`` for pairs that did not complete (a < b).
    :return: ``median_gbps``, ``node_median_gbps``, ``slow_links``, ``slow_nodes``, ``dead_links``,
        ``below_min``, ``slowest_node``, ``fastest_node`` and ``lines`` (one sentence per finding).
    """
    n = len(matrix)
    errors = dict(errors or {})
    links = []
    for a in range(n):
        for b in range(a + 1, n):
            v = matrix[a][b]
            if v is None:
                errors.setdefault((a, b), "no figure")
            else:
                links.append((a, b, float(v)))
    per_node = [[v for a, b, v in links if node in (a, b)] for node in range(n)]
    node_median = [_median(vs) for vs in per_node]
    median = _median([m for m in node_median if m is not None])
    out = {"fraction": fraction, "min_gbps": min_gbps, "median_gbps": median,
           "node_median_gbps": node_median, "slow_links": [], "slow_nodes": [], "dead_links": [],
           "below_min": [], "slowest_node": None, "fastest_node": None, "lines": []}

    def pair_name(a, b):
        return f"{_label(labels, a)} <-> {_label(labels, b)}"
    for (a, b), why in sorted(errors.items()):
        text = f"{pair_name(a, b)}: failed: {why}"
        out["dead_links"].append({"a": a, "b": b, "error": why, "text": text})
        out["lines"].append(text)
    slow = set()
    if median and len(links) > 1:
        for a, b, v in sorted(links, key=lambda x: x[2]):
            if v < fraction * median:
                slow.add((a, b))
                text = (f"{pair_name(a, b)}: {_gb(v)}, {v / median:.2f}x the median {_gb(median)}")
                out["slow_links"].append({"a": a, "b": b, "gbps": v, "ratio": v / median, "text": text})
                out["lines"].append(text)
    for node in range(n):
        mine = [(a, b) for a, b, _ in links if node in (a, b)]
        bad = [p for p in mine if p in slow]
        if mine and len(bad) * 2 > len(mine):
            text = (f"{_label(labels, node)} is slow: {len(bad)} of its {len(mine)} links below "
                    f"{fraction:g}x the median (its median {_gb(node_median[node])}, "
                    f"{node_median[node] / median:.2f}x the median {_gb(median)})")
            out["slow_nodes"].append({"node": node, "slow_links": len(bad), "links": len(mine),
                                      "median_gbps": node_median[node],
                                      "ratio": node_median[node] / median, "text": text})
            out["lines"].append(text)
    if min_gbps is not None:
        for a, b, v in sorted(links, key=lambda x: x[2]):
            if v < min_gbps:
                text = f"{pair_name(a, b)}: {_gb(v)}, below the minimum {min_gbps:g} GB/s"
                out["below_min"].append({"a": a, "b": b, "gbps": v, "text": text})
                out["lines"].append(text)
    ranked = [node for node in range(n) if node_median[node] is not None]
    if len(ranked) >= 2:
        out["slowest_node"] = min(ranked, key=lambda i: (node_median[i], i))
        out["fastest_node"] = max((i for i in ranked if i != out["slowest_node"]),
                                  key=lambda i: (node_median[i], -i))
    return out


def analyse_ladder(steps: Sequence[dict], labels: Optional[Sequence[str]] = None,
                   fraction: float = DEFAULT_FRACTION) -> dict:
    """Where the all-reduce scale ladder fell, and which node's addition did it.

    :param steps: one per step, in order: ``{"nodes": k, "busbw_gbps": x or None, "error": str?}``,
        the ``k``-th step running over nodes ``0..k-1`` (so node ``k-1`` joined at it).
    :param fraction: a step below ``fraction`` x the best earlier step fell.
    :return: ``fell`` (None, or ``{"nodes", "added_node", "busbw_gbps", "best_before_gbps", "ratio",
        "error"}``), ``best_gbps`` and ``text``.
    """
    best = None
    fell = None
    for i, s in enumerate(steps):
        bw = s.get("busbw_gbps")
        if i > 0 and fell is None:
            k = s["nodes"]
            who = _label(labels, k - 1)
            if bw is None:
                fell = {"nodes": k, "added_node": k - 1, "busbw_gbps": None, "best_before_gbps": best,
                        "ratio": None, "error": s.get("error"),
                        "text": f"the all-reduce over {k} nodes failed when {who} joined: {s.get('error')}"}
            elif best and bw < fraction * best:
                fell = {"nodes": k, "added_node": k - 1, "busbw_gbps": bw, "best_before_gbps": best,
                        "ratio": bw / best, "error": None,
                        "text": (f"bus bandwidth fell at {k} nodes, when {who} joined: {_gb(bw)}, "
                                 f"{bw / best:.2f}x the best of 2-{k - 1} nodes {_gb(best)}")}
        if bw is not None:
            best = bw if best is None else max(best, bw)
    figures = ", ".join(f"{s['nodes']} nodes {_gb(s.get('busbw_gbps'))}" for s in steps)
    if fell:
        text = fell["text"]
    elif len(steps) < 2:
        text = f"one step ({figures}): a ladder needs 3 or more nodes to show a fall"
    else:
        text = f"no step fell below {fraction:g}x the best earlier one ({figures})"
    return {"fraction": fraction, "fell": fell, "best_gbps": best, "text": text}


# -- measurement --------------------------------------------------------------------------------
def _prefix(ctx, what: str) -> str:
    _SEQ[0] += 1
    return f"hal-links/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{what}{_SEQ[0]}"


def _wait_keys(store, keys: Sequence[str], deadline_s: float) -> Tuple[Dict[str, str], List[str]]:
    """Values of ``keys`` that appear within ``deadline_s``, and the keys that did not."""
    got: Dict[str, str] = {}
    end = time.monotonic() + deadline_s
    delay = 0.001
    while True:
        for k in keys:
            if k not in got and store.check([k]):
                got[k] = store.get(k).decode()
        if len(got) == len(keys) or time.monotonic() >= end:
            return got, [k for k in keys if k not in got]
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _exchange_names(store, nnodes: int, node: int, is_leader: bool, timeout_s: float) -> List[str]:
    key = f"hal-links/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/name/"
    if is_leader:
        store.set(key + str(node), socket.gethostname())
    got, _ = _wait_keys(store, [key + str(i) for i in range(nnodes)], timeout_s)
    return [got.get(key + str(i), "") for i in range(nnodes)]


def node_names(ctx) -> List[str]:
    """Host name of every node (``ctx.node_names``, filled through the store when empty)."""
    if len(ctx.node_names) != ctx.nnodes:
        ctx.node_names = _exchange_names(ctx.store, ctx.nnodes, ctx.node_rank, ctx.is_leader, ctx.timeout_s)
    return ctx.node_names


def job_hosts(store, timeout_s: float, env=None) -> List[str]:
    """Host name of each node of the launcher's job (one entry alone); call on every rank.

    Nodes as torchrun numbers them (``GROUP_RANK``, ``LOCAL_WORLD_SIZE`` ranks each).
    """
    env = os.environ if env is None else env
    if "RANK" not in env or "WORLD_SIZE" not in env or store is None:
        return [socket.gethostname()]
    world = int(env["WORLD_SIZE"])
    nnodes = max(1, world // int(env.get("LOCAL_WORLD_SIZE", world)))
    return _exchange_names(store, nnodes, int(env.get("GROUP_RANK", 0)), int(env.get("LOCAL_RANK", 0)) == 0,
                           timeout_s)


def _labels(ctx) -> List[str]:
    node_names(ctx)
    return [ctx.node_label(i) for i in range(ctx.nnodes)]


def _sync_for(device):
    if device is None or getattr(device, "type", "cpu") == "cpu":
        return lambda: None
    from hal.plugin.registry import selected_backend

    return selected_backend().synchronize


def _wait(work, end: float) -> None:
    left = end - time.monotonic()
    if left <= 0 or work.wait(timeout=_dt.timedelta(seconds=left)) is False:
        raise TimeoutError("deadline passed")


def _why(exc: BaseException, deadline_s: float) -> str:
    """One line for a failed transfer: the transport's own words without its source location."""
    text = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
    text = re.sub(r"^\[[^\]]*\]\s*", "", text)
    if "timed out" in text.lower() or "deadline" in text.lower():
        return f"no answer within {deadline_s:g} s ({text})"
    return text


def _round_trips(peer: int, first: bool, buf, warmup: int, iters: int, tag: int, deadline_s: float,
                 sync) -> dict:
    """Time ``iters`` round trips of ``buf`` with ``peer``; ``first`` sends first."""
    import torch.distributed as dist

    end = time.monotonic() + deadline_s
    times = []
    try:
        for i in range(warmup + iters):
            t0 = time.perf_counter()
            for send in ((True, False) if first else (False, True)):
                _wait((dist.isend if send else dist.irecv)(buf, peer, tag=tag), end)
            sync()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
    except (RuntimeError, TimeoutError) as exc:
        return {"error": _why(exc, deadline_s), "times_s": times}
    size = buf.numel() * buf.element_size()
    mean = statistics.fmean(times)
    return {"gbps": 2 * size / mean / 1e9 if mean > 0 else None, "times_s": times}


def _run_pairs(ctx, rounds: Sequence[Sequence[Pair]], prefix: str, buf, warmup: int, iters: int,
               sync) -> None:
    """The leaders run ``rounds``; the lower node of each pair posts its record to the store."""
    me = ctx.node_rank
    leaders = range(ctx.nnodes)
    for r, pairs in enumerate(rounds):
        # all leaders start a round together, so rounds do not overlap
        ctx.store.set(f"{prefix}/round{r}/{me}", "1")
        _, missing = _wait_keys(ctx.store, [f"{prefix}/round{r}/{i}" for i in leaders], ctx.timeout_s)
        absent = {int(k.rsplit("/", 1)[1]) for k in missing}
        for a, b in pairs:
            if me not in (a, b):
                continue
            peer = b if me == a else a
            if os.environ.get(ENV_STALL) == str(me):
                time.sleep(ctx.timeout_s + 1)
                continue
            if peer in absent:
                rec = {"error": f"{ctx.node_label(peer)} did not arrive at round {r} within {ctx.timeout_s:g} s"}
            else:
                rec = _round_trips(ctx.leaders[peer], me == a, buf, warmup, iters,
                                   tag=(_SEQ[0] % 1000) * 1000 + r, deadline_s=ctx.timeout_s, sync=sync)
            if me == a or "error" in rec:  # the lower node reports; either end reports a failure
                ctx.store.set(f"{prefix}/pair/{a}-{b}/{me}", json.dumps(dict(rec, round=r)))


def _collect(ctx, prefix: str, pairs: Sequence[Tuple[int, Pair]], deadline_s: float) -> List[dict]:
    """Rank 0: the record of every ``(round, pair)``, from its lower node or an error from either end."""
    want = {p: [f"{prefix}/pair/{p[0]}-{p[1]}/{p[0]}", f"{prefix}/pair/{p[0]}-{p[1]}/{p[1]}"] for _, p in pairs}
    got: Dict[Pair, dict] = {}
    end = time.monotonic() + deadline_s
    delay = 0.001
    while len(got) < len(want) and time.monotonic() < end:
        for p, keys in want.items():
            for k in keys:
                if p not in got and ctx.store.check([k]):
                    got[p] = json.loads(ctx.store.get(k).decode())
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    out = []
    for r, (a, b) in pairs:
        rec = got.get((a, b)) or {
            "error": f"neither {ctx.node_label(a)} nor {ctx.node_label(b)} reported within {deadline_s:g} s"}
        out.append({"a": a, "b": b, "round": r, "gbps": rec.get("gbps"), "times_s": rec.get("times_s", []),
                    "error": rec.get("error")})
    return out


def _finish(ctx, prefix: str, budget: float) -> None:
    """Rank 0 says done; it returns once every rank has read that (or 10 s passed), because the
    launcher's store lives with rank 0's node and ends with it."""
    if ctx.rank == 0:
        ctx.store.set(f"{prefix}/done", "1")
        _wait_keys(ctx.store, [f"{prefix}/left/{r}" for r in range(1, ctx.world_size)], 10.0)
    else:
        _wait_keys(ctx.store, [f"{prefix}/done"], budget)
        ctx.store.set(f"{prefix}/left/{ctx.rank}", "1")


def measure_links(ctx, size: int = DEFAULT_BYTES, warmup: int = 1, iters: int = 3,
                  fraction: float = DEFAULT_FRACTION, min_gbps: Optional[float] = None,
                  device=None, repair: bool = True) -> Optional[dict]:
    """The node x node bandwidth matrix; call on every rank once the default process group exists.

    :param ctx: a :class:`hal.doctor.cluster_context.ClusterContext` (its ``timeout_s`` is each
        pair's deadline).
    :param size: bytes per transfer.
    :param fraction: :func:`analyse_links`' slow-link fraction of the median.
    :param min_gbps: also name links below this figure.
    :param device: where the buffer lives (default CPU: gloo's path); a device buffer measures the
        device collective's path.
    :param repair: when something is slow, re-pair the suspects (:func:`plan_repair`) alone with
        the fastest nodes and judge them (:func:`judge_repair`).
    :return: on global rank 0 the report (schema :data:`SCHEMA_PAIRS`, without gates), else None.
    """
    import torch

    labels = _labels(ctx)
    prefix = _prefix(ctx, "links")
    rounds = pair_rounds(ctx.nnodes)
    t_start = time.monotonic()
    budget = (len(rounds) + 2) * 2 * ctx.timeout_s + 30
    sync = _sync_for(device)
    buf = torch.ones(max(size // 4, 1), dtype=torch.float32, device=device or "cpu")
    report = None
    if ctx.is_leader:
        _run_pairs(ctx, rounds, prefix, buf, warmup, iters, sync)
        if ctx.rank == 0:
            recs = _collect(ctx, prefix, [(r, p) for r, ps in enumerate(rounds) for p in ps], budget)
            matrix: List[List[Optional[float]]] = [[None] * ctx.nnodes for _ in range(ctx.nnodes)]
            errors = {}
            for rec in recs:
                matrix[rec["a"]][rec["b"]] = matrix[rec["b"]][rec["a"]] = rec["gbps"]
                if rec["error"]:
                    errors[(rec["a"], rec["b"])] = rec["error"]
            analysis = analyse_links(matrix, labels, fraction, min_gbps, errors)
            again = plan_repair(analysis) if repair else []
            ctx.store.set(f"{prefix}/repair", json.dumps(again))
            report = {"schema": SCHEMA_PAIRS, "nnodes": ctx.nnodes, "world_size": ctx.world_size,
                      "hosts": list(ctx.node_names), "labels": labels, "backend": ctx.backend,
                      "device": str(buf.device),
                      "config": {"size": buf.numel() * 4, "warmup": warmup, "iters": iters,
                                 "timeout_s": ctx.timeout_s, "fraction": fraction, "min_gbps": min_gbps},
                      "rounds": [[list(p) for p in ps] for ps in rounds], "pairs": recs,
                      "matrix_gbps": matrix, "analysis": analysis, "repair": None}
        got, _ = _wait_keys(ctx.store, [f"{prefix}/repair"], budget)
        again = [tuple(p) for p in json.loads(got.get(f"{prefix}/repair", "[]"))]
        if again:
            # distinct suspects, distinct helpers: the re-pairs form one round
            plan = [(min(p), max(p)) for p in again]
            _run_pairs(ctx, [plan], prefix + "/again", buf, warmup, iters, sync)
            if ctx.rank == 0:
                got_recs = _collect(ctx, prefix + "/again", [(0, p) for p in plan], budget)
                recs2 = [{"suspect": s_, "helper": h, "gbps": r["gbps"], "error": r["error"],
                          "times_s": r["times_s"]} for (s_, h), r in zip(again, got_recs)]
                report["repair"] = judge_repair(recs2, analysis, labels, fraction)
        if ctx.rank == 0:
            report["seconds"] = time.monotonic() - t_start
    _finish(ctx, prefix, budget)
    return report


def plan_repair(analysis: dict) -> List[Pair]:
    """Which nodes to re-pair, each alone with a healthy one: ``[(suspect, helper), ...]``.

    The suspect is the slow node (the slowest, when several) or, without one, both ends of the
    slowest link; helpers are the other nodes, fastest first, a different one per suspect (so the
    re-pairs run as one round), never across a failed link.  Empty when nothing is slow.
    """
    med = analysis["node_median_gbps"]
    if analysis["slow_nodes"]:
        suspects = [min(analysis["slow_nodes"], key=lambda x: (x["median_gbps"], x["node"]))["node"]]
    elif analysis["slow_links"]:
        worst = analysis["slow_links"][0]
        suspects = [worst["a"], worst["b"]]
    else:
        return []
    helpers = sorted((i for i in range(len(med)) if i not in suspects and med[i] is not None),
                     key=lambda i: (-med[i], i))
    dead = {(d["a"], d["b"]) for d in analysis["dead_links"]}
    plan: List[Pair] = []
    for s in suspects:  # each with the fastest unused helper it has a working link to
        h = next((h for h in helpers if (min(s, h), max(s, h)) not in dead), None)
        if h is not None:
            helpers.remove(h)
            plan.append((s, h))
    return plan


def judge_repair(recs: Sequence[dict], analysis: dict, labels: Optional[Sequence[str]] = None,
                 fraction: float = DEFAULT_FRACTION) -> dict:
    """What re-pairing showed: ``recs`` are ``{"suspect", "helper", "gbps", "error"}`` per pair.

    A suspect still below ``fraction`` x the median with a healthy partner is confirmed; when both
    ends of a slow link are fast with other partners, the path between them is the likelier cause.
    """
    median = analysis["median_gbps"]
    lines, confirmed = [], []
    for r in recs:
        who, other, bw = _label(labels, r["suspect"]), _label(labels, r["helper"]), r.get("gbps")
        if bw is None:
            verdict = f"failed ({r.get('error')}): {who} confirmed"
            confirmed.append(r["suspect"])
        elif median and bw < fraction * median:
            verdict = f"{_gb(bw)} again, {bw / median:.2f}x the median: {who} confirmed"
            confirmed.append(r["suspect"])
        else:
            verdict = f"{_gb(bw)}, {bw / median:.2f}x the median: {who} is fine with {other}"
        lines.append(f"{who} re-paired alone with {other}: {verdict}")
    if recs and not confirmed:
        if analysis["slow_nodes"]:
            lines.append("slow only while other pairs ran: a shared uplink or switch is the likelier cause")
        else:
            worst = analysis["slow_links"][0]
            a, b = _label(labels, worst["a"]), _label(labels, worst["b"])
            lines.append(f"both ends are fine with other nodes: the path between {a} and {b} "
                         f"(their switch ports, the uplink between their racks) is the likelier cause")
    return {"pairs": [dict(r) for r in recs], "confirmed_nodes": confirmed, "lines": lines,
            "text": "; ".join(lines)}


def measure_ladder(ctx, size: int = DEFAULT_BYTES, warmup: int = 1, iters: int = 3,
                   fraction: float = DEFAULT_FRACTION, device=None) -> Optional[dict]:
    """All-reduce bus bandwidth over the first 2, 3, ... N nodes' leaders; call on every rank.

    Every rank creates the subgroups (``torch.distributed.new_group`` is collective); the leaders
    run the steps one after the other, each with the context's ``timeout_s`` as its deadline.
    :return: on global rank 0 ``{"steps": [...], "analysis": analyse_ladder(...), ...}``, else None.
    """
    import torch
    import torch.distributed as dist

    from hal.dist.bench import bus_factor

    labels = _labels(ctx)
    prefix = _prefix(ctx, "ladder")
    t_start = time.monotonic()
    ks = list(range(2, ctx.nnodes + 1))
    tmo = _dt.timedelta(seconds=ctx.timeout_s)
    groups = {k: dist.new_group(ranks=ctx.leaders[:k], timeout=tmo) for k in ks}
    budget = (len(ks) + 2) * 2 * ctx.timeout_s + 30
    sync = _sync_for(device)
    buf = torch.ones(max(size // 4, 1), dtype=torch.float32, device=device or "cpu")
    nbytes = buf.numel() * 4
    report = None
    if ctx.is_leader:
        me = ctx.node_rank
        for k in ks:
            ctx.store.set(f"{prefix}/step{k}/go/{me}", "1")
            _wait_keys(ctx.store, [f"{prefix}/step{k}/go/{i}" for i in range(ctx.nnodes)], ctx.timeout_s)
            if me >= k:
                continue
            end = time.monotonic() + ctx.timeout_s
            times, rec = [], {}
            try:
                for i in range(warmup + iters):
                    t0 = time.perf_counter()
                    _wait(dist.all_reduce(buf, group=groups[k], async_op=True), end)
                    sync()
                    if i >= warmup:
                        times.append(time.perf_counter() - t0)
                rec["time_s"] = statistics.fmean(times)
            except (RuntimeError, TimeoutError) as exc:
                rec["error"] = _why(exc, ctx.timeout_s)
            ctx.store.set(f"{prefix}/step{k}/rank{me}", json.dumps(rec))
        if ctx.rank == 0:
            steps = []
            for k in ks:
                got, missing = _wait_keys(ctx.store, [f"{prefix}/step{k}/rank{i}" for i in range(k)], budget)
                recs = [json.loads(v) for v in got.values()]
                errs = [r["error"] for r in recs if "error" in r] + [
                    f"{labels[int(m.rsplit('rank', 1)[1])]} did not report" for m in missing]
                step = {"nodes": k, "added_node": k - 1, "ranks": ctx.leaders[:k]}
                if errs:
                    step.update(busbw_gbps=None, algbw_gbps=None, time_us=None, error=errs[0])
                else:  # nccl-tests: the mean over ranks of each rank's mean time
                    t = statistics.fmean(r["time_s"] for r in recs)
                    alg = nbytes / t / 1e9
                    step.update(time_us=t * 1e6, algbw_gbps=alg, busbw_gbps=alg * bus_factor("all_reduce", k),
                                error=None)
                steps.append(step)
            report = {"nnodes": ctx.nnodes, "hosts": list(ctx.node_names), "labels": labels,
                      "device": str(buf.device), "size": nbytes, "warmup": warmup, "iters": iters, "steps": steps,
                      "analysis": analyse_ladder(steps, labels, fraction),
                      "seconds": time.monotonic() - t_start}
    _finish(ctx, prefix, budget)
    for g in groups.values():
        if g is not None and g != dist.GroupMember.NON_GROUP_MEMBER:
            dist.destroy_process_group(g)
    return report


def format_matrix(report: dict) -> List[str]:
    """The matrix of a :func:`measure_links` report as text lines (GB/s, ``-`` on the diagonal)."""
    n = report["nnodes"]
    hosts = report.get("hosts") or [""] * n
    def head(i):  # long host names keep their end, where cluster names usually differ
        name = hosts[i] or ""
        return f"{i}:{name}" if len(name) <= 14 else f"{i}:..{name[-12:]}"
    heads = [head(i) for i in range(n)]
    width = max([8] + [len(h) for h in heads])
    lines = ["  " + "GB/s".ljust(width + 2) + " ".join(h.rjust(width) for h in heads)]
    for a in range(n):
        cells = []
        for b in range(n):
            v = report["matrix_gbps"][a][b]
            cells.append(("-" if a == b else "FAILED" if v is None else f"{v:.4g}").rjust(width))
        lines.append("  " + heads[a].ljust(width + 2) + " ".join(cells))
    return lines
