"""torch.distributed helpers: rank, world size and a private gloo group for checkpoint traffic.

Checkpoint collectives (barrier, gathering file entries) run on their own gloo group so
that an asynchronous save in a background thread never interleaves with the training
loop's collectives on the default group.
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

import torch.distributed as dist

_GROUP: dict = {}


def active() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank_world() -> Tuple[int, int]:
    if active():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def group():
    """The checkpoint group (created collectively on first use; None when not distributed)."""
    if not active():
        return None
    world = dist.group.WORLD
    if _GROUP.get("world") is not world:  # first use, or a new process group since
        _GROUP.update(world=world, group=dist.new_group(backend="gloo"))
    return _GROUP["group"]


def barrier(g) -> None:
    if g is not None:
        dist.barrier(group=g)


def gather(obj: Any, g) -> Optional[List[Any]]:
    """Objects of every rank on rank 0 (None elsewhere); ``[obj]`` when not distributed."""
    if g is None:
        return [obj]
    rank, world = rank_world()
    out = [None] * world if rank == 0 else None
    dist.gather_object(obj, out, dst=0, group=g)
    return out


def broadcast(obj: Any, g) -> Any:
    """Rank 0's ``obj`` on every rank."""
    if g is None:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0, group=g)
    return box[0]
