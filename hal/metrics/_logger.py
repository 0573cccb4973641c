"""MetricsLogger: one JSONL record per logged step, in a folder the user owns."""
from __future__ import annotations

import math
import re
import socket
import time
from pathlib import Path
from typing import Optional

from hal._errors import HalError
from hal.metrics._comm import CommWatch, comm_fields
from hal.metrics._device import DeviceProbe
from hal.metrics._sinks import JSONLSink, PrometheusSink, TensorBoardSink
from hal.metrics._straggler import StragglerWatch
from hal.metrics._timer import StepTimer

SCHEMA = "hal.metrics/1"
_RUN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _rank_world():
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class MetricsLogger:
    """Writes step metrics as JSONL (schema ``hal.metrics/1``, ``hal/data/metrics.schema.json``).

    ::

        metrics = hal.metrics.MetricsLogger("runs/exp1", tensorboard=False, prometheus=True)
        for step in range(steps):
            ...
            metrics.log_step(step, samples=batch_size, tokens=batch_size * seq, loss=loss.item(),
                             lr=sched.get_last_lr()[0])
        metrics.close()

    The step time is the wall time since the previous ``log_step`` (the first call only
    starts the clock unless :meth:`start` was called).  Files: ``<folder>/<run>.jsonl``
    (``<run>.rank<N>.jsonl`` when torch.distributed runs several ranks), ``<run>.prom``
    with ``prometheus=True``, TensorBoard events under ``<folder>/tb`` with
    ``tensorboard=True``.

    :param sync: wait for the device before reading the clock (exact device step times,
        at the cost of a synchronisation per step).
    :param window: number of recent steps the p50 / p99 step times cover.
    :param straggler_factor: / straggler_steps: with several ranks, a rank whose step time
        is at least ``straggler_factor`` x the median of the other ranks' for
        ``straggler_steps`` consecutive steps is named while training runs: one warning
        through the logger ``hal.metrics`` on rank 0 and an ``events`` entry in rank 0's
        JSONL.  ``None`` for either turns this off.  Create the logger on every rank after
        ``torch.distributed`` is initialised and log the same step numbers on every rank.
    :param straggler_every: ranks post their recent step times to the torch.distributed
        store, and rank 0 judges them, every this many steps (a store write per rank;
        nothing waits for another rank).  Single-process runs never communicate.
    :param comm: a DistributedDataParallel or FSDP2 (``fully_shard``) model whose
        communication time to record; the same as calling :meth:`watch` with it.
    """

    def __init__(self, folder, run: str = "run", *, window: int = 100, sync: bool = False,
                 prometheus: bool = False, tensorboard: bool = False,
                 prometheus_interval_s: float = 10.0, backend=None,
                 straggler_factor: Optional[float] = 1.5, straggler_steps: Optional[int] = 5,
                 straggler_every: int = 10, comm=None):
        if not _RUN_RE.match(run):
            raise HalError(f"run={run!r}: use letters, digits, '.', '_' and '-' only (it becomes a file name)")
        if straggler_factor is not None and not straggler_factor > 1:
            raise HalError(f"straggler_factor={straggler_factor}: must be above 1 (1.5 = 50% slower than the "
                           "other ranks' median); None turns straggler detection off")
        if straggler_steps is not None and straggler_steps < 1:
            raise HalError(f"straggler_steps={straggler_steps}: must be at least 1 step; None turns straggler "
                           "detection off")
        if straggler_every < 1:
            raise HalError(f"straggler_every={straggler_every}: must be at least 1 step")
        self.folder = Path(folder)
        self.run = run
        self.rank, world = _rank_world()
        name = run if world == 1 else f"{run}.rank{self.rank}"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise HalError(f"{self.folder}: cannot create the metrics folder ({exc.strerror}); "
                           "choose a folder you can write to") from None
        self.path = self.folder / f"{name}.jsonl"
        if backend is None:
            from hal.plugin.registry import selected_backend
            backend = selected_backend()
        self.probe = DeviceProbe(backend)
        self.backend_name = backend.name
        self.host = socket.gethostname()
        self.timer = StepTimer(window=window, sync=sync)
        self.sinks = []
        if tensorboard:  # first: the one that can fail on a missing package, before files are opened
            self.sinks.append(TensorBoardSink(self.folder / "tb" / name))
        if prometheus:
            self.sinks.append(PrometheusSink(self.folder / f"{name}.prom", prometheus_interval_s))
        self.sinks.insert(0, JSONLSink(self.path))
        self.last: Optional[dict] = None
        self.stragglers: Optional[StragglerWatch] = None
        if world > 1 and straggler_factor is not None and straggler_steps is not None:
            self.stragglers = StragglerWatch(run, self.rank, world, float(straggler_factor),
                                             int(straggler_steps), int(straggler_every))
        self.comm: Optional[CommWatch] = None
        if comm is not None:
            self.watch(comm)

    def watch(self, model) -> "MetricsLogger":
        """Record the communication time of ``model`` in every following record.

        ``model`` is a ``DistributedDataParallel`` module (its buckets' all-reduces timed on
        the process group where that is a Python backend such as ``emuccl``, otherwise
        through a comm hook; a hook you register on it afterwards with
        ``model.register_comm_hook`` runs inside hal's, and is timed) or a module with
        ``torch.distributed.fsdp.fully_shard`` applied
        (timed by wrapping the ``torch.distributed`` collectives it issues, which then times
        every collective this process issues through them).  Each record gains
        ``comm_time_s`` (the union of the collectives' issue-to-completion intervals since
        the previous ``log_step``), ``comm_exposed_s`` (the part the training waited for),
        ``comm_count`` and ``comm_bytes``; see ``docs/metrics.md``.  Returns the logger.
        """
        if self.comm is not None:
            raise HalError("MetricsLogger.watch: this logger watches a model already; one model per logger")
        self.comm = CommWatch(model)
        return self

    def start(self) -> None:
        """Start the clock for the first step (otherwise the first ``log_step`` starts it)."""
        self.timer.lap()

    def log_step(self, step: int, *, samples: Optional[int] = None, tokens: Optional[int] = None,
                 step_time_s: Optional[float] = None, compute_dtype: Optional[str] = None, **scalars) -> dict:
        """Record step ``step``; return the record written.

        :param samples: / tokens: work done in this step, for samples/s and tokens/s.
        :param step_time_s: the step's seconds if you timed it yourself (else the lap time).
        :param compute_dtype: the dtype the step's matrix products ran in (``"bfloat16"``, ``"tf32"``...),
            where you know it: with a ``flops=`` scalar and the record's ``device_name`` it names the device's
            peak for MFU (``hal.plugin.facts.builtin_peak_flops``).
        :param scalars: numbers of your own (``loss=``, ``lr=``, ``grad_norm=``...).

        On rank 0 the record carries ``events`` when a rank was named a straggler (or
        recovered) at this step; see ``straggler_factor``.
        """
        lap = self.timer.lap()
        if step_time_s is not None:
            if lap is not None:
                self.timer.times.pop()
            self.timer._record(float(step_time_s))
            lap = float(step_time_s)
        clean = {}
        for k, v in scalars.items():
            try:
                fv = float(v)
            except (TypeError, ValueError):
                raise HalError(f"log_step({k}={v!r}): scalars must be numbers") from None
            clean[k] = fv if math.isfinite(fv) else None
        cur, peak, source = self.probe.memory()

        def rate(n):
            return None if n is None or not lap else n / lap

        rec = {"schema": SCHEMA, "run": self.run, "rank": self.rank, "host": self.host,
               "backend": self.backend_name, "device": self.probe.device, "device_name": self.probe.name,
               "time_unix": time.time(), "step": int(step), "step_time_s": lap,
               "step_time_p50_s": self.timer.p50(), "step_time_p99_s": self.timer.p99(),
               "samples": samples, "tokens": tokens,
               "samples_per_s": rate(samples), "tokens_per_s": rate(tokens),
               "mem_current_bytes": cur, "mem_peak_bytes": peak, "mem_source": source,
               "utilization_pct": self.probe.utilization(), "scalars": clean}
        rec["comm_time_s"], rec["comm_exposed_s"], rec["comm_count"], rec["comm_bytes"] = comm_fields(self.comm)
        if compute_dtype is not None:
            rec["compute_dtype"] = str(compute_dtype)
        if self.stragglers is not None:
            events = self.stragglers.add(step, lap)
            if events:
                rec["events"] = events
        for s in self.sinks:
            s.write(rec)
        self.last = rec
        return rec

    def close(self) -> None:
        """Flush every sink (the JSONL file is fsynced)."""
        if self.stragglers is not None:
            self.stragglers.close()
        if self.comm is not None:
            self.comm.close()
        for s in self.sinks:
            s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
