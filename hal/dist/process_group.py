"""Initialise torch.distributed for the selected backend, under torchrun or alone.

``init()`` reads the usual launcher variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``), binds the rank to its device, meets the other ranks on
a c10d ``TCPStore`` (checking that they agree on the world size and naming any that do not
arrive), then calls ``torch.distributed.init_process_group`` with the backend string
``"cpu:gloo,<device>:<ccl>"``.  Without those variables it starts a one-rank group.  Until
``destroy()``, gloo groups serve ``ReduceOp.PREMUL_SUM`` (:mod:`hal.dist.premul_sum`).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from typing import Optional

import torch
import torch.distributed as dist

from hal.dist.errors import DistError, RendezvousError

#: seconds; the process-group, rendezvous and collective-check timeout unless given
DEFAULT_TIMEOUT_S = 300.0
ENV_TIMEOUT = "HAL_DIST_TIMEOUT"
_KEY_PREFIX = "hal"


@dataclass(frozen=True)
class DistInfo:
    """What :func:`init` set up: this rank's place and device."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: str
    timeout_s: float

    def to_dict(self) -> dict:
        return asdict(self)


class _State:
    info: Optional[DistInfo] = None
    store = None
    prefix = _KEY_PREFIX
    seq = 0


STATE = _State()


def default_timeout() -> float:
    """``HAL_DIST_TIMEOUT`` (seconds) when set, else :data:`DEFAULT_TIMEOUT_S`."""
    raw = os.environ.get(ENV_TIMEOUT, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise DistError(f"{ENV_TIMEOUT}={raw!r} is not a number of seconds; set it to e.g. 300") from None
    if value <= 0:
        raise DistError(f"{ENV_TIMEOUT}={raw!r} must be positive; set it to e.g. 300")
    return value


def _ccl_known(ccl: str) -> bool:
    if ccl == "gloo":
        return dist.is_gloo_available()
    if ccl == "nccl":
        return dist.is_nccl_available()
    if ccl == "mpi":
        return dist.is_mpi_available()
    if ccl == "xccl":
        return bool(getattr(dist, "is_xccl_available", lambda: False)())
    return ccl in dist.Backend.backend_list


def backend_string(backend=None) -> str:
    """The ``init_process_group`` backend string for ``backend`` (default: the selected one).

    Always ``cpu:gloo`` so CPU tensors (metrics, object collectives) work, plus
    ``<device_type>:<ccl>`` for an accelerator, e.g. ``"cpu:gloo,npu:hccl"``.

    :raises DistError: when the device's collective library is not registered with torch.
    """
    if backend is None:
        from hal.plugin.registry import selected_backend

        backend = selected_backend()
    spec = backend.spec
    if spec.device_type == "cpu":
        return "cpu:gloo"
    ccl = spec.dist_backend
    if not ccl:
        raise DistError(f"{spec.name}: no collective library is known for device type "
                        f"{spec.device_type!r}; hal.dist needs one (set HAL_BACKEND=cpu to use gloo)")
    if not _ccl_known(ccl):
        registered = ", ".join(sorted(set(dist.Backend.backend_list))) or "none"
        hint = (f"import {spec.module} first (it registers {ccl})" if spec.module else
                f"this torch build lacks {ccl}")
        raise DistError(f"{spec.name}: collective library {ccl!r} is not registered with "
                        f"torch.distributed (registered: {registered}); {hint}, or register an "
                        f"out-of-tree backend with hal.dist.register_c10d_backend")
    return f"cpu:gloo,{spec.device_type}:{ccl}"


def register_plugin_ccl() -> Optional[str]:
    """Register the selected backend's out-of-tree CCL if its plugin names one (``hal_c10d_backend``).

    The one way a vendor's collective library reaches torch: :func:`init`, ``hal run``'s
    ``init_process_group`` and the conformance kit's collective check call it.  Idempotent.

    :return: the registered name, or None when the plugin names none (its module registers
        its library itself, or the device has a built-in one).
    :raises DistError: naming the plugin when its hook raises or returns something else.
    """
    from hal.plugin.registry import get_registry

    reg = get_registry()
    cand = reg.selected()
    try:
        entry = reg.call_selected("hal_c10d_backend")
    except Exception as exc:
        raise DistError(f"plugin {cand.plugin!r}: hal_c10d_backend raised {type(exc).__name__}: {exc}; "
                        f"fix the plugin or choose another backend with HAL_BACKEND") from exc
    return register_ccl(entry, cand.plugin)


def register_ccl(entry, plugin: str) -> Optional[str]:
    """Register what a plugin's ``hal_c10d_backend`` returned (``None``: nothing to register) with
    :func:`hal.dist.register_c10d_backend`; a plugin whose load registers its CCL, as a vendor
    module does on import, passes its hook's result here.

    :param entry: ``{"name": ..., "creator": ..., "devices": [...]}`` (optionally ``"extended_api"``), or None.
    :param plugin: the plugin's name, for the error message.
    :raises DistError: when ``entry`` is not such a dict.
    """
    from hal.dist.register import register_c10d_backend

    if entry is None or not dist.is_available():
        return None
    if not isinstance(entry, dict) or not {"name", "creator", "devices"} <= set(entry):
        raise DistError(f"plugin {plugin!r}: hal_c10d_backend returned {entry!r}; it must return "
                        f"{{'name': ..., 'creator': ..., 'devices': [...]}} or None")
    return register_c10d_backend(entry["name"], entry["creator"], entry["devices"],
                                 bool(entry.get("extended_api", False)))


def _env_int(name: str, env) -> Optional[int]:
    raw = env.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise DistError(f"{name}={raw!r} is not an integer; the launcher (torchrun) sets it") from None


def _bind_device(backend, local_rank: int) -> torch.device:
    if backend.device_type == "cpu":
        return torch.device("cpu")
    n = backend.device_count()
    if local_rank >= n:
        env = backend.spec.visible_devices_env
        vis = f" ({env[0]}={os.environ.get(env[0])!r})" if env else ""
        raise DistError(f"LOCAL_RANK={local_rank} but this node shows {n} {backend.device_type} "
                        f"device(s){vis}; start at most {n} processes per node "
                        f"(torchrun --nproc-per-node {n})")
    backend.set_device(local_rank)
    return torch.device(backend.device_type, local_rank)


def _connect_store(addr: str, port: int, rank: int, world_size: int, timeout_s: float):
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    try:
        return dist.TCPStore(addr, port, world_size=None, is_master=(rank == 0 and not agent),
                             timeout=_dt.timedelta(seconds=timeout_s), wait_for_workers=False)
    except Exception as exc:  # DistNetworkError, DistStoreError, RuntimeError
        what = "could not listen on" if rank == 0 and not agent else "could not reach"
        raise RendezvousError(
            f"rank {rank} {what} the rendezvous store MASTER_ADDR={addr} MASTER_PORT={port} within "
            f"{timeout_s:g} s ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
            f"check that rank 0 runs, that {addr}:{port} is reachable from this node and the port "
            f"is free") from None


def _meet(store, prefix: str, rank: int, world_size: int, timeout_s: float) -> None:
    """Every rank posts its view of the job; wait for all, naming the missing and the odd ones."""
    try:
        _meet_on(store, prefix, rank, world_size, timeout_s)
    except (dist.DistError, RuntimeError) as exc:  # the store's host (rank 0) left mid-rendezvous
        if isinstance(exc, DistError):
            raise
        raise RendezvousError(
            f"rank {rank} lost the rendezvous store (rank 0's) while the ranks were meeting "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); rank 0 stopped "
            f"first: its error names the cause") from None


def _meet_on(store, prefix: str, rank: int, world_size: int, timeout_s: float) -> None:
    me = {"world_size": world_size, "host": socket.gethostname(), "pid": os.getpid()}
    store.set(f"{prefix}/join/{rank}", json.dumps(me))
    deadline = time.monotonic() + timeout_s
    seen = {}
    delay = 0.002
    while True:
        for r in range(world_size):
            if r not in seen and store.check([f"{prefix}/join/{r}"]):
                seen[r] = json.loads(store.get(f"{prefix}/join/{r}"))
        odd = {r: v["world_size"] for r, v in seen.items() if v["world_size"] != world_size}
        if odd:
            _leave_together(store, prefix, rank, seen, timeout_s)
            others = ", ".join(f"rank {r} on {seen[r]['host']} has WORLD_SIZE={w}" for r, w in sorted(odd.items()))
            raise RendezvousError(f"mismatched world size: rank {rank} has WORLD_SIZE={world_size} but "
                                  f"{others}; start every rank with the same WORLD_SIZE (torchrun "
                                  f"--nnodes/--nproc-per-node must match on every node)")
        if len(seen) == world_size:
            return
        if time.monotonic() >= deadline:
            missing = [r for r in range(world_size) if r not in seen]
            raise RendezvousError(
                f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} did not join the "
                f"rendezvous within {timeout_s:g} s (world size {world_size}, "
                f"{len(seen)} joined); start the missing ranks or lower WORLD_SIZE")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _leave_together(store, prefix: str, rank: int, seen: dict, timeout_s: float) -> None:
    """Mark this rank as leaving; rank 0, whose process hosts the store, waits (a few seconds at
    most) until every rank it saw has read the others' views and left, so each names the cause."""
    store.set(f"{prefix}/left/{rank}", "1")
    if rank != 0:
        return
    until = time.monotonic() + min(timeout_s, 5.0)
    pending = [f"{prefix}/left/{r}" for r in seen if r != 0]
    while pending and time.monotonic() < until:
        pending = [k for k in pending if not store.check([k])]
        time.sleep(0.01)


def launcher_store(timeout: Optional[float] = None):
    """The launcher's rendezvous store (``MASTER_ADDR``/``MASTER_PORT``), connected as :func:`init` does.

    Under torchrun it is a client of the store torchrun's agent on node 0 hosts
    (``TORCHELASTIC_USE_AGENT_STORE=True``); otherwise rank 0 hosts it.  Pass it on to
    ``init(store=...)`` to meet on the same connection (``hal doctor`` across nodes does).

    :raises DistError: launcher variables missing; :raises RendezvousError: store unreachable.
    """
    timeout_s = float(timeout) if timeout is not None else default_timeout()
    env = os.environ
    rank, world_size = _env_int("RANK", env), _env_int("WORLD_SIZE", env)
    addr, port = env.get("MASTER_ADDR"), _env_int("MASTER_PORT", env)
    if rank is None or world_size is None or not addr or port is None:
        raise DistError(f"RANK={rank!r} WORLD_SIZE={world_size!r} MASTER_ADDR={addr!r} MASTER_PORT={port!r}: "
                        f"the launcher's store needs all four; launch with torchrun")
    return _connect_store(addr, port, rank, world_size, timeout_s)


def init(backend: Optional[str] = None, *, timeout: Optional[float] = None,
         init_method: Optional[str] = None, store=None) -> DistInfo:
    """Initialise ``torch.distributed`` for the selected backend and bind this rank's device.

    Under ``torchrun`` (or any launcher that sets ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/
    ``MASTER_PORT``) it joins that job; without them it starts a one-process group.  ::

        info = hal.dist.init()                 # torchrun --nproc-per-node 8 train.py
        model = DDP(model.to(info.device))

    :param backend: torch backend string; default :func:`backend_string` (``"cpu:gloo,<dev>:<ccl>"``).
    :param timeout: seconds for the rendezvous, the process group and hal's collective checks;
        default ``HAL_DIST_TIMEOUT`` or 300.
    :param init_method: passed to torch as is (``"tcp://..."``, ``"file://..."``); hal's own
        rendezvous check is then skipped.
    :param store: the launcher's store already connected (:func:`launcher_store`), used
        instead of a new connection.
    :return: :class:`DistInfo` (rank, world size, local rank, backend string, device).
    :raises DistError: with the reason and the fix (unknown CCL, store unreachable, ranks missing,
        mismatched world size, LOCAL_RANK beyond the visible devices).
    """
    from hal.plugin.registry import selected_backend

    if dist.is_initialized():
        if STATE.info is not None:
            return STATE.info
        raise DistError("torch.distributed is already initialised outside hal; call "
                        "hal.dist.init() before init_process_group, or not at all")
    timeout_s = float(timeout) if timeout is not None else default_timeout()
    hal_backend = selected_backend()
    register_plugin_ccl()
    backend = backend or backend_string(hal_backend)
    env = os.environ
    rank, world_size = _env_int("RANK", env), _env_int("WORLD_SIZE", env)
    if (rank is None) != (world_size is None):
        raise DistError("only one of RANK and WORLD_SIZE is set; launch with torchrun, or set both")
    local_rank = _env_int("LOCAL_RANK", env)
    if local_rank is None:
        local_rank = rank or 0
    if world_size is not None and not 0 <= rank < world_size:
        raise DistError(f"RANK={rank} is outside WORLD_SIZE={world_size}; ranks run 0..{world_size - 1}")
    device = _bind_device(hal_backend, local_rank)
    kwargs = dict(backend=backend, timeout=_dt.timedelta(seconds=timeout_s))
    if backend.endswith(":nccl") and device.type == "cuda":
        kwargs["device_id"] = device
    prefix = f"{_KEY_PREFIX}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    store = None
    if init_method is not None:
        kwargs.update(init_method=init_method)
        if world_size is not None:
            kwargs.update(rank=rank, world_size=world_size)
    elif world_size is None:
        store = dist.HashStore()
        rank, world_size = 0, 1
        kwargs.update(store=dist.PrefixStore("pg", store), rank=0, world_size=1)
    else:
        addr, port = env.get("MASTER_ADDR"), _env_int("MASTER_PORT", env)
        if not addr or port is None:
            raise DistError(f"RANK and WORLD_SIZE are set but MASTER_ADDR={addr!r} MASTER_PORT={port!r}; "
                            f"launch with torchrun, or set both to rank 0's address and a free port")
        if store is None:
            store = _connect_store(addr, port, rank, world_size, timeout_s)
        _meet(store, prefix, rank, world_size, timeout_s)
        kwargs.update(store=dist.PrefixStore(f"{prefix}/pg", store), rank=rank, world_size=world_size)
    try:
        dist.init_process_group(**kwargs)
    except Exception as exc:
        raise DistError(f"torch.distributed.init_process_group(backend={backend!r}) failed on rank "
                        f"{rank}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}; "
                        f"run 'hal doctor' on this node") from exc
    if store is None:
        store = dist.distributed_c10d._get_default_store()
    from hal.dist import premul_sum
    premul_sum.install(premul_sum.INSTALLED.patch)  # ReduceOp.PREMUL_SUM on gloo groups, until destroy()
    from hal.util import exit as _exit
    _exit.register()  # gloo's work threads must not outlive the interpreter's GIL
    STATE.store, STATE.prefix, STATE.seq = store, prefix, 0
    STATE.info = DistInfo(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank,
                          backend=backend, device=str(device), timeout_s=timeout_s)
    return STATE.info


def info() -> DistInfo:
    """The :class:`DistInfo` of :func:`init` (raises DistError before it)."""
    if STATE.info is None:
        raise DistError("hal.dist is not initialised; call hal.dist.init() first")
    return STATE.info


def is_initialized() -> bool:
    """True after :func:`init` and before :func:`destroy`."""
    return STATE.info is not None and dist.is_initialized()


def destroy() -> None:
    """Tear the process group down (safe to call twice)."""
    if dist.is_initialized():
        # gloo's work threads drop what their last collective captured (Python objects among it) once it is
        # done; destroy_process_group joins them holding the GIL, so each gets it first.  Without it torch
        # 2.4 hung in destroy in about one 4-rank job in ten
        from hal.util.exit import let_native_threads_finish
        let_native_threads_finish()
        dist.destroy_process_group()
    from hal.dist import premul_sum
    premul_sum.INSTALLED.restore()
    STATE.info, STATE.store, STATE.seq = None, None, 0
