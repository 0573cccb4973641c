"""hal metrics summary: finds throughput drops and stragglers in JSONL metrics."""
import json

import pytest

import hal.metrics as metrics
from hal.cli import main


def _run(path_dir, name, times, samples=64):
    with metrics.MetricsLogger(path_dir, name) as log:
        for step, t in enumerate(times, 1):
            log.log_step(step, samples=samples, step_time_s=t)
    return path_dir / f"{name}.jsonl"


def _with_slowdowns(tmp_path):
    times = [0.1] * 100
    for s in range(40, 45):
        times[s - 1] = 0.3
    times[70 - 1] = 0.5
    return _run(tmp_path, "run", times)


def test_drops_are_found_where_they_happened(tmp_path):
    rep = metrics.summarize([_with_slowdowns(tmp_path)])
    run = rep["runs"][0]
    assert run["metric"] == "samples_per_s" and run["median"] == pytest.approx(640)
    assert [(d["start_step"], d["end_step"], d["steps"]) for d in run["drops"]] == [(40, 44, 5), (70, 70, 1)]
    assert [round(d["ratio"], 3) for d in run["drops"]] == [0.333, 0.2]


def test_steady_run_has_no_drop(tmp_path, capsys):
    path = _run(tmp_path, "steady", [0.1, 0.11, 0.09] * 20)
    assert main(["metrics", "summary", str(path)]) == 0
    assert "no throughput drop" in capsys.readouterr().out


def test_cli_prints_the_drops_and_exits_1(tmp_path, capsys):
    assert main(["metrics", "summary", str(_with_slowdowns(tmp_path))]) == 1
    out = capsys.readouterr().out
    assert "2 throughput drop(s)" in out and "40..44" in out and "70..70" in out


def test_cli_json(tmp_path, capsys):
    assert main(["metrics", "summary", str(_with_slowdowns(tmp_path)), "--json"]) == 1
    rep = json.loads(capsys.readouterr().out)
    assert rep["schema"] == "hal.metrics.summary/1"
    assert [d["start_step"] for d in rep["runs"][0]["drops"]] == [40, 70]


def test_threshold_changes_what_counts(tmp_path):
    rep = metrics.summarize([_with_slowdowns(tmp_path)], threshold=0.25)
    assert [d["start_step"] for d in rep["runs"][0]["drops"]] == [70]


def test_straggler_rank(tmp_path, capsys):
    fast = _run(tmp_path, "r0", [0.1] * 30)
    slow = _run(tmp_path, "r1", [0.15] * 30)
    assert main(["metrics", "summary", str(fast), str(slow)]) == 1
    out = capsys.readouterr().out
    assert "straggler: rank 0 (" + str(slow) in out and "1.50x the fastest rank" in out


def test_torn_last_line_is_noted_not_fatal(tmp_path, capsys):
    path = _run(tmp_path, "run", [0.1] * 10)
    with open(path, "a") as f:
        f.write('{"schema": "hal.metr')
    assert main(["metrics", "summary", str(path)]) == 0
    assert "line 11 is incomplete" in capsys.readouterr().out


@pytest.mark.parametrize("content, match", [
    ('not json\n{"a": 1}\n', r"bad.jsonl:1: not JSON"),
    ('{"schema": "other/1"}\n', r"bad.jsonl:1: not a hal.metrics/1 record"),
    ("", "no hal.metrics/1 records"),
])
def test_bad_input_is_one_clear_error(tmp_path, capsys, content, match):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    assert main(["metrics", "summary", str(bad)]) == 3
    err = capsys.readouterr().err
    assert "Traceback" not in err
    import re
    assert re.search(match, err)


def test_missing_file(tmp_path, capsys):
    assert main(["metrics", "summary", str(tmp_path / "nope.jsonl")]) == 3
    assert "cannot read" in capsys.readouterr().err


def test_help_teaches_with_examples(capsys):
    with pytest.raises(SystemExit):
        main(["metrics", "summary", "--help"])
    out = capsys.readouterr().out
    assert "hal metrics summary runs/exp1/run.jsonl" in out and "--json" in out
