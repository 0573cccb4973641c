#!/usr/bin/env bash
# The CUDA path on a lent GPU, as one prepared script.  Writes its evidence to
# $OUT (when set by the device runner) or docs/validation/, named with the date.
# Usage: bash scripts/gpu_check.sh        (expects an NVIDIA GPU and a CUDA torch)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
day=$(date -u +%Y-%m-%d)
dest=${OUT:-docs/validation}
mkdir -p "$dest"
log="$dest/gpu-check-$day.log"
{
  echo "# gpu-check $day on $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || echo "nvidia-smi not available"
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'devices', torch.cuda.device_count())"
  if ! "$PY" -c "import hal" 2>/dev/null; then
    "$PY" -m pip install -q --no-build-isolation -e . || "$PY" -m pip install -q -e .
  fi
  echo "## hal list --json"; "$PY" -m hal list --json
  echo "## hal info --json"; HAL_BACKEND=cuda "$PY" -m hal info --json
  echo "## backend tests (every usable backend, cuda included)"
  PYTHONUNBUFFERED=1 timeout "${HAL_GPU_TESTS_TIMEOUT:-180}" "$PY" -m pytest -q -p no:cacheprovider tests/backend -rs
  echo "(backend tests exit code $?)"
  # each section has its own time limit, most important first, so one slow part cannot
  # eat the whole device lease; a section's exit code is printed, not acted on
  for section in ops:70 dist:70 emu_redirect_conformance:90 corpus:150 cuda_namespace:40 device_types_amp:40 frameworks:180 llmstack:240 checkpoint:60 parallel:90 fault_tolerance:60 op_coverage_rewrite:40; do
    name=${section%%:*}; limit=${section##*:}
    echo "## scripts/gpu_check.d/$name.sh (limit ${limit}s)"
    PYTHONUNBUFFERED=1 timeout "$limit" bash "scripts/gpu_check.d/$name.sh"
    echo "(section $name exit code $?)"
  done
} 2>&1 | tee "$log"
echo "evidence written to $log"
