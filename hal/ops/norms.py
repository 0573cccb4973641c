"""``hal::rms_norm``, ``hal::layer_norm`` and ``hal::add_layer_norm`` (residual add fused)."""
from typing import Optional, Tuple

import torch
from torch import Tensor

from hal.ops import _checks, compositions as comp, host
from hal.ops._boundary import define
from hal.ops._dispatch import device_type, run


# -- rms_norm --------------------------------------------------------------------------
def _rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return run("rms_norm", device_type(x), (x, weight, eps), comp.rms_norm, host.rms_norm)


def _rms_norm_backward(grad: Tensor, x: Tensor, weight: Tensor, eps: float) -> Tuple[Tensor, Tensor]:
    return run("rms_norm_backward", device_type(x), (grad, x, weight, eps), comp.rms_norm_backward,
               host.rms_norm_backward)


RMS_NORM_BACKWARD = define("rms_norm_backward", _rms_norm_backward,
                           fake=lambda grad, x, weight, eps: (torch.empty_like(x), torch.empty_like(weight)))


def _rms_setup(ctx, inputs, output):
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def _rms_backward(ctx, grad):
    x, weight = ctx.saved_tensors
    dx, dw = RMS_NORM_BACKWARD(grad, x, weight, ctx.eps)
    return dx, dw, None


RMS_NORM = define("rms_norm", _rms_norm, fake=lambda x, weight, eps: torch.empty_like(x),
                  setup_context=_rms_setup, backward=_rms_backward, composition=comp.rms_norm)


def _add_rms_norm(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> Tuple[Tensor, Tensor]:
    return run("add_rms_norm", device_type(x), (x, weight, eps, residual), comp.add_rms_norm, host.add_rms_norm)


def _add_rms_setup(ctx, inputs, output):
    x, residual, weight, eps = inputs
    ctx.save_for_backward(output[1], weight)  # the normalised input x + residual
    ctx.eps = eps


def _add_rms_backward(ctx, grad_out, grad_sum):
    h, weight = ctx.saved_tensors
    dh, dw = RMS_NORM_BACKWARD(grad_out, h, weight, ctx.eps)
    if grad_sum is not None:
        dh = dh + grad_sum
    return dh, dh, dw, None


ADD_RMS_NORM = define("add_rms_norm", _add_rms_norm,
                      fake=lambda x, residual, weight, eps: (torch.empty_like(x), torch.empty_like(x)),
                      setup_context=_add_rms_setup, backward=_add_rms_backward,
                      composition=lambda x, residual, weight, eps: comp.add_rms_norm(x, weight, eps, residual))


def rms_norm(x: Tensor, weight: Optional[Tensor] = None, eps: float = 1e-6, residual: Optional[Tensor] = None):
    """RMSNorm over the last dimension: ``x / sqrt(mean(x**2, -1) + eps) * weight``.

    Same result as ``torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)``;
    float16/bfloat16 inputs are normalised in float32 and rounded once.  With
    ``residual`` it returns ``(rms_norm(x + residual), x + residual)``: the fused add +
    norm of pre-norm (LLaMA) blocks, as torch_npu ``npu_add_rms_norm`` and vLLM
    ``fused_add_rms_norm``.

    :param x: input (..., hidden), any floating dtype, any device.
    :param weight: scale of shape (hidden,), or None for ones.
    :param eps: added to the mean square before the square root.
    :param residual: tensor shaped and typed like ``x``, or None.
    :return: a tensor shaped and typed like ``x``, or the pair when ``residual`` is given.

    Example::

        y = hal.ops.rms_norm(h, model.norm.weight, eps=1e-5)
        y, resid = hal.ops.rms_norm(attn_out, ln.weight, 1e-5, residual=resid)
    """
    if weight is None:
        _checks.floating_tensor("rms_norm", "x", x)
        if x.dim() < 1:
            raise ValueError("hal.ops.rms_norm: x is a 0-d tensor; it needs a last dimension to normalise")
        weight = torch.ones(x.shape[-1], dtype=x.dtype, device=x.device)
    _checks.norm_params("rms_norm", x, weight, None, residual)
    if residual is None:
        return RMS_NORM(x, weight, float(eps))
    _checks.tensor("rms_norm", "residual", residual)
    if residual.shape != x.shape or residual.dtype != x.dtype:
        raise ValueError(f"hal.ops.rms_norm: residual is {tuple(residual.shape)} {residual.dtype} but x is "
                         f"{tuple(x.shape)} {x.dtype}; pass a residual of the same shape and dtype")
    return tuple(ADD_RMS_NORM(x, residual, weight, float(eps)))


# -- layer_norm ------------------------------------------------------------------------
def _layer_norm(x: Tensor, weight: Tensor, bias: Optional[Tensor], eps: float) -> Tensor:
    return run("layer_norm", device_type(x), (x, weight, bias, eps), comp.layer_norm, host.layer_norm)


def _add_layer_norm(x: Tensor, residual: Tensor, weight: Tensor, bias: Optional[Tensor],
                    eps: float) -> Tuple[Tensor, Tensor]:
    return run("add_layer_norm", device_type(x), (x, weight, bias, eps, residual), comp.layer_norm,
               host.layer_norm)


def _layer_norm_backward(grad: Tensor, grad_residual_out: Optional[Tensor], x: Tensor, weight: Tensor,
                         eps: float) -> Tuple[Tensor, Tensor, Tensor]:
    return run("layer_norm_backward", device_type(x), (grad, grad_residual_out, x, weight, eps),
               comp.layer_norm_backward, host.layer_norm_backward)


LAYER_NORM_BACKWARD = define(
    "layer_norm_backward", _layer_norm_backward,
    fake=lambda grad, grad_residual_out, x, weight, eps: (torch.empty_like(x), torch.empty_like(weight),
                                                         torch.empty_like(weight)))


def _ln_setup(ctx, inputs, output):
    x, weight, bias, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps, ctx.has_bias = eps, bias is not None


def _ln_backward(ctx, grad):
    x, weight = ctx.saved_tensors
    dx, dw, db = LAYER_NORM_BACKWARD(grad, None, x, weight, ctx.eps)
    return dx, dw, (db if ctx.has_bias else None), None


LAYER_NORM = define("layer_norm", _layer_norm, fake=lambda x, weight, bias, eps: torch.empty_like(x),
                    setup_context=_ln_setup, backward=_ln_backward, composition=comp.layer_norm)


def _add_ln_setup(ctx, inputs, output):
    x, residual, weight, bias, eps = inputs
    ctx.save_for_backward(output[1], weight)  # the normalised input x + residual
    ctx.eps, ctx.has_bias = eps, bias is not None


def _add_ln_backward(ctx, grad_out, grad_sum):
    h, weight = ctx.saved_tensors
    dh, dw, db = LAYER_NORM_BACKWARD(grad_out, grad_sum, h, weight, ctx.eps)
    return dh, dh, dw, (db if ctx.has_bias else None), None


ADD_LAYER_NORM = define("add_layer_norm", _add_layer_norm,
                        fake=lambda x, residual, weight, bias, eps: (torch.empty_like(x), torch.empty_like(x)),
                        setup_context=_add_ln_setup, backward=_add_ln_backward,
                        composition=lambda x, residual, weight, bias, eps: comp.layer_norm(x, weight, bias, eps,
                                                                                           residual))


def layer_norm(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, eps: float = 1e-5,
               residual: Optional[Tensor] = None):
    """LayerNorm over the last dimension, optionally of ``x + residual`` (pre-norm blocks).

    Without ``residual`` it returns ``out`` like
    ``torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)``.  With
    ``residual`` it returns the pair ``(out, x + residual)``: the normalised sum and the
    sum itself, which a pre-norm transformer carries to the next block as its residual
    stream (flash-attn's ``prenorm=True``, torch_npu's ``npu_add_layer_norm``).

    :param x: input (..., hidden), floating dtype.
    :param weight: scale (hidden,).
    :param bias: shift (hidden,) or None.
    :param eps: added to the variance.
    :param residual: tensor shaped and typed like ``x``, or None.

    Example::

        h, resid = hal.ops.layer_norm(attn_out, ln.weight, ln.bias, 1e-5, residual=resid)
    """
    _checks.norm_params("layer_norm", x, weight, bias, residual)
    if residual is None:
        return LAYER_NORM(x, weight, bias, float(eps))
    _checks.tensor("layer_norm", "residual", residual)
    if residual.shape != x.shape or residual.dtype != x.dtype:
        raise ValueError(f"hal.ops.layer_norm: residual is {tuple(residual.shape)} {residual.dtype} but x is "
                         f"{tuple(x.shape)} {x.dtype}; pass a residual of the same shape and dtype")
    return tuple(ADD_LAYER_NORM(x, residual, weight, bias, float(eps)))
