"""Other stacks' device seams, filled for the run (:mod:`hal.stacks`): DeepSpeed's accelerator is
set the moment DeepSpeed loads it, so that DeepSpeed does not take the backend for CUDA; Hugging Face's
hub kernels are switched off where they have none for the device (facts: hal/data/hub_kernels.json)."""
from __future__ import annotations

import importlib.util

from hal.redirect._core import Redirection


def _install_deepspeed(t: Redirection) -> None:
    if importlib.util.find_spec("deepspeed") is None:
        return
    from hal._errors import HalError
    from hal.stacks import deepspeed
    from hal.util.import_hooks import after_import

    try:
        choice = deepspeed.install(t.backend)
    except HalError as exc:  # DeepSpeed imported before the redirection began (hal.redirect.enable() in a
        t.log.not_redirected("DeepSpeed accelerator", str(exc))  # process that had imported it): it keeps its own
        return
    t.on_restore(deepspeed.uninstall)
    # recorded at the user's line that imports DeepSpeed
    t.on_restore(after_import(deepspeed.SEAM, lambda _m: t.log.redirected("DeepSpeed accelerator", choice.describe())))


def _install_hub_kernels(t: Redirection) -> None:
    import os

    from hal.stacks.hub_kernels import switch_off
    off = switch_off(t.device_type)
    if off is None:
        return
    var, value, why = off
    os.environ[var] = value
    t.on_restore(lambda: os.environ.pop(var, None))
    from hal.util.import_hooks import after_import
    t.on_restore(after_import("kernels", lambda _m: t.log.redirected("Hugging Face hub kernels",
                                                                     f"off ({var}={value}): {why}")))


def install(t: Redirection) -> None:
    """Fill the seams of the stacks installed here for ``t``'s backend."""
    _install_deepspeed(t)
    _install_hub_kernels(t)
