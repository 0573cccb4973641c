"""`hal run` on a CUDA AMP step as a user runs it (tests/dist/hal_run_scripts/amp_policy.py): under
`autocast("cuda", float16)` every op's output dtype is CUDA's on the cpu backend and on the
emulator, and the losses agree between the two."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.dist, pytest.mark.slow, pytest.mark.emu]
SCRIPT = Path(__file__).parent / "hal_run_scripts" / "amp_policy.py"
#: CUDA's autocast policy (hal/data/cuda_autocast_policy.json)
CUDA_DTYPES = {"linear": "torch.float16", "layer_norm": "torch.float32", "log_softmax": "torch.float32",
               "sum": "torch.float32", "softmax": "torch.float32", "exp": "torch.float32", "mm": "torch.float16"}


def hal_run(backend, *args, timeout=300):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HAL_", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_"))}
    env.update(HAL_BACKEND=backend, PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, "-m", "hal", "run", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def test_cuda_autocast_policy_on_cpu_and_emu_and_the_losses_agree(tmp_path):
    outs = {}
    for backend in ("cpu", "emu"):
        hal_run(backend, SCRIPT, tmp_path / f"{backend}.json")
        outs[backend] = json.loads((tmp_path / f"{backend}.json").read_text())
        assert outs[backend]["dtypes"] == CUDA_DTYPES, backend
    assert outs["cpu"]["scale"] == outs["emu"]["scale"] == 65536.0  # no step skipped for an overflow
    assert outs["cpu"]["losses"] == pytest.approx(outs["emu"]["losses"], rel=2e-3)
