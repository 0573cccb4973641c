"""One ``hal run`` of the user's script on one target, with hal's metrics attached from outside, and what it
measured: the loss and gradient norm per step, throughput, memory, communication, the run report."""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from hal.metrics import percentile
from hal_accept.options import AcceptOptions, Target


@dataclass
class Run:
    """A finished run: its command, exit code, ``hal run`` report and per-rank metric records."""

    target: Target
    label: str
    command: List[str]
    env: Dict[str, str]
    exit_code: int
    wall_s: float
    report: Optional[dict]
    records: List[List[dict]]       # per rank, in step order
    output_tail: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and bool(self.records) and bool(self.records[0])

    def steps(self) -> List[int]:
        return [r["step"] for r in self.records[0]] if self.records else []

    def per_step(self, key: str, scalar: bool = True) -> List[Optional[float]]:
        """The mean over ranks of ``scalars[key]`` (or a record field) per step."""
        out = []
        for i in range(len(self.steps())):
            vals = []
            for rank in self.records:
                if i < len(rank):
                    v = rank[i]["scalars"].get(key) if scalar else rank[i].get(key)
                    if v is not None:
                        vals.append(v)
            out.append(sum(vals) / len(vals) if vals else None)
        return out

    def losses(self) -> List[Optional[float]]:
        return self.per_step("loss")

    def throughput(self) -> dict:
        """samples/s, tokens/s and steps/s over the steps after the first (warm-up): p50, p99 (the job's:
        ranks summed), peak memory, the exposed communication share, the step a slow stretch began, the
        floating-point operations of a step (the second's) and the FLOP/s they make at the p50 step time, the
        devices' name and number (one per host and device the ranks' records name) and the dtype the counted
        step's matrix products ran in."""
        from hal.metrics import find_drops

        rank0 = self.records[0] if self.records else []
        after = rank0[1:]
        out: dict = {"steps_measured": len(after)}
        for key in ("samples_per_s", "tokens_per_s"):
            per_step = [sum(rank[i].get(key) or 0.0 for rank in self.records if i < len(rank))
                        for i in range(1, len(rank0))]
            per_step = [v for v in per_step if v]
            out[key] = ({"p50": statistics.median(per_step), "p99": percentile(per_step, 99)}
                        if per_step else None)
        times = [r["step_time_s"] for r in after if r.get("step_time_s")]
        out["step_time_s"] = {"p50": statistics.median(times), "p99": percentile(times, 99)} if times else None
        out["steps_per_s"] = 1.0 / out["step_time_s"]["p50"] if times else None
        peaks = [r.get("mem_peak_bytes") for rank in self.records for r in rank if r.get("mem_peak_bytes")]
        out["mem_peak_bytes"] = max(peaks) if peaks else None
        comm = [(r.get("comm_exposed_s") or 0.0, r.get("step_time_s") or 0.0) for r in after
                if r.get("comm_exposed_s") is not None]
        out["comm_exposed_share"] = (sum(c for c, _ in comm) / sum(t for _, t in comm)
                                     if comm and sum(t for _, t in comm) else None)
        flops = [r["scalars"].get("flops") for rank in self.records for r in rank if r["scalars"].get("flops")]
        out["flops_per_step"] = sum(flops) if flops else None  # every rank's, as torch's FlopCounterMode counts
        out["achieved_flops_per_s"] = (out["flops_per_step"] / out["step_time_s"]["p50"]
                                       if flops and out["step_time_s"] else None)
        # what names the devices' peak (MFU): their name, how many, the dtype the counted step's products ran in
        firsts = [rank[0] for rank in self.records if rank]
        out["device_name"] = next((r["device_name"] for r in firsts if r.get("device_name")), None)
        out["devices"] = len({(r.get("host"), r.get("device")) for r in firsts}) or None
        out["compute_dtype"] = next((r["compute_dtype"] for rank in self.records for r in rank
                                     if r.get("compute_dtype")), None)
        drops = find_drops(rank0, "samples_per_s" if out["samples_per_s"] else "step_time_s", min_history=3)
        out["first_slow_step"] = drops[0]["start_step"] if drops else None
        return out

    def summary(self) -> dict:
        """The run as the report shows it (JSON-ready)."""
        return {"target": self.target.name, "label": self.label, "command": " ".join(self.command),
                "env": self.env, "exit_code": self.exit_code, "wall_s": round(self.wall_s, 3),
                "steps": self.steps(), "loss": self.losses(), "grad_norm": self.per_step("grad_norm"),
                "throughput": self.throughput() if self.ok else None,
                "output_tail": self.output_tail if not self.ok else ""}


def read_records(folder: Path, by_step: bool = True) -> List[List[dict]]:
    """Each rank's metric records under ``folder`` (rank 0 first), in step order, or as written (a resumed
    run's repeated steps after the first attempt's)."""
    files = sorted(folder.glob("run*.jsonl"), key=lambda p: (len(p.name), p.name))
    out = []
    for f in files:
        rows = [json.loads(line) for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]
        out.append(sorted(rows, key=lambda r: r["step"]) if by_step else rows)
    return out


#: what hal accept sets for each run itself: a value of these left in the caller's environment is not passed on
_OWN_ENV = ("HAL_BACKEND", "HAL_EMU_OPS", "HAL_METRICS", "HAL_FALLBACK_HOST", "HAL_CHECKPOINT")


@dataclass
class Called:
    """One ``python -m hal ...`` process hal accept ran: its command, the environment it set, the outcome."""

    command: List[str]
    env: Dict[str, str]
    exit_code: int
    stdout: str
    output_tail: str
    wall_s: float


def call_hal(options: AcceptOptions, target: Target, args: Sequence[str],
             env_set: Optional[Dict[str, str]] = None) -> Called:
    """``python -m hal ARGS`` on ``target``: the caller's environment without hal accept's own variables, then
    ``options.env``, the target's and ``env_set``; stopped after ``options.timeout_s`` (exit code 124)."""
    env_set = {**dict(options.env), **target.env(), **(env_set or {})}
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OWN_ENV)}
    env.update(env_set)
    cmd = [sys.executable, "-m", "hal", *args]
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=options.timeout_s)
        code, out, tail = p.returncode, p.stdout or "", (p.stderr or "")[-3000:]
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        code, out, tail = 124, "", f"stopped after {options.timeout_s:.0f} s (timeout_s); " + err[-2000:]
    return Called(cmd, env_set, code, out, tail, time.monotonic() - start)


def hal_run(options: AcceptOptions, target: Target, label: str, host_ops: Sequence[str] = (), *,
            checkpoint: Optional[Path] = None, checkpoint_every: Optional[int] = None,
            kill_at: Optional[int] = None) -> Run:
    """``hal run`` of the script on ``target`` (its files under ``workdir/label``), ended after
    ``options.steps`` optimizer steps; ``host_ops`` run on the host (``HAL_FALLBACK_HOST``).

    ``hal run --checkpoint`` is always given: by default a fresh ``workdir/label/checkpoints`` that nothing is
    saved into, where a script's own ``hal.checkpoint.Checkpointer`` saves instead of its folder (each run
    starts from scratch, not from the checkpoints an earlier run left).  With ``checkpoint``: checkpointed
    from outside into that folder every ``checkpoint_every`` steps and resumed from its newest checkpoint
    at the start; with ``kill_at`` too, a rehearsed failure: torchrun (at least one process, one restart)
    restarts the group that rank 0's death at the end of step ``kill_at`` stopped."""
    folder = Path(options.workdir) / label
    folder.mkdir(parents=True, exist_ok=True)
    if checkpoint is None:
        checkpoint, checkpoint_every = folder / "checkpoints", options.steps + 1
        shutil.rmtree(checkpoint, ignore_errors=True)
    for old in folder.glob("run*.jsonl"):
        old.unlink()
    report = folder / "report.json"
    if report.exists():
        report.unlink()
    args = ["run", "--quiet", "--report", str(report), "--metrics", str(folder)]
    nproc = max(options.nproc_per_node, 1) if kill_at else options.nproc_per_node
    if nproc:
        args += ["--nproc-per-node", str(nproc)]
    env_set = {"HAL_METRICS_MAX_STEPS": str(options.steps), "HAL_METRICS_GRAD_NORM": "1", "HAL_METRICS_FLOPS": "1"}
    if host_ops:
        env_set["HAL_FALLBACK_HOST"] = ",".join(host_ops)
    args += ["--checkpoint", str(checkpoint)]
    if checkpoint_every:
        args += ["--checkpoint-every", str(checkpoint_every)]
    if kill_at:
        from hal.checkpoint import KILL_AT_ENV

        args += ["--max-restarts", "1"]
        env_set[KILL_AT_ENV] = str(kill_at)
    c = call_hal(options, target, [*args, options.script, *options.script_args], env_set)
    rep = json.loads(report.read_text(encoding="utf-8")) if report.exists() else None
    return Run(target, label, c.command, c.env, c.exit_code, c.wall_s, rep, read_records(folder), c.output_tail)
