#!/usr/bin/env bash
# Issue 7 on a lent GPU: the conformance kit, hal probe and hal run on the cuda backend.
# Called by scripts/gpu_check.sh; writes its evidence next to the main log.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
dest=${OUT:-docs/validation}
day=$(date -u +%Y-%m-%d)
mkdir -p "$dest"
echo "### hal conformance --backend cuda"
HAL_BACKEND=cuda "$PY" -m hal conformance --backend cuda --out "$dest/conformance-cuda-$day.json" \
  --markdown "$dest/conformance-cuda-$day.md"
echo "### hal probe (cuda)"
HAL_BACKEND=cuda "$PY" -m hal probe --out "$dest/op-profile-cuda-$day.json" | tail -3
echo "### hal run examples/cuda_train.py: cuda (shim is a no-op) vs cpu (shim redirects)"
tmp=$(mktemp -d)
HAL_BACKEND=cuda "$PY" -m hal run --quiet examples/cuda_train.py --out "$tmp/cuda.json"
HAL_BACKEND=cpu "$PY" -m hal run --quiet examples/cuda_train.py --out "$tmp/cpu.json"
"$PY" - "$tmp/cuda.json" "$tmp/cpu.json" <<'PY'
import json, sys
cuda, cpu = (json.load(open(p))["losses"] for p in sys.argv[1:3])
worst = max(abs(a - b) / abs(b) for a, b in zip(cuda, cpu))
print("cuda losses", cuda)
print("cpu  losses", cpu)
print(f"largest relative difference {worst:.2e} (bf16 autocast on both)")
PY
