"""Apply the plan to a model: every node a target lacks is replaced by its composition.

Subgraphs (If/Loop/Scan bodies) and model-local function bodies are rewritten too; an
expansion inside a subgraph reads outer values by name, and every name it introduces is unique
in the whole model, so it can never shadow one.
"""
from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field

import onnx

from .inventory import norm_domain
from .plan import Env, NodePlan, Planner, name_generator, scope_env
from .profile import SupportProfile


@dataclass
class RewriteResult:
    """What :func:`rewrite_model` did."""

    model: onnx.ModelProto
    replaced: Counter = field(default_factory=Counter)      # op label -> nodes replaced
    added: Counter = field(default_factory=Counter)         # op label -> nodes added
    plans: dict = field(default_factory=dict)               # op label -> NodePlan.summary() (first node)
    blocked: dict = field(default_factory=dict)             # op label -> summary of why not
    not_native_before: int = 0

    def to_dict(self) -> dict:
        return {"replaced": dict(self.replaced), "added": dict(self.added), "plans": self.plans,
                "blocked": self.blocked, "not_native_before": self.not_native_before}


def _label(node) -> str:
    d = norm_domain(node.domain)
    return node.op_type if d == "ai.onnx" else f"{d}::{node.op_type}"


def _inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - >2 GB or odd models: plan with what value_info holds
        return model


def rewrite_model(model: onnx.ModelProto, profile: SupportProfile, *, max_depth: int = 6,
                  types_from: onnx.ModelProto | None = None) -> RewriteResult:
    """Return a rewritten copy of *model* in which nodes not native on *profile* are replaced.

    :param types_from: a model with the same graph to take types and shapes from (e.g. the
        weight-free copy :func:`op_coverage.load.load_for_scan` reads); default: shape
        inference on *model* itself.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    info = _inferred(types_from if types_from is not None else out)
    opsets = {norm_domain(i.domain): i.version for i in out.opset_import}
    planner = Planner(profile, name_generator(out), max_depth=max_depth)
    res = RewriteResult(model=out)

    def do_graph(g, info_g, outer: Env | None, path: str, opsets: dict):
        env = scope_env(info_g, outer, opsets)
        new_nodes = []
        for i, n in enumerate(g.node):
            ni = info_g.node[i] if info_g is not g and i < len(info_g.node) else n
            for a_i, a in enumerate(n.attribute):
                if a.HasField("g"):
                    do_graph(a.g, ni.attribute[a_i].g if ni is not n else a.g, env, f"{path}/{n.name}.{a.name}", opsets)
                for k, sub in enumerate(a.graphs):
                    do_graph(sub, ni.attribute[a_i].graphs[k] if ni is not n else sub, env,
                             f"{path}/{n.name}.{a.name}[{k}]", opsets)
            if (n.domain, n.op_type) in local:
                new_nodes.append(n)
                continue
            if planner.is_native(n, env, path):
                new_nodes.append(n)
                continue
            res.not_native_before += 1
            p: NodePlan = planner.replace(n, env, 0, path)
            lab = _label(n)
            if p.ok:
                new_nodes.extend(p.nodes)
                res.replaced[lab] += 1
                for m in p.nodes:
                    res.added[_label(m)] += 1
                res.plans.setdefault(lab, p.summary())
            else:
                new_nodes.append(n)
                res.blocked.setdefault(lab, p.summary())
        del g.node[:]
        g.node.extend(new_nodes)

    local = {(f.domain, f.name) for f in out.functions}
    do_graph(out.graph, info.graph, None, "main", opsets)
    for f in out.functions:
        fops = dict(opsets)
        fops.update({norm_domain(i.domain): i.version for i in f.opset_import})
        do_graph(f, f, None, f"function:{f.domain}.{f.name}", fops)
    return res
