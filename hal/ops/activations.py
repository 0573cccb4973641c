"""``hal::swiglu`` and ``hal::gelu``."""
import torch
from torch import Tensor

from hal.ops import _checks, compositions as comp, host
from hal.ops._dispatch import run

APPROXIMATIONS = ("none", "tanh")


@torch.library.custom_op("hal::swiglu", mutates_args=())
def _swiglu(x: Tensor) -> Tensor:
    return run("swiglu", x.device.type, (x,), comp.swiglu, host.swiglu)


@_swiglu.register_fake
def _(x):
    return x.new_empty(*x.shape[:-1], x.shape[-1] // 2)


@torch.library.custom_op("hal::swiglu_backward", mutates_args=())
def _swiglu_backward(grad: Tensor, x: Tensor) -> Tensor:
    return run("swiglu_backward", x.device.type, (grad, x), comp.swiglu_backward, host.swiglu_backward)


@_swiglu_backward.register_fake
def _(grad, x):
    return torch.empty_like(x)


def _sw_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _sw_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return torch.ops.hal.swiglu_backward(grad, x)


_swiglu.register_autograd(_sw_backward, setup_context=_sw_setup)


def swiglu(x: Tensor) -> Tensor:
    """SwiGLU: ``silu(a) * b`` where ``a, b = x.chunk(2, dim=-1)`` ([gate | up] halves).

    The one-tensor convention of vLLM ``silu_and_mul``, torch_npu ``npu_swiglu`` and
    torch_musa ``swish_glu``; a model with separate gate and up projections passes
    ``torch.cat((gate, up), -1)`` or, better, one fused projection.

    Example::

        h = hal.ops.swiglu(self.gate_up_proj(x))    # (..., 2 * inter) -> (..., inter)
    """
    _checks.tensor("swiglu", "x", x)
    _checks.floating("swiglu", "x", x)
    if x.dim() < 1 or x.shape[-1] % 2:
        raise ValueError(f"hal.ops.swiglu: x has shape {tuple(x.shape)}; its last dim must be even "
                         "([gate | up] halves)")
    return torch.ops.hal.swiglu(x)


@torch.library.custom_op("hal::gelu", mutates_args=())
def _gelu(x: Tensor, approximate: str) -> Tensor:
    return run("gelu", x.device.type, (x, approximate), comp.gelu, host.gelu)


@_gelu.register_fake
def _(x, approximate):
    return torch.empty_like(x)


@torch.library.custom_op("hal::gelu_backward", mutates_args=())
def _gelu_backward(grad: Tensor, x: Tensor, approximate: str) -> Tensor:
    return run("gelu_backward", x.device.type, (grad, x, approximate), comp.gelu_backward, host.gelu_backward)


@_gelu_backward.register_fake
def _(grad, x, approximate):
    return torch.empty_like(x)


def _ge_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.approximate = inputs[1]


def _ge_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return torch.ops.hal.gelu_backward(grad, x, ctx.approximate), None


_gelu.register_autograd(_ge_backward, setup_context=_ge_setup)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU: exact ``x * Phi(x)`` (``approximate="none"``) or the tanh approximation.

    Same result as ``torch.nn.functional.gelu(x, approximate=approximate)``.

    Example::

        y = hal.ops.gelu(x, approximate="tanh")    # GPT-2 style
    """
    _checks.tensor("gelu", "x", x)
    _checks.floating("gelu", "x", x)
    if approximate not in APPROXIMATIONS:
        raise ValueError(f"hal.ops.gelu: approximate={approximate!r} is not known; use 'none' (exact) or 'tanh'")
    return torch.ops.hal.gelu(x, approximate)
