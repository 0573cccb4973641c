"""Process groups, DistributedDataParallel and DataParallel on the selected backend.

- ``init_process_group("nccl")`` / ``new_group(backend="nccl")``: ``"gloo"`` on the CPU,
  ``"cpu:gloo,<device>:<ccl>"`` elsewhere; ``device_id=torch.device("cuda", i)`` maps to the
  backend's device (dropped on the CPU, where gloo binds none).
- ``DistributedDataParallel(device_ids=[i])``: the backend's index (none on the CPU).
- ``ReduceOp.PREMUL_SUM`` (NCCL's; FSDP2's after ``set_gradient_divide_factor``) on a group that
  runs in gloo: the input multiplied, then summed (:mod:`hal.dist.premul_sum`).
- ``DataParallel(model)``: torch's DataParallel scatters with CUDA-only kernels, so on any
  other backend it runs the module on the current device in this process (as torch does
  where no GPU is visible); use DistributedDataParallel for several devices.
"""
from __future__ import annotations

import functools

import torch

from hal.redirect._devices import marked
from hal.redirect._core import Redirection, is_cuda_like


def _install_process_groups(t: Redirection) -> None:
    import torch.distributed as dist
    spec = t.backend.spec
    if t.device_type == "cpu" or not spec.dist_backend:
        target = "gloo"
    else:
        target = f"cpu:gloo,{t.device_type}:{spec.dist_backend}"

    def map_backend(backend):
        if isinstance(backend, str) and "nccl" in backend:
            t.log.redirected(f"process group backend {backend!r}", repr(target))
            return target
        return backend

    orig_init = dist.init_process_group

    @functools.wraps(orig_init)
    def init_process_group(backend=None, *args, **kwargs):
        from hal.dist import register_plugin_ccl
        register_plugin_ccl()  # the selected backend's out-of-tree CCL, as hal.dist.init registers it
        dev = kwargs.get("device_id")
        if dev is not None and is_cuda_like(dev):
            if t.device_type == "cpu":
                t.log.redirected(f"init_process_group(device_id={dev})", "device_id=None (gloo binds no device)")
                kwargs["device_id"] = None
            else:
                kwargs["device_id"] = t.redirect(dev, "init_process_group")
        result = orig_init(map_backend(backend), *args, **kwargs)
        from hal.dist.register import restore_device_binding
        restore_device_binding(kwargs.get("device_id"))
        return result

    orig_new = dist.new_group

    @functools.wraps(orig_new)
    def new_group(*args, **kwargs):
        if "backend" in kwargs:
            kwargs["backend"] = map_backend(kwargs["backend"])
        return orig_new(*args, **kwargs)

    t.patch(dist, "init_process_group", marked(init_process_group, orig_init))
    t.patch(dist, "new_group", marked(new_group, orig_new))


def _install_ddp(t: Redirection) -> None:
    ddp = torch.nn.parallel.DistributedDataParallel
    orig_init = ddp.__init__

    def ddp_init(self, module, device_ids=None, output_device=None, *args, **kwargs):
        if t.device_type == "cpu" and (device_ids or output_device is not None):
            t.log.redirected("DistributedDataParallel(device_ids=...)", "device_ids=None (CPU modules take none)")
            device_ids, output_device = None, None
        elif device_ids:
            device_ids = [t.index(d) if is_cuda_like(d) else d for d in device_ids]
            t.log.redirected("DistributedDataParallel(device_ids=...)", f"device_ids={device_ids}")
            if output_device is not None and is_cuda_like(output_device):
                output_device = t.index(output_device)
        orig_init(self, module, device_ids, output_device, *args, **kwargs)

    t.patch(ddp, "__init__", marked(ddp_init, orig_init))


def _install_data_parallel(t: Redirection) -> None:
    dp = torch.nn.DataParallel
    orig_init = dp.__init__

    def dp_init(self, module, device_ids=None, output_device=None, dim=0):
        # what torch's DataParallel does where no GPU is visible: the module itself, in this process
        torch.nn.Module.__init__(self)
        self.module = module
        self.device_ids = []
        self.dim = dim
        t.log.redirected("torch.nn.DataParallel()", f"the module itself on {t.device()} (one device: torch's "
                         f"DataParallel scatters with CUDA-only kernels; use DistributedDataParallel "
                         f"for several devices)")

    t.patch(dp, "__init__", marked(dp_init, orig_init))


def install(t: Redirection) -> None:
    """Redirect collectives, DDP and DataParallel for ``t``."""
    if torch.distributed.is_available():
        from hal.dist import elastic
        elastic.install()  # torchrun restarts (hal run --max-restarts) need a fresh key space per attempt
        _install_process_groups(t)
        _install_ddp(t)
        from hal.dist import premul_sum
        premul_sum.install(t.patch)
    _install_data_parallel(t)
