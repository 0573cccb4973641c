"""Tecorigin T1/T100 AI cards (SDAA): torch_sdaa, device type sdaa, collective tccl."""
from hal.plugin_kit import VendorPlugin
from hal.spec import builtin_spec

_plugin = VendorPlugin(builtin_spec("tecorigin"))
hal_backend_specs, hal_backend_probe, hal_backend_load, hal_op_support = _plugin.hooks()
