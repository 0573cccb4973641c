"""Processes the script starts run under the shim too, and the run report counts them.

- **multiprocessing.** A forked child inherits the shim with the rest of the parent's memory.
  A spawned or forkserver child starts a fresh interpreter and re-runs the script's top level
  as ``__mp_main__`` before it runs its target; the shim swaps that re-run for
  ``_spawned_main``, which enables the shim first and then runs the script, so the child sees
  what its parent saw (``torch.multiprocessing.spawn``, Hogwild with ``share_memory()``,
  DataLoader workers with a spawn context).
- **Any other Python** the script starts (``subprocess``, ``os.exec*``, a shell that runs
  ``python train.py``: Lightning's DDP ranks): while the script runs, the environment names the
  run (:data:`hal.redirect._child_start.ENV_RUN`) and ``PYTHONPATH`` starts with a folder
  holding only a ``sitecustomize``, so a child Python that runs a script file re-executes
  itself as ``python -m hal.redirect --child`` (:mod:`hal.redirect._child_start`).

Children count their redirections silently and record how they ended in the run's folder; the
``hal run`` process that started the run (:class:`Children`) reads the records into its report.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from typing import List, Optional, Sequence

from hal.redirect._child_start import ENV_RUN, SITE, new_record, read_record, run_info, write_record
from hal.redirect._core import Redirection

BOOTSTRAP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_spawned_main.py")
#: set for children: the backend the parent runs on; for spawned children, the script's path
ENV_BACKEND, ENV_SCRIPT = "HAL_RUN_CHILD_BACKEND", "HAL_RUN_CHILD_SCRIPT"
#: how long the report waits for children still running when the script has ended (seconds)
WAIT_S = 10.0


class Children:
    """The run's folder of child records, as the ``hal run`` process that started it sees it."""

    def __init__(self, folder: str, root: bool):
        self.folder, self.root = folder, root

    def collect(self, wait_s: float = WAIT_S) -> List[dict]:
        """One row per child process recorded under this run (its descendants too), oldest first,
        after waiting up to ``wait_s`` for those still running; then the folder is removed.
        A child's own run (``--child``) reports none: its parent's report counts them all."""
        if not self.root:
            return []
        deadline = time.monotonic() + wait_s
        while True:
            records = self._records()
            waiting = [r for r in records if r.get("status") == "running" and _alive(r["pid"])]
            if not waiting or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        shutil.rmtree(self.folder, ignore_errors=True)
        return [_row(r) for r in sorted(records, key=lambda r: r.get("started", 0.0))]

    def _records(self) -> List[dict]:
        out = []
        for name in os.listdir(self.folder) if os.path.isdir(self.folder) else ():
            if name.endswith(".json") and name[:-5].isdigit():
                record = read_record(self.folder, int(name[:-5]))
                if record.get("pid"):
                    out.append(record)
        return out


def _alive(pid: int) -> bool:
    """True while process ``pid`` runs (a zombie, ended but not yet waited for, does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _int(value) -> Optional[int]:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _row(r: dict) -> dict:
    """A child's record as a row of the report (schema hal.run/3, ``children``)."""
    status = r.get("status", "running")
    if status == "running" and not _alive(r["pid"]):
        status = "unknown"  # ended without recording its exit: killed by a signal, or os._exit
    return {"pid": r["pid"], "ppid": r.get("ppid"), "kind": r.get("kind", "subprocess"),
            "script": r.get("script", ""), "argv": r.get("argv", []),
            "rank": _int(r.get("rank")), "local_rank": _int(r.get("local_rank")),
            "status": status, "exit_code": r.get("exit_code"), "error": r.get("error"),
            "redirected": r.get("redirected", 0), "not_redirected": r.get("not_redirected", 0),
            "duration_s": r.get("duration_s")}


def record_start(kind: str, script: str, argv: Sequence[str] = ()) -> None:
    """Record this process as a child of its run, running (nothing outside a run)."""
    info = run_info()
    if info is not None:
        write_record(info["folder"], os.getpid(), new_record(kind, script, argv))


def record_exit(exit_code: int, error: Optional[dict], log, duration_s: float,
                kind: str = "subprocess", script: str = "", argv: Sequence[str] = ()) -> None:
    """Record how this child ended in its run's folder (nothing outside a run): the exit code,
    the error's type and the user's line, how many redirections it made (``log``: its
    :class:`hal.redirect.RedirectLog`, None when it never started)."""
    info = run_info()
    if info is None:
        return
    record = read_record(info["folder"], os.getpid()) or new_record(kind, script, argv)
    record.update(status="ok" if exit_code == 0 else "failed", exit_code=exit_code,
                  error={"type": error["type"], "where": error.get("where")} if error else None,
                  redirected=len(log.rows("redirected")) if log is not None else 0,
                  not_redirected=len(log.rows("not_redirected")) if log is not None else 0,
                  duration_s=round(duration_s, 3))
    write_record(info["folder"], os.getpid(), record)


def _install_spawn(t: Redirection, script: str) -> None:
    import multiprocessing.spawn as spawn
    orig = spawn.get_preparation_data

    def get_preparation_data(name):
        data = orig(name)
        argv = data.get("sys_argv") or [""]
        if data.get("init_main_from_path") == script and os.path.abspath(argv[0]) == script:
            data["init_main_from_path"] = BOOTSTRAP
            os.environ[ENV_SCRIPT] = script
        return data

    t.patch(spawn, "get_preparation_data", get_preparation_data)


def _set_env(t: Redirection, name: str, value: str) -> None:
    old = os.environ.get(name)
    os.environ[name] = value
    t.on_restore(lambda: os.environ.__setitem__(name, old) if old is not None else os.environ.pop(name, None))


def not_the_users() -> tuple:
    """The folders whose script files a child runs as it would have, without the redirection: torch's and
    hal's own (:func:`hal.util.frames.internal_dirs`) and every folder of installed packages
    (site-packages): a library's helper run as a script (py-cpuinfo's ``cpuinfo.py --json``, which
    DeepSpeed's CPU op builders start twice) is not a training script, and would pay hal's start-up
    for nothing.  The user's scripts, and the ones launchers start for them, live elsewhere."""
    import site
    import sysconfig

    from hal.util.frames import internal_dirs
    paths = sysconfig.get_paths()
    libs = {paths.get("purelib"), paths.get("platlib"), *getattr(site, "getsitepackages", lambda: [])()}
    return tuple(internal_dirs()) + tuple(sorted(os.path.join(d, "") for d in libs if d))


def install(t: Redirection, script: str, options: Sequence[str] = ()) -> Children:
    """Make the children of ``script`` (the file ``hal run`` runs) start under the shim.

    ``options`` are the ``hal run`` options (``--report PATH``...) the script keeps if it
    replaces this process with ``os.exec*``.  In a child (the environment already names a run)
    the run's folder is kept for its own children; otherwise a new run starts here.
    """
    _install_spawn(t, script)
    _set_env(t, ENV_BACKEND, t.backend.name)
    t.on_restore(lambda: os.environ.pop(ENV_SCRIPT, None))
    info = run_info()
    if info is not None and os.path.isdir(info["folder"]):
        return Children(info["folder"], root=info.get("root") == os.getpid())
    folder = tempfile.mkdtemp(prefix="hal-run-children-")
    _set_env(t, ENV_RUN, json.dumps({"folder": folder, "backend": t.backend.name, "root": os.getpid(),
                                     "options": list(options), "internal": list(not_the_users())}))
    path = os.environ.get("PYTHONPATH")
    _set_env(t, "PYTHONPATH", os.pathsep.join([SITE, path]) if path else SITE)
    return Children(folder, root=True)

