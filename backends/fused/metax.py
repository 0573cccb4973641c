"""MetaX (CUDA-compatible, MACA) vendor kernels beyond stock torch, adapted to hal.ops."""
import torch

from hal_backends.fused import vendor


def swiglu(x):
    # MetaX vLLM _C: silu_and_mul(out, x), [gate | up]
    vendor("vllm._C")  # registers torch.ops._C
    out = x.new_empty(*x.shape[:-1], x.shape[-1] // 2)
    torch.ops._C.silu_and_mul(out, x.contiguous())
    return out

