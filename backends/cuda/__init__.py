"""NVIDIA CUDA on stock PyTorch.  Not chosen when the cuda device type belongs to a
CUDA-compatible vendor build (see hal.plugin.cuda_family)."""
from hal.plugin.cuda_family import identify
from hal.plugin.facts import builtin_fused_kernels, builtin_stack_fact
from hal.plugin.kit import VendorPlugin
from hal.plugin.probe import probe_module_and_nodes
from hal.plugin.spec import ProbeResult, Status, builtin_spec

#: imported on load (it imports torch)
CUDA_BACKEND = "hal_backends.torch_backends:CUDABackend"


class CUDAFamilyPlugin(VendorPlugin):
    """A backend that owns torch's ``cuda`` device type when hal.plugin.cuda_family says so."""

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


_plugin = CUDAFamilyPlugin(builtin_spec("cuda"), CUDA_BACKEND, fused_kernels=builtin_fused_kernels("cuda"),
                           deepspeed_accelerator=builtin_stack_fact("cuda", "deepspeed")["accelerator"])
hal_backend_specs, hal_backend_probe, hal_backend_load, hal_op_support = _plugin.hooks()
hal_fused_kernels = _plugin.hal_fused_kernels
hal_deepspeed_accelerator = _plugin.hal_deepspeed_accelerator


def __getattr__(name):  # ``from hal_backends.cuda import CUDABackend`` imports torch only then
    if name == "CUDABackend":
        return _plugin.backend_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
