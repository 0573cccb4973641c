"""hal.metrics attached from outside to a script that does not use it (``hal run --metrics DIR``).

The script is not changed.  Each step of its optimizer (the first one that steps; a GAN's second is
not counted) becomes one ``hal.metrics/1`` record, written by a :class:`~hal.metrics.MetricsLogger`
on each rank:

- the step is marked by torch's global optimizer hooks (``torch.optim.optimizer.
  register_optimizer_step_pre_hook`` / ``..._post_hook``), so ``optimizer.step()``, ``scaler.step()``,
  Lightning, the HF Trainer and DeepSpeed's wrapped torch optimizers are all seen;
- ``loss``: the value ``backward()`` was called on (``torch.autograd.backward``, which
  ``Tensor.backward`` calls), the mean over the micro-batches of a step with gradient
  accumulation; through ``GradScaler.scale`` the unscaled value; a backward run inside another
  one (activation checkpointing's recomputation) or by hal itself is not a loss;
- ``grad_norm`` (with ``HAL_METRICS_GRAD_NORM=1``: it copies every gradient to the host each step):
  the L2 norm of the gradients the optimizer is about to apply (after ``scaler.unscale_``, as
  ``clip_grad_norm_`` sees them); ``lr``: its first parameter group's;
- ``samples`` / ``tokens``: from the batches a ``DataLoader`` handed out since the previous step (the
  leading dimension of the first tensor; the elements of ``input_ids``, else of the first
  integer tensor with two dimensions or more);
- the step time is the wall time between steps; the clock starts at the first batch or backward;
- a ``DistributedDataParallel`` model built after this starts is watched for communication time;
- with ``max_steps`` (``HAL_METRICS_MAX_STEPS``) the script ends cleanly after that many steps;
- with ``flops`` (``HAL_METRICS_FLOPS=1``) the second step's floating-point operations, as torch's
  ``FlopCounterMode`` counts them (matrix products, convolutions, attention), are its ``flops``, and the
  dtype most of its matrix products ran in is its ``compute_dtype`` (:mod:`hal.metrics._compute_dtype`).

Records go to ``<folder>/<run>.jsonl`` (``<run>.rank<N>.jsonl`` for several ranks).
"""
from __future__ import annotations

import os
import sys
import threading
from typing import List, Optional

import torch

from hal.metrics._comm import CommWatch
from hal.metrics._compute_dtype import ComputeDtypes
from hal.metrics._logger import MetricsLogger
from hal.util.patches import Patches, WatchedIterator

#: the folder ``hal run --metrics DIR`` gives every process of the run (torchrun's ranks, child processes)
ENV_DIR = "HAL_METRICS_DIR"
#: the run name (file name stem), default ``run``
ENV_RUN = "HAL_METRICS_RUN"
#: 1: record the gradients' norm too (a copy of every gradient to the host per step)
ENV_GRAD_NORM = "HAL_METRICS_GRAD_NORM"
#: N: end the script cleanly (exit code 0) after its N-th optimizer step, on every rank alike
ENV_MAX_STEPS = "HAL_METRICS_MAX_STEPS"
#: 1: count the floating-point operations of the second step (torch's FlopCounterMode) into its ``flops``
ENV_FLOPS = "HAL_METRICS_FLOPS"


class StepLimitReached(SystemExit):
    """Raised from the optimizer-step hook at ``HAL_METRICS_MAX_STEPS``: the script ends there with exit
    code 0 (every rank at the same step, after its gradients were reduced); code after its loop does
    not run."""

    def __init__(self, steps: int):
        super().__init__(0)
        self.steps = steps


def _first_tensor(batch):
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            t = _first_tensor(item)
            if t is not None:
                return t
    return None


def _tokens(batch) -> Optional[int]:
    if isinstance(batch, dict) and isinstance(batch.get("input_ids"), torch.Tensor):
        return int(batch["input_ids"].numel())
    items = list(batch.values()) if isinstance(batch, dict) else (batch if isinstance(batch, (list, tuple)) else [batch])
    for item in items:
        if isinstance(item, torch.Tensor) and item.dim() >= 2 and not item.is_floating_point() and not item.is_complex():
            return int(item.numel())
    return None


def _counts(batch):
    """``(samples, tokens)`` of one batch (either None where the batch does not say)."""
    first = _first_tensor(batch)
    samples = int(first.shape[0]) if first is not None and first.dim() > 0 else None
    return samples, _tokens(batch)


def _from_hal(frame) -> bool:
    """True when the first caller past torch's own frames (``Tensor.backward``, and the counted step's
    :class:`ComputeDtypes` that runs it) is hal's code (the emulator's autograd self-check when it loads): not
    the script's loss."""
    while frame is not None:
        name = frame.f_globals.get("__name__", "") or ""
        if name not in (__name__, ComputeDtypes.__module__) and name != "torch" and not name.startswith("torch."):
            return name in ("hal", "hal_backends") or name.startswith(("hal.", "hal_backends."))
        frame = frame.f_back
    return False


def _grad_norm(optimizer) -> Optional[float]:
    norms = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            g = p.grad
            if g is None:
                continue
            if hasattr(g, "full_tensor"):  # a DTensor (FSDP2, tensor parallel): the whole gradient
                g = g.full_tensor()
            # on the host: the norm must not add operators to what the script sends to the device
            norms.append(torch.linalg.vector_norm(g.detach().to("cpu", torch.float32)))
    if not norms:
        return None
    return float(torch.linalg.vector_norm(torch.stack(norms)))


class AttachedMetrics:
    """Per-step metrics of an unmodified script: :meth:`install` before it runs, :meth:`close` after."""

    def __init__(self, folder, run: str = "run", *, grad_norm: bool = False, max_steps: Optional[int] = None,
                 flops: bool = False):
        self.folder, self.run, self.want_grad_norm, self.max_steps = folder, run, grad_norm, max_steps
        self.want_flops = flops
        self._counter = self._dtypes = None  # FlopCounterMode and ComputeDtypes while a step is counted
        self.logger: Optional[MetricsLogger] = None
        self.optimizer = None
        self.step = 0
        self.losses: List[torch.Tensor] = []
        self.samples: Optional[int] = None
        self.tokens: Optional[int] = None
        self.grad_norm: Optional[float] = None
        self.ddp = None
        self._scaled = None  # (the tensor GradScaler.scale returned, the loss it scaled)
        self._depth = threading.local()
        self._patches = Patches()
        self._skip_step = False

    # -- what the hooks see -------------------------------------------------------------
    def _start(self) -> None:
        if self.logger is None:
            # a DDP model the script's own MetricsLogger watches is timed there: one watch per model
            comm = self.ddp if self.ddp is not None and not CommWatch.watched(self.ddp) else None
            self.logger = MetricsLogger(self.folder, self.run, comm=comm, straggler_factor=None)
            self.logger.start()

    def batch(self, batch) -> None:
        self._start()
        samples, tokens = _counts(batch)
        if samples is not None:
            self.samples = (self.samples or 0) + samples
        if tokens is not None:
            self.tokens = (self.tokens or 0) + tokens

    def backward(self, tensors) -> None:
        self._start()
        t = tensors[0] if isinstance(tensors, (list, tuple)) and tensors else tensors
        if not isinstance(t, torch.Tensor) or t.numel() != 1:
            return
        if self._scaled is not None and self._scaled[0] is t:
            t = self._scaled[1]
            self._scaled = None  # not kept past its backward (nor its graph with it)
        self.losses.append(t.detach().reshape(()))

    def before_step(self, optimizer) -> None:
        if self.optimizer is None:
            self.optimizer = optimizer
        if optimizer is self.optimizer and self.want_grad_norm:
            self.grad_norm = _grad_norm(optimizer)

    def resumed(self, step: int, replaced: bool = True) -> None:
        """The run goes on from a checkpoint of ``step`` (``hal run --checkpoint``): the next record is step
        ``step + 1``.  ``replaced``: the checkpoint was loaded at the end of the restarted script's first step,
        whose work it replaced: that step is not recorded, and the next one is timed from now; else the
        script resumed itself before its first step."""
        self.step = int(step)
        self._skip_step = bool(replaced)

    def after_step(self, optimizer) -> None:
        if optimizer is not self.optimizer:
            return
        self._start()
        if self._skip_step:
            self._skip_step = False
            self.losses, self.samples, self.tokens, self.grad_norm = [], None, None, None
            self.logger.timer.start()
            if self.max_steps is not None and self.step >= self.max_steps:
                raise StepLimitReached(self.step)
            return
        self.step += 1
        scalars = {}
        if self.losses:
            scalars["loss"] = float(torch.stack([t.float().cpu() for t in self.losses]).mean())
        if self.grad_norm is not None:
            scalars["grad_norm"] = self.grad_norm
        compute_dtype = None
        if self._counter is not None:  # the step counted: its forward, backward and optimizer step
            scalars["flops"], compute_dtype = self._stop_counting()
        lr = optimizer.param_groups[0].get("lr") if optimizer.param_groups else None
        if lr is not None:
            scalars["lr"] = float(lr)
        self.logger.log_step(self.step, samples=self.samples, tokens=self.tokens, compute_dtype=compute_dtype,
                             **scalars)
        self.losses, self.samples, self.tokens, self.grad_norm = [], None, None, None
        if self.max_steps is not None and self.step >= self.max_steps:
            raise StepLimitReached(self.step)
        if self.want_flops and self.step == 1:  # the second step, past the first one's warm-up
            from torch.utils.flop_counter import FlopCounterMode

            self._counter = FlopCounterMode(display=False)
            self._counter.__enter__()
            self._dtypes = ComputeDtypes()
            self._dtypes.__enter__()

    def _stop_counting(self):
        """Leave the counted step's modes: its FLOPs and the dtype most of its matrix products ran in."""
        self._dtypes.__exit__(None, None, None)
        self._counter.__exit__(None, None, None)
        counted = float(self._counter.get_total_flops()), self._dtypes.dominant()
        self._counter = self._dtypes = None
        return counted

    # -- installing ---------------------------------------------------------------------
    def install(self) -> "AttachedMetrics":
        """Hook torch (optimizer hooks, ``torch.autograd.backward``, ``DataLoader.__iter__``,
        ``GradScaler.scale``, ``DistributedDataParallel.__init__``) until :meth:`close`."""
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
        from torch.utils.data import DataLoader

        me = self
        self._patches.hook(register_optimizer_step_pre_hook(lambda opt, args, kwargs: me.before_step(opt)))
        self._patches.hook(register_optimizer_step_post_hook(lambda opt, args, kwargs: me.after_step(opt)))

        backward = torch.autograd.backward

        def counted_backward(tensors, *args, **kwargs):
            depth = getattr(me._depth, "n", 0)
            if depth == 0 and not _from_hal(sys._getframe(1)):
                me.backward(tensors)
            me._depth.n = depth + 1
            try:
                return backward(tensors, *args, **kwargs)
            finally:
                me._depth.n = depth
        self._patches.set(torch.autograd, "backward", counted_backward)

        dl_iter = DataLoader.__iter__

        def counting_iter(loader):
            return WatchedIterator(dl_iter(loader), me.batch)
        self._patches.set(DataLoader, "__iter__", counting_iter)

        scaler = torch.amp.GradScaler
        scale = scaler.__dict__["scale"]

        def scaled(self_, outputs):
            out = scale(self_, outputs)
            if isinstance(outputs, torch.Tensor):
                me._scaled = (out, outputs)
            return out
        self._patches.set(scaler, "scale", scaled)

        ddp = torch.nn.parallel.DistributedDataParallel
        ddp_init = ddp.__dict__["__init__"]

        def watched_init(self_, *args, **kwargs):
            ddp_init(self_, *args, **kwargs)
            if me.ddp is None and me.logger is None:
                me.ddp = self_
        self._patches.set(ddp, "__init__", watched_init)
        return self

    def close(self) -> None:
        """Remove the hooks and close the logger (its files are complete)."""
        if self._counter is not None:  # the script ended inside the counted step
            self._stop_counting()
        self._patches.undo()
        if self.logger is not None:
            self.logger.close()


def attach_from_env() -> Optional[AttachedMetrics]:
    """:class:`AttachedMetrics` installed when ``HAL_METRICS_DIR`` is set (by ``hal run --metrics``), else None."""
    folder = os.environ.get(ENV_DIR, "").strip()
    if not folder:
        return None
    from hal._errors import HalError

    grad_norm = os.environ.get(ENV_GRAD_NORM, "").strip() not in ("", "0")
    limit = os.environ.get(ENV_MAX_STEPS, "").strip()
    if limit and not (limit.isdigit() and int(limit) > 0):
        raise HalError(f"{ENV_MAX_STEPS}={limit!r}: give a whole number of optimizer steps above 0, or unset it")
    flops = os.environ.get(ENV_FLOPS, "").strip() not in ("", "0")
    return AttachedMetrics(folder, os.environ.get(ENV_RUN, "").strip() or "run", grad_norm=grad_norm,
                           max_steps=int(limit) if limit else None, flops=flops).install()
