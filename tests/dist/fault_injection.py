"""Faults injected from outside into a 2-rank job under torch's elastic launcher.

The job is ``examples/train_ddp_resilient.py`` launched by ``torchrun --max-restarts 3`` (or
``hal run``, which launches torchrun).  The faults are real: SIGKILL / SIGSTOP of a worker
process, an exception in one rank, SIGKILL of the whole job while a save is half-written,
and a file-size limit (``RLIMIT_FSIZE``, what a full disk looks like to ``write``) on rank 0
while it saves.  :func:`check` compares the result with an uninterrupted run: final
weights bitwise, the loss curve, the work lost per restart, the checkpoint folders, and the
one-line restart reasons.

Used by tests/dist/test_fault_tolerance.py (a few faults, in CI), scripts/chaos.py
(``make chaos``, the whole matrix) and bench/bench_restart.py (time from fault to training).
"""
from __future__ import annotations

import json
import os
import random
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "train_ddp_resilient.py"
STEPS, EVERY, TIMEOUT_S = 50, 5, 8
PAUSE_POINT = "tensors-partial"


@dataclass
class Job:
    out: Path
    proc: subprocess.Popen
    log: Path
    nproc: int = 2
    started: float = field(default_factory=time.monotonic)
    events: List[dict] = field(default_factory=list)   # what the test did, when

    def note(self, what: str, **kw) -> None:
        self.events.append({"what": what, "t": time.monotonic() - self.started, "unix": time.time(), **kw})

    def wait(self, timeout: float = 240) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the job did not finish within {timeout:g} s; log:\n{self.text()[-4000:]}")

    def kill(self) -> None:
        """SIGKILL the launcher and every process under it at once (torchrun starts each
        worker in a session of its own, so killing the launcher's group alone orphans them)."""
        for p in [self.proc.pid, *descendants(self.proc.pid)]:
            try:
                os.kill(p, signal.SIGSTOP)  # freeze first: nothing moves while the rest is collected
            except ProcessLookupError:
                pass
        for p in [self.proc.pid, *descendants(self.proc.pid)]:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def descendants(root: int) -> List[int]:
    """Every living process below ``root`` (from /proc)."""
    children: Dict[int, List[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def env(backend: str = "cpu", **extra) -> Dict[str, str]:
    e = dict(os.environ, HAL_BACKEND=backend, OMP_NUM_THREADS="1", HAL_RUN_QUIET="1", PYTHONUNBUFFERED="1")
    for k in ("HAL_CHECKPOINT_CRASH_AT", "HAL_CHECKPOINT_PAUSE_AT"):
        e.pop(k, None)
    e.update(extra)
    return e


def launch(out: Path, *, via: str = "torchrun", backend: str = "cpu", steps: int = STEPS,
           every: int = EVERY, throttle: float = 0.05, extra=(), env_extra: Optional[dict] = None,
           log_name: str = "job.log", nproc: int = 2) -> Job:
    """Start the job in its own session (so the whole job can be killed at once)."""
    out.mkdir(parents=True, exist_ok=True)
    args = [str(SCRIPT), "--out", str(out), "--steps", str(steps), "--save-every", str(every),
            "--timeout", str(TIMEOUT_S), "--throttle", str(throttle), *extra]
    if via == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
               "--max-restarts", "3", "--monitor-interval", "0.2", *args]
    elif via == "hal-run":
        cmd = [sys.executable, "-m", "hal", "run", "--nproc-per-node", str(nproc), "--max-restarts", "3", *args]
    else:
        raise ValueError(via)
    log = out / log_name
    f = open(log, "ab")
    proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env(backend, **(env_extra or {})),
                            start_new_session=True, cwd=str(out))
    f.close()
    return Job(out, proc, log, nproc=nproc)


def records(out: Path, rank: int = 0) -> List[dict]:
    path = out / "metrics" / f"train.rank{rank}.jsonl"
    if not path.exists():
        path = out / "metrics" / "train.jsonl"  # a one-rank job
    if not path.exists():
        return []
    recs = []
    for line in path.read_text().splitlines():
        try:
            recs.append(json.loads(line))
        except ValueError:  # a line torn by SIGKILL
            pass
    return recs


def wait_step(job: Job, step: int, rank: int = 0, attempt: Optional[int] = None, timeout: float = 120) -> dict:
    """Block until ``rank`` logged ``step`` (in ``attempt``, when given); return that record."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for rec in reversed(records(job.out, rank)):
            a = rec["scalars"].get("attempt")
            if rec["step"] >= step and (attempt is None or a == attempt):
                return rec
        if job.proc.poll() is not None:
            raise AssertionError(f"the job ended (exit {job.proc.returncode}) before step {step}:\n"
                                 + job.text()[-4000:])
        time.sleep(0.02)
    job.kill()
    raise AssertionError(f"step {step} not reached within {timeout:g} s:\n" + job.text()[-4000:])


def pid(job: Job, rank: int) -> int:
    return int((job.out / "pids" / f"rank{rank}").read_text().split()[0])


# -- the faults -------------------------------------------------------------------------
def sigkill_rank(job: Job, rank: int, step: int) -> None:
    wait_step(job, step, rank)
    os.kill(pid(job, rank), signal.SIGKILL)
    job.note("SIGKILL", rank=rank, step=step)


def sigstop_rank(job: Job, rank: int, step: int) -> None:
    """Stop a rank (it holds its sockets open and answers nothing, as a hung rank does)."""
    wait_step(job, step, rank)
    os.kill(pid(job, rank), signal.SIGSTOP)
    job.note("SIGSTOP", rank=rank, step=step)


def kill_job_mid_save(out: Path, step: int, **launch_kw) -> Job:
    """Launch, arm the pause at ``step``, SIGKILL every process of the job while rank 0's
    tensor file is half-written; return the relaunched job."""
    marker = out / "paused"
    job = launch(out, env_extra={"HAL_CHECKPOINT_PAUSE_AT": f"{PAUSE_POINT}={marker}"}, **launch_kw)
    wait_step(job, step)
    Path(str(marker) + ".arm").touch()
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert job.proc.poll() is None, "the job ended before a save reached the pause:\n" + job.text()[-3000:]
        assert time.monotonic() < deadline, "no save reached the pause within 60 s"
        time.sleep(0.02)
    partial = [p for p in (out / "ckpt").glob("step-*/.*.tmp")]
    job.kill()
    last = max((r["step"] for r in records(out)), default=0)
    saving = max(int(p.parent.name.split("-")[1]) for p in partial) if partial else None
    job.note("SIGKILL job mid-save", partial_files=[str(p) for p in partial], saving=saving, last_step=last)
    assert partial, "the save was not half-written when the job was killed"
    relaunched = launch(out, **launch_kw)
    relaunched.nproc = job.nproc
    relaunched.events = job.events + [{"what": "relaunch"}]
    return relaunched


def fill_disk_during_save(job: Job, step: int, limit_bytes: int) -> None:
    """From ``step`` on, rank 0 cannot write a file past ``limit_bytes`` (a full disk to
    ``write``) until one save has failed; then the space comes back."""
    wait_step(job, step)
    target = pid(job, 0)
    soft, hard = resource.prlimit(target, resource.RLIMIT_FSIZE)
    resource.prlimit(target, resource.RLIMIT_FSIZE, (limit_bytes, hard))  # the soft limit: it can come back
    job.note("RLIMIT_FSIZE", rank=0, step=step, limit=limit_bytes)
    deadline = time.monotonic() + 120
    while not any(e.get("event") == "save_failed" for e in events(job.out)):
        assert job.proc.poll() is None, "the job ended while the disk was full:\n" + job.text()[-3000:]
        assert time.monotonic() < deadline, "no save failed within 120 s of the disk filling up"
        time.sleep(0.02)
    resource.prlimit(target, resource.RLIMIT_FSIZE, (soft, hard))
    job.note("space back")


def events(out: Path) -> List[dict]:
    path = out / "ckpt" / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# -- the verdict ------------------------------------------------------------------------
def curve(out: Path, rank: int = 0) -> Dict[int, tuple]:
    """{step: (loss, lr)}: the last record of each step wins (a resumed run redoes steps)."""
    return {r["step"]: (r["scalars"]["loss"], r["scalars"]["lr"]) for r in records(out, rank)}


def segments(out: Path, rank: int = 0) -> List[List[int]]:
    """The steps of each attempt, in the order they were logged."""
    segs: List[List[int]] = []
    attempt = None
    for rec in records(out, rank):
        a = rec["scalars"].get("attempt")
        if not segs or rec["step"] <= segs[-1][-1] or a != attempt:
            segs.append([])
        segs[-1].append(rec["step"])
        attempt = a
    return segs


def check(job: Job, ref: Path, every: int = EVERY, restarts: int = 1) -> dict:
    """Assert everything the fault must not change; return the numbers measured.

    Work lost per restart must be at most one checkpoint interval -- plus, when the job was
    killed while an asynchronous save was being written, the steps trained during that
    write (that save never completed, so the one before it is the newest).
    """
    import hal.checkpoint as ckpt

    text = job.text()
    assert job.proc.returncode == 0, f"the job failed (exit {job.proc.returncode}):\n{text[-5000:]}"
    assert (job.out / "final.safetensors").read_bytes() == (ref / "final.safetensors").read_bytes(), \
        "final parameters differ from the uninterrupted run"
    for rank in range(job.nproc):
        assert curve(job.out, rank) == curve(ref, rank), f"rank {rank}'s loss curve differs after resume"
    segs = segments(job.out)
    assert len(segs) >= restarts + 1, f"expected {restarts} restart(s), the metrics show {len(segs) - 1}"
    slack = max((e["last_step"] - e["saving"] for e in job.events if e.get("saving") is not None), default=0)
    lost = []
    for prev, nxt in zip(segs, segs[1:]):
        resumed_at = nxt[0] - 1
        lost.append(prev[-1] - resumed_at)
        assert 0 <= prev[-1] - resumed_at <= every + slack, \
            (f"resumed at step {resumed_at} after reaching step {prev[-1]}: more than one interval ({every})"
             + (f" + the {slack} step(s) trained during the interrupted save" if slack else "") + " lost")
    infos = ckpt.scan(job.out / "ckpt", verify=True)
    assert infos and all(i.complete for i in infos), \
        "a checkpoint folder is left incomplete: " + "; ".join(f"{i.path.name}: {i.reason}" for i in infos if not i.complete)
    debris = [p.name for p in (job.out / "ckpt").rglob(".*")]
    assert not debris, f"temp or trash files left in the checkpoint folder: {debris}"
    resumed = [l for l in text.splitlines() if "hal.checkpoint:" in l and "resumed at step" in l]
    assert len(resumed) >= restarts, f"{restarts} restart(s) but {len(resumed)} 'resumed at step' line(s):\n{text[-3000:]}"
    return {"lost_steps": lost, "restart_lines": [l for l in text.splitlines() if "hal.checkpoint: re" in l]}


def recovery_seconds(out: Path, fault_unix: Optional[float] = None) -> List[float]:
    """Seconds from each fault to the first step trained after the resume.

    The fault time is ``fault_unix`` when the harness sent it (signals), else the time the
    last step before the restart was logged (faults raised inside the job)."""
    recs = records(out)
    out_s, attempt, prev = [], None, None
    for rec in recs:
        a = rec["scalars"].get("attempt")
        if prev is not None and (rec["step"] <= prev["step"] or a != attempt):
            start = fault_unix if fault_unix is not None and not out_s else prev["time_unix"]
            out_s.append(rec["time_unix"] - start)
        prev, attempt = rec, a
    return out_s


def cold_start_seconds(out: Path, launched_unix: float) -> float:
    """Seconds from launching the job to its first step (the baseline of a restart)."""
    return records(out)[0]["time_unix"] - launched_unix


def random_step(rng: random.Random, lo: int = EVERY + 2, hi: int = STEPS - EVERY - 2) -> int:
    return rng.randint(lo, hi)
