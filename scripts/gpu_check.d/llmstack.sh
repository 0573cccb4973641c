#!/usr/bin/env bash
# The LLM training stacks on one CUDA device through `HAL_BACKEND=cuda hal run` (called by scripts/gpu_check.sh):
# DeepSpeed ZeRO-3 (zero.Init + GatheredParameters, torch's AdamW and DeepSpeed's FusedAdam, a CUDA extension
# built on first use) and the HF Trainer with a ZeRO-3 config, each against DeepSpeed's own CPU run, and
# torchtitan's llama3 debug model: 0.2.2 (torch < 2.14) against its hal cpu run, 0.3 (torch >= 2.14, whose
# llama3 uses FlexAttention, which has no CPU backward) trained on cuda with CUDA graphs on and off.
# Installs pyproject's llmstack extra with the GPU's torch kept, if it is missing.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
"$PY" -c "import torch; print(f'torch=={torch.__version__.split(\"+\")[0]}')" > /tmp/hal-gpu-torch-constraint.txt
NEW_TITAN=$("$PY" -c "import torch; print(int(tuple(map(int, torch.__version__.split('+')[0].split('.')[:2])) >= (2, 14)))")
if [ "$NEW_TITAN" = 1 ]; then TITAN="torchtitan==0.3.0"; else TITAN="torchtitan==0.2.2"; fi
if ! "$PY" -c "import deepspeed, transformers, torchtitan" 2>/dev/null; then
  "$PY" -m pip install -q -c /tmp/hal-gpu-torch-constraint.txt -e ".[frameworks]"
  "$PY" -m pip install -q --no-build-isolation -c /tmp/hal-gpu-torch-constraint.txt deepspeed==0.19.8 "$TITAN" "triton>=3.0" \
    $([ "$NEW_TITAN" = 1 ] && echo "huggingface-hub<2")
fi
echo "### DeepSpeed ZeRO-3, the HF Trainer with DeepSpeed and torchtitan on cuda (1 rank) against their CPU runs"
if [ "$NEW_TITAN" = 1 ]; then
  "$PY" scripts/gpu_check.d/llmstack.py ds_zero3_torch_adam ds_zero3_init hf_trainer_zero3; rc=$?
  echo "### torchtitan 0.3 on cuda (1 rank)"
  "$PY" scripts/titan03_recipes.py --backends cuda --recipes titan_single || rc=1
  exit $rc
fi
"$PY" scripts/gpu_check.d/llmstack.py
