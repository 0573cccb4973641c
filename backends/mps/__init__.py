"""Apple silicon GPUs through Metal (MPS): built into torch on macOS; no collective backend."""
from hal.plugin.facts import builtin_stack_fact
from hal.plugin.kit import VendorPlugin
from hal.plugin.spec import ProbeResult, Status, builtin_spec


class MPSPlugin(VendorPlugin):
    def probe(self, context):
        if context.platform != "Darwin":
            return ProbeResult(Status.NOT_INSTALLED, f"MPS exists only on macOS (this is {context.platform})",
                               (f"platform {context.platform}",))
        if not context.torch.mps_built:
            return ProbeResult(Status.NOT_INSTALLED, "torch was built without MPS", ("torch.backends.mps.is_built() is False",))
        if context.machine != "arm64":
            return ProbeResult(Status.NO_DEVICE, f"MPS needs Apple silicon (machine {context.machine})", ())
        return ProbeResult(Status.AVAILABLE, "Apple silicon with an MPS-enabled torch",
                           ("platform Darwin arm64", "torch.backends.mps.is_built() is True"))


_plugin = MPSPlugin(builtin_spec("mps"),
                    deepspeed_accelerator=builtin_stack_fact("mps", "deepspeed")["accelerator"])
hal_backend_specs, hal_backend_probe, hal_backend_load, hal_op_support = _plugin.hooks()
hal_deepspeed_accelerator = _plugin.hal_deepspeed_accelerator
