"""Acceptance (issue 22) on 4 simulated nodes, node 3's link at a quarter of the others' rate.

One ``hal doctor --json`` across the nodes, started by torchrun in every node as a user does,
with node 2 reporting another torch version and node 1 not listening on a port the job names:
the report must name node 2 and its version, the pair and port that failed (within seconds),
node 3 and its links, and the ladder step where node 3 joined.  Then ``hal bench --pairs``
must exit non-zero naming node 3.  Needs root (network namespaces); skips with the reason.
"""
import json

import pytest

from simnodes import cluster_or_skip

pytestmark = [pytest.mark.cluster]


@pytest.fixture(scope="module")
def cluster():
    with cluster_or_skip(4, node_rate={3: "250mbit"}, net=78) as c:
        yield c


def _by_name(report):
    return {c["name"]: c for c in report["checks"]}


def test_doctor_names_the_odd_node_the_closed_port_and_the_slow_link(cluster):
    env = {2: {"HAL_DOCTOR_TEST_VERSIONS": '{"torch": "2.12.0"}'},
           1: {"HAL_DOCTOR_TEST_CLOSED_PORTS": "29601"}}
    res = cluster.torchrun(["-m", "hal", "doctor", "--json", "--port", "29601"], env=env, port=29561)
    assert res[0].stdout.strip(), res[0].stderr[-3000:]
    report = json.loads(res[0].stdout)
    checks = _by_name(report)
    assert checks["software"]["status"] == "FAIL"
    assert "node 2 (sim78-node2)" in checks["software"]["summary"] and "2.12.0" in checks["software"]["summary"]
    reach = checks["reachability"]
    assert reach["status"] == "FAIL" and "29601" in reach["summary"] and "node 1 (sim78-node1)" in reach["summary"]
    assert reach["seconds"] < 15
    links = checks["links"]
    assert links["status"] == "FAIL" and "node 3 (sim78-node3)" in links["summary"], links
    ladder = checks["scale_ladder"]
    assert ladder["status"] == "WARN" and "node 3" in ladder["summary"], ladder
    assert report["exit_code"] == 2


def test_bench_pairs_fails_on_the_slow_links(cluster):
    res = cluster.torchrun(["-m", "hal", "bench", "--pairs", "--size", "8M", "--json"], port=29562)
    assert res[0].returncode != 0
    rep = json.loads(res[0].stdout)
    text = json.dumps(rep)
    assert "node 3 (sim78-node3)" in text
    assert not rep.get("passed", True)
