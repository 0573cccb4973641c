#!/usr/bin/env bash
# hal.dist / hal bench / hal doctor on a lent GPU (called by scripts/gpu_check.sh, or alone).
# On one GPU: NCCL with one rank (busbw is 0 by definition at n=1; time and #wrong are the
# evidence), the dist backend tests on cuda, and the doctor checklist on cuda.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
export HAL_BACKEND=${HAL_BACKEND:-cuda}
ngpu=$("$PY" -c "import torch; print(torch.cuda.device_count())")
echo "### hal.dist on $ngpu GPU(s)"
PYTHONUNBUFFERED=1 "$PY" -m pytest -q -p no:cacheprovider tests/backend/test_dist_backend.py -rs
echo "### hal bench all_reduce (1 rank, NCCL)"
"$PY" -m hal bench all_reduce -b 1K -e 256M -f 4 --timeout 300
if [ "$ngpu" -ge 2 ]; then
  echo "### hal bench all_reduce -n $ngpu"
  "$PY" -m hal bench all_reduce -n "$ngpu" -b 1K -e 1G -f 4 --timeout 400
fi
echo "### hal doctor"
"$PY" -m hal doctor
echo "### hal doctor --json"
"$PY" -m hal doctor --json
