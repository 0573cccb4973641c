"""Moore Threads (torch_musa) fused kernels, adapted to hal.ops conventions."""
import torch

from hal_backends.fused import vendor_attr


def rms_norm(x, weight, eps):
    # aten::_fused_rmsnorm_forward(input, normalized_shape, eps, weight) -> (output, invvar)
    out, _invvar = torch.ops.aten._fused_rmsnorm_forward(x, [x.shape[-1]], eps, weight.to(x.dtype))
    return out


def swiglu(x):
    # torch.nn.functional.swish_glu(input): one tensor split in [gate | up] halves
    return vendor_attr("torch.nn.functional", "swish_glu")(x)
