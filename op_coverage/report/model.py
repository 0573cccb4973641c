"""The report a scan returns: per op type, per target, per node; and the exit code it implies."""
from __future__ import annotations

from dataclasses import dataclass, field

from op_coverage.targets.profile import RANK, STATUSES, Verdict

FORMAT = "op_coverage.report/1"
MAX_LOCATIONS = 20

#: documented exit codes (see docs/op_coverage.md)
EXIT_OK = 0
EXIT_FALLBACK = 3
EXIT_UNSUPPORTED = 4
FAIL_ON = ("fallback", "unsupported", "restriction", "never")


@dataclass
class OpRow:
    """One op type (domain, op_type) of one model, and how every target treats it."""

    domain: str
    op_type: str
    count: int = 0
    versions: set = field(default_factory=set)
    dtypes: set = field(default_factory=set)
    weight_bytes: int = 0
    locations: list = field(default_factory=list)  # [(node name, path)]
    support: dict = field(default_factory=dict)  # target -> {"status", "reason", ..., "counts"}
    function: str | None = None
    replacement: dict | None = None  # filled by the decomposition planner once it lands

    @property
    def label(self) -> str:
        return self.op_type if self.domain == "ai.onnx" else f"{self.domain}::{self.op_type}"

    def to_dict(self) -> dict:
        return {
            "domain": self.domain, "op_type": self.op_type, "count": self.count,
            "versions": sorted(self.versions), "dtypes": sorted(self.dtypes), "weight_bytes": self.weight_bytes,
            "function": self.function,
            "locations": [{"node": n, "path": p} for n, p in self.locations[:MAX_LOCATIONS]],
            "locations_truncated": max(0, len(self.locations) - MAX_LOCATIONS),
            "support": self.support, "replacement": self.replacement,
        }


@dataclass
class TargetSummary:
    """Coverage of one model on one target."""

    name: str
    title: str
    kind: str
    provenance: str
    uncertain: list
    op_types: int = 0
    op_types_native: int = 0
    nodes: int = 0
    nodes_by_status: dict = field(default_factory=lambda: {s: 0 for s in STATUSES})
    notes: list = field(default_factory=list)

    @property
    def coverage_by_op_type(self) -> float:
        return 100.0 * self.op_types_native / self.op_types if self.op_types else 100.0

    @property
    def coverage_by_node(self) -> float:
        return 100.0 * self.nodes_by_status["native"] / self.nodes if self.nodes else 100.0

    @property
    def worst(self) -> str:
        return max((s for s, n in self.nodes_by_status.items() if n), key=RANK.get, default="native")

    def to_dict(self) -> dict:
        return {"name": self.name, "title": self.title, "kind": self.kind, "provenance": self.provenance,
                "uncertain": self.uncertain, "op_types": self.op_types, "op_types_native": self.op_types_native,
                "nodes": self.nodes, "nodes_by_status": self.nodes_by_status,
                "coverage_by_op_type": round(self.coverage_by_op_type, 2),
                "coverage_by_node": round(self.coverage_by_node, 2), "worst": self.worst, "notes": self.notes}


@dataclass
class ModelReport:
    """The scan of one model file."""

    path: str
    model: dict
    rows: list  # [OpRow], sorted: worst first, then by count
    targets: list  # [TargetSummary]
    nodes: list  # [(NodeInfo, {target: Verdict})]
    warnings: list = field(default_factory=list)

    def worst(self) -> str:
        return max((t.worst for t in self.targets), key=RANK.get, default="native")

    def has_restriction(self) -> bool:
        return any(v.get("restriction") for r in self.rows for v in r.support.values())

    def to_dict(self, with_nodes: bool = False) -> dict:
        d = {"path": self.path, "model": self.model, "targets": [t.to_dict() for t in self.targets],
             "ops": [r.to_dict() for r in self.rows], "warnings": self.warnings}
        if with_nodes:
            d["nodes"] = [{"name": n.name, "op_type": n.op_type, "domain": n.domain, "path": n.path,
                           "support": {t: v.status for t, v in vs.items()}} for n, vs in self.nodes]
        return d


@dataclass
class Report:
    """What :func:`op_coverage.scan` returns: one :class:`ModelReport` per model scanned."""

    models: list
    target_names: list
    errors: list = field(default_factory=list)  # [{"path", "kind", "message", "exit_code"}]
    tool_version: str = ""

    def exit_code(self, fail_on: str = "fallback") -> int:
        """The CLI exit code: bad input first, then the worst status at or above *fail_on*."""
        if self.errors:
            return self.errors[0]["exit_code"]
        if fail_on == "never":
            return EXIT_OK
        worst = max((m.worst() for m in self.models), key=RANK.get, default="native")
        if worst == "unsupported":
            return EXIT_UNSUPPORTED
        if worst == "host-fallback" and fail_on in ("fallback", "restriction"):
            return EXIT_FALLBACK
        if fail_on == "restriction" and any(m.has_restriction() for m in self.models):
            return EXIT_FALLBACK
        return EXIT_OK

    def to_dict(self) -> dict:
        """The versioned JSON form (schema: ``op_coverage/data/report.schema.json``)."""
        return {"format": FORMAT, "tool": {"name": "op_coverage", "version": self.tool_version},
                "targets": self.target_names, "models": [m.to_dict() for m in self.models], "errors": self.errors,
                "exit_code": self.exit_code()}


def headline(m: ModelReport) -> str:
    """The line under a model's name: nodes, op types, opsets, weights (ONNX) or calls, ops,
    torch version, source (a torch trace)."""
    info = m.model
    if info.get("kind") == "torch-trace":
        src = info.get("source") or {}
        return (f"{info['calls']} calls of {info['op_types']} aten ops reached the device; torch "
                f"{info['torch_version']}, {info.get('steps') or 0} optimizer step(s), traced from "
                f"{src.get('kind', '?')} {src.get('target', '?')}")
    opsets = ", ".join(f"{d} {v}" for d, v in info["opsets"].items())
    return f"{info['nodes']} nodes, {info['op_types']} op types, opsets: {opsets}"


def merge_verdicts(verdicts: list[Verdict]) -> dict:
    """Aggregate the verdicts of every node of one op type on one target: the worst wins."""
    counts = {s: 0 for s in STATUSES}
    for v in verdicts:
        counts[v.status] += 1
    worst = max(verdicts, key=lambda v: (RANK[v.status], bool(v.restriction)))
    d = worst.to_dict()
    d["counts"] = counts
    return d
