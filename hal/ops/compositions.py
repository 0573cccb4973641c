"""The on-device path of ``hal.ops``: each operator as a composition of standard torch ops.

These run on any device torch supports, in the input's dtype, as the model code they replace
does: one torch op per step where torch has it (``F.rms_norm``, ``F.layer_norm``, ``F.gelu``,
``torch.softmax``, ``F.silu``, ``torch.addcmul``: torch computes float16/bfloat16 in float32 inside
each and rounds its output once), so a float16/bfloat16 result is rounded once per op, at most twice
in all (swiglu's product, rotary's two terms), and never costs the float32 copies of its inputs.
The fused and host kernels compute in float32 and round once.  Backward functions use
closed-form gradients; they are what ``hal.ops`` runs where neither the device nor the host has a
fused kernel.
"""
from __future__ import annotations

import math
from typing import List, Sequence

import torch
import torch.nn.functional as F

_LOW = (torch.float16, torch.bfloat16)


def _up(t: torch.Tensor) -> torch.Tensor:
    return t.float() if t.dtype in _LOW else t


def as_dtype(t, dtype: torch.dtype):
    """``t`` in ``dtype``: ``t`` itself when it is in it already (or None), else ``t.to(dtype)``.

    ``Tensor.to`` parses its overloads before it finds nothing to do: ~1.5 us a call, as much as a
    decode-sized kernel."""
    return t if t is None or t.dtype == dtype else t.to(dtype)


# -- norms -----------------------------------------------------------------------------
def rms_norm(x, weight, eps):
    if weight.dtype == x.dtype and hasattr(F, "rms_norm"):  # one op (torch >= 2.4), the same bytes
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    xf = _up(x)
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return as_dtype(xf * rstd * as_dtype(weight, xf.dtype), x.dtype)


def add_rms_norm(x, weight, eps, residual):
    h = x + residual
    return rms_norm(h, weight, eps), h


def rms_norm_backward(grad, x, weight, eps):
    xf = _up(x)
    gf, wf = as_dtype(_up(grad), xf.dtype), as_dtype(weight, xf.dtype)
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    g = gf * wf
    dx = rstd * (g - xf * rstd.pow(2) * (g * xf).mean(-1, keepdim=True))
    dw = (gf * xf * rstd).reshape(-1, x.shape[-1]).sum(0)
    return as_dtype(dx, x.dtype), as_dtype(dw, weight.dtype)


def layer_norm(x, weight, bias, eps, residual=None):
    h = x if residual is None else x + residual
    # torch's layer_norm computes float16/bfloat16 rows in float32 and rounds once itself
    y = F.layer_norm(h, (x.shape[-1],), as_dtype(weight, h.dtype), as_dtype(bias, h.dtype), eps)
    return y if residual is None else (y, h)


def layer_norm_backward(grad, grad_residual_out, x, weight, eps):
    xf = _up(x)
    gf, wf = as_dtype(grad, xf.dtype), as_dtype(weight, xf.dtype)
    mean = xf.mean(-1, keepdim=True)
    rstd = torch.rsqrt((xf - mean).pow(2).mean(-1, keepdim=True) + eps)
    xhat = (xf - mean) * rstd
    g = gf * wf
    dx = rstd * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    if grad_residual_out is not None:
        dx = dx + as_dtype(grad_residual_out, xf.dtype)
    n = x.shape[-1]
    dw = as_dtype((gf * xhat).reshape(-1, n).sum(0), weight.dtype)
    db = as_dtype(gf.reshape(-1, n).sum(0), weight.dtype)
    return as_dtype(dx, x.dtype), dw, db


# -- rotary ----------------------------------------------------------------------------
def rotary_embedding(x, cos, sin, interleaved=False, seq_dim=1):
    seq_dim = seq_dim % x.dim()
    seq, half = x.shape[seq_dim], cos.shape[-1]
    shape = (seq,) + (1,) * (x.dim() - seq_dim - 2) + (half,)
    c = as_dtype(cos[:seq], x.dtype).reshape(shape)
    s = as_dtype(sin[:seq], x.dtype).reshape(shape)
    if interleaved:
        x1, x2 = x[..., 0:2 * half:2], x[..., 1:2 * half:2]
    else:
        x1, x2 = x[..., :half], x[..., half:2 * half]
    # x1*c rounds once, addcmul adds -x2*s to it in float32 and rounds once more
    r1, r2 = torch.addcmul(x1 * c, x2, s, value=-1), torch.addcmul(x2 * c, x1, s)
    rot = torch.stack((r1, r2), dim=-1).flatten(-2) if interleaved else torch.cat((r1, r2), dim=-1)
    return rot if 2 * half == x.shape[-1] else torch.cat((rot, x[..., 2 * half:]), dim=-1)


# -- activations -----------------------------------------------------------------------
def swiglu(x):
    a, b = x.chunk(2, dim=-1)
    return F.silu(a) * b


def swiglu_backward(grad, x):
    a, b = _up(x).chunk(2, dim=-1)
    g = as_dtype(grad, a.dtype)
    s = torch.sigmoid(a)
    return as_dtype(torch.cat((g * b * s * (1 + a * (1 - s)), g * a * s), dim=-1), x.dtype)


def gelu(x, approximate="none"):
    return F.gelu(x, approximate=approximate)


def gelu_backward(grad, x, approximate="none"):
    xf = _up(x)
    return as_dtype(torch.ops.aten.gelu_backward(as_dtype(grad, xf.dtype), xf, approximate=approximate), x.dtype)


# -- softmax ---------------------------------------------------------------------------
def softmax(x, mask=None, causal=False, scale=1.0):
    v = x if scale == 1.0 else x * scale  # exact for a power-of-two scale, else one rounding
    if mask is None and not causal:  # no row can be empty
        return torch.softmax(v, dim=-1)
    if mask is not None:
        v = v.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else v + mask.to(v.dtype)
    if causal:
        q, k = v.shape[-2], v.shape[-1]
        keep = torch.ones(q, k, dtype=torch.bool, device=v.device).tril()
        v = v.masked_fill(~keep, float("-inf"))
    empty = torch.isneginf(v).all(-1, keepdim=True)
    return torch.softmax(v, dim=-1).masked_fill(empty, 0.0)


def softmax_backward(grad, out, scale=1.0):
    y = _up(out)
    g = as_dtype(grad, y.dtype)
    return as_dtype(scale * y * (g - (g * y).sum(-1, keepdim=True)), out.dtype)


# -- optimizer -------------------------------------------------------------------------
def fused_adamw_(params: List[torch.Tensor], grads, exp_avgs, exp_avg_sqs, lr, beta1, beta2, eps,
                 weight_decay, step, maximize=False) -> None:
    """AdamW with torch's foreach ops, in torch.optim.AdamW's order of operations."""
    if not params:
        return
    if maximize:
        grads = torch._foreach_neg(grads)
    torch._foreach_mul_(params, 1 - lr * weight_decay)
    torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
    step_size = lr / (1 - beta1 ** step)
    bias_correction2_sqrt = (1 - beta2 ** step) ** 0.5
    denom = torch._foreach_sqrt(exp_avg_sqs)
    torch._foreach_div_(denom, bias_correction2_sqrt)
    torch._foreach_add_(denom, eps)
    torch._foreach_addcdiv_(params, exp_avgs, denom, -step_size)


# -- vision ----------------------------------------------------------------------------
def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    lt = torch.maximum(a[:, None, :2], b[None, :, :2])
    rb = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (area_a[:, None] + area_b[None, :] - inter)


def nms(boxes, scores, iou_threshold):
    if boxes.shape[0] == 0:
        return torch.empty(0, dtype=torch.long, device=boxes.device)
    order = torch.sort(scores, descending=True, stable=True).indices
    over = (box_iou(boxes[order], boxes[order]) > iou_threshold).cpu()
    n = order.numel()
    alive = torch.ones(n, dtype=torch.bool)
    for i in range(n):  # greedy: a kept box suppresses the later ones it overlaps
        if alive[i]:
            alive[i + 1:] &= ~over[i, i + 1:]
    return order[alive.to(order.device)]


def _roi_geometry(roi, spatial_scale, ph, pw, sampling_ratio, aligned):
    off = 0.5 if aligned else 0.0
    sw, sh = roi[1] * spatial_scale - off, roi[2] * spatial_scale - off
    rw, rh = roi[3] * spatial_scale - off - sw, roi[4] * spatial_scale - off - sh
    if not aligned:
        rw, rh = max(rw, 1.0), max(rh, 1.0)
    gh = sampling_ratio if sampling_ratio > 0 else math.ceil(rh / ph)
    gw = sampling_ratio if sampling_ratio > 0 else math.ceil(rw / pw)
    return int(roi[0]), sh, sw, rh / ph, rw / pw, int(gh), int(gw)


def _sample_axis(start, bin_size, pooled, grid, size, device, dtype):
    """Low/high indices and weights along one axis, with the validity of each sample."""
    p = torch.arange(pooled, device=device, dtype=dtype)[:, None]
    i = torch.arange(grid, device=device, dtype=dtype)[None, :]
    c = (start + p * bin_size + (i + 0.5) * bin_size / grid).reshape(-1)
    valid = (c >= -1.0) & (c <= size)
    c = c.clamp(min=0)
    low = c.floor().long()
    at_edge = low >= size - 1
    low = torch.where(at_edge, torch.full_like(low, size - 1), low)
    high = torch.where(at_edge, low, low + 1)
    c = torch.where(at_edge, low.to(dtype), c)
    frac = c - low.to(dtype)
    return low, high, 1 - frac, frac, valid


def roi_align(input, boxes, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
    K, (_, C, H, W) = boxes.shape[0], input.shape
    out = input.new_zeros(K, C, pooled_height, pooled_width)
    dt = _up(input).dtype
    for k, roi in enumerate(boxes.detach().double().cpu().tolist()):
        b, sh, sw, bh, bw, gh, gw = _roi_geometry(roi, spatial_scale, pooled_height, pooled_width,
                                                  sampling_ratio, aligned)
        if gh * gw == 0:
            continue
        yl, yh, hy, ly, vy = _sample_axis(sh, bh, pooled_height, gh, H, input.device, dt)
        xl, xh, hx, lx, vx = _sample_axis(sw, bw, pooled_width, gw, W, input.device, dt)
        img = _up(input[b])  # (C, H, W)
        v = (img[:, yl][:, :, xl] * (hy[:, None] * hx[None, :]) + img[:, yl][:, :, xh] * (hy[:, None] * lx[None, :])
             + img[:, yh][:, :, xl] * (ly[:, None] * hx[None, :]) + img[:, yh][:, :, xh] * (ly[:, None] * lx[None, :]))
        v = v * (vy[:, None] & vx[None, :])
        v = v.reshape(C, pooled_height, gh, pooled_width, gw).sum((2, 4)) / max(gh * gw, 1)
        out[k] = v.to(input.dtype)
    return out


def roi_align_backward(grad, boxes, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned,
                       input_shape: Sequence[int]):
    """The adjoint of :func:`roi_align`: each bin's gradient spread over its samples' four
    bilinear neighbours (index_add_, so overlapping boxes accumulate)."""
    N, C, H, W = (int(s) for s in input_shape)
    dt = _up(grad).dtype
    gi = torch.zeros(N, C, H * W, dtype=dt, device=grad.device)
    for k, roi in enumerate(boxes.detach().double().cpu().tolist()):
        b, sh, sw, bh, bw, gh, gw = _roi_geometry(roi, spatial_scale, pooled_height, pooled_width,
                                                  sampling_ratio, aligned)
        if gh * gw == 0:
            continue
        yl, yh, hy, ly, vy = _sample_axis(sh, bh, pooled_height, gh, H, grad.device, dt)
        xl, xh, hx, lx, vx = _sample_axis(sw, bw, pooled_width, gw, W, grad.device, dt)
        g = grad[k].to(dt) / (gh * gw)  # (C, PH, PW) -> one value per sample
        g = g.repeat_interleave(gh, 1).repeat_interleave(gw, 2) * (vy[:, None] & vx[None, :])
        for yi, wy in ((yl, hy), (yh, ly)):
            for xi, wx in ((xl, hx), (xh, lx)):
                idx = (yi[:, None] * W + xi[None, :]).reshape(-1)
                gi[b].index_add_(1, idx, (g * (wy[:, None] * wx[None, :])).reshape(C, -1))
    return gi.reshape(N, C, H, W).to(grad.dtype)
