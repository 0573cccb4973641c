"""Convert the torch op facts into op_coverage torch profiles (package data).

Usage: python scripts/torch_profiles_from_facts.py [FACTS_DIR] [OUT_ROOT] [--check]
(defaults: /work/shared/torch-op-facts, this repository)

Each facts file lists, with its source (repo, ref, commit), the aten ops one vendor's PyTorch
plugin registers.  This script writes one ``op_coverage.torch_profile/1`` file per vendor and
torch version, one ``op_coverage.torch_composite/1`` table per torch version and the table of
CUDA-only ops judged at their parent op.  A vendor's profile goes to its hal backend's folder
(``home`` below: OUT_ROOT/backends/ascend/torch-2.13.json for ascend-2.13, the name's suffix after the
vendor naming the file), beside the backend's other facts (docs/plugins.md); torch's own tables
(composite, CUDA-only parents) go to OUT_ROOT/hal/data/torch.  Every judgement call made here (names, aliases, what a
missing op does, the text a vendor prints, doubts about a source) is written into the output
(``unimplemented.source``, ``uncertain``) so a reader can check it against the facts.  The output
is deterministic: re-run it when the facts are refreshed and review the diff.

``--check`` compares the composite table of the installed torch's version with the live
dispatcher (needs torch; prints differences, changes nothing).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
FACTS = Path(ARGS[0]) if ARGS else Path("/work/shared/torch-op-facts")
OUT = Path(ARGS[1]) if len(ARGS) > 1 else ROOT
RETRIEVED = "2026-11-30"  # the facts README: "Retrieved 2026-11-30"
FACTS_NOTE = "torch-op-facts (project fact sheet, README 'Which aten ops each accelerator's PyTorch plugin implements')"

# -- what a missing op does: texts as the vendors' sources print them ---------------------------
# {op} is the only placeholder: the overload name as in native_functions.yaml ("add.Tensor");
# the vendors print c10::OperatorName, i.e. "aten::add.Tensor".
GENERIC = ("Could not run 'aten::{op}' with arguments from the '%s' backend. This could be because the "
           "operator doesn't exist for this backend, or was omitted during the selective/custom build "
           "process (if using custom build). If you are a Facebook employee using PyTorch on mobile, please "
           "visit https://fburl.com/ptmfixes for possible resolutions. 'aten::{op}' is only available for "
           "these backends: [...].")
GENERIC_SRC = ("torch's dispatcher error (c10 Dispatcher::reportError, raised as NotImplementedError) when no "
               "kernel and no fallback is registered for the dispatch key")
ASCEND_WARN = ("CAUTION: The operator 'aten::{op}' is not currently supported on the NPU backend and will fall "
               "back to run on the CPU. This may have performance implications.")
ASCEND_SRC = ("Ascend/pytorch torch_npu/csrc/aten/VariableFallbackKernel.cpp, npu_cpu_fallback (TORCH_NPU_WARN, "
              "once per op)")
MLU_WARN = ("The operator 'aten::{op}' is not currently supported on the MLU backend and will fall back to run "
            "on the CPU. This may have performance implications.")
MLU_ERR = ("The operator 'aten::{op}' is not currently implemented for the MLU device. If you want this op to "
           "be added, please contact the engineer of Cambricon. As a temporary fix, you can set the "
           "environment variable `ENABLE_FALLBACK_TO_CPU=1` to use the CPU as a fallback for this op. "
           "WARNING: this will be slower than running natively on MLU.")
MLU_SRC = ("Cambricon/torch_mlu torch_mlu/csrc/aten/MLUFallback.cpp: mlu_fallback (TORCH_WARN once per op) and "
           "mlu_disable_fallback (TORCH_CHECK_NOT_IMPLEMENTED)")
GCU_LOG = "aten::{op} not supported in torch_gcu, and fallback to torch cpu."
GCU_SRC = ("sunnygui-L/torch-gcu torch_gcu/csrc/aten/aten_cpu_fallback.cpp, gcu_cpu_fallback: a PTDLOG(FALLBACK) "
           "log line, not a Python warning; a Half op the CPU lacks is retried in float32 with the warning "
           "'cpu_fallback: aten::{op} not support Half, convert Half tensor to Float.'")
XPU_ERR = ("The operator 'aten::{op}' is not currently implemented for the XPU device. Please open a feature on "
           "https://github.com/intel/torch-xpu-ops/issues. You can set the environment variable "
           "`PYTORCH_ENABLE_XPU_FALLBACK=1` to use the CPU implementation as a fallback for XPU unimplemented "
           "operators. WARNING: this will bring unexpected performance compared with running natively on XPU.")
XPU_WARN = ("Aten Op fallback from XPU to CPU happends. This may have performance implications. If need debug "
            "the fallback ops please set environment variable `PYTORCH_DEBUG_XPU_FALLBACK=1` ")
XPU_SRC = ("intel/torch-xpu-ops src/ATen/native/xpu/XPUFallback.template (text read at commit 0013b22a, not "
           "necessarily the release/2.13 file): xpu_lazy_registration_or_error_fallback "
           "(TORCH_CHECK_NOT_IMPLEMENTED) and xpu_fallback_impl (TORCH_WARN_ONCE, names no op unless "
           "PYTORCH_DEBUG_XPU_FALLBACK=1)")
MPS_ERR = ("The operator 'aten::{op}' is not currently implemented for the MPS device. If you want this op to be "
           "considered for addition please comment on https://github.com/pytorch/pytorch/issues/141287 and "
           "mention use-case, that resulted in missing op as well as commit hash "
           "cf30153c4c131c8164ee7798e5022d810682e2cb. As a temporary fix, you can set the environment variable "
           "`PYTORCH_ENABLE_MPS_FALLBACK=1` to use the CPU as a fallback for this op. WARNING: this will be "
           "slower than running natively on MPS.")
MPS_WARN = ("The operator 'aten::{op}' is not currently supported on the MPS backend and will fall back to run "
            "on the CPU. This may have performance implications.")
MPS_SRC = ("pytorch/pytorch aten/src/ATen/mps/MPSFallback.mm (commit 035290b7 as stored, the facts' source): "
           "mps_error_fallback (TORCH_CHECK_NOT_IMPLEMENTED, prints the build's COMMIT_SHA: here the 2.13.0 "
           "commit) and mps_fallback (TORCH_WARN_ONCE)")


def _unimpl(default, *, env=None, error=None, error_kind="vendor", warning=None, always_cpu=(), switches=(),
            source, facts_text, **extra):
    out = {"default": default, "env": env,
           "error_message": error, "error_message_kind": error_kind, "error_type": "NotImplementedError",
           "warning_message": warning, "always_cpu": sorted(always_cpu), "switches": list(switches),
           "source": source, "facts": facts_text}
    out.update(extra)
    return out


def _sw(env, value, effect, note):
    return {"env": env, "value": value, "effect": effect, "note": note}


# -- one entry per output profile ---------------------------------------------------------------
PROFILES = [
    dict(name="ascend-2.7", home="backends/ascend", vendor="ascend", file="ascend-torch_npu-26.1.0-pt2.7.1.json",
         plugin={"name": "torch_npu", "version": "26.1.0"}, title="Huawei Ascend NPU, torch_npu 26.1.0 (torch 2.7.1)"),
    dict(name="ascend-2.13", home="backends/ascend", vendor="ascend", file="ascend-torch_npu-26.2.0b1-pt2.13.0.json", aliases=["ascend", "npu"],
         plugin={"name": "torch_npu", "version": "26.2.0b1"},
         title="Huawei Ascend NPU, torch_npu 26.2.0b1 (torch 2.13.0)"),
    dict(name="musa-2.7", home="backends/musa", vendor="musa", file="musa-torch_musa-2.7.1.json", aliases=["musa", "moore-threads"],
         plugin={"name": "torch_musa", "version": "2.7.1"}, title="Moore Threads MUSA, torch_musa 2.7.1"),
    dict(name="mlu-2.4", home="backends/cambricon", vendor="mlu", file="mlu-torch_mlu-1.25.0-pt2.4.1.json", aliases=["mlu", "cambricon"],
         plugin={"name": "torch_mlu", "version": "1.25.0"}, title="Cambricon MLU, torch_mlu 1.25.0 (torch 2.4.1)"),
    dict(name="xpu-2.13", home="backends/xpu", vendor="xpu", file="xpu-torch-xpu-ops-release2.13-pt2.13.0.json",
         aliases=["xpu", "intel-gpu"],
         plugin={"name": "torch (XPU build, intel/torch-xpu-ops release/2.13)", "version": "2.13.0"},
         title="Intel GPU (XPU), PyTorch 2.13.0 with torch-xpu-ops"),
    dict(name="mps-2.13", home="backends/mps", vendor="mps", file="pytorch-mps-2.13.0.json", aliases=["mps", "apple"],
         plugin={"name": "torch (in-tree MPS)", "version": "2.13.0"}, title="Apple MPS, PyTorch 2.13.0"),
    dict(name="gcu-2.10", home="backends/enflame", vendor="gcu", file="gcu-torch_gcu-2.10.0-unofficial.json", aliases=["gcu", "enflame"],
         plugin={"name": "torch_gcu (unofficial upload)", "version": "2.10.0"},
         title="Enflame GCU, torch_gcu 2.10.0 (unofficial copy)"),
    dict(name="biren-partial", home="backends/biren", vendor="biren", file="biren-torch_supa-partial.json", aliases=["biren", "supa"],
         plugin={"name": "torch_supa", "version": "unknown"}, torch_version="2.10.0", partial=True,
         title="Biren SUPA, torch_supa (PARTIAL list: SUPA rewrites only)"),
    dict(name="metax-2.4", home="backends/cuda_compatible/metax", vendor="metax", file="metax-mcPytorch-2.4.json", aliases=["metax", "maca"],
         plugin={"name": "mcPytorch (MetaX fork of PyTorch)", "version": "2.4.0"},
         title="MetaX MACA, mcPytorch 2.4 (PyTorch's CUDA registrations)"),
    dict(name="cuda-2.4", home="backends/cuda", vendor="cuda", file="pytorch-cuda-2.4.1.json",
         plugin={"name": "torch", "version": "2.4.1"}, title="NVIDIA CUDA, PyTorch 2.4.1 (reference)"),
    dict(name="cuda-2.7", home="backends/cuda", vendor="cuda", file="pytorch-cuda-2.7.1.json",
         plugin={"name": "torch", "version": "2.7.1"}, title="NVIDIA CUDA, PyTorch 2.7.1 (reference)"),
    dict(name="cuda-2.10", home="backends/cuda", vendor="cuda", file="pytorch-cuda-2.10.0.json",
         plugin={"name": "torch", "version": "2.10.0"}, title="NVIDIA CUDA, PyTorch 2.10.0 (reference)"),
    dict(name="cuda-2.13", home="backends/cuda", vendor="cuda", file="pytorch-cuda-2.13.0.json", aliases=["cuda", "nvidia"],
         plugin={"name": "torch", "version": "2.13.0"}, title="NVIDIA CUDA, PyTorch 2.13.0 (reference)"),
]


def unimplemented_for(vendor: str, facts: dict) -> dict:
    """What the vendor does with an op it has no kernel for, from the facts and the vendor's fallback source."""
    text = facts.get("unimplemented_behaviour", "")
    if vendor == "ascend":
        return _unimpl("cpu_fallback", error=GENERIC % "PrivateUse1", error_kind="generic", warning=ASCEND_WARN,
                       source=ASCEND_SRC + "; error_message: torch's generic text, only for ops the boxed "
                                           "fallback cannot run (sparse tensors: SparsePrivateUse1 raises)",
                       facts_text=text)
    if vendor == "mlu":
        return _unimpl("cpu_fallback", error=MLU_ERR, warning=MLU_WARN, source=MLU_SRC, facts_text=text,
                       switches=[_sw("ENABLE_FALLBACK_TO_CPU", "0", "error",
                                     "0/OFF/off replaces the CPU fallback with error_message"),
                                 _sw("ENABLE_MLU_FAIL_FALLBACK", "1", "cpu_fallback",
                                     "ops whose MLU kernel fails are also rerun on the CPU")])
    if vendor == "gcu":
        chips = facts["chip_cpu_fallback"]
        chip_cpu, limited = {}, []
        for chip in ("s60", "l600"):
            ops = []
            for o in chips[chip]:
                base = o.replace(" (dtype-limited)", "")
                if base != o:
                    limited.append(f"{chip}:{base}")
                ops.append(base)
            chip_cpu[chip] = sorted(set(ops))
        return _unimpl("cpu_fallback", error=GENERIC % "PrivateUse1", error_kind="generic", warning=GCU_LOG,
                       source=GCU_SRC + "; error_message: torch's generic text (the fallback covers every op, "
                                        "except entries_without_runtime_cpu_fallback)",
                       facts_text=text, chip_cpu=chip_cpu, chip_cpu_dtype_limited=sorted(limited),
                       chip_cpu_source=chips["source"] + ": " + chips["note"],
                       no_cpu_fallback=sorted(facts.get("entries_without_runtime_cpu_fallback", [])),
                       switches=[_sw(k, "", "override", "registers GCU kernels for " + ", ".join(v))
                                 for k, v in facts.get("torch_gcu_env_overrides", {}).items() if k != "source"])
    if vendor == "musa":
        return _unimpl("error", error=GENERIC % "musa", error_kind="generic",
                       source=GENERIC_SRC + "; torch_musa registers no CPU fallback. Backend name 'musa' as "
                              "printed in MooreThreads/torch_musa issue #72 (\"Could not run 'aten::std.correction' "
                              "with arguments from the 'musa' backend\")",
                       facts_text=text)
    if vendor == "xpu":
        return _unimpl("error_unless_env", env="PYTORCH_ENABLE_XPU_FALLBACK", error=XPU_ERR, warning=XPU_WARN,
                       always_cpu=facts["cpu_fallback_ops"], source=XPU_SRC, facts_text=text,
                       switches=[_sw("PYTORCH_ENABLE_XPU_FALLBACK", "1", "cpu_fallback",
                                     "missing ops run on the CPU instead of raising"),
                                 _sw("PYTORCH_XPU_FALLBACK_OP", "op1,op2", "cpu_fallback",
                                     "forces the listed ops to the CPU even when XPU has them"),
                                 _sw("PYTORCH_DEBUG_XPU_FALLBACK", "1", "warn",
                                     "the fallback warning names each op")])
    if vendor == "mps":
        m = facts["mps_cpu_fallback"]
        return _unimpl("error_unless_env", env="PYTORCH_ENABLE_MPS_FALLBACK", error=MPS_ERR, warning=MPS_WARN,
                       always_cpu=m["always_cpu_ops"], source=MPS_SRC, facts_text=m["behaviour"],
                       switches=[_sw("PYTORCH_ENABLE_MPS_FALLBACK", "1", "cpu_fallback",
                                     "missing ops run on the CPU instead of raising")])
    if vendor == "biren":
        return _unimpl("unknown", error=GENERIC % "PrivateUse1", error_kind="generic",
                       source="not public: the fallback code is not in the torch_supa snapshot; error_message is "
                              "torch's generic text for a key with neither kernel nor fallback",
                       facts_text=text)
    # cuda, metax: in-tree CUDA, no CPU fallback
    return _unimpl("error", error=GENERIC % "CUDA", error_kind="generic", source=GENERIC_SRC, facts_text=text)


#: doubts added here, on top of the facts' own ``uncertain`` entries
EXTRA_UNCERTAIN = {
    "ascend": ["generic_registered is empty in the facts although torchnpugen binds a slow per-tensor CPU-loop "
               "kernel to every _foreach op without an NPU entry; every such op is CompositeExplicitAutograd in "
               "PyTorch (checked for 2.7.1 and 2.13.0), so it is judged composite (cea) here, which runs the same "
               "loop."],
    "gcu": ["Unofficial third-party upload: treat every verdict as provisional until checked on Enflame hardware.",
            "The list looks short for a training stack (no threshold_backward, no gelu_backward.grad_input); such "
            "ops take the CPU fallback, so 'missing' here may mean 'not in this copy' rather than 'not in torch_gcu'.",
            "chip_cpu (codegen/gcu_op_fallback.yaml) is per chip (s60, l600) and is not applied by judge(): a listed "
            "op there is reported native with a note."],
    "biren": ["PARTIAL list: only SUPA rewrites are public. A 'missing' verdict for Biren proves nothing; most stock "
              "ops come from patched PyTorch sources that are not public.",
              "torch_supa supports torch 2.6-2.12; this profile is judged with the 2.10.0 composite table (the "
              "version the facts checked the names against).",
              "What a missing op does on Biren is unknown (unimplemented.default = unknown)."],
    "metax": ["This is PyTorch 2.4's stock CUDA registration list (plus cudnn_convolution_bias_fused), read from "
              "MetaX's public fork: judging against it says what mcPytorch registers, not what MACA hardware runs."],
    "mps": ["always_cpu comes from MPSFallback.mm at the commit stored in the search index (035290b7), not "
            "necessarily the v2.13.0 file."],
    "xpu": ["The error/warning texts come from XPUFallback.template at commit 0013b22a (search index copy); its "
            "always-CPU list there is longer than the facts' cpu_fallback_ops (29, release/2.13): the facts' list "
            "is used."],
    "mlu": ["torch_mlu's public snapshot stops at torch 2.4.1; a trace from newer torch is judged with skew."],
    "musa": ["MUSA's error text is torch's generic dispatcher message with the backend name 'musa' (as users report "
             "it); torch_musa adds no text of its own."],
}


def packet(op: str) -> str:
    return op.split(".", 1)[0]


def convert(spec: dict) -> dict:
    f = json.loads((FACTS / spec["file"]).read_text(encoding="utf-8"))
    vendor = spec["vendor"]
    gen = f.get("generic_registered") or {}
    tv = spec.get("torch_version") or f["torch_version"]
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", tv):
        raise SystemExit(f"{spec['file']}: torch_version {tv!r} is not a version; set one in PROFILES")
    ops = sorted(set(f["ops"]))
    sd = sorted(set(f.get("ops_via_structured_delegate", [])))
    prof = {
        "schema": "op_coverage.torch_profile/1",
        "name": spec["name"], "aliases": spec.get("aliases", []), "kind": "torch", "vendor": vendor,
        "title": spec["title"], "partial": bool(spec.get("partial")),
        "backend": f["backend"], "device_type": f["device_type"], "dispatch_key": f["dispatch_key"],
        "plugin": spec["plugin"], "torch_version": tv,
        "source": f["source"], "extra_sources": f.get("extra_sources", []),
        "pytorch_reference": f.get("pytorch_reference", {}),
        "extracted_how": f["extracted_how"], "retrieved": RETRIEVED,
        "facts_file": spec["file"], "converted_by": "scripts/torch_profiles_from_facts.py",
        "ops": ops, "ops_via_structured_delegate": sd,
        "generic_registered": sorted(gen.get("ops", [])), "generic_registered_how": gen.get("how"),
        "autograd_custom": sorted(f.get("autograd_custom", [])), "cia_overrides": sorted(f.get("cia_overrides", [])),
        "other_dispatch_keys": {k: sorted(v) for k, v in sorted(f.get("other_dispatch_keys", {}).items())},
        "custom_ops": f.get("custom_ops", {}),
        "not_in_pytorch_yaml": sorted(f.get("not_in_pytorch_yaml", [])),
        "unimplemented": unimplemented_for(vendor, f),
        "counts": {"ops": len(ops), "ops_via_structured_delegate": len(sd), "packets": len({packet(o) for o in ops})},
        "uncertain": list(f.get("uncertain", [])) + EXTRA_UNCERTAIN.get(vendor, []),
    }
    if f["torch_version"] != tv:
        prof["torch_version_note"] = f["torch_version"]
    return prof


COMPOSITES = {"2.4": "composite-2.4.1.json", "2.7": "composite-2.7.1.json", "2.10": "composite-2.10.0.json",
              "2.13": "composite.json"}


def composite(minor: str, fname: str) -> dict:
    c = json.loads((FACTS / fname).read_text(encoding="utf-8"))
    return {
        "schema": "op_coverage.torch_composite/1", "torch_version": c["torch_version"],
        "source": c["source"], "extracted_how": c["extracted_how"], "retrieved": RETRIEVED, "facts_file": fname,
        "converted_by": "scripts/torch_profiles_from_facts.py", "semantics": c["semantics"],
        "cia": sorted(c["CompositeImplicitAutograd"]["ops"]), "cea": sorted(c["CompositeExplicitAutograd"]["ops"]),
        "ceanf": sorted(c["CompositeExplicitAutogradNonFunctional"]["ops"]),
        "cea_with_backend_kernels": sorted(c["composite_with_backend_kernels"]["ops"]),
        "structured_delegate": dict(sorted(c["structured_delegate"].items())),
        "core_aten_ops": sorted(c.get("core_aten_ops", [])),
        "counts": {"all_functions": c["counts"]["all_functions"], "cia": len(c["CompositeImplicitAutograd"]["ops"]),
                   "cea": len(c["CompositeExplicitAutograd"]["ops"]),
                   "ceanf": len(c["CompositeExplicitAutogradNonFunctional"]["ops"]),
                   "structured_delegate": len(c["structured_delegate"])},
    }


#: CUDA-only ops a trace recorded on CUDA contains, and the ops other backends run instead
#: (first native parent wins; the facts README, "Caveats")
_SDPA = ["scaled_dot_product_attention"]
_CONV = ["convolution", "_convolution", "convolution_overrideable"]
_CONV_BW = ["convolution_backward", "convolution_backward_overrideable"]
_BN = ["_batch_norm_impl_index", "native_batch_norm", "_native_batch_norm_legit", "batch_norm"]
_BN_BW = ["_batch_norm_impl_index_backward", "native_batch_norm_backward"]
_RNN = ["lstm.input", "gru.input", "rnn_tanh.input", "rnn_relu.input", "lstm.data", "gru.data",
        "rnn_tanh.data", "rnn_relu.data"]
_CTC = ["ctc_loss.IntList", "ctc_loss.Tensor", "_ctc_loss", "_ctc_loss.Tensor"]
PARENT_RULES = [
    ("_scaled_dot_product_flash_attention*", _SDPA, "flash attention kernel chosen by SDPA on CUDA"),
    ("_scaled_dot_product_efficient_attention*", _SDPA, "memory-efficient attention chosen by SDPA on CUDA"),
    ("_scaled_dot_product_cudnn_attention*", _SDPA, "cuDNN attention chosen by SDPA on CUDA"),
    ("_flash_attention_*", _SDPA, "flash attention entry point under SDPA"),
    ("_efficient_attention_*", _SDPA, "memory-efficient attention entry point under SDPA"),
    ("_cudnn_attention_*", _SDPA, "cuDNN attention entry point under SDPA"),
    ("_fill_mem_eff_dropout_mask_", _SDPA, "dropout mask of the memory-efficient attention"),
    ("cudnn_convolution_transpose*", _CONV, "cuDNN transposed convolution chosen by _convolution"),
    ("miopen_convolution_transpose*", _CONV, "MIOpen transposed convolution chosen by _convolution"),
    ("cudnn_convolution*", _CONV, "cuDNN convolution chosen by _convolution"),
    ("miopen_convolution*", _CONV, "MIOpen convolution chosen by _convolution"),
    ("miopen_depthwise_convolution*", _CONV, "MIOpen depthwise convolution chosen by _convolution"),
    ("cudnn_batch_norm_backward*", _BN_BW, "cuDNN batch-norm backward"),
    ("miopen_batch_norm_backward*", _BN_BW, "MIOpen batch-norm backward"),
    ("cudnn_batch_norm*", _BN, "cuDNN batch norm chosen by _batch_norm_impl_index"),
    ("miopen_batch_norm*", _BN, "MIOpen batch norm chosen by _batch_norm_impl_index"),
    ("_cudnn_rnn*", _RNN, "cuDNN RNN chosen by lstm/gru/rnn on CUDA"),
    ("_cudnn_init_dropout_state", _RNN, "cuDNN RNN dropout state"),
    ("miopen_rnn*", _RNN, "MIOpen RNN chosen by lstm/gru/rnn on ROCm"),
    ("_thnn_fused_lstm_cell*", ["lstm_cell"] + _RNN, "fused LSTM cell the CUDA RNN path calls"),
    ("_thnn_fused_gru_cell*", ["gru_cell"] + _RNN, "fused GRU cell the CUDA RNN path calls"),
    ("_cudnn_ctc_loss*", _CTC, "cuDNN CTC loss chosen by ctc_loss"),
    ("miopen_ctc_loss*", _CTC, "MIOpen CTC loss chosen by ctc_loss"),
    ("_use_cudnn_ctc_loss*", _CTC, "ctc_loss's query whether cuDNN can run it"),
    ("_use_miopen_ctc_loss*", _CTC, "ctc_loss's query whether MIOpen can run it"),
    ("cudnn_grid_sampler_backward*", ["grid_sampler_2d_backward"], "cuDNN grid sampler backward"),
    ("cudnn_grid_sampler*", ["grid_sampler", "grid_sampler_2d"], "cuDNN grid sampler chosen by grid_sampler"),
    ("cudnn_affine_grid_generator_backward*", ["affine_grid_generator_backward"], "cuDNN affine grid backward"),
    ("cudnn_affine_grid_generator*", ["affine_grid_generator"], "cuDNN affine grid chosen by affine_grid_generator"),
]


#: what torch calls only on a PrivateUse1 device (hal's emulator records them): in-tree backends
#: (CUDA, XPU, MPS) take their own kernel of the parent instead; a PrivateUse1 plugin needs them
PRIVATEUSE1_RULES = [
    ("_copy_from*", ["copy_"], "copy_ of a PrivateUse1 device; in-tree backends copy through their own stub"),
    ("convolution_overrideable", ["convolution", "_convolution"],
     "_convolution's call on a PrivateUse1 device; in-tree backends run their own convolution kernels"),
    ("convolution_backward_overrideable", ["convolution_backward"],
     "convolution_backward on a PrivateUse1 device; in-tree backends run their own"),
]


def parents_table() -> dict:
    cuda_specific = set()
    for v in ("2.4.1", "2.7.1", "2.10.0", "2.13.0"):
        cuda_specific |= set(json.loads((FACTS / f"pytorch-cuda-{v}.json").read_text())["cuda_specific_ops"])
    from fnmatch import fnmatchcase
    covered = sorted(o for o in cuda_specific if any(fnmatchcase(o, p) for p, _, _ in PARENT_RULES))
    return {
        "schema": "op_coverage.torch_cuda_only_parents/1",
        "source": "torch-op-facts README (Caveats: traces recorded on CUDA contain CUDA-chosen ops; other backends "
                  "override the parent op and never call them) and the cuda_specific_ops lists of "
                  "pytorch-cuda-{2.4.1,2.7.1,2.10.0,2.13.0}.json",
        "rule": "An op matching a pattern (fnmatch, first match wins) that the target does not have natively is "
                "judged at its parents, in order: the first native parent decides; if none is native, the first "
                "parent's verdict decides.",
        "converted_by": "scripts/torch_profiles_from_facts.py",
        "rules": [{"pattern": p, "parents": ps, "why": why} for p, ps, why in PARENT_RULES],
        "privateuse1_only_rules": [{"pattern": p, "parents": ps, "why": why} for p, ps, why in PRIVATEUSE1_RULES],
        "privateuse1_only_rule": "Applied only to targets whose dispatch key is not PrivateUse1 (in-tree backends); "
                                 "a PrivateUse1 plugin receives these ops itself.",
        "cuda_specific_ops_covered": covered,
        "cuda_specific_ops_not_covered": sorted(cuda_specific - set(covered)),
        "not_covered_note": "CUDA-library ops with no portable parent (cuBLASLt scaled mm, int4/int8 packed mm, "
                            "cuSPARSELt, semi-structured sparsity): judged as themselves.",
    }


def _fmt(v, indent: int) -> str:
    """JSON with string lists packed to ~110 columns (small files, readable diffs)."""
    pad = " " * indent
    if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
        lines, cur = [], ""
        for x in v:
            item = json.dumps(x, ensure_ascii=False)
            if cur and len(pad) + 2 + len(cur) + len(item) + 2 > 110:
                lines.append(cur.rstrip())
                cur = ""
            cur += item + ", "
        lines.append(cur.rstrip().rstrip(","))
        if len(lines) == 1 and len(lines[0]) + indent < 100:
            return "[" + lines[0] + "]"
        return "[\n" + ",\n".join(pad + "  " + ln.rstrip(",") for ln in lines) + "\n" + pad + "]"
    if isinstance(v, dict) and v:
        flat = json.dumps(v, ensure_ascii=False)
        if len(flat) + indent < 100:
            return flat
        items = [f'{pad}  {json.dumps(k)}: {_fmt(x, indent + 2)}' for k, x in v.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    return json.dumps(v, ensure_ascii=False)


def dump(obj: dict) -> str:
    return _fmt(obj, 0) + "\n"


def check_live() -> int:
    import torch
    import torch._C as C
    minor = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    c = composite(minor, COMPOSITES[minor])
    bad = 0
    for sec, key in (("cia", "CompositeImplicitAutograd"), ("cea", "CompositeExplicitAutograd"),
                     ("ceanf", "CompositeExplicitAutogradNonFunctional")):
        miss = [o for o in c[sec] if not C._dispatch_has_kernel_for_dispatch_key("aten::" + o, key)]
        print(f"torch {torch.__version__}: {sec}: {len(c[sec])} ops, {len(miss)} without a live {key} kernel"
              + (f": {miss[:10]}" if miss else ""))
        bad += len(miss)
    return 1 if bad else 0


def main() -> int:
    if "--check" in sys.argv:
        return check_live()
    written = []
    for spec in PROFILES:
        prof = convert(spec)
        out = OUT / spec["home"] / f"torch-{spec['name'].split('-', 1)[1]}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(dump(prof), encoding="utf-8")
        written.append(spec["name"])
    tables = OUT / "hal" / "data" / "torch"
    tables.mkdir(parents=True, exist_ok=True)
    for minor, fname in COMPOSITES.items():
        (tables / f"composite-{minor}.json").write_text(dump(composite(minor, fname)), encoding="utf-8")
    (tables / "cuda_only_parents.json").write_text(dump(parents_table()), encoding="utf-8")
    print(f"wrote {len(written)} profiles to their backends' folders under {OUT / 'backends'}, "
          f"{len(COMPOSITES)} composite tables and cuda_only_parents.json to {tables}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
