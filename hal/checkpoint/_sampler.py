"""ElasticSampler: a DistributedSampler whose data position is one global offset, so it re-splits.

A ``DistributedSampler`` position is per rank ("rank 1 is at its 12th sample"), which means
nothing once the job has another number of ranks.  This sampler orders the epoch's samples
once for the whole job (the same permutation ``DistributedSampler`` draws: ``randperm`` seeded
with ``seed + epoch``), hands rank ``r`` of ``W`` every ``W``-th of the samples not yet consumed,
and is positioned by how many samples of that global order the job has consumed.  With the
global batch held constant (``W * batch_size``), a job resumed at another world size sees
exactly the samples the old one had not consumed, in the same global order.

torch's own ``DistributedSampler`` gets the same: :func:`follow` puts an ElasticSampler behind it
(its order at a fresh start is the DistributedSampler's, epoch by epoch), so a job written with
DistributedSampler re-splits its data position too.  A sampler whose order hal cannot reproduce
(a subclass with its own ``__iter__``, another distributed sampler) is refused at another world
size by the Checkpointer (:func:`resplit_refusal`), never resumed with a repeat.
"""
from __future__ import annotations

import math
from typing import Iterator, Optional

import torch
from torch.utils.data import Sampler

from hal.checkpoint._errors import CheckpointError

#: StatefulDataLoader's state keys that count the batches delivered in the current epoch
_NUM_YIELDED = "_num_yielded"
_SNAPSHOT, _SNAPSHOT_STEP, _STEPS_SINCE = "_snapshot", "_snapshot_step", "_steps_since_snapshot"


class ElasticSampler(Sampler):
    """Distributed sampler with a global data position; a drop-in for ``DistributedSampler``.

    ::

        sampler = hal.checkpoint.ElasticSampler(dataset, shuffle=True, seed=0)
        loader = StatefulDataLoader(dataset, batch_size=global_batch // world, sampler=sampler)
        saver = hal.checkpoint.Checkpointer("ckpt", every=100, model=model, optimizer=opt,
                                            dataloader=loader)

    At a fresh start it yields what ``DistributedSampler`` yields for the same arguments.
    :class:`Checkpointer` saves ``(epoch, position)`` -- ``position`` is the number of samples
    of the epoch's global order consumed by all ranks together -- and ``resume()`` puts the
    sampler there, at any world size.

    :param num_replicas: / rank: default to the torch.distributed world size and rank.
    :param shuffle: order each epoch by ``randperm`` seeded with ``seed + epoch``.
    :param drop_last: drop the tail that does not divide by the world size (else pad by
        repeating the first samples, as ``DistributedSampler`` does).
    """

    def __init__(self, dataset, num_replicas: Optional[int] = None, rank: Optional[int] = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False):
        import torch.distributed as dist

        if num_replicas is None:
            num_replicas = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        if rank is None:
            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank={rank}: must be in [0, {num_replicas - 1}] for num_replicas={num_replicas}")
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.shuffle, self.seed, self.drop_last = shuffle, int(seed), drop_last
        self.epoch = 0
        self._start = 0          # global position the next iteration starts at
        self._iter_start = 0     # global position the current iteration started at
        self._iter_epoch = None  # the epoch of that iteration (None: none started yet)

    def order(self, epoch: Optional[int] = None) -> list:
        """The epoch's global order of dataset indices (every rank computes the same)."""
        n = len(self.dataset)
        if not self.shuffle:
            return list(range(n))
        g = torch.Generator()
        g.manual_seed(self.seed + (self.epoch if epoch is None else epoch))
        return torch.randperm(n, generator=g).tolist()

    def _remaining(self, start: int) -> list:
        rest = self.order()[start:]
        if self.drop_last:
            return rest[:len(rest) - len(rest) % self.num_replicas]
        pad = -len(rest) % self.num_replicas
        if pad and rest:
            rest = rest + (rest * math.ceil(pad / len(rest)))[:pad]
        return rest

    def __iter__(self) -> Iterator[int]:
        # a generator: the loaders that call iter() twice before reading (DataLoader's worker
        # iterator does) leave the first one unstarted, so it consumes no resume position
        start = self._start
        self._iter_start, self._iter_epoch = start, self.epoch
        yield from self._remaining(start)[self.rank::self.num_replicas]
        self._start = 0   # a resume position applies to one pass over the epoch only

    def __len__(self) -> int:
        return len(self._remaining(self._start)) // self.num_replicas

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch (its order); a changed epoch starts at its beginning."""
        if epoch != self.epoch:
            self._start = 0
        self.epoch = epoch

    def resume_at(self, epoch: int, position: int) -> None:
        """Start the next iteration at global ``position`` of ``epoch``'s order."""
        if position < 0:
            raise CheckpointError(f"position={position}: a global data position is >= 0")
        self.epoch, self._start = int(epoch), int(position)

    def position(self, batches: int, batch_size: int) -> int:
        """Global position after this rank's loader delivered ``batches`` of ``batch_size``.

        Every rank delivers the same number of batches per step, so this is the same on all.
        Before the chosen epoch's iteration has started, the loader's count belongs to an
        older one: the position is where the next iteration will start.
        """
        if self._iter_epoch != self.epoch:
            return self._start
        return min(self._iter_start + batches * batch_size * self.num_replicas, len(self.dataset))


class FollowedSampler(ElasticSampler):
    """An ElasticSampler behind a torch ``DistributedSampler`` (``follows``): it yields what the
    DistributedSampler would, reads its epoch at every pass (the training loop calls ``set_epoch``
    on the user's sampler), and holds the global data position the Checkpointer saves and
    re-splits.  Made by :func:`follow`."""

    def __init__(self, sampler):
        super().__init__(sampler.dataset, sampler.num_replicas, sampler.rank, shuffle=sampler.shuffle,
                         seed=sampler.seed, drop_last=sampler.drop_last)
        self.follows = sampler
        self.epoch = sampler.epoch

    def __iter__(self) -> Iterator[int]:
        self.set_epoch(self.follows.epoch)
        yield from super().__iter__()

    def __len__(self) -> int:
        return len(self._remaining(self._start if self.follows.epoch == self.epoch else 0)) // self.num_replicas

    def resume_at(self, epoch: int, position: int) -> None:
        """:meth:`ElasticSampler.resume_at`, and the user's DistributedSampler set to ``epoch``."""
        super().resume_at(epoch, position)
        self.follows.set_epoch(int(epoch))


#: what a DistributedSampler subclass may not override for hal to reproduce its order
_ORDER_METHODS = ("__iter__", "__len__", "set_epoch")


def _reproducible(sampler) -> bool:
    """True for a torch ``DistributedSampler`` (or a subclass keeping its order): its order is the
    one ElasticSampler draws."""
    from torch.utils.data import DistributedSampler

    return isinstance(sampler, DistributedSampler) and all(
        getattr(type(sampler), m) is getattr(DistributedSampler, m) for m in _ORDER_METHODS)


def follow(loader) -> Optional[FollowedSampler]:
    """Put a :class:`FollowedSampler` behind ``loader``'s torch ``DistributedSampler``: the loader's
    batch sampler draws from it, the user's sampler object stays the loader's ``sampler`` and keeps
    its ``set_epoch``.  The batches do not change (at a fresh start ElasticSampler yields what
    DistributedSampler yields); the data position becomes global.  None, changing nothing, when the
    loader does not draw from such a sampler through a batch sampler (``batch_size=`` given), or
    is not torchdata's ``StatefulDataLoader`` (which says how many batches it delivered), or has
    made its iterator already (``iter()``, ``state_dict()``): the Checkpointer calls it when it is
    built, before the training loop.  The sampler's order of its current epoch is drawn once more to
    check that hal draws the same (one ``randperm`` of the dataset's length).
    """
    sampler = getattr(loader, "sampler", None)
    batches = getattr(loader, "batch_sampler", None)
    if isinstance(getattr(batches, "sampler", None), FollowedSampler):
        return batches.sampler
    if not _reproducible(sampler) or getattr(batches, "sampler", None) is not sampler \
            or not isinstance(getattr(loader, "batch_size", None), int):
        return None
    from torchdata.stateful_dataloader import StatefulDataLoader

    if not isinstance(loader, StatefulDataLoader):  # the position counts the batches it says it delivered
        return None
    if getattr(loader, "_iterator", None) is not None:
        # torch 2.13's DataLoader keeps its iterator (made by iter() or StatefulDataLoader.state_dict()),
        # which may hold the DistributedSampler itself: then positions stay per rank (a resume at
        # another world size is refused, never re-split from a sampler the loader did not draw from)
        return None
    followed = FollowedSampler(sampler)
    if followed._remaining(0)[followed.rank::followed.num_replicas] != list(iter(sampler)):
        return None  # an order hal does not draw alike (a subclass that changed it): never re-split
    batches.sampler = followed
    return followed


def resplit_refusal(path, sampler, saved_world: int, world: int) -> str:
    """Why a checkpoint saved by ``saved_world`` ranks cannot resume ``sampler``'s data position
    at ``world`` ranks, and the fix (the message of the Checkpointer's error)."""
    name = type(getattr(sampler, "follows", sampler)).__name__
    if isinstance(sampler, ElasticSampler):
        why = "the checkpoint holds no global data position (hal did not keep one for this loader when saving)"
    else:
        why = (f"hal cannot reproduce the order of {name} (it re-splits torch's DistributedSampler, "
               f"subclasses keeping its order, and hal.checkpoint.ElasticSampler)")
    return (f"{path} was saved by {saved_world} rank(s) and is resumed by {world}, and the data position "
            f"of this loader's {name} cannot be re-split: {why}. Each rank's position belongs to the old "
            f"split of the data, and resuming it would feed samples twice and skip others. Resume with "
            f"{saved_world} rank(s), or build the loader on hal.checkpoint.ElasticSampler(dataset, "
            f"shuffle=..., seed=..., drop_last=...) (the same order as DistributedSampler) and start "
            f"from a checkpoint saved with it")


def delivered_batches(loader) -> int:
    """Batches a ``StatefulDataLoader`` has delivered in its current epoch (from its state)."""
    sd = loader.state_dict()
    if _NUM_YIELDED in sd:
        return int(sd[_NUM_YIELDED])
    snap = sd.get(_SNAPSHOT)
    if isinstance(snap, dict) and _SNAPSHOT_STEP in snap and _STEPS_SINCE in sd:
        return int(snap[_SNAPSHOT_STEP]) + int(sd[_STEPS_SINCE])
    raise CheckpointError(f"{type(loader).__name__}.state_dict() does not say how many batches it "
                          f"delivered (no {_NUM_YIELDED!r} or {_SNAPSHOT!r}); ElasticSampler needs "
                          "torchdata's StatefulDataLoader")
