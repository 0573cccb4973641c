"""``torch.emu``: the device module of the emulated accelerator.

Mirrors the parts of ``torch.cuda`` that training code and hal use: device count and
selection, synchronize, streams and events, memory statistics, RNG state, amp dtypes.
Work is synchronous (every op completes before it returns), so streams and events order
trivially; events still record wall time for ``elapsed_time``.
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import List, Optional

import torch

from hal.emu._tensor import ALLOCATOR, DEVICE_TYPE

_generator = torch.Generator()
_generator.manual_seed(torch.initial_seed())


def default_generator() -> torch.Generator:
    """The generator random ops on the emulated device draw from."""
    return _generator


def _check_index(device) -> int:
    if device is None:
        return 0
    if isinstance(device, (str, torch.device)):
        device = torch.device(device)
        if device.type != DEVICE_TYPE:
            raise ValueError(f"emu: expected an {DEVICE_TYPE} device, got {device}")
        device = device.index or 0
    if int(device) not in (-1, 0):
        raise ValueError(f"emu: device index {device} out of range; the emulated accelerator "
                         f"has one device per process (0)")
    return 0


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return False


def _lazy_init() -> None:
    pass


def device_count() -> int:
    """Always 1: each process sees one emulated device (as with CUDA_VISIBLE_DEVICES=<rank>)."""
    return 1


def current_device() -> int:
    return 0


def set_device(device) -> None:
    _check_index(device)


def get_device_name(device=None) -> str:
    _check_index(device)
    return "hal emulated accelerator (host memory)"


def get_device_capability(device=None):
    _check_index(device)
    return (1, 0)


def synchronize(device=None) -> None:
    """Nothing to wait for: emulated ops complete before they return."""
    _check_index(device)


def get_amp_supported_dtype() -> List[torch.dtype]:
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


# -- streams and events -----------------------------------------------------------------
class Event:
    """An event on the emulated device; ``elapsed_time`` is wall time in milliseconds."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self._t: Optional[float] = None

    def record(self, stream=None) -> None:
        self._t = time.perf_counter()

    def wait(self, stream=None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end_event: "Event") -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("emu: both events need enable_timing=True for elapsed_time")
        if self._t is None or end_event._t is None:
            raise RuntimeError("emu: record both events before elapsed_time")
        return (end_event._t - self._t) * 1000.0


class Stream:
    """A stream on the emulated device (work is synchronous, so streams never overlap)."""

    def __init__(self, device=None, priority: int = 0, **kwargs):
        _check_index(device)
        self.device = torch.device(DEVICE_TYPE, 0)
        self.priority = priority

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def wait_stream(self, stream) -> None:
        pass

    def wait_event(self, event) -> None:
        pass

    def record_event(self, event: Optional[Event] = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def __eq__(self, other):
        return self is other

    __hash__ = object.__hash__


_default_stream: Optional[Stream] = None
_current: List[Stream] = []


def current_stream(device=None) -> Stream:
    _check_index(device)
    return _current[-1] if _current else default_stream()


def default_stream(device=None) -> Stream:
    global _default_stream
    _check_index(device)
    if _default_stream is None:
        _default_stream = Stream()
    return _default_stream


@contextlib.contextmanager
def stream(s: Optional[Stream]):
    """Make ``s`` the current stream inside the block."""
    if s is None:
        yield
        return
    _current.append(s)
    try:
        yield
    finally:
        _current.pop()


# -- memory -----------------------------------------------------------------------------
def memory_allocated(device=None) -> int:
    _check_index(device)
    return ALLOCATOR.stats()["allocated_bytes.all.current"]


def max_memory_allocated(device=None) -> int:
    _check_index(device)
    return ALLOCATOR.stats()["allocated_bytes.all.peak"]


memory_reserved = memory_allocated
max_memory_reserved = max_memory_allocated


def memory_stats(device=None) -> dict:
    _check_index(device)
    return ALLOCATOR.stats()


def reset_peak_memory_stats(device=None) -> None:
    _check_index(device)
    ALLOCATOR.reset_peak()


def empty_cache() -> None:
    """Nothing cached: emulated memory is returned to the host when a tensor dies."""


def mem_get_info(device=None):
    """``(free, total)`` host bytes, since emulated memory is host memory."""
    _check_index(device)
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    return free, total


# -- RNG --------------------------------------------------------------------------------
def manual_seed(seed: int) -> None:
    _generator.manual_seed(int(seed))


manual_seed_all = manual_seed


def seed() -> None:
    _generator.seed()


seed_all = seed


def initial_seed() -> int:
    return int(_generator.initial_seed())


def get_rng_state(device=None) -> torch.Tensor:
    _check_index(device)
    return _generator.get_state()


def set_rng_state(new_state: torch.Tensor, device=None) -> None:
    _check_index(device)
    _generator.set_state(new_state.cpu() if new_state.device.type != "cpu" else new_state)


def get_rng_state_all() -> List[torch.Tensor]:
    return [get_rng_state()]


def set_rng_state_all(new_states) -> None:
    set_rng_state(list(new_states)[0])
