"""hal.op_support.torch_plan: replacements for the ops a torch profile lacks."""
import time

import pytest

from hal.op_support import torch_plan as tp
from hal.op_support.torch_profile import load_torch_profiles


@pytest.fixture(scope="module")
def profiles():
    return load_torch_profiles(use_plugins=False)


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))


def test_an_exact_decomposition(profiles):
    p = tp.plan_op("threshold_backward", profiles["gcu-2.10"])
    assert p.kind == "decomposition" and p.exact and not p.blocking
    assert "where.self" in p.pieces


def test_an_approximate_decomposition(profiles):
    p = tp.plan_op("native_batch_norm_backward", profiles["gcu-2.10"])
    assert p.kind == "decomposition" and not p.exact and "sum.dim_IntList" in p.pieces


def test_nothing_works_names_the_blocking_op(profiles):
    p = tp.plan_op("_fused_adagrad_", profiles["musa-2.7"])
    assert p.kind == "none" and p.blocking == ["_fused_adagrad_"]


def test_the_vendors_cpu_fallback_with_its_host_bytes(profiles):
    p = tp.plan_op("_embedding_bag_backward", profiles["ascend-2.13"])
    assert p.kind == "cpu_fallback" and p.bytes_per_element and p.bytes_per_call is None
    b = tp.host_traffic("_embedding_bag_backward", ["float32"])
    assert b["bytes_per_element"] == p.bytes_per_element
    t = tp.host_traffic("threshold_backward", ["float32"], shapes=[(2, 3), (2, 3)])
    assert t["bytes_per_call"] == 4 * (6 + 6 + 6)  # grad_output, self in; grad_input out


def test_a_native_op_needs_no_plan(profiles):
    assert tp.plan_op("addmm", profiles["ascend-2.13"]).kind == "native"


def test_plan_trace_plans_only_missing_ops_and_caches(profiles):
    ops = ["threshold_backward", "native_batch_norm_backward", "native_group_norm_backward", "addmm",
           "max_pool2d_with_indices_backward", "avg_pool2d_backward", "_embedding_bag"]
    trace = {"ops": [{"op": o, "count": 1, "dtypes": ["float32"]} for o in ops]}
    t0 = time.perf_counter()
    plans = tp.plan_trace(trace, profiles["gcu-2.10"])
    cold = time.perf_counter() - t0
    assert [p.op for p in plans] == [o for o in ops if o != "addmm"]
    t0 = time.perf_counter()
    tp.plan_trace(trace, profiles["gcu-2.10"])
    assert time.perf_counter() - t0 <= cold
