"""``hal::fused_adamw_``: one multi-tensor AdamW step, in place."""
from typing import List

from torch import Tensor

from hal.ops import compositions as comp, host
from hal.ops._boundary import define
from hal.ops._dispatch import device_type, run


def _fused_adamw_(params: List[Tensor], grads: List[Tensor], exp_avgs: List[Tensor], exp_avg_sqs: List[Tensor],
                  lr: float, beta1: float, beta2: float, eps: float, weight_decay: float, step: float,
                  maximize: bool) -> None:
    if not params:
        return
    run("fused_adamw_", device_type(params[0]),
        (params, grads, exp_avgs, exp_avg_sqs, lr, beta1, beta2, eps, weight_decay, step, maximize),
        comp.fused_adamw_, host.fused_adamw_)


FUSED_ADAMW_ = define("fused_adamw_", _fused_adamw_, mutates_args=("params", "exp_avgs", "exp_avg_sqs"),
                      fake=lambda *args: None)


def fused_adamw_(params: List[Tensor], grads: List[Tensor], exp_avgs: List[Tensor], exp_avg_sqs: List[Tensor],
                 *, lr: float, beta1: float, beta2: float, eps: float, weight_decay: float, step: float,
                 maximize: bool = False) -> None:
    """One AdamW step over lists of tensors, updating params and both moments in place.

    The arithmetic follows ``torch.optim.AdamW`` (decoupled weight decay ``p *= 1 - lr*wd``,
    bias-corrected moments); ``step`` counts this update, starting at 1.  All lists have
    one entry per parameter, on one device.  :class:`hal.optim.AdamW` is the optimizer
    built on it.
    """
    n = len(params)
    if not (len(grads) == len(exp_avgs) == len(exp_avg_sqs) == n):
        raise ValueError(f"hal.ops.fused_adamw_: params, grads, exp_avgs and exp_avg_sqs must have equal length "
                         f"(got {n}, {len(grads)}, {len(exp_avgs)}, {len(exp_avg_sqs)})")
    for i, (p, g, m, v) in enumerate(zip(params, grads, exp_avgs, exp_avg_sqs)):
        if not (p.shape == g.shape == m.shape == v.shape):
            raise ValueError(f"hal.ops.fused_adamw_: entry {i}: param {tuple(p.shape)}, grad {tuple(g.shape)}, "
                             f"exp_avg {tuple(m.shape)} and exp_avg_sq {tuple(v.shape)} must have one shape")
        if g.is_sparse:
            raise ValueError(f"hal.ops.fused_adamw_: entry {i} has a sparse gradient; AdamW needs dense gradients "
                             "(use torch.optim.SparseAdam for sparse ones)")
    if step < 1:
        raise ValueError(f"hal.ops.fused_adamw_: step={step}; it counts this update and starts at 1")
    FUSED_ADAMW_(list(params), list(grads), list(exp_avgs), list(exp_avg_sqs), float(lr), float(beta1),
                 float(beta2), float(eps), float(weight_decay), float(step), bool(maximize))
