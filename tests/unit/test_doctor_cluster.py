"""What the doctor across nodes concludes from the nodes' records: software, clocks, reachability,
transport, the report's schema; and the pieces that touch this machine (connections, interfaces)."""
import json
import socket
import time

import jsonschema
import pytest

from hal.doctor import cluster, cluster_checks as cc, netif

label = cc.node_label_of(["host-a", "host-b", "host-c", "host-d"])


def _node(torch="2.13.0", **extra):
    sw = {"torch": torch, "hal": "0.1.0", "backend": "cpu", "device_type": "cpu", "device_count": 1, **extra}
    return {"software": sw, "local": [{"name": "versions", "status": "OK", "summary": "fine"}]}


def test_software_names_the_one_node_with_another_torch():
    res = cc.software({0: _node(), 1: _node(), 2: _node("2.12.0"), 3: _node()}, label)
    assert res["status"] == "FAIL"
    assert "node 2 (host-c) has torch 2.12.0, the others 2.13.0" in res["summary"]
    assert [d["node"] for d in res["details"]["differ"]] == [2]
    assert res["fix"]


def test_software_with_two_nodes_names_both_when_there_is_no_majority():
    res = cc.software({0: _node(), 1: _node("2.12.0")}, label)
    assert res["status"] == "FAIL"
    assert "the nodes differ in torch: node 0 (host-a) 2.13.0, node 1 (host-b) 2.12.0" in res["summary"]


def test_software_driver_or_device_count_difference_is_a_warning():
    nodes = {0: _node(driver="550.54"), 1: _node(driver="550.54"), 2: _node(driver="535.10")}
    nodes[1]["software"]["device_count"] = 7
    res = cc.software(nodes, label)
    assert res["status"] == "WARN"
    assert "node 2 (host-c) has driver 535.10" in res["summary"]
    assert "node 1 (host-b) has device_count 7" in res["summary"]


def test_software_same_everywhere_and_missing_node():
    ok = cc.software({0: _node(), 1: _node()}, label)
    assert ok["status"] == "OK" and "same on 2 nodes: torch 2.13.0" in ok["summary"]
    gone = cc.software({0: _node(), 1: _node()}, label, missing=[3])
    assert gone["status"] == "FAIL" and "node 3 (host-d) did not post its versions" in gone["summary"]


def test_software_names_a_local_check_that_failed_but_leaves_transport_to_its_check():
    n = _node()
    n["local"] = [{"name": "devices", "status": "FAIL", "summary": "cuda: no device visible"},
                  {"name": "transport", "status": "WARN", "summary": "TCP sockets between nodes"}]
    res = cc.software({0: _node(), 1: n}, label)
    assert res["status"] == "FAIL"
    assert "node 1 (host-b): devices FAIL: cuda: no device visible" in res["summary"]
    assert "TCP" not in res["summary"]


def _samples(offset, delays):
    """Round trips of a node whose clock is rank 0's + offset, with (out, back) delays."""
    out, t = [], 1000.0
    for d_out, d_back in delays:
        t1 = t + offset
        t2 = t + d_out
        t4 = t + d_out + d_back + offset
        out.append((t1, t2, t4))
        t += 1
    return out


def test_clock_offset_keeps_the_smallest_round_trip():
    # asymmetric slow trips mislead; the fast symmetric one gives the offset
    est = cc.clock_offset(_samples(0.25, [(0.2, 0.01), (0.001, 0.001), (0.05, 0.3)]))
    assert est["offset_s"] == pytest.approx(0.25, abs=1e-9)
    assert est["round_trip_s"] == pytest.approx(0.002) and est["bound_s"] == pytest.approx(0.001)
    # the true offset always lies within the bound of the kept sample
    est = cc.clock_offset(_samples(-0.4, [(0.03, 0.001)]))
    assert abs(est["offset_s"] - (-0.4)) <= est["bound_s"] + 1e-12
    assert cc.clock_offset([]) is None


def test_clocks_thresholds():
    def est(off, bound=0.001):
        return {"offset_s": off, "round_trip_s": 2 * bound, "bound_s": bound, "samples": 8}

    assert cc.clocks({0: est(0), 1: est(0.05)}, label)["status"] == "OK"
    warn = cc.clocks({0: est(0), 1: est(0.3)}, label)
    assert warn["status"] == "WARN" and "node 1 (host-b) is 0.300 s ahead of rank 0" in warn["summary"]
    fail = cc.clocks({0: est(0), 1: est(0.01), 2: est(-1.5)}, label)
    assert fail["status"] == "FAIL" and "node 2 (host-c) is 1.500 s behind rank 0" in fail["summary"]
    # an offset the round trip can explain is not held against the node
    assert cc.clocks({0: est(0), 1: est(0.15, bound=0.1)}, label)["status"] == "OK"
    gone = cc.clocks({0: est(0)}, label, missing=[1])
    assert gone["status"] == "FAIL" and "node 1 (host-b) did not answer" in gone["summary"]


def _try(frm, to, port, ok=True, error="", what="ephemeral"):
    return {"from": frm, "to": to, "address": f"10.0.0.{to}", "port": port, "what": what, "ok": ok,
            "error": error, "seconds": 0.001}


def test_reachability_names_the_pair_and_port():
    tries = [_try(0, 1, 40001), _try(1, 0, 40000), _try(0, 2, 29600, False, "refused", "--port 29600"),
             _try(1, 2, 29600, False, "timed out", "--port 29600")]
    res = cc.reachability(tries, label)
    assert res["status"] == "FAIL"
    assert "node 0 (host-a) -> node 2 (host-c) 10.0.0.2:29600 (--port 29600): refused" in res["summary"]
    assert "node 1 (host-b) -> node 2 (host-c) 10.0.0.2:29600 (--port 29600): timed out" in res["summary"]
    assert "refused" in res["fix"] and "timed out" in res["fix"]
    ok = cc.reachability(tries[:2], label)
    assert ok["status"] == "OK" and "2 connections (2 pairs" in ok["summary"]


def test_reachability_loopback_address_across_hosts():
    res = cc.reachability([_try(0, 1, 1)], label, loopback=[1])
    assert res["status"] == "FAIL" and "node 1 (host-b) would be reached at a loopback address" in res["summary"]
    assert "GLOO_SOCKET_IFNAME" in res["fix"]


def _tr(kind, status, iface):
    return {"transport": {"status": status, "summary": f"{kind} sockets", "details": {"transport": kind}},
            "collective": {"interface": iface, "address": "10.0.0.1", "how": "route"}}


def test_transport_warns_when_nodes_disagree():
    same = cc.transport({0: _tr("RDMA", "OK", "ib0"), 1: _tr("RDMA", "OK", "ib0")}, label)
    assert same["status"] == "OK" and "node 1 (host-b) RDMA via ib0" in same["summary"]
    odd = cc.transport({0: _tr("RDMA", "OK", "ib0"), 1: _tr("RDMA", "OK", "ib0"), 2: _tr("RDMA", "OK", "eth0")},
                       label)
    assert odd["status"] == "WARN"
    assert "nodes disagree on the interface: node 2 (host-c) interface eth0; the others ib0" in odd["summary"]
    tcp = cc.transport({0: _tr("TCP", "WARN", "eth0"), 1: _tr("TCP", "WARN", "eth0")}, label)
    assert tcp["status"] == "WARN" and tcp["summary"].startswith("every node: TCP sockets")


def test_process_group_names_the_failing_rank():
    lab = lambda r: f"rank {r} ({label(r // 2)})"  # noqa: E731
    res = cc.process_group({0: None, 1: None, 2: "DistError: timed out", 3: None}, 4, lab, 1.0)
    assert res["status"] == "FAIL" and "rank 2 (node 1 (host-b)): DistError: timed out" in res["summary"]
    assert cc.process_group({0: None, 1: None}, 3, lab, 1.0)["summary"] == "rank 2 (node 1 (host-b)) did not report"


def test_report_follows_the_published_schema_and_reads_as_text():
    schema = json.loads(cluster.schema_path().read_text())
    checks = [{"name": "software", **cc.software({0: _node(), 1: _node("2.12.0")}, label), "seconds": 1.0},
              {"name": "links", **cc.result("SKIP", "not available"), "seconds": 0.0}]
    rep = {"schema": cluster.SCHEMA, **cc.overall(checks), "time_unix": time.time(), "seconds": 2.0,
           "world_size": 2, "nnodes": 2, "nproc_per_node": 1, "timeout_s": 20.0,
           "rendezvous": {"master_addr": "host-a", "master_port": "29500", "endpoint": "host-a:29400"},
           "ports": [], "checks": checks,
           "nodes": [{"node": n, "host": h, "leader_rank": n, "address": "10.0.0.1", "interface": "eth0",
                      "software": {"torch": "2.13.0", "backend": "cpu"}, "test_hooks": {}, "posted": True}
                     for n, h in enumerate(["host-a", "host-b"])]}
    jsonschema.validate(json.loads(json.dumps(rep)), schema)
    assert rep["exit_code"] == 2
    text = cluster.format_text(rep)
    assert "FAIL  software" in text and "fix: install the same torch" in text and "(exit 2)" in text


def test_connect_to_a_closed_port_is_refused_at_once():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    ok, err, secs = cluster.try_connect("127.0.0.1", port)
    assert (ok, err) == (False, "refused") and secs < 2.0
    lis = cluster._Listeners("127.0.0.1", [])
    try:
        assert cluster.try_connect("127.0.0.1", lis.offered[0]["port"])[0]
    finally:
        lis.close()


def test_interface_variable_selects_the_address(monkeypatch):
    addrs = netif.interface_addresses()
    assert addrs.get("lo") == "127.0.0.1"
    got = netif.collective_address("gloo", None, {"GLOO_SOCKET_IFNAME": "lo"})
    assert (got["interface"], got["address"], got["how"]) == ("lo", "127.0.0.1", "GLOO_SOCKET_IFNAME=lo")
    bad = netif.collective_address("nccl", None, {"NCCL_SOCKET_IFNAME": "nosuch0"})
    assert bad["address"] is None and "matches no interface" in bad["how"]
    assert netif._match("^lo,docker", ["lo", "docker0", "eth0"]) == "eth0"
    assert netif._match("=eth0", ["eth0", "eth01"]) == "eth0"


def test_multi_node_detection_and_endpoint():
    assert cluster.is_multi_node({"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"})
    assert not cluster.is_multi_node({"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"})
    assert not cluster.is_multi_node({})
    assert cluster.rendezvous_endpoint({cluster.ENV_RDZV_ENDPOINT: "h:1"}) == "h:1"
    assert cluster._split_endpoint("[::1]:29400") == ("::1", 29400)


def test_cluster_options_are_usage_errors_where_they_do_not_apply(monkeypatch, capsys):
    from hal.cli import main

    for var in ("WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    assert main(["doctor", "--port", "29500"]) == 2
    assert "--port is for the doctor across nodes" in capsys.readouterr().err
    assert main(["doctor", "--nnodes", "2"]) == 2
    assert "--nnodes N needs --rdzv-endpoint HOST:PORT" in capsys.readouterr().err
    assert main(["doctor", "--nnodes", "2", "--rdzv-endpoint", "h:1", "--check", "devices"]) == 2
    assert "--every, --check, --data and --out are for one node" in capsys.readouterr().err
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert main(["doctor", "--check", "devices"]) == 2
    assert "across nodes the doctor runs its cluster checks" in capsys.readouterr().err
    assert main(["doctor", "--timeout", "devices=3"]) == 2
    assert "--timeout takes one number of seconds" in capsys.readouterr().err


def test_reachability_names_a_node_without_an_address_for_its_collective():
    res = cc.reachability([_try(1, 0, 1)], label, unaddressed={1: "GLOO_SOCKET_IFNAME=ib9 matches no interface"})
    assert res["status"] == "FAIL"
    assert "node 1 (host-b) has no address for its collective: GLOO_SOCKET_IFNAME=ib9" in res["summary"]
    assert "interface variable" in res["fix"]


def test_transport_with_two_nodes_names_both_when_they_disagree():
    res = cc.transport({0: _tr("TCP", "OK", None), 1: _tr("TCP", "OK", "lo")}, label)
    assert res["status"] == "WARN"
    assert "nodes disagree on the interface: node 0 (host-a) none, node 1 (host-b) lo" in res["summary"]
