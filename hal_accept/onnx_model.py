"""The ONNX export of ``hal accept --onnx``: which ONNX target each target is, op_coverage's scan and rewrite
of the export for it (section 2), and its INT8 model made by op_coverage quantize's steps (section 6).

A target's ONNX target is a fact, never a guess: the ``onnx.profile.json`` in the folder of its backend
(for ``emu:<profile>``, the backend whose folder holds that torch profile), else the op_coverage target
named or aliased as that backend (``cuda`` is ``ort-cuda``'s alias); a target with neither has none,
and the report says so.  Every ONNX target is scanned, rewritten and quantized once, however many
targets share it; the files go to ``<workdir>/onnx/``.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from hal_accept.options import AcceptOptions, Target
from hal_accept.report import int8_line, onnx_line
from hal_accept.verdicts import FAIL, INFO, PASS


def onnx_target(target: Target, targets) -> Tuple[Optional[str], str]:
    """The op_coverage ONNX target of ``target`` (``musa`` for ``emu:musa-2.7``) and where that comes from,
    or ``None`` and why there is none.  ``targets``: op_coverage's
    :class:`~op_coverage.targets.catalog.TargetSet` (:func:`op_coverage.load_targets`)."""
    from hal.op_support.torch_profile import alias_map, bundled_files, load_torch_profiles
    from hal.plugin.facts import backend_folders, builtin_files, read_builtin_json
    from op_coverage.datafiles import BACKEND_PROFILE
    from op_coverage.targets.catalog import NO_DATA

    backends: List[str] = []  # the backends whose ONNX profile this target's is, in the order looked up
    if target.emu_ops:
        profiles = load_torch_profiles()
        name = alias_map(profiles).get(target.emu_ops)
        if name is None:
            return None, f"{target.emu_ops!r} is no torch profile (op_coverage targets --kind torch lists them)"
        path = bundled_files().get(name)
        if path:
            backends.append(path.rsplit("/", 2)[-2])
        if profiles[name].vendor and profiles[name].vendor not in backends:
            backends.append(profiles[name].vendor)
        of = f"torch profile {name}"
    else:
        backends.append(target.backend)
        of = f"backend {target.backend}"
    onnx_files = set(builtin_files(BACKEND_PROFILE))
    for b in backends:
        folder = backend_folders().get(b)
        if folder and f"{folder}/{BACKEND_PROFILE}" in onnx_files:
            found = read_builtin_json(f"{folder}/{BACKEND_PROFILE}")["name"]
            return found, f"{folder}/{BACKEND_PROFILE}: the ONNX profile of the {of}'s toolchain"
    for b in backends:
        profile = targets.get(b)
        if profile is not None:
            return profile.name, f"op_coverage's ONNX target {profile.name} is named or aliased {b!r}"
    why = next((NO_DATA[b.lower()] for b in backends if b.lower() in NO_DATA), None)
    return None, (f"no ONNX profile for the {of}: no {BACKEND_PROFILE} in its backend's folder and no op_coverage "
                  f"ONNX target named {' or '.join(map(repr, backends))}" + (f" ({why})" if why else "")
                  + "; op_coverage targets --kind onnx lists the ONNX targets")


def onnx_targets(options: AcceptOptions) -> Dict[str, Tuple[Optional[str], str]]:
    """``{target name: (ONNX target or None, how / why)}`` for every target of ``options``."""
    from op_coverage import load_targets

    ts = load_targets()
    return {t.name: onnx_target(t, ts) for t in options.targets}


def _output(options: AcceptOptions, name: str, suffix: str) -> Path:
    """Where the rewrite (``suffix`` "") or the INT8 model (".int8") for ONNX target ``name`` is written."""
    folder = Path(options.workdir) / "onnx"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{Path(options.onnx).stem}.{name}{suffix}.onnx"


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:400]}"


def _label(row: dict) -> str:
    return row["op_type"] if row["domain"] in ("", "ai.onnx") else f"{row['domain']}::{row['op_type']}"


def _per_target(found: Dict[str, Tuple[Optional[str], str]], per_name: Dict[str, dict]) -> Dict[str, dict]:
    return {t: ({"onnx_target": n, "how": how, **per_name[n]} if n else {"onnx_target": None, "why": how})
            for t, (n, how) in found.items()}


# -- section 2: scan and rewrite --------------------------------------------------------------------------------
def _rewrite(options: AcceptOptions, name: str) -> dict:
    """``op_coverage rewrite``'s library call: what it replaced, whether the result matched the export in
    onnxruntime (generated inputs, dtype-aware tolerances), what the rescan still finds not native."""
    from op_coverage.errors import ScanError
    from op_coverage.rewrite import rewrite

    out = _output(options, name, "")
    try:
        rep, error = rewrite(options.onnx, name, out), None
    except ScanError as exc:  # a failed check or verification carries the report so far
        rep, error = getattr(exc, "report", None), (str(exc).splitlines() or [""])[0][:400]
        if rep is None:
            return {"error": _first_line(exc), "written": None}
    except Exception as exc:  # noqa: BLE001 - the report says what broke, the other sections go on
        return {"error": _first_line(exc), "written": None}
    doc = rep.to_dict()
    ver = doc["verification"]
    return {"replaced": doc["replaced"], "added": doc["added"], "blocked": doc["blocked"],
            "verified": ver["ok"] if ver else None, "verification": ver,
            "remaining": rep.remaining if rep.rescan is not None else None,
            "coverage_by_node": (rep.rescan or {}).get("coverage_by_node"),
            "written": str(out) if rep.written else None, "error": error}


def _runs_natively(entry: dict) -> bool:
    """The ONNX target runs the export as it is, or the rewrite, verified, with nothing left."""
    if entry.get("error"):
        return False
    rw = entry.get("rewrite")
    return rw is None or (bool(rw.get("verified")) and rw.get("remaining") == {} and not rw.get("error"))


def onnx_operators(options: AcceptOptions, progress: Callable[[str], None] = lambda s: None) -> dict:
    """Section 2's ONNX part: per target (by name) its ONNX target, the scan of the export (nodes native, host
    fallback, unsupported; each op not native with its planned replacement) and, where an op is not native,
    the rewrite; or why the target has none.  ``verdict``: ``pass`` when every ONNX target runs the export, or
    the rewrite (verified in onnxruntime), natively; else ``info`` (operators are not gated)."""
    import op_coverage
    from op_coverage.report.replacement import replacement_text

    found = onnx_targets(options)
    names = sorted({n for n, _ in found.values() if n})
    per_name: Dict[str, dict] = {}
    evidence = []
    if names:
        progress(f"operators: ONNX scan of {options.onnx} for {', '.join(names)}")
        evidence.append(f"op_coverage scan {options.onnx} -t {','.join(names)} --json")
        try:
            model = op_coverage.scan(options.onnx, names, progress=False).models[0].to_dict()
        except Exception as exc:  # noqa: BLE001 - the section says why
            per_name = {n: {"error": _first_line(exc)} for n in names}
        else:
            for summary in model["targets"]:
                n = summary["name"]
                ops = [{"op": _label(r), "nodes": r["count"], "status": r["support"][n]["status"],
                        "reason": r["support"][n].get("reason", ""),
                        "replacement": replacement_text((r.get("replacement") or {}).get(n))}
                       for r in model["ops"] if r["support"][n]["status"] != "native"]
                entry = {"title": summary["title"], "nodes": summary["nodes"],
                         "nodes_by_status": summary["nodes_by_status"], "op_types": summary["op_types"],
                         "op_types_native": summary["op_types_native"], "worst": summary["worst"],
                         "notes": summary["notes"], "needs_attention": ops, "rewrite": None}
                if ops:
                    progress(f"operators: ONNX rewrite of {options.onnx} for {n}")
                    entry["rewrite"] = _rewrite(options, n)
                    evidence.append(f"op_coverage rewrite {options.onnx} -t {n} -o {_output(options, n, '')} --json")
                per_name[n] = entry
    per_target = _per_target(found, per_name)
    return {"verdict": PASS if per_name and all(map(_runs_natively, per_name.values())) else INFO,
            "summary": f"ONNX export {Path(options.onnx).name}: "
                       + "; ".join(f"{t}: {onnx_line(e)}" for t, e in per_target.items()),
            "targets": per_target, "evidence": evidence}


# -- section 6: INT8 --------------------------------------------------------------------------------------------
def _quantize(options: AcceptOptions, name: str) -> dict:
    """op_coverage quantize's steps for ONNX target ``name``: load, make_feeds, choose, check, measure, gate, and
    write when the gates hold (no latency runs): the INT8 model's format, size and accuracy against the export."""
    from op_coverage.errors import NothingQuantized, ScanError
    from op_coverage.quantize import Gates, QuantizeOptions, check, choose, gate, load, make_feeds, measure, write

    out = _output(options, name, ".int8")
    gates = Gates(max_error=options.int8_max_error, min_cosine=options.int8_min_cosine)
    try:
        source = load(options.onnx, name, QuantizeOptions(gates=gates, runs=0, compare=False), output=out)
        feeds = make_feeds(source)
        with tempfile.TemporaryDirectory(prefix=".int8-", dir=out.parent) as work:  # beside the output: write renames
            chosen = choose(feeds, Path(work))
            checked = check(chosen)
            measured = measure(checked)
            verdict = gate(measured)
            if verdict.ok:
                write(checked)
    except NothingQuantized as exc:  # the target runs no INT8 form of the model's ops: it stays float
        return {"status": "nothing_quantized", "why": (str(exc).splitlines() or [""])[0][:600], "written": None}
    except ScanError as exc:
        return {"status": "failed", "error": (str(exc).splitlines() or [""])[0][:600], "written": None}
    except Exception as exc:  # noqa: BLE001 - the report says what broke, the other sections go on
        return {"status": "failed", "error": _first_line(exc), "written": None}
    return {"status": "quantized", "format": chosen.choice.format, "format_title": chosen.format_facts["title"],
            "quantized_nodes": checked.quantized_nodes, "kept_float": checked.kept_float, "size": checked.size,
            "accuracy": measured.to_dict(verdict), "within_gates": verdict.ok,
            "min_cosine": min((o.cosine for o in measured.outputs if o.cosine is not None), default=None),
            "max_abs_error": max((o.max_abs for o in measured.outputs), default=None),
            "not_native": checked.rescan.get("not_native", {}), "notes": list(chosen.notes),
            "written": str(out) if verdict.ok else None}


def int8_section(options: AcceptOptions, progress: Callable[[str], None] = lambda s: None) -> dict:
    """Section 6's ``int8`` part: per target, the INT8 model op_coverage quantize's steps make of the export for
    its ONNX target, its size against the float model's, and each output's error and cosine similarity.

    Gated as ``op_coverage quantize`` gates, only when a gate is given (``int8_max_error``, ``int8_min_cosine``;
    nothing is written unless they hold): then the verdict is ``pass`` when every ONNX target got an INT8 model
    within the gates, and at least one did -- an ONNX target that runs no INT8 form of the model's ops, or whose
    INT8 model fails onnx.checker or onnxruntime, fails it, as quantize exits non-zero there.  Ungated, the
    figures are reported: ``info``."""
    found = onnx_targets(options)
    gated = options.int8_max_error is not None or options.int8_min_cosine is not None
    per_name: Dict[str, dict] = {}
    for n in sorted({n for n, _ in found.values() if n}):
        progress(f"inference: INT8 of {options.onnx} for {n} (op_coverage quantize's steps)")
        per_name[n] = _quantize(options, n)
    per_target = _per_target(found, per_name)
    holds = bool(per_name) and all(e["status"] == "quantized" and e["within_gates"] for e in per_name.values())
    limits = [(flag, what, v) for flag, what, v in (("max-error", "max abs error <=", options.int8_max_error),
                                                    ("min-cosine", "cosine >=", options.int8_min_cosine))
              if v is not None]
    flags = "".join(f" --{flag} {v}" for flag, _, v in limits)
    judged = (f"gates ({', '.join(f'{what} {v}' for _, what, v in limits)}) {'hold' if holds else 'FAIL'}"
              if gated else "not gated (--int8-max-error, --int8-min-cosine)")
    return {"verdict": (PASS if holds else FAIL) if gated else INFO,
            "summary": (f"INT8 of {Path(options.onnx).name}: "
                        + "; ".join(f"{t}: {int8_line(e)}" for t, e in per_target.items()) + f"; {judged}"),
            "gates": {"max_error": options.int8_max_error, "min_cosine": options.int8_min_cosine,
                      "holds": holds if gated else None},
            "targets": per_target,
            "evidence": [f"op_coverage quantize {options.onnx} -t {n} -o {_output(options, n, '.int8')} --runs 0 "
                         f"--no-compare{flags}" for n in per_name],
            "not_checked": ["INT8 latency: onnxruntime's CPU timing is no target's (op_coverage quantize measures it "
                            "with --runs)"]}
