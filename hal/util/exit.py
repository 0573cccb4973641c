"""Let torch's native threads drop their last Python references before the interpreter ends.

torch's autograd device threads and the work threads of a gloo process group can hold the
last reference to a Python object (the contextvars context of a backward pass; the
thread-local state captured by a collective's work).  If such a thread asks for the GIL after
the interpreter has started finalizing, CPython ends it with ``pthread_exit``, the unwind
crosses a ``noexcept`` destructor and the process aborts: "terminate called without an active
exception", exit code -6, after the script itself finished.  Under load the window is wide
enough to hit (1 run in 12 of a 2-rank DDP script here).  Registered with ``atexit`` (which
runs before finalization starts), :func:`let_native_threads_finish` collects garbage -- a
process group still referenced from a reference cycle (a DDP model) is then destroyed while
its threads can still take the GIL -- and sleeps a few milliseconds so that a thread waiting
for the GIL gets it.
"""
from __future__ import annotations

import atexit
import gc
import time

_REGISTERED = {"done": False}


def let_native_threads_finish() -> None:
    """Collect garbage, then give waiting native threads the GIL a few times."""
    gc.collect()
    for _ in range(5):
        time.sleep(0.002)


def register() -> None:
    """Run :func:`let_native_threads_finish` at exit (once per process)."""
    if not _REGISTERED["done"]:
        atexit.register(let_native_threads_finish)
        _REGISTERED["done"] = True
