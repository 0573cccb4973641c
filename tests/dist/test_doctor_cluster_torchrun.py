"""``hal doctor`` across nodes with two torchrun agents on 127.0.0.1, each one "node".

Both agents share this host, so one node's torch version and clock are changed through the
doctor's documented test hooks (HAL_DOCTOR_TEST_VERSIONS, HAL_DOCTOR_TEST_CLOCK_OFFSET_S), and a
blocked port is one that nobody listens on (HAL_DOCTOR_TEST_CLOSED_PORTS).  Under the
``cluster`` marker (make cluster): each test takes 10-30 s on 2 cores.
"""
import json
import os
import signal
import subprocess
import sys
import time

import jsonschema
import pytest

from hal.dist.launch import free_port
from hal.doctor.cluster import schema_path

pytestmark = [pytest.mark.dist, pytest.mark.cluster]


def _start(cmd, env, out_dir, name):
    """One agent, its output in files (a hung peer holds no pipe of ours)."""
    out, err = open(out_dir / f"{name}.out", "w"), open(out_dir / f"{name}.err", "w")
    p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env, start_new_session=True)
    p.files = (out, err)
    return p


def _stop(procs):
    """torchrun starts its workers in sessions of their own: SIGTERM lets it stop them, then SIGKILL."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        for f in p.files:
            f.close()


def _read(out_dir, name):
    return (out_dir / f"{name}.out").read_text(), (out_dir / f"{name}.err").read_text()


def _agents(tmp_path, envs, *args, timeout=240):
    """Run ``hal doctor --nnodes N --rdzv-endpoint 127.0.0.1:PORT`` once per env; (rc, out, err) each."""
    ep = f"127.0.0.1:{free_port()}"
    procs = []
    try:
        for i, extra in enumerate(envs):
            env = dict(os.environ, HAL_BACKEND="cpu", OMP_NUM_THREADS="1", **extra)
            cmd = [sys.executable, "-m", "hal", "doctor", "--nnodes", str(len(envs)), "--rdzv-endpoint", ep, *args]
            procs.append(_start(cmd, env, tmp_path, f"agent{i}"))
        deadline = time.monotonic() + timeout
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        _stop(procs)
    return [(p.returncode, *_read(tmp_path, f"agent{i}")) for i, p in enumerate(procs)]


def _report(runs):
    reports = [json.loads(o) for _, o, _ in runs if o.strip().startswith("{")]
    assert len(reports) == 1, [e[-3000:] for _, _, e in runs]
    return reports[0]


def test_one_node_with_another_torch_and_a_shifted_clock_is_named(tmp_path):
    hooked = {"HAL_DOCTOR_TEST_VERSIONS": '{"torch": "2.12.0"}', "HAL_DOCTOR_TEST_CLOCK_OFFSET_S": "1.5"}
    runs = _agents(tmp_path, [{}, hooked], "--json")
    rep = _report(runs)
    jsonschema.validate(rep, json.loads(schema_path().read_text()))
    # every agent exits with the report's status, not torchrun's 1
    assert [rc for rc, _, _ in runs] == [2, 2], [e[-2000:] for _, _, e in runs]
    odd = next(n for n in rep["nodes"] if n["test_hooks"])
    checks = {c["name"]: c for c in rep["checks"]}
    sw = checks["software"]
    assert sw["status"] == "FAIL"
    assert f"node {odd['node']} (" in sw["summary"] and "2.12.0" in sw["summary"], sw["summary"]
    assert sw["details"]["facts"]["torch"]["nodes"][str(odd["node"])] == "2.12.0"
    clk = checks["clocks"]
    assert clk["status"] == "FAIL"
    est = clk["details"]["offsets"]["1"]  # node 1 against node 0 (rank 0)
    sign = 1 if odd["node"] == 1 else -1
    assert est["offset_s"] == pytest.approx(sign * 1.5, abs=est["bound_s"] + 0.05)
    assert est["bound_s"] < 0.1
    assert "node 1 (" in clk["summary"] and "1.5" in clk["summary"]
    # the network itself is fine: the process group comes up, cluster_links runs or says it is absent
    assert checks["reachability"]["status"] == "OK"
    assert checks["process_group"]["status"] == "OK"
    assert [c["name"] for c in rep["checks"]] == ["software", "clocks", "reachability", "transport",
                                                  "process_group", "links", "scale_ladder"]
    other = [e for _, o, e in runs if not o.strip().startswith("{")][0]
    assert "hal doctor: rank 1, node" in other and "FAIL (exit 2)" in other


def test_a_port_nobody_listens_on_is_named_with_the_pair_within_seconds(tmp_path):
    port = free_port()
    closed = {"HAL_DOCTOR_TEST_CLOSED_PORTS": str(port)}
    t0 = time.monotonic()
    runs = _agents(tmp_path, [closed, closed], "--json", "--port", str(port), "--timeout", "15")
    took = time.monotonic() - t0
    rep = _report(runs)
    reach = next(c for c in rep["checks"] if c["name"] == "reachability")
    assert reach["status"] == "FAIL"
    for frm, to in ((0, 1), (1, 0)):
        assert f"node {frm} (" in reach["summary"] and f"-> node {to} (" in reach["summary"]
    assert f"127.0.0.1:{port} (--port {port}): refused" in reach["summary"], reach["summary"]
    assert reach["seconds"] < 10, reach["seconds"]
    failed = reach["details"]["failed"]
    assert {(a["from"], a["to"], a["port"]) for a in failed} == {(0, 1, port), (1, 0, port)}
    assert [rc for rc, _, _ in runs] == [2, 2]
    assert took < 200


def test_a_node_that_stops_answering_is_named_within_the_timeout(tmp_path):
    """Node 1's doctor hangs at the clock exchange: node 0 reports it by name after --timeout, no
    process group is attempted, and node 0 exits without waiting for it."""
    ep = f"127.0.0.1:{free_port()}"
    procs = []
    try:
        for n, extra in ((1, {}), (2, {"HAL_DOCTOR_TEST_HANG": "clocks"})):
            env = dict(os.environ, HAL_BACKEND="cpu", OMP_NUM_THREADS="1", **extra)
            # --local-addr orders the agents: 127.0.0.1 becomes node 0
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                   "--rdzv-backend", "c10d", "--rdzv-endpoint", ep, "--local-addr", f"127.0.0.{n}",
                   "-m", "hal", "doctor", "--json", "--timeout", "5"]
            procs.append(_start(cmd, env, tmp_path, f"node{n}"))
        procs[0].wait(timeout=180)
    finally:
        _stop(procs)
    stdout, stderr = _read(tmp_path, "node1")
    assert procs[0].returncode == 1 and "exitcode  : 2" in stderr  # torchrun's 1, the worker's 2
    rep = json.loads(stdout)
    checks = {c["name"]: c for c in rep["checks"]}
    assert checks["software"]["status"] == "OK"
    assert "node 1 (" in checks["clocks"]["summary"]
    assert "did not answer the clock exchange within 5 s" in checks["clocks"]["summary"]
    assert checks["clocks"]["seconds"] < 15
    assert "did not post its reachability results within 5 s" in checks["reachability"]["summary"]
    assert checks["process_group"]["status"] == "SKIP"
    assert [n["test_hooks"] for n in rep["nodes"]] == [{}, {"HAL_DOCTOR_TEST_HANG": "clocks"}]
