"""Apply the plan to a model: every node a target lacks is replaced by its composition.

Subgraphs (If/Loop/Scan bodies) and model-local function bodies are rewritten too; an
expansion inside a subgraph reads outer values by name, and every name it introduces is unique
in the whole model, so it can never shadow one.
"""
from __future__ import annotations

import os
import tempfile
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from op_coverage.errors import ModelNotFound, OutputNotWritable, RewriteFailed, ScanError, UnknownTarget, VerifyFailed
from op_coverage.onnx.inventory import norm_domain
from op_coverage.plan.planner import Env, NodePlan, Planner, name_generator, scope_env
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
                    for a in m.attribute:
                        for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                            do_graph(sub, sub, env, f"{path}/{m.name}.{a.name}", opsets)
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
        from op_coverage.plan.planner import infer_into
        if not any(m.op_type in ("CastLike", "Cast") and m.name in emitted for m in nodes):
            return nodes
        tenv = env.child()  # the types of what the replacements produce, learnt without weights
        infer_into([m for m in nodes if not any(a.HasField("g") or len(a.graphs) for a in m.attribute)], tenv)
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
    from op_coverage.plan.planner import infer_into
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


# -- the library call behind ``op_coverage rewrite`` --------------------------------------------
@dataclass
class RewriteReport:
    """Everything ``op_coverage rewrite`` reports: plan, checks, verification, rescan."""

    source: str
    output: str | None
    target: str
    result: RewriteResult
    checked: bool = False
    verification: object = None
    rescan: dict | None = None
    written: bool = False
    external_data: str | None = None
    problems: list = field(default_factory=list)
    error: dict | None = None  # {"kind", "message", "exit_code"} when the rewrite stopped on an error

    @property
    def remaining(self) -> dict:
        """Op label -> count of nodes still not native after the rewrite (from the rescan)."""
        return (self.rescan or {}).get("not_native", {})

    def exit_code(self) -> int:
        if self.error is not None:
            return self.error["exit_code"]
        if self.verification is not None and not self.verification.ok:
            return VerifyFailed.exit_code
        return 4 if self.remaining else 0

    def to_dict(self) -> dict:
        return {"format": "op_coverage.rewrite/1", "source": self.source, "output": self.output,
                "target": self.target, "written": self.written, "external_data": self.external_data,
                "checked": self.checked, **self.result.to_dict(),
                "verification": self.verification.to_dict() if self.verification is not None else None,
                "rescan": self.rescan, "problems": self.problems, "error": self.error,
                "exit_code": self.exit_code()}


def _save(model: onnx.ModelProto, path: Path, external: bool) -> str | None:
    """Save *model* to *path*; large tensors go to ``<name>.data`` beside it when *external*."""
    if external:
        loc = path.name + ".data"
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=loc, size_threshold=1024)
        return loc
    onnx.save_model(model, str(path))
    return None


def save_checked(model: onnx.ModelProto, path: Path, external: bool, out, on_check_failure) -> str | None:
    """Save *model* to *path* (a temp name beside the output *out*) and run ``onnx.checker`` on it.

    Returns the external data location (or None).  A failed write raises
    :class:`OutputNotWritable`; a failed check raises ``on_check_failure(first line of the
    checker's message)``.
    """
    try:
        loc = _save(model, path, external)
    except (OSError, ValueError) as e:
        raise OutputNotWritable(f"-o {out}: cannot write ({e}); choose a writable folder") from None
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as e:  # noqa: BLE001 - checker and inference raise several types
        raise on_check_failure(str(e).splitlines()[0][:300]) from None
    return loc


def rewrite(path, target: str, output, *, profiles: list | None = None, without_ops=None,
            inputs: list | None = None, seed: int = 0, dims: dict | None = None, atol: float | None = None,
            rtol: float | None = None, verify_outputs: bool = True, max_depth: int = 6,
            fold: bool = True) -> RewriteReport:
    """Rewrite *path* for *target*, check it, verify it against the original, write *output*, rescan.

    Nothing is written unless the rewritten model passes ``onnx.checker`` (full check, with
    shape inference) and, when *verify_outputs*, every output matches the original within the
    dtype-aware tolerances of :mod:`op_coverage.rewrite.verify`.  External data stays external: it is
    written as ``<output name>.data`` beside *output*.

    :raises ScanError: bad model / target / inputs (see the CLI's exit codes);
        :class:`RewriteFailed` when the checker rejects the result; :class:`VerifyFailed`
        (carrying the report as ``.report``) when outputs changed.
    """
    from op_coverage.targets.lacking import parse_ops, without
    from op_coverage.onnx.load import load_for_scan
    from op_coverage.scan import scan_model
    from op_coverage.targets.catalog import load_targets

    src = Path(path)
    loaded = load_for_scan(src)  # safety: external-data paths, opsets, truncation
    ts = load_targets(profiles)
    chosen = ts.resolve_names([target])
    if len(chosen) != 1:
        raise UnknownTarget(f"--target {target!r} names {len(chosen)} targets; rewrite needs exactly one")
    profile = without(chosen[0], parse_ops(without_ops))
    out = Path(output)
    if out.resolve() == src.resolve():
        raise ModelNotFound(f"-o {out}: is the input model; write the rewrite to another file")
    if not out.parent.is_dir():
        raise OutputNotWritable(f"-o {out}: folder {out.parent} does not exist; create it or choose another path")
    model = onnx.load(str(src), load_external_data=True)
    res = rewrite_model(model, profile, max_depth=max_depth, types_from=loaded.model, fold=fold)
    report = RewriteReport(str(src), str(out), profile.name, res)
    try:
        _check_verify_write(report, model, loaded, src, out, inputs, seed, dims, atol, rtol, verify_outputs)
    except ScanError as e:
        report.error = {"kind": e.kind, "message": str(e), "exit_code": e.exit_code}
        e.report = report
        raise
    rescan = scan_model(load_for_scan(out), [profile])
    remaining = Counter()
    for node, verdicts in rescan.nodes:
        if verdicts[profile.name].status != "native":
            remaining[_label_info(node)] += 1
    t = rescan.targets[0]
    report.rescan = {"nodes": t.nodes, "coverage_by_node": round(t.coverage_by_node, 2),
                     "nodes_by_status": t.nodes_by_status, "not_native": dict(remaining)}
    return report


def _check_verify_write(report: RewriteReport, model, loaded, src: Path, out: Path, inputs, seed, dims, atol,
                        rtol, verify_outputs: bool) -> None:
    """Save to a temporary folder beside *out*, run the checker, verify, then move into place."""
    from op_coverage.rewrite.verify import generate_inputs, load_inputs, verify
    res = report.result
    external = bool(loaded.external_files) or model.ByteSize() > 1_800_000_000
    with tempfile.TemporaryDirectory(prefix=".op_coverage-", dir=out.parent) as tmp:
        tmp_model = Path(tmp) / out.name
        report.external_data = save_checked(
            res.model, tmp_model, external, out,
            lambda why: RewriteFailed(f"rewritten model fails onnx.checker ({why}); nothing written; "
                                      "please report it with the model"))
        report.checked = True
        if verify_outputs:
            if inputs:
                feeds, label = load_inputs(inputs, model), ", ".join(map(str, inputs))
            else:
                feeds, label = generate_inputs(model, seed, dims), "generated"
            report.verification = verify(str(src), str(tmp_model), feeds, atol=atol, rtol=rtol,
                                         inputs_label=label, seed=None if inputs else seed)
            if not report.verification.ok:
                bad = [o for o in report.verification.outputs if not o.ok]
                e = VerifyFailed(f"verification failed for {len(bad)} output(s) ({bad[0].name}: max abs error "
                                 f"{bad[0].max_abs:.3g} > atol {bad[0].atol:g} + rtol {bad[0].rtol:g}"
                                 f"{'; ' + bad[0].note if bad[0].note else ''}); {out} not written, "
                                 f"{src} unchanged")
                e.report = report
                raise e
        # onnx writes external data 0600; the rewrite is read by serving processes: plain open()'s mode
        from hal.util.io import give_default_mode
        if report.external_data:
            give_default_mode(Path(tmp) / report.external_data)
            os.replace(Path(tmp) / report.external_data, out.parent / report.external_data)
        give_default_mode(tmp_model)
        os.replace(tmp_model, out)
        report.written = True


def _label_info(n) -> str:
    return n.op_type if n.domain == "ai.onnx" else f"{n.domain}::{n.op_type}"
