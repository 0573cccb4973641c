#!/usr/bin/env bash
# hal.checkpoint / hal.metrics on a lent GPU (called by scripts/gpu_check.sh, output in its log):
#  1. train_tiny on cuda (async checkpoints, metrics), resumed on cuda;
#  2. the CUDA checkpoint opened on the CPU: the documented RNG warning, the rest restored;
#  3. the stall bench with the state on cuda (pinned device-to-host snapshot).
# The device tests (tests/backend/test_checkpoint_device.py) run in gpu_check.sh's backend pass.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
work=$(mktemp -d)
echo "### train_tiny on cuda, 60 steps, then resumed to 80"
HAL_BACKEND=cuda "$PY" examples/train_tiny.py --out "$work/run" --steps 60 --save-every 20
HAL_BACKEND=cuda "$PY" examples/train_tiny.py --out "$work/run" --steps 80 --save-every 20
"$PY" -m hal metrics summary "$work/run/metrics/tiny.jsonl"
echo "### manifest and RNG keys of the CUDA checkpoint"
"$PY" - "$work/run/ckpt" <<'PYEOF'
import json, sys, hal.checkpoint as ck
p = ck.latest(sys.argv[1], verify=True)
man = json.loads((p / "manifest.json").read_text())
doc = json.loads((p / "rank-00000.json").read_text())
print(p.name, "backend", man["backend"], "device_type", man["device_type"], "rng keys", sorted(doc["rng"]["torch"]))
PYEOF
echo "### the CUDA checkpoint opened with HAL_BACKEND=cpu (expect one CheckpointWarning)"
HAL_BACKEND=cpu "$PY" -W always - "$work/run/ckpt" <<'PYEOF'
import sys, warnings, torch, hal.checkpoint as ck
from torch import nn
m = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Dropout(0.1), nn.Linear(64, 1))
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    c = ck.load(ck.latest(sys.argv[1]), model=m, optimizer=None)
for x in w:
    print(f"{x.category.__name__}: {x.message}")
print("loaded step", c.step, "on cpu; rng applied:", c.rng_applied)
PYEOF
echo "### resume the CUDA run on the CPU and finish it"
HAL_BACKEND=cpu "$PY" examples/train_tiny.py --out "$work/run" --steps 100 --save-every 20
echo "### bench: checkpoint stall with the state on cuda"
"$PY" bench/bench_checkpoint_stall.py --device cuda --repeat 5
rm -rf "$work"
