"""Make torchrun's restarts work for scripts that call ``init_process_group()`` themselves.

Under ``torchrun --max-restarts N`` every worker of every attempt connects to the agent's
TCPStore (``TORCHELASTIC_USE_AGENT_STORE=True``), and torch (2.6 to at least 2.15) keeps
that store across restarts without a per-attempt prefix (2.4's ``env://`` prefixed it itself,
``/worker/attempt_<n>``: there the wrapper adds nothing): the restarted ranks read the
addresses the dead ranks published under the same ``default_pg/...`` keys and fail with
"Gloo connectFullMesh failed ... Connection refused" / "Connect timeout" (NCCL: "connect
returned Connection refused"), attempt after attempt, until the restarts run out.  A script
that calls :func:`hal.dist.init` has always used a per-attempt prefix; :func:`install`
gives ``init_process_group()`` (``env://``) the same, by wrapping the ``env://`` rendezvous
so that its store is ``PrefixStore("attempt_<TORCHELASTIC_RESTART_COUNT>", store)``.

It is installed by ``import hal.checkpoint`` and by ``hal run``; outside torchelastic, or
with a launcher that gives each attempt a fresh store, it changes nothing that matters (a
prefix on a store nobody else shares).
"""
from __future__ import annotations

import os

_INSTALLED = {"done": False}


def _wrap(handler):
    def env_with_attempt_prefix(url, **kwargs):
        import torch.distributed as dist

        gen = handler(url, **kwargs)
        store, rank, world_size = next(gen)
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and not isinstance(store, dist.PrefixStore):
            attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
            store = dist.PrefixStore(f"attempt_{attempt}", store)
        yield store, rank, world_size
        yield from gen

    env_with_attempt_prefix.hal_wrapped = True  # type: ignore[attr-defined]
    return env_with_attempt_prefix


def install() -> bool:
    """Give ``env://`` rendezvous a per-restart key prefix; True when installed (idempotent)."""
    if _INSTALLED["done"]:
        return True
    import importlib

    try:  # the module: ``from torch.distributed import rendezvous`` is the function of that name
        rdzv = importlib.import_module("torch.distributed.rendezvous")
    except ImportError:  # torch without distributed support
        return False
    handlers = getattr(rdzv, "_rendezvous_handlers", None)
    if not isinstance(handlers, dict) or "env" not in handlers:
        return False  # a torch whose rendezvous is laid out differently: leave it alone
    if not getattr(handlers["env"], "hal_wrapped", False):
        handlers["env"] = _wrap(handlers["env"])
    _INSTALLED["done"] = True
    return True
