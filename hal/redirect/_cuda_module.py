"""``torch.cuda.*`` and ``torch.accelerator.*`` as the user's code sees them under the shim.

Every public ``torch.cuda`` function is replaced by one that answers for the selected
backend when the user's code (or a third-party library) calls it, and calls torch's own
function when torch or hal calls it (:mod:`hal.redirect._split`); every class stays a class
whose instances are the backend's (:mod:`hal.redirect._cuda_classes`); the submodules
(``torch.cuda.random``, ``memory``, ``streams`` ...) and ``torch.backends.cuda`` answer as
``torch.cuda`` does (:mod:`hal.redirect._cuda_submodules`).  ``torch.accelerator`` answers the user's
code as ``torch.cuda`` does: a CUDA machine whose device is the backend's.
"""
from __future__ import annotations

import contextlib
import os
from typing import Callable, Optional, Tuple

import torch

from hal._errors import NotSupported
from hal.plugin.backend import Backend, host_memory_bytes
from hal.redirect import _cuda_submodules
from hal.redirect._cuda_classes import Spec, cuda_class, is_stand_in, spec_of, stand_in
from hal.redirect._devices import MARK, LEGACY_TYPES, _on_miss, counted as _counted
from hal.redirect._core import Redirection
from hal.redirect._log import NOT_REDIRECTED, REDIRECTED
from hal.redirect._split import answer_for_user, patch_split as _patch, report_the_rest
#: torch.cuda memory calls with a backend answer -> the value given when the backend has none
NEUTRAL = {"memory_allocated": 0, "max_memory_allocated": 0, "memory_reserved": 0,
           "max_memory_reserved": 0, "memory_cached": 0, "max_memory_cached": 0, "memory_stats": {},
           "memory_stats_as_nested_dict": {}, "reset_peak_memory_stats": None,
           "reset_accumulated_memory_stats": None, "reset_max_memory_allocated": None,
           "reset_max_memory_cached": None, "empty_cache": None}
#: torch.cuda names -> facet memory call that answers them
MEMORY = {"memory_allocated": "memory_allocated", "max_memory_allocated": "max_memory_allocated",
          "memory_reserved": "memory_reserved", "max_memory_reserved": "max_memory_reserved",
          "memory_cached": "memory_reserved", "max_memory_cached": "max_memory_reserved",
          "memory_stats": "memory_stats", "memory_stats_as_nested_dict": "memory_stats",
          "reset_peak_memory_stats": "reset_peak_memory_stats",
          "reset_accumulated_memory_stats": "reset_accumulated_memory_stats",
          "reset_max_memory_allocated": "reset_peak_memory_stats",
          "reset_max_memory_cached": "reset_peak_memory_stats"}
#: torch.cuda calls that change nothing off CUDA: (result, why)
NO_OPS = {"set_per_process_memory_fraction": (None, "no per-process memory cap on this backend"),
          "ipc_collect": (None, "no CUDA IPC memory to collect"),
          "set_sync_debug_mode": (None, "no CUDA synchronisation debugging"),
          "get_sync_debug_mode": (0, "no CUDA synchronisation debugging"),
          "get_arch_list": ([], "no CUDA architectures"), "get_gencode_flags": ("", "no CUDA code generation"),
          "is_tf32_supported": (False, "TF32 is a CUDA (Ampere+) format"),
          "memory_summary": ("", "the backend keeps no CUDA allocator summary"),
          "memory_snapshot": ([], "the backend keeps no CUDA allocator snapshot")}
#: torch.cuda's CUDA-graph entry points (torch 2.13's torch/cuda/graphs.py), refused off CUDA: functions, classes
GRAPH_FUNCTIONS = ("graph_pool_handle", "make_graphed_callables")
GRAPH_CLASSES = ("CUDAGraph", "graph")


def _as_is(key):
    return key


def _stand_in(t: Redirection, name: str, new: Callable, base: type,
              accepts: Optional[Callable[[object], bool]] = None, namespace: Optional[dict] = None,
              takes_caller: bool = False, fast: Optional[Callable] = None,
              describe: Optional[Callable] = None) -> None:
    """Replace the class ``torch.cuda.<name>`` by a stand-in (:mod:`hal.redirect._cuda_classes`)
    whose instances, for the user's code, are ``new(...)``'s: the backend's own objects
    (``takes_caller``: ``new`` takes the calling frame first).  ``fast``: ``new`` without the frame
    and without recording the call, for the C constructor (hal._C ``StandInCall``), which records a
    call site's first call as ``torch.cuda.<name>`` with ``describe(key)``'s text."""
    orig = getattr(torch.cuda, name)
    real = orig if isinstance(orig, type) and not is_stand_in(orig) else cuda_class(
        name, _cuda_submodules.submodules())
    on_miss = _on_miss(t, (f"torch.cuda.{name}",), describe) if fast is not None else None
    t.patch(torch.cuda, name, stand_in(name, Spec(orig, real, new, base, accepts, takes_caller, fast, on_miss),
                                       namespace))


# -- devices -----------------------------------------------------------------------------
def _install_devices(t: Redirection) -> None:
    cuda, b, cpu = torch.cuda, t.backend, t.device_type == "cpu"

    def said(detail: str) -> Callable:  # a row's text: the call (its key) and ``detail``
        return lambda key: (key[0], detail)

    available, counted = said(f"True (runs on {b.name})"), said(f"{t.count} ({t.count_source})")
    named, synchronized = said(f"{b.name} device name"), said(f"{b.name} synchronize")

    def current_device():
        return 0 if cpu else b.current_device()

    def set_device(device):
        target = t.device(device)
        t.log.redirected("torch.cuda.set_device", f"{target} (for {device})")
        if not cpu:
            b.set_device(target.index)

    def get_device_properties(device=None):
        props = b.device_properties(t.index(device))
        t.log.redirected("torch.cuda.get_device_properties", f"{b.name} device properties ({props.name})")
        return props

    def get_device_capability(device=None):
        props = b.device_properties(t.index(device))
        t.log.redirected("torch.cuda.get_device_capability", f"({props.major}, {props.minor}) of {b.name}")
        return props.major, props.minor

    def is_bf16_supported(*args, **kwargs):
        return torch.bfloat16 in b.supported_dtypes()

    def synchronize(device=None):
        if not cpu:
            b.synchronize(t.index(device) if device is not None else None)

    # the hot queries: each call counted at its call site (in C where hal._C has it)
    count = t.count
    for name, describe, fn in (("is_available", available, lambda: True), ("device_count", counted, lambda: count),
                               ("get_device_name", named, lambda device=None: b.device_name(t.index(device))),
                               ("synchronize", synchronized, synchronize)):
        _patch(t, cuda, name, *_counted(t, (f"torch.cuda.{name}",), describe, fn))
    for name, fn in (("current_device", current_device), ("set_device", set_device),
                     ("get_device_properties", get_device_properties),
                     ("get_device_capability", get_device_capability), ("is_bf16_supported", is_bf16_supported),
                     ("is_initialized", lambda: True), ("init", lambda: None),
                     ("is_current_stream_capturing", lambda: False)):
        _patch(t, cuda, name, fn)

    class device:
        """``torch.cuda.device(i)``: the backend's device ``i`` is current inside the block."""

        def __init__(self, device):
            dev = device
            self.idx = None if dev is None or (isinstance(dev, int) and dev < 0) else t.index(dev)
            self.prev = None
            if self.idx is not None:
                t.log.redirected("torch.cuda.device", (f"{t.device_type}:{self.idx}" if not cpu else "cpu") + f" (for {dev})")

        def __enter__(self):
            if self.idx is not None and not cpu:
                self.prev = b.current_device()
                if self.prev != self.idx:
                    b.set_device(self.idx)
            return self

        def __exit__(self, *exc):
            if self.prev is not None and self.prev != self.idx:
                b.set_device(self.prev)
            return False

    class device_of(device):
        """``torch.cuda.device_of(tensor)``: the device of ``tensor`` is current inside the block."""

        def __init__(self, obj):
            dev = obj.device
            super().__init__(dev.index if dev.type == t.device_type else None)

    _stand_in(t, "device", device, device)
    _stand_in(t, "device_of", device_of, device_of)


# -- memory, RNG, streams, events -----------------------------------------------------------
def _keeps_none(b, method: str) -> Optional[str]:
    """Why the backend ``b`` can never answer the allocator call ``method`` (its device module has no
    such statistic: the cpu's), or None when it may (it has one, or its class answers ``method`` in
    a way of its own: asked per call)."""
    own = getattr(type(b), method, None)
    if own is not None and own is not getattr(Backend, method, None):
        return None
    try:
        b.memory_stat_call(method)
    except NotSupported as exc:
        return str(exc)
    return None


def _install_facet(t: Redirection) -> None:
    cuda, b, cpu = torch.cuda, t.backend, t.device_type == "cpu"

    at = t.log.at
    #: (facet method, device index) -> why it has no answer (the NotSupported it raised): asked once
    unsupported = {}

    def memory(name: str, method: str) -> Callable:
        label = f"torch.cuda.{name}"
        answered = lambda key: (label, f"{b.name} {method}")  # noqa: E731

        def call(caller, device=None, *args, **kwargs):
            index = t.index(device) if device is not None else None
            why = unsupported.get((method, index))
            if why is None:
                fn = getattr(b, method, None)
                try:
                    result = fn(index) if fn is not None else b._mem(method, index)
                except NotSupported as exc:
                    why = unsupported[(method, index)] = f"{exc}; returned {NEUTRAL[name]!r}"
                else:
                    at(caller, (label,), REDIRECTED, answered)
                    return result
            at(caller, (label, why), NOT_REDIRECTED, _as_is)
            return NEUTRAL[name]
        return call

    def neutral(name: str, why: str) -> Tuple[Callable, bool]:
        """``torch.cuda.<name>`` where the backend keeps no such statistic at all: the neutral answer,
        each call counted at its site as not redirected (C where hal._C has it: ~0.1-0.2 us a call)."""
        value = NEUTRAL[name]

        def answer(device=None, *args, **kwargs):
            if device is not None:
                t.index(device)  # a device the script names is still checked
            return value
        return _counted(t, (f"torch.cuda.{name}", f"{why}; returned {value!r}"), _as_is, answer, NOT_REDIRECTED)

    for name, method in MEMORY.items():
        why = _keeps_none(b, method)
        if why is not None:
            _patch(t, cuda, name, *neutral(name, why))
        else:
            _patch(t, cuda, name, memory(name, method), takes_caller=True)

    def mem_get_info(device=None):
        if cpu:
            t.log.redirected("torch.cuda.mem_get_info", "host memory (free, total)")
            return (int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")), host_memory_bytes())
        t.log.redirected("torch.cuda.mem_get_info", f"{b.name} mem_get_info")
        return b.mem_get_info(t.index(device) if device is not None else None)

    def empty_cache():
        try:
            b.empty_cache()
        except NotSupported as exc:
            t.log.not_redirected("torch.cuda.empty_cache", f"{exc}; nothing to free")
            return None
        t.log.redirected("torch.cuda.empty_cache", f"{b.name} empty_cache")

    _patch(t, cuda, "mem_get_info", mem_get_info)
    _patch(t, cuda, "empty_cache", empty_cache)

    # streams and events: the backend's own; on the CPU, host stand-ins that can time work
    _install_streams(t)

    # RNG
    rng = ("manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
           "set_rng_state", "get_rng_state_all", "set_rng_state_all")
    if cpu:
        _install_cpu_rng(t, rng)
        return

    def device_rng(name):
        fn = getattr(b, name, None) or getattr(b.module, name, None)

        def call(*args, **kwargs):
            if fn is None:
                raise NotSupported(b.name, f"torch.cuda.{name}", f"torch.{t.device_type}.{name} does not exist")
            if name in ("get_rng_state", "set_rng_state"):
                pos = 0 if name == "get_rng_state" else 1
                if len(args) > pos:
                    args = args[:pos] + (t.index(args[pos]),)
                elif "device" in kwargs:
                    kwargs["device"] = t.index(kwargs["device"])
            t.log.redirected(f"torch.cuda.{name}", f"{b.name} {name}")
            return fn(*args, **kwargs)
        return call

    for name in rng:
        _patch(t, cuda, name, device_rng(name))


def _install_cpu_rng(t: Redirection, names) -> None:
    """The CPU backend's one generator is the CPU's: states are read from it and restored to
    it (a save and restore of ``get_rng_state_all()`` round-trips), seeds are left alone."""
    def state(device="cuda"):
        t.log.redirected("torch.cuda.get_rng_state", "the CPU generator's state (the cpu backend's generator)")
        return torch.get_rng_state()

    def states():
        t.log.redirected("torch.cuda.get_rng_state_all", f"[the CPU generator's state] x {t.count}")
        return [torch.get_rng_state() for _ in range(t.count)]

    def restore(call: str, new_state, detail: str) -> None:
        # a state saved on CUDA (a Philox seed and offset) is not a CPU generator's state
        if new_state.numel() != torch.get_rng_state().numel():
            t.log.not_redirected(call, f"the state ({new_state.numel()} bytes) is another generator's (one saved "
                                 f"on a CUDA device?); the CPU generator is left as it is")
            return
        t.log.redirected(call, detail)
        torch.set_rng_state(new_state)

    def set_state(new_state, device="cuda"):
        restore("torch.cuda.set_rng_state", new_state, "restored to the CPU generator (the cpu backend's generator)")

    def set_states(new_states):
        new_states = list(new_states)
        if not new_states:
            t.log.redirected("torch.cuda.set_rng_state_all", "no state given: nothing restored")
            return
        restore("torch.cuda.set_rng_state_all", new_states[0], "the first state restored to the CPU generator "
                "(the cpu backend's generator)")

    answers = {"get_rng_state": state, "get_rng_state_all": states, "set_rng_state": set_state,
               "set_rng_state_all": set_states}

    def left_alone(name):
        # the CPU has no device generator: torch.manual_seed already seeds it (and calls
        # torch.cuda.manual_seed_all itself); re-seeding it here would change the stream
        def call(*args, **kwargs):
            t.log.not_redirected(f"torch.cuda.{name}", "cpu has no device generator; the CPU generator "
                                 "is left as torch.manual_seed set it")
            return torch.initial_seed() if name == "initial_seed" else None
        return call

    for name in names:
        _patch(t, torch.cuda, name, answers.get(name) or left_alone(name))


def _install_streams(t: Redirection) -> None:
    """``torch.cuda.Stream`` / ``Event`` / ``StreamContext`` (classes whose instances are the
    backend's streams and events), ``stream``, ``current_stream``, ``default_stream``,
    ``set_stream``."""
    from hal.redirect import _host
    cuda, b, cpu = torch.cuda, t.backend, t.device_type == "cpu"
    torch_stream = getattr(torch.Stream, "_hal_original", torch.Stream)
    torch_event = getattr(torch.Event, "_hal_original", torch.Event)
    if cpu:
        make_stream, make_event = _host.HostStream, _host.HostEvent
        stream_base, event_base = _host.HostStream, _host.HostEvent
        calls = {"current_stream": _host.current_stream, "default_stream": _host.default_stream,
                 "set_stream": _host.set_stream}
        enter = _host.stream
    else:
        mod = b.module
        make_stream, make_event = b.Stream, b.Event
        stream_base = _own_class(mod, "Stream", torch_stream) or _device_stream(t, torch_stream)
        event_base = _own_class(mod, "Event", torch_event) or _device_event(t, torch_event)
        calls = {"current_stream": b.current_stream,
                 "default_stream": getattr(mod, "default_stream", b.current_stream)}
        if hasattr(mod, "set_stream"):
            calls["set_stream"] = mod.set_stream
        enter = b.stream

    def on_backend(obj, kind) -> bool:
        return isinstance(obj, kind) and obj.device.type == t.device_type

    def device_arg(device):
        return t.device(device) if device is not None and not cpu else None

    at = t.log.at
    stream_text = lambda key: (key[0], f"{b.name} Stream")  # noqa: E731
    event_text = lambda key: (key[0], f"{b.name} Event")  # noqa: E731

    def build_stream(device=None, priority=0, **kwargs):
        if device is not None:
            kwargs["device"] = device_arg(device)
        return make_stream(priority=priority, **kwargs)

    def new_stream(caller, *args, **kwargs):
        at(caller, ("torch.cuda.Stream",), REDIRECTED, stream_text)
        return build_stream(*args, **kwargs)

    def new_event(caller, *args, **kwargs):
        at(caller, ("torch.cuda.Event",), REDIRECTED, event_text)
        return make_event(*args, **kwargs)

    def stream_new(cls, device=None, priority=0, **kwargs):  # a class deriving from torch.cuda.Stream
        return stream_base.__new__(cls, device=device_arg(device), priority=priority)

    def event_new(cls, enable_timing=False, blocking=False, interprocess=False, **kwargs):
        return event_base.__new__(cls, enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)

    def no_init(self, *args, **kwargs):  # CUDA's streams and events take their arguments in __new__
        pass

    class StreamContext:
        """``torch.cuda.StreamContext(s)`` / ``torch.cuda.stream(s)``: ``s`` is the current
        stream of the backend inside the block (``None``: no change)."""

        def __init__(self, stream):
            self.stream = stream
            self._entered = []

        def __enter__(self):
            cm = enter(self.stream)
            cm.__enter__()
            self._entered.append(cm)

        def __exit__(self, *exc):
            return self._entered.pop().__exit__(*exc)

    def new_context(stream):
        t.log.redirected("torch.cuda.StreamContext", f"{b.name} stream")
        return StreamContext(stream)

    def stream(s):
        t.log.redirected("torch.cuda.stream", f"{b.name} stream")
        return StreamContext(s)

    # on cpu the host stream takes torch.cuda.Stream's arguments itself (it has no device to map)
    _stand_in(t, "Stream", new_stream, stream_base, lambda obj: on_backend(obj, torch_stream),
              {"__new__": stream_new, "__init__": no_init}, takes_caller=True,
              fast=make_stream if cpu else build_stream, describe=stream_text)
    _stand_in(t, "Event", new_event, event_base, lambda obj: on_backend(obj, torch_event),
              {"__new__": event_new, "__init__": no_init}, takes_caller=True, fast=make_event,
              describe=event_text)
    _stand_in(t, "StreamContext", new_context, StreamContext)
    _patch(t, cuda, "stream", stream)

    def stream_call(name, fn):
        text = lambda key: (key[0], f"{b.name} {name}")  # noqa: E731
        if cpu or name not in ("current_stream", "default_stream"):  # the host's ignore their device argument
            return _counted(t, (f"torch.cuda.{name}",), text, fn)

        def answer(*args, **kwargs):  # the device argument, mapped
            if args:
                args = (t.index(args[0]) if not cpu else None,) + args[1:]
            return fn(*args, **kwargs)
        return _counted(t, (f"torch.cuda.{name}",), text, answer)

    for name, fn in calls.items():
        _patch(t, cuda, name, *stream_call(name, fn))


def _own_class(mod, name: str, torch_cls: type) -> Optional[type]:
    """The device module's ``Stream`` / ``Event`` where it is a class of ``torch_cls`` objects."""
    own = getattr(mod, name, None)
    return own if isinstance(own, type) and torch_cls in own.__mro__ else None


def _device_stream(t: Redirection, torch_stream: type) -> type:
    """A ``torch.Stream`` of the backend's device, built with ``torch.cuda.Stream``'s signature
    (for a device module whose ``Stream`` is not a class of them)."""
    class DeviceStream(torch_stream):
        def __new__(cls, device=None, priority=0, **kwargs):
            return torch_stream.__new__(cls, device=t.device(device), priority=priority)

        def __init__(self, *args, **kwargs):
            pass

    return DeviceStream


def _device_event(t: Redirection, torch_event: type) -> type:
    """A ``torch.Event`` of the backend's current device, built with ``torch.cuda.Event``'s
    signature (for a device module whose ``Event`` is not a class of them: the emulator's).
    torch's event methods take exact ``torch.Event`` objects, so each one holds one and hands
    it its work."""
    class DeviceEvent(torch_event):
        def __new__(cls, enable_timing=False, blocking=False, interprocess=False, **kwargs):
            device = t.device()
            self = torch_event.__new__(cls, device=device, enable_timing=enable_timing, blocking=blocking,
                                       interprocess=interprocess)
            self._event = torch_event(device=device, enable_timing=enable_timing, blocking=blocking,
                                      interprocess=interprocess)
            return self

        def __init__(self, *args, **kwargs):
            pass

        def record(self, stream=None):
            return self._event.record(stream)

        def wait(self, stream=None):
            return self._event.wait(stream)

        def query(self):
            return self._event.query()

        def synchronize(self):
            return self._event.synchronize()

        def elapsed_time(self, end_event):
            return self._event.elapsed_time(getattr(end_event, "_event", end_event))

    return DeviceEvent


# -- legacy types, NVTX, graphs, the rest ---------------------------------------------------------
def _install_legacy_types(t: Redirection) -> None:
    class LegacyCudaType(type):
        def __call__(cls, *args, **kwargs):
            target = t.device()
            t.log.redirected(f"torch.cuda.{cls.__name__}", f"a {cls._hal_dtype} tensor on {target}")
            return getattr(torch, cls.__name__)(*args, **kwargs).to(target)

        def __instancecheck__(cls, obj):
            return isinstance(obj, torch.Tensor) and obj.dtype == cls._hal_dtype and obj.device.type == t.device_type

    for name, dtype in LEGACY_TYPES.items():
        if hasattr(torch.cuda, name):
            t.patch(torch.cuda, name, LegacyCudaType(name, (), {"_hal_dtype": dtype, "__module__": "torch.cuda",
                                                                MARK: True}))


def _install_nvtx(t: Redirection) -> None:
    nvtx = getattr(torch.cuda, "nvtx", None)
    if nvtx is None:
        return

    def no_op(name, result=None):
        def call(*args, **kwargs):
            t.log.not_redirected(f"torch.cuda.nvtx.{name}", "no-op: NVTX annotates CUDA timelines")
            return result
        return call

    @contextlib.contextmanager
    def range_(msg, *args, **kwargs):
        t.log.not_redirected("torch.cuda.nvtx.range", "no-op: NVTX annotates CUDA timelines")
        yield

    for name, result in (("range_push", 0), ("range_pop", 0), ("range_start", 0), ("range_end", None),
                         ("mark", None)):
        if hasattr(nvtx, name):
            _patch(t, nvtx, name, no_op(name, result))
    if hasattr(nvtx, "range"):
        _patch(t, nvtx, "range", range_)


def _install_graphs(t: Redirection) -> None:
    """CUDA graphs: no backend the shim redirects to has them (on CUDA the shim changes nothing), so the
    user's code -- or a library that captures graphs once ``torch.cuda.is_available()`` answers True --
    gets :class:`hal.NotSupported` naming the call, the backend and the libraries' switches
    (:func:`hal.stacks.cuda_graph_hint`).  The classes stay classes (``isinstance``, annotations);
    ``is_current_stream_capturing()`` answers False (:func:`_install_devices`)."""
    from hal.stacks import cuda_graph_hint

    def refuse(label: str) -> Callable:
        def call(*args, **kwargs):
            t.log.not_redirected(label, f"no CUDA graphs on {t.backend.name}; raised hal.NotSupported")
            raise NotSupported(t.backend.name, f"{label} (CUDA graphs)", cuda_graph_hint())
        return call

    for name in GRAPH_FUNCTIONS:
        if callable(getattr(torch.cuda, name, None)):
            _patch(t, torch.cuda, name, refuse(f"torch.cuda.{name}"))
    for name in GRAPH_CLASSES:
        orig = getattr(torch.cuda, name, None)
        if isinstance(orig, type):
            _stand_in(t, name, refuse(f"torch.cuda.{name}"), spec_of(orig).base if is_stand_in(orig) else orig)


def _install_rest(t: Redirection) -> None:
    cuda = torch.cuda

    def no_op(name, result, why):
        def call(*args, **kwargs):
            t.log.not_redirected(f"torch.cuda.{name}", f"no-op: {why}; returned {result!r}")
            return result
        return call

    for name, (result, why) in NO_OPS.items():
        if hasattr(cuda, name):
            _patch(t, cuda, name, no_op(name, result, why))

    _install_graphs(t)

    # every other public torch.cuda function is reported when the user's code calls it
    report_the_rest(t, cuda, "torch.cuda")


# -- torch.accelerator --------------------------------------------------------------------------
#: torch.accelerator's calls -> the torch.cuda call whose answer (for the user's code) they give
ACCELERATOR_AS_CUDA = {"device_count": "device_count", "current_device_index": "current_device",
                       "current_device_idx": "current_device", "set_device_index": "set_device",
                       "set_device_idx": "set_device", "device_index": "device", "current_stream": "current_stream",
                       "set_stream": "set_stream", "synchronize": "synchronize", "empty_cache": "empty_cache",
                       "get_memory_info": "mem_get_info", "memory_allocated": "memory_allocated",
                       "max_memory_allocated": "max_memory_allocated", "memory_reserved": "memory_reserved",
                       "max_memory_reserved": "max_memory_reserved", "memory_stats": "memory_stats",
                       "reset_peak_memory_stats": "reset_peak_memory_stats",
                       "reset_accumulated_memory_stats": "reset_accumulated_memory_stats"}


def _install_accelerator(t: Redirection) -> None:
    """``torch.accelerator`` answers the user's code as on a CUDA machine, as ``torch.cuda`` does under the
    shim: ``current_accelerator()`` is ``cuda``, ``is_available()`` True, and each call gives
    ``torch.cuda``'s answer for the backend (:data:`ACCELERATOR_AS_CUDA`).  Libraries now pick their device
    through it (accelerate 1.16, transformers 5.25): an answer that disagreed with
    ``torch.cuda.is_available()`` sent them down their CPU path, every torchrun rank alone.  torch's own
    code gets torch's real answer (the backend's device, or none on the CPU)."""
    acc = getattr(torch, "accelerator", None)
    if acc is None:
        return
    cuda, cpu = torch.cuda, t.device_type == "cpu"
    real = {name: getattr(acc, name, None) for name in ("get_device_capability", "empty_host_cache")}

    def as_cuda(cuda_name):
        def call(*args, **kwargs):
            return answer_for_user(getattr(cuda, cuda_name))(*args, **kwargs)
        return call

    def capability(device=None):
        if cpu:  # what torch answers for the CPU's dtypes
            return {"supported_dtypes": set(t.backend.supported_dtypes())}
        return real["get_device_capability"](t.device(device))

    answers = {"current_accelerator": lambda check_available=False: torch.device("cuda"),
               "is_available": lambda: True, "get_device_capability": capability,
               "empty_host_cache": lambda: None if cpu else real["empty_host_cache"]()}
    answers.update({name: as_cuda(cuda_name) for name, cuda_name in ACCELERATOR_AS_CUDA.items()})
    for name in getattr(acc, "__all__", ()):
        obj = getattr(acc, name, None)
        if obj is None or name not in answers:
            continue
        if isinstance(obj, type):  # device_index: a class stays a class; torch's own code gets torch's
            device_spec = spec_of(cuda.device)
            t.patch(acc, name, stand_in(name, Spec(obj, obj, device_spec.new, device_spec.base)))
        else:
            _patch(t, acc, name, answers[name])


def install(t: Redirection) -> None:
    """Patch ``torch.cuda``, its submodules, ``torch.backends.cuda`` and ``torch.accelerator`` for ``t``."""
    originals = dict(vars(torch.cuda))
    _install_devices(t)
    _install_facet(t)
    _install_legacy_types(t)
    _install_nvtx(t)
    _install_rest(t)
    _cuda_submodules.install(t, originals)
    _install_accelerator(t)
