"""The ops of the emulated device: a kernel for each op of its native set, one boxed fallback for the rest.

This is the op story of ``docs/emulator.md`` ("How ops run"), in code:

1. **native kernels**: every aten op of the native set (``hal/emu/native_ops.json``, a packet
   covering its overloads and in-place forms; with ``HAL_EMU_OPS`` the emulated vendor's native
   set, see :mod:`hal.emu._vendor`) that reaches the device gets an explicit ``PrivateUse1``
   kernel: the C++ router, which runs torch's CPU kernel on the same bytes.  On the host route
   the router is also the kernel of the composites torch has a CPU kernel for (``gelu``,
   ``native_layer_norm``, ``add_``), so that emu computes what the CPU computes; those outside
   the native set are counted as host fallbacks.  (With ``HAL_EMU_OPS`` the composites of ops
   the vendor lacks are left to torch, as on the vendor's stack.)
2. **the boxed fallback** (:func:`fallback`): every other op that reaches the device, and only
   those, so that a kernel registered on ``PrivateUse1`` (emu's, a vendor's, :mod:`hal.fallback`'s)
   always means "the device has one".  It does what the device does for an op it lacks:

   * the emulated vendor's error (``HAL_EMU_OPS``, an op the vendor lacks with ``error``);
   * otherwise ``host`` (the default route): torch's CPU kernel on the same bytes, counted and
     announced once, so a dropout-free run matches the CPU;
   * or ``decomposition`` (``HAL_EMU_FALLBACK=decomposition``, :func:`set_fallback_route`):
     torch's aten-level decomposition first, its pieces dispatched again, the host when it does
     not cover a call: the compositions a vendor plugin's fallback runs.

   Ops without a CPU kernel are decomposed whatever the route (there is nothing else).

Fallbacks are listed by :func:`fallback_report`; the first fallback of each op is announced once
(:class:`FallbackWarning` at the line of the caller's code that led to it, or the notice that
:func:`set_notice` installs).  Ops hal runs for itself are not counted (:func:`uncounted`).
"""
from __future__ import annotations

import contextlib
import os
import threading
import warnings
from typing import Callable, Dict, List, Optional, Tuple

import torch

from hal.emu._device import DEVICE_TYPE
from hal.emu._profile import native_packets
from hal.op_support.decompose import Uses, decomposition_kernel
from hal.util import own_ops
from hal.util.frames import torch_context, user_frame

_C = None  # hal_emu_C, set by configure()


class FallbackWarning(UserWarning):
    """An op ran outside the emulated device's native set (announced once per op)."""


_lock = threading.Lock()
#: uses of the fallback's decompositions (the decomposition route, ops without a CPU kernel)
_uses = Uses()
_announced: set = set()
#: the fallback's choice for each op that reached it (emptied when the route changes)
_chosen: Dict[torch._ops.OpOverload, Callable] = {}
#: the Library that holds the boxed fallback (kept for the life of the process)
_fallback_lib: Optional[torch.library.Library] = None
#: aten ops that reach the device: no kernel of emu's C++ and no composite (set by configure)
_reaching: List[str] = []
#: aten ops torch runs as a composite on a device although the CPU has a kernel of its own
_composites: List[str] = []
#: the vendor whose coverage HAL_EMU_OPS emulates (a :class:`hal.emu._vendor.VendorOps`), or None
_vendor = None


def caller_frame() -> Tuple[str, int]:
    """``(file, line)`` of the innermost frame of the caller's code (:func:`hal.util.frames.user_frame`):
    the line that led to the op; ``("<backward of X>", 0)`` when none (an op of the backward pass
    runs on torch's autograd thread)."""
    f = user_frame(2)
    return (f.f_code.co_filename, f.f_lineno) if f is not None else (f"<{torch_context()}>", 0)


def device_name() -> str:
    """How the device names itself in a fallback line: ``"emu"``, or with ``HAL_EMU_OPS``
    ``"emu with musa-2.7's coverage (HAL_EMU_OPS)"``."""
    return f"{DEVICE_TYPE} with {_vendor.name}'s coverage (HAL_EMU_OPS)" if _vendor is not None else DEVICE_TYPE


def _warn(op: str, route: str, where: Tuple[str, int]) -> None:
    how = "decomposed into other ops" if route == "decomposition" else "computed on the host"
    if _vendor is not None and route == "host":  # HAL_EMU_OPS: in the vendor's words
        text = _vendor.message(op, "cpu_fallback") or f"{_vendor.name} has no kernel for {op}; {how}"
        warnings.warn_explicit(f"emu (HAL_EMU_OPS={_vendor.name}): {text} (counted in hal.fallback_report())",
                               FallbackWarning, where[0], where[1])
        return
    warnings.warn_explicit(f"emu: {op} is not in the emulated device's native op set; {how} "
                           f"(counted in hal.fallback_report())", FallbackWarning, where[0], where[1])


#: called once per op on its first fallback: (op, route, (file, line))
_notice: Callable[[str, str, Tuple[str, int]], None] = _warn


def set_notice(fn: Optional[Callable[[str, str, Tuple[str, int]], None]]) -> None:
    """Replace how a first fallback is announced: ``fn(op, route, (file, line))``; ``None``: the
    default :class:`FallbackWarning`.  ``hal run`` prints one line on rank 0 and nothing elsewhere;
    ``op_coverage trace`` says nothing (the trace is its report)."""
    global _notice
    _notice = fn or _warn


def _announce(op: str, route: str) -> None:
    with _lock:
        if op in _announced:
            return
        _announced.add(op)
    _notice(op, route, caller_frame())


def _on_host_fallback(op: str) -> None:  # called by the C++ router, once per op
    _announce(op, "host")


@contextlib.contextmanager
def uncounted():
    """Ops run inside the block are hal's own: not counted as fallbacks, not traced
    (:func:`hal.util.own_ops.own_ops`, and the C++ router's counting off on this thread)."""
    old = _C.set_counting(False) if _C is not None else True
    try:
        with own_ops.own_ops():
            yield
    finally:
        if _C is not None:
            _C.set_counting(old)


def fallback_report() -> List[dict]:
    """Every op that fell back on the emulated device: ``op``, ``route``, ``count``.

    ``route`` is ``"decomposition"`` (rewritten into other ops, which were dispatched again)
    or ``"host"`` (torch's CPU kernel on the host bytes).  Sorted by count, highest first.
    """
    rows = [{"op": op, "route": "decomposition", "count": n} for op, n in _uses.snapshot().items()]
    if _C is not None:
        rows += [{"op": op, "route": "host", "count": n} for op, n in _C.host_counts()]
    return sorted(rows, key=lambda r: (-r["count"], r["op"], r["route"]))


def reset_fallback_report() -> None:
    """Forget the counted fallbacks (first fallbacks are then announced again)."""
    _uses.reset()
    with _lock:
        _announced.clear()
    if _C is not None:
        _C.reset_host_counts()


# -- the native set --------------------------------------------------------------------------------
def is_native(qualified: str) -> bool:
    """True for an op of the native set (``"aten::add.Tensor"``): with ``HAL_EMU_OPS`` one the
    emulated vendor has; else one of the profile's packets or its in-place form (``add`` covers
    ``add_``)."""
    if _vendor is not None:
        return qualified in _vendor.native
    packet = qualified.split(".", 1)[0]
    native = native_packets()
    return packet in native or (packet.endswith("_") and packet[:-1] in native)


def _has_kernel(qualified: str, key: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key)


def _has_cpu_kernel(qualified: str) -> bool:
    return torch._C._dispatch_has_computed_kernel_for_dispatch_key(qualified, "CPU")


COMPOSITE_KEYS = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


def _aten_ops() -> List[str]:
    return sorted(q for q in torch._C._dispatch_get_all_op_names() if q.startswith("aten::"))


def ops_reaching_device() -> List[str]:
    """aten ops whose call on emu tensors reaches the ``PrivateUse1`` key: no kernel of emu's C++
    there and no composite kernel that would run instead (read before hal registers any)."""
    return [q for q in _aten_ops() if not _has_kernel(q, "PrivateUse1")
            and not any(_has_kernel(q, k) for k in COMPOSITE_KEYS)]


def composites_with_cpu_kernels() -> List[str]:
    """Ops that reach a device lacking them through one of torch's composite kernels although
    the CPU has a kernel of its own: ``native_layer_norm`` (a composite of smaller ops) and the
    functional and in-place forms of structured ops (``gelu``, ``add_``: the CPU runs their own
    kernel where a device gets ``gelu.out`` into a fresh output).  The host route claims them so
    that emu computes what the CPU computes, the same way."""
    return [q for q in _aten_ops() if _has_kernel(q, "CPU") and not _has_kernel(q, "PrivateUse1")
            and (_has_kernel(q, "CompositeExplicitAutograd") or _has_kernel(q, "CompositeExplicitAutogradNonFunctional"))]


def _kernels(route: str) -> Tuple[List[str], List[str]]:
    """``(native, counted)``: the ops that get the C++ router as their kernel on ``route``."""
    native = [q for q in _reaching if is_native(q) and _has_cpu_kernel(q)]
    counted: List[str] = []
    if route == "host":
        native += [q for q in _composites if is_native(q)]
        if _vendor is None:  # with HAL_EMU_OPS the composites of ops the vendor lacks stay torch's
            counted = [q for q in _composites if not is_native(q)]
    strip = len("aten::")
    return sorted(q[strip:] for q in native), sorted(q[strip:] for q in counted)


# -- the boxed fallback --------------------------------------------------------------------------------
def qualified_name(op: torch._ops.OpOverload) -> str:
    """The dispatcher's name of ``op``: ``"aten::gelu"``, ``"aten::add.Tensor"``."""
    overload = op._schema.overload_name
    return op._schema.name + (f".{overload}" if overload else "")


def _raiser(message: str) -> Callable:
    def kernel(*args, **kwargs):
        raise NotImplementedError(message)
    return kernel


def _host(op: torch._ops.OpOverload) -> Callable:
    """``op`` as torch's CPU kernel on the host bytes of its arguments, counted as a host fallback."""
    name, overload = op._schema.name, op._schema.overload_name
    return lambda *args, **kwargs: _C.run_host(name, overload, *args, **kwargs)


def _choose(op: torch._ops.OpOverload) -> Callable:
    """What the fallback does with ``op`` (see the module docstring)."""
    qualified = qualified_name(op)
    if _vendor is not None and qualified in _vendor.errors:
        return _raiser(_vendor.errors[qualified])
    host = _host(op)
    if op.namespace == "aten" and (_route == "decomposition" or not _has_cpu_kernel(qualified)):
        from hal.op_support.torch_plan import decomposition_for
        decomp = decomposition_for(qualified[len("aten::"):])
        if decomp is not None:
            return decomposition_kernel(op, decomp, qualified, otherwise=host, uses=_uses,
                                        announce=lambda q: _announce(q, "decomposition"),
                                        counting=lambda: not own_ops.inside())
    return host


def fallback(op: torch._ops.OpOverload, *args, **kwargs):
    """The emulated device's boxed fallback: every op without a kernel on emu comes here."""
    kernel = _chosen.get(op)
    if kernel is None:
        kernel = _chosen.setdefault(op, _choose(op))
    return kernel(*args, **kwargs)


def missing_op(op: torch._ops.OpOverload) -> Callable:
    """What the device does with a call of ``op`` when it has no kernel for it: :func:`fallback`
    for that op (:meth:`hal.plugin.backend.Backend.op_fallback` of the emulator)."""
    return lambda *args, **kwargs: fallback(op, *args, **kwargs)


# -- routes ------------------------------------------------------------------------------------------
#: values of HAL_EMU_FALLBACK
ROUTES = ("host", "decomposition")
_route = "host"


def set_fallback_route(route: str) -> None:
    """Choose how ops outside the native set run: ``"host"`` (torch's CPU kernel: the CPU's
    numbers) or ``"decomposition"`` (torch._decomp compositions first, as a vendor plugin's
    fallback runs them).  Takes effect for the next op."""
    global _route
    if route not in ROUTES:
        raise ValueError(f"emu: fallback route {route!r} is not one of {', '.join(ROUTES)} "
                         f"(HAL_EMU_FALLBACK)")
    native, counted = _kernels(route)
    _C.set_kernels(native, counted)
    with _lock:
        _chosen.clear()
    _route = route


def fallback_route() -> str:
    """The route ops outside the native set take now (see :func:`set_fallback_route`)."""
    return _route


def configure(native_module, route: Optional[str] = None) -> None:
    """Read which ops reach the device, take ``HAL_EMU_OPS``'s coverage when set, register the
    boxed fallback and the native set's kernels for the fallback route (``HAL_EMU_FALLBACK``,
    default host)."""
    global _C, _vendor, _fallback_lib
    from hal._errors import HalError
    route = route or os.environ.get("HAL_EMU_FALLBACK", "").strip() or "host"
    if route not in ROUTES:
        raise HalError(f"HAL_EMU_FALLBACK={route!r}: expected one of {', '.join(ROUTES)}; "
                       f"unset it for 'host' (the CPU's kernels, so emu matches the CPU)")
    _C = native_module
    _reaching[:] = ops_reaching_device()
    _composites[:] = composites_with_cpu_kernels()
    from hal.emu._vendor import VendorOps, emulated_profile
    profile = emulated_profile()
    if profile is not None:
        _vendor = VendorOps(profile, _reaching)
    _C.set_fallback_observer(_on_host_fallback)
    _fallback_lib = torch.library.Library("_", "IMPL")
    if hasattr(_fallback_lib, "fallback"):
        _fallback_lib.fallback(fallback, "PrivateUse1")
    else:  # torch < 2.5: the C++ module registers the boxed fallback and calls this one
        _C.set_python_fallback(fallback)
    set_fallback_route(route)


def vendor_profile():
    """The torch profile ``HAL_EMU_OPS`` named (a :class:`hal.op_support.torch_profile.TorchProfile`), or None."""
    return _vendor.profile if _vendor is not None else None


def vendor_report() -> Optional[dict]:
    """What ``HAL_EMU_OPS`` changed (see :meth:`hal.emu._vendor.VendorOps.report`), or None."""
    return _vendor.report() if _vendor is not None else None
