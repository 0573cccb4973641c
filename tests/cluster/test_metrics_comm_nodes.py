"""Acceptance (issue 22): DDP across 2 simulated nodes with a slow link -> ``hal metrics summary``
says communication-bound; the same job over fast links does not.

Two network namespaces joined by a bridge, each link shaped with ``tbf`` on both ends of its
veth pair (1 Gbit/s; the slow run puts node 1's link at 50 Mbit/s), ``torchrun`` with a static
rendezvous on node 0's address in each, gloo on the namespace's interface.  Needs root,
``ip`` and ``tc``; skips with the reason elsewhere.  About 10-20 s per run on 2 cores.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hal.cli import main

pytestmark = [pytest.mark.cluster]
ROOT = Path(__file__).resolve().parents[2]
JOB = Path(__file__).with_name("_comm_ddp_train.py")


def _sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=30)


def _need():
    if os.geteuid() != 0:
        pytest.skip("needs root for network namespaces (ip netns)")
    for tool in ("ip", "tc", "torchrun"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool} on PATH")


class Nodes:
    """Two namespaces ``<tag>0`` and ``<tag>1`` on a bridge; node 1's link at ``slow`` (tc rate)."""

    def __init__(self, slow: str, fast: str = "1gbit"):
        self.tag = f"hm{os.getpid() % 100000}"
        self.ns = [f"{self.tag}n0", f"{self.tag}n1"]
        self.rates = [fast, slow]
        self.bridge = f"{self.tag}br"

    def __enter__(self):
        try:
            _sh("ip", "link", "add", self.bridge, "type", "bridge")
            _sh("ip", "link", "set", self.bridge, "up")
            for i, (ns, rate) in enumerate(zip(self.ns, self.rates)):
                host = f"{self.tag}v{i}"
                _sh("ip", "netns", "add", ns)
                _sh("ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", ns)
                _sh("ip", "link", "set", host, "master", self.bridge, "up")
                _sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"10.77.0.{i + 1}/24", "dev", "eth0")
                _sh("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
                _sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
                shape = ("root", "tbf", "rate", rate, "burst", "256kb", "latency", "50ms")
                _sh("tc", "qdisc", "add", "dev", host, *shape)
                _sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth0", *shape)
        except subprocess.CalledProcessError as e:
            self.__exit__()
            pytest.skip(f"cannot build simulated nodes here: {' '.join(e.cmd)}: {e.stderr.strip()}")
        return self

    def __exit__(self, *exc):
        for ns in self.ns:
            _sh("ip", "netns", "del", ns, check=False)
        _sh("ip", "link", "del", self.bridge, check=False)

    def train(self, folder: Path, steps: int = 8):
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               "HAL_BACKEND": "cpu", "GLOO_SOCKET_IFNAME": "eth0"}
        procs = [subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
             "--nproc-per-node", "1", "--node-rank", str(i), "--rdzv-backend", "static", "--master-addr",
             "10.77.0.1", "--master-port", "29533", str(JOB), str(folder), str(steps)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i, ns in enumerate(self.ns)]
        outs = []
        try:
            for p in procs:
                outs.append(p.communicate(timeout=240)[0])
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        assert all(p.returncode == 0 for p in procs), "\n".join(o[-3000:] for o in outs)
        return [str(folder / f"comm.rank{r}.jsonl") for r in (0, 1)]


def test_a_slow_link_makes_ddp_communication_bound(tmp_path, capsys):
    _need()
    with Nodes(slow="50mbit") as nodes:
        files = nodes.train(tmp_path / "slow")
    assert main(["metrics", "summary", *files]) == 1
    out = capsys.readouterr().out
    assert "communication-bound: rank(s) 0, 1 waited for collectives more than 30% of their step time" in out
    assert "hal bench --pairs" in out


def test_the_same_job_over_fast_links_is_not(tmp_path, capsys):
    _need()
    with Nodes(slow="1gbit") as nodes:
        files = nodes.train(tmp_path / "fast")
    main(["metrics", "summary", *files, "--json"])
    rep = json.loads(capsys.readouterr().out)
    assert rep["comm_bound_ranks"] == [], [r["comm"] for r in rep["runs"]]
    assert all(r["comm"]["steps"] >= 7 and r["comm"]["comm_time_s"] > 0 for r in rep["runs"])
