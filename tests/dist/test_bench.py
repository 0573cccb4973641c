"""hal bench on real gloo ranks: every collective correct, and the CLI in nccl-tests layout."""
import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import jsonschema

import pytest

from hal.dist.bench import COLLECTIVES, format_text, judge
from hal.dist.launch import spawn

SCEN = str(Path(__file__).with_name("scenarios.py"))
pytestmark = [pytest.mark.dist]


def _hal(*args, env=None, timeout=120):
    e = dict(os.environ, HAL_BACKEND="cpu", **(env or {}))
    return subprocess.run([sys.executable, "-m", "hal", *args], capture_output=True, text=True,
                          timeout=timeout, env=e)


def test_every_collective_is_correct_with_sane_numbers():
    res = spawn(f"{SCEN}:bench_all", 2, timeout=120, env={"HAL_BACKEND": "cpu"})
    assert res.ok, res.first_error()
    reports = res.ranks[0].result
    assert res.ranks[1].result == {c: None for c in COLLECTIVES}  # only rank 0 reports
    for c in COLLECTIVES:
        rep = reports[c]
        assert rep["world_size"] == 2 and rep["wrong_total"] == 0, c
        for row in rep["rows"]:
            assert row["time_us"] > 0 and row["p50_us"] <= row["p99_us"]
            assert row["algbw"] == pytest.approx(row["size"] / row["time_us"] / 1e3)


def test_cli_all_reduce_prints_nccl_tests_columns_with_no_wrong_values(tmp_path):
    save = tmp_path / "base.json"
    out = _hal("bench", "all_reduce", "-n", "2", "-b", "1K", "-e", "64K", "-f", "4", "--iters", "5",
               "--save", str(save))
    assert out.returncode == 0, out.stderr
    rows = [l.split() for l in out.stdout.splitlines() if l and not l.startswith("#")]
    assert [int(r[0]) for r in rows] == [1024, 4096, 16384, 65536]
    assert all(len(r) == 13 and r[12] == "0" for r in rows)  # in-place #wrong
    assert "# Out of bounds values : 0 OK" in out.stdout
    base = json.loads(save.read_text())
    assert base["schema"] == "hal.bench/1" and base["passed"]
    assert base["nnodes"] == 1 and len(base["hosts"]) == 1  # local ranks: one node
    schema = json.loads(resources.files("hal").joinpath("data/bench.schema.json").read_text())
    jsonschema.validate(base, schema)


def test_wrong_values_are_counted_and_fail_the_run():
    cfg = {"collective": "all_reduce", "min_bytes": 4096, "max_bytes": 4096, "warmup": 0, "iters": 2}
    res = spawn("hal.dist.bench:rank_main", 2, kwargs={"config": cfg}, timeout=60,
                env={"HAL_BACKEND": "cpu", "HAL_BENCH_TEST_CORRUPT_RANK": "1"})
    assert res.ok, res.first_error()
    rep = judge(res.ranks[0].result)
    # rank 1 adds 1 to all 1024 elements, so both ranks hold 1024 wrong sums
    assert rep["wrong_total"] == 2 * 1024 and not rep["passed"]
    text = format_text(rep)
    row = [l.split() for l in text.splitlines() if l and not l.startswith("#")][0]
    assert int(row[12]) == rep["wrong_total"]
    assert "# Out of bounds values : %d FAILED" % rep["wrong_total"] in text


def test_cli_bad_size_is_one_clear_line():
    out = _hal("bench", "all_reduce", "-b", "huge")
    assert out.returncode == 2
    assert out.stderr.strip() == "hal bench: error: size 'huge' is not a byte count; write e.g. 8, 1K, 64M or 1G"
