"""hal doctor end to end: OK here, FAIL with the reason for a missing path or a hung or aborting
check, and never hanging itself."""
import json
import os
import subprocess
import sys
import time

import pytest

from hal.doctor import ORDER

pytestmark = [pytest.mark.dist]


def _doctor(*args, env=None, timeout=150):
    e = {k: v for k, v in os.environ.items() if not k.startswith("HAL_DOCTOR_TEST")}
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "hal", "doctor", *args], capture_output=True, text=True,
                          timeout=timeout, env=e)


@pytest.mark.long  # about 40 s on 2 cores (every local check, 2/4/8 ranks): make long
def test_doctor_is_ok_on_this_machine():
    out = _doctor("--json")
    rep = json.loads(out.stdout)
    assert out.returncode == 0, rep
    assert rep["schema"] == "hal.doctor/1" and rep["status"] == "OK"
    assert [c["name"] for c in rep["checks"]] == list(ORDER)
    by = {c["name"]: c for c in rep["checks"]}
    assert by["all_reduce_2"]["status"] in ("OK", "SKIP")
    assert all(c["status"] in ("OK", "SKIP") for c in rep["checks"])
    assert all(c["summary"] for c in rep["checks"] if c["status"] == "SKIP")


def test_missing_data_path_fails_with_its_name(tmp_path):
    out = _doctor("--check", "data", "--data", str(tmp_path), str(tmp_path / "gone"))
    assert out.returncode == 2
    assert f"{tmp_path / 'gone'}: does not exist" in out.stdout


def test_a_hung_check_is_killed_at_its_limit_and_reported():
    start = time.monotonic()
    out = _doctor("--check", "devices", "--check", "transport", "--timeout", "devices=3", "--json",
                  env={"HAL_DOCTOR_TEST_HANG": "devices"})
    assert time.monotonic() - start < 30
    rep = json.loads(out.stdout)
    assert out.returncode == 2 and rep["status"] == "FAIL"
    dev = rep["checks"][0]
    assert dev["status"] == "FAIL" and "did not finish within 3 s and was killed" in dev["summary"]
    assert rep["checks"][1]["status"] == "OK"  # the other check is unaffected


def test_an_aborting_check_is_reported_not_fatal():
    out = _doctor("--check", "versions", env={"HAL_DOCTOR_TEST_ABORT": "versions"})
    assert out.returncode == 2
    assert "killed by signal 6 (SIGABRT)" in out.stdout


def test_unknown_check_name_is_a_usage_error():
    out = _doctor("--check", "gpu_temperature")
    assert out.returncode == 2 and "invalid choice: 'gpu_temperature'" in out.stderr


def test_bad_timeout_is_one_clear_line():
    out = _doctor("--timeout", "devices=soon")
    assert out.returncode == 2
    assert out.stderr.strip() == ("hal doctor: error: --timeout 'devices=soon': 'soon' is not a number of "
                                  "seconds; write 20 or devices=20")


def test_a_slow_rank_is_found_as_a_straggler():
    from hal.dist.launch import spawn
    from hal.doctor.checks import find_stragglers

    res = spawn("hal.doctor.checks:allreduce_rank", 3, timeout=60,
                env={"HAL_BACKEND": "cpu", "HAL_DOCTOR_TEST_SLOW_RANK": "2"})
    assert res.ok, res.first_error()
    rows = [o.result for o in res.ranks]
    assert all(r["correct"] for r in rows)
    assert find_stragglers([r["compute_s"] for r in rows]) == [2]


def test_more_ranks_than_cores_run_oversubscribed_and_name_no_straggler():
    cores = len(os.sched_getaffinity(0))
    if cores >= 4:
        pytest.skip(f"this machine has {cores} cores: 4 ranks are not oversubscribed here")
    start = time.monotonic()
    out = _doctor("--check", "all_reduce_4", "--json", env={"HAL_BACKEND": "cpu", "HAL_DOCTOR_TEST_SLOW_RANK": "1"})
    rep = json.loads(out.stdout)
    check = rep["checks"][0]
    assert out.returncode == 0 and check["status"] == "OK", check
    assert check["details"]["oversubscribed"] is True and check["details"]["stragglers"] == []
    assert all(r["correct"] for r in check["details"]["ranks"])
    assert f"4 ranks share {cores} CPU cores (oversubscribed), so timings are not meaningful" in check["summary"]
    assert time.monotonic() - start < check["time_limit_s"]
