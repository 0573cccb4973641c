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

import collections
import contextlib
import os
import warnings
from typing import Any, List, Optional, Union

import torch

from hal.emu._build import load
from hal.emu._device import DEVICE_TYPE

_C = load()
#: the default generator of each emulated device, as torch.cuda.default_generators
default_generators = _C.default_generators()
#: what this build gives torch's device-generic code, which depends on the torch it was compiled for:
#: ``device_allocator`` (torch.accelerator's memory API, torch 2.9 and later), ``host_allocator``
#: (torch.accelerator.empty_host_cache, from 2.13), ``torch`` (major.minor), ``stream_priorities``
FEATURES = dict(_C.features())

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
    """A stream of an emulated device (a ``torch.Stream`` on ``emu``) with CUDA's priorities:
    ``priority`` from 0 (the default, lowest) to ``priority_range()[1]`` (highest), a value outside
    clamped to the nearest, as CUDA does.  Work is synchronous, so a priority orders nothing."""

    def __new__(cls, device: _DeviceLike = None, priority: int = 0, **kwargs):
        if {"stream_id", "device_index", "device_type"} <= kwargs.keys():  # an existing stream, as torch.cuda.Stream
            return super().__new__(cls, stream_id=kwargs["stream_id"], device_index=kwargs["device_index"],
                                   device_type=kwargs["device_type"])
        return super().__new__(cls, device=torch.device(DEVICE_TYPE, _index(device)), priority=priority)

    def __init__(self, device: _DeviceLike = None, priority: int = 0, **kwargs):
        pass

    @property
    def priority(self) -> int:
        """The priority the stream was made with (clamped to :meth:`priority_range`)."""
        return _C.stream_priority(self.stream_id)

    @staticmethod
    def priority_range():
        """``(lowest, highest)`` priority, as ``torch.cuda.Stream.priority_range()``."""
        return 0, 1 - FEATURES["stream_priorities"]


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


def current_stream(device: _DeviceLike = None) -> Stream:
    """The current stream of ``device`` on this thread."""
    index = _index(device)
    return Stream(stream_id=_C.current_stream(index), device_index=index, device_type=_PRIVATEUSE1)


def default_stream(device: _DeviceLike = None) -> Stream:
    """The default stream (id 0, priority 0) of ``device``."""
    return Stream(stream_id=0, device_index=_index(device), device_type=_PRIVATEUSE1)


def set_stream(stream: torch.Stream) -> None:
    """Make ``stream`` the current stream of its device on this thread."""
    if stream is not None:
        _C.exchange_stream(stream.stream_id, _stream_index(stream))


def _stream_index(s: torch.Stream) -> int:
    if s.device_type != _PRIVATEUSE1:
        raise ValueError(f"emu: {s} is not a stream of the emulated device; make one with torch.emu.Stream()")
    return s.device_index


@contextlib.contextmanager
def stream(s: Optional[torch.Stream]):
    """Make ``s`` the current stream of its device inside the block."""
    if s is None:
        yield
        return
    prev = _C.exchange_stream(s.stream_id, _stream_index(s))
    try:
        yield
    finally:
        _C.exchange_stream(prev, s.device_index)


# -- memory -------------------------------------------------------------------------------
# One source of truth: the C++ allocator's counters (csrc/memory.cpp), which torch.accelerator's memory
# API reads too (torch 2.9 and later).  The allocator does not cache: reserved is allocated.
def _flat(prefix: str, value: Any, out: list) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flat(f"{prefix}.{key}" if prefix else key, inner, out)
    else:
        out.append((prefix, value))


def memory_stats(device: _DeviceLike = None) -> "collections.OrderedDict[str, int]":
    """Allocator statistics of ``device`` under ``torch.cuda.memory_stats()``'s keys
    (``allocated_bytes.all.current``, ``reserved_bytes.large_pool.peak``, ``num_ooms``, ...), sorted;
    the same numbers ``torch.accelerator.memory_stats()`` gives."""
    flat: list = []
    _flat("", _C.memory_stats(_index(device)), flat)
    return collections.OrderedDict(sorted(flat))


def _stat(device: _DeviceLike, key: str, field: str) -> int:
    return _C.memory_stats(_index(device))[key]["all"][field]


def memory_allocated(device: _DeviceLike = None) -> int:
    """Bytes held by tensors on ``device`` now."""
    return _stat(device, "allocated_bytes", "current")


def max_memory_allocated(device: _DeviceLike = None) -> int:
    """The most bytes tensors held on ``device`` since the start or :func:`reset_peak_memory_stats`."""
    return _stat(device, "allocated_bytes", "peak")


def memory_reserved(device: _DeviceLike = None) -> int:
    """Bytes the allocator holds on ``device``: what tensors hold, since nothing is cached."""
    return _stat(device, "reserved_bytes", "current")


def max_memory_reserved(device: _DeviceLike = None) -> int:
    return _stat(device, "reserved_bytes", "peak")


def reset_peak_memory_stats(device: _DeviceLike = None) -> None:
    """Make every peak the current value."""
    _C.reset_peak(_index(device))


reset_max_memory_allocated = reset_peak_memory_stats
reset_max_memory_cached = reset_peak_memory_stats


def reset_accumulated_memory_stats(device: _DeviceLike = None) -> None:
    """Zero the ``allocated`` and ``freed`` totals (and ``num_ooms``)."""
    _C.reset_accumulated(_index(device))


def empty_cache() -> None:
    """Nothing cached: emulated memory returns to the host when the last tensor using it dies."""


def mem_get_info(device: _DeviceLike = None):
    """``(free, total)`` host bytes, since emulated memory is host memory."""
    return tuple(_C.memory_info(_index(device)))


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


# -- what this torch lacks ----------------------------------------------------------------
def check_torch_features() -> None:
    """Say plainly (a RuntimeWarning) where this torch offers a device-generic call that the emulator
    built for it cannot serve, instead of letting torch fail obscurely or crash later."""
    accelerator = getattr(torch, "accelerator", None)
    version = torch.__version__
    if not FEATURES["device_allocator"] and hasattr(accelerator, "memory_allocated"):
        warnings.warn(f"emu: torch {version} offers torch.accelerator's memory API, but the emulator built for it "
                      f"has no c10::DeviceAllocator (hal enables it from torch 2.9), so torch.accelerator."
                      f"memory_allocated(), empty_cache() and the rest fail with 'Allocator for emu is not a "
                      f"DeviceAllocator'; use torch.emu's memory calls, and report this torch version to hal",
                      RuntimeWarning, stacklevel=2)
    if not FEATURES["host_allocator"] and hasattr(accelerator, "empty_host_cache"):
        warnings.warn(f"emu: torch {version} offers torch.accelerator.empty_host_cache(), but the emulator built "
                      f"for it registers no host allocator (hal does from torch 2.13), and torch may crash the "
                      f"process without one; do not call it on emu, and report this torch version to hal",
                      RuntimeWarning, stacklevel=2)
