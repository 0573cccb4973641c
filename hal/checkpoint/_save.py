"""Snapshot the training state to host memory, then commit it to disk crash-safely."""
from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Mapping, Optional

import torch

from hal.util.io import atomic_write, fsync_dir
from hal.checkpoint import _dcp, _dist, _rng
from hal.checkpoint._errors import CheckpointError
from hal.checkpoint._files import crash_point, write_json, write_tensors
from hal.checkpoint._layout import (LATEST, MANIFEST, SCHEMA, check, rank_stem, scan,
                                    step_name)
from hal.checkpoint._tree import encode, to_inline

log = logging.getLogger("hal.checkpoint")

MODES = ("replicated", "sharded")
RANK_SCHEMA = "hal.checkpoint.rank/1"


@dataclass
class Snapshot:
    """The whole state of one rank in host memory, ready to be written by any thread."""

    step: int
    rank: int
    world_size: int
    mode: str
    doc: dict
    tensors: Optional[Dict[str, torch.Tensor]] = None
    nbytes: int = 0
    #: model / optimizer state for torch.distributed.checkpoint (a DTensor model), else None
    sharded: Optional[dict] = None
    #: what the manifest records about a sharded state: layout, tensors (None otherwise)
    sharded_info: Optional[dict] = None


def _snapshotter(clone: bool):
    pending = []

    def snap(t: torch.Tensor) -> torch.Tensor:
        if t.is_sparse or t.layout != torch.strided:
            raise CheckpointError(f"a tensor with layout {t.layout} cannot be stored; convert it with "
                                  ".to_dense() before saving")
        t = t.detach()
        if t.is_conj():
            t = t.resolve_conj()
        if t.is_neg():
            t = t.resolve_neg()
        if t.device.type != "cpu":
            try:
                buf = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
                buf.copy_(t, non_blocking=True)
                pending.append(t.device)
                return buf
            except RuntimeError:
                return t.to("cpu")
        if clone or not t.is_contiguous():
            return t.clone(memory_format=torch.contiguous_format)
        return t

    def wait() -> None:
        for dev in set(pending):
            torch.get_device_module(dev.type).synchronize(dev)
        pending.clear()

    return snap, wait


def _check_data(data: Optional[dict]) -> None:
    if data is None:
        return
    try:
        json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"the data position is not JSON data ({exc}); a data loader whose "
                              "state_dict() holds objects other than tensors, numbers, strings, lists "
                              "and dicts cannot be saved without pickle: convert them") from None


def check_states(states) -> None:
    """Refuse a ``states=`` that is not a mapping of names to objects with ``state_dict()`` and
    ``load_state_dict()`` (what ``torch.distributed.checkpoint.stateful.Stateful`` describes)."""
    if states is None:
        return
    if not isinstance(states, Mapping):
        raise CheckpointError(f"states={type(states).__name__}: must be a dict of names to objects with state_dict() "
                              "and load_state_dict() (torch.distributed.checkpoint.stateful.Stateful), for "
                              "example states={'sampler': sampler}")
    for name, obj in states.items():
        if not isinstance(name, str) or not name:
            raise CheckpointError(f"states: the name {name!r} is not a non-empty string; name each object, for "
                                  "example states={'sampler': sampler}")
        if isinstance(obj, type):
            raise CheckpointError(f"states[{name!r}]={obj.__name__}: a class; pass the object itself "
                                  f"(an instance of {obj.__name__})")
        if not (callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))):
            raise CheckpointError(f"states[{name!r}]={type(obj).__name__}: has no state_dict() / load_state_dict(); "
                                  "pass an object implementing torch.distributed.checkpoint.stateful.Stateful "
                                  "(both methods), or save plain values with extra=")


def _dtensor_at(obj, path: str) -> Optional[str]:
    """The path of the first DTensor in ``obj``, or None."""
    if _dcp.is_dtensor(obj):
        return path
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    for k, v in items:
        found = _dtensor_at(v, f"{path}/{k}")
        if found:
            return found
    return None


def capture_states(states: Optional[Mapping]) -> Optional[dict]:
    """This rank's ``state_dict()`` of each named object, as one JSON document (tensors inline).

    Called at the save, so the document is the objects' state at that moment.  Meant for the
    small states of a sampler, a data loader, a schedule, a counter: its tensors are stored in
    base64 in the rank's JSON file.
    """
    if not states:
        return None
    saved = {}
    for name, obj in states.items():
        sd = obj.state_dict()
        where = _dtensor_at(sd, f"states/{name}")
        if where:
            raise CheckpointError(f"{where}: a DTensor (a sharded tensor) in the state of states[{name!r}]; hal saves "
                                  "sharded state through torch.distributed.checkpoint for the model and optimizer "
                                  "only: pass that module as model= (or its full tensor: .full_tensor())")
        saved[name] = sd
    return to_inline(saved, "states")


def snapshot(step: int, *, model=None, optimizer=None, scheduler=None, scaler=None,
             states: Optional[Mapping] = None, extra: Optional[dict] = None, mode: str = "replicated",
             clone: bool = True, rng: bool = True, data: Optional[dict] = None) -> Snapshot:
    """Host copy of the training state of this rank (``clone=False`` shares CPU tensors).

    ``data`` is this rank's own data position (epoch, loader state), kept per rank, and so is
    ``states`` (named objects with ``state_dict()``: each rank saves its own objects' state).  A
    model with DTensor parameters (FSDP2, tensor parallel) is not copied here: its model
    and optimizer state go to ``Snapshot.sharded`` for torch.distributed.checkpoint, and
    the rest (scheduler, scaler, extra) is saved by rank 0 as in ``"replicated"`` mode.
    """
    check_states(states)
    if mode not in MODES:
        raise CheckpointError(f"mode={mode!r}: unknown distributed mode; use 'replicated' (rank 0 "
                              "saves the state every rank holds) or 'sharded' (each rank saves its own)")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise CheckpointError(f"step={step!r}: the step must be a non-negative int")
    rank, world = _dist.rank_world()
    sharded = sharded_info = None
    if _dcp.holds_dtensor(model):
        sharded = _dcp.state(model, optimizer)
        sharded_info = {"format": "torch.distributed.checkpoint", "folder": _dcp.FOLDER,
                        "layout": _dcp.layout(model), **_dcp.tensors_info(sharded)}
        model = optimizer = None
        mode = "replicated"
    saves_state = mode == "sharded" or rank == 0
    state = {}
    if saves_state:
        for key, obj in (("model", model), ("optimizer", optimizer), ("scheduler", scheduler),
                         ("scaler", scaler)):
            if obj is not None:
                if not hasattr(obj, "state_dict"):
                    raise CheckpointError(f"{key}={type(obj).__name__}: has no state_dict(); pass the "
                                          f"{key} object itself (torch.nn.Module, torch.optim.Optimizer, ...)")
                state[key] = obj.state_dict()
        if extra is not None:
            if not isinstance(extra, dict):
                raise CheckpointError(f"extra={type(extra).__name__}: extra must be a dict "
                                      "(for example {'sampler_position': 1234})")
            state["extra"] = extra
    tensors: Dict[str, torch.Tensor] = {}
    snap, wait = _snapshotter(clone)
    doc_state = encode(state, tensors, "", snap) if saves_state else None
    wait()
    _check_data(data)
    if sharded is not None:
        mode = _dcp.MODE
    doc = {"schema": RANK_SCHEMA, "step": step, "rank": rank, "world_size": world, "mode": mode,
           "state": doc_state, "rng": _rng.capture() if rng else None}
    if data is not None:
        doc["data"] = data
    saved_states = capture_states(states)
    if saved_states is not None:
        doc["states"] = saved_states
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    return Snapshot(step, rank, world, mode, doc, tensors if saves_state else None, nbytes,
                    sharded, sharded_info)


def _invalidate(step_dir: Path) -> None:
    """Before re-saving a step: drop its manifest first (so it is never half-trusted), then
    the temp files a killed save left behind."""
    m = step_dir / MANIFEST
    if m.exists():
        m.unlink()
        fsync_dir(step_dir)
    for tmp in step_dir.glob(".*.tmp"):
        tmp.unlink()
    shutil.rmtree(step_dir / _dcp.FOLDER, ignore_errors=True)


class CheckpointWriteError(CheckpointError):
    """A save that could not be written (disk full, quota, file size limit, I/O error).

    Raised on every rank alike; nothing of the failed step is left on disk.  ``errno`` is
    the first failing rank's OS error number; ``no_space`` says whether it means the
    storage is full (``ENOSPC``, ``EDQUOT``, ``EFBIG``).
    """

    def __init__(self, message: str, errno_: Optional[int] = None):
        super().__init__(message)
        self.errno = errno_

    @property
    def no_space(self) -> bool:
        return self.errno in NO_SPACE_ERRNOS


#: OS errors that mean "the storage is full" rather than "hal or the data is wrong"
NO_SPACE_ERRNOS = {errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)}


def _describe(exc: OSError) -> str:
    return f"{exc.strerror or exc} (errno {exc.errno})" if exc.errno else str(exc)


def _drop(step_dir: Path) -> None:
    """Remove a step folder that will never be committed (rename first: never half-deleted)."""
    if not step_dir.exists():
        return
    trash = step_dir.with_name(f".trash-{step_dir.name}-{os.getpid()}")
    try:
        os.replace(step_dir, trash)
        fsync_dir(step_dir.parent)
    except OSError:
        trash = step_dir
    shutil.rmtree(trash, ignore_errors=True)


def persist(root, snap: Snapshot, keep_last: Optional[int] = None, group=None) -> Path:
    """Write ``snap`` under ``root`` and, on rank 0, commit the manifest and ``latest``.

    Must be called by every rank (collective when torch.distributed is initialised).  When
    any rank cannot write (disk full, quota, I/O error), no rank commits: rank 0 removes the
    step folder and every rank raises the same :class:`CheckpointWriteError`, so the ranks
    never disagree about which checkpoints exist.
    """
    step_dir, failure = open_step(root, snap, group)
    pending = None
    if snap.sharded is not None and failure is None:
        pending = _dcp.start(step_dir, snap.sharded, snap.rank, group, async_save=False)
    return commit(root, step_dir, snap, keep_last, group, failure, pending)


def open_step(root, snap: Snapshot, group):
    """Rank 0 creates (or clears) the step folder; every rank learns whether it could.

    Returns ``(step_dir, failure)``; ``failure`` is ``(rank, errno, text)`` or None, the same
    on every rank, so that all of them skip the writes (and DCP's collectives) alike.
    """
    root = Path(root)
    step_dir = root / step_name(snap.step)
    failure = None
    if snap.rank == 0:
        try:
            root.mkdir(parents=True, exist_ok=True)
            if step_dir.exists():
                _invalidate(step_dir)
            step_dir.mkdir(exist_ok=True)  # made durable by the commit (fsync of root), not here:
            # under async saving this runs while the training loop waits
        except OSError as exc:
            failure = (0, exc.errno, f"cannot create {step_dir}: {_describe(exc)}")
    return step_dir, _dist.broadcast(failure, group)


def commit(root, step_dir: Path, snap: Snapshot, keep_last: Optional[int], group, failure=None,
           pending: Optional["_dcp.Pending"] = None) -> Path:
    """The second half of :func:`persist`: this rank's files, then rank 0's manifest.

    ``pending`` is the DCP save of a sharded state started after :func:`open_step`; its
    files are hashed into the manifest like hal's own.
    """
    root = Path(root)
    stem = rank_stem(snap.rank)
    entries: Dict[str, dict] = {}
    if failure is None and pending is not None:
        shard_entries, failure = pending.finish()
        entries.update(shard_entries)
    if failure is None:
        try:
            step_dir.mkdir(parents=True, exist_ok=True)
            if snap.tensors is not None:
                entries.update(write_tensors(step_dir / f"{stem}.safetensors", snap.tensors))
            entries.update(write_json(step_dir / f"{stem}.json", snap.doc))
            fsync_dir(step_dir)
        except OSError as exc:
            failure = (snap.rank, exc.errno, f"rank {snap.rank} cannot write {step_dir}: {_describe(exc)}")
    crash_point("rank-files")
    gathered = _dist.gather((entries, failure), group)
    outcome = None
    if snap.rank == 0:
        failures = [f for _, f in gathered if f is not None]
        if not failures:
            try:
                _commit_manifest(root, step_dir, snap, [e for e, _ in gathered])
            except OSError as exc:
                failures = [(0, exc.errno, f"cannot commit {step_dir / MANIFEST}: {_describe(exc)}")]
        if failures:
            _drop(step_dir)
            outcome = failures[0]
        elif keep_last:
            apply_retention(root, keep_last)
    outcome = _dist.broadcast(outcome, group)
    if outcome is not None:
        rank, err, text = outcome
        raise CheckpointWriteError(f"checkpoint of step {snap.step} not saved: {text}; the step folder "
                                   "was removed and the older checkpoints are untouched. Free space "
                                   f"under {root} (or lower keep_last) so that the next save succeeds",
                                   err)
    return step_dir


def _commit_manifest(root: Path, step_dir: Path, snap: Snapshot, gathered) -> None:
    files = {}
    for r, ent in enumerate(gathered):
        for name, e in ent.items():
            files[name] = dict(e, rank=r)
    from hal._version import __version__
    manifest = {"schema": SCHEMA, "step": snap.step, "world_size": snap.world_size,
                "mode": snap.mode, "created_unix": time.time(), "hal_version": __version__,
                "torch_version": torch.__version__,
                "backend": (snap.doc.get("rng") or {}).get("backend"),
                "device_type": (snap.doc.get("rng") or {}).get("device_type"),
                "files": files}
    if snap.sharded_info is not None:
        manifest["sharded"] = snap.sharded_info
    fsync_dir(root)  # the step folder's own entry, created by open_step, before its manifest
    write_json(step_dir / MANIFEST, manifest, partial_point="manifest-partial")
    fsync_dir(step_dir)
    crash_point("manifest-committed")
    atomic_write(root / LATEST, step_name(snap.step) + "\n")


def apply_retention(root: Path, keep_last: int) -> None:
    """Keep the newest ``keep_last`` complete checkpoints; drop older ones and older debris.

    A folder is first renamed to a hidden trash name (atomic), then deleted, so a crash
    mid-delete never leaves something that looks like a checkpoint.
    """
    infos = scan(root)
    complete = [i for i in infos if i.complete]
    if not complete:
        return
    keep = {i.path for i in complete[:keep_last]}
    oldest_kept = complete[:keep_last][-1].step
    for info in infos:
        if info.path in keep:
            continue
        if info.complete or info.step < oldest_kept:
            trash = info.path.with_name(f".trash-{info.path.name}-{os.getpid()}")
            os.replace(info.path, trash)
            fsync_dir(root)
            crash_point("retention")
            shutil.rmtree(trash, ignore_errors=True)
            if not info.complete:
                log.info("removed incomplete checkpoint %s (%s)", info.path, info.reason)
    for stale in root.glob(".trash-step-*"):
        shutil.rmtree(stale, ignore_errors=True)


def is_complete(path) -> bool:
    """True when the checkpoint folder ``path`` passes the size and sha256 checks."""
    return check(Path(path), verify=True).complete
