"""The emulator's kernels for torch.compile's RNG operators (``run_and_save_rng_state``,
``run_with_rng_state``): with activation checkpointing, the partitioner wraps each seeded op of a
checkpointed region (dropout, and attention kernels that take a dropout probability) in them so
that the recomputation in backward draws what forward drew.  torch 2.13 implements them for
cuda, cpu, hpu and xpu only; a PrivateUse1 device registers its own, as this module does for
``emu`` with the device's generator.  Installed with the device (:func:`hal.emu._device.install`).
"""
from __future__ import annotations

import torch
from torch._C import DispatchKey


def install(device_type: str, device_module) -> None:
    """Give both operators a kernel for ``device_type`` (idempotent)."""
    try:
        from torch._prims import rng_prims
    except ImportError:  # a torch without them: nothing to extend
        return
    try:
        from torch._higher_order_ops.utils import registered_hop_fake_fns
    except ImportError:  # torch before it: the fake kernel is in the operator's own table (below)
        registered_hop_fake_fns = {}
    save, run = rng_prims.run_and_save_rng_state, rng_prims.run_with_rng_state
    if getattr(save.py_kernels.get(DispatchKey.BackendSelect), "__hal_emu__", False):
        return

    def save_on_device(op, *args, **kwargs):
        return device_module.get_rng_state(), op(*args, **kwargs)

    def run_on_device(rng_state, op, *args, **kwargs):
        current = device_module.get_rng_state()
        device_module.set_rng_state(rng_state.cpu())
        try:
            return op(*args, **kwargs)
        finally:
            device_module.set_rng_state(current)

    def on_this_device(args, kwargs):
        # not rng_prims.get_device: before torch 2.13 it names only cuda, xpu, hpu and cpu
        device = kwargs.get("device")
        if device:
            return torch.device(device).type == device_type
        return any(isinstance(a, torch.Tensor) and a.device.type == device_type for a in args)

    for hop, kernel, lead in ((save, save_on_device, 0), (run, run_on_device, 1)):
        torch_select = hop.py_kernels[DispatchKey.BackendSelect]

        def select(*args, _torch=torch_select, _kernel=kernel, _lead=lead, **kwargs):
            # args: (op, *tensors) for save, (rng_state, op, *tensors) for run
            if on_this_device(args[_lead + 1:], kwargs):
                return _kernel(*args, **kwargs)
            return _torch(*args, **kwargs)

        select.__hal_emu__ = True
        hop.py_kernels[DispatchKey.BackendSelect] = select
        _retarget(hop, torch_select, select)
        hop.py_kernels[DispatchKey.PrivateUse1] = kernel
        hop._dispatch_cache.clear()
        torch_fake = registered_hop_fake_fns.get(hop)
        if hop is save and torch_fake is not None:  # torch's fake kernel for save asks the same device list

            def fake(*args, _torch=torch_fake, **kwargs):
                if on_this_device(args[1:], kwargs):
                    return save_on_device(*args, **kwargs)
                return _torch(*args, **kwargs)

            registered_hop_fake_fns[hop] = fake


def _retarget(hop, torch_select, select) -> None:
    """Where the operator's fake-tensor and proxy kernels call torch's BackendSelect function directly (as torch
    2.6's do: ``impl_backend_select`` of the registering function, held in their closures), they call ``select``
    instead, so that tracing reaches the emulator's kernel as running does."""
    for kernel in list(getattr(hop, "python_key_table", {}).values()):
        for cell in getattr(kernel, "__closure__", None) or ():
            try:
                if cell.cell_contents is torch_select:
                    cell.cell_contents = select
            except ValueError:  # an empty cell
                continue
