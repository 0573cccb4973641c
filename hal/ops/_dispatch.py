"""Per-call choice of implementation for the ``hal.ops`` operators, with counters.

Order, for the device type of the call's tensors:

1. **fused** — the kernel the owning backend's plugin declares through the
   ``hal_fused_kernels`` hook (the CPU's are the C++ host kernels of ``hal._C``);
2. **composition** — standard torch ops on the tensors' own device;
3. **host** — the C++ host kernel, with a copy to the host and back (when the device
   cannot run the composition, e.g. an accelerator with a partial op set).

A declared kernel that cannot take a call's inputs raises :class:`KernelUnsupported`
and the next path is tried.  Every call that does not use the device's fused kernel is a
*fallback*: it is counted (:func:`stats`) and warned once per op
(:class:`FallbackWarning`).  :func:`use_path` forces a path (for tests and benchmarks);
a forced path is counted but never warned about.
"""
from __future__ import annotations

import contextlib
import importlib
import threading
import warnings
from typing import Callable, Dict, Optional

from hal._errors import HalError
from hal.plugin.kernels import SizedKernel
from hal.plugin.registry import generation as registry_generation
from hal.util.frames import user_stacklevel

PATHS = ("fused", "composition", "host")


class KernelUnsupported(HalError):
    """A kernel cannot take these inputs (dtype, layout, missing library); try the next path.

    ``per_dtype=True`` says the refusal holds for every call of this dtype (a kernel that
    does not take float64): the dispatcher then stops offering that dtype to the kernel
    until the backend's kernel set changes.  Refusals that depend on a call's shapes or
    arguments leave it False.
    """

    def __init__(self, message: str = "", *, per_dtype: bool = False):
        super().__init__(message)
        self.per_dtype = per_dtype


class FallbackWarning(UserWarning):
    """A hal.ops operator ran without the device's fused kernel (issued once per op)."""


_lock = threading.Lock()
_stats: Dict[str, dict] = {}
_warned: set = set()
_kernel_cache: Dict[str, tuple] = {}
#: (op, device type, dtype) -> (registry generation, fused callable or None, why not fused)
_plans: Dict[tuple, tuple] = {}


class _ForcedPath(threading.local):
    """This thread's forced path; the class default makes an unset thread read None without
    the AttributeError a plain ``threading.local`` raises and ``getattr`` swallows (~1 us)."""

    path: Optional[str] = None


_forced = _ForcedPath()


def stats() -> Dict[str, dict]:
    """Calls per operator and path since the last :func:`reset_stats`.

    :return: ``{op: {"fused": n, "composition": n, "host": n, "fallbacks": n,
             "last_fallback": reason or None}}`` for every op called so far.
    """
    with _lock:
        return {op: dict(s) for op, s in sorted(_stats.items())}


def reset_stats() -> None:
    """Zero the counters and re-arm the once-per-op fallback warnings."""
    with _lock:
        _stats.clear()
        _warned.clear()


def _record(op: str, path: str, fallback_reason: Optional[str]) -> None:
    s = _stats.get(op)
    if s is not None:  # the steady state of a hot op: dict updates, no lock (as the redirect log)
        if fallback_reason is None:
            s[path] += 1
            return
        if s["last_fallback"] is fallback_reason and op in _warned:  # the same plan's reason again
            s[path] += 1
            s["fallbacks"] += 1
            return
    with _lock:
        s = _stats.get(op)
        if s is None:
            s = _stats[op] = {"fused": 0, "composition": 0, "host": 0, "fallbacks": 0, "last_fallback": None}
        s[path] += 1
        if fallback_reason is None:
            return
        s["fallbacks"] += 1
        s["last_fallback"] = fallback_reason
        first = op not in _warned
        _warned.add(op)
    if first:
        warnings.warn(f"hal.ops.{op}: {fallback_reason} (reported once; counts in hal.ops.stats())",
                      FallbackWarning, stacklevel=user_stacklevel())


@contextlib.contextmanager
def use_path(path: str):
    """Force every hal.ops call in this thread onto one path (``fused``, ``composition``, ``host``).

    Example::

        with hal.ops.use_path("composition"):
            y = hal.ops.rms_norm(x, w)      # torch ops only, even on a CPU with hal._C

    A forced path that cannot run the call raises instead of falling back.
    """
    if path not in PATHS:
        raise ValueError(f"hal.ops.use_path({path!r}): unknown path; choose one of {', '.join(PATHS)}")
    prev = _forced.path
    _forced.path = path
    try:
        yield
    finally:
        _forced.path = prev


def forced_path() -> Optional[str]:
    """The path forced by :func:`use_path` in this thread, or None."""
    return _forced.path


# -- declared kernels ------------------------------------------------------------------
def _owner(device_type: str):
    """(registry, candidate) of the backend that owns ``device_type``, or (registry, None)."""
    from hal.plugin.registry import get_registry

    reg = get_registry()
    if device_type == "cpu":
        return reg, next((c for c in reg.candidates() if c.name == "cpu"), None)
    try:
        sel = reg.selected()
    except HalError:
        return reg, None
    return reg, (sel if sel.spec.device_type == device_type else None)


def declared_kernels(device_type: str) -> Dict[str, object]:
    """The fused kernels the plugin owning ``device_type`` declares (unresolved values)."""
    reg, cand = _owner(device_type)
    with _lock:
        hit = _kernel_cache.get(device_type)
        if hit is not None and hit[0] is reg:  # a reset registry re-reads the tables
            return hit[1]
    kernels = plugin_kernels(reg, cand) if cand is not None else {}
    with _lock:
        _kernel_cache[device_type] = (reg, kernels)
    return kernels


def plugin_kernels(reg, cand) -> Dict[str, object]:
    """The table the plugin of candidate ``cand`` declares; ``{"__error__": why}`` if its hook raised."""
    kernels: Dict[str, object] = {}
    try:
        for table in reg.call_for(cand, "hal_fused_kernels"):
            kernels.update(table or {})
    except Exception as exc:  # a broken plugin table means: no fused kernels
        kernels = {"__error__": f"{cand.plugin}: hal_fused_kernels raised {type(exc).__name__}: {exc}"}
    return kernels


def resolve(value) -> Callable:
    """Turn a declared kernel (``"module:function"``, a callable, or a :class:`SizedKernel` of
    either) into a callable."""
    if isinstance(value, SizedKernel):
        value = value.kernel
    if callable(value):
        return value
    if not isinstance(value, str) or ":" not in value:
        raise KernelUnsupported(f"declared kernel {value!r} is neither a callable nor 'module:function'")
    mod, _, attr = value.partition(":")
    try:
        obj = importlib.import_module(mod)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:
        raise KernelUnsupported(f"declared kernel {value} cannot be loaded ({type(exc).__name__}: {exc})")
    return obj


def _fused(op: str, device_type: str):
    """(callable or None, reason when None, its :class:`SizedKernel` declaration or None)."""
    table = declared_kernels(device_type)
    if "__error__" in table:
        return None, table["__error__"], None
    if op not in table:
        return None, f"no fused kernel declared for device type {device_type!r}", None
    value = table[op]
    sized = value if isinstance(value, SizedKernel) else None
    try:
        return resolve(value), None, sized
    except KernelUnsupported as exc:
        return None, str(exc), None


#: torch.device -> its type string: ``device.type`` builds a new string per call (~0.6 us for a
#: renamed PrivateUse1 device such as emu), a lookup by the device costs a hash
_device_types: Dict[object, str] = {}


def device_type(t) -> str:
    """``t.device.type``, without building a ``torch.device`` for CPU tensors (the common case)
    and without asking the device for its name again for the others."""
    if t.is_cpu:
        return "cpu"
    dev = t.device
    kind = _device_types.get(dev)
    if kind is None:
        kind = _device_types[dev] = dev.type
    return kind


def plan(op: str, device_type: str, dtype) -> tuple:
    """``(generation, fused callable or None, why not, composition's fallback reason, sizes)`` for
    ``op`` on (device type, dtype).

    ``sizes`` is None where the kernel runs at every size, else ``(low, high, grad_low,
    grad_high, declaration)``: the element counts for which it runs alone / in an eager call
    that needs a gradient (a :class:`hal.plugin.kernels.SizedKernel`, whose ``applies(args)``
    says whether a call is one the rule speaks of); outside them the torch composition runs.

    Decided once and cached; a new registry (``hal.reset_registry()``, a plugin's kernel table
    changed, ``HAL_*`` settings re-read) starts a new generation and every plan is decided again.
    """
    gen = registry_generation()
    key = (op, device_type, dtype)
    hit = _plans.get(key)
    if hit is not None and hit[0] == gen:
        return hit
    fn, why, sized = _fused(op, device_type)
    specialise = getattr(fn, "for_dtype", None)
    if specialise is not None:  # a kernel with a variant per dtype names it once, not per call
        fn = specialise(dtype)
    hit = _plans[key] = _plan(gen, fn, why, _sizes(sized, dtype) if fn is not None else None)
    return hit


def _plan(gen, fn, why, sizes=None) -> tuple:
    """A plan tuple; its fourth item is the fallback reason a composition call records (one string
    object per plan, so the steady-state counter compares it by identity)."""
    return gen, fn, why, None if why is None else _ran_composition(why), sizes


def _sizes(sized: Optional[SizedKernel], dtype) -> Optional[tuple]:
    """The plan's ``(low, high, grad_low, grad_high, sized)`` for ``dtype``, None when that is every size."""
    if sized is None or dtype is None:
        return None
    name = str(dtype).rpartition(".")[2]
    low, high = sized.range_for(name)
    grad_low, grad_high = sized.range_for(name, grad=True)
    if low == grad_low == 0 and high == grad_high == float("inf"):
        return None
    return low, high, grad_low, grad_high, sized


def _ran_composition(why: str) -> str:
    return f"{why}; ran the torch composition"


#: :func:`autograd_route`'s answer for a fused kernel made of differentiable torch ops
DIFFERENTIABLE_FUSED = "differentiable fused kernel"
#: :func:`autograd_route`'s answer where the torch composition beats the fused kernel at the call's size
COMPOSITION_BY_SIZE = "the torch composition is faster at this size"


def autograd_route(op: str, args: tuple) -> Optional[str]:
    """How an eager call of ``op`` with ``args`` that needs a gradient can run under torch's own autograd.

    :return: :data:`DIFFERENTIABLE_FUSED` when the fused kernel for ``t``'s device type and
        dtype (of ``args[0]``, ``t``) is itself differentiable torch ops (its function has
        ``differentiable = True``, e.g. ``F.layer_norm``); :data:`COMPOSITION_BY_SIZE` where the
        kernel's declared sizes leave out ``t``'s (the composition runs under autograd, not a
        fallback); the fallback reason to record when there is no fused kernel (the composition
        then runs under autograd); None otherwise, or when a path is forced (hal's own backward
        formula).
        Pass a composition answer to :func:`record_composition`.
    """
    if _forced.path is not None:
        return None
    t = args[0]
    _, fn, why, comp_why, sizes = plan(op, device_type(t), t.dtype)
    if fn is None:
        return comp_why
    if sizes is not None and not sizes[2] <= t.numel() < sizes[3] and sizes[4].applies(args):
        return COMPOSITION_BY_SIZE
    return DIFFERENTIABLE_FUSED if getattr(fn, "differentiable", False) else None


def record_composition(op: str, reason: str) -> None:
    """Count a call that ran the torch composition, with the ``reason`` :func:`autograd_route`
    returned; a fallback (any reason but :data:`COMPOSITION_BY_SIZE`) is also warned about once."""
    _record(op, "composition", None if reason is COMPOSITION_BY_SIZE else reason)


def _refused(op: str, device_type: str, dtype, exc: KernelUnsupported) -> str:
    why = f"fused kernel refused the call: {exc}"
    if exc.per_dtype:
        _plans[(op, device_type, dtype)] = _plan(registry_generation(), None, why)
    return why


def run(op: str, device_type: str, args: tuple, composition: Callable, host: Callable):
    """Run ``op`` on the best available path; see the module docstring for the order.

    ``args[0]`` is the tensor whose dtype keys the cached :func:`plan`.
    """
    forced = _forced.path
    if forced is not None:
        return _run_forced(forced, op, device_type, args, composition, host)
    dtype = getattr(args[0], "dtype", None)  # a list (fused_adamw_'s params) has none
    hit = _plans.get((op, device_type, dtype))  # plan()'s hit, inline: a decode-sized call costs ~1 us in all
    if hit is None or hit[0] != registry_generation():
        hit = plan(op, device_type, dtype)
    _, fn, why, comp_why, sizes = hit
    if fn is not None:
        if sizes is not None and not sizes[0] <= args[0].numel() < sizes[1] and sizes[4].applies(args):
            return _by_size(op, args, composition, fn)
        try:
            out = fn(*args)
        except KernelUnsupported as exc:
            why = _refused(op, device_type, dtype, exc)
            comp_why = _ran_composition(why)
        else:
            s = _stats.get(op)
            if s is None:
                _record(op, "fused", None)
            else:  # _record's steady state, inline
                s["fused"] += 1
            return out
    try:
        out = composition(*args)
        _record(op, "composition", comp_why)
        return out
    except NotImplementedError as exc:
        why = f"{why}; the composition is not implemented on {device_type} ({exc})"
    out = host(*args)
    _record(op, "host", f"{why}; ran the C++ host kernel through host memory")
    return out


def _by_size(op: str, args: tuple, composition: Callable, fn: Callable):
    """A call the fused kernel's declared sizes leave to the torch composition (not a fallback)."""
    try:
        out = composition(*args)
    except NotImplementedError:  # the device cannot run the composition: its kernel, at any size
        out = fn(*args)
        _record(op, "fused", None)
        return out
    _record(op, "composition", None)
    return out


def _run_forced(forced: str, op: str, device_type: str, args: tuple, composition: Callable, host: Callable):
    if forced == "fused":
        fn, why, _ = _fused(op, device_type)
        if fn is None:
            raise KernelUnsupported(f"hal.ops.{op}: use_path('fused'): {why}")
        out = fn(*args)
    elif forced == "composition":
        out = composition(*args)
    else:
        out = host(*args)
    _record(op, forced, None)
    return out
