"""The device facet, run on every usable backend (cpu here; cuda, npu, ... where present)."""
import pytest
import torch

import hal


def test_device_and_tensors(hal_backend):
    dev = hal.device()
    assert dev.type == hal_backend.device_type == hal.device_type()
    x = torch.arange(6, dtype=torch.float32, device=dev)
    assert x.device.type == dev.type
    assert (x * 2).sum().item() == 30.0


def test_device_count_and_set_device(hal_backend):
    n = hal.device_count()
    assert n >= 1
    hal.set_device(0)
    assert hal.current_device() == 0
    with pytest.raises(ValueError, match="out of range"):
        hal.set_device(n + 7)


def test_synchronize_streams_events(hal_backend):
    dev = hal.device()
    s = hal.Stream()
    with hal.stream(s):
        y = torch.ones(1024, device=dev) * 3
    hal.synchronize()
    assert y.sum().item() == 3072
    assert hal.current_stream() is not None
    ev = hal.Event()
    ev.record()
    ev.synchronize()


def test_rng_seed_state_roundtrip(hal_backend):
    dev = hal.device()
    hal.manual_seed(1234)
    a = torch.rand(8, device=dev)
    hal.manual_seed(1234)
    b = torch.rand(8, device=dev)
    assert torch.equal(a, b)
    state = hal.get_rng_state()
    c = torch.rand(8, device=dev)
    hal.set_rng_state(state)
    d = torch.rand(8, device=dev)
    assert torch.equal(c, d)
    assert hal.initial_seed() == 1234


def test_fork_rng_restores_generators(hal_backend):
    dev = hal.device()
    hal.manual_seed(7)
    with hal.fork_rng():
        torch.rand(100, device=dev)
    after_fork = torch.rand(4, device=dev)
    hal.manual_seed(7)
    assert torch.equal(after_fork, torch.rand(4, device=dev))


def test_supported_dtypes_and_autocast(hal_backend):
    dts = hal.supported_dtypes()
    assert torch.float32 in dts
    low = hal_backend.low_precision_dtype()
    assert low in (torch.bfloat16, torch.float16) and low in dts
    dev = hal.device()
    a = torch.randn(16, 16, device=dev)
    with hal.autocast():
        out = a @ a
    assert out.dtype == low
    with hal.autocast(enabled=False):
        assert (a @ a).dtype == torch.float32


def test_memory_statistics(hal_backend):
    if hal_backend.device_type == "cpu":
        with pytest.raises(hal.NotSupported) as ei:
            hal.memory_allocated()
        assert ei.value.backend == "cpu" and ei.value.feature == "memory_allocated"
        return
    hal.reset_peak_memory_stats()
    before = hal.memory_allocated()
    x = torch.empty(1 << 20, dtype=torch.float32, device=hal.device())
    assert hal.memory_allocated() >= before + x.numel() * 4
    assert hal.max_memory_allocated() >= hal.memory_allocated()
    del x
    hal.empty_cache()


def test_pin_memory_keeps_values(hal_backend):
    t = torch.arange(10.0)
    try:
        p = hal.pin_memory(t)
    except hal.NotSupported as exc:  # e.g. the emulator: its device memory is host memory
        pytest.skip(str(exc))
    assert torch.equal(p, t)
    if hal_backend.device_type != "cpu":
        # torch 2.4-2.5 ask CUDA unless told the device (from 2.6: the current accelerator)
        assert p.is_pinned() if hasattr(torch, "accelerator") else p.is_pinned(hal_backend.device_type)


def test_versions(hal_backend):
    v = hal.versions()
    assert v["torch"] == torch.__version__
    assert "runtime" in v
