"""``op_coverage scan ops.json -t ascend,musa``: a trace of aten ops judged against torch profiles.

Each op of a trace (``op_coverage trace``) is judged per target by
:meth:`hal.op_support.torch_profile.TorchProfile.judge` — native (listed, or through its
structured delegate), composite (torch's composite kernel runs it as other ops) or missing,
with what that vendor does with a missing op (CPU fallback, error, error unless an
environment variable) — and put in the same report as an ONNX scan, so every format (table,
json, csv, md, html) and the exit codes (0 / 3 / 4, ``--fail-on``) are the scan's:

* native or composite → ``native``;
* missing, and the vendor runs it on the CPU → ``host-fallback`` (exit 3);
* missing, and the vendor raises (or does something unknown) → ``unsupported`` (exit 4).

A bare vendor name (``ascend``) takes that vendor's op list for the trace's torch version, or
the nearest one with a warning naming the skew; a full name (``ascend-2.7``) takes that list
(with the same warning when its torch version is not the trace's).  An op recorded only inside
another device op (``copy_`` inside ``_to_copy``) is judged only where that parent is not
itself implemented by the target.
"""
from __future__ import annotations

from typing import Iterable

from op_coverage._version import __version__
from op_coverage.report.model import ModelReport, OpRow, Report, TargetSummary, merge_verdicts
from op_coverage.targets.profile import Verdict as ReportVerdict

#: the targets of a torch scan without -t: each vendor's newest op list
DEFAULT_TARGETS = ("ascend", "mlu", "musa", "xpu", "mps", "gcu", "cuda")

_STATUS = {"native": "native", "composite": "native"}


def resolve(requested: Iterable[str], torch_version: str, profile_files=(), use_plugins: bool = False):
    """``-t`` values → ``[(TorchProfile, skew warning or None)]`` for a trace of ``torch_version``."""
    from hal.op_support.torch_profile import minor_version, alias_map, load_torch_profiles, nearest_profile, resolve_torch_targets

    profiles = load_torch_profiles(profile_files or (), use_plugins)
    amap = alias_map(profiles)
    flat = [t.strip() for r in requested for t in str(r).split(",") if t.strip()] or list(DEFAULT_TARGETS)
    out, seen = [], set()
    for t in flat:
        if t != "all" and t in amap and amap[t] != t:  # a vendor alias: the list nearest the trace
            picked = [nearest_profile(profiles, t, torch_version)]
        else:
            picked = []
            for p in resolve_torch_targets(profiles, [t]):
                warn = None
                if minor_version(p.torch_version) != minor_version(torch_version):
                    warn = (f"torch version skew: {p.name} lists ops of torch {p.torch_version}, the trace was "
                            f"recorded with torch {torch_version}; ops added, renamed or made composite in "
                            f"between may be judged wrongly (-t {p.vendor} picks the nearest list)")
                picked.append((p, warn))
        for p, warn in picked:
            if p.name not in seen:
                seen.add(p.name)
                out.append((p, warn))
    return out


def _report_verdict(v, profile) -> ReportVerdict:
    if v.status in _STATUS:
        reason = "" if v.status == "native" and v.via == "listed" else v.detail
        return ReportVerdict("native", reason, provenance=v.via)
    status = "host-fallback" if v.behaviour == "cpu_fallback" else "unsupported"
    reason = v.detail or f"not in {profile.name}'s op list"
    return ReportVerdict(status, reason, provenance=v.behaviour or "")


def _locations(row: dict) -> list:
    phases = row.get("phases") or {}
    used = "/".join(p for p in ("forward", "backward", "optimizer") if phases.get(p))
    where = row.get("first_frame") or "?"
    if not row.get("count") and row.get("parents"):
        where = "inside " + ", ".join(sorted(row["parents"]))
    return [(where, used or ("nested" if not row.get("count") else ""))]


def scan_trace(trace: dict, targets: Iterable[str] = (), profile_files=(), use_plugins: bool = False,
               plan: bool = True, path: str = "<trace>") -> Report:
    """Judge every op of ``trace`` (a dict of schema ``op_coverage.torch_trace/1``) on ``targets``."""
    chosen = resolve(targets, trace["torch_version"], profile_files, use_plugins)
    ops = {r["op"]: r for r in trace["ops"] if "::" not in r["op"]}
    rows, summaries, warnings = [], [], []
    other = sorted(r["op"] for r in trace["ops"] if "::" in r["op"])
    if other:  # c10d collectives, custom ops: not in any vendor's aten list
        warnings.append(f"not judged (not aten ops: collectives run on the vendor's communication library "
                        f"through hal.dist; custom ops need the vendor's own kernel): {', '.join(other)}")
    for p, warn in chosen:
        if warn:
            warnings.append(warn)
    judged = {p.name: {op: p.judge(op) for op in ops} for p, _ in chosen}
    for name, r in ops.items():
        row = OpRow(domain="aten", op_type=name, count=int(r["count"]) or int(r.get("nested", 0)))
        row.dtypes.update(r.get("dtypes") or ())
        row.locations = _locations(r)
        for p, _ in chosen:
            v = judged[p.name][name]
            if not r["count"] and r.get("parents") and all(
                    judged[p.name].get(parent) is not None and judged[p.name][parent].status == "native"
                    for parent in r["parents"]):
                rv = ReportVerdict("native", f"runs inside {', '.join(sorted(r['parents']))}, which "
                                             f"{p.name} implements", provenance="parent")
            else:
                rv = _report_verdict(v, p)
            d = merge_verdicts([rv])
            d.update({"torch_status": v.status, "via": v.via, "behaviour": v.behaviour, "message": v.message})
            row.support[p.name] = d
        rows.append(row)
    for p, _ in chosen:
        s = TargetSummary(name=p.name, title=p.title or p.name, kind="torch", provenance=p.origin,
                          uncertain=list(p.uncertain))
        for row in rows:
            st = row.support[p.name]["status"]
            s.op_types += 1
            s.op_types_native += st == "native"
            s.nodes += row.count
            s.nodes_by_status[st] += row.count
        summaries.append(s)
    if plan:
        _fill_plans(rows, chosen)
    rank = {"native": 0, "host-fallback": 1, "unsupported": 2}
    rows.sort(key=lambda r: (-max((rank[v["status"]] for v in r.support.values()), default=0), -r.count, r.op_type))
    calls = sum(int(r["count"]) for r in trace["ops"])
    info = {"kind": "torch-trace", "torch_version": trace["torch_version"], "source": trace.get("source"),
            "steps": trace.get("steps") or 0, "calls": calls, "op_types": len(rows)}
    model = ModelReport(path=path, model=info, rows=rows, targets=summaries, nodes=[], warnings=warnings)
    return Report(models=[model], target_names=[p.name for p, _ in chosen], tool_version=__version__)


def _fill_plans(rows, chosen) -> None:
    """Each missing op's replacement per target, when the planner is there (hal.op_support.torch_plan)."""
    try:
        from hal.op_support.torch_plan import plan_op
    except ImportError:
        return
    for row in rows:
        for p, _ in chosen:
            if row.support[p.name]["torch_status"] != "missing":
                continue
            try:
                plan = plan_op(row.op_type, p, dtypes=_torch_dtypes(row.dtypes))
            except Exception as exc:  # noqa: BLE001 - a plan that fails is reported, not raised
                plan = None
                row.replacement = dict(row.replacement or {}, **{p.name: {
                    "op": row.op_type, "kind": "none", "exact": False, "pieces": [], "blocking": [row.op_type],
                    "detail": f"the planner failed: {type(exc).__name__}: {exc}"}})
            if plan is not None:
                row.replacement = dict(row.replacement or {}, **{p.name: plan.to_dict()})


def _torch_dtypes(names) -> list:
    """A trace's dtypes (``float32``), floating ones first: what the planner builds its inputs of."""
    return sorted(names, key=lambda n: (not n.startswith(("float", "bfloat")), n)) or ["float32"]



def is_trace_file(path: str) -> bool:
    """True for a JSON file whose schema is a torch trace (cheap: reads the first bytes)."""
    if not str(path).endswith(".json"):
        return False
    try:
        with open(path, encoding="utf-8") as f:
            head = f.read(4096)
    except OSError:
        return False
    from op_coverage.torch.trace import SCHEMA
    return SCHEMA in head
