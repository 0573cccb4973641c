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
import threading
import warnings
from typing import Callable, Dict, List, Optional, Tuple

import torch

from hal.op_support.decompose import Uses, decomposition_kernel
from hal.emu._profile import native_packets
from hal.util.frames import user_frame

_C = None  # hal_emu_C, set by configure()


class FallbackWarning(UserWarning):
    """An op ran outside the emulated device's native set (announced once per op)."""


_lock = threading.Lock()
#: uses of emu's own decomposition kernels (the decomposition route, ops without a CPU kernel)
_uses = Uses()
_decomposed: Dict[str, int] = _uses.counts
_announced: set = set()
_tls = threading.local()
_libs: List[torch.library.Library] = []



def torch_context() -> str:
    """Where an op with no caller's frame on the stack comes from: the backward node torch's
    autograd engine is running (``"backward of MseLossBackward0"``), else torch's own code."""
    node = torch._C._current_autograd_node() if hasattr(torch._C, "_current_autograd_node") else None
    return f"backward of {node.name()}" if node is not None else "torch's own code"


def caller_frame() -> Tuple[str, int]:
    """``(file, line)`` of the innermost frame of the caller's code (:func:`hal.util.frames.user_frame`):
    the line that led to the op; ``("<backward of X>", 0)`` when none (an op of the backward pass
    runs on torch's autograd thread)."""
    f = user_frame(2)
    return (f.f_code.co_filename, f.f_lineno) if f is not None else (f"<{torch_context()}>", 0)


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
    rows = [{"op": op, "route": "decomposition", "count": n} for op, n in _uses.snapshot().items()]
    if _vendor is not None:  # HAL_EMU_OPS: overloads the vendor lacks in packets it has
        rows += [{"op": op, "route": "host", "count": n} for op, n in _vendor.uses.snapshot().items()]
    if _C is not None:
        rows += [{"op": op, "route": "host", "count": n} for op, n in _C.host_counts()]
    return sorted(rows, key=lambda r: (-r["count"], r["op"], r["route"]))


def reset_fallback_report() -> None:
    """Forget the counted fallbacks (first fallbacks are then announced again)."""
    _uses.reset()
    if _vendor is not None:
        _vendor.uses.reset()
    with _lock:
        _announced.clear()
    if _C is not None:
        _C.reset_host_counts()


def _native_set():
    """The native packets: the profile's, or with ``HAL_EMU_OPS`` the emulated vendor's."""
    return _vendor.packets if _vendor is not None else native_packets()


def is_native(packet: str) -> bool:
    """True for ops of the native profile and their in-place forms (``add`` covers ``add_``)."""
    native = _native_set()
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
    """The decomposition as emu's kernel (:func:`hal.op_support.decompose.decomposition_kernel`): counted in
    :func:`fallback_report`, the host when the decomposition does not cover a call."""
    packet, _, overload = qualified.partition(".")
    return decomposition_kernel(op, decomp, qualified,
                                otherwise=lambda *a, **k: _C.run_host(packet, overload, *a, **k),
                                uses=_uses, announce=lambda q: _announce(q, "decomposition"),
                                counting=lambda: not getattr(_tls, "uncounted", False))


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
        if _vendor is not None and qualified in _vendor.python_ops():
            continue  # the emulated vendor's error / counted host kernel (HAL_EMU_OPS)
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
        _C.claim_ops([n for n in _composites_with_cpu_kernels() if n not in _always_decomposed
                      and (_vendor is None or f"aten::{n}" not in _vendor.python_ops())])
    _route = route


def fallback_route() -> str:
    """The route ops outside the native set take now (see :func:`set_fallback_route`)."""
    return _route


_always_decomposed: set = set()


def configure(native_module, route: Optional[str] = None) -> None:
    """Give the C++ router the native set and the observer, register the decompositions of
    ops without a CPU kernel, and take the fallback route (``HAL_EMU_FALLBACK``, default host).
    With ``HAL_EMU_OPS=<torch profile>``, the native set is that vendor's (see :class:`VendorOps`)."""
    global _C, _vendor
    _C = native_module
    wanted = os.environ.get("HAL_EMU_OPS", "").strip()
    if wanted:
        _vendor = VendorOps.from_name(wanted)
    _C.set_native_ops(sorted(_native_set()), False)
    _C.set_fallback_observer(_on_host_fallback)
    lib = torch.library.Library("aten", "IMPL")
    without_cpu = [(op, fn, q) for op, fn, q, cpu in _decomposable() if not cpu]
    _register(lib, without_cpu)
    _always_decomposed.update(q.split("::", 1)[1] for _, _, q in without_cpu)
    _libs.append(lib)
    if _vendor is not None:
        _vendor.register()
    route = route or os.environ.get("HAL_EMU_FALLBACK", "").strip() or "host"
    if route not in ROUTES:
        from hal._errors import HalError
        raise HalError(f"HAL_EMU_FALLBACK={route!r}: expected one of {', '.join(ROUTES)}; "
                       f"unset it for 'host' (the CPU's kernels, so emu matches the CPU)")
    set_fallback_route(route)


# -- HAL_EMU_OPS: a vendor's operator coverage -------------------------------------------------------
_COMPOSITE_KEYS = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


class VendorOps:
    """emu with a vendor's operator coverage (``HAL_EMU_OPS=ascend-2.13``: any torch profile name or alias).

    The C++ router's native set becomes the packets of every op the profile judges native or
    composite.  Each op that reaches the device and that the vendor lacks (``judge`` says missing)
    then behaves as the vendor's stack does:

    * ``cpu_fallback`` (also ``error_unless_env`` with the variable set to 1, and ``unknown``): the
      host route, counted in :func:`fallback_report` and announced once in the vendor's words (the
      profile's ``warning_message``).  Ops of a packet the vendor otherwise has (``addmm.dtype`` next
      to ``addmm``) get a Python kernel that counts them, since the router's native set is by packet;
    * ``error`` / ``error_unless_env`` (variable unset): a kernel that raises ``NotImplementedError``
      with the vendor's message naming the op (the profile's ``error_message``).

    These kernels live in one ``torch.library.Library`` that :func:`release_vendor_ops` rebuilds
    without the ops :mod:`hal.fallback` installs decompositions for (its decompositions take
    precedence; ``hal.fallback.uninstall()`` restores them).

    Ops emu's host route claims from torch's composites (the functional and in-place forms of
    structured ops, ``native_layer_norm``...) count as reaching the device: on the vendor's stack
    the composite would call the ``.out`` kernel the vendor lacks.

    Kept whatever the vendor lists: emu's own C++ kernels (allocation, views, copies, dropout,
    convolution, the fused recurrent cells, SyncBatchNorm statistics): they are the device itself,
    and a vendor lacking one under that name (``_copy_from_and_resize`` on MUSA) has its own way to
    do the same.  They are listed in :func:`vendor_report` (``kept``).  Ops without a CPU kernel
    that the vendor lacks with a CPU fallback keep emu's decomposition (a host run is impossible).
    Ops with a composite kernel in this torch never reach the device and are not judged.
    """

    def __init__(self, profile) -> None:
        self.profile = profile
        self.packets: frozenset = frozenset()
        self.errors: Dict[str, str] = {}       # qualified -> the vendor's error message
        self.host: set = set()                 # qualified, counted host kernels (overloads of native packets)
        self.host_missing: set = set()         # every missing op that runs on the host
        self.kept: List[str] = []
        self.released: set = set()
        self.lib: Optional[torch.library.Library] = None
        self.uses = Uses()
        self._classify()

    @classmethod
    def from_name(cls, name: str) -> "VendorOps":
        from hal._errors import HalError
        try:
            from hal.op_support.torch_profile import alias_map, load_torch_profiles
        except ImportError as e:  # pragma: no cover - op_coverage ships with hal
            raise HalError(f"HAL_EMU_OPS={name}: op_coverage's torch profiles are not importable ({e})") from None
        profiles = load_torch_profiles(use_plugins=False)
        amap = alias_map(profiles)
        if name not in amap:
            raise HalError(f"HAL_EMU_OPS={name!r} is not a torch profile; choose one of: "
                           f"{', '.join(sorted(amap))} (op_coverage targets lists them), or unset it")
        return cls(profiles[amap[name]])

    @property
    def name(self) -> str:
        return self.profile.name

    def _classify(self) -> None:
        p = self.profile
        env = p.unimplemented.get("env")
        env_on = bool(env) and os.environ.get(env, "") not in ("", "0")
        packets, missing = set(), []
        claims = set(_composites_with_cpu_kernels())
        for qualified in torch._C._dispatch_get_all_op_names():
            if not qualified.startswith("aten::"):
                continue
            v = p.judge(qualified[len("aten::"):])
            if v.status == "missing":
                missing.append((qualified, v))
            else:
                packets.add(qualified.split(".", 1)[0])
        self.packets = frozenset(packets)
        for qualified, v in missing:
            has = lambda key: torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key)  # noqa: E731
            if has("PrivateUse1"):  # emu's own C++ kernel (this runs before any Python registration)
                self.kept.append(v.op)
                continue
            claimed = qualified[len("aten::"):] in claims
            if any(has(k) for k in _COMPOSITE_KEYS) and not claimed:
                continue
            behaviour = v.behaviour
            if behaviour == "error_unless_env" and env_on:
                behaviour = "cpu_fallback"
            if behaviour in ("error", "error_unless_env"):
                msg = v.message or f"{p.name} has no kernel for aten::{v.op}"
                self.errors[qualified] = f"emu (HAL_EMU_OPS={p.name}): {msg}"
                continue
            self.host_missing.add(qualified)
            if (claimed or qualified.split(".", 1)[0] in packets) and _has_cpu_kernel(qualified):
                self.host.add(qualified)
        self.kept.sort()

    def python_ops(self) -> set:
        """Ops this emulation registers Python kernels for (raising or counted host)."""
        return set(self.errors) | self.host

    def message(self, qualified: str, behaviour: str) -> Optional[str]:
        return self.profile.message_for(qualified.split("::", 1)[-1], behaviour)

    def register(self) -> None:
        if self.lib is not None:
            self.lib._destroy()
        self.lib = torch.library.Library("aten", "IMPL")
        for qualified, msg in self.errors.items():
            if qualified not in self.released:
                _impl(self.lib, qualified, _raiser(msg))
        for qualified in self.host:
            if qualified not in self.released:
                _impl(self.lib, qualified, self._host_kernel(qualified))

    def _host_kernel(self, qualified: str):
        packet, _, overload = qualified.partition(".")

        def kernel(*args, **kwargs):
            if not getattr(_tls, "uncounted", False) and self.uses.add(qualified):
                _announce(qualified, "host")
            old = _C.set_counting(False)  # counted here, not again by the router
            try:
                return _C.run_host(packet, overload, *args, **kwargs)
            finally:
                _C.set_counting(old)
        return kernel


def _impl(lib: torch.library.Library, qualified: str, fn) -> bool:
    try:
        lib.impl(qualified.split("::", 1)[1], fn, "PrivateUse1")
    except RuntimeError:
        return False
    return True


def _raiser(message: str):
    def kernel(*args, **kwargs):
        raise NotImplementedError(message)
    return kernel


_vendor: Optional[VendorOps] = None


def vendor_profile():
    """The torch profile ``HAL_EMU_OPS`` named (an ``op_coverage`` TorchProfile), or None."""
    return _vendor.profile if _vendor is not None else None


def vendor_python_ops() -> set:
    """Ops whose PrivateUse1 kernel is the ``HAL_EMU_OPS`` emulation's (raising or counted host),
    not a kernel of the device: :mod:`hal.fallback` may replace them."""
    return _vendor.python_ops() if _vendor is not None else set()


def release_vendor_ops(qualified_names) -> None:
    """Drop the ``HAL_EMU_OPS`` kernels of these ops (``hal.fallback`` registers its own), and
    restore every other one released before.  ``release_vendor_ops(())`` restores them all."""
    if _vendor is None:
        return
    _vendor.released = set(qualified_names)
    _vendor.register()


def vendor_otherwise(qualified: str):
    """What the emulated vendor does with ``qualified`` when nothing replaces it: raise its error,
    or run it on the host (counted)."""
    if _vendor is not None and qualified in _vendor.errors:
        return _raiser(_vendor.errors[qualified])
    packet, _, overload = qualified.split("::", 1)[-1].partition(".")
    return lambda *a, **k: _C.run_host(f"aten::{packet}", overload, *a, **k)


def vendor_report() -> Optional[dict]:
    """What ``HAL_EMU_OPS`` changed: profile, counts of raising / host ops, emu kernels kept."""
    if _vendor is None:
        return None
    return {"profile": _vendor.name, "native_packets": len(_vendor.packets),
            "error_ops": len(_vendor.errors), "host_ops": len(_vendor.host_missing),
            "released_to_hal_fallback": sorted(q.split("::", 1)[1] for q in _vendor.released),
            "kept": list(_vendor.kept)}
