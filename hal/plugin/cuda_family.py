"""Which vendor a ``cuda``-typed torch build belongs to.

ROCm, Hygon DCU, MetaX, Iluvatar and Kunlunxin builds all present themselves as the
``cuda`` device type.  The device type alone cannot tell them apart from NVIDIA, so this
module reads real evidence: torch version fields and attributes, vendor tools on ``PATH``,
device nodes and vendor Python modules.  Marker facts come from each backend's ``backend.json``
(``backends/cuda_compatible/<name>/``, ``backends/cuda/``).
"""
from __future__ import annotations

from typing import Optional, Tuple

from hal.plugin.probe import ProbeContext
from hal.plugin.spec import builtin_markers

#: most specific first; ``cuda`` (NVIDIA) is what remains
CUDA_FAMILY = ("hygon", "rocm", "iluvatar", "metax", "kunlunxin")


def _evidence_for(name: str, ctx: ProbeContext) -> list:
    m = builtin_markers(name)
    t = ctx.torch
    ev = []
    field_name = m.get("torch_version_field")
    if field_name and getattr(t, field_name, None):
        ev.append(f"torch.version.{field_name}={getattr(t, field_name)!r}")
    ev += [f"torch.{a} present" for a in m.get("torch_attrs", ()) if a in t.attrs]
    ev += [f"torch.__version__={t.version!r} carries {tag!r}" for tag in m.get("version_tags", ())
           if tag in t.version]
    ev += [f"{tool} at {ctx.which(tool)}" for tool in m.get("tools", ()) if ctx.which(tool)]
    nodes = ctx.device_nodes(m.get("nodes", ()))
    if nodes:
        ev.append("device nodes: " + ", ".join(nodes[:3]))
    ev += [f"module {mod} importable" for mod in m.get("modules", ()) if ctx.has_module(mod)]
    return ev


def identify(ctx: ProbeContext) -> Tuple[Optional[str], Tuple[str, ...]]:
    """Name of the backend that owns torch's ``cuda`` device type here, with evidence.

    Returns ``(None, evidence)`` when torch was built without CUDA or HIP.
    """
    t = ctx.torch
    if t.hip:
        hygon = [e for e in _evidence_for("hygon", ctx) if not e.startswith("torch.version.hip")]
        if hygon:
            return "hygon", tuple([f"torch.version.hip={t.hip!r}"] + hygon)
        return "rocm", (f"torch.version.hip={t.hip!r}", "no Hygon marker (torch.__hcu_version__, +das/dtk tag, hy-smi)")
    for name in ("iluvatar", "metax", "kunlunxin"):
        ev = _evidence_for(name, ctx)
        if ev:
            return name, tuple(ev)
    if t.cuda:
        return "cuda", (f"torch.version.cuda={t.cuda!r}", "torch.version.hip is None",
                        "no CUDA-compatible vendor marker (corex, +metax, mx-smi, /dev/xpu<N>)")
    return None, (f"torch {t.version} has no CUDA/HIP build (torch.version.cuda is None)",)
