"""Vendor kernels beyond stock torch of the CUDA-compatible stacks, adapted to hal.ops conventions.

One function per backend and op, named ``<backend>_<op>`` (MetaX, Kunlunxin); the ops stock
torch registers come from ``hal_backends.fused.torch_native``."""
import torch

from hal_backends.fused import vendor, vendor_attr


def metax_swiglu(x):
    # MetaX vLLM _C: silu_and_mul(out, x), [gate | up]
    vendor("vllm._C")  # registers torch.ops._C
    out = x.new_empty(*x.shape[:-1], x.shape[-1] // 2)
    torch.ops._C.silu_and_mul(out, x.contiguous())
    return out


def metax_add_rms_norm(x, weight, eps, residual):
    # MetaX vLLM _C: fused_add_rms_norm(input, residual, weight, epsilon), in place as in vLLM:
    # input <- rms_norm(input + residual) * weight, residual <- input + residual
    vendor("vllm._C")
    out, summed = x.contiguous().clone(), residual.contiguous().clone()
    torch.ops._C.fused_add_rms_norm(out, summed, weight.to(x.dtype), eps)
    return out, summed


def kunlunxin_swiglu(x):
    # kunlun_ops.swiglu(x=input, y=out): y is the output buffer
    out = x.new_empty(*x.shape[:-1], x.shape[-1] // 2)
    vendor_attr("kunlun_ops", "swiglu")(x=x.contiguous(), y=out)
    return out
