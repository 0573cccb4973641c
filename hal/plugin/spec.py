"""What a backend is (spec) and what its probe found (result): plain frozen data."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Optional, Tuple

from hal.plugin.facts import backend_facts


class Status(str, enum.Enum):
    """Outcome of probing (and, when selected, loading) one backend."""

    AVAILABLE = "available"
    NOT_INSTALLED = "not installed"
    NO_DEVICE = "no device"
    BROKEN = "broken"
    BLOCKED = "blocked"


@dataclass(frozen=True)
class BackendSpec:
    """Declarative description of one backend.  Never imports anything.

    ``presents_as_cuda`` marks stacks whose torch build uses the ``cuda`` device type
    (ROCm, Hygon DCU, MetaX, Iluvatar, Kunlunxin): for them ``device_type`` alone cannot
    identify the vendor.
    """

    name: str
    vendor: str
    device_type: str
    dist_backend: Optional[str] = None
    module: Optional[str] = None
    visible_devices_env: Tuple[str, ...] = ()
    management_tool: Optional[str] = None
    device_nodes: Tuple[str, ...] = ()
    priority: int = 0
    presents_as_cuda: bool = False
    product: str = ""
    uncertain: Tuple[str, ...] = ()
    sources: Tuple[str, ...] = ()
    extra: Tuple[Tuple[str, str], ...] = field(default=(), compare=False)

    def to_dict(self) -> dict:
        return {
            "name": self.name, "vendor": self.vendor, "product": self.product,
            "device_type": self.device_type, "dist_backend": self.dist_backend,
            "module": self.module, "visible_devices_env": list(self.visible_devices_env),
            "management_tool": self.management_tool, "device_nodes": list(self.device_nodes),
            "priority": self.priority, "presents_as_cuda": self.presents_as_cuda,
            "uncertain": list(self.uncertain), "sources": list(self.sources),
        }


@dataclass(frozen=True)
class ProbeResult:
    """What a probe decided, and the evidence that decided it."""

    status: Status
    reason: str
    evidence: Tuple[str, ...] = ()

    @property
    def available(self) -> bool:
        return self.status is Status.AVAILABLE


_TUPLE_FIELDS = ("visible_devices_env", "device_nodes", "uncertain", "sources")


def builtin_spec(name: str) -> BackendSpec:
    """The spec of a built-in backend, read from its folder's ``backend.json`` (see :mod:`hal.plugin.facts`)."""
    row = backend_facts(name)["spec"]
    kw = {k: tuple(v) if k in _TUPLE_FIELDS else v for k, v in row.items()}
    return BackendSpec(name=name, **kw)


def builtin_markers(name: str) -> dict:
    """Vendor-marker facts (torch attributes, version tags) of a built-in backend, from its ``backend.json``."""
    return dict(backend_facts(name).get("markers", {}))
