"""Collectives that fail loudly instead of hanging or aborting.

Before the collective runs, every rank posts a one-line description of its call
(op, shape, dtype, root) to the c10d store of the process group and waits, up to the
timeout, for the others:

* a rank that does not arrive in time is **named** (:class:`CollectiveTimeout`) on every
  rank that did;
* ranks that disagree on the op, shape or dtype get :class:`CollectiveMismatch` on every
  rank, instead of a deadlock or a crash inside the transport;
* then the real ``torch.distributed`` collective runs and is waited on with the timeout.

The check costs one store round trip per rank and call; training loops that have proven
their shapes can call ``torch.distributed`` directly.  Checks apply to the default group.
"""
from __future__ import annotations

import datetime as _dt
import time
from typing import List, Optional, Sequence

import torch
import torch.distributed as dist

from hal.dist.errors import CollectiveMismatch, CollectiveTimeout, DistError
from hal.dist.process_group import STATE, info

#: torch >= 2.13 names them *_single; older torch has *_into_tensor / *_tensor
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _reduce_scatter(*args, **kwargs):
    """torch's reduce-scatter, looked up at call time: after :func:`hal.dist.init` it is hal's wrapper
    that serves ``PREMUL_SUM`` (and ``AVG`` where gloo sums instead, torch 2.7) on gloo groups."""
    return (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(*args, **kwargs)


def _describe(name: str, tensors: Sequence[torch.Tensor], **extra) -> str:
    parts = [name] + [f"{tuple(t.shape)}:{str(t.dtype).replace('torch.', '')}" for t in tensors]
    parts += [f"{k}={v}" for k, v in sorted(extra.items()) if v is not None]
    return " ".join(parts)


def precheck(op: str, description: str, timeout: Optional[float] = None) -> None:
    """Meet every rank of the default group before ``op``; name the absent, report disagreement.

    :param op: collective name, used in messages.
    :param description: this rank's call; every rank must post the same string.
    :param timeout: seconds (default: the :func:`hal.dist.init` timeout).
    :raises CollectiveTimeout: naming the ranks that did not arrive.
    :raises CollectiveMismatch: with each distinct call and the ranks that made it.
    """
    me = info()
    timeout_s = me.timeout_s if timeout is None else float(timeout)
    store, rank, n = STATE.store, me.rank, me.world_size
    STATE.seq += 1
    seq = STATE.seq
    key = f"{STATE.prefix}/call/{seq}/"
    store.set(key + str(rank), description)
    seen = {}
    deadline = time.monotonic() + timeout_s
    delay = 0.0005
    while len(seen) < n:
        for r in range(n):
            if r not in seen and store.check([key + str(r)]):
                seen[r] = store.get(key + str(r)).decode()
        if len(seen) == n:
            break
        if time.monotonic() >= deadline:
            raise CollectiveTimeout(f"{op} (call #{seq})", [r for r in range(n) if r not in seen],
                                    timeout_s, n)
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    if seq > 1:  # every rank posted #seq, so all have finished reading #seq-1
        store.delete_key(f"{STATE.prefix}/call/{seq - 1}/{rank}")
    if len(set(seen.values())) > 1:
        calls = {}
        for r in range(n):
            calls.setdefault(seen[r], []).append(r)
        raise CollectiveMismatch(f"{op} (call #{seq})", calls)


def _run(op: str, desc: str, launch, check: bool, timeout: Optional[float], group) -> None:
    if check and group is None:
        precheck(op, desc, timeout)
    me = info()
    timeout_s = me.timeout_s if timeout is None else float(timeout)
    work = launch()
    try:
        ok = work.wait(timeout=_dt.timedelta(seconds=timeout_s))
    except RuntimeError as exc:
        text = str(exc)
        if "timed out" in text.lower() or "timeout" in text.lower():
            raise CollectiveTimeout(op, [], timeout_s, me.world_size, text.splitlines()[0]) from exc
        raise DistError(f"{op} failed on rank {me.rank}: {text.splitlines()[0] if text else type(exc).__name__}; "
                        f"another rank probably exited, read its log") from exc
    if ok is False:
        raise CollectiveTimeout(op, [], timeout_s, me.world_size)


def all_reduce(tensor: torch.Tensor, op=dist.ReduceOp.SUM, group=None, *, check: bool = True,
               timeout: Optional[float] = None) -> torch.Tensor:
    """``torch.distributed.all_reduce`` (in place), checked; returns ``tensor``."""
    _run("all_reduce", _describe("all_reduce", [tensor], reduce=str(op).split(".")[-1]),
         lambda: dist.all_reduce(tensor, op=op, group=group, async_op=True), check, timeout, group)
    return tensor


def broadcast(tensor: torch.Tensor, src: int = 0, group=None, *, check: bool = True,
              timeout: Optional[float] = None) -> torch.Tensor:
    """``torch.distributed.broadcast`` from ``src`` (in place), checked; returns ``tensor``."""
    _run("broadcast", _describe("broadcast", [tensor], src=src),
         lambda: dist.broadcast(tensor, src=src, group=group, async_op=True), check, timeout, group)
    return tensor


def all_gather(output: torch.Tensor, input: torch.Tensor, group=None, *, check: bool = True,
               timeout: Optional[float] = None) -> torch.Tensor:
    """``torch.distributed.all_gather_into_tensor``: ``output`` holds every rank's ``input``."""
    _run("all_gather", _describe("all_gather", [output, input]),
         lambda: _all_gather(output, input, group=group, async_op=True), check, timeout, group)
    return output


def reduce_scatter(output: torch.Tensor, input: torch.Tensor, op=dist.ReduceOp.SUM, group=None, *,
                   check: bool = True, timeout: Optional[float] = None) -> torch.Tensor:
    """``torch.distributed.reduce_scatter_tensor``: rank r gets the reduced r-th chunk of ``input``."""
    _run("reduce_scatter", _describe("reduce_scatter", [output, input], reduce=str(op).split(".")[-1]),
         lambda: _reduce_scatter(output, input, op=op, group=group, async_op=True),
         check, timeout, group)
    return output


def all_to_all(output: torch.Tensor, input: torch.Tensor, group=None, *, check: bool = True,
               timeout: Optional[float] = None) -> torch.Tensor:
    """``torch.distributed.all_to_all_single`` with equal splits, checked."""
    _run("all_to_all", _describe("all_to_all", [output, input]),
         lambda: dist.all_to_all_single(output, input, group=group, async_op=True), check, timeout, group)
    return output


def barrier(*, timeout: Optional[float] = None) -> None:
    """Wait for every rank; ranks that do not arrive within ``timeout`` are named."""
    precheck("barrier", "barrier", timeout)


def gather_floats(values: List[float]) -> List[List[float]]:
    """Every rank's list of floats (same length on all ranks), through the gloo CPU path."""
    me = info()
    # an all-reduce of one slot per rank: every c10d backend has all_reduce on host tensors
    out = torch.zeros(me.world_size, len(values), dtype=torch.float64)
    out[me.rank] = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(out)
    return out.tolist()
