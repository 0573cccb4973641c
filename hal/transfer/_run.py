"""Run a script file under the transfer shim and report what was redirected."""
from __future__ import annotations

import os
import runpy
import sys
from typing import Sequence

from hal._errors import HalError


def run_script(path: str, argv: Sequence[str] = ()) -> dict:
    """Run ``path`` as ``__main__`` with ``argv`` inside :func:`hal.transfer.enable`.

    Returns the run report (schema ``hal.run/1``): backend, device, the script's exit code,
    every redirection, every call that was not redirected, and (on the emulator) the ops
    that fell back.  Exceptions raised by the script propagate unchanged.
    """
    from hal.registry import get_registry
    from hal.transfer._shim import enable

    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise HalError(f"{path}: no such script; pass the path of a Python file, "
                       f"e.g. hal run train.py --epochs 1")
    cand = get_registry().selected()
    old_argv, old_path = sys.argv, list(sys.path)
    sys.argv = [path, *argv]
    sys.path.insert(0, os.path.dirname(path))
    exit_code = 0
    try:
        with enable(cand.backend) as t:
            try:
                runpy.run_path(path, run_name="__main__")
            except SystemExit as exc:
                exit_code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv, sys.path[:] = old_argv, old_path
    fallbacks = []
    if cand.spec.device_type == "emu":
        from hal.emu import fallback_report
        fallbacks = fallback_report()
    return {
        "schema": "hal.run/1", "script": path, "argv": list(argv), "rank": int(os.environ.get("RANK", 0)),
        "backend": cand.name, "device_type": cand.spec.device_type, "exit_code": exit_code,
        "redirected": t.log.rows("redirected"), "not_redirected": t.log.rows("not_redirected"),
        "fallbacks": fallbacks,
    }
