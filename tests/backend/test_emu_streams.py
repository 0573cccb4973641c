"""emu's devices, streams and events as torch's device-generic code uses them: ``torch.accelerator``,
``torch.Stream`` / ``torch.Event``, stream priorities and timed events."""
import time

import pytest
import torch

import hal.emu

pytestmark = pytest.mark.emu
needs_accelerator = pytest.mark.skipif(not hasattr(torch, "accelerator"),
                                       reason=f"torch {torch.__version__} has no torch.accelerator (from 2.6)")


@pytest.fixture(scope="module", autouse=True)
def emu_device():
    hal.emu.install()


def test_streams_carry_cudas_priorities_clamped_to_the_range():
    assert torch.emu.Stream.priority_range() == (0, -3)
    assert torch.emu.Stream().priority == 0
    assert torch.emu.Stream(priority=-1).priority == -1
    assert torch.emu.Stream(priority=-10).priority == -3 and torch.emu.Stream(priority=4).priority == 0
    generic = torch.Stream("emu", priority=-2)  # torch's own constructor asks the device guard
    assert torch.emu.Stream(stream_id=generic.stream_id, device_index=generic.device_index,
                            device_type=generic.device_type).priority == -2
    high = torch.emu.Stream(priority=-1)
    with torch.emu.stream(high):
        current = torch.emu.current_stream()
        assert current == high and current.priority == -1
    assert torch.emu.current_stream() == torch.emu.default_stream() and torch.emu.default_stream().priority == 0


def test_streams_are_distinct_and_synchronous():
    a, b = torch.emu.Stream(), torch.emu.Stream(priority=-1)
    assert a != b and a.stream_id != 0 and b.stream_id != 0
    with torch.emu.stream(a):
        x = torch.ones(256, device="emu") * 2
    b.wait_stream(a)
    assert a.query() and b.query()
    b.synchronize()
    assert x.sum().item() == 512.0


def test_timed_events_measure_wall_time_and_untimed_ones_refuse():
    start, end = torch.Event(device="emu", enable_timing=True), torch.Event(device="emu", enable_timing=True)
    start.record()
    time.sleep(0.03)
    end.record()
    end.synchronize()
    assert 25.0 <= start.elapsed_time(end) < 3000.0
    plain_a, plain_b = torch.emu.Event(), torch.emu.Event()
    plain_a.record()
    plain_b.record()
    with pytest.raises((RuntimeError, ValueError), match="enable_timing=True"):  # torch 2.13 checks first
        plain_a.elapsed_time(plain_b)


@needs_accelerator
def test_torch_accelerator_selects_devices_and_streams_on_emu():
    assert torch.accelerator.current_accelerator().type == "emu"
    assert torch.accelerator.device_count() == torch.emu.device_count()
    try:
        torch.accelerator.set_device_index(2)
        assert torch.accelerator.current_device_index() == 2 and torch.emu.current_device() == 2
        assert torch.ones(1, device="emu").device.index == 2
        if hasattr(torch.accelerator, "device_index"):
            with torch.accelerator.device_index(4):
                assert torch.accelerator.current_device_index() == 4
            assert torch.accelerator.current_device_index() == 2
    finally:
        torch.accelerator.set_device_index(0)
    s = torch.Stream("emu", priority=-1)
    torch.accelerator.set_stream(s)
    try:
        assert torch.accelerator.current_stream() == s
    finally:
        torch.accelerator.set_stream(torch.emu.default_stream())
    torch.accelerator.synchronize()


@pytest.mark.skipif(not hasattr(getattr(torch, "accelerator", None), "get_device_capability"),
                    reason=f"torch {torch.__version__} has no torch.accelerator.get_device_capability")
def test_device_capability_lists_the_dtypes_emu_holds():
    dtypes = torch.accelerator.get_device_capability()["supported_dtypes"]
    assert {torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool} <= set(dtypes)
