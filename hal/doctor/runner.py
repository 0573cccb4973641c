"""Run one doctor check in a child process with a hard time limit.

A check that hangs is killed (with everything it started) and reported as FAIL; one that
aborts or crashes is reported with its exit status and last stderr lines.  Test hooks make
a check misbehave on purpose: ``HAL_DOCTOR_TEST_HANG=name[,name]`` (sleeps forever) and
``HAL_DOCTOR_TEST_ABORT=name`` (``os.abort()``).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

ENV_HANG = "HAL_DOCTOR_TEST_HANG"
ENV_ABORT = "HAL_DOCTOR_TEST_ABORT"


def _named(env_var: str, name: str) -> bool:
    return name in {n.strip() for n in os.environ.get(env_var, "").split(",") if n.strip()}


INTERRUPTED = "interrupted before it finished"


def _wait(p: subprocess.Popen, timeout: float, stop: Optional[threading.Event]) -> str:
    """``"done"``, ``"hung"`` (past ``timeout``) or ``"stopped"`` (``stop`` was set)."""
    if stop is None:
        try:
            p.wait(timeout=timeout)
            return "done"
        except subprocess.TimeoutExpired:
            return "hung"
    deadline = time.monotonic() + timeout
    while p.poll() is None:
        if stop.is_set():
            return "stopped"
        left = deadline - time.monotonic()
        if left <= 0:
            return "hung"
        stop.wait(min(0.1, left))
    return "done"


def run_check(name: str, kwargs: dict, timeout: float, stop: Optional[threading.Event] = None) -> dict:
    """Run check ``name`` in a subprocess; always returns within ``timeout`` (+ a second or two).

    :param stop: when set while the check runs, the check is killed and reported as SKIP
        with ``details.interrupted`` (the caller is shutting down).
    """
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hal-doctor-") as tmp:
        out = Path(tmp, "result.json")
        err_path = Path(tmp, "stderr")
        with open(err_path, "wb") as err:
            p = subprocess.Popen([sys.executable, "-m", "hal.doctor.runner", name, str(out), json.dumps(kwargs)],
                                 stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
            how = "hung"
            try:
                how = _wait(p, timeout, stop)
            finally:
                if p.poll() is None or how != "done":
                    try:
                        os.killpg(p.pid, signal.SIGKILL)  # the check and every rank it started
                    except ProcessLookupError:
                        pass
                    p.wait()
        took = time.monotonic() - start
        tail = err_path.read_bytes()[-1500:].decode(errors="replace").strip()
        if how == "stopped":
            return {"status": "SKIP", "summary": INTERRUPTED, "details": {"interrupted": True}, "seconds": took}
        if how == "hung":
            return {"status": "FAIL", "summary": f"did not finish within {timeout:g} s and was killed "
                                                 f"(a hung driver, device or network call)",
                    "details": {"stderr_tail": tail}, "seconds": took}
        if out.exists():
            res = json.loads(out.read_text())
            res["seconds"] = took
            return res
        how = (f"killed by signal {-p.returncode} ({signal.Signals(-p.returncode).name})" if p.returncode < 0
               else f"exited with status {p.returncode}")
        last = tail.splitlines()[-1] if tail else "no message"
        return {"status": "FAIL", "summary": f"the check process {how}: {last}",
                "details": {"stderr_tail": tail}, "seconds": took}


def _child(name: str, out_path: str, kwargs: dict) -> int:
    if _named(ENV_HANG, name):
        while True:
            time.sleep(3600)
    if _named(ENV_ABORT, name):
        os.abort()
    from hal.doctor.checks import CHECKS

    fn = CHECKS[name][0]
    try:
        res = fn(**kwargs)
    except Exception as exc:  # a check that raises is a FAIL with the reason, not a crash
        res = {"status": "FAIL", "summary": f"{type(exc).__name__}: {exc}", "details": {}}
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f, default=str)
    os.replace(tmp, out_path)
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))
