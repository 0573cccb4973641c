#!/usr/bin/env bash
# The timm recipe of the framework corpus (tests/frameworks/scripts/timm_recipe.py) in its own
# virtual environment: timm imports torchvision, and PyPI's torchvision is a CUDA build that
# does not import beside the CPU torch of the main environment (`operator torchvision::nms does
# not exist`), so this venv takes PyPI's matching CUDA torch + torchvision (they run on a CPU).
# Large install (about 5.5 GB), not in CI.  HAL_TIMM_VENV (default .venv-timm) and
# HAL_TIMM_SPEC (default "torch==2.14.1 torchvision==0.29.1 timm") choose them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${HAL_TIMM_VENV:-.venv-timm}
SPEC=${HAL_TIMM_SPEC:-torch==2.14.1 torchvision==0.29.1 timm}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# shellcheck disable=SC2086
"$VENV/bin/python" -m pip install -q $SPEC
mkdir -p build
"$VENV/bin/python" -c 'import torch; print("torch==" + torch.__version__.split("+")[0])' > build/torch-constraint-timm.txt
"$VENV/bin/python" -m pip install -q -e ".[test,frameworks]" -c build/torch-constraint-timm.txt
"$VENV/bin/python" -c 'import timm, torch, torchvision; print("frameworks-timm: timm", timm.__version__, "torch", torch.__version__, "torchvision", torchvision.__version__)'
"$VENV/bin/python" -m hal.emu.build
status=0
for backend in cpu emu; do
  PATH="$PWD/$VENV/bin:$PATH" "$VENV/bin/python" tests/frameworks/check_frameworks.py --hal "$backend" timm_recipe || status=1
done
exit $status
