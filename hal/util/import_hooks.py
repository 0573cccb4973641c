"""Run code the moment a module of another stack has been imported, before anything else uses it.

Some stacks bind their choices at import time: DeepSpeed picks its accelerator while ``import
deepspeed`` runs and binds its op builders to it a few modules later.  A seam such as
``deepspeed.accelerator.set_accelerator`` must then be filled between the two, which only an
import hook can do for code that runs unmodified.  :func:`after_import` wraps the module's own
loader: the module executes as it always does, then the callback runs, then the import that asked
for it continues.
"""
from __future__ import annotations

import importlib.abc
import sys
import threading
from typing import Callable, Dict, List

_lock = threading.Lock()


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a watched name it asks the other finders and wraps the loader."""

    def __init__(self) -> None:
        self.callbacks: Dict[str, List[Callable]] = {}

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.callbacks:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _Loader(spec.loader, self.callbacks.pop(fullname))
        return spec


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, callbacks: List[Callable]) -> None:
        self.inner = inner
        self.callbacks = callbacks

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:
        module.__spec__.loader = self.inner  # the module's spec names its real loader afterwards
        module.__loader__ = self.inner
        self.inner.exec_module(module)
        for callback in self.callbacks:
            callback(module)


_finder = _Finder()


def after_import(name: str, callback: Callable) -> Callable[[], None]:
    """Call ``callback(module)`` right after module ``name`` has executed, or now if it has already.

    Returns a function that cancels a callback not yet run.  A callback's exception propagates into
    the import that triggered it (as an error in the module itself would).
    """
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            if _finder not in sys.meta_path:
                sys.meta_path.insert(0, _finder)
            _finder.callbacks.setdefault(name, []).append(callback)
    if module is not None:
        callback(module)
        return lambda: None

    def cancel() -> None:
        with _lock:
            waiting = _finder.callbacks.get(name, [])
            if callback in waiting:
                waiting.remove(callback)
            if not waiting:
                _finder.callbacks.pop(name, None)

    return cancel
