"""hal.metrics.MetricsLogger: one schema-valid JSONL record per step, plus optional sinks."""
import json

import jsonschema
import numpy as np
import pytest

import hal.metrics as metrics
from hal import HalError


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_every_record_follows_the_published_schema(tmp_path):
    schema = json.loads(metrics.schema_path().read_text())
    with metrics.MetricsLogger(tmp_path, "exp1") as log:
        log.start()
        for step in range(1, 6):
            log.log_step(step, samples=32, tokens=4096, loss=1.0 / step, lr=0.1)
    recs = _lines(tmp_path / "exp1.jsonl")
    assert [r["step"] for r in recs] == [1, 2, 3, 4, 5]
    for r in recs:
        jsonschema.validate(r, schema)
        assert r["step_time_s"] > 0 and r["samples_per_s"] == pytest.approx(32 / r["step_time_s"])
        assert r["tokens_per_s"] == pytest.approx(4096 / r["step_time_s"])


def test_rates_and_percentiles_follow_the_step_times(tmp_path):
    times = [0.1, 0.2, 0.1, 0.4, 0.1, 1.0, 0.1]
    log = metrics.MetricsLogger(tmp_path, window=5)
    for i, t in enumerate(times):
        rec = log.log_step(i, samples=64, step_time_s=t)
        assert rec["samples_per_s"] == pytest.approx(64 / t)
    log.close()
    assert rec["step_time_p50_s"] == pytest.approx(np.percentile(times[-5:], 50))
    assert rec["step_time_p99_s"] == pytest.approx(np.percentile(times[-5:], 99))


def test_first_step_only_starts_the_clock(tmp_path):
    with metrics.MetricsLogger(tmp_path) as log:
        rec = log.log_step(0, samples=8)
    assert rec["step_time_s"] is None and rec["samples_per_s"] is None


def test_cpu_reports_host_memory_and_no_utilisation(tmp_path, clean_registry, monkeypatch):
    monkeypatch.setenv("HAL_BACKEND", "cpu")
    with metrics.MetricsLogger(tmp_path) as log:
        rec = log.log_step(0)
    assert rec["device"] == "cpu" and rec["mem_source"] == "host-rss"
    assert rec["mem_peak_bytes"] >= rec["mem_current_bytes"] > 0
    assert rec["utilization_pct"] is None


def test_non_finite_scalar_becomes_null_and_non_number_is_refused(tmp_path):
    with metrics.MetricsLogger(tmp_path) as log:
        assert log.log_step(0, loss=float("nan"))["scalars"] == {"loss": None}
        with pytest.raises(HalError, match=r"log_step\(loss='high'\): scalars must be numbers"):
            log.log_step(1, loss="high")
    assert len(_lines(tmp_path / "run.jsonl")) == 1


def test_bad_run_name_is_refused(tmp_path):
    with pytest.raises(HalError, match="run='../x': use letters"):
        metrics.MetricsLogger(tmp_path, run="../x")


def test_prometheus_text_file(tmp_path):
    with metrics.MetricsLogger(tmp_path, "exp", prometheus=True, prometheus_interval_s=0) as log:
        log.log_step(1, samples=64, step_time_s=0.5, loss=2.5)
    text = (tmp_path / "exp.prom").read_text()
    assert 'hal_samples_per_second{run="exp",rank="0",device="cpu"} 128.0' in text
    assert 'hal_scalar_loss{run="exp",rank="0",device="cpu"} 2.5' in text
    assert "# TYPE hal_step_time_seconds gauge" in text
    assert not list(tmp_path.glob(".*.tmp"))


def test_appends_across_restarts(tmp_path):
    for start in (0, 3):
        with metrics.MetricsLogger(tmp_path) as log:
            for s in range(start, start + 3):
                log.log_step(s)
    assert [r["step"] for r in _lines(tmp_path / "run.jsonl")] == list(range(6))


def test_tensorboard_sink_writes_events(tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (optional sink)")
    with metrics.MetricsLogger(tmp_path, "exp", tensorboard=True) as log:
        log.log_step(1, samples=8, step_time_s=0.1, loss=1.0)
    assert list((tmp_path / "tb" / "exp").glob("events.out.tfevents.*"))


def test_tensorboard_without_the_package_is_one_clear_error(tmp_path):
    try:
        import tensorboard  # noqa: F401
        pytest.skip("tensorboard is installed; the missing-package error cannot happen here")
    except ImportError:
        pass
    with pytest.raises(HalError, match="tensorboard=True: the tensorboard package is not importable.*pip install tensorboard"):
        metrics.MetricsLogger(tmp_path, tensorboard=True)


def test_step_timer():
    t = metrics.StepTimer(window=3)
    assert t.lap() is None
    for _ in range(5):
        assert t.lap() >= 0
    assert len(t.times) == 3
    with pytest.raises(RuntimeError, match="without start"):
        metrics.StepTimer().stop()
    with t:
        pass
    assert t.last >= 0
