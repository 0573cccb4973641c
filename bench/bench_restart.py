"""Time from a fault to resumed training, 2 ranks under torchrun --max-restarts 3.

    python bench/bench_restart.py                 3 repeats of each fault
    python bench/bench_restart.py --repeats 5 --timeout 8

The job is examples/train_ddp_resilient.py on the CPU (gloo), checkpointing every 5 steps.
Faults: SIGKILL of rank 1; rank 0 raises; rank 1 hangs (the other rank's all-reduce times
out after --timeout s); rank 1 stopped with SIGSTOP (it cannot even be terminated: torchrun
waits 30 s before its SIGKILL).  Recovery = seconds from the fault to the first step
trained after the resume.  Baseline, measured in the same run, interleaved repeat by repeat:
the cold start of the same job (launch to its first step), which every restart pays again
(new worker processes, import torch, rendezvous, DataLoader workers) plus the resume.
Prints median (min-max) per fault and its ratio to the cold start's median.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "dist"))
import fault_injection as fi  # noqa: E402


def _fault(kind, out, rng, timeout):
    step = rng.randint(fi.EVERY + 2, fi.STEPS - fi.EVERY - 2)
    extra = ["--timeout", str(timeout)]
    if kind == "raise":
        job = fi.launch(out, extra=[*extra, "--raise-at", f"0:{step}"])
    elif kind == "hang":
        job = fi.launch(out, extra=[*extra, "--hang-at", f"1:{step}"])
    else:
        job = fi.launch(out, extra=extra)
        (fi.sigkill_rank if kind == "SIGKILL" else fi.sigstop_rank)(job, 1, step)
    assert job.wait(timeout=300) == 0, job.text()[-3000:]
    sent = [e["unix"] for e in job.events if e["what"] in ("SIGKILL", "SIGSTOP")]
    return fi.recovery_seconds(out, sent[0] if sent else None)[0]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=float, default=fi.TIMEOUT_S,
                   help=f"the job's process-group timeout in seconds (default {fi.TIMEOUT_S})")
    p.add_argument("--faults", default="SIGKILL,raise,hang,SIGSTOP")
    args = p.parse_args(argv)
    kinds = args.faults.split(",")
    rng = random.Random(0)
    res = {k: [] for k in ["cold start", *kinds]}
    with tempfile.TemporaryDirectory(prefix="hal-bench-restart-") as tmp:
        for r in range(args.repeats):
            out = Path(tmp) / f"cold-{r}"
            t0 = time.time()
            job = fi.launch(out, extra=["--timeout", str(args.timeout)])
            assert job.wait(timeout=300) == 0, job.text()[-3000:]
            res["cold start"].append(fi.cold_start_seconds(out, t0))
            for kind in kinds:
                res[kind].append(_fault(kind, Path(tmp) / f"{kind}-{r}", rng, args.timeout))
            print(f"repeat {r + 1}/{args.repeats}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in res.items()),
                  flush=True)
    base = statistics.median(res["cold start"])
    print(f"\n2 ranks, gloo on the CPU, process-group timeout {args.timeout:g} s, {args.repeats} repeats")
    print(f"{'':12} {'median s':>9} {'min-max s':>12} {'vs cold start':>14}")
    for k, v in res.items():
        print(f"{k:12} {statistics.median(v):9.1f} {min(v):5.1f}-{max(v):<6.1f} {statistics.median(v) / base:13.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
