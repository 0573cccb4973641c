"""Huawei Ascend (torch_npu) fused kernels, adapted to hal.ops conventions.

Argument conventions from Ascend/op-plugin op_plugin_functions.yaml and the torch_npu
API docs (see backend.json beside this file for sources)."""
import torch

from hal.ops import KernelUnsupported
from hal_backends.fused import vendor_attr


def rms_norm(x, weight, eps):
    # npu_rms_norm(self, gamma, epsilon) -> (y, rstd)
    y, _rstd = vendor_attr("torch_npu", "npu_rms_norm")(x, weight.to(x.dtype), eps)
    return y


def add_layer_norm(x, weight, bias, eps, residual):
    # npu_add_layer_norm(x1, x2, gamma, beta, epsilon, additional_output) -> (y, mean, rstd, x1 + x2)
    if bias is None:
        bias = torch.zeros_like(weight)
    outs = vendor_attr("torch_npu", "npu_add_layer_norm")(x, residual, weight.to(x.dtype), bias.to(x.dtype), eps,
                                                        True)
    return outs[0], outs[-1]


def rotary_embedding(x, cos, sin, interleaved, seq_dim):
    # npu_rotary_mul(self, r1=cos, r2=sin, rotary_mode): r1/r2 span the whole head dim and
    # broadcast to x; 'half' rotates (i, i + d/2), 'interleave' rotates (2i, 2i + 1).
    d, half = x.shape[-1], cos.shape[-1]
    if 2 * half != d or x.dim() != 4:
        raise KernelUnsupported("npu_rotary_mul rotates the whole head dim of a 4-D x")
    if interleaved:
        c, s = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
    else:
        c, s = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    shape = [1] * x.dim()
    shape[seq_dim], shape[-1] = x.shape[seq_dim], d
    c, s = c.to(x.dtype).reshape(shape), s.to(x.dtype).reshape(shape)
    return vendor_attr("torch_npu", "npu_rotary_mul")(x, c, s, rotary_mode="interleave" if interleaved else "half")


def swiglu(x):
    # npu_swiglu(self, dim): swish(first half) * second half along dim
    return vendor_attr("torch_npu", "npu_swiglu")(x, dim=-1)


def gelu(x, approximate):
    return vendor_attr("torch_npu", "npu_gelu")(x, approximate=approximate)


def softmax(x, mask, causal, scale):
    # npu_scaled_masked_softmax(x, mask, scale, fixed_triu_mask): bool mask, True = masked OUT
    if mask is not None and mask.dtype != torch.bool:
        raise KernelUnsupported("npu_scaled_masked_softmax takes bool masks only")
    if x.dim() != 4:
        raise KernelUnsupported("npu_scaled_masked_softmax takes 4-D scores")
    hide = torch.zeros(x.shape[-2:], dtype=torch.bool, device=x.device) if mask is None else ~mask
    if causal:
        q, k = x.shape[-2:]
        hide = hide | ~torch.ones(q, k, dtype=torch.bool, device=x.device).tril()
    return vendor_attr("torch_npu", "npu_scaled_masked_softmax")(x, hide.expand_as(x).contiguous(), scale, False)


def add_rms_norm(x, weight, eps, residual):
    # npu_add_rms_norm(x1, x2, gamma, epsilon) -> (y, rstd, x1 + x2)
    y, _rstd, summed = vendor_attr("torch_npu", "npu_add_rms_norm")(x, residual, weight.to(x.dtype), eps)
    return y, summed
