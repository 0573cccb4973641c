"""Autocast for the emulated device: the ops torch's CPU autocast runs in lower precision.

Registered on the ``AutocastPrivateUse1`` dispatch key, so ``torch.autocast("emu")``
casts exactly where ``torch.autocast("cpu")`` does for these ops; other ops run in their
input dtype.
"""
from __future__ import annotations

import torch

from hal.emu._tensor import DEVICE_TYPE

#: ops cast to the autocast dtype (mirrors the lower-precision list of torch's CPU autocast)
LOWER_PRECISION_OPS = ("mm", "addmm", "bmm", "baddbmm", "addbmm", "linear", "matmul",
                       "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d.input",
                       "conv_transpose3d.input", "_convolution", "prelu",
                       "scaled_dot_product_attention")

_KEYSET = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)


def _kernel(op):
    def run(*args, **kwargs):
        dt = torch.get_autocast_dtype(DEVICE_TYPE)

        def cast(x):
            if isinstance(x, torch.Tensor) and x.is_floating_point() and x.device.type == DEVICE_TYPE \
                    and x.dtype in (torch.float32, torch.float64):
                return x.to(dt)
            return x

        args = tuple(cast(a) for a in args)
        kwargs = {k: cast(v) for k, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(_KEYSET):
            return op(*args, **kwargs)
    return run


def register(lib: torch.library.Library) -> None:
    """Register the lower-precision kernels into ``lib`` (an ``aten`` IMPL library)."""
    for name in LOWER_PRECISION_OPS:
        packet, _, overload = name.partition(".")
        op = getattr(getattr(torch.ops.aten, packet), overload or "default")
        lib.impl(name, _kernel(op), "AutocastPrivateUse1")
