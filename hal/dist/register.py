"""Safe registration of out-of-tree c10d backends (a vendor's collective library).

``torch.distributed.Backend.register_backend`` has sharp edges: a device *string* is
iterated character by character into the device→backend map (``"npu"`` claims devices
``n``, ``p`` and ``u``), ``devices=None`` silently claims ``cpu`` and ``cuda``, a
non-callable creator fails only at ``init_process_group``, and a second registration
under the same name raises deep inside torch.  :func:`register_c10d_backend` checks all
of that first, so registration is all-or-nothing and idempotent.
"""
from __future__ import annotations

import re
from typing import Callable, Iterable, List, Union

import torch.distributed as dist

from hal.dist.errors import DistError

#: names torch ships; an out-of-tree backend may not take them
BUILTIN_NAMES = ("gloo", "nccl", "mpi", "ucc", "xccl", "fake", "undefined")
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_registered = {}


def _device_list(name: str, devices) -> List[str]:
    if devices is None:
        raise DistError(f"register_c10d_backend({name!r}): devices is required (e.g. ['npu']); torch "
                        f"would otherwise assume the backend serves 'cpu' and 'cuda'")
    if isinstance(devices, str):
        devices = [d.strip() for d in devices.split(",") if d.strip()]
    try:
        devices = list(devices)
    except TypeError:
        raise DistError(f"register_c10d_backend({name!r}): devices={devices!r} is not a list of "
                        f"device types; pass e.g. ['npu']") from None
    if not devices:
        raise DistError(f"register_c10d_backend({name!r}): devices is empty; pass e.g. ['npu']")
    for d in devices:
        if not isinstance(d, str) or not _NAME_RE.match(d) or len(d) < 2:
            raise DistError(f"register_c10d_backend({name!r}): {d!r} is not a device type; pass "
                            f"device type names such as 'npu' or 'privateuseone'")
    return devices


def register_c10d_backend(name: str, creator: Callable, devices: Union[str, Iterable[str]],
                          extended_api: bool = False) -> str:
    """Register an out-of-tree collective backend with ``torch.distributed``.

    Checks every argument before touching torch, so a bad call changes nothing::

        hal.dist.register_c10d_backend("emuccl", create_emuccl, devices=["privateuseone"])
        hal.dist.init()          # backend string "cpu:gloo,privateuseone:emuccl"

    :param name: lower-case backend name, the CCL name in the backend spec (``"hccl"``).
    :param creator: ``creator(store, rank, world_size, timeout)`` returning a c10d backend
        (with ``extended_api=True``: ``creator(dist_backend_opts, pg_options)``).
    :param devices: device types the backend serves; a single string is accepted and split on
        commas (never iterated per character).
    :param extended_api: forwarded to ``torch.distributed.Backend.register_backend``.
    :return: the registered (lower-case) name.  Registering the same creator again is a no-op.
    :raises DistError: for a bad name, a built-in name, a non-callable creator, bad devices, or a
        name already registered with a different creator.
    """
    if not isinstance(name, str) or not _NAME_RE.match(name.lower()):
        raise DistError(f"register_c10d_backend: name {name!r} must be an identifier such as 'hccl'")
    key = name.lower()
    if key in BUILTIN_NAMES:
        raise DistError(f"register_c10d_backend: {key!r} is a backend built into torch; choose "
                        f"another name for an out-of-tree library")
    if not callable(creator):
        raise DistError(f"register_c10d_backend({key!r}): creator {creator!r} is not callable; pass "
                        f"the function that builds the backend")
    devs = _device_list(key, devices)
    prev = _registered.get(key)
    if prev is not None:
        if prev == (creator, tuple(devs), bool(extended_api)):
            return key
        raise DistError(f"register_c10d_backend({key!r}): already registered with another creator or "
                        f"devices {list(prev[1])}; each collective library registers once")
    if key in dist.Backend.backend_list or hasattr(dist.Backend, key.upper()):
        raise DistError(f"register_c10d_backend({key!r}): torch already has a backend of that name "
                        f"(registered outside hal); use it as is")
    for d in devs:
        owner = dist.Backend.default_device_backend_map.get(d)
        if owner not in (None, "fake", key):
            raise DistError(f"register_c10d_backend({key!r}): device type {d!r} is already served by "
                            f"{owner!r}; a device type has one default collective library")
    dist.Backend.register_backend(key, creator, extended_api=extended_api, devices=devs)
    _registered[key] = (creator, tuple(devs), bool(extended_api))
    return key


def registered_backends() -> dict:
    """Out-of-tree backends registered through hal: ``{name: [device types]}``."""
    return {k: list(v[1]) for k, v in _registered.items()}


def restore_device_binding(device_id) -> None:
    """Bind the default group to ``device_id`` again after ``init_process_group(device_id=...)``.

    torch binds the group it builds, then replaces that group by the backend itself when the
    backend is a Python ``ProcessGroup`` subclass (an out-of-tree CCL written in Python, as
    ``emuccl`` is), and the binding is lost: ``split_group`` and eager init then find no device.
    Does nothing when the group kept its binding or when no device was given.
    """
    if device_id is None or not dist.is_initialized():
        return
    pg = dist.group.WORLD  # the default process group (public since torch 1.x)
    if getattr(pg, "bound_device_id", None) is None:
        pg.bound_device_id = device_id
