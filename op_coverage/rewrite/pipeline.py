"""The library call behind ``op_coverage rewrite``: load, plan and apply, check, verify, write, rescan.

The in-memory transform is :func:`op_coverage.plan.apply.rewrite_model`; here it is wrapped in
the file pipeline: nothing is written unless the result passes ``onnx.checker`` and matches
the original in onnxruntime.
"""
from __future__ import annotations

import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from op_coverage.errors import ModelNotFound, OutputNotWritable, RewriteFailed, ScanError, UnknownTarget, VerifyFailed

if TYPE_CHECKING:
    from op_coverage.plan.apply import RewriteResult


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
    from op_coverage.plan.apply import rewrite_model  # not at the top: quantize saves through save_checked alone
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
