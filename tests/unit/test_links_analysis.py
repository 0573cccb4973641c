"""The node x node link analysis and the scale ladder's, on given matrices (no processes)."""
import itertools
import json
from importlib import resources

import jsonschema
import pytest

from hal.dist.bench import format_pairs, judge_pairs
from hal.dist.links import (SCHEMA_PAIRS, analyse_ladder, analyse_links, format_matrix, judge_repair,
                            pair_rounds, plan_repair)

LABELS = ["node 0 (a)", "node 1 (b)", "node 2 (c)", "node 3 (d)"]
F, S = 0.12, 0.03


def _matrix(n, value, slow=()):
    m = [[None if a == b else value for b in range(n)] for a in range(n)]
    for (a, b), v in slow:
        m[a][b] = m[b][a] = v
    return m


@pytest.mark.parametrize("n", range(1, 10))
def test_pair_rounds_meet_every_pair_once_in_disjoint_rounds(n):
    rounds = pair_rounds(n)
    assert len(rounds) == (0 if n < 2 else n - 1 if n % 2 == 0 else n)
    met = [p for r in rounds for p in r]
    assert sorted(met) == list(itertools.combinations(range(n), 2))  # every pair exactly once
    for r in rounds:
        nodes = [x for p in r for x in p]
        assert len(nodes) == len(set(nodes))  # a node is in at most one pair of a round
        assert len(r) == n // 2


def test_one_slow_node_is_named_with_its_links_and_figures():
    m = _matrix(4, F, slow=[((i, 3), S) for i in range(3)])
    an = analyse_links(m, LABELS)
    assert an["median_gbps"] == pytest.approx(F)  # one slow node does not drag the median down
    assert [s["text"] for s in an["slow_links"]] == [
        f"node {i} ({'abc'[i]}) <-> node 3 (d): 0.03 GB/s, 0.25x the median 0.12 GB/s" for i in range(3)]
    assert [s["node"] for s in an["slow_nodes"]] == [3]
    assert an["slow_nodes"][0]["text"].startswith("node 3 (d) is slow: 3 of its 3 links below 0.5x the median")
    assert (an["slowest_node"], an["fastest_node"]) == (3, 0)
    assert plan_repair(an) == [(3, 0)]  # the slowest re-paired with the fastest
    m[0][3] = m[3][0] = None
    assert plan_repair(analyse_links(m, LABELS, errors={(0, 3): "no answer"}))[0][0] == 3
    assert plan_repair(analyse_links(m, LABELS, errors={(0, 3): "no answer"}))[0][1] != 0  # not across it
    m[0][3] = m[3][0] = S
    rep = judge_repair([{"suspect": 3, "helper": 0, "gbps": 0.031, "error": None}], an, LABELS)
    assert rep["confirmed_nodes"] == [3] and "node 3 (d) confirmed" in rep["text"]


def test_one_slow_link_names_the_link_and_re_pairs_both_ends():
    m = _matrix(4, F, slow=[((1, 3), S)])
    an = analyse_links(m, LABELS)
    assert [(s["a"], s["b"], round(s["ratio"], 2)) for s in an["slow_links"]] == [(1, 3, 0.25)]
    assert an["slow_nodes"] == []
    plan = plan_repair(an)
    assert plan == [(1, 0), (3, 2)]  # each end with a different healthy node: one round
    rep = judge_repair([{"suspect": s, "helper": h, "gbps": F, "error": None} for s, h in plan], an, LABELS)
    assert rep["confirmed_nodes"] == []
    assert "the path between node 1 (b) and node 3 (d)" in rep["text"]


def test_three_nodes_with_one_slow_node_still_name_it():
    m = _matrix(3, F, slow=[((0, 2), S), ((1, 2), S)])
    an = analyse_links(m, LABELS)
    assert [s["node"] for s in an["slow_nodes"]] == [2]
    assert {(s["a"], s["b"]) for s in an["slow_links"]} == {(0, 2), (1, 2)}


def test_equal_links_are_ok_and_pass_the_gates():
    an = analyse_links(_matrix(4, F), LABELS)
    assert an["slow_links"] == an["slow_nodes"] == an["dead_links"] == [] and an["lines"] == []
    assert plan_repair(an) == []
    rep = judge_pairs(_report(_matrix(4, F)))
    assert rep["passed"] and [g["gate"] for g in rep["gates"]] == ["links_complete", "min_link_fraction"]


def test_a_dead_link_and_a_floor_fail_the_gates_naming_the_link():
    m = _matrix(4, F)
    m[0][2] = m[2][0] = None
    rep = judge_pairs(_report(m, errors={(0, 2): "no answer within 30 s"}, min_gbps=0.5))
    gates = {g["gate"]: g for g in rep["gates"]}
    assert not rep["passed"]
    assert gates["links_complete"]["detail"] == "node 0 (a) <-> node 2 (c): failed: no answer within 30 s"
    assert not gates["min_link_bw"]["passed"]
    assert gates["min_link_bw"]["detail"].startswith("node 0 (a) <-> node 1 (b): 0.12 GB/s, below the minimum 0.5 GB/s")
    text = format_pairs(rep)
    assert "FAILED" in text and "# gate links_complete   : FAIL" in text


def test_pairs_report_validates_against_the_published_schema():
    rep = judge_pairs(_report(_matrix(4, F, slow=[((i, 3), S) for i in range(3)])))
    schema = json.loads(resources.files("hal").joinpath("data/bench-pairs.schema.json").read_text())
    jsonschema.validate(json.loads(json.dumps(rep)), schema)
    assert not rep["passed"]
    assert "0.25x the median 0.12 GB/s" in format_pairs(rep)


def test_ladder_names_the_step_and_the_node_that_joined():
    steps = [{"nodes": 2, "busbw_gbps": 0.12}, {"nodes": 3, "busbw_gbps": 0.11}, {"nodes": 4, "busbw_gbps": 0.03}]
    an = analyse_ladder(steps, LABELS)
    assert an["fell"]["nodes"] == 4 and an["fell"]["added_node"] == 3
    assert an["text"] == ("bus bandwidth fell at 4 nodes, when node 3 (d) joined: 0.03 GB/s, "
                          "0.25x the best of 2-3 nodes 0.12 GB/s")


def test_flat_ladder_and_one_step_do_not_fall():
    flat = analyse_ladder([{"nodes": k, "busbw_gbps": 0.1 + 0.01 * k} for k in (2, 3, 4)], LABELS)
    assert flat["fell"] is None and flat["text"].startswith("no step fell below 0.5x")
    one = analyse_ladder([{"nodes": 2, "busbw_gbps": 0.1}], LABELS)
    assert one["fell"] is None and "needs 3 or more nodes" in one["text"]
    broken = analyse_ladder([{"nodes": 2, "busbw_gbps": 0.1},
                             {"nodes": 3, "busbw_gbps": None, "error": "no answer within 30 s"}], LABELS)
    assert broken["fell"]["added_node"] == 2 and "node 2 (c) joined: no answer" in broken["text"]


def _report(matrix, errors=None, min_gbps=None):
    n = len(matrix)
    an = analyse_links(matrix, LABELS[:n], 0.5, min_gbps, errors)
    rounds = pair_rounds(n)
    pairs = [{"a": a, "b": b, "round": r, "gbps": matrix[a][b], "times_s": [0.1],
              "error": (errors or {}).get((a, b))} for r, ps in enumerate(rounds) for a, b in ps]
    rep = {"schema": SCHEMA_PAIRS, "nnodes": n, "world_size": n, "hosts": list("abcd"[:n]),
           "labels": LABELS[:n], "backend": "cpu:gloo", "device": "cpu",
           "config": {"size": 1 << 20, "warmup": 1, "iters": 3, "timeout_s": 30.0, "fraction": 0.5,
                      "min_gbps": min_gbps},
           "rounds": [[list(p) for p in ps] for ps in rounds], "pairs": pairs, "matrix_gbps": matrix,
           "analysis": an, "repair": None, "seconds": 1.0}
    assert len(format_matrix(rep)) == n + 1
    return rep
