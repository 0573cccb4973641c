"""Run a script file under the redirection and report what happened, whatever happened."""
from __future__ import annotations

import os
import runpy
import sys
import time
import traceback
from typing import Optional, Sequence

from hal._errors import HalError
from hal.util.frames import STDLIB, is_internal, short_path, torch_context, user_site

#: version of the run report; see docs/redirect.md ("The run report")
SCHEMA = "hal.run/3"


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def _user_frames(tb):
    while tb is not None:
        name = tb.tb_frame.f_globals.get("__name__") or ""
        if not is_internal(name) and name.partition(".")[0] not in STDLIB:
            yield tb
        tb = tb.tb_next


def _error(exc: BaseException, script: str) -> dict:
    """Type, message, the user's ``file:line`` and the traceback from the script's first frame."""
    tb = exc.__traceback__
    start = tb
    while start is not None and os.path.abspath(start.tb_frame.f_code.co_filename) != script:
        start = start.tb_next
    if isinstance(exc, SyntaxError) and start is None:
        text = "".join(traceback.format_exception_only(type(exc), exc))
        where = f"{short_path(exc.filename or script)}:{exc.lineno}"
    else:
        # the script's frames onwards; hal's and runpy's frames above them are not the user's
        text = "".join(traceback.format_exception(type(exc), exc, start if start is not None else tb))
        user = list(_user_frames(start if start is not None else tb))
        where = (f"{short_path(user[-1].tb_frame.f_code.co_filename)}:{user[-1].tb_lineno}" if user else None)
    return {"type": type(exc).__name__, "message": str(exc), "where": where, "traceback": text}


def _exit_code(code) -> "tuple[int, Optional[str]]":
    """The process exit code for ``SystemExit(code)`` and what Python would print."""
    if code is None:
        return 0, None
    if isinstance(code, int):
        return code, None
    return 1, f"{code}\n"


def _announce_fallbacks(backend, echo: bool) -> None:
    """Each op's first fallback on the device (:meth:`hal.plugin.backend.Backend.on_op_fallback`)
    is one line at the script's line that led to it (logger ``hal.redirect``, so ``--quiet``
    silences it), printed where the redirections are (rank 0); other ranks count silently."""
    from hal.redirect._log import LOGGER

    def notice(op: str, route: str, device: str) -> None:
        if not echo:
            return
        site = user_site(2) or f"({torch_context()})"
        how = "decomposed into other ops" if route == "decomposition" else "ran the CPU's kernel on the host"
        LOGGER.warning("%s: %s is not native on %s; %s (fallback, counted in the report)", site, op, device, how)

    backend.on_op_fallback(notice)


def _install_fallback():
    """:func:`hal.fallback.install` for the selected backend (it says itself when it does nothing:
    not a PrivateUse1 device, no torch profile, ``HAL_FALLBACK=0``); a failure is one line on
    stderr (also with --quiet: it is the user's setting that is wrong) and in the report, not raised."""
    from hal import fallback
    from hal.redirect._log import LOGGER
    try:
        installed = fallback.install()
    except Exception as exc:  # noqa: BLE001 - the script runs without it
        LOGGER.error("%s; the script runs without hal.fallback's decompositions", exc)
        installed = fallback.InstallReport(False, f"hal.fallback.install() failed: {type(exc).__name__}: {exc}")
    try:  # after install: HAL_FALLBACK_HOST overrides every kernel of its ops
        fallback.route_to_host_from_env()
    except Exception as exc:  # noqa: BLE001 - the user's setting is wrong: said, and the script runs without it
        LOGGER.error("%s; the script runs without HAL_FALLBACK_HOST", exc)
    return installed


def _module_file(module: str) -> str:
    """The file ``python -m module`` would run (a package's ``__main__``)."""
    import importlib.util
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        raise HalError(f"hal run -m {module}: {exc}; install the package that provides it") from None
    if spec is None:
        raise HalError(f"hal run -m {module}: no module of that name in this Python; install the package "
                       f"that provides it (pip install ...) or give a script path")
    if spec.submodule_search_locations is not None:
        return _module_file(module + ".__main__")
    if not spec.origin or not os.path.isfile(spec.origin):
        raise HalError(f"hal run -m {module}: it has no source file to run as __main__")
    return spec.origin


def run_script(path: Optional[str], argv: Sequence[str] = (), options: Sequence[str] = (),
               module: Optional[str] = None) -> dict:
    """Run ``path`` as ``__main__`` with ``argv`` inside :func:`hal.redirect.enable` (or, with
    ``module``, that module as ``python -m`` runs it; ``path`` is then ignored).

    Never raises for what the script does: returns the run report (schema ``hal.run/3``,
    documented in docs/redirect.md) with ``status`` ``"ok"`` or ``"failed"``, the exit code the
    script would have had (0; the ``SystemExit`` code; 1 for an exception; 130 for Ctrl-C),
    ``error`` (type, message, the user's ``file:line``, the traceback from the script's first
    frame on) when it raised, every redirection and every call that was not redirected
    with the user's line that made it, the ops that fell back on the device (``fallbacks``:
    :meth:`hal.plugin.backend.Backend.fallback_report`, empty where the device counts none), and the
    decompositions :mod:`hal.fallback` installed before the script ran and used
    (``fallback_decompositions``: op, count).
    Processes the script starts run under the shim too: multiprocessing's, and every Python
    that runs a script file (``subprocess``, ``os.exec*``); ``children`` has one row per child
    (its exit code, how many redirections it made), waited for up to
    :data:`hal.redirect._children.WAIT_S` seconds after the script ends.  ``options`` are the
    ``hal run`` options the script keeps if it replaces this process with ``os.exec*``.  Run in
    such a child, it records its own end for the parent's report instead.
    """
    from hal.plugin.registry import get_registry
    from hal.redirect import _children
    from hal.redirect._enable import enable

    if module is None:
        path = os.path.abspath(path)
        if not os.path.isfile(path):
            raise HalError(f"{path}: no such script; pass the path of a Python file, "
                           f"e.g. hal run train.py --epochs 1")
    cand = get_registry().selected()
    old_argv, old_path = sys.argv, list(sys.path)
    # python script.py puts the script's folder first on sys.path; python -m the working directory
    sys.path.insert(0, os.getcwd() if module is not None else os.path.dirname(path))
    exit_code, error, message = 0, None, None
    start = time.monotonic()
    fallback_install = None
    try:
        with enable(cand.backend) as t:
            if module is not None:
                # as python -m: the module's parent packages are imported (under the shim) with sys.argv
                # already the module's arguments (torchtitan 0.2.2's ConfigManager.parse_args binds
                # sys.argv[1:] as a default when torchtitan.config is imported)
                sys.argv = ["-m", *argv]
                path = _module_file(module)
            sys.argv = [path, *argv]
            children = _children.install(t, path, options)
            _announce_fallbacks(cand.backend, t.log.echo)
            fallback_install = _install_fallback()
            from hal.util import exit as _exit
            _exit.register()  # collective / autograd threads must not outlive the interpreter's GIL
            try:
                if module is not None:
                    runpy.run_module(module, run_name="__main__", alter_sys=True)
                else:
                    runpy.run_path(path, run_name="__main__")
            except SystemExit as exc:
                exit_code, message = _exit_code(exc.code)
                if message is not None:
                    error = {"type": "SystemExit", "message": message.strip(), "where": None, "traceback": message}
            except KeyboardInterrupt as exc:
                exit_code, error = 130, _error(exc, path)
            except BaseException as exc:  # noqa: B902 - the script's failure is reported, not raised
                exit_code, error = 1, _error(exc, path)
    finally:
        sys.argv, sys.path[:] = old_argv, old_path
    duration = time.monotonic() - start
    if children.root:
        child_rows = children.collect()
    else:
        _children.record_exit(exit_code, error, t.log, duration, script=path, argv=argv)
        child_rows = []
    fallbacks = cand.backend.fallback_report()
    from hal import fallback as _fallback
    decompositions = _fallback.report()
    return {
        "schema": SCHEMA, "script": path, "argv": list(argv),
        "rank": _env_int("RANK", 0), "world_size": _env_int("WORLD_SIZE", 1),
        "backend": cand.name, "device_type": cand.spec.device_type,
        "status": "ok" if exit_code == 0 else "failed", "exit_code": exit_code, "error": error,
        "duration_s": round(duration, 3),
        "redirected": t.log.rows("redirected"), "not_redirected": t.log.rows("not_redirected"),
        "fallbacks": fallbacks,
        "fallback_decompositions": decompositions,
        "host_routed": _fallback.host_routes(),
        "host_route_skipped": _fallback.host_route_skipped(),
        "fallback_install": (fallback_install.to_dict() | {"installed": len(fallback_install.installed)}
                             if fallback_install is not None else None),
        "children": child_rows,
    }
