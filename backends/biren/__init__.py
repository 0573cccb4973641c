"""Biren BR100/BR10x GPUs (SUPA): torch_supa, device type supa, collective bccl."""
from hal.plugin.facts import builtin_stack_fact
from hal.plugin.kit import VendorPlugin
from hal.plugin.spec import builtin_spec

_plugin = VendorPlugin(builtin_spec("biren"),
                       deepspeed_accelerator=builtin_stack_fact("biren", "deepspeed")["accelerator"])
hal_backend_specs, hal_backend_probe, hal_backend_load, hal_op_support = _plugin.hooks()
hal_deepspeed_accelerator = _plugin.hal_deepspeed_accelerator
