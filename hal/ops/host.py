"""Tensor-in, tensor-out layer over the C++ host kernels of ``hal._C``.

Each function takes torch tensors on any device, runs the kernel on host memory (a
device tensor is copied to the host and the result copied back) and returns tensors on
the input's device.  Kernels take float32, float16 and bfloat16; anything else raises
:class:`hal.ops.KernelUnsupported` (as does a missing ``hal._C``), so a caller can fall
back.  Non-contiguous inputs are made contiguous first.

Used by ``hal.ops`` (the CPU backend's fused kernels, and the last-resort fallback of
every other device) and by device emulators that want native speed on the host.
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import torch

from hal.ops._dispatch import KernelUnsupported

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_C = None
_C_ERROR: Optional[str] = None


def native():
    """The ``hal._C`` module; raises :class:`KernelUnsupported` naming why it is missing."""
    global _C, _C_ERROR
    if _C is None and _C_ERROR is None:
        try:
            import hal._C as mod
            _C = mod
        except ImportError as exc:
            _C_ERROR = (f"the C++ host kernels (hal._C) are not built ({exc}); reinstall hal with a "
                        "C++17 compiler and OpenMP available")
    if _C is None:
        raise KernelUnsupported(_C_ERROR)
    return _C


def available() -> bool:
    """True when the host kernels can run."""
    try:
        native()
    except KernelUnsupported:
        return False
    return True


def _check(op: str, *tensors: torch.Tensor) -> None:
    for t in tensors:
        if t.dtype not in DTYPES:
            raise KernelUnsupported(f"host kernel {op} takes float32, float16 or bfloat16, not {t.dtype}",
                                    per_dtype=True)


def _host(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu").contiguous()


def _np(t: torch.Tensor):
    """A numpy view sharing ``t``'s memory (bfloat16 as int16)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy()
    return t.numpy()


def _back(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return t if like.device.type == "cpu" else t.to(like.device)


# -- norms -----------------------------------------------------------------------------
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim: ``x / sqrt(mean(x**2) + eps) * weight``."""
    _check("rms_norm", x)
    C = native()
    xh, wh = _host(x), _host(weight).to(x.dtype)
    y = torch.empty_like(xh)
    if x.numel():
        C.rms_norm_fwd(_np(xh.view(-1, x.shape[-1])), _np(wh), _np(y.view(-1, x.shape[-1])), float(eps))
    return _back(y, x)


def add_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float,
                 residual: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(rms_norm(x + residual), x + residual)``."""
    _check("add_rms_norm", x)
    C = native()
    n = x.shape[-1]
    xh, wh, rh = _host(x), _host(weight).to(x.dtype), _host(residual).to(x.dtype)
    y, h = torch.empty_like(xh), torch.empty_like(xh)
    if x.numel():
        C.add_rms_norm_fwd(_np(xh.view(-1, n)), _np(rh.view(-1, n)), _np(wh), _np(y.view(-1, n)),
                           _np(h.view(-1, n)), float(eps))
    return _back(y, x), _back(h, x)


def rms_norm_backward(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                      eps: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """(grad_x, grad_weight) of :func:`rms_norm`."""
    _check("rms_norm_backward", x)
    C = native()
    n = x.shape[-1]
    xh, gh, wh = _host(x), _host(grad).to(x.dtype), _host(weight).to(x.dtype)
    dx = torch.empty_like(xh)
    dw = torch.zeros(n, dtype=torch.float32)
    if x.numel():
        C.rms_norm_bwd(_np(gh.view(-1, n)), _np(xh.view(-1, n)), _np(wh), _np(dx.view(-1, n)), dw.numpy(),
                       float(eps))
    return _back(dx, x), _back(dw.to(weight.dtype), weight)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], eps: float,
               residual: Optional[torch.Tensor] = None):
    """LayerNorm over the last dim; with ``residual``, of ``x + residual``.

    :return: ``out``, or ``(out, x + residual)`` when ``residual`` is given.
    """
    _check("layer_norm", x)
    C = native()
    n = x.shape[-1]
    xh, wh = _host(x), _host(weight).to(x.dtype)
    bh = None if bias is None else _host(bias).to(x.dtype)
    rh = None if residual is None else _host(residual).to(x.dtype)
    y = torch.empty_like(xh)
    h = None if rh is None else torch.empty_like(xh)
    if x.numel():
        C.layer_norm_fwd(_np(xh.view(-1, n)), None if rh is None else _np(rh.view(-1, n)), _np(wh),
                         None if bh is None else _np(bh), _np(y.view(-1, n)),
                         None if h is None else _np(h.view(-1, n)), float(eps))
    if residual is None:
        return _back(y, x)
    return _back(y, x), _back(h, x)


def layer_norm_backward(grad: torch.Tensor, grad_residual_out: Optional[torch.Tensor], x: torch.Tensor,
                        weight: torch.Tensor, eps: float):
    """(grad_x, grad_weight, grad_bias) of LayerNorm at ``x`` (the normalised input).

    ``grad_residual_out`` (the gradient reaching ``x + residual`` directly) is added to grad_x.
    """
    _check("layer_norm_backward", x)
    C = native()
    n = x.shape[-1]
    xh, gh, wh = _host(x), _host(grad).to(x.dtype), _host(weight).to(x.dtype)
    eh = None if grad_residual_out is None else _host(grad_residual_out).to(x.dtype)
    dx = torch.empty_like(xh)
    dw = torch.zeros(n, dtype=torch.float32)
    db = torch.zeros(n, dtype=torch.float32)
    if x.numel():
        C.layer_norm_bwd(_np(gh.view(-1, n)), None if eh is None else _np(eh.view(-1, n)), _np(xh.view(-1, n)),
                         _np(wh), _np(dx.view(-1, n)), dw.numpy(), db.numpy(), float(eps))
    return _back(dx, x), _back(dw.to(weight.dtype), weight), _back(db.to(weight.dtype), weight)


# -- rotary ----------------------------------------------------------------------------
def rotary_embedding(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False,
                     seq_dim: int = 1) -> torch.Tensor:
    """Rotary embedding; see :func:`hal.ops.rotary_embedding` for the layout."""
    _check("rotary_embedding", x)
    C = native()
    seq_dim = seq_dim % x.dim()
    seq = x.shape[seq_dim]
    pos_div = math.prod(x.shape[seq_dim + 1:-1])
    xh = _host(x)
    c = _host(cos[:seq]).float()
    s = _host(sin[:seq]).float()
    y = torch.empty_like(xh)
    if x.numel():
        d = x.shape[-1]
        C.rotary_fwd(_np(xh.view(-1, d)), c.numpy(), s.numpy(), _np(y.view(-1, d)), max(pos_div, 1), seq,
                     bool(interleaved), 1)
    return _back(y, x)


# -- activations -----------------------------------------------------------------------
def swiglu(x: torch.Tensor) -> torch.Tensor:
    """``silu(a) * b`` where ``a, b`` are the two halves of the last dim of ``x``."""
    _check("swiglu", x)
    C = native()
    xh = _host(x)
    n = x.shape[-1]
    y = torch.empty(*x.shape[:-1], n // 2, dtype=x.dtype)
    if x.numel():
        C.swiglu_fwd(_np(xh.view(-1, n)), _np(y.view(-1, n // 2)))
    return _back(y, x)


def swiglu_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """grad_x of :func:`swiglu`."""
    _check("swiglu_backward", x)
    C = native()
    n = x.shape[-1]
    xh, gh = _host(x), _host(grad).to(x.dtype)
    dx = torch.empty_like(xh)
    if x.numel():
        C.swiglu_bwd(_np(gh.view(-1, n // 2)), _np(xh.view(-1, n)), _np(dx.view(-1, n)))
    return _back(dx, x)


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GELU, exact (``approximate="none"``) or with the tanh approximation."""
    _check("gelu", x)
    C = native()
    xh = _host(x)
    y = torch.empty_like(xh)
    if x.numel():
        C.gelu_fwd(_np(xh.view(-1)), _np(y.view(-1)), approximate == "tanh")
    return _back(y, x)


def gelu_backward(grad: torch.Tensor, x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """grad_x of :func:`gelu`."""
    _check("gelu_backward", x)
    C = native()
    xh, gh = _host(x), _host(grad).to(x.dtype)
    dx = torch.empty_like(xh)
    if x.numel():
        C.gelu_bwd(_np(gh.view(-1)), _np(xh.view(-1)), _np(dx.view(-1)), approximate == "tanh")
    return _back(dx, x)


# -- softmax ---------------------------------------------------------------------------
def _tiled_mask(mask: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """The mask as a contiguous (mask_rows, cols) buffer whose rows tile x's rows."""
    m = mask.reshape((1,) * (len(shape) - mask.dim()) + tuple(mask.shape))
    j = 0  # leading dims where the mask broadcasts can be tiled instead of materialised
    while j < len(shape) - 1 and m.shape[j] == 1:
        j += 1
    if all(m.shape[i] == shape[i] for i in range(j, len(shape))):
        return m.reshape(-1, shape[-1]).contiguous()
    return m.expand(*shape).reshape(-1, shape[-1]).contiguous()


def softmax(x: torch.Tensor, mask: Optional[torch.Tensor] = None, causal: bool = False,
            scale: float = 1.0) -> torch.Tensor:
    """``softmax(scale * x + mask)`` over the last dim; see :func:`hal.ops.softmax`."""
    _check("softmax", x)
    C = native()
    xh = _host(x)
    y = torch.empty_like(xh)
    if not x.numel():
        return _back(y, x)
    cols = x.shape[-1]
    m = None
    if mask is not None:
        mh = _host(mask)
        mh = mh if mh.dtype == torch.bool else mh.float()
        m = _tiled_mask(mh, x.shape).numpy()
    q_len = x.shape[-2] if x.dim() >= 2 else 1
    C.softmax_fwd(_np(xh.view(-1, cols)), m, _np(y.view(-1, cols)), float(scale), bool(causal), q_len)
    return _back(y, x)


def softmax_backward(grad: torch.Tensor, out: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """grad_x of :func:`softmax` from its output."""
    _check("softmax_backward", out)
    C = native()
    yh, gh = _host(out), _host(grad).to(out.dtype)
    dx = torch.empty_like(yh)
    if out.numel():
        cols = out.shape[-1]
        C.softmax_bwd(_np(gh.view(-1, cols)), _np(yh.view(-1, cols)), _np(dx.view(-1, cols)), float(scale))
    return _back(dx, out)


# -- optimizer -------------------------------------------------------------------------
def fused_adamw_(params: List[torch.Tensor], grads: List[torch.Tensor], exp_avgs: List[torch.Tensor],
                 exp_avg_sqs: List[torch.Tensor], lr: float, beta1: float, beta2: float, eps: float,
                 weight_decay: float, step: float, maximize: bool = False) -> None:
    """One AdamW step in place (float32/float16/bfloat16).

    Device or non-contiguous tensors are staged through contiguous host copies and the
    results copied back in place, so the host kernel serves any device as a fallback.
    """
    groups = (params, grads, exp_avgs, exp_avg_sqs)
    for ts in groups:
        for t in ts:
            _check("fused_adamw", t)
    staged = [[t if (t.device.type == "cpu" and t.is_contiguous()) else t.detach().to("cpu").contiguous()
               for t in ts] for ts in groups]
    C = native()
    C.adamw_step([_np(p.detach()) for p in staged[0]], [_np(g.detach()) for g in staged[1]],
                 [_np(m) for m in staged[2]], [_np(v) for v in staged[3]], float(lr), float(beta1),
                 float(beta2), float(eps), float(weight_decay), float(step), bool(maximize))
    for orig, host_copy in zip((params, exp_avgs, exp_avg_sqs), (staged[0], staged[2], staged[3])):
        for t, h in zip(orig, host_copy):
            if h is not t:
                with torch.no_grad():
                    t.copy_(h)


# -- vision ----------------------------------------------------------------------------
def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Kept box indices (int64) by decreasing score, greedy, IoU > threshold suppressed."""
    C = native()
    keep = C.nms(boxes.detach().to("cpu", torch.float64).numpy(), scores.detach().to("cpu", torch.float64).numpy(),
                 float(iou_threshold))
    return _back(torch.from_numpy(keep), boxes)


def roi_align(input: torch.Tensor, boxes: torch.Tensor, spatial_scale: float, pooled_height: int,
              pooled_width: int, sampling_ratio: int, aligned: bool) -> torch.Tensor:
    """RoIAlign of ``input`` (N, C, H, W) over ``boxes`` (K, 5)."""
    _check("roi_align", input)
    C = native()
    xh = _host(input)
    bh = _host(boxes).float()
    out = torch.empty(boxes.shape[0], input.shape[1], pooled_height, pooled_width, dtype=input.dtype)
    if out.numel():
        C.roi_align_fwd(_np(xh), bh.numpy(), _np(out), float(spatial_scale), int(sampling_ratio), bool(aligned))
    return _back(out, input)


def roi_align_backward(grad: torch.Tensor, boxes: torch.Tensor, spatial_scale: float, pooled_height: int,
                       pooled_width: int, sampling_ratio: int, aligned: bool,
                       input_shape: Sequence[int]) -> torch.Tensor:
    """grad_input of :func:`roi_align` (in ``grad``'s dtype)."""
    _check("roi_align_backward", grad)
    C = native()
    gh = _host(grad)
    bh = _host(boxes).float()
    gi = torch.zeros(*input_shape, dtype=torch.float32)
    if grad.numel() and gi.numel():
        C.roi_align_bwd(_np(gh), bh.numpy(), gi.numpy(), float(spatial_scale), int(sampling_ratio), bool(aligned))
    return _back(gi.to(grad.dtype), grad)
