"""The selected device's name, and its memory and utilisation readings where the device exposes them.

Device memory comes from the backend's allocator statistics (``memory_allocated`` /
``max_memory_allocated``).  On the CPU backend, which has no device allocator, the
process's resident set size is reported instead (source ``host-rss``).  Utilisation comes
from a plugin's ``hal_device_utilization`` hook, else the device module's
``utilization()`` (``torch.cuda.utilization`` needs pynvml); otherwise it is null.
"""
from __future__ import annotations

from typing import Optional, Tuple

from hal._errors import NotSupported


def host_rss() -> Tuple[Optional[int], Optional[int]]:
    """(current, peak) resident set size of this process in bytes (None where unknown)."""
    cur = peak = None
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    cur = int(line.split()[1]) * 1024
                elif line.startswith("VmHWM:"):
                    peak = int(line.split()[1]) * 1024
    except OSError:
        pass
    if peak is None:
        try:
            import resource
            import sys
            r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            peak = r if sys.platform == "darwin" else r * 1024
        except (ImportError, OSError):
            pass
    return cur, peak


class DeviceProbe:
    """Reads memory and utilisation of one device; features that fail once are not retried."""

    def __init__(self, backend, index: Optional[int] = None):
        self.backend = backend
        self.index = backend.current_device() if index is None else index
        self._mem_ok = backend.device_type != "cpu"
        self._util_ok = True
        self._name: Optional[str] = None
        self._name_read = False

    @property
    def device(self) -> str:
        return "cpu" if self.backend.device_type == "cpu" else f"{self.backend.device_type}:{self.index}"

    @property
    def name(self) -> Optional[str]:
        """The device's name as its vendor's torch module reports it (``torch.cuda.get_device_name()``: "NVIDIA
        H100 80GB HBM3"), read once; None where the backend cannot say."""
        if not self._name_read:
            self._name_read = True
            try:
                self._name = str(self.backend.device_name(self.index))
            except (NotSupported, RuntimeError):
                self._name = None
        return self._name

    def memory(self) -> Tuple[Optional[int], Optional[int], Optional[str]]:
        """(current bytes, peak bytes, source) where source is ``device`` or ``host-rss``."""
        if self._mem_ok:
            try:
                return (self.backend.memory_allocated(self.index),
                        self.backend.max_memory_allocated(self.index), "device")
            except (NotSupported, RuntimeError):
                self._mem_ok = False
        cur, peak = host_rss()
        return cur, peak, ("host-rss" if cur is not None or peak is not None else None)

    def utilization(self) -> Optional[float]:
        """Device utilisation in percent, or None when the vendor exposes none."""
        if not self._util_ok or self.backend.device_type == "cpu":
            return None
        try:
            from hal.plugin.registry import get_registry
            v = get_registry().call_selected("hal_device_utilization", index=self.index)
            if v is not None:
                return float(v)
            fn = getattr(self.backend.module, "utilization", None)
            if fn is not None:
                return float(fn(self.index))
        except Exception:  # pynvml missing, driver query refused...: report null from now on
            pass
        self._util_ok = False
        return None
