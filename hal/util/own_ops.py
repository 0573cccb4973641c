"""hal's own ops: calls hal makes for itself (start-up checks, dtype probes, the redirection's
checks), which are not the user's and so are never counted as the user's op fallbacks.

:func:`own_ops` marks the calling thread for the duration of a block; whatever counts ops a device
lacks (:mod:`hal.fallback`'s decompositions, a device's own fallback counter) asks :func:`inside`.
A backend's :meth:`hal.plugin.backend.Backend.own_ops` enters this, plus what its device needs.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

_tls = threading.local()


@contextlib.contextmanager
def own_ops() -> Iterator[None]:
    """Ops run on this thread inside the block are hal's own (nests)."""
    old = getattr(_tls, "on", False)
    _tls.on = True
    try:
        yield
    finally:
        _tls.on = old


def inside() -> bool:
    """True on a thread inside :func:`own_ops`."""
    return getattr(_tls, "on", False)
