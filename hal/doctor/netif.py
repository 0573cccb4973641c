"""Which address a node's collective library talks on: its interface variable, the host name, or the route.

``hal doctor`` across nodes tests reachability on the address the collective would use, so a
node that gloo would put on ``127.0.0.1`` (a host name that resolves to loopback) or on the
wrong interface is caught before a process group hangs.  The facts per library (which
variable names the interface, what happens when it is unset) are in
``hal/data/ccl-interfaces.json``.
"""
from __future__ import annotations

import fcntl
import json
import socket
import struct
from functools import lru_cache
from pathlib import Path
from typing import Dict, Mapping, Optional

_SIOCGIFADDR = 0x8915  # linux/sockios.h


@lru_cache(maxsize=1)
def facts() -> dict:
    """``hal/data/ccl-interfaces.json``: collective library -> {env, unset, source}."""
    return json.loads((Path(__file__).resolve().parent.parent / "data" / "ccl-interfaces.json").read_text())["ccl"]


def interface_addresses() -> Dict[str, str]:
    """IPv4 address of each interface that has one (``{"lo": "127.0.0.1", "eth0": ...}``)."""
    out = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            out[name] = socket.inet_ntoa(raw[20:24])
    return out


def address_toward(host: str, port: int = 9) -> Optional[str]:
    """The local address of the route to ``host`` (a UDP socket's connect; nothing is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((socket.gethostbyname(host), port))
            return s.getsockname()[0]
    except OSError:
        return None


def _match(spec: str, names) -> Optional[str]:
    """First interface an ``*_SOCKET_IFNAME`` value selects (``eth``, ``=eth0``, ``^docker,lo``, ``a,b``)."""
    exclude = spec.startswith("^")
    exact = spec.lstrip("^").startswith("=")
    parts = [p for p in spec.lstrip("^").lstrip("=").split(",") if p]
    for name in sorted(names):
        hit = any(name == p if exact else name.startswith(p) for p in parts)
        if hit != exclude:
            return name
    return None


def collective_address(ccl: str, toward: Optional[str], env: Mapping[str, str]) -> dict:
    """Interface and address collective ``ccl`` would use on this node, and how that was decided.

    :param toward: the rendezvous host (``MASTER_ADDR``) for the route rule.
    :return: ``{"interface", "address", "how", "env"}``; ``address`` None when none could be found.
    """
    fact = facts().get(ccl, {"env": None, "unset": "route"})
    addrs = interface_addresses()
    by_addr = {a: n for n, a in addrs.items()}
    var = fact.get("env")
    if var and env.get(var):
        name = _match(env[var], addrs)
        if name is None:
            return {"interface": None, "address": None, "env": var,
                    "how": f"{var}={env[var]} matches no interface with an IPv4 address here "
                           f"({', '.join(sorted(addrs)) or 'none'})"}
        return {"interface": name, "address": addrs[name], "env": var, "how": f"{var}={env[var]}"}
    if fact.get("unset") == "hostname":
        host = socket.gethostname()
        try:
            addr = socket.gethostbyname(host)
        except OSError:
            addr = None
        if addr and (addr in by_addr or addr.startswith("127.")):
            return {"interface": by_addr.get(addr, "lo"), "address": addr, "env": var,
                    "how": f"host name {host} resolves to {addr} ({ccl}'s rule with {var} unset)"}
        return {"interface": "lo", "address": "127.0.0.1", "env": var,
                "how": f"host name {host} resolves to {addr or 'nothing'}, not an address of this node: "
                       f"{ccl} falls back to loopback"}
    addr = address_toward(toward) if toward else None
    return {"interface": by_addr.get(addr) if addr else None, "address": addr, "env": var,
            "how": (f"route toward the rendezvous host {toward}" if addr else
                    f"no route toward the rendezvous host {toward}") + (f" ({var} unset)" if var else "")}
