"""Turn the redirection on: every part installs its patches on one :class:`Redirection`, undone on exit."""
from __future__ import annotations

import contextlib

from hal.redirect._core import Redirection, _active, _lock, active


def _install(t: Redirection) -> None:
    # the parts import torch's distributed, amp and compile modules: only when a redirection starts
    from hal.redirect import _amp, _compile, _cuda_module, _device_types, _devices, _dist, _load, _stacks
    for part in (_devices, _device_types, _cuda_module, _amp, _load, _dist, _compile, _stacks):
        part.install(t)


@contextlib.contextmanager
def enable(backend=None):
    """Run CUDA-written code on the selected backend inside the block.

    Maps the device of every device-taking torch call (factories, ``.to``, ``.cuda()``,
    ``Module.to/cuda``, ``with torch.device("cuda")``, generators, streams, events,
    ``torch.load`` map locations), answers ``torch.cuda.*`` for the backend (count, current
    device, properties, synchronize, memory, RNG, streams, events), and redirects
    ``torch.autocast("cuda")`` (on the cpu backend with CUDA's op lists), ``GradScaler("cuda")``,
    the calls taking a device type (``init_device_mesh("cuda")``, ``torch.get_device_module``),
    ``pin_memory=True`` of factories where nothing is pinned, ``init_process_group("nccl")``,
    DDP's ``device_ids`` and ``DataParallel``.  ``torch.device("cuda")`` objects stay what
    they are; the calls that take them map them.  torch's own code keeps seeing the real
    ``torch.cuda`` / ``torch.accelerator`` answers.  Nothing changes numerics: dtypes are
    kept (autocast without a dtype gets CUDA's float16).  Each redirection is recorded at the
    user's line; calls it cannot redirect are reported.  Yields the :class:`Redirection`;
    ``redirection.log.rows("redirected")`` / ``rows("not_redirected")`` list what happened.

    On a CUDA backend the block changes nothing.  Nested use yields the redirection already in
    force.

    :param backend: a loaded :class:`hal.plugin.backend.Backend` (default: the selected one).
    """
    if backend is None:
        from hal.plugin.registry import selected_backend
        backend = selected_backend()
    with _lock:
        outer = active()
    if outer is not None:
        yield outer
        return
    t = Redirection(backend)
    if backend.device_type == "cuda":
        yield t
        return
    with _lock:
        _active.append(t)
    try:
        _install(t)
        yield t
    finally:
        t.restore()
        with _lock:
            _active.remove(t)
