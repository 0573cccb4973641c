"""Crash-safe checkpoint and resume of the whole training state, portable across devices.

::

    import hal, hal.checkpoint

    ck = hal.checkpoint.resume("ckpt", model=model, optimizer=opt, scheduler=sched)
    start = ck.step + 1 if ck else 0
    with hal.checkpoint.Checkpointer("ckpt", keep_last=3) as saver:   # async by default
        for step in range(start, steps):
            ...
            if step % 100 == 0:
                saver.save(step, model=model, optimizer=opt, scheduler=sched,
                           extra={"sampler_position": pos})

What is saved: model, optimizer, LR scheduler, grad scaler, step, user extras and the RNG
of python, numpy, the torch CPU generator and the current device (keyed ``"cpu"``,
``"cuda:0"``, ``"npu:1"``...).  Tensors go to safetensors, everything else to JSON: no
pickle is executed on load.  A save writes temp files, fsyncs and renames them, writes
``manifest.json`` (sizes, sha256) last and only then moves the ``latest`` pointer; resume
picks the newest complete checkpoint and logs why it skipped any other.
See ``docs/checkpoint.md``.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Optional

from hal.checkpoint import _dist
from hal.checkpoint._errors import CheckpointError, CheckpointWarning
from hal.checkpoint._files import CRASH_ENV, CRASH_POINTS
from hal.checkpoint._layout import CheckpointInfo, scan
from hal.checkpoint._load import Checkpoint, latest, load, resume
from hal.checkpoint._save import MODES, is_complete, persist, snapshot

__all__ = ["save", "load", "resume", "latest", "scan", "Checkpointer", "Checkpoint",
           "CheckpointInfo", "CheckpointError", "CheckpointWarning", "is_complete", "MODES",
           "CRASH_ENV", "CRASH_POINTS"]


def _check_keep(keep_last):
    if keep_last is not None and (isinstance(keep_last, bool) or not isinstance(keep_last, int)
                                  or keep_last < 1):
        raise CheckpointError(f"keep_last={keep_last!r}: must be a positive int (or None to keep all)")


def save(dir, step: int, *, model=None, optimizer=None, scheduler=None, scaler=None,
         extra: Optional[dict] = None, mode: str = "replicated", keep_last: Optional[int] = None,
         rng: bool = True) -> Path:
    """Save the training state of ``step`` under ``dir`` and return the checkpoint folder.

    Synchronous; use :class:`Checkpointer` to overlap the write with training.  Under
    torch.distributed every rank must call it (collective).

    :param dir: checkpoint root; checkpoints go to ``dir/step-NNNNNNNN``.
    :param step: the training step just completed (a non-negative int).
    :param model: / optimizer / scheduler / scaler: objects with ``state_dict()``.
    :param extra: a dict of your own (sampler position, epoch...): numbers, strings,
        lists, dicts and tensors; anything that would need pickle is refused.
    :param mode: ``"replicated"`` (rank 0 writes the state; every rank writes its RNG) or
        ``"sharded"`` (each rank writes its own state, for rank-local shards).
    :param keep_last: keep only the newest N complete checkpoints (None keeps all).
    :param rng: also save RNG states.
    """
    _check_keep(keep_last)
    group = _dist.group()
    snap = snapshot(step, model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler,
                    extra=extra, mode=mode, clone=False, rng=rng)
    return persist(dir, snap, keep_last=keep_last, group=group)


class Checkpointer:
    """Saves to one folder with retention, asynchronously by default.

    ``save()`` copies the state to host memory (the only part the training loop waits
    for), then writes it in a background thread; a second ``save()`` first waits for the
    previous write.  A failure in the background is raised by the next ``save()``,
    ``wait()`` or ``close()``.  ``last_stall_s`` is how long the last ``save()`` blocked.
    """

    def __init__(self, dir, *, keep_last: Optional[int] = 3, async_save: bool = True,
                 mode: str = "replicated"):
        _check_keep(keep_last)
        if mode not in MODES:
            raise CheckpointError(f"mode={mode!r}: use one of {', '.join(MODES)}")
        self.dir = Path(dir)
        self.keep_last = keep_last
        self.async_save = async_save
        self.mode = mode
        self.last_stall_s = 0.0
        self.last_path: Optional[Path] = None
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None

    def save(self, step: int, *, model=None, optimizer=None, scheduler=None, scaler=None,
             extra: Optional[dict] = None) -> None:
        """Snapshot now, write in the background (or now, with ``async_save=False``)."""
        t0 = time.perf_counter()
        self.wait()
        group = _dist.group()
        snap = snapshot(step, model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler,
                        extra=extra, mode=self.mode, clone=self.async_save)
        if not self.async_save:
            self.last_path = persist(self.dir, snap, self.keep_last, group)
            self.last_stall_s = time.perf_counter() - t0
            return
        self._thread = threading.Thread(target=self._persist, args=(snap, group),
                                        name=f"hal-checkpoint-{step}", daemon=False)
        self._thread.start()
        self.last_stall_s = time.perf_counter() - t0

    def _persist(self, snap, group) -> None:
        try:
            self.last_path = persist(self.dir, snap, self.keep_last, group)
        except BaseException as exc:  # re-raised in the caller's thread by wait()
            self._error = exc

    def wait(self) -> Optional[Path]:
        """Block until the pending write is committed; return its folder."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            exc, self._error = self._error, None
            raise CheckpointError(f"the background save to {self.dir} failed: {exc}") from exc
        return self.last_path

    @property
    def pending(self) -> bool:
        """True while a background write is running."""
        return self._thread is not None and self._thread.is_alive()

    def resume(self, **kwargs) -> Optional[Checkpoint]:
        """:func:`resume` from this folder (waits for any pending write first)."""
        self.wait()
        return resume(self.dir, **kwargs)

    def latest(self) -> Optional[Path]:
        """:func:`latest` of this folder."""
        return latest(self.dir)

    def close(self) -> None:
        """Wait for the pending write."""
        self.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
