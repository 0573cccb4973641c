"""Processes the script starts with multiprocessing run under the shim too.

A forked child inherits the shim with the rest of the parent's memory.  A spawned or
forkserver child starts a fresh interpreter and re-runs the script's top level as
``__mp_main__`` before it runs its target; the shim swaps that re-run for
``_spawned_main``, which enables the shim first and then runs the script, so the child
sees what its parent saw (``torch.multiprocessing.spawn``, Hogwild with ``share_memory()``,
DataLoader workers with a spawn context).  Children count their redirections silently.
"""
from __future__ import annotations

import os

from hal.redirect._core import Redirection

BOOTSTRAP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_spawned_main.py")
#: set for spawned children: the backend the parent runs on, and the script's path
ENV_BACKEND, ENV_SCRIPT = "HAL_RUN_CHILD_BACKEND", "HAL_RUN_CHILD_SCRIPT"


def install(t: Redirection, script: str) -> None:
    """Make spawned children of ``script`` (the file ``hal run`` runs) start under the shim."""
    import multiprocessing.spawn as spawn
    orig = spawn.get_preparation_data

    def get_preparation_data(name):
        data = orig(name)
        argv = data.get("sys_argv") or [""]
        if data.get("init_main_from_path") == script and os.path.abspath(argv[0]) == script:
            data["init_main_from_path"] = BOOTSTRAP
            os.environ[ENV_BACKEND], os.environ[ENV_SCRIPT] = t.backend.name, script
        return data

    t.patch(spawn, "get_preparation_data", get_preparation_data)
    t.on_restore(lambda: [os.environ.pop(k, None) for k in (ENV_BACKEND, ENV_SCRIPT)])
