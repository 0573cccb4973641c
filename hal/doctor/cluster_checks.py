"""What the cluster checks of ``hal doctor`` conclude from what the nodes posted (no I/O here).

Each function takes the records the nodes exchanged through the launcher's store and returns
a result ``{"status", "summary", "details", "fix"}``; :mod:`hal.doctor.cluster` gathers the
records and calls them on global rank 0.  Nodes are named by ``label(node)``
(:meth:`hal.doctor.cluster_context.ClusterContext.node_label`).
"""
from __future__ import annotations

from collections import Counter
from typing import Callable, Dict, List, Mapping, Optional, Sequence

OK, WARN, FAIL, SKIP = "OK", "WARN", "FAIL", "SKIP"
_RANK = {SKIP: 0, OK: 0, WARN: 1, FAIL: 2}
#: clock offset from rank 0 above which the clocks check warns / fails, in seconds
CLOCK_WARN_S, CLOCK_FAIL_S = 0.1, 1.0
#: software facts that must be equal on every node (a difference is a FAIL); others only WARN
MUST_MATCH = ("torch", "hal", "backend", "device_type", "runtime", "vendor_module")

Label = Callable[[int], str]


def result(status: str, summary: str, fix: str = "", **details) -> dict:
    """A check result in the shape every cluster check returns."""
    return {"status": status, "summary": summary, "details": details, "fix": fix}


def worst(statuses) -> str:
    """The worst of some statuses (SKIP counts as OK)."""
    w = max((_RANK[s] for s in statuses), default=0)
    return {0: OK, 1: WARN, 2: FAIL}[w]


def _reference(values: Mapping[int, object]) -> object:
    """The value most nodes have; a tie goes to the lowest node's (rank 0's side)."""
    counts = Counter(values.values())
    top = max(counts.values())
    return next(v for _, v in sorted(values.items()) if counts[v] == top)


def _within(waited_s: Optional[float]) -> str:
    return f" within {waited_s:g} s" if waited_s else ""


def software(nodes: Mapping[int, dict], label: Label, missing: Sequence[int] = (),
             waited_s: Optional[float] = None) -> dict:
    """Same software everywhere: each fact of ``nodes[n]["software"]`` compared with the majority.

    :param nodes: node rank -> ``{"software": {name: value}, "local": [local check results]}``.
    :param missing: nodes that posted nothing within the time limit (a FAIL, named).
    :param waited_s: that limit, for the message.
    """
    keys = sorted({k for rec in nodes.values() for k in rec.get("software", {})})
    differ, table = [], {}
    for key in keys:
        values = {n: rec.get("software", {}).get(key) for n, rec in nodes.items()}
        ref = _reference(values)
        table[key] = {"expected": ref, "nodes": {str(n): v for n, v in sorted(values.items())}}
        counts = Counter(values.values())
        tie = sum(1 for c in counts.values() if c == counts[ref]) > 1
        st = FAIL if key in MUST_MATCH else WARN
        if tie and len(counts) > 1:  # no majority: every node is named with its value
            differ.append({"node": None, "key": key, "value": None, "expected": None, "status": st,
                           "text": f"the nodes differ in {key}: " + ", ".join(
                               f"{label(n)} {v}" for n, v in sorted(values.items()))})
            continue
        for n, v in sorted(values.items()):
            if v != ref:
                others = [m for m, w in values.items() if w == ref]
                differ.append({"node": n, "key": key, "value": v, "expected": ref, "status": st,
                               "text": f"{label(n)} has {key} {v}, "
                                       f"{'the others' if len(others) > 1 else label(others[0])} {ref}"})
    # the transport check reports the local transport findings itself
    local_bad = [{"node": n, "check": c["name"], "status": c["status"], "summary": c["summary"],
                  "text": f"{label(n)}: {c['name']} {c['status']}: {c['summary']}"}
                 for n, rec in sorted(nodes.items()) for c in rec.get("local", [])
                 if c["status"] in (WARN, FAIL) and c["name"] != "transport"]
    gone = [f"{label(n)} did not post its versions{_within(waited_s)}" for n in missing]
    status = worst([FAIL] * bool(gone) + [d["status"] for d in differ] + [c["status"] for c in local_bad])
    details = dict(facts=table, differ=differ, local=local_bad, missing=list(missing))
    if status == OK:
        ref = {k: v["expected"] for k, v in table.items()}
        shown = ", ".join(f"{k} {ref[k]}" for k in ("torch", "hal", "backend", "device_count") if k in ref)
        return result(OK, f"same on {len(nodes)} nodes: {shown}", **details)
    parts = gone + [d["text"] for d in differ] + [c["text"] for c in local_bad]
    fix = []
    if differ:
        fix.append("install the same torch / hal / vendor stack on every node (one image or one "
                   "requirements lock) and select the same backend (HAL_BACKEND)")
    if local_bad:
        fix.append("run 'hal doctor' on the node named and follow its fix")
    if gone:
        fix.append("look at the named node's output: its doctor hung or died before posting")
    return result(status, "; ".join(parts), "; ".join(fix), **details)


def clock_offset(samples: Sequence[Sequence[float]]) -> Optional[dict]:
    """NTP's estimate from ``(t1, t2, t4)`` round trips: this node sends at t1 (its clock), rank 0
    answers at t2 (rank 0's clock), the answer arrives at t4 (this node's clock).

    The sample with the smallest round trip is kept: ``offset = (t1 + t4) / 2 - t2`` (this node's
    clock minus rank 0's), exact within ``± round_trip / 2``.
    """
    if not samples:
        return None
    t1, t2, t4 = min(samples, key=lambda s: s[2] - s[0])
    rtt = max(0.0, t4 - t1)
    return {"offset_s": (t1 + t4) / 2 - t2, "round_trip_s": rtt, "bound_s": rtt / 2, "samples": len(samples)}


def clocks(offsets: Mapping[int, Optional[dict]], label: Label, missing: Sequence[int] = (),
           waited_s: Optional[float] = None) -> dict:
    """Each node's clock against rank 0's: WARN above 100 ms, FAIL above 1 s (the offset less its bound)."""
    rows, bad = {}, []
    for n, est in sorted(offsets.items()):
        if est is None:
            continue
        rows[str(n)] = est
        # only what the round trip cannot explain counts
        sure = max(0.0, abs(est["offset_s"]) - est["bound_s"])
        st = FAIL if sure > CLOCK_FAIL_S else WARN if sure > CLOCK_WARN_S else OK
        if st != OK:
            way = "ahead of" if est["offset_s"] > 0 else "behind"
            bad.append((st, f"{label(n)} is {abs(est['offset_s']):.3f} s {way} rank 0 "
                            f"(± {est['bound_s'] * 1e3:.1f} ms)"))
    gone = [f"{label(n)} did not answer the clock exchange{_within(waited_s)}" for n in missing]
    status = worst([FAIL] * bool(gone) + [s for s, _ in bad])
    details = dict(offsets=rows, warn_s=CLOCK_WARN_S, fail_s=CLOCK_FAIL_S, missing=list(missing))
    if status == OK:
        big = max(rows.items(), key=lambda kv: abs(kv[1]["offset_s"]), default=None)
        most = (f"; largest offset {abs(big[1]['offset_s']) * 1e3:.1f} ms ({label(int(big[0]))}, "
                f"± {big[1]['bound_s'] * 1e3:.1f} ms)") if big else ""
        return result(OK, f"{len(rows)} node clocks within {CLOCK_WARN_S * 1e3:.0f} ms of rank 0's{most}", **details)
    fix = []
    if bad:
        fix.append("synchronise the clocks (chrony or ntpd against one server on every node: 'chronyc "
                   "tracking' shows the offset); metrics and log time-stamps are compared across nodes")
    if gone:
        fix.append("the named node stopped answering: look at its output (a hung doctor, a lost store "
                   "connection)")
    return result(status, "; ".join(gone + [t for _, t in bad]), "; ".join(fix), **details)


def reachability(attempts: Sequence[dict], label: Label, loopback: Sequence[int] = (),
                 missing: Sequence[int] = (), timeout_s: float = 2.5, waited_s: Optional[float] = None,
                 unaddressed: Optional[Mapping[int, str]] = None) -> dict:
    """Every node reaches every other on the job's ports.

    :param attempts: ``{"from", "to", "address", "port", "what", "ok", "error", "seconds"}`` per try;
        ``to`` is a node rank, or None for a service that is not one node's doctor (the store).
    :param loopback: nodes whose collective address is a loopback address on a multi-host job.
    :param unaddressed: nodes with no address for their collective -> why (nobody can reach them).
    """
    unaddressed = dict(unaddressed or {})
    failed = [a for a in attempts if not a["ok"]]

    def where(a):
        dest = label(a["to"]) if a["to"] is not None else a["what"]
        return f"{label(a['from'])} -> {dest} {a['address']}:{a['port']} ({a['what']}): {a['error']}"

    lines = [f"{label(n)} would be reached at a loopback address: the other hosts cannot reach it there"
             for n in loopback]
    lines += [f"{label(n)} has no address for its collective: {why}" for n, why in sorted(unaddressed.items())]
    lines += [f"{label(n)} did not post its reachability results{_within(waited_s)}" for n in missing]
    lines += [where(a) for a in failed]
    details = dict(attempts=list(attempts), failed=failed, loopback=list(loopback), missing=list(missing),
                   unaddressed={str(n): w for n, w in unaddressed.items()}, connect_timeout_s=timeout_s)
    pairs = {(a["from"], a["to"]) for a in attempts if a["to"] is not None}
    ports = sorted({a["port"] for a in attempts})
    if not lines:
        slow = max((a["seconds"] for a in attempts), default=0.0)
        return result(OK, f"{len(attempts)} connections ({len(pairs)} pairs, ports "
                          f"{', '.join(map(str, ports))}) all reached, slowest {slow * 1e3:.1f} ms", **details)
    fix = []
    if any(a["error"] == "refused" for a in failed):
        fix.append("refused: nothing listens there or a firewall rejects the port; open the port "
                   "(and the collective's ephemeral range) between the nodes")
    if any(a["error"] == "timed out" for a in failed):
        fix.append(f"timed out after {timeout_s:g} s: a firewall drops the packets or the address is "
                   f"not routable from the other node; open the port, check the route")
    if unaddressed:
        fix.append("set the collective's interface variable to an interface that exists on the node "
                   "('ip -4 addr' lists them)")
    if loopback:
        fix.append("give each node a host name that resolves to its own network address, or set the "
                   "collective's interface variable (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME)")
    if missing or any(a["error"] not in ("refused", "timed out") for a in failed):
        fix.append("check the named node's network set-up (addresses, routes, interface variables)")
    return result(FAIL, f"{len(lines)} problem(s): " + "; ".join(lines), "; ".join(fix), **details)


def transport(nodes: Mapping[int, dict], label: Label) -> dict:
    """RDMA or TCP per node and the interface the collective uses; WARN when the nodes disagree.

    :param nodes: node rank -> ``{"transport": <hal.doctor.transport.detect() result>,
        "collective": <hal.doctor.netif.collective_address() result>}``.
    """
    per, notes, said = {}, [], {}
    for n, rec in sorted(nodes.items()):
        t = rec.get("transport") or {}
        c = rec.get("collective") or {}
        per[str(n)] = {"transport": t.get("details", {}).get("transport"), "status": t.get("status"),
                       "summary": t.get("summary"), "interface": c.get("interface"),
                       "address": c.get("address"), "how": c.get("how")}
        if t.get("status") in (WARN, FAIL):
            said.setdefault((t["status"], t.get("summary")), []).append(n)
    notes = [(st, f"{', '.join(map(label, ns)) if len(ns) < len(nodes) else 'every node'}: {text}")
             for (st, text), ns in said.items()]
    status = worst([s for s, _ in notes])
    for key, what in (("transport", "transport"), ("interface", "interface")):
        values = {int(n): r[key] for n, r in per.items()}
        if len(set(values.values())) > 1:
            ref = _reference(values)
            counts = Counter(values.values())
            if sum(1 for c in counts.values() if c == counts[ref]) > 1:  # no majority: name every node
                notes.append((WARN, f"nodes disagree on the {what}: " + ", ".join(
                    f"{label(n)} {v or 'none'}" for n, v in sorted(values.items()))))
            else:
                odd = [f"{label(n)} {what} {v or 'none'}" for n, v in sorted(values.items()) if v != ref]
                notes.append((WARN, f"nodes disagree on the {what}: {', '.join(odd)}; the others {ref}"))
            status = worst([status, WARN])
    shown = ", ".join(f"{label(int(n))} {r['transport']} via {r['interface']} {r['address']}" for n, r in per.items())
    details = dict(nodes=per)
    if status == OK:
        return result(OK, shown, **details)
    fix = ("use the same network on every node: the same RDMA stack and port state, and the same "
           "interface variable (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME / the vendor's) for every node"
           if any("disagree" in t for _, t in notes) else
           "run 'hal doctor --check transport' on the node named: RDMA devices, their port state and the "
           "collective's switches are listed there")
    return result(status, "; ".join(t for _, t in notes) + f" ({shown})", fix, **details)


def process_group(outcomes: Mapping[int, Optional[str]], world_size: int, label_rank: Callable[[int], str],
                  seconds: float) -> dict:
    """The default process group came up on every rank (``outcomes``: rank -> None or the error)."""
    bad = {r: e for r, e in outcomes.items() if e}
    gone = [r for r in range(world_size) if r not in outcomes]
    if not bad and not gone:
        return result(OK, f"{world_size} ranks joined the default process group in {seconds:.2f} s",
                      seconds_to_init=seconds)
    lines = [f"{label_rank(r)}: {e}" for r, e in sorted(bad.items())]
    lines += [f"{label_rank(r)} did not report" for r in gone]
    return result(FAIL, "; ".join(lines), "the first error names the cause; the reachability check above "
                                          "names blocked ports", errors={str(r): e for r, e in bad.items()},
                  missing=gone)


def node_label_of(names: List[str]) -> Label:
    """``label(n)`` for plain node names (the tests use it)."""
    return lambda n: f"node {n} ({names[n]})" if n < len(names) and names[n] else f"node {n}"


def overall(checks: Sequence[dict]) -> Dict[str, object]:
    """Report status and exit code (0 OK, 1 WARN, 2 FAIL) from the checks."""
    from hal.doctor import EXIT_CODES

    st = worst([c["status"] for c in checks])
    return {"status": st, "exit_code": EXIT_CODES[st]}
