"""Op routing of the emulated device: native kernel → decomposition → host computation.

Every aten op that reaches the ``emu`` device (after autograd and the composite kernels:
what a vendor kernel would receive) is routed:

1. ops of the native profile (``hal/data/emu_profile.json``) run on the host bytes in C++ —
   the emulator's "kernels";
2. ops with an aten-level entry in torch's decomposition table get a ``PrivateUse1`` kernel
   here that runs the decomposition; its pieces are routed again, so they land on native
   ops where they can;
3. anything else is a host computation (C++): torch's CPU kernel on the host bytes.

Steps 2 and 3 are fallbacks, counted per op and listed by :func:`fallback_report`; the
first fallback of each op is announced once (:class:`FallbackWarning` at the line of the
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


def caller_frame() -> Tuple[str, int]:
    """``(file, line)`` of the innermost frame outside torch, hal and the import machinery:
    the line of the caller's code that led to the op."""
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if not name.startswith(_SKIP_PREFIXES) and not name.startswith(_SKIP_FILES) \
                and os.path.basename(name) not in ("runpy.py", "contextlib.py", "threading.py"):
            return name, f.f_lineno
        f = f.f_back
    return "<unknown>", 0


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


def configure(native_module) -> int:
    """Give the C++ router the native set and register the decomposition kernels; returns
    how many ops got one."""
    global _C
    _C = native_module
    _C.set_native_ops(sorted(native_packets()), False)
    _C.set_fallback_observer(_on_host_fallback)
    lib = torch.library.Library("aten", "IMPL")
    registered = 0
    for op, fn in _decompositions():
        # the dispatcher's name: aten::gelu, aten::add.Tensor
        qualified = op._schema.name + ("" if op._overloadname == "default" else f".{op._overloadname}")
        if is_native(op._schema.name):
            continue
        if not _reaches_device(qualified):
            continue
        try:
            lib.impl(qualified.split("::", 1)[1], _decomposition_kernel(op, fn, qualified), "PrivateUse1")
        except RuntimeError:  # an op torch does not let Python register: the host takes it
            continue
        registered += 1
    _libs.append(lib)
    return registered
