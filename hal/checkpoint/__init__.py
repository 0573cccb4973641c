"""Crash-safe checkpoint and resume of the whole training state, portable across devices.

::

    import hal.checkpoint

    saver = hal.checkpoint.Checkpointer("ckpt", every=100, model=model, optimizer=opt,
                                        scheduler=sched, scaler=scaler, dataloader=loader)
    ck = saver.resume()                              # None on a fresh start
    step, epoch = (ck.step, ck.epoch or 0) if ck else (0, 0)
    with saver:                                      # async saves; failures are recorded
        while step < total_steps:
            sampler.set_epoch(epoch)
            for batch in loader:                     # a StatefulDataLoader: resumes mid-epoch
                ...
                step += 1
                saver.step(step)                     # saves every 100 steps
                if step == total_steps:
                    break
            epoch += 1

What is saved: model, optimizer, LR scheduler, grad scaler, step, the data position (each
rank's loader state and sampler epoch), any other object with ``state_dict()`` given by name
in ``states=`` (``Stateful``, as DCP accepts them), user extras and the RNG
of python, numpy, the torch CPU generator and the current device (keyed ``"cpu"``,
``"cuda:0"``, ``"npu:1"``...).  Tensors go to safetensors, everything else to JSON: no
pickle is executed on load.  A save writes temp files, fsyncs and renames them, writes
``manifest.json`` (sizes, sha256) last and only then moves the ``latest`` pointer; resume
picks the newest complete checkpoint and logs why it skipped any other.
A model with DTensor parameters (FSDP2, tensor parallel, 2-D) is saved through
``torch.distributed.checkpoint`` in ``step-N/dcp/`` under the same commit protocol and
resumed at any world size or layout; :class:`ElasticSampler` keeps a global data position
that re-splits with it.
See ``docs/checkpoint.md``; for jobs that restart themselves under torchrun
(``--max-restarts``), ``docs/fault-tolerance.md``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional

from hal.checkpoint import _dist
from hal.checkpoint._attach import ENV_DIR as ATTACH_DIR_ENV
from hal.checkpoint._attach import ENV_EVERY as ATTACH_EVERY_ENV
from hal.checkpoint._attach import ENV_KILL_AT as KILL_AT_ENV
from hal.checkpoint._attach import AttachedCheckpoint, attach_from_env
from hal.checkpoint._checkpointer import Checkpointer, check_keep
from hal.checkpoint._errors import CheckpointError, CheckpointWarning
from hal.checkpoint._events import EVENTS
from hal.checkpoint._events import read as read_events
from hal.checkpoint._export import consolidate, describe, safetensors_header, step_folder
from hal.checkpoint._files import CRASH_ENV, CRASH_POINTS
from hal.checkpoint._layout import CheckpointInfo, read_latest, scan
from hal.checkpoint._load import Checkpoint, latest, load, resume
from hal.checkpoint._sampler import ElasticSampler
from hal.checkpoint._save import MODES, CheckpointWriteError, is_complete, persist, snapshot

from hal.dist import elastic as _elastic

_elastic.install()  # restarted torchrun groups must not read the dead attempt's addresses

__all__ = ["save", "load", "resume", "latest", "scan", "describe", "consolidate", "Checkpointer", "Checkpoint",
           "CheckpointInfo", "ElasticSampler", "CheckpointError", "CheckpointWarning", "CheckpointWriteError",
           "is_complete", "MODES", "EVENTS", "read_events", "read_latest", "safetensors_header", "step_folder",
           "CRASH_ENV", "CRASH_POINTS", "AttachedCheckpoint", "attach_from_env", "ATTACH_DIR_ENV",
           "ATTACH_EVERY_ENV", "KILL_AT_ENV"]


def save(dir, step: int, *, model=None, optimizer=None, scheduler=None, scaler=None,
         states: Optional[Mapping] = None, extra: Optional[dict] = None, mode: str = "replicated",
         keep_last: Optional[int] = None, rng: bool = True) -> Path:
    """Save the training state of ``step`` under ``dir`` and return the checkpoint folder.

    Synchronous; use :class:`Checkpointer` to overlap the write with training.  Under
    torch.distributed every rank must call it (collective).

    :param dir: checkpoint root; checkpoints go to ``dir/step-NNNNNNNN``.
    :param step: the training step just completed (a non-negative int).
    :param model: / optimizer / scheduler / scaler: objects with ``state_dict()``.
    :param states: other objects with ``state_dict()`` / ``load_state_dict()``
        (``torch.distributed.checkpoint.stateful.Stateful``: a sampler, a data loader...), by
        name, e.g. ``{"sampler": sampler}``; each rank saves its own objects' state, and
        ``load`` / ``resume`` with the same ``states=`` restore them.
    :param extra: a dict of your own (sampler position, epoch...): numbers, strings,
        lists, dicts and tensors; anything that would need pickle is refused.
    :param mode: ``"replicated"`` (rank 0 writes the state; every rank writes its RNG) or
        ``"sharded"`` (each rank writes its own state, for rank-local shards).
    :param keep_last: keep only the newest N complete checkpoints (None keeps all).
    :param rng: also save RNG states.
    """
    check_keep(keep_last)
    group = _dist.group()
    snap = snapshot(step, model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler,
                    states=states, extra=extra, mode=mode, clone=False, rng=rng)
    return persist(dir, snap, keep_last=keep_last, group=group)
