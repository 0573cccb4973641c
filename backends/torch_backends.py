"""The Backend classes of the built-in plugins that differ from :class:`hal.plugin.backend.Backend`.

Imported when a plugin loads its backend, never when the plugin is registered: these
classes import torch, and registering plugins (``hal list``, plugin op profiles for
``op_coverage scan``) must not.
"""
import contextlib
import os
import platform

import torch

from hal.errors import NotSupported
from hal.plugin.backend import Backend, DeviceProperties, host_memory_bytes


class CPUBackend(Backend):
    def device(self, index=None):
        return torch.device("cpu")

    def device_count(self):
        return 1

    def current_device(self):
        return 0

    def set_device(self, index):
        if int(index) != 0:
            raise ValueError(f"cpu: device index {index} out of range; the cpu backend has one device (0)")

    def device_name(self, index=None):
        return _cpu_model() or platform.processor() or platform.machine()

    def processes_share_devices(self):
        """The host: every process may use it."""
        return True

    def device_properties(self, index=None):
        """The host: its model name, physical memory, its cores; no compute capability (0, 0)."""
        return DeviceProperties(name=self.device_name(), total_memory=host_memory_bytes(), major=0, minor=0,
                                multi_processor_count=os.cpu_count() or 1, type="cpu")

    def Event(self, *args, **kwargs):  # noqa: N802 - mirrors torch.cuda.Event
        if args or kwargs:  # torch.cpu.Event takes no arguments (no timing, no IPC)
            raise NotSupported("cpu", "Event(enable_timing=...)",
                               "torch.cpu.Event has no timing; time host work with time.perf_counter()")
        return torch.cpu.Event()

    def _mem(self, attr, index):
        raise NotSupported("cpu", attr, "host memory has no device allocator; use psutil or /proc for RSS")

    def empty_cache(self):
        raise NotSupported("cpu", "empty_cache", "host memory has no device cache")

    def pin_memory(self, tensor):
        """No device to transfer to: the host tensor is returned as it is."""
        return tensor

    def manual_seed(self, seed):
        torch.manual_seed(int(seed))

    manual_seed_all = manual_seed

    def initial_seed(self):
        return int(torch.initial_seed())

    def get_rng_state(self, index=None):
        return torch.get_rng_state()

    def set_rng_state(self, state, index=None):
        torch.set_rng_state(state)

    def get_rng_state_all(self):
        return [torch.get_rng_state()]

    def set_rng_state_all(self, states):
        torch.set_rng_state(states[0])

    @contextlib.contextmanager
    def fork_rng(self, enabled=True):
        with torch.random.fork_rng(devices=[], enabled=enabled):
            yield

    def runtime_version(self):
        return f"ATen CPU ({torch.backends.cpu.get_cpu_capability()})"


def _cpu_model() -> str:
    """The processor's model name from /proc/cpuinfo (Linux), or ''."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return ""


class CUDABackend(Backend):
    def runtime_version(self):
        v = torch.version.cuda or torch.version.hip
        if not v:
            raise NotSupported(self.name, "runtime_version")
        return str(v)

    def driver_version(self):
        fn = getattr(torch._C, "_cuda_getDriverVersion", None)
        if fn is None:
            raise NotSupported(self.name, "driver_version")
        v = int(fn())  # e.g. 12040 -> 12.4 (the CUDA version the driver supports)
        return f"{v // 1000}.{(v % 1000) // 10}"

