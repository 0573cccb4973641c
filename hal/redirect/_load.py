"""``torch.load`` of CUDA checkpoints: every ``cuda`` location lands on the backend's device.

A checkpoint saved on CUDA tags its storages ``"cuda:N"``; torch restores them there unless
``map_location`` says otherwise, and every form of ``map_location`` a CUDA script uses can
name CUDA again (``"cuda"``, ``"cuda:0"``, ``torch.device("cuda")``, ``{"cuda:1": "cuda:0"}``,
``lambda s, loc: s.cuda()``).  The wrapper turns each into a restore function that sends
cuda locations to the backend device through torch's own restore path
(``torch.serialization.default_restore_location``, which the backend's device module serves).
``UntypedStorage.cuda()`` / ``TypedStorage.cuda()`` are mapped the same way.
"""
from __future__ import annotations

import torch
import torch.serialization as serialization

from hal.redirect._devices import marked
from hal.redirect._core import Redirection, is_cuda_like


def _is_cuda_tag(location) -> bool:
    return isinstance(location, str) and location.startswith("cuda")


def install(t: Redirection) -> None:
    """Wrap ``torch.load`` and the storages' ``.cuda()`` for ``t``."""
    orig_load = torch.load
    restore = serialization.default_restore_location

    def target_of(location) -> str:
        return str(t.device(location))

    def restore_mapped(storage, location):
        if not _is_cuda_tag(location):
            return restore(storage, location)
        target = target_of(location)
        t.log.redirected(f"torch.load: storage at {location}", target)
        return restore(storage, target)

    def map_location_for(ml):
        if ml is None:
            return lambda storage, location: restore_mapped(storage, location) if _is_cuda_tag(location) else None
        if isinstance(ml, (str, torch.device, int)) and is_cuda_like(ml):
            target = t.device(ml)
            t.log.redirected(f"torch.load(map_location={ml!r})", f"map_location={str(target)!r}")
            return target
        if isinstance(ml, dict):
            table = dict(ml)
            return lambda storage, location: restore_mapped(storage, table.get(location, location))
        if callable(ml) and not isinstance(ml, (str, torch.device)):
            def call(storage, location):
                result = ml(storage, location)
                return result if result is not None else restore_mapped(storage, location)
            return call
        return ml

    def load(f, *args, **kwargs):
        if args:
            args = (map_location_for(args[0]),) + args[1:]
        else:
            kwargs["map_location"] = map_location_for(kwargs.get("map_location"))
        return orig_load(f, *args, **kwargs)

    t.patch(torch, "load", marked(load, orig_load))
    if getattr(serialization, "load", None) is orig_load:
        t.patch(serialization, "load", torch.load)

    def storage_cuda(orig):
        def cuda(self, device=None, non_blocking=False):
            target = t.device(device)
            t.log.redirected("Storage.cuda()", f"storage on {target}")
            if target.type == "cpu":
                return self.cpu()
            return restore(self, str(target))
        return marked(cuda, orig)

    for cls in (torch.storage._StorageBase, torch.storage.TypedStorage):
        if "cuda" in cls.__dict__:
            t.patch(cls, "cuda", storage_cuda(cls.__dict__["cuda"]))
