"""Emulated device memory: every ``emu`` tensor is a wrapper over a host (CPU) tensor.

The wrapper carries the metadata PyTorch sees (sizes, strides, offset, dtype, the ``emu``
device); ``_host`` is the CPU tensor that holds the bytes.  A view of an ``emu`` tensor
wraps a view of its host tensor, so aliasing and in-place updates behave as on a device.
"""
from __future__ import annotations

import threading
import weakref

import torch

DEVICE_TYPE = "emu"


class _Allocator:
    """Bytes held by emulated tensors (counted per host storage, freed with the last wrapper)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.live = {}  # storage data_ptr -> [nbytes, wrappers]
        self.allocated = 0
        self.peak = 0
        self.num_alloc = 0
        self.num_free = 0

    def track(self, wrapper, host: torch.Tensor) -> None:
        st = host.untyped_storage()
        ptr, nbytes = st.data_ptr(), st.nbytes()
        if ptr == 0:
            return
        with self.lock:
            rec = self.live.get(ptr)
            if rec is None:
                self.live[ptr] = [nbytes, 1]
                self.allocated += nbytes
                self.num_alloc += 1
                self.peak = max(self.peak, self.allocated)
            else:
                rec[1] += 1
        weakref.finalize(wrapper, self._release, ptr)

    def _release(self, ptr: int) -> None:
        with self.lock:
            rec = self.live.get(ptr)
            if rec is None:
                return
            rec[1] -= 1
            if rec[1] == 0:
                del self.live[ptr]
                self.allocated -= rec[0]
                self.num_free += 1

    def stats(self) -> dict:
        with self.lock:
            return {"allocated_bytes.all.current": self.allocated,
                    "allocated_bytes.all.peak": self.peak,
                    "reserved_bytes.all.current": self.allocated,
                    "reserved_bytes.all.peak": self.peak,
                    "allocation.all.allocated": self.num_alloc,
                    "allocation.all.freed": self.num_free,
                    "active.all.current": len(self.live)}

    def reset_peak(self) -> None:
        with self.lock:
            self.peak = self.allocated


ALLOCATOR = _Allocator()


class EmuTensor(torch.Tensor):
    """A tensor on the ``emu`` device; its bytes live in ``self._host`` (a CPU tensor)."""

    @staticmethod
    def __new__(cls, host: torch.Tensor):
        r = torch.Tensor._make_wrapper_subclass(
            cls, host.size(), strides=host.stride(), storage_offset=host.storage_offset(),
            dtype=host.dtype, layout=host.layout, device=torch.device(DEVICE_TYPE, 0),
            requires_grad=False)
        r._host = host
        ALLOCATOR.track(r, host)
        return r

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        from hal.emu._dispatch import route
        return route(func, args, kwargs or {})

    def __repr__(self, *, tensor_contents=None):
        return f"{repr(self._host)[:-1]}, device='{DEVICE_TYPE}:0')"

    def __reduce_ex__(self, proto):
        """Saved as a plain host tensor, so a checkpoint written on ``emu`` loads anywhere
        (``torch.load(..., weights_only=True)`` included); move it with ``.to()`` after loading."""
        return self._host.clone().__reduce_ex__(proto)


def wrap(host: torch.Tensor) -> EmuTensor:
    """The ``emu`` tensor whose bytes are ``host`` (no copy)."""
    return EmuTensor(host)


def unwrap(x):
    """The host tensor behind an ``emu`` tensor; anything else is returned as it is."""
    return x._host if isinstance(x, EmuTensor) else x
