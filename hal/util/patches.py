"""Attributes replaced for a while and put back exactly: what hal attaches to an unmodified script
from outside (``hal run --metrics``, ``hal run --checkpoint``) wraps torch's methods this way.

::

    patches = Patches()
    patches.set(DataLoader, "__iter__", counting_iter)   # the class's own attribute is kept
    ...
    patches.undo()                                       # newest first: stacked wrappers unwind
"""
from __future__ import annotations

from typing import Any, List, Tuple


class Patches:
    """A stack of ``setattr`` calls that :meth:`undo` reverses, newest first."""

    def __init__(self) -> None:
        self._undo: List[Tuple[Any, str, Any]] = []

    def set(self, owner, name: str, value) -> None:
        """``setattr(owner, name, value)``, remembering the old value (a class's own ``__dict__`` entry, so
        that a method it inherits is not copied onto it)."""
        old = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        self._undo.append((owner, name, old))
        setattr(owner, name, value)

    def undo(self) -> None:
        """Put every replaced attribute back, newest first."""
        for owner, name, old in reversed(self._undo):
            setattr(owner, name, old)
        self._undo.clear()
