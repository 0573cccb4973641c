"""What the redirection patches on the installed torch: every target there, none created."""
import types

import pytest
import torch

from hal.redirect import enable


def test_every_patch_target_exists_on_the_installed_torch_and_is_restored():
    before = torch.cuda.is_available, torch.Tensor.cuda, torch.utils.data.DataLoader.__init__
    with enable() as t:
        patched, missing = list(t.patched), list(t.not_patched)
    assert not missing, f"torch {torch.__version__} lacks these redirection targets (moved or renamed?): {missing}"
    assert len(patched) > 100 and "torch.cuda.is_available" in patched
    assert "torch.utils.data.dataloader.DataLoader.__init__" in patched
    assert (torch.cuda.is_available, torch.Tensor.cuda, torch.utils.data.DataLoader.__init__) == before


def test_a_target_this_torch_lacks_is_left_absent_and_reported():
    mod = types.ModuleType("vendor_mod")
    with enable() as t:
        t.patch(mod, "moved_away", lambda: "hal's")
        assert not hasattr(mod, "moved_away")  # never a silently created attribute
        assert t.not_patched == ["vendor_mod.moved_away"]
        rows = [r for r in t.log.rows("not_redirected") if r["call"] == "vendor_mod.moved_away"]
        assert rows and "has no such attribute" in rows[0]["detail"]


def test_dataloader_pin_memory_is_found_by_name_wherever_it_is_passed():
    from torch.utils.data import DataLoader

    ds = torch.arange(6.0)
    with enable() as t:
        if t.device_type != "cpu":
            pytest.skip(f"pin_memory=True is turned off on the cpu backend only; the selected one is {t.device_type}")
        by_keyword = DataLoader(ds, batch_size=2, pin_memory=True)
        by_position = DataLoader(ds, 2, False, None, None, 0, None, True)  # pin_memory is DataLoader's 8th
    assert by_keyword.pin_memory is False and by_position.pin_memory is False
    assert [r["call"] for r in t.log.rows("not_redirected")].count("DataLoader(pin_memory=True)") >= 1


def test_hal_doctors_redirect_check_counts_the_targets_and_names_a_missing_one(monkeypatch):
    from hal.doctor import checks
    from hal.redirect import _core

    ok = checks.redirect()
    assert ok["status"] == checks.OK and ok["details"]["not_patched"] == [] and ok["details"]["patched"] > 100
    real = _core.Redirection.patch

    def moved(self, owner, name, value):  # this torch "renamed" torch.cuda.is_available
        if owner is torch.cuda and name == "is_available":
            return real(self, types.ModuleType("torch.cuda"), name, value)
        return real(self, owner, name, value)

    monkeypatch.setattr(_core.Redirection, "patch", moved)
    warn = checks.redirect()
    assert warn["status"] == checks.WARN and set(warn["details"]["not_patched"]) == {"torch.cuda.is_available"}
    assert "not redirected on this torch (absent): torch.cuda.is_available" in warn["summary"]
