"""Cluster checks ``links`` and ``scale_ladder`` (on top of :mod:`hal.dist.links`).

Both follow the cluster-check contract of :mod:`hal.doctor.cluster_context`: called on every
rank, in the same order, once the default process group exists; the result
(``{"status", "summary", "details", "fix"}``) comes back on global rank 0, None elsewhere.

* ``links``: FAIL when a pair did not complete (dead link, named with its reason) or a link is
  below half the median (slow links and slow nodes named with their figures, the slow node
  re-paired alone with the fastest to confirm it); OK otherwise, with the matrix in ``details``.
* ``scale_ladder``: WARN when all-reduce bus bandwidth over the first k nodes falls below half of
  the best earlier step (the node that joined there named), FAIL when a step fails, OK otherwise.

Transfers are :data:`CHECK_BYTES` each (``HAL_DOCTOR_LINK_BYTES`` overrides it, e.g. ``64M``),
small enough for slow test links, large enough to leave the latency regime on real networks.
"""
from __future__ import annotations

import os
from typing import Optional

#: bytes per transfer of the two checks (8 MiB: ~70 ms one way at 1 Gbit/s)
CHECK_BYTES = 8 << 20
ENV_BYTES = "HAL_DOCTOR_LINK_BYTES"


def _size() -> int:
    from hal.dist.bench import parse_size

    raw = os.environ.get(ENV_BYTES, "").strip()
    return parse_size(raw) if raw else CHECK_BYTES


def _device(ctx):
    """The context's device when it is an accelerator (the path training uses), else CPU."""
    dev = ctx.device
    return dev if dev is not None and getattr(dev, "type", "cpu") != "cpu" else None


def _one_node(ctx) -> Optional[dict]:
    if ctx.rank != 0:
        return None
    return {"status": "SKIP", "summary": "one node: there are no links between nodes to measure",
            "details": {"nnodes": ctx.nnodes}, "fix": ""}


def links(ctx) -> Optional[dict]:
    """Node x node bandwidth matrix; slow links, slow nodes and dead links named against the median."""
    from hal.dist.links import format_matrix, measure_links

    if ctx.nnodes < 2:
        return _one_node(ctx)
    rep = measure_links(ctx, size=_size(), device=_device(ctx))
    if rep is None:
        return None
    an = rep["analysis"]
    details = {"matrix_gbps": rep["matrix_gbps"], "hosts": rep["hosts"], "median_gbps": an["median_gbps"],
               "node_median_gbps": an["node_median_gbps"], "slow_links": an["slow_links"],
               "slow_nodes": an["slow_nodes"], "dead_links": an["dead_links"], "repair": rep["repair"],
               "rounds": rep["rounds"], "size": rep["config"]["size"], "device": rep["device"],
               "seconds": rep["seconds"],
               "matrix_text": format_matrix(rep)}
    n_links = rep["nnodes"] * (rep["nnodes"] - 1) // 2
    rounds = f"{n_links} link{'s' if n_links > 1 else ''} in {len(rep['rounds'])} round(s)"
    if not (an["dead_links"] or an["slow_links"]):
        return {"status": "OK", "details": details, "fix": "",
                "summary": f"{rounds}, median {an['median_gbps']:.3g} GB/s, none below "
                           f"{an['fraction']:g}x the median"}
    found = [s["text"] for s in an["slow_nodes"]] + [d["text"] for d in an["dead_links"]]
    if not an["slow_nodes"]:
        found += [s["text"] for s in an["slow_links"]]
    else:
        slow_nodes = {s["node"] for s in an["slow_nodes"]}
        found.append("slowest link " + an["slow_links"][0]["text"])
        found += [s["text"] for s in an["slow_links"][1:] if not {s["a"], s["b"]} & slow_nodes]
    if rep["repair"]:
        found.append(rep["repair"]["text"])
    labels = rep["labels"]
    if an["slow_nodes"]:
        who = ", ".join(labels[s["node"]] for s in an["slow_nodes"])
        fix = (f"check {who}: its network interface and cable (link speed and errors: ethtool, ip -s link; "
               f"ibstat for RDMA), its switch port and which switch or rack it sits behind; move it under "
               f"the others' switch, or leave it out (torchrun --nnodes {rep['nnodes'] - 1}) and rerun "
               f"'hal bench --pairs'")
    elif an["slow_links"]:
        w = an["slow_links"][0]
        fix = (f"check the path between {labels[w['a']]} and {labels[w['b']]}: the switch ports and the "
               f"uplink between their racks; group the job's nodes by rack or switch so that its traffic "
               f"stays under one switch, then rerun 'hal bench --pairs'")
    else:
        d = an["dead_links"][0]
        fix = (f"{labels[d['a']]} and {labels[d['b']]} cannot exchange data: check that each reaches the "
               f"other's address on the collective's ports (firewall), the interface the collective uses "
               f"(GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME), then rerun 'hal bench --pairs'")
    return {"status": "FAIL", "summary": "; ".join(found), "details": details, "fix": fix}


def scale_ladder(ctx) -> Optional[dict]:
    """All-reduce bus bandwidth over 2, 3, ... N nodes: where it falls off and which node did it."""
    from hal.dist.links import measure_ladder

    if ctx.nnodes < 2:
        return _one_node(ctx)
    rep = measure_ladder(ctx, size=_size(), device=_device(ctx))
    if rep is None:
        return None
    fell = rep["analysis"]["fell"]
    details = {"steps": rep["steps"], "fell": fell, "hosts": rep["hosts"], "size": rep["size"],
               "device": rep["device"], "seconds": rep["seconds"]}
    if fell is None:
        return {"status": "OK", "summary": rep["analysis"]["text"], "details": details, "fix": ""}
    who = rep["labels"][fell["added_node"]]
    if fell["busbw_gbps"] is None:
        return {"status": "FAIL", "summary": rep["analysis"]["text"], "details": details,
                "fix": f"the all-reduce that {who} joined did not complete: read the links check for its "
                       f"pairs and check its reachability on the collective's ports"}
    return {"status": "WARN", "summary": rep["analysis"]["text"], "details": details,
            "fix": f"{who} slows every all-reduce it takes part in: check its links (the links check, "
                   f"'hal bench --pairs') and its switch placement; place the job's nodes under one switch "
                   f"or rack; where a slower node cannot be avoided, accumulate gradients over more "
                   f"micro-batches so that each all-reduce is paid for by more compute"}
