"""The emulator is opt-in: listed always, selected only through HAL_BACKEND=emu."""
from hal.registry import Registry
from hal.spec import Status


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
