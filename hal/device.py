"""The device facet as module-level calls on the selected backend.

Drop-in for the ``torch.cuda.*`` calls training code makes::

    dev = hal.device()                 # torch.device("npu", 0), ("cuda", 0), ("cpu") ...
    model.to(dev)
    with hal.autocast():               # bfloat16 where the device runs it, else float16
        loss = model(x)
    hal.synchronize()

Every call goes to :func:`hal.plugin.registry.selected_backend`; a feature the device lacks
raises :class:`hal.NotSupported`.
"""
from __future__ import annotations

from typing import Optional

from hal.plugin.registry import get_registry, selected_backend


def current_backend():
    """The selected :class:`hal.plugin.backend.Backend` (``HAL_BACKEND`` or the best available)."""
    return selected_backend()


def backend_name() -> str:
    """Name of the selected backend (``"cuda"``, ``"ascend"``, ``"cpu"``, ...)."""
    return get_registry().selected().name


def device_type() -> str:
    """torch device type of the selected backend (``"cuda"``, ``"npu"``, ``"cpu"``, ...)."""
    return selected_backend().device_type


def device(index: Optional[int] = None):
    """``torch.device`` of the selected backend; ``index`` defaults to the current device."""
    return selected_backend().device(index)


def device_count() -> int:
    """Number of visible devices of the selected backend (1 for the CPU)."""
    return selected_backend().device_count()


def current_device() -> int:
    """Index of the current device."""
    return selected_backend().current_device()


def set_device(index: int) -> None:
    """Make device ``index`` current (raises ValueError when out of range)."""
    selected_backend().set_device(index)


def synchronize(index: Optional[int] = None) -> None:
    """Wait for all work queued on the device."""
    selected_backend().synchronize(index)


def Stream(*args, **kwargs):  # noqa: N802 - mirrors torch.cuda.Stream
    """A new stream of the selected device type."""
    return selected_backend().Stream(*args, **kwargs)


def Event(*args, **kwargs):  # noqa: N802 - mirrors torch.cuda.Event
    """A new event of the selected device type (``enable_timing=True`` for elapsed_time)."""
    return selected_backend().Event(*args, **kwargs)


def current_stream(index: Optional[int] = None):
    """The current stream of the device."""
    return selected_backend().current_stream(index)


def stream(s):
    """Context manager that makes ``s`` the current stream."""
    return selected_backend().stream(s)


def memory_allocated(index: Optional[int] = None) -> int:
    """Bytes held by tensors on the device (NotSupported on the CPU)."""
    return selected_backend().memory_allocated(index)


def max_memory_allocated(index: Optional[int] = None) -> int:
    """Peak of :func:`memory_allocated` since start or the last reset."""
    return selected_backend().max_memory_allocated(index)


def memory_reserved(index: Optional[int] = None) -> int:
    """Bytes held by the device's caching allocator."""
    return selected_backend().memory_reserved(index)


def memory_stats(index: Optional[int] = None) -> dict:
    """The allocator's statistics dict."""
    return selected_backend().memory_stats(index)


def reset_peak_memory_stats(index: Optional[int] = None) -> None:
    """Reset the peak counters."""
    selected_backend().reset_peak_memory_stats(index)


def mem_get_info(index: Optional[int] = None):
    """``(free, total)`` device memory in bytes."""
    return selected_backend().mem_get_info(index)


def empty_cache() -> None:
    """Release cached, unused device memory."""
    selected_backend().empty_cache()


def pin_memory(tensor):
    """Page-locked copy of a host tensor (the CPU backend returns it as it is)."""
    return selected_backend().pin_memory(tensor)


def manual_seed(seed: int) -> None:
    """Seed the current device's generator (the CPU generator on the CPU backend)."""
    selected_backend().manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    """Seed the generators of every device of the selected type."""
    selected_backend().manual_seed_all(seed)


def initial_seed() -> int:
    """The seed of the current device's generator."""
    return selected_backend().initial_seed()


def get_rng_state(index: Optional[int] = None):
    """RNG state (a uint8 tensor) of device ``index``."""
    return selected_backend().get_rng_state(index)


def set_rng_state(state, index: Optional[int] = None) -> None:
    """Restore an RNG state returned by :func:`get_rng_state`."""
    selected_backend().set_rng_state(state, index)


def fork_rng(enabled: bool = True):
    """Context manager restoring the CPU and device generators on exit."""
    return selected_backend().fork_rng(enabled)


def supported_dtypes():
    """dtypes the device can hold and add (checked once with a tiny tensor)."""
    return selected_backend().supported_dtypes()


def autocast(dtype=None, enabled: bool = True, **kwargs):
    """``torch.autocast`` for the selected device with its best low-precision dtype."""
    return selected_backend().autocast(dtype=dtype, enabled=enabled, **kwargs)


def versions() -> dict:
    """Known torch / runtime / driver / vendor-module versions."""
    return selected_backend().versions()
