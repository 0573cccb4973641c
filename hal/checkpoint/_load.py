"""Read a checkpoint without executing pickle, verify it, and apply it to live objects."""
from __future__ import annotations

import hashlib
import json
import logging
import pickle
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Mapping, Optional

import torch

from hal.checkpoint import _dcp, _dist, _rng
from hal.checkpoint._errors import CheckpointError, CheckpointWarning
from hal.checkpoint._layout import (MANIFEST, CheckpointInfo, check, newest_complete,
                                    rank_stem, read_latest, step_name)
from hal.checkpoint._save import RANK_SCHEMA, check_states
from hal.checkpoint._tree import decode, from_inline

log = logging.getLogger("hal.checkpoint")

#: file suffixes read with torch.load(weights_only=True) when loading a single file
TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")


@dataclass
class Checkpoint:
    """What :func:`hal.checkpoint.load` / :func:`resume` found and applied.

    ``state`` holds the decoded state dicts (tensors on the CPU) under ``model``,
    ``optimizer``, ``scheduler``, ``scaler`` and ``extra``; ``skipped`` lists newer
    checkpoints that were passed over, each with its reason; ``data`` is this rank's data
    position as a :class:`Checkpointer` saved it (``epoch`` and the loader's state);
    ``states`` the saved ``state_dict()`` of each object given as ``states=`` to the save,
    by name, as this rank restores it.
    """

    path: Path
    step: int
    state: dict
    manifest: dict = field(default_factory=dict)
    rng_applied: List[str] = field(default_factory=list)
    skipped: List[CheckpointInfo] = field(default_factory=list)
    data: Optional[dict] = None
    #: what changed between the saving and the loading world (ranks, layout, RNG dropped),
    #: one sentence; None when the checkpoint is loaded as it was saved
    reshard: Optional[str] = None
    states: dict = field(default_factory=dict)

    @property
    def epoch(self) -> Optional[int]:
        """The epoch the data position belongs to (None when no data position was saved)."""
        return (self.data or {}).get("epoch")

    @property
    def extra(self) -> dict:
        """The ``extra=`` dict given to save (empty when none)."""
        return self.state.get("extra") or {}


def _read(path: Path, entry: Optional[dict], verify: bool) -> bytes:
    data = path.read_bytes()
    if entry is not None:
        if len(data) != entry["bytes"]:
            raise CheckpointError(f"{path}: {len(data)} bytes, the manifest says {entry['bytes']}; "
                                  "the checkpoint is damaged: resume from an older one")
        if verify and hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise CheckpointError(f"{path}: sha256 differs from the manifest; refused (the file was "
                                  "changed or damaged after the save): resume from an older one")
    return data


def _read_tensors(path: Path, entry: Optional[dict], verify: bool) -> dict:
    from safetensors.torch import load as st_load
    data = _read(path, entry, verify)
    try:
        return st_load(data)
    except Exception as exc:  # safetensors raises SafetensorError (a name that moved between versions)
        raise CheckpointError(f"{path}: not a valid safetensors file ({exc}); refused without "
                              "executing anything: resume from an older checkpoint") from None


def _read_doc(path: Path, entry: Optional[dict], verify: bool) -> dict:
    try:
        doc = json.loads(_read(path, entry, verify))
    except ValueError as exc:
        raise CheckpointError(f"{path}: not JSON ({exc}); the checkpoint is damaged") from None
    if not isinstance(doc, dict) or doc.get("schema") != RANK_SCHEMA:
        raise CheckpointError(f"{path}: not a hal rank file (schema {RANK_SCHEMA} expected)")
    return doc


@dataclass
class RankRead:
    """What :func:`read_step` found for one rank."""

    state: dict
    rng: Optional[dict]
    manifest: dict
    #: the rank's own data position (None when it saved none, or the rank had no file of its own)
    data: Optional[dict]
    #: the saved ``state_dict()`` of each named object (``states=``) and the rank that saved them:
    #: this rank, or rank 0 for a rank that did not exist at save time
    states: dict = field(default_factory=dict)
    states_rank: Optional[int] = None


def read_step(path: Path, rank: int, world: int, verify: bool = True) -> RankRead:
    """What the checkpoint folder ``path`` holds for ``rank``: state, RNG, data position, named states."""
    info = check(path, verify=False)
    if not info.complete:
        raise CheckpointError(f"{path}: incomplete checkpoint ({info.reason}); "
                              "pass the parent folder to resume from the newest complete one")
    manifest = info.manifest
    files = manifest["files"]
    mode, saved_world = manifest.get("mode", "replicated"), int(manifest.get("world_size", 1))
    if mode == "sharded" and saved_world != world:
        raise CheckpointError(f"{path}: saved by {saved_world} rank(s) in sharded mode, loaded by {world}; "
                              f"run with {saved_world} ranks, or save with mode='replicated'")
    state_rank = rank if mode == "sharded" else 0

    def get(name, reader):
        if name not in files:
            return None
        return reader(path / name, files[name], verify)

    tensors = get(f"{rank_stem(state_rank)}.safetensors", _read_tensors) or {}
    doc = get(f"{rank_stem(state_rank)}.json", _read_doc)
    if doc is None:
        raise CheckpointError(f"{path}: the manifest lists no {rank_stem(state_rank)}.json; damaged checkpoint")
    state = decode(doc.get("state") or {}, tensors)
    rng_doc = doc if state_rank == rank else get(f"{rank_stem(rank)}.json", _read_doc)
    rng = (rng_doc or {}).get("rng")
    data = (rng_doc or {}).get("data")
    shared = (doc.get("data") or {}).get("global")
    if shared is not None and "global" not in (data or {}):
        # a global data position (ElasticSampler) is the same on every rank: a rank that did
        # not exist at save time takes rank 0's
        data = {"epoch": shared["epoch"], "global": shared}
    states_doc, states_rank = (rng_doc or {}).get("states"), rank
    if rng_doc is None and doc.get("states") is not None:
        states_doc, states_rank = doc["states"], state_rank  # a rank that did not exist at save time
    states = from_inline(states_doc) if states_doc is not None else {}
    return RankRead(state, rng, manifest, data, states, states_rank if states else None)


def _load_file(path: Path) -> dict:
    if path.suffix == ".safetensors":
        return {"model": _read_tensors(path, None, False)}
    try:
        with warnings.catch_warnings():  # torch notes the protocol of legacy pickles; the verdict below says more
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"{path}: refused: the pickle holds objects other than tensors and plain containers "
            f"({first[:200]}); hal never executes pickle code on load. Load it yourself with "
            "torch.load(weights_only=False) only if you trust where it came from, then re-save "
            "with hal.checkpoint.save") from None
    except (OSError, RuntimeError, EOFError) as exc:
        raise CheckpointError(f"{path}: cannot be read as a torch file ({exc})") from None
    if isinstance(obj, dict) and "model" not in obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        obj = {"model": obj}
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: holds a {type(obj).__name__}, not a state dict")
    return obj


def apply(state: dict, *, model=None, optimizer=None, scheduler=None, scaler=None,
          strict: bool = True) -> None:
    """Load the decoded ``state`` into the given objects (RNG is separate)."""
    given = {"model": model, "optimizer": optimizer, "scheduler": scheduler, "scaler": scaler}
    for key, obj in given.items():
        if obj is None:
            continue
        if key not in state:
            raise CheckpointError(f"{key}= was given but the checkpoint holds no {key} state; "
                                  f"it was saved without {key}= (or on a rank that saves no state)")
        sd = state[key]
        if key == "scaler" and not sd:
            if getattr(obj, "is_enabled", lambda: False)():
                warnings.warn(CheckpointWarning("the checkpoint's grad scaler was disabled when saved; "
                                                "the enabled scaler keeps its initial scale"), stacklevel=3)
            continue
        try:
            if key == "model":
                obj.load_state_dict(sd, strict=strict)
            else:
                obj.load_state_dict(sd)
        except (RuntimeError, ValueError, KeyError) as exc:
            raise CheckpointError(f"{key}: the checkpoint's state does not fit this {type(obj).__name__} "
                                  f"({str(exc).splitlines()[0]})") from None
    if model is not None:
        for key in ("optimizer", "scheduler", "scaler"):
            if key in state and state[key] and given[key] is None:
                warnings.warn(CheckpointWarning(
                    f"the checkpoint holds {key} state but no {key}= was given, so it is not restored "
                    f"(a missing LR scheduler restarts the schedule); pass {key}= to resume exactly"),
                    stacklevel=3)


def apply_states(saved: dict, states: Optional[Mapping], path, warn_unrestored: bool) -> None:
    """``load_state_dict`` of each object of ``states`` with its saved state (``saved``, by name).

    A name the checkpoint lacks is refused; a saved state no object was given for warns when
    ``warn_unrestored`` (a forgotten sampler or loader silently starts over otherwise).
    """
    for name, obj in (states or {}).items():
        if name not in saved:
            held = ", ".join(repr(n) for n in sorted(saved)) or "none"
            raise CheckpointError(f"states[{name!r}]: {path} holds no state of that name (its states: {held}); "
                                  "it was saved without it: leave it out of states=, or resume from a "
                                  "checkpoint saved with it")
        try:
            obj.load_state_dict(saved[name])
        except (KeyError, ValueError, TypeError, RuntimeError, AttributeError, IndexError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise CheckpointError(f"states[{name!r}]: {path}'s state does not fit this {type(obj).__name__} "
                                  f"({type(exc).__name__}: {first}); build it as it was built when saving") from None
    unrestored = sorted(set(saved) - set(states or {}))
    if unrestored and warn_unrestored:
        warnings.warn(CheckpointWarning(
            f"{path} holds the state of {', '.join(repr(n) for n in unrestored)} (saved with states=) but no "
            f"such object was given, so it is not restored; pass states={{{unrestored[0]!r}: ...}} to resume "
            "it"), stacklevel=4)


def load(path, *, model=None, optimizer=None, scheduler=None, scaler=None, states: Optional[Mapping] = None,
         restore_rng: bool = True, strict: bool = True, verify: bool = True) -> Checkpoint:
    """Load one checkpoint and apply it to the given objects.

    ``path`` may be a checkpoint folder (``.../step-00000100``), a checkpoint root (the
    newest complete checkpoint under it is used, like :func:`resume` but an error when
    there is none), or a single ``.safetensors`` / ``.pt`` file (read with
    ``torch.load(weights_only=True)``: a pickle that would run code is refused).

    :param states: named objects with ``load_state_dict()`` (``Stateful``: a sampler, a data
        loader...) to restore from the states saved under the same names.
    :param verify: check every file read against the manifest's sha256.
    :param restore_rng: restore python / numpy / torch CPU / device generators.
    :raises CheckpointError: when nothing loadable is there; the message says why.
    """
    path = Path(path)
    check_states(states)
    if path.is_file():
        if states:
            raise CheckpointError(f"{path}: a single file holds no states=; pass the checkpoint folder "
                                  "hal.checkpoint wrote to restore them")
        state = _load_file(path)
        apply(state, model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler, strict=strict)
        return Checkpoint(path, int(state.get("step", -1)) if isinstance(state.get("step"), int) else -1, state)
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such file or folder; pass a checkpoint folder or the "
                              "folder given to hal.checkpoint.save")
    if not (path / MANIFEST).exists() and any(path.glob("step-*")):
        ck = resume(path, model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler, states=states,
                    restore_rng=restore_rng, strict=strict, verify=verify)
        if ck is None:
            raise CheckpointError(f"{path}: no complete checkpoint (see the log for each one's reason)")
        return ck
    if not (path / MANIFEST).exists() and not any(path.glob("rank-*")):
        raise CheckpointError(f"{path}: not a hal checkpoint (no manifest.json and no step-* folders); "
                              "files other than those a hal manifest lists are never opened")
    if verify:
        info = check(path, verify=True)
        if not info.complete:
            raise CheckpointError(f"{path}: refused: {info.reason}; pass the parent folder to "
                                  "resume from the newest complete checkpoint")
    return _load_step(path, model, optimizer, scheduler, scaler, restore_rng, strict, verify=False, states=states)


def _load_step(path, model, optimizer, scheduler, scaler, restore_rng, strict, verify,
               skipped=(), quiet: bool = False, states: Optional[Mapping] = None) -> Checkpoint:
    rank, world = _dist.rank_world()
    read = read_step(path, rank, world, verify)
    state, rng, manifest, data = read.state, read.rng, read.manifest, read.data
    reshard = None
    if manifest.get("mode") == _dcp.MODE:
        if optimizer is not None and model is None:
            raise CheckpointError(f"{path}: optimizer= without model=: the sharded optimizer state is "
                                  "keyed by the model's parameter names; pass model= too")
        if model is not None:
            _dcp.load(path, model, optimizer, _dist.group())
            reshard = _reshard_text(path, manifest, model, world)
        apply(state, scheduler=scheduler, scaler=scaler, strict=strict)
    else:
        if _dcp.holds_dtensor(model):
            raise CheckpointError(f"{path}: a full-state checkpoint (mode {manifest.get('mode')!r}) cannot "
                                  "be loaded into a model with DTensor parameters (FSDP2, tensor parallel); "
                                  "load it into the model before fully_shard / parallelize_module, or "
                                  "save again from the sharded model")
        apply(state, model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler, strict=strict)
    apply_states(read.states, states, path, warn_unrestored=model is not None or states is not None)
    if states and read.states_rank is not None and read.states_rank != rank:
        warnings.warn(CheckpointWarning(
            f"{path} was saved by {manifest.get('world_size')} rank(s), so rank {rank} has no states of its own: it "
            f"restored rank {read.states_rank}'s ({', '.join(repr(n) for n in sorted(states))}); right for a state "
            "every rank holds alike, not for a per-rank position (give a data loader as dataloader= to a "
            "Checkpointer, which re-splits it)"), stacklevel=3)
    if reshard and rank == 0 and not quiet:
        log.warning("hal.checkpoint: %s", reshard)
    step = int(manifest["step"])
    applied: List[str] = []
    if restore_rng:
        if rng:
            applied = _rng.restore(rng, step, rank)
        else:
            _reseed_missing(step, rank, world, manifest)
    return Checkpoint(path, step, state, manifest, applied, list(skipped), data, reshard, states=read.states)


def _reshard_text(path, manifest: dict, model, world: int) -> Optional[str]:
    """One sentence on what DCP resharded and whose RNG was dropped; None when nothing changed."""
    saved_world = int(manifest.get("world_size", 1))
    saved = ((manifest.get("sharded") or {}).get("layout") or {}).get("text", "?")
    now = _dcp.layout(model)["text"]
    if saved_world == world and saved == now:
        return None
    text = (f"{path} was saved by {saved_world} rank(s) [{saved}] and is loaded by {world} [{now}]: "
            "model and optimizer state resharded by torch.distributed.checkpoint")
    if saved_world > world:
        gone = ", ".join(str(r) for r in range(world, saved_world))
        text += f"; the RNG state of rank(s) {gone} dropped (no rank runs them now)"
    elif saved_world < world:
        new = ", ".join(str(r) for r in range(saved_world, world))
        text += f"; rank(s) {new} have no saved RNG state and are reseeded from step and rank"
    return text


def _reseed_missing(step, rank, world, manifest) -> None:
    import random
    seed = _rng.reseed_value(step, rank)
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np
        np.random.seed(seed % 2 ** 32)
    except ImportError:  # pragma: no cover
        pass
    warnings.warn(CheckpointWarning(
        f"the checkpoint holds no RNG state for rank {rank} (saved by {manifest.get('world_size')} rank(s), "
        f"loaded by {world}); python, numpy and torch generators reseeded with {seed} "
        f"(derived from step {step}, rank {rank})"), stacklevel=4)


def resume(dir, *, model=None, optimizer=None, scheduler=None, scaler=None, states: Optional[Mapping] = None,
           restore_rng: bool = True, strict: bool = True, verify: bool = True,
           quiet: bool = False) -> Optional[Checkpoint]:
    """Restore the newest complete checkpoint under ``dir``; None when there is none.

    ``states`` (named objects with ``load_state_dict()``) get the states saved under their
    names, each rank its own.

    Incomplete or damaged checkpoints newer than the one used are skipped and logged
    (logger ``hal.checkpoint``, level WARNING) with the reason, and listed in
    ``Checkpoint.skipped``.  Collective under torch.distributed: rank 0 chooses, every
    rank loads the same step.  A sharded (DTensor) checkpoint is resharded by
    torch.distributed.checkpoint to the model's layout now, at any world size; rank 0 logs
    one line saying what changed (``Checkpoint.reshard``; ``quiet=True`` leaves the logging
    to the caller).
    """
    root = Path(dir)
    check_states(states)
    group = _dist.group()
    rank, _ = _dist.rank_world()
    choice = None
    if rank == 0:
        info, skipped = newest_complete(root, verify=verify)
        for s in skipped:
            log.warning("hal.checkpoint: skipped %s: %s", s.path, s.reason)
        pointer = read_latest(root)
        if info is not None and pointer and pointer != step_name(info.step):
            log.warning("hal.checkpoint: %s/latest names %s; using %s, the newest complete checkpoint",
                        root, pointer, info.path.name)
        choice = (str(info.path) if info else None, [(str(s.path), s.step, s.reason) for s in skipped])
    choice = _dist.broadcast(choice, group)
    chosen, skipped_raw = choice
    skipped = [CheckpointInfo(Path(p), st, False, r) for p, st, r in skipped_raw]
    if chosen is None:
        if skipped:
            log.warning("hal.checkpoint: no complete checkpoint under %s; starting from scratch", root)
        return None
    return _load_step(Path(chosen), model, optimizer, scheduler, scaler, restore_rng, strict,
                      verify=verify and rank != 0, skipped=skipped, quiet=quiet, states=states)


def latest(dir, verify: bool = False) -> Optional[Path]:
    """Folder of the newest complete checkpoint under ``dir`` (None when there is none).

    Completeness means the manifest exists and every file it lists has its size;
    ``verify=True`` also checks the sha256 of every file.
    """
    info, _ = newest_complete(Path(dir), verify=verify)
    return info.path if info else None
