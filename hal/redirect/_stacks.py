"""Other stacks' device seams, filled for the run (:mod:`hal.stacks`): DeepSpeed's accelerator is
set the moment DeepSpeed loads it, so that DeepSpeed does not take the backend for CUDA."""
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


def install(t: Redirection) -> None:
    """Fill the seams of the stacks installed here for ``t``'s backend."""
    _install_deepspeed(t)
