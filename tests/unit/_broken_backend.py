"""A deliberately broken backend plugin: the conformance kit must fail it, with reasons."""
import torch

from hal import hookimpl
from hal.plugin.spec import BackendSpec, ProbeResult, Status
from hal_backends.cpu import CPUBackend

SPEC = BackendSpec(name="brokenchip", vendor="Nobody", device_type="cpu", product="broken on purpose",
                   dist_backend="gloo")


class BrokenBackend(CPUBackend):
    def device_count(self):
        return 0  # claims no device although it loaded

    def set_rng_state(self, state, index=None):
        pass  # forgets to restore

    def low_precision_dtype(self):
        return torch.float64  # not a low-precision dtype

    def memory_allocated(self, index=None):
        return 0  # never counts


@hookimpl
def hal_backend_specs():
    return [SPEC]


@hookimpl
def hal_backend_probe(spec, context):
    if spec.name == SPEC.name:
        return ProbeResult(Status.AVAILABLE, "always")  # no evidence


@hookimpl
def hal_backend_load(spec):
    if spec.name == SPEC.name:
        return BrokenBackend(SPEC)
