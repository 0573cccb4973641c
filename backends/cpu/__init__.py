"""The host CPU: always present; chosen only when no accelerator is, with a stated reason."""
from hal.plugin.facts import builtin_fused_kernels, builtin_stack_fact
from hal.plugin.kit import VendorPlugin
from hal.plugin.spec import ProbeResult, Status, builtin_spec


class CPUPlugin(VendorPlugin):
    def probe(self, context):
        return ProbeResult(Status.AVAILABLE, "the host CPU is always present", ("torch CPU kernels",))


# the CPU's fused kernels are hal's own C++ host kernels (hal._C)
_plugin = CPUPlugin(builtin_spec("cpu"), "hal_backends.torch_backends:CPUBackend",
                    fused_kernels=builtin_fused_kernels("cpu"),
                    deepspeed_accelerator=builtin_stack_fact("cpu", "deepspeed")["accelerator"])
hal_backend_specs, hal_backend_probe, hal_backend_load, hal_op_support = _plugin.hooks()
hal_fused_kernels = _plugin.hal_fused_kernels
hal_deepspeed_accelerator = _plugin.hal_deepspeed_accelerator


def __getattr__(name):  # ``from hal_backends.cpu import CPUBackend`` imports torch only then
    if name == "CPUBackend":
        return _plugin.backend_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
