"""Other stacks' device seams, filled for the run (:mod:`hal.stacks`): DeepSpeed's accelerator is
set the moment DeepSpeed loads it, so that DeepSpeed does not take the backend for CUDA; Hugging Face's
hub kernels are switched off where they have none for the device (facts: hal/data/hub_kernels.json)."""
from __future__ import annotations

import importlib.util

from hal.redirect._core import Redirection


def _install_deepspeed(t: Redirection) -> None:
    if importlib.util.find_spec("deepspeed") is None:
        return
    from hal.stacks import deepspeed
    from hal.util.import_hooks import after_import

    choice = deepspeed.install(t.backend)
    t.on_restore(deepspeed.uninstall)
    # recorded at the user's line that imports DeepSpeed
    t.on_restore(after_import(deepspeed.SEAM, lambda _m: t.log.redirected("DeepSpeed accelerator", choice.describe())))


def _install_hub_kernels(t: Redirection) -> None:
    """Hugging Face's hub kernels (the ``kernels`` library, applied by ``from_pretrained`` in transformers
    >= 5.25 unless ``USE_HUB_KERNELS`` says no) have none for device types outside their list, and refuse
    the model then (``Unsupported device type 'emu'``).  On such a backend they are switched off for the run,
    as the library's own switch does, unless the user set it."""
    import json
    import os
    from importlib import resources

    fact = json.loads(resources.files("hal").joinpath("data/hub_kernels.json").read_text())
    env = fact["switch"]["env"]
    if (importlib.util.find_spec("kernels") is None or env in os.environ
            or t.device_type in fact["device_types"]):
        return
    os.environ[env] = fact["switch"]["off"]
    t.on_restore(lambda: os.environ.pop(env, None))
    from hal.util.import_hooks import after_import
    t.on_restore(after_import("kernels", lambda _m: t.log.redirected(
        "Hugging Face hub kernels", f"off ({env}={fact['switch']['off']}): the kernels library has none for "
        f"{t.device_type} ({fact['checked']}: {', '.join(fact['device_types'])}); set {env}=YES to try them")))


def install(t: Redirection) -> None:
    """Fill the seams of the stacks installed here for ``t``'s backend."""
    _install_deepspeed(t)
    _install_hub_kernels(t)
