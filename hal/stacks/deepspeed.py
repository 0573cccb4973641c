"""DeepSpeed on the selected hal backend, through DeepSpeed's own accelerator seam.

Under ``hal run`` ``torch.cuda.is_available()`` answers True on every backend, so DeepSpeed would
take any device for CUDA: a CUDA FusedAdam to compile, device names ``cuda:N`` while the tensors are
on ``emu:N``.  :func:`install` gives DeepSpeed the backend's accelerator instead, with
``deepspeed.accelerator.set_accelerator``, the moment DeepSpeed's accelerator module has loaded and
before DeepSpeed binds its op builders to it (``import deepspeed`` does both).  ``hal run`` calls it;
without ``hal run`` it is one line before DeepSpeed is imported::

    import hal.stacks.deepspeed; hal.stacks.deepspeed.install()

Which accelerator (:func:`choose`):

- ``DS_ACCELERATOR`` set by the user: DeepSpeed's own choice, untouched;
- a backend for which DeepSpeed has its vendor's accelerator (npu, mlu, xpu, sdaa, supa, mps, the
  cpu, cuda and the stacks presenting themselves as cuda): that one, named by the backend's plugin
  (hook ``hal_deepspeed_accelerator``; the built-in backends' ``backend.json`` ``stacks``): it
  carries the vendor's fused optimizers and CCL;
- any other backend (the emulator, MUSA, GCU, a new vendor plugin): :class:`HalAccelerator`
  (``hal.stacks._deepspeed_accelerator``) over the hal backend: its device names, its CCL
  (``hal.dist``'s backend string), streams, events, memory, generators, and op builders that
  need no CUDA.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional

from hal._errors import HalError
from hal.util.import_hooks import after_import

#: DeepSpeed's own override of its accelerator; hal leaves DeepSpeed alone when it is set
ENV_DS = "DS_ACCELERATOR"
#: the module whose loading hal waits for: DeepSpeed binds its op builders right after it
SEAM = "deepspeed.accelerator.real_accelerator"


@dataclass(frozen=True)
class Choice:
    """Which accelerator DeepSpeed gets on a backend, and why.  ``accelerator`` is
    ``"module:Class"`` of DeepSpeed's own, ``"hal"`` for :class:`HalAccelerator`, or None when hal
    leaves DeepSpeed's own detection in charge."""

    backend: str
    accelerator: Optional[str]
    why: str

    def describe(self) -> str:
        name = {None: "DeepSpeed's own choice", "hal": "hal's accelerator"}.get(self.accelerator, self.accelerator)
        return f"{name} ({self.why})"


def choose(backend=None, env=os.environ) -> Choice:
    """The accelerator DeepSpeed should get on ``backend`` (default: the selected one)."""
    from hal.plugin.registry import get_registry, selected_backend

    backend = backend or selected_backend()
    if env.get(ENV_DS, "").strip():
        return Choice(backend.name, None, f"{ENV_DS}={env[ENV_DS].strip()} is set")
    reg = get_registry()
    cand = next((c for c in reg.candidates() if c.name == backend.name), None)
    named = reg.call_for(cand, "hal_deepspeed_accelerator") if cand is not None else None
    if named:
        return Choice(backend.name, named, f"DeepSpeed's own accelerator for {backend.device_type}")
    return Choice(backend.name, "hal", f"DeepSpeed has no accelerator for {backend.device_type}")


def make_accelerator(backend=None, choice: Optional[Choice] = None):
    """The DeepSpeed accelerator object for ``backend`` (imports DeepSpeed's accelerator package)."""
    from hal.plugin.kit import resolve
    from hal.plugin.registry import selected_backend

    backend = backend or selected_backend()
    choice = choice or choose(backend)
    if choice.accelerator is None:
        from deepspeed.accelerator import get_accelerator
        return get_accelerator()
    if choice.accelerator == "hal":
        from hal.stacks._deepspeed_accelerator import HalAccelerator
        return HalAccelerator(backend)
    return resolve(choice.accelerator)()


def _set(module, backend, choice: Choice) -> None:
    accelerator = make_accelerator(backend, choice)
    module.set_accelerator(accelerator)


def install(backend=None) -> Choice:
    """Give DeepSpeed the accelerator of ``backend`` (default: the selected one), now if DeepSpeed's
    accelerator module is loaded, else the moment it loads.  Returns the :class:`Choice`.

    :raises HalError: DeepSpeed's op builders are already bound to another accelerator (DeepSpeed was
        imported before), which ``set_accelerator`` can no longer change.
    """
    import sys
    from hal.plugin.registry import selected_backend

    backend = backend or selected_backend()
    choice = choose(backend)
    if choice.accelerator is None:
        return choice
    seam = sys.modules.get(SEAM)
    if seam is not None and "deepspeed.ops.op_builder" in sys.modules:
        current = seam.get_accelerator()
        wanted = make_accelerator(backend, choice)
        if type(current) is not type(wanted) or getattr(current, "_name", None) != getattr(wanted, "_name", None):
            raise HalError(f"DeepSpeed was imported before hal.stacks.deepspeed.install(): its op builders are "
                           f"bound to its {getattr(current, '_name', '?')} accelerator, which set_accelerator "
                           f"cannot change; call install() before importing deepspeed (or transformers' or "
                           f"accelerate's DeepSpeed integration), or run the script with hal run")
        return choice
    _pending.cancel = after_import(SEAM, lambda module: _set(module, backend, choice))
    return choice


class _Pending:
    cancel: Callable[[], None] = staticmethod(lambda: None)


_pending = _Pending()


def uninstall() -> None:
    """Forget an :func:`install` whose DeepSpeed import has not happened yet (``hal run`` calls it
    when the script ends); an accelerator already set stays set, as DeepSpeed keeps it."""
    _pending.cancel()
    _pending.cancel = lambda: None


def __getattr__(name):  # ``hal.stacks.deepspeed.HalAccelerator`` imports DeepSpeed only then
    if name == "HalAccelerator":
        from hal.stacks._deepspeed_accelerator import HalAccelerator
        return HalAccelerator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
