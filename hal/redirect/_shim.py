"""Redirect the CUDA calls of an unmodified script to the selected backend.

Nothing sees every torch call: only the calls that take a device (or answer a question
about CUDA) are replaced, each by a thin wrapper that maps ``cuda`` arguments and calls
torch's own function.  The pieces, one module each:

- ``_devices``: every torch function and ``Tensor`` method with a ``device`` argument,
  found from the operator schemas at enable time, plus the Python-level ones
  (``Tensor.to/cuda``, ``Module.to/cuda``, ``with torch.device(...)``, generators, streams,
  events, legacy ``torch.cuda.FloatTensor`` constructors, DataLoader);
- ``_cuda_module``: ``torch.cuda.*`` and ``torch.accelerator.*`` (answers for the user's
  code; torch's own code gets the truth, see ``_caller``);
- ``_amp``, ``_load``, ``_dist``, ``_compile``, ``_children``: autocast and GradScaler,
  ``torch.load`` map locations, process groups / DDP / DataParallel, ``torch.compile``,
  multiprocessing children.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, List, Optional, Tuple

import torch

from hal.redirect._log import TransferLog

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


class Transfer:
    """The redirections in force inside :func:`enable`; ``log`` records what happened."""

    def __init__(self, backend):
        self.backend = backend
        self.device_type = backend.device_type
        self.log = TransferLog()
        #: device count of the backend, read once (1 on the CPU)
        self.count = 1 if self.device_type == "cpu" else max(1, int(backend.device_count()))
        self._undo: List[Tuple[Any, str, Any]] = []
        self._cpu = torch.device("cpu")

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

    def redirect(self, dev, call: str) -> torch.device:
        """Map ``dev`` (cuda-like) for ``call`` and log it at the user's line as
        ``call(device=dev)`` (or ``call`` with ``{dev}`` filled in, when it has one)."""
        target = self.device(dev)
        self.log.redirected(call.format(dev=dev) if "{dev}" in call else f"{call}(device={dev})", str(target))
        return target

    # -- patching -----------------------------------------------------------------------
    def patch(self, owner, name: str, value) -> None:
        """Set ``owner.name = value`` until :meth:`restore`."""
        old = owner.__dict__.get(name, _MISSING) if isinstance(owner, type) else getattr(owner, name, _MISSING)
        self._undo.append((owner, name, old))
        setattr(owner, name, value)

    def on_restore(self, undo) -> None:
        """Call ``undo()`` when the transfer ends (in reverse order with the patches)."""
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


_lock = threading.Lock()
_active: List[Transfer] = []


def active() -> Optional[Transfer]:
    """The transfer in force in this process, or None."""
    return _active[-1] if _active else None


def _install(t: Transfer) -> None:
    from hal.redirect import _amp, _compile, _cuda_module, _devices, _dist, _load
    for part in (_devices, _cuda_module, _amp, _load, _dist, _compile):
        part.install(t)


@contextlib.contextmanager
def enable(backend=None):
    """Run CUDA-written code on the selected backend inside the block.

    Maps the device of every device-taking torch call (factories, ``.to``, ``.cuda()``,
    ``Module.to/cuda``, ``with torch.device("cuda")``, generators, streams, events,
    ``torch.load`` map locations), answers ``torch.cuda.*`` for the backend (count, current
    device, properties, synchronize, memory, RNG, streams, events), and redirects
    ``torch.autocast("cuda")``, ``GradScaler("cuda")``, ``init_process_group("nccl")``,
    DDP's ``device_ids`` and ``DataParallel``.  ``torch.device("cuda")`` objects stay what
    they are; the calls that take them map them.  torch's own code keeps seeing the real
    ``torch.cuda`` / ``torch.accelerator`` answers.  Nothing changes numerics: dtypes are
    kept (autocast without a dtype gets CUDA's float16).  Each redirection is recorded at the
    user's line; calls it cannot redirect are reported.  Yields the :class:`Transfer`;
    ``transfer.log.rows("redirected")`` / ``rows("not_redirected")`` list what happened.

    On a CUDA backend the block changes nothing.  Nested use yields the transfer already in
    force.

    :param backend: a loaded :class:`hal.plugin.backend.Backend` (default: the selected one).
    """
    if backend is None:
        from hal.plugin.registry import selected_backend
        backend = selected_backend()
    with _lock:
        outer = active()
    if outer is not None:
        yield outer
        return
    t = Transfer(backend)
    if backend.device_type == "cuda":
        yield t
        return
    with _lock:
        _active.append(t)
    try:
        _install(t)
        yield t
    finally:
        t.restore()
        with _lock:
            _active.remove(t)
