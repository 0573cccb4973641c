"""hal.checkpoint attached from outside to a script that does not use it (``hal run --checkpoint DIR``).

The script is not changed.  Its optimizer's steps (torch's global optimizer-step hooks, as
``hal run --metrics`` counts them) are the clock:

- every ``every`` steps a :class:`~hal.checkpoint.Checkpointer` saves the training state: the
  top-level modules that hold the optimizer's parameters (inside a ``DistributedDataParallel``
  wrapper: without its ``module.`` prefix, so that the checkpoint opens with or without DDP; a
  ``fully_shard`` model's DTensor state goes through ``torch.distributed.checkpoint``),
  the optimizer, every LR scheduler built on it, the ``GradScaler``, every RNG, and the data
  position: how many batches each ``DataLoader`` has handed out in its current epoch;
- a process that finds a complete checkpoint in ``DIR`` (a job torchrun restarted with
  ``--max-restarts``, or a run started again by hand) moves each loader's first epoch on, before
  anything is drawn, so that its first step draws the batches the saved run's last step drew (the
  batches in between are drawn and dropped; a prefetching wrapper such as accelerate's sees the
  same stream); at the end of that first step the checkpoint replaces the state the step made:
  the modules, optimizer, schedulers and scaler are loaded, and the RNG comes back last.  From the
  next step on the script computes what the uninterrupted run computed; ``hal run --metrics``
  records go on at the saved step + 1.

What cannot be restored from outside, and is said once (logger ``hal.checkpoint``): a loader saved
in a later epoch than the restarted script is in (the script's own epoch loop starts over), and the
script's own counters (a ``global_step`` of its own, its logging).  A script that checkpoints itself
with ``hal.checkpoint.Checkpointer`` is left to it, in ``DIR``: its Checkpointer's folder becomes ``DIR``
(each run its own checkpoints; a ``script_checkpointer`` event names the folder the script asked for),
hal saves and loads nothing, and ``hal run --metrics`` records go on from the step it resumed at.

``HAL_CHECKPOINT_KILL_AT=STEP[@RANK]`` is the rehearsal of a failure (``hal accept``'s stability
section): on the first attempt, rank RANK (default 0) waits for the save in progress, records a ``killed`` event
in ``DIR/events.jsonl`` and kills itself with SIGKILL at the end of step STEP, as a dying node would.
"""
from __future__ import annotations

import gc
import logging
import os
import re
import signal
import weakref
from typing import Callable, List, Optional

import torch

from hal.checkpoint import _dist, _events
from hal.checkpoint._checkpointer import Checkpointer
from hal.checkpoint._errors import CheckpointError
from hal.util.patches import Patches, WatchedIterator

log = logging.getLogger("hal.checkpoint")

#: the folder ``hal run --checkpoint DIR`` gives every process of the run
ENV_DIR = "HAL_CHECKPOINT_DIR"
#: N: save every N optimizer steps (default :data:`DEFAULT_EVERY`)
ENV_EVERY = "HAL_CHECKPOINT_EVERY"
#: STEP or STEP@RANK: the first attempt's rank (default 0) kills itself at the end of that step
ENV_KILL_AT = "HAL_CHECKPOINT_KILL_AT"
DEFAULT_EVERY = 100


class _Position:
    """One DataLoader's place: which of its epochs (``iter()`` calls) is current, how many batches that
    epoch has drawn, and how many it had drawn at the end of the first optimizer step that used it."""

    def __init__(self) -> None:
        self.epoch = -1
        self.batches = 0
        self.first_step_batches: Optional[int] = None

    def state(self) -> dict:
        return {"epoch": self.epoch, "batches": self.batches, "first_step_batches": self.first_step_batches}

    def count(self, batch) -> None:
        self.batches += 1


class _DataPosition:
    """The data position as a ``Stateful`` (``states=``): each loader's epoch and batches, in the order the
    script first iterated them.

    A restarted process is put back in place in two moves.  When its loader's first epoch begins, before
    anything is drawn, the batches the saved run drew between the end of its first step and the save
    are drawn and dropped (:meth:`replay`): the restarted script's first step then draws what the saved
    run's last step drew, a prefetching wrapper around the loader (accelerate's) included.  At the end of
    that step the checkpoint is loaded and :meth:`load_state_dict` checks that each loader stands where it
    stood at the save."""

    def __init__(self, positions: List[_Position], saved: Optional[dict] = None):
        self.positions = positions
        self.saved = saved  # the newest checkpoint's position, read when the process started

    def state_dict(self) -> dict:
        return {"loaders": [p.state() for p in self.positions]}

    def replay(self, index: int, iterator: WatchedIterator) -> None:
        """Move loader ``index``'s first epoch (just begun) on to where the saved run's last step began."""
        loaders = (self.saved or {}).get("loaders", [])
        saved = loaders[index] if index < len(loaders) else None
        if saved and saved["epoch"] == 0 and saved.get("first_step_batches") is not None:
            ahead = max(0, int(saved["batches"]) - int(saved["first_step_batches"]))
            self.positions[index].batches += iterator.skip(ahead)

    def load_state_dict(self, state: dict) -> None:
        for i, saved in enumerate(state.get("loaders", [])):
            if i >= len(self.positions):
                break  # a loader the restarted script has not iterated yet (a validation loader): it starts fresh
            now = self.positions[i]
            if (saved["epoch"], saved["batches"]) != (now.epoch, now.batches):
                log.warning("hal.checkpoint: data loader %d was saved at epoch %d after %d batches; the restarted "
                            "script is at epoch %d after %d, and its own loop decides the epoch: the data position "
                            "is not restored (batches may repeat or be skipped; a script that resumes itself with "
                            "hal.checkpoint.Checkpointer(dataloader=...) keeps it)", i, saved["epoch"],
                            saved["batches"], now.epoch, now.batches)
            now.first_step_batches = saved.get("first_step_batches")


def _saved_position(folder) -> Optional[dict]:
    """The data position of the newest complete checkpoint under ``folder`` for this rank (torchrun's
    ``RANK``), read before the script draws its first batch; None on a fresh start."""
    from hal.checkpoint._load import latest, read_step

    path = latest(folder)
    if path is None:
        return None
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    try:
        return read_step(path, rank, world, verify=False).states.get("hal.data")
    except CheckpointError as exc:  # resume() says what is wrong with it, collectively
        log.warning("hal.checkpoint: %s: the data position cannot be read early (%s)", path, exc)
        return None


#: wrappers whose ``module`` is the model: the model is saved, so that a checkpoint taken under DDP opens
#: without it and the other way round (the keys carry no ``module.`` prefix)
_WRAPPERS = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)


def _modules_holding(params) -> list:
    """The top-level ``nn.Module`` objects (not a child of another live module) above the modules that
    own ``params``, below a DDP / DataParallel wrapper: the model as the script built it."""
    ids = {id(p) for p in params}
    modules = [o for o in gc.get_objects() if issubclass(type(o), torch.nn.Module)]  # type(): no __getattr__
    parent = {}
    for m in modules:
        for child in m.children():
            parent.setdefault(id(child), m)
    roots, seen = [], set()
    for m in modules:
        if not any(id(p) in ids for p in m.parameters(recurse=False)):
            continue
        top = m
        while id(top) in parent and not isinstance(parent[id(top)], _WRAPPERS):
            top = parent[id(top)]
        if id(top) not in seen:
            seen.add(id(top))
            roots.append(top)
    return roots


def _drives(wrapper, optimizer) -> bool:
    """True when ``wrapper`` is ``optimizer`` or wraps it (accelerate's ``AcceleratedOptimizer``, a
    scheduler's optimizer in the HF Trainer, keeps the torch optimizer as ``.optimizer``)."""
    for _ in range(4):
        if wrapper is optimizer:
            return True
        wrapper = getattr(wrapper, "optimizer", None)
        if wrapper is None:
            return False
    return False


def _parse_kill(text: str):
    m = re.fullmatch(r"\s*(\d+)\s*(?:@\s*(\d+)\s*)?", text or "")
    if not m or int(m.group(1)) < 1:
        raise CheckpointError(f"{ENV_KILL_AT}={text!r}: give the optimizer step to die at, optionally with the "
                              f"rank (5 or 5@1), or unset it")
    return int(m.group(1)), int(m.group(2) or 0)


class AttachedCheckpoint:
    """Checkpoint and resume of an unmodified script: :meth:`install` before it runs, :meth:`close` after."""

    def __init__(self, folder, every: int = DEFAULT_EVERY, *, kill_at: Optional[int] = None, kill_rank: int = 0):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise CheckpointError(f"{ENV_EVERY}={every!r}: give a whole number of optimizer steps above 0")
        self.folder, self.every, self.kill_at, self.kill_rank = folder, every, kill_at, kill_rank
        self.step = 0
        self.optimizer = None
        self.schedulers: list = []
        self.scaler = None
        self.positions: List[_Position] = []
        self.data = _DataPosition(self.positions, _saved_position(folder))
        self.saver: Optional[Checkpointer] = None
        #: the script's own Checkpointer, when it checkpoints itself: then hal saves and loads nothing
        self.script_saver: Optional[Checkpointer] = None
        #: called with the step a resumed run goes on from, and whether the step now ending was replaced by the
        #: checkpoint (hal's resume) or not yet taken (the script's own, at its start): ``hal run --metrics``
        #: numbers its records on from there
        self.on_resume: List[Callable[[int, bool], None]] = []
        self.resumed_from: Optional[int] = None
        #: True when nothing can be checkpointed from outside (said once); the script runs on
        self.off = False
        self._building = False
        self._patches = Patches()

    def _start(self, optimizer) -> None:
        """At the end of the first step: build the Checkpointer and resume from ``folder`` if it holds one."""
        roots = _modules_holding([p for g in optimizer.param_groups for p in g["params"]])
        if not roots:
            self.off = True
            if _dist.rank_world()[0] == 0:
                log.warning("hal.checkpoint: hal run --checkpoint: no nn.Module holds the optimizer's parameters, "
                            "so nothing is checkpointed from outside; hold them in a module (torch.nn.ParameterList) "
                            "or checkpoint in the script with hal.checkpoint.Checkpointer")
            return
        model = roots[0] if len(roots) == 1 else torch.nn.ModuleDict({str(i): m for i, m in enumerate(roots)})
        states = {"hal.data": self.data}
        schedulers = [s for s in self.schedulers if _drives(getattr(s, "optimizer", None), optimizer)]
        states.update({f"scheduler.{i}": s for i, s in enumerate(schedulers)})
        self._building = True
        try:
            self.saver = Checkpointer(self.folder, every=self.every, model=model, optimizer=optimizer,
                                      scaler=self.scaler, states=states)
        finally:
            self._building = False
        ck = self.saver.resume()
        if ck is not None:
            self.step = self.resumed_from = ck.step
            for fn in self.on_resume:
                fn(ck.step, True)

    def _script_checkpoints(self, saver: Checkpointer, asked) -> None:
        """The script built a Checkpointer of its own (into ``asked``, now ``folder``): it saves and resumes
        itself, hal only watches."""
        if self.script_saver is None:
            self.script_saver = saver
            if _dist.rank_world()[0] == 0:
                _events.record(self.folder, "script_checkpointer", rank=0, step=None, dir=str(asked),
                               every=saver.every)
                log.warning("hal.checkpoint: the script checkpoints itself (hal.checkpoint.Checkpointer into %s): "
                            "its checkpoints go to %s, and hal saves nothing of its own", asked, saver.dir)

    def _script_resumed(self, step: int) -> None:
        """The script's own Checkpointer resumed at ``step`` (before its first step; it recorded the event)."""
        self.step = self.resumed_from = step
        for fn in self.on_resume:
            fn(step, False)

    def after_step(self, optimizer) -> None:
        if self.optimizer is None:
            self.optimizer = optimizer
        if optimizer is not self.optimizer:
            return
        for pos in self.positions:
            if pos.first_step_batches is None and pos.batches:
                pos.first_step_batches = pos.batches
        if self.off:
            return
        if self.saver is None and self.script_saver is None:
            self._start(optimizer)
            if self.off or self.resumed_from is not None:
                return  # nothing to checkpoint; or this step's work was replaced by the checkpoint's
        self.step += 1
        if self.script_saver is None:
            self.saver.step(self.step)
        if self.kill_at == self.step and _events.attempt() == 0 and _dist.rank_world()[0] == self.kill_rank:
            (self.script_saver or self.saver).wait()  # the rehearsal resumes from the newest save, not a cut one
            _events.record(self.folder, "killed", rank=self.kill_rank, step=self.step,
                           why=f"{ENV_KILL_AT}: a failure rehearsed at the end of step {self.step}")
            os.kill(os.getpid(), signal.SIGKILL)

    def install(self) -> "AttachedCheckpoint":
        """Hook torch (the optimizer-step post hook, ``DataLoader.__iter__``, ``LRScheduler.__init__``,
        ``GradScaler.__init__``) and a Checkpointer of the script's own until :meth:`close`."""
        from torch.optim.lr_scheduler import LRScheduler
        from torch.optim.optimizer import register_optimizer_step_post_hook
        from torch.utils.data import DataLoader

        me = self
        self._patches.hook(register_optimizer_step_post_hook(lambda opt, args, kwargs: me.after_step(opt)))

        dl_iter = DataLoader.__iter__
        by_loader: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

        def positioned_iter(loader):
            pos = by_loader.get(loader)
            if pos is None:
                pos = by_loader[loader] = _Position()
                me.positions.append(pos)
            pos.epoch, pos.batches, pos.first_step_batches = pos.epoch + 1, 0, None
            iterator = WatchedIterator(dl_iter(loader), pos.count)
            if pos.epoch == 0:
                me.data.replay(me.positions.index(pos), iterator)
            return iterator
        self._patches.set(DataLoader, "__iter__", positioned_iter)

        sched_init = LRScheduler.__dict__["__init__"]

        def tracked_sched_init(self_, optimizer, *args, **kwargs):
            sched_init(self_, optimizer, *args, **kwargs)
            if all(s is not self_ for s in me.schedulers):
                me.schedulers.append(self_)
        self._patches.set(LRScheduler, "__init__", tracked_sched_init)

        ck_init, ck_resume = Checkpointer.__dict__["__init__"], Checkpointer.__dict__["resume"]

        def watched_ck_init(self_, dir, *args, **kwargs):
            if me._building or me.saver is not None:  # hal's own; or the script's, after hal began saving
                ck_init(self_, dir, *args, **kwargs)
                return
            ck_init(self_, me.folder, *args, **kwargs)  # this run's checkpoints, wherever the script keeps its own
            me._script_checkpoints(self_, dir)
        self._patches.set(Checkpointer, "__init__", watched_ck_init)

        def watched_resume(self_, *args, **kwargs):
            ck = ck_resume(self_, *args, **kwargs)
            if ck is not None and self_ is me.script_saver:
                me._script_resumed(ck.step)
            return ck
        self._patches.set(Checkpointer, "resume", watched_resume)

        scaler = torch.amp.GradScaler
        scaler_init = scaler.__dict__["__init__"]

        def tracked_scaler_init(self_, *args, **kwargs):
            scaler_init(self_, *args, **kwargs)
            if me.scaler is None:
                me.scaler = self_
        self._patches.set(scaler, "__init__", tracked_scaler_init)
        return self

    def close(self) -> None:
        """Remove the hooks; wait for the pending save (its checkpoint is complete)."""
        self._patches.undo()
        if self.saver is not None:
            self.saver.close()


def attach_from_env() -> Optional[AttachedCheckpoint]:
    """:class:`AttachedCheckpoint` installed when ``HAL_CHECKPOINT_DIR`` is set (by ``hal run --checkpoint``),
    else None."""
    folder = os.environ.get(ENV_DIR, "").strip()
    if not folder:
        return None
    every = os.environ.get(ENV_EVERY, "").strip()
    if every and not (every.isdigit() and int(every) > 0):
        raise CheckpointError(f"{ENV_EVERY}={every!r}: give a whole number of optimizer steps above 0, or unset it")
    kill = os.environ.get(ENV_KILL_AT, "").strip()
    kill_at, kill_rank = _parse_kill(kill) if kill else (None, 0)
    return AttachedCheckpoint(folder, int(every) if every else DEFAULT_EVERY, kill_at=kill_at,
                              kill_rank=kill_rank).install()
