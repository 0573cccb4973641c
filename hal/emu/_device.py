"""Registering the emulated accelerator with PyTorch (PrivateUse1, renamed ``emu``)."""
from __future__ import annotations

import sys
import threading

import torch

from hal._errors import HalError
from hal.emu._tensor import DEVICE_TYPE

_lock = threading.Lock()
_libs = []
_installed = False


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1


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
    try:
        acc = torch.accelerator.current_accelerator(check_available=True)
    except Exception:  # older torch without the argument
        acc = torch.accelerator.current_accelerator()
    if acc is None or acc.type in ("privateuseone", DEVICE_TYPE):
        return None
    return acc.type


def install() -> None:
    """Create the ``emu`` device in this process (idempotent).

    Renames PrivateUse1 to ``emu``, registers ``torch.emu`` (the device module), the
    PrivateUse1 hooks and device guard, generates ``Tensor.emu()`` / ``Module.emu()``,
    and registers the native kernels, the factory fallback and autocast.  Raises
    :class:`hal.HalError` when PrivateUse1 already belongs to another backend.
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
        from hal.emu import _autocast, _module
        from hal.emu._dispatch import route

        if owner != DEVICE_TYPE:
            torch.utils.rename_privateuse1_backend(DEVICE_TYPE)
        if not hasattr(torch.Tensor, DEVICE_TYPE):
            torch.utils.generate_methods_for_privateuse1_backend(for_storage=False)
        torch._register_device_module(DEVICE_TYPE, _module)
        sys.modules.setdefault(f"torch.{DEVICE_TYPE}", _module)
        torch._C._acc.register_python_privateuseone_hook(_Hooks())
        torch._C._acc.register_python_privateuseone_device_guard(_Guard())

        aten = torch.library.Library("aten", "IMPL")
        _register_privateuse1_kernels(aten, route)
        _autocast.register(aten)
        fallback = torch.library.Library("_", "IMPL")
        # factory calls without a tensor argument land here; tensor calls go through
        # EmuTensor.__torch_dispatch__, which routes the same way
        fallback.fallback(lambda op, *a, **k: route(op, a, k), "PrivateUse1")
        # ops outside the autocast lists pass through AutocastPrivateUse1 unchanged
        fallback.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
        _libs.extend([aten, fallback])
        _installed = True
    _check_autograd()


def _kernel(name: str, route):
    packet, _, overload = name.partition(".")
    op = []

    def kernel(*args, **kwargs):
        if not op:
            op.append(getattr(getattr(torch.ops.aten, packet), overload or "default"))
        return route(op[0], args, kwargs)
    return kernel


def _register_privateuse1_kernels(lib, route) -> None:
    """Register a ``PrivateUse1`` kernel for every aten op that has none (no composite
    either), each routing like ``EmuTensor.__torch_dispatch__`` does.  Calls normally reach
    the router through the Python dispatch key; these kernels serve the paths that exclude
    that key (``torch.tensor(..., device="emu")``, ``torch.as_tensor``)."""
    from hal.emu import _dispatch

    for qualified in torch._C._dispatch_get_all_op_names():
        if not qualified.startswith("aten::"):
            continue
        if torch._C._dispatch_has_computed_kernel_for_dispatch_key(qualified, "PrivateUse1"):
            continue
        name = qualified[len("aten::"):]
        try:
            lib.impl(name, _kernel(name, route), "PrivateUse1")
        except RuntimeError:  # an op torch does not let Python register (rare); routed anyway
            continue
        _dispatch.OWN_KERNELS.add(qualified)


def _check_autograd() -> None:
    """torch's autograd engine sizes its per-device queues once, at the first backward pass
    of the process; a device registered after that cannot run backward.  Say so plainly."""
    t = torch.ones(1, device=DEVICE_TYPE, requires_grad=True)
    try:
        (t * 2).sum().backward()
    except RuntimeError as exc:
        if "device_ready_queues_" not in str(exc):
            raise
        raise HalError("emu: a backward pass already ran in this process before the emulator was "
                       "registered, and torch's autograd engine cannot add a device afterwards; select "
                       "the emulator first (HAL_BACKEND=emu, or hal.emu.install() at the start)") from None
