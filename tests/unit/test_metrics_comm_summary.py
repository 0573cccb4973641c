"""Communication shares in hal metrics summary, from records: communication-bound or not,
drops that are the network's, the flag that moves the bound; the union of overlapping
collectives; a model hal cannot watch is refused with the fix."""
import json

import jsonschema
import pytest
import torch

import hal.metrics as metrics
from hal._errors import HalError
from hal.cli import main
from hal.metrics._comm import union_length


def _run(tmp_path, name, rows, rank=0):
    """A metrics file whose steps have (step_time_s, comm_time_s, comm_exposed_s)."""
    with metrics.MetricsLogger(tmp_path, name) as log:
        for step, (t, _, _) in enumerate(rows, 1):
            log.log_step(step, samples=64, step_time_s=t)
    path = tmp_path / f"{name}.jsonl"
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    for r, (_, c, e) in zip(recs, rows):
        r.update(comm_time_s=c, comm_exposed_s=e, comm_count=2, comm_bytes=1 << 20, rank=rank)
    schema = json.loads(metrics.schema_path().read_text())
    for r in recs:
        jsonschema.validate(r, schema)
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return str(path)


def test_union_counts_overlapping_collectives_once():
    assert union_length([(0, 1), (0.5, 2), (3, 4)]) == pytest.approx(3.0)
    assert union_length([(3, 4), (0, 10)]) == pytest.approx(10.0)
    assert union_length([(1, 1), (2, 1)]) == 0.0  # empty and inverted intervals (a wait after completion)
    assert union_length([]) == 0.0


def test_exposed_share_above_the_bound_is_communication_bound(tmp_path, capsys):
    path = _run(tmp_path, "net", [(0.1, 0.06, 0.04)] * 30)
    rep = metrics.summarize([path])
    c = rep["runs"][0]["comm"]
    assert (c["share"], c["exposed_share"]) == (pytest.approx(0.6), pytest.approx(0.4))
    assert rep["comm_bound_ranks"] == [0] and len(rep["comm_advice"]) == 3
    assert main(["metrics", "summary", path]) == 1
    out = capsys.readouterr().out
    assert "communication 60.0% of step time, exposed 40.0%" in out
    assert "communication-bound (exposed above 30%)" in out
    assert "communication-bound: rank(s) 0 waited for collectives more than 30% of their step time; try:" in out
    # the same run under a higher bound is not
    assert main(["metrics", "summary", path, "--comm-bound", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "communication 60.0% of step time, exposed 40.0%" in out and "communication-bound" not in out


def test_overlapped_communication_is_not_communication_bound(tmp_path, capsys):
    path = _run(tmp_path, "overlap", [(0.1, 0.08, 0.01)] * 30)  # most of it hidden behind compute
    assert main(["metrics", "summary", path, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["comm_bound_ranks"] == [] and rep["runs"][0]["comm"]["exposed_share"] == pytest.approx(0.1)


def test_a_drop_whose_steps_waited_for_the_network_says_so(tmp_path, capsys):
    rows = [(0.1, 0.01, 0.005)] * 30
    rows[19:23] = [(0.3, 0.21, 0.205)] * 4   # steps 20-23: the slow link
    rows[26] = (0.4, 0.01, 0.005)            # step 27: something else (a data stall)
    path = _run(tmp_path, "drops", rows)
    rep = metrics.summarize([path])
    drops = rep["runs"][0]["drops"]
    assert [(d["start_step"], d["end_step"], d["comm_bound"]) for d in drops] == [(20, 23, True), (27, 27, False)]
    assert drops[0]["comm_exposed_share"] == pytest.approx(0.205 / 0.3)
    assert main(["metrics", "summary", path]) == 1
    out = capsys.readouterr().out
    assert "EXPOSED COMM" in out
    assert "steps 20..23: the training waited for communication 68% of those steps' time" in out
    assert "steps 27..27: the training waited" not in out


def test_records_without_communication_have_no_comm_section(tmp_path, capsys):
    with metrics.MetricsLogger(tmp_path, "plain") as log:
        for step in range(1, 10):
            rec = log.log_step(step, samples=8, step_time_s=0.1)
    assert rec["comm_time_s"] is None and rec["comm_exposed_s"] is None
    rep = metrics.summarize([tmp_path / "plain.jsonl"])
    assert rep["runs"][0]["comm"] is None and rep["comm_bound_ranks"] == []
    main(["metrics", "summary", str(tmp_path / "plain.jsonl")])
    assert "communication" not in capsys.readouterr().out


def test_watching_a_plain_module_names_what_to_watch(tmp_path):
    with metrics.MetricsLogger(tmp_path, "w") as log:
        with pytest.raises(HalError, match=r"watch\(Linear\): not a DistributedDataParallel module.*fully_shard"):
            log.watch(torch.nn.Linear(2, 2))


def test_comm_bound_must_be_a_share(tmp_path):
    path = _run(tmp_path, "x", [(0.1, 0.01, 0.0)] * 3)
    with pytest.raises(HalError, match="comm_bound=30: must be between 0 and 1"):
        metrics.summarize([path], comm_bound=30)


def test_a_rank_that_waits_for_a_slower_rank_is_not_called_communication_bound(tmp_path, capsys):
    # rank 0 finishes its work early and waits in every all-reduce for rank 1, which waits little
    fast = _run(tmp_path, "r0", [(0.1, 0.06, 0.05)] * 20)
    slow = _run(tmp_path, "r1", [(0.1, 0.02, 0.01)] * 20, rank=1)
    rep = metrics.summarize([fast, slow])
    assert rep["comm_bound_ranks"] == [] and rep["comm_waiting_ranks"] == [0] and rep["comm_advice"] == []
    assert main(["metrics", "summary", fast, slow]) == 1
    out = capsys.readouterr().out
    assert ": waiting for slower ranks" in out and "communication-bound" not in out
    assert ("waiting for slower ranks: rank(s) 0 waited for collectives more than 30% of their step time, "
            "rank 1 only 10%") in out
    # when every rank waits, the network is the cause
    both = _run(tmp_path, "r1b", [(0.1, 0.06, 0.04)] * 20, rank=1)
    assert metrics.summarize([fast, both])["comm_bound_ranks"] == [0, 1]


def test_prometheus_exports_the_communication_gauges(tmp_path):
    path = _run(tmp_path, "prom", [(0.1, 0.06, 0.04)] * 2)
    with open(path) as f:
        rec = json.loads(f.read().splitlines()[-1])
    text = metrics.prometheus_text(rec)
    assert 'hal_comm_seconds{run="prom",rank="0",device="cpu"} 0.06' in text
    assert 'hal_comm_exposed_seconds{run="prom",rank="0",device="cpu"} 0.04' in text
