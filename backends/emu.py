"""The hal emulated accelerator (device type ``emu``): opt-in with ``HAL_BACKEND=emu``.

The reference a vendor plugin copies: spec from data, a probe that imports nothing, a
load that registers the device with PyTorch, and the collective registered as an
out-of-tree c10d backend, as vendor CCLs are.
"""
from hal._errors import NoDevice
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
        from hal.emu import install
        from hal.emu._ccl import register_c10d_backend
        from hal.emu._device import real_accelerator

        real = real_accelerator()
        if real is not None:
            raise NoDevice(f"the emulator stands in for an accelerator, and this process has a real one "
                           f"({real}); torch allows one accelerator per process: use HAL_BACKEND={real}")
        install()
        register_c10d_backend()
        import hal.emu as module
        return self.backend_class()(self.spec, module)


_plugin = EmuPlugin(builtin_spec("emu"), "hal_backends.torch_backends:EmuBackend")
hal_backend_specs, hal_backend_probe, hal_backend_load, hal_op_support = _plugin.hooks()


@hookimpl
def hal_c10d_backend(spec):
    """``emuccl``, the out-of-tree c10d backend (gloo on host memory) for the ``emu`` device."""
    if spec.name != _plugin.spec.name:
        return None
    from hal.emu._ccl import c10d_entry
    return c10d_entry()


@hookimpl
def hal_torch_op_profile(spec):
    """The profile ``HAL_BACKEND=emu hal probe --out hal/data/emu_op_profile.json`` wrote."""
    if spec.name != _plugin.spec.name:
        return None
    import json
    from importlib import resources
    return json.loads(resources.files("hal").joinpath("data/emu_op_profile.json").read_text(encoding="utf-8"))
