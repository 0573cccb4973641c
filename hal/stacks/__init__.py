"""The seams other stacks offer a new device, filled from the selected backend.

Where a stack a user runs has a sanctioned way to add a device, hal fills it rather than patching
the stack: :mod:`hal.stacks.deepspeed` (DeepSpeed's accelerator, installed with
``deepspeed.accelerator.set_accelerator`` before DeepSpeed binds its op builders).  Where none exists,
the library's own switch, from facts: :mod:`hal.stacks.hub_kernels` (Hugging Face's hub kernels off on
devices they have none for) and :func:`cuda_graph_switches` (named when a backend has no CUDA graphs).
``hal run`` installs them; a script without ``hal run`` calls ``hal.stacks.deepspeed.install()``
(docs/redirect.md, "LLM training stacks").
"""
from __future__ import annotations

import functools
from typing import List

from hal.util.data import data_json


@functools.lru_cache(maxsize=1)
def cuda_graph_switches() -> List[dict]:
    """The libraries that capture CUDA graphs on their own once ``torch.cuda.is_available()`` answers
    True, with the switch that makes each run eagerly (``hal/data/cuda_graph_switches.json``: library,
    version read, switch, default, source)."""
    data = data_json("cuda_graph_switches.json")
    return data["switches"]


def cuda_graph_hint() -> str:
    """One line for an error on a backend without CUDA graphs: the switch of every library known to turn
    them on."""
    known = "; ".join(f"{row['library']} {row['switch']}" for row in cuda_graph_switches())
    return (f"run eagerly instead; libraries that capture graphs once torch.cuda.is_available() answers True "
            f"(it does under hal run) have a switch for it: {known}")
