"""A plugin whose collective gets one op wrong on purpose: the emulated device with a CCL whose
reduce_scatter_tensor adds 1 to every result. The conformance kit's ccl check must name that op."""
import torch.distributed as dist

from hal import hookimpl
from hal.plugin.spec import BackendSpec, ProbeResult, Status

SPEC = BackendSpec(name="wrongccl", vendor="Nobody", device_type="emu", product="a CCL wrong on purpose",
                   dist_backend="wrongccl")


def _create(opts, pg_options=None):
    from hal.emu._ccl import EmuCCL, _requested_device

    class WrongCCL(EmuCCL):
        def getBackendName(self):  # noqa: N802 - c10d's name
            return "wrongccl"

        def _reduce_scatter_base(self, output, input, opts=None):
            super()._reduce_scatter_base(output, input, opts).wait()
            output.add_(1)
            return self._gloo.barrier(dist.BarrierOptions())

        reduce_scatter_single = _reduce_scatter_base

    return WrongCCL(opts.store, opts.group_rank, opts.group_size, opts.timeout, _requested_device())


@hookimpl
def hal_backend_specs():
    return [SPEC]


@hookimpl
def hal_backend_probe(spec, context):
    if spec.name == SPEC.name:
        return ProbeResult(Status.AVAILABLE, "always", ("test plugin",))


@hookimpl
def hal_backend_load(spec):
    if spec.name == SPEC.name:
        import hal.emu
        from hal.emu._backend import EmuBackend
        hal.emu.install()
        return EmuBackend(SPEC, hal.emu)


@hookimpl
def hal_c10d_backend(spec):
    if spec.name == SPEC.name:
        return {"name": "wrongccl", "creator": _create, "devices": ["emu"], "extended_api": True}
