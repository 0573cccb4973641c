"""Communication time in hal.metrics on real ranks: DDP on gloo with a slow all-reduce is
called communication-bound by ``hal metrics summary`` and a compute-heavy run is not; FSDP2
on gloo and DDP on the emulator's emuccl record their collectives."""
import json
from pathlib import Path

import jsonschema
import pytest

import hal.metrics as metrics
from hal.cli import main
from hal.dist.launch import spawn

WORKER = str(Path(__file__).with_name("_metrics_comm_worker.py"))
pytestmark = [pytest.mark.dist]


def _train(folder, backend="cpu", nproc=2, **kwargs):
    res = spawn(f"{WORKER}:train", nproc, kwargs={"folder": str(folder), **kwargs}, timeout=120,
                env={"HAL_BACKEND": backend})
    assert res.ok, res.first_error()
    files = [folder / f"exp.rank{r}.jsonl" for r in range(nproc)]
    records = [[json.loads(x) for x in f.read_text().splitlines()] for f in files]
    schema = json.loads(metrics.schema_path().read_text())
    for r in sum(records, []):
        jsonschema.validate(r, schema)
    return [str(f) for f in files], records, [r.result for r in res.ranks]


def test_a_slow_all_reduce_makes_the_run_communication_bound(tmp_path, capsys):
    files, records, _ = _train(tmp_path, slow_s=0.3, steps=6, dim=32, layers=2, batch=16)
    for rank in records:
        timed = rank[1:]  # the first record only starts the clock
        assert all(r["comm_count"] == 1 and r["comm_bytes"] > 0 for r in timed)
        # every all-reduce completed at least 0.3 s after its launch, all of it after the backward pass
        assert all(r["comm_time_s"] >= 0.3 and r["comm_exposed_s"] >= 0.3 for r in timed)
        assert all(r["comm_exposed_s"] <= r["comm_time_s"] + 1e-9 <= r["step_time_s"] + 1e-3 for r in timed)
    assert main(["metrics", "summary", *files]) == 1
    out = capsys.readouterr().out
    assert "communication-bound: rank(s) 0, 1 waited for collectives more than 30% of their step time" in out
    assert "bucket_cap_mb" in out and "hal bench --pairs" in out and "accumulate gradients" in out
    assert main(["metrics", "summary", *files, "--json"]) == 1
    rep = json.loads(capsys.readouterr().out)
    assert rep["comm_bound_ranks"] == [0, 1]
    assert all(r["comm"]["exposed_share"] > 0.3 for r in rep["runs"])


def test_overlapped_buckets_are_not_communication_bound_and_train_as_without_the_watch(tmp_path, capsys):
    # 6 layers of 0.25 MiB in buckets of 0.25 MiB: all but the last bucket are all-reduced while the
    # backward pass computes the earlier layers, so less is exposed than spent.  3 ranks: the watch
    # averages as DDP does (by 1/3, not / 3), so the parameters equal an unwatched run's bitwise
    files, records, results = _train(tmp_path, nproc=3, steps=4, dim=256, layers=6, batch=512, bucket_cap_mb=0.25,
                                     reference=True)
    assert [r["max_param_difference"] for r in results] == [0.0, 0.0, 0.0]
    for rank in records:
        timed = rank[2:]  # after DDP rebuilt its buckets in the first step
        assert all(r["comm_count"] >= 5 and r["comm_time_s"] > 0 for r in timed), [r["comm_count"] for r in timed]
        assert sum(r["comm_exposed_s"] for r in timed) < 0.9 * sum(r["comm_time_s"] for r in timed)
    assert main(["metrics", "summary", *files, "--json"]) in (0, 1)  # a throughput drop may show on 2 cores
    rep = json.loads(capsys.readouterr().out)
    assert rep["comm_bound_ranks"] == [], [r["comm"] for r in rep["runs"]]
    assert rep["comm_advice"] == []


def test_fsdp2_records_its_all_gathers_and_reduce_scatters(tmp_path):
    _, records, _ = _train(tmp_path, kind="fsdp2", steps=5, paused_steps=[3])
    for rank in records:
        assert [r["comm_count"] for r in rank if r["step"] == 3] == [0]  # paused: nothing timed
        for r in [r for r in rank[1:] if r["step"] != 3]:
            # 3 blocks: all-gathered in forward and again in backward, gradients reduce-scattered
            assert r["comm_count"] >= 6 and r["comm_time_s"] > 0 and 0 < r["comm_exposed_s"] <= r["comm_time_s"]
            assert r["comm_bytes"] >= 3 * 2 * (256 * 256 + 256) * 4


@pytest.mark.emu
def test_ddp_on_the_emulator_records_emuccl_time(tmp_path):
    # another DDP model on the same group steps in between, and the loss is all-reduced for the log:
    # only the watched model's one bucket per step is its gradient communication
    _, records, results = _train(tmp_path, backend="emu", steps=4, reference=True, interleaved=True)
    assert [r["max_param_difference"] for r in results] == [0.0, 0.0]
    # emuccl is a Python backend: its all-reduce is timed on the group, DDP keeps its own (hook-less) path
    assert [r["comm_hooks"] for r in results] == [0, 0]
    for rank in records:
        assert rank[0]["device"].startswith("emu")
        assert all(r["comm_count"] == 1 and r["comm_bytes"] == 3 * (256 * 256 + 256) * 4 for r in rank[1:])
        assert all(0 < r["comm_exposed_s"] <= r["comm_time_s"] + 1e-9 for r in rank[1:])
