"""`torch.compile` of attention through `hal run` on the emulator (the backend hal picks there)
and on cpu (inductor): the compiled block gives eager's output and trains
(tests/dist/hal_run_scripts/compile_attention.py)."""
import re
from pathlib import Path

import pytest

from test_hal_run_device_types import hal_run

pytestmark = [pytest.mark.dist, pytest.mark.slow]
SCRIPT = Path(__file__).parent / "hal_run_scripts" / "compile_attention.py"


@pytest.mark.emu
def test_compiled_causal_attention_matches_eager_on_emu():
    proc = hal_run("emu", SCRIPT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    found = re.search(r"device=(\w+) max_abs_diff=(\S+) grad=(\w+)", proc.stdout)
    assert found and found.group(1) == "emu" and found.group(3) == "True", proc.stdout
    assert "torch.compile" in proc.stderr  # the backend hal chose is reported
