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

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import onnx

from op_coverage.onnx.builder import Builder, Decline
from op_coverage.onnx.functions import has_body
from op_coverage.onnx.inventory import norm_domain
from op_coverage.onnx.values import Env, infer_into, node_info
from op_coverage.onnx.walk import has_subgraphs
from op_coverage.plan.function_rules import body_rule
from op_coverage.plan.rules import Rule, rules_for
from op_coverage.targets.profile import SupportProfile

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
    if has_subgraphs(node):
        return None
    ins = []
    for x in node.input:
        c = env.consts.get(x) if x else None
        shape = env.shapes.get(x) if x else None
        ins.append((bool(x), env.types.get(x) if x else None, tuple(shape) if shape is not None else None,
                    None if c is None else (str(c.dtype), c.shape, c.tobytes())))
    return (node.domain, node.op_type, tuple(a.SerializeToString() for a in node.attribute),
            tuple(ins), tuple(bool(o) for o in node.output))


