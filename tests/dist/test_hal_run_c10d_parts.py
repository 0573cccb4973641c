"""The parts of c10d a framework touches, through `hal run` at 2 ranks on cpu (gloo: the
ground truth) and on the emulator (emuccl, a Python process group as an out-of-tree CCL may
be): group names, `init_process_group(device_id=...)`, `new_group`, `init_device_mesh("cuda")`,
DTensor, FSDP2 against one process, DCP (tests/dist/hal_run_scripts/c10d_parts.py)."""
import json
import math
from pathlib import Path

import pytest

from test_hal_run_device_types import hal_run

pytestmark = [pytest.mark.dist, pytest.mark.slow]
SCRIPT = Path(__file__).parent / "hal_run_scripts" / "c10d_parts.py"


@pytest.mark.parametrize("backend", ["cpu", pytest.param("emu", marks=pytest.mark.emu)])
def test_device_mesh_dtensor_fsdp2_and_dcp_at_two_ranks(tmp_path, backend):
    proc = hal_run(backend, "--nproc-per-node", 2, SCRIPT, tmp_path / "out.json", tmp_path / "ckpt")
    assert proc.returncode == 0, proc.stderr[-4000:]
    for r in range(2):
        seen = json.loads((tmp_path / ("out.json" if r == 0 else f"out.json.{r}")).read_text())
        assert seen["group_name"] == "0" and seen["new_group_name"] == "1"
        assert seen["mesh"] == [backend, "0"]
        assert seen["dtensor"] == [[4.0 * r + i for i in range(4)], [float(i) for i in range(8)]]
        # FSDP2 over 2 ranks trains as one process does on the whole batch
        assert all(math.isclose(a, b, rel_tol=1e-5) for a, b in zip(seen["fsdp"], seen["single"])), seen
        assert seen["dcp_restored"] is True and seen["local_device"] == backend
