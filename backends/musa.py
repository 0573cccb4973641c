"""Moore Threads MTT GPUs (S4000/S5000): torch_musa, device type musa, collective mccl."""
from hal.plugin_kit import VendorPlugin
from hal.spec import builtin_spec

_plugin = VendorPlugin(builtin_spec("musa"))
hal_backend_specs, hal_backend_probe, hal_backend_load, hal_op_support = _plugin.hooks()
