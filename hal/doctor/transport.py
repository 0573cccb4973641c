"""Which network transport the collective library will use between nodes: RDMA or TCP sockets.

Evidence: RDMA devices under ``<root>/sys/class/infiniband`` (port state and link layer:
``InfiniBand``, or ``Ethernet`` for RoCE) and the libraries' own switches (NCCL, HCCL,
Gloo...).  A multi-node job that silently falls back to TCP runs at a fraction of its
bandwidth, so that case is a WARN; on one node it is only noted.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Mapping, Optional

#: environment variables that steer a collective library's network choice (name → meaning)
TRANSPORT_ENV = {
    "NCCL_IB_DISABLE": "1 forbids InfiniBand/RoCE in NCCL (falls back to sockets)",
    "NCCL_NET": "forces NCCL's network plugin (IB or Socket)",
    "NCCL_SOCKET_IFNAME": "interfaces NCCL uses for sockets and bootstrap",
    "NCCL_IB_HCA": "RDMA devices NCCL may use",
    "NCCL_NET_GDR_LEVEL": "GPUDirect RDMA distance",
    "HCCL_SOCKET_IFNAME": "interfaces HCCL uses for its sockets",
    "HCCL_IF_IP": "IP HCCL binds to",
    "HCCL_INTRA_ROCE_ENABLE": "1 routes HCCL intra-node traffic over RoCE",
    "HCCL_BUFFSIZE": "HCCL buffer size (MB)",
    "CNCL_SOCKET_IFNAME": "interfaces Cambricon CNCL uses",
    "MCCL_SOCKET_IFNAME": "interfaces Moore Threads MCCL uses",
    "GLOO_SOCKET_IFNAME": "interfaces gloo uses",
    "TP_SOCKET_IFNAME": "interfaces the tensorpipe RPC agent uses",
}
_DISABLE_IB = {"NCCL_IB_DISABLE": "1"}


def rdma_devices(root: Path) -> List[dict]:
    """RDMA devices and their ports from sysfs (``state`` like ``4: ACTIVE``)."""
    base = Path(root) / "sys" / "class" / "infiniband"
    out = []
    if not base.is_dir():
        return out
    for dev in sorted(base.iterdir()):
        ports = []
        for port in sorted((dev / "ports").glob("*")) if (dev / "ports").is_dir() else []:
            def read(name):
                try:
                    return (port / name).read_text().strip()
                except OSError:
                    return ""
            ports.append({"port": port.name, "state": read("state"), "link_layer": read("link_layer"),
                          "rate": read("rate")})
        out.append({"device": dev.name, "ports": ports})
    return out


def multi_node(env: Mapping[str, str]) -> Optional[bool]:
    """True/False when the launcher variables tell whether this job spans nodes; None if unknown."""
    try:
        ws, lws = env.get("WORLD_SIZE"), env.get("LOCAL_WORLD_SIZE")
        if ws and lws:
            return int(ws) > int(lws)
        if env.get("NNODES") or env.get("SLURM_NNODES"):
            return int(env.get("NNODES") or env.get("SLURM_NNODES")) > 1
    except ValueError:
        return None
    return None


def detect(root: Optional[Path] = None, env: Optional[Mapping[str, str]] = None,
           ccl: Optional[str] = None) -> Dict[str, object]:
    """Decide RDMA vs TCP with the evidence; returns status, summary, details."""
    env = dict(os.environ if env is None else env)
    root = Path(root if root is not None else env.get("HAL_PROBE_ROOT", "/"))
    devices = rdma_devices(root)
    active = [f"{d['device']}/{p['port']} ({'RoCE' if p['link_layer'] == 'Ethernet' else p['link_layer'] or '?'}"
              f"{', ' + p['rate'] if p['rate'] else ''})"
              for d in devices for p in d["ports"] if "ACTIVE" in p["state"].upper()]
    settings = {k: env[k] for k in TRANSPORT_ENV if k in env}
    disabled = [k for k, v in _DISABLE_IB.items() if env.get(k, "").strip() == v] + \
               (["NCCL_NET=Socket"] if env.get("NCCL_NET", "").lower() == "socket" else [])
    nodes = multi_node(env)
    evidence = [f"{root / 'sys/class/infiniband'}: " +
                (", ".join(d["device"] for d in devices) if devices else "no RDMA devices")]
    evidence += [f"{k}={v}" for k, v in settings.items()]
    if active and not disabled:
        transport, status = "RDMA", "OK"
        summary = f"RDMA: {', '.join(active)}"
    elif active and disabled:
        transport = "TCP"
        status = "WARN"
        summary = (f"TCP sockets although RDMA ports are active ({', '.join(active)}): "
                   f"{', '.join(disabled)} turns RDMA off; unset it for multi-node jobs")
    else:
        transport = "TCP"
        why = "RDMA devices present but no port ACTIVE" if devices else "no RDMA devices under /sys/class/infiniband"
        if nodes:
            status, summary = "WARN", (f"TCP sockets between nodes ({why}): a multi-node job runs at a "
                                       f"fraction of its bandwidth; install/enable the RDMA driver stack")
        else:
            status, summary = "OK", (f"TCP sockets ({why}); fine on one node, slow across nodes")
    if ccl == "gloo" and status == "OK" and transport == "RDMA":
        summary += "; gloo itself always uses TCP sockets"
    return {"status": status, "summary": summary,
            "details": {"transport": transport, "rdma_devices": devices, "settings": settings,
                        "multi_node": nodes, "evidence": evidence}}
