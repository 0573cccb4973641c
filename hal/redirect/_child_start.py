"""How a Python that a ``hal run`` script starts joins the run (standard library only).

``hal run`` exports :data:`ENV_RUN` (what a child needs to know of the run, as JSON) and puts
:data:`SITE` first on ``PYTHONPATH`` while the script runs.  Every Python started from the
script then loads this file at start-up, before its main program, from ``_site/sitecustomize.py``
(a thin trampoline: it must not import hal or torch, every Python child pays for it).

:func:`start` takes over a child that runs a Python script file (``python train.py ...``, as
Lightning starts its ranks and most launchers start workers): it records the child in the run's
folder and re-executes the same process (same pid, so its parent's ``Popen`` still waits on it)
as ``python -m hal.redirect --child train.py ...``, which runs the script as ``hal run`` does, on
the parent's backend, and records its exit.  Every other Python starts as it would have:
``-c``, ``-m``, stdin, console scripts without ``.py``, and the scripts inside torch, hal and
the installed packages (their own workers and helpers, such as py-cpuinfo's; torch's own code sees the truth).  docs/redirect.md, "Child processes".
"""
import json
import os
import sys
import time

#: the run, as JSON: ``folder`` (where children record themselves), ``backend``, ``root`` (pid of
#: the ``hal run`` process), ``options`` (its hal run options), ``internal`` (torch's and hal's folders, and
#: site-packages: scripts there are libraries' helpers, not the user's)
ENV_RUN = "HAL_RUN_CHILDREN"
HERE = os.path.dirname(os.path.abspath(__file__))
#: the folder ``hal run`` puts first on PYTHONPATH: it holds only ``sitecustomize.py``
SITE = os.path.join(HERE, "_site")
#: the hal package this file belongs to
HAL = os.path.dirname(HERE)
#: what a child takes the script file for
SCRIPT_SUFFIXES = (".py", ".pyw")


def run_info(env=os.environ):
    """The run a child belongs to (the decoded :data:`ENV_RUN`), or None outside a ``hal run``."""
    raw = env.get(ENV_RUN)
    if not raw:
        return None
    try:
        info = json.loads(raw)
    except ValueError:
        return None
    return info if isinstance(info, dict) and info.get("folder") else None


def script_of(argv, orig_argv):
    """``(script, args, interpreter options)`` of the command line of this Python (``sys.argv``
    and ``sys.orig_argv`` as they are at start-up), or None when it runs no script file
    (``-c``, ``-m``, stdin, the interactive prompt)."""
    if not argv or argv[0] in ("", "-", "-c", "-m") or not os.path.isfile(argv[0]):
        return None
    if orig_argv and len(orig_argv) > len(argv) and list(orig_argv[len(orig_argv) - len(argv):]) == list(argv):
        options = list(orig_argv[1:len(orig_argv) - len(argv)])
    else:
        options = []  # Python < 3.10 has no orig_argv: the interpreter's own options are not carried
    return os.path.abspath(argv[0]), list(argv[1:]), options


def takes_over(script: str, internal=()) -> bool:
    """True for a script file the child runs under the redirection: a ``.py`` file outside
    torch's and hal's folders and the installed packages' (``internal``)."""
    path = os.path.realpath(script)
    return path.endswith(SCRIPT_SUFFIXES) and not any(
        path.startswith(os.path.join(os.path.realpath(d), "")) for d in internal)


def _hal_here() -> "str | None":
    """Why this Python cannot run the hal that started the run, or None when it can."""
    import importlib.util
    try:
        spec = importlib.util.find_spec("hal")
    except (ImportError, ValueError):
        spec = None
    where = list(spec.submodule_search_locations or []) if spec is not None else []
    if not where:
        return "this Python cannot import hal"
    if os.path.realpath(where[0]) != os.path.realpath(HAL):
        return f"this Python imports hal from {where[0]}, not {HAL} (the hal that started the run)"
    return None


def record_path(folder: str, pid: int) -> str:
    return os.path.join(folder, f"{pid}.json")


def read_record(folder: str, pid: int) -> dict:
    """The record of child ``pid`` in ``folder`` ({} when it has none)."""
    try:
        with open(record_path(folder, pid), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def write_record(folder: str, pid: int, record: dict) -> None:
    """Write child ``pid``'s record whole (a temp file renamed over the old one); a folder that
    is gone (the run has ended) is not an error."""
    path = record_path(folder, pid)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(record, f)
        os.replace(tmp, path)
    except OSError:
        pass


def new_record(kind: str, script: str, args) -> dict:
    """A child's record when it starts: who it is; :func:`hal.redirect._children.record_exit`
    adds how it ended."""
    env = os.environ
    return {"pid": os.getpid(), "ppid": os.getppid(), "kind": kind, "script": script, "argv": list(args),
            "rank": env.get("RANK"), "local_rank": env.get("LOCAL_RANK"), "started": time.time(),
            "status": "running"}


def _say(message: str) -> None:
    sys.stderr.write(f"hal run: {message}\n")
    sys.stderr.flush()


def start() -> None:
    """At a Python's start-up: take over a child of a ``hal run`` script that runs a script file
    (see the module's docstring); anything else returns and the Python starts as it would have."""
    info = run_info()
    if info is None or os.name != "posix":  # elsewhere exec does not keep the process: nothing to take over
        return
    found = script_of(sys.argv, getattr(sys, "orig_argv", None))
    if found is None:
        return
    script, args, options = found
    if not takes_over(script, tuple(info.get("internal") or ())):
        return
    why = _hal_here()
    if why is not None:
        _say(f"{os.path.basename(script)} (child process {os.getpid()}) runs without the redirection: {why}")
        return
    if info.get("root") == os.getpid():
        # the hal run process itself replaced by os.exec*: the new script runs on as hal run did
        hal_run = [*info.get("options", []), script, *args]
    else:
        write_record(info["folder"], os.getpid(), new_record("subprocess", script, args))
        hal_run = ["--child", script, *args]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(sys.executable, [sys.executable, *options, "-m", "hal.redirect", *hal_run])
    except OSError:
        if info.get("root") != os.getpid():
            try:
                os.remove(record_path(info["folder"], os.getpid()))  # it is not a child of the run after all
            except OSError:
                pass
        raise
