"""Node x node links and ``hal bench`` across nodes: several torchrun agents on 127.0.0.1, one per node.

Loopback figures follow the CPU load, so these tests assert what the measurement must always give
(every pair measured, a dead link named within its deadline, the report's schema); the slow-link
verdicts on shaped links are tests/cluster's.
"""
import json
import os
import signal
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from hal.dist.launch import free_port

pytestmark = [pytest.mark.dist]
ROOT = Path(__file__).resolve().parents[2]
WORKER = str(Path(__file__).with_name("_links_worker.py"))


def agents(nnodes, nproc, argv, env=None, timeout=120, linger=5.0):
    """Run ``nnodes`` torchrun agents (one per simulated node); ``[(returncode, stdout, stderr)]``.

    When one agent fails, torchrun's others wait minutes at their exit barrier: they are killed
    ``linger`` seconds after the first failure.
    """
    port = free_port()
    e = dict(os.environ, HAL_BACKEND="cpu", OMP_NUM_THREADS="1", **(env or {}))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes), "--nproc-per-node",
           str(nproc), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", *argv]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e,
                              cwd=ROOT, start_new_session=True) for _ in range(nnodes)]
    outs = [None] * nnodes
    end, failed_at = time.monotonic() + timeout, None
    try:
        while any(o is None for o in outs):
            for i, p in enumerate(procs):
                if outs[i] is None and p.poll() is not None:
                    outs[i] = (p.returncode, *p.communicate())
                    if p.returncode and failed_at is None:
                        failed_at = time.monotonic()
            now = time.monotonic()
            if now > end or (failed_at is not None and now > failed_at + linger):
                break
            time.sleep(0.1)
    finally:
        for i, p in enumerate(procs):
            if outs[i] is None:
                os.killpg(p.pid, signal.SIGKILL)
                outs[i] = (None, *p.communicate())
    assert time.monotonic() <= end, f"agents did not finish within {timeout} s: {[o[2][-1500:] for o in outs]}"
    return outs


def _report(outs):
    """The one agent's stdout that holds rank 0's JSON report."""
    found = [json.loads(o[1]) for o in outs if o[1].lstrip().startswith("{")]
    assert len(found) == 1, [o[1][-500:] + o[2][-1500:] for o in outs]
    return found[0]


def test_dead_link_is_named_within_its_deadline_and_fails_pairs():
    t0 = time.monotonic()
    outs = agents(2, 1, ["-m", "hal", "bench", "--pairs", "--size", "256K", "--timeout", "3", "--json"],
                  env={"HAL_LINKS_TEST_STALL_NODE": "1"})
    rep = _report(outs)
    schema = json.loads(resources.files("hal").joinpath("data/bench-pairs.schema.json").read_text())
    jsonschema.validate(rep, schema)
    assert 1 in [o[0] for o in outs]  # rank 0 exits 1
    assert not rep["passed"] and rep["matrix_gbps"][0][1] is None
    gate = {g["gate"]: g for g in rep["gates"]}["links_complete"]
    assert gate["detail"].startswith("node 0 (") and "<-> node 1 (" in gate["detail"]
    assert "no answer within 3 s" in gate["detail"]
    assert time.monotonic() - t0 < 60  # seconds, not gloo's minutes


@pytest.mark.cluster
def test_links_and_ladder_checks_measure_every_pair_and_step(tmp_path):
    out = tmp_path / "checks.json"
    outs = agents(4, 2, [WORKER], env={"HAL_LINKS_OUT": str(out), "HAL_DOCTOR_LINK_BYTES": "1M"}, timeout=180)
    assert all(o[0] == 0 for o in outs), [o[2][-2000:] for o in outs]
    res = json.loads(out.read_text())
    links, ladder = res["links"], res["scale_ladder"]
    m = links["details"]["matrix_gbps"]
    assert all((m[a][b] is None) == (a == b) and m[a][b] == m[b][a] for a in range(4) for b in range(4))
    assert all(m[a][b] > 0 for a in range(4) for b in range(4) if a != b)
    assert links["details"]["rounds"] == [[[0, 3], [1, 2]], [[0, 2], [1, 3]], [[0, 1], [2, 3]]]
    assert links["status"] in ("OK", "FAIL") and links["summary"]
    steps = ladder["details"]["steps"]
    assert [s["nodes"] for s in steps] == [2, 3, 4] and all(s["busbw_gbps"] > 0 for s in steps)
    assert [s["ranks"] for s in steps] == [[0, 2], [0, 2, 4], [0, 2, 4, 6]]  # the nodes' leaders


@pytest.mark.cluster
def test_bench_table_across_two_nodes_names_them():
    outs = agents(2, 2, ["-m", "hal", "bench", "all_reduce", "-b", "1K", "-e", "4K", "-f", "4", "--iters", "3"])
    assert all(o[0] == 0 for o in outs), [o[2][-2000:] for o in outs]
    text = "".join(o[1] for o in outs)
    assert text.count("# Out of bounds values : 0 OK") == 1
    assert "nranks 4 nnodes 2 " in text
    assert "#  Node  0 on " in text and "ranks 0-1" in text and "#  Node  1 on " in text and "ranks 2-3" in text
