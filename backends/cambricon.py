"""Cambricon MLU (MLU370/MLU590): torch_mlu, device type mlu, collective cncl."""
from hal.plugin_kit import VendorPlugin
from hal.spec import builtin_spec

_plugin = VendorPlugin(builtin_spec("cambricon"))
hal_backend_specs, hal_backend_probe, hal_backend_load, hal_op_support = _plugin.hooks()
