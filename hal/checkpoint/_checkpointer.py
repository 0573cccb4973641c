"""Checkpointer: periodic, asynchronous saves and a resume that continues where the job stopped."""
from __future__ import annotations

import logging
import threading
import time
import warnings
from pathlib import Path
from typing import Mapping, Optional

from hal.checkpoint import _dcp, _dist, _events
from hal.checkpoint._errors import CheckpointError, CheckpointWarning
from hal.checkpoint._load import Checkpoint, latest, resume
from hal.checkpoint._sampler import ElasticSampler, FollowedSampler, delivered_batches, follow, resplit_refusal
from hal.checkpoint._save import MODES, CheckpointWriteError, check_states, commit, open_step, persist, snapshot
from hal.checkpoint._tree import from_inline, to_inline

log = logging.getLogger("hal.checkpoint")

_PLAIN_LOADER = ("{name} has no state_dict(), so it cannot say where it is in its epoch; use "
                 "torchdata.stateful_dataloader.StatefulDataLoader (a drop-in replacement for "
                 "torch.utils.data.DataLoader, installed with hal) or pass an object with "
                 "state_dict() / load_state_dict()")


def check_keep(keep_last) -> None:
    if keep_last is not None and (isinstance(keep_last, bool) or not isinstance(keep_last, int)
                                  or keep_last < 1):
        raise CheckpointError(f"keep_last={keep_last!r}: must be a positive int (or None to keep all)")


def _sampler(loader):
    """The sampler the loader draws from that has ``set_epoch`` (DistributedSampler and the like;
    the ElasticSampler :func:`follow` put behind a DistributedSampler first), if any."""
    for s in (getattr(getattr(loader, "batch_sampler", None), "sampler", None),
              getattr(loader, "sampler", None)):
        if s is not None and callable(getattr(s, "set_epoch", None)):
            return s
    return None


def _own_generator(loader) -> None:
    """Give a loader without a ``generator`` one of its own, seeded once from torch's RNG.

    Each ``iter(loader)`` draws its workers' base seed from ``loader.generator``, or from
    torch's global RNG when there is none; a resumed run calls ``iter()`` once more than
    the run it continues, which would move the global RNG (dropout masks...) off the
    uninterrupted run's stream.  With a generator of its own, whose state is saved with
    the data position, the loader's draws leave the training RNG alone.
    """
    import torch

    if hasattr(loader, "generator") and loader.generator is None:
        g = torch.Generator()
        g.manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
        loader.generator = g


class Checkpointer:
    """Saves to one folder with retention, asynchronously by default; resumes a restarted job.

    ::

        saver = hal.checkpoint.Checkpointer("ckpt", every=100, model=model, optimizer=opt,
                                            scheduler=sched, scaler=scaler, dataloader=loader,
                                            states={"ema": ema})   # anything with state_dict()
        ck = saver.resume()                       # None on a fresh start
        step, epoch = (ck.step, ck.epoch or 0) if ck else (0, 0)
        with saver:
            while step < total_steps:
                sampler.set_epoch(epoch)
                for batch in loader:              # after a resume: the batch that would have come
                    ...
                    step += 1
                    saver.step(step)              # saves every 100 steps, in the background
                    if step == total_steps:
                        break
                epoch += 1

    ``save()`` copies the state to host memory (the only part the training loop waits
    for), then writes it in a background thread; a second ``save()`` first waits for the
    previous write.  A failure in the background is raised by the next ``save()``,
    ``wait()`` or ``close()`` -- except a full disk (``ENOSPC``, quota, file size limit):
    that save is dropped on every rank, logged, recorded in ``events.jsonl``, and training
    goes on, until ``max_failed_saves`` saves in a row have failed.

    The data position: ``dataloader`` must have ``state_dict()`` / ``load_state_dict()``
    (``torchdata.stateful_dataloader.StatefulDataLoader``); each rank saves its own, with
    its sampler's epoch, and ``resume()`` restores both.  With an :class:`ElasticSampler`, or
    torch's ``DistributedSampler`` (behind which the Checkpointer puts one, yielding the same
    batches), the position is global (samples of the epoch's order consumed by all ranks), so a
    job resumed at another world size re-splits it and sees exactly the samples not yet seen.  A
    sampler whose order hal cannot reproduce is refused at another world size (CheckpointError
    naming ElasticSampler), never resumed into repeated samples.

    A model with DTensor parameters (FSDP2 ``fully_shard``, tensor parallel, 2-D meshes) is
    saved through ``torch.distributed.checkpoint`` (``dcp.async_save`` when asynchronous):
    each rank writes its shards, and ``resume()`` reshards them to the layout and world
    size of the job now.  With async saving, each rank keeps the host copy of its shards
    between saves (one copy of its shards in host memory, freed by ``close()``; made by DCP's
    ``DefaultStager`` where torch has one), so a save copies into memory already allocated
    instead of allocating it again.  Under torchrun, ``resume()`` logs
    why the group restarted, one line per event (logger ``hal.checkpoint``), from the
    records ranks leave when they fail inside ``with saver:``.

    Other objects with ``state_dict()`` / ``load_state_dict()`` (``Stateful``, as DCP accepts
    them: a sampler, a data loader, a schedule of your own, an EMA tracker) go in ``states=``
    by name: ``save()`` stores each one's ``state_dict()`` of the moment, every rank its own,
    and ``resume()`` gives each back with ``load_state_dict()``; a rank that did not exist at
    save time gets rank 0's (with a CheckpointWarning).  For the data loader itself prefer
    ``dataloader=``, whose position re-splits at another world size.

    :param every: ``step(n)`` saves when ``n`` is a multiple of ``every`` (None: only explicit saves).
    :param states: named objects with ``state_dict()`` / ``load_state_dict()``, saved and restored
        with the rest (their states are stored inline in each rank's JSON file: meant for small ones).
    :param keep_last: keep the newest N complete checkpoints (None keeps all).
    :param max_failed_saves: consecutive saves a full disk may drop before the error is raised.
    """

    def __init__(self, dir, *, every: Optional[int] = None, model=None, optimizer=None,
                 scheduler=None, scaler=None, dataloader=None, states: Optional[Mapping] = None,
                 keep_last: Optional[int] = 3, async_save: bool = True, mode: str = "replicated",
                 max_failed_saves: int = 3):
        check_keep(keep_last)
        check_states(states)
        if mode not in MODES:
            raise CheckpointError(f"mode={mode!r}: use one of {', '.join(MODES)}")
        if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
            raise CheckpointError(f"every={every!r}: must be a positive number of steps (or None)")
        if dataloader is not None and not (callable(getattr(dataloader, "state_dict", None))
                                           and callable(getattr(dataloader, "load_state_dict", None))):
            raise CheckpointError("dataloader=" + _PLAIN_LOADER.format(name=type(dataloader).__name__))
        self.dir = Path(dir)
        self.every = every
        self.objects = {"model": model, "optimizer": optimizer, "scheduler": scheduler, "scaler": scaler,
                        "states": dict(states) if states else None}
        self.dataloader = dataloader
        if dataloader is not None:
            _own_generator(dataloader)
            follow(dataloader)   # torch's DistributedSampler: the same batches, a global data position
        self.keep_last = keep_last
        self.async_save = async_save
        self.mode = mode
        self.max_failed_saves = max_failed_saves
        self.failed_saves = 0
        self.last_stall_s = 0.0
        self.last_path: Optional[Path] = None
        self.last_step: Optional[int] = None
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None
        self._stage = _dcp.Staging()

    # -- saving -------------------------------------------------------------------------
    def _data(self, epoch: Optional[int]) -> Optional[dict]:
        if self.dataloader is None and epoch is None:
            return None
        data: dict = {}
        sampler = _sampler(self.dataloader) if self.dataloader is not None else None
        if epoch is None and sampler is not None:
            epoch = getattr(sampler, "epoch", None)
        if epoch is not None:
            data["epoch"] = int(epoch)
        if isinstance(sampler, ElasticSampler):
            data["global"] = {"epoch": int(sampler.epoch), "length": len(sampler.dataset),
                              "position": sampler.position(delivered_batches(self.dataloader),
                                                           self._batch_size()),
                              "world_size": sampler.num_replicas, "batch_size": self._batch_size(),
                              "seed": sampler.seed, "shuffle": bool(sampler.shuffle)}
        if self.dataloader is not None:
            data["loader"] = to_inline(self.dataloader.state_dict(), "loader")
            gen = getattr(self.dataloader, "generator", None)
            if gen is not None and gen.device.type == "cpu":
                data["generator"] = to_inline(gen.get_state(), "generator")
        return data

    def _batch_size(self) -> int:
        bs = getattr(self.dataloader, "batch_size", None)
        if not isinstance(bs, int):
            raise CheckpointError(f"{type(self.dataloader).__name__}.batch_size is {bs!r}: an ElasticSampler's "
                                  "position counts samples, so the loader needs batch_size= (not a batch_sampler)")
        return bs

    def step(self, step: int, *, epoch: Optional[int] = None, extra: Optional[dict] = None) -> bool:
        """Call after each optimizer step with the number of steps done; saves every ``every`` steps.

        Returns True when a save started.  ``epoch`` defaults to the loader's sampler epoch.
        """
        self.last_step = step
        if self.every and step % self.every == 0:
            self.save(step, epoch=epoch, extra=extra)
            return True
        return False

    def save(self, step: int, *, model=None, optimizer=None, scheduler=None, scaler=None,
             states: Optional[Mapping] = None, extra: Optional[dict] = None, epoch: Optional[int] = None) -> None:
        """Snapshot now, write in the background (or now, with ``async_save=False``).

        Objects not given are those given to the constructor (``states`` too: a dict given here
        replaces the constructor's).  Collective under torch.distributed: every rank calls it
        for the same step.
        """
        t0 = time.perf_counter()
        self.wait()
        self.last_step = step
        given = {"model": model, "optimizer": optimizer, "scheduler": scheduler, "scaler": scaler, "states": states}
        objs = {k: given[k] if given[k] is not None else self.objects[k] for k in given}
        group = _dist.group()
        snap = snapshot(step, **objs, extra=extra, mode=self.mode, clone=self.async_save,
                        data=self._data(epoch))
        if snap.sharded is not None and self.async_save:
            # DCP stages the shards to host memory now; its thread writes them, ours commits
            step_dir, failure = open_step(self.dir, snap, group)
            pending = _dcp.start(step_dir, snap.sharded, snap.rank, group, async_save=True,
                                 stage=self._stage) if failure is None else None
            snap.sharded = None
            self._thread = threading.Thread(target=self._commit, args=(step_dir, snap, group, failure, pending),
                                            name=f"hal-checkpoint-{step}", daemon=False)
            self._thread.start()
            self.last_stall_s = time.perf_counter() - t0
            return
        if not self.async_save:
            try:
                self.last_path = persist(self.dir, snap, self.keep_last, group)
                self.failed_saves = 0
            except CheckpointWriteError as exc:
                if not exc.no_space:
                    raise
                self._dropped(exc)
            self.last_stall_s = time.perf_counter() - t0
            return
        self._thread = threading.Thread(target=self._persist, args=(snap, group),
                                        name=f"hal-checkpoint-{step}", daemon=False)
        self._thread.start()
        self.last_stall_s = time.perf_counter() - t0

    def _persist(self, snap, group) -> None:
        self._background(persist, self.dir, snap, self.keep_last, group)

    def _commit(self, step_dir, snap, group, failure, pending) -> None:
        self._background(commit, self.dir, step_dir, snap, self.keep_last, group, failure, pending)

    def _background(self, fn, *args) -> None:
        try:
            self.last_path = fn(*args)
            self.failed_saves = 0
        except BaseException as exc:  # re-raised in the caller's thread by wait()
            self._error = exc

    def _dropped(self, exc: CheckpointWriteError) -> None:
        """A save a full storage refused: log it and let training go on, up to the limit."""
        self.failed_saves += 1
        rank, _ = _dist.rank_world()
        if rank == 0:
            _events.record(self.dir, "save_failed", rank=rank, step=self.last_step,
                           error={"type": type(exc).__name__, "message": str(exc), "errno": exc.errno})
            log.error("hal.checkpoint: %s (%d of %d saves in a row failed; training continues)",
                      exc, self.failed_saves, self.max_failed_saves)
        if self.failed_saves >= self.max_failed_saves:
            raise CheckpointError(f"{self.failed_saves} saves in a row failed for lack of space under "
                                  f"{self.dir}; stopping rather than training on without checkpoints. "
                                  f"Last error: {exc}") from exc

    def wait(self) -> Optional[Path]:
        """Block until the pending write is committed; return its folder."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            exc, self._error = self._error, None
            if isinstance(exc, CheckpointWriteError) and exc.no_space:
                self._dropped(exc)
                return self.last_path
            raise CheckpointError(f"the background save to {self.dir} failed: {exc}") from exc
        return self.last_path

    @property
    def pending(self) -> bool:
        """True while a background write is running."""
        return self._thread is not None and self._thread.is_alive()

    # -- resuming -----------------------------------------------------------------------
    def resume(self, **kwargs) -> Optional[Checkpoint]:
        """Restore the newest complete checkpoint into the objects (and the data loader).

        Keyword arguments override the constructor's objects (``states=`` among them) and are
        passed to :func:`hal.checkpoint.resume`.  Returns the :class:`Checkpoint` (``step``, ``epoch``)
        or None when there is none.  Collective under torch.distributed.
        """
        self.wait()
        args = {"quiet": True, **self.objects, **kwargs}
        ck = resume(self.dir, **args)
        resplit = None
        if ck is not None and self.dataloader is not None:
            resplit = self._restore_data(ck)
        if ck is not None:
            self._log_reshard(ck, resplit)
        self._log_restart(ck)
        if ck is not None:
            self.last_step = ck.step
        return ck

    def _log_reshard(self, ck: Checkpoint, resplit: Optional[str]) -> None:
        """One line (rank 0) on what changed since the save: shards, RNG, data position."""
        parts = [p for p in (ck.reshard, resplit) if p]
        if parts and _dist.rank_world()[0] == 0:
            log.warning("hal.checkpoint: %s", "; ".join(parts))

    def _restore_global(self, ck: Checkpoint, sampler: ElasticSampler) -> Optional[str]:
        g = ck.data["global"]
        name = type(getattr(sampler, "follows", sampler)).__name__
        if g["length"] != len(sampler.dataset):
            raise CheckpointError(f"{ck.path}: the data position belongs to a dataset of {g['length']} samples, "
                                  f"this {name}'s has {len(sampler.dataset)}; resume with the same dataset")
        if (g["seed"], g["shuffle"]) != (sampler.seed, bool(sampler.shuffle)):
            raise CheckpointError(f"{ck.path}: saved with a sampler of seed={g['seed']}, shuffle={g['shuffle']}, "
                                  f"resumed with {name}(seed={sampler.seed}, shuffle={sampler.shuffle}): the "
                                  "epoch's order would differ; build the sampler as when saving")
        sampler.resume_at(g["epoch"], g["position"])
        gen = getattr(self.dataloader, "generator", None)
        if gen is not None and "generator" in ck.data:
            gen.set_state(from_inline(ck.data["generator"]))
        before = g["world_size"] * g["batch_size"]
        now = sampler.num_replicas * self._batch_size()
        if before != now:
            warnings.warn(CheckpointWarning(
                f"{ck.path}: the global batch was {g['world_size']} x {g['batch_size']} = {before} samples and "
                f"is now {sampler.num_replicas} x {self._batch_size()} = {now}; the data resumes at the "
                "right sample, but each step now takes another number of samples (keep world size x "
                "batch_size constant to repeat the uninterrupted run)"), stacklevel=3)
        if g["world_size"] == sampler.num_replicas:
            return None
        return (f"data position re-split: epoch {g['epoch']} resumes at sample {g['position']} of "
                f"{g['length']} in its global order, over {sampler.num_replicas} data-parallel rank(s) x "
                f"{self._batch_size()} samples a batch (was {g['world_size']} x {g['batch_size']})")

    def _restore_data(self, ck: Checkpoint) -> Optional[str]:
        _, world = _dist.rank_world()
        saved_world = int(ck.manifest.get("world_size", 1))
        sampler = _sampler(self.dataloader)
        g = ck.data.get("global") if ck.data is not None else None
        if isinstance(sampler, ElasticSampler) and g is not None:
            same_split = saved_world == world and g["world_size"] == sampler.num_replicas
            # a DistributedSampler resumed on the split it was saved on takes the loader's own state,
            # as before hal followed it (its workers' seeds included); anything else, the global position
            if not (isinstance(sampler, FollowedSampler) and same_split and "loader" in ck.data):
                return self._restore_global(ck, sampler)
        if sampler is not None and saved_world != world:
            raise CheckpointError(resplit_refusal(ck.path, sampler, saved_world, world))
        if sampler is not None and ck.epoch is not None:
            sampler.set_epoch(ck.epoch)
            if isinstance(sampler, FollowedSampler):
                sampler.follows.set_epoch(ck.epoch)
        if saved_world != world:
            warnings.warn(CheckpointWarning(
                f"{ck.path} was saved by {saved_world} rank(s) and is resumed by {world}: each rank's "
                "data position belongs to the old split of the data, so it is not restored; the "
                f"epoch ({ck.epoch}) starts from the beginning"), stacklevel=3)  # a loader without a sampler split
            return
        if ck.data is None or "loader" not in ck.data:
            warnings.warn(CheckpointWarning(
                f"{ck.path} holds no data position for this rank (saved without dataloader=); the "
                "loader starts its epoch from the beginning, so batches already seen come again"),
                stacklevel=3)
            return
        gen = getattr(self.dataloader, "generator", None)
        if gen is not None and "generator" in ck.data:
            gen.set_state(from_inline(ck.data["generator"]))
        try:
            self.dataloader.load_state_dict(from_inline(ck.data["loader"]))
        except (KeyError, ValueError, TypeError, RuntimeError) as exc:
            raise CheckpointError(f"{ck.path}: the saved data position does not fit this "
                                  f"{type(self.dataloader).__name__} ({exc}); build the loader as it "
                                  "was built when saving (batch size, sampler, num_workers)") from None
        return None

    def _log_restart(self, ck: Optional[Checkpoint]) -> None:
        rank, world = _dist.rank_world()
        if rank != 0:
            return
        events = _events.read(self.dir)
        tail = _events.since_last_start(events)
        if ck is None and not tail:
            _events.record(self.dir, "start", rank=0, step=0, world_size=world)
            return
        step = ck.step if ck is not None else 0
        where = str(ck.path) if ck is not None else "scratch (no complete checkpoint)"
        # the ranks that sent no report are those of the attempt that ended, which may have been larger
        lines = _events.restart_lines(tail, max(world, _events.started_world_size(events) or 0), step, where,
                                      restarted=_events.attempt() > 0)
        head = f"hal.checkpoint: restart {_events.attempt()} of this group" if _events.attempt() else \
            "hal.checkpoint: relaunch"
        for line in lines:
            log.warning("%s: %s", head, line)
        _events.record(self.dir, "resume", rank=0, step=step, world_size=world,
                       path=str(ck.path) if ck else None, lines=lines)

    # -- lifetime -----------------------------------------------------------------------
    def latest(self) -> Optional[Path]:
        """:func:`latest` of this folder."""
        return latest(self.dir)

    def close(self) -> None:
        """Wait for the pending write; free the host copy of the shards kept for async saves."""
        try:
            self.wait()
        finally:
            self._stage.release()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        rank, _ = _dist.rank_world()
        if exc is not None:
            _events.record(self.dir, "failure", rank=rank, step=self.last_step,
                           error={"type": exc_type.__name__, "message": str(exc).strip()[:2000]})
            try:
                self.close()
            except BaseException as inner:  # the original exception is the one to see
                log.error("hal.checkpoint: the pending save also failed: %s", inner)
            return False
        self.close()
        if rank == 0:
            _events.record(self.dir, "closed", rank=0, step=self.last_step)
        return False
