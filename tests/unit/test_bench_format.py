"""hal bench's sizes, formulas, nccl-tests layout and pass/fail gates (no processes started)."""
import pytest

from hal.dist.bench import BenchConfig, bus_factor, format_text, judge, parse_size, sweep


def test_sizes_are_1024_based_like_nccl_tests():
    assert [parse_size(s) for s in ("8", "1K", "64M", "1G", "2kb")] == [8, 1024, 64 << 20, 1 << 30, 2048]
    with pytest.raises(ValueError, match="'lots' is not a byte count"):
        parse_size("lots")


def test_sweep_by_factor_and_by_step():
    assert sweep(1024, 64 << 20, 4) == [1024 * 4 ** k for k in range(9)]
    assert sweep(100, 400, step_bytes=150) == [100, 250, 400]
    with pytest.raises(ValueError, match="minbytes <= maxbytes"):
        sweep(10, 5)


@pytest.mark.parametrize("coll, n, factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 8, 1.75), ("all_gather", 4, 0.75),
    ("reduce_scatter", 8, 0.875), ("all_to_all", 2, 0.5), ("broadcast", 8, 1.0)])
def test_bus_bandwidth_factors_of_nccl_tests(coll, n, factor):
    assert bus_factor(coll, n) == pytest.approx(factor)


def _report(busbws, wrong=0, in_place=True):
    rows = [{"size": 1024 << i, "count": 256 << i, "type": "float", "redop": "sum", "root": -1,
             "in_place": in_place, "time_us": 100.0 * (i + 1), "algbw": b / 1.5, "busbw": b,
             "wrong": wrong, "p50_us": 90.0, "p99_us": 150.0} for i, b in enumerate(busbws)]
    return {"schema": "hal.bench/1", "collective": "all_reduce", "world_size": 4, "backend": "cpu:gloo",
            "device": "cpu", "device_name": "host", "hal_backend": "cpu",
            "config": {"min_bytes": 1024, "max_bytes": 2048, "step_factor": 2.0, "step_bytes": 0,
                       "warmup": 5, "iters": 20, "check": True},
            "rows": rows, "avg_busbw": sum(busbws) / len(busbws), "wrong_total": wrong * len(rows)}


def test_text_has_nccl_tests_header_rows_and_footer():
    text = format_text(judge(_report([1.5, 3.0])))
    lines = text.splitlines()
    assert "#       size         count      type   redop    root     time   algbw   busbw #wrong" \
           "     time   algbw   busbw #wrong" in lines
    data = [l for l in lines if not l.startswith("#")]
    assert len(data) == 2
    cols = data[1].split()
    # size count type redop root | out-of-place (N/A for an in-place op) | in-place measured
    assert cols[:5] == ["2048", "512", "float", "sum", "-1"]
    assert cols[5:9] == ["N/A"] * 4
    assert cols[9:] == ["200.0", "2.00", "3.00", "0"]
    assert len(data[1]) == len("   134217728      33554432     float     sum      -1   1211.2  110.81  110.81"
                               "      0   1211.8  110.76  110.76    N/A")
    assert "# Out of bounds values : 0 OK" in lines
    assert "# Avg bus bandwidth    : 2.25 " in lines


def test_gates_fail_on_wrong_values_low_bandwidth_or_a_drop_from_baseline():
    assert judge(_report([2.0]))["passed"]
    assert not judge(_report([2.0], wrong=3))["passed"]
    assert not judge(_report([2.0]), min_busbw=5.0)["passed"]
    assert judge(_report([2.0]), min_busbw=1.0)["passed"]
    base = _report([2.0, 4.0])
    assert judge(_report([1.9, 3.8]), baseline=base, tolerance=0.1)["passed"]
    low = judge(_report([1.0, 2.0]), baseline=base, tolerance=0.1)
    assert not low["passed"]
    gate = next(g for g in low["gates"] if g["gate"] == "baseline")
    assert gate["ratios_by_size"] == {"1024": 0.5, "2048": 0.5}


def test_baseline_of_another_collective_is_refused():
    other = dict(_report([1.0]), collective="broadcast")
    with pytest.raises(ValueError, match="not a hal.bench/1 report of all_reduce"):
        judge(_report([1.0]), baseline=other)


@pytest.mark.parametrize("kw, message", [
    (dict(collective="allreduce"), "is not one of"), (dict(dtype="fp8"), "datatype"),
    (dict(op="xor"), "reduction"), (dict(iters=0), "iters >= 1"), (dict(nproc=0), "-n must be")])
def test_bad_config_is_refused(kw, message):
    with pytest.raises(ValueError, match=message):
        BenchConfig(**kw).validate()


def test_percentiles_are_nearest_rank():
    from hal.dist.bench import _pct

    values = [float(v) for v in range(1, 101)]
    assert (_pct(values, 50), _pct(values, 99), _pct(values, 100)) == (50.0, 99.0, 100.0)
    assert _pct([3.0], 99) == 3.0
