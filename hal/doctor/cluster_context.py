"""What a cluster-wide doctor check gets: who this process is in a multi-node job, and how to talk.

``hal doctor`` under a multi-node ``torchrun`` builds one :class:`ClusterContext` per process
and calls every cluster check on every rank, in the same order.  A check is a function
``check(ctx) -> Optional[dict]``: it may use ``ctx.store`` (the launcher's rendezvous store,
reachable from every node once torchrun started the workers) and, once the default process
group exists, torch.distributed collectives; it returns its result
(``{"status": "OK" | "WARN" | "FAIL" | "SKIP", "summary": str, "details": dict, "fix": str}``)
on global rank 0 and may return ``None`` on the other ranks.

Nodes are numbered by torchrun's ``GROUP_RANK`` (with ``--rdzv-backend c10d`` torchrun
orders nodes by host name); ``leaders[i]`` is the global rank of local rank 0 on node ``i``,
the rank that speaks for the node in node x node measurements.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any, List, Mapping, Optional


@dataclass
class ClusterContext:
    """One process's view of a multi-node job (see the module docstring)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    nnodes: int
    hostname: str
    #: global rank of local rank 0 on each node, indexed by node rank
    leaders: List[int]
    #: the launcher's store (``torch.distributed.TCPStore``), shared by every rank
    store: Any
    #: torch.distributed backend of the default process group ("gloo", "nccl", "emuccl", ...)
    backend: str = "gloo"
    #: the device this rank uses (``torch.device``), or None before it is chosen
    device: Any = None
    #: per-step time limit of a check, in seconds: a peer that does not answer within it is named
    timeout_s: float = 30.0
    #: host names of every node, indexed by node rank (filled once the nodes have met)
    node_names: List[str] = field(default_factory=list)

    @property
    def is_leader(self) -> bool:
        """True on local rank 0 of each node."""
        return self.local_rank == 0

    def node_of(self, rank: int) -> int:
        """Node rank of global rank ``rank`` (torchrun gives each node a contiguous block of ranks)."""
        for node in range(self.nnodes - 1, -1, -1):
            if rank >= self.leaders[node]:
                return node
        raise ValueError(f"rank {rank} is outside the job's {self.world_size} ranks")

    def node_label(self, node: int) -> str:
        """``"node 2 (host-c)"``: how reports name a node."""
        name = self.node_names[node] if node < len(self.node_names) else ""
        return f"node {node} ({name})" if name else f"node {node}"


def from_launcher_env(store: Any, env: Optional[Mapping[str, str]] = None, **kwargs) -> ClusterContext:
    """The context torchrun's environment describes (``RANK``, ``LOCAL_RANK``, ``GROUP_RANK``...).

    Assumes every node runs the same ``--nproc-per-node`` (``LOCAL_WORLD_SIZE``), as torchrun requires.
    """
    env = os.environ if env is None else env
    world = int(env["WORLD_SIZE"])
    local_world = int(env.get("LOCAL_WORLD_SIZE", world))
    nnodes = max(1, world // local_world)
    return ClusterContext(rank=int(env["RANK"]), world_size=world, local_rank=int(env.get("LOCAL_RANK", 0)),
                          local_world_size=local_world, node_rank=int(env.get("GROUP_RANK", 0)),
                          nnodes=nnodes, hostname=socket.gethostname(),
                          leaders=[n * local_world for n in range(nnodes)], store=store, **kwargs)
