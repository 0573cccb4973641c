"""The library call behind ``op_coverage scan``: load → inventory → judge per target → report."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from op_coverage._version import __version__
from op_coverage.errors import ModelNotFound, ScanError
from op_coverage.onnx.inventory import Inventory, build_inventory
from op_coverage.onnx.load import LoadedModel, load_for_scan
from op_coverage.targets.profile import RANK, SupportProfile, Verdict
from op_coverage.report.model import ModelReport, OpRow, Report, TargetSummary, merge_verdicts
from op_coverage.targets.catalog import TargetSet, load_targets

if TYPE_CHECKING:
    import onnx


def _progress(iterable, total: int, desc: str, enabled: bool | None):
    from hal.util.term import progress

    return progress(iterable, desc, "model" if desc == "scan" else "op", enabled=enabled, total=total)


def _judge_all(inv: Inventory, profile: SupportProfile) -> list[Verdict]:
    verdicts: list[Verdict | None] = [None] * len(inv.nodes)
    # nodes that differ only by name and wiring get the same verdict (a chain of 256 MatMuls is
    # judged once); not for nodes with attributes (a function body may depend on them), nor for a
    # profile that prepares per model (ort-live looks attributes up by node name)
    same: dict | None = None if hasattr(profile, "prepare") else {}
    for i, n in enumerate(inv.nodes):
        if n.function is None:
            key = None
            if same is not None and not n.attributes:
                key = (n.domain, n.op_type, n.opset, n.version, tuple(n.input_dtypes),
                       tuple(None if s is None else tuple(s) for s in n.input_shapes),
                       tuple(n.typed_inputs or ()), tuple(n.type_params or ()), tuple(sorted((n.opsets or {}).items())))
                if key in same:
                    verdicts[i] = same[key]
                    continue
            verdicts[i] = profile.judge(n)
            if key is not None:
                same[key] = verdicts[i]
    # a call of a model-local function is as good as the worst node of its body
    memo: dict[str, Verdict] = {}

    def fn_verdict(fn: str, stack=()) -> Verdict:
        if fn in memo:
            return memo[fn]
        if fn in stack:
            return Verdict("unsupported", f"function {fn} calls itself", "", "op_coverage")
        prefix = f"function:{fn}"
        body = []
        for i, n in enumerate(inv.nodes):
            if n.path == prefix or n.path.startswith(prefix + "/"):
                body.append(fn_verdict(n.function, stack + (fn,)) if n.function else verdicts[i])
        if not body:
            v = Verdict("native", "", "empty function body", "op_coverage")
        else:
            worst = max(body, key=lambda v: RANK[v.status])
            bad = sorted({v.reason.split(";")[0] for v in body if v.status == worst.status and v.reason})
            v = Verdict(worst.status, f"body: {', '.join(bad)}" if bad else "", "",
                        f"model-local function {fn}, judged by its body")
        memo[fn] = v
        return v

    for i, n in enumerate(inv.nodes):
        if n.function is not None:
            verdicts[i] = fn_verdict(n.function)
    return verdicts  # type: ignore[return-value]


def scan_model(loaded: LoadedModel, profiles: list[SupportProfile]) -> ModelReport:
    """Judge every node of an already loaded model against *profiles*."""
    inv = build_inventory(loaded)
    per_target: dict[str, list[Verdict]] = {}
    for p in profiles:
        if hasattr(p, "prepare"):
            p.prepare(loaded.model, inv.nodes)
        per_target[p.name] = _judge_all(inv, p)
        if hasattr(p, "flush"):
            p.flush()

    rows: dict[tuple, OpRow] = {}
    groups: dict[tuple, list[int]] = {}
    wbytes = inv.weight_bytes_by_op()
    for i, n in enumerate(inv.nodes):
        r = rows.get(n.key)
        if r is None:
            r = rows[n.key] = OpRow(domain=n.domain, op_type=n.op_type, function=n.function,
                                    weight_bytes=wbytes.get(n.key, 0))
        r.count += 1
        if n.version is not None:
            r.versions.add(n.version)
        r.dtypes.update(n.known_dtypes)
        r.locations.append((n.name, n.path))
        groups.setdefault(n.key, []).append(i)
    summaries = []
    for p in profiles:
        vs = per_target[p.name]
        s = TargetSummary(name=p.name, title=p.title, kind=p.kind, provenance=p.provenance(),
                          uncertain=list(p.uncertain))
        note = p.opset_note(inv.opsets)
        if note:
            s.notes.append(note)
        for key, idx in groups.items():
            merged = merge_verdicts([vs[i] for i in idx])
            rows[key].support[p.name] = merged
            s.op_types += 1
            s.op_types_native += merged["status"] == "native"
        for v in vs:
            s.nodes += 1
            s.nodes_by_status[v.status] += 1
        summaries.append(s)

    if any(v.get("status") not in (None, "native") for r in rows.values() for v in r.support.values()):
        fill_replacements(loaded.model, rows, profiles)

    def badness(r: OpRow):
        return (-max((RANK[v["status"]] for v in r.support.values()), default=0), -r.count, r.label)

    m = loaded.model
    info = {
        "file_bytes": loaded.file_bytes, "ir_version": m.ir_version, "producer": m.producer_name,
        "producer_version": m.producer_version, "opsets": inv.opsets, "nodes": len(inv.nodes),
        "op_types": len(rows), "weight_bytes": inv.weight_bytes,
        "embedded_weight_bytes": loaded.embedded_weight_bytes,
        "external_data": [{"location": f.location, "tensors": f.tensors, "bytes": f.bytes, "exists": f.exists}
                          for f in loaded.external_files],
        "functions": {k: v for k, v in inv.functions.items()},
        "shape_inference": inv.shape_inference,
        "generated_node_names": sum(n.generated_name for n in inv.nodes),
    }
    nodes = [(n, {p.name: per_target[p.name][i] for p in profiles}) for i, n in enumerate(inv.nodes)]
    return ModelReport(path=str(loaded.path), model=info, rows=sorted(rows.values(), key=badness),
                       targets=summaries, nodes=nodes, warnings=list(loaded.warnings))


def find_models(path: Path) -> list[Path]:
    """The ``*.onnx`` files under a folder (recursively), sorted; the path itself for a file."""
    if path.is_dir():
        found = sorted(p for p in path.rglob("*.onnx") if p.is_file())
        if not found:
            raise ModelNotFound(f"{path}: folder holds no *.onnx file; pass a model file or another folder")
        return found
    return [path]


def scan(path: str | os.PathLike, targets: Iterable[str] | str = ("all",), *,
         profiles: list[str] | None = None, target_set: TargetSet | None = None,
         progress: bool | None = None) -> Report:
    """Scan one model, or every ``*.onnx`` under a folder, against *targets*.

    :param path: a ``.onnx`` file or a folder.
    :param targets: target names or aliases (``"ascend"``, ``["ort-cuda", "tensorrt"]``,
        ``"all"``); see :func:`op_coverage.targets.catalog.load_targets`.
    :param profiles: extra profile JSON files (``--profile``).
    :param progress: show a tqdm bar; ``None`` means only when stderr is a terminal.
    :returns: a :class:`~op_coverage.report.Report`; load failures of a single file raise
        :class:`~op_coverage.errors.ScanError`, those inside a folder are listed in
        ``report.errors``.
    :raises ScanError: bad input (missing/corrupt/unsafe model, unknown target, bad profile).
    """
    ts = target_set or load_targets(profiles)
    chosen = ts.resolve_names([targets] if isinstance(targets, str) else list(targets))
    p = Path(path)
    files = find_models(p)
    report = Report(models=[], target_names=[t.name for t in chosen], tool_version=__version__)
    for f in _progress(files, len(files), "scan", progress):
        try:
            loaded = load_for_scan(f)
        except ScanError as e:
            if not p.is_dir():
                raise
            report.errors.append({"path": str(f), "kind": e.kind, "message": str(e), "exit_code": e.exit_code})
            continue
        report.models.append(scan_model(loaded, chosen))
    return report


def fill_replacements(model: onnx.ModelProto, rows: dict, profiles: list) -> None:
    """Set ``row.replacement`` for every op type some target does not run natively.

    ``replacement`` maps target name -> the plan summary of the op type's first node there
    (``{"status": "replaceable", "via": [...], "leaves": [...], ...}`` or
    ``{"status": "blocked", "blocked_by": [...], "reasons": [...]}``).  Planning never fails a
    scan: an unexpected error is recorded as ``{"status": "error", "reason": ...}``.
    """
    from op_coverage.plan.apply import rewrite_model  # the planner (rules, onnx.helper, numpy) only when needed
    for p in profiles:
        todo = [r for r in rows.values() if r.support.get(p.name, {}).get("status") not in (None, "native")]
        if not todo:
            continue
        try:
            res = rewrite_model(model, p)
            found = {**res.plans, **res.blocked}
        except Exception as e:  # noqa: BLE001 - the scan report must survive a planner bug
            found = {}
            err = {"status": "error", "reason": f"{type(e).__name__}: {e}"[:300]}
        else:
            err = None
        for r in todo:
            plan = found.get(r.label) or err
            if plan is None:
                continue
            r.replacement = dict(r.replacement or {})
            r.replacement[p.name] = plan
