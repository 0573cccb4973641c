"""Rank functions the multi-process tests run through hal.dist.launch.spawn (after hal.dist.init)."""
import os
import time

import torch

import hal


def collectives():
    """Every checked collective once; returns what this rank holds afterwards."""
    i = hal.dist.info()
    n, r = i.world_size, i.rank
    ar = hal.dist.all_reduce(torch.full((3,), float(r + 1)))
    ag = hal.dist.all_gather(torch.zeros(2 * n), torch.tensor([float(r), float(r) + 0.5]))
    rs = hal.dist.reduce_scatter(torch.zeros(2), torch.arange(2.0 * n) * (r + 1))
    avg = torch.distributed.ReduceOp.AVG   # FSDP2's gradient reduce-scatter (torch 2.7's gloo sums with it)
    rs_avg = hal.dist.reduce_scatter(torch.zeros(2), torch.arange(2.0 * n) * (r + 1), op=avg)
    torch_rs = getattr(torch.distributed, "reduce_scatter_single", None) or torch.distributed.reduce_scatter_tensor
    rs_avg_torch = torch.zeros(2)
    torch_rs(rs_avg_torch, torch.arange(2.0 * n) * (r + 1), op=avg)
    bc = hal.dist.broadcast(torch.tensor([7.0, 8.0]) if r == n - 1 else torch.zeros(2), src=n - 1)
    a2a = hal.dist.all_to_all(torch.zeros(n), torch.arange(float(n)) + 10 * r)
    hal.dist.barrier()
    return {"rank": r, "world_size": n, "all_reduce": ar.tolist(), "all_gather": ag.tolist(),
            "reduce_scatter": rs.tolist(), "reduce_scatter_avg": rs_avg.tolist(),
            "reduce_scatter_avg_torch": rs_avg_torch.tolist(), "broadcast": bc.tolist(), "all_to_all": a2a.tolist()}


def absent_rank(timeout=2.0, absent=1, sleep=None):
    """Rank ``absent`` never reaches the all-reduce; the others report who is missing."""
    i = hal.dist.info()
    if i.rank == absent:
        time.sleep(sleep if sleep is not None else timeout * 3)
        return {"rank": i.rank, "skipped": True}
    t0 = time.monotonic()
    try:
        hal.dist.all_reduce(torch.ones(4), timeout=timeout)
    except hal.dist.CollectiveTimeout as exc:
        return {"rank": i.rank, "error": str(exc), "missing": exc.missing,
                "waited_s": time.monotonic() - t0}
    return {"rank": i.rank, "error": None}


def mismatch():
    """Rank 1 passes a different shape; every rank gets CollectiveMismatch and carries on."""
    i = hal.dist.info()
    try:
        hal.dist.all_reduce(torch.ones(4 if i.rank != 1 else 5))
        first = None
    except hal.dist.CollectiveMismatch as exc:
        first = {"error": str(exc), "calls": exc.calls}
    after = hal.dist.all_reduce(torch.ones(2)).tolist()  # the group still works
    return {"rank": i.rank, "mismatch": first, "after": after}


def bench_all(sizes=(64, 4096)):
    """hal bench's rank loop for every collective, in one job."""
    from hal.dist.bench import COLLECTIVES, rank_main

    out = {}
    for c in COLLECTIVES:
        rep = rank_main({"collective": c, "min_bytes": sizes[0], "max_bytes": sizes[-1],
                         "step_factor": sizes[-1] / sizes[0] if len(sizes) > 1 else 2.0,
                         "warmup": 1, "iters": 3})
        out[c] = rep
    return out


def env_rank():
    return {"rank": hal.dist.info().rank, "pid": os.getpid()}


def one_rank_fails():
    """Rank 1 raises at once; rank 0 waits in an all-reduce that would take 30 s to time out."""
    i = hal.dist.info()
    if i.rank == 1:
        raise ValueError("rank 1 could not open its shard")
    hal.dist.all_reduce(torch.ones(2), timeout=30)
    return {"rank": i.rank}
