"""INT8 for a target: :func:`quantize` runs the steps of :mod:`op_coverage.quantize.steps` and reports them.

:func:`quantize` is the library call behind ``op_coverage quantize``.  The format (integer
operators or QDQ), the element types and the op types come from the target's profile
(:mod:`op_coverage.quantize.choice`); the result is checked with ``onnx.checker``, compared with the
float model in onnxruntime (:mod:`op_coverage.quantize.metrics`) and written only when it passes the
checker and every gate.  External data stays external (``OUTPUT.data`` beside ``OUTPUT``).
"""
from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from op_coverage.errors import NothingQuantized, QuantizeGateFailed, ScanError
from op_coverage.quantize.options import QuantizeOptions
from op_coverage.quantize.steps import Chosen, Source, benchmark, check, choose, gate, load, make_feeds, measure, write


@dataclass
class QuantizeReport:
    """Everything ``op_coverage quantize`` reports (``to_dict()`` is the ``--json`` document)."""

    source: str
    output: str | None
    target: str
    mode: str
    written: bool = False
    external_data: str | None = None
    checked: bool = False
    choice: dict = field(default_factory=dict)
    format_title: str | None = None
    per_channel: bool = False
    quantized_nodes: dict = field(default_factory=dict)   # op type -> nodes quantized
    kept_float: list = field(default_factory=list)         # [{"node", "op_type", "reason"}]
    pre_process: str = "ok"
    calibration: dict | None = None
    size: dict | None = None
    latency: dict | None = None
    accuracy: dict | None = None
    rescan: dict | None = None
    introduced: dict = field(default_factory=dict)         # op label -> nodes the result adds
    baseline: dict | None = None                           # onnxruntime's default call, measured the same way
    notes: list = field(default_factory=list)
    error: dict | None = None

    def exit_code(self) -> int:
        if self.error is not None:
            return self.error["exit_code"]
        return 4 if (self.rescan or {}).get("not_native") else 0

    def to_dict(self) -> dict:
        return {"format": "op_coverage.quantize/1", "source": self.source, "output": self.output,
                "target": self.target, "mode": self.mode, "written": self.written,
                "external_data": self.external_data, "checked": self.checked,
                "quantization": {**(self.choice or {"format": None, "variant": None, "op_types": [],
                                                    "kept_float": {}, "tried": []}),
                                 "title": self.format_title, "per_channel": self.per_channel,
                                 "quantized_nodes": self.quantized_nodes, "kept_float_nodes": self.kept_float,
                                 "pre_process": self.pre_process, "calibration": self.calibration},
                "size": self.size, "latency": self.latency, "accuracy": self.accuracy, "baseline": self.baseline,
                "rescan": self.rescan,
                "introduced": self.introduced, "notes": self.notes, "error": self.error,
                "exit_code": self.exit_code()}


def quantize(path, target: str, output, options: QuantizeOptions | None = None, **fields) -> QuantizeReport:
    """Quantize *path* to INT8 for *target* and write *output* when it passes the checker and the gates.

    Runs :func:`~op_coverage.quantize.steps.load`, ``make_feeds``, ``choose``, ``check``, ``measure``,
    ``gate``, ``benchmark`` and ``write`` in that order; a failed gate stops before the latency runs.

    :param options: :class:`QuantizeOptions` (default: the command's defaults).
    :param fields: fields of :class:`QuantizeOptions` that replace those of *options*:
        ``quantize(p, t, o, runs=0)`` is ``quantize(p, t, o, QuantizeOptions(runs=0))``.
    :raises ScanError: bad model / target / inputs (exit codes of ``scan``); :class:`BadOption` (2);
        :class:`NothingQuantized` (7) when the target runs no INT8 form of the model's ops;
        :class:`QuantizeCheckFailed` (6); :class:`QuantizeGateFailed` (5). Each raised after the
        report was begun carries it as ``.report``.
    """
    if output is None:
        raise TypeError("quantize(path, target, output): output is None; pass where to write the INT8 model")
    options = dataclasses.replace(options or QuantizeOptions(), **fields) if fields else options or QuantizeOptions()
    source = load(path, target, options, output=output)
    report = QuantizeReport(str(source.path), str(source.output), source.profile.name, options.mode,
                            per_channel=options.per_channel)
    try:
        _run(report, source)
    except ScanError as e:
        report.error = {"kind": e.kind, "message": str(e), "exit_code": e.exit_code}
        e.report = report
        raise
    return report


def _record_choice(report: QuantizeReport, chosen: Chosen) -> None:
    report.choice = chosen.choice.to_dict()
    report.pre_process = chosen.pre_process
    report.notes.extend(chosen.notes)
    if chosen.choice.format is not None:
        report.format_title = chosen.format_facts["title"]
        report.calibration = chosen.calibration_used


def _run(report: QuantizeReport, source: Source) -> None:
    """The steps, each result recorded in *report* as it comes (a report stopped by an error has what
    came before it; the rescan is recorded last, so a refused model's report has none)."""
    feeds = make_feeds(source)
    with tempfile.TemporaryDirectory(prefix=".op_coverage-", dir=source.output.parent) as tmp:
        try:
            chosen = choose(feeds, Path(tmp))
        except NothingQuantized as e:
            _record_choice(report, e.chosen)
            raise
        _record_choice(report, chosen)
        checked = check(chosen)
        report.checked, report.external_data, report.size = True, checked.external_data, checked.size
        report.quantized_nodes, report.kept_float = checked.quantized_nodes, checked.kept_float
        measured = measure(checked)
        verdict = gate(measured)
        report.accuracy = measured.to_dict(verdict)
        if not verdict.ok:
            failed = verdict.failed
            raise QuantizeGateFailed(f"accuracy gate failed ({failed[0]}"
                                     f"{f'; {len(failed) - 1} more' if len(failed) > 1 else ''}); {source.output} "
                                     "not written; try --per-channel, --exclude for the sensitive nodes, --mode "
                                     "static with --calibration, or a looser gate")
        timed = benchmark(measured)
        report.latency, report.baseline = timed.latency, timed.baseline
        report.rescan, report.introduced = checked.rescan, checked.introduced
        write(checked)
        report.written = True
