#!/usr/bin/env bash
# The LLM training stacks on one CUDA device through `HAL_BACKEND=cuda hal run` (called by scripts/gpu_check.sh):
# DeepSpeed ZeRO-3 (zero.Init + GatheredParameters, torch's AdamW and DeepSpeed's FusedAdam, a CUDA extension
# built on first use) and the HF Trainer with a ZeRO-3 config, each against DeepSpeed's own CPU run.
# Installs pyproject's llmstack extra with the GPU's torch kept, if it is missing.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import deepspeed, transformers" 2>/dev/null; then
  "$PY" -c "import torch; print(f'torch=={torch.__version__.split(\"+\")[0]}')" > /tmp/hal-gpu-torch-constraint.txt
  "$PY" -m pip install -q -c /tmp/hal-gpu-torch-constraint.txt -e ".[frameworks]"
  "$PY" -m pip install -q --no-build-isolation -c /tmp/hal-gpu-torch-constraint.txt deepspeed==0.19.8
fi
echo "### DeepSpeed ZeRO-3 and the HF Trainer with DeepSpeed on cuda (1 rank) against DeepSpeed's CPU run"
"$PY" scripts/gpu_check.d/llmstack.py
