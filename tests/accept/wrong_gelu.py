"""A vendor plugin with one wrong kernel, for hal accept's bisection: ``aten::gelu`` on the emulator's
device off by +1e-2 (loaded with ``HAL_PLUGINS=wrong_gelu``, this folder on ``PYTHONPATH``).  Every other
op keeps the emulator's kernels; the backward is torch's (``gelu_backward``), so only the forward is wrong,
as when a vendor's fused kernel rounds differently."""
import torch

_lib = torch.library.Library("aten", "IMPL")


def _gelu(x, approximate="none"):
    out = torch.ops.aten.gelu.default(x.cpu(), approximate=approximate) + 1e-2
    return out.to(x.device)


_lib.impl("gelu", _gelu, "PrivateUse1")
