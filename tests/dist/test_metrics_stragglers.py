"""Live straggler detection on real gloo ranks: the slow rank is named on rank 0 while the
run goes on, in its log and its JSONL, and ``hal metrics summary`` shows it afterwards."""
import json
from pathlib import Path

import jsonschema
import pytest

import hal.metrics as metrics
from hal.cli import main
from hal.dist.launch import spawn

WORKER = str(Path(__file__).with_name("_metrics_straggler_worker.py"))
pytestmark = [pytest.mark.dist]


def _records(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def _train(folder, **kwargs):
    res = spawn(f"{WORKER}:train", 2, kwargs={"folder": str(folder), **kwargs}, timeout=90,
                env={"HAL_BACKEND": "cpu"})
    assert res.ok, res.first_error()
    return _records(folder / "exp.rank0.jsonl"), _records(folder / "exp.rank1.jsonl")


def test_a_slow_rank_is_named_live_on_rank_0(tmp_path, capsys):
    rank0, rank1 = _train(tmp_path, slow_rank=1)
    schema = json.loads(metrics.schema_path().read_text())
    for r in rank0 + rank1:
        jsonschema.validate(r, schema)
    named = [(r["step"], e) for r in rank0 for e in r.get("events", []) if e["type"] == "straggler"]
    assert len(named) == 1, named
    at, ev = named[0]
    assert ev["rank"] == 1 and ev["steps"] == 5 and ev["last_step"] - ev["first_step"] == 4
    assert ev["ratio"] > 2 and ev["step_time_s"] > 0.06
    assert at < 40 and ev["last_step"] <= at  # named during the run, not afterwards
    assert not any("events" in r for r in rank1)  # only rank 0 records verdicts
    log = (tmp_path / "rank0.log").read_text()
    line = (f"hal.metrics: rank 1 is a straggler: step time {ev['step_time_s']:.3g} s = {ev['ratio']:.1f}x "
            f"the median of the other ranks for 5 steps (steps {ev['first_step']}-{ev['last_step']})")
    assert line in log.splitlines()
    assert (tmp_path / "rank1.log").read_text() == ""

    files = [str(tmp_path / "exp.rank0.jsonl"), str(tmp_path / "exp.rank1.jsonl")]
    assert main(["metrics", "summary", *files]) == 1
    out = capsys.readouterr().out
    assert (f"live straggler: rank 1 from step {ev['first_step']} onwards (no recovery recorded), named at "
            f"step {at}") in out
    assert main(["metrics", "summary", *files, "--json"]) == 1
    live = json.loads(capsys.readouterr().out)["live_stragglers"]
    assert [(s["rank"], s["first_step"], s["named_at_step"]) for s in live] == [(1, ev["first_step"], at)]


def test_a_balanced_run_names_nobody(tmp_path):
    rank0, rank1 = _train(tmp_path)
    assert not [r for r in rank0 + rank1 if "events" in r]
    assert (tmp_path / "rank0.log").read_text() == ""
