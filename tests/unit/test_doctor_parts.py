"""hal doctor's pure parts: version tables, transport evidence, stragglers, data paths."""
import os

import pytest

from hal.doctor import compat
from hal.doctor.checks import data, find_stragglers
from hal.doctor.transport import detect


def test_version_parsing():
    assert compat.vtuple("2.7.1.post8+cpu") == (2, 7, 1)
    assert compat.vtuple("v12.4") == (12, 4)
    assert compat.same_release("2.7.1+cu128", "2.7.1")
    assert compat.same_release("6.3.42131", "6.3.x", 2)


def test_listed_torch_npu_pair_is_ok_and_an_unlisted_one_warns_with_source():
    ok = compat.check("ascend", {"torch": "2.7.1", "torch_npu": "2.7.1.post8"})
    assert [f["status"] for f in ok] == ["OK"] and "Ascend/pytorch" in ok[0]["source"]
    bad = compat.check("ascend", {"torch": "2.8.0", "torch_npu": "2.7.1.post8"})
    assert bad[0]["status"] == "WARN" and "not 2.8.0" in bad[0]["message"]


def test_cuda_driver_too_old_for_runtime_fails():
    f = compat.check("cuda", {"torch": "2.9.0", "runtime": "13.0", "driver": "12.4", "driver_branch": "550.54.15"})
    assert [x["status"] for x in f] == ["FAIL", "FAIL"]
    assert "below the minimum >=580" in f[0]["message"]
    good = compat.check("cuda", {"torch": "2.9.0", "runtime": "12.8", "driver": "12.8", "driver_branch": "570.1"})
    assert [x["status"] for x in good] == ["OK", "OK"]


def test_cpu_has_no_table_and_is_ok():
    assert [f["status"] for f in compat.check("cpu", {"torch": "2.13.0"})] == ["OK"]


def _ib(root, name, state, link):
    port = root / "sys/class/infiniband" / name / "ports" / "1"
    port.mkdir(parents=True)
    (port / "state").write_text(state + "\n")
    (port / "link_layer").write_text(link + "\n")
    (port / "rate").write_text("200 Gb/sec (4X HDR)\n")


def test_transport_rdma_when_an_active_port_exists(tmp_path):
    _ib(tmp_path, "mlx5_0", "4: ACTIVE", "InfiniBand")
    _ib(tmp_path, "mlx5_1", "4: ACTIVE", "Ethernet")
    r = detect(root=tmp_path, env={})
    assert r["status"] == "OK" and r["details"]["transport"] == "RDMA"
    assert "mlx5_0/1 (InfiniBand" in r["summary"] and "mlx5_1/1 (RoCE" in r["summary"]


def test_transport_warns_when_rdma_is_switched_off(tmp_path):
    _ib(tmp_path, "mlx5_0", "4: ACTIVE", "InfiniBand")
    r = detect(root=tmp_path, env={"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "eth0"})
    assert r["status"] == "WARN" and "NCCL_IB_DISABLE" in r["summary"]
    assert "NCCL_SOCKET_IFNAME=eth0" in r["details"]["evidence"]


def test_transport_tcp_is_fine_on_one_node_and_a_warning_across_nodes(tmp_path):
    assert detect(root=tmp_path, env={})["status"] == "OK"
    multi = detect(root=tmp_path, env={"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"})
    assert multi["status"] == "WARN" and "fraction of its bandwidth" in multi["summary"]
    _ib(tmp_path, "mlx5_0", "1: DOWN", "InfiniBand")
    down = detect(root=tmp_path, env={"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"})
    assert "no port ACTIVE" in down["summary"]


def test_stragglers_are_ranks_slower_than_twice_the_median():
    assert find_stragglers([1.0, 1.1, 0.9, 2.5]) == [3]
    assert find_stragglers([1.0, 1.1, 0.9, 1.9]) == []
    assert find_stragglers([1.0, 5.0]) == []  # two ranks have no meaningful median


def test_data_paths(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"x" * 10)
    assert data([str(tmp_path), str(tmp_path / "a.bin")])["status"] == "OK"
    missing = data([str(tmp_path / "nope")])
    assert missing["status"] == "FAIL" and "nope: does not exist" in missing["summary"]
    assert data([])["status"] == "SKIP"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_data_path_fails(tmp_path):
    f = tmp_path / "secret"
    f.write_text("x")
    f.chmod(0)
    assert "not readable" in data([str(f)])["summary"]


def test_a_torch_older_than_hals_floor_fails_the_versions_check(monkeypatch):
    from hal.doctor import compat

    monkeypatch.setattr(compat, "torch_floor", lambda: "2.4")
    old = compat.check("cpu", {"torch": "2.3.1+cpu"})
    assert old[0]["status"] == "FAIL" and "torch 2.3.1+cpu is older than hal's floor 2.4" in old[0]["message"]
    assert all(f["status"] != "FAIL" for f in compat.check("cpu", {"torch": "2.4.1+cu121"}))


def test_hals_floor_is_read_from_its_own_requirement():
    from importlib import metadata

    from hal.doctor import compat

    declared = [r for r in metadata.requires("hal") if r.startswith("torch>=")]
    assert declared and compat.torch_floor() == declared[0].split(">=")[1].split(";")[0].strip()
