"""``hal bench``: nccl-tests-style collective bandwidth on any backend.

Columns, size semantics and bus-bandwidth formulas follow NVIDIA nccl-tests
(``doc/PERFORMANCE.md``): ``algbw = size / time``; ``busbw = algbw * factor`` with factor
``2(n-1)/n`` for all_reduce, ``(n-1)/n`` for all_gather, reduce_scatter and all_to_all, and
``1`` for broadcast.  ``size`` is the largest buffer a rank touches (the gathered output of
all_gather, the input of reduce_scatter).  torch offers each collective in one placement
only (all_reduce and broadcast in place, the others out of place); the other column group
reads ``N/A``.

Every rank times each iteration (device synchronised) so p50/p99 come with the mean; the
reported time is the mean over iterations, averaged over ranks as nccl-tests does.  After
timing, one more call on known data counts wrong elements (``#wrong``).
"""
from __future__ import annotations

import json
import math
import os
import re
import socket
import statistics
import time
from dataclasses import dataclass
from typing import List, Optional

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
#: placement torch provides for each collective
IN_PLACE = {"all_reduce": True, "broadcast": True, "all_gather": False, "reduce_scatter": False,
            "all_to_all": False}
DTYPES = {"float": "float32", "float32": "float32", "half": "float16", "float16": "float16",
          "bfloat16": "bfloat16", "double": "float64", "float64": "float64", "int32": "int32",
          "int": "int32", "int64": "int64"}
_NCCL_TYPE = {"float32": "float", "float16": "half", "bfloat16": "bfloat16", "float64": "double",
              "int32": "int32", "int64": "int64"}
_REDOPS = ("sum", "prod", "max", "min", "avg")
SCHEMA = "hal.bench/1"
#: test hook: the rank named here feeds wrong data to the correctness pass of all_reduce
ENV_CORRUPT = "HAL_BENCH_TEST_CORRUPT_RANK"


def bus_factor(collective: str, n: int) -> float:
    """nccl-tests bus-bandwidth factor for ``collective`` on ``n`` ranks."""
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if collective == "broadcast":
        return 1.0
    raise ValueError(f"unknown collective {collective!r}; choose one of {', '.join(COLLECTIVES)}")


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.I)


def parse_size(text: str) -> int:
    """``"1K"`` → 1024, ``"64M"`` → 67108864 (1024-based, as nccl-tests); plain numbers are bytes."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ValueError(f"size {text!r} is not a byte count; write e.g. 8, 1K, 64M or 1G")
    mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    return int(float(m.group(1)) * mult)


def sweep(min_bytes: int, max_bytes: int, factor: float = 2.0, step_bytes: int = 0) -> List[int]:
    """Sizes from ``min_bytes`` to ``max_bytes``: times ``factor``, or plus ``step_bytes`` when given."""
    if min_bytes <= 0 or max_bytes < min_bytes:
        raise ValueError(f"need 0 < minbytes <= maxbytes, got {min_bytes} and {max_bytes}")
    if step_bytes <= 0 and factor <= 1:
        raise ValueError(f"step factor must be > 1 (got {factor}), or give a step in bytes")
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(int(s))
        s = s + step_bytes if step_bytes > 0 else s * factor
    return out


@dataclass
class BenchConfig:
    """One ``hal bench`` run.  ``nproc=None`` runs inside an existing launcher (torchrun)."""

    collective: str = "all_reduce"
    min_bytes: int = 8
    max_bytes: int = 1 << 20
    step_factor: float = 2.0
    step_bytes: int = 0
    warmup: int = 5
    iters: int = 20
    dtype: str = "float32"
    op: str = "sum"
    root: int = 0
    check: bool = True
    nproc: Optional[int] = None
    timeout: float = 300.0

    def validate(self) -> "BenchConfig":
        if self.collective not in COLLECTIVES:
            raise ValueError(f"collective {self.collective!r} is not one of {', '.join(COLLECTIVES)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"datatype {self.dtype!r} is not one of {', '.join(sorted(DTYPES))}")
        self.dtype = DTYPES[self.dtype]
        if self.op not in _REDOPS:
            raise ValueError(f"reduction {self.op!r} is not one of {', '.join(_REDOPS)}")
        if self.iters < 1 or self.warmup < 0:
            raise ValueError(f"need iters >= 1 and warmup >= 0, got {self.iters} and {self.warmup}")
        if self.nproc is not None and self.nproc < 1:
            raise ValueError(f"-n must be at least 1, got {self.nproc}")
        sweep(self.min_bytes, self.max_bytes, self.step_factor, self.step_bytes)
        return self


# -- the per-rank part (runs after hal.dist.init) ------------------------------------------
def _ops(collective: str, n: int, rank: int, count: int, dtype, device, redop, redop_name, root):
    """(tensors, launch, fill, expected) for one size; ``count`` = elements per rank-chunk."""
    import torch
    import torch.distributed as dist

    from hal.dist.checked import _all_gather, _reduce_scatter

    chunks = 1 if collective in ("all_reduce", "broadcast") else n
    pat = (torch.arange(count * chunks, device=device) % 7).to(dtype)  # small ints: exact in every dtype
    corrupt = os.environ.get(ENV_CORRUPT) == str(rank)

    def reduce(x):  # rank r contributes x * (r + 1)
        parts = torch.stack([x * (r + 1) for r in range(n)])
        return {"sum": parts.sum(0), "prod": parts.prod(0), "max": parts.amax(0), "min": parts.amin(0),
                "avg": parts.mean(0) if dtype.is_floating_point else parts.sum(0) // n}[redop_name].to(dtype)
    if collective == "all_reduce":
        buf = torch.empty(count, dtype=dtype, device=device)

        def fill():
            buf.copy_(pat[:count] * (rank + 1) + int(corrupt))
        return buf, lambda: dist.all_reduce(buf, op=redop), fill, reduce(pat[:count]), count
    if collective == "broadcast":
        buf = torch.empty(count, dtype=dtype, device=device)

        def fill():
            buf.copy_(pat[:count] + 1) if rank == root else buf.zero_()
        return buf, lambda: dist.broadcast(buf, src=root), fill, pat[:count] + 1, count
    if collective == "all_gather":
        inp = torch.empty(count, dtype=dtype, device=device)
        out = torch.empty(count * n, dtype=dtype, device=device)

        def fill():
            inp.copy_(pat[:count] + rank)
            out.zero_()
        exp = torch.cat([pat[:count] + r for r in range(n)])
        return out, lambda: _all_gather(out, inp), fill, exp, count * n
    if collective == "reduce_scatter":
        inp = torch.empty(count * n, dtype=dtype, device=device)
        out = torch.empty(count, dtype=dtype, device=device)

        def fill():
            inp.copy_(pat * (rank + 1))
            out.zero_()
        exp = reduce(pat[rank * count:(rank + 1) * count])
        return out, lambda: _reduce_scatter(out, inp, op=redop), fill, exp, count * n
    if collective == "all_to_all":
        inp = torch.empty(count * n, dtype=dtype, device=device)
        out = torch.empty(count * n, dtype=dtype, device=device)
        chunk = pat[:count]

        def fill():
            inp.copy_(torch.cat([chunk + (rank * n + j) % 11 for j in range(n)]))
            out.zero_()
        exp = torch.cat([chunk + (j * n + rank) % 11 for j in range(n)])
        return out, lambda: dist.all_to_all_single(out, inp), fill, exp, count * n
    raise ValueError(collective)


def rank_main(config: dict) -> Optional[dict]:
    """Run the sweep on this rank (after :func:`hal.dist.init`); rank 0 returns the report."""
    import torch
    import torch.distributed as dist

    from hal.device import backend_name
    from hal.plugin.registry import selected_backend
    from hal.dist.checked import gather_floats, precheck
    from hal.dist.process_group import info

    cfg = BenchConfig(**config).validate()
    config = {k: getattr(cfg, k) for k in BenchConfig.__dataclass_fields__ if k != "nproc"}
    me = info()
    n, rank = me.world_size, me.rank
    backend = selected_backend()
    device = torch.device(me.device)
    dtype = getattr(torch, cfg.dtype)
    esize = torch.empty((), dtype=dtype).element_size()
    redop = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX,
             "min": dist.ReduceOp.MIN, "avg": dist.ReduceOp.AVG}[cfg.op]
    if cfg.collective == "broadcast" and not 0 <= cfg.root < n:
        raise ValueError(f"broadcast root {cfg.root} is not a rank of this job (0..{n - 1}); pass -r 0..{n - 1}")
    precheck("bench", json.dumps(config, sort_keys=True))  # every rank runs the same sweep
    from hal.dist.links import job_hosts
    from hal.dist.process_group import STATE

    hosts = job_hosts(STATE.store, me.timeout_s)
    sync = (lambda: None) if device.type == "cpu" else backend.synchronize
    dev_name = backend.device_name() if device.type != "cpu" else socket.gethostname()
    rows = []
    for size in sweep(cfg.min_bytes, cfg.max_bytes, cfg.step_factor, cfg.step_bytes):
        per_chunk = 1 if cfg.collective in ("all_reduce", "broadcast") else n
        count = max(size // (esize * per_chunk), 1)
        result, launch, fill, expected, total = _ops(cfg.collective, n, rank, count, dtype, device,
                                                      redop, cfg.op, cfg.root)
        fill()
        for _ in range(cfg.warmup):
            launch()
        sync()
        times = []
        for _ in range(cfg.iters):
            t0 = time.perf_counter()
            launch()
            sync()
            times.append(time.perf_counter() - t0)
        wrong = 0
        if cfg.check:
            fill()
            launch()
            sync()
            wrong = int((result != expected).sum().item())
        rows.append({"size": total * esize, "count": total, "times": times, "wrong": wrong})
    # combine across ranks: per-iteration max (the call ends with the slowest rank), mean over ranks
    flat = [t for r in rows for t in r["times"]] + [float(r["wrong"]) for r in rows]
    allv = gather_floats(flat)
    k = cfg.iters
    if rank != 0:
        return None
    out_rows = []
    for i, r in enumerate(rows):
        per_rank = [v[i * k:(i + 1) * k] for v in allv]
        mean_t = statistics.fmean(statistics.fmean(x) for x in per_rank)
        per_iter_max = sorted(max(col) for col in zip(*per_rank))
        wrong = int(sum(v[len(rows) * k + i] for v in allv)) if cfg.check else None
        algbw = r["size"] / mean_t / 1e9 if mean_t > 0 else 0.0
        out_rows.append({
            "size": r["size"], "count": r["count"], "type": _NCCL_TYPE[cfg.dtype],
            "redop": cfg.op if cfg.collective in ("all_reduce", "reduce_scatter") else "none",
            "root": cfg.root if cfg.collective == "broadcast" else -1,
            "in_place": IN_PLACE[cfg.collective], "time_us": mean_t * 1e6,
            "algbw": algbw, "busbw": algbw * bus_factor(cfg.collective, n), "wrong": wrong,
            "p50_us": _pct(per_iter_max, 50) * 1e6, "p99_us": _pct(per_iter_max, 99) * 1e6,
        })
    return {"schema": SCHEMA, "collective": cfg.collective, "world_size": n, "nnodes": len(hosts),
            "hosts": hosts, "backend": me.backend,
            "device": me.device, "device_name": dev_name, "hal_backend": backend_name(),
            "config": {k2: v for k2, v in config.items()}, "rows": out_rows,
            "avg_busbw": statistics.fmean(r["busbw"] for r in out_rows) if out_rows else 0.0,
            "wrong_total": sum(r["wrong"] or 0 for r in out_rows) if cfg.check else None}


def _pct(sorted_values: List[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return 0.0
    idx = min(len(sorted_values) - 1, max(0, math.ceil(q / 100.0 * len(sorted_values)) - 1))
    return sorted_values[idx]


# -- the driver (what ``hal bench`` calls) -------------------------------------------------
def _in_launcher() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def run(config: BenchConfig, min_busbw: Optional[float] = None, baseline: Optional[dict] = None,
        tolerance: float = 0.10) -> Optional[dict]:
    """Run a sweep and judge it; the library call behind ``hal bench``.

    With ``config.nproc`` it starts that many local ranks itself (hard time limit
    ``config.timeout``); without it, it runs as one rank of the job this process belongs to
    (``torchrun``) or, alone, as a one-rank job.  Returns the report (schema ``hal.bench/1``)
    on rank 0 and None on the other ranks.

    :param min_busbw: gate: fail when the average bus bandwidth (GB/s) is below this.
    :param baseline: gate: a previous report; fail when the average bus bandwidth is more than
        ``tolerance`` below the baseline's.
    :raises DistError: when a rank fails (its message is kept).
    """
    from hal.dist.errors import DistError

    config.validate()
    cfg = {k: getattr(config, k) for k in BenchConfig.__dataclass_fields__ if k not in ("nproc",)}
    if config.nproc is not None and not _in_launcher():
        from hal.dist.launch import spawn

        res = spawn("hal.dist.bench:rank_main", config.nproc, kwargs={"config": cfg},
                    timeout=config.timeout)
        if not res.ok:
            raise DistError(f"hal bench {config.collective} -n {config.nproc}: {res.first_error()}")
        report = res.ranks[0].result
    else:
        from hal.dist import process_group as pg

        own = not pg.is_initialized()
        if own:
            pg.init(timeout=config.timeout)
        try:
            report = rank_main(cfg)
        finally:
            if own:
                pg.destroy()
        if report is None:
            return None
    return judge(report, min_busbw, baseline, tolerance)


def judge(report: dict, min_busbw: Optional[float] = None, baseline: Optional[dict] = None,
          tolerance: float = 0.10) -> dict:
    """Add ``gates`` and ``passed`` to a report: values correct, bandwidth above the bars."""
    gates = []
    wrong = report.get("wrong_total")
    gates.append({"gate": "correctness", "passed": not wrong,
                  "detail": "not checked (-c 0)" if wrong is None else f"{wrong} wrong element(s)"})
    avg = report["avg_busbw"]
    if min_busbw is not None:
        gates.append({"gate": "min_busbw", "passed": avg >= min_busbw,
                      "detail": f"avg busbw {avg:.4g} GB/s vs minimum {min_busbw:g} GB/s"})
    if baseline is not None:
        if baseline.get("schema") != SCHEMA or baseline.get("collective") != report["collective"]:
            raise ValueError(f"baseline is not a {SCHEMA} report of {report['collective']} "
                             f"(schema {baseline.get('schema')!r}, collective {baseline.get('collective')!r}); "
                             f"save one with 'hal bench {report['collective']} ... --save FILE'")
        base = float(baseline["avg_busbw"])
        floor = base * (1.0 - tolerance)
        by_size = {r["size"]: r["busbw"] for r in baseline["rows"]}
        ratios = {str(r["size"]): (r["busbw"] / by_size[r["size"]] if by_size.get(r["size"]) else None)
                  for r in report["rows"] if r["size"] in by_size}
        gates.append({"gate": "baseline", "passed": avg >= floor, "ratios_by_size": ratios,
                      "detail": f"avg busbw {avg:.4g} GB/s vs baseline {base:.4g} GB/s "
                                f"(floor {floor:.4g} at tolerance {tolerance:.0%})"})
    report = dict(report, gates=gates, passed=all(g["passed"] for g in gates))
    return report


def format_text(report: dict) -> str:
    """The report in nccl-tests' layout (header, columns, footer), plus hal's percentiles."""
    c = report["config"]
    n = report["world_size"]
    hosts = report.get("hosts") or []
    lines = [f"# hal bench {report['collective']}  nranks {n} nnodes {len(hosts) or 1} minBytes "
             f"{c['min_bytes']} maxBytes {c['max_bytes']} step: {c['step_bytes'] or c['step_factor']}"
             f"({'bytes' if c['step_bytes'] else 'factor'}) warmup iters: {c['warmup']} iters: "
             f"{c['iters']} validation: {int(bool(c['check']))} backend: {report['backend']}",
             "#", "# Using devices",
             f"#  Rank  0 Group  0 on {report['device_name']} device {report['device']} "
             f"({report['hal_backend']}; {n} rank{'s' if n > 1 else ''})"]
    per = n // len(hosts) if hosts else n
    for i, h in enumerate(hosts if len(hosts) > 1 else []):
        lines.append(f"#  Node {i:2d} on {h or '?'} ranks {i * per}-{(i + 1) * per - 1}")
    lines.append("#")
    lines.append("#" + " " * 62 + "out-of-place" + " " * 23 + "in-place          ")
    lines.append("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s" % (
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
        "time", "algbw", "busbw", "#wrong"))
    lines.append("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s" % (
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""))
    for r in report["rows"]:
        measured = "  %7s  %6.2f  %6.2f  %5s" % (_fmt_time(r["time_us"]), r["algbw"], r["busbw"],
                                                  "N/A" if r["wrong"] is None else r["wrong"])
        absent = "  %7s  %6s  %6s  %5s" % ("N/A", "N/A", "N/A", "N/A")
        head = "%12d  %12d  %8s  %6s  %6d" % (r["size"], r["count"], r["type"], r["redop"], r["root"])
        lines.append(head + (absent + measured if r["in_place"] else measured + absent))
    wrong = report.get("wrong_total")
    lines.append(f"# Out of bounds values : {wrong or 0} {'OK' if not wrong else 'FAILED'}")
    lines.append(f"# Avg bus bandwidth    : {report['avg_busbw']:g} ")
    lines.append("#")
    lines.append("# per-iteration time, slowest rank (hal):")
    lines.append("# %10s  %9s  %9s" % ("size", "p50(us)", "p99(us)"))
    for r in report["rows"]:
        lines.append("# %10d  %9s  %9s" % (r["size"], _fmt_time(r["p50_us"]), _fmt_time(r["p99_us"])))
    for g in report.get("gates", []):
        lines.append(f"# gate {g['gate']:<12}: {'PASS' if g['passed'] else 'FAIL'}  {g['detail']}")
    return "\n".join(lines)


def _fmt_time(us: float) -> str:
    return f"{us:.1f}" if us < 1e6 else f"{us:.0f}"


# -- hal bench --pairs: the node x node link matrix -----------------------------------------------
@dataclass
class PairsConfig:
    """One ``hal bench --pairs`` run (inside a multi-node launcher: one leader per node measures).

    ``timeout`` is each transfer's deadline (and the process group's): a link that does not answer
    within it is named as failed instead of hanging.
    """

    size: int = 16 << 20
    warmup: int = 1
    iters: int = 3
    min_link_fraction: float = 0.5
    min_link_bw: Optional[float] = None
    timeout: float = 30.0
    #: also the all-reduce scale ladder over the first 2, 3, ... N nodes
    ladder: bool = False

    def validate(self) -> "PairsConfig":
        if self.size < 4:
            raise ValueError(f"--size must be at least 4 bytes, got {self.size}")
        if self.iters < 1 or self.warmup < 0:
            raise ValueError(f"need iters >= 1 and warmup >= 0, got {self.iters} and {self.warmup}")
        if not 0 < self.min_link_fraction <= 1:
            raise ValueError(f"--min-link-fraction must be in (0, 1], got {self.min_link_fraction:g}")
        if self.min_link_bw is not None and self.min_link_bw < 0:
            raise ValueError(f"--min-link-bw must be >= 0 GB/s, got {self.min_link_bw:g}")
        return self


PAIRS_USAGE = ("run it on every node under torch's launcher, one process per node is enough: "
               "torchrun --nnodes N --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint HOST:PORT "
               "-m hal bench --pairs")


def run_pairs(config: PairsConfig, context) -> Optional[dict]:
    """Measure and judge the node x node link matrix; the library call behind ``hal bench --pairs``.

    :param context: ``context(store, backend=..., timeout_s=..., device=...)`` builds the job's
        :class:`hal.doctor.cluster_context.ClusterContext` (``from_launcher_env``).
    :return: on global rank 0 the report (schema ``hal.bench.pairs/1``) with ``gates`` and
        ``passed``; None on the other ranks.
    :raises ValueError: outside a launcher, or with one node.
    """
    import torch

    from hal.dist import process_group as pg
    from hal.dist.links import measure_ladder, measure_links

    config.validate()
    if not _in_launcher():
        raise ValueError(f"--pairs measures the links between nodes; {PAIRS_USAGE}")
    own = not pg.is_initialized()
    if own:  # the group's own timeout stays the usual one: ranks may start seconds apart
        pg.init(timeout=max(config.timeout, pg.default_timeout()))
    try:
        me = pg.info()
        device = torch.device(me.device)
        ctx = context(pg.STATE.store, backend=me.backend, timeout_s=config.timeout, device=device)
        if ctx.nnodes < 2:
            raise ValueError(f"--pairs needs 2 or more nodes, this job has 1 ({ctx.world_size} rank(s) "
                             f"on one node); {PAIRS_USAGE}")
        where = None if device.type == "cpu" else device
        report = measure_links(ctx, size=config.size, warmup=config.warmup, iters=config.iters,
                               fraction=config.min_link_fraction, min_gbps=config.min_link_bw, device=where)
        if config.ladder:
            ladder = measure_ladder(ctx, size=config.size, warmup=config.warmup, iters=config.iters,
                                    fraction=config.min_link_fraction, device=where)
            if report is not None:
                report["ladder"] = ladder
    finally:
        if own:
            pg.destroy()
    return None if report is None else judge_pairs(report)


def judge_pairs(report: dict) -> dict:
    """Add ``gates`` and ``passed`` to a links report: every pair answered, no link below the bars."""
    an = report["analysis"]
    gates = []
    dead = an["dead_links"]
    gates.append({"gate": "links_complete", "passed": not dead,
                  "detail": dead[0]["text"] if dead else f"{len(report['pairs'])} pair(s) answered"})
    slow = an["slow_links"]
    median = an["median_gbps"]
    low = min((v for row in report["matrix_gbps"] for v in row if v is not None), default=None)
    gates.append({"gate": "min_link_fraction", "passed": not slow,
                  "detail": slow[0]["text"] + (f" (and {len(slow) - 1} more)" if len(slow) > 1 else "")
                  if slow else (f"lowest link {low:.3g} GB/s, {low / median:.2f}x the median {median:.3g} GB/s "
                                f"(bar {an['fraction']:g}x)" if low is not None and median else "no figures")})
    if an["min_gbps"] is not None:
        below = an["below_min"]
        gates.append({"gate": "min_link_bw", "passed": not below,
                      "detail": below[0]["text"] + (f" (and {len(below) - 1} more)" if len(below) > 1 else "")
                      if below else (f"lowest link {low:.3g} GB/s vs minimum {an['min_gbps']:g} GB/s"
                                     if low is not None else "no figures")})
    ladder = report.get("ladder")
    if ladder:
        gates.append({"gate": "scale_ladder", "passed": ladder["analysis"]["fell"] is None,
                      "detail": ladder["analysis"]["text"]})
    return dict(report, gates=gates, passed=all(g["passed"] for g in gates))


def format_pairs(report: dict) -> str:
    """A links report as text: header, the matrix (GB/s one way), the findings, the gates."""
    from hal.dist.links import format_matrix

    c, an = report["config"], report["analysis"]
    n = report["nnodes"]
    links = n * (n - 1) // 2
    lines = [f"# hal bench --pairs  nnodes {n} nranks {report['world_size']} size {c['size']} warmup "
             f"{c['warmup']} iters {c['iters']} timeout {c['timeout_s']:g}s backend {report['backend']} "
             f"device {report['device']}",
             f"# {links} link(s) in {len(report['rounds'])} round(s) of disjoint pairs between node leaders; "
             f"GB/s one way = 2 x size / round-trip time", "#"]
    lines += format_matrix(report)
    lines.append("#")
    med = an["median_gbps"]
    per = ", ".join(f"{i}: {'-' if m is None else f'{m:.3g}'}" for i, m in enumerate(an["node_median_gbps"]))
    lines.append(f"# median link  : {'-' if med is None else f'{med:.3g} GB/s'} (each node's median link, "
                 f"then the median of those; per node {per})")
    for d in an["dead_links"]:
        lines.append(f"# failed link  : {d['text']}")
    for s in an["slow_links"]:
        lines.append(f"# slow link    : {s['text']}")
    for s in an["slow_nodes"]:
        lines.append(f"# slow node    : {s['text']}")
    for s in an["below_min"]:
        lines.append(f"# below minimum: {s['text']}")
    for line in (report.get("repair") or {}).get("lines", []):
        lines.append(f"# re-pair      : {line}")
    if not (an["dead_links"] or an["slow_links"] or an["below_min"]):
        lines.append("# every link answered, none below the bars")
    ladder = report.get("ladder")
    if ladder:
        lines.append("#")
        lines.append(f"# scale ladder: all_reduce of {ladder['size']} bytes over the first k nodes' leaders "
                     f"(busbw = algbw x 2(k-1)/k)")
        lines.append("# %6s  %10s  %8s  %8s  %s" % ("nodes", "time(us)", "algbw", "busbw", "joined"))
        for st in ladder["steps"]:
            joined = ladder["labels"][st["added_node"]]
            if st["busbw_gbps"] is None:
                lines.append("  %6d  %10s  %8s  %8s  %s: %s" % (st["nodes"], "-", "-", "-", joined, st["error"]))
            else:
                lines.append("  %6d  %10s  %8.3f  %8.3f  %s" % (st["nodes"], _fmt_time(st["time_us"]),
                                                               st["algbw_gbps"], st["busbw_gbps"], joined))
        lines.append(f"# ladder       : {ladder['analysis']['text']}")
    for g in report.get("gates", []):
        lines.append(f"# gate {g['gate']:<17}: {'PASS' if g['passed'] else 'FAIL'}  {g['detail']}")
    return "\n".join(lines)
