"""hal doctor --every: the health patrol appends one valid record per round, a failing round is on
record with its time, a signal ends it without a torn line, and hal metrics summary --health places
a throughput drop next to the failing round."""
import json
import os
import signal
import subprocess
import sys
import time

import jsonschema
import pytest

import hal.metrics as metrics
from hal.cli import main
from hal.doctor.patrol import schema_path

pytestmark = [pytest.mark.dist]


def _env(extra=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("HAL_DOCTOR_TEST")}
    e.update(extra or {})
    return e


def _doctor(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "hal", "doctor", *args], capture_output=True, text=True,
                          timeout=timeout, env=_env(env))


def _records(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_two_rounds_make_two_valid_records(tmp_path):
    out = tmp_path / "health.jsonl"
    res = _doctor("--every", "0.5", "--count", "2", "--check", "devices", "--check", "transport",
                  "--out", str(out))
    assert res.returncode == 0, res.stderr
    recs = _records(out)
    schema = json.loads(schema_path().read_text())
    for r in recs:
        jsonschema.validate(r, schema)
    assert [r["round"] for r in recs] == [1, 2] and [r["status"] for r in recs] == ["OK", "OK"]
    assert [c["name"] for c in recs[0]["checks"]] == ["devices", "transport"]
    assert recs[0]["end_time_unix"] <= recs[1]["time_unix"] and recs[0]["every_s"] == 0.5
    assert "round 2  OK" in res.stdout


def test_a_failing_round_is_recorded_and_summary_places_the_drop_next_to_it(tmp_path, capsys):
    health = tmp_path / "health.jsonl"
    assert _doctor("--every", "1", "--count", "1", "--check", "devices", "--out", str(health)).returncode == 0
    before = time.time()
    res = _doctor("--every", "1", "--count", "1", "--check", "devices", "--check", "tiny_network",
                  "--out", str(health), "--json", env={"HAL_DOCTOR_TEST_ABORT": "tiny_network"})
    after = time.time()
    assert res.returncode == 2
    ok, fail = _records(health)
    assert json.loads(res.stdout) == fail  # --json prints the same record
    assert ok["status"] == "OK" and fail["status"] == "FAIL"
    assert before <= fail["time_unix"] <= fail["end_time_unix"] <= after
    bad = [c for c in fail["checks"] if c["status"] == "FAIL"]
    assert [c["name"] for c in bad] == ["tiny_network"] and "killed by signal 6 (SIGABRT)" in bad[0]["summary"]

    # a run whose steps 40-44 were slow while the failing round ran
    times = [0.1] * 60
    for s in range(40, 45):
        times[s - 1] = 0.3
    with metrics.MetricsLogger(tmp_path, "run") as log:
        for step, t in enumerate(times, 1):
            log.log_step(step, samples=64, step_time_s=t)
    run = tmp_path / "run.jsonl"
    recs = _records(run)
    t0 = fail["time_unix"]
    for r in recs:
        r["time_unix"] = t0 + 0.1 + 0.02 * (r["step"] - 40)
    run.write_text("".join(json.dumps(r) + "\n" for r in recs))

    assert main(["metrics", "summary", str(run), "--health", str(health), "--health-margin", "0.2", "--json"]) == 1
    rep = json.loads(capsys.readouterr().out)
    drop = rep["runs"][0]["drops"][0]
    assert (drop["start_step"], drop["end_step"]) == (40, 44)
    assert [(h["status"], h["time_unix"]) for h in drop["health"]] == [("FAIL", t0)]
    assert drop["health"][0]["not_ok"][0]["name"] == "tiny_network"
    assert rep["health"]["rounds"] == 2 and [x["status"] for x in rep["health"]["not_ok"]] == ["FAIL"]

    assert main(["metrics", "summary", str(run), "--health", str(health), "--health-margin", "0.2"]) == 1
    text = capsys.readouterr().out
    assert "steps 40..44" in text and "health rounds within 0.2 s:" in text
    assert "round 1 FAIL: tiny_network FAIL: the check process killed by signal 6" in text


def _start(tmp_path, *args, env=None):
    p = subprocess.Popen([sys.executable, "-m", "hal", "doctor", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=_env(env))
    assert "patrolling every" in p.stdout.readline()
    return p


def test_a_signal_during_a_round_stops_at_once_and_records_nothing(tmp_path):
    out = tmp_path / "health.jsonl"
    p = _start(tmp_path, "--every", "30", "--check", "devices", "--out", str(out),
               env={"HAL_DOCTOR_TEST_HANG": "devices"})
    time.sleep(1.5)  # the check is hanging now
    t = time.monotonic()
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=20)
    assert time.monotonic() - t < 5
    assert p.returncode == 0
    assert "stopped by SIGTERM during round 1 (not recorded); 0 round(s) recorded" in err
    assert not out.exists() or out.read_text() == ""


def test_ctrl_c_between_rounds_leaves_whole_lines(tmp_path):
    out = tmp_path / "health.jsonl"
    p = _start(tmp_path, "--every", "60", "--check", "transport", "--out", str(out))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (out.exists() and out.read_text().endswith("\n")):
        time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=20)
    assert p.returncode == 0, err
    assert "stopped by SIGINT between rounds; 1 round(s) recorded" in err
    assert [r["round"] for r in _records(out)] == [1]


def test_count_needs_every():
    res = _doctor("--count", "2")
    assert res.returncode == 2
    assert res.stderr.strip() == "hal doctor: error: --count N needs --every SECONDS (the interval between rounds)"


def test_one_run_with_out_appends_one_record(tmp_path):
    out = tmp_path / "health.jsonl"
    assert _doctor("--check", "devices", "--out", str(out)).returncode == 0
    (rec,) = _records(out)
    jsonschema.validate(rec, json.loads(schema_path().read_text()))
    assert rec["round"] == 1 and rec["every_s"] is None and rec["checks"][0]["name"] == "devices"
