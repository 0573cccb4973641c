"""`hal run` on a CUDA script's device-type strings and pinned factories, as a user runs it
(tests/dist/hal_run_scripts/device_types.py): `init_device_mesh("cuda", (2,))` at 2 ranks,
`torch.get_device_module("cuda")`, `torch.empty(4, pin_memory=True)` and
`safetensors.torch.load_file(path, device="cuda:0")`."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.dist, pytest.mark.slow]
SCRIPT = Path(__file__).parent / "hal_run_scripts" / "device_types.py"
DEVICE = {"cpu": "cpu", "emu": "emu"}
PINS = {"cpu": False, "emu": True}  # the emulator pins host memory; the cpu backend has nothing to pin for



def hal_run(backend, *args, timeout=300):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HAL_", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_"))}
    env.update(HAL_BACKEND=backend, PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "-m", "hal", "run", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=timeout)


def check_single(out, backend):
    # torch.get_device_module("cuda") is torch.cuda answering for the backend: its device, its generators
    name, where, states = out["device_module"]
    assert (name, where) == ("torch.cuda", DEVICE[backend]) and states >= 1
    assert out["autocast_available"] is True
    assert out["pinned_factories"] == [[4], 0.0]
    assert out["safetensors"] == [DEVICE[backend], [0.0, 1.0, 2.0]]
    assert out["dataloader_pinned"] == [[0.0, 1.0], PINS[backend]]


@pytest.mark.emu
def test_device_module_and_pinned_factories_and_safetensors_on_emu(tmp_path):
    proc = hal_run("emu", SCRIPT, tmp_path / "out.json")
    assert proc.returncode == 0, proc.stderr[-4000:]
    check_single(json.loads((tmp_path / "out.json").read_text()), "emu")


@pytest.mark.parametrize("backend", ["cpu", pytest.param("emu", marks=pytest.mark.emu)])
def test_init_device_mesh_cuda_at_two_ranks(tmp_path, backend):
    proc = hal_run(backend, "--nproc-per-node", 2, SCRIPT, tmp_path / "out.json")
    assert proc.returncode == 0, proc.stderr[-4000:]
    for r in range(2):
        out = json.loads((tmp_path / ("out.json" if r == 0 else f"out.json.{r}")).read_text())
        check_single(out, backend)
        assert out["mesh"] == [DEVICE[backend], [3.0, 3.0]]
    if backend == "cpu":  # reported at the user's line
        assert "NOT redirected torch.empty(pin_memory=True) -> cpu: no device to pin host memory" in proc.stderr
        assert "NOT redirected DataLoader(pin_memory=True) -> cpu: no device to pin host memory" in proc.stderr
