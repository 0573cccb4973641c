"""``torch.cuda``'s submodules and ``torch.backends.cuda`` under the shim.

A script reaches ``torch.cuda``'s functions through its submodules too: the Hugging Face
Trainer saves its RNG with ``torch.cuda.random.get_rng_state()``, other code calls
``torch.cuda.memory.memory_allocated()`` or annotates with ``torch.cuda.streams.Stream``.

- A submodule's name that is the same object as a ``torch.cuda`` name gets the same
  replacement (``torch.cuda.random.get_rng_state is torch.cuda.get_rng_state`` under the shim
  as without it).
- A class the shim has no counterpart of (``MemPool``, ``ExternalStream`` ...) becomes a
  stand-in that reports its construction and builds torch's own (:mod:`hal.redirect._cuda_classes`):
  it stays a class.  ``CUDAGraph`` and ``graph`` are refused (:mod:`hal.redirect._cuda_module`).
- What only a submodule holds is answered here (:data:`ANSWERS`, :data:`NO_OPS`) or, when the
  backend has no equivalent, reported when the user's code calls it.  ``torch.cuda.amp``'s
  classes and decorators are redirected where they call ``torch.amp`` with ``"cuda"``
  (:mod:`hal.redirect._amp`), ``torch.cuda.nvtx`` by :mod:`hal.redirect._cuda_module`.
- ``torch.backends.cuda`` answers the questions about the device for the backend
  (:data:`BACKENDS_CUDA_ANSWERS`); its settings (TF32, the SDPA switches, preferred
  libraries: :data:`BACKENDS_CUDA_SETTINGS`) are torch's own flags, accepted with no effect off
  CUDA, as ``torch.backends.cudnn``'s are.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Callable, Dict, List

import torch

from hal.redirect._core import Redirection
from hal.redirect._cuda_classes import Spec, public_classes, spec_of, stand_in
from hal.redirect._devices import MARK
from hal.redirect._split import patch_split, report_the_rest, reporting, split

#: submodules whose names are redirected elsewhere (prefixes of module names)
REDIRECTED_ELSEWHERE = ("torch.cuda.amp", "torch.cuda.nvtx")
#: names only a submodule holds -> (the user's code's answer, why); logged as redirected
ANSWERS = {
    ("torch.cuda.nccl", "is_available"): (False, "NCCL takes CUDA tensors only; init_process_group('nccl') "
                                                 "runs the backend's collective"),
    ("torch.cuda.amp", "amp_definitely_not_available"): (False, "autocast runs on the selected backend"),
}
#: names only a submodule holds that do nothing off CUDA -> why; logged as not redirected
NO_OPS = {
    ("torch.cuda.profiler", "start"): "the CUDA profiler API starts a CUDA profiler capture",
    ("torch.cuda.profiler", "stop"): "the CUDA profiler API stops a CUDA profiler capture",
    ("torch.cuda.profiler", "profile"): "the CUDA profiler API brackets a CUDA profiler capture",
}
#: torch.backends.cuda's questions about the device -> (the user's code's answer, why)
BACKENDS_CUDA_ANSWERS = {
    "is_built": (True, "torch runs the script's CUDA work on the selected backend"),
    "is_flash_attention_available": (False, "flash attention is a CUDA kernel; scaled_dot_product_attention "
                                            "runs the backend's own"),
    "is_ck_sdpa_available": (False, "CK attention is a ROCm kernel"),
    "can_use_flash_attention": (False, "flash attention is a CUDA kernel"),
    "can_use_efficient_attention": (False, "memory-efficient attention is a CUDA kernel"),
    "can_use_cudnn_attention": (False, "cuDNN attention is a CUDA kernel"),
}
#: torch.backends.cuda's settings: torch's own flags, left as they are -> the first torch of hal's window that
#: has it (2.4: all of the window; make torch-window checks each)
BACKENDS_CUDA_SETTINGS_SINCE = {
    "allow_fp16_bf16_reduction_math_sdp": "2.5", "fp16_bf16_reduction_math_sdp_allowed": "2.5", "sdp_kernel": "2.4",
    "enable_cudnn_sdp": "2.4", "enable_flash_sdp": "2.4", "enable_math_sdp": "2.4", "enable_mem_efficient_sdp": "2.4",
    "cudnn_sdp_enabled": "2.4", "flash_sdp_enabled": "2.4", "math_sdp_enabled": "2.4",
    "mem_efficient_sdp_enabled": "2.4", "preferred_blas_library": "2.4", "preferred_linalg_library": "2.4",
    "preferred_rocm_fa_library": "2.7"}
BACKENDS_CUDA_SETTINGS = frozenset(BACKENDS_CUDA_SETTINGS_SINCE)


def submodules() -> List[object]:
    """The public submodules of ``torch.cuda`` that torch has imported (``torch.cuda.random``,
    ``memory``, ``streams``, ``graphs``, ``amp`` and its modules, ``nccl`` ...): those a script
    reaches."""
    return [mod for name, mod in sorted(sys.modules.items())
            if name.startswith("torch.cuda.") and mod is not None
            and not any(part.startswith("_") for part in name.split(".")[2:])]


def _reported_class(cls: type) -> bool:
    """True for a class that gets a reporting stand-in: not an exception (``except`` does not
    ask a metaclass), not a legacy storage or tensor type (their own metaclasses answer), not
    torch.cuda.amp's (redirected through torch.amp), not already the shim's."""
    return (type(cls) is type and not issubclass(cls, BaseException) and not getattr(cls, MARK, False)
            and not cls.__module__.startswith(REDIRECTED_ELSEWHERE))


def _reporting_class(t: Redirection, label: str, cls: type) -> type:
    def new(*args, **kwargs):
        t.log.not_redirected(label, f"no {t.backend.name} equivalent of this CUDA class; built torch's own "
                             f"(which needs CUDA)")
        return cls(*args, **kwargs)
    return stand_in(cls.__name__, Spec(cls, cls, new, cls))


def _answer(t: Redirection, label: str, value, why: str) -> Callable:
    def call(*args, **kwargs):
        t.log.redirected(label, f"{value!r}: {why}")
        return value
    return call


def _no_op(t: Redirection, label: str, why: str, context: bool) -> Callable:
    def call(*args, **kwargs):
        t.log.not_redirected(label, f"no-op: {why}")
        return contextlib.nullcontext() if context else None
    return call


def install(t: Redirection, originals: Dict[str, object]) -> None:
    """Give ``torch.cuda``'s submodules the replacements ``torch.cuda`` got (its names were
    ``originals`` before), stand-ins for the remaining classes, answers, no-ops and reports for
    what only a submodule holds (one replacement per object, wherever it is held); then
    ``torch.backends.cuda``."""
    cuda, mods = torch.cuda, submodules()
    everywhere = [cuda] + mods
    # what torch.cuda's names became, keyed by what they were
    replaced: Dict[int, object] = {}
    for name, old in originals.items():
        new = cuda.__dict__.get(name, old)
        if new is not old and callable(old):
            replaced[id(old)] = new
            spec = spec_of(new)
            if spec is not None and spec.cuda is not None:
                replaced[id(spec.cuda)] = new
    for mod, name, cls in public_classes(everywhere):
        if id(cls) not in replaced and _reported_class(cls):
            replaced[id(cls)] = _reporting_class(t, f"{mod.__name__}.{name}", cls)
    for (owner, name), (value, why) in ANSWERS.items():
        orig = getattr(sys.modules.get(owner), name, None)
        if callable(orig):
            replaced[id(orig)] = split(orig, _answer(t, f"{owner}.{name}", value, why))
    for (owner, name), why in NO_OPS.items():
        orig = getattr(sys.modules.get(owner), name, None)
        if callable(orig):
            replaced[id(orig)] = split(orig, _no_op(t, f"{owner}.{name}", why, context=name == "profile"))
    for mod in mods:  # every other function: torch's own, reported when the user's code calls it
        for name, obj in list(vars(mod).items()):
            if (not name.startswith("_") and callable(obj) and not isinstance(obj, type) and id(obj) not in replaced
                    and not getattr(obj, MARK, False) and getattr(obj, "__module__", "").startswith("torch.cuda")
                    and not obj.__module__.startswith(REDIRECTED_ELSEWHERE)):
                replaced[id(obj)] = split(obj, reporting(t, f"{mod.__name__}.{name}", obj))
    for mod in everywhere:
        for name, obj in list(vars(mod).items()):
            new = replaced.get(id(obj))
            if new is not None and new is not obj and not name.startswith("_"):
                t.patch(mod, name, new)
    _install_backends_cuda(t)


def _install_backends_cuda(t: Redirection) -> None:
    bc = getattr(torch.backends, "cuda", None)
    if bc is None:
        return
    for name, (value, why) in BACKENDS_CUDA_ANSWERS.items():
        if callable(getattr(bc, name, None)):
            patch_split(t, bc, name, _answer(t, f"torch.backends.cuda.{name}", value, why))
    report_the_rest(t, bc, "torch.backends.cuda", defined_in="torch.backends.cuda", skip=BACKENDS_CUDA_SETTINGS)
