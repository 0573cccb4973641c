#!/usr/bin/env bash
# One-step set-up on a fresh machine.  Never replaces an installed torch: vendor stacks
# (torch_npu, torch_mlu, ROCm, MetaX, ...) ship their own build.  Only when no torch is
# importable does it install the CPU build named by HAL_TORCH_SPEC (default torch==2.13.0).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if "$PY" -c "import torch" 2>/dev/null; then
  echo "hal setup: keeping the installed torch $("$PY" -c 'import torch; print(torch.__version__)')"
else
  spec=${HAL_TORCH_SPEC:-torch==2.13.0}
  echo "hal setup: no importable torch; installing the CPU build ($spec)"
  "$PY" -m pip install -q "$spec"
fi
# the test and framework extras must never replace the torch found (or installed) above: pin it to
# itself in a constraint file made now (build/ is git-ignored); the public version (no +cpu / +cu130
# label): a global pip constraint such as torch<=2.14.1 excludes 2.14.1+cu130 but admits ==2.14.1
mkdir -p build
"$PY" -c 'import torch; print("torch==" + torch.__version__.split("+")[0])' > build/torch-constraint.txt
"$PY" -m pip install -q -e ".[test,frameworks]" -c build/torch-constraint.txt
# the LLM training stacks (pyproject's llmstack extra): DeepSpeed compiles against the torch found above, so it is
# built without isolation (its build must see that torch); HAL_SETUP_LLMSTACK=0 skips them
if [ "${HAL_SETUP_LLMSTACK:-1}" != "0" ]; then
  mapfile -t stack < <("$PY" -c 'import re; m = re.search(r"^llmstack = \[(.*?)\]", open("pyproject.toml").read(), re.M | re.S); print("\n".join(re.findall(r"\"([^\"]+)\"", m.group(1))))')
  "$PY" -m pip install -q --no-build-isolation -c build/torch-constraint.txt "${stack[@]}"
fi
"$PY" -c "import hal; print('hal setup: hal', hal.__version__, 'installed; native host kernels:', 'yes' if hal.native_available() else 'no')"
# the emulated accelerator links against this torch: compile it now rather than on first use
"$PY" -m hal.emu.build
