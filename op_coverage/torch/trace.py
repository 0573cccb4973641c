"""``op_coverage trace``: which aten ops a PyTorch program sends to the device.

The program runs unmodified on hal's emulated accelerator (``emu``) — a training script
through the ``hal run`` shim, so CUDA-written scripts work; an ``nn.Module`` factory
(``pkg.mod:factory``) for one forward, backward and optimizer step; a ``torch.export``
``.pt2`` file for one forward — and the emulator records every aten op that reaches the
device, as a vendor kernel would receive it (after autograd and CompositeImplicitAutograd):
overload name, dtypes, count, phase and the first ``file:line`` of the user's code that led
to it (see :class:`hal.emu.DeviceOpTrace`).  The run happens in a fresh child process (the emulator is
selected before torch is touched); a trace never holds tensor data.

Trace file: schema ``op_coverage.torch_trace/1``
(``op_coverage/data/torch_trace.schema.json``).
"""
from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import tempfile
from typing import List, Optional, Sequence

from op_coverage.errors import ScanError

SCHEMA = "op_coverage.torch_trace/1"

#: exit codes of the trace command (the scan's where they mean the same)
EXIT_NOT_FOUND, EXIT_BAD_TRACE, EXIT_RUN_FAILED = 10, 18, 19


class TraceError(ScanError):
    """A trace could not be made or read; ``exit_code`` as documented in ``op_coverage trace --help``."""

    kind = "trace"

    def __init__(self, message: str, exit_code: int = EXIT_BAD_TRACE):
        super().__init__(message)
        self.exit_code = exit_code


def source_kind(target: str) -> str:
    """``script`` (a ``.py`` file), ``export`` (a ``.pt2`` file) or ``factory`` (``pkg.mod:fn``)."""
    if target.endswith(".pt2"):
        return "export"
    if target.endswith(".py") or os.path.isfile(target):
        return "script"
    if ":" in target:
        return "factory"
    raise TraceError(f"{target}: not a Python script, a .pt2 export or a module:factory; "
                     f"e.g. op_coverage trace train.py, op_coverage trace mypkg.models:build_model",
                     EXIT_NOT_FOUND)


def record(target: str, argv: Sequence[str] = (), steps: Optional[int] = None,
           seconds: Optional[float] = None, timeout: Optional[float] = None,
           echo: bool = True) -> dict:
    """Trace ``target`` in a fresh process on the emulator; returns the trace dict.

    ``steps``: stop cleanly after that many optimizer steps; ``seconds``: after that long.
    The script's own output passes through when ``echo``.  Raises :class:`TraceError` when the
    target does not exist or the run fails before any op was recorded.
    """
    kind = source_kind(target)
    if kind in ("script", "export") and not os.path.isfile(target):
        raise TraceError(f"{target}: no such file; pass the path of the training script "
                         f"(op_coverage trace train.py -- --epochs 1)", EXIT_NOT_FOUND)
    fd, out = tempfile.mkstemp(prefix="op_coverage-trace-", suffix=".json")
    os.close(fd)
    try:
        # -c, not -m: the child's own frames then belong to op_coverage, not to __main__
        cmd = [sys.executable, "-c", "import sys; from op_coverage.torch._trace_child import main; sys.exit(main())",
               "--out", out, "--kind", kind]
        if steps:
            cmd += ["--steps", str(steps)]
        if seconds:
            cmd += ["--seconds", str(seconds)]
        cmd += ["--", target, *argv]
        env = dict(os.environ, HAL_BACKEND="emu")
        env.pop("HAL_EMU_OPS", None)  # the trace wants everything that reaches the device
        try:
            proc = subprocess.run(cmd, env=env, timeout=timeout,
                                  stdout=None if echo else subprocess.DEVNULL,
                                  stderr=None if echo else subprocess.PIPE, text=True)
        except subprocess.TimeoutExpired:
            raise TraceError(f"{target}: the traced run did not end within {timeout:g} s; "
                             f"bound it with --steps N or --seconds S", EXIT_RUN_FAILED) from None
        try:
            with open(out, encoding="utf-8") as f:
                trace = json.load(f)
        except (OSError, ValueError):
            tail = (proc.stderr or "").strip().splitlines()[-1:] if not echo else []
            why = f": {tail[0]}" if tail else " (its reason is above)"
            hint = f"; run it with HAL_BACKEND=emu hal run {target} to see more" if kind == "script" else ""
            code = EXIT_NOT_FOUND if proc.returncode == EXIT_NOT_FOUND else EXIT_RUN_FAILED
            raise TraceError(f"{target}: the traced run exited with code {proc.returncode} before writing its "
                             f"trace{why}{hint}", code) from None
    finally:
        try:
            os.unlink(out)
        except OSError:
            pass
    return trace


def load(path: str) -> dict:
    """Read and check a trace file (schema ``op_coverage.torch_trace/1``)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise TraceError(f"{path}: no such trace file; make one with op_coverage trace train.py -o {path}",
                         EXIT_NOT_FOUND) from None
    except (OSError, ValueError) as exc:
        raise TraceError(f"{path}: not a JSON trace ({exc}); make one with op_coverage trace",
                         EXIT_BAD_TRACE) from None
    problem = check(data)
    if problem:
        raise TraceError(f"{path}: not an op_coverage trace: {problem}; make one with "
                         f"op_coverage trace train.py -o {os.path.basename(path)}", EXIT_BAD_TRACE)
    return data


def check(data) -> Optional[str]:
    """What is wrong with a trace dict, or None."""
    if not isinstance(data, dict):
        return "the top level is not an object"
    if data.get("schema") != SCHEMA:
        return f"schema is {data.get('schema')!r}, expected {SCHEMA!r}"
    ops = data.get("ops")
    if not isinstance(ops, list):
        return "'ops' is not a list"
    for i, row in enumerate(ops):
        if not isinstance(row, dict) or not isinstance(row.get("op"), str) \
                or not isinstance(row.get("count"), int):
            return f"ops[{i}] has no op name and count"
    if not isinstance(data.get("torch_version"), str):
        return "'torch_version' is missing"
    return None


def make_trace(rows: List[dict], source: dict, steps: int, seconds: float, stopped_by: str,
               torch_version: str, exit_code: int = 0, error: Optional[str] = None) -> dict:
    """The trace dict for rows of :meth:`hal.emu.DeviceOpTrace.rows` (ops never called
    at the top level are kept: they ran inside another device op)."""
    return {
        "schema": SCHEMA, "torch_version": torch_version.split("+")[0], "torch_build": torch_version,
        "created": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        "source": source, "steps": steps, "seconds": round(seconds, 3), "stopped_by": stopped_by,
        "exit_code": exit_code, "error": error,
        "ops": sorted(rows, key=lambda r: r["op"]),
    }


def summary(trace: dict) -> str:
    """One line: how many distinct ops, calls, steps."""
    top = [r for r in trace["ops"] if r["count"]]
    calls = sum(r["count"] for r in top)
    return (f"{len(top)} aten ops ({calls} calls) reached the device in {trace['steps']} optimizer "
            f"step(s), {trace['seconds']:.1f} s, stopped by {trace['stopped_by']}")
