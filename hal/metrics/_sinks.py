"""Where metrics records go: JSONL (always), Prometheus text file, TensorBoard (optional)."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Optional

from hal.util.io import atomic_write

#: record fields exported as Prometheus gauges: field -> (metric name, help)
PROM_GAUGES = {
    "step": ("hal_train_step", "last training step logged"),
    "step_time_s": ("hal_step_time_seconds", "wall time of the last step"),
    "step_time_p50_s": ("hal_step_time_p50_seconds", "median step time over the window"),
    "step_time_p99_s": ("hal_step_time_p99_seconds", "99th percentile step time over the window"),
    "samples_per_s": ("hal_samples_per_second", "samples per second of the last step"),
    "tokens_per_s": ("hal_tokens_per_second", "tokens per second of the last step"),
    "mem_current_bytes": ("hal_memory_current_bytes", "device (or host RSS) memory in use"),
    "mem_peak_bytes": ("hal_memory_peak_bytes", "peak device (or host RSS) memory"),
    "utilization_pct": ("hal_device_utilization_percent", "device utilisation"),
    "comm_time_s": ("hal_comm_seconds", "seconds in collectives in the last logged window"),
    "comm_exposed_s": ("hal_comm_exposed_seconds", "seconds the training waited for collectives in the last window"),
}


class JSONLSink:
    """Appends one JSON object per line; flushed per record, fsynced on close."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(path, "a", encoding="utf-8")

    def write(self, record: dict) -> None:
        self._f.write(json.dumps(record, allow_nan=False, separators=(",", ":")) + "\n")
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()


def _label(v) -> str:
    return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_text(record: dict) -> str:
    """The Prometheus text exposition of one record (gauges labelled run, rank, device)."""
    labels = ",".join(f'{k}="{_label(record.get(k))}"' for k in ("run", "rank", "device"))
    lines = []
    for key, (name, help_) in PROM_GAUGES.items():
        v = record.get(key)
        if v is None:
            continue
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} gauge", f"{name}{{{labels}}} {float(v)!r}"]
    for key, v in sorted(record.get("scalars", {}).items()):
        name = "hal_scalar_" + "".join(c if c.isalnum() else "_" for c in key)
        lines += [f"# TYPE {name} gauge", f"{name}{{{labels}}} {float(v)!r}"]
    return "\n".join(lines) + "\n"


class PrometheusSink:
    """Rewrites ``<run>.prom`` atomically (node_exporter textfile collector format).

    Written at most every ``interval_s`` seconds, and on close.
    """

    def __init__(self, path: Path, interval_s: float = 10.0):
        self.path, self.interval_s = path, interval_s
        self._last_write = 0.0
        self._pending: Optional[dict] = None

    def write(self, record: dict) -> None:
        self._pending = record
        now = time.monotonic()
        if now - self._last_write >= self.interval_s:
            self._flush(now)

    def _flush(self, now: float) -> None:
        if self._pending is not None:
            atomic_write(self.path, prometheus_text(self._pending))
            self._pending, self._last_write = None, now

    def close(self) -> None:
        self._flush(time.monotonic())


class TensorBoardSink:
    """Scalars to TensorBoard event files (needs the ``tensorboard`` package)."""

    def __init__(self, folder: Path):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            from hal._errors import HalError
            raise HalError(f"tensorboard=True: the tensorboard package is not importable ({exc}); "
                           "pip install tensorboard, or drop tensorboard=True (JSONL is always written)") from None
        self._w = SummaryWriter(log_dir=str(folder))

    def write(self, record: dict) -> None:
        step = record["step"]
        for key in PROM_GAUGES:
            if key != "step" and record.get(key) is not None:
                self._w.add_scalar(f"hal/{key}", record[key], step)
        for key, v in record.get("scalars", {}).items():
            self._w.add_scalar(key, v, step)

    def close(self) -> None:
        self._w.flush()
        self._w.close()
