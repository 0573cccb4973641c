"""The Backend object: the device facet over ``torch.get_device_module``.

One class serves every device type; vendor plugins subclass it only where their device
module differs.  A feature the device lacks raises :class:`hal.NotSupported`.  What a device
may tell hal about the ops it lacks (:meth:`Backend.fallback_report`, :meth:`Backend.op_fallback`,
:meth:`Backend.on_op_fallback`) and about hal's own ops (:meth:`Backend.own_ops`) has a default
that fits a device which counts nothing.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
from typing import Any, Callable, ContextManager, Dict, Iterator, List, Optional

import torch

from hal._errors import BackendUnavailable, NoDevice, NotSupported
from hal.plugin.spec import BackendSpec
from hal.util import accelerator
from hal.util.own_ops import own_ops

#: dtypes hal checks, most common first
CANDIDATE_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64,
                    torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool,
                    torch.complex64)


@dataclasses.dataclass(frozen=True)
class DeviceProperties:
    """What ``torch.cuda.get_device_properties`` tells, for any backend's device.

    ``major`` / ``minor`` are the device's compute capability where it has one (``(0, 0)``
    on the CPU); ``multi_processor_count`` is the number of compute units (host cores on
    the CPU and the emulator); ``total_memory`` is in bytes.
    """

    name: str
    total_memory: int
    major: int
    minor: int
    multi_processor_count: int
    type: str = ""

    def __str__(self) -> str:
        return (f"{self.type or 'device'}DeviceProperties(name='{self.name}', major={self.major}, "
                f"minor={self.minor}, total_memory={self.total_memory // (1 << 20)}MB, "
                f"multi_processor_count={self.multi_processor_count})")


def host_memory_bytes() -> int:
    """Physical memory of this machine in bytes."""
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


class Backend:
    """A loaded backend: ``spec`` plus the device facet.

    Built on ``torch.get_device_module(device_type)`` (``torch.cuda``, ``torch.npu``,
    ``torch.mlu``, ...) and ``torch.accelerator`` where they exist.
    """

    def __init__(self, spec: BackendSpec, module: Any = None):
        self.spec = spec
        self.name = spec.name
        self.device_type = spec.device_type
        #: the vendor extension module (``torch_npu``...), None when built into torch
        self.vendor_module = module
        self._dtypes: Optional[List[torch.dtype]] = None

    def __repr__(self) -> str:
        return f"<hal.Backend {self.name} device_type={self.device_type}>"

    # -- plumbing ---------------------------------------------------------------------
    @property
    def module(self):
        """``torch.get_device_module(device_type)``."""
        return torch.get_device_module(self.device_type)

    def _fn(self, attr: str, feature: Optional[str] = None):
        fn = getattr(self.module, attr, None)
        if fn is None:
            raise NotSupported(self.name, feature or attr,
                               f"torch.{self.device_type}.{attr} does not exist")
        return fn

    # -- devices ----------------------------------------------------------------------
    def device(self, index: Optional[int] = None) -> torch.device:
        """``torch.device`` of this backend (``index`` defaults to the current device)."""
        if index is None:
            index = self.current_device()
        return torch.device(self.device_type, index)

    def device_count(self) -> int:
        return int(self._fn("device_count")())

    def current_device(self) -> int:
        return int(self._fn("current_device")())

    def set_device(self, index: int) -> None:
        n = self.device_count()
        if not 0 <= int(index) < n:
            raise ValueError(f"{self.name}: device index {index} out of range; "
                             f"this machine shows {n} device(s) (0..{n - 1})")
        self._fn("set_device")(int(index))

    def device_name(self, index: Optional[int] = None) -> str:
        return str(self._fn("get_device_name", "device_name")(self.current_device() if index is None else index))

    def device_properties(self, index: Optional[int] = None) -> DeviceProperties:
        """Name, memory, compute capability and compute units of a device (default: current).

        Taken from ``torch.<device>.get_device_properties`` where the device module has it,
        else assembled from ``get_device_name``, ``mem_get_info`` and
        ``get_device_capability``; raises :class:`hal.NotSupported` when the module has none
        of these.
        """
        index = self.current_device() if index is None else int(index)
        props = getattr(self.module, "get_device_properties", None)
        if props is not None:
            p = props(index)
            return DeviceProperties(name=str(p.name), total_memory=int(getattr(p, "total_memory", 0)),
                                    major=int(getattr(p, "major", 0)), minor=int(getattr(p, "minor", 0)),
                                    multi_processor_count=int(getattr(p, "multi_processor_count", 0)),
                                    type=self.device_type)
        name = self.device_name(index)
        try:
            total = int(self.mem_get_info(index)[1])
        except NotSupported:
            total = 0
        cap = getattr(self.module, "get_device_capability", None)
        major, minor = (tuple(cap(index)) + (0, 0))[:2] if cap is not None else (0, 0)
        return DeviceProperties(name=name, total_memory=total, major=int(major), minor=int(minor),
                                multi_processor_count=int(getattr(self.module, "multi_processor_count",
                                                                  os.cpu_count() or 1)),
                                type=self.device_type)

    def synchronize(self, index: Optional[int] = None) -> None:
        self._fn("synchronize")(index) if index is not None else self._fn("synchronize")()

    # -- streams and events -----------------------------------------------------------
    def Stream(self, *args, **kwargs):  # noqa: N802 - mirrors torch.cuda.Stream
        return self._fn("Stream")(*args, **kwargs)

    def Event(self, *args, **kwargs):  # noqa: N802 - mirrors torch.cuda.Event
        return self._fn("Event")(*args, **kwargs)

    def current_stream(self, index: Optional[int] = None):
        return self._fn("current_stream")(index) if index is not None else self._fn("current_stream")()

    def stream(self, s):
        """Context manager making ``s`` the current stream."""
        return self._fn("stream")(s)

    # -- memory -----------------------------------------------------------------------
    def memory_stat_call(self, attr: str) -> Callable:
        """The device module's allocator call ``attr`` (``memory_allocated``, ``reset_peak_memory_stats``,
        ...), taking an optional device index; only looked up, not called.

        :raises hal.NotSupported: the module keeps no such statistic (``torch.cpu``).
        """
        fn = getattr(self.module, attr, None)
        if fn is None and self.device_type != "cpu":
            fn = getattr(getattr(torch, "accelerator", None), attr, None)
        if fn is None:
            raise NotSupported(self.name, attr, "this device module keeps no allocator statistics")
        return fn

    def _mem(self, attr: str, index: Optional[int]):
        fn = self.memory_stat_call(attr)
        return fn(index) if index is not None else fn()

    def memory_allocated(self, index: Optional[int] = None) -> int:
        return int(self._mem("memory_allocated", index))

    def max_memory_allocated(self, index: Optional[int] = None) -> int:
        return int(self._mem("max_memory_allocated", index))

    def memory_reserved(self, index: Optional[int] = None) -> int:
        return int(self._mem("memory_reserved", index))

    def memory_stats(self, index: Optional[int] = None) -> Dict[str, Any]:
        return dict(self._mem("memory_stats", index))

    def reset_peak_memory_stats(self, index: Optional[int] = None) -> None:
        self._mem("reset_peak_memory_stats", index)

    def mem_get_info(self, index: Optional[int] = None):
        """``(free_bytes, total_bytes)`` of the device."""
        return tuple(self._mem("mem_get_info", index))

    def empty_cache(self) -> None:
        self._fn("empty_cache")()

    def pin_memory(self, tensor: torch.Tensor) -> torch.Tensor:
        """Page-locked copy of a host tensor, for fast asynchronous copies to the device."""
        if tensor.device.type != "cpu":
            return tensor
        if self.device_type != "cpu" and not accelerator.has_api():
            return tensor.pin_memory(self.device_type)  # torch 2.4-2.5 pin for CUDA unless told the device
        return tensor.pin_memory()  # torch pins for the current accelerator; the device argument is deprecated

    # -- RNG --------------------------------------------------------------------------
    def manual_seed(self, seed: int) -> None:
        """Seed the current device's generator."""
        self._fn("manual_seed")(int(seed))

    def manual_seed_all(self, seed: int) -> None:
        self._fn("manual_seed_all")(int(seed))

    def initial_seed(self) -> int:
        return int(self._fn("initial_seed")())

    def get_rng_state(self, index: Optional[int] = None) -> torch.Tensor:
        fn = self._fn("get_rng_state")
        return fn(index) if index is not None else fn()

    def set_rng_state(self, state: torch.Tensor, index: Optional[int] = None) -> None:
        fn = self._fn("set_rng_state")
        fn(state, index) if index is not None else fn(state)

    def get_rng_state_all(self) -> List[torch.Tensor]:
        return list(self._fn("get_rng_state_all")())

    def set_rng_state_all(self, states) -> None:
        self._fn("set_rng_state_all")(states)

    @contextlib.contextmanager
    def fork_rng(self, enabled: bool = True) -> Iterator[None]:
        """Restore the CPU and every device generator of this type on exit."""
        devices = list(range(self.device_count())) if self.device_type != "cpu" else []
        with torch.random.fork_rng(devices=devices, enabled=enabled, device_type=self.device_type):
            yield

    # -- processes --------------------------------------------------------------------
    def processes_share_devices(self) -> bool:
        """True when several processes may use one device at once (the host CPU; the emulator,
        whose devices are host memory), so that two ranks can run on a machine with one device.
        Default False: a vendor's device belongs to one process at a time."""
        return False

    # -- ops: hal's own, and the ops the device lacks ---------------------------------
    def own_ops(self) -> ContextManager[None]:
        """Context manager: ops run inside are hal's own (start-up checks, the dtype probe, the
        redirection's checks), not the user's, so they are never counted as the user's fallbacks
        (:meth:`fallback_report`, :func:`hal.fallback.report`).

        Default: marks the thread (:func:`hal.util.own_ops.own_ops`); a device that counts its
        fallbacks itself also stops counting there.
        """
        return own_ops()

    def fallback_report(self) -> List[Dict[str, Any]]:
        """The ops of this process that ran outside the device's native kernels: ``op``
        (``"aten::_softmax"``), ``route`` (``"host"``: a CPU kernel, ``"decomposition"``: rewritten
        into other ops), ``count``; highest count first.  :func:`hal.fallback_report` shows them
        with :mod:`hal.fallback`'s decompositions.

        Default: empty (a device that does not count its fallbacks reports nothing).
        """
        return []

    def reset_fallback_report(self) -> None:
        """Forget the counted fallbacks, so that each op's first fallback is announced again
        (``hal probe`` does this before each op).  Default: nothing to forget."""

    def on_op_fallback(self, notice: Optional[Callable[[str, str, str], None]]) -> None:
        """Announce each op's first fallback by ``notice(op, route, device)`` instead of the
        device's own warning (``hal run`` prints one line on rank 0); ``route`` as in
        :meth:`fallback_report`, ``device`` how the device names itself in that line (``"emu"``).
        ``None`` restores the device's own.  Default: nothing is announced (a device that does
        not count its fallbacks has nothing to say)."""

    def op_fallback(self, op: "torch._ops.OpOverload") -> Optional[Callable[..., Any]]:
        """What the device does with a call of ``op`` when it has no kernel for it (its own
        fallback: a host run, an error), as a callable taking the op's arguments; None when it
        has none hal can call.  :mod:`hal.fallback` sends a call its decomposition does not cover
        there, and otherwise makes a CPU round trip.  Default: None."""
        return None

    # -- dtypes and autocast ----------------------------------------------------------
    def supported_dtypes(self) -> List[torch.dtype]:
        """dtypes for which a small tensor can be made and added on this device (checked once,
        as hal's own ops: see :meth:`own_ops`)."""
        if self._dtypes is None:
            ok = []
            dev = self.device()
            with self.own_ops():
                for dt in CANDIDATE_DTYPES:
                    try:
                        t = torch.ones(4, dtype=dt, device=dev)
                        (t + t).cpu()
                        ok.append(dt)
                    except Exception:
                        pass
            self._dtypes = ok
        return list(self._dtypes)

    def low_precision_dtype(self) -> torch.dtype:
        """The autocast dtype hal picks: bfloat16 where the device runs it, else float16."""
        supported = self.supported_dtypes()
        is_bf16 = getattr(self.module, "is_bf16_supported", None)
        bf16 = torch.bfloat16 in supported and (is_bf16 is None or bool(is_bf16()))
        if bf16:
            return torch.bfloat16
        if torch.float16 in supported:
            return torch.float16
        raise NotSupported(self.name, "autocast", "the device runs neither bfloat16 nor float16")

    def autocast(self, dtype: Optional[torch.dtype] = None, enabled: bool = True, **kwargs):
        """``torch.autocast`` for this device type with the best supported low-precision dtype."""
        if not torch.amp.is_autocast_available(self.device_type):
            raise NotSupported(self.name, "autocast", f"torch has no autocast for {self.device_type!r}")
        return torch.autocast(self.device_type, dtype=dtype or self.low_precision_dtype(),
                              enabled=enabled, **kwargs)

    # -- versions ---------------------------------------------------------------------
    def runtime_version(self) -> str:
        v = getattr(torch.version, self.device_type, None) or getattr(self.vendor_module, "__version__", None)
        if not v:
            raise NotSupported(self.name, "runtime_version")
        return str(v)

    def driver_version(self) -> str:
        raise NotSupported(self.name, "driver_version", f"query it with {self.spec.management_tool or 'the vendor tool'}")

    def versions(self) -> Dict[str, str]:
        """torch, runtime, driver and vendor-module versions that are known (unknown ones are omitted)."""
        out = {"torch": torch.__version__}
        for key, fn in (("runtime", self.runtime_version), ("driver", self.driver_version)):
            try:
                out[key] = fn()
            except NotSupported:
                pass
        if self.vendor_module is not None:
            out[self.spec.module] = str(getattr(self.vendor_module, "__version__", "unknown"))
        return out


def load_device_backend(spec: BackendSpec, cls=Backend, runtime: Optional[dict] = None) -> Backend:
    """Import ``spec.module`` (if any) and check that the device module sees a device.

    :param runtime: the vendor runtime the module needs (a backend.json ``runtime``): a failed import then
        names it and how to set it up.
    :raises BackendUnavailable: the module does not import (one line: what is installed, what failed, the fix).
    """
    try:
        module = importlib.import_module(spec.module) if spec.module else None
    except Exception as exc:
        from hal.plugin.probe import ProbeContext, installed_label, runtime_missing

        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        line = f"{installed_label(spec.module)} is installed but `import {spec.module}` failed ({type(exc).__name__}: {first})"
        if runtime:
            line += "; " + (runtime_missing(runtime, ProbeContext())
                            or f"{runtime['name']} is set up ({runtime['home_env']}) but does not load with it: "
                               f"check it with `{runtime['check']}`")
        raise BackendUnavailable(line) from exc
    dev_mod = torch.get_device_module(spec.device_type)
    avail = getattr(dev_mod, "is_available", None)
    count = int(dev_mod.device_count()) if hasattr(dev_mod, "device_count") else 0
    if (avail is not None and not avail()) or count == 0:
        hint = f" ({spec.visible_devices_env[0]}={__import__('os').environ.get(spec.visible_devices_env[0])!r})" \
            if spec.visible_devices_env else ""
        raise NoDevice(f"{spec.module or 'torch'} imports but torch.{spec.device_type} reports 0 devices{hint}")
    return cls(spec, module)
