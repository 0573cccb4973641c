"""Bundled data files under ``op_coverage/data/``: target profiles and JSON schemas."""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources


def _dir():
    return resources.files("op_coverage").joinpath("data")


@lru_cache(maxsize=None)
def read_json(name: str):
    """Load one bundled JSON file by name (cached; treat the result as read-only)."""
    return json.loads(_dir().joinpath(name).read_text(encoding="utf-8"))


def names(suffix: str = ".profile.json") -> list[str]:
    """File names under ``data/`` ending in *suffix*, sorted."""
    return sorted(p.name for p in _dir().iterdir() if p.name.endswith(suffix))
