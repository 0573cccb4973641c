"""A target profile minus some operators: "ort-cpu, but without LayerNormalization and Gelu".

Used by ``op_coverage rewrite --without`` and the conformance run to ask how a model would be
rewritten for a target that lacks the named operators.
"""
from __future__ import annotations

from op_coverage.errors import BadProfile
from op_coverage.targets.profile import SupportProfile


def parse_ops(spec: list[str] | str | None) -> list[tuple[str, str]]:
    """``["Gelu,LayerNormalization", "com.microsoft::FastGelu"]`` -> ``[(domain, op), ...]``."""
    items = [spec] if isinstance(spec, str) else list(spec or [])
    out = []
    for part in (p.strip() for s in items for p in s.split(",")):
        if not part:
            continue
        dom, _, op = part.rpartition("::")
        out.append((dom or "ai.onnx", op))
    return out


def without(profile: SupportProfile, ops: list[tuple[str, str]]) -> SupportProfile:
    """A copy of *profile* in which every version of *ops* is ``unsupported``."""
    if not ops:
        return profile
    if not hasattr(profile, "entries") or type(profile) is not SupportProfile:
        raise BadProfile(f"target {profile.name}: --without needs a table profile, not a live probe; "
                         "pick a table target such as ort-cpu")
    drop = set(ops)
    names = ", ".join(o if d == "ai.onnx" else f"{d}::{o}" for d, o in ops)
    entries = [e for e in profile.entries if ((e.get("domain") or "ai.onnx"), e["op"]) not in drop]
    entries += [{"domain": d, "op": o, "since": None, "until": None, "dtypes": [], "status": "unsupported",
                 "reason": f"removed from {profile.name} (--without)", "provenance": "--without"} for d, o in ops]
    data = dict(profile.to_dict(), name=f"{profile.name}-without", title=f"{profile.title} without {names}",
                aliases=[], entries=entries)
    p = SupportProfile.from_dict(data, origin=f"{profile.origin} minus {names}", validate=False)
    p.resolve = profile.resolve
    return p
