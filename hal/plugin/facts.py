"""The fused kernels built-in plugins declare, read from ``hal/data/fused_kernels.json``.

The file is the facts (vendor function, arguments, source, confidence, how the adapter
bridges conventions); plugins take only the ``kernel`` column::

    VendorPlugin(builtin_spec("ascend"), fused_kernels=builtin_fused_kernels("ascend"))
"""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Dict


@lru_cache(maxsize=1)
def fused_kernel_facts() -> dict:
    """The whole data file (schema ``hal.fused_kernels/1``)."""
    return json.loads(resources.files("hal").joinpath("data/fused_kernels.json").read_text(encoding="utf-8"))


def builtin_fused_kernels(backend: str) -> Dict[str, str]:
    """``{hal op: "module:function"}`` declared for the built-in ``backend`` (empty if none)."""
    table = fused_kernel_facts()["backends"].get(backend, {})
    return {op: entry["kernel"] for op, entry in table.items()}
