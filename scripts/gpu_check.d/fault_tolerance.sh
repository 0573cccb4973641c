#!/usr/bin/env bash
# Kill-and-resume on cuda (called by scripts/gpu_check.sh, output in its log): the DDP example
# with NCCL on one GPU under torchrun --max-restarts 3, rank 0 SIGKILLed after step 17; the
# final weights must equal an uninterrupted run on the same GPU (tests/dist/fault_injection.py).
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
HAL_BACKEND=cuda "$PY" - <<'PYEOF'
import sys, tempfile, time
from pathlib import Path
sys.path.insert(0, "tests/dist")
import fault_injection as fi
root = Path(tempfile.mkdtemp(prefix="hal-ft-cuda-"))
ref = fi.launch(root / "ref", backend="cuda", nproc=1)
assert ref.wait() == 0, ref.text()[-3000:]
job = fi.launch(root / "killed", backend="cuda", nproc=1)
fi.sigkill_rank(job, 0, 17)
job.wait()
m = fi.check(job, root / "ref")
sent = [e["unix"] for e in job.events if e["what"] == "SIGKILL"]
print("cuda kill-and-resume: final weights bitwise equal to the uninterrupted run; lost steps",
      m["lost_steps"], "; recovery", [round(s, 1) for s in fi.recovery_seconds(job.out, sent[0])], "s")
print("\n".join(m["restart_lines"]))
PYEOF
