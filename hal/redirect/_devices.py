"""The device-taking torch calls, each wrapped to map ``cuda`` to the backend's device.

The set is finite and read from torch itself at enable time: every ``aten`` operator whose
schema has a ``Device`` argument named ``device`` (``torch._C._jit_get_all_schemas()``),
resolved to where a script reaches it (``torch.X``, ``Tensor.X``, ``torch.fft.X`` ...).  The
Python-level calls without a schema are listed here by hand: ``Tensor.cuda/type/new_tensor``,
``Module.to/cuda/to_empty``, ``torch.asarray``, ``torch.nested``, ``with torch.device(...)`` /
``torch.set_default_device`` (``DeviceContext``), ``torch.Generator/Stream/Event`` (types:
replaced by subclasses whose ``isinstance`` answers for the original type), DataLoader's
``pin_memory_device``; with them ``Tensor.record_stream`` (a no-op where work is
synchronous) and, on accelerator backends, ``Tensor.is_cuda`` (True for the script's
tensors on the device).  Every other torch call is left untouched, so the shim costs
nothing on the ops of a training step.

A wrapper maps only what a CUDA script passes as a device (``"cuda"``, ``"cuda:N"``, a cuda
``torch.device``, a bare index); ``torch.device("cuda")`` objects themselves stay cuda.
"""
from __future__ import annotations

import functools
import os
import sys
import threading
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import torch

from hal._errors import NotSupported
from hal.util.frames import INTERNAL_NAMES, INTERNAL_PREFIXES
from hal.util.in_graph import compiled_in_graph
from hal.redirect._core import Redirection, is_cuda_like
from hal.redirect._log import REDIRECTED

#: op-name prefixes of torch's sub-namespaces (aten::fft_fftfreq is torch.fft.fftfreq)
NAMESPACES = (("fft_", "fft"), ("linalg_", "linalg"), ("special_", "special"), ("nested_", "nested"),
              ("sparse_", "sparse"))
#: device-taking calls without an aten schema, wrapped like the schema'd ones
#: (owner path, attribute, positional index of the device or None)
PYTHON_LEVEL = (("torch", "asarray", None), ("torch.Tensor", "new_tensor", None),
                ("torch.nested", "nested_tensor", None), ("torch.nested", "as_nested_tensor", None))
#: the Python-level ones of those that take ``pin_memory`` (the schema'd ones are read from torch)
PYTHON_LEVEL_PINNED = ("tensor", "as_tensor")
#: calls that have their own wrapper below (not the generic one)
OWN_WRAPPER = {("torch.Tensor", "to"), ("torch.Tensor", "pin_memory"), ("torch.Tensor", "is_pinned"),
               ("torch", "Generator")}
MARK = "__hal_redirect__"
_getframe = sys._getframe
DEVICE = torch.device


@functools.lru_cache(maxsize=1)
def schema_device_ops() -> Dict[str, Optional[int]]:
    """aten op names that take a ``device`` -> the positional index of that argument in the
    overload that allows one (None where every overload takes it by keyword only).  Read
    once per process (about 10 ms)."""
    found: Dict[str, Optional[int]] = {}
    for schema in torch._C._jit_get_all_schemas():
        ns, _, name = schema.name.partition("::")
        if ns != "aten":
            continue
        for i, arg in enumerate(schema.arguments):
            if arg.name == "device" and "Device" in str(arg.type):
                pos = None if arg.kwarg_only else i
                if name not in found or found[name] is None:
                    found[name] = pos
    return found


@functools.lru_cache(maxsize=1)
def schema_pin_memory_ops() -> frozenset:
    """aten op names whose schema has a ``pin_memory`` argument (the tensor factories)."""
    return frozenset(s.name.partition("::")[2] for s in torch._C._jit_get_all_schemas()
                     if s.name.startswith("aten::") and any(a.name == "pin_memory" for a in s.arguments))


def _owner_path(owner) -> str:
    return "torch.Tensor" if owner is torch.Tensor else owner.__name__


def reachable(name: str) -> Iterator[Tuple[object, str]]:
    """Where a script reaches aten op ``name``: (owner, attribute) pairs that exist."""
    for owner in (torch, torch.Tensor):
        if getattr(owner, name, None) is not None:
            yield owner, name
    for prefix, mod in NAMESPACES:
        if name.startswith(prefix):
            sub = getattr(torch, mod, None)
            if sub is not None and getattr(sub, name[len(prefix):], None) is not None:
                yield sub, name[len(prefix):]


def device_calls() -> List[Tuple[object, str, Optional[int], Optional[str]]]:
    """(owner, attribute, device position, aten op name or None) of every call wrapped."""
    out = []
    for name, pos in sorted(schema_device_ops().items()):
        for owner, attr in reachable(name):
            out.append((owner, attr, pos, name))
    for path, attr, pos in PYTHON_LEVEL:
        owner = _resolve(path)
        if owner is not None and getattr(owner, attr, None) is not None:
            out.append((owner, attr, pos, None))
    return out


def _resolve(path: str):
    obj = torch
    for part in path.split(".")[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def is_wrapped(obj) -> bool:
    """True for a call the shim has wrapped."""
    return bool(getattr(obj, MARK, False))


def marked(fn: Callable, orig: Callable) -> Callable:
    """``fn`` with the name and doc of ``orig``, marked as the shim's wrapper."""
    try:
        functools.update_wrapper(fn, orig)
    except (AttributeError, TypeError):
        pass
    setattr(fn, MARK, True)
    return fn


#: hal._C's C wrappers of the shim (csrc/redirect_calls.cpp)
NATIVE_CALLS = ("DeviceCall", "SplitCall", "SiteCall", "CudaCall", "StandInCall")


def native_call(name: str) -> Optional[type]:
    """hal._C's C wrapper ``name`` (one of :data:`NATIVE_CALLS`), or None where hal._C is not built or
    predates it (Python < 3.11), or ``HAL_REDIRECT_NATIVE=0`` asks for the Python wrappers."""
    if os.environ.get("HAL_REDIRECT_NATIVE", "1") == "0":
        return None
    try:
        import hal._C as native
    except ImportError:
        return None
    return getattr(native, name, None)


def native_wrappers() -> bool:
    """True when the shim's hot wrappers run in C here (hal._C built with them, Python >= 3.11, and
    ``HAL_REDIRECT_NATIVE`` not ``0``); False: the Python wrappers, which record the same log."""
    return all(native_call(name) is not None for name in NATIVE_CALLS)


def _on_miss(t: Redirection, key: tuple, describe: Callable, kind: str = REDIRECTED) -> Callable:
    """What a C wrapper calls on a call site it has not counted yet: record the call ``key`` there
    (:meth:`RedirectLog.at`, as ``kind``) and return the site's row, which it counts from then on (None
    where the caller is torch's own code: asked again next time)."""
    sites, at = t.log.sites, t.log.at

    def on_miss(f, _dev, _target):
        site = (id(f.f_code), f.f_lasti) + key
        row = sites.get(site)
        if row is None:
            at(f, key, kind, describe)
            return sites.get(site)
        row["count"] += 1
        return row
    return on_miss


def counted(t: Redirection, key: tuple, describe: Callable, fn: Callable,
            kind: str = REDIRECTED) -> Tuple[Callable, bool]:
    """``fn``, each call recorded in the log as ``key`` (a ``kind`` row) at its call site (``describe(key)``
    gives the row's text on a site's first sight), as ``(callable, takes_caller)`` for
    :func:`hal.redirect._split.patch_split`: hal._C's ``SiteCall`` where it has it, else a Python function
    taking the calling frame first."""
    site_call = native_call("SiteCall")
    if site_call is not None:
        return site_call(fn, _on_miss(t, key, describe, kind)), False
    at = t.log.at

    def call(caller, *args, **kwargs):
        at(caller, key, kind, describe)
        return fn(*args, **kwargs)
    return call, True


def _wrap_device_arg(t: Redirection, fn: Callable, label: str, pos: Optional[int],
                     unpinned: bool = False) -> Callable:
    """``fn`` with its device argument (positional at ``pos``, or the keyword ``device``) mapped;
    ``unpinned``: also with ``pin_memory=True`` dropped (the cpu backend's factories: no device to
    pin host memory for, as with ``Tensor.pin_memory()`` there).

    A device argument's target is one lookup in ``t.targets`` (:meth:`Redirection.target` on a
    miss); the log counts the call at its call site (:meth:`RedirectLog.at`).  Where hal._C has it,
    the wrapper is its ``DeviceCall`` (a C call: the mapping and the site's count cost ~0.1-0.2 us);
    else one Python frame over torch's function."""
    targets, at, describer, sites = t.targets, t.log.at, t.describer, t.log.sites
    log = t.log

    def unpin():
        log.not_redirected(f"{label}(pin_memory=True)", f"{t.backend.name}: no device to pin host memory "
                           f"for; an ordinary tensor is made (values unchanged)")

    device_call = native_call("DeviceCall")
    if device_call is not None:
        def on_miss(f, d, target):  # the device's row: one per device argument at a site
            return _on_miss(t, (label, d), describer(target))(f, d, target)

        wrapper = device_call(fn, -1 if pos is None else pos, targets, on_miss, unpin if unpinned else None,
                              DEVICE)
        return compiled_in_graph(marked(wrapper, fn))

    # where hal._C lacks DeviceCall: the same in Python
    def mapped(d, caller):
        """``d``'s target, the call recorded at ``caller``; None where ``d`` is not a CUDA device."""
        c = d.__class__
        if c is str or c is DEVICE or c is int:
            target = targets[d]
            if target is not False:
                row = sites.get((id(caller.f_code), caller.f_lasti, label, d))
                if row is None:
                    at(caller, (label, d), REDIRECTED, describer(target))
                else:
                    row["count"] += 1
                return target
        return None

    def call(*args, **kwargs):
        if pos is not None and len(args) > pos:
            target = mapped(args[pos], _getframe(1))
            if target is not None:
                args = args[:pos] + (target,) + args[pos + 1:]
        if kwargs:
            d = kwargs.get("device")
            if d is not None:
                target = mapped(d, _getframe(1))
                if target is not None:
                    kwargs["device"] = target
            if unpinned and kwargs.get("pin_memory"):
                kwargs["pin_memory"] = False
                unpin()
        return fn(*args, **kwargs)
    return marked(call, fn)


def _register_jit_builtin(t: Redirection, wrapper: Callable, op: str) -> None:
    """Let ``torch.jit.script`` see the wrapper as the aten op it wraps."""
    try:
        from torch.jit._builtins import _get_builtin_table
        table = _get_builtin_table()
    except Exception:  # torch without the private table: scripting sees the wrapper as Python
        return
    key = id(wrapper)
    table[key] = op
    t.on_restore(lambda: table.pop(key, None))


# -- the generic wrappers ------------------------------------------------------------------
def _warm_torch_tables() -> None:
    """Let torch build the tables it keys by function object (the default-device
    constructors, the TorchScript builtins) from the original functions, before any is
    replaced: they are built once, on first use."""
    from torch.utils._device import _device_constructors
    _device_constructors()
    try:
        from torch.jit._builtins import _get_builtin_table
        _get_builtin_table()
    except Exception:  # a torch without the private table
        pass


def _install_generic(t: Redirection) -> None:
    _warm_torch_tables()
    pin_ops = schema_pin_memory_ops()
    seen = set()
    for owner, attr, pos, op in device_calls():
        key = (_owner_path(owner), attr)
        if key in OWN_WRAPPER or (id(owner), attr) in seen:
            continue
        seen.add((id(owner), attr))
        orig = getattr(owner, attr)
        if isinstance(orig, type) or is_wrapped(orig):
            continue
        label = f"{_owner_path(owner).replace('torch.Tensor', 'Tensor')}.{attr}"
        wrapper = _wrap_device_arg(t, orig, label, pos, unpinned=t.device_type == "cpu" and (
            op in pin_ops or attr in PYTHON_LEVEL_PINNED))
        t.patch(owner, attr, wrapper)
        if op is not None and owner is not torch.Tensor:
            _register_jit_builtin(t, wrapper, f"aten::{op}")


# -- Tensor --------------------------------------------------------------------------------
#: legacy CUDA tensor types (torch.cuda.FloatTensor ...) -> their dtype
LEGACY_TYPES = {"FloatTensor": torch.float32, "DoubleTensor": torch.float64, "HalfTensor": torch.float16,
           "BFloat16Tensor": torch.bfloat16, "ByteTensor": torch.uint8, "CharTensor": torch.int8,
           "ShortTensor": torch.int16, "IntTensor": torch.int32, "LongTensor": torch.int64,
           "BoolTensor": torch.bool}


def legacy_cuda_dtype(kind) -> Optional[torch.dtype]:
    """dtype of a legacy CUDA tensor type given as a string (``"torch.cuda.FloatTensor"``) or
    as the shim's stand-in type; None for anything else."""
    if isinstance(kind, str):
        if kind.startswith("torch.cuda."):
            return LEGACY_TYPES.get(kind[len("torch.cuda."):])
        return None
    return getattr(kind, "_hal_dtype", None)


def _install_tensor(t: Redirection) -> None:
    T = torch.Tensor
    orig_to, orig_pin, orig_is_pinned, orig_type = T.to, T.pin_memory, T.is_pinned, T.type
    backend = t.backend
    targets, at, sites = t.targets, t.log.at, t.log.sites

    # Tensor.to(self, device, ...): the device is the argument after self, or the keyword
    to = _wrap_device_arg(t, orig_to, "Tensor.to", 1)

    def cuda_text(target):
        return lambda key: ("Tensor.cuda()", f"Tensor.to({target})")

    def cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
        target = targets.get(device)
        if not target:
            target = t.device(device)
        f = _getframe(1)
        row = sites.get((id(f.f_code), f.f_lasti, "Tensor.cuda()"))
        if row is None:
            at(f, ("Tensor.cuda()",), REDIRECTED, cuda_text(target))
        else:
            row["count"] += 1
        return orig_to(self, target, non_blocking=non_blocking, memory_format=memory_format)

    cuda_call = native_call("CudaCall")
    if cuda_call is not None:  # the same, in C; calls it does not recognise go to the Python one above
        def on_cuda_miss(f, d, target):
            return _on_miss(t, ("Tensor.cuda()",), cuda_text(target))(f, d, target)

        cuda = compiled_in_graph(marked(cuda_call(orig_to, targets, t.device, on_cuda_miss, marked(cuda, T.cuda)),
                                        T.cuda))

    busy = threading.local()

    def pin_memory(self, device=None):
        if getattr(busy, "on", False):  # the backend facet pinning for real
            return orig_pin(self)
        busy.on = True
        try:
            pinned = backend.pin_memory(self)
        except NotSupported as exc:
            t.log.not_redirected("Tensor.pin_memory()", f"{exc}; the tensor is left as it is (values unchanged)")
            return self
        finally:
            busy.on = False
        if pinned is self:
            t.log.not_redirected("Tensor.pin_memory()", f"{backend.name}: no device to pin host memory for; "
                                 f"the tensor is left as it is (values unchanged)")
        return pinned

    def is_pinned(self, device=None):
        if t.device_type == "cpu":  # nothing is pinned for the CPU backend (pin_memory is a no-op)
            return False
        return orig_is_pinned(self)

    def type_(self, dtype=None, non_blocking=False, **kwargs):
        wanted = legacy_cuda_dtype(dtype)
        if wanted is None:
            return orig_type(self, dtype, non_blocking, **kwargs) if dtype is not None else orig_type(self)
        target = t.device()
        t.log.redirected(f"Tensor.type({getattr(dtype, '__name__', dtype)})", f"Tensor.to({target}, {wanted})")
        return orig_to(self, target, wanted, non_blocking=non_blocking)

    orig_record = T.record_stream
    torch_stream = torch.Stream

    def record_stream(self, stream):
        # the caching allocator's hand-over between streams; streams of a synchronous device
        # (the CPU, the Python-level streams of a device module) have nothing to hand over
        if self.device.type == "cpu" or not isinstance(stream, torch_stream):
            t.log.redirected("Tensor.record_stream()", f"no-op: work on {self.device} is complete when "
                             f"the op returns")
            return None
        return orig_record(self, stream)

    for name, fn, orig in (("to", to, orig_to), ("cuda", cuda, T.cuda), ("pin_memory", pin_memory, orig_pin),
                           ("is_pinned", is_pinned, orig_is_pinned), ("type", type_, orig_type),
                           ("record_stream", record_stream, orig_record)):
        t.patch(T, name, marked(fn, orig))
    if t.device_type != "cpu":
        t.patch(T, "is_cuda", _is_cuda_property(t))


def _is_cuda_property(t: Redirection) -> property:
    """``Tensor.is_cuda``: True for a tensor on the backend's device when the user's code asks
    (``if next(model.parameters()).is_cuda: x = x.cuda()``), torch's own answer for torch's
    and hal's code.  (On the CPU backend it is left alone: every tensor is on the one device,
    so both branches of such a test agree.)"""
    real = torch._C.TensorBase.is_cuda.__get__
    device_type = t.device_type

    def is_cuda(self):
        if self.device.type == device_type:
            name = _getframe(1).f_globals.get("__name__")
            if not (name and (name in INTERNAL_NAMES or name.startswith(INTERNAL_PREFIXES))):
                t.log.redirected("Tensor.is_cuda", f"True (the tensor is on {self.device})")
                return True
        return real(self)

    return property(marked(is_cuda, torch._C.TensorBase.is_cuda.__get__), doc=torch._C.TensorBase.is_cuda.__doc__)


# -- Module --------------------------------------------------------------------------------
def keeps_parameters(backend) -> bool:
    """True when ``Module.to(device)`` keeps a CPU module's Parameter objects on ``backend``'s
    device (it sets ``param.data``), as it does for CUDA; False where torch makes new Parameters
    (tensor types it cannot shallow-copy into each other), which leaves an optimizer built before
    ``.to(device)`` holding the old ones.  The check is hal's own op (``backend.own_ops()``)."""
    device = backend.device()
    if device.type == "cpu":
        return True
    try:
        with backend.own_ops():
            probe = torch.empty(0, device=device)
        return bool(torch._has_compatible_shallow_copy_type(torch.empty(0), probe))
    except Exception:  # a torch without the helper: assume torch's default behaviour is fine
        return True


def _install_module(t: Redirection) -> None:
    M = torch.nn.Module
    orig_to, orig_cuda, orig_to_empty = M.to, M.cuda, M.to_empty
    redirect = t.redirect
    future = torch.__future__
    swap = not keeps_parameters(t.backend)

    def move(self, *args, **kwargs):
        # what CUDA does: the module's Parameter objects survive the move (torch swaps their
        # contents), so an optimizer created before .cuda() / .to("cuda") trains them
        if not swap or future.get_swap_module_params_on_conversion():
            return orig_to(self, *args, **kwargs)
        future.set_swap_module_params_on_conversion(True)
        try:
            return orig_to(self, *args, **kwargs)
        except RuntimeError as exc:
            if "swap" not in str(exc):
                raise
            t.log.not_redirected("Module.to()", f"{exc}; moved without keeping Parameter objects (an optimizer "
                                 f"built before the move keeps the old ones: build it after)")
        finally:
            future.set_swap_module_params_on_conversion(False)
        return orig_to(self, *args, **kwargs)

    def to(self, *args, **kwargs):
        if args and args[0] is not None and is_cuda_like(args[0]):
            args = (redirect(args[0], "Module.to"),) + args[1:]
        d = kwargs.get("device")
        if d is not None and is_cuda_like(d):
            kwargs["device"] = redirect(d, "Module.to")
        return move(self, *args, **kwargs)

    def cuda(self, device=None):
        target = t.device(device)
        t.log.redirected("Module.cuda()", f"Module.to({target})")
        return move(self, target)

    def to_empty(self, *, device, recurse=True):
        if device is not None and is_cuda_like(device):
            device = redirect(device, "Module.to_empty")
        return orig_to_empty(self, device=device, recurse=recurse)

    for name, fn, orig in (("to", to, orig_to), ("cuda", cuda, orig_cuda), ("to_empty", to_empty, orig_to_empty)):
        t.patch(M, name, marked(fn, orig))


# -- default device: with torch.device("cuda"), torch.set_default_device("cuda") -------------
def _install_default_device(t: Redirection) -> None:
    from torch.utils._device import DeviceContext
    orig_init = DeviceContext.__init__

    def init(self, device):
        if device is not None and is_cuda_like(device):
            device = t.redirect(device, "default device {dev} (with torch.device(...) / torch.set_default_device)")
        orig_init(self, device)

    t.patch(DeviceContext, "__init__", marked(init, orig_init))


# -- types: Generator, Stream, Event ---------------------------------------------------------
def stand_in_type(orig: type, new: Callable) -> type:
    """A subclass of ``orig`` whose construction is ``new(*args, **kwargs)`` (returning an
    ``orig`` instance) and for which ``isinstance`` / ``issubclass`` answer as for ``orig``."""
    meta = type(f"_{orig.__name__}StandIn", (type(orig),), {
        "__instancecheck__": lambda cls, obj: isinstance(obj, orig),
        "__subclasscheck__": lambda cls, sub: issubclass(sub, orig),
    })

    def __new__(cls, *args, **kwargs):
        return new(*args, **kwargs)

    return meta(orig.__name__, (orig,), {"__new__": __new__, "__module__": orig.__module__,
                                         "__qualname__": orig.__qualname__, "__doc__": orig.__doc__,
                                         MARK: True, "_hal_original": orig})


def _device_of(args, kwargs):
    if "device" in kwargs:
        return kwargs["device"], args, kwargs, True
    if args:
        return args[0], args, kwargs, False
    return None, args, kwargs, False


def _install_types(t: Redirection) -> None:
    from hal.redirect import _host
    Generator, Stream, Event = torch.Generator, torch.Stream, torch.Event

    def mapped(args, kwargs, label):
        dev, args, kwargs, by_kw = _device_of(args, kwargs)
        if dev is not None and is_cuda_like(dev):
            dev = t.redirect(dev, label)
            if by_kw:
                kwargs = {**kwargs, "device": dev}
            else:
                args = (dev,) + tuple(args[1:])
        return dev, args, kwargs

    def new_generator(*args, **kwargs):
        _, args, kwargs = mapped(args, kwargs, "torch.Generator")
        return Generator(*args, **kwargs)

    def new_stream(*args, **kwargs):
        _, args, kwargs = mapped(args, kwargs, "torch.Stream")
        return Stream(*args, **kwargs)

    def new_event(*args, **kwargs):
        dev, args, kwargs = mapped(args, kwargs, "torch.Event")
        if t.device_type == "cpu" and (dev is None or torch.device(dev).type == "cpu"):
            kwargs.pop("device", None)
            return _host.HostEvent(**kwargs)  # torch's CPU event cannot record
        return Event(*args, **kwargs)

    t.patch(torch, "Generator", stand_in_type(Generator, new_generator))
    t.patch(torch, "Stream", stand_in_type(Stream, new_stream))
    t.patch(torch, "Event", stand_in_type(Event, new_event))


# -- DataLoader(pin_memory_device="cuda"), DataLoader(pin_memory=True) on cpu ----------------
def _install_dataloader(t: Redirection) -> None:
    import inspect

    from torch.utils.data import DataLoader
    orig_init = DataLoader.__init__
    # the arguments by name, wherever this torch puts them (bound once per DataLoader, not per batch)
    signature = inspect.signature(orig_init)

    def init(self, *args, **kwargs):
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:  # torch's own error for a wrong call, from torch
            return orig_init(self, *args, **kwargs)
        given = bound.arguments
        if t.device_type == "cpu" and given.get("pin_memory") is True:  # torch would warn "no accelerator
            given["pin_memory"] = False                                   # is found" and not pin
            t.log.not_redirected("DataLoader(pin_memory=True)", "cpu: no device to pin host memory for; "
                                 "batches stay ordinary tensors (values unchanged)")
        dev = given.get("pin_memory_device")
        if isinstance(dev, str) and dev.startswith("cuda"):
            given["pin_memory_device"] = "" if t.device_type == "cpu" else t.device_type
            t.log.redirected(f"DataLoader(pin_memory_device={dev!r})",
                             f"pin_memory_device={given['pin_memory_device']!r}")
        orig_init(*bound.args, **bound.kwargs)

    t.patch(DataLoader, "__init__", marked(init, orig_init))


def install(t: Redirection) -> None:
    """Wrap every device-taking call (see the module docstring)."""
    _install_generic(t)
    _install_tensor(t)
    _install_module(t)
    _install_default_device(t)
    _install_types(t)
    _install_dataloader(t)
