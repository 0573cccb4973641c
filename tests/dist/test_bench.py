"""hal bench on real gloo ranks: every collective correct, and the CLI in nccl-tests layout."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hal.dist.bench import COLLECTIVES
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
    # an impossible bar fails with exit 1
    high = _hal("bench", "all_reduce", "-n", "2", "-b", "1K", "-e", "1K", "--iters", "2", "--json",
                "--min-busbw", "1e9")
    assert high.returncode == 1
    gate = json.loads(high.stdout)["gates"][-1]
    assert (gate["gate"], gate["passed"]) == ("min_busbw", False)
    assert "minimum 1e+09 GB/s" in gate["detail"]


def test_cli_counts_wrong_values():
    out = _hal("bench", "all_reduce", "-n", "2", "-b", "4K", "-e", "4K", "--iters", "2",
               env={"HAL_BENCH_TEST_CORRUPT_RANK": "1"})
    assert out.returncode == 1
    row = [l.split() for l in out.stdout.splitlines() if l and not l.startswith("#")][0]
    assert int(row[12]) > 0
    assert "Out of bounds values" in out.stdout and "FAILED" in out.stdout


def test_cli_bad_size_is_one_clear_line():
    out = _hal("bench", "all_reduce", "-b", "huge")
    assert out.returncode == 2
    assert out.stderr.strip() == "hal bench: error: size 'huge' is not a byte count; write e.g. 8, 1K, 64M or 1G"
