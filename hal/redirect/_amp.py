"""Mixed precision: ``torch.autocast("cuda")``, ``GradScaler("cuda")``, ``custom_fwd/bwd``.

The deprecated ``torch.cuda.amp.autocast`` / ``GradScaler`` / ``custom_fwd`` call these with
``"cuda"`` and are covered by the same wrappers.  The dtype is the one the script asked
for; without one, CUDA's default float16 is kept (no silent dtype change).
"""
from __future__ import annotations

import functools

import torch

from hal.redirect._devices import marked
from hal.redirect._core import Redirection


def _autocast_dtypes(device_type: str) -> tuple:
    """The dtypes torch's autocast accepts for ``device_type`` (torch 2.13's ``autocast.__init__``: a
    PrivateUse1 module's ``get_amp_supported_dtype()``, else bfloat16 and float16)."""
    fn = getattr(getattr(torch, device_type, None), "get_amp_supported_dtype", None)
    return tuple(fn()) if callable(fn) else (torch.bfloat16, torch.float16)


def install(t: Redirection) -> None:
    """Map the ``"cuda"`` device type of autocast, GradScaler and custom_fwd/bwd to the backend's."""
    ac = torch.amp.autocast_mode.autocast
    orig_init, orig_enter, orig_exit = ac.__init__, ac.__enter__, ac.__exit__
    cuda_policy = t.device_type == "cpu"  # the emulator's autocast has CUDA's lists already

    def init(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        self._hal_policy = None
        if device_type == "cuda":
            if dtype is None:
                dtype = torch.float16  # CUDA's autocast default, kept: no silent dtype change
            if enabled and dtype not in _autocast_dtypes(t.device_type):
                # CUDA's autocast takes any floating dtype; float32 (torchtitan's single-device "AMP" with
                # float32 parameters) leaves a float32 model as it is.  The backend's autocast would refuse it
                # with a warning CUDA never gives and run disabled: run disabled, and say so here.
                t.log.redirected("torch.autocast('cuda')", f"not entered: {t.device_type}'s autocast has no {dtype} "
                                 f"(float32 ops run as they are, as under CUDA's)")
                enabled, dtype = False, None  # torch 2.4-2.6 check the dtype (and warn) even when disabled
            else:
                t.log.redirected("torch.autocast('cuda')", f"torch.autocast({t.device_type!r}, dtype={dtype})"
                                 + (" with CUDA's op lists" if cuda_policy else ""))
            device_type = t.device_type
            if cuda_policy and enabled:
                from hal.redirect._autocast_policy import CudaAutocastPolicy
                self._hal_policy = CudaAutocastPolicy()
        orig_init(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    def enter(self):
        out = orig_enter(self)
        policy = getattr(self, "_hal_policy", None)
        if policy is not None:
            policy.__enter__()
        return out

    def exit(self, *exc):
        policy = getattr(self, "_hal_policy", None)
        if policy is not None:
            policy.__exit__(*exc)
        return orig_exit(self, *exc)

    t.patch(ac, "__init__", marked(init, orig_init))
    if cuda_policy:
        t.patch(ac, "__enter__", marked(enter, orig_enter))
        t.patch(ac, "__exit__", marked(exit, orig_exit))

    gs = torch.amp.GradScaler
    orig_gs = gs.__init__

    def gs_init(self, device="cuda", *args, **kwargs):
        if device == "cuda":
            t.log.redirected("GradScaler('cuda')", f"GradScaler({t.device_type!r})")
            device = t.device_type
        orig_gs(self, device, *args, **kwargs)

    t.patch(gs, "__init__", marked(gs_init, orig_gs))

    for name in ("custom_fwd", "custom_bwd"):
        orig = getattr(torch.amp, name, None)
        if orig is None:
            continue

        def deco(*args, _orig=orig, _name=name, **kwargs):
            if kwargs.get("device_type") == "cuda":
                t.log.redirected(f"torch.amp.{_name}(device_type='cuda')", f"device_type={t.device_type!r}")
                kwargs["device_type"] = t.device_type
            return _orig(*args, **kwargs)

        wrapped = marked(functools.wraps(orig)(deco), orig)
        t.patch(torch.amp, name, wrapped)
        if getattr(torch.amp.autocast_mode, name, None) is orig:
            t.patch(torch.amp.autocast_mode, name, wrapped)
