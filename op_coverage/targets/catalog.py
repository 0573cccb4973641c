"""Which targets exist and where their profiles come from.

Sources, in the order a name is looked up:

1. ``--profile FILE`` profiles given by the user (they may shadow a bundled name);
2. profiles returned by hal backend plugins through the ``hal_op_support`` hook
   (``hal.plugin.registry.plugin_op_profiles()``), when hal's core is installed;
3. bundled profiles built from published tables (``op_coverage/data/*.profile.json``, and each
   hal backend's ``onnx.profile.json`` in its folder: :func:`op_coverage.datafiles.bundled_profiles`);
4. ``ort-live``: the installed onnxruntime, probed on this machine.

``all`` means every profile from 1-4.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from op_coverage.datafiles import bundled_profiles
from op_coverage.errors import BadProfile, UnknownTarget
from op_coverage.targets.profile import SupportProfile

#: names users try that have no published table yet, and what to do instead
NO_DATA = {
    "cambricon": "no public ONNX operator list for Cambricon MagicMind/MLU was found; "
                 "write one with --profile (see docs/op_coverage.md)",
    "mlu": "see 'cambricon'",
    "kunlunxin": "no public ONNX operator list was found; use --profile",
    "metax": "no public ONNX operator list was found; use --profile",
    "iluvatar": "no public ONNX operator list was found; use --profile",
}


def plugin_profiles() -> list[tuple[str, dict]]:
    """Profiles from hal backend plugins; empty when hal's core (or its registry) is absent."""
    try:
        from hal.plugin.registry import plugin_op_profiles
    except ImportError:
        return []
    try:
        return list(plugin_op_profiles())
    except Exception:  # noqa: BLE001 - a broken plugin must not break the scan
        return []


@dataclass
class TargetSet:
    """All profiles known in this process, looked up by name or alias."""

    profiles: dict[str, SupportProfile] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    plugins_pending: bool = False  # plugin profiles load on first need (hal imports torch: slow)

    def load_plugins(self) -> None:
        """Add the profiles of hal backend plugins (once); bundled names are not replaced."""
        if not self.plugins_pending:
            return
        self.plugins_pending = False
        for plugin, data in plugin_profiles():
            try:
                p = SupportProfile.from_dict(dict(data, kind="plugin"), origin=f"hal plugin {plugin}")
            except BadProfile as e:
                self.problems.append(f"hal plugin {plugin}: {e}")
                continue
            self.add(p)

    def add(self, p: SupportProfile, replace: bool = False) -> None:
        if p.name in self.profiles and not replace:
            return
        p.resolve = self.get
        self.profiles[p.name] = p
        for a in p.aliases:
            self.aliases.setdefault(a, p.name)

    def get(self, name: str) -> SupportProfile | None:
        name = self.aliases.get(name, name)
        if name == "ort-live" and name not in self.profiles:
            self.add(_live(self))
        if name not in self.profiles and self.plugins_pending:
            self.load_plugins()
            name = self.aliases.get(name, name)
        return self.profiles.get(name)

    def names(self) -> list[str]:
        return list(self.profiles)

    def resolve_names(self, requested: list[str]) -> list[SupportProfile]:
        """Turn ``--target`` values (names, aliases, comma lists, ``all``) into profiles."""
        out: list[SupportProfile] = []
        flat = [t.strip() for r in requested for t in r.split(",") if t.strip()]
        for t in flat or ["all"]:
            if t == "all":
                self.load_plugins()
                self.get("ort-live")
                picked = list(self.profiles.values())
            else:
                p = self.get(t)
                if p is None:
                    if t.lower() in NO_DATA:
                        raise UnknownTarget(f"target {t!r}: {NO_DATA[t.lower()]}")
                    known = ", ".join(sorted(set(self.names()) | {"ort-live", "all"}))
                    hint = ""
                    from hal.op_support.torch_profile import alias_map, load_torch_profiles
                    if t in alias_map(load_torch_profiles(use_plugins=False)):
                        hint = f"; {t!r} is a torch target (for training scripts and op traces, not ONNX models)"
                    raise UnknownTarget(f"target {t!r} is not known; choose from: {known} "
                                        f"(or add one with --profile FILE){hint}")
                picked = [p]
            out += [p for p in picked if p not in out]
        return out


def _live(ts: TargetSet) -> SupportProfile:
    from op_coverage.targets.ort_live_cache import ProbeCache
    from op_coverage.targets.ort_live import OrtLiveProfile, installed_providers
    cache = ProbeCache()
    if not installed_providers(cache):
        raise UnknownTarget("target 'ort-live': onnxruntime is not installed here; install it or pick a table target")
    return OrtLiveProfile(static_fallback=ts.profiles.get("ort-cpu"), cache=cache)


def load_targets(profile_files: list[str] | None = None, use_plugins: bool = True) -> TargetSet:
    """Collect every profile: user files first, then plugins, then the bundled tables."""
    ts = TargetSet()
    for f in profile_files or []:
        p = SupportProfile.from_file(f)
        p.kind = p.kind if p.kind != "published-table" else "user"
        ts.add(p, replace=True)
    ts.plugins_pending = use_plugins
    for origin, data in bundled_profiles():
        ts.add(SupportProfile.from_dict(data, origin=origin, validate=False))  # checked against the schema by the tests
    return ts


# -- torch targets -----------------------------------------------------------------------------------
TORCH_SCHEMAS = ("op_coverage.torch_profile/1", "hal.op_profile/1")


def is_torch_profile_file(path) -> bool:
    """True when ``path`` holds a torch profile (``op_coverage.torch_profile/1`` or ``hal.op_profile/1``)."""
    import json
    from pathlib import Path
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False  # let the ONNX loader report what is wrong with it
    return isinstance(data, dict) and data.get("schema") in TORCH_SCHEMAS


def split_profile_files(files) -> tuple[list[str], list[str]]:
    """``--profile`` files split into (ONNX profiles, torch profiles) by their ``schema`` field."""
    onnx, torch = [], []
    for f in files or []:
        (torch if is_torch_profile_file(f) else onnx).append(f)
    return onnx, torch


def resolve_torch(requested: list[str], profile_files=None, use_plugins: bool = True, problems=None):
    """``-t`` values for a torch scan -> torch profiles (names, aliases, comma lists, ``all``).

    Raises :class:`~op_coverage.errors.UnknownTarget` listing every known torch name and alias.
    """
    from hal.op_support.torch_profile import load_torch_profiles, resolve_torch_targets
    return resolve_torch_targets(load_torch_profiles(profile_files or (), use_plugins, problems), requested)
