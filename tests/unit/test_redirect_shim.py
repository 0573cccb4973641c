"""hal.redirect.enable(): CUDA calls land on the selected backend, are logged, and are undone."""

import pytest
import torch

import hal
import hal.redirect
from hal.plugin.registry import Registry

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
    with hal.redirect.enable(cpu_backend) as t:
        x = torch.ones(2, device="cuda")
        y = torch.zeros(2).cuda()
        m = torch.nn.Linear(2, 2).cuda()
        z = torch.randn(2).to(torch.device("cuda:0"))
    assert {x.device.type, y.device.type, z.device.type, m.weight.device.type} == {"cpu"}
    assert {"Tensor.cuda()", "Module.cuda()"} <= _calls(t, "redirected")


def test_cuda_tensors_land_on_the_emulator(emu_backend):
    with hal.redirect.enable(emu_backend) as t:
        x = torch.ones(3, device="cuda") * 2
        n = torch.cuda.device_count()
        assert torch.cuda.is_available() and n == emu_backend.device_count()
        torch.cuda.set_device(1)  # rank 1 of a DDP job
        try:
            assert torch.cuda.current_device() == 1 % n
        finally:
            torch.cuda.set_device(0)
        assert torch.cuda.memory_allocated() > 0
    assert x.device == torch.device("emu", 0)
    assert "torch.cuda.set_device" in _calls(t, "redirected")


def _patched_objects():
    return (torch.Tensor.cuda, torch.Tensor.to, torch.nn.Module.cuda, torch.nn.Module.to, torch.zeros,
            torch.tensor, torch.Generator, torch.Event, torch.load, torch.compile, torch.cuda.synchronize,
            torch.cuda.is_available, torch.cuda.device, torch.cuda.FloatTensor,
            *((torch.accelerator.is_available,) if hasattr(torch, "accelerator") else ()), torch.distributed.init_process_group, torch.nn.DataParallel.__init__,
            torch.amp.autocast_mode.autocast.__init__, torch.utils._device.DeviceContext.__init__)


def test_everything_is_restored_on_exit(cpu_backend):
    before = _patched_objects()
    with hal.redirect.enable(cpu_backend):
        assert torch.cuda.is_available()
        assert _patched_objects() != before
    assert _patched_objects() == before
    assert torch.ones(1, device="cpu").device.type == "cpu"
    assert "to" not in torch.Tensor.__dict__ and "zeros" in dir(torch)


def test_autocast_keeps_the_dtype_the_script_asked_for(cpu_backend):
    lin = torch.nn.Linear(4, 4)
    with hal.redirect.enable(cpu_backend) as t:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            assert lin(torch.randn(2, 4)).dtype == torch.bfloat16
        with torch.autocast("cuda"):  # CUDA's default is float16, and so it stays
            assert torch.get_autocast_dtype("cpu") == torch.float16
    assert "torch.autocast('cuda')" in _calls(t, "redirected")


def test_each_redirection_is_logged_once_and_counted(cpu_backend, caplog):
    with caplog.at_level("WARNING", logger="hal.redirect"):
        with hal.redirect.enable(cpu_backend) as t:
            for _ in range(3):
                torch.zeros(1).cuda()
    assert sum("Tensor.cuda()" in r.message for r in caplog.records) == 1
    assert next(r for r in t.log.rows("redirected") if r["call"] == "Tensor.cuda()")["count"] == 3


def test_calls_without_an_equivalent_are_reported(cpu_backend):
    with hal.redirect.enable(cpu_backend) as t:
        torch.cuda.memory_allocated()  # the CPU keeps no allocator statistics
        torch.cuda.manual_seed(3)
    assert {"torch.cuda.memory_allocated", "torch.cuda.manual_seed"} <= _calls(t, "not_redirected")


def test_seeding_through_torch_manual_seed_is_unchanged_on_cpu(cpu_backend):
    torch.manual_seed(7)
    ref = torch.randn(3)
    with hal.redirect.enable(cpu_backend):
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
        with hal.redirect.enable(cpu_backend):
            torch.distributed.init_process_group("nccl")
        with hal.redirect.enable(emu_backend):
            torch.distributed.init_process_group("nccl")
    finally:
        dist.init_process_group = orig
    assert seen == ["gloo", "cpu:gloo,emu:emuccl"]


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def test_jit_script_is_left_alone(cpu_backend):
    with hal.redirect.enable(cpu_backend):
        f = torch.jit.script(_double)
        out = f(torch.ones(2, device="cuda"))
    assert isinstance(f, torch.jit.ScriptFunction)
    assert torch.equal(out, torch.full((2,), 2.0))


def test_two_argument_cuda_device_and_device_objects_stay_what_they_are(cpu_backend):
    with hal.redirect.enable(cpu_backend):
        dev = torch.device("cuda", 0)  # DataParallel(...).cuda() makes this call
        x = torch.zeros(2, device=dev)
        y = torch.ones(2).to(dev)
    assert dev.type == "cuda" and str(dev) == "cuda:0"
    # documented: tensors report their true device; comparisons with cuda devices are False
    assert x.device.type == y.device.type == "cpu"
    assert x.device != torch.device("cuda") and not x.is_cuda


def test_data_parallel_cuda_and_forward_on_the_cpu(cpu_backend):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    x = torch.randn(5, 4)
    with hal.redirect.enable(cpu_backend) as t:
        dp = torch.nn.DataParallel(model).cuda()
        out = dp(x.cuda())
    assert torch.equal(out, model(x))
    assert list(dp.state_dict()) == ["module.weight", "module.bias"]
    assert "torch.nn.DataParallel()" in _calls(t, "redirected")


def test_torch_internals_get_the_real_torch_cuda_answers(cpu_backend):
    """torch's own code must not hear "CUDA is available": on a CUDA build without a driver
    it would call into CUDA.  The caller is told apart by its module."""
    real = (torch.cuda.is_available(), torch.cuda.device_count())
    inside = {"__name__": "torch.utils.data.fake_internal", "torch": torch}
    with hal.redirect.enable(cpu_backend):
        user = (torch.cuda.is_available(), torch.cuda.device_count())
        exec("answer = (torch.cuda.is_available(), torch.cuda.device_count())", inside)
    assert user == (True, 1)
    assert inside["answer"] == real


@pytest.mark.skipif(not hasattr(torch, "accelerator"), reason=f"torch {torch.__version__} has no torch.accelerator (2.6+)")
def test_torch_accelerator_answers_the_user_as_torch_cuda_does_and_torch_gets_the_truth(cpu_backend, monkeypatch):
    """accelerate 1.16 picks its device through torch.accelerator: an answer that disagreed with
    torch.cuda.is_available() sent it down its CPU path (every torchrun rank alone)."""
    # on PyPI's CUDA build torch.accelerator names cuda even without a driver
    monkeypatch.setattr(torch._C, "_accelerator_getAccelerator", lambda: torch.device("cuda"))
    inside = {"__name__": "torch.fake_internal", "torch": torch}
    with hal.redirect.enable(cpu_backend):
        user = (torch.accelerator.current_accelerator(), torch.accelerator.is_available(),
                torch.accelerator.device_count(), torch.accelerator.current_device_index())
        if hasattr(torch.accelerator, "memory_allocated"):  # its memory API: torch 2.9+
            user += (torch.accelerator.memory_allocated(),)
        if hasattr(torch.accelerator, "device_index"):  # 2.7+
            with torch.accelerator.device_index(0):
                torch.accelerator.synchronize()
        exec("answer = torch.accelerator.current_accelerator()", inside)
    assert user == (torch.device("cuda"), True, 1, 0, 0)[:len(user)]
    assert inside["answer"] == torch.device("cuda")  # torch itself still sees what it was built with
    assert torch.accelerator.is_available is not None and not hasattr(torch.accelerator.is_available, "__hal_for_user__")


def test_only_device_taking_calls_are_wrapped_and_no_torch_function_mode_is_pushed(cpu_backend):
    plain = (torch.add, torch.matmul, torch.nn.functional.linear, torch.Tensor.add, torch.Tensor.sum,
             torch.nn.Module.__call__, torch.optim.AdamW.step)
    with hal.redirect.enable(cpu_backend):
        assert torch._C._len_torch_function_stack() == 0
        assert (torch.add, torch.matmul, torch.nn.functional.linear, torch.Tensor.add, torch.Tensor.sum,
                torch.nn.Module.__call__, torch.optim.AdamW.step) == plain


@pytest.fixture
def four_device_backend(emu_backend):
    """The emulator's backend object, answering as a machine with four devices would."""
    class FourDevices(type(emu_backend)):
        current = 0

        def device_count(self):
            return 4

        def current_device(self):
            return self.current

        def set_device(self, index):
            assert 0 <= index < 4
            self.current = index

    return FourDevices(emu_backend.spec, emu_backend.vendor_module)


def test_cuda_indices_map_one_to_one_onto_a_multi_device_backend(four_device_backend):
    with hal.redirect.enable(four_device_backend) as t:
        assert torch.cuda.device_count() == 4
        assert t.device("cuda:3") == t.device(3) == torch.device("emu", 3)
        torch.cuda.set_device(2)
        assert torch.cuda.current_device() == 2 and t.device("cuda") == torch.device("emu", 2)
        with torch.cuda.device(1):
            assert torch.cuda.current_device() == 1
        assert torch.cuda.current_device() == 2
        assert t.device("cuda:6") == torch.device("emu", 2)  # more ranks than devices: modulo, noted
    assert "cuda:6" in _calls(t, "redirected")


def test_everything_maps_to_the_one_cpu_device(cpu_backend):
    with hal.redirect.enable(cpu_backend) as t:
        torch.cuda.set_device(3)
        with torch.cuda.device(2):
            x = torch.zeros(1, device="cuda:5")
        assert (torch.cuda.device_count(), torch.cuda.current_device()) == (1, 0)
        assert t.device("cuda:7") == torch.device("cpu")
    assert x.device == torch.device("cpu")


def _cuda_checkpoint(path, tag="cuda:0"):
    import torch.serialization as ser
    orig = ser.location_tag
    ser.location_tag = lambda storage: tag  # what torch.save writes for a tensor on that GPU
    try:
        torch.save({"w": torch.arange(3.0), "b": torch.ones(2)}, path)
    finally:
        ser.location_tag = orig
    with pytest.raises(RuntimeError, match="CUDA"):
        torch.load(path, weights_only=False)  # really a CUDA checkpoint here


@pytest.mark.parametrize("map_location", [None, "cuda", "cuda:0", torch.device("cuda"), {"cuda:1": "cuda:0"},
                                          lambda storage, loc: storage.cuda()],
                         ids=["none", "str", "str_index", "device", "dict", "callable"])
def test_a_cuda_checkpoint_loads_onto_the_cpu(cpu_backend, tmp_path, map_location):
    _cuda_checkpoint(tmp_path / "ckpt.pt", "cuda:1")
    with hal.redirect.enable(cpu_backend) as t:
        state = torch.load(tmp_path / "ckpt.pt", map_location=map_location, weights_only=False)
    assert torch.equal(state["w"], torch.arange(3.0)) and state["b"].device.type == "cpu"
    assert any(r["call"].startswith(("torch.load", "Storage.cuda")) for r in t.log.rows("redirected"))


def test_torchscript_still_compiles_factories_during_and_after_the_shim(cpu_backend):
    def make(n: int) -> torch.Tensor:
        return torch.zeros(n) + torch.ones(n)

    with hal.redirect.enable(cpu_backend):
        inside = torch.jit.script(make)(3)
    after = torch.jit.script(make)(2)
    assert torch.equal(inside, torch.ones(3)) and torch.equal(after, torch.ones(2))


def test_generator_stream_and_event_stay_isinstance_compatible(cpu_backend):
    with hal.redirect.enable(cpu_backend):
        g = torch.Generator(device="cuda")
        assert isinstance(g, torch.Generator) and isinstance(torch.default_generator, torch.Generator)
        start, end = torch.cuda.Event(enable_timing=True), torch.Event(device="cuda", enable_timing=True)
        start.record()
        torch.randn(64, 64) @ torch.randn(64, 64)
        end.record()
        assert start.elapsed_time(end) >= 0 and isinstance(end, torch.Event)
    assert g.device.type == "cpu" and type(g) is torch.Generator


def test_an_optimizer_built_before_cuda_trains_the_moved_parameters(emu_backend):
    # on CUDA, Module.cuda() keeps the Parameter objects; torch makes new ones for device
    # types it cannot shallow-copy into (the emulator's), which would leave the optimizer
    # holding the CPU parameters
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with hal.redirect.enable(emu_backend):
        model.cuda()
        x = torch.randn(8, 4, device="cuda")
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    assert opt.param_groups[0]["params"][0] is model.weight and model.weight.device.type == "emu"
    assert losses[2] < losses[0]
