#!/usr/bin/env bash
# The framework corpus (tests/frameworks) through `HAL_BACKEND=cuda hal run` on a lent GPU: the
# recipes written for an NVIDIA GPU must pass there unchanged (the shim changes nothing on cuda).
# Needs the frameworks extra (pip install -e '.[frameworks]' with the GPU's torch kept).
# Called by scripts/gpu_check.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import transformers, peft, accelerate, lightning" 2>/dev/null; then
  "$PY" -c "import torch; print(f'torch=={torch.__version__.split(\"+\")[0]}')" > /tmp/hal-gpu-torch-constraint.txt
  "$PY" -m pip install -q -c /tmp/hal-gpu-torch-constraint.txt -e ".[frameworks]"
fi
"$PY" tests/frameworks/check_frameworks.py --hal cuda
