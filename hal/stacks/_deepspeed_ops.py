"""The op builders hal's DeepSpeed accelerator hands out (imported only once DeepSpeed is).

DeepSpeed's optimizers and kernels are C++/CUDA extensions its accelerator builds
(``get_op_builder(name)().load()``).  On a hal backend:

- ``FusedAdamBuilder`` (FusedAdam, DeepSpeed's default for ``"type": "Adam"/"AdamW"``) loads
  :func:`multi_tensor_adam` below: torch's own fused multi-tensor Adam/AdamW kernels
  (``torch._fused_adam_`` / ``torch._fused_adamw_``) on the device's tensors, the device's kernel where it
  has one and its fallback where not, with a ``torch._foreach_*`` composition where torch has no
  fused form (``bias_correction=False``) — nothing to compile;
- the host builders (``CPUAdamBuilder``, ``CPUAdagradBuilder``, ``CPULionBuilder``,
  ``AsyncIOBuilder``, ``PinMemoryBuilder``: ZeRO-Offload's optimizers on host memory, NVMe
  offload) are DeepSpeed's own C++ CPU builders, compiled on first use as on a CPU machine;
- every other builder raises, on load, an error naming the op, the backend and DeepSpeed's switch
  that avoids it.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import List

import torch
from deepspeed.ops.op_builder.builder import OpBuilder

#: DeepSpeed's C++ CPU builders, used as they are (their ops work on host tensors)
HOST_BUILDERS = ("CPUAdamBuilder", "CPUAdagradBuilder", "CPULionBuilder", "AsyncIOBuilder", "PinMemoryBuilder")
#: what to set instead of a DeepSpeed op hal has no kernel for
SWITCH = ('an optimizer DeepSpeed runs with torch\'s ops ("optimizer": {"type": "AdamW", "params": '
          '{"torch_adam": true}}), or DS_ACCELERATOR=cpu to run DeepSpeed on the CPU')


def _adam_composition(params: List[torch.Tensor], grads, exp_avgs, exp_avg_sqs, lr: float, beta1: float,
                      beta2: float, eps: float, step: int, adamw: bool, bias_correction: bool,
                      weight_decay: float) -> None:
    """DeepSpeed's Adam step (its CPU kernel's arithmetic) in ``torch._foreach_*`` ops."""
    if weight_decay and not adamw:
        grads = torch._foreach_add(grads, params, alpha=weight_decay)
    torch._foreach_mul_(exp_avgs, beta1)
    torch._foreach_add_(exp_avgs, grads, alpha=1 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
    if weight_decay and adamw:
        torch._foreach_mul_(params, 1 - lr * weight_decay)
    step_size, bc2 = lr, 1.0
    if bias_correction:
        step_size = lr / (1 - beta1 ** step)
        bc2 = (1 - beta2 ** step) ** 0.5
    denom = torch._foreach_sqrt(exp_avg_sqs)
    torch._foreach_div_(denom, bc2)
    torch._foreach_add_(denom, eps)
    torch._foreach_addcdiv_(params, exp_avgs, denom, value=-step_size)


def multi_tensor_adam(chunk_size: int, noop_flag: torch.Tensor, tensor_lists, lr: float, beta1: float,
                      beta2: float, epsilon: float, step: int, mode: int, bias_correction: int,
                      weight_decay: float) -> None:
    """DeepSpeed's ``fused_adam`` op: one Adam (``mode=0``, L2) or AdamW (``mode=1``) step over
    ``tensor_lists = [grads, params, exp_avgs, exp_avg_sqs]``, in place.  ``chunk_size`` and
    ``noop_flag`` are a CUDA launch detail; they are accepted and unused."""
    grads, params, exp_avgs, exp_avg_sqs = tensor_lists
    if not params:
        return
    if bias_correction:
        fused = torch._fused_adamw_ if mode == 1 else torch._fused_adam_
        steps = [torch.tensor(float(step), device=p.device) for p in params]
        try:
            fused(params, grads, exp_avgs, exp_avg_sqs, [], steps, lr=lr, beta1=beta1, beta2=beta2,
                  weight_decay=weight_decay, eps=epsilon, amsgrad=False, maximize=False)
            return
        except NotImplementedError:  # the device has no fused Adam kernel and no fallback for it
            pass
    _adam_composition(params, grads, exp_avgs, exp_avg_sqs, lr, beta1, beta2, epsilon, step, mode == 1,
                      bool(bias_correction), weight_decay)


class TorchFusedAdamBuilder(OpBuilder):
    """``FusedAdamBuilder`` on a hal backend: :func:`multi_tensor_adam`, nothing to compile."""

    BUILD_VAR = "DS_BUILD_FUSED_ADAM"
    NAME = "fused_adam"

    def __init__(self):
        super().__init__(name=self.NAME)

    def absolute_name(self):
        return "hal.stacks._deepspeed_ops"

    def sources(self):
        return []

    def is_compatible(self, verbose=False):
        return True

    def load(self, verbose=False):
        return SimpleNamespace(multi_tensor_adam=multi_tensor_adam)


def host_builder(class_name: str, backend_name: str) -> type:
    """DeepSpeed's own C++ CPU builder ``class_name``, whose failure to build or load names the switches that
    avoid it (a machine without a C++ compiler, a DeepSpeed built without its sources)."""
    from deepspeed.ops.op_builder import cpu

    base = getattr(cpu, class_name)

    class Host(base):
        def load(self, verbose=True):
            try:
                return super().load(verbose)
            except Exception as exc:
                raise RuntimeError(
                    f"DeepSpeed's {class_name} (its C++ op for host memory, compiled on first use) failed on the "
                    f"{backend_name} backend: {type(exc).__name__}: {exc}; it needs a C++ compiler and DeepSpeed's "
                    f"sources; or avoid it: ZeRO-Offload's optimizer is DeepSpeedCPUAdam (leave "
                    f"\"offload_optimizer\" off), else {SWITCH}") from exc

    Host.__name__ = Host.__qualname__ = class_name
    return Host


def unavailable_builder(class_name: str, backend_name: str) -> type:
    """A builder class for a DeepSpeed op hal has no kernel for: it reports itself incompatible
    (``ds_report``) and its ``load()`` raises, naming the op, the backend and the switch."""

    class Unavailable(OpBuilder):
        NAME = class_name.replace("Builder", "").lower() or "unavailable"

        def __init__(self, name=None):
            super().__init__(name=name or self.NAME)

        def absolute_name(self):
            return f"hal.stacks.unavailable.{self.NAME}"

        def sources(self):
            return []

        def is_compatible(self, verbose=False):
            return False

        def load(self, verbose=False):
            raise NotImplementedError(
                f"DeepSpeed op {class_name} has no kernel on the {backend_name} backend (hal's DeepSpeed "
                f"accelerator builds FusedAdam on torch's fused kernels and DeepSpeed's CPU ops for host "
                f"memory only); use {SWITCH}")

    Unavailable.__name__ = Unavailable.__qualname__ = class_name
    return Unavailable
