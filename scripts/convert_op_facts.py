"""Convert the published operator-support tables into op_coverage profile files.

Usage: python scripts/convert_op_facts.py [FACTS_DIR] [OUT_ROOT]
(defaults: /work/shared/op-support-facts, this repository)

A runtime's profile is written to OUT_ROOT/op_coverage/data/<name>.profile.json; the profile of a
hal backend's device (``home`` below) to that backend's folder, OUT_ROOT/<home>/onnx.profile.json,
beside the backend's other facts (docs/plugins.md).

Each input file cites its source (repo, path, commit).  The output keeps that citation, maps
the source's vocabulary onto ``native | host-fallback | unsupported`` and records every
judgement call in ``notes`` / ``uncertain``, so a reader can check the conversion against the
source.  Re-run it when a table is refreshed; the output is deterministic.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

FACTS = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/work/shared/op-support-facts")
OUT = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).resolve().parent.parent

ORT_FALLBACK = {"status": "unsupported", "reason": "has no kernel registered for this EP"}

# target name -> how to convert its facts file
TARGETS = {
    "ort-cpu": dict(file="ort-cpu.json", aliases=["cpu", "onnxruntime"], opset_kind="op-version",
                    unlisted={"status": "unsupported", "reason": "has no CPU kernel registered in onnxruntime 1.32.0"}),
    "ort-cuda": dict(file="ort-cuda.json", aliases=["cuda", "nvidia"], opset_kind="op-version",
                     unlisted={"status": "unsupported", "reason": "has no CUDA kernel registered"},
                     fallback="ort-cpu",
                     uncertain=["A newer upstream snapshot (c267f8e, 1.27.0) adds opset 22-25 splits and DeformConv; "
                                "this profile follows the official repo commit 001d12d."]),
    "ort-dml": dict(file="ort-dml.json", aliases=["directml", "dml"], opset_kind="op-version",
                    unlisted={"status": "unsupported", "reason": "has no DirectML kernel registered"},
                    fallback="ort-cpu", dml_ranges=True,
                    uncertain=["The source writes every range as 'N+'; 'until' was set to the next listed start minus 1."]),
    "tensorrt": dict(file="tensorrt.json", aliases=["trt"], opset_kind="op-version",
                     unlisted={"status": "unsupported", "reason": "is not listed in onnx-tensorrt operators.md"},
                     uncertain=["The source gives no per-op opsets, only opset 9-20 for the whole parser.",
                                "Version 10.1-GA; newer TensorRT releases may import more ops."]),
    "ascend": dict(file="ascend-atc.json", home="backends/ascend", aliases=["ascend-atc", "cann", "npu"], opset_kind="model-opset",
                   opset_range=[8, 18],
                   unlisted={"status": "unsupported", "reason": "has no mapping in msit's ONNX-to-CANN map (ATC cannot parse it)"},
                   uncertain=["A mapping means ATC's parser accepts the op; whether the CANN op exists for a given SoC "
                              "(and on AI Core or AI CPU) depends on the installed opp package.",
                              "No dtypes in the source: dtype restrictions are unknown.",
                              "The source spells Col2Im as 'Col2im'; an entry under the real ONNX name was added."]),
    "openvino": dict(file="openvino.json", aliases=["ov", "intel"], opset_kind="op-version",
                     unlisted={"status": "unsupported", "reason": "is not in the OpenVINO ONNX frontend table"},
                     uncertain=["No dtypes in the source."]),
    "migraphx": dict(file="migraphx.json", aliases=["rocm", "amd", "dcu"], opset_kind="op-version",
                     opset_range=[None, 19],
                     unlisted={"status": "unsupported", "reason": "is not in the MIGraphX ONNX operator table"},
                     uncertain=["The source's type lists are copied from the ONNX spec; real dtype support may differ.",
                                "Contrib-op domains (com.microsoft) were inferred by the table's compiler."]),
    "musa": dict(file="ort-musa.json", home="backends/musa", aliases=["ort-musa", "moore-threads", "mthreads"], opset_kind="op-version",
                 unlisted={"status": "unsupported", "reason": "has no MUSA kernel registered"}, fallback="ort-cpu",
                 drop={("ai.onnx", "Clip_6")},
                 uncertain=["Community onnxruntime fork, not a Moore Threads release.",
                            "Kernels behind ENABLE_MUSA_NHWC_OPS or a muDNN version carry that condition as a restriction.",
                            "Clip 6-10 is registered under the name 'Clip_6' in the fork, so ONNX Clip 6-10 has no MUSA kernel."]),
    "rknn": dict(file="rknn.json", aliases=["rockchip", "rknn-toolkit2"], opset_kind="op-version",
                 opset_range=[None, 19],
                 unlisted={"status": "unsupported", "reason": "is not in the RKNN-Toolkit2 2.3.2 op list"},
                 uncertain=["'Supported' means the toolkit converts the op; per-SoC NPU limits are in the RKNN compiler PDF "
                            "and are not applied here (some ops may end up on the CPU)."]),
    "nncase": dict(file="nncase.json", aliases=["k230", "kendryte", "canaan"], opset_kind="op-version",
                   unlisted={"status": "unsupported", "reason": "is not in the nncase ONNX op table"}),
    "axera": dict(file="axera-ax650.json", aliases=["ax650", "pulsar2"], opset_kind="model-opset",
                  opset_range=[11, None],
                  unlisted={"status": "unsupported", "reason": "is not on the Pulsar2 AX650 NPU list"},
                  uncertain=["Unlisted ops are not NPU-supported; Pulsar2 may still place them elsewhere."]),
}

STATUS = {"supported": "native", "partial": "native", "unsupported": "unsupported"}


def convert(name: str, spec: dict) -> dict:
    facts = json.loads((FACTS / spec["file"]).read_text(encoding="utf-8"))
    src = dict(facts["source"])
    src["facts_file"] = spec["file"]
    entries = []
    for op in facts["ops"]:
        key = (op["domain"], op["op"])
        if key in spec.get("drop", set()):
            continue
        status = STATUS[op["status"]]
        restriction = op.get("restrictions") or ""
        if op["status"] == "partial" and not restriction:
            restriction = "the source lists a restriction"
        if op.get("build_condition"):
            restriction = "; ".join(x for x in (restriction, f"needs {op['build_condition']}") if x)
        e = {"domain": op["domain"], "op": op["op"], "since": op.get("since"), "until": op.get("until"),
             "dtypes": sorted(op.get("dtypes") or []), "status": status}
        if restriction:
            e["restriction" if status == "native" else "reason"] = restriction
        if op.get("cann_op"):
            e["target_op"] = op["cann_op"]
        entries.append(e)
    if spec.get("dml_ranges"):
        by = {}
        for e in entries:
            by.setdefault((e["domain"], e["op"]), []).append(e)
        for group in by.values():
            starts = sorted({e["since"] for e in group if e["since"] is not None})
            for e in group:
                later = [s for s in starts if e["since"] is not None and s > e["since"]]
                if later:
                    e["until"] = later[0] - 1
    if name == "ascend":
        entries += [dict(e, op="Col2Im", provenance="source spells it Col2im")
                    for e in entries if e["op"] == "Col2im"]
    entries.sort(key=lambda e: (e["domain"], e["op"], e["since"] or 0))
    return {
        "format": "op_coverage.profile/1", "name": name, "aliases": spec["aliases"], "title": facts["toolchain"],
        "kind": "published-table", "source": src,
        "notes": facts.get("notes", "") + " Converted: supported -> native, partial -> native with a restriction "
                 "note, unsupported -> unsupported.",
        "uncertain": spec.get("uncertain", []), "opset_kind": spec["opset_kind"],
        "opset_range": spec.get("opset_range", facts.get("opset_range")),
        "unlisted": spec["unlisted"], "fallback_profile": spec.get("fallback"), "entries": entries,
    }


def dump(profile: dict) -> str:
    """One entry per line: readable, and diffs show exactly which facts changed."""
    head = {k: v for k, v in profile.items() if k != "entries"}
    lines = json.dumps(head, indent=1, ensure_ascii=False)[:-2]
    body = ",\n".join("  " + json.dumps(e, ensure_ascii=False, sort_keys=True) for e in profile["entries"])
    return f'{lines},\n "entries": [\n{body}\n ]\n}}\n'


def destination(name: str, spec: dict) -> Path:
    """Where a target's profile goes: its hal backend's folder, or op_coverage/data for a runtime."""
    if spec.get("home"):
        return OUT / spec["home"] / "onnx.profile.json"
    return OUT / "op_coverage" / "data" / f"{name}.profile.json"


def main() -> None:
    for name, spec in TARGETS.items():
        profile = convert(name, spec)
        text = dump(profile)
        json.loads(text)
        out = destination(name, spec)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        print(f"{name:10} {len(profile['entries']):4} entries  <- {spec['file']}  -> {out}")


if __name__ == "__main__":
    main()
