"""Bundled data files: ``op_coverage/data/`` (profiles of runtimes, JSON schemas, rule facts) and the
ONNX profiles of hal's built-in backends, which live in each backend's folder (through hal)."""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from hal.plugin.facts import builtin_files, read_builtin_json

#: the ONNX profile's file name in a built-in hal backend's folder (``backends/ascend/onnx.profile.json``)
BACKEND_PROFILE = "onnx.profile.json"


def _dir():
    return resources.files("op_coverage").joinpath("data")


@lru_cache(maxsize=None)
def read_json(name: str):
    """Load one bundled JSON file of ``op_coverage/data/`` by name (cached; treat the result as read-only)."""
    return json.loads(_dir().joinpath(name).read_text(encoding="utf-8"))


def names(suffix: str = ".profile.json") -> list[str]:
    """File names under ``data/`` ending in *suffix*, sorted."""
    return sorted(p.name for p in _dir().iterdir() if p.name.endswith(suffix))


def bundled_profiles() -> list[tuple[str, dict]]:
    """``(file, profile)`` of every bundled ONNX profile, by target name: the runtimes' of
    ``op_coverage/data/*.profile.json`` and the built-in hal backends' ``onnx.profile.json``
    (cached; treat the profiles as read-only)."""
    found = [(f"op_coverage/data/{n}", read_json(n)) for n in names(".profile.json")]
    found += [(path, read_builtin_json(path)) for path in builtin_files(BACKEND_PROFILE)]
    return sorted(found, key=lambda fp: fp[1]["name"])
