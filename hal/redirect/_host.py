"""Streams and events for a script whose CUDA work runs on the CPU backend.

CPU ops complete before they return, so a stream orders nothing and an event only has to
note the wall clock when recorded: ``Event(enable_timing=True)`` + ``elapsed_time`` time the
host work between two records, as CUDA events time device work.  torch's own
``torch.cpu.Event`` / ``torch.Event(device="cpu")`` cannot record, hence these.  Both are
``torch.Stream`` / ``torch.Event`` objects on ``cpu`` (``isinstance(s, torch.Stream)`` holds),
built in ``__new__`` with the signatures of ``torch.cuda.Stream`` / ``torch.cuda.Event``.
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Optional

import torch

#: torch's own classes, even when this module is first imported under the redirection
_Stream = getattr(torch.Stream, "_hal_original", torch.Stream)
_Event = getattr(torch.Event, "_hal_original", torch.Event)


class HostEvent(_Event):
    """A ``torch.Event`` on the CPU that records wall time (milliseconds in ``elapsed_time``)."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
                **kwargs):
        self = super().__new__(cls, device="cpu")
        self._timing = bool(enable_timing)
        self._t: Optional[float] = None
        return self

    def __init__(self, *args, **kwargs):  # everything is set in __new__
        pass

    def record(self, stream=None) -> None:
        self._t = time.perf_counter()

    def query(self) -> bool:
        return True

    def wait(self, stream=None) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end_event: "HostEvent") -> float:
        if not (self._timing and getattr(end_event, "_timing", False)):
            raise RuntimeError("Event.elapsed_time: both events need enable_timing=True "
                               "(torch.cuda.Event(enable_timing=True))")
        if self._t is None or end_event._t is None:
            raise RuntimeError("Event.elapsed_time: record both events first (event.record())")
        return (end_event._t - self._t) * 1000.0


class HostStream(_Stream):
    """A stream on the CPU (a ``torch.Stream`` on ``cpu``): every op is already complete, so
    waiting is immediate.  Each one is its own stream: two compare equal only if they are the
    same object, as two CUDA streams do."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        self = super().__new__(cls, device="cpu")
        self._priority = int(priority)
        return self

    def __init__(self, *args, **kwargs):  # everything is set in __new__
        pass

    @property
    def priority(self) -> int:
        return self._priority

    def __eq__(self, other) -> bool:
        return self is other

    def __ne__(self, other) -> bool:
        return self is not other

    def __hash__(self) -> int:
        return id(self)

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def wait_stream(self, stream) -> None:
        pass

    def wait_event(self, event) -> None:
        pass

    def record_event(self, event: Optional[HostEvent] = None) -> HostEvent:
        event = event if event is not None else HostEvent()
        event.record(self)
        return event


_default = HostStream()
_current = threading.local()


def current_stream(device=None) -> HostStream:
    """The stream of the innermost ``with torch.cuda.stream(s)`` block, else the one
    :func:`set_stream` made current, else the default stream."""
    stack = getattr(_current, "stack", None)
    return stack[-1] if stack else getattr(_current, "base", _default)


def set_stream(s) -> None:
    """Make ``s`` the current stream outside any ``with torch.cuda.stream(...)`` block
    (``None``: no change, as ``torch.cuda.set_stream``)."""
    if s is not None:
        _current.base = s


def default_stream(device=None) -> HostStream:
    return _default


@contextlib.contextmanager
def stream(s):
    """Make ``s`` the current stream inside the block (``None``: no change)."""
    if s is None:
        yield
        return
    stack = _current.__dict__.setdefault("stack", [])
    stack.append(s)
    try:
        yield
    finally:
        stack.pop()
