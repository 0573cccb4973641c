"""``hal.optim.AdamW``: torch.optim.AdamW's algorithm, one fused multi-tensor step per
(device, dtype) group through ``hal.ops.fused_adamw_``."""
from __future__ import annotations

from collections import defaultdict

import torch
from torch.optim import Optimizer

from hal.ops.optimizer import fused_adamw_


class AdamW(Optimizer):
    """AdamW (decoupled weight decay), matching ``torch.optim.AdamW`` step for step.

    Each step updates all parameters of a (device, dtype, step count) group with one
    ``hal.ops.fused_adamw_`` call: the device's fused kernel (``aten::_fused_adamw_`` on
    CUDA/NPU/MUSA, the C++ host kernel on the CPU) or a foreach composition.  State keys
    (``step``, ``exp_avg``, ``exp_avg_sq``) and their types are torch.optim.AdamW's, so a
    state dict loads into either optimizer.

    :param params: parameters or parameter groups.
    :param lr: learning rate.
    :param betas: (beta1, beta2) of the moment averages.
    :param eps: added to the denominator.
    :param weight_decay: decoupled weight decay coefficient.
    :param maximize: ascend the objective instead.

    Example::

        opt = hal.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        loss.backward(); opt.step(); opt.zero_grad()
    """

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False):
        if amsgrad:
            raise ValueError("hal.optim.AdamW: amsgrad=True is not supported (no fused kernel has it); "
                             "use torch.optim.AdamW(amsgrad=True)")
        if isinstance(lr, torch.Tensor):
            raise ValueError("hal.optim.AdamW: lr must be a float; a tensor lr is not supported")
        if not lr >= 0.0:
            raise ValueError(f"hal.optim.AdamW: invalid learning rate {lr}; it must be >= 0")
        if not eps >= 0.0:
            raise ValueError(f"hal.optim.AdamW: invalid eps {eps}; it must be >= 0")
        for i, b in enumerate(betas):
            if not 0.0 <= b < 1.0:
                raise ValueError(f"hal.optim.AdamW: invalid beta at index {i}: {b}; it must be in [0, 1)")
        if not weight_decay >= 0.0:
            raise ValueError(f"hal.optim.AdamW: invalid weight_decay {weight_decay}; it must be >= 0")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      amsgrad=False, maximize=maximize))

    @torch.no_grad()
    def step(self, closure=None):
        """Perform one optimization step; ``closure`` re-evaluates the loss if given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            buckets = defaultdict(lambda: ([], [], [], []))
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("hal.optim.AdamW does not support sparse gradients; use torch.optim.SparseAdam")
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0, dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                lists = buckets[(p.device, p.dtype, float(state["step"]))]
                for lst, t in zip(lists, (p, p.grad, state["exp_avg"], state["exp_avg_sq"])):
                    lst.append(t)
            for (_dev, _dtype, step), (ps, gs, ms, vs) in buckets.items():
                fused_adamw_(ps, gs, ms, vs, lr=group["lr"], beta1=beta1, beta2=beta2, eps=group["eps"],
                             weight_decay=group["weight_decay"], step=step, maximize=group["maximize"])
        return loss
