"""Decompositions as device kernels for the ops a vendor lacks (issue 12, item 6).

On a backend whose device is torch's ``PrivateUse1`` device (every domestic vendor plugin, and the
emulator), :func:`install` registers, for each aten op the backend's torch profile judges *missing*,
torch's aten-level decomposition (``torch._decomp``, the same table :mod:`hal.op_support.torch_plan`
plans with) as the op's ``PrivateUse1`` kernel.  Its pieces dispatch again: to the vendor's kernels,
or to another installed decomposition (that is the recursion the plan predicts).  Each use is
counted (:func:`report`, also in :func:`hal.fallback_report`) and announced once; hal's own ops
(:meth:`hal.plugin.backend.Backend.own_ops`) are not counted.

* A kernel the device registered is never overridden (``torch._C._dispatch_has_kernel_for_dispatch_key``):
  only ops that would reach the device's boxed fallback (or nothing) get a decomposition.
* Ops with a composite kernel in this torch never reach the device and are left alone.
* When a decomposition does not cover a call (it declines, raises or re-enters itself), the call
  goes where it would have gone without hal.fallback: the device's own fallback for the op when the
  backend names one (:meth:`hal.plugin.backend.Backend.op_fallback`: the emulator's error or host
  run), else a CPU round trip (inputs copied to the host, torch's CPU kernel, results copied back).
* ``HAL_FALLBACK=0`` turns it off (:func:`install` then installs nothing and says so).

The profile: ``install(profile=...)`` (a name, alias or ``TorchProfile``), else ``HAL_FALLBACK_PROFILE``,
else the selected backend plugin's ``hal_torch_op_profile`` when it returns the
``op_coverage.torch_profile/1`` format (the emulator's returns the ``HAL_EMU_OPS`` profile when set).
"""
from __future__ import annotations

import os
import threading
import warnings
from dataclasses import asdict, dataclass, field
from typing import List, Optional

import torch

from hal.op_support.decompose import Uses, decomposition_kernel
from hal.util import own_ops

ENV = "HAL_FALLBACK"
ENV_PROFILE = "HAL_FALLBACK_PROFILE"
#: aten ops to run on the host whatever the device has (``aten::gelu,aten::mm``): :func:`route_to_host`
ENV_HOST = "HAL_FALLBACK_HOST"
_COMPOSITE_KEYS = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


class DecompositionWarning(UserWarning):
    """An op the device lacks ran as torch's decomposition (announced once per op)."""


@dataclass
class InstallReport:
    """What :func:`install` did.  ``active`` is False with ``reason`` when it installed nothing."""

    active: bool
    reason: str = ""
    backend: Optional[str] = None
    device_type: Optional[str] = None
    profile: Optional[str] = None
    installed: List[str] = field(default_factory=list)          # ops with a decomposition kernel now
    vendor_kernel: List[str] = field(default_factory=list)      # missing per the profile, but the vendor has a kernel
    replaced_emulated: List[str] = field(default_factory=list)  # installed where the device's own fallback ran (Backend.op_fallback)
    without_decomposition: int = 0                              # missing ops torch cannot decompose
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


_lock = threading.Lock()
_uses = Uses()
_lib: Optional[torch.library.Library] = None
_last: Optional[InstallReport] = None
_host_lib: Optional[torch.library.Library] = None
#: op overload routed to the host -> {call site: count}
_host_sites: dict = {}
#: op overload :func:`route_to_host` could not route -> why
_host_skipped: dict = {}


def _announce(op: str) -> None:
    from hal.util.frames import user_frame
    f = user_frame(2)
    where = (f.f_code.co_filename, f.f_lineno) if f is not None else ("<hal.fallback>", 0)
    warnings.warn_explicit(f"hal.fallback: {op} is missing on this device; ran torch's decomposition "
                           f"(counted in hal.fallback.report())", DecompositionWarning, where[0], where[1])


def _counting() -> bool:
    return not own_ops.inside()


def _selected():
    from hal.plugin.registry import get_registry
    return get_registry().selected()


def _resolve_profile(profile):
    """``(TorchProfile or None, where it came from)``."""
    from hal.op_support.torch_profile import TorchProfile, alias_map, load_torch_profiles, profile_from_plugin
    if isinstance(profile, TorchProfile):
        return profile, "argument"
    name = profile or os.environ.get(ENV_PROFILE, "").strip() or None
    if name:
        profiles = load_torch_profiles(use_plugins=True)
        amap = alias_map(profiles)
        if name not in amap:
            from hal._errors import HalError
            raise HalError(f"hal.fallback: torch profile {name!r} is not known; choose one of "
                           f"{', '.join(sorted(amap))}")
        return profiles[amap[name]], "argument" if profile else ENV_PROFILE
    try:
        from hal.plugin.registry import get_registry
        reg = get_registry()
        cand = reg.selected()
        for data in reg.call_selected("hal_torch_op_profile"):
            if isinstance(data, dict) and data.get("schema") == "op_coverage.torch_profile/1":
                return profile_from_plugin(f"{cand.plugin}:{cand.spec.name}", data), "plugin"
    except Exception:  # noqa: BLE001 - a broken plugin must not break the run
        pass
    return None, ""


def _host_round_trip(func):
    """``func`` run by torch's CPU kernel: device tensors copied to the host and results back."""
    def run(*args, **kwargs):
        device = None

        def to_cpu(x):
            nonlocal device
            if isinstance(x, torch.Tensor) and x.device.type != "cpu":
                device = x.device
                return x.cpu()
            if isinstance(x, (list, tuple)):
                return type(x)(to_cpu(y) for y in x)
            return x
        cargs = [to_cpu(a) for a in args]
        ckw = {k: to_cpu(v) for k, v in kwargs.items()}
        out = func(*cargs, **ckw)
        # results and in-place / out= arguments back to the device (each tensor of a list too: the
        # _foreach_*_ ops an optimizer runs update lists of tensors in place)
        pairs = list(zip(args, cargs)) + [(kwargs[k], ckw[k]) for k in kwargs]
        pairs += [p for orig, host in pairs if isinstance(orig, (list, tuple)) for p in zip(orig, host)]
        for orig, host in pairs:
            if isinstance(orig, torch.Tensor) and orig.device.type != "cpu" and host is not orig:
                if host.shape != orig.shape:
                    orig.resize_(host.shape)
                orig.copy_(host)

        def back(x):
            if isinstance(x, torch.Tensor) and device is not None:
                for orig, host in list(zip(args, cargs)) + [(kwargs[k], ckw[k]) for k in kwargs]:
                    if host is x and isinstance(orig, torch.Tensor):
                        return orig
                return x.to(device)
            if isinstance(x, (list, tuple)):
                return type(x)(back(y) for y in x)
            return x
        return back(out)
    return run


def install(profile=None) -> InstallReport:
    """Register decompositions for the ops the backend's torch profile marks missing; see the module
    docstring.  Idempotent: a second call replaces the first installation."""
    import time
    global _lib, _last
    start = time.monotonic()
    if os.environ.get(ENV, "1").strip() == "0":
        _last = InstallReport(False, f"{ENV}=0")
        return _last
    try:
        cand = _selected()
        backend, device_type = cand.name, cand.spec.device_type
    except Exception as e:  # noqa: BLE001
        _last = InstallReport(False, f"no hal backend selected ({e})")
        return _last
    pu1 = torch._C._get_privateuse1_backend_name()
    if device_type != pu1:
        _last = InstallReport(False, f"the {backend} backend's device {device_type!r} is not torch's PrivateUse1 "
                                     f"device ({pu1!r}); hal.fallback serves PrivateUse1 devices only",
                              backend, device_type)
        return _last
    prof, source = _resolve_profile(profile)
    if prof is None:
        _last = InstallReport(False, f"no torch profile for the {backend} backend: pass install(profile=NAME), set "
                                     f"{ENV_PROFILE}=NAME, or ship one from the plugin (hal_torch_op_profile) "
                                     f"(op_coverage targets lists the names)", backend, device_type)
        return _last
    from hal.op_support.torch_plan import decomposition_for, resolve
    device = cand.backend
    with _lock:
        uninstall()
        rep = InstallReport(True, f"profile {prof.name} (from {source})", backend, device_type, prof.name)
        plan = []
        for qualified in torch._C._dispatch_get_all_op_names():
            if not qualified.startswith("aten::"):
                continue
            name = qualified[len("aten::"):]
            v = prof.judge(name)
            if v.status != "missing":
                continue
            has = lambda key: torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key)  # noqa: E731
            if any(has(k) for k in _COMPOSITE_KEYS):
                continue
            fn = decomposition_for(name)
            if fn is None:
                rep.without_decomposition += 1
                continue
            if has("PrivateUse1"):
                rep.vendor_kernel.append(name)
                continue
            func = resolve(name)
            if func is None:
                continue
            plan.append((qualified, name, func, fn))
        lib = torch.library.Library("aten", "IMPL")
        for qualified, name, func, fn in plan:
            own = device.op_fallback(func) if device is not None else None
            otherwise = own if own is not None else _host_round_trip(func)
            kernel = decomposition_kernel(func, fn, qualified, otherwise, _uses, _announce, _counting)
            try:
                lib.impl(name, kernel, "PrivateUse1")
            except RuntimeError:
                continue
            rep.installed.append(name)
            if own is not None:
                rep.replaced_emulated.append(name)
        _lib = lib
        rep.installed.sort()
        rep.vendor_kernel.sort()
        rep.replaced_emulated.sort()
        rep.seconds = round(time.monotonic() - start, 3)
        _last = rep
        return rep


def uninstall() -> None:
    """Remove the decomposition kernels: the ops go to the device's own fallback again."""
    global _lib
    if _lib is not None:
        _lib._destroy()
        _lib = None


def _overloads(op: str) -> List[str]:
    """``"aten::gelu"`` / ``"gelu"`` -> every overload's name (``gelu``, ``gelu.out``); ``"aten::gelu.out"``
    -> that one.  Unknown names raise :class:`hal.errors.HalError` naming the op."""
    from hal._errors import HalError

    name = op.strip()
    name = name[len("aten::"):] if name.startswith("aten::") else name
    packet_name, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, packet_name, None)
    if packet is None or not hasattr(packet, "overloads"):
        raise HalError(f"{ENV_HOST}: no aten operator {op!r}; give names as the op trace and hal run's report "
                       f"print them (aten::gelu, aten::addmm.default)")
    names = [overload] if overload and overload != "default" else (["default"] if overload else packet.overloads())
    return [packet_name if o == "default" else f"{packet_name}.{o}" for o in names]


#: ops the host route is made of (it copies with them) or that ask about a tensor rather than compute
_MOVES_DATA = frozenset({"_copy_from", "_copy_from_and_resize", "_to_copy", "copy_", "_local_scalar_dense",
                         "_has_compatible_shallow_copy_type", "set_", "resize_", "record_stream", "to"})


def routable(op: str) -> Optional[str]:
    """None when :func:`route_to_host` can run ``op`` (``"addmm"``, ``"add_.Tensor"``) on the host and
    give the device the same result; else why not: it moves data between host and device (the route is
    made of those), it is a factory (no tensor input) or a view (a host copy would not alias its input)."""
    name = op[len("aten::"):] if op.startswith("aten::") else op
    packet_name, _, overload = name.partition(".")
    if packet_name in _MOVES_DATA:
        return "it moves data between the host and the device (the host route is made of such copies)"
    packet = getattr(torch.ops.aten, packet_name, None)
    func = getattr(packet, overload or "default", None) if packet is not None else None
    if func is None:
        return "no such aten operator in this torch"
    schema = func._schema
    if not any("Tensor" in str(a.type) for a in schema.arguments):
        return "a factory (no tensor input): nothing to run on the host"
    if any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):
        return "a view: a host copy would not alias its input"
    return None


def route_to_host(ops) -> List[str]:
    """Run every aten op of ``ops`` on the host (inputs copied there, torch's CPU kernel, results
    copied back), overriding the device's own kernel: how to tell whether a device kernel makes a
    difference (``hal accept`` bisects a diverging loss curve this way).  Each call's site in the
    user's code is counted (:func:`host_routes`).  Only for a PrivateUse1 device (the emulator, the
    vendor plugins); a second call replaces the first.  Returns the overloads routed."""
    from hal.util.frames import torch_context, user_site

    global _host_lib
    with _lock:
        if _host_lib is not None:
            _host_lib._destroy()
            _host_lib = None
        _host_sites.clear()
        _host_skipped.clear()
        names = [n for op in ops if op.strip() for n in _overloads(op)]
        if not names:
            return []
        import inspect

        lib = torch.library.Library("aten", "IMPL")
        override = {"allow_override": True} if "allow_override" in inspect.signature(lib.impl).parameters else {}
        routed = []
        for name in names:
            packet, _, overload = name.partition(".")
            func = getattr(getattr(torch.ops.aten, packet), overload or "default")
            run = _host_round_trip(func)
            sites = _host_sites.setdefault(f"aten::{name}", {})

            def kernel(*args, _run=run, _sites=sites, **kwargs):
                site = user_site(1) or torch_context()
                _sites[site] = _sites.get(site, 0) + 1
                return _run(*args, **kwargs)
            try:
                lib.impl(name, kernel, "PrivateUse1", **override)
            except RuntimeError as exc:  # torch before allow_override: a Python kernel of the op stays
                del _host_sites[f"aten::{name}"]
                _host_skipped[f"aten::{name}"] = (f"torch {torch.__version__} lets no second Python kernel replace "
                                                  f"the one registered for it ({str(exc).splitlines()[0][:160]})")
                continue
            routed.append(name)
        _host_lib = lib
        return routed


def route_to_host_from_env() -> List[str]:
    """:func:`route_to_host` of ``HAL_FALLBACK_HOST`` (comma-separated), where it is set."""
    ops = [o for o in os.environ.get(ENV_HOST, "").split(",") if o.strip()]
    return route_to_host(ops) if ops else []


def host_route_skipped() -> dict:
    """``{op: why}`` of the ops the last :func:`route_to_host` could not route (a kernel registered from
    Python on a torch whose ``torch.library`` refuses to replace it: before ``allow_override``)."""
    return dict(_host_skipped)


def host_routes() -> List[dict]:
    """Each op :func:`route_to_host` routed that ran: ``op``, ``count``, ``sites`` ({``file:line`` or
    torch's context: count}, most calls first); most calls first."""
    rows = [{"op": op, "count": sum(sites.values()),
             "sites": dict(sorted(sites.items(), key=lambda kv: -kv[1]))}
            for op, sites in _host_sites.items() if sites]
    return sorted(rows, key=lambda r: (-r["count"], r["op"]))


def installed() -> Optional[InstallReport]:
    """The last :func:`install`'s report (None before the first)."""
    return _last


def report() -> List[dict]:
    """Each installed decomposition that ran: ``op``, ``route`` ("decomposition"), ``by``
    ("hal.fallback"), ``count``; highest count first."""
    rows = [{"op": op, "route": "decomposition", "by": "hal.fallback", "count": n}
            for op, n in _uses.snapshot().items()]
    return sorted(rows, key=lambda r: (-r["count"], r["op"]))
