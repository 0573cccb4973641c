"""RNG state of python, numpy, the torch CPU generator and the device, keyed by device.

Saved as JSON: ``{"python": ..., "numpy": ..., "torch": {"cpu": {...}, "cuda:0": {...}}}``
where each torch entry holds the generator state bytes (base64).  On load, a device key
whose device type differs from the running backend's (a ``cuda:0`` state on an NPU or a
CPU) is never applied blindly: hal warns and reseeds that device's generators with a
seed derived from the step and rank, so the run stays deterministic.
"""
from __future__ import annotations

import base64
import logging
import random
import warnings
from typing import List

import torch

from hal.checkpoint._errors import CheckpointWarning

log = logging.getLogger("hal.checkpoint")


def _b64(t: torch.Tensor) -> dict:
    t = t.detach().to("cpu").contiguous()
    return {"dtype": str(t.dtype).replace("torch.", ""),
            "b64": base64.b64encode(t.view(torch.uint8).numpy().tobytes()).decode()}


def _tensor(entry: dict) -> torch.Tensor:
    raw = bytearray(base64.b64decode(entry["b64"]))
    return torch.frombuffer(raw, dtype=torch.uint8).view(getattr(torch, entry["dtype"])).clone()


def _backend():
    from hal.plugin.registry import selected_backend
    return selected_backend()


def capture(backend=None) -> dict:
    """RNG state of this process: python, numpy, torch CPU and the current device.

    The device state is keyed ``"<type>:<index>"``; ``current_device`` names it, so that a
    rank restarted on another index of the same device type restores its own stream.
    """
    backend = backend or _backend()
    out = {"backend": backend.name, "device_type": backend.device_type}
    version, internal, gauss = random.getstate()
    out["python"] = {"version": version, "state": list(internal), "gauss_next": gauss}
    try:
        import numpy as np
        name, keys, pos, has_gauss, cached = np.random.get_state()
        out["numpy"] = {"name": name, "keys": [int(k) for k in keys], "pos": int(pos),
                        "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    gens = {"cpu": _b64(torch.get_rng_state())}
    if backend.device_type != "cpu":
        idx = backend.current_device()
        out["current_device"] = f"{backend.device_type}:{idx}"
        gens[out["current_device"]] = _b64(backend.get_rng_state(idx))
    out["torch"] = gens
    return out


def reseed_value(step: int, rank: int) -> int:
    """The deterministic seed used when a device RNG state cannot be applied."""
    return (int(step) * 1_000_003 + int(rank) * 7919 + 12345) % (2 ** 63)


def restore(saved: dict, step: int, rank: int, backend=None) -> List[str]:
    """Apply ``saved`` (from :func:`capture`); return the keys applied.

    A device key of another device type, an index this machine lacks, or a state the
    device refuses, gives one :class:`CheckpointWarning` and a deterministic reseed.
    """
    backend = backend or _backend()
    applied: List[str] = []
    if "python" in saved:
        p = saved["python"]
        random.setstate((p["version"], tuple(p["state"]), p["gauss_next"]))
        applied.append("python")
    if "numpy" in saved:
        import numpy as np
        n = saved["numpy"]
        np.random.set_state((n["name"], np.array(n["keys"], dtype=np.uint32), n["pos"],
                             n["has_gauss"], n["cached_gaussian"]))
        applied.append("numpy")
    gens = dict(saved.get("torch", {}))
    if "cpu" in gens:
        torch.set_rng_state(_tensor(gens.pop("cpu")))
        applied.append("cpu")
    here = backend.device_type
    problems: List[str] = []
    device_restored = False
    for key, entry in gens.items():
        dtype, _, idx = key.partition(":")
        if dtype != here:
            problems.append(f"{key} was saved on backend {saved.get('backend', dtype)!r} "
                            f"but this process runs on {here!r}")
            continue
        index = int(idx or 0)
        if key == saved.get("current_device"):
            # the generator this rank drew from; after a restart the rank may sit on another index
            here_index = backend.current_device()
            if here_index != index:
                log.info("RNG state of %s (the saving rank's current device) applied to %s:%d, "
                         "this rank's current device", key, here, here_index)
            index = here_index
        try:
            if index >= backend.device_count():
                raise IndexError(f"this machine shows {backend.device_count()} {here} device(s)")
            backend.set_rng_state(_tensor(entry), index)
        except Exception as exc:  # a vendor refusing a foreign state format lands here too
            problems.append(f"{key} could not be applied ({type(exc).__name__}: {exc})")
            continue
        applied.append(key)
        device_restored = True
    if here != "cpu" and not device_restored and not problems:
        problems.append(f"the checkpoint holds no RNG state for {here} (it was saved on "
                        f"{saved.get('backend', 'an unknown backend')!r})")
    if problems:
        seed = reseed_value(step, rank)
        if here != "cpu":
            backend.manual_seed_all(seed)
            outcome = (f"{here} generators reseeded with {seed} (derived from step {step}, rank {rank}); "
                       "random ops on the device (dropout, augmentation) will not repeat the original run; "
                       "python, numpy and torch CPU generators were restored")
        else:
            outcome = ("random ops now draw from the CPU generator, restored from the checkpoint's 'cpu' "
                       "state, so they do not repeat the device's stream of the original run; python and "
                       "numpy generators were restored too")
        warnings.warn(CheckpointWarning("checkpoint RNG state not applied: " + "; ".join(problems) +
                                        f". {outcome}"), stacklevel=3)
    return applied

