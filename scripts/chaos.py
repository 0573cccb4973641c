"""The whole fault matrix of a 2-rank job under torchrun --max-restarts 3 (``make chaos``).

    python scripts/chaos.py                      every fault, CPU (torchrun) and emulator (hal run), 2 seeds
    python scripts/chaos.py --seeds 5 --only cpu
    python scripts/chaos.py --json chaos.json    also write the results as JSON

For each fault and seed: the job must finish with final weights bitwise equal to the
uninterrupted run on the same backend, the same loss curve, at most one checkpoint interval
of work lost per restart (plus the steps trained during an interrupted async save), no
incomplete checkpoint left, and one restart line per event.  Prints one row per run: the
fault step, the seconds from fault to the first step trained after the resume, the steps
lost, the verdict.  Exit status 1 when any run fails.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "dist"))
import fault_injection as fi  # noqa: E402


def sigkill(rank):
    def run(out, rng, **kw):
        job = fi.launch(out, **kw)
        step = fi.random_step(rng)
        fi.sigkill_rank(job, rank, step)
        return job, step, 1
    run.__name__ = f"SIGKILL rank {rank}"
    return run


def sigstop(out, rng, **kw):
    job = fi.launch(out, **kw)
    step = fi.random_step(rng)
    fi.sigstop_rank(job, 1, step)
    return job, step, 1


def hang(out, rng, **kw):
    step = fi.random_step(rng)
    job = fi.launch(out, extra=["--hang-at", f"1:{step}"], **kw)
    return job, step, 1


def raise_(out, rng, **kw):
    step = fi.random_step(rng)
    job = fi.launch(out, extra=["--raise-at", f"0:{step}"], **kw)
    return job, step, 1


def mid_save(out, rng, **kw):
    step = fi.random_step(rng)
    return fi.kill_job_mid_save(out, step, **kw), step, 1


def disk_full(out, rng, **kw):
    job = fi.launch(out, **kw)
    step = fi.random_step(rng)
    fi.fill_disk_during_save(job, step, 50_000)
    return job, step, 0


def two_faults(out, rng, **kw):
    first = rng.randint(fi.EVERY + 2, 20)
    second = rng.randint(first + fi.EVERY + 2, fi.STEPS - 3)
    job = fi.launch(out, extra=["--raise-at", f"0:{second}:1"], **kw)
    fi.sigkill_rank(job, 1, first)
    return job, f"{first}+{second}", 2


sigstop.__name__, hang.__name__, raise_.__name__ = "SIGSTOP rank 1", "rank 1 hangs", "rank 0 raises"
mid_save.__name__, disk_full.__name__ = "SIGKILL job mid-save", "disk full during a save"
two_faults.__name__ = "SIGKILL rank 1, then rank 0 raises"

MATRIX = {
    "cpu": dict(via="torchrun", backend="cpu",
                faults=[sigkill(0), sigkill(1), sigstop, hang, raise_, mid_save, disk_full, two_faults]),
    "emu": dict(via="hal-run", backend="emu", faults=[sigkill(1), hang, raise_, mid_save]),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--only", choices=sorted(MATRIX), action="append")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON")
    p.add_argument("--keep", action="store_true", help="keep the run folders (printed)")
    args = p.parse_args(argv)
    rows, failed = [], 0
    root = Path(tempfile.mkdtemp(prefix="hal-chaos-"))
    print(f"{'backend':8} {'fault':36} {'seed':>4} {'at step':>8} {'recovery s':>11} {'lost':>6}  verdict")
    for name in args.only or sorted(MATRIX):
        cfg = MATRIX[name]
        kw = dict(via=cfg["via"], backend=cfg["backend"])
        ref = root / f"{name}-uninterrupted"
        job = fi.launch(ref, **kw)
        t0 = time.time()
        if job.wait() != 0:
            print(f"{name}: the uninterrupted run failed:\n{job.text()[-3000:]}")
            return 1
        cold = fi.cold_start_seconds(ref, t0)
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for fault in cfg["faults"]:
                out = root / f"{name}-{fault.__name__.replace(' ', '_')}-{seed}"
                rng = random.Random(f"{seed}-{fault.__name__}")
                row = {"backend": name, "fault": fault.__name__, "seed": seed, "cold_start_s": cold}
                try:
                    job, step, restarts = fault(out, rng, **kw)
                    row["step"] = step
                    job.wait(timeout=300)
                    sent = [e["unix"] for e in job.events if e["what"] in ("SIGKILL", "SIGSTOP")]
                    measured = fi.check(job, ref, restarts=restarts)
                    row.update(verdict="ok", lost_steps=measured["lost_steps"],
                               recovery_s=fi.recovery_seconds(out, sent[0] if sent else None),
                               restart_lines=measured["restart_lines"])
                except AssertionError as exc:
                    failed += 1
                    row.update(verdict="FAILED", error=str(exc)[:4000])
                except Exception:
                    failed += 1
                    row.update(verdict="ERROR", error=traceback.format_exc()[-4000:])
                rows.append(row)
                rec = row.get("recovery_s") or []
                print(f"{name:8} {fault.__name__:36} {seed:>4} {str(row.get('step', '-')):>8} "
                      f"{' '.join(f'{r:.1f}' for r in rec) or '-':>11} "
                      f"{' '.join(map(str, row.get('lost_steps', []))) or '-':>6}  {row['verdict']}", flush=True)
                if row["verdict"] != "ok":
                    print("    " + row["error"][-1500:].replace("\n", "\n    "))
    rec = [r for row in rows for r in row.get("recovery_s", [])]
    if rec:
        print(f"\nrecovery (fault -> first step after the resume): median {statistics.median(rec):.1f} s, "
              f"{min(rec):.1f}-{max(rec):.1f} s over {len(rec)} restarts; cold start of the same job "
              + ", ".join(f"{r['backend']} {r['cold_start_s']:.1f} s" for r in {row['backend']: row for row in rows}.values()))
    print(f"{len(rows) - failed} of {len(rows)} runs ok" + ("" if not args.keep else f"; folders under {root}"))
    if args.json:
        Path(args.json).write_text(json.dumps({"schema": "hal.chaos/1", "rows": rows}, indent=1) + "\n")
    if not args.keep:
        import shutil
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
