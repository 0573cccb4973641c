"""Portable fused operators: one call per fused kernel, as fast as the device allows.

Each operator is a ``torch.library`` custom op in the ``hal`` namespace
(``torch.ops.hal.rms_norm``, ...) with autograd and a fake implementation, so
``torch.compile``, ``torch.export``, FakeTensor and dispatch modes see one op; plain eager
calls skip the custom op's Python layers and run the same implementation directly
(docs/ops.md, "Cost per call").  Per call, it runs the backend's own
fused kernel (declared by its plugin through the ``hal_fused_kernels`` hook; on the CPU,
the C++ host kernels of ``hal._C``), else a composition of standard torch ops on the
device, else the C++ host kernel through host memory.  Fallbacks are counted
(:func:`stats`) and warned once per op (:class:`FallbackWarning`)::

    import hal.ops
    y = hal.ops.rms_norm(x, w, eps=1e-6)
    q = hal.ops.rotary_embedding(q, cos, sin)            # (batch, seq, heads, head_dim)
    h = hal.ops.swiglu(gate_up)
    p = hal.ops.softmax(scores, causal=True, scale=0.125)
    print(hal.ops.stats())
"""
from hal.ops._boundary import native_entry
from hal.ops._dispatch import (FallbackWarning, KernelUnsupported, declared_kernels, reset_stats, stats,
                               use_path)
from hal.ops.activations import gelu, swiglu
from hal.ops.norms import layer_norm, rms_norm
from hal.ops.optimizer import fused_adamw_
from hal.ops.rotary import rotary_embedding
from hal.ops.softmax import softmax
from hal.ops.vision import nms, roi_align

#: the public operators, as ``torch.ops.hal`` names them
OPS = ("rms_norm", "add_rms_norm", "layer_norm", "add_layer_norm", "rotary_embedding", "swiglu", "gelu", "softmax",
       "fused_adamw_", "nms", "roi_align")

__all__ = ["FallbackWarning", "KernelUnsupported", "OPS", "declared_kernels", "fused_adamw_", "gelu",
           "layer_norm", "native_entry", "nms", "reset_stats", "rms_norm", "roi_align", "rotary_embedding",
           "softmax", "stats", "swiglu", "use_path"]
