#!/usr/bin/env bash
# torchtitan 0.3 (which needs torch >= 2.14) in its own virtual environment: PyPI's torch 2.14.1 (a
# CUDA-linked build that imports without a GPU, about 5.5 GB with its nvidia-* wheels), the project and
# torchtitan 0.3.0 under a constraint that pins that torch, then the torchtitan recipes of
# tests/llmstack written with 0.3's configs (--module llama3 --config llama3_debugmodel) through hal run
# on cpu and emu: scripts/titan03_recipes.py prints what each run ends in.  Not in CI.
# HAL_TORCH214_VENV (default .venv-torch214), HAL_TORCH214_SPEC (default torch==2.14.1) and
# HAL_TITAN03_SPEC (default torchtitan==0.3.0) choose them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${HAL_TORCH214_VENV:-.venv-torch214}
TORCH=${HAL_TORCH214_SPEC:-torch==2.14.1}
TITAN=${HAL_TITAN03_SPEC:-torchtitan==0.3.0}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q "$TORCH"
mkdir -p build
"$VENV/bin/python" -c 'import torch; print("torch==" + torch.__version__.split("+")[0])' > build/torch-constraint-torch214.txt
"$VENV/bin/python" -m pip install -q -e ".[test]" -c build/torch-constraint-torch214.txt
# datasets < 4.8 (torchtitan 0.3.0's pin) needs huggingface-hub < 2; 0.3.0 imports triton unconditionally
"$VENV/bin/python" -m pip install -q "$TITAN" triton "huggingface-hub<2" -c build/torch-constraint-torch214.txt
"$VENV/bin/python" -c 'import torch, torchtitan; print("llmstack-torch214: torch", torch.__version__, "torchtitan", torchtitan.__version__)'
"$VENV/bin/python" -m hal.emu.build
PATH="$PWD/$VENV/bin:$PATH" "$VENV/bin/python" scripts/titan03_recipes.py "$@"
