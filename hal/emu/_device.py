"""Registering the emulated accelerator with PyTorch (PrivateUse1, renamed ``emu``)."""
from __future__ import annotations

import os
import sys
import threading

import torch

from hal._errors import HalError
from hal.util import accelerator

#: the device type torch knows the emulator by (PrivateUse1, renamed); defined here only
DEVICE_TYPE = "emu"
_lock = threading.Lock()
_installed = False


def privateuse1_owner() -> str:
    """The name PrivateUse1 carries in this process (``privateuseone`` when unclaimed)."""
    return torch._C._get_privateuse1_backend_name()


def is_installed() -> bool:
    """True once the ``emu`` device exists in this process."""
    return _installed


def real_accelerator():
    """Device type of an available accelerator other than the emulator, or None."""
    if _installed:
        return None
    acc = accelerator.current()
    if acc is None or acc.type in ("privateuseone", DEVICE_TYPE):
        return None
    return acc.type


def device_count_from_env(env=os.environ) -> int:
    """``HAL_EMU_DEVICES`` (default 8, like one node), checked."""
    raw = env.get("HAL_EMU_DEVICES", "").strip()
    if not raw:
        return 8
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if not 1 <= n <= 64:
        raise HalError(f"HAL_EMU_DEVICES={raw!r}: expected a whole number of emulated devices from 1 to 64; "
                       f"unset it for the default of 8")
    return n


def install() -> None:
    """Create the ``emu`` device in this process (idempotent).

    Renames PrivateUse1 to ``emu``, loads the C++ device (allocator, device guard, hooks,
    generators, kernels, autocast; built on first use), registers ``torch.emu`` (the device
    module), generates ``Tensor.emu()`` / ``Module.emu()`` / ``UntypedStorage.emu()``, and
    registers the native set's kernels and the boxed fallback (:mod:`hal.emu._dispatch`).
    Raises :class:`hal.HalError` when PrivateUse1 already belongs to another backend or a real
    accelerator is present.
    """
    global _installed
    with _lock:
        if _installed:
            return
        real = real_accelerator()
        if real is not None:
            raise HalError(f"emu: this process already has a real accelerator ({real}); torch allows one "
                           f"accelerator per process and the emulator stands in for one where none "
                           f"exists. Use HAL_BACKEND={real} here, or run the emulator on a machine "
                           f"(or with CUDA_VISIBLE_DEVICES='') where no accelerator is visible")
        owner = privateuse1_owner()
        if owner not in ("privateuseone", DEVICE_TYPE):
            raise HalError(f"emu: torch's PrivateUse1 device type already belongs to {owner!r} "
                           f"in this process; the emulator needs it. Run the emulator in a process "
                           f"that does not import that vendor module, or unset HAL_BACKEND=emu")
        device_count_from_env()
        if owner != DEVICE_TYPE:
            torch.utils.rename_privateuse1_backend(DEVICE_TYPE)
        from hal.emu import _dispatch, _ipc, _module

        torch._register_device_module(DEVICE_TYPE, _module)
        _module.check_torch_features()
        from hal.emu import _compile_rng
        _compile_rng.install(DEVICE_TYPE, _module)
        sys.modules.setdefault(f"torch.{DEVICE_TYPE}", _module)
        if not hasattr(torch.Tensor, DEVICE_TYPE):
            torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
        _dispatch.configure(_module._C)
        _ipc.register()
        from hal.util import exit as _exit
        _exit.register()  # autograd's emu device thread must not outlive the interpreter's GIL
        _installed = True
    _check_autograd()


def _check_autograd() -> None:
    """torch's autograd engine sizes its per-device queues once, at the first backward pass
    of the process; a device registered after that cannot run backward.  Say so plainly."""
    from hal.emu._dispatch import uncounted

    with uncounted():
        t = torch.ones(1, device=DEVICE_TYPE, requires_grad=True)
        try:
            (t * 2).sum().backward()
        except RuntimeError as exc:
            if "device_ready_queues_" not in str(exc):
                raise
            raise HalError("emu: a backward pass already ran in this process before the emulator was "
                           "registered, and torch's autograd engine cannot add a device afterwards; select "
                           "the emulator first (HAL_BACKEND=emu, or hal.emu.install() at the start)") from None
