"""NVIDIA CUDA on stock PyTorch.  Not chosen when the cuda device type belongs to a
CUDA-compatible vendor build (see hal.cuda_family)."""
import torch

from hal._errors import NotSupported
from hal.backend import Backend
from hal.cuda_family import identify
from hal.kernel_table import builtin_fused_kernels
from hal.plugin_kit import VendorPlugin
from hal.probe import probe_module_and_nodes
from hal.spec import ProbeResult, Status, builtin_spec


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


class CUDAFamilyPlugin(VendorPlugin):
    """A backend that owns torch's ``cuda`` device type when hal.cuda_family says so."""

    def probe(self, context):
        owner, evidence = identify(context)
        if owner != self.spec.name:
            if owner is None:
                why = evidence[0]
            else:
                why = f"torch's cuda device type here belongs to backend {owner!r}, not {self.spec.name!r}"
            return ProbeResult(Status.NOT_INSTALLED, why, evidence)
        res = probe_module_and_nodes(self.spec, context)
        return ProbeResult(res.status, res.reason, evidence + res.evidence)


_plugin = CUDAFamilyPlugin(builtin_spec("cuda"), CUDABackend, fused_kernels=builtin_fused_kernels("cuda"))
hal_backend_specs, hal_backend_probe, hal_backend_load, hal_op_support = _plugin.hooks()
hal_fused_kernels = _plugin.hal_fused_kernels
