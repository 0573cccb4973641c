"""Tecorigin (tecoops) fused kernels, adapted to hal.ops conventions."""
import torch

from hal.ops import KernelUnsupported
from hal_backends.fused import vendor_attr


def rms_norm(x, weight, eps):
    # tecoops.rms_norm(input, weight, residual, output, residual_out, eps): 2-D, float16 only
    if x.dtype != torch.float16:
        raise KernelUnsupported("tecoops.rms_norm takes float16 only", per_dtype=True)
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    out = torch.empty_like(x2)
    vendor_attr("tecoops", "rms_norm")(x2, weight.to(x.dtype), None, out, None, eps)
    return out.view_as(x)


def add_rms_norm(x, weight, eps, residual):
    # tecoops.rms_norm(input, weight, residual, output, residual_out, eps): 2-D, float16 only
    if x.dtype != torch.float16:
        raise KernelUnsupported("tecoops.rms_norm takes float16 only", per_dtype=True)
    n = x.shape[-1]
    x2, r2 = x.reshape(-1, n).contiguous(), residual.reshape(-1, n).contiguous()
    out, summed = torch.empty_like(x2), torch.empty_like(x2)
    vendor_attr("tecoops", "rms_norm")(x2, weight.to(x.dtype), r2, out, summed, eps)
    return out.view_as(x), summed.view_as(x)
