"""hal.dist and hal bench on each usable backend, one process (cuda: NCCL with one rank)."""
import pytest
import torch

import hal
from hal.dist.bench import BenchConfig, run

@pytest.fixture
def one_rank(hal_backend, no_launcher):
    return hal_backend


def test_init_binds_the_device_and_all_reduce_runs_on_it(one_rank):
    b = one_rank
    info = hal.dist.init(timeout=60)
    ccl = "" if b.device_type == "cpu" else f",{b.device_type}:{b.spec.dist_backend}"
    assert info.backend == "cpu:gloo" + ccl
    dev = torch.device(info.device)
    assert dev.type == b.device_type
    t = hal.dist.all_reduce(torch.arange(4.0, device=dev))
    assert t.device.type == b.device_type and t.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    cpu = hal.dist.all_reduce(torch.ones(2))  # the gloo half of the backend string
    assert cpu.tolist() == [1.0, 1.0]


def test_bench_runs_in_process_on_the_device(one_rank):
    rep = run(BenchConfig(collective="all_reduce", min_bytes=1024, max_bytes=4096, step_factor=4,
                          warmup=1, iters=3, timeout=60))
    assert rep["passed"] and rep["world_size"] == 1
    assert rep["device"].startswith(one_rank.device_type)
    assert [r["busbw"] for r in rep["rows"]] == [0.0, 0.0]  # nccl-tests: 2(n-1)/n is 0 at n=1
