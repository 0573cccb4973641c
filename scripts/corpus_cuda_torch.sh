#!/usr/bin/env bash
# The corpus of CUDA-written scripts under PyPI's default torch, which is a CUDA build, on a
# machine without a GPU or driver (the most common CPU box): hal must keep torch's own
# internals away from CUDA there.  Installs into its own virtual environment (several GB of
# wheels, so not part of CI): HAL_CUDA_TORCH_VENV (default .venv-cuda-torch) and
# HAL_CUDA_TORCH_SPEC (default torch==2.14.1) choose them.  Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${HAL_CUDA_TORCH_VENV:-.venv-cuda-torch}
SPEC=${HAL_CUDA_TORCH_SPEC:-torch==2.14.1}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q "$SPEC"
"$VENV/bin/python" - <<'PYEOF'
import torch
if not torch.version.cuda:
    raise SystemExit(f"corpus-cuda-torch: {torch.__version__} is a CPU build; set HAL_CUDA_TORCH_SPEC to a CUDA build")
print(f"corpus-cuda-torch: torch {torch.__version__} (CUDA {torch.version.cuda}), "
      f"torch.cuda.is_available() = {torch.cuda.is_available()}")
PYEOF
"$VENV/bin/python" -m pip install -q -e ".[test]"
"$VENV/bin/python" -m hal.emu.build
"$VENV/bin/python" -m pytest -q tests/corpus "$@"
