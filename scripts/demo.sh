#!/usr/bin/env bash
# The main job on the embedded defaults: what this machine offers, and what hal makes of it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
step() { printf '\n=== %s\n' "$*"; }
step "hal list: every backend hal knows, and why it is or is not usable here"
hal list
step "hal info: the selected backend"
hal info
