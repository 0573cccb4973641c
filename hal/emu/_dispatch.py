"""Op routing of the emulated device: native kernel → decomposition → host computation.

Every aten op on an ``emu`` tensor arrives here (from ``EmuTensor.__torch_dispatch__``,
or, for factory calls without a tensor argument, from the ``PrivateUse1`` fallback):

1. ops of the native profile run on the host bytes directly — the emulator's "kernels";
2. ops another library registered for ``PrivateUse1`` (``torch.library``) run as registered;
3. ops with an aten-level entry in torch's decomposition table are decomposed, and each piece is
   routed again (so it lands on native ops where it can);
4. anything else is a host computation.

Steps 3 and 4 are fallbacks: counted per op, warned once (:class:`FallbackWarning`) and
listed by :func:`fallback_report`.
"""
from __future__ import annotations

import threading
import warnings
from typing import Dict, List

import torch
import torch.utils._pytree as pytree

from hal.emu._profile import native_packets
from hal.emu._tensor import DEVICE_TYPE, EmuTensor, unwrap, wrap

#: ops that may mix emu tensors with host tensors of any shape (copies and index tensors)
_MIXED_DEVICE_OK = frozenset({
    "aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize", "aten::_to_copy",
    "aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_",
})
#: ops that change a tensor's own sizes or storage; the wrapper cannot follow them
_METADATA_MUTATING = frozenset({"aten::resize_", "aten::set_", "aten::as_strided_",
                                "aten::t_", "aten::transpose_", "aten::squeeze_",
                                "aten::unsqueeze_", "aten::swapdims_", "aten::swapaxes_"})


class FallbackWarning(UserWarning):
    """An op ran outside the emulated device's native set (warned once per op)."""


class _Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.ops: Dict[str, Dict[str, object]] = {}

    def record(self, name: str, route: str) -> None:
        with self.lock:
            rec = self.ops.get(name)
            first = rec is None
            if first:
                rec = self.ops[name] = {"op": name, "route": route, "count": 0}
            rec["count"] += 1
            rec["route"] = route
        if first:
            how = ("decomposed into other ops" if route == "decomposition"
                   else "computed on the host")
            warnings.warn(f"emu: {name} is not in the emulated device's native op set; {how} "
                          f"(counted in hal.fallback_report())", FallbackWarning, stacklevel=3)


COUNTS = _Counts()
#: ops whose PrivateUse1 kernel is this router itself (see hal.emu._device)
OWN_KERNELS = set()
_decomp_broken = set()
_tls = threading.local()


def fallback_report() -> List[dict]:
    """Every op that fell back on the emulated device: ``op``, ``route``, ``count``.

    ``route`` is ``"decomposition"`` (rewritten into other ops, which were routed again)
    or ``"host"`` (computed on the host).  Sorted by count, highest first.
    """
    with COUNTS.lock:
        rows = [dict(r) for r in COUNTS.ops.values()]
    return sorted(rows, key=lambda r: (-r["count"], r["op"]))


def reset_fallback_report() -> None:
    """Forget the counted fallbacks (warnings are then issued again)."""
    with COUNTS.lock:
        COUNTS.ops.clear()


def _decomposition(func):
    """torch's aten-level decomposition of ``func`` (``torch._decomp``), if it has one.

    The primitive-level references (``torch._refs``) are left out: they rewrite an op
    into ``prims`` calls that no device implements natively, which only adds host work.
    """
    from torch._decomp import decomposition_table
    fn = decomposition_table.get(func)
    if fn is None or getattr(fn, "__module__", "").startswith("torch._refs"):
        return None
    return fn


def route(func, args, kwargs):
    """Run aten op ``func`` on emulated tensors; see the module docstring for the order."""
    name = func.name()
    packet = func._schema.name
    if packet in _METADATA_MUTATING:
        return _metadata_mutation(func, name, args, kwargs)
    special = _COPIES.get(packet)
    if special is not None:
        return special(*args, **kwargs)
    if is_native(packet):
        return host_call(func, args, kwargs)
    if name not in OWN_KERNELS and torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1"):
        with torch._C._DisableTorchDispatch():
            return func(*args, **kwargs)
    active = getattr(_tls, "active", None)
    if active is None:
        active = _tls.active = set()
    decomp = None
    if name not in _decomp_broken and name not in active and _decomposable(func, args, kwargs):
        decomp = _decomposition(func)
    if decomp is not None:
        COUNTS.record(name, "decomposition")
        active.add(name)
        try:
            if func._schema.is_mutable:
                return decomp(*args, **kwargs)
            try:
                return decomp(*args, **kwargs)
            except Exception:
                # the decomposition does not cover this call: compute it on the host instead
                _decomp_broken.add(name)
        finally:
            active.discard(name)
    COUNTS.record(name, "host")
    return host_call(func, args, kwargs)


def _copy_from(self, dst, non_blocking=False):
    unwrap(dst).copy_(unwrap(self))
    return dst


def _copy_from_and_resize(self, dst):
    if tuple(self.shape) != tuple(dst.shape):
        raise RuntimeError(f"emu: cannot resize the {tuple(dst.shape)} destination of a copy to "
                           f"{tuple(self.shape)}; allocate the destination with the right shape")
    return _copy_from(self, dst)


#: the cross-device copy ops torch calls when one side is not a CPU tensor
_COPIES = {"aten::_copy_from": _copy_from, "aten::_copy_from_and_resize": _copy_from_and_resize}


def is_native(packet: str) -> bool:
    """True for ops of the native profile and their in-place forms (``add`` covers ``add_``)."""
    native = native_packets()
    return packet in native or (packet.endswith("_") and packet[:-1] in native)


def _decomposable(func, args, kwargs) -> bool:
    """Decompose only tensor ops without ``out=``: a decomposition may resize its output,
    which an emulated tensor cannot follow, and factory ops are one host call anyway."""
    if any(a.is_out for a in func._schema.arguments):
        return False
    return any(isinstance(x, EmuTensor) for x in pytree.tree_leaves((args, kwargs)))


def _metadata_mutation(func, name, args, kwargs):
    self = args[0]
    if func._schema.name == "aten::resize_" and tuple(args[1]) == tuple(self.shape):
        return self
    raise RuntimeError(f"emu: {name} changes a tensor's sizes or storage in place, which the "
                       f"emulated device does not support; use the out-of-place form "
                       f"(e.g. x = x.{func._schema.name.split('::')[1].rstrip('_')}(...))")


def _is_emu_device(dev) -> bool:
    if dev is None:
        return False
    return torch.device(dev).type == DEVICE_TYPE


def _check_devices(name, flat):
    if name in _MIXED_DEVICE_OK:
        return
    if not any(isinstance(x, EmuTensor) for x in flat):
        return
    for x in flat:
        if isinstance(x, torch.Tensor) and not isinstance(x, EmuTensor) and x.dim() > 0:
            raise RuntimeError(f"Expected all tensors to be on the same device, but found at "
                               f"least two devices, {DEVICE_TYPE}:0 and {x.device}! "
                               f"(when checking arguments for {name})")


def host_call(func, args, kwargs):
    """Compute ``func`` on the host tensors behind the emulated ones; wrap new results."""
    name = func.name()
    flat, spec = pytree.tree_flatten((args, kwargs))
    _check_devices(name, flat)
    host_flat = [unwrap(x) for x in flat]
    h_args, h_kwargs = pytree.tree_unflatten(host_flat, spec)
    to_emu = True
    if "device" in h_kwargs:
        to_emu = _is_emu_device(h_kwargs["device"]) if h_kwargs["device"] is not None else \
            any(isinstance(x, EmuTensor) for x in flat)
        if to_emu:
            h_kwargs["device"] = torch.device("cpu")
    gen = next((a for a in func._schema.arguments if a.name == "generator"), None)
    if gen is not None and gen.kwarg_only and h_kwargs.get("generator") is None:
        from hal.emu._module import default_generator
        h_kwargs["generator"] = default_generator()
    with torch._C._DisableTorchDispatch():
        out = func(*h_args, **h_kwargs)
    by_id = {id(h): x for h, x in zip(host_flat, flat) if isinstance(h, torch.Tensor)}

    def back(o):
        if not isinstance(o, torch.Tensor):
            return o
        same = by_id.get(id(o))
        if same is not None:
            return same
        return wrap(o) if to_emu else o

    return pytree.tree_map(back, out)
