#!/usr/bin/env bash
# torch.cuda's classes and submodules on a lent GPU: tests/dist/hal_run_scripts/cuda_namespace.py
# (a module-level `torch.cuda.Stream | None` annotation, a stream class of its own, the
# Trainer's RNG checkpoint through torch.cuda.random) as written (plain python: its CUDA
# path) and through `HAL_BACKEND=cuda hal run` (the shim must change nothing there): the
# two outcomes must be the same.  Called by scripts/gpu_check.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
tmp=$(mktemp -d)
script=tests/dist/hal_run_scripts/cuda_namespace.py
"$PY" "$script" "$tmp/plain.json" "$tmp/plain.pt"
echo "(plain exit code $?)"
HAL_BACKEND=cuda "$PY" -m hal run "$script" "$tmp/hal.json" "$tmp/hal.pt"
echo "(hal run exit code $?)"
"$PY" - "$tmp/plain.json" "$tmp/hal.json" <<'PYEOF'
import json, sys
try:
    plain, shim = (json.load(open(p)) for p in sys.argv[1:3])
except OSError as exc:
    sys.exit(f"cuda namespace: FAIL (no outcome: {exc})")
print("plain  ", plain)
print("hal run", shim)
rng = plain["rng"]
ok = (plain == shim and plain["classes"]["stream"] == [True, True, "cuda"] and rng["restored"]
      and rng["restored_device_only"] and rng["states"] == rng["count"] >= 1)
print("cuda namespace:", "ok" if ok else "FAIL")
sys.exit(0 if ok else 1)
PYEOF
