"""Kunlunxin (CUDA-compatible) vendor kernels beyond stock torch, adapted to hal.ops."""
from hal_backends.fused import vendor_attr


def swiglu(x):
    # kunlun_ops.swiglu(x=input, y=out): y is the output buffer
    out = x.new_empty(*x.shape[:-1], x.shape[-1] // 2)
    vendor_attr("kunlun_ops", "swiglu")(x=x.contiguous(), y=out)
    return out

