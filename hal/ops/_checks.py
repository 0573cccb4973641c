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
    for name, t in others.items():
        if t is None or (ref_cpu and t.is_cpu):
            continue
        if t.device != ref.device:
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
