"""The emulator's native op set, read from ``hal/emu/native_ops.json``."""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import FrozenSet


@lru_cache(maxsize=None)
def profile() -> dict:
    """The native op set file as a dict (schema ``hal.emu_native_ops/1``)."""
    text = resources.files("hal.emu").joinpath("native_ops.json").read_text(encoding="utf-8")
    return json.loads(text)


@lru_cache(maxsize=None)
def native_packets() -> FrozenSet[str]:
    """Overload packets (``"aten::add"``) the emulator runs natively."""
    return frozenset(f"aten::{name}" for group in profile()["native"].values() for name in group)
