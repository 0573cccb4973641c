"""What a checkpoint step holds, and its full model as one safetensors file, without the job's world.

Both work on any hal checkpoint: a sharded one (DTensor model, ``step-N/dcp/``, read with
torch.distributed.checkpoint in this one process, no process group) and a full-state one
(``rank-00000.safetensors``).  Every file is checked against the manifest's sha256 before
it is opened.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Dict, Optional

import torch

from hal.checkpoint import _dcp
from hal.checkpoint._errors import CheckpointError
from hal.checkpoint._files import write_tensors
from hal.checkpoint._layout import MANIFEST, check, newest_complete, rank_stem, step_name
from hal.checkpoint._tree import from_inline

_MODEL_PREFIX = "/model/"


def step_folder(path, step: Optional[int] = None) -> Path:
    """The step folder ``path`` names: itself, ``path/step-N`` for ``step``, or the newest complete."""
    path = Path(path)
    if step is not None:
        path = path / step_name(step)
    if (path / MANIFEST).exists() or path.name.startswith("step-"):
        return path
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such folder; pass a checkpoint root or one of its step-* folders")
    info, skipped = newest_complete(path, verify=False)
    if info is None:
        why = "; ".join(f"{s.path.name}: {s.reason}" for s in skipped) or "no step-* folders"
        raise CheckpointError(f"{path}: no complete checkpoint ({why})")
    return info.path


def _verified(folder: Path, verify: bool) -> dict:
    info = check(folder, verify=verify)
    if not info.complete:
        raise CheckpointError(f"{folder}: refused: {info.reason}; pick another step "
                              "(hal checkpoint ls shows which are complete)")
    return info.manifest


def safetensors_header(path: Path) -> dict:
    """The JSON header of a safetensors file (tensor name -> dtype, shape, offsets; ``__metadata__``),
    read without loading a tensor."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


def describe(path, step: Optional[int] = None, verify: bool = False) -> dict:
    """What ``hal checkpoint info --json`` prints: world size, layout, tensors, data position."""
    folder = step_folder(path, step)
    manifest = _verified(folder, verify)
    mode = manifest.get("mode", "replicated")
    out = {"schema": "hal.checkpoint.info/1", "path": str(folder), "step": manifest.get("step"),
           "mode": mode, "world_size": manifest.get("world_size"), "backend": manifest.get("backend"),
           "device_type": manifest.get("device_type"), "torch_version": manifest.get("torch_version"),
           "hal_version": manifest.get("hal_version"), "verified": verify,
           "files": len(manifest.get("files", {})),
           "bytes": sum(e["bytes"] for e in manifest.get("files", {}).values())}
    sharded = manifest.get("sharded")
    if sharded:
        out["layout"] = sharded.get("layout")
        out["model"] = sharded.get("model", {})
        out["optimizer"] = {"tensors": sharded.get("optimizer_tensors", 0),
                            "bytes": sharded.get("optimizer_bytes", 0)}
    else:
        out["layout"] = {"meshes": [], "text": f"full state on every rank ({mode})"}
        model, opt_n, opt_bytes = {}, 0, 0
        st = folder / f"{rank_stem(0)}.safetensors"
        if f"{rank_stem(0)}.safetensors" in manifest.get("files", {}):
            for name, h in safetensors_header(st).items():
                if name == "__metadata__":
                    continue
                if name.startswith(_MODEL_PREFIX):
                    model[name[len(_MODEL_PREFIX):]] = {"shape": h["shape"], "dtype": h["dtype"],
                                                        "placements": "whole"}
                elif name.startswith("/optimizer/"):
                    opt_n += 1
                    opt_bytes += h["data_offsets"][1] - h["data_offsets"][0]
        out["model"] = model
        out["optimizer"] = {"tensors": opt_n, "bytes": opt_bytes}
    rank0 = folder / f"{rank_stem(0)}.json"
    doc = json.loads(rank0.read_text()) if rank0.is_file() else {}
    state = doc.get("state") or {}
    out["holds"] = sorted(k for k in ("scheduler", "scaler", "extra") if k in state)
    out["states"] = sorted(from_inline(doc["states"])) if doc.get("states") else []  # states=, by name
    out["data"] = (doc.get("data") or {}).get("global") or (
        {"epoch": doc["data"]["epoch"]} if "epoch" in (doc.get("data") or {}) else None)
    return out


def full_model(path, step: Optional[int] = None, verify: bool = True) -> Dict[str, torch.Tensor]:
    """The whole model state of a checkpoint step, assembled in this process (tensors on the CPU)."""
    folder = step_folder(path, step)
    manifest = _verified(folder, verify)
    mode = manifest.get("mode", "replicated")
    if mode == _dcp.MODE:
        return _dcp.full_model(folder)
    if mode == "sharded" and int(manifest.get("world_size", 1)) != 1:
        raise CheckpointError(f"{folder}: saved in mode 'sharded' by {manifest.get('world_size')} ranks, "
                              "each with its own state: there is no one model to write; load it with "
                              "that many ranks")
    from hal.checkpoint._load import _read_tensors

    name = f"{rank_stem(0)}.safetensors"
    if name not in manifest.get("files", {}):
        raise CheckpointError(f"{folder}: holds no tensors (saved without model=)")
    tensors = _read_tensors(folder / name, manifest["files"][name], False)
    model = {k[len(_MODEL_PREFIX):]: v for k, v in tensors.items() if k.startswith(_MODEL_PREFIX)}
    if not model:
        raise CheckpointError(f"{folder}: holds no model state (saved without model=)")
    return model


def consolidate(path, out, step: Optional[int] = None, verify: bool = True) -> Path:
    """Write the full model of a checkpoint step to ``out`` (one safetensors file, no pickle).

    ``path`` is a checkpoint root (the newest complete step, or ``step``) or a step folder.
    Runs in one process without torch.distributed, whatever world size saved it.  The file
    loads with ``safetensors.torch.load_file`` into a plain (unsharded) model.
    """
    tensors = {k: v.contiguous() for k, v in full_model(path, step, verify).items()}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_tensors(out, tensors)
    return out
