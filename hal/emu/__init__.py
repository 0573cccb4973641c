"""The emulated accelerator: a PyTorch device ``emu`` backed by host memory.

Opt-in (``HAL_BACKEND=emu``).  A C++ device registered on ``PrivateUse1`` the way vendor
extensions register theirs (allocator, device guard with ``HAL_EMU_DEVICES`` devices,
streams, events, generators, hooks, autocast), so the non-CUDA path — device renaming,
the device module, RNG, serialization, pinned memory, an out-of-tree c10d backend, op
fallbacks — runs on a machine without accelerators.  It is the reference a vendor plugin
author copies, and hal's core treats it as any vendor's plugin (``backends/emu/``)::

    HAL_BACKEND=emu python train.py     # hal.device() is torch.device("emu", 0)

    import hal
    x = torch.randn(4, 4, device=hal.device())
    hal.fallback_report()               # ops that ran outside the native op set

How an op runs (``docs/emulator.md``, "How ops run"): an op of the native set
(``hal/emu/native_ops.json``; with ``HAL_EMU_OPS=<torch profile>`` the emulated vendor's) has an
explicit ``PrivateUse1`` kernel, torch's CPU kernel on the same bytes.  Every other op that reaches
the device goes to its one boxed fallback, which does what the device does for an op it lacks: the
emulated vendor's error, else a counted host run (``HAL_EMU_FALLBACK=host``, the default) or
torch's decomposition first (``HAL_EMU_FALLBACK=decomposition``; always for ops without a CPU
kernel).  :mod:`hal.fallback` then installs its decompositions as on any vendor's device: only
where the device registered no kernel.

Module map — the device runtime, its torch integration, hal's side (as ``torch_openreg`` separates
its runtime from its ATen kernels):

==============================  =================================================================
the device runtime
``csrc/runtime.cpp``            devices, streams (with CUDA's priorities) and events (the device
                                guard), the ``PrivateUse1`` hooks
``csrc/memory.cpp``             the device allocator (a ``c10::DeviceAllocator`` from torch 2.9)
                                and its statistics, pinned host memory
``csrc/generator.cpp``          the counter-based generator: CUDA's (seed, offset) state
``_module.py``                  ``torch.emu``, the device module (``torch.cuda``'s API)
``_device.py``                  :func:`install`: ``PrivateUse1`` renamed ``emu``, ``torch.emu``,
                                ``Tensor.emu()``, then the ops and the process hooks
``_ipc.py``                     emu tensors across processes (shared memory), the fork guard
``_build.py``, ``build.py``     compile ``hal_emu_C`` for the torch installed, cache it, load it
its torch integration at the op level (ATen)
``csrc/aten_kernels.cpp``       the device's own kernels (allocation, views, copies, dropout,
                                convolution, recurrent cells, SyncBatchNorm) and the router
``csrc/aten_autocast.cpp``      ``AutocastPrivateUse1`` with CUDA's cast lists
``_profile.py``                 the native set (``hal/emu/native_ops.json``)
``_dispatch.py``                the native set's kernels, the boxed fallback, the fallback report
``_vendor.py``                  ``HAL_EMU_OPS``: a vendor's coverage
``csrc/aten_trace.cpp``,        the op trace: every op that reaches the device
``_trace.py``                   (``op_coverage trace``)
``_ccl.py``                     ``emuccl``, the out-of-tree c10d backend (gloo on the same bytes)
``_compile_rng.py``             torch.compile's RNG operators (activation checkpointing) on emu
``csrc/python_module.cpp``,     ``hal_emu_C``, Python's view of the C++ half, and the C++
``csrc/emu.h``                  interface between the files of ``csrc/``
hal's side
``_backend.py``                 ``EmuBackend``: the Backend facets (fallback report, own ops, ...)
``backends/emu/``             the plugin: spec, probe, load, ``hal_c10d_backend``,
                                ``hal_torch_op_profile``
==============================  =================================================================

The public API below is what hal's plugin and ``op_coverage trace`` use; the rest is private.
"""
from hal._version import __version__  # the emulator ships with hal
from hal.emu._device import DEVICE_TYPE, install, is_installed, privateuse1_owner, real_accelerator
from hal.emu._dispatch import (FallbackWarning, fallback_report, fallback_route, reset_fallback_report,
                               set_fallback_route, uncounted, vendor_report)
from hal.emu._dispatch import set_notice as set_fallback_notice
from hal.emu._profile import native_packets, profile
from hal.emu._trace import DeviceOpTrace
from hal.emu._vendor import emulated_profile


def c10d_entry() -> dict:
    """``emuccl`` as the plugin's ``hal_c10d_backend`` names it (imports torch.distributed)."""
    from hal.emu._ccl import c10d_entry as entry
    return entry()


__all__ = ["__version__", "DEVICE_TYPE", "DeviceOpTrace", "FallbackWarning", "c10d_entry", "emulated_profile",
           "fallback_report", "fallback_route", "install", "is_installed", "native_packets", "privateuse1_owner",
           "profile", "real_accelerator", "reset_fallback_report", "set_fallback_notice", "set_fallback_route",
           "uncounted", "vendor_report"]
