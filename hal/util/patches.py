"""Attributes replaced for a while and put back exactly, hooks registered for a while and removed: what
hal attaches to an unmodified script from outside (``hal run --metrics``, ``hal run --checkpoint``) wraps
torch's methods and registers torch's global hooks this way.

::

    patches = Patches()
    patches.set(DataLoader, "__iter__", counting_iter)   # the class's own attribute is kept
    patches.hook(register_optimizer_step_post_hook(after_step))
    loader_iter = WatchedIterator(iter(loader), on_item=count)  # what the loader hands out, counted
    ...
    patches.undo()                                       # newest first: stacked wrappers unwind
"""
from __future__ import annotations

from typing import Any, Callable, List, Tuple


class Patches:
    """A stack of ``setattr`` calls that :meth:`undo` reverses, newest first."""

    def __init__(self) -> None:
        self._undo: List[Tuple[Any, str, Any]] = []
        self._handles: list = []

    def hook(self, handle) -> None:
        """Keep a hook's handle (anything with ``remove()``: torch's ``RemovableHandle``) for :meth:`undo`."""
        self._handles.append(handle)

    def set(self, owner, name: str, value) -> None:
        """``setattr(owner, name, value)``, remembering the old value (a class's own ``__dict__`` entry, so
        that a method it inherits is not copied onto it)."""
        old = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        self._undo.append((owner, name, old))
        setattr(owner, name, value)

    def undo(self) -> None:
        """Remove the hooks; put every replaced attribute back, newest first."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for owner, name, old in reversed(self._undo):
            setattr(owner, name, old)
        self._undo.clear()


class WatchedIterator:
    """An iterator (a ``DataLoader``'s) that tells ``on_item`` of each item it hands out; everything else is the
    inner iterator's own (``len``, attributes, a ``StatefulDataLoader`` iterator's state)."""

    def __init__(self, inner, on_item: Callable[[Any], None]):
        self._inner, self._on_item = inner, on_item

    def __iter__(self):
        return self

    def __next__(self):
        item = next(self._inner)
        self._on_item(item)
        return item

    def skip(self, n: int) -> int:
        """Draw and drop up to ``n`` items without telling ``on_item``; the number dropped (fewer at the end)."""
        done = 0
        for _ in range(n):
            try:
                next(self._inner)
            except StopIteration:
                break
            done += 1
        return done

    def __len__(self):
        return len(self._inner)

    def __getattr__(self, name):
        return getattr(self._inner, name)
