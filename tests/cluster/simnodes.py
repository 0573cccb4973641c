"""Simulated nodes on one machine: one network namespace per node, joined by a bridge.

Each node has its own address (10.77.<net>.<i+1>/24 on an interface called ``eth0``, the same
name on every node as on a real cluster), its own host name (``unshare --uts``), and an
``/etc/hosts`` of its own that resolves every node's name (``ip netns exec`` binds
``/etc/netns/<ns>/hosts`` over ``/etc/hosts`` in a private mount namespace; the machine's own
file is untouched).  Links are shaped with ``tbf`` on both ends of a node's veth pair:
``rate`` for every node, ``node_rate={i: rate}`` for slower ones (``netem`` is not available
here, so links get a rate, not a latency).  ``link_rate={(i, j): rate}`` slows one pair only,
as two racks joined by a slow uplink would: each end's traffic to the other goes through an
``htb`` class of that rate (a ``u32`` filter on the peer's address), the rest at the node's
rate.  ``drop_ports={i: [port, ...]}`` is a firewall on node ``i`` that drops (does not refuse)
what is sent to those ports: on the bridge's side of its link they go to an ``htb`` class whose
``tbf`` bucket is smaller than any packet, which ``tbf`` drops (this kernel has no ``iptables``
and no tc actions).  Only addresses inside these namespaces are used.

::

    with SimCluster(4, node_rate={3: "250mbit"}) as c:
        results = c.torchrun(["-m", "hal", "doctor", "--json"])
    with SimCluster(4, link_rate={(1, 2): "250mbit"}) as c:   # one slow pair, every node fine
        ...

Everything is removed on exit, also when the body raises, and stale leftovers of an earlier
run (same name prefix) are removed first.  ``python tests/cluster/simnodes.py`` is the
demonstration ``make cluster-demo`` runs.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "halsim"


def _sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=30)


def unavailable() -> Optional[str]:
    """Why simulated nodes cannot be built here (None when they can)."""
    if os.geteuid() != 0:
        return "needs root for network namespaces (ip netns)"
    for tool in ("ip", "tc", "unshare", "torchrun"):
        if shutil.which(tool) is None:
            return f"needs {tool} on PATH"
    return None


@contextmanager
def cluster_or_skip(*args, **kwargs) -> Iterator["SimCluster"]:
    """``SimCluster(*args, **kwargs)`` for a test, or the test skipped with the reason it cannot
    be built here."""
    why = unavailable()
    if why:
        import pytest
        pytest.skip(why)
    with SimCluster(*args, **kwargs) as c:
        yield c


@dataclass
class Node:
    """One simulated node: its namespace, host name and address."""

    index: int
    ns: str
    name: str
    addr: str
    rate: str


class SimCluster:
    """``n`` simulated nodes; see the module docstring."""

    def __init__(self, n: int, rate: str = "1gbit", node_rate: Optional[Dict[int, str]] = None, net: int = 77,
                 link_rate: Optional[Dict[Tuple[int, int], str]] = None,
                 drop_ports: Optional[Dict[int, Sequence[int]]] = None):
        if not 2 <= n <= 16:
            raise ValueError(f"n={n}: simulate 2 to 16 nodes")
        bad = [i for i in (node_rate or {}) if not 0 <= i < n]
        if bad:
            raise ValueError(f"node_rate names node(s) {bad} outside 0..{n - 1}")
        bad_links = [p for p in (link_rate or {}) if len(p) != 2 or p[0] == p[1] or not all(0 <= i < n for i in p)]
        if bad_links:
            raise ValueError(f"link_rate names pair(s) {bad_links} that are not two different nodes of 0..{n - 1}")
        bad = [i for i in (drop_ports or {}) if not 0 <= i < n]
        if bad:
            raise ValueError(f"drop_ports names node(s) {bad} outside 0..{n - 1}")
        self.drop_ports = {i: [int(p) for p in ports] for i, ports in (drop_ports or {}).items()}
        #: node -> {peer: rate} for the pairs of ``link_rate``, both ends
        self.peer_rate: Dict[int, Dict[int, str]] = {}
        for (a, b), r in (link_rate or {}).items():
            self.peer_rate.setdefault(a, {})[b] = r
            self.peer_rate.setdefault(b, {})[a] = r
        self.tag = f"{PREFIX}{net}"
        self.bridge = f"{self.tag}br"
        self.nodes = [Node(i, f"{self.tag}n{i}", f"sim{net}-node{i}", f"10.77.{net}.{i + 1}",
                           (node_rate or {}).get(i, rate)) for i in range(n)]

    # -- building and removing ---------------------------------------------------------------
    def remove(self) -> None:
        """Remove this cluster's namespaces, bridge and host files (also stale ones)."""
        listed = _sh("ip", "netns", "list", check=False).stdout.split()
        for ns in {w for w in listed if w.startswith(self.tag)} | {nd.ns for nd in self.nodes}:
            _sh("ip", "netns", "del", ns, check=False)
            shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
        _sh("ip", "link", "del", self.bridge, check=False)

    def __enter__(self) -> "SimCluster":
        self.remove()
        hosts = "127.0.0.1 localhost\n" + "".join(f"{nd.addr} {nd.name}\n" for nd in self.nodes)
        try:
            _sh("ip", "link", "add", self.bridge, "type", "bridge")
            _sh("ip", "link", "set", self.bridge, "up")
            for nd in self.nodes:
                host_end = f"{self.tag}v{nd.index}"
                _sh("ip", "netns", "add", nd.ns)
                Path(f"/etc/netns/{nd.ns}").mkdir(parents=True, exist_ok=True)
                Path(f"/etc/netns/{nd.ns}/hosts").write_text(hosts)
                _sh("ip", "link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", nd.ns)
                _sh("ip", "link", "set", host_end, "master", self.bridge, "up")
                for cmd in (("ip", "addr", "add", f"{nd.addr}/24", "dev", "eth0"),
                            ("ip", "link", "set", "eth0", "up"), ("ip", "link", "set", "lo", "up")):
                    _sh("ip", "netns", "exec", nd.ns, *cmd)
                shape = ("root", "tbf", "rate", nd.rate, "burst", "256kb", "latency", "50ms")
                if nd.index in self.drop_ports:
                    self._firewall(nd, host_end)
                else:
                    _sh("tc", "qdisc", "add", "dev", host_end, *shape)
                if nd.index in self.peer_rate:
                    self._shape_pairs(nd)
                else:
                    _sh("ip", "netns", "exec", nd.ns, "tc", "qdisc", "add", "dev", "eth0", *shape)
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def _firewall(self, nd: Node, host_end: str) -> None:
        """What the bridge sends to ``nd``: its own rate, the ``drop_ports`` dropped."""
        def tc(*args):
            _sh("tc", *args)
        tc("qdisc", "add", "dev", host_end, "root", "handle", "1:", "htb", "default", "1")
        tc("class", "add", "dev", host_end, "parent", "1:", "classid", "1:1", "htb", "rate", nd.rate)
        tc("class", "add", "dev", host_end, "parent", "1:", "classid", "1:2", "htb", "rate", "8kbit")
        # a bucket of 16 bytes: every packet is larger, and tbf drops what can never fit
        tc("qdisc", "add", "dev", host_end, "parent", "1:2", "handle", "20:", "tbf", "rate", "8kbit",
           "burst", "16", "limit", "16")
        for port in self.drop_ports[nd.index]:
            tc("filter", "add", "dev", host_end, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
               "match", "ip", "dst", f"{nd.addr}/32", "match", "ip", "dport", str(port), "0xffff", "flowid", "1:2")

    def _shape_pairs(self, nd: Node) -> None:
        """``nd``'s sending side: ``htb``, its own rate by default, each slow peer's address in a
        class of that pair's rate."""
        def tc(*args):
            _sh("ip", "netns", "exec", nd.ns, "tc", *args)
        tc("qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "1")
        tc("class", "add", "dev", "eth0", "parent", "1:", "classid", "1:1", "htb", "rate", nd.rate)
        for peer, rate in sorted(self.peer_rate[nd.index].items()):
            cls = f"1:{10 + peer}"
            tc("class", "add", "dev", "eth0", "parent", "1:", "classid", cls, "htb", "rate", rate)
            tc("filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
               "match", "ip", "dst", f"{self.nodes[peer].addr}/32", "flowid", cls)

    # -- running -----------------------------------------------------------------------------
    def argv(self, i: int, argv: Sequence[str]) -> List[str]:
        """``argv`` as run inside node ``i`` (its namespace, host name and hosts file)."""
        nd = self.nodes[i]
        return ["ip", "netns", "exec", nd.ns, "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', nd.name, *argv]

    def env(self, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                "HAL_BACKEND": os.environ.get("HAL_BACKEND", "cpu"), "GLOO_SOCKET_IFNAME": "eth0",
                **(extra or {})}

    def torchrun(self, args: Sequence[str], nproc_per_node: int = 1, port: int = 29555,
                 env: Optional[Dict[int, Dict[str, str]]] = None, timeout: float = 300,
                 grace: float = 10.0) -> List[subprocess.CompletedProcess]:
        """``torchrun --nnodes N --rdzv-backend c10d --rdzv-endpoint <node 0>:port args`` in every node.

        Returns each node's result (exit code, stdout, stderr).  Once one node has exited non-zero
        the others get ``grace`` seconds before they are killed (torchrun's exit barrier would
        otherwise keep them for minutes).
        """
        import time

        cmd = ["torchrun", "--nnodes", str(len(self.nodes)), "--nproc-per-node", str(nproc_per_node),
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{self.nodes[0].name}:{port}", *args]
        procs = [subprocess.Popen(self.argv(nd.index, cmd), env=self.env((env or {}).get(nd.index)),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
                 for nd in self.nodes]
        outs: Dict[int, tuple] = {}
        deadline, failed_at = time.monotonic() + timeout, None
        try:
            import threading

            def collect(k, p):
                outs[k] = p.communicate()
            threads = [threading.Thread(target=collect, args=(k, p), daemon=True) for k, p in enumerate(procs)]
            for t in threads:
                t.start()
            while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
                if failed_at is None and any(p.poll() not in (None, 0) for p in procs):
                    failed_at = time.monotonic()
                if failed_at is not None and time.monotonic() - failed_at > grace:
                    break
                time.sleep(0.2)
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, 9)
                p.wait()
            for t in threads:
                t.join(5)
        return [subprocess.CompletedProcess(cmd, p.returncode, *outs.get(k, ("", ""))) for k, p in enumerate(procs)]


def _demo() -> int:
    why = unavailable()
    if why:
        print(f"cluster demo: cannot simulate nodes here: {why}")
        return 0
    print("4 simulated nodes, every link 1 Gbit/s except node 3's at 250 Mbit/s\n")
    with SimCluster(4, node_rate={3: "250mbit"}) as c:
        for title, args in (("hal doctor across the 4 nodes", ["-m", "hal", "doctor"]),
                            ("hal bench --pairs --ladder (node x node links)",
                             ["-m", "hal", "bench", "--pairs", "--ladder", "--size", "8M"])):
            print(f"$ torchrun --nnodes 4 ... {' '.join(args)}   # {title}")
            res = c.torchrun(args)
            print(res[0].stdout)
            print(f"exit codes per node: {[r.returncode for r in res]}\n")
    return 0


if __name__ == "__main__":
    sys.exit(_demo())
