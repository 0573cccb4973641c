"""Op routing of the emulated device: native kernels, and the fallback for the rest.

Every aten op that reaches the ``emu`` device (after autograd and the composite kernels:
what a vendor kernel would receive) is routed:

1. ops of the native profile (``hal/data/emu_profile.json``) run as torch's CPU kernel on
   the same bytes, in C++ — the emulator's "kernels";
2. every other op is a fallback, counted per op and listed by :func:`fallback_report`, by
   one of two routes (``HAL_EMU_FALLBACK``, or :func:`set_fallback_route`):

   * ``host`` (default): torch's CPU kernel on the same bytes, so the numbers are the
     CPU's — a dropout-free run on emu matches the CPU.  Ops torch would otherwise run as a
     composite on a device lacking them (``native_layer_norm``, ``native_group_norm``, the
     functional forms of structured ops such as ``gelu``, which a device gets as
     ``gelu.out``) are routed here too and run the CPU's own kernel, for the same reason;
   * ``decomposition``: torch's aten-level decomposition (``torch._decomp``) first, its
     pieces routed again, the host when there is none — the compositions a vendor plugin's
     fallback runs.  Values then differ from the CPU's at float32 rounding, which training
     can amplify.

   Ops without a CPU kernel are decomposed whatever the route (there is nothing else).

The first fallback of each op is announced once (:class:`FallbackWarning` at the line of the
caller's code that led to it; ``hal run`` prints one line on rank 0 instead).  Calls hal
makes for itself are not counted (:func:`uncounted`).
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings
from typing import Callable, Dict, List, Optional, Tuple

import torch

from hal.emu._profile import native_packets

_C = None  # hal_emu_C, set by configure()


class FallbackWarning(UserWarning):
    """An op ran outside the emulated device's native set (announced once per op)."""


_lock = threading.Lock()
_decomposed: Dict[str, int] = {}
_announced: set = set()
_tls = threading.local()
_libs: List[torch.library.Library] = []
#: ops whose decomposition failed once: they go to the host from then on
_broken: set = set()

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../hal
_TORCH = os.path.dirname(os.path.abspath(torch.__file__))
_SKIP_PREFIXES = (_HERE + os.sep, _TORCH + os.sep)
_SKIP_FILES = ("<frozen ",)


def torch_context() -> str:
    """Where an op with no caller's frame on the stack comes from: the backward node torch's
    autograd engine is running (``"backward of MseLossBackward0"``), else torch's own code."""
    node = torch._C._current_autograd_node() if hasattr(torch._C, "_current_autograd_node") else None
    return f"backward of {node.name()}" if node is not None else "torch's own code"


def caller_frame() -> Tuple[str, int]:
    """``(file, line)`` of the innermost frame outside torch, hal and the import machinery:
    the line of the caller's code that led to the op; ``("<backward of X>", 0)`` when none
    (an op of the backward pass runs on torch's autograd thread)."""
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if not name.startswith(_SKIP_PREFIXES) and not name.startswith(_SKIP_FILES) \
                and os.path.basename(name) not in ("runpy.py", "contextlib.py", "threading.py"):
            return name, f.f_lineno
        f = f.f_back
    return f"<{torch_context()}>", 0


def _warn(op: str, route: str, where: Tuple[str, int]) -> None:
    how = "decomposed into other ops" if route == "decomposition" else "computed on the host"
    warnings.warn_explicit(f"emu: {op} is not in the emulated device's native op set; {how} "
                           f"(counted in hal.fallback_report())", FallbackWarning, where[0], where[1])


#: called once per op on its first fallback: (op, route, (file, line))
_notice: Callable[[str, str, Tuple[str, int]], None] = _warn


def set_notice(fn: Optional[Callable[[str, str, Tuple[str, int]], None]]) -> None:
    """Replace how a first fallback is announced (``None``: the default FallbackWarning).
    ``hal run`` uses this to print one line on rank 0 and nothing elsewhere."""
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
    """Ops run inside the block are not counted as fallbacks (hal's own calls)."""
    old_c = _C.set_counting(False) if _C is not None else True
    old_py = getattr(_tls, "uncounted", False)
    _tls.uncounted = True
    try:
        yield
    finally:
        _tls.uncounted = old_py
        if _C is not None:
            _C.set_counting(old_c)


def fallback_report() -> List[dict]:
    """Every op that fell back on the emulated device: ``op``, ``route``, ``count``.

    ``route`` is ``"decomposition"`` (rewritten into other ops, which were routed again)
    or ``"host"`` (torch's CPU kernel on the host bytes).  Sorted by count, highest first.
    """
    rows = []
    with _lock:
        rows += [{"op": op, "route": "decomposition", "count": n} for op, n in _decomposed.items()]
    if _C is not None:
        rows += [{"op": op, "route": "host", "count": n} for op, n in _C.host_counts()]
    return sorted(rows, key=lambda r: (-r["count"], r["op"], r["route"]))


def reset_fallback_report() -> None:
    """Forget the counted fallbacks (first fallbacks are then announced again)."""
    with _lock:
        _decomposed.clear()
        _announced.clear()
    if _C is not None:
        _C.reset_host_counts()


def is_native(packet: str) -> bool:
    """True for ops of the native profile and their in-place forms (``add`` covers ``add_``)."""
    native = native_packets()
    return packet in native or (packet.endswith("_") and packet[:-1] in native)


def _reaches_device(qualified: str) -> bool:
    """True when a call of this op on emu tensors reaches the PrivateUse1 key (no kernel of
    its own there and no composite kernel that would run instead)."""
    for key in ("PrivateUse1", "CompositeImplicitAutograd", "CompositeExplicitAutograd",
                "CompositeExplicitAutogradNonFunctional"):
        if torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key):
            return False
    return True


def _decomposition_kernel(op: torch._ops.OpOverload, decomp: Callable, qualified: str):
    packet, _, overload = qualified.partition(".")
    # out= forms (what structured ops reach the device as) write only at the end
    in_place = any(a.alias_info is not None and a.alias_info.is_write and not a.is_out
                   for a in op._schema.arguments)

    def kernel(*args, **kwargs):
        active = getattr(_tls, "active", None)
        if active is None:
            active = _tls.active = set()
        if qualified in active or qualified in _broken:
            return _C.run_host(packet, overload, *args, **kwargs)
        if not getattr(_tls, "uncounted", False):
            with _lock:
                first = qualified not in _decomposed
                _decomposed[qualified] = _decomposed.get(qualified, 0) + 1
            if first:
                _announce(qualified, "decomposition")
        active.add(qualified)
        try:
            out = decomp(*args, **kwargs)
            if out is not NotImplemented:
                return out
            # the decomposition declines this call (e.g. an argument it does not cover)
        except Exception:
            if in_place:  # it may have written part of its input already
                raise
            _broken.add(qualified)  # the decomposition does not cover this call: use the host
        finally:
            active.discard(qualified)
        return _C.run_host(packet, overload, *args, **kwargs)
    return kernel


def _decompositions():
    """``(OpOverload, decomposition)`` of torch's aten-level decomposition table.

    The primitive-level references (``torch._refs``) are left out: they rewrite an op into
    ``prims`` calls that no device implements natively, which only adds host work.
    """
    from torch._decomp import decomposition_table
    for op, fn in decomposition_table.items():
        if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten":
            continue
        if getattr(fn, "__module__", "").startswith("torch._refs"):
            continue
        yield op, fn


#: values of HAL_EMU_FALLBACK
ROUTES = ("host", "decomposition")
_route = "host"
_decomp_lib: Optional[torch.library.Library] = None


def _has_cpu_kernel(qualified: str) -> bool:
    return torch._C._dispatch_has_computed_kernel_for_dispatch_key(qualified, "CPU")


def _composites_with_cpu_kernels() -> List[str]:
    """Ops that reach a device lacking them through one of torch's composite kernels although
    the CPU has a kernel of its own: ``native_layer_norm`` (a composite of smaller ops) and
    the functional and in-place forms of structured ops (``gelu``, ``add_``: the CPU runs
    their own kernel where a device gets ``gelu.out`` into a fresh output).  The host route
    claims them so that emu computes what the CPU computes, the same way."""
    names = []
    for qualified in torch._C._dispatch_get_all_op_names():
        if not qualified.startswith("aten::"):
            continue
        has = lambda key: torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key)  # noqa: E731
        if has("CPU") and not has("PrivateUse1") and (has("CompositeExplicitAutograd")
                                                        or has("CompositeExplicitAutogradNonFunctional")):
            names.append(qualified[len("aten::"):])
    return sorted(names)


def _register(lib: torch.library.Library, ops) -> int:
    n = 0
    for op, fn, qualified in ops:
        try:
            lib.impl(qualified.split("::", 1)[1], _decomposition_kernel(op, fn, qualified), "PrivateUse1")
        except RuntimeError:  # an op torch does not let Python register: the host takes it
            continue
        n += 1
    return n


def _decomposable():
    """``(op, decomposition, qualified name, has a CPU kernel)`` of every non-native op that
    reaches the device and has an aten-level decomposition."""
    for op, fn in _decompositions():
        # the dispatcher's name: aten::gelu, aten::add.Tensor
        qualified = op._schema.name + ("" if op._overloadname == "default" else f".{op._overloadname}")
        if is_native(op._schema.name) or not _reaches_device(qualified):
            continue
        yield op, fn, qualified, _has_cpu_kernel(qualified)


def set_fallback_route(route: str) -> None:
    """Choose how ops outside the native set run: ``"host"`` (torch's CPU kernel: the CPU's
    numbers) or ``"decomposition"`` (torch._decomp compositions first, as a vendor plugin's
    fallback runs them).  Takes effect for the next op."""
    global _route, _decomp_lib
    if route not in ROUTES:
        raise ValueError(f"emu: fallback route {route!r} is not one of {', '.join(ROUTES)} "
                         f"(HAL_EMU_FALLBACK)")
    if _decomp_lib is not None:
        _decomp_lib._destroy()
        _decomp_lib = None
    if route == "decomposition":
        _C.claim_ops([])
        _decomp_lib = torch.library.Library("aten", "IMPL")
        _register(_decomp_lib, [(op, fn, q) for op, fn, q, cpu in _decomposable() if cpu])
    else:
        _C.claim_ops([n for n in _composites_with_cpu_kernels() if n not in _always_decomposed])
    _route = route


def fallback_route() -> str:
    """The route ops outside the native set take now (see :func:`set_fallback_route`)."""
    return _route


_always_decomposed: set = set()


def configure(native_module, route: Optional[str] = None) -> None:
    """Give the C++ router the native set and the observer, register the decompositions of
    ops without a CPU kernel, and take the fallback route (``HAL_EMU_FALLBACK``, default host)."""
    global _C
    _C = native_module
    _C.set_native_ops(sorted(native_packets()), False)
    _C.set_fallback_observer(_on_host_fallback)
    lib = torch.library.Library("aten", "IMPL")
    without_cpu = [(op, fn, q) for op, fn, q, cpu in _decomposable() if not cpu]
    _register(lib, without_cpu)
    _always_decomposed.update(q.split("::", 1)[1] for _, _, q in without_cpu)
    _libs.append(lib)
    route = route or os.environ.get("HAL_EMU_FALLBACK", "").strip() or "host"
    if route not in ROUTES:
        from hal._errors import HalError
        raise HalError(f"HAL_EMU_FALLBACK={route!r}: expected one of {', '.join(ROUTES)}; "
                       f"unset it for 'host' (the CPU's kernels, so emu matches the CPU)")
    set_fallback_route(route)
