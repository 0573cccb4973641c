"""4 simulated nodes where every node is fine but one pair is slow: node 1 <-> node 2 at a quarter
of the others' rate (two racks behind a slow uplink), shaped per destination with ``htb``.

``hal bench --pairs`` across the nodes, started by torchrun in every node, must name that link,
call no node slow, and, having re-paired both ends with other nodes, say the path between the
two is the likelier cause; it exits non-zero.  Needs root (network namespaces); skips with the
reason.
"""
import json
from importlib import resources

import jsonschema
import pytest

from simnodes import SimCluster, unavailable

pytestmark = [pytest.mark.cluster]


@pytest.fixture(scope="module")
def cluster():
    why = unavailable()
    if why:
        pytest.skip(why)
    with SimCluster(4, link_rate={(1, 2): "250mbit"}, net=79) as c:
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
    assert "the path between node 1 (sim79-node1) and node 2 (sim79-node2)" in rep["repair"]["text"]
    assert rep["passed"] is False
