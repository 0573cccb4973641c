"""hal: one PyTorch training script and one ONNX model across accelerators.

``import hal`` imports no vendor module and does no device work: backends are probed
and loaded on first use (``hal.device()``, ``hal list``)::

    import hal
    dev = hal.device()            # the best available device, or the CPU with a reason
    print(hal.backend_name(), hal.device_count())
"""
from hal._version import __version__  # noqa: E402,F401

from hal._errors import BackendUnavailable, HalError, NoDevice, NotSupported
from hal.device import (Event, Stream, autocast, backend_name, current_backend, current_device,
                        current_stream, device, device_count, device_type, empty_cache,
                        fork_rng, get_rng_state, initial_seed, manual_seed, manual_seed_all,
                        max_memory_allocated, mem_get_info, memory_allocated, memory_reserved,
                        memory_stats, pin_memory, reset_peak_memory_stats, set_device,
                        set_rng_state, stream, supported_dtypes, synchronize, versions)
from hal.plugin import hookimpl, hookspec
from hal.plugin.registry import get_registry, reset_registry
from hal.plugin.spec import BackendSpec, ProbeResult, Status
from hal.util.moved import HAL_MOVED as _HAL_MOVED
from hal.util.moved import install as _install_moved

_install_moved(_HAL_MOVED)


def native_available() -> bool:
    """True when the C++ host kernels (``hal._C``) were built and import."""
    try:
        from hal import _C  # noqa: F401
    except ImportError:
        return False
    return True


def fallback_report():
    """The ops of this process that ran outside the native kernels of the selected backend's device
    (:meth:`hal.plugin.backend.Backend.fallback_report`: ``op``, ``route``, ``count``; empty on a
    device that does not count them; the emulator, ``HAL_BACKEND=emu``, does), then the
    decompositions :mod:`hal.fallback` ran (``by: "hal.fallback"``).
    """
    from hal import fallback as _fallback
    try:
        rows = current_backend().fallback_report()
    except BackendUnavailable:  # no backend to ask: only hal.fallback's own
        rows = []
    return rows + _fallback.report()


def __getattr__(name):
    # ``hal.checkpoint``, ``hal.metrics``, ``hal.redirect``, ``hal.conformance``, ``hal.emu``,
    # ``hal.dist`` and ``hal.doctor`` after a bare ``import hal``, imported on first use
    if name in ("checkpoint", "metrics", "redirect", "transfer", "conformance", "emu", "dist", "doctor", "fallback"):
        import importlib
        return importlib.import_module(f"hal.{name}")
    raise AttributeError(f"module 'hal' has no attribute {name!r}")
