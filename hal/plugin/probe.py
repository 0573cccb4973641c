"""Cheap evidence gathering for backend probes.  Never imports a vendor module.

Every source of evidence is injectable, so probe logic is testable against a fake
filesystem root, ``PATH``, environment and torch build::

    ctx = ProbeContext(root=tmp_path, env={"PATH": str(bin_dir)}, torch=TorchFacts(hip="6.3"))
"""
from __future__ import annotations

import glob
import importlib.util
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, Tuple

from hal.plugin.spec import BackendSpec, ProbeResult, Status

#: env var naming the filesystem root that device-node probes look under (default ``/``)
ROOT_ENV = "HAL_PROBE_ROOT"


@dataclass(frozen=True)
class TorchFacts:
    """Build facts of the installed torch, read without initialising any device."""

    version: str = ""
    cuda: Optional[str] = None
    hip: Optional[str] = None
    xpu: Optional[str] = None
    mps_built: bool = False
    attrs: Tuple[str, ...] = ()  # vendor attributes present on the torch module

    #: torch attributes some vendor builds add (checked with hasattr, never called)
    VENDOR_ATTRS = ("__hcu_version__", "__dcu_version__", "corex", "npu", "mlu", "musa", "gcu",
                    "supa", "sdaa")

    @classmethod
    def from_torch(cls) -> "TorchFacts":
        import torch

        v = torch.version
        try:
            mps_built = bool(torch.backends.mps.is_built())
        except Exception:  # pragma: no cover - very old torch
            mps_built = False
        return cls(
            version=str(torch.__version__),
            cuda=getattr(v, "cuda", None), hip=getattr(v, "hip", None), xpu=getattr(v, "xpu", None),
            mps_built=mps_built,
            attrs=tuple(a for a in cls.VENDOR_ATTRS if hasattr(torch, a)),
        )


@dataclass
class ProbeContext:
    """Where probes look.  Defaults are the real machine."""

    root: Path = field(default_factory=lambda: Path(os.environ.get(ROOT_ENV, "/")))
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    torch: TorchFacts = field(default_factory=TorchFacts.from_torch)
    find_spec: Callable[[str], object] = importlib.util.find_spec
    platform: str = field(default_factory=lambda: os.uname().sysname if hasattr(os, "uname") else "")
    machine: str = field(default_factory=lambda: os.uname().machine if hasattr(os, "uname") else "")

    @classmethod
    def without_torch(cls) -> "ProbeContext":
        """The real machine, for a process where ``import torch`` fails (no torch facts)."""
        return cls(torch=TorchFacts())

    def has_module(self, name: str) -> bool:
        """True when ``name`` is importable (found by ``importlib.util.find_spec``)."""
        try:
            return self.find_spec(name) is not None
        except (ImportError, ValueError):
            return False

    def which(self, tool: Optional[str]) -> Optional[str]:
        """Full path of ``tool`` on this context's ``PATH``, or None."""
        if not tool:
            return None
        return shutil.which(tool, path=self.env.get("PATH", ""))

    def device_nodes(self, patterns: Sequence[str]) -> list:
        """Device files matching glob ``patterns`` (relative to :attr:`root`), as absolute paths."""
        found = []
        for pat in patterns:
            for p in sorted(glob.glob(str(self.root / pat))):
                found.append("/" + os.path.relpath(p, self.root))
        return found


def hidden_by_env(spec: BackendSpec, ctx: ProbeContext) -> Optional[ProbeResult]:
    """``NO_DEVICE`` when the backend's visible-devices variable hides every device."""
    for var in spec.visible_devices_env[:1]:
        val = ctx.env.get(var)
        if val is not None and val.strip() in ("", "-1", "none", "void", "NoDevFiles"):
            return ProbeResult(Status.NO_DEVICE,
                               f"{var}={val!r} hides every device; unset it or list device ids",
                               (f"env {var}={val!r}",))
    return None


def probe_module_and_nodes(spec: BackendSpec, ctx: ProbeContext) -> ProbeResult:
    """The standard probe: vendor module importable, then device nodes / management tool.

    ``AVAILABLE`` needs the module (if any) and a device node; when the spec lists no
    device nodes, the management tool on ``PATH`` is enough.
    """
    evidence = []
    if spec.module:
        if not ctx.has_module(spec.module):
            return ProbeResult(Status.NOT_INSTALLED,
                               f"{spec.module} is not installed",
                               (f"find_spec({spec.module!r}) is None",))
        evidence.append(f"find_spec({spec.module!r}) found")
    hidden = hidden_by_env(spec, ctx)
    if hidden:
        return ProbeResult(hidden.status, hidden.reason, tuple(evidence) + hidden.evidence)
    nodes = ctx.device_nodes(spec.device_nodes)
    tool = ctx.which(spec.management_tool)
    if nodes:
        evidence.append("device nodes: " + ", ".join(nodes[:4]) + (" ..." if len(nodes) > 4 else ""))
    if tool:
        evidence.append(f"{spec.management_tool} at {tool}")
    if nodes or (tool and not spec.device_nodes):
        return ProbeResult(Status.AVAILABLE, f"{spec.vendor} device present", tuple(evidence))
    want = " or ".join("/" + p for p in spec.device_nodes) or "a device"
    why = f"no {want} under {ctx.root}"
    if spec.management_tool:
        why += f" and {spec.management_tool} {'found' if tool else 'not on PATH'}"
    return ProbeResult(Status.NO_DEVICE, why, tuple(evidence) or (why,))


def installed_version(module: str) -> Optional[str]:
    """The version of the distribution that installs ``module`` (``torch_npu`` -> torch-npu's), read from
    its metadata without importing it; None when none is found."""
    from importlib import metadata

    try:
        names = metadata.packages_distributions().get(module, [])
        return metadata.version(names[0]) if names else None
    except Exception:  # broken metadata: the version is only shown
        return None


def runtime_missing(runtime: Mapping[str, object], ctx: ProbeContext) -> Optional[str]:
    """What is missing and the fix, when ``runtime`` (a backend.json ``runtime``: the vendor's toolkit beside its
    package) is not set up -- its ``home_env`` unset or naming no folder ("the CANN toolkit is not set up
    (ASCEND_HOME_PATH is unset): ...; then `npu-smi info` lists the devices"); None when it is."""
    var = str(runtime["home_env"])
    home = ctx.env.get(var)
    if home and (ctx.root / home.lstrip("/")).is_dir():
        return None
    state = f"{var} is unset" if not home else f"{var}={home} is not a folder"
    return f"{runtime['name']} is not set up ({state}): {runtime['setup']}; then `{runtime['check']}` lists the devices"


def installed_label(module: Optional[str]) -> str:
    """``torch_npu 2.14.0`` (the module and its distribution's version, where found)."""
    version = installed_version(module) if module else None
    return f"{module} {version}" if version else str(module)
