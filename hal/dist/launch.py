"""Start N local ranks of a function, each in its own process, with a hard time limit.

Used by ``hal bench -n`` and ``hal doctor``; tests use it to run real multi-process gloo
jobs.  Each rank is ``python -m hal.dist.launch TARGET`` with the launcher variables
torchrun would set; the target runs after :func:`hal.dist.init` and its JSON-able return
value (or its error) comes back per rank.  Whatever happens, no rank outlives the limit::

    res = spawn("hal.dist.bench:rank_main", nproc=2, kwargs={...}, timeout=60)
    res.ranks[0].result
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

ENV_RESULT = "HAL_LAUNCH_RESULT"
ENV_KWARGS = "HAL_LAUNCH_KWARGS"


@dataclass
class RankOutcome:
    """How one rank ended."""

    rank: int
    returncode: Optional[int]
    result: object = None
    error: Optional[str] = None
    error_type: Optional[str] = None
    timed_out: bool = False
    stopped: bool = False  # killed because another rank had failed
    stderr_tail: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.error is None and not self.timed_out and not self.stopped

    def to_dict(self) -> dict:
        return dict(rank=self.rank, returncode=self.returncode, ok=self.ok, result=self.result,
                    error=self.error, error_type=self.error_type, timed_out=self.timed_out,
                    stopped=self.stopped, stderr_tail=self.stderr_tail)


@dataclass
class SpawnResult:
    """Outcome of every rank, in rank order."""

    ranks: List[RankOutcome] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.ranks)

    def first_error(self) -> str:
        """The most telling failure: a rank's own error first, then a crash, then a timeout."""
        for r in self.ranks:
            if r.error:
                return f"rank {r.rank}: {r.error}"
        for r in self.ranks:
            if not r.ok and not r.timed_out and not r.stopped:
                return (f"rank {r.rank}: {r.error}" if r.error else
                        f"rank {r.rank} exited with code {r.returncode}: {r.stderr_tail.strip()[-300:]}")
        for r in self.ranks:
            if r.timed_out:
                return f"rank {r.rank} was killed at the time limit"
        return ""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.kill()
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - unkillable process
        pass


def spawn(target: str, nproc: int, kwargs: Optional[dict] = None, timeout: float = 60.0,
          env: Optional[Dict[str, str]] = None, init_timeout: Optional[float] = None,
          rank_env: Optional[Dict[int, Dict[str, str]]] = None, peer_grace: float = 5.0) -> SpawnResult:
    """Run ``target`` (``"package.module:function"`` or ``"/path/file.py:function"``) on ``nproc`` ranks.

    :param kwargs: JSON-able keyword arguments passed to the target on every rank.
    :param timeout: hard wall-clock limit in seconds for the whole job; ranks still running
        are killed and reported with ``timed_out``.
    :param env: extra environment for every rank (``{"HAL_BACKEND": "cpu"}``).
    :param init_timeout: ``HAL_DIST_TIMEOUT`` for the ranks (default: ``timeout``).
    :param rank_env: extra environment for single ranks, applied last (``{1: {"WORLD_SIZE": "3"}}``).
    :param peer_grace: once a rank has failed, seconds the others get to finish (and report
        what they saw) before they are stopped; a job never waits out its timeout for a dead peer.
    """
    if nproc < 1:
        raise ValueError(f"nproc must be >= 1, got {nproc}")
    port = free_port()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hal-launch-") as tmp:
        procs = []
        for rank in range(nproc):
            e = dict(os.environ)
            e.update(env or {})
            e.update(RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_RANK=str(rank),
                     LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                     GROUP_RANK="0", HAL_DIST_TIMEOUT=str(init_timeout or timeout),
                     **{ENV_RESULT: os.path.join(tmp, f"rank{rank}.json"),
                        ENV_KWARGS: json.dumps(kwargs or {})})
            e.update((rank_env or {}).get(rank, {}))
            e.pop("TORCHELASTIC_USE_AGENT_STORE", None)
            err = open(os.path.join(tmp, f"rank{rank}.err"), "wb")
            procs.append((subprocess.Popen([sys.executable, "-m", "hal.dist.launch", target],
                                           env=e, stdout=subprocess.DEVNULL, stderr=err), err))
        deadline = start + timeout
        timed_out, stopped = set(), set()
        try:
            failed_at = None
            while time.monotonic() < deadline:
                codes = [p.poll() for p, _ in procs]
                if all(c is not None for c in codes):
                    break
                if failed_at is None and any(c not in (None, 0) for c in codes):
                    failed_at = time.monotonic()  # a rank failed: the others get a short grace
                if failed_at is not None and time.monotonic() - failed_at > peer_grace:
                    stopped = {r for r, c in enumerate(codes) if c is None}
                    break
                time.sleep(0.05)
            else:
                timed_out = {r for r, (p, _) in enumerate(procs) if p.poll() is None}
        finally:
            for rank, (p, err) in enumerate(procs):
                if p.poll() is None and rank not in stopped:
                    timed_out.add(rank)
                _kill(p)
                err.close()
        out = SpawnResult(wall_s=time.monotonic() - start)
        for rank, (p, _) in enumerate(procs):
            oc = RankOutcome(rank=rank, returncode=p.returncode, timed_out=rank in timed_out,
                             stopped=rank in stopped)
            res_file = Path(tmp, f"rank{rank}.json")
            if res_file.exists():
                data = json.loads(res_file.read_text())
                oc.result, oc.error, oc.error_type = data.get("result"), data.get("error"), data.get("error_type")
            oc.stderr_tail = Path(tmp, f"rank{rank}.err").read_bytes()[-2000:].decode(errors="replace")
            out.ranks.append(oc)
        return out


def _load_target(target: str):
    mod_name, _, fn_name = target.rpartition(":")
    if not mod_name or not fn_name:
        raise ValueError(f"target {target!r} must look like 'package.module:function' or 'file.py:function'")
    if mod_name.endswith(".py"):
        spec = importlib.util.spec_from_file_location(Path(mod_name).stem, mod_name)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(mod_name)
    return getattr(module, fn_name)


def _worker(target: str) -> int:
    from hal import dist as hdist

    result_path = os.environ[ENV_RESULT]
    payload: dict
    code = 0
    try:
        fn = _load_target(target)
        hdist.init()
        payload = {"result": fn(**json.loads(os.environ.get(ENV_KWARGS, "{}")))}
    except Exception as exc:  # reported to the parent, which decides what it means
        payload = {"error": str(exc) or type(exc).__name__, "error_type": type(exc).__name__,
                   "traceback": traceback.format_exc()}
        code = 1
    tmp = result_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f, default=str)
    os.replace(tmp, result_path)
    try:
        hdist.destroy()
    except Exception:  # the job is over; a peer that already left is not an error here
        pass
    return code


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1]))
