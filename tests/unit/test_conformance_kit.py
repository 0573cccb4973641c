"""The conformance kit itself: a broken plugin fails with readable reasons; reports and CLI."""
import json
import os

import pytest

import hal
from hal.cli import main
from hal.conformance import check_ids, run_conformance, to_markdown

HERE = os.path.dirname(os.path.abspath(__file__))
FAST = ["metadata", "probe", "load", "device", "rng", "autocast", "memory"]


@pytest.fixture
def broken_env(monkeypatch, clean_registry):
    monkeypatch.syspath_prepend(HERE)
    monkeypatch.setenv("HAL_PLUGINS", "_broken_backend")
    return {**os.environ}


def _by_id(report):
    return {r["id"]: r for r in report["checks"]}


def test_broken_plugin_fails_with_reasons_a_vendor_can_act_on(broken_env):
    report = run_conformance("brokenchip", only=FAST, env=broken_env)
    rows = _by_id(report)
    assert report["verdict"] == "fail"
    assert rows["probe"]["status"] == "fail" and "evidence" in rows["probe"]["reason"]
    assert rows["device"]["status"] == "fail" and "device_count() returned 0" in rows["device"]["reason"]
    assert rows["rng"]["status"] == "fail" and "did not replay" in rows["rng"]["reason"]
    assert rows["autocast"]["status"] == "fail" and "float64" in rows["autocast"]["reason"]
    assert rows["memory"]["status"] == "fail" and "grew by 0 bytes" in rows["memory"]["reason"]
    assert rows["metadata"]["status"] == "pass"
    assert rows["collectives"]["status"] == "skip" and rows["collectives"]["reason"]


def test_markdown_report_lists_every_check(broken_env):
    md = to_markdown(run_conformance("brokenchip", only=["metadata", "device"], env=broken_env))
    assert md.startswith("# hal conformance: brokenchip")
    assert "**FAIL**" in md
    assert sum(line.startswith("| ") for line in md.splitlines()) == len(check_ids()) + 1


def test_cli_exit_code_and_json_report(broken_env, tmp_path, capsys):
    out = tmp_path / "r.json"
    md = tmp_path / "r.md"
    code = main(["conformance", "--backend", "brokenchip", "--only", "device", "--out", str(out),
                 "--markdown", str(md)])
    assert code == 1
    report = json.loads(out.read_text())
    assert report["schema"] == "hal.conformance/1" and report["verdict"] == "fail"
    assert md.read_text().startswith("# hal conformance")
    assert "device_count() returned 0" in capsys.readouterr().out


def test_unknown_backend_is_one_clear_error(clean_registry, capsys):
    assert main(["conformance", "--backend", "nosuchchip"]) == 3
    err = capsys.readouterr().err
    assert "nosuchchip" in err and "known backends" in err and "Traceback" not in err


def test_unknown_check_id_is_refused(clean_registry, capsys):
    assert main(["conformance", "--backend", "cpu", "--only", "warp_drive"]) == 2
    assert "warp_drive" in capsys.readouterr().err


def test_list_names_every_check(capsys):
    assert main(["conformance", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(cid in out for cid in check_ids())
