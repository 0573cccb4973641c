"""Where a plugin came from, and the package (distribution) that supplied it.

``hal list`` names it for each plugin, as pytest's header does (``plugins: xdist-3.5.0``):
built-ins are ``hal <version>``; an entry-point plugin is its entry point's distribution; a
``HAL_PLUGINS`` module is the distribution that installed its top-level package, when
:func:`importlib.metadata.packages_distributions` knows it, else unknown.  Finding it imports
nothing (a blocked or broken plugin is named too).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from hal._version import __version__

#: how a plugin was found (the ``source`` of ``hal list --json``'s ``plugins``)
BUILTIN, ENV_LIST, ENTRY_POINT = "built-in", "HAL_PLUGINS", "entry point"


@dataclass(frozen=True)
class PluginOrigin:
    """One plugin hal tried to register: its name, how it was found, the distribution behind it."""

    plugin: str
    source: str
    #: distribution name and version; None when unknown
    distribution: Optional[str] = None
    version: Optional[str] = None

    def to_dict(self) -> dict:
        return {"name": self.plugin, "source": self.source,
                "distribution": self.distribution, "version": self.version}


def describe(found) -> List[PluginOrigin]:
    """The :class:`PluginOrigin` of each ``(plugin name, source, where)`` the registry found.

    ``where`` is the module name for a built-in or ``HAL_PLUGINS`` plugin and the
    :class:`importlib.metadata.EntryPoint` for an entry-point one.  Installed packages are
    read at most once per call, and only when a ``HAL_PLUGINS`` module needs them.
    """
    table = None
    out = []
    for name, source, where in found:
        if source == BUILTIN:
            out.append(PluginOrigin(name, source, "hal", __version__))
        elif source == ENTRY_POINT:
            dist = getattr(where, "dist", None)
            out.append(PluginOrigin(name, source, *_name_version(dist)) if dist is not None
                       else PluginOrigin(name, source))
        else:
            if table is None:
                table = _packages_distributions()
            out.append(_of_module(name, where, table))
    return out


def dist_label(distribution: Optional[str], version: Optional[str]) -> str:
    """``"hal 0.1.0"``; ``"unknown distribution"`` when the distribution is not known."""
    if distribution is None:
        return "unknown distribution"
    return f"{distribution} {version}" if version else distribution


def _of_module(name: str, module: str, table: dict) -> PluginOrigin:
    found = table.get(module.split(".", 1)[0]) or []
    if not found:
        return PluginOrigin(name, ENV_LIST)
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        return PluginOrigin(name, ENV_LIST, *_name_version(distribution(found[0])))
    except PackageNotFoundError:
        return PluginOrigin(name, ENV_LIST, found[0])


def _name_version(dist) -> Tuple[Optional[str], Optional[str]]:
    return (dist.metadata["Name"] or getattr(dist, "name", None)), dist.version


def _packages_distributions() -> dict:
    from importlib.metadata import packages_distributions

    try:
        return packages_distributions()
    except Exception:  # noqa: BLE001 - broken metadata on disk: every distribution is unknown
        return {}
