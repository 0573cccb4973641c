"""What the redirection patches on the installed torch: every target there, none created, each one in
hal's table of targets (hal/data/redirect_targets.json) with the torch releases it is there on."""
import types

import pytest
import torch

from hal.redirect import enable
from hal.redirect import targets


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


def test_the_table_of_targets_holds_on_the_installed_torch():
    tab = targets.table()
    on_this = {n for n in tab["targets"] if targets.expected(n)}
    assert "torch.cuda.is_available" in on_this and len(on_this) > 250  # 272 on torch 2.4.1, 359 on 2.15.0
    wrong = sorted(n for n in tab["targets"] if targets.exists(n) != targets.expected(n))
    assert not wrong, (f"torch {torch.__version__} disagrees with hal/data/redirect_targets.json on {wrong} "
                       "(python scripts/torch_window.py --only-targets rewrites it)")
    with enable() as t:
        held = targets.walk(t)
    assert held["absent_moved"] == [] and held["undeclared"] == [], held
    assert set(t.patched) <= on_this | {n for n in t.patched if not n.startswith("torch.")}
    assert all(tab["groups"].get(e["group"]) for e in tab["targets"].values()), "a group without its description"


def _table(monkeypatch, entries, checked=("1.0.0", "2.4.1", "99.0.0")):
    monkeypatch.setattr(targets, "table", lambda: {"checked_on": list(checked), "groups": {}, "targets": entries})


def test_a_target_absent_where_the_table_says_so_is_expected_and_one_it_has_there_moved(monkeypatch):
    # releases around any installed torch: 1.0.0 (before it) and 99.0.0 (after it)
    _table(monkeypatch, {"vendor_mod.added_later": {"group": "x", "since": "99.0.0"},
                         "vendor_mod.removed": {"group": "x", "until": "2.4.1"},
                         "vendor_mod.always": {"group": "x"}})
    assert targets.releases("vendor_mod.added_later") == ["99.0.0"]
    assert targets.releases("vendor_mod.removed") == ["1.0.0"]
    assert "nothing to redirect on this torch" in targets.absent_reason("vendor_mod.added_later", "2.4.1+cpu")
    moved = targets.absent_reason("vendor_mod.always", "2.13.0+cpu")
    assert "moved or renamed" in moved and "every torch release it was checked on" in moved
    mod = types.ModuleType("vendor_mod")
    with enable() as t:
        for name in ("removed", "added_later", "always"):
            t.patch(mod, name, lambda: "hal's")
        held = targets.walk(t)
        rows = {r["call"]: r["detail"] for r in t.log.rows("not_redirected")}
    assert held["absent_expected"] == ["vendor_mod.removed", "vendor_mod.added_later"]
    assert held["absent_moved"] == ["vendor_mod.always"]
    assert "hal redirects it on torch before 2.4.1" in rows["vendor_mod.removed"]  # what hal run --report shows
    assert "hal redirects it on torch 99.0.0 and later" in rows["vendor_mod.added_later"]


def _run(version, present, patched=()):
    return {"torch": version, "present": present, "patched": {n: "devices" for n in patched}, "not_patched": {}}


def test_the_table_is_merged_from_what_each_release_has():
    runs = [_run("2.13.0+cpu", {"a.x": True, "a.y": True, "a.z": False}, ["a.x", "a.y"]),
            _run("2.4.1", {"a.x": True, "a.y": False, "a.z": True}, ["a.x", "a.z"]),
            _run("2.7.1", {"a.x": True, "a.y": True, "a.z": False}, ["a.x"])]
    tab = targets.merge(runs, {"devices": "device arguments"})
    assert tab["checked_on"] == ["2.4.1", "2.7.1", "2.13.0"]
    assert tab["targets"] == {"a.x": {"group": "devices"}, "a.y": {"group": "devices", "since": "2.7.1"},
                              "a.z": {"group": "devices", "until": "2.7.1"}}
    assert tab["groups"] == {"devices": "device arguments"}


def test_a_release_that_does_not_say_or_a_gap_between_releases_is_refused():
    with pytest.raises(ValueError, match="run collect on torch 2.4.1 again"):
        targets.merge([_run("2.4.1", {}), _run("2.13.0", {"a.x": True}, ["a.x"])])
    gap = [_run("2.4.1", {"a.x": True}), _run("2.7.1", {"a.x": False}), _run("2.13.0", {"a.x": True}, ["a.x"])]
    with pytest.raises(ValueError, match="not on every release between"):
        targets.merge(gap)


def test_hal_doctor_names_a_target_this_torch_lacks_as_the_table_says_and_stays_ok(monkeypatch):
    from hal.doctor import checks

    real = targets.table()
    entries = dict(real["targets"])
    entries["torch.cuda.is_available"] = dict(entries["torch.cuda.is_available"], until="1.0.0")  # before any torch
    monkeypatch.setattr(targets, "table", lambda: dict(real, targets=entries))
    from hal.redirect import _core
    patch = _core.Redirection.patch

    def gone(self, owner, name, value):  # a torch from which torch.cuda.is_available was removed
        if owner is torch.cuda and name == "is_available":
            return patch(self, types.ModuleType("torch.cuda"), name, value)
        return patch(self, owner, name, value)

    monkeypatch.setattr(_core.Redirection, "patch", gone)
    ok = checks.redirect()
    assert ok["status"] == checks.OK and ok["details"]["absent_expected"] == ["torch.cuda.is_available"]
    assert "1 absent as hal's table says for this release: torch.cuda.is_available" in ok["summary"]
