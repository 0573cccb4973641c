"""Calibration inputs for static INT8: the user's ``.npz`` files, or generated ones (and the report says so).

``--calibration data.npz``: one array per model input; when every array has one axis more than
its input, the first axis counts samples (``np.savez("cal.npz", x=np.stack(samples))``).
``--calibration DIR``: every ``*.npz`` in the folder (sorted) is one sample.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from op_coverage.rewrite.verify import BadInputs, graph_inputs, generate_inputs, load_inputs

#: generated calibration samples when none are given
GENERATED_SAMPLES = 8


def load_calibration(spec: str, model) -> list[dict]:
    """Feed dicts from an ``.npz`` file or a folder of them; raises :class:`BadInputs` (exit 18) naming the file."""
    p = Path(spec)
    if p.is_dir():
        files = sorted(p.glob("*.npz"))
        if not files:
            raise BadInputs(f"--calibration {p}: folder holds no *.npz file; save one sample per file with np.savez")
        return [load_inputs([str(f)], model) for f in files]
    if not p.is_file():
        raise BadInputs(f"--calibration {p}: no such file or folder; pass an .npz file or a folder of them")
    if p.suffix != ".npz":
        raise BadInputs(f"--calibration {p}: expected an .npz file (np.savez) or a folder of them")
    feeds = load_inputs([str(p)], model)
    ranks = {vi.name: len(vi.type.tensor_type.shape.dim) for vi in graph_inputs(model)}
    if feeds and all(a.ndim == ranks[n] + 1 for n, a in feeds.items()):
        counts = {a.shape[0] for a in feeds.values()}
        if len(counts) != 1:
            raise BadInputs(f"--calibration {p}: arrays have different sample counts {sorted(counts)}; "
                            "stack the same number of samples for every input")
        return [{n: a[i] for n, a in feeds.items()} for i in range(counts.pop())]
    return [feeds]


def generated_calibration(model, seed: int, dims: dict, samples: int = GENERATED_SAMPLES) -> list[dict]:
    """*samples* random feed sets (standard normal floats), seeds ``seed + 1 ...``."""
    return [generate_inputs(model, seed + 1 + i, dims) for i in range(samples)]


def describe(feeds: list[dict]) -> dict:
    """``{"samples": n, "shapes": {input: shape of the first sample}}`` for the report."""
    return {"samples": len(feeds), "shapes": {k: list(np.shape(v)) for k, v in (feeds[0] if feeds else {}).items()}}
