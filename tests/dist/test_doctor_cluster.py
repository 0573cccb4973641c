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


def _agents(envs, *args, timeout=240):
    """Run ``hal doctor --nnodes N --rdzv-endpoint 127.0.0.1:PORT`` once per env; (rc, out, err) each."""
    ep = f"127.0.0.1:{free_port()}"
    procs = []
    for extra in envs:
        env = dict(os.environ, HAL_BACKEND="cpu", OMP_NUM_THREADS="1", **extra)
        cmd = [sys.executable, "-m", "hal", "doctor", "--nnodes", str(len(envs)), "--rdzv-endpoint", ep, *args]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                      start_new_session=True))
    out = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=timeout)
            out.append((p.returncode, stdout, stderr))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
    return out


def _report(runs):
    reports = [json.loads(o) for _, o, _ in runs if o.strip().startswith("{")]
    assert len(reports) == 1, [e[-3000:] for _, _, e in runs]
    return reports[0]


def test_one_node_with_another_torch_and_a_shifted_clock_is_named():
    hooked = {"HAL_DOCTOR_TEST_VERSIONS": '{"torch": "2.12.0"}', "HAL_DOCTOR_TEST_CLOCK_OFFSET_S": "1.5"}
    runs = _agents([{}, hooked], "--json")
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


def test_a_port_nobody_listens_on_is_named_with_the_pair_within_seconds():
    port = free_port()
    closed = {"HAL_DOCTOR_TEST_CLOSED_PORTS": str(port)}
    t0 = time.monotonic()
    runs = _agents([closed, closed], "--json", "--port", str(port), "--timeout", "15")
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
