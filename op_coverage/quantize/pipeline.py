"""INT8 for a target: quantize with onnxruntime.quantization, check, measure, gate, write, rescan.

:func:`quantize` is the library call behind ``op_coverage quantize``.  The format (integer
operators or QDQ), the element types and the op types come from the target's profile
(:mod:`op_coverage.quantize.choice`); the result is checked with ``onnx.checker``, compared with the
float model in onnxruntime (:mod:`op_coverage.quantize.metrics`) and written only when it passes the
checker and every gate.  External data stays external (``OUTPUT.data`` beside ``OUTPUT``).
"""
from __future__ import annotations

import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from op_coverage.errors import (ModelNotFound, NothingQuantized, NotAvailable, OutputNotWritable, QuantizeCheckFailed,
                     QuantizeGateFailed, ScanError, UnknownTarget)

MODES = ("dynamic", "static")

#: op types listed as kept float even without a constant input (an activation x activation product)
PRODUCTS = ("MatMul", "Conv", "Gemm", "ConvTranspose")


@dataclass
class Gates:
    """``--max-error`` (max abs error of every output) and ``--min-cosine`` (cosine of every float output)."""

    max_error: float | None = None
    min_cosine: float | None = None

    def failures(self, outputs) -> list[str]:
        bad = []
        for o in outputs:
            if self.max_error is not None and not o.max_abs <= self.max_error:
                bad.append(f"{o.name}: max abs error {o.max_abs:.4g} > --max-error {self.max_error:g}")
            if self.min_cosine is not None and o.cosine is not None and not o.cosine >= self.min_cosine:
                bad.append(f"{o.name}: cosine {o.cosine:.6f} < --min-cosine {self.min_cosine:g}")
        return bad


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


def _all_nodes(model):
    """Every node of *model*, subgraphs included (local functions are not quantized)."""
    from op_coverage.onnx.inventory import all_nodes
    return all_nodes(model, functions=False)


def _all_initializers(model):
    """Every tensor of *model* (initializers at any depth, attribute tensors)."""
    from op_coverage.onnx.load import iter_tensors
    return iter_tensors(model)


def quantized_node_names(quant_model, fmt: dict) -> set:
    """Names of the float nodes *quant_model* quantized: replaced by an integer op (``<name>_quant``), or
    of an op type the format quantizes and fed by a DequantizeLinear or an INT8 initializer."""
    from op_coverage.quantize.choice import float_name
    back = {v: k for k, v in fmt.get("quantized_as", {}).items()}
    from_dq = {o for n in _all_nodes(quant_model) if n.op_type == "DequantizeLinear" for o in n.output}
    from_dq |= {t.name for t in _all_initializers(quant_model)
                if t.data_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)}
    return {float_name(n, back) for n in _all_nodes(quant_model)
            if n.op_type in back or (n.op_type in fmt["quantize"] and any(i in from_dq for i in n.input))}


def _census(quant_model, fmt: dict, choice_kept: dict, exclude: list, kept_nodes: dict | None = None) -> tuple:
    """(quantized nodes per float op type, [{"node", "op_type", "reason"}] of candidate nodes left float).

    A node counts as quantized when the format replaced it by its integer op (``quantized_as``), when
    one of its inputs comes from a DequantizeLinear (QDQ) or is an INT8 initializer (a weight-only
    quantized embedding: ``Gather`` on an int8 table, then DequantizeLinear).  A node left float is
    listed when it is a product (:data:`PRODUCTS`), reads a float constant, was excluded or sent back.
    """
    back = {v: k for k, v in fmt.get("quantized_as", {}).items()}
    from_dq = {o for n in _all_nodes(quant_model) if n.op_type == "DequantizeLinear" for o in n.output}
    int8 = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)
    from_dq |= {t.name for t in _all_initializers(quant_model) if t.data_type in int8}  # a Gather on an int8 table
    candidates = set(fmt["quantize"]) | set(choice_kept) | {k["op_type"] for k in (kept_nodes or {}).values()}
    float_consts = {t.name for t in _all_initializers(quant_model)
                    if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)}
    done: Counter = Counter()
    kept = []
    for n in _all_nodes(quant_model):
        if n.op_type in back:
            done[back[n.op_type]] += 1
            continue
        if n.op_type not in candidates:
            continue
        if any(i in from_dq for i in n.input):
            done[n.op_type] += 1
            continue
        if n.name and n.name in exclude:
            why = "excluded by --exclude"
        elif n.name and n.name in (kept_nodes or {}):
            why = kept_nodes[n.name]["reason"]
        elif n.op_type in choice_kept:
            why = choice_kept[n.op_type]
        elif n.op_type not in PRODUCTS and not any(i in float_consts for i in n.input):
            continue  # a data-movement op (Transpose, an index Gather) onnxruntime quantizes only after a quantized input
        else:
            why = "onnxruntime.quantization leaves it float (e.g. no constant weight: both inputs are activations)"
        kept.append({"node": n.name or f"({n.op_type}, unnamed)", "op_type": n.op_type, "reason": why})
    return dict(done), kept


def _rescan(path: Path, profile, float_labels: Counter, rep=None) -> tuple[dict, dict]:
    """(rescan summary like rewrite's, op label -> nodes the quantized model adds).

    *rep*: the scan report of the same graph already made (the accepted try, which the written model
    is saved from unchanged); else *path* is scanned.
    """
    if rep is None:
        from op_coverage.quantize.choice import scan_report
        rep = scan_report(path, profile)
    remaining, labels = Counter(), Counter()
    for node, verdicts in rep.nodes:
        label = node.op_type if node.domain == "ai.onnx" else f"{node.domain}::{node.op_type}"
        labels[label] += 1
        if verdicts[profile.name].status != "native":
            remaining[label] += 1
    t = rep.targets[0]
    introduced = {k: v for k, v in sorted(labels.items()) if k not in float_labels}
    return ({"nodes": t.nodes, "coverage_by_node": round(t.coverage_by_node, 2),
             "nodes_by_status": dict(t.nodes_by_status), "not_native": dict(remaining)}, introduced)


def _labels(model) -> Counter:
    from op_coverage.onnx.inventory import norm_domain
    return Counter(n.op_type if norm_domain(n.domain) == "ai.onnx" else f"{n.domain}::{n.op_type}"
                   for n in _all_nodes(model))


def quantize(path, target: str, output, *, mode: str = "dynamic", calibration: str | None = None,
             per_channel: bool = False, exclude: list | None = None, profiles: list | None = None,
             inputs: list | None = None, seed: int = 0, dims: dict | None = None, gates: Gates | None = None,
             runs: int = 10, repeats: int = 3, compare: bool = True) -> QuantizeReport:
    """Quantize *path* to INT8 for *target* and write *output* when it passes the checker and the gates.

    :param mode: ``dynamic`` (integer ops with run-time activation scales, else QDQ calibrated on
        generated or given inputs) or ``static`` (QLinear* ops, else QDQ; calibrated).
    :param calibration: an ``.npz`` file or a folder of them (see :mod:`op_coverage.quantize.calibration`).
    :param inputs: ``.npz``/``.pb`` files for the accuracy comparison (default: generated, *seed*, *dims*).
    :param runs: interleaved run pairs per latency repeat; 0 skips the latency measurement.
    :param compare: also quantize with onnxruntime's defaults and measure it the same way (``baseline``).
    :raises ScanError: bad model / target / inputs (exit codes of ``scan``);
        :class:`NothingQuantized` (7) when the target runs no INT8 form of the model's ops;
        :class:`QuantizeCheckFailed` (6); :class:`QuantizeGateFailed` (5). Each carries ``.report``.
    """
    from op_coverage.onnx.load import load_for_scan
    from op_coverage.quantize.choice import formats, not_native
    from op_coverage.targets.catalog import load_targets

    if mode not in MODES:
        raise NotAvailable(f"--mode {mode!r}: choose one of {', '.join(MODES)}")
    src = Path(path)
    loaded = load_for_scan(src)  # safety: missing, not ONNX, truncated, external-data paths, opsets
    ts = load_targets(profiles)
    chosen = ts.resolve_names([target])
    if len(chosen) != 1:
        raise UnknownTarget(f"--target {target!r} names {len(chosen)} targets; quantize needs exactly one")
    profile = chosen[0]
    out = Path(output)
    if out.resolve() == src.resolve():
        raise ModelNotFound(f"-o {out}: is the input model; write the quantized model to another file")
    if not out.parent.is_dir():
        raise OutputNotWritable(f"-o {out}: folder {out.parent} does not exist; create it or choose another path")
    exclude = list(exclude or [])
    names = {n.name for n in _all_nodes(loaded.model)}
    unknown = [x for x in exclude if x not in names]
    if unknown:
        raise NotAvailable(f"--exclude {', '.join(unknown)}: no node of that name in {src.name}; node names are "
                           f"in 'op_coverage scan {src} --json' (models[].nodes) or Netron")
    report = QuantizeReport(str(src), str(out), profile.name, mode, per_channel=per_channel)
    try:
        _quantize(report, loaded, profile, src, out, calibration, exclude, inputs, seed, dims or {},
                  gates or Gates(), runs, repeats, formats(), not_native, compare)
    except ScanError as e:
        report.error = {"kind": e.kind, "message": str(e), "exit_code": e.exit_code}
        e.report = report
        raise
    return report


def _quantize(report, loaded, profile, src, out, calibration, exclude, inputs, seed, dims, gates, runs, repeats,
              facts, not_native, compare) -> None:
    from op_coverage.quantize.calibration import describe, generated_calibration, load_calibration
    from op_coverage.quantize.choice import choose
    from op_coverage.quantize.metrics import compare_outputs, latency, model_bytes, session
    from op_coverage.quantize.ort import pre_process, quantize_once
    from op_coverage.rewrite.verify import generate_inputs, load_inputs

    struct = loaded.model
    feeds = load_inputs(inputs, struct) if inputs else generate_inputs(struct, seed, dims)
    cal_given = load_calibration(calibration, struct) if calibration else None
    cal = cal_given or generated_calibration(struct, seed, dims)
    opset = next((i.version for i in struct.opset_import if i.domain in ("", "ai.onnx")), 0)
    external = bool(loaded.external_files) or loaded.file_bytes > 1_800_000_000
    from op_coverage.quantize.choice import scan_nodes
    from op_coverage.scan import scan_model
    # the float model's scan, on the structure already read (a second read of the file costs as much)
    before = not_native(src, profile, scan_nodes(src, profile, scan_model(loaded, [profile])))
    with tempfile.TemporaryDirectory(prefix=".op_coverage-", dir=out.parent) as tmp:
        tmp = Path(tmp)
        pre = tmp / "pre.onnx"
        why = pre_process(src, pre, external)
        if why:
            report.pre_process = why
            report.notes.append(f"{why}; quantized the model as it is")
        base = src if why else pre
        tries = iter(range(1000))

        def trial(name, fmt, variant, op_types, exclude_nodes=()):
            pc = report.per_channel
            if pc and name == "qdq" and opset < fmt.get("per_channel_min_opset", 0):
                pc = False
                note = (f"--per-channel: QDQ per-channel needs opset >= {fmt['per_channel_min_opset']} (the axis "
                        f"attribute); the model has opset {opset}, so weights are quantized per tensor")
                if note not in report.notes:
                    report.notes.append(note)
            dst = tmp / f"try{next(tries)}.onnx"
            quantize_once(base, dst, fmt, variant, op_types, exclude=exclude + list(exclude_nodes), per_channel=pc,
                          calibration=cal if fmt["calibration"] else None, external=external)
            return dst

        def default():
            from op_coverage.quantize.baseline import default_quantize
            dst = tmp / "onnxruntime-default.onnx"
            default_quantize(src, dst, report.mode, cal, external)
            return dst

        own_choices = bool(exclude) or report.per_channel  # onnxruntime's default call would override them
        choice = choose(report.mode, onnx.load(str(base), load_external_data=False), profile, before, trial, facts,
                        None if own_choices else default)
        report.choice = choice.to_dict()
        if choice.format is None:
            last = {t["format"]: t["outcome"] for t in choice.tried}
            last.update({t["format"]: t["outcome"] for t in choice.tried  # what the target lacked, if anything
                         if not t["outcome"].startswith("quantized nothing")})
            lacking = "; ".join(f"{k}: {v[:200]}" for k, v in last.items())
            raise NothingQuantized(f"{src.name}: no INT8 form {profile.name} runs natively ({lacking}); the model "
                                   f"stays float, nothing written; try another --mode, or a profile with the "
                                   f"quantized ops (--profile)")
        fmt = facts["formats"][choice.format]
        report.format_title = fmt["title"]
        if choice.default_won:
            from op_coverage.quantize.baseline import CALLS
            ours = min(t["bytes"] for t in choice.tried if "bytes" in t and "call" not in t)
            what = "quantizing the pre-processed model" if report.pre_process == "ok" else "the best try"
            report.notes.append(f"onnxruntime's own {CALLS[report.mode]} on the model as given made a smaller file "
                                f"({model_bytes(choice.path)} bytes) than {what} ({ours} bytes), and "
                                f"{profile.name} runs it natively: wrote that one")
        if fmt["calibration"]:
            report.calibration = {"source": calibration if cal_given else "generated", **describe(cal)}
            if not cal_given:
                report.notes.append(f"calibrated on {len(cal)} generated random inputs (seed {seed + 1}+): the "
                                    "activation ranges fit random data; pass --calibration with real inputs for a "
                                    "model to deploy")
            if report.mode == "dynamic":
                report.notes.append(f"{profile.name} runs no dynamic integer form; used {choice.format} "
                                    "(static scales from calibration) instead")
        qmodel = onnx.load(str(choice.path), load_external_data=True)
        from op_coverage.rewrite import save_checked
        final = tmp / out.name
        report.external_data = save_checked(
            qmodel, final, external, out,
            lambda why: QuantizeCheckFailed(f"quantized model fails onnx.checker ({why}); nothing written; "
                                            "try --exclude for the node it names, or --mode"))
        report.checked = True
        report.quantized_nodes, report.kept_float = _census(qmodel, fmt, choice.kept_float, exclude,
                                                             choice.kept_nodes)
        fb, qb = model_bytes(src), model_bytes(final)
        report.size = {"float_bytes": fb, "quantized_bytes": qb, "ratio": round(qb / fb, 4) if fb else None}
        try:
            fs, qs = session(src), session(final)
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types
            raise QuantizeCheckFailed(f"onnxruntime cannot load the float or the quantized model "
                                      f"({str(e).splitlines()[0][:300]}); nothing written") from None
        try:
            outs = compare_outputs(fs, qs, feeds)
        except Exception as e:  # noqa: BLE001
            raise QuantizeCheckFailed(f"onnxruntime cannot run the models on the {'given' if inputs else 'generated'} "
                                      f"inputs ({str(e).splitlines()[0][:300]}); nothing written; pass --inputs "
                                      "with valid values") from None
        failed = gates.failures(outs)
        report.accuracy = {"inputs": ", ".join(map(str, inputs)) if inputs else "generated",
                           "seed": None if inputs else seed,
                           "shapes": {k: list(v.shape) for k, v in feeds.items()},
                           "outputs": [o.to_dict() for o in outs],
                           "gates": {"max_error": gates.max_error, "min_cosine": gates.min_cosine,
                                     "ok": not failed, "failed": failed}}
        if failed:
            raise QuantizeGateFailed(f"accuracy gate failed ({failed[0]}"
                                     f"{f'; {len(failed) - 1} more' if len(failed) > 1 else ''}); {out} not written; "
                                     "try --per-channel, --exclude for the sensitive nodes, --mode static with "
                                     "--calibration, or a looser gate")
        mine = None  # hal's latency, when timed with onnxruntime's result (one interleave, the float runs shared)
        if compare:
            from op_coverage.quantize.baseline import measure_baseline
            bpath = tmp / "onnxruntime-default.onnx"
            report.baseline, mine = measure_baseline(src, bpath, report.mode, cal, external, fs, feeds, qb, runs,
                                                     repeats, made=choice.default_error or (choice.default_path
                                                                                           is not None),
                                                     same=(final, outs), ours=qs if runs > 0 else None)
            if "error" not in report.baseline and bpath.is_file():
                theirs = quantized_node_names(onnx.load(str(bpath), load_external_data=False),
                                              facts["formats"]["integer-dynamic" if report.mode == "dynamic" else "qdq"])
                ours = quantized_node_names(qmodel, fmt)
                ours |= {x.split("/MatMulAddFusion")[0] for x in ours}  # pre-processing fused MatMul + Add
                names = {n.name: n.op_type for n in _all_nodes(struct) if n.name}
                report.baseline["float_here"] = [{"node": n, "op_type": names[n]} for n in sorted(theirs - ours)
                                                 if n in names]
        if runs > 0:
            report.latency = mine if mine is not None else latency(fs, qs, feeds, runs=runs, repeats=repeats)
        del qs, fs
        report.rescan, report.introduced = _rescan(final, profile, _labels(struct), choice.scan)
        from hal.util.io import give_default_mode  # onnx writes external data 0600; give both plain open()'s mode
        if report.external_data:
            give_default_mode(tmp / report.external_data)
            os.replace(tmp / report.external_data, out.parent / report.external_data)
        give_default_mode(final)
        os.replace(final, out)
        report.written = True
