"""4 simulated nodes where every node is fine but one pair is slow: node 1 <-> node 2 at a quarter
of the others' rate (two racks behind a slow uplink), shaped per destination with ``htb``; and
node 3 behind a firewall that drops (does not refuse) what is sent to port 29601.

``hal doctor --port 29601`` across the nodes must name the pairs and the port that timed out,
within seconds, and the slow link; ``hal bench --pairs`` must name that link, call no node slow,
and, having re-paired both ends with other nodes, say the path between the two is the likelier
cause; both exit non-zero.  Started by torchrun in every node, as a user does.  Needs root
(network namespaces); skips with the reason.
"""
import json
from importlib import resources

import jsonschema
import pytest

from simnodes import cluster_or_skip

pytestmark = [pytest.mark.cluster]


@pytest.fixture(scope="module")
def cluster():
    with cluster_or_skip(4, link_rate={(1, 2): "250mbit"}, drop_ports={3: [29601]}, net=81) as c:
        yield c


def test_bench_pairs_names_the_slow_pair_and_no_slow_node(cluster):
    res = cluster.torchrun(["-m", "hal", "bench", "--pairs", "--size", "8M", "--json"], port=29563)
    assert res[0].returncode != 0, res[0].stderr[-3000:]
    rep = json.loads(res[0].stdout)
    jsonschema.validate(rep, json.loads(resources.files("hal").joinpath("data/bench-pairs.schema.json").read_text()))
    an = rep["analysis"]
    assert [(s["a"], s["b"]) for s in an["slow_links"]] == [(1, 2)], an["lines"]
    assert an["slow_nodes"] == [] and an["dead_links"] == []
    m = rep["matrix_gbps"]
    assert m[1][2] < 0.5 * an["median_gbps"] and min(m[0][3], m[0][1], m[2][3]) > 0.7 * an["median_gbps"]
    assert sorted(p["suspect"] for p in rep["repair"]["pairs"]) == [1, 2]
    assert rep["repair"]["confirmed_nodes"] == []
    assert "the path between node 1 (sim81-node1) and node 2 (sim81-node2)" in rep["repair"]["text"]
    assert rep["passed"] is False


def test_doctor_names_the_dropped_port_and_the_slow_link(cluster):
    res = cluster.torchrun(["-m", "hal", "doctor", "--json", "--port", "29601"], port=29565)
    assert res[0].stdout.strip(), res[0].stderr[-3000:]
    report = json.loads(res[0].stdout)
    checks = {c["name"]: c for c in report["checks"]}
    reach = checks["reachability"]
    assert reach["status"] == "FAIL", reach
    assert "node 3 (sim81-node3)" in reach["summary"] and "29601" in reach["summary"], reach["summary"]
    failed = reach["details"]["failed"]
    assert {(a["from"], a["to"], a["port"]) for a in failed} == {(n, 3, 29601) for n in (0, 1, 2)}, failed
    assert all(a["error"] == "timed out" for a in failed)
    assert "firewall drops" in json.dumps(reach) and reach["seconds"] < 15
    links = checks["links"]
    assert links["status"] == "FAIL" and "node 1 (sim81-node1) <-> node 2 (sim81-node2)" in links["summary"], links
    assert " is slow:" not in links["summary"]  # no node is called slow
    assert "the path between node 1 (sim81-node1) and node 2 (sim81-node2)" in links["summary"]
    assert report["exit_code"] == 2
