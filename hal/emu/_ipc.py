"""Emulated device memory across processes, as CUDA's is.

A CUDA tensor passed to a ``torch.multiprocessing`` child (Hogwild training: a
``share_memory()`` model handed to ``mp.Process`` / ``mp.spawn``) is the same device memory
in both processes.  Emulated device memory is host memory, so it is shared the way host
tensors are: the first time an ``emu`` tensor is pickled for another process, its storage
moves into POSIX shared memory in place (every view follows) and the child maps the same
bytes as an ``emu`` tensor on the same device index.  ``share_memory_()`` on an emu tensor
is a no-op, as on CUDA.

After ``fork()`` the child's copy of emulated memory is private, so — like CUDA — the
device refuses work in a forked child with a message naming the spawn start method.
"""
from __future__ import annotations

import os
from multiprocessing.reduction import ForkingPickler

import torch
from torch.multiprocessing import reductions

from hal.emu._device import DEVICE_TYPE

_registered = False


def _native():
    from hal.emu._module import _C
    return _C


def _shared_storage(tensor: torch.Tensor) -> torch.UntypedStorage:
    """The shared host storage the emu tensor's bytes live in (moved there on first use)."""
    C = _native()
    host = C.host_storage(tensor)
    if host is None or not host.is_shared():
        nbytes = tensor.untyped_storage().nbytes()
        host = torch.UntypedStorage(max(nbytes, 1)).share_memory_()
        C.move_to_host_storage(tensor, host)
    return host


def rebuild_emu_tensor(host, index, dtype, offset, size, stride, requires_grad):
    """Unpickling side: an emu tensor over the shared host bytes (installs the emulator)."""
    from hal.emu import install

    install()
    cpu = torch.empty(0, dtype=dtype).set_(host, offset, size, stride)
    t = _native().adopt(cpu, index)
    if requires_grad:
        t.requires_grad_(True)
    return t


def reduce_tensor(tensor: torch.Tensor):
    """ForkingPickler reducer: emu tensors by shared memory, every other tensor as torch does."""
    if tensor.device.type != DEVICE_TYPE or tensor.is_sparse:
        return reductions.reduce_tensor(tensor)
    host = _shared_storage(tensor)
    return (rebuild_emu_tensor, (host, tensor.device.index, tensor.dtype, tensor.storage_offset(),
                                 tuple(tensor.size()), tuple(tensor.stride()), tensor.requires_grad))


def _after_fork_in_child() -> None:
    _native().mark_forked()


def register() -> None:
    """Install the reducers (after torch's own) and the fork guard; idempotent."""
    global _registered
    if _registered:
        return
    # importing torch.multiprocessing (above) already registered torch's reducers: ours replace them
    from torch.nn.parameter import Parameter
    for cls in (torch.Tensor, Parameter, *torch._tensor_classes):
        ForkingPickler.register(cls, reduce_tensor)
    os.register_at_fork(after_in_child=_after_fork_in_child)
    _registered = True
