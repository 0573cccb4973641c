"""``hal::swiglu`` and ``hal::gelu``."""
import torch
from torch import Tensor

from hal.ops import _checks, compositions as comp, host
from hal.ops._boundary import define
from hal.ops._dispatch import device_type, run

APPROXIMATIONS = ("none", "tanh")


def _swiglu(x: Tensor) -> Tensor:
    return run("swiglu", device_type(x), (x,), comp.swiglu, host.swiglu)


def _swiglu_backward(grad: Tensor, x: Tensor) -> Tensor:
    return run("swiglu_backward", device_type(x), (grad, x), comp.swiglu_backward, host.swiglu_backward)


SWIGLU_BACKWARD = define("swiglu_backward", _swiglu_backward, fake=lambda grad, x: torch.empty_like(x))


def _sw_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _sw_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return SWIGLU_BACKWARD(grad, x)


SWIGLU = define("swiglu", _swiglu, fake=lambda x: x.new_empty(*x.shape[:-1], x.shape[-1] // 2),
                setup_context=_sw_setup, backward=_sw_backward, composition=comp.swiglu)


def swiglu(x: Tensor) -> Tensor:
    """SwiGLU: ``silu(a) * b`` where ``a, b = x.chunk(2, dim=-1)`` ([gate | up] halves).

    The one-tensor convention of vLLM ``silu_and_mul``, torch_npu ``npu_swiglu`` and
    torch_musa ``swish_glu``; a model with separate gate and up projections passes
    ``torch.cat((gate, up), -1)`` or, better, one fused projection.

    Example::

        h = hal.ops.swiglu(self.gate_up_proj(x))    # (..., 2 * inter) -> (..., inter)
    """
    _checks.floating_tensor("swiglu", "x", x)
    if x.dim() < 1 or x.shape[-1] % 2:
        raise ValueError(f"hal.ops.swiglu: x has shape {tuple(x.shape)}; its last dim must be even "
                         "([gate | up] halves)")
    return SWIGLU(x)


def _gelu(x: Tensor, approximate: str) -> Tensor:
    return run("gelu", device_type(x), (x, approximate), comp.gelu, host.gelu)


def _gelu_backward(grad: Tensor, x: Tensor, approximate: str) -> Tensor:
    return run("gelu_backward", device_type(x), (grad, x, approximate), comp.gelu_backward, host.gelu_backward)


GELU_BACKWARD = define("gelu_backward", _gelu_backward, fake=lambda grad, x, approximate: torch.empty_like(x))


def _ge_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.approximate = inputs[1]


def _ge_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return GELU_BACKWARD(grad, x, ctx.approximate), None


GELU = define("gelu", _gelu, fake=lambda x, approximate: torch.empty_like(x), setup_context=_ge_setup,
              backward=_ge_backward, composition=comp.gelu)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU: exact ``x * Phi(x)`` (``approximate="none"``) or the tanh approximation.

    Same result as ``torch.nn.functional.gelu(x, approximate=approximate)``.

    Example::

        y = hal.ops.gelu(x, approximate="tanh")    # GPT-2 style
    """
    _checks.floating_tensor("gelu", "x", x)
    if approximate not in APPROXIMATIONS:
        raise ValueError(f"hal.ops.gelu: approximate={approximate!r} is not known; use 'none' (exact) or 'tanh'")
    return GELU(x, approximate)
