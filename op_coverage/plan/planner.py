"""The planner: for each node a target does not run natively, find the cheapest composition
of operators it does run.

Candidates for one node are ONNX's function body (:mod:`op_coverage.plan.function_rules`) and the project
rules (:mod:`op_coverage.plan.rules`).  Each candidate is applied to the node itself, so attribute-,
opset- and dtype-dependent rules decide on real values; every emitted node is judged against
the target profile and, when it is not native, planned again (depth-bounded).  Among the
complete compositions the planner prefers the most accurate (rule ``quality``), then the
cheapest (weighted node count).  When none exists it names the leaf operators that block it.
"""
from __future__ import annotations

import warnings
from collections import ChainMap, Counter
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from op_coverage.plan.function_rules import body_rule, has_body
from op_coverage.onnx.inventory import NodeInfo, _schema, _type_params, _typed_inputs, dtype_name, norm_domain
from op_coverage.targets.profile import SupportProfile
from op_coverage.plan.rules import Builder, Decline, Rule, rules_for
from op_coverage.plan.rules._base import dtype_enum

MAX_DEPTH = 6
#: relative cost of one node (everything else counts 1); Constant and shape plumbing are nearly free
COST = {"Constant": 0.0, "Shape": 0.1, "Identity": 0.1, "Reshape": 0.2, "Unsqueeze": 0.2, "Squeeze": 0.2,
        "Gather": 0.5, "Transpose": 0.5, "Cast": 0.5, "MatMul": 4.0, "Gemm": 4.0, "Exp": 2.0, "Log": 2.0,
        "Tanh": 2.0, "Erf": 2.0, "Sqrt": 2.0, "Div": 1.5, "Pow": 2.0}


#: ops whose output shape depends on the values of their inputs: no static composition exists
DATA_DEPENDENT = {
    ("ai.onnx", "NonZero"): "one row per nonzero element",
    ("ai.onnx", "NonMaxSuppression"): "one row per box kept",
    ("ai.onnx", "Unique"): "one element per distinct value",
    ("ai.onnx", "Compress"): "one slice per true condition",
}


@dataclass
class Env:
    """What the planner knows about values visible in one scope."""

    types: dict = field(default_factory=dict)    # value -> dtype name
    shapes: dict = field(default_factory=dict)   # value -> [int | str | None]
    consts: dict = field(default_factory=dict)   # value -> numpy array
    opsets: dict = field(default_factory=dict)   # domain -> version ("ai.onnx" for the default domain)

    def child(self) -> "Env":
        return Env(ChainMap({}, self.types), ChainMap({}, self.shapes), ChainMap({}, self.consts), self.opsets)


@dataclass
class NodePlan:
    """How one node is replaced (or why it cannot be)."""

    ok: bool
    nodes: list = field(default_factory=list)
    rules: list = field(default_factory=list)
    cost: float = 0.0
    quality: int = 0
    leaves: Counter = field(default_factory=Counter)
    blocked_by: set = field(default_factory=set)
    reasons: list = field(default_factory=list)

    @property
    def native(self) -> bool:
        return self.ok and not self.rules

    def summary(self) -> dict:
        """The JSON form the scan report and the rewrite report carry."""
        if self.ok:
            return {"status": "replaceable", "via": list(dict.fromkeys(self.rules)),
                    "nodes": sum(1 for n in self.nodes if n.op_type != "Constant"),
                    "cost": round(self.cost, 2), "exact": self.quality == 0,
                    "leaves": sorted(f"{d}::{o}" if d != "ai.onnx" else o for d, o in self.leaves)}
        return {"status": "blocked", "blocked_by": sorted(self.blocked_by),
                "reasons": list(dict.fromkeys(self.reasons))[:8]}


def _label(domain: str, op: str) -> str:
    return op if domain == "ai.onnx" else f"{domain}::{op}"


def node_info(node: onnx.NodeProto, env: Env, path: str = "main") -> NodeInfo:
    """The scan's view of a node the planner made or is about to replace (for the profile's judge)."""
    dom = norm_domain(node.domain)
    opset = env.opsets.get(dom)
    schema = _schema(node.op_type, dom, opset)
    return NodeInfo(name=node.name or node.op_type, op_type=node.op_type, domain=dom, opset=opset,
                    version=schema.since_version if schema is not None else None, path=path,
                    input_dtypes=[env.types.get(x) if x else None for x in node.input],
                    input_shapes=[env.shapes.get(x) if x else None for x in node.input],
                    inputs=list(node.input), outputs=list(node.output),
                    typed_inputs=_typed_inputs(schema, len(node.input)),
                    type_params=_type_params(schema, len(node.input)), attributes=list(node.attribute),
                    opsets=env.opsets)


def _record_tensor_type(env: Env, name: str, tt: onnx.TypeProto.Tensor) -> None:
    """Note a value's dtype and (partly symbolic) shape in ``env``."""
    d = dtype_name(tt.elem_type)
    if d:
        env.types[name] = d
    if tt.HasField("shape"):
        env.shapes[name] = [x.dim_value if x.HasField("dim_value") else (x.dim_param or None) for x in tt.shape.dim]


def infer_into(nodes: list, env: Env) -> None:
    """Run onnx shape inference over *nodes* alone and record the types/shapes of their outputs."""
    produced = {o for n in nodes for o in n.output if o}
    needed = list(dict.fromkeys(x for n in nodes for x in n.input if x and x not in produced))
    inputs = []
    for x in needed:
        d = env.types.get(x)
        if d is None:
            continue
        inputs.append(helper.make_tensor_value_info(x, dtype_enum(d), env.shapes.get(x)))
    known = {i.name for i in inputs}
    if len(known) != len(needed):
        # unknown outer value: give onnx an untyped input so the rest still infers
        inputs += [helper.make_value_info(x, onnx.TypeProto()) for x in needed if x not in known]
    outputs = [helper.make_value_info(o, onnx.TypeProto()) for o in produced]
    g = helper.make_graph(nodes, "plan", inputs, outputs)
    opsets = [helper.make_opsetid("" if d == "ai.onnx" else d, v) for d, v in env.opsets.items()]
    m = helper.make_model(g, opset_imports=opsets)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inferred = onnx.shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - types stay unknown; rules that need them decline
        return
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        if vi.type.HasField("tensor_type") and vi.name in produced:
            _record_tensor_type(env, vi.name, vi.type.tensor_type)
    # subgraphs (a Loop brought in by an expansion): keep what inference learnt about their values
    for n, inf in zip(nodes, inferred.graph.node):
        for a, ia in zip(n.attribute, inf.attribute):
            subs = [(a.g, ia.g)] if a.type == onnx.AttributeProto.GRAPH else list(zip(a.graphs, ia.graphs))
            for g, ig in subs:
                del g.value_info[:]
                g.value_info.extend(ig.value_info)
                for v, iv in zip(list(g.input) + list(g.output), list(ig.input) + list(ig.output)):
                    if not v.type.HasField("tensor_type") or not v.type.tensor_type.elem_type:
                        v.type.CopyFrom(iv.type)
    for n in nodes:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value":
                    env.consts[n.output[0]] = numpy_helper.to_array(a.t)


class Planner:
    """Plans replacements for one target profile.

    :param profile: the target; a node is a leaf when the profile judges it ``native``.
    :param fresh: model-wide unique-name generator (see :func:`name_generator`).
    :param max_depth: how many rule applications may nest.
    :param extra_rules: more rules to consider (tried after the built-in ones).
    """

    def __init__(self, profile: SupportProfile, fresh: Callable[[str], str], max_depth: int = MAX_DEPTH,
                 extra_rules: tuple = ()):
        self.profile = profile
        self.fresh = fresh
        self.max_depth = max_depth
        self.extra_rules = tuple(extra_rules)
        self._native: dict = {}
        self._memo: dict = {}

    def candidates(self, domain: str, op: str) -> list[Rule]:
        """Function body first, then the project rules, then extra rules."""
        out = [body_rule(domain, op)] if has_body(domain, op) else []
        return out + rules_for(domain, op) + [r for r in self.extra_rules if r.domain == domain and r.op == op]

    def is_native(self, node: onnx.NodeProto, env: Env, path: str = "main") -> bool:
        info = node_info(node, env, path)
        key = (info.domain, info.op_type, info.version, tuple(info.known_dtypes))
        if key not in self._native:
            self._native[key] = self.profile.judge(info).status == "native"
        return self._native[key]

    def plan(self, node: onnx.NodeProto, env: Env, depth: int = 0, path: str = "main",
             active: frozenset = frozenset()) -> NodePlan:
        """Plan *node*: itself when native, else the best composition, else why none exists."""
        if self.is_native(node, env, path):
            dom = norm_domain(node.domain)
            return NodePlan(True, [node], [], COST.get(node.op_type, 1.0), 0, Counter({(dom, node.op_type): 1}))
        return self.replace(node, env, depth, path, active)

    def replace_cached(self, node: onnx.NodeProto, env: Env, path: str = "main") -> NodePlan:
        """:meth:`replace`, reusing the plan of an identical earlier node (same op, attributes,
        input types, shapes and constant values) with fresh internal names."""
        key = _signature(node, env)
        hit = self._memo.get(key) if key is not None else None
        if hit is None:
            plan = self.replace(node, env, 0, path)
            if key is not None:
                self._memo[key] = (node, plan)
            return plan
        first, plan = hit
        if not plan.ok:
            return plan
        names = dict(zip(first.input, node.input))
        names.update(zip(first.output, node.output))
        prefix = node.name or node.op_type

        def rn(x: str) -> str:
            if not x:
                return ""
            if x not in names:
                names[x] = self.fresh(f"{prefix}_{x.rsplit('_', 1)[0][-24:]}")
            return names[x]

        nodes = []
        for n in plan.nodes:
            c = onnx.NodeProto()
            c.CopyFrom(n)
            c.input[:] = [rn(x) for x in n.input]
            c.output[:] = [rn(x) for x in n.output]
            c.name = self.fresh(f"{prefix}/{n.op_type}")
            nodes.append(c)
        return NodePlan(True, nodes, list(plan.rules), plan.cost, plan.quality, Counter(plan.leaves))

    def replace(self, node: onnx.NodeProto, env: Env, depth: int = 0, path: str = "main",
                active: frozenset = frozenset()) -> NodePlan:
        """The best composition for *node*, whether or not the target runs it natively.

        :param active: the ops being replaced further up this plan; meeting one again is a
            cycle (Less -> Greater -> Less where the target has neither), not a composition.
        """
        dom = norm_domain(node.domain)
        label = _label(dom, node.op_type)
        if label in active:
            return NodePlan(False, blocked_by={label}, reasons=[
                f"{label}: the rules lead back to {label}, which the target lacks ({' / '.join(sorted(active))} "
                "are all being replaced)"])
        if depth >= self.max_depth:
            return NodePlan(False, blocked_by={label}, reasons=[f"{label}: depth limit {self.max_depth} reached"])
        rules = self.candidates(dom, node.op_type)
        if not rules and (dom, node.op_type) in DATA_DEPENDENT:
            return NodePlan(False, blocked_by={label}, reasons=[
                f"{label}: its output shape depends on the input values ({DATA_DEPENDENT[(dom, node.op_type)]}), "
                "so no composition of static-shape operators can exist; run it on the host (host fallback: a "
                "profile with fallback_profile, or split the model around it)"])
        if not rules:
            return NodePlan(False, blocked_by={label}, reasons=[f"{label}: no function body and no rule"])
        best: NodePlan | None = None
        blocked: set = set()
        reasons: list = []
        for rule in rules:
            sub_env = env.child()
            b = Builder(sub_env.types, sub_env.shapes, sub_env.consts, env.opsets, self.fresh,
                        prefix=(node.name or node.op_type))
            try:
                rule.apply(b, node)
            except Decline as e:
                reasons.append(str(e))
                continue
            if not b.nodes:
                reasons.append(f"{rule.name}: produced no nodes")
                continue
            infer_into(b.nodes, sub_env)
            # the same op again only where the target runs that node (a Slice of int32 for one of bool)
            if any(norm_domain(n.domain) == dom and n.op_type == node.op_type and not self.is_native(n, sub_env, path)
                   for n in b.nodes):
                reasons.append(f"{rule.name}: emits {label} again, which the target lacks there too")
                continue
            parts = [self.plan(n, sub_env, depth + 1, path, active | {label}) for n in b.nodes]
            if not all(p.ok for p in parts):
                for p in parts:
                    if not p.ok:
                        blocked |= p.blocked_by
                        reasons += [f"{rule.name} -> {r}" for r in p.reasons[:3]]
                continue
            cand = NodePlan(True, [n for p in parts for n in p.nodes], [rule.name] + [r for p in parts for r in p.rules],
                            rule.penalty + sum(p.cost for p in parts), max([rule.quality] + [p.quality for p in parts]),
                            sum((p.leaves for p in parts), Counter()))
            if best is None or (cand.quality, cand.cost) < (best.quality, best.cost):
                best = cand
        if best is not None:
            return best
        return NodePlan(False, blocked_by=blocked or {label}, reasons=reasons or [f"{label}: every rule declined"])


def _signature(node: onnx.NodeProto, env: Env):
    """What a plan for *node* can depend on; None when a subgraph attribute makes it unique."""
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return None
    ins = []
    for x in node.input:
        c = env.consts.get(x) if x else None
        shape = env.shapes.get(x) if x else None
        ins.append((bool(x), env.types.get(x) if x else None, tuple(shape) if shape is not None else None,
                    None if c is None else (str(c.dtype), c.shape, c.tobytes())))
    return (node.domain, node.op_type, tuple(a.SerializeToString() for a in node.attribute),
            tuple(ins), tuple(bool(o) for o in node.output))


def name_generator(model: onnx.ModelProto) -> Callable[[str], str]:
    """A ``fresh(prefix)`` that never returns a name already used anywhere in *model*."""
    used: set = set()

    def graph_names(g):
        for x in list(g.input) + list(g.output) + list(g.value_info):
            used.add(x if isinstance(x, str) else x.name)
        for t in getattr(g, "initializer", ()):
            used.add(t.name)
        for n in g.node:
            used.add(n.name)
            used.update(n.input)
            used.update(n.output)
            for a in n.attribute:
                if a.HasField("g"):
                    graph_names(a.g)
                for s in a.graphs:
                    graph_names(s)

    graph_names(model.graph)
    for f in model.functions:
        graph_names(f)
    counter = Counter()

    def fresh(prefix: str) -> str:
        base = "".join(c if c.isalnum() or c in "_/.-" else "_" for c in prefix)[:80] or "v"
        while True:
            counter[base] += 1
            name = f"{base}_{counter[base]}"
            if name not in used:
                used.add(name)
                return name

    return fresh


def scope_env(graph, outer: Env | None, opsets: dict) -> Env:
    """Types, shapes and constants of one graph (initializers included), over the outer scope's."""
    env = outer.child() if outer is not None else Env(opsets=opsets)
    env.opsets = opsets
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        if not isinstance(vi, str) and vi.type.HasField("tensor_type"):
            _record_tensor_type(env, vi.name, vi.type.tensor_type)
    for t in getattr(graph, "initializer", ()):
        env.types[t.name] = dtype_name(t.data_type)
        env.shapes[t.name] = list(t.dims)
        if t.data_location != onnx.TensorProto.EXTERNAL and _small(t):
            try:
                env.consts[t.name] = numpy_helper.to_array(t)
            except Exception:  # noqa: BLE001 - elided or odd tensors are simply not constants here
                pass
    for n in graph.node:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value" and a.HasField("t"):
                    try:
                        env.consts[n.output[0]] = numpy_helper.to_array(a.t)
                    except Exception:  # noqa: BLE001
                        pass
                elif a.name in ("value_int", "value_ints", "value_float", "value_floats"):
                    env.consts[n.output[0]] = np.asarray(helper.get_attribute_value(a))
    return env


def _small(t: onnx.TensorProto) -> bool:
    n = 1
    for d in t.dims:
        n *= d
    return n <= 4096


def fill_replacements(model: onnx.ModelProto, rows: dict, profiles: list) -> None:
    """Set ``row.replacement`` for every op type some target does not run natively.

    ``replacement`` maps target name -> the plan summary of the op type's first node there
    (``{"status": "replaceable", "via": [...], "leaves": [...], ...}`` or
    ``{"status": "blocked", "blocked_by": [...], "reasons": [...]}``).  Planning never fails a
    scan: an unexpected error is recorded as ``{"status": "error", "reason": ...}``.
    """
    from op_coverage.rewrite.pipeline import rewrite_model
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
