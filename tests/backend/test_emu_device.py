"""The emulated accelerator as a PyTorch device: memory, views, RNG, autocast, training."""
import copy

import pytest
import torch

import hal
import hal.emu

pytestmark = [pytest.mark.emu, pytest.mark.filterwarnings("ignore::hal.emu.FallbackWarning")]


@pytest.fixture(scope="module", autouse=True)
def emu_device():
    hal.emu.install()
    return torch.device("emu", 0)


def test_tensors_live_on_the_emu_device_and_round_trip_exactly():
    x = torch.randn(5, 7)
    y = x.to("emu")
    assert y.device == torch.device("emu", 0)
    assert y.is_floating_point() and y.shape == (5, 7)
    assert torch.equal(y.cpu(), x)
    assert torch.equal(torch.ones(3, device="emu").cpu(), torch.ones(3))


def test_views_alias_their_base_like_device_memory():
    y = torch.zeros(3, 4, device="emu")
    col = y[:, 1]
    col.fill_(7.0)
    y.t()[2].add_(1.0)
    expected = torch.zeros(3, 4)
    expected[:, 1] = 7.0
    expected[:, 2] += 1.0
    assert torch.equal(y.cpu(), expected)


def test_transposed_view_reports_its_real_strides():
    y = torch.arange(12.0, device="emu").view(3, 4)
    t = y.t()
    assert t.stride() == (1, 4) and not t.is_contiguous()
    assert torch.equal(t.contiguous().view(12).cpu(), torch.arange(12.0).view(3, 4).t().reshape(12))


def test_mixing_emu_and_host_tensors_fails_like_a_device_does():
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(3, device="emu") + torch.ones(3)


def test_scalar_host_tensors_mix_with_emu_tensors():
    out = torch.ones(3, device="emu") * torch.tensor(2.0)
    assert torch.equal(out.cpu(), torch.full((3,), 2.0))


def test_memory_statistics_follow_allocations():
    base = torch.emu.memory_allocated()
    t = torch.empty(1024, 1024, device="emu")
    assert torch.emu.memory_allocated() - base >= 4 * 1024 * 1024
    assert torch.emu.max_memory_allocated() >= torch.emu.memory_allocated()
    del t
    assert torch.emu.memory_allocated() - base < 4 * 1024 * 1024


def test_rng_state_round_trip_replays_the_same_numbers():
    torch.emu.manual_seed(123)
    state = torch.emu.get_rng_state()
    a = torch.randn(8, device="emu").cpu()
    torch.emu.set_rng_state(state)
    b = torch.randn(8, device="emu").cpu()
    assert torch.equal(a, b)
    torch.emu.manual_seed(124)
    assert not torch.equal(torch.randn(8, device="emu").cpu(), a)


def test_emu_rng_is_separate_from_the_host_generator():
    torch.manual_seed(5)
    host_first = torch.randn(4)
    torch.manual_seed(5)
    torch.emu.manual_seed(99)
    torch.randn(4, device="emu")
    assert torch.equal(torch.randn(4), host_first)


def test_autocast_runs_linear_layers_in_bfloat16():
    lin = torch.nn.Linear(8, 4).to("emu")
    x = torch.randn(2, 8, device="emu")
    with torch.autocast("emu", dtype=torch.bfloat16):
        y = lin(x)
        z = y + 1.0
    assert y.dtype == torch.bfloat16 and z.dtype == torch.bfloat16
    assert lin(x).dtype == torch.float32


def test_autocast_matches_cpu_autocast():
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 8)
    x = torch.randn(4, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = lin(x)
    le = copy.deepcopy(lin).to("emu")
    with torch.autocast("emu", dtype=torch.bfloat16):
        got = le(x.to("emu"))
    assert torch.equal(got.cpu(), ref)


def test_events_time_work_and_streams_nest():
    s = torch.emu.Stream()
    start, end = torch.emu.Event(enable_timing=True), torch.emu.Event(enable_timing=True)
    with torch.emu.stream(s):
        assert torch.emu.current_stream() == s  # equal, not the same object, as on CUDA
        start.record()
        torch.randn(64, 64, device="emu") @ torch.randn(64, 64, device="emu")
        end.record()
    assert torch.emu.current_stream() == torch.emu.default_stream()
    torch.emu.synchronize()
    assert end.query() and start.elapsed_time(end) >= 0.0


def test_a_node_of_devices_and_a_clear_error_beyond_it():
    # HAL_EMU_DEVICES (default 8, like one node): DDP scripts gate on device_count() >= N
    assert torch.emu.device_count() == 8
    if hasattr(torch, "accelerator"):  # torch 2.6+
        assert torch.accelerator.device_count() == 8
    torch.emu.set_device(3)
    try:
        x = torch.ones(2, device="emu")
        assert x.device == torch.device("emu", 3)
        with torch.emu.device(5):
            assert torch.zeros(1, device="emu").device.index == 5
        assert torch.emu.current_device() == 3
    finally:
        torch.emu.set_device(0)
    with pytest.raises(ValueError, match="out of range.*HAL_EMU_DEVICES"):
        torch.emu.set_device(8)
    with pytest.raises(RuntimeError, match="emu:0 and emu:1"):
        torch.ones(2, device="emu:0") + torch.ones(2, device="emu:1")


def test_training_steps_match_the_cpu_bit_for_bit():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                                torch.nn.Linear(16, 3))
    emu_model = copy.deepcopy(model).to("emu")
    x, target = torch.randn(10, 6), torch.randint(0, 3, (10,))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    emu_opt = torch.optim.AdamW(emu_model.parameters(), lr=1e-2)
    for _ in range(3):
        loss = torch.nn.functional.cross_entropy(model(x), target)
        loss.backward(); opt.step(); opt.zero_grad()
        emu_loss = torch.nn.functional.cross_entropy(emu_model(x.to("emu")), target.to("emu"))
        emu_loss.backward(); emu_opt.step(); emu_opt.zero_grad()
        torch.testing.assert_close(emu_loss.cpu(), loss.detach(), rtol=1e-5, atol=1e-6)
    for p, q in zip(model.parameters(), emu_model.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-5, atol=1e-6)


def test_state_dict_saves_and_loads_through_the_host(tmp_path):
    lin = torch.nn.Linear(3, 2).to("emu")
    torch.save(lin.state_dict(), tmp_path / "m.pt")
    loaded = torch.load(tmp_path / "m.pt", map_location="cpu", weights_only=False)
    assert torch.equal(loaded["weight"], lin.weight.detach().cpu())


def test_tensors_built_from_python_data_land_on_the_device():
    # torch.tensor / torch.as_tensor bypass Python dispatch: the PrivateUse1 kernels serve them
    import numpy as np
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]], device="emu")
    b = torch.as_tensor(np.arange(3), device="emu")
    assert a.device.type == b.device.type == "emu"
    assert torch.equal(a.cpu(), torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert torch.equal(b.cpu(), torch.arange(3))
    assert repr(torch.tensor(3, device="emu")) == "tensor(3, device='emu:0')"


def test_convolution_keeps_channels_last_and_matches_the_cpu_exactly():
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 8, 3, padding=1).to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 9, 9).to(memory_format=torch.channels_last)
    ref = conv(x)
    got = copy.deepcopy(conv).to("emu")(x.to("emu"))
    assert got.is_contiguous(memory_format=torch.channels_last) == ref.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(got.cpu(), ref.detach())
