"""The emulated accelerator: a PyTorch device ``emu`` backed by host memory.

Opt-in (``HAL_BACKEND=emu``).  A C++ device registered on ``PrivateUse1`` the way vendor
extensions register theirs (allocator, device guard with ``HAL_EMU_DEVICES`` devices,
streams, events, generators, hooks, autocast), so the non-CUDA path — device renaming,
the device module, RNG, serialization, pinned memory, an out-of-tree c10d backend, op
fallbacks — runs on a machine without accelerators.  It is the reference a vendor plugin
author copies::

    HAL_BACKEND=emu python train.py     # hal.device() is torch.device("emu", 0)

    import hal
    x = torch.randn(4, 4, device=hal.device())
    hal.fallback_report()               # ops that ran outside the native op set
"""
from hal._version import __version__  # the emulator ships with hal
from hal.emu._device import DEVICE_TYPE, install, is_installed, privateuse1_owner
from hal.emu._dispatch import (FallbackWarning, fallback_report, fallback_route, reset_fallback_report,
                                set_fallback_route, uncounted)
from hal.emu._profile import native_packets, profile

__all__ = ["__version__", "DEVICE_TYPE", "FallbackWarning", "fallback_report", "install",
           "is_installed", "native_packets", "privateuse1_owner", "profile",
           "reset_fallback_report", "fallback_route", "set_fallback_route", "uncounted"]
