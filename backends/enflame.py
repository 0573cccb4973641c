"""Enflame GCU (S60, i20/T20): torch_gcu, device type gcu, collective eccl."""
from hal.plugin_kit import VendorPlugin
from hal.spec import builtin_spec

_plugin = VendorPlugin(builtin_spec("enflame"))
hal_backend_specs, hal_backend_probe, hal_backend_load, hal_op_support = _plugin.hooks()
