"""Target support profiles: which (domain, op, opset, dtypes) a target runs, and how.

A profile is data (JSON, schema in ``data/profile.schema.json``) that a user can read, diff
and extend.  :class:`SupportProfile` answers one question per node: ``native``,
``host-fallback`` or ``unsupported``, with the reason and the provenance of the fact used.

Profile file format (``"format": "op_coverage.profile/1"``)::

    {
      "format": "op_coverage.profile/1",
      "name": "ascend",                      # the --target name
      "aliases": ["ascend-atc", "cann"],     # other accepted names
      "title": "Huawei Ascend CANN ATC",
      "kind": "published-table",            # published-table | live-probe | plugin | user
      "source": {"repo": "...", "path": "...", "commit": "...", "retrieved": "..."},
      "notes": "what a listed op means for this target",
      "uncertain": ["facts the source does not settle"],
      "opset_kind": "op-version",           # ranges are schema since_versions, or "model-opset"
      "opset_range": [8, 18],               # model opsets the source covers, or null
      "unlisted": {"status": "unsupported", "reason": "not in the ATC map"},
      "fallback_profile": null,             # name of a profile whose native ops run as host-fallback
      "expands_functions": false,           # the runtime inlines onnx's function body of an op it lacks
      "entries": [
        {"domain": "ai.onnx", "op": "Abs", "since": 8, "until": 18, "dtypes": [],
         "status": "native", "restriction": "", "target_op": "Abs", "provenance": "onnx.yaml key ai.onnx::8::Abs"}
      ]
    }

``status`` is ``native`` (a ``restriction`` note may qualify it), ``host-fallback`` (runs,
but on the host CPU) or ``unsupported``.  ``since``/``until`` are inclusive and ``null`` means
open; ``dtypes`` empty means the source gives no types.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable

from op_coverage.errors import BadProfile
from op_coverage.onnx.inventory import NodeInfo

FORMAT = "op_coverage.profile/1"
STATUSES = ("native", "host-fallback", "unsupported")
RANK = {s: i for i, s in enumerate(STATUSES)}
_MAX_EXPANSION = 4  # function bodies inside function bodies judged at most this deep


@dataclass(frozen=True)
class Verdict:
    """How one target treats one node."""

    status: str
    reason: str = ""
    restriction: str = ""
    provenance: str = ""
    target_op: str | None = None

    def to_dict(self) -> dict:
        return {"status": self.status, "reason": self.reason, "restriction": self.restriction,
                "provenance": self.provenance, "target_op": self.target_op}


@dataclass
class SupportProfile:
    """One target's operator support, loaded from profile data."""

    name: str
    title: str
    kind: str
    source: dict
    entries: list[dict]
    aliases: list[str] = field(default_factory=list)
    notes: str = ""
    uncertain: list[str] = field(default_factory=list)
    opset_kind: str = "op-version"
    opset_range: list | None = None
    unlisted: dict = field(default_factory=lambda: {"status": "unsupported", "reason": "not listed"})
    fallback_profile: str | None = None
    expands_functions: bool = False  # the runtime inlines onnx's function body of an op it has no kernel for
    not_expanded: list = field(default_factory=list)  # [{"op", "from_opset", "reason"}]: bodies it does not inline
    open_ended: str = "range"  # "range": until null = every later version; "since-only": that version alone
    float16_via_float: bool = False  # float16 nodes without a float16 entry run through the float entry
    origin: str = ""  # file or plugin the profile came from
    resolve: Callable[[str], "SupportProfile | None"] | None = None

    def __post_init__(self) -> None:
        self._expanding = 0  # nesting of function-body expansions in progress
        self._index: dict[tuple[str, str], list[dict]] = {}
        for e in self.entries:
            self._index.setdefault((e.get("domain") or "ai.onnx", e["op"]), []).append(e)

    @classmethod
    def from_dict(cls, data: dict, origin: str = "", validate: bool = True) -> "SupportProfile":
        """Build a profile from its JSON form; raises :class:`BadProfile` naming the problem."""
        problems = validate_profile(data) if validate else []
        if problems:
            raise BadProfile(f"profile {origin or data.get('name', '?')}: {problems[0]}; "
                             "see op_coverage/data/profile.schema.json")
        return cls(name=data["name"], title=data.get("title", data["name"]), kind=data.get("kind", "user"),
                   source=data.get("source", {}), entries=data["entries"], aliases=data.get("aliases", []),
                   notes=data.get("notes", ""), uncertain=data.get("uncertain", []),
                   opset_kind=data.get("opset_kind", "op-version"), opset_range=data.get("opset_range"),
                   unlisted=data.get("unlisted", {"status": "unsupported", "reason": "not listed"}),
                   fallback_profile=data.get("fallback_profile"),
                   expands_functions=bool(data.get("expands_functions", False)),
                   open_ended=data.get("open_ended", "range"), not_expanded=data.get("not_expanded", []),
                   float16_via_float=bool(data.get("float16_via_float", False)), origin=origin)

    @classmethod
    def from_file(cls, path: str | Path) -> "SupportProfile":
        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise BadProfile(f"profile {p}: no such file; check the --profile path") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise BadProfile(f"profile {p}: not valid JSON ({e}); fix the file") from None
        if not isinstance(data, dict):
            raise BadProfile(f"profile {p}: top level must be a JSON object")
        return cls.from_dict(data, origin=str(p))

    def to_dict(self) -> dict:
        return {"format": FORMAT, "name": self.name, "aliases": self.aliases, "title": self.title,
                "kind": self.kind, "source": self.source, "notes": self.notes, "uncertain": self.uncertain,
                "opset_kind": self.opset_kind, "opset_range": self.opset_range, "unlisted": self.unlisted,
                "fallback_profile": self.fallback_profile, "expands_functions": self.expands_functions, "not_expanded": self.not_expanded,
                "open_ended": self.open_ended, "float16_via_float": self.float16_via_float, "entries": self.entries}

    def provenance(self) -> str:
        s = self.source
        bits = [s.get("repo"), s.get("path"), (s.get("commit") or "")[:12] or None]
        return " · ".join(b for b in bits if b) or self.origin or self.kind

    def opset_note(self, opsets: dict[str, int]) -> str | None:
        """A warning when the model's ai.onnx opset lies outside the range the source covers."""
        if not self.opset_range:
            return None
        lo, hi = self.opset_range
        v = opsets.get("ai.onnx")
        if v is None:
            return None
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            return (f"{self.name}: the model's ai.onnx opset {v} is outside the opsets its source covers "
                    f"({lo or '?'}–{hi or '?'}); verdicts for this target are uncertain")
        return None

    # -- the question -------------------------------------------------------------------
    def judge(self, node: NodeInfo, expand: bool = True) -> Verdict:
        """Return how this target treats *node* (op, opset and input dtypes considered).

        :param expand: when the target ``expands_functions`` and has no kernel for *node*, judge the
            op by onnx's function body (as the runtime inlines it); ``False``: kernels only.
        """
        if not expand:
            saved, self._expanding = self._expanding, _MAX_EXPANSION
            try:
                return self.judge(node)
            finally:
                self._expanding = saved
        entries = self._index.get((node.domain, node.op_type))
        if not entries and (node.domain, node.op_type) in load_time_ops():
            why = load_time_ops()[(node.domain, node.op_type)]
            return Verdict("native", "", "", f"op_coverage/data/load_time_ops.json: {why}")
        if not entries:
            if node.domain in ("ai.onnx", "ai.onnx.ml") and node.version is None and node.function is None:
                why = f"{node.op_type} is not an operator of {node.domain} opset {node.opset}"
            else:
                why = f"{node.domain}::{node.op_type} {self.unlisted.get('reason', 'not listed')}"
            return self._unlisted(node, why)
        version = node.version if self.opset_kind == "op-version" and node.version is not None else node.opset
        clamp_note = ""
        if self.opset_kind == "model-opset" and self.opset_range and version is not None:
            hi = self.opset_range[1]
            if hi is not None and version > hi:
                clamp_note = f"model opset {version} is above the source's newest ({hi}); judged as of opset {hi}"
                version = hi
        in_range = [e for e in entries if _in_range(e, version, self.open_ended)]
        if not in_range:
            ranges = ", ".join(_range_text(e) for e in entries)
            return self._unlisted(node, f"opset {version} not covered (listed for {ranges})")
        dtypes = node.known_dtypes
        typed = [e for e in in_range if not e.get("dtypes") or set(dtypes) <= _dtype_set(e)]
        if not typed and self.float16_via_float and "float16" in dtypes:
            as_float = set(dtypes) - {"float16"} | {"float"}
            typed = [e for e in in_range if not e.get("dtypes") or as_float <= _dtype_set(e)]
            if typed:
                best = min(typed, key=lambda e: (RANK[e["status"]], bool(e.get("restriction"))))
                if best["status"] == "native":
                    return Verdict("native", "", "computed in float32: no float16 kernel, so onnxruntime puts "
                                   "Cast nodes around it (InsertCastTransformer)",
                                   best.get("provenance") or self.provenance(), best.get("target_op"))
                typed = []
        secondary_note = ""
        if not typed:
            typed, secondary_note = _judge_primary_only(node, in_range)
        if not typed:
            listed = sorted(set().union(*(_dtype_set(e) for e in in_range)))
            missing = sorted(set(dtypes) - set(listed))
            return self._unlisted(node, f"dtype {', '.join(missing)} not supported (listed: {', '.join(listed)})")
        best = min(typed, key=lambda e: (RANK[e["status"]], bool(e.get("restriction"))))
        prov = best.get("provenance") or self.provenance()
        reason = ""
        if best["status"] == "unsupported":
            reason = best.get("reason") or f"listed as not supported by {self.title}"
        elif best["status"] == "host-fallback":
            reason = best.get("reason") or "runs on the host CPU"
        if clamp_note:
            prov = f"{prov} ({clamp_note})"
        restriction = "; ".join(x for x in (best.get("restriction", ""), secondary_note) if x)
        return Verdict(best["status"], reason, restriction, prov, best.get("target_op"))

    def _unlisted(self, node: NodeInfo, why: str) -> Verdict:
        """No entry covers *node*: the fallback profile's kernel, then onnx's function body, then the fallback's."""
        fb = self.resolve(self.fallback_profile) if self.fallback_profile and self.resolve is not None else None
        if fb is not None:
            v = fb.judge(node, expand=False)  # a runtime hands the op to another provider's kernel first
            if v.status == "native":
                return Verdict("host-fallback", f"{why}; runs on {fb.name} instead", v.restriction,
                               v.provenance, v.target_op)
        skip = next((x for x in self.not_expanded if x["op"] == node.op_type
                     and (node.opset or 0) >= x.get("from_opset", 0)), None)
        if skip is not None:
            why = f"{why}; its function body is not inlined here: {skip['reason']}"
        elif self.expands_functions and self._expanding < _MAX_EXPANSION:
            self._expanding += 1
            try:
                v = _body_verdict(self, node, why)
            finally:
                self._expanding -= 1
            if v is not None:
                return v
        if fb is not None:
            v = fb.judge(node)
            if v.status == "native":
                return Verdict("host-fallback", f"{why}; runs on {fb.name} instead", v.restriction,
                               v.provenance, v.target_op)
            return Verdict("unsupported", f"{why}; {fb.name} cannot run it either ({v.reason})", "",
                           self.provenance())
        return Verdict(self.unlisted.get("status", "unsupported"), why, "", self.provenance())


@lru_cache(maxsize=None)
def load_time_ops() -> dict:
    """Ops resolved at graph load (``data/load_time_ops.json``): native on every target."""
    from op_coverage.datafiles import read_json
    return {(o["domain"], o["op"]): o["reason"] for o in read_json("load_time_ops.json")["ops"]}


def _in_range(e: dict, version: int | None, open_ended: str = "range") -> bool:
    if version is None:
        return True
    lo, hi = e.get("since"), e.get("until")
    if hi is None and lo is not None and open_ended == "since-only":
        # onnxruntime's kernel lookup: a kernel registered without an end version serves exactly the
        # op version it was registered for, not a newer one onnx added later
        return version == lo
    return (lo is None or version >= lo) and (hi is None or version <= hi)


def _range_text(e: dict) -> str:
    lo, hi = e.get("since"), e.get("until")
    if lo is None and hi is None:
        return "any"
    return f"{lo or 1}+" if hi is None else f"{lo or 1}-{hi}"


def _kind(dtype: str) -> str:
    if dtype == "bool" or dtype == "string":
        return dtype
    return "float" if dtype.startswith(("float", "bfloat", "double")) else "integer"


def _judge_primary_only(node: NodeInfo, in_range: list) -> tuple:
    """Entries that fit when inputs of a second type parameter go unjudged, and the note saying so.

    Sources such as TensorRT's operator table give one type list per op: the types of its
    main tensor (QuantizeLinear: ``x``, not the int8 ``y_zero_point`` of parameter T2).
    When no listed type is even of the same kind (float / integer / bool) as an input of
    another parameter, the source did not list that parameter's types: those inputs are
    left unjudged rather than reported as an unsupported dtype.
    """
    params = node.type_params or []
    primary = next((p for p in params if p), None)
    if primary is None:
        return [], ""
    listed = set().union(*(_dtype_set(e) for e in in_range))
    kinds = {_kind(d) for d in listed}
    keep, skipped = set(), set()
    for d, p in zip(node.input_dtypes, params):
        if not d or p is None:
            continue
        if p != primary and _kind(d) not in kinds:
            skipped.add(f"{d} ({p})")
        else:
            keep.add(d)
    if not skipped:
        return [], ""
    typed = [e for e in in_range if not e.get("dtypes") or keep <= _dtype_set(e)]
    note = (f"the source lists the types of {primary} only; {', '.join(sorted(skipped))} of the other "
            "input(s) not judged")
    return typed, note if typed else ""


def _dtype_set(e: dict) -> set:
    return {d.split(" ")[0] for d in e.get("dtypes") or []}


def validate_profile(data: dict) -> list[str]:
    """Check *data* against the published profile schema; return problems (empty: valid)."""
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - jsonschema is a test dependency; keep a minimal check
        need = [k for k in ("name", "entries") if k not in data]
        return [f"missing field {k!r}" for k in need]
    from op_coverage.datafiles import read_json
    schema = read_json("profile.schema.json")
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(data), key=lambda e: list(e.path))
    return [f"{'/'.join(str(p) for p in e.path) or '(top)'}: {e.message}" for e in errors]


def _body_verdict(profile, node, why: str):
    """How *profile* runs *node* by inlining onnx's function body, as onnxruntime does for an op
    that no provider has a kernel for; ``None`` when the op has no usable body here.

    Every node of the body is judged by *profile* again (bodies inside bodies too); the verdict is
    the worst of them, and it names the body's operators.
    """
    # here, not at the top: onnx's schemas and helper are imported only when a body is inlined
    from onnx import helper

    from op_coverage.onnx.builder import Builder, Decline
    from op_coverage.onnx.functions import ONNX, expand_body, has_body
    from op_coverage.onnx.values import Env, infer_into, node_info
    if node.domain != ONNX or node.opset is None or not has_body(node.domain, node.op_type):
        return None
    proto = helper.make_node(node.op_type, list(node.inputs), list(node.outputs))
    proto.attribute.extend(node.attributes or [])
    opsets = dict(node.opsets or {ONNX: node.opset})
    env = Env(opsets=opsets)
    for x, d, shape in zip(node.inputs, node.input_dtypes, node.input_shapes):
        if x and d:
            env.types[x] = d
            if shape is not None:
                env.shapes[x] = shape
    count = [0]

    def fresh(prefix: str) -> str:
        count[0] += 1
        return f"{prefix}__body{count[0]}"

    b = Builder(env.types, env.shapes, env.consts, opsets, fresh, prefix=node.op_type)
    try:
        expand_body(b, proto, node.domain)
    except Decline:
        return None
    infer_into(b.nodes, env)
    verdicts = [(n, profile.judge(node_info(n, env, node.path))) for n in b.nodes]
    worst = max(RANK[v.status] for _, v in verdicts)
    ops = ", ".join(dict.fromkeys(n.op_type for n in b.nodes))
    how = f"no kernel ({why}); the runtime inlines onnx's function body of {node.op_type}: {ops}"
    if worst == RANK["native"]:
        return Verdict("native", "", "", f"{profile.provenance()}; {how}")
    status = "host-fallback" if worst == RANK["host-fallback"] else "unsupported"
    bad = sorted({f"{n.op_type} ({v.reason.split(';')[0]})" for n, v in verdicts if RANK[v.status] == worst})
    return Verdict(status, f"{why}; its inlined function body needs {', '.join(bad)}", "", profile.provenance())
