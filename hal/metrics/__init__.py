"""Training metrics into your own storage: step time, throughput, memory, utilisation,
communication time.

::

    import hal.metrics
    with hal.metrics.MetricsLogger("runs/exp1", prometheus=True) as metrics:
        metrics.watch(model)            # a DDP or FSDP2 model: comm_time_s, comm_exposed_s
        for step in range(steps):
            ...
            metrics.log_step(step, samples=batch, loss=loss.item(), lr=lr)

A script that does not log can be measured from outside: ``hal run --metrics runs/exp1 train.py``
(:class:`AttachedMetrics`: loss, grad norm, lr, samples and tokens per optimizer step).

One JSONL record per logged step (schema ``hal.metrics/1``, published as
``hal/data/metrics.schema.json`` and described in ``docs/metrics.md``); optional
Prometheus text-file and TensorBoard sinks.  ``hal metrics summary run.jsonl`` (or
:func:`summarize`) finds where throughput dropped and whether the run is
communication-bound.
"""
from hal.metrics._attach import ENV_DIR, AttachedMetrics, attach_from_env
from hal.metrics._logger import SCHEMA, MetricsLogger
from hal.metrics._sinks import prometheus_text
from hal.metrics._timer import StepTimer, percentile
from hal.metrics.summary import find_drops, read_jsonl, summarize


def schema_path():
    """Path of the JSON Schema every JSONL record follows."""
    from pathlib import Path
    return Path(__file__).resolve().parent.parent / "data" / "metrics.schema.json"


__all__ = ["MetricsLogger", "AttachedMetrics", "attach_from_env", "ENV_DIR", "StepTimer", "SCHEMA", "summarize", "find_drops", "read_jsonl",
           "percentile", "prometheus_text", "schema_path"]
