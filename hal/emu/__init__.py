"""The emulated accelerator: a PyTorch device ``emu`` backed by host memory.

Opt-in (``HAL_BACKEND=emu``).  It makes the non-CUDA path — PrivateUse1 device renaming,
the device module, RNG, streams, an out-of-tree c10d backend, op fallbacks — runnable on
a machine without accelerators, and it is the reference a vendor plugin author copies::

    HAL_BACKEND=emu python train.py     # hal.device() is torch.device("emu", 0)

    import hal
    x = torch.randn(4, 4, device=hal.device())
    hal.fallback_report()               # ops that ran outside the native op set
"""
from hal import __version__  # the emulator ships with hal
from hal.emu._device import install, is_installed, privateuse1_owner
from hal.emu._dispatch import FallbackWarning, fallback_report, reset_fallback_report
from hal.emu._profile import native_packets, profile
from hal.emu._tensor import DEVICE_TYPE, EmuTensor

__all__ = ["__version__", "DEVICE_TYPE", "EmuTensor", "FallbackWarning", "fallback_report", "install",
           "is_installed", "native_packets", "privateuse1_owner", "profile",
           "reset_fallback_report"]
