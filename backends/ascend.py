"""Huawei Ascend NPU (910/310 series): torch_npu, device type npu, collective hccl."""
from hal.plugin_kit import VendorPlugin
from hal.spec import builtin_spec

_plugin = VendorPlugin(builtin_spec("ascend"))
hal_backend_specs, hal_backend_probe, hal_backend_load, hal_op_support = _plugin.hooks()
