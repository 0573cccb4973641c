"""What every part of the redirection shares: the :class:`Redirection` in force (device mapping,
patches and their undo, the log) and :func:`active`.  The parts import this; ``_enable`` installs them.
"""
from __future__ import annotations

import os
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from hal._errors import HalError
from hal.redirect._log import RedirectLog
from hal.util.frames import is_internal

_MISSING = object()
_DEVICE = torch.device


def is_cuda_like(dev) -> bool:
    """True for what a CUDA script passes as a device: ``"cuda"``, ``"cuda:N"``, a
    ``torch.device`` of type cuda, or a bare index (which torch reads as a CUDA index)."""
    c = dev.__class__
    if c is str:
        return dev.startswith("cuda")
    if c is _DEVICE:
        return dev.type == "cuda"
    return c is int


#: module name -> whether its code is torch's or hal's own (:func:`hal.util.frames.is_internal`), learnt
#: on first sight: the "torch's own code gets the truth" test of every split call is one lookup
class _Targets(dict):
    """Device argument -> its target (:attr:`Redirection.targets`): ``targets[dev]`` is one dict lookup
    for an argument seen before, and asks :meth:`Redirection.target` (which remembers the answers that
    cannot change) on a miss."""

    def __init__(self, target: Callable[[Any], Any]):
        super().__init__()
        self._target = target

    def __missing__(self, dev):
        return self._target(dev)


class _ModuleKinds(dict):
    """Module name -> whether it is torch's or hal's own code (:func:`hal.util.frames.is_internal`),
    decided on a name's first lookup: afterwards ``_INTERNAL[name]`` is one dict lookup."""

    def __missing__(self, name: Optional[str]) -> bool:
        inside = self[name] = is_internal(name)
        return inside


_INTERNAL: Dict[Optional[str], bool] = _ModuleKinds()


#: at most this many device arguments have their target remembered (a script uses a handful)
_TARGETS_MAX = 512


#: how many logical devices ``torch.cuda.device_count()`` shows on the cpu backend
CPU_DEVICES_ENV = "HAL_CPU_DEVICES"


def cpu_device_count(env=os.environ) -> Tuple[int, str]:
    """The CUDA device count a script sees on the cpu backend, and where it comes from:
    ``HAL_CPU_DEVICES`` when set, else ``LOCAL_WORLD_SIZE`` (one logical device per local rank,
    under torchrun), else 1.  Every logical device is the one CPU (docs/redirect.md, "Devices")."""
    raw = env.get(CPU_DEVICES_ENV, "").strip()
    if raw:
        try:
            n = int(raw)
        except ValueError:
            n = 0
        if n < 1:
            raise HalError(f"{CPU_DEVICES_ENV}={raw!r}: expected a whole number >= 1 of logical cpu devices for "
                           f"torch.cuda.device_count() to show (e.g. {CPU_DEVICES_ENV}=2 for "
                           f"Trainer(devices=2)); unset it for one device")
        return n, f"{CPU_DEVICES_ENV}={n}"
    try:
        local = int(env.get("LOCAL_WORLD_SIZE", ""))
    except ValueError:
        local = 0
    if local > 1:
        return local, f"one per local rank, LOCAL_WORLD_SIZE={local}"
    return 1, f"one logical device; {CPU_DEVICES_ENV}=N shows N"


class Redirection:
    """The redirections in force inside :func:`enable`; ``log`` records what happened."""

    def __init__(self, backend):
        self.backend = backend
        self.device_type = backend.device_type
        self.log = RedirectLog()
        #: device count of the backend, read once (on the CPU: :func:`cpu_device_count`), and why
        if self.device_type == "cpu":
            self.count, self.count_source = cpu_device_count()
        else:
            self.count, self.count_source = max(1, int(backend.device_count())), f"{backend.name} device count"
        self._undo: List[Tuple[Any, str, Any]] = []
        #: ``module.attribute`` / ``module.Class.attribute`` of each patch target this torch lacks
        #: (:meth:`patch` leaves them absent)
        self.not_patched: List[str] = []
        #: patch target -> the part of the shim that patched it (``cuda_module``, ``devices``, ...): the
        #: table's ``group`` (hal/data/redirect_targets.json)
        self.patch_sites: Dict[str, str] = {}
        self._cpu = torch.device("cpu")
        #: device argument (``"cuda"``, ``"cuda:0"``, ``torch.device("cuda")``, ``0``, ``"cpu"`` ...) -> the
        #: backend device that stands in for it, or False where it is not CUDA's; only answers that cannot
        #: change (not "the current device" of a backend that has several) are kept: :meth:`target`
        self.targets: Dict[Any, Any] = _Targets(self.target)
        if self.device_type == "cpu":
            self.targets[None] = self._cpu

    # -- devices ------------------------------------------------------------------------
    def index(self, dev=None) -> Optional[int]:
        """The backend device index standing in for CUDA device ``dev`` (None on the CPU)."""
        if self.device_type == "cpu":
            return None
        if dev is None:
            return self.backend.current_device()
        if dev.__class__ is int:
            index = dev
        else:
            index = (dev if dev.__class__ is _DEVICE else torch.device(dev)).index
        if index is None or index < 0:
            return self.backend.current_device()
        if index >= self.count:
            target = index % self.count
            self.log.redirected(f"cuda:{index}", f"{self.device_type}:{target} ({self.backend.name} shows "
                                f"{self.count} device(s); index taken modulo the count, as when "
                                f"ranks outnumber devices)")
            return target
        return index

    def device(self, dev=None) -> torch.device:
        """The backend device standing in for CUDA device ``dev`` (``None``: the current one)."""
        if self.device_type == "cpu":
            return self._cpu
        return torch.device(self.device_type, self.index(dev))

    def target(self, dev):
        """The backend device standing in for device argument ``dev`` (a ``str``, ``torch.device``
        or ``int``), or False where ``dev`` is not CUDA's; remembered in :attr:`targets` where the
        answer cannot change.  Callers look up ``targets[dev]``, which calls this on a miss."""
        if not is_cuda_like(dev):
            if len(self.targets) < _TARGETS_MAX:
                self.targets[dev] = False
            return False
        target = self.device(dev)
        if self.device_type == "cpu":
            fixed = True
        else:  # an explicit index below the count maps to itself; "cuda" follows set_device
            index = dev if dev.__class__ is int else (dev if dev.__class__ is _DEVICE else torch.device(dev)).index
            fixed = index is not None and 0 <= index < self.count
        if fixed and len(self.targets) < _TARGETS_MAX:
            self.targets[dev] = target
        return target

    def describer(self, target) -> "Callable[[tuple], Tuple[str, str]]":
        """The log's text for a device redirection keyed ``(call, device asked for)`` that gave
        ``target``: ``call(device=dev)`` (or ``call`` with ``{dev}`` filled in, when it has one) ->
        the device.  Built only when the log sees a call site first (:meth:`RedirectLog.at`)."""
        def describe(key):
            call, dev = key
            return (call.format(dev=dev) if "{dev}" in call else f"{call}(device={dev})"), str(target)
        return describe

    def redirect(self, dev, call: str) -> torch.device:
        """Map ``dev`` (cuda-like) for ``call`` and log it at the user's line as
        ``call(device=dev)`` (or ``call`` with ``{dev}`` filled in, when it has one)."""
        target = self.device(dev)
        self.log.redirected(call.format(dev=dev) if "{dev}" in call else f"{call}(device={dev})", str(target))
        return target

    # -- patching -----------------------------------------------------------------------
    def patch(self, owner, name: str, value) -> None:
        """Set ``owner.name = value`` until :meth:`restore`.

        As pytest's ``monkeypatch.setattr`` (``raising=True``): a target this torch does not have is
        not created (code that looks for it would find hal's instead, and nothing would call it), but
        listed in :attr:`not_patched` and logged as a call hal does not redirect on this torch, with
        what hal's table of targets (:mod:`hal.redirect.targets`) says of it: absent as expected on
        this torch, or moved."""
        target = _target_name(owner, name)
        self.patch_sites[target] = _patching_part()
        if not hasattr(owner, name):
            from hal.redirect.targets import absent_reason

            if target not in self.not_patched:  # some targets are patched by two parts (a wrapper of a wrapper)
                self.not_patched.append(target)
                self.log.not_redirected(target, absent_reason(target))
            return
        old = owner.__dict__.get(name, _MISSING) if isinstance(owner, type) else getattr(owner, name, _MISSING)
        self._undo.append((owner, name, old))
        setattr(owner, name, value)

    @property
    def patched(self) -> List[str]:
        """``module.attribute`` / ``module.Class.attribute`` of each patch in force, in the order made."""
        return [_target_name(owner, name) for owner, name, _ in self._undo if owner is not None]

    def on_restore(self, undo) -> None:
        """Call ``undo()`` when the redirection ends (in reverse order with the patches)."""
        self._undo.append((None, "", undo))

    def restore(self) -> None:
        """Undo every patch, last first."""
        for owner, name, old in reversed(self._undo):
            if owner is None:
                old()
            elif old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)
        self._undo.clear()


_SHARED_PARTS = frozenset({__name__, "hal.redirect._split"})


def _patching_part() -> str:
    """``devices``, ``cuda_module``, ...: the shim's module that called :meth:`Redirection.patch` (past
    the shared helpers), or the caller's module name where it is not the shim's."""
    f = sys._getframe(2)
    while f is not None and f.f_globals.get("__name__") in _SHARED_PARTS:
        f = f.f_back
    module = f.f_globals.get("__name__", "?") if f is not None else "?"
    if module.startswith("hal.redirect._"):
        return module[len("hal.redirect._"):]
    return module[len("hal."):] if module.startswith("hal.") else module


def _target_name(owner, name: str) -> str:
    """``torch.cuda.is_available``, ``torch.utils.data.dataloader.DataLoader.__init__``: a patch target's name."""
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}.{name}"
    return f"{getattr(owner, '__name__', type(owner).__name__)}.{name}"


_lock = threading.Lock()
_active: List[Redirection] = []


def active() -> Optional[Redirection]:
    """The redirection in force in this process, or None."""
    return _active[-1] if _active else None


