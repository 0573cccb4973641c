"""Huawei Ascend NPU (910/310 series): torch_npu, device type npu, collective hccl."""
from hal.plugin.facts import builtin_fused_kernels, builtin_runtime, builtin_stack_fact
from hal.plugin.kit import VendorPlugin
from hal.plugin.spec import builtin_spec

_plugin = VendorPlugin(builtin_spec("ascend"), fused_kernels=builtin_fused_kernels("ascend"),
                       deepspeed_accelerator=builtin_stack_fact("ascend", "deepspeed")["accelerator"],
                       runtime=builtin_runtime("ascend"))
hal_backend_specs, hal_backend_probe, hal_backend_load, hal_op_support = _plugin.hooks()
hal_fused_kernels = _plugin.hal_fused_kernels
hal_deepspeed_accelerator = _plugin.hal_deepspeed_accelerator
