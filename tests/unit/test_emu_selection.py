"""The emulator is opt-in: listed always, selected only through HAL_BACKEND=emu."""
import pytest
import torch

from hal.plugin.registry import Registry
from hal.plugin.spec import Status

pytestmark = pytest.mark.emu


def _emu(reg):
    return next(c for c in reg.candidates() if c.name == "emu")


def test_emu_is_listed_but_never_auto_selected(clean_registry):
    reg = Registry(env={})
    cand = _emu(reg)
    assert cand.status is Status.NOT_INSTALLED
    assert "HAL_BACKEND=emu" in cand.result.reason
    assert reg.selected().name != "emu"


def test_hal_backend_emu_selects_the_emulator(clean_registry):
    reg = Registry(env={"HAL_BACKEND": "emu"})
    sel = reg.selected()
    assert sel.name == "emu" and sel.spec.device_type == "emu"
    assert str(sel.backend.device()) == "emu:0"
    assert sel.spec.dist_backend == "emuccl"


@pytest.mark.skipif(not hasattr(torch, "accelerator"),
                    reason=f"simulates a GPU through torch.accelerator, which torch {torch.__version__} lacks (2.6+)")
def test_emulator_refuses_to_share_a_process_with_a_real_accelerator():
    """On a GPU machine HAL_BACKEND=emu says why it cannot load instead of breaking CUDA."""
    import subprocess
    import sys
    code = (
        "import torch, hal\n"
        "torch.accelerator.current_accelerator = lambda check_available=False: torch.device('cuda')\n"
        "from hal.plugin.registry import Registry\n"
        "reg = Registry(env={'HAL_BACKEND': 'emu', 'HAL_DISABLE_PLUGIN_AUTOLOAD': '1'})\n"
        "c = next(c for c in reg.candidates() if c.name == 'emu')\n"
        "reg.load(c)\n"
        "print(c.status.value, '|', c.result.reason)\n"
        "assert torch._C._get_privateuse1_backend_name() == 'privateuseone'\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    status, reason = out.stdout.strip().split(" | ")
    assert status == "no device"
    assert "real one (cuda)" in reason and "HAL_BACKEND=cuda" in reason
