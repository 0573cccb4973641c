"""Kernels every torch device build registers natively (aten ops), plus torchvision's and
flash-attn's where installed.  Used by cuda, the CUDA-compatible stacks, musa and mlu."""
import torch
import torch.nn.functional as F

from hal.ops import KernelUnsupported
from hal.ops.compositions import as_dtype
from hal_backends.fused import vendor_attr


def rms_norm(x, weight, eps):
    fn = getattr(F, "rms_norm", None)
    if fn is None:
        raise KernelUnsupported("torch.nn.functional.rms_norm needs torch >= 2.4")
    return fn(x, (x.shape[-1],), as_dtype(weight, x.dtype), eps)


def layer_norm(x, weight, bias, eps):
    # torch.layer_norm: F.layer_norm less its __torch_function__ test, which hal.ops' entry has made
    # (a subclass takes the custom op); ~0.3 us of a decode-sized call
    dtype = x.dtype
    if weight.dtype is not dtype or (bias is not None and bias.dtype is not dtype):
        weight, bias = as_dtype(weight, dtype), as_dtype(bias, dtype)
    return torch.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def layer_norm_backward(grad, grad_residual_out, x, weight, eps):
    """(grad_x, grad_weight, grad_bias) from ATen's native_layer_norm_backward; the row statistics
    are recomputed with native_layer_norm (hal's backward signature carries none)."""
    n = x.shape[-1]
    w = as_dtype(weight, x.dtype)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [n], w, None, eps)
    dx, dw, db = torch.ops.aten.native_layer_norm_backward(as_dtype(grad, x.dtype), x, [n], mean, rstd, w,
                                                           torch.zeros_like(w), [True, True, True])
    if grad_residual_out is not None:
        dx = dx + as_dtype(grad_residual_out, dx.dtype)
    return dx, as_dtype(dw, weight.dtype), as_dtype(db, weight.dtype)


def gelu(x, approximate):
    return F.gelu(x, approximate=approximate)


# torch ops with autograd: an eager call that needs a gradient runs them under torch's autograd
for _fn in (rms_norm, layer_norm, gelu):
    _fn.differentiable = True


def fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, lr, beta1, beta2, eps, weight_decay, step, maximize):
    """aten::_fused_adamw_ (what torch.optim.AdamW(fused=True) calls); steps as tensors."""
    fn = getattr(torch, "_fused_adamw_", None)
    if fn is None:
        raise KernelUnsupported("torch._fused_adamw_ is missing (torch < 2.1)")
    step_t = torch.tensor(float(step), dtype=torch.float32, device=params[0].device)
    fn(params, grads, exp_avgs, exp_avg_sqs, [], [step_t] * len(params), lr=lr, beta1=beta1, beta2=beta2,
       weight_decay=weight_decay, eps=eps, amsgrad=False, maximize=maximize)


def nms(boxes, scores, iou_threshold):
    return vendor_attr("torchvision.ops", "nms")(boxes, scores, iou_threshold)


def roi_align(input, boxes, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
    fn = vendor_attr("torchvision.ops", "roi_align")
    return fn(input, boxes, (pooled_height, pooled_width), spatial_scale, sampling_ratio, aligned)


def flash_rotary_embedding(x, cos, sin, interleaved, seq_dim):
    """flash_attn.layers.rotary.apply_rotary_emb: x (batch, seq, heads, head_dim), cos/sin
    (seq, rotary_dim / 2) -- hal's own convention with seq_dim=1."""
    if x.dim() != 4 or seq_dim != 1:
        raise KernelUnsupported("flash-attn rotary takes (batch, seq, heads, head_dim) only (seq_dim=1)")
    fn = vendor_attr("flash_attn.layers.rotary", "apply_rotary_emb")
    return fn(x, as_dtype(cos, x.dtype), as_dtype(sin, x.dtype), interleaved=interleaved)


def flash_add_layer_norm(x, weight, bias, eps, residual):
    """flash_attn's Triton layer_norm_fn with prenorm=True returns (out, x + residual)."""
    fn = vendor_attr("flash_attn.ops.triton.layer_norm", "layer_norm_fn")
    out, summed = fn(x, weight, bias, residual=residual, eps=eps, prenorm=True)
    return out, summed


def flash_add_rms_norm(x, weight, eps, residual):
    """flash_attn's Triton rms_norm_fn with prenorm=True returns (out, x + residual)."""
    fn = vendor_attr("flash_attn.ops.triton.layer_norm", "rms_norm_fn")
    out, summed = fn(x, weight, None, residual=residual, eps=eps, prenorm=True)
    return out, summed
