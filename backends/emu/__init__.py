"""The hal emulated accelerator (device type ``emu``): opt-in with ``HAL_BACKEND=emu``.

The reference a vendor plugin copies: spec from data, a probe that imports nothing, a
load that registers the device with PyTorch (and its collective, as a vendor module
registers its CCL on import), the collective named by ``hal_c10d_backend`` as an
out-of-tree c10d backend, and the device's torch op profile from ``hal_torch_op_profile``.
"""
from hal.errors import NoDevice
from hal.plugin import hookimpl
from hal.plugin.kit import VendorPlugin
from hal.plugin.spec import ProbeResult, Status, builtin_spec

#: values of HAL_BACKEND that opt in
OPT_IN = ("emu",)


class EmuPlugin(VendorPlugin):
    def probe(self, context):
        wanted = context.env.get("HAL_BACKEND", "").strip()
        if wanted not in OPT_IN:
            return ProbeResult(Status.NOT_INSTALLED, "opt-in only: set HAL_BACKEND=emu to use the emulator",
                               ("HAL_BACKEND=" + (wanted or "<unset>"),))
        return ProbeResult(Status.AVAILABLE, "emulated accelerator requested by HAL_BACKEND=emu",
                           (f"HAL_BACKEND={wanted}", f"torch {context.torch.version}"))

    def load(self):
        import hal.emu
        from hal.dist.process_group import register_ccl

        real = hal.emu.real_accelerator()
        if real is not None:
            raise NoDevice(f"the emulator stands in for an accelerator, and this process has a real one "
                           f"({real}); torch allows one accelerator per process: use HAL_BACKEND={real}")
        hal.emu.install()
        # as torch_npu registers hccl on import: init_process_group("cpu:gloo,emu:emuccl") works at once
        register_ccl(hal_c10d_backend(self.spec), self.spec.name)
        return self.backend_class()(self.spec, hal.emu)


_plugin = EmuPlugin(builtin_spec("emu"), "hal.emu._backend:EmuBackend")
hal_backend_specs, hal_backend_probe, hal_backend_load, hal_op_support = _plugin.hooks()


@hookimpl
def hal_c10d_backend(spec):
    """``emuccl``, the out-of-tree c10d backend (gloo on host memory) for the ``emu`` device."""
    if spec.name != _plugin.spec.name:
        return None
    import hal.emu
    return hal.emu.c10d_entry()


@hookimpl
def hal_torch_op_profile(spec):
    """The emulated vendor's profile under ``HAL_EMU_OPS``, else the one
    ``HAL_BACKEND=emu hal probe --out backends/emu/observed-ops.json`` wrote."""
    if spec.name != _plugin.spec.name:
        return None
    import copy
    import os
    if os.environ.get("HAL_EMU_OPS", "").strip():
        import hal.emu
        return hal.emu.emulated_profile().data
    from hal.plugin.facts import read_builtin_json
    return copy.deepcopy(read_builtin_json("backends/emu/observed-ops.json"))
