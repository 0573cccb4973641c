"""Redirect the CUDA calls of an unmodified script to the selected backend."""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, List, Tuple

import torch
from torch.overrides import TorchFunctionMode

from hal._errors import NotSupported
from hal.transfer._log import TransferLog

#: torch.cuda functions mapped onto the backend's device facet (name -> facet method)
FACET_CALLS = {
    "synchronize": "synchronize", "manual_seed": "manual_seed", "manual_seed_all": "manual_seed_all",
    "initial_seed": "initial_seed", "get_rng_state": "get_rng_state", "set_rng_state": "set_rng_state",
    "get_rng_state_all": "get_rng_state_all", "set_rng_state_all": "set_rng_state_all",
    "memory_allocated": "memory_allocated", "max_memory_allocated": "max_memory_allocated",
    "memory_reserved": "memory_reserved", "max_memory_reserved": "memory_reserved",
    "memory_stats": "memory_stats", "reset_peak_memory_stats": "reset_peak_memory_stats",
    "mem_get_info": "mem_get_info", "empty_cache": "empty_cache", "get_device_name": "device_name",
    "current_stream": "current_stream", "stream": "stream", "Stream": "Stream", "Event": "Event",
}
#: values a facet call returns when the backend has no such thing (the call is reported)
NEUTRAL = {"memory_allocated": 0, "max_memory_allocated": 0, "memory_reserved": 0,
           "max_memory_reserved": 0, "memory_stats": {}, "reset_peak_memory_stats": None,
           "empty_cache": None}


def _is_cuda(dev) -> bool:
    if isinstance(dev, torch.device):
        return dev.type == "cuda"
    return isinstance(dev, str) and (dev == "cuda" or dev.startswith("cuda:"))


class Transfer:
    """The redirections in force inside :func:`enable`; ``log`` records what happened."""

    def __init__(self, backend):
        self.backend = backend
        self.device_type = backend.device_type
        self.log = TransferLog()
        self._undo: List[Tuple[Any, str, Any]] = []

    # -- devices ------------------------------------------------------------------------
    def device(self, dev=None) -> torch.device:
        """The backend device standing in for CUDA device ``dev``."""
        if self.device_type == "cpu":
            return torch.device("cpu")
        index = None
        if isinstance(dev, int):
            index = dev
        elif dev is not None:
            index = torch.device(dev).index
        count = self.backend.device_count()
        if index is None:
            index = self.backend.current_device()
        elif index >= count:
            self.log.redirected(f"cuda:{index}", f"{self.device_type}:0 ({self.backend.name} shows "
                                f"{count} device(s) to this process, as CUDA_VISIBLE_DEVICES=<rank> would)")
            index = 0
        return torch.device(self.device_type, index)

    def map_device(self, dev):
        if not _is_cuda(dev):
            return dev
        target = self.device(dev)
        self.log.redirected(f"device {dev!s}", str(target))
        return target

    # -- patching -----------------------------------------------------------------------
    def patch(self, owner, name: str, value) -> None:
        self._undo.append((owner, name, owner.__dict__.get(name, _MISSING) if isinstance(owner, type)
                           else getattr(owner, name, _MISSING)))
        setattr(owner, name, value)

    def restore(self) -> None:
        for owner, name, old in reversed(self._undo):
            if old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)
        self._undo.clear()


_MISSING = object()


class _DeviceMode(TorchFunctionMode):
    """Rewrites ``device="cuda"`` arguments of every torch function and tensor method."""

    def __init__(self, transfer: Transfer):
        super().__init__()
        self.t = transfer

    def __torch_function__(self, func, types, args=(), kwargs=None):
        # runs for every torch call inside the block: keep the common path lean
        if kwargs and "device" in kwargs and _is_cuda(kwargs["device"]):
            kwargs = dict(kwargs)
            kwargs["device"] = self.t.map_device(kwargs["device"])
        for i, a in enumerate(args):
            if a.__class__ in _DEVICE_LIKE and _is_cuda(a):
                args = tuple(self.t.map_device(x) if x.__class__ in _DEVICE_LIKE else x for x in args)
                break
        return func(*args, **(kwargs or {}))


_DEVICE_LIKE = (str, torch.device)


def _patch_tensor_and_module(t: Transfer) -> None:
    def tensor_cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
        t.log.redirected("Tensor.cuda()", f"Tensor.to({t.device(device)})")
        return self.to(t.device(device), non_blocking=non_blocking, memory_format=memory_format)

    def module_cuda(self, device=None):
        t.log.redirected("Module.cuda()", f"Module.to({t.device(device)})")
        return self.to(t.device(device))

    orig_pin = torch.Tensor.pin_memory

    def pin_memory(self, device=None):
        if t.device_type in ("cpu", "emu"):
            t.log.not_redirected("Tensor.pin_memory()", f"{t.backend.name} has no page-locked host "
                                 f"memory; the tensor is left as it is (values unchanged)")
            return self
        return orig_pin(self) if device is None else orig_pin(self, device)

    t.patch(torch.Tensor, "cuda", tensor_cuda)
    t.patch(torch.nn.Module, "cuda", module_cuda)
    t.patch(torch.Tensor, "pin_memory", pin_memory)


def _patch_torch_cuda(t: Transfer) -> None:
    cuda = torch.cuda
    b = t.backend

    def facet(name: str, method: str) -> Callable:
        def call(*args, **kwargs):
            if name in ("synchronize", "memory_allocated", "max_memory_allocated", "memory_reserved",
                        "max_memory_reserved", "memory_stats", "reset_peak_memory_stats",
                        "mem_get_info", "get_device_name", "current_stream") and args:
                args = (t.device(args[0]).index if t.device_type != "cpu" else None,) + args[1:]
            try:
                result = getattr(b, method)(*args, **kwargs)
            except NotSupported as exc:
                if name in NEUTRAL:
                    t.log.not_redirected(f"torch.cuda.{name}", f"{exc}; returned {NEUTRAL[name]!r}")
                    return NEUTRAL[name]
                raise
            t.log.redirected(f"torch.cuda.{name}", f"hal {b.name} backend .{method}()")
            return result
        return call

    for name, method in FACET_CALLS.items():
        t.patch(cuda, name, facet(name, method))
    if t.device_type == "cpu":
        # the CPU has no device generator: torch.manual_seed already seeds it (and calls
        # torch.cuda.manual_seed_all itself); re-seeding it here would change the stream
        def no_device_rng(name, result=None):
            def call(*args, **kwargs):
                t.log.not_redirected(f"torch.cuda.{name}", "cpu has no device generator; the CPU "
                                     "generator is left as torch.manual_seed set it")
                return result() if callable(result) else result
            return call
        for name in ("manual_seed", "manual_seed_all", "seed", "seed_all", "set_rng_state",
                     "set_rng_state_all"):
            t.patch(cuda, name, no_device_rng(name))
        t.patch(cuda, "initial_seed", no_device_rng("initial_seed", torch.initial_seed))
        t.patch(cuda, "get_rng_state", no_device_rng("get_rng_state", torch.get_rng_state))
        t.patch(cuda, "get_rng_state_all", no_device_rng("get_rng_state_all", lambda: [torch.get_rng_state()]))

    def is_available():
        t.log.redirected("torch.cuda.is_available", f"True (runs on {b.name})")
        return True

    def device_count():
        t.log.redirected("torch.cuda.device_count", f"{b.name} device count")
        return b.device_count()

    def current_device():
        return b.current_device() if t.device_type != "cpu" else 0

    def set_device(dev):
        target = t.device(dev)
        t.log.redirected("torch.cuda.set_device", str(target))
        if t.device_type != "cpu":
            b.set_device(target.index)

    def is_bf16_supported(*a, **k):
        return torch.bfloat16 in b.supported_dtypes()

    for name, fn in (("is_available", is_available), ("device_count", device_count),
                     ("current_device", current_device), ("set_device", set_device),
                     ("is_bf16_supported", is_bf16_supported), ("is_initialized", lambda: True)):
        t.patch(cuda, name, fn)

    # every other public torch.cuda function is reported when called
    for name in dir(cuda):
        if name.startswith("_") or name in FACET_CALLS or name in ("is_available", "device_count",
                "current_device", "set_device", "is_bf16_supported", "is_initialized", "amp"):
            continue
        obj = getattr(cuda, name)
        if callable(obj) and not isinstance(obj, type) and getattr(obj, "__module__", "").startswith("torch.cuda"):
            t.patch(cuda, name, _reporting(t, f"torch.cuda.{name}", obj))


def _reporting(t: Transfer, what: str, fn: Callable) -> Callable:
    @functools.wraps(fn)
    def call(*args, **kwargs):
        t.log.not_redirected(what, "no equivalent on the selected backend; called torch's own function")
        return fn(*args, **kwargs)
    return call


def _patch_amp(t: Transfer) -> None:
    ac = torch.amp.autocast_mode.autocast
    orig_init = ac.__init__

    def init(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if device_type == "cuda":
            if dtype is None:
                dtype = torch.float16  # CUDA's autocast default, kept: no silent dtype change
            t.log.redirected("torch.autocast('cuda')", f"torch.autocast({t.device_type!r}, dtype={dtype})")
            device_type = t.device_type
        orig_init(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    t.patch(ac, "__init__", init)
    gs = torch.amp.GradScaler
    orig_gs = gs.__init__

    def gs_init(self, device="cuda", *args, **kwargs):
        if device == "cuda":
            t.log.redirected("GradScaler('cuda')", f"GradScaler({t.device_type!r})")
            device = t.device_type
        orig_gs(self, device, *args, **kwargs)

    t.patch(gs, "__init__", gs_init)


def _patch_dist(t: Transfer) -> None:
    import torch.distributed as dist
    if not dist.is_available():
        return
    spec = t.backend.spec
    if t.device_type == "cpu":
        target = "gloo"
    else:
        target = f"cpu:gloo,{t.device_type}:{spec.dist_backend}" if spec.dist_backend else "gloo"

    def map_backend(backend):
        if isinstance(backend, str) and "nccl" in backend:
            t.log.redirected(f"process group backend {backend!r}", repr(target))
            return target
        return backend

    orig_init = dist.init_process_group

    @functools.wraps(orig_init)
    def init_process_group(backend=None, *args, **kwargs):
        if t.device_type == "emu":
            from hal.emu._ccl import register_c10d_backend
            register_c10d_backend()
        return orig_init(map_backend(backend), *args, **kwargs)

    orig_new = dist.new_group

    @functools.wraps(orig_new)
    def new_group(*args, **kwargs):
        if "backend" in kwargs:
            kwargs["backend"] = map_backend(kwargs["backend"])
        return orig_new(*args, **kwargs)

    t.patch(dist, "init_process_group", init_process_group)
    t.patch(dist, "new_group", new_group)

    ddp = torch.nn.parallel.DistributedDataParallel
    orig_ddp = ddp.__init__

    def ddp_init(self, module, device_ids=None, output_device=None, *args, **kwargs):
        if t.device_type == "cpu" and (device_ids or output_device is not None):
            t.log.redirected("DistributedDataParallel(device_ids=...)", "device_ids=None (CPU modules take none)")
            device_ids, output_device = None, None
        elif device_ids:
            device_ids = [t.device(d).index if (_is_cuda(d) or isinstance(d, int)) else d for d in device_ids]
            if output_device is not None and (_is_cuda(output_device) or isinstance(output_device, int)):
                output_device = t.device(output_device).index
        orig_ddp(self, module, device_ids, output_device, *args, **kwargs)

    t.patch(ddp, "__init__", ddp_init)


@contextlib.contextmanager
def enable(backend=None):
    """Run CUDA-written code on the selected backend inside the block.

    Redirects ``.cuda()``, ``device="cuda"`` (factories, ``.to``, ``torch.device`` objects),
    ``torch.cuda.*`` device, memory, RNG, stream and event calls, ``torch.autocast("cuda")``
    and ``GradScaler("cuda")``, ``init_process_group("nccl")`` / ``new_group`` and DDP's
    ``device_ids``.  Nothing changes numerics: dtypes are kept (autocast without a dtype
    gets CUDA's float16), ``torch.jit.script`` is untouched.  Each redirection is logged
    once (logger ``hal.transfer``); calls it cannot redirect are reported.  Yields the
    :class:`Transfer`; ``transfer.log.rows("redirected")`` / ``rows("not_redirected")``
    list what happened.

    On a CUDA backend the block changes nothing.

    :param backend: a loaded :class:`hal.backend.Backend` (default: the selected one).
    """
    if backend is None:
        from hal.registry import selected_backend
        backend = selected_backend()
    t = Transfer(backend)
    if backend.device_type == "cuda":
        yield t
        return
    try:
        _patch_tensor_and_module(t)
        _patch_torch_cuda(t)
        _patch_amp(t)
        _patch_dist(t)
        with _DeviceMode(t):
            yield t
    finally:
        t.restore()
