"""``torch.emu``: the device module of the emulated accelerator.

Mirrors the parts of ``torch.cuda`` that training code and torch itself use: device count
and selection, synchronize, streams and events, memory statistics, RNG state, amp dtypes.
Devices, streams, events and generators are the C++ ones registered with torch (device
guard, ``PrivateUse1`` hooks), so ``torch.Stream("emu")``, ``torch.Event``,
``torch.Generator(device="emu")`` and ``torch.accelerator`` see the same objects.  Work is
synchronous (every op completes before it returns): streams order trivially, events record
wall time for ``elapsed_time``.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, List, Optional, Union

import torch

from hal.emu._build import load
from hal.emu._device import DEVICE_TYPE

_C = load()
#: the default generator of each emulated device, as torch.cuda.default_generators
default_generators = _C.default_generators()

_DeviceLike = Union[int, str, torch.device, None]
#: c10::DeviceType::PrivateUse1, as torch.Stream(device_type=...) takes it
_PRIVATEUSE1 = 20


def _index(device: _DeviceLike = None, optional: bool = True) -> int:
    if device is None or device == -1:
        return _C.current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != DEVICE_TYPE:
            raise ValueError(f"emu: expected an {DEVICE_TYPE} device, got {device}")
        return _C.current_device() if device.index is None else device.index
    index = int(device)
    if not 0 <= index < _C.device_count():
        raise ValueError(f"emu: device index {index} is out of range; this process has "
                         f"{_C.device_count()} emulated devices (0..{_C.device_count() - 1}), set by HAL_EMU_DEVICES")
    return index


class _utils:  # noqa: N801 - torch.serialization looks for device_module._utils._get_device_index
    @staticmethod
    def _get_device_index(device: _DeviceLike, optional: bool = False) -> int:
        return _index(device, optional)


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return False


def _lazy_init() -> None:
    pass


def init() -> None:
    pass


def device_count() -> int:
    """Number of emulated devices (``HAL_EMU_DEVICES``, default 8, like one node)."""
    return _C.device_count()


def current_device() -> int:
    return _C.current_device()


def set_device(device: _DeviceLike) -> None:
    index = _index(device)
    if index >= 0:
        _C.set_device(index)


class device:  # noqa: N801 - mirrors torch.cuda.device
    """Context manager that makes ``device`` current inside the block."""

    def __init__(self, device: _DeviceLike):
        self.idx = -1 if device is None else _index(device)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = _C.current_device()
        if self.idx >= 0:
            _C.set_device(self.idx)

    def __exit__(self, *exc: Any):
        if self.idx >= 0:
            _C.set_device(self.prev_idx)
        return False


class device_of(device):  # noqa: N801
    """Context manager that makes the device of tensor ``obj`` current."""

    def __init__(self, obj: torch.Tensor):
        super().__init__(obj.get_device() if obj.device.type == DEVICE_TYPE else -1)


def get_device_name(device: _DeviceLike = None) -> str:
    return f"hal emulated accelerator {_index(device)} (host memory)"


def get_device_capability(device: _DeviceLike = None):
    _index(device)
    return (1, 0)


class _Properties:
    """What ``get_device_properties`` answers (the fields training scripts print)."""

    def __init__(self, index: int):
        self.name = get_device_name(index)
        self.total_memory = mem_get_info(index)[1]
        self.major, self.minor = get_device_capability(index)
        self.multi_processor_count = os.cpu_count() or 1
        self.is_integrated = True
        self.index = index

    def __repr__(self):
        return (f"_EmuDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // (1024 * 1024)}MB, "
                f"multi_processor_count={self.multi_processor_count})")


def get_device_properties(device: _DeviceLike = None) -> _Properties:
    return _Properties(_index(device))


def synchronize(device: _DeviceLike = None) -> None:
    """Nothing to wait for: emulated ops complete before they return."""
    _index(device)


def get_amp_supported_dtype() -> List[torch.dtype]:
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


# -- streams and events -------------------------------------------------------------------
class Stream(torch.Stream):
    """A stream of an emulated device (``torch.Stream`` on ``emu``)."""

    def __new__(cls, device: _DeviceLike = None, priority: int = 0, **kwargs):
        return super().__new__(cls, device=torch.device(DEVICE_TYPE, _index(device)), priority=priority)

    def __init__(self, device: _DeviceLike = None, priority: int = 0, **kwargs):
        pass


class _EventType(type):
    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, torch.Event) and obj.device.type == DEVICE_TYPE


class Event(metaclass=_EventType):
    """An event of an emulated device (a ``torch.Event`` on ``emu``); ``elapsed_time`` is wall
    time in milliseconds.  torch compares events by their exact type, so this returns the
    ``torch.Event`` itself."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        return torch.Event(device=torch.device(DEVICE_TYPE, _C.current_device()),
                           enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


def current_stream(device: _DeviceLike = None) -> torch.Stream:
    return torch.accelerator.current_stream(_index(device))


def default_stream(device: _DeviceLike = None) -> torch.Stream:
    """The default stream (id 0) of ``device``."""
    return torch.Stream(stream_id=0, device_index=_index(device), device_type=_PRIVATEUSE1)


def set_stream(stream: torch.Stream) -> None:
    if stream is not None:
        torch.accelerator.set_stream(stream)


@contextlib.contextmanager
def stream(s: Optional[torch.Stream]):
    """Make ``s`` the current stream of its device inside the block."""
    if s is None:
        yield
        return
    prev = torch.accelerator.current_stream(s.device_index)
    torch.accelerator.set_stream(s)
    try:
        yield
    finally:
        torch.accelerator.set_stream(prev)


# -- memory -------------------------------------------------------------------------------
def memory_stats(device: _DeviceLike = None) -> dict:
    return dict(_C.memory_stats(_index(device)))


def memory_allocated(device: _DeviceLike = None) -> int:
    return _C.memory_stats(_index(device))["allocated_bytes.all.current"]


def max_memory_allocated(device: _DeviceLike = None) -> int:
    return _C.memory_stats(_index(device))["allocated_bytes.all.peak"]


memory_reserved = memory_allocated
max_memory_reserved = max_memory_allocated


def reset_peak_memory_stats(device: _DeviceLike = None) -> None:
    _C.reset_peak(_index(device))


reset_max_memory_allocated = reset_peak_memory_stats


def empty_cache() -> None:
    """Nothing cached: emulated memory returns to the host when the last tensor using it dies."""


def mem_get_info(device: _DeviceLike = None):
    """``(free, total)`` host bytes, since emulated memory is host memory."""
    _index(device)
    page = os.sysconf("SC_PAGE_SIZE")
    return page * os.sysconf("SC_AVPHYS_PAGES"), page * os.sysconf("SC_PHYS_PAGES")


# -- RNG ----------------------------------------------------------------------------------
def manual_seed(seed: int) -> None:
    """Seed the current device's generator."""
    default_generators[_C.current_device()].manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for g in default_generators:
        g.manual_seed(int(seed))


def seed() -> None:
    default_generators[_C.current_device()].seed()


def seed_all() -> None:
    for g in default_generators:
        g.seed()


def initial_seed() -> int:
    return int(default_generators[_C.current_device()].initial_seed())


def get_rng_state(device: _DeviceLike = None) -> torch.Tensor:
    return default_generators[_index(device)].get_state()


def set_rng_state(new_state: torch.Tensor, device: _DeviceLike = None) -> None:
    default_generators[_index(device)].set_state(new_state.cpu() if new_state.device.type != "cpu" else new_state)


def get_rng_state_all() -> List[torch.Tensor]:
    return [g.get_state() for g in default_generators]


def set_rng_state_all(new_states) -> None:
    for g, state in zip(default_generators, new_states):
        g.set_state(state)
