"""Acceptance (issue 22): DDP across 2 simulated nodes with a slow link -> ``hal metrics summary``
says communication-bound; the same job over fast links does not.

Two simulated nodes (tests/cluster/simnodes.py), every link 1 Gbit/s; the slow run puts node 1's
link at 50 Mbit/s; ``torchrun`` with the c10d rendezvous on node 0 in each.  The slow case runs on
gloo and on the emulator (``HAL_BACKEND=emu``: emuccl across the nodes).  Needs root,
``ip`` and ``tc``; skips with the reason elsewhere.  About 10-20 s per run on 2 cores.
"""
import json
from pathlib import Path

import pytest

from hal.cli import main
from simnodes import cluster_or_skip

pytestmark = [pytest.mark.cluster]
JOB = Path(__file__).with_name("_comm_ddp_train.py")


@pytest.fixture
def nodes():
    def build(slow: str):
        return cluster_or_skip(2, node_rate={1: slow}, net=79)
    return build


def _train(cluster, folder: Path, steps: int = 8, backend: str = "cpu"):
    res = cluster.torchrun([str(JOB), str(folder), str(steps)], port=29533, timeout=240,
                           env={i: {"HAL_BACKEND": backend} for i in (0, 1)})
    assert all(r.returncode == 0 for r in res), "\n".join((r.stdout + r.stderr)[-3000:] for r in res)
    files = [folder / f"comm.rank{r}.jsonl" for r in (0, 1)]
    for f in files:
        assert all(json.loads(line)["device"].startswith(backend) for line in f.read_text().splitlines())
    return [str(f) for f in files]


@pytest.mark.parametrize("backend", ["cpu", "emu"])  # gloo, and the emulator's emuccl across the nodes
def test_a_slow_link_makes_ddp_communication_bound(tmp_path, capsys, nodes, backend):
    with nodes("50mbit") as cluster:
        files = _train(cluster, tmp_path / "slow", backend=backend)
    assert main(["metrics", "summary", *files]) == 1
    out = capsys.readouterr().out
    assert "communication-bound: rank(s) 0, 1 waited for collectives more than 30% of their step time" in out
    assert "hal bench --pairs" in out


def test_the_same_job_over_fast_links_is_not(tmp_path, capsys, nodes):
    with nodes("1gbit") as cluster:
        files = _train(cluster, tmp_path / "fast")
    main(["metrics", "summary", *files, "--json"])
    rep = json.loads(capsys.readouterr().out)
    assert rep["comm_bound_ranks"] == [], [r["comm"] for r in rep["runs"]]
    assert all(r["comm"]["steps"] >= 7 and r["comm"]["comm_time_s"] > 0 for r in rep["runs"])
