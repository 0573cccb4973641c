#!/usr/bin/env bash
# Device-type strings, pinned factories and CUDA's autocast policy on a lent GPU (issue 20,
# items 3-5): tests/dist/hal_run_scripts/device_types.py (get_device_module("cuda"),
# torch.empty(4, pin_memory=True), safetensors load_file(device="cuda:0"), at 2 ranks
# init_device_mesh("cuda", (2,)) when two GPUs are there) and amp_policy.py (an AMP step with
# GradScaler), each as written (plain python: its CUDA path) and through
# `HAL_BACKEND=cuda hal run` (the shim must change nothing there): outcomes must be the same.
# Called by scripts/gpu_check.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
tmp=$(mktemp -d)
d=tests/dist/hal_run_scripts
for s in device_types amp_policy; do
  mkdir -p "$tmp/plain" "$tmp/hal"
  "$PY" "$d/$s.py" "$tmp/plain/$s.json"; echo "($s plain exit code $?)"
  HAL_BACKEND=cuda "$PY" -m hal run "$d/$s.py" "$tmp/hal/$s.json"; echo "($s hal run exit code $?)"
done
if [ "$("$PY" -c 'import torch; print(torch.cuda.device_count())')" -ge 2 ]; then
  mkdir -p "$tmp/mesh"
  HAL_BACKEND=cuda "$PY" -m hal run --nproc-per-node 2 "$d/device_types.py" "$tmp/mesh/device_types.json"
  echo "(mesh hal run exit code $?)"
fi
"$PY" - "$tmp" <<'PYEOF'
import json, os, sys
tmp = sys.argv[1]
def load(p):
    try:
        return json.load(open(os.path.join(tmp, p)))
    except OSError as exc:
        sys.exit(f"device types / amp: FAIL (no outcome: {exc})")
ok = True
for s in ("device_types", "amp_policy"):
    plain, shim = load(f"plain/{s}.json"), load(f"hal/{s}.json")
    print(s, "plain  ", plain)
    print(s, "hal run", shim)
    ok &= plain == shim
ok &= load("plain/device_types.json")["device_module"] == "torch.cuda"
ok &= load("plain/amp_policy.json")["dtypes"]["log_softmax"] == "torch.float32"
if os.path.exists(os.path.join(tmp, "mesh")):
    mesh = load("mesh/device_types.json")["mesh"]
    print("mesh", mesh)
    ok &= mesh == ["cuda", [3.0, 3.0]]
print("device types / amp:", "ok" if ok else "FAIL")
sys.exit(0 if ok else 1)
PYEOF
