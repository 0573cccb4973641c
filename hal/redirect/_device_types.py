"""The torch calls that take a device *type* string (``"cuda"``), each wrapped to pass the
backend's type instead: ``init_device_mesh("cuda", ...)`` / ``DeviceMesh("cuda", ...)`` (a cpu
mesh over gloo on the cpu backend, an ``emu`` mesh on the emulator), ``torch.get_device_module``,
``torch.amp.is_autocast_available``, ``torch.random.fork_rng(device_type=)``,
``torch.utils.checkpoint.set_device_states`` and the autocast-state builtins
(``torch.is_autocast_enabled("cuda")`` ...).  ``torch.autocast`` / ``GradScaler`` /
``custom_fwd`` are in :mod:`hal.redirect._amp`; ``torch.Stream/Event/Generator(device=)`` in
:mod:`hal.redirect._devices`.  tests/unit/test_redirect_device_types.py walks torch's public
modules for ``device_type`` parameters so that none is missed.
"""
from __future__ import annotations

import importlib
import sys
from typing import Optional

import torch

from hal.redirect._core import Redirection, is_cuda_like
from hal.redirect._devices import is_wrapped, marked
from hal.util.frames import from_inside

#: (module, attribute [Class.method], positional index of the type, keyword name, default is "cuda")
DEVICE_TYPE_CALLS = (
    ("torch.distributed.device_mesh", "init_device_mesh", 0, "device_type", False),
    ("torch.distributed.device_mesh", "DeviceMesh.__init__", 1, "device_type", False),
    ("torch.amp.autocast_mode", "is_autocast_available", 0, "device_type", False),
    ("torch.random", "fork_rng", 4, "device_type", True),
    ("torch.utils.checkpoint", "set_device_states", None, "device_type", False),
    ("torch", "is_autocast_enabled", 0, "device_type", False),
    ("torch", "get_autocast_dtype", 0, "device_type", False),
    ("torch", "set_autocast_dtype", 0, "device_type", False),
    ("torch", "set_autocast_enabled", 0, "device_type", False),
)
#: calls left alone on the cpu backend: the CPU generator they would set is the device's own,
#: which torch sets anyway (``torch.cpu`` has no RNG functions)
CPU_KEEPS = ("set_device_states",)
#: calls with a wrapper of their own (:func:`_install_fork_rng`: its device list is mapped too)
OWN_WRAPPER = ("fork_rng",)
#: the modules a script reaches those calls from (the same function objects, re-exported)
RE_EXPORTS = ("torch.distributed", "torch.distributed.tensor", "torch.amp", "torch")
#: re-exporting modules not imported for the script (``torch.distributed.tensor`` costs half a second): one the
#: script imports later copies hal's wrapper, and is given torch's function back when the redirection ends
LATE_RE_EXPORTS = ("torch.distributed.tensor",)


def _is_cuda_type(value) -> bool:
    return value.__class__ is str and (value == "cuda" or value.startswith("cuda:"))


def _wrap(t: Redirection, fn, label: str, pos: Optional[int], kw: str, cuda_default: bool):
    target = t.device_type

    def call(*args, **kwargs):
        if pos is not None and len(args) > pos:
            if _is_cuda_type(args[pos]):
                t.log.redirected(f"{label}({args[pos]!r})", f"{label}({target!r})")
                args = args[:pos] + (target,) + args[pos + 1:]
        elif kw in kwargs:
            if _is_cuda_type(kwargs[kw]):
                t.log.redirected(f"{label}({kw}={kwargs[kw]!r})", f"{label}({kw}={target!r})")
                kwargs[kw] = target
        elif cuda_default:
            kwargs[kw] = target
        return fn(*args, **kwargs)

    return marked(call, fn)


def _install_get_device_module(t: Redirection) -> None:
    """``torch.get_device_module("cuda")`` (and with no argument: the accelerator, which is ``cuda`` to the
    user's code) is ``torch.cuda`` as the shim answers it, for the backend: a library then calls it with
    the ``cuda`` devices it made (accelerate 1.16: ``get_device_module(device).set_device(torch.device(
    "cuda", i))``), which the backend's own module would refuse."""
    orig = torch.get_device_module

    def get_device_module(device=None):
        # torch's own callers (fork_rng, checkpoint) keep their answer, as with torch.cuda
        if not from_inside(2) and (device is None or _is_cuda_type(device) or (isinstance(device, torch.device)
                                                                              and device.type == "cuda")):
            t.log.redirected(f"torch.get_device_module({'' if device is None else repr(device)})",
                             f"torch.cuda, answering for {t.backend.name}")
            return torch.cuda
        return orig(device)

    t.patch(torch, "get_device_module", marked(get_device_module, orig))


def install(t: Redirection) -> None:
    """Wrap every call of :data:`DEVICE_TYPE_CALLS` (and where torch re-exports it) and
    ``torch.get_device_module``."""
    # the re-exporting modules imported before any patch, but for the costly ones: one imported later copies
    # hal's wrapper from a module already patched (the script's calls through it are redirected too), and
    # gets torch's function back at the restore (_unwrap_late_copies)
    for alias in RE_EXPORTS:
        if alias in LATE_RE_EXPORTS and alias not in sys.modules:
            continue
        try:
            importlib.import_module(alias)
        except ImportError:  # a torch built without distributed
            pass
    wrapped: dict = {}  # attribute -> (hal's wrapper, torch's function)
    for modname, attr, pos, kw, cuda_default in DEVICE_TYPE_CALLS:
        try:
            owner = importlib.import_module(modname)
        except ImportError:  # a torch built without distributed
            continue
        if attr in OWN_WRAPPER or (t.device_type == "cpu" and attr in CPU_KEEPS):
            continue
        cls_name, _, meth = attr.rpartition(".")
        if cls_name:
            owner = getattr(owner, cls_name, None)
        orig = getattr(owner, meth or attr, None) if owner is not None else None
        if orig is None or is_wrapped(orig):
            continue
        wrapper = _wrap(t, orig, f"{modname.replace('torch.distributed.device_mesh', 'torch.distributed')}."
                                 f"{attr.replace('.__init__', '')}", pos, kw, cuda_default)
        t.patch(owner, meth or attr, wrapper)
        if cls_name:
            continue
        wrapped[attr] = (wrapper, orig)
        for alias in RE_EXPORTS:
            mod = sys.modules.get(alias)
            if mod is not None and mod.__name__ != modname and getattr(mod, attr, None) is orig:
                t.patch(mod, attr, wrapper)
    t.on_restore(lambda: _unwrap_late_copies(wrapped))
    _install_get_device_module(t)
    _install_fork_rng(t)


def _unwrap_late_copies(wrapped: dict) -> None:
    """Give torch's functions back to the re-exporting modules first imported while the redirection was in
    force (they copied hal's wrappers, which no patch of theirs records)."""
    for alias in LATE_RE_EXPORTS:
        mod = sys.modules.get(alias)
        for attr, (wrapper, orig) in wrapped.items():
            if mod is not None and getattr(mod, attr, None) is wrapper:
                setattr(mod, attr, orig)


def _install_fork_rng(t: Redirection) -> None:
    """``fork_rng(devices=..., device_type="cuda")`` forks the backend's generators: its device
    type and the devices standing in for the CUDA ones listed (torch.distributed.pipelining forks
    its stages' ``torch.device("cuda", i)`` this way).  On the cpu backend it forks no device
    (``devices=[]``): the CPU generator is the device's, and torch forks it anyway."""
    orig = torch.random.fork_rng

    def fork_rng(devices=None, enabled=True, _caller="fork_rng", _devices_kw="devices", device_type=None):
        if device_type is None or _is_cuda_type(device_type):
            if t.device_type == "cpu":
                devices = []
            elif devices is not None:
                devices = [t.device(d) if is_cuda_like(d) else d for d in devices]
            if device_type is not None:
                t.log.redirected(f"torch.random.fork_rng({device_type!r})", f"torch.random.fork_rng({t.device_type!r})")
            device_type = t.device_type
        return orig(devices, enabled, _caller, _devices_kw, device_type)

    t.patch(torch.random, "fork_rng", marked(fork_rng, orig))
