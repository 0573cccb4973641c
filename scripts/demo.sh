#!/usr/bin/env bash
# The main job on the embedded defaults: what this machine offers, what hal makes of it,
# and what a migration of the bundled example model would meet on four targets.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
step() { printf '\n=== %s\n' "$*"; }
step "hal list: every backend hal knows, and why it is or is not usable here"
hal list
step "hal info: the selected backend"
hal info
step "hal doctor: the environment checklist (each check in a time-limited subprocess)"
hal doctor || echo "(hal doctor exit code $?: 0 OK, 1 WARN, 2 FAIL)"
step "op_coverage scan: the bundled example model against Ascend, TensorRT, OpenVINO and onnxruntime-CUDA"
rc=0
op_coverage scan -t ascend,tensorrt,openvino,ort-cuda || rc=$?
echo "(op_coverage exit code $rc: 0 all native, 3 host fallback needed, 4 unsupported operators remain — docs/op_coverage.md)"
step "op_coverage for a training script: a CUDA-written script traced on the emulator, each aten op judged per vendor"
rc=0
op_coverage scan examples/cuda_train.py -t ascend,mlu,musa || rc=$?
echo "(op_coverage exit code $rc; the flow, with hal.fallback and HAL_EMU_OPS: docs/op_coverage-torch.md)"
step "a tiny training run on the selected device: checkpoints, resume, metrics (out/tiny)"
rm -rf out/tiny
"$PY" examples/train_tiny.py --out out/tiny --steps 200
step "run it again with more steps: it resumes from the newest complete checkpoint"
"$PY" examples/train_tiny.py --out out/tiny --steps 300
step "hal metrics summary: where throughput dropped"
hal metrics summary out/tiny/metrics/*.jsonl || true
