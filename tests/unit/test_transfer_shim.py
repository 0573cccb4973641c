"""hal.transfer.enable(): CUDA calls land on the selected backend, are logged, and are undone."""
import pytest
import torch

import hal
import hal.transfer
from hal.registry import Registry

pytestmark = pytest.mark.emu


@pytest.fixture
def cpu_backend(clean_registry):
    return Registry(env={"HAL_BACKEND": "cpu"}).selected().backend


@pytest.fixture
def emu_backend(clean_registry):
    return Registry(env={"HAL_BACKEND": "emu"}).selected().backend


def _calls(t, kind):
    return {r["call"] for r in t.log.rows(kind)}


def test_cuda_tensors_and_modules_land_on_the_cpu(cpu_backend):
    with hal.transfer.enable(cpu_backend) as t:
        x = torch.ones(2, device="cuda")
        y = torch.zeros(2).cuda()
        m = torch.nn.Linear(2, 2).cuda()
        z = torch.randn(2).to(torch.device("cuda:0"))
    assert {x.device.type, y.device.type, z.device.type, m.weight.device.type} == {"cpu"}
    assert {"Tensor.cuda()", "Module.cuda()"} <= _calls(t, "redirected")


def test_cuda_tensors_land_on_the_emulator(emu_backend):
    with hal.transfer.enable(emu_backend) as t:
        x = torch.ones(3, device="cuda") * 2
        torch.cuda.set_device(1)  # rank 1 of a DDP job: one emulated device per process
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1
        assert torch.cuda.memory_allocated() > 0
    assert x.device == torch.device("emu", 0)
    assert "cuda:1" in _calls(t, "redirected")


def test_everything_is_restored_on_exit(cpu_backend):
    before = (torch.Tensor.cuda, torch.nn.Module.cuda, torch.cuda.synchronize, torch.cuda.is_available,
              torch.distributed.init_process_group, torch.amp.autocast_mode.autocast.__init__)
    with hal.transfer.enable(cpu_backend):
        assert torch.cuda.is_available()
    after = (torch.Tensor.cuda, torch.nn.Module.cuda, torch.cuda.synchronize, torch.cuda.is_available,
             torch.distributed.init_process_group, torch.amp.autocast_mode.autocast.__init__)
    assert before == after
    assert torch.ones(1, device="cpu").device.type == "cpu"


def test_autocast_keeps_the_dtype_the_script_asked_for(cpu_backend):
    lin = torch.nn.Linear(4, 4)
    with hal.transfer.enable(cpu_backend) as t:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            assert lin(torch.randn(2, 4)).dtype == torch.bfloat16
        with torch.autocast("cuda"):  # CUDA's default is float16, and so it stays
            assert torch.get_autocast_dtype("cpu") == torch.float16
    assert "torch.autocast('cuda')" in _calls(t, "redirected")


def test_each_redirection_is_logged_once_and_counted(cpu_backend, caplog):
    with caplog.at_level("WARNING", logger="hal.transfer"):
        with hal.transfer.enable(cpu_backend) as t:
            for _ in range(3):
                torch.zeros(1).cuda()
    assert sum("Tensor.cuda()" in r.message for r in caplog.records) == 1
    assert next(r for r in t.log.rows("redirected") if r["call"] == "Tensor.cuda()")["count"] == 3


def test_calls_without_an_equivalent_are_reported(cpu_backend):
    with hal.transfer.enable(cpu_backend) as t:
        torch.cuda.memory_allocated()  # the CPU keeps no allocator statistics
        torch.cuda.manual_seed(3)
    assert {"torch.cuda.memory_allocated", "torch.cuda.manual_seed"} <= _calls(t, "not_redirected")


def test_seeding_through_torch_manual_seed_is_unchanged_on_cpu(cpu_backend):
    torch.manual_seed(7)
    ref = torch.randn(3)
    with hal.transfer.enable(cpu_backend):
        torch.manual_seed(7)
        torch.cuda.manual_seed(7)
        got = torch.randn(3, device="cuda")
    assert torch.equal(got, ref)


def test_nccl_becomes_the_backends_collective(cpu_backend, emu_backend):
    import torch.distributed as dist
    seen = []
    orig = dist.init_process_group
    dist.init_process_group = lambda backend=None, *a, **k: seen.append(backend)
    try:
        with hal.transfer.enable(cpu_backend):
            torch.distributed.init_process_group("nccl")
        with hal.transfer.enable(emu_backend):
            torch.distributed.init_process_group("nccl")
    finally:
        dist.init_process_group = orig
    assert seen == ["gloo", "cpu:gloo,emu:emuccl"]


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def test_jit_script_is_left_alone(cpu_backend):
    with hal.transfer.enable(cpu_backend):
        f = torch.jit.script(_double)
        out = f(torch.ones(2, device="cuda"))
    assert isinstance(f, torch.jit.ScriptFunction)
    assert torch.equal(out, torch.full((2,), 2.0))
