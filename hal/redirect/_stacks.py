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


def hub_kernels_off(device_type: str, env=None, installed=None):
    """``(variable, value, why)`` that switches Hugging Face's hub kernels off for a run on ``device_type``,
    or None where they stay as they are: the ``kernels`` library (applied by ``from_pretrained`` in
    transformers >= 5.25 unless ``USE_HUB_KERNELS`` says no) is installed, has none for the device type and
    refuses the model then (``Unsupported device type 'emu'``), and the user has not set the variable.
    Facts: hal/data/hub_kernels.json."""
    import json
    import os
    from importlib import resources

    fact = json.loads(resources.files("hal").joinpath("data/hub_kernels.json").read_text())
    var, off = fact["switch"]["env"], fact["switch"]["off"]
    env = os.environ if env is None else env
    installed = importlib.util.find_spec("kernels") is not None if installed is None else installed
    if not installed or var in env or device_type in fact["device_types"]:
        return None
    return var, off, (f"the kernels library has none for {device_type} ({fact['checked']}: "
                      f"{', '.join(fact['device_types'])}); set {var}=YES to try them")


def _install_hub_kernels(t: Redirection) -> None:
    import os

    off = hub_kernels_off(t.device_type)
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
