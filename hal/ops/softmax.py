"""``hal::softmax``: fused scale + mask (+ causal) softmax over the last dim."""
from typing import Optional

import torch
from torch import Tensor

from hal.ops import _checks, compositions as comp, host
from hal.ops._boundary import define
from hal.ops._dispatch import device_type, run


def _softmax(x: Tensor, mask: Optional[Tensor], causal: bool, scale: float) -> Tensor:
    return run("softmax", device_type(x), (x, mask, causal, scale), comp.softmax, host.softmax)


def _softmax_backward(grad: Tensor, out: Tensor, scale: float) -> Tensor:
    return run("softmax_backward", device_type(out), (grad, out, scale), comp.softmax_backward,
               host.softmax_backward)


SOFTMAX_BACKWARD = define("softmax_backward", _softmax_backward, fake=lambda grad, out, scale: torch.empty_like(out))


def _setup(ctx, inputs, output):
    ctx.save_for_backward(output)
    ctx.scale = inputs[3]


def _backward(ctx, grad):
    (out,) = ctx.saved_tensors
    return SOFTMAX_BACKWARD(grad, out, ctx.scale), None, None, None


SOFTMAX = define("softmax", _softmax, fake=lambda x, mask, causal, scale: torch.empty_like(x),
                 setup_context=_setup, backward=_backward, composition=comp.softmax)


def softmax(x: Tensor, mask: Optional[Tensor] = None, causal: bool = False, scale: float = 1.0) -> Tensor:
    """``softmax(scale * x + mask)`` over the last dim, in one pass over memory.

    :param x: scores (..., q, k), floating dtype.
    :param mask: None; a bool tensor where True means *take part* (torch SDPA's polarity;
        note torch_npu's masks mean the opposite); or a float tensor added to the scaled
        scores.  Broadcastable to ``x``.
    :param causal: also hide keys after the query: position (i, j) takes part only when
        j <= i (top-left aligned, as torch SDPA's ``is_causal``).
    :param scale: multiplies the scores before the mask is applied.
    :return: probabilities shaped like ``x``; a row with no key left comes out all zeros
        (never NaN).

    Example::

        p = hal.ops.softmax(q @ k.transpose(-1, -2), causal=True, scale=d ** -0.5)
    """
    _checks.floating_tensor("softmax", "x", x)
    if x.dim() < 1:
        raise ValueError("hal.ops.softmax: x is a 0-d tensor; it needs a last dimension")
    if causal and x.dim() < 2:
        raise ValueError(f"hal.ops.softmax: causal=True needs (..., q, k) scores, x has shape {tuple(x.shape)}")
    if mask is not None:
        _checks.tensor("softmax", "mask", mask)
        _checks.same_device("softmax", x, mask=mask)
        _checks.no_grad_needed("softmax", "mask", mask)
        if mask.dtype != torch.bool and not mask.is_floating_point():
            raise TypeError(f"hal.ops.softmax: mask has dtype {mask.dtype}; pass a bool mask (True = take part) "
                            "or a float mask added to the scores")
        try:
            ok = torch.broadcast_shapes(mask.shape, x.shape) == x.shape
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(f"hal.ops.softmax: mask of shape {tuple(mask.shape)} does not broadcast to x "
                             f"{tuple(x.shape)}")
    return SOFTMAX(x, mask, bool(causal), float(scale))
