"""``torch.cuda``'s classes stay classes under the shim.

A name that is a class on CUDA (``torch.cuda.Stream``, ``Event``, ``StreamContext``,
``device``, ``device_of``, ``CUDAGraph``, ``graph``, ``MemPool`` ...) is replaced by a
*stand-in*: a class, so that ``isinstance``, ``issubclass``, ``torch.cuda.Stream | None`` in an
annotation and ``class MyStream(torch.cuda.Stream)`` work as they do on CUDA.  For the user's
code (:mod:`hal.util.frames`):

- calling the stand-in builds the backend's own object (``torch.cuda.Stream()`` is the
  backend's stream: a ``torch.Stream``), or, for a class the backend has no counterpart of,
  reports the call and builds torch's own (which needs CUDA);
- ``isinstance`` / ``issubclass`` accept the backend's objects and types as well as CUDA's;
- a class deriving from the stand-in derives from the backend's class, so its instances are
  backend objects too.

torch's own code gets torch's classes: constructing the stand-in from torch or hal calls
torch's class, and ``isinstance`` / ``issubclass`` answer as for torch's class alone.
"""
from __future__ import annotations

import abc
import sys
from typing import Callable, Dict, Iterable, Iterator, Optional, Tuple

from hal.util.frames import from_inside
from hal.redirect._core import _INTERNAL
from hal.redirect._devices import MARK, native_call

_getframe = sys._getframe

#: the attribute of a stand-in that holds its :class:`Spec` (on the stand-in itself, not on
#: the classes deriving from it)
SPEC = "_hal_stand_in"


class Spec:
    """What a stand-in stands for.

    :param call: what ``torch.cuda.<name>`` was (torch's class; a function where a test
        replaced it): torch's own code calling the stand-in calls this.
    :param cuda: torch's class of that name (``None`` where there is none to find):
        ``isinstance`` / ``issubclass`` always accept its instances and subclasses.
    :param new: builds the object the user's code gets from ``torch.cuda.<name>(...)``.
    :param base: the class the stand-in derives from; the user's ``isinstance`` accepts its
        instances, ``issubclass`` its subclasses.
    :param accepts: further objects the user's ``isinstance`` accepts (the backend's streams
        that are plain ``torch.Stream`` objects, say).
    :param takes_caller: ``new`` takes the calling frame as its first argument (to record the call
        there: :meth:`hal.redirect.RedirectLog.at`).
    :param fast: optional: ``new`` without the calling frame and without recording the call, for
        hal._C's ``StandInCall`` (which counts the call at its site itself, ``on_miss`` recording a
        site's first call as the shim's other C wrappers do).
    :param on_miss: with ``fast``: what ``StandInCall`` calls on a call site's first sight.
    """

    __slots__ = ("call", "cuda", "new", "base", "accepts", "takes_caller", "fast", "on_miss")

    def __init__(self, call: Callable, cuda: Optional[type], new: Callable, base: type,
                 accepts: Optional[Callable[[object], bool]] = None, takes_caller: bool = False,
                 fast: Optional[Callable] = None, on_miss: Optional[Callable] = None):
        self.call, self.cuda, self.new, self.base, self.accepts = call, cuda, new, base, accepts
        self.takes_caller, self.fast, self.on_miss = takes_caller, fast, on_miss


_metas: Dict[type, type] = {}


def _meta(base_meta: type) -> type:
    """The metaclass of stand-ins whose base has metaclass ``base_meta`` (one per metaclass)."""
    meta = _metas.get(base_meta)
    if meta is not None:
        return meta

    def __call__(cls, *args, **kwargs):
        spec = cls.__dict__.get(SPEC)
        if spec is None:  # a class deriving from a stand-in: built as any class is
            return base_meta.__call__(cls, *args, **kwargs)
        f = _getframe(1)
        if _INTERNAL[f.f_globals.get("__name__")]:
            return spec.call(*args, **kwargs)
        if spec.takes_caller:
            return spec.new(f, *args, **kwargs)
        return spec.new(*args, **kwargs)

    def __instancecheck__(cls, obj) -> bool:
        spec = cls.__dict__.get(SPEC)
        if spec is None:
            return base_meta.__instancecheck__(cls, obj)
        if spec.cuda is not None and isinstance(obj, spec.cuda):
            return True
        if from_inside(2):
            return False
        return (isinstance(obj, spec.base) or base_meta.__instancecheck__(cls, obj)
                or (spec.accepts is not None and spec.accepts(obj)))

    def __subclasscheck__(cls, sub) -> bool:
        spec = cls.__dict__.get(SPEC)
        if spec is None:
            return base_meta.__subclasscheck__(cls, sub)
        if spec.cuda is not None and issubclass(sub, spec.cuda):
            return True
        if from_inside(2):
            return False
        return issubclass(sub, spec.base) or base_meta.__subclasscheck__(cls, sub)

    meta = type(f"_CudaStandIn{base_meta.__name__.capitalize()}", (base_meta,),
                {"__call__": __call__, "__instancecheck__": __instancecheck__,
                 "__subclasscheck__": __subclasscheck__, "__module__": __name__})
    _metas[base_meta] = meta
    return meta


def stand_in(name: str, spec: Spec, namespace: Optional[dict] = None) -> type:
    """A class named like torch's ``name`` that derives from ``spec.base`` and answers as
    described in the module docstring.  ``namespace`` adds attributes (a ``__new__`` taking
    CUDA's signature, for the classes the user derives from it)."""
    home = spec.cuda if spec.cuda is not None else spec.call
    ns = {SPEC: spec, MARK: True, "_hal_original": spec.cuda,
          "__module__": getattr(home, "__module__", "torch.cuda"),
          "__qualname__": getattr(home, "__qualname__", name), "__doc__": getattr(home, "__doc__", None)}
    ns.update(namespace or {})
    meta = _meta(type(spec.base))
    stand_in_call = native_call("StandInCall") if spec.fast is not None else None
    if stand_in_call is None:
        return _as_abcs_of(meta(name, (spec.base,), ns), spec.cuda)
    # its own metaclass, whose __call__ is C: constructing the stand-in costs a C call and a count
    # at the call site above the backend's constructor, not a Python frame with a log lookup
    own = type(meta.__name__, (meta,), {"__module__": meta.__module__})
    cls = own(name, (spec.base,), ns)
    own.__call__ = stand_in_call(cls, type(spec.base).__call__, spec.call, spec.fast, spec.on_miss, _INTERNAL)
    fast = native_call("fast_stand_in")
    if fast is not None:
        fast(cls)  # cls(...) reaches it through the type's vectorcall slot: no slot lookup, tuple or dict
    return _as_abcs_of(cls, spec.cuda)


def _as_abcs_of(cls: type, cuda: Optional[type]) -> type:
    """``cls`` registered as a virtual subclass of each abstract base of torch's class: torch 2.4-2.5's
    ``torch.cuda.Event`` / ``Stream`` derive from ``torch._streambase._EventBase`` / ``_StreamBase``, and
    importing torch._dynamo (the first optimizer does) asserts that ``torch.cuda.Event`` is one."""
    for base in getattr(cuda, "__mro__", ())[1:]:
        if isinstance(base, abc.ABCMeta) and base not in cls.__mro__:
            base.register(cls)
    return cls


def is_stand_in(obj) -> bool:
    """True for a class made by :func:`stand_in`."""
    return isinstance(obj, type) and SPEC in obj.__dict__


def spec_of(obj) -> Optional[Spec]:
    """The :class:`Spec` of a stand-in, else None."""
    return obj.__dict__.get(SPEC) if isinstance(obj, type) else None


def cuda_class(name: str, modules: Iterable) -> Optional[type]:
    """torch's class ``name`` of ``torch.cuda`` or one of ``modules`` (its submodules), where
    ``torch.cuda.<name>`` itself is not a class any more (a test's stand-in for a CUDA build
    without a driver replaces some by functions)."""
    for mod in modules:
        obj = mod.__dict__.get(name)
        if isinstance(obj, type) and not is_stand_in(obj) and obj.__module__.startswith("torch.cuda"):
            return obj
    return None


def public_classes(modules: Iterable) -> Iterator[Tuple[object, str, type]]:
    """(module, name, class) for every public class defined in ``torch.cuda`` or one of its
    submodules that ``modules`` lists."""
    for mod in modules:
        for name, obj in list(vars(mod).items()):
            if (not name.startswith("_") and isinstance(obj, type)
                    and getattr(obj, "__module__", "").startswith("torch.cuda")):
                yield mod, name, obj
