"""The acceptance run: the user's script, unmodified, on the reference and on each target, and the
report's sections built from what the runs measured (each section: its figures, its evidence -- the
commands that produced them -- and a verdict)."""
from __future__ import annotations

import datetime
import json
import platform
from pathlib import Path
from typing import Callable, Dict, List, Optional

from hal_accept.numerics import bisect_ops, compare
from hal_accept.options import AcceptOptions, Target
from hal_accept.runs import Run, call_hal, hal_run
from hal_accept.verdicts import FAIL, INFO, NOT_CHECKED, PASS, worst
from hal_accept.verdicts import section as _section

SCHEMA = "hal.accept/1"


def code_changes(options: AcceptOptions, runs: Dict[str, Run]) -> dict:
    """What a user would change without hal (the static scan), what ``hal run`` redirected instead, and
    the lines changed with hal: none when every run ran the script as it is."""
    from op_coverage.torch.static import static_scan

    scan = static_scan(options.script).to_dict()
    need = [f for f in scan["findings"] if f["level"] in ("change", "caveat")]
    target_runs = [r for name, r in runs.items() if name != "reference"]
    redirected = {}
    for run in target_runs:
        for row in (run.report or {}).get("redirected", []):
            redirected.setdefault(row["call"], row)
    all_ran = all(r.exit_code == 0 for r in runs.values())
    return _section(PASS if all_ran else FAIL,
                    (f"0 lines changed: the script ran unmodified on every target; {len(scan['findings'])} "
                     f"CUDA idiom(s) found by the static scan, {len(redirected)} call(s) redirected by hal run")
                    if all_ran else "the script did not run unmodified on every target (see Environment and the runs)",
                    lines_changed_with_hal=0 if all_ran else None,
                    static_findings=scan["findings"], needs_attention=need,
                    redirected=list(redirected.values()),
                    evidence=[f"op_coverage scan {options.script} --static --json"])


def operators(options: AcceptOptions, trace: Optional[dict], runs: Dict[str, Run],
              progress: Callable[[str], None] = lambda s: None) -> dict:
    """The aten ops the script sent to the device, judged per target (native / host fallback / unsupported
    with the planned replacement), and what each target run fell back on; with ``--onnx``, per target (``onnx``)
    the export's scan for the target's ONNX target and the rewrite of what it lacks (:mod:`hal_accept.onnx_model`)."""
    section = _aten_operators(options, trace, runs)
    if options.onnx:
        from hal_accept.onnx_model import onnx_operators

        part = onnx_operators(options, progress)
        for t in options.targets:
            section["targets"].setdefault(t.name, {"profile": t.profile})["onnx"] = part["targets"][t.name]
        section.update(verdict=worst(section["verdict"], part["verdict"]),
                       summary=f"{section['summary']}; {part['summary']}",
                       evidence=[*section.get("evidence", []), *part["evidence"]])
    return section


def _aten_operators(options: AcceptOptions, trace: Optional[dict], runs: Dict[str, Run]) -> dict:
    if trace is None:
        return _section(NOT_CHECKED, "no op trace (op_coverage trace failed; see its error)", targets={})
    from op_coverage.torch.scan import scan_trace

    per_target, worst = {}, PASS
    for t in options.targets:
        entry = {"profile": t.profile}
        try:
            rep = scan_trace(trace, [t.profile], use_plugins=True).to_dict()  # a plugin's own profile too
            model = rep["models"][0]
            tgt = model["targets"][0]
            entry.update(title=tgt["title"], op_types=tgt["op_types"], op_types_native=tgt["op_types_native"],
                         nodes_by_status=tgt["nodes_by_status"], worst=tgt["worst"], warnings=model["warnings"],
                         ops=[{"op": o["op_type"], "calls": o["count"],
                               "status": o["support"][t.profile]["status"],
                               "replacement": ((o.get("replacement") or {}).get(t.profile) or {}).get("detail")}
                              for o in model["ops"]])
            if tgt["worst"] == "unsupported":
                worst = INFO
        except Exception as exc:  # noqa: BLE001 - a backend without a torch profile: say so
            entry.update(error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
        run = runs.get(t.name)
        entry["fell_back"] = (run.report or {}).get("fallbacks", []) if run else []
        per_target[t.name] = entry
    calls = sum(r.get("count", 0) for r in trace["ops"])
    return _section(worst, f"{len(trace['ops'])} aten ops ({calls} calls) reached the device in {trace['steps']} "
                           f"step(s)", targets=per_target,
                    evidence=[f"op_coverage trace {options.script} --steps {options.steps} -o ops.json",
                              *(f"op_coverage scan ops.json -t {t.profile} --json" for t in options.targets)])


def numerics(options: AcceptOptions, trace: Optional[dict], runs: Dict[str, Run],
             progress: Callable[[str], None]) -> dict:
    """The loss curve per step, each target against the reference within the tolerance, gradient norms,
    and -- where a curve differs -- the operator that makes it differ (bisection)."""
    from hal import fallback

    ref = runs["reference"]
    per_target, verdict = {}, PASS
    for t in options.targets:
        run = runs[t.name]
        cmp = compare(ref.losses(), run.losses(), options.loss_rtol, options.loss_atol)
        entry = {"comparison": cmp, "grad_norm": run.per_step("grad_norm")}
        if not cmp["agree"]:
            verdict = FAIL
            if options.bisect and run.ok and trace is not None:
                ops = [r["op"] for r in trace["ops"] if r.get("count") and fallback.routable(r["op"]) is None]
                progress(f"numerics: {t.name} differs from the reference at step {cmp['first_divergent_step']}; "
                         f"bisecting {len(ops)} ops")
                entry["bisection"] = bisect_ops(options, t, ops, ref.losses(), progress)
        per_target[t.name] = entry
    agree = [n for n, e in per_target.items() if e["comparison"]["agree"]]
    return _section(verdict, f"{len(agree)} of {len(per_target)} target(s) within rtol {options.loss_rtol} of the "
                             f"reference's loss at every step", reference_loss=ref.losses(),
                    reference_grad_norm=ref.per_step("grad_norm"), targets=per_target)


def throughput(options: AcceptOptions, runs: Dict[str, Run]) -> dict:
    """samples/s (else steps/s) per target against the reference's, peak memory, communication share."""
    ref = runs["reference"].throughput() if runs["reference"].ok else None
    per_target, verdict = {}, PASS

    def rate(tp):
        if tp is None:
            return None, None
        if tp.get("samples_per_s"):
            return tp["samples_per_s"]["p50"], "samples/s"
        return tp.get("steps_per_s"), "steps/s"
    ref_rate, unit = rate(ref)
    for t in options.targets:
        tp = runs[t.name].throughput() if runs[t.name].ok else None
        mine, _ = rate(tp)
        ratio = (mine / ref_rate) if mine and ref_rate else None
        ok = ratio is not None and ratio >= options.min_throughput_ratio
        if not ok:
            verdict = FAIL
        per_target[t.name] = {"throughput": tp, "ratio": ratio, "unit": unit, "gate": options.min_throughput_ratio,
                              "within_gate": ok,
                              "achieved_flops_per_s": (tp or {}).get("achieved_flops_per_s"), **mfu(t.backend, tp)}
    ref_mfu = mfu(options.reference.backend, ref)
    known = [f"{name} {m['mfu']:.1%}" for name, m in [("reference", ref_mfu), *per_target.items()]
             if m["mfu"] is not None]
    return _section(verdict, f"p50 {unit} against the reference, gate >= {options.min_throughput_ratio}"
                             + (f"; MFU {', '.join(known)}" if known else ""),
                    reference=ref, reference_mfu=ref_mfu, targets=per_target)


def mfu(backend: str, tp: Optional[dict]) -> dict:
    """Model FLOPs utilisation of one run (``tp``: :meth:`Run.throughput`, None for a failed run): its achieved
    FLOP/s over the dense peak of the devices it used, for the dtype its matrix products ran in, from the
    ``backend``'s facts (:func:`hal.plugin.facts.builtin_peak_flops`).  ``mfu`` is None where a fact is
    missing, and ``mfu_why`` says which."""
    from hal.plugin.facts import builtin_peak_flops

    tp = tp or {}
    peak = builtin_peak_flops(backend, tp.get("device_name"), tp.get("compute_dtype"))
    achieved, devices = tp.get("achieved_flops_per_s"), tp.get("devices") or 1
    out = {"mfu": None, "mfu_why": None, "peak_flops": peak.flops, "peak_device": peak.device,
           "peak_source": peak.source, "compute_dtype": peak.dtype, "device_name": peak.device_name,
           "devices": devices if tp else None}
    if not tp:
        out["mfu_why"] = "the run did not finish: nothing was measured"
    elif achieved is None:
        out["mfu_why"] = ("no floating-point operations were counted (HAL_METRICS_FLOPS=1 counts the second "
                          "optimizer step; the run made fewer, or its step time is unknown)")
    elif peak.flops is None:
        out["mfu_why"] = peak.why
    else:
        out["mfu"] = achieved / (peak.flops * devices)
    return out


def inference(generation: Optional[dict], int8: Optional[dict]) -> dict:
    """Section 6: greedy generation on the reference and the targets (``--model``: :mod:`hal_accept.inference`)
    and the INT8 model of the ONNX export (``--onnx``: :mod:`hal_accept.onnx_model`), each where given.  A failed
    part fails the section; INT8 without a gate is ``info`` and leaves generation's verdict as it is."""
    if generation is None and int8 is None:
        return _section(NOT_CHECKED, "no --model given (a Hugging Face causal-LM folder or config), no --onnx")
    int8 = dict(int8) if int8 is not None else None
    int8_extra = {"evidence": int8.pop("evidence"), "not_checked": int8.pop("not_checked")} if int8 else {}
    if generation is None:
        return _section(int8["verdict"], f"{int8['summary']}; generation not checked (no --model)", int8=int8,
                        evidence=int8_extra["evidence"],
                        not_checked=["generation (TTFT, TPOT, tokens/s, token agreement): no --model given",
                                     *int8_extra["not_checked"]])
    section = dict(generation)
    if int8 is None:
        section["not_checked"] = [*section.get("not_checked", []),
                                  "INT8: no --onnx given (an ONNX export of the model)"]
        return section
    section.update(verdict=FAIL if int8["verdict"] == FAIL else section["verdict"],
                   summary=f"{section['summary']}; {int8['summary']}", int8=int8,
                   evidence=[*section.get("evidence", []), *int8_extra["evidence"]],
                   not_checked=[*section.get("not_checked", []), *int8_extra["not_checked"]])
    return section


def environment(options: AcceptOptions, backends: List[Target]) -> dict:
    """``hal doctor`` (backends, versions) on each backend, the versions, and what was not checked."""
    import torch

    doctor = {}
    for t in backends:
        c = call_hal(options, t, ["doctor", "--check", "backends", "--check", "versions", "--json"])
        try:
            doctor[t.name] = json.loads(c.stdout)
        except ValueError:
            doctor[t.name] = {"error": (c.output_tail or c.stdout).strip()[-500:]}
    from hal import __version__ as hal_version

    return _section(INFO, f"torch {torch.__version__}, Python {platform.python_version()}, hal {hal_version}",
                    torch=torch.__version__, python=platform.python_version(), hal=hal_version,
                    platform=platform.platform(), doctor=doctor,
                    not_checked=["MFU of a device without a peak FLOPs fact (its backend's backend.json peak_flops) "
                                 "or a dtype without its figure: the achieved FLOP/s are measured, and the "
                                 "throughput section names the missing fact (mfu_why)"],
                    evidence=[f"HAL_BACKEND={t.backend} hal doctor --check backends --check versions --json"
                              for t in backends])


def accept(options: AcceptOptions, progress: Callable[[str], None] = lambda s: None) -> dict:
    """Run the acceptance (:class:`AcceptOptions`) and return the report (schema ``hal.accept/1``)."""
    options.check()
    Path(options.workdir).mkdir(parents=True, exist_ok=True)
    runs: Dict[str, Run] = {}
    progress(f"reference: {options.reference.name}, {options.steps} steps")
    runs["reference"] = hal_run(options, options.reference, "reference")
    for t in options.targets:
        progress(f"target: {t.name}, {options.steps} steps")
        runs[t.name] = hal_run(options, t, f"target-{t.name.replace(':', '_')}")
    trace = None
    trace_error = None
    progress("operators: op trace on the emulator")
    try:
        from op_coverage.torch.trace import record

        trace = record(options.script, list(options.script_args), steps=options.steps, echo=False,
                       timeout=options.timeout_s)
    except Exception as exc:  # noqa: BLE001 - the report says why the section is empty
        trace_error = f"{type(exc).__name__}: {exc}"
    failed = {name: r for name, r in runs.items() if not r.ok}
    sections = {"code_changes": code_changes(options, runs), "operators": operators(options, trace, runs, progress)}
    if trace_error:
        sections["operators"]["error"] = trace_error
    if not failed:
        sections["numerics"] = numerics(options, trace, runs, progress)
        sections["throughput"] = throughput(options, runs)
    else:
        why = "; ".join(f"{n} exited {r.exit_code}" for n, r in failed.items())
        sections["numerics"] = _section(NOT_CHECKED, f"a run failed ({why})")
        sections["throughput"] = _section(NOT_CHECKED, f"a run failed ({why})")
    if not options.stability:
        sections["stability"] = _section(NOT_CHECKED, "--no-stability: no failure rehearsed")
    elif failed:
        sections["stability"] = _section(NOT_CHECKED, "a run failed; a failure is rehearsed on runs that finish")
    else:
        from hal_accept.stability import stability_section

        sections["stability"] = stability_section(options, runs, progress)
    generation = int8 = None
    if options.model:
        from hal_accept.inference import inference_section

        generation = inference_section(options, progress)
    if options.onnx:
        from hal_accept.onnx_model import int8_section

        int8 = int8_section(options, progress)
    sections["inference"] = inference(generation, int8)
    progress("environment: hal doctor per backend")
    sections["environment"] = environment(options, [options.reference, *options.targets])
    gates = [
        {"gate": "runs", "holds": not failed, "detail": "every run exited 0" if not failed else
         "; ".join(f"{n}: exit {r.exit_code}" for n, r in failed.items())},
        {"gate": "loss", "holds": sections["numerics"]["verdict"] == PASS,
         "detail": f"every step within rtol {options.loss_rtol} + atol {options.loss_atol}"},
        {"gate": "throughput", "holds": sections["throughput"]["verdict"] == PASS,
         "detail": f"p50 ratio >= {options.min_throughput_ratio}"},
    ]
    if sections["stability"]["verdict"] != NOT_CHECKED:
        gates.append({"gate": "stability", "holds": sections["stability"]["verdict"] == PASS,
                      "detail": "a killed run resumes from its checkpoint and repeats the uninterrupted losses "
                                "(bitwise where the reference does); the reference's checkpoint resumes on each "
                                "target within the loss tolerance"})
    if generation is not None:
        gates.append({"gate": "inference", "holds": generation["verdict"] == PASS,
                      "detail": f"tokens/s >= {options.min_throughput_ratio} x the reference's at every batch size, "
                                f"token disagreement <= {options.max_token_disagreement}"})
    if int8 is not None and int8["gates"]["holds"] is not None:
        limits = [f"{what} {v}" for what, v in (("max abs error <=", options.int8_max_error),
                                                 ("cosine >=", options.int8_min_cosine)) if v is not None]
        gates.append({"gate": "int8", "holds": int8["gates"]["holds"],
                      "detail": f"each ONNX target's INT8 model of the export made, every output's "
                                f"{' and '.join(limits)}"})
    exit_code = 3 if failed else (0 if all(g["holds"] for g in gates) else 1)
    return {"schema": SCHEMA, "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "script": options.script, "script_args": list(options.script_args),
            "reference": options.reference.name, "targets": [t.name for t in options.targets],
            "nproc_per_node": options.nproc_per_node, "steps": options.steps,
            "verdict": "accepted" if exit_code == 0 else ("rejected" if exit_code == 1 else "run_failed"),
            "exit_code": exit_code, "gates": gates, "sections": sections,
            "runs": {name: r.summary() for name, r in runs.items()}}
