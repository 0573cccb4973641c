"""MetaX (CUDA-compatible, MACA) vendor kernels beyond stock torch, adapted to hal.ops."""
import torch

from hal_backends.fused import vendor


def swiglu(x):
    # MetaX vLLM _C: silu_and_mul(out, x), [gate | up]
    vendor("vllm._C")  # registers torch.ops._C
    out = x.new_empty(*x.shape[:-1], x.shape[-1] // 2)
    torch.ops._C.silu_and_mul(out, x.contiguous())
    return out



def add_rms_norm(x, weight, eps, residual):
    # MetaX vLLM _C: fused_add_rms_norm(input, residual, weight, epsilon), in place as in vLLM:
    # input <- rms_norm(input + residual) * weight, residual <- input + residual
    vendor("vllm._C")
    out, summed = x.contiguous().clone(), residual.contiguous().clone()
    torch.ops._C.fused_add_rms_norm(out, summed, weight.to(x.dtype), eps)
    return out, summed
