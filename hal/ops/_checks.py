"""Argument checks shared by the public ``hal.ops`` functions: one clear error each."""
import torch


def tensor(op: str, name: str, value) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"hal.ops.{op}: {name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def floating(op: str, name: str, t: torch.Tensor) -> None:
    if not t.is_floating_point():
        raise TypeError(f"hal.ops.{op}: {name} has dtype {t.dtype}; pass a floating-point tensor "
                        f"(e.g. {name}.float())")


def same_device(op: str, ref: torch.Tensor, **others) -> None:
    ref_cpu = ref.is_cpu  # CPU with CPU needs no torch.device objects (~0.3 us each)
    dev = None
    for name, t in others.items():
        if t is None or (ref_cpu and t.is_cpu):
            continue
        if dev is None:
            dev = ref.device  # built once, not once per tensor
        if t.device != dev:
            raise ValueError(f"hal.ops.{op}: {name} is on {t.device} but x is on {ref.device}; "
                             f"move it with {name}.to(x.device)")


def vector(op: str, name: str, t: torch.Tensor, n: int) -> None:
    if t.dim() != 1 or t.shape[0] != n:
        raise ValueError(f"hal.ops.{op}: {name} has shape {tuple(t.shape)}, expected ({n},) to match the "
                         "last dimension of x")


def no_grad_needed(op: str, name: str, t) -> None:
    if t is not None and t.requires_grad:
        raise ValueError(f"hal.ops.{op}: {name} requires grad, but {op} does not differentiate with respect "
                         f"to {name}; pass {name}.detach()")


def floating_tensor(op: str, name: str, value) -> None:
    """:func:`tensor` and :func:`floating` in one call."""
    if not isinstance(value, torch.Tensor):
        tensor(op, name, value)
    if not value.is_floating_point():
        floating(op, name, value)


def norm_params(op: str, x, weight, bias=None, residual=None) -> None:
    """The arguments of a norm over the last dim: ``x`` a floating tensor with a last dim, ``weight``
    (and ``bias`` unless None) tensors of shape (hidden,), all on ``x``'s device.  One call on the
    path of every norm (a decode-sized norm costs a few microseconds in all)."""
    floating_tensor(op, "x", x)
    shape = x.shape
    if not shape:
        raise ValueError(f"hal.ops.{op}: x is a 0-d tensor; it needs a last dimension to normalise")
    n = shape[-1]
    tensor(op, "weight", weight)
    if weight.shape != (n,):
        vector(op, "weight", weight, n)
    if bias is not None:
        tensor(op, "bias", bias)
        if bias.shape != (n,):
            vector(op, "bias", bias, n)
    if residual is not None:
        tensor(op, "residual", residual)
    if not (x.is_cpu and weight.is_cpu and (bias is None or bias.is_cpu)
            and (residual is None or residual.is_cpu)):
        same_device(op, x, weight=weight, bias=bias, residual=residual)
