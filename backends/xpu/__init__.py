"""Intel GPUs (XPU) on stock PyTorch: device type xpu, collective xccl."""
from hal.plugin.facts import builtin_stack_fact
from hal.plugin.kit import VendorPlugin
from hal.plugin.probe import probe_module_and_nodes
from hal.plugin.spec import ProbeResult, Status, builtin_spec


class XPUPlugin(VendorPlugin):
    def probe(self, context):
        if not context.torch.xpu:
            return ProbeResult(Status.NOT_INSTALLED, "torch was built without XPU (torch.version.xpu is None)",
                               ("torch.version.xpu is None",))
        res = probe_module_and_nodes(self.spec, context)
        return ProbeResult(res.status, res.reason, (f"torch.version.xpu={context.torch.xpu!r}",) + res.evidence)


_plugin = XPUPlugin(builtin_spec("xpu"),
                    deepspeed_accelerator=builtin_stack_fact("xpu", "deepspeed")["accelerator"])
hal_backend_specs, hal_backend_probe, hal_backend_load, hal_op_support = _plugin.hooks()
hal_deepspeed_accelerator = _plugin.hal_deepspeed_accelerator
