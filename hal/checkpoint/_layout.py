"""Checkpoint folder layout, completeness checks and the ``latest`` pointer.

::

    <dir>/latest                       name of the newest committed checkpoint (a hint)
    <dir>/step-00000100/rank-00000.safetensors   tensors of rank 0
    <dir>/step-00000100/rank-00000.json          everything else of rank 0 (JSON) + RNG
    <dir>/step-00000100/dcp/                     a sharded (DTensor) model's and optimizer's
                                                 state, in torch.distributed.checkpoint's format
    <dir>/step-00000100/manifest.json            written last: sizes and sha256 of every file

A checkpoint is complete when its manifest parses and every listed file has the listed
size (and, with ``verify=True``, the listed sha256).  Anything else is skipped, with the
reason.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from hal.checkpoint._dcp import FOLDER
from hal.checkpoint._files import sha256_file

MANIFEST = "manifest.json"
LATEST = "latest"
SCHEMA = "hal.checkpoint/1"
_STEP_RE = re.compile(r"^step-(\d+)$")


def step_name(step: int) -> str:
    return f"step-{int(step):08d}"


def rank_stem(rank: int) -> str:
    return f"rank-{int(rank):05d}"


@dataclass
class CheckpointInfo:
    """One ``step-*`` folder as :func:`scan` found it."""

    path: Path
    step: int
    complete: bool
    reason: str = ""
    manifest: Optional[dict] = None

    def to_dict(self) -> dict:
        return {"path": str(self.path), "step": self.step, "complete": self.complete,
                "reason": self.reason}


def safe_name(name: str) -> bool:
    """A file name a manifest may list: a plain name in the step folder or in its ``dcp/``."""
    head, sep, tail = name.partition("/")
    if sep:
        return head == FOLDER and bool(tail) and "/" not in tail and "\\" not in tail and tail not in (".", "..")
    return bool(name) and "\\" not in name and not name.startswith(".")


def check(path: Path, verify: bool = True) -> CheckpointInfo:
    """Whether the checkpoint folder ``path`` is complete, and why not."""
    m = _STEP_RE.match(path.name)
    step = int(m.group(1)) if m else -1
    mpath = path / MANIFEST
    if not mpath.is_file():
        return CheckpointInfo(path, step, False, "no manifest.json: the save did not finish")
    try:
        manifest = json.loads(mpath.read_text())
    except (OSError, ValueError) as exc:
        return CheckpointInfo(path, step, False, f"manifest.json unreadable ({exc})")
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        return CheckpointInfo(path, step, False, f"manifest.json is not schema {SCHEMA}")
    for name, entry in manifest.get("files", {}).items():
        f = path / name
        if not safe_name(name):
            return CheckpointInfo(path, step, False, f"manifest lists an unsafe file name {name!r}")
        if not f.is_file():
            return CheckpointInfo(path, step, False, f"{name} is missing")
        size = f.stat().st_size
        if size != entry["bytes"]:
            return CheckpointInfo(path, step, False,
                                  f"{name} has {size} bytes, the manifest says {entry['bytes']}")
        if verify:
            _, sha = sha256_file(f)
            if sha != entry["sha256"]:
                return CheckpointInfo(path, step, False, f"{name} sha256 differs from the manifest "
                                      "(file changed or damaged after the save)")
    return CheckpointInfo(path, int(manifest.get("step", step)), True, "", manifest)


def scan(root, verify: bool = False) -> List[CheckpointInfo]:
    """Every ``step-*`` folder under ``root``, newest first, with completeness and reason."""
    root = Path(root)
    if not root.is_dir():
        return []
    dirs = [p for p in root.iterdir() if p.is_dir() and _STEP_RE.match(p.name)]
    dirs.sort(key=lambda p: int(_STEP_RE.match(p.name).group(1)), reverse=True)
    return [check(p, verify) for p in dirs]


def newest_complete(root, verify: bool = True):
    """``(info or None, skipped)``: the newest complete checkpoint and the newer ones skipped."""
    skipped: List[CheckpointInfo] = []
    for info in scan(root, verify=False):
        if info.complete and verify:
            info = check(info.path, verify=True)
        if info.complete:
            return info, skipped
        skipped.append(info)
    return None, skipped


def read_latest(root) -> Optional[str]:
    """The name the ``latest`` pointer holds, or None."""
    try:
        return (Path(root) / LATEST).read_text().strip() or None
    except OSError:
        return None
