"""hal: one PyTorch training script and one ONNX model across accelerators.

``import hal`` imports no vendor module and does no device work: backends are probed
and loaded on first use (``hal.device()``, ``hal list``)::

    import hal
    dev = hal.device()            # the best available device, or the CPU with a reason
    print(hal.backend_name(), hal.device_count())
"""
__version__ = "0.1.0"

# hal.backend is both a submodule (the Backend class) and the public function returning the
# selected backend; importing the submodule first lets the function name win at package level
# while ``from hal.backend import Backend`` keeps working.
import hal.backend as _backend_module  # noqa: F401,E402
from hal._errors import BackendUnavailable, HalError, NoDevice, NotSupported
from hal.device import (Event, Stream, autocast, backend, backend_name, current_device,
                        current_stream, device, device_count, device_type, empty_cache,
                        fork_rng, get_rng_state, initial_seed, manual_seed, manual_seed_all,
                        max_memory_allocated, mem_get_info, memory_allocated, memory_reserved,
                        memory_stats, pin_memory, reset_peak_memory_stats, set_device,
                        set_rng_state, stream, supported_dtypes, synchronize, versions)
from hal.plugin import hookimpl, hookspec
from hal.registry import get_registry, reset_registry
from hal.spec import BackendSpec, ProbeResult, Status


def native_available() -> bool:
    """True when the C++ host kernels (``hal._C``) were built and import."""
    try:
        from hal import _C  # noqa: F401
    except ImportError:
        return False
    return True
