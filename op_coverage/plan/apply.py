"""Apply the plan to a model in memory: every node a target lacks is replaced by its composition.

Subgraphs (If/Loop/Scan bodies) and model-local function bodies are rewritten too; an
expansion inside a subgraph reads outer values by name, and every name it introduces is unique
in the whole model, so it can never shadow one.  The file pipeline around it (load, check,
verify, write, rescan) is :mod:`op_coverage.rewrite`.
"""
from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field

import onnx

from op_coverage.onnx.inventory import norm_domain
from op_coverage.onnx.values import Env, infer_into, name_generator, scope_env
from op_coverage.onnx.walk import has_subgraphs, subgraphs
from op_coverage.plan import NodePlan, Planner
from op_coverage.targets.profile import SupportProfile


@dataclass
class RewriteResult:
    """What :func:`rewrite_model` did."""

    model: onnx.ModelProto
    replaced: Counter = field(default_factory=Counter)      # op label -> nodes replaced
    added: Counter = field(default_factory=Counter)         # op label -> nodes added (after folding)
    folded: Counter = field(default_factory=Counter)        # what op_coverage.plan.fold did ("CastLike->Cast": n)
    plans: dict = field(default_factory=dict)               # op label -> NodePlan.summary() (first node)
    blocked: dict = field(default_factory=dict)             # op label -> summary of why not
    not_native_before: int = 0

    def to_dict(self) -> dict:
        return {"replaced": dict(self.replaced), "added": dict(self.added), "folded": dict(self.folded),
                "plans": self.plans,
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
                  types_from: onnx.ModelProto | None = None, fold: bool = True) -> RewriteResult:
    """Return a rewritten copy of *model* in which nodes not native on *profile* are replaced.

    :param fold: fold the casts of constants the replacements bring in (:mod:`op_coverage.plan.fold`).

    :param types_from: a model with the same graph to take types and shapes from (e.g. the
        weight-free copy :func:`op_coverage.onnx.load.load_for_scan` reads); default: shape
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
        emitted: set = set()  # names of the nodes replacements brought into this graph
        for i, n in enumerate(g.node):
            ni = info_g.node[i] if info_g is not g and i < len(info_g.node) else n
            # not op_coverage.onnx.walk: each body is rewritten in place (after its parent's scope is
            # known, before the parent's node list is replaced) beside its twin in the inferred copy
            for a_i, a in enumerate(n.attribute):
                if a.HasField("g"):
                    do_graph(a.g, ni.attribute[a_i].g if ni is not n else a.g, env, f"{path}/{n.name}.{a.name}", opsets)
                for k, sub in enumerate(a.graphs):
                    do_graph(sub, ni.attribute[a_i].graphs[k] if ni is not n else sub, env,
                             f"{path}/{n.name}.{a.name}[{k}]", opsets)
            if (n.domain, n.op_type) in local:
                calls.setdefault((n.domain, n.op_type), []).append(
                    [(env.types.get(x), env.shapes.get(x)) if x else (None, None) for x in n.input])
                new_nodes.append(n)
                continue
            if planner.is_native(n, env, path):
                new_nodes.append(n)
                continue
            res.not_native_before += 1
            p: NodePlan = planner.replace_cached(n, env, path)
            lab = _label(n)
            if p.ok:
                new_nodes.extend(p.nodes)
                emitted.update(m.name for m in p.nodes)
                for m in p.nodes:  # subgraphs an expansion brought in (Range's Loop body) are rewritten too
                    for attribute, _k, sub in subgraphs(m):
                        do_graph(sub, sub, env, f"{path}/{m.name}.{attribute}", opsets)
                res.replaced[lab] += 1
                res.plans.setdefault(lab, p.summary())
            else:
                new_nodes.append(n)
                res.blocked.setdefault(lab, p.summary())
        if fold and emitted:
            new_nodes = _fold(new_nodes, emitted, env, g, path)
        for m in new_nodes:
            if m.name in emitted:
                res.added[_label(m)] += 1
        del g.node[:]
        g.node.extend(new_nodes)

    def _fold(nodes, emitted, env, g, path):
        from op_coverage.plan.fold import fold as fold_casts
        if not any(m.op_type in ("CastLike", "Cast") and m.name in emitted for m in nodes):
            return nodes
        tenv = env.child()  # the types of what the replacements produce, learnt without weights
        infer_into([m for m in nodes if not has_subgraphs(m)], tenv)
        keep = {o if isinstance(o, str) else o.name for o in g.output}  # FunctionProto outputs are names
        new, done = fold_casts(nodes, emitted, tenv.types, tenv.consts,
                               lambda m: planner.is_native(m, tenv, path), keep)
        res.folded.update(done)
        return new

    local = {(f.domain, f.name) for f in out.functions}
    calls: dict = {}  # (domain, name) -> [[(dtype, shape) per actual input] per call site]
    do_graph(out.graph, info.graph, None, "main", opsets)
    for f in out.functions:
        fops = dict(opsets)
        fops.update({norm_domain(i.domain): i.version for i in f.opset_import})
        do_graph(f, f, _function_env(f, calls.get((f.domain, f.name), []), fops), f"function:{f.domain}.{f.name}",
                 fops)
    return res



def _function_env(f: onnx.FunctionProto, sites: list, opsets: dict) -> Env:
    """Types inside a function body, from its call sites when they all agree (then inferred through the body)."""
    env = Env(opsets=opsets)
    for i, formal in enumerate(f.input):
        seen = {s[i][0] for s in sites if i < len(s)}
        if len(seen) == 1 and None not in seen:
            env.types[formal] = seen.pop()
            shapes = {tuple(s[i][1]) if s[i][1] is not None else None for s in sites}
            if len(shapes) == 1 and None not in shapes:
                env.shapes[formal] = list(shapes.pop())
    if env.types:
        infer_into(list(f.node), env)
    return env
