"""The dtype a step's matrix products ran in, for the device's peak FLOP/s of that dtype (MFU).

:class:`ComputeDtypes` is a ``torch.overrides.TorchFunctionMode`` (public since torch 1.13) that tallies the
matrix products the script calls -- ``linear``, ``matmul`` and ``@``, ``mm``, ``bmm``, ``addmm``, ``baddbmm``,
``einsum``, the convolutions, ``scaled_dot_product_attention``, ``multi_head_attention_forward`` -- by the
dtype of their result, each weighted by its size (result elements x the contracted dimension).  The result's
dtype is the one the product ran in: under ``torch.autocast(dtype=torch.bfloat16)`` a float32 model's
products give bfloat16.  A float32 product counts as ``tf32`` when ``torch.get_float32_matmul_precision()``
lets float32 products run in TensorFloat32 (``"high"`` or ``"medium"``, which
``torch.backends.cuda.matmul.allow_tf32 = True`` sets).

What it does not see: the backward, which autograd runs without torch functions (its products run in the
forward's dtypes); products inside a torch function that is itself overridable (the mode is off while that
runs), which count as that call.
"""
from __future__ import annotations

from typing import Dict, Optional

import torch
from torch.overrides import TorchFunctionMode


def _inner(index: int):
    """The contracted dimension: the last one of argument ``index``."""
    return lambda args: args[index].shape[-1]


def _conv(args):
    return args[1][0].numel()  # per output element: input channels (of a group) x kernel


def _attention(args):
    return 2 * args[1].shape[-2]  # q @ k^T and attention @ v, over the key length


_F = torch.nn.functional
#: torch functions that are matrix products -> their contracted dimension from their arguments
_PRODUCTS = {
    _F.linear: _inner(0), torch.matmul: _inner(0), torch.Tensor.matmul: _inner(0), torch.Tensor.__matmul__: _inner(0),
    torch.mm: _inner(0), torch.Tensor.mm: _inner(0), torch.bmm: _inner(0), torch.Tensor.bmm: _inner(0),
    torch.addmm: _inner(1), torch.Tensor.addmm: _inner(1), torch.baddbmm: _inner(1), torch.Tensor.baddbmm: _inner(1),
    torch.einsum: lambda args: 1,
    _F.conv1d: _conv, _F.conv2d: _conv, _F.conv3d: _conv,
    _F.conv_transpose1d: _conv, _F.conv_transpose2d: _conv, _F.conv_transpose3d: _conv,
    _F.scaled_dot_product_attention: _attention, _F.multi_head_attention_forward: lambda args: 3 * args[0].shape[-1],
}


def dtype_name(dtype: torch.dtype) -> str:
    """torch's name of ``dtype`` (``"bfloat16"``), ``"tf32"`` for float32 where torch lets products run in
    TensorFloat32."""
    if dtype == torch.float32 and torch.get_float32_matmul_precision() != "highest":
        return "tf32"
    return str(dtype).rpartition(".")[2]


class ComputeDtypes(TorchFunctionMode):
    """While entered: the size of the matrix products called, per dtype they ran in (:attr:`sizes`)."""

    def __init__(self):
        super().__init__()
        self.sizes: Dict[str, float] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        try:
            contracted = _PRODUCTS.get(func)
        except TypeError:  # an unhashable callable: not one of the products
            contracted = None
        result = out[0] if isinstance(out, tuple) and out else out
        if contracted is not None and isinstance(result, torch.Tensor):
            try:
                size = float(result.numel()) * float(contracted(args))
            except (IndexError, TypeError, AttributeError):  # arguments given by keyword, or not tensors
                size = float(result.numel())
            name = dtype_name(result.dtype)
            self.sizes[name] = self.sizes.get(name, 0.0) + size
        return out

    def dominant(self) -> Optional[str]:
        """The dtype of the largest share of the products, or None when none ran."""
        return max(self.sizes, key=self.sizes.__getitem__) if self.sizes else None
