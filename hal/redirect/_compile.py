"""``torch.compile`` on a device inductor cannot generate code for.

Inductor (torch.compile's default backend) generates kernels for the CPU, CUDA, XPU, MPS
and for devices whose plugin registered a code generator
(``torch._inductor.codegen.common.register_backend_for_device``).  On any other device (the
emulator, a vendor without one) the default backend is redirected to ``"aot_eager"``: the
same graph capture and autograd, run with the device's eager kernels.  ``mode`` and
``options`` configure inductor only and are dropped with it (reported).  An explicit
non-inductor backend, and the CPU backend, are left alone.
"""
from __future__ import annotations

import functools

import torch

from hal.redirect._devices import marked
from hal.redirect._core import Redirection

#: device types inductor registers a code generator for itself
INDUCTOR_BUILTIN = frozenset({"cpu", "cuda", "xpu", "mps", "mtia", "tpu"})
FALLBACK = "aot_eager"


def inductor_supports(device_type: str) -> bool:
    """True when inductor can generate code for ``device_type``."""
    if device_type in INDUCTOR_BUILTIN:
        return True
    try:
        from torch._inductor.codegen.common import device_codegens
    except Exception:  # no inductor in this torch
        return False
    return device_type in device_codegens


def install(t: Redirection) -> None:
    """Redirect ``torch.compile``'s default backend where inductor has no code generator."""
    if t.device_type in INDUCTOR_BUILTIN:
        return
    orig = torch.compile

    @functools.wraps(orig)
    def compile(model=None, **kwargs):
        backend = kwargs.get("backend")
        if (backend is None or backend == "inductor") and not inductor_supports(t.device_type):
            dropped = {k: kwargs.pop(k) for k in ("mode", "options") if kwargs.get(k) is not None}
            kwargs["backend"] = FALLBACK
            note = f"; {', '.join(f'{k}={v!r}' for k, v in dropped.items())} dropped (inductor only)" if dropped else ""
            t.log.redirected("torch.compile(backend='inductor')",
                             f"backend={FALLBACK!r} (inductor has no code generator for "
                             f"{t.device_type!r}){note}")
        return orig(model, **kwargs)

    t.patch(torch, "compile", marked(compile, orig))
